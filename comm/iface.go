package comm

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Choosing the network interface peers reach a rank by. By default a
// rank publishes the address of the interface its connection to the
// rendezvous store left by, the one that routes to MASTER_ADDR. A host
// with several networks (a slow management Ethernet, a fast fabric's IP
// interface, container bridges) may need another: GORUN_SOCKET_IFNAME
// names it, in the syntax NCCL_SOCKET_IFNAME uses, and those libraries'
// own variables are read where it is not set, so that a job script
// written for PyTorch picks the same interface under gorun.

// netInterface is what the choice needs of one of the host's interfaces.
type netInterface struct {
	name  string
	up    bool
	addrs []netip.Addr
}

// hostInterfaces lists this host's interfaces in the system's order.
func hostInterfaces() ([]netInterface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []netInterface
	for _, i := range ifs {
		n := netInterface{name: i.Name, up: i.Flags&net.FlagUp != 0}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("interface %s: %w", i.Name, err)
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				n.addrs = append(n.addrs, p.Addr())
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// interfaceAddr returns the address of the first interface spec matches
// that is up and has an address (bestAddr). spec is written as
// NCCL_SOCKET_IFNAME's value: name prefixes separated by commas
// ("eth,ib": any interface whose name begins so), "^" before them to
// exclude those instead ("^docker,lo"), "=" for exact names
// ("=eth0,eth1"). variable names where spec comes from, for errors.
func interfaceAddr(variable, spec string, ifs []netInterface) (string, error) {
	exclude, exact := false, false
	list := spec
	if rest, ok := strings.CutPrefix(list, "^"); ok {
		exclude, list = true, rest
	}
	if rest, ok := strings.CutPrefix(list, "="); ok {
		exact, list = true, rest
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("%s=%q names no interface: want names or prefixes separated by commas (eth,ib), ^ to exclude them (^docker,lo), = for exact names (=eth0)", variable, spec)
	}
	matches := func(name string) bool {
		for _, n := range names {
			if name == n || !exact && strings.HasPrefix(name, n) {
				return !exclude
			}
		}
		return exclude
	}
	for _, i := range ifs {
		if !i.up || !matches(i.name) {
			continue
		}
		if a, ok := bestAddr(i.addrs); ok {
			return a.String(), nil
		}
	}
	var here []string
	for _, i := range ifs {
		switch {
		case !i.up:
			here = append(here, i.name+" (down)")
		case len(i.addrs) == 0:
			here = append(here, i.name+" (no address)")
		default:
			a, _ := bestAddr(i.addrs)
			here = append(here, i.name+" "+a.String())
		}
	}
	return "", fmt.Errorf("%s=%s: no interface that is up and has an address matches (this host has %s)", variable, spec, strings.Join(here, ", "))
}

// bestAddr is the address of an interface peers are likeliest to reach:
// IPv4 before IPv6; never a link-local one (usable only with a zone).
func bestAddr(addrs []netip.Addr) (netip.Addr, bool) {
	rank := func(a netip.Addr) int {
		switch {
		case a.IsLinkLocalUnicast():
			return 2
		case a.Is4() || a.Is4In6():
			return 0
		}
		return 1
	}
	var best netip.Addr
	found := false
	for _, a := range addrs {
		if !found || rank(a) < rank(best) {
			best, found = a.Unmap(), true
		}
	}
	return best, found && !best.IsLinkLocalUnicast()
}

// listenHost is the address this rank publishes for its peers:
// GORUN_ADDR (an address, a host name, or an interface's name), else the
// address of the interface GORUN_SOCKET_IFNAME (or NCCL's or Gloo's
// variable) names, else viaStore, the address its connection to the
// rendezvous store left by — unless that is a loopback address while the
// launcher says the job spans hosts (fewer ranks here than in all): the
// master's own name may resolve to 127.0.1.1 on its node (Debian's hosts
// file), and the other nodes cannot reach that; the first interface then
// that is up and not a loopback or a container bridge (outwardAddr). list
// lists the host's interfaces.
func listenHost(s *Settings, viaStore string, list func() ([]netInterface, error)) (string, error) {
	switch {
	case s.Addr != "":
		if _, err := netip.ParseAddr(s.Addr); err == nil {
			return s.Addr, nil
		}
		ifs, err := list()
		if err != nil {
			return s.Addr, nil // (a host name, as before interfaces were asked)
		}
		for _, i := range ifs {
			if i.name != s.Addr {
				continue
			}
			a, ok := bestAddr(i.addrs)
			switch {
			case !i.up:
				return "", fmt.Errorf("GORUN_ADDR=%s: the interface is down", s.Addr)
			case !ok:
				return "", fmt.Errorf("GORUN_ADDR=%s: the interface has no address peers can reach (IPv4, or IPv6 not link-local)", s.Addr)
			}
			return a.String(), nil
		}
		return s.Addr, nil // a host name
	case s.IfName != "":
		ifs, err := list()
		if err != nil {
			return "", fmt.Errorf("%s: listing the network interfaces: %w", s.IfNameVar, err)
		}
		return interfaceAddr(s.IfNameVar, s.IfName, ifs)
	}
	if a, err := netip.ParseAddr(viaStore); err == nil && a.IsLoopback() && s.LocalSize < s.Size {
		if ifs, err := list(); err == nil {
			if out, ok := outwardAddr(ifs); ok {
				return out, nil
			}
		}
	}
	return viaStore, nil
}

// outwardAddr is the address of the first interface that is up, not a
// container bridge (docker*) and has an address peers can reach that is
// not a loopback one (bestAddr).
func outwardAddr(ifs []netInterface) (string, bool) {
	for _, i := range ifs {
		if !i.up || strings.HasPrefix(i.name, "docker") {
			continue
		}
		if a, ok := bestAddr(i.addrs); ok && !a.IsLoopback() {
			return a.String(), true
		}
	}
	return "", false
}
