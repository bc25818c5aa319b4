package bench

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// debianPython is the interpreter the competitor scripts run on (Debian's,
// with torch); a python3 earlier on PATH may be another one.
const debianPython = "/usr/bin/python3"

// commonScript writes a script that imports bench/competitors/common.py
// as the competitor scripts do, then runs body, and returns its path; it
// skips the test where Debian's Python has no numpy (outside CI).
func commonScript(t *testing.T, body string) string {
	t.Helper()
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
	if err := os.WriteFile(script, []byte("import sys\nsys.path.insert(0, '"+dir+"')\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return script
}

// TestCompetitorAllocatorChoice runs bench/competitors/common.py's
// allocator choice as the competitor scripts do (a script importing it):
// TORCH_ALLOCATOR=glibc keeps glibc's defaults, the default gives tcmalloc
// when it is installed (the script re-executed with it preloaded) and
// glibc with a pinned mmap threshold otherwise, and a value it does not
// know stops the script with an error naming the variable and the choices.
func TestCompetitorAllocatorChoice(t *testing.T) {
	script := commonScript(t, "from common import allocator\nprint('ALLOCATOR', allocator)\n")
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

// TestCompetitorOpenBLASChoice runs common.py's choice of OpenBLAS
// kernels as the competitor scripts do: an OPENBLAS_CORETYPE the
// environment sets for every program is not kept (OpenBLAS detects the
// CPU itself, as with none set — a machine-wide Haswell had held its
// AVX-512 kernels back on an AVX-512 host), and
// COMPETITOR_OPENBLAS_CORETYPE chooses the kernels instead.
func TestCompetitorOpenBLASChoice(t *testing.T) {
	script := commonScript(t, "from common import openblas_core\nprint('OPENBLAS', openblas_core)\n")
	var stderr bytes.Buffer
	core := func(env ...string) string {
		t.Helper()
		cmd := exec.Command(debianPython, script)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") && !strings.HasPrefix(kv, "COMPETITOR_OPENBLAS_CORETYPE=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		stderr.Reset()
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v: %s%s", env, err, out, stderr.Bytes())
		}
		name, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "OPENBLAS ")
		if !ok {
			t.Fatalf("%v: printed %q", env, out)
		}
		return name
	}
	detected := core()
	if detected == "unknown" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI installs libopenblas0-pthread, which common.py loads")
		}
		t.Skip("needs OpenBLAS's pthread build (apt-get install libopenblas0-pthread)")
	}
	// Prescott, OpenBLAS's generic SSE3 kernels, is never what it picks
	// for a CPU with AVX2 (nor what common.py re-runs it with).
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"OPENBLAS_CORETYPE=Prescott"}, detected},
		{[]string{"COMPETITOR_OPENBLAS_CORETYPE=Prescott"}, "Prescott"},
		{[]string{"OPENBLAS_CORETYPE=Prescott", "COMPETITOR_OPENBLAS_CORETYPE=Haswell"}, "Haswell"},
	} {
		if got := core(tc.env...); got != tc.want {
			t.Errorf("%v: OpenBLAS ran its %s kernels, want %s (with nothing set: %s)", tc.env, got, tc.want, detected)
		}
		if stderr.Len() > 0 {
			t.Errorf("%v: warned %q", tc.env, stderr.String())
		}
	}
	// A name OpenBLAS does not know: it picks kernels of its own (those
	// it detects, or its generic ones on a CPU it does not know), and the
	// script says which.
	got := core("COMPETITOR_OPENBLAS_CORETYPE=Bogus")
	if want := "COMPETITOR_OPENBLAS_CORETYPE='Bogus': OpenBLAS does not know it and runs its " + got + " kernels"; got == "Bogus" || !strings.Contains(stderr.String(), want) {
		t.Errorf("COMPETITOR_OPENBLAS_CORETYPE=Bogus: ran %s; stderr %q, want %q", got, stderr.String(), want)
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
	bin := idleBench(t, t.TempDir())
	refusesBadArguments(t, "collectives_ab.sh", []badArguments{
		{"no arguments", nil, "usage: bash bench/collectives_ab.sh OLD_BENCH NEW_BENCH ROUNDS NP SIZES OPS"},
		{"no collectives", []string{bin, bin, "4", "2", "1MB"}, "usage:"},
		{"missing binary", []string{"/nonexistent/bench", bin, "4", "2", "1MB", "reduce"}, "/nonexistent/bench: not an executable bench binary"},
		{"a directory", []string{bin, filepath.Dir(bin), "4", "2", "1MB", "reduce"}, filepath.Dir(bin) + ": not an executable bench binary"},
		{"rounds not a number", []string{bin, bin, "four", "2", "1MB", "reduce"}, "ROUNDS 'four': want a whole number, at least 1"},
		{"no rounds", []string{bin, bin, "0", "2", "1MB", "reduce"}, "ROUNDS '0': want a whole number, at least 1"},
	})
}

