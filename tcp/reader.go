package tcp

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/klauspost/compress/s2"
)

// The receive side of a connection is a state machine driven by pump, which
// reads with non-blocking read(2) until the socket is empty. Two parties
// pump: the peer's reader goroutine, woken by the netpoller when data comes,
// and a call waiting for data from that peer, which pumps itself (and spins
// briefly) instead of sleeping and being woken — that saves the two
// wake-ups which dominate small-message latency. The per-peer mutex rmu
// serialises them; whoever holds it reads until EAGAIN before letting go,
// and a party that finds it taken sets missed, so the holder pumps again
// after unlocking: no arrival is ever left unread.

// stageSize is the staging buffer headers and small payloads are read
// into; larger payloads are read straight into their destination.
const stageSize = 64 << 10

type recvState struct {
	order      *ioOrder // the transport's, acquired before every read
	stage      []byte
	beg, end   int // unparsed bytes in stage[beg:end]
	inFrame    bool
	hdr        Header
	dst        []byte // where the payload goes
	got        int
	discard    bool // payload is read and dropped (frame larger than its receive, or none after a failure)
	sink       int  // payload bytes still to drop of a frame nobody will receive
	compressed []byte
	box        *mailbox
	slot       *slot
	early      *earlyFrame
	done       bool   // the connection ended (bye, error)
	reads      uint64 // read(2) calls made, for tests
}

// errAgain means the socket has no more data for now.
var errAgain = errors.New("again")

// progress pumps p if nobody else is; it never blocks.
func (t *Transport) progress(p *peer) {
	for {
		if !p.rmu.TryLock() {
			p.missed.Store(true)
			if !p.rmu.TryLock() {
				return // the holder will see missed
			}
		}
		p.missed.Store(false)
		if !p.rs.done {
			p.rc.Control(p.pumpFn)
		}
		p.rmu.Unlock()
		if !p.missed.Load() {
			return
		}
	}
}

// pump reads and delivers frames until the socket is empty or the
// connection ends. The caller holds p.rmu.
func (t *Transport) pump(p *peer, fd int) {
	rs := &p.rs
	for !rs.done {
		err := t.step(p, fd)
		if err == errAgain {
			return
		}
		if err != nil {
			rs.done = true
			p.gone.Store(true)
			if !errors.Is(err, errBye) {
				t.readFailed(p, err)
			}
			return
		}
	}
}

var errBye = errors.New("bye")

