package shm

import "golang.org/x/sys/unix"

// membarrier(2) commands (linux/membarrier.h).
const (
	membarrierGlobalExpedited         = 1 << 1
	membarrierRegisterGlobalExpedited = 1 << 2
)

// registerBarriers registers this process for membarrier(GLOBAL_EXPEDITED)
// and reports whether the kernel accepted.
func registerBarriers() bool {
	_, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterGlobalExpedited, 0, 0)
	return errno == 0
}

// barrierAll makes every running thread of the registered processes
// execute a full memory barrier before it returns.
func barrierAll() {
	unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobalExpedited, 0, 0)
}
