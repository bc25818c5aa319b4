package ring

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// vectorCounts returns n uneven per-rank counts: zeros among them, the
// largest spanning several 64-byte frames.
func vectorCounts(n, scale int) []int {
	counts := make([]int, n)
	for k := range counts {
		counts[k] = (k * 7 % 5) * scale // 0, 2, 4, 1, 3, 0, … times scale
	}
	return counts
}

// prefix returns counts' running sums: block k spans [off[k], off[k+1]).
func prefix(counts []int) []int {
	off := make([]int, len(counts)+1)
	for k, c := range counts {
		off[k+1] = off[k] + c
	}
	return off
}

// integral returns n ranks' inputs of count small whole numbers (each
// float32 sum, product and mean of them is exact in any order, so the
// reference need not follow the algorithm's order).
func integral(n, count int) [][]float32 {
	in := contributions(n, count)
	for r := range in {
		for i, v := range in[r] {
			in[r][i] = float32(int(v*4) - 1)
		}
	}
	return in
}

// TestVectorCollectives runs AllGatherV, GatherV, ScatterV, AllToAllV and
// ReduceScatterV (every op) in process for groups of 1 to 8 ranks, uneven
// counts with zeros (and all zero), every root kind, in 64-byte frames,
// against the sequential reference.
func TestVectorCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, scale := range []int{0, 1, 37} {
			counts := vectorCounts(n, scale)
			off := prefix(counts)
			total := off[n]
			in := integral(n, total) // rank r contributes in[r][off[r]:off[r+1]] where it sends one block
			name := fmt.Sprintf("n=%d/counts=%v", n, counts)
			t.Run(name+"/allgatherv", func(t *testing.T) {
				out := make([][]float32, n)
				onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
					out[r] = make([]float32, total)
					return AllGatherV(ctx, c, in[r][off[r]:off[r+1]], out[r], counts)
				})
				for r := range n {
					for k := range n {
						if i := firstDiff(out[r][off[k]:off[k+1]], in[k][off[k]:off[k+1]]); i >= 0 {
							t.Fatalf("rank %d, block %d, element %d differs", r, k, i)
						}
					}
				}
			})
			for _, root := range []int{0, n / 2, n - 1} {
				t.Run(fmt.Sprintf("%s/root=%d/gatherv+scatterv", name, root), func(t *testing.T) {
					gathered := make([]float32, total)
					onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
						var recv []float32
						if r == root {
							recv = gathered
						}
						return GatherV(ctx, c, in[r][off[r]:off[r+1]], recv, counts, root)
					})
					for k := range n {
						if i := firstDiff(gathered[off[k]:off[k+1]], in[k][off[k]:off[k+1]]); i >= 0 {
							t.Fatalf("GatherV: block %d element %d differs", k, i)
						}
					}
					scattered := make([][]float32, n)
					onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
						scattered[r] = make([]float32, counts[r])
						var send []float32
						if r == root {
							send = in[root]
						}
						return ScatterV(ctx, c, send, counts, scattered[r], root)
					})
					for r := range n {
						if i := firstDiff(scattered[r], in[root][off[r]:off[r+1]]); i >= 0 {
							t.Fatalf("ScatterV: rank %d element %d differs", r, i)
						}
					}
				})
			}
			t.Run(name+"/reducescatterv", func(t *testing.T) {
				for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
					want := make([]float32, total)
					copy(want, in[0])
					for r := 1; r < n; r++ {
						Reduce(op, want, want, in[r])
					}
					if op == Avg {
						Divide(want, n)
					}
					out := make([][]float32, n)
					onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
						out[r] = make([]float32, counts[r])
						return ReduceScatterV(ctx, c, in[r], out[r], counts, op)
					})
					for r := range n {
						if i := firstDiff(out[r], want[off[r]:off[r+1]]); i >= 0 {
							t.Fatalf("%v: rank %d element %d is %v, want %v", op, r, i, out[r][i], want[off[r]+i])
						}
					}
				}
			})
			t.Run(name+"/alltoallv", func(t *testing.T) {
				// Rank r sends sendCounts(r)[p] = (r+2p)%4·scale elements to p.
				sendCounts := func(r int) []int {
					s := make([]int, n)
					for p := range s {
						s[p] = (r + 2*p) % 4 * scale
					}
					return s
				}
				sends := make([][]float32, n)
				for r := range sends {
					sends[r] = integral(n, prefix(sendCounts(r))[n])[r]
				}
				out := make([][]float32, n)
				onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
					rc := make([]int, n)
					for p := range rc {
						rc[p] = sendCounts(p)[r]
					}
					out[r] = make([]float32, prefix(rc)[n])
					return AllToAllV(ctx, c, sends[r], sendCounts(r), out[r], rc)
				})
				for r := range n {
					at := 0
					for p := range n {
						so := prefix(sendCounts(p))
						want := sends[p][so[r]:so[r+1]]
						if i := firstDiff(out[r][at:at+len(want)], want); i >= 0 {
							t.Fatalf("rank %d, block from %d, element %d differs", r, p, i)
						}
						at += len(want)
					}
				}
			})
		}
	}
}

