//go:build amd64 && !purego

package shm

// stream64 copies n bytes, a positive multiple of 64, from src to dst
// (16-byte aligned) with non-temporal stores, and fences them.
//
//go:noescape
func stream64(dst, src *byte, n int)

const haveStream = true
