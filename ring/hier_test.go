package ring

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hostShape lays n = hosts·l ranks out on hosts, l per host: in blocks
// (ranks 0..l−1 on host 0, …) or interleaved (rank r on host r mod hosts).
type hostShape struct {
	hosts, l    int
	interleaved bool
}

func (s hostShape) String() string {
	return fmt.Sprintf("%dx%d/interleaved=%v", s.hosts, s.l, s.interleaved)
}

func (s hostShape) hostOf(r int) int {
	if s.interleaved {
		return r % s.hosts
	}
	return r / s.l
}

// collectives returns every rank's Collectives over net with the
// hierarchy of s (streams 1 local, 2 cross), every collective's
// threshold above.
func (s hostShape) collectives(net *memNet, above int) []*Collectives {
	n := s.hosts * s.l
	peers := make([]int, n)
	onHost := make([][]int, s.hosts)
	pos := make([]Position, n)
	for r := range peers {
		peers[r] = r
		h := s.hostOf(r)
		pos[r] = Position{Host: h, Local: len(onHost[h])}
		onHost[h] = append(onHost[h], r)
	}
	cs := make([]*Collectives, n)
	for r := range n {
		end := net.end(r)
		li := pos[r].Local
		var cross []int
		for h := range s.hosts {
			cross = append(cross, onHost[h][li])
		}
		cs[r] = &Collectives{T: end, Peers: peers, Rank: r, Hier: &Hierarchy{
			Local:     &Collectives{T: end, Peers: onHost[s.hostOf(r)], Rank: li, Stream: 1},
			Cross:     &Collectives{T: end, Peers: cross, Rank: s.hostOf(r), Stream: 2},
			Positions: pos,
			Above:     Thresholds{above, above, above, above, above},
		}}
	}
	return cs
}

var testShapes = []hostShape{{2, 2, false}, {3, 2, false}, {2, 3, false}, {4, 2, false}, {2, 2, true}, {3, 2, true}, {2, 3, true}, {4, 2, true}}

// streamsUsed reports whether any rank sent or waited on the group's own
// stream (0) and on the hierarchy's (1, 2): a link is made by the first
// of either.
func (m *memNet) streamsUsed() (flat, hier bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.links {
		if k[2] == 0 {
			flat = true
		} else {
			hier = true
		}
	}
	return flat, hier
}

// runRanks runs f on every rank at once and fails on the first error.
func runRanks(t *testing.T, n int, f func(ctx context.Context, r int) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(ctx, r) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// input is rank r's contribution: small integers, so that any order of
// additions and products is exact.
func input(r, count int) []float32 {
	v := make([]float32, count)
	for i := range v {
		v[i] = float32((r*7+i*3)%5 + 1)
	}
	return v
}

// reference reduces the ranks' inputs element by element in rank order.
func reference(op Op, in [][]float32) []float32 {
	want := slices.Clone(in[0])
	for _, v := range in[1:] {
		Reduce(op, want, want, v)
	}
	if op == Avg {
		Divide(want, len(in))
	}
	return want
}

func near(got, want float32, op Op) bool {
	return got == want || op == Avg && abs32(got-want) <= 1e-6*abs32(want)
}

// TestHierarchicalAllReduce all-reduces in process over hosts × L ranks,
// hosts given to the ranks in blocks and interleaved, with counts that
// leave a tail (not a multiple of L) and that are smaller than L, for
// every op: every rank ends with the reference (contributions are small
// integers, so any order of additions is exact) and the same bits.
func TestHierarchicalAllReduce(t *testing.T) {
	for _, shape := range testShapes {
		for _, count := range []int{1, 5, 64, 1001} {
			for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
				t.Run(fmt.Sprintf("%v/count=%d/%v", shape, count, op), func(t *testing.T) {
					n := shape.hosts * shape.l
					in := make([][]float32, n)
					for r := range in {
						in[r] = input(r, count)
					}
					want := reference(op, in)
					cs := shape.collectives(newMemNet(n), Always)
					out := make([][]float32, n)
					runRanks(t, n, func(ctx context.Context, r int) error {
						out[r] = slices.Clone(in[r])
						return AllReduce(ctx, cs[r], out[r], op)
					})
					for r := range n {
						for i := range want {
							if !near(out[r][i], want[i], op) {
								t.Fatalf("rank %d element %d: %v, want %v", r, i, out[r][i], want[i])
							}
						}
						if !slices.Equal(out[r], out[0]) {
							t.Fatalf("ranks 0 and %d hold different bits", r)
						}
					}
				})
			}
		}
	}
}

