package mailbox

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFIFOOrder holds the queue to a plain slice under random pushes and
// pops at several depths, and checks the array stays within four times the
// most items ever waiting: it grows only when more than half of it waits.
func TestFIFOOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		depth int     // items kept waiting, about
		pPush float64 // chance a step pushes (when not at depth)
	}{
		{"empties often", 1, 0.5},
		{"shallow", 4, 0.6},
		{"deep, never empty", 1000, 0.5},
		{"growing", 5000, 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.depth)))
			var q FIFO[int]
			var want []int
			next, most := 0, 0
			for step := range 200_000 {
				push := len(want) == 0 || (len(want) < tc.depth && rng.Float64() < tc.pPush) ||
					(len(want) >= tc.depth && rng.Float64() < 0.5)
				if push {
					q.Push(next)
					want = append(want, next)
					next++
				} else {
					got := q.Pop()
					if got != want[0] {
						t.Fatalf("step %d: popped %d, want %d", step, got, want[0])
					}
					want = want[1:]
				}
				if q.Len() != len(want) {
					t.Fatalf("step %d: Len %d, want %d", step, q.Len(), len(want))
				}
				if len(want) > 0 && q.Back() != want[len(want)-1] {
					t.Fatalf("step %d: Back %d, want %d", step, q.Back(), want[len(want)-1])
				}
				most = max(most, len(want))
			}
			if c := cap(q.items); c > 4*most+16 {
				t.Errorf("array of %d for at most %d waiting items", c, most)
			}
		})
	}
}

// TestFIFOPopReleases: a popped slot no longer holds its item, so the
// collector can have what it points to.
func TestFIFOPopReleases(t *testing.T) {
	var q FIFO[*int]
	for i := range 4 {
		q.Push(&i)
	}
	q.Pop()
	q.Pop()
	for i, p := range q.items[:q.head] {
		if p != nil {
			t.Errorf("popped slot %d still holds its item", i)
		}
	}
}

// TestFIFOSteadyStateAllocatesNothing: a queue kept deep (a peer far
// ahead) pushes and pops without allocating once its array has grown.
func TestFIFOSteadyStateAllocatesNothing(t *testing.T) {
	var q FIFO[int]
	for i := range 10_000 {
		q.Push(i)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 1000 {
			q.Push(i)
			q.Pop()
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per 1000 push-pop pairs, want 0", allocs)
	}
}

// BenchmarkFIFODeep is one push and one pop with 16,384 items waiting
// (a peer that many 8-byte frames ahead); it costs what a shallow queue's
// does.
func BenchmarkFIFODeep(b *testing.B) {
	for _, depth := range []int{1, 16384} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			var q FIFO[*int]
			v := new(int)
			for range depth {
				q.Push(v)
			}
			for b.Loop() {
				q.Push(v)
				q.Pop()
			}
		})
	}
}
