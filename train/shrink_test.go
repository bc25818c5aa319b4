package train

import (
	"context"
	"errors"
	"fmt"
	"github.com/gorun/gorun/comm/commtest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm/launch"
	"github.com/gorun/gorun/train/checkpoint"
)

// TestDDPShrinks: 4 ranks train with --on-failure shrink; rank 2 is
// SIGKILLed after step 3 of 6 in the first epoch. The other three finish
// both epochs without it (the launcher exits well, naming the lost rank),
// record the shrink in the checkpoint, and end with the weights, bit for
// bit, of a 3-rank job resumed from the 4-rank job's checkpoint at step 3.
// The samples are those of one process that trains on the first 3 batches
// of 32 of the epoch's order, then on the rest in batches of 24: no sample
// of the epoch is lost or repeated.
func TestDDPShrinks(t *testing.T) {
	if testing.Short() {
		t.Skip("trains four jobs; the full run covers it")
	}
	const perRank, steps, at = 8, 6, 3
	dir := t.TempDir()
	shrunk, ref := filepath.Join(dir, "shrunk.safetensors"), filepath.Join(dir, "ref.safetensors")
	env := []string{"DDP_PER_RANK=" + strconv.Itoa(perRank), "DDP_STEPS=" + strconv.Itoa(steps), "DDP_EPOCHS=2", "DDP_DATA_WORLD=4", "SHRINK_AT=" + strconv.Itoa(at)}
	res, log := runJobWith(t, launch.Config{KeepGoing: true}, 4, "shrink", append(env, "DDP_OUT="+shrunk)...)
	if err := res.Error(); err != nil {
		t.Fatalf("job failed: %v\n%s", err, log)
	}
	if len(res.Lost) != 1 || res.Lost[0].Rank != 2 {
		t.Fatalf("lost %v, want rank 2\n%s", res.Lost, log)
	}
	// Epoch 1: 3 steps of 4×8, then the 96 samples left in 4 steps of 3×8;
	// epoch 2: 192 samples in 8 steps of 3×8.
	lost := regexp.MustCompile(`^train: lost rank 2 at epoch 1, step 3 \(.*\); going on with 3 ranks \(this one is rank (\d) of 3, was (\d)\) after .*: the failed step is redone, and the 96 samples of the epoch left are dealt out again$`)
	lines := commtest.RankLines(log)
	for i, r := range []int{0, 1, 3} {
		if !slices.ContainsFunc(lines[r], func(l string) bool {
			m := lost.FindStringSubmatch(l)
			return m != nil && m[1] == strconv.Itoa(i) && m[2] == strconv.Itoa(r)
		}) {
			t.Errorf("rank %d did not report the shrink:\n%s", r, log)
		}
		if want := fmt.Sprintf("DONE rank %d of 3, step 15", i); !slices.Contains(lines[r], want) {
			t.Errorf("rank %d did not finish with %q:\n%s", r, want, log)
		}
	}
	meta, err := checkpoint.ReadTrainMeta(shrunk)
	if err != nil {
		t.Fatal(err)
	}
	if want := []checkpoint.Shrink{{Epoch: 1, Step: 3, Lost: []int{2}, World: 3}}; meta.Epoch != 2 || fmt.Sprint(meta.Shrinks) != fmt.Sprint(want) {
		t.Errorf("checkpoint: epoch %d, shrinks %+v; want 2, %+v", meta.Epoch, meta.Shrinks, want)
	}

	// The 3-rank job resumed from the 4-rank job's step 3.
	if res, log := runJob(t, 4, "stopat", append(env, "DDP_OUT="+ref)...); res.Error() != nil {
		t.Fatalf("stopping at step %d: %v\n%s", at, res.Error(), log)
	}
	if res, log := runJob(t, 3, "resume", append(env, "DDP_OUT="+ref)...); res.Error() != nil {
		t.Fatalf("resuming on 3 ranks: %v\n%s", res.Error(), log)
	}
	got, want := savedTensors(t, shrunk), savedTensors(t, ref)
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s differs from the resumed 3-rank job's", name)
		}
	}

	// One process: 3 batches of 32, then batches of 24 from position 96.
	cfg, trainSet, testSet := ddpSetup(4, perRank, steps, 2)
	first := newTrainer(t, cfg, trainSet, testSet)
	noDropout(first)
	errStop := errors.New("stop")
	first.AfterStep = func(step int64) error {
		if step == at {
			return errStop
		}
		return nil
	}
	first.SavePath, first.SaveEvery = filepath.Join(dir, "one.safetensors"), at
	if err := first.Run(context.Background()); !errors.Is(err, errStop) {
		t.Fatalf("one process, first steps: %v", err)
	}
	cfg.BatchSize = 3 * perRank
	rest, err := New(context.Background(), cfg, first.be, trainSet, testSet, ResumeFrom(first.SavePath))
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	noDropout(rest)
	rest.inEpoch = epochProgress{skip: at * 4 * perRank, world: 1, loss: rest.inEpoch.loss, lossN: rest.inEpoch.lossN, seen: rest.inEpoch.seen}
	if err := rest.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rest.step != 15 {
		t.Errorf("one process took %d steps, want 15", rest.step)
	}
	worst := sameParams(t, rest, got, "shrunk job vs one process")
	t.Logf("weights within %.2g of one process's", worst)
}