// TestHierarchicalCollectives runs broadcast (from a root on every
// host), all-gather and reduce-scatter (every op) host by host in
// process, at counts smaller than, equal to and not a multiple of the
// ranks per host, and checks every rank against the definition; frames
// must have gone on the hierarchy's streams only. With the thresholds at
// Never they go flat, on the group's stream only.
func TestHierarchicalCollectives(t *testing.T) {
	for _, shape := range testShapes {
		n := shape.hosts * shape.l
		for _, count := range []int{1, 2, 7, 300} {
			for _, above := range []int{Always, Never} {
				name := fmt.Sprintf("%v/count=%d/hier=%v", shape, count, above == Always)
				check := func(t *testing.T, net *memNet) {
					flat, hier := net.streamsUsed()
					if hier != (above == Always) || flat != (above == Never) {
						t.Fatalf("frames on the group's stream: %v, on the hierarchy's: %v (threshold %d)", flat, hier, above)
					}
				}
				for _, root := range []int{0, n - 1, n / 2} {
					t.Run(name+fmt.Sprintf("/broadcast/root=%d", root), func(t *testing.T) {
						net := newMemNet(n)
						cs := shape.collectives(net, above)
						out := make([][]float32, n)
						runRanks(t, n, func(ctx context.Context, r int) error {
							out[r] = make([]float32, count)
							if r == root {
								out[r] = input(r, count)
							}
							return Broadcast(ctx, cs[r], out[r], root)
						})
						want := input(root, count)
						for r := range n {
							if !slices.Equal(out[r], want) {
								t.Fatalf("rank %d: %v, want %v", r, out[r], want)
							}
						}
						check(t, net)
					})
				}
				t.Run(name+"/all-gather", func(t *testing.T) {
					net := newMemNet(n)
					cs := shape.collectives(net, above)
					out := make([][]float32, n)
					runRanks(t, n, func(ctx context.Context, r int) error {
						out[r] = make([]float32, n*count)
						return AllGather(ctx, cs[r], input(r, count), out[r])
					})
					for r := range n {
						for q := range n {
							if got := out[r][q*count : (q+1)*count]; !slices.Equal(got, input(q, count)) {
								t.Fatalf("rank %d, block %d: %v, want %v", r, q, got, input(q, count))
							}
						}
					}
					check(t, net)
				})
				for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
					t.Run(name+"/reduce-scatter/"+op.String(), func(t *testing.T) {
						net := newMemNet(n)
						cs := shape.collectives(net, above)
						in := make([][]float32, n)
						for r := range in {
							in[r] = input(r, n*count)
						}
						want := reference(op, in)
						out := make([][]float32, n)
						runRanks(t, n, func(ctx context.Context, r int) error {
							out[r] = make([]float32, count)
							return ReduceScatter(ctx, cs[r], in[r], out[r], op)
						})
						for r := range n {
							for i, v := range out[r] {
								if w := want[r*count+i]; !near(v, w, op) {
									t.Fatalf("rank %d element %d: %v, want %v", r, i, v, w)
								}
							}
						}
						check(t, net)
					})
				}
			}
		}
	}
}

// TestHierarchicalBarrier: no rank leaves the barrier before every rank
// has entered it, though the ranks enter one after the other, the last
// 30 ms after the first; by hosts and (threshold Never) flat.
func TestHierarchicalBarrier(t *testing.T) {
	for _, shape := range testShapes {
		for _, hier := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/hier=%v", shape, hier), func(t *testing.T) {
				n := shape.hosts * shape.l
				net := newMemNet(n)
				above := Always
				if !hier {
					above = Never
				}
				cs := shape.collectives(net, above)
				var entered atomic.Int32
				runRanks(t, n, func(ctx context.Context, r int) error {
					time.Sleep(time.Duration((r*5)%n) * 30 * time.Millisecond / time.Duration(n))
					entered.Add(1)
					if err := Barrier(ctx, cs[r]); err != nil {
						return err
					}
					if e := entered.Load(); e != int32(n) {
						return fmt.Errorf("left the barrier when %d of %d ranks had entered", e, n)
					}
					return nil
				})
				if flat, h := net.streamsUsed(); h != hier || flat == hier {
					t.Fatalf("frames on the group's stream: %v, on the hierarchy's: %v", flat, h)
				}
			})
		}
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestHierarchyThresholds: each collective goes host by host only above
// its own threshold (the whole buffer's bytes), and never at Never.
func TestHierarchyThresholds(t *testing.T) {
	shape := hostShape{hosts: 2, l: 2}
	above := Thresholds{AllReduce: 400, Broadcast: Never, AllGather: 64, ReduceScatter: 128, Barrier: Never}
	for _, c := range []struct {
		name  string
		count int // float32s per rank's buffer (all-gather: its send)
		run   func(ctx context.Context, c *Collectives, count int) error
		hier  bool
	}{
		{"all-reduce at the threshold", 100, func(ctx context.Context, c *Collectives, k int) error {
			return AllReduce(ctx, c, make([]float32, k), Sum)
		}, false},
		{"all-reduce above (no tail: a multiple of 2 ranks per host)", 102, func(ctx context.Context, c *Collectives, k int) error {
			return AllReduce(ctx, c, make([]float32, k), Sum)
		}, true},
		{"broadcast never", 1 << 16, func(ctx context.Context, c *Collectives, k int) error {
			return Broadcast(ctx, c, make([]float32, k), 1)
		}, false},
		{"all-gather of 16 floats in all", 4, func(ctx context.Context, c *Collectives, k int) error {
			return AllGather(ctx, c, make([]float32, k), make([]float32, 4*k))
		}, false},
		{"all-gather of 20 floats in all", 5, func(ctx context.Context, c *Collectives, k int) error {
			return AllGather(ctx, c, make([]float32, k), make([]float32, 4*k))
		}, true},
		{"reduce-scatter of 32 floats", 8, func(ctx context.Context, c *Collectives, k int) error {
			return ReduceScatter(ctx, c, make([]float32, 4*k), make([]float32, k), Sum)
		}, false},
		{"reduce-scatter of 36 floats", 9, func(ctx context.Context, c *Collectives, k int) error {
			return ReduceScatter(ctx, c, make([]float32, 4*k), make([]float32, k), Sum)
		}, true},
		{"barrier never", 0, func(ctx context.Context, c *Collectives, _ int) error { return Barrier(ctx, c) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			net := newMemNet(4)
			cs := shape.collectives(net, 0)
			for _, x := range cs {
				x.Hier.Above = above
			}
			runRanks(t, 4, func(ctx context.Context, r int) error { return c.run(ctx, cs[r], c.count) })
			if flat, hier := net.streamsUsed(); hier != c.hier || flat == c.hier {
				t.Fatalf("frames on the group's stream: %v, on the hierarchy's: %v; want hierarchical %v", flat, hier, c.hier)
			}
		})
	}
}
