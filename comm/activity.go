package comm

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/ring"
)

// call names a collective call in errors and in what a rank says about
// where it is.
type call struct {
	kind  string
	count int        // elements; -1 for none (Barrier)
	dtype ring.DType // 0 when the call has no buffer
	// What else the group's ranks must pass alike: the reduction (0 for
	// none) and the root, for the kinds that have one (agreed). Packed
	// with dtype in one word: a call is copied on every collective.
	op   ring.Op
	root int32
	// A receive's source rank and tag (kind "Recv"), named only when the
	// call is described, so that recording it allocates nothing.
	src, tag int
}

// String names the call without its number (for errors found before it
// runs): "AllReduce (103 × float64)".
func (c call) String() string {
	if c.count < 0 {
		return c.kind
	}
	return fmt.Sprintf("%s (%s)", c.kind, c.size())
}

func (c call) size() string {
	if c.dtype == 0 {
		return fmt.Sprintf("%d elements", c.count)
	}
	return fmt.Sprintf("%d × %v", c.count, c.dtype)
}

// agreed describes what every rank of the group passes alike to the
// call: "Reduce (4 × float32, sum, root 0)", "GatherV (float32, root 1)".
// Two ranks in the same call of a group with different descriptions made
// different calls.
func (c call) agreed() string {
	var rooted, own bool // a root; each rank's count its own (the vector forms)
	switch c.kind {
	case "Broadcast", "Reduce", "Gather", "Scatter":
		rooted = true
	case "GatherV", "ScatterV":
		rooted, own = true, true
	case "AllGatherV", "AllToAllV", "ReduceScatterV":
		own = true
	}
	parts := make([]string, 0, 3)
	switch {
	case c.count < 0:
	case own:
		parts = append(parts, c.dtype.String())
	default:
		parts = append(parts, c.size())
	}
	if c.op != 0 {
		parts = append(parts, c.op.String())
	}
	if rooted {
		parts = append(parts, "root "+strconv.Itoa(int(c.root)))
	}
	if len(parts) == 0 {
		return c.kind
	}
	return c.kind + " (" + strings.Join(parts, ", ") + ")"
}

// numbered names the call with the number the group gave it: "call #14
// (AllReduce, 103 × float64)". The numbers are the collectives' sequence
// numbers, which every rank of the group counts alike.
func (c call) numbered(seq uint64) string {
	switch {
	case c.count < 0:
		return fmt.Sprintf("call #%d (%s)", seq, c.kind)
	case c.kind == recvKind:
		return fmt.Sprintf("call #%d (%s from rank %d, tag %d, %s)", seq, c.kind, c.src, c.tag, c.size())
	}
	return fmt.Sprintf("call #%d (%s, %s)", seq, c.kind, c.size())
}

// recvKind names point-to-point receives.
const recvKind = "Recv"

// coarseClock is the time, in Unix nanoseconds, as the stall watch last
// set it (every clockTick while it runs; 0 when it does not): what calls
// stamp their start and end with. Reading the real clock twice on every
// collective cost about a tenth of a microsecond, a fifth of a small
// all-reduce through shared memory.
type coarseClock struct{ ns atomic.Int64 }

// clockTick is the coarse clock's resolution.
const clockTick = 100 * time.Millisecond

func (c *coarseClock) tick(now time.Time) { c.ns.Store(now.UnixNano()) }

func (c *coarseClock) load() int64 { return c.ns.Load() }

// activity is where a group's collectives stand: the call running, or the
// last one that ended, and since when. exec records it around every call
// (without allocating); other goroutines read it to say where this rank
// is (a farewell, a stall report), never through the group's lock, which
// a stalled call holds.
type activity struct {
	label string // "" for the world group's collectives; "sub-group 3", "receives"
	// group names a sub-group whose collectives these are, the same on
	// all its members and unlike any other group's: "sub-group 3 (world
	// ranks 1, 3)"; "" for the world's collectives and for receives.
	group   string
	clock   *coarseClock // the world's
	mu      sync.Mutex
	running bool
	seq     uint64 // of the running call, or of the last one
	c       call
	since   int64 // when the running call started, or the last one ended (coarse clock; 0: unknown)
	any     bool  // some call has run
	// joinCalls counts the calls the join made itself (comm.Init's, on
	// the world group): a rank whose last call is one of them has made
	// none of the program's, which is how it is described.
	joinCalls uint64
}

