package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/bench"
	"github.com/gorun/gorun/bench/netcluster"
	"github.com/gorun/gorun/train/data"
)

// The harness starts its ranks by running its own executable: here, this
// test binary, which then acts as the bench command.
func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" { // a test's bench command
		main()
	}
	if os.Getenv(workerEnv) != "" {
		if err := run(os.Args[1:], os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestCollectivesCommand(t *testing.T) {
	csv := filepath.Join(t.TempDir(), "r.csv")
	var out bytes.Buffer
	chart := filepath.Join(t.TempDir(), "c.svg")
	variants := "default,ring"
	err := run([]string{"collectives", "-np", "2,3", "-sizes", "96B:384B", "-iters", "2", "-warmup", "1", "-variants", variants, "-csv", csv,
		"-competitors=false", "-chart", chart}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	ops := len(bench.Ops)
	if n := strings.Count(s, "# Collective test:"); n != ops*2*2 {
		t.Fatalf("%d tables, want %d:\n%s", n, ops*2*2, s)
	}
	if !strings.Contains(s, "# Summary: bus bandwidth (GB/s) by message size") || !strings.Contains(s, "all_reduce      "+strings.Split(variants, ",")[1]) {
		t.Fatalf("summary missing:\n%s", s)
	}
	b, err := os.ReadFile(csv)
	if err != nil || strings.Count(string(b), "\n") != 1+ops*3*2*2 {
		t.Fatalf("CSV: %v\n%s", err, b)
	}

	svg, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"all_reduce: bus bandwidth", "alltoall: latency", "gorun np=2", "gorun ring np=3"} {
		if !strings.Contains(string(svg), want) {
			t.Fatalf("chart lacks %q:\n%s", want, svg)
		}
	}

	// A PNG chart; a format the chart cannot be is refused before
	// anything runs.
	png := filepath.Join(t.TempDir(), "c.png")
	if err := run([]string{"collectives", "-np", "2", "-sizes", "96B", "-iters", "1", "-warmup", "0", "-ops", "all_reduce", "-competitors=false", "-chart", png}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("PNG chart: %v, %d bytes", err, len(b))
	}
	out.Reset()
	err = run([]string{"collectives", "-np", "2", "-sizes", "96B", "-chart", "c.jpg"}, &out)
	if err == nil || !strings.Contains(err.Error(), "-chart") || !strings.Contains(err.Error(), "c.jpg") || out.Len() != 0 {
		t.Fatalf("-chart c.jpg: %v\n%s", err, out.String())
	}

	// A broken reduction is counted and fails the command.
	out.Reset()
	err = run([]string{"collectives", "-np", "2", "-sizes", "96B", "-iters", "1", "-warmup", "0", "-ops", "all_reduce", "-break", "all_reduce", "-competitors=false"}, &out)
	if err == nil || !strings.Contains(err.Error(), "wrong elements") {
		t.Fatalf("broken all-reduce: %v\n%s", err, out.String())
	}
	rows := 0
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 9 && !strings.HasPrefix(l, "#") {
			rows++
			if f[8] == "0" {
				t.Fatalf("row %q counts no wrong elements", l)
			}
		}
	}
	if rows != 1 {
		t.Fatalf("%d rows:\n%s", rows, out.String())
	}
	for _, bad := range [][]string{{}, {"nope"}, {"collectives", "-np", "0"}, {"collectives", "-variants", "fast"}, {"train", "-model", "vgg", "-train", os.Args[0]}} {
		if err := run(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("bench %v succeeded", bad)
		}
	}
}

// A rank of a job started outside bench (here a job of one) prints the
// table and writes the files it was asked for.
func TestInJobWritesFiles(t *testing.T) {
	for _, v := range []string{"RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "GORUN_RANK"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	dir := t.TempDir()
	csv, js := filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.json")
	var out bytes.Buffer
	err := run([]string{"collectives", "-in-job", "-sizes", "96B,192B", "-iters", "2", "-warmup", "1", "-ops", "all_reduce", "-csv", csv, "-json", js}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "1 ranks in a job started outside bench") {
		t.Fatalf("no table:\n%s", out.String())
	}
	b, err := os.ReadFile(csv)
	if err != nil || !strings.HasPrefix(string(b), "op,np,bytes") || !strings.Contains(string(b), "\nall_reduce,1,192,") || strings.Count(string(b), "\n") != 3 {
		t.Fatalf("CSV: %v\n%s", err, b)
	}
	if b, err := os.ReadFile(js); err != nil || !strings.Contains(string(b), "192") {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
}

// TestDataCommand measures the image pipeline on a small generated
// folder, as text and as JSON, for both transforms; wrong flags and a
// folder that is not one are errors naming what is wrong.
func TestDataCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "photos")
	tr, _ := data.Synthetic(data.FormatCIFAR10, 60, 1)
	te, _ := data.Synthetic(data.FormatCIFAR10, 40, 2)
	if err := data.WriteImageFolder(dir, tr, te, 64, 48, ".jpg"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"data", "-data", dir, "-workers", "2", "-images", "96", "-batch", "8", "-size", "32", "-json"}, &out); err != nil {
		t.Fatal(err)
	}
	var res bench.DataResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.ImagesPerSec <= 0 || res.Workers != 2 || res.Images != 96 || res.Batch != 8 || !strings.Contains(res.Transform, "RandomResizedCrop") || res.Decoder == "" {
		t.Errorf("result %+v: want 96 images timed (after a batch to warm up), 2 workers, batch 8", res)
	}
	out.Reset()
	if err := run([]string{"data", "-data", dir, "-images", "32", "-batch", "8", "-size", "32", "-eval"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "images/s with 1 workers (32 images from files, batch 8") || !strings.Contains(out.String(), "Resize+CenterCrop") {
		t.Errorf("text output: %s", out.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"data"}, "-data DIR: an image folder is needed"},
		{[]string{"data", "-data", dir, "-workers", "0"}, "-workers 0"},
		{[]string{"data", "-data", dir, "-images", "8", "-batch", "8"}, "want at least two batches"},
		{[]string{"data", "-data", t.TempDir()}, "is not an image folder (DIR/train/CLASS/IMAGE, DIR/val/CLASS/IMAGE) or shards"},
		{[]string{"data", "-data", dir, "extra"}, `unexpected arguments ["extra"]: bench data takes flags only`},
	} {
		if err := run(c.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestClusterCommand runs examples/allreduce on 2 simulated hosts × 2
// ranks (network namespaces, links limited to 1 Gbit/s; root only, and
// CI runs as root) and removes them; missing flags are errors; -each runs
// a program once per host with torchrun's variables, gloo's helper
// across the hosts among them.
func TestClusterCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "-hosts", "2"}, "no program to run"},
		{[]string{"cluster", "-np", "0", "--", "true"}, "-np 0"},
		{[]string{"cluster", "-gorun", "/nonexistent/gorun", "--", "true"}, "/nonexistent/gorun"},
		{[]string{"cluster", "-each", "-link", "wire", "--", "true"}, `link "wire": want tc, user`},
		{[]string{"cluster", "-each", "-link", "user", "-mtu", "9", "--", "true"}, "MTU 9: want 576 to 65535"},
	} {
		if err := run(c.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if os.Getuid() != 0 {
		t.Skip("network namespaces need root")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../gorun", "../../examples/allreduce", ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	err := run([]string{"cluster", "-hosts", "2", "-np", "2", "-rate", "1gbit", "-gorun", filepath.Join(bin, "gorun"), "--", filepath.Join(bin, "allreduce")}, &out)
	if errors.Is(err, netcluster.ErrNoNamespaces) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"# 2 hosts", "tbf rate 1gbit", "[3] rank 3 of 4: sum of ranks = 6, ranks counted = 4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if names, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(names), fmt.Sprintf("gnc%d-", os.Getpid()%250)) {
		t.Errorf("namespaces left behind:\n%s", names)
	}

	if testing.Short() {
		return // (-each and gloo: the full run covers them)
	}
	// -each: the program runs once per host, in its namespace, with
	// torchrun's variables for a host's agent.
	out.Reset()
	script := `echo "host $GROUP_RANK of $WORLD_SIZE ranks, $LOCAL_WORLD_SIZE per host, master $MASTER_ADDR:$MASTER_PORT, address $(ip -o -4 addr show | grep -v ' lo ' | awk '{print $4}')"`
	if err := run([]string{"cluster", "-hosts", "2", "-np", "3", "-each", "--", "sh", "-c", script}, &out); err != nil {
		t.Fatalf("-each: %v\n%s", err, out.String())
	}
	for h := range 2 {
		want := regexp.MustCompile(fmt.Sprintf(`host %d of 6 ranks, 3 per host, master (10\.79\.\d+)\.1:29519, address (10\.79\.\d+)\.%d/`, h, h+1))
		if m := want.FindStringSubmatch(out.String()); m == nil || m[1] != m[2] {
			t.Errorf("-each: host %d's line missing or outside its namespace (want %v):\n%s", h, want, out.String())
		}
	}
	// A host whose program fails stops the others at once.
	out.Reset()
	start := time.Now()
	err = run([]string{"cluster", "-hosts", "3", "-np", "1", "-each", "--", "sh", "-c", `if [ "$GROUP_RANK" = 1 ]; then exit 3; fi; sleep 60`}, &out)
	if err == nil || !strings.Contains(err.Error(), "host 1 (") || !strings.Contains(err.Error(), "exit status 3; the other hosts stopped") || strings.Contains(err.Error(), "host 0") {
		t.Errorf("one host failing: %v, want host 1's exit status and no other host's error", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("one host failing: the others ran on for %v", d)
	}
	// A cluster of one host has no others to stop, and says none.
	err = run([]string{"cluster", "-hosts", "1", "-np", "1", "-each", "--", "sh", "-c", "exit 3"}, &out)
	if err == nil || !strings.Contains(err.Error(), "host 0 (") || !strings.Contains(err.Error(), "exit status 3") || strings.Contains(err.Error(), "other hosts") {
		t.Errorf("the only host failing: %v, want host 0's exit status and no other hosts", err)
	}
	// Ctrl-C: the hosts' programs are stopped and the namespaces removed.
	interrupted := exec.Command(filepath.Join(bin, "bench"), "cluster", "-hosts", "2", "-np", "1", "-each", "--", "sleep", "60")
	var stderr bytes.Buffer
	interrupted.Stderr = &stderr
	if err := interrupted.Start(); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("gnc%d-", interrupted.Process.Pid%250)
	namespaces := func() bool {
		names, _ := exec.Command("ip", "netns", "list").Output()
		return strings.Contains(string(names), prefix)
	}
	for i := 0; !namespaces(); i++ {
		if i == 200 {
			interrupted.Process.Kill()
			t.Fatalf("the cluster's namespaces (%s…) never appeared", prefix)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the hosts' programs started
	start = time.Now()
	interrupted.Process.Signal(os.Interrupt)
	err = interrupted.Wait()
	if err == nil || !strings.Contains(stderr.String(), "context canceled") || time.Since(start) > 20*time.Second {
		t.Errorf("interrupted: %v after %v, want a failure within 20 s saying the context was canceled:\n%s", err, time.Since(start), stderr.String())
	}
	if namespaces() {
		t.Errorf("interrupted: namespaces %s… left behind", prefix)
	}
	// Links emulated in user space, as on a kernel without tc netem.
	out.Reset()
	if err := run([]string{"cluster", "-hosts", "2", "-np", "1", "-link", "user", "-delay", "500us", "-each", "--", "true"}, &out); err != nil {
		t.Fatalf("-link user: %v\n%s", err, out.String())
	}
	if want := "on TUN links emulated in user space (unshaped, delay 500µs, MTU 9000)"; !strings.Contains(out.String(), want) {
		t.Errorf("-link user: no %q:\n%s", want, out.String())
	}
	// gloo, the competitor -each serves, across the 2 hosts.
	if err := bench.TorchDDPAvailable("../../bench/competitors"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("gloo cannot run here: CI installs python3-torch: %v", err)
		}
		t.Skip(err)
	}
	out.Reset()
	err = run([]string{"cluster", "-hosts", "2", "-np", "2", "-each", "--", bench.TorchPython, "../../bench/competitors/gloo_allreduce.py", "4",
		"iters=3", "64", "op=all_gather", "64", "op=barrier", "8"}, &out)
	if err != nil {
		t.Fatalf("gloo across hosts: %v\n%s", err, out.String())
	}
	for _, want := range []string{"gloo np=4 bytes=64 us=", "gloo op=all_gather np=4 bytes=64 us=", "gloo op=barrier np=4 bytes=8 us="} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("gloo across hosts: no %q:\n%s", want, out.String())
		}
	}
	// PyTorch DDP started once per host (bench/ddp_hosts.sh's competitor).
	out.Reset()
	if err := run([]string{"cluster", "-hosts", "2", "-np", "1", "-each", "--", bench.TorchPython, "../../bench/competitors/torch_ddp.py", "mnist", "256", "2"}, &out); err != nil {
		t.Fatalf("PyTorch DDP across hosts: %v\n%s", err, out.String())
	}
	if want := "torch-ddp mnist np=2: 256 images in "; !strings.Contains(out.String(), want) {
		t.Errorf("PyTorch DDP across hosts: no %q:\n%s", want, out.String())
	}
}

// TestTrainCommand runs seed 003's table as a user would: gorun over
// shared memory and over TCP, and PyTorch DDP on the same work, with the
// JSON and the chart; bad flags are refused before anything runs.
func TestTrainCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: six training runs and a build of cmd/train (about 45 s)")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../train").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	torch := bench.TorchDDPAvailable("../../bench/competitors") == nil
	if !torch && os.Getenv("CI") == "true" {
		t.Fatal("PyTorch DDP cannot run here: CI installs python3-torch")
	}
	dir := t.TempDir()
	js, chart := filepath.Join(dir, "rows.json"), filepath.Join(dir, "scaling.svg")
	var out bytes.Buffer
	err := run([]string{"train", "-np", "1,2", "-model", "cifarnet", "-samples", "256", "-transports", "auto,tcp", "-train", bin + "/train",
		"-helpers", "../../bench/competitors", "-json", js, "-chart", chart}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rows []bench.ScalingRow
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatalf("JSON: %v\n%s", err, b)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %d", r.Contestant, r.NP))
		if r.ImgPerSec <= 0 || r.Seconds <= 0 || r.NP == 1 && r.SpeedUp != 1 || r.NP == 2 && math.Abs(r.Efficiency-r.SpeedUp/2) > 1e-9 {
			t.Errorf("row %+v", r)
		}
		// Each row is in the table as the JSON has it.
		if !strings.Contains(out.String(), fmt.Sprintf("  %-14s %4d %10.1f %10.0f %7.2fx", r.Contestant, r.NP, r.Seconds, r.ImgPerSec, r.SpeedUp)) {
			t.Errorf("table lacks %+v:\n%s", r, out.String())
		}
	}
	want := "gorun 1, gorun 2, gorun tcp 1, gorun tcp 2"
	if torch {
		want += ", pytorch-ddp 1, pytorch-ddp 2"
	}
	if strings.Join(got, ", ") != want {
		t.Fatalf("rows %v, want %s\n%s", got, want, out.String())
	}
	if torch && !strings.Contains(out.String(), "# gorun ÷ pytorch-ddp (img/s): np=1 ") {
		t.Errorf("no comparison with PyTorch:\n%s", out.String())
	}
	if svg, err := os.ReadFile(chart); err != nil || !strings.Contains(string(svg), "cifarnet: img/s by world size") {
		t.Fatalf("chart: %v\n%s", err, svg)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-transports", "rdma"}, "-transports"},
		{[]string{"-chart", "s.gif"}, "s.gif"},
		{[]string{"-model", "vgg"}, "vgg"},
		{[]string{"-np", "0"}, "-np"},
		{[]string{"-train", filepath.Join(bin, "missing")}, "missing"},
	} {
		var out bytes.Buffer
		err := run(append([]string{"train", "-train", bin + "/train", "-samples", "64"}, bad.args...), &out)
		if err == nil || !strings.Contains(err.Error(), bad.want) || out.Len() != 0 {
			t.Errorf("bench train %v: %v (want an error naming %s, nothing run)\n%s", bad.args, err, bad.want, out.String())
		}
	}
}

func TestModelCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"model", "-ranks", "16,1024", "-sizes", "1MB,25MB"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"100 Gb InfiniBand (EDR)", "25 GbE", "| 16 | 1 MiB |", "| 1024 | 25 MiB |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-per-node", "0"}, "-per-node 0"},
		{[]string{"-efficiency", "2"}, "-efficiency 2"},
		{[]string{"-ranks", "8,x"}, "-ranks"},
		{[]string{"-sizes", "1QB"}, "-sizes"},
		{[]string{"-shm-bw", "0"}, "-shm-bw 0"},
		{[]string{"-tcp-step", "-1us"}, "negative"},
		{[]string{"extra"}, `unexpected arguments ["extra"]: bench model takes flags only`},
	} {
		err := run(append([]string{"model"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench model %v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

// TestStrayArguments: an argument where flags belong stops collectives
// and train before anything runs, naming it (the flags after it would go
// unread), and so does a collective or variant the harness does not know.
func TestStrayArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"collectives", "all_reduce", "-np", "2"}, `unexpected arguments ["all_reduce" "-np" "2"]: bench collectives takes flags only ("bench collectives -h" lists them)`},
		{[]string{"train", "-np", "2", "cifarnet"}, `unexpected arguments ["cifarnet"]: bench train takes flags only`},
		// Bad names, named before any job starts.
		{[]string{"collectives", "-np", "2", "-ops", "all_reduce,allreduce"}, `-ops: unknown collective "allreduce" (have all_reduce, broadcast`},
		{[]string{"collectives", "-np", "2", "-variants", "default,rign"}, `-variants: unknown "rign" (have bruck, default`},
		{[]string{"collectives", "-np", "2", "-break", "allreduce"}, `-break: unknown collective "allreduce"`},
		{[]string{"collectives", "-np", "2", "-iters", "-1"}, "-iters -1: want 0 (by size) or more"},
		{[]string{"train", "-np", "2", "-samples", "-3"}, "-samples -3: want 0 (the model's default) or more"},
		{[]string{"collectives", "-np", "2", "-warmup", "-3"}, "-warmup -3: want 0 or more"},
		{[]string{"collectives", "-np", "2", "-warmup-time", "-1s"}, "-warmup-time -1s: want 0 or more"},
	} {
		var out bytes.Buffer
		err := run(c.args, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) || out.Len() > 0 {
			t.Errorf("bench %q: error %v and output %q, want %q and none", c.args, err, out.String(), c.want)
		}
	}
}

