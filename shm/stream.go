package shm

import "unsafe"

// streamBytes is the fragment size from which a sender copies into the
// receiver's ring with non-temporal stores. A regular store must first
// take the cache line from the receiving core, which read it the last time
// round the ring (a read-for-ownership per line); a non-temporal store
// writes around the caches. A/B on the 2-core VM (BENCHMARKS.md), np = 2
// all-reduce: 8 KiB 3.3 → 2.1 µs, 64 KiB 19–22 → 10–11.5 µs, 1 MiB
// 225–252 → 130–153 µs. At 4 KiB it depends on the cores: where they
// share no cache streaming saved 0.3 µs (1.48 → 1.18), where they share
// one (stretches of the same VM, vader then 2–3× faster) it cost 0.5
// (0.45–0.64 → 0.94–1.08, vader 0.96–1.0); regular stores win there by
// more than they lose here, and beat vader either way. (Go's copy streams
// too, but only from 1 MiB.)
const streamBytes = 8 << 10

// copyToPeer copies src into dst (a slot in another process's ring) like
// copy, streaming large copies past the caches where the CPU allows.
// Streamed stores are fenced before it returns, so a later store that
// publishes the slot cannot overtake them.
func copyToPeer(dst, src []byte) int {
	n := min(len(dst), len(src))
	if !haveStream || n < streamBytes {
		return copy(dst, src)
	}
	head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 63) // to a 64-byte boundary
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	if body > 0 {
		stream64(&dst[head], &src[head], body)
	}
	copy(dst[head+body:n], src[head+body:n])
	return n
}
