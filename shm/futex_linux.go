package shm

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations on a word in shared memory. They are not the private
// variants: the word is shared between processes.
const (
	futexWait = 0
	futexWake = 1
)

// futexSleep sleeps while *word == val, at most d (spurious wake-ups are
// fine: callers re-check).
func futexSleep(word *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every sleeper on word.
func futexWakeAll(word *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}
