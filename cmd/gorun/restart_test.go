package main

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/model/safetensors"
)

// TestRestartsAreExact: a 2-rank DDP run under gorun -max-restarts 3,
// checkpointing every 5 steps with --resume auto, has a rank SIGKILLed at
// a random moment of its first run (after its first checkpoint) and of its
// second. gorun restarts every
// rank each time, the ranks continue from the last checkpoint, and the
// final weights equal an uninterrupted run's bit for bit.
func TestRestartsAreExact(t *testing.T) {
	if testing.Short() {
		t.Skip("trains three times; the full run covers it")
	}
	bin := buildTools(t, "../train")
	trainBin := filepath.Join(bin, "train")
	args := func(save string) []string {
		return []string{"-np", "2", "-grace", "500ms", trainBin, "--synthetic", "--train-samples", "2560", "--test-samples", "256",
			"--epochs", "2", "--threads", "1", "--save", save}
	}
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref.safetensors")
	if out, err := exec.Command(filepath.Join(bin, "gorun"), args(ref)...).CombinedOutput(); err != nil {
		t.Fatalf("the uninterrupted run: %v\n%s", err, out)
	}

	got := filepath.Join(dir, "restarted.safetensors")
	cmd := exec.Command(filepath.Join(bin, "gorun"), append(append([]string{"-max-restarts", "3"}, args(got)...), "--save-every", "5", "--resume", "auto")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	var kills []string
	for run := range 2 {
		pids := ranksOf(trainBin, run, 20*time.Second)
		if len(pids) == 0 {
			break
		}
		if run == 0 {
			// After the first checkpoint, so that the restart has one
			// to resume from (a kill before it restarts from scratch).
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(got); err == nil {
					break
				}
			}
		}
		// Within the run: the first run has 35 of its 40 steps left after
		// its first checkpoint; the second, resumed from the checkpoint
		// before the first kill, has its start and 15 steps or more left
		// (at 25 ms a step or slower) — while a rank killed after the run
		// ended would restart nothing.
		time.Sleep(time.Duration(rng.IntN([]int{500, 300}[run])) * time.Millisecond)
		victim := pids[rng.IntN(len(pids))]
		if !alive(victim) {
			t.Logf("run %d ended before its kill", run)
			break
		}
		if syscall.Kill(victim, syscall.SIGKILL) == nil {
			kills = append(kills, fmt.Sprintf("run %d: pid %d", run, victim))
		}
	}
	err := cmd.Wait()
	t.Logf("seed %d; killed %v", seed, kills)
	if err != nil {
		t.Fatalf("the restarted run failed: %v\n%s", err, out.String())
	}
	if len(kills) == 0 {
		t.Fatalf("the run ended before any rank was killed:\n%s", out.String())
	}
	wants := []string{"killed by signal 9 (killed); restarting every rank (restart 1 of 3)", "Resumed from " + got}
	if len(kills) == 2 {
		wants = append(wants, "(restart 2 of 3)", "Restart 2 (GORUN_RESTART)")
	}
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	a, err := safetensors.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	b, err := safetensors.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Tensors) == 0 || len(a.Tensors) != len(b.Tensors) {
		t.Fatalf("%d tensors uninterrupted, %d restarted", len(a.Tensors), len(b.Tensors))
	}
	for _, ta := range a.Tensors {
		tb, ok := b.Get(ta.Name)
		if !ok || !slices.Equal(ta.F32, tb.F32) || !slices.Equal(ta.I64, tb.I64) {
			t.Fatalf("%s differs between the uninterrupted and the restarted run (seed %d, kills %v)", ta.Name, seed, kills)
		}
	}
}

// ranksOf waits up to within for the 2 ranks of program started with
// GORUN_RESTART=run and returns their pids.
func ranksOf(program string, run int, within time.Duration) []int {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ranks := liveRanks(program, "GORUN_RESTART="+strconv.Itoa(run)); len(ranks) == 2 {
			return slices.Collect(maps.Values(ranks))
		}
	}
	return nil
}