// TestUnsaveableStopsEveryRank: with --on-failure shrink, a checkpoint
// path rank 0 cannot save to (its directory missing) stops every rank
// before training, each naming rank 0's error — not rank 0 alone, the
// others shrinking past it into the same failure one by one.
func TestUnsaveableStopsEveryRank(t *testing.T) {
	out := filepath.Join(t.TempDir(), "missing", "w.safetensors")
	env := []string{"DDP_PER_RANK=8", "DDP_STEPS=4", "DDP_EPOCHS=1", "DDP_DATA_WORLD=3", "SHRINK_AT=100", "DDP_OUT=" + out}
	res, log := runJobWith(t, launch.Config{KeepGoing: true}, 3, "shrink", env...)
	if len(res.Failures) != 3 {
		t.Fatalf("%d ranks failed, want all 3:\n%s", len(res.Failures), log)
	}
	lines := commtest.RankLines(log)
	cause := "checkpoint: cannot save to " + out + ": directory " + filepath.Dir(out) + " does not exist"
	for r := range 3 {
		want := "WORKER-ERROR " + cause
		if r > 0 {
			want = "WORKER-ERROR rank 0: " + cause
		}
		if !slices.Contains(lines[r], want) {
			t.Errorf("rank %d did not end with %q:\n%s", r, want, log)
		}
	}
	if strings.Contains(log, "lost rank") {
		t.Errorf("a rank shrank past another:\n%s", log)
	}
}

// TestDDPShrinksAtEpochState: 3 ranks train with PowerSGD and --on-failure
// shrink, saving a checkpoint every epoch; rank 2 is SIGKILLed as the
// replicas gather PowerSGD's error feedback for the first epoch's
// checkpoint (a collective outside any step). The other two shrink past
// it — the epoch's training is not redone — finish the second epoch, and
// their checkpoint holds the error feedback of the two replicas left.
func TestDDPShrinksAtEpochState(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a job of three ranks; the full run covers it")
	}
	out := filepath.Join(t.TempDir(), "run.safetensors")
	res, log := runJobWith(t, launch.Config{KeepGoing: true}, 3, "shrink", "DDP_PER_RANK=8", "DDP_STEPS=4", "DDP_EPOCHS=2",
		"DDP_DATA_WORLD=3", "DDP_COMPRESS=powersgd:1", "SHRINK_POINT=epoch-state", "DDP_OUT="+out)
	if err := res.Error(); err != nil {
		t.Fatalf("job failed: %v\n%s", err, log)
	}
	if len(res.Lost) != 1 || res.Lost[0].Rank != 2 {
		t.Fatalf("lost %v, want rank 2\n%s", res.Lost, log)
	}
	// Epoch 2: 96 samples in 6 steps of 2×8 after the first epoch's 4.
	lost := regexp.MustCompile(`^train: lost rank 2 at epoch 1, step 4 \(.*rank 2.*\); going on with 2 ranks \(this one is rank (\d) of 2, was (\d)\) after .*: the epoch's training had ended; its loss, evaluation and checkpoint are redone$`)
	lines := commtest.RankLines(log)
	for i, r := range []int{0, 1} {
		if !slices.ContainsFunc(lines[r], func(l string) bool {
			m := lost.FindStringSubmatch(l)
			return m != nil && m[1] == strconv.Itoa(i) && m[2] == strconv.Itoa(r)
		}) {
			t.Errorf("rank %d did not report the shrink:\n%s", r, log)
		}
		if want := fmt.Sprintf("DONE rank %d of 2, step 10", i); !slices.Contains(lines[r], want) {
			t.Errorf("rank %d did not finish with %q:\n%s", r, want, log)
		}
	}
	f, meta, err := checkpoint.ReadTrainState(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []checkpoint.Shrink{{Epoch: 1, Step: 4, Lost: []int{2}, World: 2}}; meta.Epoch != 2 || meta.Step != 10 || fmt.Sprint(meta.Shrinks) != fmt.Sprint(want) {
		t.Errorf("checkpoint: epoch %d, step %d, shrinks %+v; want 2, 10, %+v", meta.Epoch, meta.Step, meta.Shrinks, want)
	}
	var replicas []string
	for _, tn := range f.Tensors {
		if strings.HasPrefix(tn.Name, checkpoint.SyncPrefix+"powersgd.error.") {
			replicas = append(replicas, tn.Name)
		}
	}
	if want := []string{"sync.powersgd.error.0", "sync.powersgd.error.1"}; !slices.Equal(replicas, want) {
		t.Errorf("the checkpoint holds error feedback %v, want %v", replicas, want)
	}
}
