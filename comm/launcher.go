package comm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// launcherPoll is how often a rank looks whether its launcher is alive.
const launcherPoll = 250 * time.Millisecond

// processStart returns the start time (in clock ticks since boot) of
// process pid and whether it is still running (not a zombie waiting to be
// reaped), from /proc/PID/stat. ok is false when there is no such process.
func processStart(pid int) (start uint64, running, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false, false
	}
	// "pid (comm) state ppid ... starttime(22nd field) ...": comm may hold
	// spaces and parentheses, so split after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return 0, false, false
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, false, false
	}
	return start, f[0][0] != 'Z' && f[0][0] != 'X', true
}

// watchLauncher calls gone, once, when process pid has ended (or became
// another process with the same number), and returns a function that stops
// watching. It does nothing where /proc cannot tell (not Linux).
func watchLauncher(pid int, gone func(error)) (stop func()) {
	start, running, ok := processStart(pid)
	if !ok || !running {
		if _, err := os.Stat("/proc/self/stat"); err != nil {
			return func() {} // no /proc: cannot watch
		}
		go gone(fmt.Errorf("the launcher (pid %d) had already exited when this rank joined", pid))
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(launcherPoll)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			select {
			case <-done: // stopped while the tick was due
				return
			default:
			}
			s, running, ok := processStart(pid)
			if !ok || !running || s != start {
				gone(fmt.Errorf("the launcher (pid %d) is gone: %w", pid, errLauncherGone))
				return
			}
		}
	}()
	return func() { close(done) }
}

var errLauncherGone = errors.New("a rank does not outlive the gorun that started it")
