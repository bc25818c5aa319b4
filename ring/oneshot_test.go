package ring

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// memNet connects n in-process endpoints: the k-th frame a rank sends to
// a peer on a stream fills the k-th buffer that peer posted for it.
type memNet struct {
	n     int
	links map[[3]uint32]chan memFrame // from, to, stream
	mu    sync.Mutex
	algos map[Algo]int // algorithms seen in frames' metadata
}

type memFrame struct {
	meta    [4]uint64
	payload []byte
}

func newMemNet(n int) *memNet {
	return &memNet{n: n, links: map[[3]uint32]chan memFrame{}, algos: map[Algo]int{}}
}

func (m *memNet) link(from, to int, stream uint32) chan memFrame {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [3]uint32{uint32(from), uint32(to), stream}
	if m.links[k] == nil {
		m.links[k] = make(chan memFrame, 1024)
	}
	return m.links[k]
}

// memEnd is one rank's end of a memNet; it satisfies Transport.
type memEnd struct {
	net    *memNet
	rank   int
	posted map[[2]uint32][][]byte // peer, stream: buffers by ticket
	filled map[[2]uint32]int      // frames received into them so far
	got    map[[3]uint64][2]int   // peer, stream, ticket: its frame's length, and its index into metas
	metas  [][4]uint64
}

func (m *memNet) end(rank int) *memEnd {
	return &memEnd{net: m, rank: rank, posted: map[[2]uint32][][]byte{}, filled: map[[2]uint32]int{}, got: map[[3]uint64][2]int{}}
}

func (e *memEnd) Send(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error {
	e.net.mu.Lock()
	e.net.algos[decodeCall(meta).Algo]++
	e.net.mu.Unlock()
	e.net.link(e.rank, peer, stream) <- memFrame{meta, append([]byte(nil), payload...)}
	return nil
}

func (e *memEnd) Post(peer int, stream uint32, buf []byte) (uint64, error) {
	k := [2]uint32{uint32(peer), stream}
	e.posted[k] = append(e.posted[k], buf)
	return uint64(len(e.posted[k]) - 1), nil
}

func (e *memEnd) Wait(ctx context.Context, peer int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	k := [2]uint32{uint32(peer), stream}
	for uint64(e.filled[k]) <= ticket {
		select {
		case f := <-e.net.link(peer, e.rank, stream):
			t := e.filled[k]
			buf := e.posted[k][t]
			if len(f.payload) > len(buf) {
				// As the real transports do: the metadata, and an error.
				return f.meta, 0, fmt.Errorf("frame of %d bytes for a %d-byte buffer", len(f.payload), len(buf))
			}
			copy(buf, f.payload)
			e.got[[3]uint64{uint64(peer), uint64(stream), uint64(t)}] = [2]int{len(f.payload), len(e.metas)}
			e.metas = append(e.metas, f.meta)
			e.filled[k]++
		case <-ctx.Done():
			return [4]uint64{}, 0, ctx.Err()
		}
	}
	g := e.got[[3]uint64{uint64(peer), uint64(stream), ticket}]
	return e.metas[g[1]], g[0], nil
}

// TestOneShotAllReduce runs the one-shot all-reduce in process for groups
// of 3 to 8 ranks and checks every rank's result, bit for bit, against
// the contributions combined in rank order; and that frames carried the
// one-shot algorithm exactly when the size allowed it.
func TestOneShotAllReduce(t *testing.T) {
	for _, n := range []int{3, 4, 5, 8} {
		for _, count := range []int{0, 1, 7, 1000} {
			for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
				t.Run(fmt.Sprintf("n=%d/count=%d/%v", n, count, op), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), uint64(count)))
					in := make([][]float32, n)
					for r := range in {
						in[r] = make([]float32, count)
						for i := range in[r] {
							in[r][i] = rng.Float32()*2 - 0.5
						}
					}
					want := sequential(op, in)
					net := newMemNet(n)
					out := runGroup(t, net, n, 4*count, in, op)
					checkEveryRank(t, out, want)
					if net.algos[AlgoOneShot] != n*(n-1) || len(net.algos) != 1 {
						t.Fatalf("frames carried %v, want %d one-shot frames only", net.algos, n*(n-1))
					}
				})
			}
		}
	}
}

