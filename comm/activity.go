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
	mu      sync.Mutex
	running bool
	seq     uint64 // of the running call, or of the last one
	c       call
	since   time.Time // when the running call started, or the last one ended
	any     bool      // some call has run
}

func (a *activity) begin(seq uint64, c call) {
	now := time.Now()
	a.mu.Lock()
	a.running, a.seq, a.c, a.since, a.any = true, seq, c, now, true
	a.mu.Unlock()
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
