package shm

import (
	"sync/atomic"
	"testing"
)

// TestPublishStoresTheValue: the plain store (assembly on amd64) and the
// atomic one leave the same word behind.
func TestPublishStoresTheValue(t *testing.T) {
	for _, v := range []uint64{0, 1, 1 << 32, ^uint64(0), 0x0123456789abcdef} {
		for _, plain := range []bool{false, true} {
			var w atomic.Uint64
			w.Store(42)
			publish(&w, v, plain)
			if got := w.Load(); got != v {
				t.Errorf("publish(%#x, plain=%v) left %#x", v, plain, got)
			}
		}
	}
}
