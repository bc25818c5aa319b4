// Package netcluster makes a cluster of "hosts" on one Linux machine:
// network namespaces, each with its own address, joined by a bridge, each
// host's link shaped with tc (rate, delay, loss) as a real network would
// be — or, where the kernel has no tc netem, joined by a link emulator in
// this process that gives the links their rate, delay and loss. gorun
// treats each namespace as a separate host (no shared memory between
// them), so jobs across them exercise the multi-host paths — rendezvous,
// TCP between hosts, shared memory within one — and their speed on a link
// of a chosen kind. It needs root and iproute2 (and /dev/net/tun for the
// emulator).
package netcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Config describes a cluster.
type Config struct {
	// Hosts is the number of network namespaces (at least 1, at most 200).
	Hosts int
	// Rate limits each host's outgoing link ("10gbit", "1gbit",
	// "100mbit"; "" for none) with tc's token bucket (tbf); Delay adds
	// one-way latency and Loss drops this fraction of packets (0 to 1)
	// with tc's netem, the rate then set by netem too. Where the kernel
	// has no netem (CONFIG_NET_SCH_NETEM; the development VM's has not),
	// a delay or loss is emulated in user space (Link).
	Rate  string
	Delay time.Duration
	Loss  float64
	// Link chooses how links are made: "tc" (veths on a bridge, shaped
	// by tc; a delay or loss needs netem), "user" (TUN devices and the
	// link emulator of this process, emulator.go, for rate, delay and
	// loss alike), or "" for tc where it can do what is asked, else user.
	Link string
	// MTU is the emulated links' MTU (default 9000, jumbo frames as on
	// clusters' Ethernet: the emulator's cost is per packet).
	MTU int
	// Name prefixes the namespaces and links (short: interface names have
	// at most 15 characters); default "gnc" and this process's id.
	Name string
	// Subnet is the first three octets of the hosts' /24 (default
	// "10.79.N" with N from the process id); host i is Subnet.(i+1).
	Subnet string
}

// Cluster is a running cluster; Close removes it.
type Cluster struct {
	cfg    Config
	bridge string
	emu    *emulator // links emulated in user space; nil for tc's
	// Names are the namespaces, Addrs their addresses, host by host.
	Names, Addrs []string
}

// ErrNoNamespaces reports a machine where the cluster cannot be made (no
// root, no iproute2, namespaces not allowed).
var ErrNoNamespaces = errors.New("netcluster: cannot make network namespaces here")

