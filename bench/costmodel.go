package bench

import (
	"fmt"
	"io"
	"math"
	"time"
)

// Link is one kind of connection in the cost model: what one message step
// over it costs before the first byte lands (wire and switch latency plus
// the software on both ends), and the bytes per second one direction
// carries for large messages (line rate times the efficiency the transport
// reaches).
type Link struct {
	Name      string
	Latency   time.Duration
	Bandwidth float64 // bytes per second, one direction
}

// step is the time one message of b bytes takes over l, in seconds.
func (l Link) step(b float64) float64 { return l.Latency.Seconds() + b/l.Bandwidth }

// Topology is a cluster for the cost model: Nodes hosts of PerNode ranks,
// ranks numbered host by host (as launchers place them). The ranks of a
// host talk over Local; each host reaches the others through one network
// interface of link Net, which its ranks share.
type Topology struct {
	Nodes, PerNode int
	Net, Local     Link
}

// Ranks returns the number of ranks.
func (t Topology) Ranks() int { return t.Nodes * t.PerNode }

// Algorithm is an all-reduce algorithm the cost model prices.
type Algorithm int

// The algorithms the cost model prices.
const (
	// FlatRing is a ring over all ranks: 2(n−1) steps of 1/n of the
	// buffer each; every step waits for the slowest edge, a network one
	// once the ring spans hosts.
	FlatRing Algorithm = iota
	// Hierarchical reduce-scatters within each host, all-reduces across
	// hosts in PerNode rings at once (ranks of one local index, each with
	// 1/PerNode of the buffer, sharing the host's interface), and
	// all-gathers within each host.
	Hierarchical
	// Tree is Hierarchical with the cross-host phase a pipelined double
	// binary tree: 2·log2(hosts) latencies instead of 2(hosts−1), and
	// twice the buffer through each interface.
	Tree
	// Doubling is recursive doubling over all ranks: log2(n) steps of the
	// whole buffer (gorun's choice for small buffers).
	Doubling
)

// algorithms lists every algorithm, in table order.
func algorithms() []Algorithm { return []Algorithm{FlatRing, Hierarchical, Tree, Doubling} }

