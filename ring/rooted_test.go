package ring

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// onEveryRank runs fn(ctx, rank, c) for every rank of an in-process group of n
// with ChunkBytes chunk bytes, each in its own goroutine, and fails on
// the first error.
func onEveryRank(t *testing.T, n, chunkBytes int, fn func(ctx context.Context, r int, c *Collectives) error) {
	t.Helper()
	onEveryRankSmall(t, n, chunkBytes, 0, fn)
}

// onEveryRankSmall is onEveryRank with SmallBytes set to smallBytes.
func onEveryRankSmall(t *testing.T, n, chunkBytes, smallBytes int, fn func(ctx context.Context, r int, c *Collectives) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := rankErrors(ctx, n, func(c *Collectives) { c.ChunkBytes, c.SmallBytes = chunkBytes, smallBytes }, fn)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// rankErrors runs fn for each of n in-process ranks (group ranks 0 … n−1
// of one memNet), each in its own goroutine, with its Collectives set up
// by configure (nil: the defaults), and returns their errors by rank.
func rankErrors(ctx context.Context, n int, configure func(c *Collectives), fn func(ctx context.Context, r int, c *Collectives) error) []error {
	return rankErrorsIn(ctx, newMemNet(n), n, configure, fn)
}

// rankErrorsOn is rankErrors on net, with a 20-second limit.
func rankErrorsOn(net *memNet, n int, configure func(c *Collectives), fn func(ctx context.Context, r int, c *Collectives) error) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return rankErrorsIn(ctx, net, n, configure, fn)
}

// rankErrorsIn is rankErrors on net.
func rankErrorsIn(ctx context.Context, net *memNet, n int, configure func(c *Collectives), fn func(ctx context.Context, r int, c *Collectives) error) []error {
	peers := make([]int, n)
	for r := range peers {
		peers[r] = r
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		c := &Collectives{T: net.end(r), Peers: peers, Rank: r}
		if configure != nil {
			configure(c)
		}
		wg.Go(func() { errs[r] = fn(ctx, r, c) })
	}
	wg.Wait()
	return errs
}

// contributions returns n ranks' random inputs of count elements.
func contributions(n, count int) [][]float32 {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(count)))
	in := make([][]float32, n)
	for r := range in {
		in[r] = make([]float32, count)
		for i := range in[r] {
			in[r][i] = rng.Float32()*2 - 0.5
		}
	}
	return in
}

// TestRootedCollectives runs ReduceToRoot (every op), Gather, Scatter and
// AllToAll in process for groups of 1 to 13 ranks, counts 0 to 1500 in
// frames of 64 bytes (many chunks per block; Reduce's tree receives a
// message of up to takeBytes whole, in one frame or several, and adds it
// after, and folds a larger one in chunk by chunk as it lands), and every
// root kind (first, middle, last), against the sequential reference: the
// reduction exactly as the ranks' inputs combine along the binomial tree,
// the rest element for element; the non-root ranks' buffers stay
// untouched.
func TestRootedCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 13} {
		for _, count := range []int{0, 1, 7, 100, 1000, 1500} {
			in := contributions(n, count)
			for _, root := range []int{0, n / 2, n - 1} {
				t.Run(fmt.Sprintf("n=%d/count=%d/root=%d", n, count, root), func(t *testing.T) {
					for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
						checkReduce(t, 0, in, op, root, treeReference(op, in, root))
					}
					gathered := make([]float32, n*count)
					onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
						var recv []float32
						if r == root {
							recv = gathered
						}
						return Gather(ctx, c, in[r], recv, root)
					})
					for r := range n {
						if i := firstDiff(gathered[r*count:(r+1)*count], in[r]); i >= 0 {
							t.Fatalf("Gather: block %d element %d is %v, want %v", r, i, gathered[r*count+i], in[r][i])
						}
					}
					scattered := make([][]float32, n)
					onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
						scattered[r] = make([]float32, count)
						var send []float32
						if r == root {
							send = gathered
						}
						return Scatter(ctx, c, send, scattered[r], root)
					})
					for r := range n {
						if i := firstDiff(scattered[r], in[r]); i >= 0 {
							t.Fatalf("Scatter: rank %d element %d is %v, want %v", r, i, scattered[r][i], in[r][i])
						}
					}
				})
			}
			for _, algo := range []Algo{AlgoPairwise, AlgoBruck} {
				t.Run(fmt.Sprintf("n=%d/count=%d/alltoall/%v", n, count, algo), func(t *testing.T) {
					if algo == AlgoBruck && (n <= 2 || count == 0) {
						t.Skip("Bruck's algorithm runs among more than two ranks, for blocks of at least one element")
					}
					// Rank r's send holds n blocks of count: block p goes to p.
					sends := contributions(n, n*count)
					out := make([][]float32, n)
					onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
						if algo == AlgoBruck {
							c.BruckBytes = 4 * count
						}
						out[r] = make([]float32, n*count)
						if err := AllToAll(ctx, c, sends[r], out[r]); err != nil {
							return err
						}
						if ran := c.history[(c.Seq()-1)%historyCalls].Algo; ran != algo {
							return fmt.Errorf("rank %d ran %v, want %v", r, ran, algo)
						}
						return nil
					})
					for r := range n {
						for p := range n {
							got, want := out[r][p*count:(p+1)*count], sends[p][r*count:(r+1)*count]
							if i := firstDiff(got, want); i >= 0 {
								t.Fatalf("AllToAll: rank %d block %d element %d is %v, want %v", r, p, i, got[i], want[i])
							}
						}
					}
				})
			}
		}
	}
}

