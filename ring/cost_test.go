package ring

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestCostsChoose: the model picks by the links. Across 3 hosts × 2 ranks
// on 1 Gbit/s links with 150 µs steps, small all-reduces are recursive
// doubling (fewest steps), and from 1 MiB the flat choice is the ring
// (halving-doubling's step between hosts carries two flows out of the
// third host) and host by host beats it; when a step costs 1 ms and the
// links are fast, doubling wins at 1 MiB too.
func TestCostsChoose(t *testing.T) {
	hosts := []int{0, 0, 1, 1, 2, 2}
	shm := Link{Step: time.Microsecond, BytesPerSec: 10e9}
	gbit := Link{Step: 150 * time.Microsecond, BytesPerSec: 125e6}
	slowSteps := Link{Step: time.Millisecond, BytesPerSec: 10e9}
	hier := func(net Link) *Hierarchy {
		cross := net
		cross.BytesPerSec /= 2 // two cross groups share each host's link
		return &Hierarchy{
			Local: &Collectives{Peers: []int{0, 1}},
			Cross: &Collectives{Peers: []int{0, 2, 4}, Costs: &Costs{Net: cross, Local: shm, Host: []int{0, 1, 2}, Reduce: 10e9, Chunk: 128 << 10}},
		}
	}
	for _, c := range []struct {
		name  string
		net   Link
		bytes int
		hier  bool
		want  Algo
	}{
		{"1 Gbit/s, 4 KiB, flat", gbit, 4 << 10, false, AlgoDoubling},
		{"1 Gbit/s, 4 KiB", gbit, 4 << 10, true, AlgoDoubling},
		{"1 Gbit/s, 64 KiB", gbit, 64 << 10, true, AlgoHierarchical},
		{"1 Gbit/s, 1 MiB, flat", gbit, 1 << 20, false, AlgoRing},
		{"1 Gbit/s, 1 MiB", gbit, 1 << 20, true, AlgoHierarchical},
		{"1 Gbit/s, 64 MiB", gbit, 64 << 20, true, AlgoHierarchical},
		{"1 ms steps, 1 MiB, flat", slowSteps, 1 << 20, false, AlgoDoubling},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &Costs{Net: c.net, Local: shm, Host: hosts, Reduce: 10e9, Chunk: 128 << 10}
			var h *Hierarchy
			if c.hier {
				h = hier(c.net)
			}
			if got := m.choose(c.bytes, h); got != c.want {
				var times []string
				for _, a := range []Algo{AlgoDoubling, AlgoHalving, AlgoRing, AlgoHierarchical} {
					if d, ok := m.Predict(a, c.bytes, h); ok {
						times = append(times, a.String()+" "+d.String())
					}
				}
				t.Errorf("chose %v, want %v (predicted: %v)", got, c.want, times)
			}
		})
	}
}

// TestCostsChooseTwoHosts: two ranks on two hosts over a 10 Gbit/s link
// (50 µs steps), the ring in chunks of 128 KiB. Recursive doubling takes
// one step to the ring's two at the same bandwidth, and no pipeline to
// fill, but reduces the whole buffer after it has arrived, where the ring
// reduces half of it chunk by chunk as it travels: all-reduces up to
// about 1.7 MB are recursive doubling, larger ones the ring (measured on
// the namespace cluster, doubling ahead by 5% at 1 and 2 MiB, the ring by
// 3% at 4 MiB, 14% at 8 MiB; BENCHMARKS.md, "Across nodes"). With the
// reduction not priced, doubling wins at every size.
func TestCostsChooseTwoHosts(t *testing.T) {
	net := Link{Step: 50 * time.Microsecond, BytesPerSec: 1.25e9}
	shm := Link{Step: time.Microsecond, BytesPerSec: 10e9}
	for _, c := range []struct {
		name   string
		reduce float64
		bytes  int
		want   Algo
	}{
		{"64 KiB", 10e9, 64 << 10, AlgoDoubling},
		{"1 MiB", 10e9, 1 << 20, AlgoDoubling},
		{"4 MiB", 10e9, 4 << 20, AlgoRing},
		{"16 MiB", 10e9, 16 << 20, AlgoRing},
		{"16 MiB, reduction not priced", 0, 16 << 20, AlgoDoubling},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &Costs{Net: net, Local: shm, Host: []int{0, 1}, Reduce: c.reduce, Chunk: 128 << 10}
			if got := m.choose(c.bytes, nil); got != c.want {
				t.Errorf("chose %v, want %v", got, c.want)
			}
		})
	}
}

