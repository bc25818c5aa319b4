package ring

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestReduceMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 1000, 1003} {
		for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
			a, b, dst := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range a {
				a[i], b[i] = rng.Float32()-0.5, rng.Float32()-0.5
			}
			Reduce(op, dst, a, b)
			for i := range dst {
				var want float32
				switch op {
				case Sum, Avg:
					want = a[i] + b[i]
				case Max:
					want = max(a[i], b[i])
				case Min:
					want = min(a[i], b[i])
				case Prod:
					want = a[i] * b[i]
				}
				if dst[i] != want {
					t.Fatalf("%v n=%d: element %d is %v, want %v", op, n, i, dst[i], want)
				}
			}
			// In place (dst aliasing a), as the ring uses it.
			c := append([]float32(nil), a...)
			Reduce(op, c, c, b)
			for i := range c {
				if c[i] != dst[i] {
					t.Fatalf("%v in place differs at %d", op, i)
				}
			}
		}
	}
}

func TestDivideIsDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 4, 5, 8, 16} {
		v := make([]float32, 101)
		for i := range v {
			v[i] = rng.Float32() * 100
		}
		w := append([]float32(nil), v...)
		Divide(w, n)
		for i := range v {
			if want := v[i] / float32(n); w[i] != want {
				t.Fatalf("n=%d: %v/%d gave %v, want %v", n, v[i], n, w[i], want)
			}
		}
	}
}

func TestValidOp(t *testing.T) {
	if err := ValidOp[int32](Avg); err == nil {
		t.Error("avg on int32 accepted")
	}
	if err := ValidOp[float64](Avg); err != nil {
		t.Error(err)
	}
	if err := ValidOp[float32](Op(99)); err == nil {
		t.Error("unknown op accepted")
	}
}

func TestCallMetaRoundTrip(t *testing.T) {
	c := Call{Seq: 12345, Kind: KindBroadcast, DType: Float64, Op: 0, Algo: AlgoTree, Root: 7, Count: 1 << 40}
	if got := decodeCall(c.meta(3, 4)); got != c {
		t.Fatalf("decoded %+v, want %+v", got, c)
	}
	neg := Call{Kind: KindSend, DType: Int32, Root: -1}
	if got := decodeCall(neg.meta(0, 0)); got.Root != -1 {
		t.Fatalf("negative root decoded as %d", got.Root)
	}
}

