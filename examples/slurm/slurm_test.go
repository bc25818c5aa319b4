// Package slurm holds batch scripts for running gorun's trainer under
// Slurm, and tests that run them, and collectives under srun, on a real
// two-node Slurm cluster started on this machine by cluster.sh.
package slurm

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/train/data"
)

// cluster is the test cluster and the binaries built for it; skip says
// why there is none.
var cluster struct {
	dir, conf, bin string
	skip           string
}

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse()
		if testing.Short() {
			cluster.skip = "-short: the Slurm cluster tests run in the full pass"
			return m.Run()
		}
		if reason := canRun(); reason != "" {
			cluster.skip = reason
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "gorun-slurm-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		cluster.dir, cluster.bin = dir, filepath.Join(dir, "bin")
		build := exec.Command("go", "build", "-o", cluster.bin+"/", "../../cmd/train", "../../cmd/gorun", "../allreduce")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building: %v\n%s", err, out)
			return 1
		}
		start := exec.Command("bash", "cluster.sh", "start", filepath.Join(dir, "cluster"))
		if out, err := start.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "starting the Slurm cluster: %v\n%s", err, out)
			return 1
		}
		defer exec.Command("bash", "cluster.sh", "stop", filepath.Join(dir, "cluster")).Run()
		cluster.conf = filepath.Join(dir, "cluster", "slurm.conf")
		return m.Run()
	}()
	os.Exit(code)
}

// canRun says why no cluster can start here, or "".
func canRun() string {
	if os.Getuid() != 0 {
		return "starting slurmctld, slurmd and munged needs root"
	}
	for _, b := range []string{"slurmctld", "slurmd", "srun", "sbatch", "munged"} {
		if _, err := exec.LookPath(b); err != nil {
			return b + " is not installed (apt-get install -y slurmctld slurmd slurm-client munge)"
		}
	}
	return ""
}

// slurm runs a Slurm client command against the test cluster, with
// nothing of gorun's, torchrun's or a previous job's environment, inside
// a deadline (Slurm's own time limits are whole minutes).
func slurm(t *testing.T, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	if cluster.skip != "" {
		t.Skip(cluster.skip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = cluster.dir
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "SLURM_"), strings.HasPrefix(k, "GORUN_"), strings.HasPrefix(k, "OMPI_"),
			k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE", k == "MASTER_ADDR", k == "MASTER_PORT":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "SLURM_CONF="+cluster.conf, "GORUN_JOIN_TIMEOUT=10s", "GORUN_TIMEOUT=20s")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("%s %v: no answer in %v", name, args, timeout)
	}
	return string(out), err
}

// jobState finds a job's state and exit code in `scontrol show job -o`.
var jobState = regexp.MustCompile(`JobState=(\S+).* ExitCode=(\S+)`)

