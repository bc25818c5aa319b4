package comm

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/mailbox"
	"github.com/gorun/gorun/tcp"
)

// A stall watch notices a world-group collective that has waited
// Settings.StallAfter and logs, on every rank that waits, where each rank
// of the job is: which have not arrived at the call, and what every one is
// doing (in which call and for how long, or computing since which call
// ended). It asks the other ranks over TCP control messages, beside the
// data, never through the data path that stalled; a rank answers from its
// transport's reader whatever it is doing.
//
// In jobs of more than relayAbove ranks a waiting rank asks rank 0
// instead, which asks everyone once for all the ranks that report the
// same stall, logs the table once, and answers each with who has not
// arrived: every rank asking every other would open the connections lazy
// jobs never made (n² sockets) and log n tables of n lines. When rank 0
// does not answer, the rank asks everyone itself.

// Control messages: a question, and its answer; a stalled rank's question
// to rank 0, and its answer.
const (
	ctlWhere   = 'Q' // id u64
	ctlHere    = 'A' // id u64, flags u8 (1: running, 2: any), seq u64, calls made (u16 count; each: string group, seq u64, string agreed; a string: u16 length, bytes), text
	ctlStalled = 'S' // id u64, seq u64, waited u64 (ns), what
	ctlLate    = 'L' // id u64, summary
)

// relayAbove is the most ranks whose stalled ranks each ask every other
// rank themselves; in larger jobs they ask rank 0 (the size past which
// connections are lazy by default).
const relayAbove = LazyAbove

// reuse is how long after a gathering of places rank 0 answers stalled
// ranks from it: the ranks waiting in one call report within a clock
// tick of each other, or, on a host with many more ranks than cores,
// within a gathering's time (128 ranks on 2 cores: over 3 s); but the
// next reports, StallAfter or more later, get a gathering of their own.
func (w *stallWatch) reuse() time.Duration {
	return min(askTimeout, w.after/2)
}

// askTimeout bounds how long a rank waits for the others' answers.
const askTimeout = 2 * time.Second

// maxAgreed bounds each string of a call made that an answer carries,
// and maxMade how many calls made it carries.
const (
	maxAgreed = 1 << 10
	maxMade   = 64
)

type stallWatch struct {
	after time.Duration
	// timeout bounds each of a call's waits (Settings.Timeout): a call
	// that failed by it is told so, with the variable that sets it.
	timeout time.Duration
	rank    int
	size    int
	log     io.Writer
	t       *tcp.Transport // set once connected, before ready
	act     *activity      // the world group's, set before ready
	// abort fails every rank's pending calls with an error (set before
	// ready; nil in tests of the watch alone); aborted says settle used it.
	abort   func(error)
	aborted atomic.Bool
	acts    activities  // the other groups' collectives and receives
	clock   coarseClock // what the activities stamp their calls with
	ready   atomic.Bool
	stop    chan struct{}
	mu      sync.Mutex
	nextID  uint64
	asks    map[uint64]chan answer

	// Rank 0's last gathering for stalled ranks (relayAbove): when it
	// ended, and its result; gathering is set while one runs.
	shared    gathered
	gathering chan struct{}
}

// gathered is where every rank was when asked, and how each replied.
type gathered struct {
	at      time.Time
	places  []place
	replies []reply
}

type answer struct {
	from int
	p    place
}

func newStallWatch(s *Settings) *stallWatch {
	return &stallWatch{after: s.StallAfter, timeout: s.Timeout, rank: s.Rank, size: s.Size, log: os.Stderr,
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
	case ctlStalled:
		if len(msg) < 25 || w.rank != 0 {
			return
		}
		seq := binary.LittleEndian.Uint64(msg[9:17])
		waited := time.Duration(binary.LittleEndian.Uint64(msg[17:25]))
		go w.serveLate(from, id, seq, waited, string(msg[25:]))
	case ctlLate:
		w.deliver(id, answer{from: from, p: place{text: string(msg[9:])}})
	case ctlHere:
		if len(msg) < 18 {
			return
		}
		p := place{running: msg[9]&1 != 0, any: msg[9]&2 != 0, seq: binary.LittleEndian.Uint64(msg[10:18])}
		var ok bool
		if p.made, msg, ok = decodeMade(msg[18:]); !ok {
			return
		}
		p.text = string(msg)
		w.deliver(id, answer{from: from, p: p})
	}
}

