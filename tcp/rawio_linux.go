package tcp

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The transport's socket calls go to the kernel without the runtime's
// syscall bookkeeping (entersyscall/exitsyscall). The sockets are
// non-blocking, so no call sleeps, and each moves at most what the socket's
// buffers hold. A goroutine that enters the runtime's syscall state lets
// sysmon hand its P to another thread once the call passes a sysmon tick; on a rank
// with GOMAXPROCS=1 that meant a second thread woken every few tens of
// microseconds, and a P shuttled between threads during every large copy:
// the raw calls made small and large all-reduces markedly faster
// (bench/results/HISTORY.md, "TCP: raw socket calls and halving-doubling").

// rawRead is read(2).
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

// rawWritev is writev(2) of the non-empty slices among bufs.
func rawWritev(fd int, bufs *[2][]byte) (int, error) {
	var iov [2]unix.Iovec
	k := 0
	for _, b := range bufs {
		if len(b) > 0 {
			iov[k].Base = &b[0]
			iov[k].SetLen(len(b))
			k++
		}
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
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

// rawYield is sched_yield(2): it gives this thread's core to another
// runnable thread, if any, and returns at once otherwise.
func rawYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// silence is the host watch's look at connections (TCP_INFO): how long a
// peer's host has acknowledged nothing while data sent to it is in
// flight. One per watch, reused for every look, so that looking
// allocates nothing.
type silence struct {
	info      unix.TCPInfo
	size      uint32
	found     time.Duration
	measureFn func(fd uintptr) // measure, for RawConn.Control
}

func newSilence() *silence {
	s := &silence{}
	s.measureFn = s.measure
	return s
}

// of returns how long p's host has acknowledged none of the data in
// flight to it: 0 when nothing is in flight (or p's socket is closed).
func (s *silence) of(p *peer) time.Duration {
	s.found = 0
	if err := p.rc.Control(s.measureFn); err != nil {
		return 0
	}
	return s.found
}

// measure is of's getsockopt.
func (s *silence) measure(fd uintptr) {
	s.size = uint32(unsafe.Sizeof(s.info))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&s.info)), uintptr(unsafe.Pointer(&s.size)), 0)
	if e != 0 || s.info.Unacked == 0 {
		return
	}
	s.found = time.Duration(s.info.Last_ack_recv) * time.Millisecond
}