// TestBuildsABRefusesBadArguments: bench/builds_ab.sh stops before
// running anything, with an error naming what it cannot use.
func TestBuildsABRefusesBadArguments(t *testing.T) {
	dir := t.TempDir()
	a, b := idleBench(t, filepath.Join(dir, "a")), idleBench(t, filepath.Join(dir, "b"))
	sameName := idleBench(t, filepath.Join(dir, "c", "b")) // in a directory named as b's
	refusesBadArguments(t, "builds_ab.sh", []badArguments{
		{"no arguments", nil, "usage: bash bench/builds_ab.sh ROUNDS NP SIZES OPS BENCH BENCH"},
		{"one build", []string{"4", "2", "1MB", "reduce", a, "--", "-iters", "5"}, "want at least two builds"},
		{"missing binary", []string{"4", "2", "1MB", "reduce", a, "/nonexistent/bench"}, "/nonexistent/bench: not an executable bench binary"},
		{"a directory", []string{"4", "2", "1MB", "reduce", a, dir}, dir + ": not an executable bench binary"},
		{"rounds not a number", []string{"four", "2", "1MB", "reduce", a, b}, "ROUNDS 'four': want a whole number, at least 1"},
		{"no rounds", []string{"0", "2", "1MB", "reduce", a, b}, "ROUNDS '0': want a whole number, at least 1"},
		{"two builds named alike", []string{"4", "2", "1MB", "reduce", a, b, sameName}, "two builds in directories named b"},
	})
}

// idleBench writes, as dir/bench, a stand-in for a bench binary that
// says "should not run" if a script runs it, and returns its path.
func idleBench(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bench")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho should not run >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// badArguments is a command line a benchmark script must refuse, and
// what its error must say.
type badArguments struct {
	name string
	args []string
	want string
}

// refusesBadArguments runs bench/SCRIPT with each case's arguments: it
// must exit with status 2 and the case's text, having run no bench binary.
func refusesBadArguments(t *testing.T, script string, cases []badArguments) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command("bash", append([]string{script}, tc.args...)...).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "should not run") {
				t.Fatalf("got %v and %q, want exit status 2 saying %q", err, out, tc.want)
			}
		})
	}
}