// TestVectorHalfReduceScatter: ReduceScatterV of bfloat16 combines in
// float32 and rounds once, as ReduceScatter does, over uneven blocks.
func TestVectorHalfReduceScatter(t *testing.T) {
	n := 5
	counts := vectorCounts(n, 37)
	off := prefix(counts)
	f := contributions(n, off[n])
	in := make([][]BFloat16, n)
	for r := range in {
		in[r] = make([]BFloat16, off[n])
		for i, v := range f[r] {
			in[r][i] = NewBFloat16(v * 3)
		}
	}
	want := halfReference(Sum, in)
	out := make([][]BFloat16, n)
	onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
		out[r] = make([]BFloat16, counts[r])
		return ReduceScatterV(ctx, c, in[r], out[r], counts, Sum)
	})
	for r := range n {
		for i, v := range out[r] {
			if v != want[off[r]+i] {
				t.Fatalf("rank %d element %d is %g, want %g", r, i, v.Float32(), want[off[r]+i].Float32())
			}
		}
	}
}

// TestVectorBadArguments: counts of the wrong length or negative, and
// buffers that do not hold them, are errors that name the argument.
func TestVectorBadArguments(t *testing.T) {
	ctx := context.Background()
	c := &Collectives{T: newMemNet(3).end(1), Peers: []int{0, 1, 2}, Rank: 1}
	buf := make([]float32, 4)
	counts := []int{1, 2, 3}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"allgatherv counts", AllGatherV(ctx, c, buf[:2], buf, []int{1, 2}), "counts holds 2 counts, want one per rank of the 3"},
		{"allgatherv negative", AllGatherV(ctx, c, buf[:2], buf, []int{1, -2, 3}), "counts[1] is -2"},
		{"allgatherv send", AllGatherV(ctx, c, buf, make([]float32, 6), counts), "send holds 4 elements, want this rank's count, 2"},
		{"allgatherv recv", AllGatherV(ctx, c, buf[:2], buf, counts), "recv holds 4 elements, want the counts' sum, 6"},
		{"gatherv root", GatherV(ctx, c, buf[:2], nil, counts, 3), "root 3 outside the group of 3"},
		{"gatherv send", GatherV(ctx, c, buf, nil, counts, 0), "send holds 4 elements, want this rank's count, 2"},
		{"gatherv recv on root", GatherV(ctx, c, buf[:2], buf, counts, 1), "recv holds 4 elements, want the counts' sum, 6"},
		{"scatterv recv", ScatterV(ctx, c, nil, counts, buf, 0), "recv holds 4 elements, want this rank's count, 2"},
		{"reducescatterv op", ReduceScatterV(ctx, c, []int32{1}, []int32{1}, counts, Avg), "avg needs a floating-point type"},
		{"reducescatterv send", ReduceScatterV(ctx, c, buf, buf[:2], counts, Sum), "send holds 4 elements, want the counts' sum, 6"},
		{"alltoallv sums", AllToAllV(ctx, c, buf, counts, buf, counts), "send holds 4 and recv 4 elements, want the sums of sendCounts and recvCounts, 6 and 6"},
		{"alltoallv self", AllToAllV(ctx, c, make([]float32, 6), counts, make([]float32, 6), []int{2, 1, 3}), "sends itself 2 elements (sendCounts[1]) but receives 1"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, tc.err, tc.want)
		}
	}
}

// TestVectorCountsDisagree: ranks that pass different counts to
// AllGatherV are told so, naming the call and the peer: a different sum
// is a mismatch of calls; the same sum split differently shows in the
// block sizes.
func TestVectorCountsDisagree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts [][]int // per rank
		rank   int     // whose error is checked
		want   []string
	}{
		{"sum", [][]int{{2, 3}, {3, 3}}, 1, []string{"AllGatherV #0 (6 × float32, ring)", "AllGatherV #0 (5 × float32, ring)", "group rank 0"}},
		{"split", [][]int{{2, 3}, {3, 2}}, 0, []string{"AllGatherV #0 (5 × float32, ring): group rank 1 sent 8 bytes, want 12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			net := newMemNet(2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				c := &Collectives{T: net.end(r), Peers: []int{0, 1}, Rank: r}
				cnt := tc.counts[r]
				wg.Go(func() {
					errs[r] = AllGatherV(ctx, c, make([]float32, cnt[r]), make([]float32, cnt[0]+cnt[1]), cnt)
					if r == tc.rank {
						// The peer may wait for a frame that will not come.
						// Only the checked rank cancels: were the peer to,
						// the checked rank could see the cancellation
						// before the disagreement.
						cancel()
					}
				})
			}
			wg.Wait()
			err := errs[tc.rank]
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("rank %d's error: %v, want it to contain %q", tc.rank, err, w)
				}
			}
		})
	}
}
