package comm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
)

// TestRootedBadRoot: a root outside the group is an error naming the call
// and the group's size, from the synchronous and the asynchronous forms,
// and the group still works afterwards.
func TestRootedBadRoot(t *testing.T) {
	ctx := context.Background()
	g := oneRank(t)
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
		{"GatherV", comm.GatherV(ctx, g, buf, buf, []int{2}, 1)},
		{"ScatterV", comm.ScatterVAsync(ctx, g, buf, []int{2}, buf, 3).Wait()},
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
	out[0], out[1] = 0, 0
	if err := comm.AllToAllV(ctx, g, buf, []int{2}, out, []int{2}); err != nil || out[0] != 1 || out[1] != 2 {
		t.Fatalf("AllToAllV on one rank: %v, %v", err, out)
	}
}

// oneRank joins a group of one rank.
func oneRank(t *testing.T) *comm.Group { return commtest.Groups(t, 1)[0] }

// TestVectorBadCounts: v-form counts that do not fit the group or the
// buffers are errors naming the call and what is wrong, from the
// synchronous and the asynchronous forms. (Like every failed collective,
// they end the group: its other ranks are in the call.)
func TestVectorBadCounts(t *testing.T) {
	ctx := context.Background()
	buf := []float32{1, 2}
	for _, tc := range []struct {
		name, want string
		call       func(g *comm.Group) error
	}{
		{"AllGatherV", "counts holds 2 counts, want one per rank of the 1", func(g *comm.Group) error { return comm.AllGatherV(ctx, g, buf, buf, []int{1, 1}) }},
		{"AllGatherV", "recv holds 2 elements, want the counts' sum, 1", func(g *comm.Group) error { return comm.AllGatherVAsync(ctx, g, buf[:1], buf, []int{1}).Wait() }},
		{"GatherV", "counts[0] is -1", func(g *comm.Group) error { return comm.GatherV(ctx, g, buf, buf, []int{-1}, 0) }},
		{"ScatterV", "recv holds 2 elements, want this rank's count, 1", func(g *comm.Group) error { return comm.ScatterV(ctx, g, buf, []int{1}, buf, 0) }},
		{"AllToAllV", "recvCounts holds 0 counts", func(g *comm.Group) error { return comm.AllToAllV(ctx, g, buf, []int{2}, buf, nil) }},
		{"ReduceScatterV", "send holds 2 elements, want the counts' sum, 1", func(g *comm.Group) error {
			return comm.ReduceScatterVAsync(ctx, g, buf, buf[:1], []int{1}, comm.Sum).Wait()
		}},
	} {
		err := tc.call(oneRank(t))
		if err == nil || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming the call and saying %q", tc.name, err, tc.want)
		}
	}
}
