package comm_test

import (
	"context"
	"net"
	"testing"

	"github.com/gorun/gorun/comm"
)

// TestSynchronousCollectivesAllocateNothing: in steady state a synchronous
// all-reduce (both algorithms) and barrier allocate nothing on a 2-rank
// group in this process.
func TestSynchronousCollectivesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates; counted without it")
	}
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	groups := make([]*comm.Group, 2)
	errs := make(chan error, 2)
	for r := range 2 {
		s := mustSettings(t, r, port)
		if r == 0 {
			s.StoreFD = int(f.Fd())
		}
		go func() {
			g, err := comm.Join(ctx, s)
			groups[r] = g
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		done := make(chan struct{})
		go func() { groups[1].Close(); close(done) }()
		groups[0].Close()
		<-done
	}()
	type collective struct {
		name string
		call func(g *comm.Group, buf []float32) error
	}
	collectives := []collective{
		{"AllReduce", func(g *comm.Group, buf []float32) error { return g.AllReduce(ctx, buf, comm.Sum) }},
		{"Broadcast", func(g *comm.Group, buf []float32) error { return g.Broadcast(ctx, buf, 0) }},
		{"Barrier", func(g *comm.Group, _ []float32) error { return g.Barrier(ctx) }},
	}
	for _, c := range collectives {
		for _, n := range []int{2, 1 << 18} { // latency-bound, then pipelined algorithms
			bufs := [][]float32{make([]float32, n), make([]float32, n)}
			peer := make(chan error, 1)
			round := func() {
				go func() { peer <- c.call(groups[1], bufs[1]) }()
				if err := c.call(groups[0], bufs[0]); err != nil {
					t.Fatal(err)
				}
				if err := <-peer; err != nil {
					t.Fatal(err)
				}
			}
			for range 5 {
				round()
			}
			// The helper goroutine for rank 1 costs a fixed amount; measure
			// rank 0 alone by subtracting a round of just that.
			base := testing.AllocsPerRun(50, func() {
				go func() { peer <- nil }()
				<-peer
			})
			if got := testing.AllocsPerRun(50, round) - base; got > 0.5 {
				t.Errorf("%s of %d floats: %.1f allocations per call pair beyond the test's own, want 0", c.name, n, got)
			}
		}
	}
}
func mustSettings(t *testing.T, rank, port int) comm.Settings {
	t.Helper()
	s, err := comm.ResolveSettings(func(string) string { return "" },
		comm.WithRank(rank, 2), comm.WithMaster("127.0.0.1", port), comm.WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
