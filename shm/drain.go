package shm

import "github.com/gorun/gorun/comm/mailbox"

// drain moves the next published record of p's ring, if any, into its
// frame's destination and reports whether it did (wrap records are passed
// over). The caller holds p.rxMu.
//
// One fragment per call: a rank that drained for as long as its peer kept
// publishing would stop sending its own chunks meanwhile, and the ring
// all-reduce's sends and receives would no longer overlap (64 MiB,
// np = 2: 9.5–10.1 ms draining everything, 6.8–7.0 ms one fragment a call).
func (p *peer) drain() bool {
	r := p.in
	for {
		tail := r.tail.Load()
		if !r.published(tail) {
			return false
		}
		hdr := r.header(tail)
		if hdr[0] == wrapMark {
			publish(r.tail, tail+r.toEnd(tail), p.plain)
			continue
		}
		h := mailbox.Get(hdr)
		data, rec := r.fragment(tail, int(h.N))
		p.boxes.Deliver(&h, data)
		publish(r.tail, tail+rec, p.plain)
		return true
	}
}