func TestCheck(t *testing.T) {
	mine := Call{Seq: 5, Kind: KindAllReduce, DType: Float32, Op: Sum, Algo: AlgoDoubling, Count: 1000}
	theirs := Call{Seq: 5, Kind: KindBroadcast, DType: Float32, Algo: AlgoTree, Count: 2000}
	tooLarge := errors.New("frame larger")
	tests := []struct {
		name    string
		meta    [4]uint64
		n       int
		err     error
		wantErr string
	}{
		{"same call", mine.meta(1, 2), 4000, nil, ""},
		{"other call", theirs.meta(0, 0), 8000, nil, "this rank called AllReduce #5 (1000 × float32, op sum, recursive-doubling) but group rank 3 called Broadcast #5 (2000 × float32, root 0, binomial-tree)"},
		{"other call, also too large", theirs.meta(0, 0), 0, tooLarge, "collective mismatch"},
		{"wrong step", mine.meta(2, 2), 4000, nil, "protocol error"},
		{"short frame", mine.meta(1, 2), 10, nil, "sent 10 bytes, want 4000"},
		{"transport error", [4]uint64{}, 0, tooLarge, "frame larger"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(3, mine, 1, 2, 4000, tc.meta, tc.n, tc.err)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestChunking: the chunks of a range cover it exactly, in order, and an
// empty range still takes one (empty) frame.
func TestChunking(t *testing.T) {
	for _, tc := range []struct{ lo, hi, ce int }{{0, 0, 4}, {3, 3, 4}, {0, 10, 4}, {5, 13, 4}, {0, 8, 4}, {0, 1, 1000}} {
		n := subchunks(tc.lo, tc.hi, tc.ce)
		if n < 1 {
			t.Fatalf("%+v: %d chunks", tc, n)
		}
		next := tc.lo
		for j := range n {
			a, b := sub(tc.lo, tc.hi, tc.ce, j)
			if a != next || b < a || b-a > tc.ce {
				t.Fatalf("%+v: chunk %d is [%d,%d), expected to start at %d", tc, j, a, b, next)
			}
			next = b
		}
		if next != tc.hi {
			t.Fatalf("%+v: chunks end at %d", tc, next)
		}
	}
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, count := range []int{0, 1, n - 1, n + 1, 4097} {
			end := 0
			for k := range n {
				lo, hi := segment(k, n, count)
				if lo != end || hi < lo {
					t.Fatalf("n=%d count=%d: segment %d is [%d,%d)", n, count, k, lo, hi)
				}
				end = hi
			}
			if end != count {
				t.Fatalf("n=%d count=%d: segments end at %d", n, count, end)
			}
		}
	}
}

// TestRingChunkElems: the ring all-reduce cuts a rank's block into four
// chunks where the group's chunk would give it fewer, never below 256 KiB
// nor above the group's chunk.
func TestRingChunkElems(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name         string
		chunk, bytes int // the group's chunk and the message, in bytes
		n            int
		size         uintptr
		want         int // bytes
	}{
		{"1 MiB between two", mib, mib, 2, 4, 256 << 10},
		{"2 MiB between two", mib, 2 * mib, 2, 4, 256 << 10},
		{"4 MiB between two", mib, 4 * mib, 2, 4, 512 << 10},
		{"8 MiB between two: four chunks already", mib, 8 * mib, 2, 4, mib},
		{"64 MiB between two", mib, 64 * mib, 2, 4, mib},
		{"4 MiB among four", mib, 4 * mib, 4, 4, 256 << 10},
		{"float64", mib, 4 * mib, 2, 8, 512 << 10},
		{"TCP's 128 KiB chunks stay", 128 << 10, 2 * mib, 2, 4, 128 << 10},
		{"a test's 64-byte chunks stay", 64, 4 * mib, 2, 4, 64},
	} {
		got := ringChunkElems(tc.chunk/int(tc.size), tc.bytes/int(tc.size), tc.n, tc.size) * int(tc.size)
		if got != tc.want {
			t.Errorf("%s: chunks of %d bytes, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRingChunks runs the ring all-reduce and the ring reduce-scatter
// with the shared-memory groups' 1 MiB chunk on messages whose blocks
// that chunk would leave in one or two pieces, against the sequential
// reference, and counts the frames: four chunks a block, each sent once a
// step (the all-reduce's 2(n−1) steps, the reduce-scatter's n−1).
func TestRingChunks(t *testing.T) {
	for _, tc := range []struct {
		n, count, chunks int // chunks a block
	}{
		{2, 512 << 10, 4}, // 2 MiB: blocks of 1 MiB in 256 KiB chunks
		{2, 1 << 20, 4},   // 4 MiB: blocks of 2 MiB in 512 KiB chunks
		{2, 4 << 20, 8},   // 16 MiB: blocks of 8 MiB in 1 MiB chunks
		{3, 768 << 10, 4}, // 3 MiB among three: blocks of 1 MiB
	} {
		t.Run(fmt.Sprintf("n=%d/count=%d", tc.n, tc.count), func(t *testing.T) {
			in := exactInputs(tc.n, tc.count, Sum)
			want := sequential(Sum, in)
			ringOnly := func(c *Collectives) { c.SmallBytes, c.OneShotBytes, c.ChunkBytes = -1, -1, DefaultChunkBytes }
			net := newMemNet(tc.n)
			checkEveryRank(t, runGroupWith(t, net, tc.n, ringOnly, in, Sum), want)
			if got, frames := net.algos[AlgoRing], tc.n*2*(tc.n-1)*tc.chunks; got != frames || len(net.algos) != 1 {
				t.Fatalf("all-reduce frames %v, want %d of the ring", net.algos, frames)
			}
			net = newMemNet(tc.n)
			block := tc.count / tc.n
			out := make([][]float32, tc.n)
			errs := rankErrorsOn(net, tc.n, ringOnly, func(ctx context.Context, r int, c *Collectives) error {
				out[r] = make([]float32, block)
				return ReduceScatter(ctx, c, in[r], out[r], Sum)
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r := range tc.n {
				if i := firstDiff(out[r], want[r*block:(r+1)*block]); i >= 0 {
					t.Fatalf("reduce-scatter: rank %d element %d is %v, want %v", r, i, out[r][i], want[r*block+i])
				}
			}
			if got, frames := net.algos[AlgoRing], tc.n*(tc.n-1)*tc.chunks; got != frames || len(net.algos) != 1 {
				t.Fatalf("reduce-scatter frames %v, want %d of the ring", net.algos, frames)
			}
		})
	}
}