// TestCostsPredict checks the model's sums by hand for 3 hosts × 2
// ranks: the flat ring's 10 steps each carry one flow of a sixth of the
// buffer out of every host; halving-doubling's pairing stays within the
// hosts, its step across bit 1 has one flow out of each host and across
// bit 2 two out of the third host, a quarter and a half of the buffer,
// each twice.
func TestCostsPredict(t *testing.T) {
	net := Link{Step: 100 * time.Microsecond, BytesPerSec: 1e8}
	shm := Link{Step: time.Microsecond, BytesPerSec: 1e10}
	m := &Costs{Net: net, Local: shm, Host: []int{0, 0, 1, 1, 2, 2}}
	const bytes = 6e6
	for _, c := range []struct {
		algo Algo
		want float64 // seconds
	}{
		{AlgoRing, 10 * (100e-6 + 1e6/1e8)},
		{AlgoHalving, 2*(1e-6+6e6/1e10) + 2*(100e-6+1.5e6/1e8) + 2*(100e-6+2*3e6/1e8)},
		{AlgoDoubling, 2*(1e-6+6e6/1e10) + (100e-6 + 6e6/1e8) + (100e-6 + 2*6e6/1e8)},
	} {
		got, ok := m.Predict(c.algo, bytes, nil)
		if !ok || abs64(got.Seconds()-c.want) > 1e-6 {
			t.Errorf("%v: predicted %v, want %v", c.algo, got, time.Duration(c.want*1e9))
		}
	}
	if _, ok := m.Predict(AlgoHierarchical, bytes, nil); ok {
		t.Error("a prediction for host by host without a hierarchy")
	}
	// With the reduction and the ring's chunk priced (the reduction here
	// slower than shared memory, faster than the network): the ring's
	// pipeline fills once (a 100 kB chunk over the network, then reduced),
	// and its reducing steps take the slower of transfer and reduction,
	// each at a sixth; halving-doubling's and recursive doubling's
	// reducing steps (the first pairing, and the steps across bits while
	// reducing) add the reduction of what they received.
	const reduce = 5e9
	m = &Costs{Net: net, Local: shm, Host: []int{0, 0, 1, 1, 2, 2}, Reduce: reduce, Chunk: 1e5}
	for _, c := range []struct {
		algo Algo
		want float64 // seconds
	}{
		{AlgoRing, (1e5/1e8 + 1e5/reduce) + 10*(100e-6+1e6/1e8)},
		{AlgoHalving, (1e-6 + 6e6/1e10 + 6e6/reduce) + (1e-6 + 6e6/1e10) +
			(100e-6 + 1.5e6/1e8 + 1.5e6/reduce) + (100e-6 + 1.5e6/1e8) +
			(100e-6 + 2*3e6/1e8 + 3e6/reduce) + (100e-6 + 2*3e6/1e8)},
		{AlgoDoubling, (1e-6 + 6e6/1e10 + 6e6/reduce) + (1e-6 + 6e6/1e10) + (100e-6 + 6e6/1e8 + 6e6/reduce) + (100e-6 + 2*6e6/1e8 + 6e6/reduce)},
	} {
		got, ok := m.Predict(c.algo, bytes, nil)
		if !ok || abs64(got.Seconds()-c.want) > 1e-6 {
			t.Errorf("%v, reduction priced: predicted %v, want %v", c.algo, got, time.Duration(c.want*1e9))
		}
	}
	// Blocks no larger than a chunk (6e5 bytes over 6 ranks, 1e5-byte
	// chunks): no pipeline, each reducing step of the ring reduces after
	// its transfer.
	if got, want := predicted(m, AlgoRing, 6e5), 5*(100e-6+1e5/1e8+1e5/reduce)+5*(100e-6+1e5/1e8); abs64(got-want) > 1e-8 {
		t.Errorf("ring of blocks within a chunk: predicted %v s, want %v", got, want)
	}
	// One host: the ring's steps through shared memory (10 GB/s) are
	// slower than the reduction on their own; at 20 GB/s the reduction
	// sets the pace of its reducing steps.
	m = &Costs{Net: net, Local: Link{Step: time.Microsecond, BytesPerSec: 2e10}, Host: []int{0, 0}, Reduce: 1e10}
	if got, want := predicted(m, AlgoRing, bytes), (1e-6+3e6/1e10)+(1e-6+3e6/2e10); abs64(got-want) > 1e-9 {
		t.Errorf("ring on one host, reduction slower than the link: predicted %v s, want %v", got, want)
	}
}

