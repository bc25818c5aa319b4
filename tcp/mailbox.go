package tcp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	shared "github.com/gorun/gorun/mailbox"
)

// A mailbox holds, for one peer and one stream, the receives posted by the
// algorithms and the frames that arrived before their receive was posted.
// Frames fill posted receives strictly in order, as TCP delivers them.
type mailbox struct {
	flow       *flow // the peer's, shared by its mailboxes
	mu         sync.Mutex
	nextTicket uint64                   // ticket for the next Post
	fillTicket uint64                   // ticket the next arriving frame fills
	slots      map[uint64]*slot         // posted and not yet waited for
	free       []*slot                  // recycled slots: steady state allocates nothing
	early      shared.FIFO[*earlyFrame] // arriving or arrived before their receive was posted, in order
	spare      []*earlyFrame            // consumed early frames kept for reuse, with their buffers
	closed     error                    // set once the peer said goodbye: nothing more will come
}

// Early frames are recycled, so that a peer that is often ahead of this
// rank (its next call's frame arriving before this rank posts the
// receive) costs no allocation in steady state: allocating there made a
// 1 MiB all-reduce collect garbage every few calls. Buffers larger than
// maxSpareBytes are left to the collector.
const (
	maxSpares     = 8
	maxSpareBytes = 1 << 20
)

// flow is one peer's receive-side flow control. Frames that come before
// their receive is posted are copied into memory of their own, then
// copied again into the receive once it is posted; a peer that keeps
// running ahead (the senders of a stream of Reduce or Gather calls, which
// need nothing back, or of a loop of all-to-alls) would make that memory
// grow without bound, and every such frame costs an allocation and a
// second copy. So the reader goroutine reads a frame early only while
// the early frames, with it, hold at most maxEarlyBytes: the rest, large
// frames always, stays in the socket, where TCP's own flow control holds
// the sender back, until its receive is posted and the frame is read
// straight into it — unless a wait on that peer is still unfilled: its
// frame may be behind the early ones, and a wait always gets its data (no
// program that worked without the limit can hang because of it) — and
// unless some wait of this rank, on any peer, has waited stallRelease: a
// peer that died with its last frames still unsent behind a full window
// sends its end only once this rank reads them, and that death must
// reach the ranks waiting elsewhere.
type flow struct {
	early    atomic.Int64  // bytes of early frames held
	unfilled atomic.Int32  // waits on this peer whose frame has not come
	stalled  *atomic.Int32 // the transport's waits past stallRelease
}

// maxEarlyBytes is how much a peer's early frames may hold: small
// messages, whose early reading costs little, but none of the collectives'
// large frames. With 4 MiB (a few 1 MiB frames read early), a loop of
// 16 MiB all-to-alls between two ranks over loopback TCP spent a fifth
// of its time copying early frames out (HISTORY.md, "TCP: large frames
// wait in the socket").
const maxEarlyBytes = 128 << 10

// paused reports whether the reader should leave the next frame, of size
// bytes, which would be an early one, in the socket.
func (f *flow) paused(size uint64) bool {
	return uint64(f.early.Load())+size > maxEarlyBytes && f.unfilled.Load() == 0 && f.stalled.Load() == 0
}

// stallRelease is how long a wait goes before every paused peer is read
// again (flow).
const stallRelease = 500 * time.Millisecond

// slot is one posted receive.
type slot struct {
	buf    []byte
	meta   [4]uint64
	n      int
	err    error
	done   bool
	waited bool          // a Wait counts it in flow.unfilled
	flow   *flow         // set with waited
	ready  chan struct{} // capacity 1: signalled once when done
}

// earlyFrame is a frame that came before its receive was posted. Its place
// in the order is taken when its header is read, before its payload is, so
// a later frame can never overtake it.
type earlyFrame struct {
	size    int // bytes counted in flow.early while queued
	meta    [4]uint64
	data    []byte // the payload, in buf
	buf     []byte // kept across reuses
	arrived bool
	slot    *slot // posted while the payload was still being read
}

func newMailbox(f *flow) *mailbox {
	return &mailbox{flow: f, slots: make(map[uint64]*slot)}
}

func (m *mailbox) getSlot() *slot {
	if n := len(m.free); n > 0 {
		s := m.free[n-1]
		m.free = m.free[:n-1]
		return s
	}
	return &slot{ready: make(chan struct{}, 1)}
}

