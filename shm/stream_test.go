package shm

import (
	"bytes"
	"fmt"
	"testing"
)

// TestCopyToPeerMatchesCopy: the streaming copy (assembly on amd64) gives
// exactly what copy gives, for every alignment of either side and lengths
// around the threshold and the 64-byte blocks, and writes nothing past the
// copied bytes.
func TestCopyToPeerMatchesCopy(t *testing.T) {
	lengths := []int{0, 1, 63, streamBytes - 1, streamBytes, streamBytes + 1, streamBytes + 63, 65536 + 13, 1<<20 + 5}
	for _, n := range lengths {
		for _, dstOff := range []int{0, 1, 8, 15, 16, 33, 63} {
			for _, srcOff := range []int{0, 3, 16} {
				t.Run(fmt.Sprintf("n=%d/dst+%d/src+%d", n, dstOff, srcOff), func(t *testing.T) {
					src := make([]byte, n+srcOff)
					for i := range src {
						src[i] = byte(i*7 + i>>8)
					}
					got := bytes.Repeat([]byte{0xEE}, n+dstOff+64)
					want := bytes.Clone(got)
					if c := copyToPeer(got[dstOff:dstOff+n], src[srcOff:]); c != n {
						t.Fatalf("copied %d bytes, want %d", c, n)
					}
					copy(want[dstOff:dstOff+n], src[srcOff:])
					if i := firstDiff(got, want); i >= 0 {
						t.Fatalf("byte %d: got %#x, want %#x", i, got[i], want[i])
					}
				})
			}
		}
	}
}

// TestCopyToPeerShortSide: like copy, it stops at the shorter slice.
func TestCopyToPeerShortSide(t *testing.T) {
	src := bytes.Repeat([]byte{1}, 3*streamBytes)
	dst := make([]byte, 2*streamBytes+5)
	if n := copyToPeer(dst, src); n != len(dst) || !bytes.Equal(dst, src[:len(dst)]) {
		t.Fatalf("copied %d bytes", n)
	}
	dst = make([]byte, 3*streamBytes)
	if n := copyToPeer(dst, src[:streamBytes+9]); n != streamBytes+9 || !bytes.Equal(dst[:n], src[:n]) || dst[n] != 0 {
		t.Fatalf("copied %d bytes", n)
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// BenchmarkCopyToPeer compares the streaming copy with copy within one
// process (where the destination stays in this core's cache, so copy wins
// here; the streaming copy pays between processes, see BENCHMARKS.md).
func BenchmarkCopyToPeer(b *testing.B) {
	for _, n := range []int{4 << 10, 64 << 10, 512 << 10} {
		src, dst := make([]byte, n), make([]byte, n)
		b.Run(fmt.Sprintf("stream/bytes=%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				copyToPeer(dst, src)
			}
		})
		b.Run(fmt.Sprintf("copy/bytes=%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for range b.N {
				copy(dst, src)
			}
		})
	}
}
