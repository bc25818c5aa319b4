package train

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

// meta describes the trainer's state for a checkpoint.
func (t *Trainer) meta() (checkpoint.Meta, error) {
	cfg, err := json.Marshal(t.cfg)
	if err != nil {
		return checkpoint.Meta{}, err
	}
	m := checkpoint.Meta{Model: t.cfg.Model, Input: t.model.Input, Dataset: t.train.Name, Classes: t.train.Classes,
		Mean: t.train.Mean, Std: t.train.Std, Epoch: t.epoch, Step: t.step, LR: t.opt.LR(), Config: cfg,
		Batch: t.inEpoch.batch, EpochLoss: t.inEpoch.loss, EpochSeen: t.inEpoch.seen, EpochBatches: t.inEpoch.lossN,
		Skip: t.inEpoch.skip, Shrinks: t.shrinks}
	if t.inEpoch.batch > 0 || t.inEpoch.skip > 0 {
		m.World = t.inEpoch.world
	}
	if t.sched != nil {
		m.ScheduleEpoch = t.sched.Epoch()
	}
	if t.scaler != nil {
		m.LossScale, m.LossScaleGoodSteps = t.scaler.Scale, t.scaler.GoodSteps
	}
	for _, d := range t.dropouts {
		m.DropoutCalls = append(m.DropoutCalls, d.Calls)
	}
	if t.last.TestTotal > 0 {
		m.TestAccuracy = t.last.TestAccuracy()
	}
	return m, nil
}

// saveInEpoch writes the checkpoint at SavePath mid-epoch, at p (rank 0
// only, as at an epoch's end). Every rank calls it: the epoch's loss and
// samples so far are the replicas' mean, so that every rank resumes with
// its share and the epoch's report comes out as an uninterrupted run's.
func (t *Trainer) saveInEpoch(ctx context.Context, p epochProgress) error {
	if err := t.checkReplicas(ctx, fmt.Sprintf("at step %d", t.step)); err != nil {
		return err
	}
	sums := []float64{p.loss, float64(p.seen)}
	if err := t.sync.sum(ctx, sums); err != nil {
		return fmt.Errorf("combining the epoch's loss for the checkpoint: %w", err)
	}
	w := float64(t.sync.world())
	p.loss, p.seen = sums[0]/w, int(sums[1]/w)
	t0 := time.Now()
	sync, err := t.sync.state(ctx)
	if err != nil || t.sync.rank() != 0 {
		t.times.Checkpoint += time.Since(t0)
		return err
	}
	t.inEpoch = p
	err = t.save(t.SavePath, sync)
	t.inEpoch = epochProgress{}
	t.times.Checkpoint += time.Since(t0)
	return err
}

// Save writes a checkpoint (weights at path, training state beside it);
// a pipeline stage writes its own stage's, at StagePath(path, stage).
// What the gradient sync keeps from step to step (PowerSGD's state) is
// gathered from every replica, so only the checkpoints the trainer
// writes itself (SavePath) hold it; a run resumed from one saved here
// starts PowerSGD afresh.
func (t *Trainer) Save(path string) error { return t.save(path, nil) }

func (t *Trainer) save(path string, sync []nn.Var) error {
	m, err := t.meta()
	if err != nil {
		return err
	}
	t.compute.stamp(&m)
	path = t.compute.checkpointPath(path)
	if t.stage() != nil {
		if err := checkpoint.KeepPrevious(path); err != nil {
			return err
		}
	}
	return checkpoint.Save(path, t.compute.layer(), t.opt, m, sync...)
}

// sameClasses refuses to resume the checkpoint at path, trained on
// classes, on data of other classes (classesDiffer), whose labels would
// train the model's outputs as other classes.
func sameClasses(path string, classes []string, d *data.Dataset) error {
	if len(classes) == 0 || d == nil {
		return nil
	}
	if differ := classesDiffer(classes, len(classes), d, true, "the checkpoint's"); differ != "" {
		return fmt.Errorf("checkpoint %s was trained on %d classes (%s); %s: resume it on the data it was trained on, or start a new run from its weights with --init %s",
			path, len(classes), someNames(classes), differ, path)
	}
	return nil
}

// classesDiffer says how the classes of d differ from a model's n classes
// named names (nil: unnamed): more of them, or with all another number;
// or, where both name them and d by its folders (an image folder,
// shards), another name at some index (whose: "the model's"). Built-in
// data sets' names (MNIST's digits, Fashion-MNIST's) are not compared. It
// returns "" when they agree.
func classesDiffer(names []string, n int, d *data.Dataset, all bool, whose string) string {
	if len(d.Classes) > n || all && len(d.Classes) != n {
		return fmt.Sprintf("%s has %d (%s)", d.Name, len(d.Classes), someNames(d.Classes))
	}
	for i := 0; d.Streamed() && i < len(names) && i < len(d.Classes); i++ {
		if d.Classes[i] != names[i] {
			return fmt.Sprintf("%s's class %d is %q, %s %q", d.Name, i, d.Classes[i], whose, names[i])
		}
	}
	return ""
}

// checkSaved refuses to resume this rank's part of a checkpoint, saved at
// path with metadata m, when the run cuts the model otherwise (stages,
// chunks) or this rank's part differs.
func (t *Trainer) checkSaved(path string, m *checkpoint.Meta) error {
	if err := t.cfg.CutAsSaved(path, m); err != nil {
		return err
	}
	return t.compute.check(path, m)
}

// resume restores the run saved at path (see ResumeFrom).
func (t *Trainer) resume(ctx context.Context, g *comm.Group, path string) error {
	path = t.compute.checkpointPath(path)
	file := checkpoint.TrainPath(path)
	if t.stage() != nil {
		var err error
		if file, err = t.agreedStageState(ctx, g, path); err != nil {
			return err
		}
	}
	f, pre, err := checkpoint.ReadStateFile(path, file)
	if err != nil {
		return err
	}
	if err := t.checkSaved(path, pre); err != nil {
		return err
	}
	if pre.Model != t.cfg.Model {
		return fmt.Errorf("checkpoint %s holds model %s, not %s", path, pre.Model, t.cfg.Model)
	}
	if err := sameClasses(path, pre.Classes, t.train); err != nil {
		return err
	}
	if len(pre.DropoutCalls) != len(t.dropouts) {
		return fmt.Errorf("checkpoint %s has %d dropout counters; model %s has %d dropout layers", path, len(pre.DropoutCalls), t.cfg.Model, len(t.dropouts))
	}
	if err := checkpoint.Restore(f, t.compute.layer(), t.opt); err != nil {
		return err
	}
	m := pre
	t.resumedSync = syncStateOf(f) // for the gradient sync, which does not exist yet
	t.epoch, t.step = m.Epoch, m.Step
	if t.scaler != nil && m.LossScale > 0 {
		t.scaler.Scale, t.scaler.GoodSteps = m.LossScale, m.LossScaleGoodSteps
	}
	t.inEpoch = epochProgress{batch: m.Batch, loss: m.EpochLoss, lossN: m.EpochBatches, seen: m.EpochSeen, skip: m.Skip, world: m.World}
	if m.EpochBatches == 0 {
		t.inEpoch.lossN = m.Batch
	}
	t.shrinks = m.Shrinks
	for i, d := range t.dropouts {
		d.Calls = m.DropoutCalls[i]
	}
	if t.sched != nil {
		t.sched.SetEpoch(m.ScheduleEpoch)
	} else {
		t.opt.SetLR(m.LR)
	}
	return nil
}
