package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/train/checkpoint"
)

// TestPowerSGDResumeIsBitIdentical: two ranks training with PowerSGD
// (rank 1, from step 1) stopped at step 4 of 12 — the checkpoint saved
// there holds PowerSGD's step count, each bucket's Q and both ranks'
// error feedback — and resumed on two ranks end with the same weights
// and training state, bit for bit, as a run straight through. Resumed from
// the same checkpoint with PowerSGD's state taken out, the run ends
// elsewhere: the state is what makes the resume exact.
func TestPowerSGDResumeIsBitIdentical(t *testing.T) {
	dir := t.TempDir()
	straight, stopped, stripped := filepath.Join(dir, "straight.safetensors"), filepath.Join(dir, "stopped.safetensors"), filepath.Join(dir, "stripped.safetensors")
	env := []string{"DDP_PER_RANK=8", "DDP_STEPS=6", "DDP_EPOCHS=2", "DDP_DATA_WORLD=2", "DDP_COMPRESS=powersgd:1:1"}
	if res, log := runJob(t, 2, "run", append(env, "DDP_OUT="+straight)...); res.Error() != nil {
		t.Fatalf("the straight run: %v\n%s", res.Error(), log)
	}
	if res, log := runJob(t, 2, "stopat", append(env, "DDP_OUT="+stopped, "SHRINK_AT=4")...); res.Error() != nil || !strings.Contains(log, "STOPPED at step 4") {
		t.Fatalf("the run stopped at step 4: %v\n%s", res.Error(), log)
	}
	f, _, err := checkpoint.ReadTrainState(stopped)
	if err != nil {
		t.Fatal(err)
	}
	var names, kept []string
	var rest []safetensors.Tensor
	for _, tn := range f.Tensors {
		if strings.HasPrefix(tn.Name, checkpoint.SyncPrefix) {
			names = append(names, tn.Name)
			continue
		}
		kept = append(kept, tn.Name)
		rest = append(rest, tn)
	}
	wantNames := []string{"sync.powersgd.steps", "sync.powersgd.q.0", "sync.powersgd.error.0", "sync.powersgd.error.1"}
	for _, n := range wantNames {
		if !slices.Contains(names, n) {
			t.Fatalf("the checkpoint's training state lacks %s; it holds %v", n, names)
		}
	}
	// A copy without PowerSGD's state, for the control.
	if err := safetensors.WriteFile(checkpoint.TrainPath(stripped), rest, f.Metadata); err != nil {
		t.Fatal(err)
	}
	w, err := safetensors.ReadFile(stopped)
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(stripped, w.Tensors, w.Metadata); err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{stopped, stripped} {
		if res, log := runJob(t, 2, "resume", append(env, "DDP_OUT="+path)...); res.Error() != nil || !strings.Contains(log, "DONE epoch 2 step 12") {
			t.Fatalf("resuming from %s: %v\n%s", filepath.Base(path), res.Error(), log)
		}
	}
	want := savedTensors(t, straight, checkpoint.TrainPath(straight))
	got := savedTensors(t, stopped, checkpoint.TrainPath(stopped))
	for _, name := range kept {
		if !strings.HasPrefix(name, "model.") && !strings.HasPrefix(name, "optimizer.") {
			continue
		}
		if !slices.Equal(got[name], want[name]) {
			t.Errorf("%s differs between the straight run and the resumed one", name)
		}
	}
	for _, name := range wantNames[1:] {
		if !slices.Equal(got[name], want[name]) {
			t.Errorf("%s differs between the straight run and the resumed one", name)
		}
	}
	control := savedTensors(t, stripped)
	differ := 0
	for name, v := range control {
		if !slices.Equal(v, want[name]) {
			differ++
		}
	}
	if differ == 0 {
		t.Errorf("resumed without PowerSGD's state, the run still ended with the straight run's weights: the test cannot tell the state's effect")
	}
}

