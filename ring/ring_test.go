package ring

import (
	"errors"
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
