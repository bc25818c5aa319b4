package train

import (
	"slices"
	"testing"
)

// TestInterleavedOrder: for p = 2–4 stages, v = 1–3 chunks and m = 1–12
// microbatches, every rank runs each microbatch's forward and backward
// through each of its chunks once, in an order all ranks can follow
// together without waiting on each other in a cycle; v = 1 is 1F1B's
// order; and where the order needs no repair, a chunk holds no more
// microbatches than the warm-up plus one.
func TestInterleavedOrder(t *testing.T) {
	for p := 2; p <= 4; p++ {
		for v := 1; v <= 3; v++ {
			for m := 1; m <= 12; m++ {
				orders := interleavedOrders(p, v, m)
				if stuck := simulate(orders, p, v); len(stuck) > 0 {
					t.Fatalf("p=%d v=%d m=%d: ranks %v wait forever", p, v, m, stuck)
				}
				for r, order := range orders {
					var want []pass
					for c := range v {
						for k := range m {
							want = append(want, pass{PassForward, c, k}, pass{PassBackward, c, k})
						}
					}
					got := slices.Clone(order)
					less := func(a, b pass) int { return (a.chunk*m+a.micro)*2 + int(a.kind) - (b.chunk*m+b.micro)*2 - int(b.kind) }
					slices.SortFunc(got, less)
					slices.SortFunc(want, less)
					if !slices.Equal(got, want) {
						t.Fatalf("p=%d v=%d m=%d rank %d: passes %v, want each forward and backward once", p, v, m, r, order)
					}
					warm := 2*(p-r-1) + (v-1)*p
					if v == 1 {
						warm = p - r - 1
					}
					if !slices.Equal(order, orderWithWarmup(p, v, m, warm)) {
						if m%p == 0 {
							t.Errorf("p=%d v=%d m=%d rank %d: a multiple of p needed a longer warm-up", p, v, m, r)
						}
						continue
					}
					for c, n := range slotsNeeded(order, v) {
						if n > min(warm+1, m) {
							t.Errorf("p=%d v=%d m=%d rank %d chunk %d holds %d microbatches, more than %d", p, v, m, r, c, n, min(warm+1, m))
						}
					}
				}
			}
		}
	}
	// v = 1 is 1F1B's order.
	for p := 2; p <= 4; p++ {
		for m := 1; m <= 8; m++ {
			for r, order := range interleavedOrders(p, 1, m) {
				warm := min(p-r-1, m)
				var oneF []pass
				for k := range warm {
					oneF = append(oneF, pass{PassForward, 0, k})
				}
				for k := range m - warm {
					oneF = append(oneF, pass{PassForward, 0, warm + k}, pass{PassBackward, 0, k})
				}
				for k := m - warm; k < m; k++ {
					oneF = append(oneF, pass{PassBackward, 0, k})
				}
				if !slices.Equal(order, oneF) {
					t.Fatalf("p=%d m=%d rank %d: %v, want 1F1B's %v", p, m, r, order, oneF)
				}
			}
		}
	}
	// The case Megatron-LM's warm-up leaves in a cycle is repaired.
	if stuck := simulate([][]pass{
		orderWithWarmup(4, 3, 5, 14), orderWithWarmup(4, 3, 5, 12), orderWithWarmup(4, 3, 5, 10), orderWithWarmup(4, 3, 5, 8),
	}, 4, 3); len(stuck) == 0 {
		t.Errorf("p=4 v=3 m=5 with Megatron-LM's warm-up finishes; the test of the repair tests nothing")
	}
}
