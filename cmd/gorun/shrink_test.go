package main

import (
	"bytes"
	"fmt"
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

	"github.com/gorun/gorun/train/checkpoint"
)

// TestShrinkKeepsTraining: gorun -on-failure shrink runs train on 4
// ranks; one rank is SIGKILLed at a random moment after the first
// checkpoint, and another at a random moment after the job shrank. The
// two left finish the run: gorun exits 0 naming both lost ranks, each
// survivor says what it lost, and the checkpoint records both shrinks.
func TestShrinkKeepsTraining(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on 4 ranks; the full run covers it")
	}
	bin := buildTools(t, "../train")
	trainBin := filepath.Join(bin, "train")
	save := filepath.Join(t.TempDir(), "run.safetensors")
	cmd := exec.Command(filepath.Join(bin, "gorun"), "-np", "4", "-grace", "500ms", "-on-failure", "shrink", trainBin, "--synthetic",
		"--train-samples", "6144", "--test-samples", "256", "--epochs", "3", "--threads", "1", "--save", save, "--save-every", "2")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	var killed []int
	for shrinks := range 2 {
		// After the first checkpoint, then after the first shrink (the
		// survivors save at once).
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if m, err := checkpoint.ReadTrainMeta(save); err == nil && len(m.Shrinks) >= shrinks {
				break
			}
		}
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		ranks := liveRanks(trainBin, "")
		if len(ranks) != 4-shrinks {
			t.Fatalf("%d ranks alive before kill %d, want %d (killed %v)\n%s", len(ranks), shrinks+1, 4-shrinks, killed, out.String())
		}
		victim := rng.IntN(4)
		for ranks[victim] == 0 {
			victim = rng.IntN(4)
		}
		syscall.Kill(ranks[victim], syscall.SIGKILL)
		killed = append(killed, victim)
	}
	err := cmd.Wait()
	t.Logf("seed %d; killed ranks %v", seed, killed)
	if err != nil {
		t.Fatalf("gorun: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"the job finished without 2 of its 4 ranks (-on-failure shrink)", "going on with 3 ranks", "going on with 2 ranks", "Test set"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, r := range killed {
		if !strings.Contains(text, fmt.Sprintf("train: lost rank %d at epoch", r)) {
			t.Errorf("no survivor reported losing rank %d:\n%s", r, text)
		}
	}
	m, err := checkpoint.ReadTrainMeta(save)
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch != 3 || len(m.Shrinks) != 2 || m.Shrinks[0].World != 3 || m.Shrinks[1].World != 2 ||
		fmt.Sprint(m.Shrinks[0].Lost, m.Shrinks[1].Lost) != fmt.Sprint([]int{killed[0]}, []int{killed[1]}) {
		t.Errorf("checkpoint: epoch %d, shrinks %+v; want epoch 3 and ranks %v lost in turn", m.Epoch, m.Shrinks, killed)
	}
}

// liveRanks returns the pids of the live processes of program whose
// environment holds env (any, when empty), by their RANK.
func liveRanks(program, env string) map[int]int {
	ranks := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != program || !alive(pid) {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		vars := bytes.Split(environ, []byte{0})
		if env != "" && !slices.ContainsFunc(vars, func(kv []byte) bool { return string(kv) == env }) {
			continue
		}
		for _, kv := range vars {
			if v, ok := bytes.CutPrefix(kv, []byte("RANK=")); ok {
				if r, err := strconv.Atoi(string(v)); err == nil {
					ranks[r] = pid
				}
			}
		}
	}
	return ranks
}