// Start makes the cluster: the namespaces, a veth pair from each to a
// bridge in this namespace, addresses, shaping. Leftovers of an earlier
// cluster of the same name (a killed run) are removed first; on failure
// everything made so far is removed.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Hosts < 1 || cfg.Hosts > 200 {
		return nil, fmt.Errorf("netcluster: %d hosts: want 1 to 200", cfg.Hosts)
	}
	if cfg.Loss < 0 || cfg.Loss >= 1 || cfg.Delay < 0 {
		return nil, fmt.Errorf("netcluster: loss %v, delay %v: want a loss in [0, 1) and a delay of 0 or more", cfg.Loss, cfg.Delay)
	}
	switch cfg.Link {
	case "", "tc", "user":
	default:
		return nil, fmt.Errorf("netcluster: link %q: want tc, user or \"\" (tc where it can)", cfg.Link)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 9000
	}
	if cfg.MTU < 576 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("netcluster: MTU %d: want 576 to 65535", cfg.MTU)
	}
	if os.Getuid() != 0 {
		return nil, fmt.Errorf("%w: not root", ErrNoNamespaces)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: ip (iproute2) is not installed", ErrNoNamespaces)
	}
	id := os.Getpid() % 250
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("gnc%d", id)
	}
	if cfg.Subnet == "" {
		cfg.Subnet = fmt.Sprintf("10.79.%d", id)
	}
	if len(cfg.Name)+5 > 15 {
		return nil, fmt.Errorf("netcluster: name %q is too long for interface names (at most 10 characters)", cfg.Name)
	}
	c := &Cluster{cfg: cfg, bridge: cfg.Name + "br"}
	if _, err := c.qdisc(); err != nil {
		return nil, err
	}
	for i := range cfg.Hosts {
		c.Names = append(c.Names, fmt.Sprintf("%s-h%d", cfg.Name, i))
		c.Addrs = append(c.Addrs, fmt.Sprintf("%s.%d", cfg.Subnet, i+1))
	}
	c.remove() // leftovers of a killed run
	defer func() {
		if err != nil {
			c.remove()
		}
	}()
	if err := c.ip(ctx, "netns", "add", c.Names[0]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoNamespaces, err)
	}
	if c.cfg.Link == "" && (cfg.Delay > 0 || cfg.Loss > 0) && !hasNetem(ctx, c.Names[0]) {
		c.cfg.Link = "user"
	}
	if c.cfg.Link == "user" {
		for _, n := range c.Names[1:] {
			if err := c.ip(ctx, "netns", "add", n); err != nil {
				return nil, err
			}
		}
		if err := c.startEmulator(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	steps := [][]string{{"link", "add", c.bridge, "type", "bridge"}, {"link", "set", c.bridge, "up"}}
	for i, n := range c.Names {
		host, peer := c.veth(i)
		if i > 0 {
			steps = append(steps, []string{"netns", "add", n})
		}
		steps = append(steps,
			[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "master", c.bridge},
			[]string{"link", "set", peer, "up"},
			[]string{"link", "set", host, "netns", n},
			[]string{"-n", n, "addr", "add", c.Addrs[i] + "/24", "dev", host},
			[]string{"-n", n, "link", "set", host, "up"},
			[]string{"-n", n, "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := c.ip(ctx, s...); err != nil {
			return nil, err
		}
	}
	if shaping, err := c.qdisc(); err != nil {
		return nil, err
	} else if shaping != nil {
		for i, n := range c.Names {
			host, _ := c.veth(i)
			args := append([]string{"netns", "exec", n, "tc", "qdisc", "add", "dev", host, "root"}, shaping...)
			if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
				if strings.Contains(string(out), "qdisc kind is unknown") && shaping[0] == "netem" {
					return nil, fmt.Errorf("netcluster: this kernel has no tc netem (CONFIG_NET_SCH_NETEM): tc can set a rate here (tbf), not a delay or loss; Link \"user\" (bench cluster -link user) emulates them")
				}
				return nil, fmt.Errorf("netcluster: shaping %s (tc qdisc add ... %s): %v: %s", n, strings.Join(shaping, " "), err, out)
			}
		}
	}
	return c, nil
}

// hasNetem reports whether tc can add a netem qdisc here (tried on the
// loopback device of namespace ns, and taken off again).
func hasNetem(ctx context.Context, ns string) bool {
	if exec.CommandContext(ctx, "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1us").Run() != nil {
		return false
	}
	exec.CommandContext(ctx, "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "lo", "root").Run()
	return true
}

// tun returns host i's TUN device's name (emulated links).
func (c *Cluster) tun(i int) string { return fmt.Sprintf("%st%d", c.cfg.Name, i) }

// veth returns host i's interface names: inside its namespace, and on the
// bridge.
func (c *Cluster) veth(i int) (host, peer string) {
	return fmt.Sprintf("%sv%d", c.cfg.Name, i), fmt.Sprintf("%sb%d", c.cfg.Name, i)
}

// qdisc returns the tc queueing discipline that shapes a host's link
// (its kind and arguments), nil for none: netem for a delay or loss,
// else tbf for a rate.
func (c *Cluster) qdisc() ([]string, error) {
	if c.cfg.Delay > 0 || c.cfg.Loss > 0 {
		a := []string{"netem"}
		if c.cfg.Delay > 0 {
			a = append(a, "delay", fmt.Sprintf("%dus", c.cfg.Delay.Microseconds()))
		}
		if c.cfg.Loss > 0 {
			a = append(a, "loss", fmt.Sprintf("%g%%", 100*c.cfg.Loss))
		}
		if c.cfg.Rate != "" {
			a = append(a, "rate", c.cfg.Rate)
		}
		return append(a, "limit", "100000"), nil
	}
	if c.cfg.Rate == "" {
		return nil, nil
	}
	bps, err := bitsPerSecond(c.cfg.Rate)
	if err != nil {
		return nil, err
	}
	// A bucket of a millisecond's bytes (at least 64 KiB) lets the link
	// run at its rate without bursting far past it.
	burst := max(bps/8/1000, 64<<10)
	return []string{"tbf", "rate", c.cfg.Rate, "burst", fmt.Sprint(burst), "latency", "50ms"}, nil
}

// bitsPerSecond parses a tc rate: a number and kbit, mbit or gbit.
func bitsPerSecond(rate string) (int64, error) {
	r := strings.ToLower(rate)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if n, ok := strings.CutSuffix(r, u.suffix); ok {
			var v float64
			if _, err := fmt.Sscanf(n, "%g", &v); err == nil && v > 0 {
				return int64(v * float64(u.mult)), nil
			}
		}
	}
	return 0, fmt.Errorf("netcluster: rate %q: want a number and kbit, mbit or gbit (\"10gbit\")", rate)
}

// Describe says what the cluster is, for logs and benchmark headers.
func (c *Cluster) Describe() string {
	hosts := fmt.Sprintf("%d hosts (network namespaces %s … %s, %s.1–%d)", c.cfg.Hosts, c.Names[0], c.Names[len(c.Names)-1], c.cfg.Subnet, c.cfg.Hosts)
	if c.emu != nil {
		link := "unshaped"
		if c.cfg.Rate != "" {
			link = "rate " + c.cfg.Rate
		}
		if c.cfg.Delay > 0 {
			link += fmt.Sprintf(", delay %v", c.cfg.Delay)
		}
		if c.cfg.Loss > 0 {
			link += fmt.Sprintf(", loss %g%%", 100*c.cfg.Loss)
		}
		return fmt.Sprintf("%s on TUN links emulated in user space (%s, MTU %d)", hosts, link, c.cfg.MTU)
	}
	link := "unshaped veth links"
	if s, _ := c.qdisc(); s != nil {
		link = "links shaped by tc " + strings.Join(s, " ")
	}
	return fmt.Sprintf("%s on a bridge, %s", hosts, link)
}

// SetLoss changes the fraction of packets every emulated link drops (0
// to 1; 1 cuts the hosts off from each other, as an outage would) while
// the cluster runs. Links tc shapes cannot change: an error says so.
func (c *Cluster) SetLoss(loss float64) error {
	if c.emu == nil {
		return fmt.Errorf("netcluster: the loss of links tc shapes is fixed (Config.Link \"user\" emulates links whose loss can change)")
	}
	if loss < 0 || loss > 1 || math.IsNaN(loss) {
		return fmt.Errorf("netcluster: loss %v: want 0 to 1", loss)
	}
	c.emu.loss.Store(math.Float64bits(loss))
	return nil
}

// LinkStats counts the packets the emulated links forwarded and dropped
// so far (zeros for links tc shapes).
func (c *Cluster) LinkStats() LinkStats {
	if c.emu == nil {
		return LinkStats{}
	}
	return c.emu.linkStats()
}

// DialWhenListening dials addr with d until it answers, for a program on
// one host whose peer on another is started at the same time: up to 5 s
// of refused or unreachable attempts, 50 ms apart.
func DialWhenListening(d *net.Dialer, addr string) (net.Conn, error) {
	var err error
	for range 100 {
		var c net.Conn
		if c, err = d.Dial("tcp", addr); err == nil {
			return c, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("netcluster: %s did not answer within 5 s: %w", addr, err)
}

// EchoOnce listens on addr, accepts one connection, prepares it (when
// prepare is not nil) and echoes what it reads until the peer closes: the
// far end of a program measuring or probing a link from another host.
func EchoOnce(addr string, prepare func(*net.TCPConn) error) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	conn, err := l.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	if prepare != nil {
		if err := prepare(conn.(*net.TCPConn)); err != nil {
			return err
		}
	}
	_, err = io.Copy(conn, conn)
	return err
}

// Command returns a command that runs name with args on host i.
func (c *Cluster) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.Names[i], name}, args...)...)
}

// Close removes the hosts' links, the namespaces and the bridge.
func (c *Cluster) Close() error { return c.remove() }

func (c *Cluster) remove() error {
	var errs []error
	if c.emu != nil {
		if err := c.emu.close(); err != nil {
			errs = append(errs, fmt.Errorf("netcluster: closing the emulated links: %w", err))
		}
		c.emu = nil
	}
	// Each host's link first, from its bridge end: deleting one end of a
	// veth pair deletes both at once, where a deleted namespace's links
	// go later, when the kernel's cleanup of it runs — a Start right
	// after could meet the bridge end still there ("File exists").
	for i := range c.Names {
		_, peer := c.veth(i)
		exec.Command("ip", "link", "del", peer).Run() // absent when never made
	}
	for _, n := range c.Names {
		if err := exec.Command("ip", "netns", "del", n).Run(); err == nil {
			continue
		}
		if _, err := os.Stat("/run/netns/" + n); err == nil {
			errs = append(errs, fmt.Errorf("netcluster: could not remove namespace %s", n))
		}
	}
	exec.Command("ip", "link", "del", c.bridge).Run()
	return errors.Join(errs...)
}

func (c *Cluster) ip(ctx context.Context, args ...string) error {
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netcluster: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