// TestBuildsABSummary runs bench/builds_ab.sh on stand-ins for two and
// three bench builds that print bench collectives' table with times of
// their own, and reads back its per-round lines (every build once a
// round, in rotated order, with the arguments after -- passed on) and its
// summary (each build's median, the first build's time ÷ each later
// one's by round).
func TestBuildsABSummary(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	// A build's times: base at 16 bytes, twice that at 1 KiB; each run
	// logs its arguments in calls.
	fake := func(name string, base float64) string {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, name, "bench")
		script := `#!/bin/sh
echo "$0 $*" >> ` + calls + `
echo "# Collective test: gather, 4 ranks"
echo "#       size        count     type  redop   root       time    algbw    busbw  #wrong"
echo "          16            4    float   none      0       ` + strconv.FormatFloat(base, 'f', 2, 64) + `     0.01     0.01       0"
echo "        1024          256    float   none      0       ` + strconv.FormatFloat(2*base, 'f', 2, 64) + `     0.01     0.01       0"
`
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return bin
	}
	a, b, c := fake("old", 4), fake("new", 2), fake("other", 8)
	outputHas(t, runScript(t, "builds_ab.sh", "3", "4", "16B,1KB", "gather", a, b, c, "--", "-variants", "tcp"),
		"1 old gather 4 16 4.00", "1 new gather 4 16 2.00", "3 other gather 4 1024 16.00",
		"gather np4 16: 4.00 2.00 8.00 | new 2.00 [2.00–2.00] | other 0.50 [0.50–0.50]",
		"gather np4 1024: 8.00 4.00 16.00 | new 2.00 [2.00–2.00] | other 0.50 [0.50–0.50]")
	log, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	var order []string
	for _, l := range lines {
		if !strings.Contains(l, "collectives") || !strings.Contains(l, "-np 4 -sizes 16B,1KB -ops gather -competitors=false -variants tcp") {
			t.Errorf("a build ran as %q, want bench collectives with the arguments and -variants tcp after them", l)
		}
		order = append(order, filepath.Base(filepath.Dir(strings.Fields(l)[0])))
	}
	if got, want := strings.Join(order, " "), "old new other new other old other old new"; got != want {
		t.Errorf("builds ran in the order %s, want %s (rotated each round)", got, want)
	}
}

// TestEnvABRefusesBadArguments: bench/env_ab.sh stops before building or
// running anything, with an error naming what it cannot use.
func TestEnvABRefusesBadArguments(t *testing.T) {
	bin := idleBench(t, t.TempDir())
	refusesBadArguments(t, "env_ab.sh", []badArguments{
		{"no arguments", nil, `usage: bash bench/env_ab.sh VAR "VALUE1 VALUE2 ..."`},
		{"no values", []string{"GORUN_SPIN"}, "usage:"},
		{"one value", []string{"GORUN_SPIN", "0s"}, "VALUES '0s': want at least two values"},
		{"not a name", []string{"GORUN SPIN", "0s 3us"}, "VAR 'GORUN SPIN': want an environment variable's name"},
		{"rounds not a number", []string{"GORUN_SPIN", "0s 3us", "four"}, "ROUNDS 'four': want a whole number, at least 1"},
		{"no rounds", []string{"GORUN_SPIN", "0s 3us", "0"}, "ROUNDS '0': want a whole number, at least 1"},
	})
	t.Setenv("BENCH", filepath.Dir(bin))
	refusesBadArguments(t, "env_ab.sh", []badArguments{
		{"BENCH a directory", []string{"GORUN_SPIN", "0s 3us"}, "BENCH " + filepath.Dir(bin) + ": not an executable bench binary"},
	})
}

