package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func sh(t *testing.T, script string, cfg Config) (*Result, string) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	var out Buffer
	cfg.Program, cfg.Args = "sh", []string{"-c", script}
	cfg.Stdout, cfg.Stderr = &out, &out
	if cfg.Grace == 0 {
		cfg.Grace = 500 * time.Millisecond
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

func TestEnvironmentAndPrefixes(t *testing.T) {
	res, out := sh(t, `echo "rank=$RANK size=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT token=${#GORUN_TOKEN} fd=${GORUN_STORE_FD:-none}"`, Config{NP: 3})
	if err := res.Error(); err != nil {
		t.Fatal(err, out)
	}
	for _, want := range []string{"[0] rank=0 size=3 local=0/3 master=127.0.0.1:", "token=32 fd=3", "[1] rank=1 size=3 local=1/3", "fd=none", "[2] rank=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestWholeLines: ranks writing long lines in many small pieces at once
// never interleave within a line.
func TestWholeLines(t *testing.T) {
	script := `i=0; while [ $i -lt 200 ]; do printf 'aaaa'; printf 'bbbb'; printf 'cccc\n'; i=$((i+1)); done`
	res, out := sh(t, script, Config{NP: 4})
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, l := range lines {
		if len(l) != len("[0] aaaabbbbcccc") || !strings.HasSuffix(l, "] aaaabbbbcccc") {
			t.Fatalf("torn line %q", l)
		}
	}
}

func TestNoPrefix(t *testing.T) {
	_, out := sh(t, `echo hi`, Config{NP: 2, NoPrefix: true})
	if out != "hi\nhi\n" {
		t.Fatalf("got %q", out)
	}
}

// TestFirstFailureStopsTheRest: rank 1 exits 7 while the others would run
// for a minute; they are stopped, rank 1 is named, status 7.
func TestFirstFailureStopsTheRest(t *testing.T) {
	start := time.Now()
	res, out := sh(t, `if [ "$RANK" = 1 ]; then sleep 0.2; exit 7; fi; exec sleep 60`, Config{NP: 3})
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
	if res.First == nil || res.First.Rank != 1 || res.First.Status() != 7 {
		t.Fatalf("first failure %v, want rank 1 with status 7\n%s", res.First, out)
	}
	if len(res.Failures) != 1 {
		t.Errorf("ranks we stopped were counted as failures: %v", res.Failures)
	}
	if !strings.Contains(out, "rank 1 (pid") || !strings.Contains(out, "exited with status 7") {
		t.Errorf("no message naming rank 1:\n%s", out)
	}
}

// TestBlamedRankIsTheCause: rank 0 exits first with a status, its blame
// file naming rank 1 (as comm writes it when a group fails on a dead
// peer); rank 1 exits with a status after it. Rank 1 is the first failure.
func TestBlamedRankIsTheCause(t *testing.T) {
	res, out := sh(t, `case $RANK in 0) echo 1 > "$`+BlameFileEnv+`"; exit 3;; 1) sleep 0.3; exit 7;; esac; exec sleep 60`, Config{NP: 3})
	if res.First == nil || res.First.Rank != 1 || res.First.Status() != 7 {
		t.Fatalf("first failure %v, want rank 1 with status 7\n%s", res.First, out)
	}
	if len(res.Failures) != 2 || res.Failures[0].Rank != 0 || res.Failures[0].Blames != 1 || res.Failures[1].Blames != -1 {
		t.Errorf("failures %+v, want rank 0 blaming rank 1, then rank 1 blaming none", res.Failures)
	}
	if !strings.Contains(out, "rank 0's error named it") {
		t.Errorf("launcher did not say why rank 1 is the first failure:\n%s", out)
	}
}

// TestBlameOnAnotherNode: on node 1 of 2 (ranks 2 and 3), rank 2 fails
// naming rank 0 as the cause, which node 0 runs: the failure says so, for
// node 1's launcher to tell its user where to look; a rank of its own node
// blamed is not "another node's".
func TestBlameOnAnotherNode(t *testing.T) {
	res, out := sh(t, `case $RANK in 2) echo 0 > "$`+BlameFileEnv+`"; exit 3;; 3) sleep 0.3; echo 2 > "$`+BlameFileEnv+`"; exit 4;; esac`,
		Config{NP: 2, Nodes: 2, NodeRank: 1, Master: "127.0.0.1:1", Token: "t", KeepGoing: true})
	if res.First == nil || res.First.Rank != 2 {
		t.Fatalf("first failure %v, want rank 2\n%s", res.First, out)
	}
	if got, want := res.First.Error(), ", having lost rank 0, which node 0 runs (its log says why)"; !strings.HasSuffix(got, want) {
		t.Errorf("rank 2's failure reads %q, want it to end %q", got, want)
	}
	if len(res.Failures) != 2 || res.Failures[1].Rank != 3 {
		t.Fatalf("failures %v, want ranks 2 and 3\n%s", res.Failures, out)
	}
	if f := res.Failures[1]; f.BlamedElsewhere || strings.Contains(f.Error(), "having lost") {
		t.Errorf("rank 3 blamed rank 2 of its own node, yet reads %q", f.Error())
	}
	if !strings.Contains(out, "having lost rank 0, which node 0 runs") {
		t.Errorf("the launcher's messages do not name node 0:\n%s", out)
	}
}

// TestReadBlame: a blame file that is missing, empty, not a number or
// negative blames no one (-1); a rank and a newline is that rank.
func TestReadBlame(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, content string
		want          int
	}{
		{"missing", "", -1},
		{"empty", "", -1},
		{"garbage", "rank one\n", -1},
		{"negative", "-2\n", -1},
		{"rank", "3\n", 3},
		{"without newline", "0", 0},
	} {
		path := filepath.Join(dir, c.name)
		if c.name != "missing" {
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := readBlame(path); got != c.want {
			t.Errorf("%s: blames %d, want %d", c.name, got, c.want)
		}
	}
}

// TestCause orders failures as Result.First documents.
func TestCause(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	exit := func(rank, ms, blames int) *RankError {
		return &RankError{Rank: rank, ExitCode: 3, exited: at(ms), Blames: blames}
	}
	killed := &RankError{Rank: 4, ExitCode: -1, Signal: syscall.SIGKILL, exited: at(50), Blames: -1}
	for _, c := range []struct {
		name     string
		failures []*RankError
		want     int
	}{
		{"earliest exit", []*RankError{exit(2, 20, -1), exit(1, 10, -1)}, 1},
		{"the blamed rank, though later", []*RankError{exit(0, 10, 1), exit(1, 30, -1)}, 1},
		{"along a chain of blame", []*RankError{exit(2, 10, 1), exit(1, 20, 0), exit(0, 30, -1)}, 0},
		{"blame of a rank that did not fail", []*RankError{exit(0, 10, 3), exit(1, 20, -1)}, 0},
		{"ranks blaming each other: earliest", []*RankError{exit(1, 20, 0), exit(0, 10, 1)}, 0},
		{"a signal before a status", []*RankError{exit(0, 10, -1), killed}, 4},
		{"a blamed status before a signal", []*RankError{exit(0, 10, -1), exit(2, 5, 0), &RankError{Rank: 4, ExitCode: -1, Signal: syscall.SIGKILL, exited: at(50), Blames: 0}}, 0},
	} {
		if got := cause(c.failures); got.Rank != c.want {
			t.Errorf("%s: cause is rank %d, want %d", c.name, got.Rank, c.want)
		}
	}
}

func TestKilledRankNamed(t *testing.T) {
	res, _ := sh(t, `if [ "$RANK" = 2 ]; then kill -9 $$; fi; exec sleep 60`, Config{NP: 3})
	if res.First == nil || res.First.Rank != 2 || res.First.Signal != syscall.SIGKILL || res.First.Status() != 137 {
		t.Fatalf("first failure %v, want rank 2 killed by SIGKILL", res.First)
	}
}

// TestKilledRankBlamedOverItsVictims: rank 0 exits with a status first (as a
// survivor does when it loses a peer), then rank 1 is killed by a signal
// within the grace period; the killed rank is the one named.
func TestKilledRankBlamedOverItsVictims(t *testing.T) {
	res, out := sh(t, `case $RANK in 0) exit 3;; 1) sleep 0.1; kill -9 $$;; esac; exec sleep 60`, Config{NP: 3})
	if res.First == nil || res.First.Rank != 1 || res.First.Signal != syscall.SIGKILL {
		t.Fatalf("first failure %v, want rank 1 killed by SIGKILL\n%s", res.First, out)
	}
	if len(res.Failures) != 2 {
		t.Errorf("failures %v, want ranks 0 and 1", res.Failures)
	}
	if !strings.Contains(out, "rank 0 (pid") || !strings.Contains(out, "rank 1 (pid") {
		t.Errorf("launcher did not report both failures:\n%s", out)
	}
}

// TestFirstExitBlamedWhenReportedLate: rank 1 exits 7 at once but leaves
// a process holding its output open for a while, so its exit is reported
// after rank 2's (status 3, 0.2 s later, as a survivor that lost its
// peer); rank 1, whose process ended first, is the first failure.
func TestFirstExitBlamedWhenReportedLate(t *testing.T) {
	res, out := sh(t, `case $RANK in 1) sleep 1 & exit 7;; 2) sleep 0.2; exit 3;; esac; exec sleep 60`, Config{NP: 3})
	if res.First == nil || res.First.Rank != 1 || res.First.Status() != 7 {
		t.Fatalf("first failure %v, want rank 1 with status 7\n%s", res.First, out)
	}
	if len(res.Failures) != 2 {
		t.Errorf("failures %v, want ranks 2 and 1", res.Failures)
	}
	if !strings.Contains(out, "exited with status 7 before rank 2 did: the first failure") {
		t.Errorf("the launcher did not say rank 1 failed first:\n%s", out)
	}
}

func TestTimeout(t *testing.T) {
	res, _ := sh(t, `exec sleep 60`, Config{NP: 2, Timeout: 300 * time.Millisecond})
	if !errors.Is(res.Err, ErrTimeout) || res.First != nil {
		t.Fatalf("got %+v, want a timeout and no rank blamed", res)
	}
}

func TestStdinGoesToRankZero(t *testing.T) {
	res, out := sh(t, `read line || line=none; echo "got $line"`, Config{NP: 2, Stdin: strings.NewReader("hello\n")})
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "[0] got hello") || !strings.Contains(out, "[1] got none") {
		t.Fatalf("got %q", out)
	}
}

// TestMissingProgram: a program that cannot be found is named; a bare
// name that is not in $PATH but is an executable file here or in bin/
// (where the README builds the commands: "gorun -np 2 train" for
// "gorun -np 2 bin/train") is pointed at.
func TestMissingProgram(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{"bin/train", 0o755}, {"infer", 0o755}, {"notes", 0o644}} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f.path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.path), []byte("#!/bin/sh\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	for _, tc := range []struct{ program, want, not string }{
		{"/no/such/program", "/no/such/program", " is one"},
		{"train", `exec: "train": executable file not found in $PATH; ./bin/train is one: give its path, as a shell would need`, ""},
		{"infer", "; ./infer is one", ""},
		{"notes", `"notes": executable file not found in $PATH`, " is one"},
		{"gorun-no-such-program", `"gorun-no-such-program": executable file not found in $PATH`, " is one"},
	} {
		_, err := Run(context.Background(), Config{NP: 2, Program: tc.program})
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.not != "" && strings.Contains(err.Error(), tc.not)) {
			t.Errorf("%s: error %v, want %q", tc.program, err, tc.want)
		}
	}
}

