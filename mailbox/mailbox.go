// Package mailbox matches the frames a slotted transport receives from one
// peer with the receives the algorithms post, for the transports that move
// frames in fixed-size fragments (shm through shared memory, rdma through
// registered memory). A frame is cut into fragments, each in one slot
// behind a Header; Deliver hands them over in order and the mailbox copies
// each into the receive posted for its stream, or keeps it until that
// receive is posted. DeliverFrom takes a whole frame the transport reads
// itself (shm's direct frames, read from the sender's memory) straight
// into the same places.
//
// A Peer is not safe for concurrent use: the transport serializes Post,
// Result and Deliver for one peer (its receive lock).
package mailbox

import (
	"errors"
	"fmt"
	"io"
)

// ErrFrameTooLarge is wrapped by the error of a receive whose frame is
// larger than the posted buffer: the two sides disagree about the call.
var ErrFrameTooLarge = errors.New("frame larger than the posted receive")

// ErrTimeout is wrapped by a transport's error for a wait that outlived
// the transport's own timeout (its Config.Timeout), as opposed to one
// its caller's context ended: "nothing moved within 5m0s (the
// transport's timeout)".
var ErrTimeout = errors.New("the transport's timeout")

// Header flags.
const (
	First = 1 << iota // the frame's first fragment
	Last              // the frame's last fragment
)

// HeaderWords is the size of an encoded Header in 64-bit words.
const HeaderWords = 6

// MaxFragment bounds a fragment's length (the encoded header keeps it in
// 30 bits); transports cut frames into fragments no longer than this.
const MaxFragment = 1<<30 - 1

// Header describes one fragment of a frame.
type Header struct {
	Stream uint32
	Flags  uint32    // First, Last (two bits)
	Total  uint64    // the whole frame's length (read from the first fragment)
	N      uint32    // this fragment's length, at most MaxFragment
	Meta   [4]uint64 // the frame's metadata (read from the first fragment)
}

// Put encodes h into the first HeaderWords words of w: the stream, the
// flags and the fragment's length share the first.
func (h *Header) Put(w []uint64) {
	w[0] = uint64(h.Stream) | uint64(h.Flags&(First|Last))<<32 | uint64(h.N&MaxFragment)<<34
	w[1] = h.Total
	w[2], w[3], w[4], w[5] = h.Meta[0], h.Meta[1], h.Meta[2], h.Meta[3]
}

// Get decodes a Header from the first HeaderWords words of w.
func Get(w []uint64) Header {
	return Header{Stream: uint32(w[0]), Flags: uint32(w[0]>>32) & (First | Last), Total: w[1], N: uint32(w[0] >> 34),
		Meta: [4]uint64{w[2], w[3], w[4], w[5]}}
}

// Peer holds the mailboxes of one peer, one per stream, and the frame
// being reassembled from its fragments.
type Peer struct {
	boxes map[uint32]*box
	// last is the box of stream lastStream, the one most recently looked
	// up: a group's collectives keep to one stream.
	last       *box
	lastStream uint32
	cur        incoming
	spare      []*early // consumed early frames kept for reuse, with their buffers
	unclaimed  int      // early frames not yet claimed by a Post, over all streams
	scratch    []byte   // DeliverFrom's bytes on their way into a combining receive
}

// Early frames are recycled, so that a peer that is often ahead of this
// rank (a frame arriving before its receive is posted) costs no
// allocation in steady state; buffers larger than maxSpareBytes are left
// to the collector.
const (
	maxSpares     = 8
	maxSpareBytes = 1 << 20
)

// box holds, for one stream, the posted receives and the frames that
// arrived before theirs was posted. Frames fill receives in order.
type box struct {
	next, fill uint64 // ticket of the next Post; ticket the next frame fills
	// base is the oldest ticket whose result was not yet taken; pending
	// holds the receives of tickets base..next-1 at ticket mod its length
	// (a power of two), nil where a result was taken out of order.
	base    uint64
	pending []*recv
	free    []*recv // recycled: steady state allocates nothing
	early   FIFO[*early]
}

// minPending is the initial length of a box's pending ring.
const minPending = 8

// add registers r under ticket next, growing the ring when it is full.
func (m *box) add(r *recv) uint64 {
	if m.next-m.base == uint64(len(m.pending)) {
		grown := make([]*recv, max(2*len(m.pending), minPending))
		for t := m.base; t < m.next; t++ {
			grown[t&uint64(len(grown)-1)] = m.pending[t&uint64(len(m.pending)-1)]
		}
		m.pending = grown
	}
	t := m.next
	m.pending[t&uint64(len(m.pending)-1)] = r
	m.next++
	return t
}

// get returns the receive of ticket t; nil when t was never issued or
// its result was already taken.
func (m *box) get(t uint64) *recv {
	if t < m.base || t >= m.next {
		return nil
	}
	return m.pending[t&uint64(len(m.pending)-1)]
}

