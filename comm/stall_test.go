package comm

import (
	"testing"

	"github.com/gorun/gorun/ring"
)

// TestAgreedDescription: what the ranks of a call must pass alike, as the
// collectives record it — the count except for the vector forms (each
// rank passes its own), the reduction, the root where there is one.
func TestAgreedDescription(t *testing.T) {
	buf, counts := make([]float32, 6), []int{2, 4}
	for _, tc := range []struct {
		name string
		c    call
		want string
	}{
		{"all-reduce", (&collective[float32]{kind: allReduce, buf: buf, op: Sum, count: 6}).call(), "AllReduce (6 × float32, sum)"},
		{"reduce", (&collective[float64]{kind: reduce, op: Max, root: 1, count: 3}).call(), "Reduce (3 × float64, max, root 1)"},
		{"gather", (&collective[float32]{kind: gather, root: 0, count: 2}).call(), "Gather (2 × float32, root 0)"},
		{"broadcast", (&collective[int32]{kind: broadcast, root: 2, count: 5}).call(), "Broadcast (5 × int32, root 2)"},
		{"all-to-all", (&collective[float32]{kind: allToAll, count: 3}).call(), "AllToAll (3 × float32)"},
		{"barrier", (&collective[float32]{kind: barrier}).call(), "Barrier"},
		{"gatherv: no count", (&collective[float32]{kind: gatherV, counts: counts, root: 1, count: 4}).call(), "GatherV (float32, root 1)"},
		{"alltoallv: no count", (&collective[float32]{kind: allToAllV, counts: counts, count: 6}).call(), "AllToAllV (float32)"},
		{"reducescatterv", (&collective[float32]{kind: reduceScatterV, counts: counts, op: Avg, count: 6}).call(), "ReduceScatterV (float32, avg)"},
		{"staged broadcast", call{kind: "Broadcast", count: 8, dtype: ring.Float32, root: 0, rooted: true}, "Broadcast (8 × float32, root 0)"},
	} {
		if got := tc.c.agreed(); got != tc.want {
			t.Errorf("%s: agreed() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDisagreement: ranks whose latest world call has one number are
// compared, running or past it; ranks in other calls, silent or gone, or
// without a description, are not.
func TestDisagreement(t *testing.T) {
	in := func(seq uint64, agreed string) place {
		return place{running: true, any: true, seq: seq, agreed: agreed}
	}
	past := func(seq uint64, agreed string) place {
		return place{any: true, seq: seq, agreed: agreed}
	}
	gather, scatter := "Gather (4 × float32, root 0)", "Scatter (4 × float32, root 0)"
	for _, tc := range []struct {
		name    string
		places  []place
		replies []reply
		want    string
	}{
		{"agree", []place{in(3, gather), in(3, gather), past(3, gather)}, nil, ""},
		{"one rank differs", []place{in(3, gather), in(3, scatter), in(3, scatter)}, nil,
			"ranks disagree on call #3: rank 0 called " + gather + "; ranks 1, 2 called " + scatter},
		{"past the call counts", []place{in(1, gather), past(1, scatter), in(1, gather)}, nil,
			"ranks disagree on call #1: ranks 0, 2 called " + gather + "; rank 1 called " + scatter},
		{"other calls are not compared", []place{in(3, gather), in(4, scatter), past(2, scatter)}, nil, ""},
		{"lowest call first", []place{in(5, gather), in(5, scatter), in(2, scatter), in(2, gather)}, nil,
			"ranks disagree on call #2: rank 2 called " + scatter + "; rank 3 called " + gather},
		{"silent and gone ranks are not compared", []place{in(3, gather), in(3, scatter), in(3, scatter)},
			[]reply{answered, silent, gone}, ""},
		{"no description: not compared", []place{in(3, gather), in(3, ""), {}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replies := tc.replies
			if replies == nil {
				replies = make([]reply, len(tc.places))
				for i := range replies {
					replies[i] = answered
				}
			}
			if got := disagreement(tc.places, replies); got != tc.want {
				t.Errorf("disagreement = %q, want %q", got, tc.want)
			}
		})
	}
}