// TestReduceScatterGather: Reduce above SmallBytes among more than two
// ranks (here every size: SmallBytes −1) runs as a reduce-scatter and a
// gather to the root, for every op, root kind and counts 0 to 1000 in
// 64-byte frames, against the sequential reference (whole-number inputs:
// exact in any order); the other ranks' buffers stay untouched.
func TestReduceScatterGather(t *testing.T) {
	for _, n := range []int{3, 4, 5, 8} {
		for _, count := range []int{0, 1, 7, 1000} {
			in := integral(n, count)
			for _, root := range []int{0, n / 2, n - 1} {
				for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
					want := append([]float32(nil), in[0]...)
					for r := 1; r < n; r++ {
						Reduce(op, want, want, in[r])
					}
					if op == Avg {
						Divide(want, n)
					}
					checkReduce(t, -1, in, op, root, want)
				}
			}
		}
	}
}

// checkReduce runs ReduceToRoot of in (one slice per rank) with op to
// root, in 64-byte frames and with SmallBytes smallBytes, and checks that
// root ends with want and every other rank with its input.
func checkReduce(t *testing.T, smallBytes int, in [][]float32, op Op, root int, want []float32) {
	t.Helper()
	checkReduceWith(t, func(c *Collectives) { c.ChunkBytes, c.SmallBytes = 64, smallBytes }, in, op, root, want)
}

