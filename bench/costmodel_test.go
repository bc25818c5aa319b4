package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// TestModelMatchesNamespaceCluster: with the calibration alone, the model
// predicts the all-reduces measured across three simulated hosts of two
// ranks on tc-shaped 1 Gbit/s links (BENCHMARKS.md, "Across nodes",
// "Hierarchical against flat": the middle of three rounds) within 10% where
// the links bind (16 and 64 MiB).
func TestModelMatchesNamespaceCluster(t *testing.T) {
	c := DefaultCalibration()
	cluster := Topology{Nodes: 3, PerNode: 2, Net: c.Ethernet(1), Local: c.Local()}
	for _, tc := range []struct {
		alg      Algorithm
		bytes    float64
		measured time.Duration
	}{
		{FlatRing, 16 << 20, 237 * time.Millisecond},
		{Hierarchical, 16 << 20, 206 * time.Millisecond},
		{FlatRing, 64 << 20, 970 * time.Millisecond},
		{Hierarchical, 64 << 20, 821 * time.Millisecond},
	} {
		got := cluster.AllReduce(tc.alg, tc.bytes)
		if r := got.Seconds() / tc.measured.Seconds(); r < 0.9 || r > 1.1 {
			t.Errorf("%v of %s: model %v, measured %v (ratio %.2f)", tc.alg, formatBytes(int(tc.bytes)), got, tc.measured, r)
		}
	}
}

// TestModelAgreesWithNCCLTests: large all-reduces between hosts with one
// rank and one interface each run at the bus bandwidth nccl-tests
// publishes for such links (about 12 GB/s per 100 Gb EDR interface, 24
// per 200 Gb HDR one), within 10%.
func TestModelAgreesWithNCCLTests(t *testing.T) {
	c := DefaultCalibration()
	for _, tc := range []struct {
		net       Link
		published float64
	}{
		{c.InfiniBand("EDR", 100), 12e9},
		{c.InfiniBand("HDR", 200), 24e9},
	} {
		for _, nodes := range []int{2, 8, 64} {
			top := Topology{Nodes: nodes, PerNode: 1, Net: tc.net, Local: c.Local()}
			const size = 1 << 30
			bus := BusBandwidth(size, top.Ranks(), top.AllReduce(FlatRing, size))
			if r := bus / tc.published; r < 0.9 || r > 1.1 {
				t.Errorf("%s, %d hosts: bus bandwidth %.1f GB/s, nccl-tests %.0f", tc.net.Name, nodes, bus/1e9, tc.published/1e9)
			}
		}
	}
}

func TestModelShapes(t *testing.T) {
	c := DefaultCalibration()
	eth := c.Ethernet(25)
	big := func(nodes, perNode int) Topology {
		return Topology{Nodes: nodes, PerNode: perNode, Net: eth, Local: c.Local()}
	}
	for _, tc := range []struct {
		name    string
		top     Topology
		bytes   float64
		fastest []Algorithm // in order, fastest first
	}{
		// 2·1023 network latencies of the flat ring against 2·127 and 2·7.
		{"1024 ranks, a DDP bucket of 1 MiB", big(128, 8), 1 << 20, []Algorithm{Tree, Hierarchical, FlatRing}},
		{"1024 ranks, 25 MiB", big(128, 8), 25 << 20, []Algorithm{Hierarchical, FlatRing}},
		{"16 ranks, 8 bytes", big(2, 8), 8, []Algorithm{Doubling, FlatRing}},
		{"one host, 8 bytes", big(1, 8), 8, []Algorithm{Doubling, FlatRing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 1; i < len(tc.fastest); i++ {
				a, b := tc.fastest[i-1], tc.fastest[i]
				if ta, tb := tc.top.AllReduce(a, tc.bytes), tc.top.AllReduce(b, tc.bytes); ta >= tb {
					t.Errorf("%v %v, not faster than %v %v", a, ta, b, tb)
				}
			}
		})
	}
	// On one host every algorithm but doubling is the ring through
	// shared memory; with one rank per host hierarchical is the flat ring.
	one := big(1, 8)
	for _, a := range []Algorithm{Hierarchical, Tree} {
		if got, want := one.AllReduce(a, 1<<20), one.AllReduce(FlatRing, 1<<20); got != want {
			t.Errorf("one host: %v %v, flat ring %v", a, got, want)
		}
	}
	spread := big(16, 1)
	if got, want := spread.AllReduce(Hierarchical, 1<<20), spread.AllReduce(FlatRing, 1<<20); got != want {
		t.Errorf("one rank per host: hierarchical %v, flat ring %v", got, want)
	}
	if d := big(1, 1).AllReduce(FlatRing, 1<<20); d != 0 {
		t.Errorf("one rank: %v, want 0", d)
	}
	// More bytes never take less time; no bus bandwidth beats the link.
	for _, a := range algorithms() {
		top := big(4, 8)
		prev := time.Duration(0)
		for size := 8.0; size <= 1<<30; size *= 4 {
			d := top.AllReduce(a, size)
			if d < prev {
				t.Errorf("%v: %s takes %v, less than a quarter of it (%v)", a, formatBytes(int(size)), d, prev)
			}
			prev = d
			if bus := BusBandwidth(size, top.Ranks(), d); a == FlatRing && bus > eth.Bandwidth*1.01 {
				t.Errorf("%v: bus bandwidth %.2f GB/s over a %.2f GB/s link", a, bus/1e9, eth.Bandwidth/1e9)
			}
		}
	}
}

func TestModelTable(t *testing.T) {
	c := DefaultCalibration()
	var b bytes.Buffer
	ranks := []int{8, 64, 1024}
	sizes := []float64{1 << 20, 25 << 20}
	if err := ModelTable(&b, c.Networks(), c.Local(), 8, ranks, sizes); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| ranks") && !strings.HasPrefix(line, "| -") {
			rows++
			if strings.Count(line, "**") != 2 {
				t.Errorf("row without exactly one best time: %s", line)
			}
		}
	}
	if want := len(c.Networks()) * len(ranks) * len(sizes); rows != want {
		t.Errorf("%d rows, want %d:\n%s", rows, want, out)
	}
	for _, bad := range []string{"NaN", "+Inf", " 0 |"} {
		if strings.Contains(out, bad) {
			t.Errorf("table holds %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "| 1024 | 25 MiB |") {
		t.Errorf("no row for 1024 ranks and 25 MiB:\n%s", out)
	}
}

func TestBusBandwidth(t *testing.T) {
	// 1 GB among 4 ranks in a second: 2·3/4 GB/s on every link.
	if got := BusBandwidth(1e9, 4, time.Second); math.Abs(got-1.5e9) > 1 {
		t.Errorf("BusBandwidth = %v, want 1.5e9", got)
	}
	if got := BusBandwidth(1e9, 1, time.Second); got != 0 {
		t.Errorf("one rank: %v, want 0", got)
	}
}
