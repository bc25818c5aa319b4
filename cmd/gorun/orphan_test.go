package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRanksDieWithLauncher: when gorun itself is SIGKILLed (no chance to
// stop anything), its ranks end within a few seconds: its children by the
// kernel's parent-death signal, and ranks behind a wrapper (here sh, as
// with go run or a job script) by watching GORUN_LAUNCHER_PID; also when
// the ranks connect lazily (GORUN_CONNECT=lazy: no peer sockets to notice
// anything by).
func TestRanksDieWithLauncher(t *testing.T) {
	bin := buildTools(t, "./testdata/idle")
	idle := filepath.Join(bin, "idle")
	cases := []struct {
		name string
		args []string
		env  []string
	}{
		{"children", []string{"sh", "-c", "echo PID $$; exec sleep 60"}, nil},
		{"comm ranks", []string{idle}, nil},
		{"comm ranks behind a wrapper", []string{"sh", "-c", idle + "; exit 0"}, nil},
		{"comm ranks connecting lazily", []string{idle}, []string{"GORUN_CONNECT=lazy"}},
		{"comm ranks connecting lazily behind a wrapper", []string{"sh", "-c", idle + "; exit 0"}, []string{"GORUN_CONNECT=lazy"}},
	}
	// Each launcher runs with a TMPDIR of its own, where a killed one
	// leaves its blame directory (a killed process cleans up nothing);
	// the next gorun started there sweeps it.
	tmp := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "gorun"), append([]string{"-np", "2"}, c.args...)...)
			cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), c.env...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			var pids []int
			sc := bufio.NewScanner(stdout)
			for len(pids) < 2 && sc.Scan() {
				if _, rest, ok := strings.Cut(sc.Text(), "] PID "); ok {
					pid, _ := strconv.Atoi(rest)
					pids = append(pids, pid)
				}
			}
			if len(pids) < 2 {
				t.Fatalf("ranks reported pids %v", pids)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			deadline := time.Now().Add(5 * time.Second)
			for _, pid := range pids {
				for alive(pid) {
					if time.Now().After(deadline) {
						syscall.Kill(pid, syscall.SIGKILL)
						t.Fatalf("rank pid %d still runs 5 s after gorun was killed", pid)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "gorun-blame-*"))
	if len(left) == 0 {
		t.Fatal("killed launchers left no blame directory: the sweep below is not tested")
	}
	next := exec.Command(filepath.Join(bin, "gorun"), "-np", "1", "true")
	next.Env = append(os.Environ(), "TMPDIR="+tmp)
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("gorun -np 1 true: %v\n%s", err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "gorun-blame-*")); len(left) > 0 {
		t.Errorf("the killed launchers' blame directories outlived the next gorun: %v", left)
	}
}

// alive tells whether process pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
