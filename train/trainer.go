package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
	"github.com/gorun/gorun/train/report"
)

// Trainer trains one model on one dataset.
type Trainer struct {
	cfg   Config
	be    tensor.Backend
	model *zoo.Model
	opt   optim.Optimizer
	sched optim.Schedule
	loss  *nn.Loss
	train *data.Dataset
	test  *data.Dataset // may be nil

	trainLoader, testLoader *data.Loader
	dropouts                []*nn.Dropout

	// Report receives progress; nil for silence.
	Report report.Reporter
	// SavePath, when set, is where a checkpoint is written after every
	// epoch (by rank 0 only in a distributed run).
	SavePath string
	// AfterStep, when set, is called after every optimizer step.
	AfterStep func(step int64) error

	group   *comm.Group // nil or size 1: a single process
	ddp     *DDP
	pipe    *Pipeline
	plan    *StagePlan // the pipeline's stages
	syncErr error      // the first failure of a SyncBatchNorm all-reduce

	input *tensor.Tensor // the batch on the device, for a GPU backend

	times Times
	epoch int   // completed epochs
	step  int64 // optimizer steps taken
	last  report.Epoch
}

// New builds the model named in cfg with weights drawn from cfg.Seed, its
// optimizer and schedule, and loaders for train and test (test may be nil).
// With cfg.Pipeline above 1 it builds no layers: Pipe builds this rank's
// stage.
func New(cfg Config, be tensor.Backend, train, test *data.Dataset) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec, err := zoo.Lookup(pipelineModel(cfg.Model, cfg.Pipeline))
	if err != nil {
		return nil, err
	}
	m := spec.Unbuilt()
	if cfg.Pipeline <= 1 {
		m = spec.Build(be, modelSeed(cfg))
	}
	for _, d := range []*data.Dataset{train, test} {
		if d == nil {
			continue
		}
		if want := [3]int(m.Input); d.Shape != want {
			return nil, fmt.Errorf("model %s takes %d×%d×%d images; %s has %d×%d×%d", cfg.Model, want[0], want[1], want[2], d.Name, d.Shape[0], d.Shape[1], d.Shape[2])
		}
		if len(d.Classes) != m.Classes {
			return nil, fmt.Errorf("model %s has %d outputs; %s has %d classes", cfg.Model, m.Classes, d.Name, len(d.Classes))
		}
	}
	t := &Trainer{cfg: cfg, be: be, model: m, loss: m.NewLoss(be), train: train, test: test}
	if m.Net != nil {
		if err := t.setTrained(m.Net); err != nil {
			return nil, err
		}
	}
	tf := data.Plain(train)
	if cfg.Augment && train.Shape[0] == 3 {
		tf = data.CIFARAugmentation(train, cfg.Seed)
	}
	if t.trainLoader, err = data.NewLoader(train, cfg.BatchSize, tf, 4); err != nil {
		return nil, err
	}
	if test != nil {
		if t.testLoader, err = data.NewLoader(test, cfg.TestBatchSize, data.Plain(test), 2); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// modelSeed is the seed the model's weights are drawn from.
func modelSeed(cfg Config) uint64 {
	return rand.New(rand.NewPCG(cfg.Seed, 0x6d6f64656c)).Uint64()
}

// setTrained makes l the layer this rank trains: its optimizer, schedule and
// dropout layers.
func (t *Trainer) setTrained(l nn.Layer) error {
	var err error
	if t.opt, err = newOptimizer(t.cfg, t.be, nn.Params(l)); err != nil {
		return err
	}
	if t.sched, err = newSchedule(t.cfg, t.opt); err != nil {
		return err
	}
	t.dropouts = nil
	nn.Walk(l, func(l nn.Layer) {
		if d, ok := l.(*nn.Dropout); ok {
			t.dropouts = append(t.dropouts, d)
		}
	})
	return nil
}

// Model returns the model being trained.
func (t *Trainer) Model() *zoo.Model { return t.model }

// Config returns the configuration.
func (t *Trainer) Config() Config { return t.cfg }

// Times returns where the time went so far.
func (t *Trainer) Times() Times { return t.times }

// Epoch returns the number of completed epochs.
func (t *Trainer) Epoch() int { return t.epoch }

// Close stops the loaders.
func (t *Trainer) Close() {
	if t.ddp != nil {
		t.ddp.Close()
	}
	t.trainLoader.Stop()
	if t.testLoader != nil {
		t.testLoader.Stop()
	}
}

// Distribute makes the run data-parallel over g (no-op for a group of
// one): rank 0's parameters and buffers are broadcast, each rank trains on
// its shard of every epoch with gradients averaged by DDP, evaluation is
// combined across ranks, and only rank 0 saves checkpoints. Call it after
// New and Resume, on every rank.
func (t *Trainer) Distribute(ctx context.Context, g *comm.Group) error {
	t.group = g
	if g == nil || g.Size() == 1 {
		return nil
	}
	// Different dropout masks on different ranks, as each rank's own data
	// would get in separate processes.
	for _, d := range t.dropouts {
		d.Seed ^= uint64(g.Rank()) * 0x9e3779b97f4a7c15
	}
	ddp, err := NewDDP(ctx, g, t.model.Net, t.be)
	if err != nil {
		return err
	}
	t.ddp = ddp
	if t.cfg.SyncBatchNorm {
		sum := func(v []float64) {
			if t.syncErr == nil {
				if err := comm.AllReduce(ctx, g, v, comm.Sum); err != nil {
					t.syncErr = fmt.Errorf("sync batch norm: %w", err)
				}
			}
		}
		nn.Walk(t.model.Net, func(l nn.Layer) {
			if bn, ok := l.(*nn.BatchNorm2d); ok {
				bn.P.SumAcross = sum
			}
		})
	}
	return nil
}

// Pipe makes the run pipeline-parallel over g with cfg.Pipeline stages
// and cfg.Microbatches microbatches. With more ranks than stages, the
// ranks form g.Size()/P pipelines (ranks r·P … r·P+P−1 are pipeline r,
// stage s = rank mod P) that train on different shards of each epoch, and
// each stage's gradients are averaged across its replicas. Call it after
// New, on every rank. The stages of a pipeline read the same batches:
// stage 0 uses the images, the last stage the labels and reports.
func (t *Trainer) Pipe(ctx context.Context, g *comm.Group) error {
	p := t.cfg.Pipeline
	if g.Size()%p != 0 {
		return fmt.Errorf("pipeline: %d ranks cannot form pipelines of %d stages", g.Size(), p)
	}
	replica, stage := g.Rank()/p, g.Rank()%p
	pg, err := g.Split(ctx, replica, stage)
	if err != nil {
		return fmt.Errorf("pipeline: forming pipeline %d: %w", replica, err)
	}
	dg, err := g.Split(ctx, stage, replica)
	if err != nil {
		return fmt.Errorf("pipeline: grouping the replicas of stage %d: %w", stage, err)
	}
	spec, err := zoo.Lookup(pipelineModel(t.cfg.Model, p))
	if err != nil {
		return err
	}
	micro, seed := max(t.cfg.Microbatches, 1), modelSeed(t.cfg)
	plan, err := planStages(ctx, g, t.be, spec, seed, p, max(t.cfg.BatchSize/micro, 1), t.cfg.Balance, t.cfg.Split)
	if err != nil {
		return err
	}
	lo, hi := plan.Bounds(stage)
	in := spec.Input
	if lo > 0 {
		in = plan.Shapes[lo-1]
	}
	// Only this stage's layers are built; a whole model built by New
	// (a trainer made without a pipeline) is dropped.
	layer := spec.BuildParts(t.be, seed, lo, hi)
	t.model = spec.Unbuilt()
	pipe, err := NewPipeline(pg, t.be, t.model, layer, in, plan.Shapes[hi-1], micro, t.cfg.Schedule)
	if err != nil {
		return err
	}
	// The optimizer updates this stage's parameters only.
	if err := t.setTrained(layer); err != nil {
		return err
	}
	t.plan = plan
	t.pipe = pipe
	t.group = dg // the data-parallel dimension: this stage's replicas
	if dg.Size() > 1 {
		if t.ddp, err = NewDDP(ctx, dg, pipe.Layer(), t.be); err != nil {
			return err
		}
	}
	return nil
}

// Bubble returns each pipeline stage's measured idle fraction and the
// GPipe ideal (nil without a pipeline). Every rank must call it.
func (t *Trainer) Bubble(ctx context.Context) (idle []float64, ideal float64, err error) {
	if t.pipe == nil {
		return nil, 0, nil
	}
	return t.pipe.Bubble(ctx)
}

// WriteTimeline gathers the pipeline's last full batch from every stage
// and, on the last stage, draws it as an SVG at path, titled with the
// stages' idle fractions and the ideal bubble (from Bubble). Every rank
// must call it.
func (t *Trainer) WriteTimeline(ctx context.Context, path string, idle []float64, ideal float64) error {
	if t.pipe == nil {
		return fmt.Errorf("--timeline needs a pipeline run")
	}
	events, err := t.pipe.Timeline(ctx)
	if err != nil || !t.pipe.last() {
		return err
	}
	var parts []string
	for s, f := range idle {
		parts = append(parts, fmt.Sprintf("%d: %.0f%%", s, 100*f))
	}
	title := fmt.Sprintf("%s, %d stages, %d microbatches: idle per stage %s (GPipe's ideal bubble %.0f%%)", t.pipe.schedule, t.pipe.stages, t.pipe.micro, strings.Join(parts, ", "), 100*ideal)
	return WriteTimelineSVG(path, events, t.pipe.stages, title)
}

// ReportingRank is the rank whose output describes a run of cfg: the
// last stage of the first pipeline (it has the loss), else rank 0.
func ReportingRank(cfg Config) int {
	if cfg.Pipeline > 1 {
		return cfg.Pipeline - 1
	}
	return 0
}

// StagePath is where stage s of a pipeline run saved with path keeps its
// weights: NAME.stageS.safetensors for NAME.safetensors.
func StagePath(path string, stage int) string {
	return fmt.Sprintf("%s.stage%d.safetensors", strings.TrimSuffix(path, ".safetensors"), stage)
}

// rank and world describe the trainer's place in the job.
func (t *Trainer) rank() int {
	if t.group == nil {
		return 0
	}
	return t.group.Rank()
}

func (t *Trainer) world() int {
	if t.group == nil {
		return 1
	}
	return t.group.Size()
}

// Describe writes a summary of the run's setup.
func (t *Trainer) Describe(w io.Writer, backend string) {
	params := 0
	if t.plan != nil {
		for _, n := range t.plan.Params {
			params += n
		}
	} else {
		for _, p := range nn.Params(t.model.Net) {
			params += p.Value.Len()
		}
	}
	fmt.Fprintf(w, "Model %s: %d parameters; backend %s\n", t.cfg.Model, params, backend)
	if t.plan != nil {
		fmt.Fprintln(w, t.plan.Describe())
	}
	testN := 0
	if t.test != nil {
		testN = t.test.Len()
	}
	aug := ""
	if t.cfg.Augment && t.train.Shape[0] == 3 {
		aug = ", augmented (random crop 32 pad 4, flip)"
	}
	fmt.Fprintf(w, "Data %s: %d training and %d test images%s\n", t.train.Name, t.train.Len(), testN, aug)
	epochs := fmt.Sprintf("%d epochs", t.cfg.Epochs)
	if t.cfg.Epochs == 1 {
		epochs = "1 epoch"
	}
	fmt.Fprintf(w, "Training %s from epoch %d, batch %d, %s, seed %d\n", epochs, t.epoch+1, t.cfg.BatchSize, t.cfg.describe(), t.cfg.Seed)
	if t.ddp != nil {
		bn := ""
		nn.Walk(t.model.Net, func(l nn.Layer) {
			if _, ok := l.(*nn.BatchNorm2d); ok {
				bn = ", per-rank batch norm statistics"
				if t.cfg.SyncBatchNorm {
					bn = ", synchronised batch norm"
				}
			}
		})
		fmt.Fprintf(w, "Data parallel over %d ranks: batch %d per rank (%d in all), gradients averaged in %d buckets of %v elements%s\n",
			t.world(), t.cfg.BatchSize, t.cfg.BatchSize*t.world(), len(t.ddp.Buckets()), t.ddp.Buckets(), bn)
	}
}

// Run trains the remaining epochs, evaluating after each, reporting, and
// saving a checkpoint after each when SavePath is set.
func (t *Trainer) Run(ctx context.Context) error {
	if t.cfg.Pipeline > 1 && t.pipe == nil {
		return fmt.Errorf("train: a pipeline of %d stages: call Pipe before Run", t.cfg.Pipeline)
	}
	start := time.Now()
	defer func() { t.times.Total += time.Since(start) }()
	for t.epoch < t.cfg.Epochs {
		if err := t.runEpoch(ctx, t.epoch+1); err != nil {
			return err
		}
	}
	if t.ddp != nil {
		t.times.Comm, t.times.CommExposed = t.ddp.CommTimes()
	}
	if t.Report != nil {
		return t.Report.Close()
	}
	return nil
}

func (t *Trainer) runEpoch(ctx context.Context, epoch int) error {
	epochStart := time.Now()
	lr := t.opt.LR()
	trainLoss, seen, err := t.trainEpoch(ctx, epoch)
	if err != nil {
		return err
	}
	if t.ddp != nil {
		// The epoch's loss and throughput over all ranks.
		sums := []float64{trainLoss, float64(seen)}
		if err := comm.AllReduce(ctx, t.group, sums, comm.Sum); err != nil {
			return fmt.Errorf("epoch %d: combining the training loss: %w", epoch, err)
		}
		trainLoss, seen = sums[0]/float64(t.world()), int(sums[1])
	}
	secs := time.Since(epochStart).Seconds()
	if t.sched != nil {
		t.sched.Step()
	}
	e := report.Epoch{Epoch: epoch, GlobalStep: t.step, TrainLoss: trainLoss, Seconds: secs, ImagesPerSec: float64(seen) / secs, LR: lr}
	if t.test != nil {
		ev, err := t.Evaluate(ctx, t.test)
		if err != nil {
			return err
		}
		e.TestLoss, e.TestCorrect, e.TestTotal = ev.Loss, ev.Correct, ev.Total
	}
	t.epoch = epoch
	t.last = e
	if t.Report != nil {
		if err := t.Report.Epoch(e); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	if t.SavePath != "" && t.rank() == 0 { // a pipeline's rank 0 is pipeline 0: each of its stages saves
		t0 := time.Now()
		if err := t.Save(t.SavePath); err != nil {
			return err
		}
		t.times.Checkpoint += time.Since(t0)
	}
	return nil
}

// trainEpoch runs one epoch and returns its mean batch loss and the
// number of samples trained on.
func (t *Trainer) trainEpoch(ctx context.Context, epoch int) (float64, int, error) {
	if t.pipe != nil {
		t.pipe.SetTraining(true)
	} else {
		t.model.Net.SetTraining(true)
	}
	t.opt.ZeroGrad()
	sampler := data.Sampler{N: t.train.Len(), Shuffle: true, Seed: t.cfg.Seed, Rank: t.rank(), World: t.world()}
	if err := sampler.Validate(); err != nil {
		return 0, 0, err
	}
	indices := sampler.Indices(epoch)
	accumulate := max(t.cfg.Accumulate, 1)
	if err := t.trainLoader.Start(epoch, indices); err != nil {
		return 0, 0, err
	}
	defer t.trainLoader.Stop()
	batches := (len(indices) + t.cfg.BatchSize - 1) / t.cfg.BatchSize
	start := time.Now()
	var lossSum float64
	seen := 0
	for batch := 0; ; batch++ {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		b, ok := t.trainLoader.Next()
		t.times.Data += time.Since(t0)
		if !ok {
			break
		}
		// The optimizer steps after every accumulate batches and at the
		// epoch's end; gradients add up in between, without communication.
		update := (batch+1)%accumulate == 0 || batch == batches-1
		var loss float32
		var err error
		if t.pipe != nil {
			loss, err = t.pipelineGradients(ctx, b)
		} else {
			loss, err = t.gradients(b, update)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("epoch %d batch %d: %w", epoch, batch, err)
		}
		t1 := time.Now()
		if update {
			t.opt.Step()
			t.opt.ZeroGrad()
			t.step++
		}
		t2 := time.Now()
		t.times.Optimizer += t2.Sub(t1)
		if update && t.AfterStep != nil {
			if err := t.AfterStep(t.step); err != nil {
				return 0, 0, err
			}
		}
		lossSum += float64(loss)
		if err := t.reportStep(epoch, batch, batches, seen, b.Len(), loss, t2.Sub(start)); err != nil {
			return 0, 0, err
		}
		seen += b.Len()
	}
	return lossSum / float64(max(batches, 1)), seen, nil
}

// trained is the layer whose parameters this rank updates: its pipeline
// stage, or the whole model.
func (t *Trainer) trained() nn.Layer {
	if t.pipe != nil {
		return t.pipe.Layer()
	}
	return t.model.Net
}

// gradients runs forward, loss and backward on one batch, adding to the
// parameters' gradients; with DDP they are averaged across the ranks when
// sync is set (the batch ends an accumulation).
func (t *Trainer) gradients(b *data.Batch, sync bool) (float32, error) {
	t0 := time.Now()
	y, err := t.model.Net.Forward(onDevice(t.be, b.X, &t.input))
	if err != nil {
		return 0, fmt.Errorf("forward: %w", err)
	}
	loss, err := t.loss.Forward(y, b.Labels)
	if err == nil {
		err = t.syncErr
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
	if t.ddp != nil {
		t.ddp.BeginStep(sync)
	}
	dy, err := t.loss.Backward()
	if err == nil {
		_, err = t.model.Net.Backward(dy)
	}
	if err == nil {
		err = t.syncErr
	}
	if err != nil {
		return 0, fmt.Errorf("backward: %w", err)
	}
	t.times.Backward += time.Since(t1)
	if t.ddp != nil {
		if _, err := t.ddp.Finish(); err != nil {
			return 0, err
		}
	}
	if err := deviceErr(t.be); err != nil {
		return 0, err
	}
	return loss, nil
}

// pipelineGradients runs one batch through this rank's pipeline stage and,
// with several pipelines, averages the stage's gradients across them. It
// returns the batch loss on the last stage (0 elsewhere).
func (t *Trainer) pipelineGradients(ctx context.Context, b *data.Batch) (float32, error) {
	if t.ddp != nil {
		t.ddp.BeginStep(false) // reduced in one go after the microbatches
	}
	loss, err := t.pipe.Step(ctx, b.X, b.Labels)
	if err != nil {
		return 0, err
	}
	for _, e := range t.pipe.Events {
		if e.Backward {
			t.times.Backward += e.End.Sub(e.Start)
		} else {
			t.times.Forward += e.End.Sub(e.Start)
		}
	}
	if t.ddp != nil {
		if _, err := t.ddp.ReduceAll(); err != nil {
			return 0, err
		}
	}
	return loss, nil
}

// reportStep tells the reporter about a finished batch: seen is this
// rank's samples before it, n its size; counts are scaled to all ranks.
func (t *Trainer) reportStep(epoch, batch, batches, seen, n int, loss float32, elapsed time.Duration) error {
	if t.Report == nil {
		return nil
	}
	w := t.world()
	err := t.Report.Step(report.Step{Epoch: epoch, Batch: batch, Batches: batches, Seen: seen * w, Total: t.train.Len(),
		GlobalStep: t.step, Loss: float64(loss), LR: t.opt.LR(), Elapsed: elapsed,
		ImagesPerSec: float64((seen+n)*w) / elapsed.Seconds()})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Evaluation is a model's result on a dataset.
type Evaluation struct {
	Loss    float64 // mean per sample
	Correct int
	Total   int
	// Confusion[true][predicted] counts samples.
	Confusion [][]int
}

// Accuracy returns Correct/Total.
func (e Evaluation) Accuracy() float64 { return float64(e.Correct) / float64(max(e.Total, 1)) }

// Evaluate runs the model in evaluation mode over ds.
func (t *Trainer) Evaluate(ctx context.Context, ds *data.Dataset) (Evaluation, error) {
	t0 := time.Now()
	defer func() { t.times.Eval += time.Since(t0) }()
	loader := t.testLoader
	if ds != t.test {
		var err error
		if loader, err = data.NewLoader(ds, t.cfg.TestBatchSize, data.Plain(ds), 2); err != nil {
			return Evaluation{}, err
		}
	}
	if t.pipe != nil {
		return t.evaluatePipeline(ctx, loader, ds)
	}
	if t.world() == 1 {
		return Evaluate(ctx, t.model, t.be, loader, ds, nil)
	}
	// Each rank evaluates every world-th image, no padding, so every image
	// counts once; the sums are combined.
	var mine []int
	for i := t.rank(); i < ds.Len(); i += t.world() {
		mine = append(mine, i)
	}
	ev, err := Evaluate(ctx, t.model, t.be, loader, ds, mine)
	if err != nil {
		return ev, err
	}
	k := len(ev.Confusion)
	sums := make([]float64, 3+k*k)
	sums[0], sums[1], sums[2] = ev.Loss*float64(ev.Total), float64(ev.Correct), float64(ev.Total)
	for i, row := range ev.Confusion {
		for j, n := range row {
			sums[3+i*k+j] = float64(n)
		}
	}
	if err := comm.AllReduce(ctx, t.group, sums, comm.Sum); err != nil {
		return ev, fmt.Errorf("evaluate: combining ranks' results: %w", err)
	}
	ev.Correct, ev.Total = int(sums[1]), int(sums[2])
	ev.Loss = sums[0] / float64(max(ev.Total, 1))
	for i, row := range ev.Confusion {
		for j := range row {
			row[j] = int(sums[3+i*k+j])
		}
	}
	return ev, nil
}

// Evaluate runs m in evaluation mode over the images of ds at indices
// (every image when nil) through loader, and leaves it in evaluation mode.
func Evaluate(ctx context.Context, m *zoo.Model, be tensor.Backend, loader *data.Loader, ds *data.Dataset, indices []int) (Evaluation, error) {
	m.Net.SetTraining(false)
	var input *tensor.Tensor
	forward := func(b *data.Batch) (*tensor.Tensor, error) { return m.Net.Forward(onDevice(be, b.X, &input)) }
	return score(ctx, forward, m, be, loader, ds, indices)
}

// score runs every batch of the images of ds at indices (all when nil)
// through forward and scores its outputs against the labels; a nil output
// (a pipeline stage other than the last) scores nothing.
func score(ctx context.Context, forward func(*data.Batch) (*tensor.Tensor, error), m *zoo.Model, be tensor.Backend, loader *data.Loader, ds *data.Dataset, indices []int) (Evaluation, error) {
	ev := Evaluation{Confusion: make([][]int, m.Classes)}
	for i := range ev.Confusion {
		ev.Confusion[i] = make([]int, m.Classes)
	}
	loss := m.NewLoss(be)
	if indices == nil {
		indices = data.Sampler{N: ds.Len(), World: 1}.Indices(0)
	}
	if err := loader.Start(0, indices); err != nil {
		return ev, err
	}
	defer loader.Stop()
	var lossSum float64
	var host []float32 // the scores on the host, from a device
	for b, ok := loader.Next(); ok; b, ok = loader.Next() {
		if err := ctx.Err(); err != nil {
			return ev, err
		}
		y, err := forward(b)
		if err != nil {
			return ev, fmt.Errorf("evaluate: %w", err)
		}
		if y == nil {
			continue
		}
		l, err := loss.Forward(y, b.Labels)
		if err != nil {
			return ev, fmt.Errorf("evaluate: %w", err)
		}
		if err := deviceErr(be); err != nil {
			return ev, fmt.Errorf("evaluate: %w", err)
		}
		lossSum += float64(l) * float64(b.Len())
		scores := hostRows(y, &host)
		for i, label := range b.Labels {
			pred := argmax(scores[i*m.Classes : (i+1)*m.Classes])
			ev.Confusion[label][pred]++
			if pred == int(label) {
				ev.Correct++
			}
		}
		ev.Total += b.Len()
	}
	ev.Loss = lossSum / float64(max(ev.Total, 1))
	return ev, nil
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// meta describes the trainer's state for a checkpoint.
func (t *Trainer) meta() (checkpoint.Meta, error) {
	cfg, err := json.Marshal(t.cfg)
	if err != nil {
		return checkpoint.Meta{}, err
	}
	m := checkpoint.Meta{Model: t.cfg.Model, Input: t.model.Input, Dataset: t.train.Name, Classes: t.train.Classes,
		Mean: t.train.Mean, Std: t.train.Std, Epoch: t.epoch, Step: t.step, LR: t.opt.LR(), Config: cfg}
	if t.sched != nil {
		m.ScheduleEpoch = t.sched.Epoch()
	}
	for _, d := range t.dropouts {
		m.DropoutCalls = append(m.DropoutCalls, d.Calls)
	}
	if t.last.TestTotal > 0 {
		m.TestAccuracy = t.last.TestAccuracy()
	}
	return m, nil
}

// Save writes a checkpoint (weights at path, training state beside it);
// a pipeline stage writes its own stage's, at StagePath(path, stage).
func (t *Trainer) Save(path string) error {
	m, err := t.meta()
	if err != nil {
		return err
	}
	if t.pipe != nil {
		m.Stage, m.Stages, m.Split = t.pipe.stage, t.pipe.stages, t.plan.Split
		return checkpoint.Save(StagePath(path, t.pipe.stage), t.pipe.Layer(), t.opt, m)
	}
	return checkpoint.Save(path, t.model.Net, t.opt, m)
}

// Resume restores the model, optimizer, schedule, step and epoch counters
// and dropout state from the checkpoint at path, so Run continues exactly
// where the saved run was.
//
// In a pipeline run (call Pipe first) each stage resumes from its own
// file, StagePath(path, stage); the stage count must be the saved one.
func (t *Trainer) Resume(path string) error {
	net := t.model.Net
	if t.pipe != nil {
		path, net = StagePath(path, t.pipe.stage), t.pipe.Layer()
	}
	pre, err := checkpoint.ReadTrainMeta(path)
	if err != nil {
		return err
	}
	if t.pipe != nil && (pre.Stages != t.pipe.stages || pre.Stage != t.pipe.stage) {
		return fmt.Errorf("checkpoint %s is stage %d of %d; this run has %d stages", path, pre.Stage, pre.Stages, t.pipe.stages)
	}
	if t.pipe != nil && !slices.Equal(pre.Split, t.plan.Split) {
		return fmt.Errorf("checkpoint %s was cut into stages at layers %v; this run cuts at %v (resume with the saved split: train --resume does)", path, pre.Split, t.plan.Split)
	}
	if pre.Model != t.cfg.Model {
		return fmt.Errorf("checkpoint %s holds model %s, not %s", path, pre.Model, t.cfg.Model)
	}
	if len(pre.DropoutCalls) != len(t.dropouts) {
		return fmt.Errorf("checkpoint %s has %d dropout counters; model %s has %d dropout layers", path, len(pre.DropoutCalls), t.cfg.Model, len(t.dropouts))
	}
	m, err := checkpoint.Resume(path, net, t.opt)
	if err != nil {
		return err
	}
	t.epoch, t.step = m.Epoch, m.Step
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

// evaluatePipeline runs the test set through the pipeline, one batch at a
// time; the results are the last stage's (zero elsewhere).
func (t *Trainer) evaluatePipeline(ctx context.Context, loader *data.Loader, ds *data.Dataset) (Evaluation, error) {
	t.pipe.SetTraining(false)
	defer t.pipe.SetTraining(true)
	forward := func(b *data.Batch) (*tensor.Tensor, error) { return t.pipe.Forward(ctx, b.X, b.Len()) }
	return score(ctx, forward, t.model, t.be, loader, ds, nil)
}
