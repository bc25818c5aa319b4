package shm

import "sync/atomic"

// Publishing a slot (its sequence word) or releasing one (the ring's tail)
// is a store the other process polls for. An atomic store compiles to XCHG
// on amd64, which waits until the store is visible to every core: the
// cache line must first be taken from the core polling it. A plain store
// leaves that to the store buffer, and x86 keeps stores in program order,
// so the header and data written before it are visible first.
//
// What the plain store gives up is the ordering between the store and the
// load that follows it, of the peer's sleepers count in ringBell: without
// it a peer about to sleep could read the old word and sleep through the
// bell (until its sleep slice ends). A sleeping rank restores that
// ordering from its side, by running membarrier(GLOBAL_EXPEDITED) between
// announcing itself in sleepers and re-reading the words: the kernel makes
// every running thread of the registered processes execute a full barrier,
// so either the publisher's store is visible to the re-read, or the
// publisher's load of sleepers comes after the announcement. The cost,
// microseconds, falls on the path that is about to sleep anyway.
//
// A transport publishes with plain stores only where this process is
// registered for those barriers (Linux 4.16 and later) and the CPU keeps
// stores in order (amd64); everywhere else with atomic stores.

// publish stores v into w for another process to read.
func publish(w *atomic.Uint64, v uint64, plain bool) {
	if plain {
		storePlain(w, v)
		return
	}
	w.Store(v)
}