// TestMain runs the test binary as a rank that asks for memory when
// LAUNCH_TEST_MEMORY says so (the out-of-memory tests), else the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("LAUNCH_TEST_MEMORY") {
	case "":
		os.Exit(m.Run())
	case "reserve": // 1 TiB, more than the machines here have: the runtime's own crash
		b := make([]byte, 1<<40)
		b[len(b)-1] = 1
		fmt.Println("allocated", len(b))
	case "launch": // a launcher in a small memory cgroup
		launchTouchingRank()
	case "touch": // 512 MiB, every page written: the kernel's OOM killer
		b := make([]byte, 512<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("touched", len(b))
	}
}

// TestStatusLines: rank 0, and only rank 0, gets GORUN_STATUS_FD; what it
// writes there reaches Config.Status line by line, not the output.
func TestStatusLines(t *testing.T) {
	var mu sync.Mutex
	var got []string
	res, out := sh(t, `if [ -n "$GORUN_STATUS_FD" ]; then printf 'step 1\nstep 2\n' >&$GORUN_STATUS_FD; echo "fd $GORUN_STATUS_FD"; else echo "no status fd"; fi`, Config{NP: 2, Status: func(line string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, line)
	}})
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "step 1|step 2" {
		t.Errorf("status lines %q, want step 1, step 2", got)
	}
	if !strings.Contains(out, "[0] fd 4") || !strings.Contains(out, "[1] no status fd") || strings.Contains(out, "step") {
		t.Errorf("output:\n%s", out)
	}
}

