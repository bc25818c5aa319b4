package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runMemoryRank runs a job of two ranks: rank 1 is this test binary
// asking for memory as LAUNCH_TEST_MEMORY=mode says, rank 0 sleeps until
// it is stopped. It returns the job's first failure and its output.
func runMemoryRank(t *testing.T, mode string) (*RankError, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `if [ "$RANK" = 0 ]; then exec sleep 60; fi; exec "$0"`
	var out Buffer
	res, err := Run(context.Background(), Config{
		NP: 2, Program: "sh", Args: []string{"-c", script, exe},
		Env:    []string{"LAUNCH_TEST_MEMORY=" + mode},
		Stdout: &out, Stderr: &out, Grace: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.First == nil {
		t.Fatalf("the job succeeded:\n%s", out.String())
	}
	return res.First, out.String()
}

// TestRuntimeOutOfMemoryNamed: a rank the Go runtime ends because the
// kernel refused it memory (a real allocation of 1 TiB) is reported as
// having run out of memory, not only by its exit status.
func TestRuntimeOutOfMemoryNamed(t *testing.T) {
	first, out := runMemoryRank(t, "reserve")
	if strings.Contains(out, "[1] allocated") {
		skipOutsideCI(t, "the kernel gave a 1 TiB allocation (vm.overcommit_memory=1?): no out-of-memory error to name")
	}
	if first.Rank != 1 || first.Status() != 2 || !first.OutOfMemory {
		t.Fatalf("first failure %+v, want rank 1 out of memory with status 2\n%s", first, out)
	}
	want := "rank 1 (pid " + fmt.Sprint(first.Pid) + ") exited with status 2: the Go runtime ran out of memory"
	if !strings.Contains(first.Error(), want) || !strings.Contains(out, "gorun: "+want) {
		t.Fatalf("error %q, want %q\n%s", first.Error(), want, out)
	}
}

// TestKernelOutOfMemoryNamed: a launcher and its ranks in a memory
// cgroup of 64 MiB, where rank 1 writes 512 MiB and is killed by the
// kernel's OOM killer: its SIGKILL is reported as most likely that. The
// count the launcher reads is its cgroup's, so OOM kills elsewhere on the
// machine (another test's) do not make it name a plain SIGKILL so.
func TestKernelOutOfMemoryNamed(t *testing.T) {
	procs := memoryCgroup(t, 64<<20)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "echo $$ > "+procs+` && exec "$0"`, exe)
	cmd.Env = append(os.Environ(), "LAUNCH_TEST_MEMORY=launch")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("launcher: %v\n%s", err, out)
	}
	want := "first failure: rank 1 (pid "
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "was killed by signal 9 (killed), most likely by the kernel's out-of-memory killer") {
		t.Fatalf("the launcher's report does not name the OOM killer:\n%s", out)
	}
}

// launchTouchingRank is the launcher TestKernelOutOfMemoryNamed starts in
// its cgroup: rank 1 is this test binary writing 512 MiB, rank 0 sleeps
// until it is stopped. It prints the job's first failure.
func launchTouchingRank() {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	var out Buffer
	res, err := Run(context.Background(), Config{
		NP: 2, Program: "sh", Args: []string{"-c", `if [ "$RANK" = 0 ]; then exec sleep 60; fi; exec "$0"`, exe},
		Env:    []string{"LAUNCH_TEST_MEMORY=touch"},
		Stdout: &out, Stderr: &out, Grace: 500 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("output:\n%s\nfirst failure: %v\n", out.String(), res.First)
}

// memoryCgroup makes a memory cgroup limited to limit bytes, without swap,
// removed when the test ends, and returns the path of its cgroup.procs.
// It skips the test where it cannot (not root, no memory controller).
func memoryCgroup(t *testing.T, limit int) string {
	t.Helper()
	skipf := func(format string, args ...any) { skipOutsideCI(t, format, args...) }
	name := fmt.Sprintf("gorun-launch-test-%d", os.Getpid())
	var dir string
	var settings [][2]string
	if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(c), "memory") {
		// cgroup v2: its children get the memory controller once the
		// root's subtree_control names it.
		os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0)
	}
	if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(c), "memory") {
		dir = filepath.Join("/sys/fs/cgroup", name) // cgroup v2
		settings = [][2]string{{"memory.max", fmt.Sprint(limit)}, {"memory.swap.max", "0"}}
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup/memory", name) // cgroup v1
		settings = [][2]string{{"memory.limit_in_bytes", fmt.Sprint(limit)}, {"memory.swappiness", "0"}}
	} else {
		skipf("no memory cgroup controller to limit a rank's memory with")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		skipf("cannot make a memory cgroup (root is needed): %v", err)
	}
	t.Cleanup(func() { syscall.Rmdir(dir) })
	for _, kv := range settings {
		if err := os.WriteFile(filepath.Join(dir, kv[0]), []byte(kv[1]), 0); err != nil && kv[0] != "memory.swap.max" {
			skipf("cannot limit the cgroup's memory: %v", err)
		}
	}
	return filepath.Join(dir, "cgroup.procs")
}

