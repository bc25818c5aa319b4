package train

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/train/checkpoint"
)

// What a run does when a rank of the job fails (Trainer.OnFailure).
const (
	// OnFailureAbort returns the error: the job ends (the default).
	OnFailureAbort = "abort"
	// OnFailureRestart returns the error too: the launcher starts the job
	// again (gorun -max-restarts), which resumes from the last checkpoint.
	OnFailureRestart = "restart"
	// OnFailureShrink goes on without the lost ranks (shrinkPast).
	OnFailureShrink = "shrink"
)

// OnFailureModes lists the values of Trainer.OnFailure.
var OnFailureModes = []string{OnFailureAbort, OnFailureRestart, OnFailureShrink}

// shrinkPast handles cause, a failure while training epoch at at: unless
// the run shrinks past lost ranks (OnFailureShrink, data parallelism over
// the whole job, whose group broke), it returns cause. Otherwise the ranks
// left make a smaller job (comm.Group.Shrink), and go on from the
// furthest point any of them reached: a rank that finished the failed
// step holds its update, so its weights, optimizer state, position in the
// epoch and dropout counters are everyone's; a rank that did not finish
// it drops its partial gradients. The rest of the epoch is dealt out
// anew over the ranks left. The run records the shrink (in the
// checkpoint, which rank 0 then saves if it saves at all).
func (t *Trainer) shrinkPast(ctx context.Context, cause error, epoch int, at *epochProgress) error {
	if t.OnFailure != OnFailureShrink || t.job == nil || t.job.Err() == nil {
		return cause
	}
	if dp, ok := t.sync.(*dataParallel); !ok || t.cfg.Pipeline > 1 || dp.g != t.job {
		return fmt.Errorf("%w; a pipeline cannot shrink past a lost rank (its stage is gone): run it with --on-failure restart", cause)
	}
	for {
		again, err := t.shrinkOnce(ctx, cause, epoch, at)
		if err == nil || !again {
			return err
		}
		cause = err // another rank was lost while the others recovered
	}
}

// shrinkOnce shrinks the job once and sets the ranks left up to go on;
// again says that the smaller job broke too, on the way.
func (t *Trainer) shrinkOnce(ctx context.Context, cause error, epoch int, at *epochProgress) (again bool, err error) {
	start := time.Now()
	old := t.job
	g, err := old.Shrink(ctx)
	if err != nil {
		return false, fmt.Errorf("%w; shrinking past it: %w", cause, err)
	}
	t.sync.close()
	t.sync = alone{}
	if t.ownsJob {
		old.Close()
	}
	t.job, t.ownsJob = g, true
	defer func() {
		again = err != nil && g.Err() != nil
	}()
	// The ranks by the job's first numbering.
	if t.origin == nil {
		t.origin = make([]int, old.Size())
		for r := range t.origin {
			t.origin[r] = r
		}
	}
	from := g.ShrunkFrom()
	origin := make([]int, len(from))
	for i, r := range from {
		origin[i] = t.origin[r]
	}
	var lost []int
	for _, r := range t.origin {
		if !slices.Contains(origin, r) {
			lost = append(lost, r)
		}
	}
	t.origin = origin
	// Who went furthest: the lowest rank among those with the most steps.
	furthest := []int64{t.step}
	if err := comm.AllReduce(ctx, g, furthest, comm.Max); err != nil {
		return false, fmt.Errorf("%w; after shrinking: %w", cause, err)
	}
	leader := []int64{int64(g.Size())}
	if t.step == furthest[0] {
		leader[0] = int64(g.Rank())
	}
	if err := comm.AllReduce(ctx, g, leader, comm.Min); err != nil {
		return false, fmt.Errorf("%w; after shrinking: %w", cause, err)
	}
	root := int(leader[0])
	behind := t.step < furthest[0]
	if err := broadcastVars(ctx, g, t.opt.State(), root); err != nil {
		return false, fmt.Errorf("%w; after shrinking: optimizer: %w", cause, err)
	}
	const nc = 7
	counters := append([]int64{t.step, int64(at.batch), int64(at.lossN), int64(at.seen), int64(at.skip), int64(at.world), int64(at.offset)}, make([]int64, len(t.stepCalls))...)
	for i, c := range t.stepCalls {
		counters[nc+i] = int64(c)
	}
	loss := []float64{at.loss}
	if err := comm.Broadcast(ctx, g, counters, root); err != nil {
		return false, fmt.Errorf("%w; after shrinking: position: %w", cause, err)
	}
	if err := comm.Broadcast(ctx, g, loss, root); err != nil {
		return false, fmt.Errorf("%w; after shrinking: position: %w", cause, err)
	}
	t.step = counters[0]
	*at = epochProgress{batch: int(counters[1]), lossN: int(counters[2]), seen: int(counters[3]), skip: int(counters[4]), world: int(counters[5]), offset: int(counters[6]), loss: loss[0]}
	for i, d := range t.dropouts {
		t.stepCalls[i] = uint64(counters[nc+i])
		d.Calls = t.stepCalls[i]
	}
	// Root's parameters and buffers, and a DDP over the ranks left.
	if g.Size() > 1 {
		if err := t.replicateFrom(ctx, g, root); err != nil {
			return false, fmt.Errorf("%w; after shrinking: %w", cause, err)
		}
	} else {
		if err := broadcastVars(ctx, g, t.compute.layer().State(), root); err != nil {
			return false, fmt.Errorf("%w; after shrinking: %w", cause, err)
		}
		for i, d := range t.dropouts {
			d.Seed = t.dropoutSeeds[i]
		}
	}
	t.opt.ZeroGrad()
	t.shrinks = append(t.shrinks, checkpoint.Shrink{Epoch: epoch, Step: t.step, Lost: lost, World: g.Size()})
	done := min(at.skip+at.batch*t.cfg.BatchSize*at.world, t.train.Len())
	if t.Log != nil {
		redo := "the failed step is redone"
		if behind {
			redo = fmt.Sprintf("step %d, which rank %d finished, is taken from it", t.step, root)
		}
		rest := fmt.Sprintf("%s, and the %d samples of the epoch left are dealt out again", redo, t.train.Len()-done)
		if done == t.train.Len() {
			rest = "the epoch's training had ended; its loss, evaluation and checkpoint are redone"
		}
		fmt.Fprintf(t.Log, "train: lost %s at epoch %d, step %d (%v); going on with %d ranks (this one is rank %d of %d, was %d) after %v: %s\n",
			rankList(lost), epoch, t.step, cause, g.Size(), g.Rank(), g.Size(), origin[g.Rank()], time.Since(start).Round(time.Millisecond), rest)
	}
	if t.SavePath != "" {
		if err := t.saveInEpoch(ctx, *at); err != nil {
			return false, fmt.Errorf("after shrinking, saving the checkpoint: %w", err)
		}
	}
	return false, nil
}

// rankList names ranks: "rank 2", "ranks 1, 3".
func rankList(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	s := "ranks "
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(r)
	}
	return s
}
