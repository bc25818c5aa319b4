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
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", ".", "./testdata/idle").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
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
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "gorun"), append([]string{"-np", "2"}, c.args...)...)
			cmd.Env = append(os.Environ(), c.env...)
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