// deliver hands an answer to the question id waiting for it, if any.
func (w *stallWatch) deliver(id uint64, a answer) {
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

// question registers a question to n ranks and returns its id and where
// their answers arrive; done forgets it.
func (w *stallWatch) question(n int) (id uint64, ch chan answer, done func()) {
	w.mu.Lock()
	w.nextID++
	id = w.nextID
	ch = make(chan answer, n)
	w.asks[id] = ch
	w.mu.Unlock()
	return id, ch, func() {
		w.mu.Lock()
		delete(w.asks, id)
		w.mu.Unlock()
	}
}

// answer tells rank from, which asked with id, where this rank is.
func (w *stallWatch) answer(from int, id uint64) {
	p := w.here(time.Now())
	out := make([]byte, 0, 64+len(p.text))
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
	out = appendMade(out, p.made)
	out = append(out, p.text...)
	w.t.SendControl(from, out)
}

// answers asks rank k where it is (gatherFrom) and reports whether it
// answered within askTimeout. A live rank's reader answers whatever the
// rank is doing; a stopped rank, one beyond a cut network, or one whose
// connection ended does not.
func (w *stallWatch) answers(k int) bool {
	if !w.ready.Load() {
		return true // not connected yet: no way to ask
	}
	_, replies := w.gatherFrom([]int{k})
	return replies[k] == answered
}

// here is where this rank is: the world group's collectives, and every
// other call it waits in (a sub-group's collective, a receive); with the
// latest collective call of each group.
func (w *stallWatch) here(now time.Time) place {
	p := w.act.where(now)
	if m, ok := w.act.made(); ok {
		p.made = append(p.made, m)
	}
	acts := w.acts.all()
	for _, a := range acts {
		if q := a.where(now); q.running {
			p.text += "; " + q.text
		}
	}
	// The newest sub-groups' calls first: an answer carries maxMade at
	// most. (Receives, without a group, are not compared.)
	for _, a := range slices.Backward(acts) {
		if m, ok := a.made(); ok && a.group != "" {
			p.made = append(p.made, m)
		}
	}
	return p
}

// appendMade appends the encoding of calls to b: their count, then each
// one's group, number and agreed description (strings cut to maxAgreed
// bytes, at most maxMade calls).
func appendMade(b []byte, calls []made) []byte {
	calls = calls[:min(len(calls), maxMade)]
	b = binary.LittleEndian.AppendUint16(b, uint16(len(calls)))
	str := func(b []byte, s string) []byte {
		s = s[:min(len(s), maxAgreed)]
		return append(binary.LittleEndian.AppendUint16(b, uint16(len(s))), s...)
	}
	for _, m := range calls {
		b = str(b, m.group)
		b = binary.LittleEndian.AppendUint64(b, m.seq)
		b = str(b, m.agreed)
	}
	return b
}

// decodeMade reads what appendMade wrote at the start of b and returns
// the rest; ok is false when b is too short.
func decodeMade(b []byte) (calls []made, rest []byte, ok bool) {
	str := func() (string, bool) {
		if len(b) < 2 {
			return "", false
		}
		n := 2 + int(binary.LittleEndian.Uint16(b))
		if n > len(b) {
			return "", false
		}
		s := string(b[2:n])
		b = b[n:]
		return s, true
	}
	if len(b) < 2 {
		return nil, nil, false
	}
	n := int(binary.LittleEndian.Uint16(b))
	b = b[2:]
	for range n {
		var m made
		if m.group, ok = str(); !ok || len(b) < 8 {
			return nil, nil, false
		}
		m.seq, b = binary.LittleEndian.Uint64(b), b[8:]
		if m.agreed, ok = str(); !ok {
			return nil, nil, false
		}
		calls = append(calls, m)
	}
	return calls, b, true
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
	return w.gatherFrom(nil)
}

// gatherFrom is gather asking only the ranks in ask (nil: every other
// rank, and this rank's own place is filled in); the replies of ranks not
// asked are left silent.
func (w *stallWatch) gatherFrom(ask []int) ([]place, []reply) {
	places := make([]place, w.size)
	replies := make([]reply, w.size)
	if ask == nil {
		places[w.rank], replies[w.rank] = w.here(time.Now()), answered
	}
	id, ch, done := w.question(w.size)
	defer done()
	q := binary.LittleEndian.AppendUint64([]byte{ctlWhere}, id)
	pending := make([]bool, w.size) // asked, not yet answered
	waiting := 0
	unsent := make(chan int, w.size)
	for r := range w.size {
		switch {
		case r == w.rank, ask != nil && !slices.Contains(ask, r):
		case w.t.Gone(r):
			replies[r] = gone
		default:
			pending[r] = true
			waiting++
			// Asked at once, each on its own: with lazy connections a
			// question may have to connect first, which a stopped rank
			// holds up for the transport's handshake timeout.
			go func() {
				if w.t.SendControl(r, q) != nil {
					unsent <- r // silent: the question could not be sent
				}
			}()
		}
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
		case r := <-unsent:
			if pending[r] {
				pending[r] = false
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

// gatherShared is gather for rank 0's answers to stalled ranks: one
// gathering serves every question asked while it runs and for reuse()
// after; fresh says whether this call made it.
func (w *stallWatch) gatherShared() (g gathered, fresh bool) {
	for {
		w.mu.Lock()
		switch {
		case w.gathering != nil:
			wait := w.gathering
			w.mu.Unlock()
			<-wait
			continue
		case w.shared.places != nil && time.Since(w.shared.at) < w.reuse():
			g = w.shared
			w.mu.Unlock()
			return g, false
		}
		done := make(chan struct{})
		w.gathering = done
		w.mu.Unlock()
		places, replies := w.gather()
		w.mu.Lock()
		w.shared = gathered{at: time.Now(), places: places, replies: replies}
		w.gathering = nil
		g = w.shared
		w.mu.Unlock()
		close(done)
		return g, true
	}
}

// sharedTable is table from rank 0's shared gathering (gatherShared);
// fresh says whether this call made it.
func (w *stallWatch) sharedTable(seq uint64) (summary, table string, fresh bool) {
	g, fresh := w.gatherShared()
	w.settle(g.places, g.replies)
	summary, table = describe(g.places, g.replies, seq)
	return summary, table, fresh
}

// serveLate answers rank from, stalled in call seq for waited (what names
// the call), with who has not arrived, and logs where every rank is when
// it had to ask them.
func (w *stallWatch) serveLate(from int, id, seq uint64, waited time.Duration, what string) {
	summary, table, fresh := w.sharedTable(seq)
	if fresh {
		fmt.Fprintf(w.log, "comm: rank %d: rank %d reports a stall (%s has waited %v); where each rank is:%s\n",
			w.rank, from, what, waited.Round(100*time.Millisecond), table)
	}
	out := binary.LittleEndian.AppendUint64([]byte{ctlLate}, id)
	out = append(out, summary...)
	w.t.SendControl(from, out)
}

// askRankZero asks rank 0 who has not arrived at call seq, this rank
// having waited in it for waited (what names the call); ok is false when
// rank 0 did not answer.
func (w *stallWatch) askRankZero(seq uint64, waited time.Duration, what string) (summary string, ok bool) {
	if w.t.Gone(0) {
		return "", false
	}
	id, ch, done := w.question(1)
	defer done()
	q := binary.LittleEndian.AppendUint64([]byte{ctlStalled}, id)
	q = binary.LittleEndian.AppendUint64(q, seq)
	q = binary.LittleEndian.AppendUint64(q, uint64(waited))
	q = append(q, what...)
	unsent := make(chan error, 1)
	go func() { unsent <- w.t.SendControl(0, q) }() // (which may have to connect: gather)
	// Rank 0 may finish one gathering and make another first; past that
	// it is stopped, starved of CPU, or its host unreachable.
	deadline := time.NewTimer(3 * askTimeout)
	defer deadline.Stop()
	poll := time.NewTicker(gatherPoll)
	defer poll.Stop()
	for {
		select {
		case a := <-ch:
			return a.p.text, a.from == 0
		case err := <-unsent:
			if err != nil {
				return "", false
			}
		case <-poll.C:
			if w.t.Gone(0) {
				return "", false
			}
		case <-deadline.C:
			return "", false
		}
	}
}

// table describes where every rank is, for a call numbered seq this rank
// waits in: which ranks have not arrived at it and which did not answer,
// then one line per rank.
func (w *stallWatch) table(seq uint64) (summary, text string) {
	places, replies := w.gather()
	w.settle(places, replies)
	return describe(places, replies, seq)
}

// tableAt says where a stall report's table of places is logged.
type tableAt uint8

const (
	tableHere   tableAt = iota // with the report
	tableRank0                 // by rank 0, which was asked
	tableLogged                // by this rank (0) a moment ago, for another's report
)

// refer ends a report whose table is at t: "; where each rank is:" and
// the table, or where to find it (verb: "is" or "was").
func (t tableAt) refer(verb, table string) string {
	switch t {
	case tableRank0:
		return "; rank 0 logs where each rank " + verb
	case tableLogged:
		return "; where each rank " + verb + ": logged above"
	}
	return "; where each rank " + verb + ":" + table
}

// locate is where the ranks are for call seq, which this rank has waited
// in for waited (what names the call), and where the table is logged: in
// large jobs rank 0 is asked and logs it (unless it did a moment ago for
// another rank); else the ranks are asked here.
func (w *stallWatch) locate(seq uint64, waited time.Duration, what string) (summary, table string, at tableAt) {
	switch {
	case w.size <= relayAbove:
	case w.rank != 0:
		if summary, ok := w.askRankZero(seq, waited, what); ok {
			return summary, "", tableRank0
		}
	default:
		var fresh bool
		if summary, table, fresh = w.sharedTable(seq); !fresh {
			return summary, "", tableLogged
		}
		return summary, table, tableHere
	}
	summary, table = w.table(seq)
	return summary, table, tableHere
}

// describe is table's text for places and replies.
func describe(places []place, replies []reply, seq uint64) (summary, text string) {
	var late, quiet []int
	var b strings.Builder
	for r, p := range places {
		switch replies[r] {
		case silent:
			quiet = append(quiet, r)
			fmt.Fprintf(&b, "\n  rank %d: did not answer within %v (stopped, starved of CPU, or its host unreachable)", r, askTimeout)
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
	if d := disagreement(places, replies); d != "" {
		summary = d + "; " + summary
	}
	return summary, b.String()
}

// disagreement describes the ranks among places that made one call of a
// group (the same number in the same group) with different arguments, ""
// when there are none: "ranks disagree on call #1: rank 0 called Gather
// (4 × float32, root 0); ranks 1, 2 called Scatter (4 × float32, root
// 0)", or "ranks disagree on call #0 of sub-group 1 (world ranks 1, 3):
// ..." (ranks are world ranks). Such a call never completes on every
// rank: the ranks wait for frames that will not come, where no frame
// between them shows the difference.
func disagreement(places []place, replies []reply) string {
	type key struct {
		group string
		seq   uint64
	}
	type variant struct {
		agreed string
		ranks  []int
	}
	calls := map[key][]variant{} // each call's distinct descriptions, by lowest rank
	for r, p := range places {
		if replies[r] != answered {
			continue
		}
		for _, m := range p.made {
			if m.agreed == "" {
				continue
			}
			k := key{m.group, m.seq}
			vs := calls[k]
			i := slices.IndexFunc(vs, func(v variant) bool { return v.agreed == m.agreed })
			if i < 0 {
				i, vs = len(vs), append(vs, variant{agreed: m.agreed})
			}
			vs[i].ranks = append(vs[i].ranks, r)
			calls[k] = vs
		}
	}
	keys := slices.SortedFunc(maps.Keys(calls), func(a, b key) int {
		return cmp.Or(strings.Compare(a.group, b.group), cmp.Compare(a.seq, b.seq))
	})
	for _, k := range keys {
		vs := calls[k]
		if len(vs) < 2 {
			continue
		}
		parts := make([]string, len(vs))
		for i, v := range vs {
			parts[i] = ranks(v.ranks, "called "+v.agreed, "called "+v.agreed)
		}
		what := fmt.Sprintf("call #%d", k.seq)
		if k.group != "" {
			what += " of " + k.group
		}
		return fmt.Sprintf("ranks disagree on %s: %s", what, strings.Join(parts, "; "))
	}
	return ""
}

// settle aborts the job when places show ranks that made one call of a
// group differently (disagreement): the calls would otherwise wait out
// the timeout. Every rank's pending call then fails, naming them.
func (w *stallWatch) settle(places []place, replies []reply) {
	d := disagreement(places, replies)
	if d == "" || w.abort == nil || !w.aborted.CompareAndSwap(false, true) {
		return
	}
	w.abort(errors.New("collective mismatch: " + d))
}

// mismatchAbort begins the error settle aborts with (which peers see as
// the abort's text): "collective mismatch: " and disagreement's text.
const mismatchAbort = "collective mismatch: ranks disagree"

// report logs where every rank is, for the call of a this rank has
// waited in for waited. Only for the world group's collectives can it
// tell who has not arrived (their numbers are the job's); for the
// others the table says where each rank is.
func (w *stallWatch) report(a *activity, p place, waited time.Duration) {
	what := fmt.Sprintf("call #%d", p.seq)
	if a != w.act {
		what = a.label + ": " + p.call
	}
	summary, table, at := w.locate(p.seq, waited, what)
	if a != w.act {
		if _, silent, ok := strings.Cut(summary, "; "); ok {
			summary = silent
		} else {
			summary = "every rank answered"
		}
	}
	fmt.Fprintf(w.log, "comm: rank %d: stalled: %s has waited %v (GORUN_STALL=%v); %s%s\n",
		w.rank, what, waited.Round(100*time.Millisecond), w.after, summary, at.refer("is", table))
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
// reports are on, watching the world group's calls; abort is how a stall
// report that finds ranks disagreeing on a call ends the job.
func (w *stallWatch) start(t *tcp.Transport, act *activity, abort func(error)) {
	w.t, w.act, w.abort = t, act, abort
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
	state := map[*activity]*watchedCall{}
	var list []*activity
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		w.clock.tick(now)
		list = w.acts.appendTo(append(list[:0], w.act))
		w.look(now, list, state)
	}
}

// watchedCall is what the stall watch keeps of an activity between
// ticks: the call it saw running and when to report it next.
type watchedCall struct {
	seq  uint64
	next time.Duration
}

// look reports, at a tick at now, the calls of list that have waited
// past their next report time (w.after, then twice as long each time).
// It allocates nothing unless it reports or meets an activity for the
// first time: a job's calls run under ten ticks a second.
func (w *stallWatch) look(now time.Time, list []*activity, state map[*activity]*watchedCall) {
	for _, a := range list {
		running, seq, since := a.state()
		st := state[a]
		if st == nil {
			st = &watchedCall{}
			state[a] = st
		}
		if !running {
			st.next = 0
			continue
		}
		if st.next == 0 || seq != st.seq {
			st.seq, st.next = seq, w.after
		}
		if waited := time.Duration(now.UnixNano() - since); since != 0 && waited >= st.next {
			if p := a.where(now); p.running && p.seq == seq { // (else it ended meanwhile)
				w.report(a, p, waited)
			}
			st.next *= 2
		}
	}
}

// explainFailure adds to the error of the call a (the world group's) is
// in what tells why: that GORUN_TIMEOUT ended the wait (hintTimeout), and
// where every rank was, when the call failed after waiting at least the
// stall threshold.
func (w *stallWatch) explainFailure(err error, a *activity) error {
	err = w.hintTimeout(err)
	if w.after <= 0 || !w.ready.Load() || strings.Contains(err.Error(), mismatchAbort) {
		return err // (a disagreement's abort names the calls; its reports logged the table)
	}
	p := a.where(time.Now())
	waited := time.Duration(time.Now().UnixNano() - p.since)
	if p.since == 0 || waited < w.after {
		return err
	}
	summary, table, at := w.locate(p.seq, waited, fmt.Sprintf("call #%d", p.seq))
	return fmt.Errorf("%w; %s%s", err, summary, at.refer("was", table))
}

// hintTimeout returns err, where a transport's wait outlived GORUN_TIMEOUT
// (mailbox.ErrTimeout), with the variable named and how to raise it; once,
// however often it is called on the same error.
func (w *stallWatch) hintTimeout(err error) error {
	var hinted *timeoutHinted
	if !errors.Is(err, mailbox.ErrTimeout) || errors.As(err, &hinted) {
		return err
	}
	return &timeoutHinted{err: err, timeout: w.timeout}
}

// timeoutHinted is a transport's timeout error with the hint that names
// GORUN_TIMEOUT after it.
type timeoutHinted struct {
	err     error
	timeout time.Duration
}

func (e *timeoutHinted) Error() string {
	return fmt.Sprintf("%v; GORUN_TIMEOUT=%v bounds each wait: raise it where a rank may work longer than that between calls", e.err, e.timeout)
}

func (e *timeoutHinted) Unwrap() error { return e.err }
