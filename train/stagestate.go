package train

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/train/checkpoint"
)

// savedPoint is where in training a checkpoint was saved: after epoch
// epochs and batch batches of the next (checkpoint.Meta's Epoch and
// Batch), at optimizer step step.
type savedPoint struct{ epoch, batch, step int64 }

// pointOf is where m's checkpoint was saved.
func pointOf(m *checkpoint.Meta) savedPoint {
	return savedPoint{int64(m.Epoch), int64(m.Batch), m.Step}
}

// String says it as train's "Resumed from" line does.
func (p savedPoint) String() string {
	if p.batch == 0 {
		return fmt.Sprintf("after epoch %d (step %d)", p.epoch, p.step)
	}
	return fmt.Sprintf("in epoch %d after batch %d (step %d)", p.epoch+1, p.batch, p.step)
}

// agreedStageState returns the training state file this pipeline stage
// resumes from, of its checkpoint at path: its latest, or the one before
// (checkpoint.KeepPrevious) — whichever was saved at the newest point in
// training that every rank of the job holds. A job killed while its
// stages saved, some of them a step on, so resumes with every stage at
// one step. Every rank of g must call it.
func (t *Trainer) agreedStageState(ctx context.Context, g *comm.Group, path string) (string, error) {
	files := checkpoint.StateFiles(path)
	const per = 6 // two points a rank: its latest file's and the one before's
	mine := []int64{-1, -1, -1, -1, -1, -1}
	for i, f := range files {
		if m, err := checkpoint.ReadStateMeta(path, f); err == nil {
			p := pointOf(m)
			mine[3*i], mine[3*i+1], mine[3*i+2] = p.epoch, p.batch, p.step
		}
	}
	if g == nil || g.Size() == 1 {
		return files[0], nil
	}
	all := make([]int64, per*g.Size())
	if err := comm.AllGather(ctx, g, mine, all); err != nil {
		return "", fmt.Errorf("checkpoint %s: agreeing with the other stages on the step to resume from: %w", path, err)
	}
	held := func(r int) []savedPoint {
		var ps []savedPoint
		for i := range 2 {
			if v := all[per*r+3*i:]; v[2] >= 0 && !slices.Contains(ps, savedPoint{v[0], v[1], v[2]}) {
				ps = append(ps, savedPoint{v[0], v[1], v[2]})
			}
		}
		return ps
	}
	var best savedPoint
	found := false
	for _, p := range held(g.Rank()) {
		everyone := true
		for r := range g.Size() {
			everyone = everyone && slices.Contains(held(r), p)
		}
		if everyone && (!found || p.step > best.step || p.step == best.step && p.epoch > best.epoch) {
			best, found = p, true
		}
	}
	if !found {
		var each []string
		for r := range g.Size() {
			var ps []string
			for _, p := range held(r) {
				ps = append(ps, p.String())
			}
			each = append(each, fmt.Sprintf("rank %d: %s", r, cmp.Or(strings.Join(ps, " and "), "none")))
		}
		return "", fmt.Errorf("checkpoint %s: the pipeline's stages hold no checkpoint of one point in training (%s): the job cannot resume from it", path, strings.Join(each, "; "))
	}
	if (savedPoint{mine[0], mine[1], mine[2]}) == best {
		return files[0], nil
	}
	why := fmt.Sprintf("this stage's latest, %s, is missing", files[0])
	if mine[2] >= 0 {
		why = fmt.Sprintf("this stage's latest, %s, was newer", savedPoint{mine[0], mine[1], mine[2]})
	}
	t.notes = append(t.notes, fmt.Sprintf("Resumed from %s, at %s, the newest point every stage saved: %s", files[1], best, why))
	return files[1], nil
}