// asMainEnv makes this test binary the bench command itself (main), for
// tests that signal it.
const asMainEnv = "BENCH_TEST_AS_MAIN"

// TestCollectivesInterrupted: Ctrl-C (SIGINT) while the ranks run stops
// them and ends the command at once, saying so, with its temporary
// directories removed (they were left in $TMPDIR).
func TestCollectivesInterrupted(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cmd := exec.Command(exe, "collectives", "-np", "2", "-sizes", "8B", "-ops", "all_reduce", "-iters", "100000000", "-competitors=false")
	cmd.Env = append(os.Environ(), asMainEnv+"=1", "TMPDIR="+tmp)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The ranks run once the launcher's directory is there.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if blame, _ := filepath.Glob(filepath.Join(tmp, "gorun-blame-*")); len(blame) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ranks started within 20 s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // into the timed calls
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("bench still runs 10 s after SIGINT:\n%s", out.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(out.String(), "bench: collectives: interrupted at np=2 default") {
		t.Fatalf("after SIGINT: %v, output:\n%s", err, out.String())
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("left behind in $TMPDIR: %v", names)
	}
}

// TestUsage: bench -h lists every command with what it does; a command
// mistyped or missing is named, with the commands; a command's -h shows
// its own usage line.
func TestUsage(t *testing.T) {
	for _, help := range []string{"-h", "--help", "help"} {
		var out bytes.Buffer
		if err := run([]string{help}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("bench %s: error %v, want flag.ErrHelp", help, err)
		}
		for _, c := range commands() {
			if !strings.Contains(out.String(), "\n  "+c.name+"\n") || !strings.Contains(out.String(), strings.Split(c.about, "\n")[0]) {
				t.Errorf("bench %s does not list %s with what it does:\n%s", help, c.name, out.String())
			}
		}
	}
	for _, c := range []struct {
		args   []string
		want   string
		prefix bool // the error begins with want
	}{
		{nil, "no command: want collectives, train, data, cluster or model (bench -h says what each does)", true},
		{[]string{"colectives", "-np", "2"}, `unknown command "colectives" (did you mean collectives?): want collectives, train`, true},
		{[]string{"all_reduce"}, `unknown command "all_reduce": want collectives`, true},
		// A command's errors begin with its name, once (main adds "bench: ").
		{[]string{"data"}, "data: -data DIR: an image folder is needed", true},
		{[]string{"collectives", "-sizes", "abc"}, `collectives: size "abc"`, true},
	} {
		var out bytes.Buffer
		err := run(c.args, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) || c.prefix && !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("bench %q: error %v, want %q", c.args, err, c.want)
		}
	}
	fs := flagSet("data")
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Usage()
	if !strings.HasPrefix(out.String(), "usage: bench data -data DIR") {
		t.Errorf("bench data -h begins %q", out.String()[:min(60, out.Len())])
	}
}
