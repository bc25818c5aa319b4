package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/gorun/gorun/tcp"
)

// controls routes the control messages peers send beside the data (TCP
// control frames) to who handles them: the stall watch's questions and
// answers, and the agreements of Shrink.
type controls struct {
	stall *stallWatch
	agree *agreement
}

func newControls(s *Settings) *controls {
	return &controls{stall: newStallWatch(s), agree: newAgreement()}
}

// control is the transport's Config.Control: it runs on the peer's
// receive path and never blocks.
func (c *controls) control(from int, msg []byte) {
	if len(msg) == 0 {
		return
	}
	switch msg[0] {
	case ctlInput, ctlCoord:
		c.agree.control(from, msg)
	default:
		c.stall.control(from, msg)
	}
}

// An agreement is how the ranks that remain of a world decide one value
// together, even while some of them die: the rotating-coordinator
// consensus over a perfect failure detector (a rank is gone when its TCP
// connection ends; a live rank that never comes is given up on at a
// deadline). Each rank first sends its input to every member; then, for
// each member k in rank order, k sends its estimate to all (its own
// proposal, made from the inputs it has, unless it has adopted an earlier
// coordinator's) and every other member waits for it, adopting it, until
// k is gone. The first coordinator that reaches everyone makes all
// estimates equal; the later ones only repeat it; after the last round
// every member holds the same value.

// Agreement messages (control frames).
const (
	ctlInput = 'I' // epoch u32, phase u8, payload: a member's input
	ctlCoord = 'C' // epoch u32, phase u8, payload: a coordinator's estimate
)

type agreeKey struct {
	kind  byte
	epoch uint32
	phase uint8
	from  int
}

type agreement struct {
	mu    sync.Mutex
	inbox map[agreeKey][]byte
	wake  chan struct{} // something arrived (capacity 1)
}

func newAgreement() *agreement {
	return &agreement{inbox: map[agreeKey][]byte{}, wake: make(chan struct{}, 1)}
}

// control keeps an agreement message from rank from.
func (a *agreement) control(from int, msg []byte) {
	if len(msg) < 6 {
		return
	}
	k := agreeKey{kind: msg[0], epoch: binary.LittleEndian.Uint32(msg[1:5]), phase: msg[5], from: from}
	a.mu.Lock()
	a.inbox[k] = msg[6:]
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *agreement) get(k agreeKey) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.inbox[k]
	return v, ok
}

// agreePoll is how often a waiting member looks for gone ranks.
const agreePoll = 10 * time.Millisecond

// round is one agreement: who takes part, over which transport, and how
// long to wait for a member that is neither heard from nor gone.
type round struct {
	a       *agreement
	t       *tcp.Transport
	me      int
	members []int // in rank order
	epoch   uint32
	phase   uint8
	// entry bounds the wait for the members' inputs: a member not heard
	// from by then is left out of this member's proposal.
	entry time.Time
	// answers, when set, asks a member whether it is there (the stall
	// watch's question, which its reader answers whatever the member
	// does); a member not heard from that answers nothing for
	// agreeSilence is given up on before entry.
	answers func(rank int) bool
	// hook, when set (tests), is called at named points.
	hook func(point string)
}

// agreeSilence is how long a member that has not sent what is waited for
// may also leave every question unanswered before it is given up on: it
// is stopped (SIGSTOP, a hung host) or beyond a cut network. A member
// that is only slow — computing, saving, starved of CPU for a moment —
// answers, and is waited for until the round's deadline.
const agreeSilence = 10 * time.Second

// probeEvery is how often a waiting member asks a silent one.
const probeEvery = time.Second

func (r *round) msg(kind byte, payload []byte) []byte {
	m := make([]byte, 6, 6+len(payload))
	m[0] = kind
	binary.LittleEndian.PutUint32(m[1:5], r.epoch)
	m[5] = r.phase
	return append(m, payload...)
}

func (r *round) call(point string) {
	if r.hook != nil {
		r.hook(point)
	}
}

// send sends to every other member that is not gone, in rank order;
// failures are those of ranks that die, which the waits see. The hook's
// point after the first message is "PHASE sent to one".
func (r *round) send(m []byte, what string) {
	first := true
	for _, k := range r.members {
		if k != r.me && !r.t.Gone(k) {
			r.t.SendControl(k, m)
			if first {
				r.call(what + " sent to one")
				first = false
			}
		}
	}
}

// wait waits for kind's message from rank k of this round: it returns it,
// or ok false when k is gone without having sent it, when it has answered
// no question for agreeSilence, or when until passes.
func (r *round) wait(ctx context.Context, kind byte, k int, until time.Time) (msg []byte, ok bool, err error) {
	key := agreeKey{kind: kind, epoch: r.epoch, phase: r.phase, from: k}
	poll := time.NewTicker(agreePoll)
	defer poll.Stop()
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	heard := time.Now() // k's last answer, or the wait's start
	nextProbe := heard.Add(probeEvery)
	var probe chan bool // the question in flight, if any
	for {
		if m, ok := r.a.get(key); ok {
			return m, true, nil
		}
		if r.t.Gone(k) {
			// Everything k sent before going has been delivered.
			m, ok := r.a.get(key)
			return m, ok, nil
		}
		if now := time.Now(); r.answers != nil && probe == nil && !now.Before(nextProbe) {
			probe, nextProbe = make(chan bool, 1), now.Add(probeEvery)
			go func(probe chan<- bool) { probe <- r.answers(k) }(probe)
		}
		select {
		case <-r.a.wake: // (one agreement at a time waits)
		case <-poll.C:
		case answered := <-probe:
			probe = nil
			if answered {
				heard = time.Now()
			} else if time.Since(heard) >= agreeSilence {
				m, ok := r.a.get(key)
				return m, ok, nil
			}
		case <-timer.C:
			m, ok := r.a.get(key)
			return m, ok, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// agree runs the agreement with input as this member's: propose makes a
// coordinator's estimate from the inputs it has (by index into members;
// nil for a member not heard from). Every member that finishes returns
// the same value. A coordinator that does not come after it was heard
// from is waited for until settle.
func (r *round) agree(ctx context.Context, input []byte, settle time.Time, propose func(inputs [][]byte) []byte) ([]byte, error) {
	r.send(r.msg(ctlInput, input), "input")
	r.call("input sent")
	inputs := make([][]byte, len(r.members))
	for i, k := range r.members {
		if k == r.me {
			inputs[i] = input
			continue
		}
		m, ok, err := r.wait(ctx, ctlInput, k, r.entry)
		if err != nil {
			return nil, err
		}
		if ok {
			inputs[i] = m
		}
	}
	var est []byte
	for i, k := range r.members {
		if k == r.me {
			if est == nil {
				est = propose(inputs)
			}
			r.send(r.msg(ctlCoord, est), "estimate")
			continue
		}
		until := settle
		if inputs[i] == nil {
			// Not heard from in time: take its estimate only if it has
			// come already.
			until = time.Now()
		}
		m, ok, err := r.wait(ctx, ctlCoord, k, until)
		if err != nil {
			return nil, err
		}
		if ok {
			est = m
		}
	}
	if est == nil {
		return nil, fmt.Errorf("agreement %d.%d: no estimate", r.epoch, r.phase)
	}
	return est, nil
}