// TestPowerSGDRestore: the state gathered on rank 0 restores each rank's
// own error feedback, the step count and Q; saved by another number of
// replicas it keeps the step count and Q and zeroes the error feedback,
// saying so; without PowerSGD's state, or with Q of another size, it
// starts afresh and says why; a malformed step count is an error naming
// the file.
func TestPowerSGDRestore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.safetensors")
	gs := commtest.Groups(t, 2)
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		ctx := context.Background()
		be := cpu.New(1)
		defer be.Close()
		newPS := func(rank int) (*DDP, error) {
			net := nn.NewSequential(nn.NewLinear(be, 24, 16, rand.New(rand.NewPCG(1, 1))))
			d, err := NewDDP(ctx, g, net, be)
			if err != nil {
				return nil, err
			}
			return d, d.SetCompression(fmt.Sprintf("powersgd:%d", rank))
		}
		d, err := newPS(2)
		if err != nil {
			return err
		}
		defer d.Close()
		ps := d.psgd
		for i := range ps.buckets[0].mats[0].err {
			ps.buckets[0].mats[0].err[i] = float32(1000*g.Rank() + i)
		}
		for i := range ps.buckets[0].second {
			ps.buckets[0].second[i] = float32(i) / 7
		}
		ps.steps = 7
		vars, err := ps.state(ctx, g)
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			if err := safetensors.WriteFile(path, nn.VarTensors(checkpoint.SyncPrefix, vars), nil); err != nil {
				return err
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		f, err := safetensors.ReadFile(path)
		if err != nil {
			return err
		}
		check := func(world int, wantNote string, wantErr func(i int) float32) error {
			fresh, err := newPS(2)
			if err != nil {
				return err
			}
			defer fresh.Close()
			note, err := fresh.psgd.restore(syncStateOf(f), g.Rank(), world)
			if err != nil || !strings.Contains(note, wantNote) || (wantNote == "" && note != "") {
				return fmt.Errorf("world %d: note %q, error %v; want a note with %q", world, note, err, wantNote)
			}
			if fresh.psgd.steps != 7 || !slices.Equal(fresh.psgd.buckets[0].second, ps.buckets[0].second) {
				return fmt.Errorf("world %d: restored step %d and Q %v, want 7 and %v", world, fresh.psgd.steps, fresh.psgd.buckets[0].second[:3], ps.buckets[0].second[:3])
			}
			for i, v := range fresh.psgd.buckets[0].mats[0].err {
				if v != wantErr(i) {
					return fmt.Errorf("world %d: rank %d's error feedback [%d] = %v, want %v", world, g.Rank(), i, v, wantErr(i))
				}
			}
			return nil
		}
		if err := check(2, "", func(i int) float32 { return float32(1000*g.Rank() + i) }); err != nil {
			return err
		}
		if err := check(3, "error feedback of 2 replicas, this run has 3", func(int) float32 { return 0 }); err != nil {
			return err
		}
		other, err := newPS(3) // Q of another size
		if err != nil {
			return err
		}
		defer other.Close()
		if note, err := other.psgd.restore(syncStateOf(f), g.Rank(), 2); err != nil || !strings.Contains(note, "another layout") || other.psgd.steps != 0 {
			return fmt.Errorf("rank 3 from a rank-2 state: note %q, error %v, step %d", note, err, other.psgd.steps)
		}
		if note, err := other.psgd.restore(syncState{path: "empty"}, g.Rank(), 2); err != nil || !strings.Contains(note, "no PowerSGD state") {
			return fmt.Errorf("from no state: note %q, error %v", note, err)
		}
		bad := filepath.Join(filepath.Dir(path), fmt.Sprintf("bad%d.safetensors", g.Rank()))
		tensors := []safetensors.Tensor{{Name: checkpoint.SyncPrefix + psgdStepsName, DType: safetensors.I64, Shape: []int{2}, I64: []int64{1, 2}}}
		if err := safetensors.WriteFile(bad, tensors, nil); err != nil {
			return err
		}
		fb, err := safetensors.ReadFile(bad)
		if err != nil {
			return err
		}
		if _, err := other.psgd.restore(syncStateOf(fb), g.Rank(), 2); err == nil || !strings.Contains(err.Error(), bad) {
			return fmt.Errorf("a malformed step count: %v, want an error naming %s", err, bad)
		}
		return nil
	})
}