// TestStatusTerminal: output lines go above the status line, which is
// cleared before each and drawn again after it; a new status redraws the
// line in place, control characters dropped and cut to the width; Close
// leaves the last status and ends its line.
func TestStatusTerminal(t *testing.T) {
	for _, c := range []struct {
		name  string
		width int
		do    func(st *StatusTerminal)
		want  string
	}{
		{"lines only", 80, func(st *StatusTerminal) {
			st.Write([]byte("[0] a\n"))
			st.Write([]byte("[1] b\n"))
			st.Close()
		}, "[0] a\n[1] b\n"},
		{"bar under lines", 80, func(st *StatusTerminal) {
			st.Write([]byte("[0] a\n"))
			st.SetStatus("Epoch 1/2 [=> ] 10%")
			st.Write([]byte("[1] b\n"))
			st.SetStatus("Epoch 1/2 [==>] 50%")
			st.Close()
		}, "[0] a\n\r\033[KEpoch 1/2 [=> ] 10%\r\033[K[1] b\nEpoch 1/2 [=> ] 10%\r\033[KEpoch 1/2 [==>] 50%\n"},
		{"cut and cleaned", 8, func(st *StatusTerminal) {
			st.SetStatus("ab\r\033cdefghijk")
			st.Close()
		}, "\r\033[Kabcdefg\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			st := NewStatusTerminal(&b, c.width)
			c.do(st)
			if b.String() != c.want {
				t.Errorf("wrote %q\nwant  %q", b.String(), c.want)
			}
		})
	}
}

