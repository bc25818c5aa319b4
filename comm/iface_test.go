package comm

import (
	"cmp"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// testInterfaces is a host with a loopback, a container bridge that is
// down, an Ethernet with a link-local and a global address, one without
// an address, a fabric's IP interface with IPv6 only, and a veth with a
// link-local address only.
func testInterfaces() []netInterface {
	a := netip.MustParseAddr
	return []netInterface{
		{name: "lo", up: true, addrs: []netip.Addr{a("127.0.0.1"), a("::1")}},
		{name: "docker0", up: false, addrs: []netip.Addr{a("172.17.0.1")}},
		{name: "eth0", up: true, addrs: []netip.Addr{a("fe80::1"), a("10.0.0.2")}},
		{name: "eth1", up: true},
		{name: "ib0", up: true, addrs: []netip.Addr{a("fe80::2"), a("2001:db8::5")}},
		{name: "veth7", up: true, addrs: []netip.Addr{a("fe80::3")}},
	}
}

// TestInterfaceAddr: NCCL_SOCKET_IFNAME's syntax — prefixes, ^ to
// exclude, = for exact names — picks the first interface that is up and
// has an address peers can reach, IPv4 first; a spec nothing matches is
// an error listing the host's interfaces.
func TestInterfaceAddr(t *testing.T) {
	const here = "(this host has lo 127.0.0.1, docker0 (down), eth0 10.0.0.2, eth1 (no address), ib0 2001:db8::5, veth7 fe80::3)"
	for _, c := range []struct {
		spec, want, err string
	}{
		{spec: "eth", want: "10.0.0.2"},
		{spec: "ib", want: "2001:db8::5"},
		{spec: "^lo,docker", want: "10.0.0.2"},
		{spec: "^lo,docker,eth", want: "2001:db8::5"},
		{spec: " ib0 , eth0", want: "10.0.0.2"},
		{spec: "=lo", want: "127.0.0.1"},
		{spec: "=eth", err: "NCCL_SOCKET_IFNAME==eth: no interface that is up and has an address matches " + here},
		{spec: "eth1", err: "no interface that is up and has an address matches"},
		{spec: "docker", err: "no interface that is up and has an address matches"},
		{spec: "veth", err: "no interface that is up and has an address matches"},
		{spec: "^", err: `NCCL_SOCKET_IFNAME="^" names no interface`},
		{spec: ",", err: `NCCL_SOCKET_IFNAME="," names no interface`},
	} {
		got, err := interfaceAddr("NCCL_SOCKET_IFNAME", c.spec, testInterfaces())
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %q, %v; want an error saying %q", c.spec, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.spec, got, err, c.want)
		}
	}
}

// TestListenHost: GORUN_ADDR (an address, a host name, an interface's
// name) wins; else the interface the variables name; else the address the
// connection to the store left by, unless that is a loopback one in a job
// that spans hosts: then the first interface out (not lo, not docker0).
func TestListenHost(t *testing.T) {
	list := func() ([]netInterface, error) { return testInterfaces(), nil }
	for _, c := range []struct {
		s              Settings
		via, want, err string
	}{
		{s: Settings{}, want: "192.0.2.9"},
		{s: Settings{Size: 4, LocalSize: 4}, via: "127.0.0.1", want: "127.0.0.1"},
		{s: Settings{Size: 4, LocalSize: 2}, via: "127.0.1.1", want: "10.0.0.2"},
		{s: Settings{Size: 4, LocalSize: 2}, via: "::1", want: "10.0.0.2"},
		{s: Settings{Size: 4, LocalSize: 2}, via: "10.9.9.9", want: "10.9.9.9"},
		{s: Settings{Size: 4, LocalSize: 2, IfName: "=lo", IfNameVar: "GORUN_SOCKET_IFNAME"}, via: "127.0.1.1", want: "127.0.0.1"},
		{s: Settings{Addr: "10.1.1.1", IfName: "eth", IfNameVar: "GORUN_SOCKET_IFNAME"}, want: "10.1.1.1"},
		{s: Settings{Addr: "node7"}, want: "node7"},
		{s: Settings{Addr: "eth0"}, want: "10.0.0.2"},
		{s: Settings{Addr: "ib0"}, want: "2001:db8::5"},
		{s: Settings{Addr: "docker0"}, err: "GORUN_ADDR=docker0: the interface is down"},
		{s: Settings{Addr: "eth1"}, err: "GORUN_ADDR=eth1: the interface has no address peers can reach"},
		{s: Settings{IfName: "ib", IfNameVar: "GLOO_SOCKET_IFNAME"}, want: "2001:db8::5"},
		{s: Settings{IfName: "wlan", IfNameVar: "GORUN_SOCKET_IFNAME"}, err: "GORUN_SOCKET_IFNAME=wlan: no interface"},
	} {
		via := cmp.Or(c.via, "192.0.2.9")
		got, err := listenHost(&c.s, via, list)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %q, %v; want an error saying %q", c.s, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.s, got, err, c.want)
		}
	}
	broken := func() ([]netInterface, error) { return nil, errors.New("no netlink") }
	if _, err := listenHost(&Settings{IfName: "eth", IfNameVar: "NCCL_SOCKET_IFNAME"}, "192.0.2.9", broken); err == nil || !strings.Contains(err.Error(), "NCCL_SOCKET_IFNAME: listing the network interfaces: no netlink") {
		t.Errorf("interfaces not listed: %v", err)
	}
}
