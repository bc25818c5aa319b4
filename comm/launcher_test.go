package comm

import (
	"errors"
	"os/exec"
	"testing"
	"time"
)

// TestWatchLauncher: the watcher reports a launcher that was killed, also
// while it is a zombie its parent has not reaped, and stays quiet while
// it runs and after being stopped.
func TestWatchLauncher(t *testing.T) {
	for _, reap := range []bool{true, false} {
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Skipf("cannot start sleep: %v", err)
		}
		gone := make(chan error, 1)
		stop := watchLauncher(cmd.Process.Pid, func(err error) { gone <- err })
		select {
		case err := <-gone:
			t.Fatalf("reported a running launcher: %v", err)
		case <-time.After(3 * launcherPoll):
		}
		cmd.Process.Kill()
		if reap {
			cmd.Wait()
		}
		select {
		case err := <-gone:
			if !errors.Is(err, errLauncherGone) {
				t.Errorf("reap=%v: reported %v", reap, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("reap=%v: a killed launcher was not reported", reap)
		}
		stop()
		if !reap {
			cmd.Wait()
		}
	}
	quiet := make(chan error, 1)
	cmd := exec.Command("sleep", "30")
	cmd.Start()
	stop := watchLauncher(cmd.Process.Pid, func(err error) { quiet <- err })
	stop()
	cmd.Process.Kill()
	cmd.Wait()
	select {
	case err := <-quiet:
		t.Errorf("reported after being stopped: %v", err)
	case <-time.After(3 * launcherPoll):
	}
}
