package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

// A rank's way of training is two independent choices, each a strategy
// the training loop calls where the ways differ:
//
//   - its compute: the whole model (wholeModel), or one stage of a
//     pipeline (pipelineStage);
//   - its gradient sync: none (alone), or DDP across the ranks that hold
//     the same layers (dataParallel).
//
// Single process, DDP, pipeline and pipeline × data-parallel are the four
// combinations; New picks them once, and the loop has no mode checks.

// compute is how a rank runs its layers.
type compute interface {
	// layer is the layer whose parameters this rank trains.
	layer() nn.Layer
	// setTraining switches every layer (and replica) between training and
	// evaluation behaviour.
	setTraining(on bool)
	// gradients runs one batch forward and backward, adding to the
	// parameters' gradients, and returns the batch loss (0 on a pipeline
	// stage that does not compute it). It calls sync.beforeBackward before
	// the batch's first backward and sync.afterBackward after its last.
	gradients(ctx context.Context, t *Trainer, b *data.Batch, sync gradSync, update bool) (float32, error)
	// evaluate scores the model on ds through loader.
	evaluate(ctx context.Context, t *Trainer, loader *data.Loader, ds *data.Dataset, sync gradSync) (Evaluation, error)
	// checkpointPath is where this rank's part of a checkpoint saved at
	// path lives.
	checkpointPath(path string) string
	// stamp records in m what this rank's part is; check refuses a
	// checkpoint saved for another part of a model cut as this run cuts
	// it (Trainer.checkSaved).
	stamp(m *checkpoint.Meta)
	check(path string, m *checkpoint.Meta) error
	// params counts the model's parameters (all stages').
	params() int
	describe(w io.Writer)
}

// gradSync combines what the ranks that hold the same layers computed.
type gradSync interface {
	// rank and world place this rank among the replicas: the data is
	// sharded over them.
	rank() int
	world() int
	// beforeBackward prepares a batch's backward pass; update is false
	// on the micro-steps of gradient accumulation.
	beforeBackward(update bool)
	// afterBackward finishes the batch's gradients (waits for their
	// average across the replicas when they were combined).
	afterBackward() error
	// sum adds v up across the replicas.
	sum(ctx context.Context, v []float64) error
	commTimes() (busy, exposed time.Duration)
	// state gathers what the sync keeps from step to step for a
	// checkpoint (PowerSGD's), onto rank 0; every replica calls it. restore
	// loads it from a checkpoint and says why it started afresh if it did.
	state(ctx context.Context) ([]nn.Var, error)
	restore(s syncState) (string, error)
	describe(w io.Writer, t *Trainer)
	close()
}

// alone is the gradient sync of a rank that has no replicas.
type alone struct{}

func (alone) rank() int                                { return 0 }
func (alone) world() int                               { return 1 }
func (alone) beforeBackward(bool)                      {}
func (alone) afterBackward() error                     { return nil }
func (alone) sum(context.Context, []float64) error     { return nil }
func (alone) commTimes() (busy, exposed time.Duration) { return 0, 0 }
func (alone) state(context.Context) ([]nn.Var, error)  { return nil, nil }
func (alone) restore(syncState) (string, error)        { return "", nil }
func (alone) close()                                   {}

// describe names the data-parallel settings a single process has no use
// for, so that a run meant to be distributed but started alone says so.
func (alone) describe(w io.Writer, t *Trainer) {
	var unused []string
	if t.cfg.SyncBatchNorm {
		unused = append(unused, "--sync-bn")
	}
	if c := t.cfg.GradCompression; c != "" && !strings.EqualFold(c, "none") {
		unused = append(unused, "--grad-compression "+c)
	}
	if len(unused) > 0 {
		fmt.Fprintf(w, "No data-parallel replicas: %s without effect (they act between replicas: run more ranks, gorun -np N)\n", strings.Join(unused, " and "))
	}
}

// dataParallel averages gradients across the group with DDP. A whole
// model's buckets are reduced during backward, on the batches that end an
// accumulation; a pipeline stage's once after all its microbatches.
type dataParallel struct {
	g        *comm.Group
	ddp      *DDP
	perBatch bool // reduce every bucket after backward (pipeline stages)
}

func (d *dataParallel) rank() int  { return d.g.Rank() }
func (d *dataParallel) world() int { return d.g.Size() }

func (d *dataParallel) beforeBackward(update bool) {
	d.ddp.BeginStep(update && !d.perBatch)
}

func (d *dataParallel) afterBackward() error {
	var err error
	if d.perBatch {
		_, err = d.ddp.ReduceAll()
	} else {
		_, err = d.ddp.Finish()
	}
	return err
}

func (d *dataParallel) sum(ctx context.Context, v []float64) error {
	return comm.AllReduce(ctx, d.g, v, comm.Sum)
}

func (d *dataParallel) commTimes() (busy, exposed time.Duration) { return d.ddp.CommTimes() }

