//go:build !linux

package tcp

import (
	"time"

	"golang.org/x/sys/unix"
)

// Elsewhere than Linux the socket calls go through the runtime's syscall
// bookkeeping; rawio_linux.go says why Linux skips it.

func rawRead(fd int, b []byte) (int, error) { return unix.Read(fd, b) }

func rawWritev(fd int, bufs *[2][]byte) (int, error) {
	if len(bufs[1]) == 0 {
		return unix.Write(fd, bufs[0])
	}
	if len(bufs[0]) == 0 {
		return unix.Write(fd, bufs[1])
	}
	return unix.Writev(fd, bufs[:])
}

func rawReadable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, 0)
	return err != nil || n != 0
}

// rawYield does nothing here: sched_yield has no portable system call
// number, and the caller has already yielded to this process's goroutines.
func rawYield() {}

// silence finds nothing here: TCP_INFO's fields are Linux's, and
// elsewhere a host that vanishes mid-transfer ends the call at its
// timeout.
type silence struct{}

func newSilence() *silence { return &silence{} }

func (s *silence) of(*peer) time.Duration { return 0 }
