//go:build race

package tcp

import "sync"

// ioOrder tells the race detector what the network already guarantees: a
// frame a rank reads was sent after everything its peers did before sending
// the frames it was computed from. The collectives rely on this: the ring
// all-reduce posts the receive for a chunk's final value into the user's
// buffer before this rank has reduced into that chunk, because that value
// can only be sent once this rank's partial sum of the chunk has reached its
// neighbour. The detector cannot see causality that runs through other
// processes, so every send releases this transport-wide lock just before
// its write(2) and every read(2) acquires it just before reading, as the
// standard library's I/O annotations do for os and net. Builds without the
// race detector compile this to nothing.
type ioOrder struct{ mu sync.Mutex }

// released marks everything this goroutine did so far as visible to reads
// that start later.
func (o *ioOrder) released() { o.pass() }

// acquire makes every earlier release visible to this goroutine.
func (o *ioOrder) acquire() { o.pass() }

// pass goes through the lock: Lock orders this goroutine after every earlier
// Unlock, and Unlock orders it before every later Lock.
func (o *ioOrder) pass() {
	o.mu.Lock()
	//lint:ignore SA2001 the empty critical section is the point
	o.mu.Unlock()
}
