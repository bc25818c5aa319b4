package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutOfFileDescriptors: a job with more ranks than the launcher has
// file descriptors for their output pipes fails before any rank runs
// long, naming the rank it reached and the limit to raise, and leaves no
// rank behind.
func TestOutOfFileDescriptors(t *testing.T) {
	bin := buildTools(t)
	// dash's ulimit sets the hard limit too, so gorun (as every Go
	// program) cannot raise its soft limit back up at start.
	marker := "gorun-fd-test-" + filepath.Base(bin)
	cmd := exec.Command("sh", "-c", `ulimit -n 40 && exec "$0" -np 30 -grace 200ms sh -c "exec sleep 30 # $1"`, filepath.Join(bin, "gorun"), marker)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("got %v, want exit status 2:\n%s", err, out)
	}
	for _, want := range []string{"gorun: rank ", "'s standard ", "too many open files", "may open 40: raise ulimit -n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if left, _ := exec.Command("pgrep", "-f", marker).Output(); len(left) > 0 {
		t.Errorf("ranks left running: pids %s", strings.Fields(string(left)))
		exec.Command("pkill", "-f", marker).Run()
	}
}
