package bench

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// debianPython is the interpreter the competitor scripts run on (Debian's,
// with torch); a python3 earlier on PATH may be another one.
const debianPython = "/usr/bin/python3"

// TestCompetitorAllocatorChoice runs bench/competitors/common.py's
// allocator choice as the competitor scripts do (a script importing it):
// TORCH_ALLOCATOR=glibc keeps glibc's defaults, the default gives tcmalloc
// when it is installed (the script re-executed with it preloaded) and
// glibc with a pinned mmap threshold otherwise, and a value it does not
// know stops the script with an error naming the variable and the choices.
func TestCompetitorAllocatorChoice(t *testing.T) {
	if _, err := exec.Command(debianPython, "-c", "import numpy").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s with numpy is installed in CI (python3-torch): %v", debianPython, err)
		}
		t.Skipf("needs %s with numpy (apt-get install python3-torch): %v", debianPython, err)
	}
	dir, err := filepath.Abs("competitors")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "which.py")
	body := "import sys\nsys.path.insert(0, " + "'" + dir + "'" + ")\nfrom common import allocator\nprint('ALLOCATOR', allocator)\n"
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "glibc malloc, mmap threshold 32 MiB"
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"); err == nil {
		want = "tcmalloc"
	}
	for _, tc := range []struct {
		value, want, fails string
	}{
		{"", want, ""},
		{"best", want, ""},
		{"glibc", "glibc malloc (defaults)", ""},
		{"jemalloc", "", "TORCH_ALLOCATOR='jemalloc': want best or glibc"},
	} {
		t.Run("TORCH_ALLOCATOR="+tc.value, func(t *testing.T) {
			cmd := exec.Command(debianPython, script)
			cmd.Env = append(os.Environ(), "TORCH_ALLOCATOR="+tc.value, "LD_PRELOAD=")
			out, err := cmd.CombinedOutput()
			if tc.fails != "" {
				if err == nil || !strings.Contains(string(out), tc.fails) {
					t.Fatalf("got %v and %q, want a failure saying %q", err, out, tc.fails)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if !strings.HasPrefix(string(out), "ALLOCATOR "+tc.want) {
				t.Errorf("printed %q, want the allocator %q", out, tc.want)
			}
		})
	}
}

// TestGlooHelperRefusesBadArguments: the gloo competitor script stops,
// before starting any process, with an error naming the argument it
// cannot use.
func TestGlooHelperRefusesBadArguments(t *testing.T) {
	if err := torchAvailable(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("torch.distributed is installed in CI (python3-torch): %v", err)
		}
		t.Skip(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"2", "op=all_to_all", "1024"}, "op=all_to_all: want one of all_reduce, broadcast, all_gather, barrier"},
		{[]string{"2", "iters=lots", "1024"}, "iters='lots': want a whole number, at least 1"},
		{[]string{"2", "1k"}, "size='1k': want a whole number, at least 0"},
		{[]string{"zero", "1024"}, "NP='zero': want a whole number, at least 1"},
		{[]string{"2"}, "no sizes given"},
		{nil, "usage: gloo_allreduce.py NP"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := exec.Command(TorchPython, append([]string{"competitors/gloo_allreduce.py"}, tc.args...)...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("got %v and %q, want a failure saying %q", err, out, tc.want)
			}
		})
	}
}

// TestCollectivesABRefusesBadArguments: bench/collectives_ab.sh stops
// before running anything, with an error naming what it cannot use.
func TestCollectivesABRefusesBadArguments(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bench")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho should not run >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no arguments", nil, "usage: bash bench/collectives_ab.sh OLD_BENCH NEW_BENCH ROUNDS NP SIZES OPS"},
		{"no collectives", []string{bin, bin, "4", "2", "1MB"}, "usage:"},
		{"missing binary", []string{"/nonexistent/bench", bin, "4", "2", "1MB", "reduce"}, "/nonexistent/bench: not an executable bench binary"},
		{"rounds not a number", []string{bin, bin, "four", "2", "1MB", "reduce"}, "ROUNDS 'four': want a whole number, at least 1"},
		{"no rounds", []string{bin, bin, "0", "2", "1MB", "reduce"}, "ROUNDS '0': want a whole number, at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", append([]string{"collectives_ab.sh"}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "should not run") {
				t.Fatalf("got %v and %q, want exit status 2 saying %q", err, out, tc.want)
			}
		})
	}
}