// joined records that the calls so far were the join's own.
func (a *activity) joined() {
	a.mu.Lock()
	if a.any {
		a.joinCalls = a.seq + 1
	}
	a.mu.Unlock()
}

// joining reports whether the call a describes is one of the join's own.
// The caller holds a.mu.
func (a *activity) joining() bool { return a.any && !a.running && a.seq < a.joinCalls }

// begin records that call c, numbered seq, starts now.
func (a *activity) begin(seq uint64, c call) {
	now := a.clock.load()
	a.mu.Lock()
	a.running, a.seq, a.c, a.since, a.any = true, seq, c, now, true
	a.mu.Unlock()
}

func (a *activity) end() {
	now := a.clock.load()
	a.mu.Lock()
	a.running, a.since = false, now
	a.mu.Unlock()
}

// farewell says, for the peers of a rank that closes its group, where
// it was: "after its call #13 (AllReduce, 103 × float64)".
func (a *activity) farewell() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.any:
		return "before any collective call"
	case a.joining():
		return "after joining (comm.Init), before any collective call of its own"
	case a.running:
		return "during its " + a.c.numbered(a.seq)
	}
	return "after its " + a.c.numbered(a.seq)
}

// place is a snapshot of an activity: where a rank is.
type place struct {
	running bool // in call seq
	any     bool // some call has run (else seq means nothing)
	seq     uint64
	since   int64  // when the call started, or the last one ended (coarse clock; 0: unknown)
	call    string // "call #3 (AllReduce, 1000 × float32)"
	text    string // "in call #3 (AllReduce, 1000 × float32) for 5.0s"
	made    []made // the latest collective call of each group (stall watch: here)
}

// made is a group's latest collective call, as the stall watch compares
// them across ranks: the group (activity.group), the call's number, and
// what the rank passed to it (call.agreed).
type made struct {
	group  string
	seq    uint64
	agreed string
}

// made returns the group's latest collective call, if there is one.
func (a *activity) made() (made, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.any {
		return made{}, false
	}
	return made{group: a.group, seq: a.seq, agreed: a.c.agreed()}, true
}

// state returns whether a call is running, its number (or the last
// one's) and since when (coarse clock; 0: unknown): what the stall watch
// looks at every tick, without where's text.
func (a *activity) state() (running bool, seq uint64, since int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.seq, a.since
}

// where returns where the group's collectives stand at now.
func (a *activity) where(now time.Time) place {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := place{running: a.running, any: a.any, seq: a.seq, since: a.since}
	if a.any {
		p.call = a.c.numbered(a.seq)
	}
	d := ""
	if a.since != 0 {
		d = time.Duration(now.UnixNano() - a.since).Round(clockTick).String()
	}
	switch {
	case !a.any:
		p.text = "has made no collective call yet"
	case a.running && d != "":
		p.text = fmt.Sprintf("in %s for %s", p.call, d)
	case a.running:
		p.text = "in " + p.call
	case a.joining() && d != "":
		p.text = fmt.Sprintf("computing since it joined (comm.Init) %s ago, before any collective call of its own", d)
	case a.joining():
		p.text = "computing since it joined (comm.Init), before any collective call of its own"
	case d != "":
		p.text = fmt.Sprintf("computing since %s ended %s ago", p.call, d)
	default:
		p.text = fmt.Sprintf("computing since %s ended", p.call)
	}
	if a.label != "" {
		p.text = a.label + ": " + p.text
	}
	return p
}

// activities are the activities of a rank's groups besides the world
// group's collectives (sub-groups' collectives, point-to-point receives),
// which stall reports watch too.
type activities struct {
	mu   sync.Mutex
	list []*activity
}

func (as *activities) add(a ...*activity) {
	as.mu.Lock()
	as.list = append(as.list, a...)
	as.mu.Unlock()
}

// appendTo appends the activities to dst.
func (as *activities) appendTo(dst []*activity) []*activity {
	as.mu.Lock()
	defer as.mu.Unlock()
	return append(dst, as.list...)
}

func (as *activities) all() []*activity { return as.appendTo(nil) }