// predicted is m's prediction for algo and bytes, in seconds.
func predicted(m *Costs, algo Algo, bytes int) float64 {
	d, _ := m.Predict(algo, bytes, nil)
	return d.Seconds()
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestAllReduceFollowsCosts: with Costs, AllReduce runs what they
// predict fastest, in place of the fixed sizes: 1 MiB across 3 hosts × 2
// on 1 Gbit/s links goes host by host though the hierarchy's threshold
// is 8 MiB, flat it is the ring (the sizes would say halving-doubling),
// and with slow steps on fast links recursive doubling; every result the
// reference.
func TestAllReduceFollowsCosts(t *testing.T) {
	shape := hostShape{hosts: 3, l: 2}
	shm := Link{Step: time.Microsecond, BytesPerSec: 10e9}
	gbit := Link{Step: 150 * time.Microsecond, BytesPerSec: 125e6}
	slowSteps := Link{Step: time.Millisecond, BytesPerSec: 10e9}
	const count = 1 << 18 // 1 MiB of float32
	for _, c := range []struct {
		name string
		net  Link
		hier bool
		want Algo // AlgoHierarchical: frames on the hierarchy's streams only
	}{
		{"1 Gbit/s", gbit, true, AlgoHierarchical},
		{"1 Gbit/s, flat", gbit, false, AlgoRing},
		{"slow steps, flat", slowSteps, false, AlgoDoubling},
	} {
		t.Run(c.name, func(t *testing.T) {
			net := newMemNet(6)
			cs := shape.collectives(net, 8<<20)
			for _, x := range cs {
				x.HalvingBytes = 4 << 20
				giveCosts(x, c.net, shm)
				if !c.hier {
					x.Hier = nil
				}
			}
			in := make([][]float32, 6)
			for r := range in {
				in[r] = input(r, count)
			}
			want := reference(Sum, in)
			runRanks(t, 6, func(ctx context.Context, r int) error { return AllReduce(ctx, cs[r], in[r], Sum) })
			for r := range in {
				if !slices.Equal(in[r], want) {
					t.Fatalf("rank %d: not the reference", r)
				}
			}
			flat, hier := net.streamsUsed()
			if c.want == AlgoHierarchical {
				if flat || !hier {
					t.Fatalf("frames on the group's stream: %v, on the hierarchy's: %v; want the hierarchy's only", flat, hier)
				}
				return
			}
			if net.algos[c.want] == 0 || len(net.algos) != 1 {
				t.Fatalf("frames carried %v, want %v only", net.algos, c.want)
			}
		})
	}
}

// TestGatherFollowsCosts: with Costs, an all-gather or reduce-scatter
// goes host by host where the model predicts it faster than the flat
// ring, whatever the threshold: across 3 hosts × 2 on 1 Gbit/s links it
// does (the links between hosts carry 4/6 of the buffer instead of 5/6);
// when the links between hosts are as fast as shared memory, the phases
// within hosts cost more than they save, and it stays flat. Forced, it
// goes host by host regardless.
func TestGatherFollowsCosts(t *testing.T) {
	shape := hostShape{hosts: 3, l: 2}
	shm := Link{Step: time.Microsecond, BytesPerSec: 10e9}
	gbit := Link{Step: 150 * time.Microsecond, BytesPerSec: 125e6}
	const count = 1 << 16 // float32s per rank's block
	for _, c := range []struct {
		name   string
		net    Link
		forced bool
		hier   bool
	}{
		{"1 Gbit/s", gbit, false, true},
		{"links as fast as shared memory", shm, false, false},
		{"links as fast as shared memory, forced", shm, true, true},
	} {
		for _, kind := range []Kind{KindAllGather, KindReduceScatter} {
			t.Run(c.name+"/"+kind.String(), func(t *testing.T) {
				net := newMemNet(6)
				cs := shape.collectives(net, Never)
				for _, x := range cs {
					giveCosts(x, c.net, shm)
					x.Hier.Forced = c.forced
				}
				runRanks(t, 6, func(ctx context.Context, r int) error {
					if kind == KindAllGather {
						return AllGather(ctx, cs[r], input(r, count), make([]float32, 6*count))
					}
					return ReduceScatter(ctx, cs[r], input(r, 6*count), make([]float32, count), Sum)
				})
				if flat, hier := net.streamsUsed(); hier != c.hier || flat == c.hier {
					t.Fatalf("frames on the group's stream: %v, on the hierarchy's: %v; want host by host %v", flat, hier, c.hier)
				}
			})
		}
	}
}

// giveCosts gives one rank of hostShape{3, 2}'s collectives the costs of
// links net between hosts and shm within them, its cross group's link
// shared by the 2 cross groups.
func giveCosts(x *Collectives, net, shm Link) {
	x.Costs = &Costs{Net: net, Local: shm, Host: []int{0, 0, 1, 1, 2, 2}}
	cross := net
	cross.BytesPerSec /= 2
	x.Hier.Cross.Costs = &Costs{Net: cross, Local: shm, Host: []int{0, 1, 2}}
}
