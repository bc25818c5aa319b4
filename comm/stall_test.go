package comm

import (
	"slices"
	"strings"
	"testing"
	"time"

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
		{"barrier", (&collective[uint8]{kind: barrier, count: -1}).call(), "Barrier"},
		{"gatherv: no count", (&collective[float32]{kind: gatherV, counts: counts, root: 1, count: 4}).call(), "GatherV (float32, root 1)"},
		{"alltoallv: no count", (&collective[float32]{kind: allToAllV, counts: counts, count: 6}).call(), "AllToAllV (float32)"},
		{"reducescatterv", (&collective[float32]{kind: reduceScatterV, counts: counts, op: Avg, count: 6}).call(), "ReduceScatterV (float32, avg)"},
		{"staged broadcast", call{kind: "Broadcast", count: 8, dtype: ring.Float32, root: 3}, "Broadcast (8 × float32, root 3)"},
	} {
		if got := tc.c.agreed(); got != tc.want {
			t.Errorf("%s: agreed() = %q, want %q", tc.name, got, tc.want)
		}
	}
	// Every kind: agreed knows the kinds by name, so each must name its
	// root exactly where it has one and its count where ranks share it.
	rooted := map[collectiveKind]bool{broadcast: true, reduce: true, gather: true, scatter: true, gatherV: true, scatterV: true}
	own := map[collectiveKind]bool{allGatherV: true, gatherV: true, scatterV: true, allToAllV: true, reduceScatterV: true}
	for k := range collectiveKind(len(collectiveNames)) {
		if k == barrier {
			continue
		}
		got := (&collective[float32]{kind: k, root: 7, count: 5}).call().agreed()
		if strings.Contains(got, "root 7") != rooted[k] || strings.Contains(got, "5 × ") == own[k] {
			t.Errorf("%s: agreed() = %q; want the root named %v, the count %v", collectiveNames[k], got, rooted[k], !own[k])
		}
	}
}

