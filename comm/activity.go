package comm

import (
	"fmt"
	"sync"
	"time"

	"github.com/gorun/gorun/ring"
)

// call names a collective call in errors and in what a rank says about
// where it is.
type call struct {
	kind  string
	count int        // elements; -1 for none (Barrier)
	dtype ring.DType // 0 when the call has no buffer
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

// numbered names the call with the number the group gave it: "call #14
// (AllReduce, 103 × float64)". The numbers are the collectives' sequence
// numbers, which every rank of the group counts alike.
func (c call) numbered(seq uint64) string {
	if c.count < 0 {
		return fmt.Sprintf("call #%d (%s)", seq, c.kind)
	}
	return fmt.Sprintf("call #%d (%s, %s)", seq, c.kind, c.size())
}

// activity is where a group's collectives stand: the call running, or the
// last one that ended, and since when. exec records it around every call
// (without allocating); other goroutines read it to say where this rank
// is (a farewell, a stall report), never through the group's lock, which
// a stalled call holds.
type activity struct {
	label   string // "" for the world group's collectives; "sub-group 3", "receives"
	mu      sync.Mutex
	running bool
	seq     uint64 // of the running call, or of the last one
	c       call
	since   time.Time // when the running call started, or the last one ended
	any     bool      // some call has run
}

// begin records that call c, numbered seq, starts now, and returns now.
func (a *activity) begin(seq uint64, c call) time.Time {
	now := time.Now()
	a.mu.Lock()
	a.running, a.seq, a.c, a.since, a.any = true, seq, c, now, true
	a.mu.Unlock()
	return now
}

func (a *activity) end() {
	now := time.Now()
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
	since   time.Time // when the call started, or the last one ended
	call    string    // "call #3 (AllReduce, 1000 × float32)"
	text    string    // "in call #3 (AllReduce, 1000 × float32) for 5.0s"
}

// where returns where the group's collectives stand at now.
func (a *activity) where(now time.Time) place {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := place{running: a.running, any: a.any, seq: a.seq, since: a.since}
	d := now.Sub(a.since).Round(100 * time.Millisecond)
	if a.any {
		p.call = a.c.numbered(a.seq)
	}
	switch {
	case !a.any:
		p.text = "has made no collective call yet"
	case a.running:
		p.text = fmt.Sprintf("in %s for %v", p.call, d)
	default:
		p.text = fmt.Sprintf("computing since %s ended %v ago", p.call, d)
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

func (as *activities) all() []*activity {
	as.mu.Lock()
	defer as.mu.Unlock()
	return append([]*activity(nil), as.list...)
}
