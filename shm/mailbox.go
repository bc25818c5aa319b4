package shm

import "fmt"

// mailbox holds, for one peer and stream, the posted receives and the
// frames that arrived before theirs was posted. Frames fill receives in
// order. All of it is guarded by the peer's rxMu.
type mailbox struct {
	next, fill uint64 // ticket of the next Post; ticket the next frame fills
	recvs      map[uint64]*recv
	free       []*recv
	early      []*early
}

type recv struct {
	buf  []byte
	meta [4]uint64
	n    int
	err  error
	done bool
}

// early is a frame that came before its receive; recv is set when the
// receive is posted while the frame is still arriving.
type early struct {
	meta     [4]uint64
	data     []byte
	complete bool
	recv     *recv
}

// incoming is the frame being reassembled from a peer's slots.
type incoming struct {
	active bool
	dst    []byte
	got    int
	recv   *recv  // the posted receive it fills, or
	early  *early // the early frame it fills
	meta   [4]uint64
	tooBig bool
}

func (p *peer) box(stream uint32) *mailbox {
	m := p.boxes[stream]
	if m == nil {
		m = &mailbox{recvs: map[uint64]*recv{}}
		p.boxes[stream] = m
	}
	return m
}

func (m *mailbox) post(buf []byte) uint64 {
	var r *recv
	if n := len(m.free); n > 0 {
		r, m.free = m.free[n-1], m.free[:n-1]
	} else {
		r = &recv{}
	}
	*r = recv{buf: buf}
	t := m.next
	m.next++
	m.recvs[t] = r
	if len(m.early) > 0 {
		e := m.early[0]
		m.early[0] = nil
		m.early = m.early[1:]
		m.fill++
		if e.complete {
			r.fillFrom(e)
		} else {
			e.recv = r
		}
	}
	return t
}

func (r *recv) fillFrom(e *early) {
	r.meta = e.meta
	if len(e.data) > len(r.buf) {
		r.err = fmt.Errorf("%w: %d bytes arrived for a %d-byte receive", ErrFrameTooLarge, len(e.data), len(r.buf))
	} else {
		r.n = copy(r.buf, e.data)
	}
	r.done = true
}

func (m *mailbox) result(ticket uint64) (meta [4]uint64, n int, err error, ok bool) {
	r := m.recvs[ticket]
	if r == nil {
		return meta, 0, fmt.Errorf("shm: wait on unknown ticket %d", ticket), true
	}
	if !r.done {
		return meta, 0, nil, false
	}
	meta, n, err = r.meta, r.n, r.err
	delete(m.recvs, ticket)
	*r = recv{}
	m.free = append(m.free, r)
	return meta, n, err, true
}

// drain moves every published slot of p's ring into its frame's
// destination; it reports whether it released any slot. The caller holds
// p.rxMu.
func (p *peer) drain() bool {
	r := p.in
	tail, head := r.tail.Load(), r.head.Load()
	if tail == head {
		return false
	}
	for ; tail < head; tail++ {
		hdr, data := r.slot(tail)
		h := getHdr(hdr)
		c := &p.cur
		if h.flags&flagFirst != 0 {
			p.begin(&h)
		}
		if c.active && !c.tooBig {
			copy(c.dst[c.got:], data[:h.n])
		}
		c.got += int(h.n)
		if h.flags&flagLast != 0 {
			p.end()
		}
		r.tail.Store(tail + 1)
	}
	return true
}

func (p *peer) begin(h *slotHdr) {
	m := p.box(h.stream)
	c := &p.cur
	*c = incoming{active: true, meta: h.meta}
	if m.fill < m.next {
		r := m.recvs[m.fill]
		m.fill++
		c.recv = r
		if h.total > uint64(len(r.buf)) {
			c.tooBig = true
			r.err = fmt.Errorf("%w: %d bytes arrived for a %d-byte receive", ErrFrameTooLarge, h.total, len(r.buf))
			return
		}
		c.dst = r.buf[:h.total]
		return
	}
	e := &early{meta: h.meta, data: make([]byte, h.total)}
	m.early = append(m.early, e)
	c.early, c.dst = e, e.data
}

func (p *peer) end() {
	c := &p.cur
	switch {
	case c.recv != nil:
		c.recv.meta, c.recv.n, c.recv.done = c.meta, c.got, true
		if c.tooBig {
			c.recv.n = 0
		}
	case c.early != nil:
		c.early.complete = true
		if c.early.recv != nil {
			c.early.recv.fillFrom(c.early)
			c.early.data = nil
		}
	}
	*c = incoming{}
}
