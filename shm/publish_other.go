//go:build !amd64 || purego

package shm

import "sync/atomic"

// storePlain is an atomic store where stores may be reordered.
func storePlain(w *atomic.Uint64, v uint64) { w.Store(v) }

// storesInOrder is false: plain stores are not used here.
const storesInOrder = false
