//go:build !amd64

package shm

func stream64(dst, src *byte, n int) { panic("shm: stream64 without assembly") }

const haveStream = false