// post registers buf for the next frame not yet claimed. A frame that already
// arrived is copied in at once.
func (m *mailbox) post(buf []byte) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.getSlot()
	s.buf, s.meta, s.n, s.err, s.done = buf, [4]uint64{}, 0, nil, false
	t := m.nextTicket
	m.nextTicket++
	m.slots[t] = s
	switch {
	case m.early.Len() > 0:
		f := m.early.Pop()
		m.fillTicket++
		m.flow.early.Add(-int64(f.size))
		if f.arrived {
			s.fillFrom(f)
			m.recycle(f)
		} else {
			f.slot = s // stash completes it
		}
	case m.closed != nil:
		m.fillTicket++
		s.err = m.closed
		s.finish()
	}
	return t
}

func (s *slot) fillFrom(f *earlyFrame) {
	s.meta = f.meta
	if len(f.data) > len(s.buf) {
		s.err = fmt.Errorf("%w: %d bytes arrived for a %d-byte receive", ErrFrameTooLarge, len(f.data), len(s.buf))
	} else {
		s.n = copy(s.buf, f.data)
	}
	s.finish()
}

func (s *slot) finish() {
	s.done = true
	if s.waited {
		s.waited = false
		s.flow.unfilled.Add(-1)
	}
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// queues reports whether the next frame would be an early one.
func (m *mailbox) queues() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fillTicket == m.nextTicket && m.closed == nil
}

// waiting marks the receive of ticket t as waited for, counting it in
// flow.unfilled until its frame comes (finish).
func (m *mailbox) waiting(t uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slots[t]; s != nil && !s.done && !s.waited {
		s.waited, s.flow = true, m.flow
		m.flow.unfilled.Add(1)
	}
}

// unwait undoes waiting for a wait that gives up (timeout, cancellation,
// failure) before its frame comes.
func (m *mailbox) unwait(t uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slots[t]; s != nil && s.waited {
		s.waited = false
		m.flow.unfilled.Add(-1)
	}
}

// claim returns the posted slot the next frame fills or, when none is
// posted, the place it takes among the early frames, with data sized for
// the frame's size bytes; with keepEarly false, nil for both instead of
// an early frame.
func (m *mailbox) claim(size int, keepEarly bool) (*slot, *earlyFrame) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fillTicket == m.nextTicket {
		if !keepEarly {
			return nil, nil
		}
		var f *earlyFrame
		if n := len(m.spare); n > 0 {
			f = m.spare[n-1]
			m.spare[n-1] = nil
			m.spare = m.spare[:n-1]
		} else {
			f = &earlyFrame{}
		}
		if cap(f.buf) < size {
			f.buf = make([]byte, size)
		}
		f.data, f.size = f.buf[:size], size
		m.early.Push(f)
		m.flow.early.Add(int64(size))
		return nil, f
	}
	s := m.slots[m.fillTicket]
	m.fillTicket++
	return s, nil
}

func (m *mailbox) complete(s *slot, meta [4]uint64, n int, err error) {
	m.mu.Lock()
	s.meta, s.n, s.err = meta, n, err
	s.finish()
	m.mu.Unlock()
}

func (m *mailbox) stash(f *earlyFrame, meta [4]uint64, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f.meta, f.data, f.arrived = meta, data, true
	if f.slot != nil {
		f.slot.fillFrom(f)
		m.recycle(f)
	}
}

// recycle keeps f, whose payload has been copied out, for a later early
// frame. The caller holds m.mu.
func (m *mailbox) recycle(f *earlyFrame) {
	if len(m.spare) >= maxSpares || cap(f.buf) > maxSpareBytes {
		return
	}
	*f = earlyFrame{buf: f.buf}
	m.spare = append(m.spare, f)
}

// close fails every posted receive still open and all later ones with err.
func (m *mailbox) close(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = err
	for m.fillTicket < m.nextTicket {
		s := m.slots[m.fillTicket]
		m.fillTicket++
		s.err = err
		s.finish()
	}
}

// result returns a finished slot's outcome and recycles it; ok is false while
// the frame has not arrived.
func (m *mailbox) result(t uint64) (s *slot, meta [4]uint64, n int, err error, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s = m.slots[t]
	if s == nil {
		return nil, meta, 0, fmt.Errorf("tcp: wait on unknown ticket %d", t), true
	}
	if !s.done {
		return s, meta, 0, nil, false
	}
	meta, n, err = s.meta, s.n, s.err
	delete(m.slots, t)
	s.buf = nil
	select { // drain a signal nobody consumed
	case <-s.ready:
	default:
	}
	m.free = append(m.free, s)
	return nil, meta, n, err, true
}
