package comm_test

import (
	"context"
	"testing"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
)

// BenchmarkSmallCalls times 8-byte collectives between two ranks of this
// process (shared memory between them, as between two processes of one
// machine): what a call costs beyond its one frame, the transport's own
// cost being shm's BenchmarkOneWay. ns/op is rank 0's time per call;
// rank 1 runs the same calls in another goroutine.
//
//	go test ./comm -run '^$' -bench SmallCalls -count 6
func BenchmarkSmallCalls(b *testing.B) {
	ctx := context.Background()
	gs := commtest.Groups(b, 2)
	for _, tc := range []struct {
		name string
		call func(g *comm.Group, send, recv []float32) error
	}{
		{"reduce", func(g *comm.Group, send, _ []float32) error { return g.Reduce(ctx, send, comm.Sum, 0) }},
		{"gather", func(g *comm.Group, send, recv []float32) error { return g.Gather(ctx, send[:1], recv, 0) }},
		{"scatter", func(g *comm.Group, send, recv []float32) error { return g.Scatter(ctx, send, recv[:1], 0) }},
		{"alltoall", func(g *comm.Group, send, recv []float32) error { return g.AllToAll(ctx, send, recv) }},
		{"allreduce", func(g *comm.Group, send, _ []float32) error { return g.AllReduce(ctx, send, comm.Sum) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := b.N
			done := make(chan error, 1)
			go func() {
				send, recv := make([]float32, 2), make([]float32, 2)
				for range n {
					if err := tc.call(gs[1], send, recv); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			send, recv := make([]float32, 2), make([]float32, 2)
			for range n {
				if err := tc.call(gs[0], send, recv); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
