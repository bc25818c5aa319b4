package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// launcherEnv makes this test binary run as the launcher (run) with the
// rank command it names, instead of the test.
const launcherEnv = "GORUN_TEST_LAUNCHER_MARKER"

// TestOutOfFileDescriptors: a job with more ranks than the launcher has
// file descriptors for their output pipes fails before any rank runs
// long, naming the rank it reached and the limit to raise, and leaves no
// rank behind.
func TestOutOfFileDescriptors(t *testing.T) {
	if marker := os.Getenv(launcherEnv); marker != "" {
		os.Exit(run([]string{"-np", "30", "-grace", "200ms", "sh", "-c", "exec sleep 30 # " + marker}, nil, os.Stdout, os.Stderr))
	}
	// The test binary itself as the launcher, under a limit of 40: dash's
	// ulimit sets the hard limit too, so the Go runtime cannot raise its
	// soft limit back up at start.
	marker := "gorun-fd-test-" + strings.TrimPrefix(t.TempDir(), os.TempDir())
	cmd := exec.Command("sh", "-c", `ulimit -n 40 && exec "$0" -test.run='^TestOutOfFileDescriptors$'`, os.Args[0])
	cmd.Env = append(os.Environ(), launcherEnv+"="+marker)
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