// sbatchWait submits a batch job and waits until it has ended, within
// timeout: an error unless it completed with exit code 0. (sbatch --wait
// looks after 2, 10 and 42 s, so a 12-second job took 42.)
func sbatchWait(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	out, err := slurm(t, timeout, "sbatch", append([]string{"--parsable"}, args...)...)
	if err != nil {
		return out, err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	for {
		state, err := slurm(t, 10*time.Second, "scontrol", "show", "job", "-o", id)
		if err != nil {
			return out + state, fmt.Errorf("scontrol show job %s: %w", id, err)
		}
		m := jobState.FindStringSubmatch(state)
		if m == nil {
			return out + state, fmt.Errorf("job %s: no JobState and ExitCode in scontrol's answer", id)
		}
		switch m[1] {
		case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED":
		case "COMPLETED":
			if m[2] == "0:0" {
				return out, nil
			}
			return out, fmt.Errorf("job %s completed with exit code %s", id, m[2])
		default:
			return out, fmt.Errorf("job %s ended %s, exit code %s", id, m[1], m[2])
		}
		if time.Now().After(deadline) {
			slurm(t, 10*time.Second, "scancel", id)
			return out, fmt.Errorf("job %s still %s after %v (cancelled)", id, m[1], timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestSbatchWaitSeesFailure: a batch job that exits with status 3 makes
// sbatchWait fail and say so, so the batch-script tests cannot pass on a
// job that failed.
func TestSbatchWaitSeesFailure(t *testing.T) {
	work := t.TempDir()
	script := filepath.Join(work, "fail.sh")
	if err := os.WriteFile(script, []byte("#!/bin/bash\necho failing\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := sbatchWait(t, time.Minute, "--chdir", work, "--output", filepath.Join(work, "job.out"), script)
	if err == nil || !strings.Contains(err.Error(), "exit code 3:0") {
		t.Fatalf("got %v, want an error naming exit code 3:0", err)
	}
}

// TestBatchScriptWithoutSrun: a batch script of 2 tasks that runs the
// program itself, not through srun, is one process with SLURM_PROCID 0:
// it stops at once saying to use srun, where it waited for a rank 1 until
// the join's deadline.
func TestBatchScriptWithoutSrun(t *testing.T) {
	work := t.TempDir()
	script := filepath.Join(work, "nosrun.sh")
	if err := os.WriteFile(script, []byte("#!/bin/bash\n#SBATCH --ntasks=2\nexec "+cluster.bin+"/allreduce\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := sbatchWait(t, time.Minute, "--chdir", work, "--output", filepath.Join(work, "job.out"), script)
	out, _ := os.ReadFile(filepath.Join(work, "job.out"))
	if err == nil || !strings.Contains(string(out), "this is Slurm's batch script itself, one process, where the job asks for 2 tasks (SLURM_NTASKS): start them with srun") {
		t.Fatalf("error %v, output:\n%s\nwant a failure saying to start the tasks with srun", err, out)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the job took %v to fail", took)
	}
}

// TestSrunAllReduce runs the allreduce example as 4 tasks on both nodes:
// every rank finds the others from Slurm's variables alone (MASTER_ADDR
// from the compressed node list n[1-2]) and prints the right sum.
func TestSrunAllReduce(t *testing.T) {
	out, err := slurm(t, 2*time.Minute, "srun", "-N", "2", "-n", "4", "-O", "-l", "--export=ALL",
		"bash", "-c", `echo "node $SLURMD_NODENAME nodelist $SLURM_JOB_NODELIST"; exec `+cluster.bin+"/allreduce")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	nodes := map[string]bool{}
	sums := 0
	for _, line := range strings.Split(out, "\n") {
		if m := regexp.MustCompile(`node (\S+) nodelist (\S+)`).FindStringSubmatch(line); m != nil {
			nodes[m[1]] = true
			if m[2] != "n[1-2]" {
				t.Errorf("node list %q, want the compressed n[1-2]", m[2])
			}
		}
		if strings.Contains(line, "of 4: sum of ranks = 6, ranks counted = 4") {
			sums++
		}
	}
	if sums != 4 {
		t.Errorf("%d ranks printed the right sum, want 4:\n%s", sums, out)
	}
	if len(nodes) != 2 {
		t.Errorf("tasks ran on %v, want both nodes:\n%s", keys(nodes), out)
	}
}

// TestRankFailsUnderSrun: task 2 exits with status 3 before joining. With
// -K srun kills the others and names the task; without it the others give
// up on their own with an error naming rank 2.
func TestRankFailsUnderSrun(t *testing.T) {
	prog := `if [ "$SLURM_PROCID" = 2 ]; then exit 3; fi; exec ` + cluster.bin + "/allreduce"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"kill-on-bad-exit", []string{"-K"}, `task 2: Exited with exit code 3`},
		{"survivors-report", nil, `ranks [2] did not join`},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			args := append([]string{"-N", "2", "-n", "4", "-O", "-l"}, c.args...)
			out, err := slurm(t, 2*time.Minute, "srun", append(args, "bash", "-c", prog)...)
			if err == nil {
				t.Fatalf("srun succeeded with a failing task:\n%s", out)
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("output does not name the failed task (%q):\n%s", c.want, out)
			}
			t.Logf("srun %v failed after %.1f s: %v", c.args, time.Since(start).Seconds(), err)
		})
	}
}

// TestBatchScripts submits each batch script of this folder with sbatch
// --wait on a few hundred images: each trains, evaluates and writes its
// checkpoint. ddp-2nodes.sh spans both nodes; ddp-1node.sh's 4 tasks
// overcommit a test node's CPUs (-O); resnet50-imagenet.sh trains
// ResNet-50 across both nodes on a small generated image folder (32×32
// crops, a few steps).
func TestBatchScripts(t *testing.T) {
	mnist := "--synthetic"
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); err == nil {
		mnist = "--data /usr/share/datasets/fashion-mnist"
	}
	photos := filepath.Join(t.TempDir(), "photos")
	tr, _ := data.Synthetic(data.FormatCIFAR10, 60, 1)
	te, _ := data.Synthetic(data.FormatCIFAR10, 40, 2)
	if err := data.WriteImageFolder(photos, tr, te, 48, 40, ".jpg"); err != nil {
		t.Fatal(err)
	}
	small := " --epochs 1 --train-samples 1024 --test-samples 256 --progress lines"
	for _, c := range []struct {
		script, args, checkpoint string
		want, sbatch             []string
	}{
		{"one-task.sh", mnist + small, "mnist.safetensors", nil, nil},
		{"ddp-1node.sh", mnist + small, "mnist.safetensors", []string{"4 ranks"}, []string{"--overcommit"}},
		{"ddp-2nodes.sh", mnist + small, "mnist.safetensors", []string{"4 ranks"}, nil},
		// One gorun per node, the two making one job of 4 ranks.
		{"gorun-per-node.sh", mnist + small, "mnist.safetensors", []string{"[0] Data parallel over 4 ranks"}, []string{"--overcommit"}},
		{"gpipe-3tasks.sh", "--synthetic --epochs 1 --train-samples 256 --test-samples 64 --batch-size 32 --progress lines", "cifar.stage2.safetensors", nil, nil},
		{"resnet50-imagenet.sh", "--image-size 32 --batch-size 4 --epochs 1 --train-samples 16 --test-samples 8 --threads 1 --progress lines", "resnet50.safetensors",
			[]string{"Model resnet50", "2 ranks", "decoded from their files by 2 workers"}, []string{"--export=ALL,DATA=" + photos}},
	} {
		t.Run(strings.TrimSuffix(c.script, ".sh"), func(t *testing.T) {
			script, err := filepath.Abs(c.script)
			if err != nil {
				t.Fatal(err)
			}
			work := t.TempDir()
			log := filepath.Join(work, "job.out")
			export := "--export=ALL,BIN=" + cluster.bin + ",TRAIN_ARGS=" + c.args
			var extra []string
			for _, a := range c.sbatch {
				if more, ok := strings.CutPrefix(a, "--export=ALL,"); ok {
					export += "," + more
				} else {
					extra = append(extra, a)
				}
			}
			args := append([]string{"--chdir", work, "--output", log, export}, extra...)
			out, err := sbatchWait(t, 3*time.Minute, append(args, script)...)
			jobOut, _ := os.ReadFile(log)
			if err != nil {
				t.Fatalf("sbatch: %v\n%s\njob output:\n%s", err, out, jobOut)
			}
			for _, want := range append(c.want, "Test set") {
				if !strings.Contains(string(jobOut), want) {
					t.Errorf("job output lacks %q:\n%s", want, jobOut)
				}
			}
			if _, err := os.Stat(filepath.Join(work, c.checkpoint)); err != nil {
				entries, _ := os.ReadDir(work)
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("no checkpoint %s (have %v): %v\njob output:\n%s", c.checkpoint, names, err, jobOut)
			}
		})
	}
}

// TestBatchScriptRestarts submits ddp-restarts.sh with a train that
// SIGKILLs itself on task 1, a second after the first checkpoint: the script
// starts a new step, which resumes from the last checkpoint and finishes.
func TestBatchScriptRestarts(t *testing.T) {
	if cluster.skip != "" {
		t.Skip(cluster.skip)
	}
	script, err := filepath.Abs("ddp-restarts.sh")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	os.Mkdir(bin, 0o755)
	wrapper := `#!/bin/bash
if [ "$GORUN_RESTART" = 0 ] && [ "$SLURM_PROCID" = 1 ]; then
	(for i in $(seq 1200); do [ -e mnist.safetensors.train ] && break; sleep 0.1; done; sleep 1; kill -9 $$) &
fi
exec ` + filepath.Join(cluster.bin, "train") + ` "$@"
`
	if err := os.WriteFile(filepath.Join(bin, "train"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(work, "job.out")
	args := "--synthetic --epochs 3 --train-samples 4096 --test-samples 256 --progress lines"
	out, err := sbatchWait(t, 4*time.Minute, "--chdir", work, "--output", log,
		"--export=ALL,BIN="+bin+",SAVE_EVERY=2,TRAIN_ARGS="+args, script)
	jobOut, _ := os.ReadFile(log)
	if err != nil {
		t.Fatalf("sbatch: %v\n%s\njob output:\n%s", err, out, jobOut)
	}
	for _, want := range []string{"restarting every task (restart 1 of 3)", "Resumed from mnist.safetensors", "Restart 1 (GORUN_RESTART)", "Test set"} {
		if !strings.Contains(string(jobOut), want) {
			t.Errorf("job output lacks %q:\n%s", want, jobOut)
		}
	}
	if strings.Contains(string(jobOut), "restart 2 of 3") {
		t.Errorf("restarted more than once:\n%s", jobOut)
	}
}

// TestBatchScriptShrinks submits ddp-shrink.sh with a train that SIGKILLs
// itself on task 1 a second after the first checkpoint: the other three
// go on without it and finish, and the script exits 0 naming the lost
// task. With a flag every task refuses, no task ends well and the job
// fails, saying so.
func TestBatchScriptShrinks(t *testing.T) {
	if cluster.skip != "" {
		t.Skip(cluster.skip)
	}
	script, err := filepath.Abs("ddp-shrink.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, args  string
		kill, fails bool
		want        []string
	}{
		{"one-task-killed", "--synthetic --epochs 2 --train-samples 2048 --test-samples 256 --progress lines", true, false,
			[]string{"train: lost rank 1 at epoch", "going on with 3 ranks", "ddp-shrink: the step finished without tasks 1 of 4", "Test set"}},
		{"every-task-fails", "--synthetic --epochs 0", false, true,
			[]string{"--epochs 0: want at least 1", "ddp-shrink: no task ended well (srun's status 1)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			work := t.TempDir()
			bin := cluster.bin
			if c.kill {
				bin = filepath.Join(work, "bin")
				os.Mkdir(bin, 0o755)
				wrapper := `#!/bin/bash
if [ "$SLURM_PROCID" = 1 ]; then
	(for i in $(seq 1200); do [ -e mnist.safetensors.train ] && break; sleep 0.1; done; sleep 1; kill -9 $$) &
fi
exec ` + filepath.Join(cluster.bin, "train") + ` "$@"
`
				if err := os.WriteFile(filepath.Join(bin, "train"), []byte(wrapper), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			log := filepath.Join(work, "job.out")
			out, err := sbatchWait(t, 4*time.Minute, "--chdir", work, "--output", log,
				"--export=ALL,BIN="+bin+",SAVE_EVERY=2,TRAIN_ARGS="+c.args, script)
			jobOut, _ := os.ReadFile(log)
			if (err != nil) != c.fails {
				t.Fatalf("sbatch: %v, want failure %v\n%s\njob output:\n%s", err, c.fails, out, jobOut)
			}
			for _, want := range c.want {
				if !strings.Contains(string(jobOut), want) {
					t.Errorf("job output lacks %q:\n%s", want, jobOut)
				}
			}
			if entries, _ := filepath.Glob(filepath.Join(work, ".gorun-shrink.*")); len(entries) > 0 {
				t.Errorf("the tasks' statuses were left behind: %v", entries)
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