// forget drops ticket t, whose result was taken.
func (m *box) forget(t uint64) {
	m.pending[t&uint64(len(m.pending)-1)] = nil
	for m.base < m.next && m.pending[m.base&uint64(len(m.pending)-1)] == nil {
		m.base++
	}
}

type recv struct {
	buf     []byte
	combine Combine // nil: copy
	meta    [4]uint64
	n       int
	err     error
	done    bool
}

// Combine folds arriving bytes into a posted buffer instead of copying
// them over it (a reduction): dst and src have the same length, a
// multiple of 8 bytes except at a frame's end.
type Combine func(dst, src []byte)

// early is a frame that came before its receive; recv is set when the
// receive is posted while the frame is still arriving.
type early struct {
	meta     [4]uint64
	data     []byte
	complete bool
	err      error // the fragments overflowed the declared length
	recv     *recv
}

// incoming is the frame being reassembled.
type incoming struct {
	active bool
	stream uint32
	dst    []byte
	got    int
	recv   *recv  // the posted receive it fills, or
	early  *early // the early frame it fills
	meta   [4]uint64
	tooBig bool
}

// NewPeer returns an empty set of mailboxes.
func NewPeer() *Peer { return &Peer{boxes: map[uint32]*box{}} }

func (p *Peer) box(stream uint32) *box {
	if p.last != nil && p.lastStream == stream {
		return p.last
	}
	m := p.boxes[stream]
	if m == nil {
		m = &box{}
		p.boxes[stream] = m
	}
	p.last, p.lastStream = m, stream
	return m
}

// Post registers buf for the next frame on stream not yet claimed and
// returns its ticket. A frame that already arrived is copied in at once.
func (p *Peer) Post(stream uint32, buf []byte) uint64 { return p.PostCombine(stream, buf, nil) }

// PostCombine is Post with the frame folded into buf by combine as its
// fragments arrive, instead of copied. Fragments other than the last must
// be multiples of 8 bytes.
func (p *Peer) PostCombine(stream uint32, buf []byte, combine Combine) uint64 {
	m := p.box(stream)
	var r *recv
	if n := len(m.free); n > 0 {
		r, m.free = m.free[n-1], m.free[:n-1]
	} else {
		r = &recv{}
	}
	*r = recv{buf: buf, combine: combine}
	t := m.add(r)
	if m.early.Len() > 0 {
		e := m.early.Pop()
		m.fill++
		p.unclaimed--
		if e.complete {
			r.fillFrom(e)
			p.recycle(e)
		} else {
			e.recv = r
		}
	}
	return t
}

func (r *recv) fillFrom(e *early) {
	r.meta = e.meta
	if e.err != nil {
		r.err = e.err
	} else if len(e.data) > len(r.buf) {
		r.err = fmt.Errorf("%w: %d bytes arrived for a %d-byte receive", ErrFrameTooLarge, len(e.data), len(r.buf))
	} else if r.combine != nil {
		r.combine(r.buf[:len(e.data)], e.data)
		r.n = len(e.data)
	} else {
		r.n = copy(r.buf, e.data)
	}
	r.done = true
}

// Unclaimed returns how many frames wait in the mailboxes, whole or
// arriving, for a receive that has not been posted.
func (p *Peer) Unclaimed() int { return p.unclaimed }

// Idle reports whether the next frame on stream would fill the next
// receive posted on it: no receive is posted and waiting, no frame waits
// for one, and no frame of stream is arriving. A transport may then hand
// that frame, when it comes whole in one fragment, straight to its caller
// instead of through Post, Deliver and Result.
func (p *Peer) Idle(stream uint32) bool {
	if p.cur.active && p.cur.stream == stream {
		return false
	}
	m := p.box(stream)
	return m.fill == m.next && m.early.Len() == 0
}

// Result returns the outcome of a posted receive once its frame has fully
// arrived (ok) and forgets the ticket.
func (p *Peer) Result(stream uint32, ticket uint64) (meta [4]uint64, n int, err error, ok bool) {
	m := p.box(stream)
	r := m.get(ticket)
	if r == nil {
		return meta, 0, fmt.Errorf("wait on unknown ticket %d of stream %#x", ticket, stream), true
	}
	if !r.done {
		return meta, 0, nil, false
	}
	meta, n, err = r.meta, r.n, r.err
	m.forget(ticket)
	*r = recv{}
	m.free = append(m.free, r)
	return meta, n, err, true
}

// Deliver takes the next fragment from the peer: its header and its data
// (at least h.N bytes). Fragments must come in the order they were sent.
func (p *Peer) Deliver(h *Header, data []byte) {
	c := &p.cur
	if h.Flags&First != 0 {
		p.begin(h)
	}
	if c.active && !c.tooBig {
		if c.got+int(h.N) > len(c.dst) || int(h.N) > len(data) {
			p.overflow(h, len(data))
		} else if c.recv != nil && c.recv.combine != nil {
			c.recv.combine(c.dst[c.got:c.got+int(h.N)], data[:h.N])
		} else {
			copy(c.dst[c.got:], data[:h.N])
		}
	}
	c.got += int(h.N)
	if h.Flags&Last != 0 {
		p.end()
	}
}