func (d *dataParallel) describe(w io.Writer, t *Trainer) {
	bn := ""
	if !d.perBatch {
		nn.Walk(t.compute.layer(), func(l nn.Layer) {
			if _, ok := l.(*nn.BatchNorm2d); ok {
				bn = ", per-rank batch norm statistics"
				if t.cfg.SyncBatchNorm {
					bn = ", synchronised batch norm"
				}
			}
		})
	}
	wire := ""
	switch c := d.ddp.compress; {
	case d.ddp.psgd != nil:
		wire = " (" + d.ddp.psgd.describe() + ")"
	case c != "":
		wire = fmt.Sprintf(" (as %s on the wire, summed in float32)", c)
	}
	buckets := "1 bucket"
	if n := len(d.ddp.Buckets()); n != 1 {
		buckets = fmt.Sprintf("%d buckets", n)
	}
	fmt.Fprintf(w, "Data parallel over %d ranks: batch %d per rank (%d in all), gradients averaged in %s of %v elements%s%s\n",
		d.world(), t.cfg.BatchSize, t.cfg.BatchSize*d.world(), buckets, d.ddp.Buckets(), wire, bn)
}

func (d *dataParallel) state(ctx context.Context) ([]nn.Var, error) {
	if d.ddp.psgd == nil {
		return nil, nil
	}
	return d.ddp.psgd.state(ctx, d.g)
}

func (d *dataParallel) restore(s syncState) (string, error) {
	if d.ddp.psgd == nil {
		return "", nil
	}
	return d.ddp.psgd.restore(s, d.g.Rank(), d.g.Size())
}

// syncState is the gradient sync's part of a checkpoint's training file:
// its tensors under checkpoint.SyncPrefix, by name without the prefix.
type syncState struct {
	path    string // the file, for errors
	tensors map[string]*safetensors.Tensor
}

// syncStateOf picks the gradient sync's tensors out of a training file.
func syncStateOf(f *safetensors.File) syncState {
	s := syncState{path: f.Path, tensors: map[string]*safetensors.Tensor{}}
	for i := range f.Tensors {
		if name, ok := strings.CutPrefix(f.Tensors[i].Name, checkpoint.SyncPrefix); ok {
			s.tensors[name] = &f.Tensors[i]
		}
	}
	return s
}

func (s syncState) get(name string) (*safetensors.Tensor, bool) {
	t, ok := s.tensors[name]
	return t, ok
}

func (d *dataParallel) close() { d.ddp.Close() }

// wholeModel runs the whole network on this rank.
type wholeModel struct {
	net     nn.Layer
	loss    *nn.Loss
	input   *tensor.Tensor // the batch on the device, for a GPU backend
	syncErr error          // the first failure of a SyncBatchNorm all-reduce
}

func (w *wholeModel) layer() nn.Layer { return w.net }
func (w *wholeModel) setTraining(on bool) {
	w.net.SetTraining(on)
	nn.SetGradEnabled(w.net, on)
}

func (w *wholeModel) gradients(_ context.Context, t *Trainer, b *data.Batch, sync gradSync, update bool) (float32, error) {
	t0 := time.Now()
	y, err := w.net.Forward(onDevice(t.be, b.X, &w.input))
	if err != nil {
		return 0, fmt.Errorf("forward: %w", err)
	}
	loss, err := w.loss.Forward(y, b.Labels)
	if err == nil {
		err = w.syncErr
	}
	if err == nil {
		err = deviceErr(t.be)
	}
	if err != nil {
		return 0, fmt.Errorf("loss: %w", err)
	}
	if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) {
		return 0, fmt.Errorf("the loss is %v (learning rate %g too high?)", loss, t.opt.LR())
	}
	t1 := time.Now()
	t.times.Forward += t1.Sub(t0)
	sync.beforeBackward(update)
	if t.scaler != nil {
		w.loss.Scale = t.scaler.Scale
	}
	dy, err := w.loss.Backward()
	if err == nil {
		_, err = w.net.Backward(dy)
	}
	if err == nil {
		err = w.syncErr
	}
	if err != nil {
		return 0, fmt.Errorf("backward: %w", err)
	}
	t.times.Backward += time.Since(t1)
	if err := sync.afterBackward(); err != nil {
		return 0, err
	}
	if err := deviceErr(t.be); err != nil {
		return 0, err
	}
	return loss, nil
}

// evaluate scores ds; with replicas, each evaluates every world-th image
// (no padding, so every image counts once) and the sums are combined.
func (w *wholeModel) evaluate(ctx context.Context, t *Trainer, loader *data.Loader, ds *data.Dataset, sync gradSync) (Evaluation, error) {
	return evaluateShare(ctx, t.model, t.be, loader, ds, sync.rank(), sync.world(), sync.sum)
}

