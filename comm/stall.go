package comm

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/tcp"
)

// A stall watch notices a world-group collective that has waited
// Settings.StallAfter and logs, on every rank that waits, where each rank
// of the job is: which have not arrived at the call, and what every one is
// doing (in which call and for how long, or computing since which call
// ended). It asks the other ranks over TCP control messages, beside the
// data, never through the data path that stalled; a rank answers from its
// transport's reader whatever it is doing.

// Control messages: a question, and its answer.
const (
	ctlWhere = 'Q' // id u64
	ctlHere  = 'A' // id u64, flags u8 (1: running, 2: any), seq u64, text
)

// askTimeout bounds how long a rank waits for the others' answers.
const askTimeout = 2 * time.Second

type stallWatch struct {
	after  time.Duration
	rank   int
	size   int
	log    io.Writer
	t      *tcp.Transport // set once connected, before ready
	act    *activity      // the world group's, set before ready
	acts   activities     // the other groups' collectives and receives
	clock  coarseClock    // what the activities stamp their calls with
	ready  atomic.Bool
	stop   chan struct{}
	mu     sync.Mutex
	nextID uint64
	asks   map[uint64]chan answer
}

type answer struct {
	from int
	p    place
}

func newStallWatch(s *Settings) *stallWatch {
	return &stallWatch{after: s.StallAfter, rank: s.Rank, size: s.Size, log: os.Stderr,
		stop: make(chan struct{}), asks: map[uint64]chan answer{}}
}

// control handles a control message from rank from (tcp.Config.Control).
func (w *stallWatch) control(from int, msg []byte) {
	if len(msg) < 9 || !w.ready.Load() {
		return
	}
	id := binary.LittleEndian.Uint64(msg[1:9])
	switch msg[0] {
	case ctlWhere:
		go w.answer(from, id) // SendControl may wait: not on the receive path
	case ctlHere:
		if len(msg) < 18 {
			return
		}
		a := answer{from: from, p: place{running: msg[9]&1 != 0, any: msg[9]&2 != 0,
			seq: binary.LittleEndian.Uint64(msg[10:18]), text: string(msg[18:])}}
		w.mu.Lock()
		ch := w.asks[id]
		w.mu.Unlock()
		if ch != nil {
			select {
			case ch <- a:
			default:
			}
		}
	}
}

// answer tells rank from, which asked with id, where this rank is.
func (w *stallWatch) answer(from int, id uint64) {
	p := w.here(time.Now())
	out := make([]byte, 0, 18+len(p.text))
	out = append(out, ctlHere)
	out = binary.LittleEndian.AppendUint64(out, id)
	var flags byte
	if p.running {
		flags |= 1
	}
	if p.any {
		flags |= 2
	}
	out = append(out, flags)
	out = binary.LittleEndian.AppendUint64(out, p.seq)
	out = append(out, p.text...)
	w.t.SendControl(from, out)
}

// here is where this rank is: the world group's collectives, and every
// other call it waits in (a sub-group's collective, a receive).
func (w *stallWatch) here(now time.Time) place {
	p := w.act.where(now)
	for _, a := range w.acts.all() {
		if q := a.where(now); q.running {
			p.text += "; " + q.text
		}
	}
	return p
}

// Whether a rank answered where it is.
type reply uint8

const (
	silent   reply = iota // asked, no answer within askTimeout
	answered              // its place is known
	gone                  // its connection ended before it answered
)

// gatherPoll is how often gather looks for ranks whose connection ended
// while it waits for their answers.
const gatherPoll = 20 * time.Millisecond

// gather asks every other rank where it is and returns the places by
// rank, with how each rank replied: a rank whose connection ends (it
// exited, aborted) is not waited for.
func (w *stallWatch) gather() ([]place, []reply) {
	places := make([]place, w.size)
	replies := make([]reply, w.size)
	places[w.rank], replies[w.rank] = w.here(time.Now()), answered
	w.mu.Lock()
	w.nextID++
	id := w.nextID
	ch := make(chan answer, w.size)
	w.asks[id] = ch
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.asks, id)
		w.mu.Unlock()
	}()
	q := binary.LittleEndian.AppendUint64([]byte{ctlWhere}, id)
	pending := make([]bool, w.size) // asked, not yet answered
	waiting := 0
	for r := range w.size {
		switch {
		case r == w.rank:
		case !w.t.Gone(r) && w.t.SendControl(r, q) == nil:
			pending[r] = true
			waiting++
		case w.t.Gone(r):
			replies[r] = gone
		} // else silent: the question could not be sent
	}
	deadline := time.NewTimer(askTimeout)
	defer deadline.Stop()
	poll := time.NewTicker(gatherPoll)
	defer poll.Stop()
	for waiting > 0 {
		select {
		case a := <-ch:
			if a.from >= 0 && a.from < w.size && pending[a.from] {
				places[a.from], replies[a.from], pending[a.from] = a.p, answered, false
				waiting--
			}
		case <-poll.C:
			for r := range pending {
				if pending[r] && w.t.Gone(r) {
					replies[r], pending[r] = gone, false
					waiting--
				}
			}
		case <-deadline.C:
			return places, replies
		}
	}
	return places, replies
}

