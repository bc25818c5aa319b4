package tcp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The calls below go to the kernel without the runtime's syscall
// bookkeeping (entersyscall/exitsyscall). They are for non-blocking sockets
// and short transfers only: the call never sleeps, and a thread that enters
// the runtime's syscall state lets sysmon hand its P to another thread. On
// a rank that does nothing but small reads and writes, that handoff woke a
// second thread every few tens of microseconds and doubled the 8-byte
// all-reduce time (see BENCHMARKS.md, "Raw socket calls").

// rawRead is read(2) on a non-blocking fd.
func rawRead(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(p), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawWrite is write(2) of a non-empty b on a non-blocking fd.
func rawWrite(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawReadable reports whether fd has data, an error or a hang-up to read,
// without waiting. An error from poll itself counts as readable, so that
// the caller's read finds out what is wrong.
func rawReadable(fd int) bool {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	var zero unix.Timespec
	n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	return e != 0 || n != 0
}
