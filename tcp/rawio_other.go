//go:build !linux

package tcp

import "golang.org/x/sys/unix"

// Elsewhere than Linux the socket calls go through the runtime's syscall
// bookkeeping; see rawio_linux.go for why Linux skips it.

func rawRead(fd int, b []byte) (int, error) { return unix.Read(fd, b) }

func rawWrite(fd int, b []byte) (int, error) { return unix.Write(fd, b) }

func rawReadable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, 0)
	return err != nil || n != 0
}