// checkReduceWith is checkReduce with each rank's Collectives set up by
// configure.
func checkReduceWith(t *testing.T, configure func(c *Collectives), in [][]float32, op Op, root int, want []float32) {
	t.Helper()
	n := len(in)
	out := make([][]float32, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := rankErrors(ctx, n, configure, func(ctx context.Context, r int, c *Collectives) error {
		out[r] = append([]float32(nil), in[r]...)
		return ReduceToRoot(ctx, c, out[r], op, root)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range n {
		w := in[r]
		if r == root {
			w = want
		}
		if i := firstDiff(out[r], w); i >= 0 {
			t.Fatalf("Reduce %v of %d elements to %d among %d: rank %d element %d is %v, want %v", op, len(w), root, n, r, i, out[r][i], w[i])
		}
	}
}

// treeReference reduces in as the binomial tree rooted at root does: each
// virtual rank v adds, in rounds of growing distance, the partial result
// of v+1, v+2, v+4, … (virtual ranks count from the root).
func treeReference(op Op, in [][]float32, root int) []float32 {
	n := len(in)
	acc := make([][]float32, n)
	for v := range n {
		acc[v] = append([]float32(nil), in[(v+root)%n]...)
	}
	for mask := 1; mask < n; mask <<= 1 {
		for v := 0; v+mask < n; v += 2 * mask {
			Reduce(op, acc[v], acc[v], acc[v+mask])
		}
	}
	if op == Avg {
		Divide(acc[0], n)
	}
	return acc[0]
}

// linearReference reduces in as linearReduce does: the root's input,
// then root+1's, root+2's, … added in that order.
func linearReference(op Op, in [][]float32, root int) []float32 {
	n := len(in)
	acc := append([]float32(nil), in[root]...)
	for i := 1; i < n; i++ {
		Reduce(op, acc, acc, in[(root+i)%n])
	}
	if op == Avg {
		Divide(acc, n)
	}
	return acc
}

// TestLinearReduce: Reduces up to LinearReduceBytes among more than two
// ranks add every rank's input at the root in rank order from the root,
// bit for bit as linearReference; larger ones, and two ranks' at any
// size, keep the binomial tree's order. Frames of 64 bytes, so a message
// comes in several.
func TestLinearReduce(t *testing.T) {
	const linear = 400 // bytes: 100 float32
	for _, n := range []int{2, 3, 5, 8} {
		for _, count := range []int{0, 1, 7, 100, 101, 1000} {
			in := contributions(n, count)
			for _, root := range []int{0, n / 2, n - 1} {
				t.Run(fmt.Sprintf("n=%d/count=%d/root=%d", n, count, root), func(t *testing.T) {
					for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
						want := treeReference(op, in, root)
						if n > 2 && 4*count <= linear {
							want = linearReference(op, in, root)
						}
						checkReduceWith(t, func(c *Collectives) { c.ChunkBytes, c.LinearReduceBytes = 64, linear }, in, op, root, want)
					}
				})
			}
		}
	}
}

// TestTreeScatter runs Scatter with TreeScatterBytes set for groups of 2
// to 13 ranks, counts 0 to 100 in frames of 64 bytes (the root's and the
// inner ranks' messages of several frames), every root kind, across the
// threshold (a root's buffer of at most 400 bytes goes down the tree): each
// rank's block is the root's, element for element, the root's send is
// left as it was, and the algorithm that ran is the tree exactly where
// the group has more than two ranks, the blocks an element and the root's
// buffer at most the threshold.
func TestTreeScatter(t *testing.T) {
	const tree = 400 // bytes of the root's buffer
	for _, n := range []int{2, 3, 4, 5, 6, 7, 8, 13} {
		for _, count := range []int{0, 1, 3, 7, 20, 25, 100} {
			in := contributions(n, count)
			var all []float32
			for _, b := range in {
				all = append(all, b...)
			}
			for _, root := range []int{0, 1, n / 2, n - 1} {
				t.Run(fmt.Sprintf("n=%d/count=%d/root=%d", n, count, root), func(t *testing.T) {
					want := AlgoDirect
					if n > 2 && count > 0 && 4*n*count <= tree {
						want = AlgoTree
					}
					send := slices.Clone(all)
					out := make([][]float32, n)
					onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
						c.TreeScatterBytes = tree
						out[r] = make([]float32, count)
						var mine []float32
						if r == root {
							mine = send
						}
						if err := Scatter(ctx, c, mine, out[r], root); err != nil {
							return err
						}
						if ran := c.history[(c.Seq()-1)%historyCalls].Algo; ran != want {
							return fmt.Errorf("rank %d ran %v, want %v", r, ran, want)
						}
						return nil
					})
					for r := range n {
						if i := firstDiff(out[r], in[r]); i >= 0 {
							t.Fatalf("rank %d element %d is %v, want %v", r, i, out[r][i], in[r][i])
						}
					}
					if i := firstDiff(send, all); i >= 0 {
						t.Fatalf("the root's send changed at element %d", i)
					}
				})
			}
		}
	}
}

func firstDiff(got, want []float32) int {
	if len(got) != len(want) {
		return 0
	}
	for i := range want {
		if got[i] != want[i] {
			return i
		}
	}
	return -1
}

// TestRootedBadArguments: a root outside the group, or buffers of the
// wrong length, are errors that say so (on the ranks where they matter),
// before anything is sent.
func TestRootedBadArguments(t *testing.T) {
	ctx := context.Background()
	c := &Collectives{T: newMemNet(3).end(0), Peers: []int{0, 1, 2}, Rank: 0}
	buf := make([]float32, 4)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"reduce root", ReduceToRoot(ctx, c, buf, Sum, 3), "root 3 outside the group of 3"},
		{"reduce op", ReduceToRoot(ctx, c, []int32{1}, Avg, 0), "avg needs a floating-point type"},
		{"gather root", Gather(ctx, c, buf, buf, -1), "root -1 outside"},
		{"gather recv", Gather(ctx, c, buf, buf, 0), "recv holds 4 elements, want 12"},
		{"scatter send", Scatter(ctx, c, buf, buf, 0), "send holds 4 elements, want 12"},
		{"alltoall", AllToAll(ctx, c, buf, buf), "want the same multiple of the 3 ranks"},
		{"alltoall recv", AllToAll(ctx, c, make([]float32, 6), buf), "send holds 6 and recv 4"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, tc.err, tc.want)
		}
	}
}

