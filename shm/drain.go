package shm

import "github.com/gorun/gorun/mailbox"

// drain moves the next published record of p's ring, if any, into its
// frame's destination and reports whether it did (wrap records are passed
// over). The caller holds p.rxMu.
//
// One fragment per call: a rank that drained for as long as its peer kept
// publishing would stop sending its own chunks meanwhile, and the ring
// all-reduce's sends and receives would no longer overlap (measured
// slower at 64 MiB; the figures are in bench/results/HISTORY.md).
func (p *peer) drain() bool {
	tail, h, paged, ok := p.next()
	if !ok {
		return false
	}
	if isDirect(&h) {
		p.drainDirect(tail, &h, paged)
		return true
	}
	data, rec := p.in.fragment(tail, int(h.N), paged)
	p.boxes.Deliver(&h, data)
	p.noteUnclaimed()
	publish(p.in.tail, tail+rec, p.plain)
	return true
}

// next returns the position and header of the next published record of
// p's ring that carries a fragment, and whether the record is paged (see
// pagedFlag), releasing the wrap records before it; ok is false when none
// is published. The caller holds p.rxMu.
func (p *peer) next() (tail uint64, h mailbox.Header, paged, ok bool) {
	r := p.in
	for {
		tail = r.tail.Load()
		published, paged := r.record(tail)
		if !published {
			return tail, h, false, false
		}
		hdr := r.header(tail)
		if hdr[0] != wrapMark {
			return tail, mailbox.Get(hdr), paged, true
		}
		publish(r.tail, tail+r.toEnd(tail), p.plain)
	}
}

// What take did with the record at the ring's tail.
const (
	notYet = iota // nothing published there (another goroutine drained it)
	taken         // copied into the caller's buffer and released
	cannot        // left for drain: not a whole frame of the stream, or the mailbox holds frames of the stream
)

// take hands the next frame of p's ring straight to a caller that wants
// the next frame on stream in buf, when the record at the tail holds that
// whole frame, fits buf, and nothing of stream waits in the mailbox;
// wrap records are passed over. The caller holds p.rxMu.
func (p *peer) take(stream uint32, buf []byte) (meta [4]uint64, n int, got int) {
	tail, h, paged, ok := p.next()
	if !ok {
		return meta, 0, notYet
	}
	if h.Stream != stream || h.Flags != mailbox.First|mailbox.Last || h.Total != uint64(h.N) || int(h.N) > len(buf) || !p.boxes.Idle(stream) {
		return meta, 0, cannot
	}
	data, rec := p.in.fragment(tail, int(h.N), paged)
	if len(data) < int(h.N) {
		return meta, 0, cannot // corrupt: the mailbox reports it
	}
	copy(buf, data[:h.N])
	publish(p.in.tail, tail+rec, p.plain)
	return h.Meta, int(h.N), taken
}