// readInto reads from fd into b; io.EOF at end of stream, errAgain when empty.
func (rs *recvState) readInto(fd int, b []byte) (int, error) {
	for {
		rs.order.acquire()
		rs.reads++
		n, err := rawRead(fd, b)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, errAgain
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// step makes one unit of progress: parse a header, move payload bytes, or
// finish a frame. It returns errAgain when it needs data that has not come.
func (t *Transport) step(p *peer, fd int) error {
	rs := &p.rs
	if !rs.inFrame {
		if rs.end-rs.beg < HeaderSize {
			return rs.fill(fd)
		}
		h, err := DecodeHeader(rs.stage[rs.beg : rs.beg+HeaderSize])
		if err != nil {
			return fmt.Errorf("corrupt frame: %w", err)
		}
		if isData(h.Kind) && p.flow.paused(h.Len) && t.Err() == nil && p.box(h.Stream).queues() {
			return errAgain // the frame stays in the stage; a wait reads it (flow)
		}
		rs.beg += HeaderSize
		return t.beginFrame(p, h)
	}
	if rs.sink > 0 {
		if avail := rs.end - rs.beg; avail > 0 {
			n := min(avail, rs.sink)
			rs.beg += n
			rs.sink -= n
			return nil
		}
		return rs.fill(fd)
	}
	if need := len(rs.dst) - rs.got; need > 0 {
		if avail := rs.end - rs.beg; avail > 0 {
			n := copy(rs.dst[rs.got:], rs.stage[rs.beg:rs.end])
			rs.beg += n
			rs.got += n
			return nil
		}
		if need < stageSize/4 {
			return rs.fill(fd)
		}
		n, err := rs.readInto(fd, rs.dst[rs.got:])
		rs.got += n
		return err
	}
	return t.endFrame(p)
}

// fill reads into the staging buffer.
func (rs *recvState) fill(fd int) error {
	if rs.beg > 0 {
		rs.end = copy(rs.stage, rs.stage[rs.beg:rs.end])
		rs.beg = 0
	}
	n, err := rs.readInto(fd, rs.stage[rs.end:])
	rs.end += n
	return err
}

// isData reports whether frames of kind k go to a mailbox.
func isData(k Kind) bool {
	return k != KindBye && k != KindAbort && k != KindControl
}

func (t *Transport) beginFrame(p *peer, h Header) error {
	rs := &p.rs
	rs.hdr, rs.inFrame, rs.got, rs.discard = h, true, 0, false
	rs.slot, rs.early, rs.box = nil, nil, nil
	switch h.Kind {
	case KindBye, KindAbort, KindControl:
		rs.dst = make([]byte, h.Len)
		return nil
	}
	rs.box = p.box(h.Stream)
	rs.slot, rs.early = rs.box.claim(int(h.RawLen), t.Err() == nil)
	if rs.slot == nil && rs.early == nil {
		// The transport failed: nothing will receive this frame.
		rs.discard, rs.dst, rs.sink = true, nil, int(h.Len)
		return nil
	}
	var out []byte
	switch {
	case rs.slot == nil:
		out = rs.early.data
	case h.RawLen > uint64(len(rs.slot.buf)):
		rs.discard = true
	default:
		out = rs.slot.buf[:h.RawLen]
	}
	switch {
	case rs.discard || h.Flags&flagS2 != 0:
		if uint64(cap(p.rz)) < h.Len {
			p.rz = make([]byte, h.Len)
		}
		rs.dst = p.rz[:h.Len]
		rs.compressed = out
	default:
		rs.dst = out
	}
	return nil
}

func (t *Transport) endFrame(p *peer) error {
	rs := &p.rs
	rs.inFrame = false
	h := &rs.hdr
	switch h.Kind {
	case KindBye:
		err := &LeftError{Rank: p.rank, Farewell: string(rs.dst)}
		p.left.Store(err)
		p.bye.Store(true)
		p.sure.Store(true)
		p.gone.Store(true)
		p.boxMu.Lock()
		for _, m := range p.boxes {
			m.close(err)
		}
		p.boxMu.Unlock()
		return errBye
	case KindAbort:
		t.fail(&AbortError{Rank: p.rank, Msg: string(rs.dst)})
		return nil
	case KindControl:
		if f := t.cfg.Control; f != nil {
			// In order, before anything that follows on this connection
			// (its end: Gone): a message sent before a rank left is seen.
			f(p.rank, rs.dst)
		}
		return nil
	}
	if rs.discard && rs.slot == nil {
		return nil // (sunk)
	}
	if rs.discard {
		rs.box.complete(rs.slot, h.Meta, 0, fmt.Errorf("%w: %d bytes arrived for a %d-byte receive", ErrFrameTooLarge, h.RawLen, len(rs.slot.buf)))
		return nil
	}
	data := rs.dst
	var derr error
	if h.Flags&flagS2 != 0 {
		data = rs.compressed
		if n, err := s2.DecodedLen(rs.dst); err != nil || n != len(data) {
			derr = fmt.Errorf("compressed frame decodes to %d bytes, header says %d: %v", n, len(data), err)
		} else if _, err := s2.Decode(data, rs.dst); err != nil {
			derr = fmt.Errorf("decompress frame: %w", err)
		}
	}
	if rs.slot == nil {
		if derr != nil {
			return derr
		}
		rs.box.stash(rs.early, h.Meta, data)
		return nil
	}
	rs.box.complete(rs.slot, h.Meta, len(data), derr)
	return nil
}

// read runs for each peer: it sleeps until the socket is readable, then
// pumps, for as long as the connection lives.
func (t *Transport) read(p *peer) {
	defer t.readers.Done()
	for {
		err := p.rc.Read(p.readFn)
		if p.ended || p.peekDone() {
			return
		}
		if err != nil {
			t.readFailed(p, err)
			return
		}
	}
}

// bindReader makes the callbacks the receive side hands to the runtime, once
// per connection, so that pumping allocates nothing.
func (t *Transport) bindReader(p *peer) {
	p.pumpFn = func(fd uintptr) { t.pump(p, int(fd)) }
	p.pollFn = func(fd uintptr) { p.readable.Store(rawReadable(int(fd))) }
	p.writeFn = func(fd uintptr) bool {
		for len(p.iov[0])+len(p.iov[1]) > 0 {
			n, err := rawWritev(int(fd), &p.iov)
			switch {
			case err == syscall.EINTR:
			case err == syscall.EAGAIN:
				return false
			case err != nil:
				p.werr = err
				return true
			default:
				h := min(n, len(p.iov[0]))
				p.iov[0] = p.iov[0][h:]
				p.iov[1] = p.iov[1][n-h:]
			}
		}
		return true
	}
	p.readFn = func(fd uintptr) bool {
		if !p.rmu.TryLock() {
			p.missed.Store(true)
			if !p.rmu.TryLock() {
				return false // the holder pumps again; wait for the next arrival
			}
		}
		p.missed.Store(false)
		t.pump(p, int(fd))
		p.ended = p.rs.done
		p.rmu.Unlock()
		if p.missed.Load() {
			t.progress(p)
			p.ended = p.ended || p.peekDone()
		}
		return p.ended
	}
}

func (p *peer) peekDone() bool {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	return p.rs.done
}