// scratchBytes is the most a frame that DeliverFrom folds into a
// combining receive is read in one piece: the piece is still in the
// core's cache when it is folded in.
const scratchBytes = 256 << 10

// DeliverFrom takes a whole frame whose bytes the transport reads itself
// from src (at offsets 0 to h.Total; h.Flags and h.N are not looked at):
// straight into the posted receive it fills, or into the early frame
// that waits for its receive, or, for a receive that combines, piece by
// piece through a scratch buffer. No frame may be arriving in fragments
// meanwhile. A read that fails fails the frame's receive with its error,
// which DeliverFrom also returns; a frame larger than its receive is
// reported there and not read (nil is returned).
func (p *Peer) DeliverFrom(h *Header, src io.ReaderAt) error {
	p.begin(h)
	c := &p.cur
	var err error
	switch {
	case c.tooBig:
	case c.recv != nil && c.recv.combine != nil:
		if len(p.scratch) < min(len(c.dst), scratchBytes) {
			p.scratch = make([]byte, min(len(c.dst), scratchBytes))
		}
		for off := 0; off < len(c.dst) && err == nil; off += scratchBytes {
			piece := p.scratch[:min(len(c.dst)-off, scratchBytes)]
			if _, err = src.ReadAt(piece, int64(off)); err == nil {
				c.recv.combine(c.dst[off:off+len(piece)], piece)
			}
		}
	default:
		_, err = src.ReadAt(c.dst, 0)
	}
	if err != nil {
		err = fmt.Errorf("reading a %d-byte frame: %w", h.Total, err)
		if c.recv != nil {
			c.recv.err = err
		} else {
			c.early.err = err
		}
	}
	c.got = len(c.dst)
	p.end()
	return err
}

func (p *Peer) begin(h *Header) {
	m := p.box(h.Stream)
	c := &p.cur
	*c = incoming{active: true, stream: h.Stream, meta: h.Meta}
	if m.fill < m.next {
		r := m.get(m.fill)
		m.fill++
		c.recv = r
		if h.Total > uint64(len(r.buf)) {
			c.tooBig = true
			r.err = fmt.Errorf("%w: %d bytes arrived for a %d-byte receive", ErrFrameTooLarge, h.Total, len(r.buf))
			return
		}
		c.dst = r.buf[:h.Total]
		return
	}
	e := p.newEarly(h.Total)
	e.meta = h.Meta
	m.early.Push(e)
	p.unclaimed++
	c.early, c.dst = e, e.data
}

// newEarly returns an early frame with a buffer of n bytes, reusing the
// most recently kept spare that is large enough.
func (p *Peer) newEarly(n uint64) *early {
	for i := len(p.spare) - 1; i >= 0; i-- {
		e := p.spare[i]
		if uint64(cap(e.data)) < n {
			continue
		}
		last := len(p.spare) - 1
		p.spare[i], p.spare[last] = p.spare[last], nil
		p.spare = p.spare[:last]
		e.data = e.data[:n]
		return e
	}
	return &early{data: make([]byte, n)}
}

// recycle keeps a consumed early frame for reuse. With maxSpares kept
// already, it takes the place of the smallest when it is larger: spares
// left by a run of small frames must not stand in the way of larger ones
// that follow (each would be allocated and dropped again — measured: a
// 64 KiB Reduce on four ranks at half its speed after a run of 1 KiB
// ones, bench/results/HISTORY.md).
func (p *Peer) recycle(e *early) {
	if cap(e.data) > maxSpareBytes {
		return
	}
	*e = early{data: e.data[:0]}
	if len(p.spare) < maxSpares {
		p.spare = append(p.spare, e)
		return
	}
	small := 0
	for i, s := range p.spare {
		if cap(s.data) < cap(p.spare[small].data) {
			small = i
		}
	}
	if cap(p.spare[small].data) < cap(e.data) {
		p.spare[small] = e
	}
}

// overflow fails the frame being reassembled: its fragments carry more
// than it declared (or than their slot holds).
func (p *Peer) overflow(h *Header, room int) {
	c := &p.cur
	c.tooBig = true
	err := fmt.Errorf("corrupt frame: a %d-byte fragment after %d bytes of a %d-byte frame (slot of %d bytes)", h.N, c.got, len(c.dst), room)
	if c.recv != nil {
		c.recv.err = err
	} else if c.early != nil {
		c.early.err = err
	}
}

func (p *Peer) end() {
	c := &p.cur
	switch {
	case c.recv != nil:
		c.recv.meta, c.recv.n, c.recv.done = c.meta, c.got, true
		if c.tooBig {
			c.recv.n = 0
		}
	case c.early != nil:
		e := c.early
		e.complete = true
		e.data = e.data[:min(c.got, len(e.data))] // a frame cut short delivers what came
		if e.recv != nil {
			e.recv.fillFrom(e)
			p.recycle(e)
		}
	}
	*c = incoming{}
}
