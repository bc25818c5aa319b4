package comm_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm"
)

// TestRootedBadRoot: a root outside the group is an error naming the call
// and the group's size, from the synchronous and the asynchronous forms,
// and the group still works afterwards.
func TestRootedBadRoot(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s, err := comm.ResolveSettings(func(string) string { return "" },
		comm.WithRank(0, 1), comm.WithMaster("127.0.0.1", port), comm.WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := comm.Join(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	buf := []float32{1, 2}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"Reduce", g.Reduce(ctx, buf, comm.Sum, 1)},
		{"Reduce", g.ReduceAsync(ctx, buf, comm.Sum, -1).Wait()},
		{"Gather", g.Gather(ctx, buf, buf, 2)},
		{"Gather", g.GatherAsync(ctx, buf, buf, 5).Wait()},
		{"Scatter", g.Scatter(ctx, buf, buf, 1)},
		{"Scatter", g.ScatterAsync(ctx, buf, buf, 1).Wait()},
		{"Broadcast", g.Broadcast(ctx, buf, 1)},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.name) || !strings.Contains(tc.err.Error(), "outside the group of 1") {
			t.Errorf("%s with a bad root: %v", tc.name, tc.err)
		}
	}
	// One rank: every collective is a copy.
	if err := g.Reduce(ctx, buf, comm.Avg, 0); err != nil || buf[0] != 1 || buf[1] != 2 {
		t.Fatalf("Reduce on one rank: %v, %v", err, buf)
	}
	out := make([]float32, 2)
	if err := g.AllToAll(ctx, buf, out); err != nil || out[1] != 2 {
		t.Fatalf("AllToAll on one rank: %v, %v", err, out)
	}
}