// TestRootedMismatchNamed: rank 2 reduces while ranks 0 and 1 gather to
// rank 0; the root finds rank 2's frame and names both calls.
func TestRootedMismatchNamed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := rankErrors(ctx, 3, nil, func(ctx context.Context, r int, c *Collectives) error {
		buf := make([]float32, 5)
		if r == 2 {
			return ReduceToRoot(ctx, c, buf, Max, 0)
		}
		var recv []float32
		if r == 0 {
			recv = make([]float32, 15)
		}
		return Gather(ctx, c, buf, recv, 0)
	})
	var m *MismatchError
	if !errors.As(errs[0], &m) || !strings.Contains(m.Error(), "Gather #0 (5 × float32, root 0, direct)") || !strings.Contains(m.Error(), "Reduce #0 (5 × float32, op max, root 0, binomial-tree)") {
		t.Fatalf("the root's error: %v, want a mismatch naming Gather and Reduce", errs[0])
	}
}

// TestAlgorithmMismatchNamed: a rank whose algorithm threshold differs
// from the others' (BruckBytes for an all-to-all, LinearReduceBytes for a
// Reduce, TreeScatterBytes for a Scatter) runs another algorithm than
// they do; the call's frames carry it, so the rank that receives the odd
// frame (rank 0, or for the Scatter the odd rank itself, which expects
// its subtree's blocks from the root) names both algorithms instead of
// mixing frames of two different calls.
func TestAlgorithmMismatchNamed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, odd    int // ranks, and the rank whose setting differs
		at        int // the rank that finds the mismatch
		configure func(c *Collectives)
		call      func(ctx context.Context, c *Collectives) error
		want      [2]string
	}{
		{"alltoall", 3, 2, 0, func(c *Collectives) { c.BruckBytes = 1 << 20 },
			func(ctx context.Context, c *Collectives) error {
				return AllToAll(ctx, c, make([]float32, 6), make([]float32, 6))
			}, [2]string{"pairwise", "bruck"}},
		{"reduce", 4, 1, 0, func(c *Collectives) { c.LinearReduceBytes = 1 << 20 },
			func(ctx context.Context, c *Collectives) error {
				return ReduceToRoot(ctx, c, make([]float32, 6), Sum, 0)
			}, [2]string{"binomial-tree", "direct"}},
		{"scatter", 5, 2, 2, func(c *Collectives) { c.TreeScatterBytes = 1 << 20 },
			func(ctx context.Context, c *Collectives) error {
				var send []float32
				if c.Rank == 0 {
					send = make([]float32, 10)
				}
				return Scatter(ctx, c, send, make([]float32, 2), 0)
			}, [2]string{"binomial-tree", "direct"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			errs := rankErrors(ctx, tc.n, func(c *Collectives) {
				if c.Rank == tc.odd {
					tc.configure(c)
				}
			}, func(ctx context.Context, _ int, c *Collectives) error { return tc.call(ctx, c) })
			var m *MismatchError // the others may wait out the context
			if !errors.As(errs[tc.at], &m) || !strings.Contains(m.Error(), tc.want[0]) || !strings.Contains(m.Error(), tc.want[1]) {
				t.Fatalf("rank %d's error: %v, want a mismatch naming %s and %s", tc.at, errs[tc.at], tc.want[0], tc.want[1])
			}
		})
	}
}

// directEnd is a memEnd that also offers SendDirect (ring.DirectSender),
// counting the frames sent through it by kind of call.
type directEnd struct {
	*memEnd
	direct map[Kind]int
}