// TestDisagreement: the calls made by ranks whose latest call of a group
// has one number are compared, running or past it; calls of other numbers
// or other groups, ranks silent or gone, and calls without a description
// are not.
func TestDisagreement(t *testing.T) {
	at := func(seq uint64, agreed string, sub ...made) place {
		return place{any: true, seq: seq, made: append([]made{{seq: seq, agreed: agreed}}, sub...)}
	}
	sub := func(group string, seq uint64, agreed string) made { return made{group, seq, agreed} }
	gather, scatter := "Gather (4 × float32, root 0)", "Scatter (4 × float32, root 0)"
	a, b := "sub-group 1 (world ranks 0, 2)", "sub-group 1 (world ranks 1, 3)"
	for _, tc := range []struct {
		name    string
		places  []place
		replies []reply
		want    string
	}{
		{"agree", []place{at(3, gather), at(3, gather), at(3, gather)}, nil, ""},
		{"one rank differs", []place{at(3, gather), at(3, scatter), at(3, scatter)}, nil,
			"ranks disagree on call #3: rank 0 called " + gather + "; ranks 1, 2 called " + scatter},
		{"ranks 0 and 2 alike", []place{at(1, gather), at(1, scatter), at(1, gather)}, nil,
			"ranks disagree on call #1: ranks 0, 2 called " + gather + "; rank 1 called " + scatter},
		{"other calls are not compared", []place{at(3, gather), at(4, scatter), at(2, scatter)}, nil, ""},
		{"lowest call first", []place{at(5, gather), at(5, scatter), at(2, scatter), at(2, gather)}, nil,
			"ranks disagree on call #2: rank 2 called " + scatter + "; rank 3 called " + gather},
		{"silent and gone ranks are not compared", []place{at(3, gather), at(3, scatter), at(3, scatter)},
			[]reply{answered, silent, gone}, ""},
		{"no description: not compared", []place{at(3, gather), at(3, ""), {}}, nil, ""},
		{"sibling sub-groups sharing an id are not compared", []place{
			at(1, gather, sub(a, 0, gather)), at(1, gather, sub(b, 0, scatter)),
			at(1, gather, sub(a, 0, gather)), at(1, gather, sub(b, 0, scatter))}, nil, ""},
		{"a sub-group's members differ", []place{
			at(1, gather, sub(a, 0, gather)), at(1, gather, sub(b, 0, gather)),
			at(1, gather, sub(a, 0, scatter)), at(1, gather, sub(b, 0, gather))}, nil,
			"ranks disagree on call #0 of " + a + ": rank 0 called " + gather + "; rank 2 called " + scatter},
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

// TestMadeEncoding: the calls made an answer carries come back as sent,
// the text after them intact; a cut answer is refused, not misread.
func TestMadeEncoding(t *testing.T) {
	calls := []made{{"", 7, "AllReduce (10 × float32, sum)"}, {"sub-group 2 (world ranks 0, 1)", 0, "Barrier"}, {"x", 1 << 40, ""}}
	b := appendMade(nil, calls)
	got, rest, ok := decodeMade(append(b, "in call #7"...))
	if !ok || !slices.Equal(got, calls) || string(rest) != "in call #7" {
		t.Fatalf("decodeMade = %v, %q, %v; want %v, %q, true", got, rest, ok, calls, "in call #7")
	}
	for n := range len(b) {
		if _, _, ok := decodeMade(b[:n]); ok {
			t.Errorf("decodeMade accepted the first %d of %d bytes", n, len(b))
		}
	}
	long := strings.Repeat("x", 3*maxAgreed)
	got, _, ok = decodeMade(appendMade(nil, []made{{long, 1, long}}))
	if !ok || len(got) != 1 || len(got[0].group) != maxAgreed || len(got[0].agreed) != maxAgreed {
		t.Errorf("a long call made came back as %d calls, ok %v; want one, its strings cut to %d bytes", len(got), ok, maxAgreed)
	}
}

// TestHereCarriesGroupCalls: where a rank says it is carries the latest
// call of the world group and of each sub-group, newest sub-group first,
// and never a receive's (receives are not calls ranks make alike).
func TestHereCarriesGroupCalls(t *testing.T) {
	w := newStallWatch(&Settings{Rank: 0, Size: 2})
	world := &activity{clock: &w.clock}
	w.act = world
	older := &activity{label: "sub-group 1", group: "sub-group 1 (world ranks 0, 1)", clock: &w.clock}
	newer := &activity{label: "sub-group 2", group: "sub-group 2 (world ranks 0, 1)", clock: &w.clock}
	recv := &activity{label: "receives", clock: &w.clock}
	unused := &activity{label: "sub-group 3", group: "sub-group 3 (world ranks 0, 1)", clock: &w.clock}
	w.acts.add(older, recv, newer, unused)
	world.begin(4, (&collective[float32]{kind: allReduce, op: Sum, count: 3}).call())
	older.begin(1, (&collective[float32]{kind: gather, count: 2}).call())
	older.end()
	newer.begin(0, (&collective[float32]{kind: barrier, count: -1}).call())
	recv.begin(9, call{kind: recvKind, count: 5, dtype: ring.Float32, src: 1, tag: 2})
	want := []made{
		{"", 4, "AllReduce (3 × float32, sum)"},
		{"sub-group 2 (world ranks 0, 1)", 0, "Barrier"},
		{"sub-group 1 (world ranks 0, 1)", 1, "Gather (2 × float32, root 0)"},
	}
	if got := w.here(time.Now()).made; !slices.Equal(got, want) {
		t.Errorf("here().made = %v, want %v", got, want)
	}
}

// TestStallWatchTickAllocatesNothing: the stall watch's look at every
// tick (ten a second, for the whole job) allocates nothing while calls
// run short of the report threshold; where's text is built only for a
// report.
func TestStallWatchTickAllocatesNothing(t *testing.T) {
	w := newStallWatch(&Settings{Rank: 0, Size: 2, StallAfter: time.Hour})
	world := &activity{clock: &w.clock}
	w.act = world
	sub := &activity{label: "sub-group 1", group: "sub-group 1 (world ranks 0, 1)", clock: &w.clock}
	recv := &activity{label: "receives", clock: &w.clock}
	w.acts.add(sub, recv)
	w.clock.tick(time.Now())
	world.begin(7, (&collective[float32]{kind: allReduce, op: Sum, count: 3}).call())
	sub.begin(2, (&collective[float32]{kind: gather, count: 2}).call())
	sub.end()
	recv.begin(9, call{kind: recvKind, count: 5, dtype: ring.Float32, src: 1, tag: 2})
	state := map[*activity]*watchedCall{}
	var list []*activity
	tick := func() {
		now := time.Now()
		w.clock.tick(now)
		list = w.acts.appendTo(append(list[:0], w.act))
		w.look(now, list, state)
	}
	tick() // the first look meets each activity
	if n := testing.AllocsPerRun(100, tick); n != 0 {
		t.Errorf("a tick allocated %.1f times, want 0", n)
	}
	if st := state[world]; st == nil || st.seq != 7 || st.next != time.Hour {
		t.Errorf("the running world call is watched as %+v, want call 7, next report after an hour", st)
	}
}

// TestJoinCallsDescribed: a rank whose last call was one of the join's own
// (comm.Init's) is described as having made none of its own — to the
// stall table and to the peers of a rank that closes its group — where
// the program's own calls are named by number.
func TestJoinCallsDescribed(t *testing.T) {
	var clock coarseClock
	a := &activity{clock: &clock}
	allReduce := (&collective[float32]{kind: allReduce, op: Max, count: 1}).call()
	barrier := (&collective[float32]{kind: barrier, count: -1}).call()
	for _, step := range []struct {
		do              func()
		where, farewell string
	}{
		{func() {}, "has made no collective call yet", "before any collective call"},
		{func() { a.begin(0, allReduce) }, "in call #0 (AllReduce, 1 × float32)", "during its call #0 (AllReduce, 1 × float32)"},
		{func() { a.end(); a.joined() }, "computing since it joined (comm.Init), before any collective call of its own", "after joining (comm.Init), before any collective call of its own"},
		{func() { a.begin(1, barrier) }, "in call #1 (Barrier)", "during its call #1 (Barrier)"},
		{func() { a.end() }, "computing since call #1 (Barrier) ended", "after its call #1 (Barrier)"},
	} {
		step.do()
		if got := a.where(time.Now()).text; got != step.where {
			t.Errorf("where: %q, want %q", got, step.where)
		}
		if got := a.farewell(); got != step.farewell {
			t.Errorf("farewell: %q, want %q", got, step.farewell)
		}
	}
}