// evaluateShare evaluates m on rank's share of ds among world ranks (every
// world-th image, or its shards) and combines the ranks' results with sum,
// an all-reduce of them: every rank returns the whole set's evaluation.
func evaluateShare(ctx context.Context, m *zoo.Model, be tensor.Backend, loader *data.Loader, ds *data.Dataset, rank, world int, sum func(context.Context, []float64) error) (Evaluation, error) {
	if world == 1 {
		return Evaluate(ctx, m, be, loader, ds, nil)
	}
	mine := []int{} // not nil, which would mean every image: a rank past the images has none
	if ds.Shards != nil {
		mine = append(mine, ds.Shards.Share(rank, world)...)
	} else {
		for i := rank; i < ds.Len(); i += world {
			mine = append(mine, i)
		}
	}
	ev, err := Evaluate(ctx, m, be, loader, ds, mine)
	if err != nil {
		return ev, err
	}
	k := len(ev.Confusion)
	const head = 5
	sums := make([]float64, head+k*k+world)
	sums[0], sums[1], sums[2], sums[3], sums[4] = ev.Loss*float64(ev.Total), float64(ev.Correct), float64(ev.Total), float64(ev.Top5), float64(ev.Skipped)
	for i, row := range ev.Confusion {
		for j, n := range row {
			sums[head+i*k+j] = float64(n)
		}
	}
	sums[head+k*k+rank] = float64(ev.Total)
	if err := sum(ctx, sums); err != nil {
		return ev, fmt.Errorf("evaluate: combining ranks' results: %w", err)
	}
	ev.Correct, ev.Total, ev.Top5, ev.Skipped = int(sums[1]), int(sums[2]), int(sums[3]), int(sums[4])
	ev.Loss = sums[0] / float64(max(ev.Total, 1))
	for i, row := range ev.Confusion {
		for j := range row {
			row[j] = int(sums[head+i*k+j])
		}
	}
	ev.Shares = make([]int, world)
	for r := range ev.Shares {
		ev.Shares[r] = int(sums[head+k*k+r])
	}
	return ev, nil
}

func (w *wholeModel) checkpointPath(path string) string { return path }
func (w *wholeModel) stamp(*checkpoint.Meta)            {}
func (w *wholeModel) check(string, *checkpoint.Meta) error {
	return nil
}

func (w *wholeModel) params() int {
	n := 0
	for _, p := range nn.Params(w.net) {
		n += p.Value.Len()
	}
	return n
}

func (w *wholeModel) describe(io.Writer) {}

// pipelineStage runs this rank's stage of a pipeline.
type pipelineStage struct {
	pipe *Pipeline
	plan *StagePlan
}

func (s *pipelineStage) layer() nn.Layer     { return s.pipe.Layer() }
func (s *pipelineStage) setTraining(on bool) { s.pipe.SetTraining(on) }

func (s *pipelineStage) gradients(ctx context.Context, t *Trainer, b *data.Batch, sync gradSync, update bool) (float32, error) {
	sync.beforeBackward(update)
	loss, err := s.pipe.Step(ctx, b.X, b.Labels)
	if err != nil {
		return 0, err
	}
	for _, e := range s.pipe.Events {
		if e.Pass == PassForward {
			t.times.Forward += e.End.Sub(e.Start)
		} else {
			t.times.Backward += e.End.Sub(e.Start)
		}
	}
	if err := sync.afterBackward(); err != nil {
		return 0, err
	}
	return loss, nil
}

// evaluate runs the test set through the pipeline, one batch at a time;
// the results are the last stage's (zero elsewhere).
func (s *pipelineStage) evaluate(ctx context.Context, t *Trainer, loader *data.Loader, ds *data.Dataset, _ gradSync) (Evaluation, error) {
	s.pipe.SetTraining(false)
	defer s.pipe.SetTraining(true)
	forward := func(b *data.Batch) (*tensor.Tensor, error) { return s.pipe.Forward(ctx, b.X, b.Len()) }
	return score(ctx, forward, t.model, t.be, loader, ds, nil)
}

func (s *pipelineStage) checkpointPath(path string) string { return StagePath(path, s.pipe.stage) }

func (s *pipelineStage) stamp(m *checkpoint.Meta) {
	m.Stage, m.Stages, m.Split = s.pipe.stage, s.pipe.stages, s.plan.Split
	if n := len(s.pipe.chunks); n > 1 {
		m.Chunks = n
	}
}

// check refuses another stage's file, or one cut at other layers (the
// stage and chunk counts: Config.CutAsSaved).
func (s *pipelineStage) check(path string, m *checkpoint.Meta) error {
	if m.Stage != s.pipe.stage {
		return fmt.Errorf("checkpoint %s is stage %d of %d; this rank runs stage %d", path, m.Stage, m.Stages, s.pipe.stage)
	}
	if !slices.Equal(m.Split, s.plan.Split) {
		return fmt.Errorf("checkpoint %s was cut into stages at layers %v; this run cuts at %v (resume with the saved split: train --resume does)", path, m.Split, s.plan.Split)
	}
	return nil
}

func (s *pipelineStage) params() int {
	n := 0
	for _, p := range s.plan.Params {
		n += p
	}
	return n
}

func (s *pipelineStage) describe(w io.Writer) { fmt.Fprintln(w, s.plan.Describe()) }
