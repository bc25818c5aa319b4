package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal of the given size and returns its
// master and slave ends.
func openPTY(t *testing.T, cols int) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here (/dev/ptmx: %v)", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: uint16(cols)}); err != nil {
		t.Fatal(err)
	}
	return master, slave
}

// TestProgressBarOnTerminal runs the README's main job shape (gorun -np 2
// train, defaults for the progress) on a pseudo-terminal: gorun keeps
// rank 0's progress bar at the bottom — each redraw clears the line — and
// the ranks' prefixed lines go above it, the bar cleared before each; the
// per-batch "Train Epoch" lines of logs are not printed. With -no-status,
// and through a pipe, the lines are the logs' as before.
func TestProgressBarOnTerminal(t *testing.T) {
	bin := buildTools(t, "../train")
	args := []string{filepath.Join(bin, "train"), "--synthetic", "--train-samples", "512", "--test-samples", "64", "--epochs", "2", "--batch-size", "32", "--threads", "1"}
	runOn := func(stdout *os.File, read io.Reader, gorunFlags ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, "gorun"), append(append([]string{"-np", "2"}, gorunFlags...), args...)...)
		cmd.Stdout, cmd.Stderr = stdout, stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stdout.Close()
		var out bytes.Buffer
		done := make(chan struct{})
		go func() {
			io.Copy(&out, read) // until the terminal's other end closes (EIO)
			close(done)
		}()
		err := cmd.Wait()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the output did not end after gorun exited")
		}
		return strings.ReplaceAll(out.String(), "\r\n", "\n"), err
	}

	master, slave := openPTY(t, 120)
	defer master.Close()
	out, err := runOn(slave, master)
	if err != nil {
		t.Fatalf("gorun: %v\n%q", err, out)
	}
	if os.Getenv("SHOW_TTY") != "" {
		t.Logf("%q", out)
	}
	bar := strings.Count(out, "\r\033[KEpoch 2/2 [")
	if strings.Count(out, "\r\033[KEpoch 1/2 [") == 0 || bar == 0 {
		t.Errorf("no progress bar drawn for both epochs:\n%q", out)
	}
	for _, want := range []string{"\r\033[K[0] Epoch 1: train loss", "\r\033[K[0] Test set: Average loss:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q (a line above the bar, the bar cleared first):\n%q", want, out)
		}
	}
	if strings.Contains(out, "Train Epoch:") {
		t.Errorf("per-batch log lines printed under the bar:\n%q", out)
	}
	if !strings.HasSuffix(strings.TrimRight(out, "\n"), "ETA 0s") && !strings.Contains(out, "\r\033[KEpoch 2/2 [==============================] 100%") {
		t.Errorf("the last bar does not show the run's end:\n%q", out)
	}

	master, slave = openPTY(t, 120)
	defer master.Close()
	out, err = runOn(slave, master, "-no-status")
	if err != nil || !strings.Contains(out, "[0] Train Epoch: 1 [") || strings.Contains(out, "\033[K") {
		t.Errorf("-no-status: %v; want the log lines and no bar:\n%q", err, out)
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	out, err = runOn(pw, pr)
	if err != nil || !strings.Contains(out, "[0] Train Epoch: 1 [") || strings.Contains(out, "\033[K") {
		t.Errorf("through a pipe: %v; want the log lines and no bar:\n%q", err, out)
	}
}