func (a Algorithm) String() string {
	switch a {
	case FlatRing:
		return "flat ring"
	case Hierarchical:
		return "hierarchical"
	case Tree:
		return "tree"
	case Doubling:
		return "doubling"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// treeChunk is the pipeline chunk of the tree across hosts.
const treeChunk = 64 << 10

// AllReduce predicts how long an all-reduce of bytes takes with alg.
func (t Topology) AllReduce(alg Algorithm, bytes float64) time.Duration {
	return time.Duration(t.allReduceSeconds(alg, bytes) * float64(time.Second))
}

func (t Topology) allReduceSeconds(alg Algorithm, bytes float64) float64 {
	n, hosts, local := float64(t.Ranks()), float64(t.Nodes), float64(t.PerNode)
	if t.Ranks() <= 1 {
		return 0
	}
	// A ring over the ranks of one host.
	localRing := func(b float64) float64 {
		if t.PerNode == 1 {
			return 0
		}
		return 2 * (local - 1) * t.Local.step(b/local)
	}
	switch alg {
	case FlatRing:
		if t.Nodes == 1 {
			return localRing(bytes)
		}
		// One ring edge leaves each host each way: the host's interface
		// carries 1/n of the buffer per step, and every step waits for it.
		s := bytes / n
		step := t.Net.step(s)
		if t.PerNode > 1 {
			step = math.Max(step, t.Local.step(s))
		}
		return 2 * (n - 1) * step
	case Hierarchical, Tree:
		if t.Nodes == 1 || t.PerNode == 1 && alg == Hierarchical {
			return t.allReduceSeconds(FlatRing, bytes)
		}
		inHost := localRing(bytes)
		shard := bytes / local // each cross-host group's part
		// The PerNode groups cross at once, sharing the interface.
		perGroup := t.Net.Bandwidth / local
		if alg == Hierarchical {
			return inHost + 2*(hosts-1)*(t.Net.Latency.Seconds()+shard/hosts/perGroup)
		}
		chunk := math.Min(shard, treeChunk)
		depth := math.Ceil(math.Log2(hosts))
		return inHost + 2*depth*(t.Net.Latency.Seconds()+chunk/perGroup) + 2*shard/perGroup
	case Doubling:
		steps := math.Ceil(math.Log2(n))
		localSteps := math.Min(steps, math.Floor(math.Log2(local)))
		// Past the host's ranks every rank exchanges the whole buffer
		// across the network at once.
		return localSteps*t.Local.step(bytes) + (steps-localSteps)*(t.Net.Latency.Seconds()+bytes*local/t.Net.Bandwidth)
	}
	panic(fmt.Sprintf("bench: unknown algorithm %d", int(alg)))
}

// BusBandwidth is nccl-tests' bus bandwidth of an all-reduce of bytes
// among n ranks that took d: the rate each link runs at in a ring.
func BusBandwidth(bytes float64, n int, d time.Duration) float64 {
	if d <= 0 || n < 2 {
		return 0
	}
	return bytes / d.Seconds() * 2 * float64(n-1) / float64(n)
}

// Best returns the fastest algorithm for an all-reduce of bytes and its time.
func (t Topology) Best(bytes float64) (Algorithm, time.Duration) {
	best, bestT := FlatRing, time.Duration(math.MaxInt64)
	for _, a := range algorithms() {
		if d := t.AllReduce(a, bytes); d < bestT {
			best, bestT = a, d
		}
	}
	return best, bestT
}

// Network is a kind of cluster network in the cost model's table.
type Network struct {
	Name string
	Net  Link
}

// ModelTable writes, as a Markdown table, the predicted all-reduce time of
// each algorithm for each network, rank count (perNode ranks per host,
// local link local) and size, with the best algorithm's bus bandwidth.
func ModelTable(w io.Writer, nets []Network, local Link, perNode int, ranks []int, sizes []float64) error {
	for _, nw := range nets {
		if _, err := fmt.Fprintf(w, "\n%s (%s per step; %.1f GB/s), %d ranks per host over %s (%s; %.1f GB/s), time in ms:\n\n",
			nw.Name, nw.Net.Latency, nw.Net.Bandwidth/1e9, perNode, local.Name, local.Latency, local.Bandwidth/1e9); err != nil {
			return err
		}
		fmt.Fprint(w, "| ranks | size |")
		for _, a := range algorithms() {
			fmt.Fprintf(w, " %s |", a)
		}
		fmt.Fprintln(w, " best | its bus bandwidth |")
		fmt.Fprint(w, "| ---: | ---: |")
		for range algorithms() {
			fmt.Fprint(w, " ---: |")
		}
		fmt.Fprintln(w, " --- | ---: |")
		for _, n := range ranks {
			nodes := max(n/perNode, 1)
			t := Topology{Nodes: nodes, PerNode: min(perNode, n), Net: nw.Net, Local: local}
			for _, size := range sizes {
				fmt.Fprintf(w, "| %d | %s |", t.Ranks(), formatBytes(int(size)))
				best, bestT := t.Best(size)
				for _, a := range algorithms() {
					ms := float64(t.AllReduce(a, size)) / float64(time.Millisecond)
					if a == best {
						fmt.Fprintf(w, " **%.3g** |", ms)
					} else {
						fmt.Fprintf(w, " %.3g |", ms)
					}
				}
				if _, err := fmt.Fprintf(w, " %s | %.2f GB/s |\n", best, BusBandwidth(size, t.Ranks(), bestT)/1e9); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// formatBytes writes a size in the largest binary unit that divides it.
func formatBytes(n int) string {
	v, unit := binaryUnit(int64(n))
	return fmt.Sprintf("%d %s", v, [...]string{"B", "KiB", "MiB", "GiB"}[unit])
}

// Calibration is what the cost model takes from gorun's own measurements
// (BENCHMARKS.md), and the published figures it assumes where this
// project has no hardware.
type Calibration struct {
	// Efficiency is the fraction of a link's line rate large all-reduces
	// reach: 0.88–0.96 measured across tc-shaped 1 Gbit/s links
	// (BENCHMARKS.md, "Across nodes"), 0.92 their middle.
	Efficiency float64
	// TCPStep is the software cost of one message step over TCP: gorun's
	// 2-rank 8-byte all-reduce over loopback TCP, one step (12.3 µs,
	// "TCP collectives").
	TCPStep time.Duration
	// SHMStep and SHMBandwidth are one step and the bus bandwidth of a
	// large 2-rank all-reduce through shared memory (0.49 µs and 14 GB/s,
	// "Shared memory"; a 2-core VM: real hosts have more memory bandwidth).
	SHMStep      time.Duration
	SHMBandwidth float64
	// EthernetWire is an Ethernet hop's latency through NIC and switch
	// (assumed: 5 µs), IBWire InfiniBand's (assumed: 1.5 µs; EDR's
	// ib_send_lat is about 1.1 µs). Over InfiniBand the software step is
	// taken to be SHMStep's: gorun's RDMA path is unmeasured on hardware.
	EthernetWire, IBWire time.Duration
}

// DefaultCalibration returns the figures measured on the development VM
// on 2026-11-23 and the published ones named in Calibration.
func DefaultCalibration() Calibration {
	return Calibration{
		Efficiency:   0.92,
		TCPStep:      12300 * time.Nanosecond,
		SHMStep:      490 * time.Nanosecond,
		SHMBandwidth: 14e9,
		EthernetWire: 5 * time.Microsecond,
		IBWire:       1500 * time.Nanosecond,
	}
}

// Local is the link between ranks of one host: shared memory.
func (c Calibration) Local() Link {
	return Link{Name: "shared memory", Latency: c.SHMStep, Bandwidth: c.SHMBandwidth}
}

// Ethernet is a TCP link over Ethernet of gbits Gbit/s.
func (c Calibration) Ethernet(gbits float64) Link {
	return Link{Name: fmt.Sprintf("%g GbE, TCP", gbits), Latency: c.EthernetWire + c.TCPStep, Bandwidth: gbits * 1e9 / 8 * c.Efficiency}
}

// InfiniBand is an RDMA link over InfiniBand of gbits Gbit/s.
func (c Calibration) InfiniBand(name string, gbits float64) Link {
	return Link{Name: fmt.Sprintf("InfiniBand %s %g Gb, RDMA", name, gbits), Latency: c.IBWire + c.SHMStep, Bandwidth: gbits * 1e9 / 8 * c.Efficiency}
}

// Networks returns the networks of the cost model's table: 100 Gb
// InfiniBand EDR and 25 GbE.
func (c Calibration) Networks() []Network {
	return []Network{
		{Name: "100 Gb InfiniBand (EDR)", Net: c.InfiniBand("EDR", 100)},
		{Name: "25 GbE", Net: c.Ethernet(25)},
	}
}
