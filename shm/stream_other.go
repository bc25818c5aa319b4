//go:build !amd64 || purego

package shm

// stream64 is never called where haveStream is false.
func stream64(dst, src *byte, n int) { panic("shm: stream64 without assembly") }

const haveStream = false
