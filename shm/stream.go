package shm

import "unsafe"

// streamBytes is the fragment size from which a sender copies into the
// receiver's ring with non-temporal stores. A regular store must first
// take the cache line from the receiving core, which read it the last time
// round the ring (a read-for-ownership per line); a non-temporal store
// writes around the caches. From 8 KiB up, streaming roughly halved the
// time of an all-reduce; at 4 KiB it depends on the cores: it helped a
// little where they share no cache and cost more where they share one,
// so regular stores are kept below 8 KiB (the A/B runs are in
// bench/results/HISTORY.md). Go's copy streams too, but only from 1 MiB.
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
