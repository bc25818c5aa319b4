package ring

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestHierarchicalAllReduce all-reduces in process over hosts × L ranks,
// hosts given to the ranks in blocks and interleaved, with counts that
// leave a tail (not a multiple of L) and that are smaller than L, for
// every op: every rank ends with the reference (contributions are small
// integers, so any order of additions is exact) and the same bits.
func TestHierarchicalAllReduce(t *testing.T) {
	for _, shape := range []struct{ hosts, l int }{{2, 2}, {3, 2}, {2, 3}, {4, 2}} {
		for _, interleaved := range []bool{false, true} {
			for _, count := range []int{1, 5, 64, 1001} {
				for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
					name := fmt.Sprintf("%dx%d/interleaved=%v/count=%d/%v", shape.hosts, shape.l, interleaved, count, op)
					t.Run(name, func(t *testing.T) { checkHierarchical(t, shape.hosts, shape.l, interleaved, count, op) })
				}
			}
		}
	}
}

func checkHierarchical(t *testing.T, hosts, l int, interleaved bool, count int, op Op) {
	n := hosts * l
	hostOf := func(r int) int {
		if interleaved {
			return r % hosts
		}
		return r / l
	}
	peers := make([]int, n)
	for r := range peers {
		peers[r] = r
	}
	in := make([][]float32, n)
	want := make([]float32, count)
	for r := range in {
		in[r] = make([]float32, count)
		for i := range in[r] {
			in[r][i] = float32((r*7+i*3)%5 + 1)
		}
	}
	for i := range want {
		col := make([]float32, n)
		for r := range in {
			col[r] = in[r][i]
		}
		acc := slices.Clone(col[:1])
		for _, v := range col[1:] {
			Reduce(op, acc, acc, []float32{v})
		}
		if op == Avg {
			Divide(acc, n)
		}
		want[i] = acc[0]
	}
	net := newMemNet(n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := make([][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		end := net.end(r)
		var local, cross []int
		for q := range n {
			if hostOf(q) == hostOf(r) {
				local = append(local, q)
			}
		}
		li := slices.Index(local, r)
		for h := range hosts {
			var onH []int
			for q := range n {
				if hostOf(q) == h {
					onH = append(onH, q)
				}
			}
			cross = append(cross, onH[li])
		}
		c := &Collectives{T: end, Peers: peers, Rank: r, Hier: &Hierarchy{
			Local: &Collectives{T: end, Peers: local, Rank: li, Stream: 1},
			Cross: &Collectives{T: end, Peers: cross, Rank: hostOf(r), Stream: 2},
		}}
		out[r] = slices.Clone(in[r])
		wg.Go(func() { errs[r] = AllReduce(ctx, c, out[r], op) })
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i := range want {
			if out[r][i] != want[i] && !(op == Avg && abs32(out[r][i]-want[i]) <= 1e-6*abs32(want[i])) {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, out[r][i], want[i])
			}
		}
		if !slices.Equal(out[r], out[0]) {
			t.Fatalf("ranks 0 and %d hold different bits", r)
		}
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}
