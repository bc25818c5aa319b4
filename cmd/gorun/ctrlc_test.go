package main

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCtrlCTellsEveryRank: Ctrl-C in a terminal sends SIGINT to every
// process of its foreground group — gorun and its ranks — and gorun
// forwards it to the ranks as well. Each rank of a training job must say
// that it was interrupted, and in which epoch. Before, a rank that
// another's abort reached first printed the abort's chain of errors, and
// one that returned between the two signals, its handler already
// removed, was killed by the second before printing anything (by hand,
// with timeout -s INT 5, which signals its whole group: the abort's chain
// in 7 of 10 tries; that mended, a rank silent in 3 of 8). Tried four
// times, at different moments.
func TestCtrlCTellsEveryRank(t *testing.T) {
	if testing.Short() {
		t.Skip("four short trainings; the full run covers it")
	}
	bin := buildTools(t, "../train")
	for try := range 4 {
		cmd := exec.Command(filepath.Join(bin, "gorun"), "-np", "2", filepath.Join(bin, "train"), "--synthetic", "--train-samples", "40000", "--test-samples", "256",
			"--epochs", "3", "--threads", "1", "--progress", "lines", "--log-interval", "5")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own, as a terminal's job
		r, w := io.Pipe()
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { cmd.Wait(); w.Close() }()
		var out []string
		lines := bufio.NewScanner(r)
		sent := false
		for lines.Scan() {
			out = append(out, lines.Text())
			if !sent && strings.Contains(lines.Text(), "Train Epoch: 1 [") {
				time.Sleep(time.Duration(try) * 150 * time.Millisecond)
				syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // the whole group, as Ctrl-C
				sent = true
			}
		}
		text := strings.Join(out, "\n")
		for _, want := range []string{"[0] train: interrupted during epoch 1 (the last checkpoint, if any, is intact)",
			"[1] train: interrupted during epoch 1 (the last checkpoint, if any, is intact)", "gorun: interrupted by interrupt"} {
			if !strings.Contains(text, want) {
				t.Fatalf("try %d: the output lacks %q:\n%s", try, want, text)
			}
		}
		if strings.Contains(text, "aborted the job") {
			t.Fatalf("try %d: a rank reported another's abort, not the interrupt:\n%s", try, text)
		}
	}
}