// skipOutsideCI skips the test, or fails it in CI (CI=true), whose
// machine has what these tests need: root, a memory cgroup controller and
// the kernel's default overcommit policy.
func skipOutsideCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// TestOOMElsewhereNotBlamed: while a job runs, the OOM killer kills a
// process in another memory cgroup; then a rank is killed by SIGKILL. It
// is reported as killed, not as out of memory: the launcher counts its
// own cgroup's OOM kills, not the machine's.
func TestOOMElsewhereNotBlamed(t *testing.T) {
	if f := oomKillsFile(); !strings.HasPrefix(f, "/sys/fs/cgroup/") {
		skipOutsideCI(t, "no memory cgroup count of OOM kills to read (%q): the launcher counts the machine's", f)
	}
	procs := memoryCgroup(t, 64<<20)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ready, go9 := filepath.Join(dir, "ready"), filepath.Join(dir, "kill")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		oom := exec.Command("sh", "-c", "echo $$ > "+procs+` && exec "$0"`, exe)
		oom.Env = append(os.Environ(), "LAUNCH_TEST_MEMORY=touch")
		err := oom.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the process in the small cgroup ended with %v, not killed by the OOM killer", err)
		}
		os.WriteFile(go9, nil, 0o644)
	}()
	script := `if [ "$RANK" = 1 ]; then touch ` + ready + `; while [ ! -e ` + go9 + ` ]; do sleep 0.02; done; kill -9 $$; fi; exec sleep 60`
	res, out := sh(t, script, Config{NP: 2})
	<-done
	if res.First == nil || res.First.Rank != 1 || res.First.Signal != syscall.SIGKILL {
		t.Fatalf("first failure %v, want rank 1 killed by SIGKILL\n%s", res.First, out)
	}
	if res.First.OutOfMemory || strings.Contains(out, "out-of-memory") {
		t.Fatalf("a SIGKILL blamed on an OOM kill in another cgroup: %v\n%s", res.First, out)
	}
}

func TestCgroupOOMFiles(t *testing.T) {
	for _, c := range []struct {
		name, listing string
		want          []string
	}{
		{"v2", "0::/user.slice/job_7/step_0\n", []string{"/sys/fs/cgroup/user.slice/job_7/step_0/memory.events"}},
		{"v2 namespaced", "0::/\n", []string{"/sys/fs/cgroup/memory.events"}},
		{"v1", "9:name=systemd:/\n4:memory:/slurm/uid_0/job_3\n1:cpu,cpuacct:/\n", []string{"/sys/fs/cgroup/memory/slurm/uid_0/job_3/memory.oom_control"}},
		{"hybrid", "0::/init.scope\n5:memory:/box\n", []string{"/sys/fs/cgroup/memory/box/memory.oom_control", "/sys/fs/cgroup/init.scope/memory.events"}},
		{"no memory controller", "3:cpu:/a\n", nil},
		{"empty", "", nil},
	} {
		if got := cgroupOOMFiles(c.listing); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