func (e *directEnd) SendDirect(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error {
	e.direct[decodeCall(meta).Kind]++
	return e.memEnd.Send(ctx, peer, stream, meta, payload)
}

// TestDirectFramesWhereEveryRankCopies: of the collectives, the
// all-to-alls (pairwise exchange) send every chunk of every block
// through a transport's DirectSender where the group has two ranks, and
// chunks of directBytes or more in larger groups; so do, for chunks of
// directBytes or more, the all-gathers (every rank forwards what it
// receives, with no arithmetic) and a broadcast its tree's last send from
// each rank (the root's, to rank 1, here) and a chain's only chunk; the
// others, whose chunks stream one way or are added in as they land, and
// the smaller chunks, use Send.
func TestDirectFramesWhereEveryRankCopies(t *testing.T) {
	for _, tc := range []struct {
		name         string
		n            int  // ranks
		chunk, count int  // bytes a chunk; elements a block, which make 4 chunks
		exchanges    bool // the all-to-alls send direct frames
		forwards     bool // the all-gathers and broadcasts do
	}{
		{"two ranks, small chunks", 2, 1024, 1000, true, false},
		{"three ranks, small chunks", 3, 1024, 1000, false, false},
		{"two ranks, chunks of directBytes", 2, directBytes, directBytes, true, true},
		{"three ranks, chunks of directBytes", 3, directBytes, directBytes, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, chunk, count := tc.n, tc.chunk, tc.count
			ends := make([]*directEnd, n)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			configure := func(c *Collectives) {
				ends[c.Rank] = &directEnd{memEnd: c.T.(*memEnd), direct: map[Kind]int{}}
				c.T, c.ChunkBytes = ends[c.Rank], chunk
				c.SmallBytes = 4 * n * count // the broadcast's tree
			}
			errs := rankErrors(ctx, n, configure, func(ctx context.Context, r int, c *Collectives) error {
				all, mine := make([]float32, n*count), make([]float32, count)
				counts := make([]int, n)
				for i := range counts {
					counts[i] = count
				}
				for _, call := range []func() error{
					func() error { return AllToAll(ctx, c, make([]float32, n*count), all) },
					func() error { return AllToAllV(ctx, c, make([]float32, n*count), counts, all, counts) },
					func() error { return Gather(ctx, c, mine, all, 0) },
					func() error { return Scatter(ctx, c, all, mine, 0) },
					func() error { return ReduceToRoot(ctx, c, all, Sum, 0) },
					func() error { return AllReduce(ctx, c, all, Sum) },
					func() error { return Broadcast(ctx, c, all, 0) },
					func() error { // a chain of one chunk
						c.SmallBytes = 1
						defer func() { c.SmallBytes = 4 * n * count }()
						return Broadcast(ctx, c, make([]float32, chunk/4), 0)
					},
					func() error { return AllGather(ctx, c, mine, all) },
					func() error { return ReduceScatter(ctx, c, all, mine, Sum) },
				} {
					if err := call(); err != nil {
						return err
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			blockChunks := (4*count + chunk - 1) / chunk
			for r, e := range ends {
				want := map[Kind]int{}
				if tc.exchanges {
					want[KindAllToAll] = (n - 1) * blockChunks
					want[KindAllToAllV] = (n - 1) * blockChunks
				}
				if tc.forwards {
					want[KindAllGather] = (n - 1) * blockChunks
					// Broadcasts from rank 0: the tree's root sends to
					// rank 1 direct (and to rank 2 through the rings);
					// the chain's ranks but the last send their one chunk
					// on direct.
					if b := map[int]int{0: 2, 1: n - 2}[r]; b > 0 {
						want[KindBroadcast] = b
					}
				}
				if !maps.Equal(e.direct, want) {
					t.Errorf("rank %d sent direct frames %v, want %v", r, e.direct, want)
				}
			}
		})
	}
}

// recvEnd is a memEnd that also offers Recv (ring.Recver), counting the
// frames received through it by kind of call.
type recvEnd struct {
	*memEnd
	recvd map[Kind]int
}

func (e *recvEnd) Recv(ctx context.Context, peer int, stream uint32, buf []byte) ([4]uint64, int, bool, error) {
	tk, err := e.memEnd.Post(peer, stream, buf)
	if err != nil {
		return [4]uint64{}, 0, true, err
	}
	meta, n, err := e.memEnd.Wait(ctx, peer, stream, tk)
	e.recvd[decodeCall(meta).Kind]++
	return meta, n, true, err
}

// TestRecvWhereNothingElseIsPosted: the receives that nothing is posted
// before and nothing is sent during — a Scatter's block of one chunk off
// the root, a broadcast tree's frame from the parent, a Gather's blocks
// at the root and, among more than two ranks, an all-to-all's blocks
// (every block this rank sends already sent) when each is one small
// frame — go through a transport's Recver, and the results are the
// sequential reference's; blocks of several chunks post and wait, and a
// two-rank all-to-all sends and receives in one call.
func TestRecvWhereNothingElseIsPosted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		count int // elements a block
		chunk int // bytes
		want  func(r int) map[Kind]int
	}{
		{"two ranks, one chunk", 2, 100, 1024, func(r int) map[Kind]int {
			if r == 0 {
				return map[Kind]int{KindGather: 1}
			}
			return map[Kind]int{KindScatter: 1, KindBroadcast: 1}
		}},
		{"three ranks, one chunk", 3, 100, 1024, func(r int) map[Kind]int {
			if r == 0 {
				return map[Kind]int{KindGather: 2, KindAllToAll: 2}
			}
			return map[Kind]int{KindScatter: 1, KindBroadcast: 1, KindAllToAll: 2}
		}},
		{"two ranks, several chunks", 2, 1000, 1024, func(r int) map[Kind]int {
			if r == 0 {
				return map[Kind]int{}
			}
			return map[Kind]int{KindBroadcast: 1} // the tree's one frame
		}},
		{"three ranks, one chunk over takeBytes", 3, takeBytes/4 + 1, 4 * takeBytes, func(r int) map[Kind]int {
			if r == 0 {
				return map[Kind]int{}
			}
			return map[Kind]int{KindScatter: 1, KindBroadcast: 1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, count := tc.n, tc.count
			in := contributions(n, n*count)
			ends := make([]*recvEnd, n)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			configure := func(c *Collectives) {
				ends[c.Rank] = &recvEnd{memEnd: c.T.(*memEnd), recvd: map[Kind]int{}}
				c.T, c.ChunkBytes, c.SmallBytes = ends[c.Rank], tc.chunk, 1<<20
			}
			errs := rankErrors(ctx, n, configure, func(ctx context.Context, r int, c *Collectives) error {
				mine := make([]float32, count)
				if err := Scatter(ctx, c, in[0], mine, 0); err != nil {
					return err
				}
				if !slices.Equal(mine, in[0][r*count:(r+1)*count]) {
					return fmt.Errorf("rank %d: Scatter gave the wrong block", r)
				}
				all := slices.Clone(in[r])
				if err := Broadcast(ctx, c, all, 0); err != nil {
					return err
				}
				if !slices.Equal(all, in[0]) {
					return fmt.Errorf("rank %d: Broadcast gave another buffer than the root's", r)
				}
				gathered := make([]float32, n*count)
				if err := Gather(ctx, c, in[r][:count], gathered, 0); err != nil {
					return err
				}
				for q := 0; r == 0 && q < n; q++ {
					if !slices.Equal(gathered[q*count:(q+1)*count], in[q][:count]) {
						return fmt.Errorf("Gather: block %d is not rank %d's", q, q)
					}
				}
				swapped := make([]float32, n*count)
				if err := AllToAll(ctx, c, in[r], swapped); err != nil {
					return err
				}
				for q := range n {
					if !slices.Equal(swapped[q*count:(q+1)*count], in[q][r*count:(r+1)*count]) {
						return fmt.Errorf("rank %d: AllToAll: block %d is not rank %d's block %d", r, q, q, r)
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r, e := range ends {
				if want := tc.want(r); !maps.Equal(e.recvd, want) {
					t.Errorf("rank %d received %v through Recv, want %v", r, e.recvd, want)
				}
			}
		})
	}
}

// TestMessageChunks checks the frames the rooted collectives and the chain
// broadcast cut a message into with the default 1 MiB chunk
// (messageChunkElems): four where whole chunks would leave fewer, for
// messages of 1 MiB or more, the group's chunk otherwise — and that each
// call's result is still exact; and the same frames with a 128 KiB chunk
// and 1 MiB messages (MessageChunkBytes, a group on one host over TCP),
// the all-to-all's then in the group's 128 KiB chunks.
func TestMessageChunks(t *testing.T) {
	const root = 1
	kinds := []struct {
		name string
		run  func(ctx context.Context, c *Collectives, in [][]float32, r, n int) ([]float32, error)
		want func(in [][]float32, r int) []float32 // nil: not defined on rank r
		// messages: how many messages of count elements the call sends
		messages func(n int) int
		// groupChunk: the messages keep the group's 1 MiB chunk (the
		// all-to-all's direct frames)
		groupChunk bool
	}{
		{"reduce", func(ctx context.Context, c *Collectives, in [][]float32, r, n int) ([]float32, error) {
			buf := slices.Clone(in[r])
			return buf, ReduceToRoot(ctx, c, buf, Sum, root)
		}, func(in [][]float32, r int) []float32 {
			if r != root {
				return nil
			}
			return sequential(Sum, in)
		}, func(n int) int { return n - 1 }, false},
		{"broadcast", func(ctx context.Context, c *Collectives, in [][]float32, r, n int) ([]float32, error) {
			buf := slices.Clone(in[r])
			return buf, Broadcast(ctx, c, buf, root)
		}, func(in [][]float32, r int) []float32 { return in[root] }, func(n int) int { return n - 1 }, false},
		{"scatter", func(ctx context.Context, c *Collectives, in [][]float32, r, n int) ([]float32, error) {
			var send []float32
			if r == root {
				for q := range n {
					send = append(send, in[q]...)
				}
			}
			recv := make([]float32, len(in[r]))
			return recv, Scatter(ctx, c, send, recv, root)
		}, func(in [][]float32, r int) []float32 { return in[r] }, func(n int) int { return n - 1 }, false},
		{"gather", func(ctx context.Context, c *Collectives, in [][]float32, r, n int) ([]float32, error) {
			var recv []float32
			if r == root {
				recv = make([]float32, n*len(in[r]))
			}
			return recv, Gather(ctx, c, in[r], recv, root)
		}, func(in [][]float32, r int) []float32 {
			if r != root {
				return nil
			}
			var all []float32
			for _, b := range in {
				all = append(all, b...)
			}
			return all
		}, func(n int) int { return n - 1 }, false},
		{"alltoall", func(ctx context.Context, c *Collectives, in [][]float32, r, n int) ([]float32, error) {
			var send []float32 // block q: in[(r+q)%n]
			for q := range n {
				send = append(send, in[(r+q)%n]...)
			}
			recv := make([]float32, len(send))
			return recv, AllToAll(ctx, c, send, recv)
		}, func(in [][]float32, r int) []float32 {
			var all []float32 // block p: rank p's block r
			for p := range in {
				all = append(all, in[(p+r)%len(in)]...)
			}
			return all
		}, func(n int) int { return n * (n - 1) }, true},
	}
	for _, cfg := range []struct{ chunk, message int }{{DefaultChunkBytes, 0}, {128 << 10, DefaultChunkBytes}} {
		for _, k := range kinds {
			for _, tc := range []struct {
				n, count, chunks int // chunks a message of count float32s
			}{
				{2, 192 << 10, 1},  // 768 KiB: one chunk, as before
				{2, 256 << 10, 4},  // 1 MiB in 256 KiB chunks
				{2, 320 << 10, 4},  // 1.25 MiB in 320 KiB chunks
				{2, 512 << 10, 4},  // 2 MiB in 512 KiB chunks
				{2, 1280 << 10, 5}, // 5 MiB in 1 MiB chunks
				{3, 256 << 10, 4},  // among three: a gather's blocks from two ranks at once
				{3, 1 << 20, 4},
			} {
				if k.name == "reduce" && tc.n > 2 {
					continue // a reduce-scatter and a gather (the ring's rule)
				}
				t.Run(fmt.Sprintf("chunk=%d/message=%d/%s/n=%d/count=%d", cfg.chunk, cfg.message, k.name, tc.n, tc.count), func(t *testing.T) {
					in := exactInputs(tc.n, tc.count, Sum)
					net := newMemNet(tc.n)
					out := make([][]float32, tc.n)
					big := func(c *Collectives) { c.SmallBytes, c.ChunkBytes, c.MessageChunkBytes = -1, cfg.chunk, cfg.message }
					errs := rankErrorsOn(net, tc.n, big, func(ctx context.Context, r int, c *Collectives) error {
						var err error
						out[r], err = k.run(ctx, c, in, r, tc.n)
						return err
					})
					if err := errors.Join(errs...); err != nil {
						t.Fatal(err)
					}
					for r := range tc.n {
						if want := k.want(in, r); want != nil {
							if i := firstDiff(out[r], want); i >= 0 {
								t.Fatalf("rank %d element %d differs", r, i)
							}
						}
					}
					frames := 0
					for _, f := range net.algos {
						frames += f
					}
					chunks := tc.chunks
					if k.groupChunk {
						per := cfg.chunk / 4 // float32s a chunk
						chunks = (tc.count + per - 1) / per
					}
					if want := k.messages(tc.n) * chunks; frames != want {
						t.Fatalf("frames %v, want %d (%d a message)", net.algos, want, chunks)
					}
				})
			}
		}
	}
}