// TestAllReduceAlgorithmChoice: one-shot only up to OneShotBytes and only
// among more than two ranks; recursive doubling up to SmallBytes;
// halving-doubling up to HalvingBytes among more than two ranks; the ring
// above.
func TestAllReduceAlgorithmChoice(t *testing.T) {
	tests := []struct {
		n, bytes, oneShot, small, halving int
		want                              Algo
	}{
		{3, 4096, 4096, 0, 0, AlgoOneShot},
		{3, 4100, 4096, 0, 0, AlgoDoubling},
		{2, 8, 4096, 0, 0, AlgoDoubling},
		{4, 8, 0, 0, 0, AlgoDoubling},
		{4, 8, 1 << 20, -1, 0, AlgoOneShot},
		{4, 1 << 20, 4096, 0, 0, AlgoRing},
		{4, 1 << 20, 4096, 0, 1 << 20, AlgoHalving},
		{3, 1<<20 + 4, 4096, 0, 1 << 20, AlgoRing},
		{2, 1 << 20, 4096, 0, 1 << 20, AlgoRing},
		{5, 8, 0, 0, 1 << 20, AlgoDoubling},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%+v", tc), func(t *testing.T) {
			count := tc.bytes / 4
			in := make([][]float32, tc.n)
			for r := range in {
				in[r] = make([]float32, count)
			}
			net := newMemNet(tc.n)
			runGroupWith(t, net, tc.n, func(c *Collectives) { c.OneShotBytes, c.SmallBytes, c.HalvingBytes = tc.oneShot, tc.small, tc.halving }, in, Sum)
			if _, ok := net.algos[tc.want]; !ok || len(net.algos) != 1 {
				t.Fatalf("frames carried %v, want only %v", net.algos, tc.want)
			}
		})
	}
}

// sequential reduces in[0], in[1], … in rank order: the reference the
// algorithms are checked against.
func sequential(op Op, in [][]float32) []float32 {
	want := append([]float32(nil), in[0]...)
	for r := 1; r < len(in); r++ {
		Reduce(op, want, want, in[r])
	}
	if op == Avg {
		Divide(want, len(in))
	}
	return want
}

// checkEveryRank fails unless every rank's result equals want bit for bit.
func checkEveryRank(t *testing.T, out [][]float32, want []float32) {
	t.Helper()
	for r := range out {
		for i := range want {
			if out[r][i] != want[i] {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, out[r][i], want[i])
			}
		}
	}
}

func runGroup(t *testing.T, net *memNet, n, oneShot int, in [][]float32, op Op) [][]float32 {
	return runGroupWith(t, net, n, func(c *Collectives) { c.OneShotBytes = max(oneShot, 1) }, in, op)
}

// runGroupWith all-reduces in[r] on rank r of an in-process group, each
// rank in its own goroutine, and returns the results.
func runGroupWith(t *testing.T, net *memNet, n int, set func(*Collectives), in [][]float32, op Op) [][]float32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	peers := make([]int, n)
	for r := range peers {
		peers[r] = r
	}
	out := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		out[r] = append([]float32(nil), in[r]...)
		c := &Collectives{T: net.end(r), Peers: peers, Rank: r}
		set(c)
		wg.Go(func() { errs[r] = AllReduce(ctx, c, out[r], op) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

// TestMismatchNamesEarlierCall: rank 1 all-reduces while ranks 0 and 2
// broadcast from rank 0. Rank 0, the root, needs nothing from the others
// and completes; it finds the mismatch only in its next call, and its
// error still names its broadcast beside rank 1's all-reduce.
func TestMismatchNamesEarlierCall(t *testing.T) {
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := rankErrors(ctx, n, func(c *Collectives) { c.OneShotBytes = 1 << 20 }, func(ctx context.Context, r int, c *Collectives) error {
		if r == 1 {
			return AllReduce(ctx, c, make([]float32, 1000), Sum)
		}
		if err := Broadcast(ctx, c, make([]float32, 2000), 0); err != nil {
			return err
		}
		return Barrier(ctx, c)
	})
	want := "collective mismatch: group rank 1 called AllReduce #0 (1000 × float32, op sum, one-shot) where this rank called Broadcast #0 (2000 × float32, root 0, "
	if errs[0] == nil || !strings.HasPrefix(errs[0].Error(), want) || !strings.Contains(errs[0].Error(), "this rank is now in Barrier #1") {
		t.Fatalf("rank 0: %v\nwant it to start %q and name the barrier", errs[0], want)
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "this rank called AllReduce #0") {
		t.Fatalf("rank 1: %v", errs[1])
	}
}
