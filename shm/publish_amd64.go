//go:build amd64 && !purego

package shm

import "sync/atomic"

// storePlain stores v into w with a plain MOV: ordered after earlier
// stores, not fenced against later loads.
//
//go:noescape
func storePlain(w *atomic.Uint64, v uint64)

// storesInOrder: amd64 keeps stores in program order (TSO).
const storesInOrder = true