// table describes where every rank is, for a call numbered seq this rank
// waits in: which ranks have not arrived at it and which did not answer,
// then one line per rank.
func (w *stallWatch) table(seq uint64) (summary, text string) {
	places, replies := w.gather()
	var late, quiet []int
	var b strings.Builder
	for r, p := range places {
		switch replies[r] {
		case silent:
			quiet = append(quiet, r)
			fmt.Fprintf(&b, "\n  rank %d: did not answer within %v (stopped, or starved of CPU)", r, askTimeout)
		case gone:
			quiet = append(quiet, r)
			fmt.Fprintf(&b, "\n  rank %d: gone (it said goodbye, aborted, or its connection ended)", r)
		default:
			if !p.any || p.seq < seq {
				late = append(late, r)
			}
			fmt.Fprintf(&b, "\n  rank %d: %s", r, p.text)
		}
	}
	summary = ranks(late, "has not arrived", "have not arrived")
	if len(late) == 0 {
		summary = "every rank that answered has arrived"
	}
	if len(quiet) > 0 {
		summary += "; " + ranks(quiet, "did not answer", "did not answer")
	}
	return summary, b.String()
}

// report logs where every rank is, for the call of a this rank has
// waited in for waited. Only for the world group's collectives can it
// tell who has not arrived (their numbers are the job's); for the
// others the table says where each rank is.
func (w *stallWatch) report(a *activity, p place, waited time.Duration) {
	summary, table := w.table(p.seq)
	what := fmt.Sprintf("call #%d", p.seq)
	if a != w.act {
		what = a.label + ": " + p.call
		if _, silent, ok := strings.Cut(summary, "; "); ok {
			summary = silent
		} else {
			summary = "every rank answered"
		}
	}
	fmt.Fprintf(w.log, "comm: rank %d: stalled: %s has waited %v (GORUN_STALL=%v); %s; where each rank is:%s\n",
		w.rank, what, waited.Round(100*time.Millisecond), w.after, summary, table)
}

// ranks names a list of ranks with a verb: "rank 2 has not arrived",
// "ranks 1, 2 have not arrived".
func ranks(rs []int, one, many string) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = fmt.Sprint(r)
	}
	if len(rs) == 1 {
		return "rank " + names[0] + " " + one
	}
	return "ranks " + strings.Join(names, ", ") + " " + many
}

// start begins answering the other ranks' questions about where this
// rank is (t carries them; act is the world group's) and, when stall
// reports are on, watching the world group's calls.
func (w *stallWatch) start(t *tcp.Transport, act *activity) {
	w.t, w.act = t, act
	w.clock.tick(time.Now())
	w.ready.Store(true)
	if w.after > 0 && w.size > 1 {
		go w.run()
	}
}

// close stops watching.
func (w *stallWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
}

// run watches the calls of this rank's groups until stop is closed: a
// call that has waited after is reported, then again at 2×after,
// 4×after, ...
func (w *stallWatch) run() {
	tick := time.NewTicker(clockTick)
	defer tick.Stop()
	type watched struct {
		seq  uint64
		next time.Duration
	}
	state := map[*activity]*watched{}
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		w.clock.tick(now)
		for _, a := range append([]*activity{w.act}, w.acts.all()...) {
			p := a.where(now)
			st := state[a]
			if st == nil {
				st = &watched{}
				state[a] = st
			}
			if !p.running {
				st.next = 0
				continue
			}
			if st.next == 0 || p.seq != st.seq {
				st.seq, st.next = p.seq, w.after
			}
			if waited := time.Duration(now.UnixNano() - p.since); p.since != 0 && waited >= st.next {
				w.report(a, p, waited)
				st.next *= 2
			}
		}
	}
}

// failedAfterStall adds, to the error of the call a (the world group's)
// is in, where every rank was, when the call failed after waiting at
// least the stall threshold.
func (w *stallWatch) failedAfterStall(err error, a *activity) error {
	if w.after <= 0 || !w.ready.Load() {
		return err
	}
	p := a.where(time.Now())
	if p.since == 0 || time.Duration(time.Now().UnixNano()-p.since) < w.after {
		return err
	}
	summary, table := w.table(p.seq)
	return fmt.Errorf("%w; %s; where each rank was:%s", err, summary, table)
}