// TestMultiNodeSettingsRejected: a job whose node count or node rank
// (on one node too), or, over several nodes, whose master address or
// token is missing or wrong fails before anything starts, saying which
// setting and what it wants.
func TestMultiNodeSettingsRejected(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no master", Config{Nodes: 2, Token: "t"}, "a job over 2 nodes needs --master HOST:PORT"},
		{"master without a port", Config{Nodes: 2, Master: "node0", Token: "t"}, `--master "node0": want HOST:PORT`},
		{"master without a host", Config{Nodes: 2, Master: ":29500", Token: "t"}, `--master ":29500": want HOST:PORT`},
		{"port out of range", Config{Nodes: 2, Master: "node0:70000", Token: "t"}, `port "70000" is not a port number`},
		{"node rank past the nodes", Config{Nodes: 2, NodeRank: 2, Master: "node0:29500", Token: "t"}, "node rank 2 outside 0…1"},
		{"node rank of a single node", Config{NodeRank: 1}, "node rank 1 outside 0…0"},
		{"negative node rank", Config{Nodes: 2, NodeRank: -1, Master: "node0:29500", Token: "t"}, "node rank -1 outside 0…1"},
		{"negative nodes", Config{Nodes: -1}, "node rank 0 outside 0…0 (-1 nodes)"},
		{"no token", Config{Nodes: 3, NodeRank: 1, Master: "node0:29500"}, "a job over 3 nodes needs the same token on every node: set GORUN_TOKEN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, ln, err := rendezvous(c.cfg)
			if ln != nil {
				ln.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestSweepBlameDirs: the blame directories of launchers that are gone
// (killed by SIGKILL, they could not remove their own) are removed; those
// of a live launcher, and anything not named as a launcher's, are kept.
func TestSweepBlameDirs(t *testing.T) {
	dir := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skipf("no true: %v", err)
	}
	dead, alive := gone.Process.Pid, os.Getpid()
	mk := func(name string, isDir bool) string {
		p := filepath.Join(dir, name)
		if isDir {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(p, "rank-1"), []byte("0\n"), 0o644)
		} else if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	swept := mk(fmt.Sprintf("gorun-blame-%d-123", dead), true)
	// With a lock file, the lock decides, not the pid: a pid taken again
	// by another process, or a launcher in another pid namespace.
	reused := mk(fmt.Sprintf("gorun-blame-%d-reused", alive), true)
	os.WriteFile(filepath.Join(reused, blameLock), nil, 0o600)
	held := mk(fmt.Sprintf("gorun-blame-%d-held", dead), true)
	lock, err := os.OpenFile(filepath.Join(held, blameLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// A live launcher's own directory, made as Run makes it.
	live, unlock, err := makeBlameDir()
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	defer unlock()
	if err := os.Rename(live, filepath.Join(dir, filepath.Base(live))); err != nil {
		t.Fatal(err)
	}
	live = filepath.Join(dir, filepath.Base(live))
	kept := []string{held, live,
		mk(fmt.Sprintf("gorun-blame-%d-456", alive), true),
		mk("gorun-blame-789", true),                         // no pid in the name
		mk(fmt.Sprintf("gorun-blame-%d-file", dead), false), // not a directory
		mk(fmt.Sprintf("gorun-blame-x%d-1", dead), true),    // not a pid
		mk(fmt.Sprintf("other-blame-%d-1", dead), true),     // another prefix
	}
	sweepBlameDirs(dir)
	for _, p := range []string{swept, reused} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, the blame directory of a launcher that is gone, is still there: %v", p, err)
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it kept", p, err)
		}
	}
}