// TestEnvABSummary runs bench/env_ab.sh on a stand-in bench binary
// (BENCH) whose times depend on the variable's value, and reads back its
// per-round lines (every value once a round, in rotated order, the
// arguments passed on), the medians by value and their ratio, and Open
// MPI's medians from the competitors' table — and the same summary,
// without Open MPI, from runs with the competitors off, and with BENCH a
// path relative to where the script was started.
func TestEnvABSummary(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	bin := filepath.Join(dir, "bench")
	// 2 µs with X=fast, 4 with X=slow, twice that at 1 KiB and over
	// TCP; the competitors' table unless -competitors=false.
	script := `#!/bin/sh
echo "X=$X $*" >> ` + calls + `
t=2; [ "$X" = slow ] && t=4
for variant in default tcp; do
	[ $variant = tcp ] && t=$((t * 2))
	echo "# gorun collectives, 4 ranks, variant $variant"
	echo "# Collective test: gather, 4 ranks"
	echo "#       size        count     type  redop   root       time    algbw    busbw  #wrong"
	echo "          16            4    float   none      0       $t.00     0.01     0.01       0"
	echo "        1024          256    float   none      0       $((t * 2)).00     0.01     0.01       0"
done
echo "# Summary: bus bandwidth (GB/s) by message size"
case " $* " in *" -competitors=false "*) exit 0 ;; esac
echo "# gather against the competitors (variant default): time in µs; ratio = their time / gorun's"
echo "#  np    size(B)      gorun       gloo   ratio    mpi-tcp   ratio    mpi-shm   ratio"
echo "    4         16       $t.00          -       -       7.00   1.00x       1.50   1.00x"
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BENCH", bin)
	text := runScript(t, "env_ab.sh", "X", "fast slow", "3", "-np", "4", "-ops", "gather")
	outputHas(t, text,
		"1 fast gather default 4 16 2.00", "1 slow gather tcp 4 1024 16.00", "3 slow gather default 4 16 4.00",
		"gather default 4 16: fast 2.00 [2.00-2.00] | slow 4.00 [4.00-4.00]; 0.50; Open MPI 7.00 | 1.50",
		"gather tcp 4 1024: fast 8.00 [8.00-8.00] | slow 16.00 [16.00-16.00]; 0.50; Open MPI - | -")
	if n := len(regexp.MustCompile(`(?m)^[123] (fast|slow) gather `).FindAllString(text, -1)); n != 3*2*4 {
		t.Errorf("%d per-round lines, want 24 (3 rounds, 2 values, 4 rows):\n%s", n, text)
	}
	log, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.Join(f[1:], " ") != "collectives -np 4 -ops gather" {
			t.Errorf("the bench ran as %q, want collectives with the arguments after ROUNDS", l)
		}
		order = append(order, f[0])
	}
	if got, want := strings.Join(order, " "), "X=fast X=slow X=slow X=fast X=fast X=slow"; got != want {
		t.Errorf("values ran in the order %s, want %s (rotated each round)", got, want)
	}

	// With the competitors off.
	outputHas(t, runScript(t, "env_ab.sh", "X", "fast slow", "1", "-competitors=false"),
		"gather default 4 1024: fast 4.00 [4.00-4.00] | slow 8.00 [8.00-8.00]; 0.50; Open MPI - | -")

	// BENCH named relative to where the script is started.
	envAB, err := filepath.Abs("env_ab.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", envAB, "X", "fast slow", "1", "-competitors=false")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "BENCH=bench")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "gather tcp 4 16: fast 4.00") {
		t.Errorf("with BENCH=bench started in its directory: %v, %s", err, out)
	}
}

// TestABScriptsShowAFailedRun: when a bench run fails, each A/B script
// stops with a failure and the run's own error message reaches the user
// (the scripts' filters once swallowed it, leaving a bare exit status).
func TestABScriptsShowAFailedRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "a", "bench")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'bench: unknown flag -nosuchflag' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "b", "bench")
	if err := os.MkdirAll(filepath.Dir(other), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(bin, other); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		script string
		args   []string
		env    string
	}{
		{"collectives_ab.sh", []string{bin, other, "1", "2", "8B", "reduce", "-nosuchflag"}, "COMPETITORS=false"},
		{"builds_ab.sh", []string{"1", "2", "8B", "reduce", bin, other, "--", "-nosuchflag"}, ""},
		{"env_ab.sh", []string{"X", "a b", "1", "-nosuchflag"}, "BENCH=" + bin},
	} {
		t.Run(tc.script, func(t *testing.T) {
			cmd := exec.Command("bash", append([]string{tc.script}, tc.args...)...)
			cmd.Env = append(os.Environ(), tc.env)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "bench: unknown flag -nosuchflag") {
				t.Fatalf("got %v and %q, want a failure showing the run's error", err, out)
			}
		})
	}
}

// runScript runs bench/SCRIPT with args and returns what it printed; the
// test fails if the script fails.
func runScript(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	return string(out)
}

// outputHas fails the test for every one of wants that text lacks.
func outputHas(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}
