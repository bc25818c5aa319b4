package shm

import "github.com/gorun/gorun/comm/mailbox"

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
		h := mailbox.Get(hdr)
		p.boxes.Deliver(&h, data)
		r.tail.Store(tail + 1)
	}
	return true
}
