package train

import (
	"context"
	"fmt"
	"github.com/gorun/gorun/model/amp"
	"io"
	"math/rand/v2"
	"runtime"
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

// Trainer trains one model on one dataset, alone or as one rank of a job.
// New sets up everything a run needs, in the one order that works; Run
// trains.
type Trainer struct {
	cfg   Config
	be    tensor.Backend
	model *zoo.Model // Net is nil on a pipeline stage (it holds a part)
	opt   optim.Optimizer
	sched optim.Schedule
	train *data.Dataset
	test  *data.Dataset // may be nil

	trainLoader, testLoader *data.Loader
	dropouts                []*nn.Dropout

	// How this rank trains: its layers and how it combines their
	// gradients with its replicas' (mode.go).
	compute compute
	sync    gradSync
	job     *comm.Group // every rank of the job; nil for a single process
	ownsJob bool        // job is a shrunk group the trainer made: Close closes it

	// Report receives progress; nil for silence.
	Report report.Reporter
	// SavePath, when set, is where a checkpoint is written after every
	// epoch (by rank 0 only in a distributed run).
	SavePath string
	// SaveEvery, when positive, also writes the checkpoint at SavePath
	// every SaveEvery optimizer steps within an epoch, with the position
	// in the epoch: a run resumed from it continues at the next batch and
	// ends with the same weights, bit for bit, as one never interrupted
	// (same ranks and threads).
	SaveEvery int
	// AfterStep, when set, is called after every optimizer step.
	AfterStep func(step int64) error
	// OnFailure is what a data-parallel run does when a rank of the job
	// fails: OnFailureAbort (""), the default, returns the error; with
	// OnFailureShrink the ranks left shrink the job and go on (shrink.go).
	OnFailure string
	// Log, when set, receives notices (a shrink: who was lost, what was
	// redone).
	Log io.Writer

	times Times
	epoch int   // completed epochs
	step  int64 // optimizer steps taken
	last  report.Epoch
	// Where a checkpoint saved mid-epoch left the next epoch: batches
	// done, their loss sum and samples (see checkpoint.Meta.Batch).
	inEpoch epochProgress
	// The dropout layers' seeds before each replica made its own, and
	// their counters after the last optimizer step (a failed step's
	// forward is undone by a shrink).
	dropoutSeeds, stepCalls []uint64
	shrinks                 []checkpoint.Shrink
	// origin numbers the ranks of a shrunk job as the job first did (nil
	// before a shrink).
	origin []int
	// notes are lines for the run's description (Describe).
	notes []string
	// scaler scales the loss of an fp16 run (nil otherwise); params are
	// the trained parameters it unscales; skippedSteps counts the steps
	// it skipped for gradients that were not finite.
	scaler       *amp.Scaler
	params       []nn.Var
	skippedSteps int
	// resumedSync is the gradient sync's part of the checkpoint resumed
	// from, kept from resume until the sync exists.
	resumedSync syncState
	// beforeEpochState, when set (by tests), is called as every replica
	// is about to gather the gradient sync's state at the end of an epoch.
	beforeEpochState func(epoch int)
}

// epochProgress is how far an epoch got: skip positions of its order
// were done before it was dealt out to world replicas, each of which then
// did batch batches; loss sums lossN batch losses, seen counts this rank's
// samples.
type epochProgress struct {
	batch int
	loss  float64
	lossN int
	seen  int
	skip  int
	world int
	// offset counts the batches of the epoch done before it was last
	// dealt out, for progress reports.
	offset int
	// skipped counts the images left out of the epoch (SkipBadImages);
	// skippedFirst is the first one's error, naming its file (one is
	// reported; a dataset full of bad files must not fill memory with them).
	skipped      int
	skippedFirst string
}

// Option adds to what New sets up.
type Option func(*setup)

type setup struct {
	group  *comm.Group
	resume string
	init   string
}

// WithGroup makes the run one rank's part of a job over g (no-op for a
// group of one). With cfg.Pipeline stages P, the ranks form g.Size()/P
// pipelines (ranks r·P … r·P+P−1 are pipeline r, stage s = rank mod P)
// and only this rank's stage is built; otherwise every rank holds the
// whole model. Ranks that hold the same layers train on different shards
// of each epoch with their gradients averaged by DDP, starting from rank
// 0's weights; evaluation is combined across them, and only rank 0 (of
// each stage) saves checkpoints. Every rank of g must call New.
func WithGroup(g *comm.Group) Option { return func(s *setup) { s.group = g } }

// ResumeFrom restores the model, optimizer, schedule, step and epoch
// counters and dropout state from the checkpoint at path ("" for none), so
// Run continues exactly where the saved run was. A pipeline stage resumes
// from its own file, StagePath(path, stage); the stages must be cut as the
// saved ones were.
func ResumeFrom(path string) Option { return func(s *setup) { s.resume = path } }

// InitFrom starts training from the weights at path ("" for none) instead
// of the model's initialisation: a safetensors file or a state dict
// PyTorch's torch.save wrote (fine-tuning a model trained elsewhere).
// Every name must match; a tensor whose shape differs — the classifier of
// a model trained on another number of classes — keeps its initial values
// and the run's description names it. Not with pipelines; a run that
// resumes from its checkpoint does not load it.
func InitFrom(path string) Option { return func(s *setup) { s.init = path } }

// autocasting is a device backend opened to run its products in 16 bits
// (gpu.Options.Autocast).
type autocasting interface{ Autocast() string }

// autocast returns the backend the layers compute on at precision p
// (16-bit): the CPU's emulation wrapping a host backend, or a device
// backend itself when it was opened autocasting to p.
func autocast(be tensor.Backend, p amp.Precision) (tensor.Backend, error) {
	dev := tensor.DeviceOf(be)
	if dev == nil {
		return amp.NewAutocast(be, p)
	}
	if a, ok := be.(autocasting); !ok || a.Autocast() != string(p) {
		return nil, fmt.Errorf("precision %s on %s: the backend was not opened for it (open it with train.OpenBackend and this precision)", p, dev)
	}
	if p == amp.FP16 {
		return nil, fmt.Errorf("precision fp16 on %s: the loss scaler checks gradients on the host only so far; use bf16 (no loss scaling needed)", dev)
	}
	return be, nil
}

// New builds the model named in cfg with weights drawn from cfg.Seed (on a
// pipeline, this rank's stage only), its optimizer and schedule, and
// loaders for train and test (test may be nil).
func New(ctx context.Context, cfg Config, be tensor.Backend, train, test *data.Dataset, opts ...Option) (_ *Trainer, err error) {
	var s setup
	for _, o := range opts {
		o(&s)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec, err := zoo.Lookup(pipelineModel(cfg.Model, cfg.Pipeline, cfg.chunks()))
	if err != nil {
		return nil, err
	}
	if err := configureSpec(spec, cfg, len(train.Classes)); err != nil {
		return nil, err
	}
	if cfg.LabelSmoothing > 0 && spec.LogProbs {
		return nil, fmt.Errorf("--label-smoothing: model %s is trained with NLL loss on log-probabilities, which has no label smoothing (PyTorch's NLLLoss neither)", cfg.Model)
	}
	for _, d := range []*data.Dataset{train, test} {
		if d == nil {
			continue
		}
		if !spec.Accepts(d.Shape) {
			want := spec.Input
			size := fmt.Sprintf("%d×%d×%d", want[0], want[1], want[2])
			if spec.AnySize {
				size = fmt.Sprintf("%d×H×W (H, W ≥ 32)", want[0])
			}
			return nil, fmt.Errorf("model %s takes %s images; %s has %d×%d×%d", cfg.Model, size, d.Name, d.Shape[0], d.Shape[1], d.Shape[2])
		}
		if len(d.Classes) != spec.Classes {
			return nil, fmt.Errorf("model %s has %d outputs (--num-classes); %s has %d classes", cfg.Model, spec.Classes, d.Name, len(d.Classes))
		}
	}
	spec.Input = []int{train.Shape[0], train.Shape[1], train.Shape[2]} // (a model of any size takes the data's)
	if g := s.group; g != nil && g.Size() > 1 {
		same, err := runSettings(cfg, train, test, s.resume)
		if err == nil {
			err = checkSame(ctx, g, same, "start every rank with the same flags, data and checkpoint")
		}
		if err != nil {
			return nil, err
		}
	}
	t := &Trainer{cfg: cfg, be: be, train: train, test: test, sync: alone{}, job: s.group}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	replicas := s.group // the ranks that hold the same layers as this one
	if cfg.Pipeline > 1 {
		t.model = spec.Unbuilt()
		stage, dg, err := newPipelineStage(ctx, s.group, cfg, be, spec, t.model)
		if err != nil {
			return nil, err
		}
		t.compute, replicas = stage, dg
	} else {
		layers := be
		if p := cfg.precision(); p.Half() {
			// The layers' products in 16 bits; the loss in float32.
			if layers, err = autocast(be, p); err != nil {
				return nil, err
			}
			if p == amp.FP16 {
				t.scaler = amp.NewScaler()
			}
		}
		t.model = spec.Build(layers, modelSeed(cfg))
		loss := t.model.NewLoss(be)
		loss.Smoothing = float32(cfg.LabelSmoothing)
		t.compute = &wholeModel{net: t.model.Net, loss: loss}
	}
	if err := t.setTrained(t.compute.layer()); err != nil {
		return nil, err
	}
	tf := data.Plain(train)
	switch {
	case cfg.Augment && train.Streamed():
		tf = data.ImageNetAugmentation(train, cfg.Seed)
	case cfg.Augment && train.Shape[0] == 3:
		tf = data.CIFARAugmentation(train, cfg.Seed)
	}
	if t.trainLoader, err = data.NewLoader(train, cfg.BatchSize, tf, t.loaderConfig(4)); err != nil {
		return nil, fmt.Errorf("training data (--batch-size %d): %w", cfg.BatchSize, err)
	}
	if test != nil {
		if t.testLoader, err = data.NewLoader(test, cfg.TestBatchSize, data.Plain(test), t.loaderConfig(2)); err != nil {
			return nil, fmt.Errorf("test data (--test-batch-size %d): %w", cfg.TestBatchSize, err)
		}
	}
	switch {
	case s.resume != "":
		if err := t.resume(ctx, s.group, s.resume); err != nil {
			return nil, err
		}
		if s.init != "" {
			t.notes = append(t.notes, "Initial weights "+s.init+" not loaded: the run resumes from its checkpoint")
		}
	case s.init != "":
		note, err := loadInit(s.init, t.compute.layer(), cfg.Pipeline > 1)
		if err != nil {
			return nil, err
		}
		t.notes = append(t.notes, note)
	}
	if replicas != nil && replicas.Size() > 1 {
		if err := t.replicate(ctx, replicas); err != nil {
			return nil, err
		}
		if s.resume != "" {
			// The gradient sync's state (PowerSGD's) from the checkpoint;
			// why it started afresh instead, if it did, goes into the
			// run's description.
			note, err := t.sync.restore(t.resumedSync)
			if err != nil {
				return nil, err
			}
			if note != "" {
				t.notes = append(t.notes, "Resumed: "+note)
			}
		}
	}
	t.resumedSync = syncState{}
	return t, nil
}

// loaderConfig is the configuration of a loader keeping prefetch
// batches ready.
func (t *Trainer) loaderConfig(prefetch int) data.LoaderConfig {
	workers := t.cfg.Workers
	if workers == 0 {
		threads := t.cfg.Threads
		if threads == 0 {
			threads = runtime.GOMAXPROCS(0)
		}
		workers = max(runtime.GOMAXPROCS(0)-threads, 1)
	}
	return data.LoaderConfig{Prefetch: prefetch, Workers: workers, SkipBad: t.cfg.SkipBadImages}
}

// configureSpec sets the model's outputs (cfg.NumClasses, else the
// data's class count) and initialisation options.
func configureSpec(spec *zoo.Spec, cfg Config, dataClasses int) error {
	n := cfg.NumClasses
	if n == 0 {
		n = dataClasses
	}
	if n > 0 && n != spec.Classes {
		if err := spec.SetClasses(n); err != nil {
			return err
		}
	}
	if cfg.ZeroInitResidual {
		if !strings.HasPrefix(spec.Name, "resnet") {
			return fmt.Errorf("zero-init-residual: %s has no residual blocks", spec.Name)
		}
		spec.ZeroInitResidual = true
	}
	if cfg.Recompute {
		if !strings.HasPrefix(spec.Name, "resnet") {
			return fmt.Errorf("recompute: %s has no residual blocks to recompute", spec.Name)
		}
		spec.Recompute = true
	}
	return nil
}

// newPipelineStage forms this rank's pipeline and builds its stage of it;
// dg groups the ranks that hold the same stage in the other pipelines.
func newPipelineStage(ctx context.Context, g *comm.Group, cfg Config, be tensor.Backend, spec *zoo.Spec, m *zoo.Model) (_ *pipelineStage, dg *comm.Group, err error) {
	p := cfg.Pipeline
	if g == nil {
		return nil, nil, fmt.Errorf("pipeline: %d stages need a job of at least as many ranks (train.WithGroup)", p)
	}
	if g.Size() < p {
		return nil, nil, fmt.Errorf("pipeline: %d stages need a rank each, and this job has %d: start it with gorun -np %d (or a multiple of %d)", p, g.Size(), p, p)
	}
	if g.Size()%p != 0 {
		return nil, nil, fmt.Errorf("pipeline: %d ranks cannot form pipelines of %d stages: run a multiple of %d ranks (one pipeline per %d, trained data-parallel)", g.Size(), p, p, p)
	}
	replica, stage := g.Rank()/p, g.Rank()%p
	pg, err := g.Split(ctx, replica, stage)
	if err != nil {
		return nil, nil, fmt.Errorf("pipeline: forming pipeline %d: %w", replica, err)
	}
	if dg, err = g.Split(ctx, stage, replica); err != nil {
		return nil, nil, fmt.Errorf("pipeline: grouping the replicas of stage %d: %w", stage, err)
	}
	micro, seed, chunks := max(cfg.Microbatches, 1), modelSeed(cfg), cfg.chunks()
	plan, err := planStages(ctx, g, be, spec, seed, p, chunks, micro, max(cfg.BatchSize/micro, 1), cfg.Balance, cfg.Split)
	if err != nil {
		return nil, nil, err
	}
	// This stage's chunks: the model's chunks stage, stage+p, ….
	var parts []Chunk
	for v := range chunks {
		lo, hi := plan.Bounds(v*p + stage)
		in := spec.Input
		if lo > 0 {
			in = plan.Shapes[lo-1]
		}
		parts = append(parts, Chunk{Layer: spec.BuildPieces(be, seed, lo, hi), In: in, Out: plan.Shapes[hi-1]})
	}
	var pipe *Pipeline
	if chunks > 1 {
		pipe, err = NewInterleavedPipeline(pg, be, m, parts, micro)
	} else {
		pipe, err = NewPipeline(pg, be, m, parts[0].Layer, parts[0].In, parts[0].Out, micro, cfg.Schedule)
	}
	if err != nil {
		return nil, nil, err
	}
	return &pipelineStage{pipe: pipe, plan: plan}, dg, nil
}

// replicate makes this rank one of g's replicas: rank 0's parameters and
// buffers are broadcast and gradients are averaged by DDP. The whole
// model's replicas also draw their own dropout masks and, with
// cfg.SyncBatchNorm, share batch-norm statistics.
func (t *Trainer) replicate(ctx context.Context, g *comm.Group) error {
	return t.replicateFrom(ctx, g, 0)
}

// replicateFrom is replicate with root's parameters and buffers.
func (t *Trainer) replicateFrom(ctx context.Context, g *comm.Group, root int) error {
	whole, isWhole := t.compute.(*wholeModel)
	if isWhole {
		// Different dropout masks on different ranks, as each rank's own
		// data would get in separate processes.
		for i, d := range t.dropouts {
			d.Seed = t.dropoutSeeds[i] ^ uint64(g.Rank())*0x9e3779b97f4a7c15
		}
	}
	ddp, err := newDDP(ctx, g, t.compute.layer(), t.be, root)
	if err != nil {
		return err
	}
	if err := ddp.SetCompression(strings.ToLower(t.cfg.GradCompression)); err != nil {
		ddp.Close()
		return err
	}
	t.sync = &dataParallel{g: g, ddp: ddp, perBatch: !isWhole}
	if isWhole && t.cfg.SyncBatchNorm {
		sum := func(v []float64) {
			if whole.syncErr == nil {
				if err := comm.AllReduce(ctx, g, v, comm.Sum); err != nil {
					whole.syncErr = fmt.Errorf("sync batch norm: %w", err)
				}
			}
		}
		nn.Walk(whole.net, func(l nn.Layer) {
			if bn, ok := l.(*nn.BatchNorm2d); ok {
				bn.P.SumAcross = sum
			}
		})
	}
	return nil
}

// modelSeed is the seed the model's weights are drawn from.
func modelSeed(cfg Config) uint64 {
	return rand.New(rand.NewPCG(cfg.Seed, 0x6d6f64656c)).Uint64()
}

// setTrained makes l the layer this rank trains: its optimizer, schedule and
// dropout layers.
func (t *Trainer) setTrained(l nn.Layer) error {
	var err error
	t.params = nn.Params(l)
	if t.opt, err = newOptimizer(t.cfg, t.be, t.params); err != nil {
		return err
	}
	if t.cfg.NoDecayNormBias {
		// Batch norm's weights and biases, and every bias: the
		// one-dimensional parameters.
		o, ok := t.opt.(interface{ SetNoDecay(func(nn.Var) bool) })
		if !ok {
			return fmt.Errorf("optimizer %s cannot exempt parameters from weight decay", t.cfg.Optimizer)
		}
		o.SetNoDecay(func(v nn.Var) bool { return v.Value.Dims() == 1 })
	}
	if t.sched, err = newSchedule(t.cfg, t.opt); err != nil {
		return err
	}
	t.dropouts, t.dropoutSeeds = nil, nil
	nn.Walk(l, func(l nn.Layer) {
		if d, ok := l.(*nn.Dropout); ok {
			t.dropouts = append(t.dropouts, d)
			t.dropoutSeeds = append(t.dropoutSeeds, d.Seed)
		}
	})
	t.stepCalls = make([]uint64, len(t.dropouts))
	return nil
}

// unscale divides an fp16 run's gradients by the loss scale and moves the
// scale, reporting whether the optimizer may step (always, without a
// scaler): a step whose gradients overflowed is skipped, as
// GradScaler.step skips it. Every replica holds the same averaged
// gradients, so all decide alike.
func (t *Trainer) unscale() bool {
	if t.scaler == nil {
		return true
	}
	finite := t.scaler.Unscale(t.params)
	t.scaler.Update(finite)
	if !finite {
		t.skippedSteps++
	}
	return finite
}

// LossScale returns an fp16 run's loss scale now and the optimizer steps
// skipped so far for gradients that were not finite (0, 0 for other
// precisions).
func (t *Trainer) LossScale() (scale float32, skipped int) {
	if t.scaler == nil {
		return 0, 0
	}
	return t.scaler.Scale, t.skippedSteps
}

// Model returns the model being trained (on a pipeline stage, its
// description without layers).
func (t *Trainer) Model() *zoo.Model { return t.model }

// Config returns the configuration.
func (t *Trainer) Config() Config { return t.cfg }

// Times returns where the time went so far.
func (t *Trainer) Times() Times { return t.times }

// Epoch returns the number of completed epochs.
func (t *Trainer) Epoch() int { return t.epoch }

// Finished reports whether the run has trained all its epochs: Run has
// nothing to do (a run resumed at or past --epochs).
func (t *Trainer) Finished() bool { return t.epoch >= t.cfg.Epochs }

// Position returns the completed epochs and, for a run resumed from a
// checkpoint saved mid-epoch and not yet run, the batches of the next
// epoch already done.
func (t *Trainer) Position() (epoch, batch int) { return t.epoch, t.inEpoch.batch }

// Step returns the optimizer steps taken.
func (t *Trainer) Step() int64 { return t.step }

// Close stops the loaders and releases what the gradient sync holds.
func (t *Trainer) Close() {
	if t.sync != nil {
		t.sync.close()
	}
	if t.trainLoader != nil {
		t.trainLoader.Stop()
	}
	if t.testLoader != nil {
		t.testLoader.Stop()
	}
	if t.ownsJob {
		t.job.Close()
	}
}

// Group returns the job's group: the one the trainer was made with, or
// the smaller one it made when it shrank past lost ranks (nil alone).
func (t *Trainer) Group() *comm.Group { return t.job }

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

// Describe writes a summary of the run's setup.
func (t *Trainer) Describe(w io.Writer, backend string) {
	recompute := ""
	if t.cfg.Recompute {
		recompute = " (residual blocks recomputed in backward)"
	}
	fmt.Fprintf(w, "Model %s: %d parameters%s; backend %s\n", t.cfg.Model, t.compute.params(), recompute, backend)
	t.compute.describe(w)
	testN := 0
	if t.test != nil {
		testN = t.test.Len()
	}
	aug := ""
	switch {
	case t.cfg.Augment && t.train.Streamed():
		aug = fmt.Sprintf(", augmented (RandomResizedCrop %d, flip)", t.train.Shape[1])
	case t.cfg.Augment && t.train.Shape[0] == 3:
		aug = fmt.Sprintf(", augmented (random crop %d pad %d, flip)", t.train.Shape[1], data.CIFARAugmentation(t.train, 0).Pad)
	}
	fmt.Fprintf(w, "Data %s: %d training and %d test images%s\n", t.train.Name, t.train.Len(), testN, aug)
	for _, d := range []struct {
		split string
		ds    *data.Dataset
	}{{"training", t.train}, {"test", t.test}} {
		if d.ds != nil && d.ds.LeftOut != "" {
			fmt.Fprintf(w, "Data %s, %s split: %s\n", d.ds.Name, d.split, d.ds.LeftOut)
		}
	}
	if t.train.Streamed() {
		lc := t.loaderConfig(0)
		workers := fmt.Sprintf("%d workers", lc.Workers)
		if lc.Workers == 1 {
			workers = "1 worker"
		}
		fmt.Fprintf(w, "Images decoded from their files by %s; JPEG: %s\n", workers, t.trainLoader.Decoder())
	}
	epochs := fmt.Sprintf("%d epochs", t.cfg.Epochs)
	if t.cfg.Epochs == 1 {
		epochs = "1 epoch"
	}
	if t.Finished() {
		// A run resumed past its last epoch (a restart after the end, or
		// --epochs no larger than the checkpoint's).
		fmt.Fprintf(w, "Nothing to train: the run has trained its %s (--epochs %d); a larger --epochs trains on\n", epochs, t.cfg.Epochs)
	} else {
		what := epochs + " from epoch 1"
		switch first := t.epoch + 1; {
		case first == t.cfg.Epochs && first > 1: // resumed for the last
			what = fmt.Sprintf("epoch %d of %d", first, t.cfg.Epochs)
		case first > 1: // resumed
			what = fmt.Sprintf("epochs %d to %d of %d", first, t.cfg.Epochs, t.cfg.Epochs)
		}
		fmt.Fprintf(w, "Training %s, batch %d, %s, seed %d\n", what, t.cfg.BatchSize, t.cfg.describe(), t.cfg.Seed)
	}
	t.sync.describe(w, t)
	for _, n := range t.notes {
		fmt.Fprintln(w, n)
	}
}

// Run trains the remaining epochs, evaluating after each, reporting, and
// saving a checkpoint after each when SavePath is set (checked first: a
// checkpoint that cannot be written fails the run before it trains).
func (t *Trainer) Run(ctx context.Context) error {
	if t.SaveEvery < 0 {
		return fmt.Errorf("train: save every %d steps: want 0 (only at each epoch's end) or more", t.SaveEvery)
	}
	if t.SaveEvery > 0 && t.SavePath == "" {
		return fmt.Errorf("train: saving every %d steps needs a path to save to", t.SaveEvery)
	}
	if g := t.job; g != nil && g.Size() > 1 {
		if err := checkSame(ctx, g, t.runSchedule(), "start every rank with the same flags"); err != nil {
			return err
		}
	}
	if t.SavePath != "" && t.epoch < t.cfg.Epochs {
		// Before an epoch is spent, not after it; every rank hears it.
		var err error
		if t.sync.rank() == 0 {
			err = checkpoint.Probe(t.compute.checkpointPath(t.SavePath))
		}
		if err := shareVerdict(ctx, t.job, err); err != nil {
			return err
		}
	}
	start := time.Now()
	defer func() {
		// Also when the run fails: its last wait shows where it went.
		t.times.Total += time.Since(start)
		t.times.Comm, t.times.CommExposed = t.sync.commTimes()
	}()
	for t.epoch < t.cfg.Epochs {
		if err := t.runEpoch(ctx, t.epoch+1); err != nil {
			return err
		}
	}
	if t.Report != nil {
		return t.Report.Close()
	}
	return nil
}

func (t *Trainer) runEpoch(ctx context.Context, epoch int) error {
	epochStart := time.Now()
	timesBefore := t.times
	timesBefore.Comm, timesBefore.CommExposed = t.sync.commTimes()
	lr := t.opt.LR()
	// A run resumed mid-epoch skips the batches done: the sampler's order,
	// the augmentation (seeded per epoch and image) and dropout (its
	// counters were saved) are as they were.
	at := t.inEpoch
	t.inEpoch = epochProgress{}
	for i, d := range t.dropouts {
		t.stepCalls[i] = d.Calls
	}
	// A run that shrinks past a lost rank goes on from the furthest point
	// any rank left reached, all ranks from here: the rest of the epoch,
	// then what ends it.
	var e report.Epoch
	var seen int
	var trained time.Time // when the epoch's training (not evaluation) ended
	var sync []nn.Var
	for {
		var err error
		if e, seen, sync, err = t.finishEpoch(ctx, epoch, &at, &trained); err == nil {
			break
		}
		if err = t.shrinkPast(ctx, err, epoch, &at); err != nil {
			return err
		}
	}
	e.Seconds = trained.Sub(epochStart).Seconds()
	e.ImagesPerSec, e.LR = float64(seen)/e.Seconds, lr
	e.Times = t.epochTimes(timesBefore)
	if t.sched != nil {
		t.sched.Step()
	}
	t.epoch = epoch
	t.last = e
	if t.Report != nil {
		if err := t.Report.Epoch(e); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	if t.SavePath != "" && t.sync.rank() == 0 { // a pipeline's rank 0 is pipeline 0: each of its stages saves
		t0 := time.Now()
		if err := t.save(t.SavePath, sync); err != nil {
			return err
		}
		t.times.Checkpoint += time.Since(t0)
	}
	return nil
}

// epochSyncState gathers what the gradient sync keeps from step to step
// (PowerSGD's state) for the checkpoint that ends epoch: a collective,
// which every replica calls when the run saves; rank 0 gets the state.
func (t *Trainer) epochSyncState(ctx context.Context, epoch int) ([]nn.Var, error) {
	if t.SavePath == "" {
		return nil, nil
	}
	if t.beforeEpochState != nil {
		t.beforeEpochState(epoch)
	}
	t0 := time.Now()
	defer func() { t.times.Checkpoint += time.Since(t0) }()
	sync, err := t.sync.state(ctx)
	if err != nil {
		return nil, fmt.Errorf("epoch %d: %w", epoch, err)
	}
	return sync, nil
}

// finishEpoch trains the rest of the epoch after at, gathers the
// gradient sync's state for the epoch's checkpoint (epochSyncState),
// combines the epoch's loss and samples seen over the replicas (noting
// when in trained), and evaluates the model. It changes nothing that a
// retry after a shrink would repeat: reporting the epoch, the schedule
// and saving are the caller's.
//
// The state is gathered before the loss is combined: a gather is rooted,
// so a rank it does not wait for can pass it although a rank died there,
// and the all-reduce after it makes every replica see the loss in the
// same epoch (a replica that went on to the next epoch's first step
// would shrink at another point than rank 0).
func (t *Trainer) finishEpoch(ctx context.Context, epoch int, at *epochProgress, trained *time.Time) (report.Epoch, int, []nn.Var, error) {
	if err := t.trainShard(ctx, epoch, at); err != nil {
		return report.Epoch{}, 0, nil, err
	}
	if err := t.checkReplicas(ctx, fmt.Sprintf("after epoch %d", epoch)); err != nil {
		return report.Epoch{}, 0, nil, fmt.Errorf("epoch %d: %w", epoch, err)
	}
	sync, err := t.epochSyncState(ctx, epoch)
	if err != nil {
		return report.Epoch{}, 0, nil, err
	}
	// The epoch's loss, throughput and unreadable images over all
	// replicas.
	sums := []float64{at.loss / float64(max(at.lossN, 1)), float64(at.seen), float64(at.skipped)}
	if err := t.sync.sum(ctx, sums); err != nil {
		return report.Epoch{}, 0, nil, fmt.Errorf("epoch %d: combining the training loss: %w", epoch, err)
	}
	*trained = time.Now()
	e := report.Epoch{Epoch: epoch, GlobalStep: t.step, TrainLoss: sums[0] / float64(t.sync.world()), Skipped: int(sums[2])}
	if at.skipped > 0 {
		e.SkippedExample = at.skippedFirst
	}
	if t.test != nil {
		ev, err := t.Evaluate(ctx, t.test)
		if err != nil {
			return report.Epoch{}, 0, nil, err
		}
		e.TestLoss, e.TestCorrect, e.TestTotal, e.TestTop5, e.Classes = ev.Loss, ev.Correct, ev.Total, ev.Top5, len(ev.Confusion)
		e.TestSkipped = ev.Skipped
	}
	return e, int(sums[1]), sync, nil
}

// trainShard trains this rank's shard of what is left of the epoch
// after at, and moves at along with every optimizer step.
func (t *Trainer) trainShard(ctx context.Context, epoch int, at *epochProgress) error {
	t.compute.setTraining(true)
	t.opt.ZeroGrad()
	world := t.sync.world()
	if at.world != 0 && at.world != world {
		// Dealt out to another number of replicas: the positions they
		// did are skipped, the rest is dealt out anew.
		at.skip = min(at.skip+at.batch*t.cfg.BatchSize*at.world, t.train.Len())
		at.offset += at.batch
		at.batch = 0
	}
	at.world = world
	indices, err := t.epochOrder(epoch, world, at.skip)
	if err != nil {
		return err
	}
	accumulate := max(t.cfg.Accumulate, 1)
	batches := (len(indices) + t.cfg.BatchSize - 1) / t.cfg.BatchSize
	if at.batch > batches {
		return fmt.Errorf("epoch %d: the checkpoint resumed was saved after batch %d, but the epoch has %d batches here (other data or batch size?)", epoch, at.batch, batches)
	}
	if err := t.trainLoader.Start(epoch, indices[min(at.batch*t.cfg.BatchSize, len(indices)):]); err != nil {
		return err
	}
	defer t.trainLoader.Stop()
	start := time.Now()
	lossSum, lossN, seen := at.loss, at.lossN, at.seen
	seen0 := seen
	for batch := at.batch; ; batch++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		b, ok := t.trainLoader.Next()
		t.times.Data += time.Since(t0)
		if !ok {
			if err := t.trainLoader.Err(); err != nil {
				return fmt.Errorf("epoch %d batch %d: %w", epoch, batch, err)
			}
			if bad := t.trainLoader.Skipped(); len(bad) > 0 {
				if at.skipped == 0 {
					at.skippedFirst = bad[0]
				}
				at.skipped += len(bad)
			}
			break
		}
		// The optimizer steps after every accumulate batches and at the
		// epoch's end; gradients add up in between, without communication.
		update := (batch+1)%accumulate == 0 || batch == batches-1
		loss, err := t.compute.gradients(ctx, t, b, t.sync, update)
		if err != nil {
			return fmt.Errorf("epoch %d batch %d: %w", epoch, batch, err)
		}
		t1 := time.Now()
		if update {
			if t.unscale() {
				t.opt.Step()
			}
			t.opt.ZeroGrad()
			t.step++
		}
		t2 := time.Now()
		t.times.Optimizer += t2.Sub(t1)
		lossSum += float64(loss)
		lossN++
		position := min(at.skip+batch*t.cfg.BatchSize*world, t.train.Len())
		if err := t.reportStep(epoch, at.offset+batch, at.offset+batches, position, seen-seen0+b.Len(), loss, t2.Sub(start)); err != nil {
			return err
		}
		seen += b.Len()
		if !update {
			continue
		}
		*at = epochProgress{batch: batch + 1, loss: lossSum, lossN: lossN, seen: seen, skip: at.skip, world: world, offset: at.offset, skipped: at.skipped, skippedFirst: at.skippedFirst}
		for i, d := range t.dropouts {
			t.stepCalls[i] = d.Calls
		}
		if t.SaveEvery > 0 && t.step%int64(t.SaveEvery) == 0 {
			if err := t.saveInEpoch(ctx, *at); err != nil {
				return fmt.Errorf("epoch %d, step %d: %w", epoch, t.step, err)
			}
		}
		if t.AfterStep != nil {
			if err := t.AfterStep(t.step); err != nil {
				return err
			}
		}
	}
	return nil
}

// epochOrder returns the training samples this rank trains in epoch,
// in order, skip samples of the epoch having been trained before a
// shrink to world ranks. Shards are dealt out by shard: after a shrink
// their epoch starts over among the survivors (skip does not apply).
func (t *Trainer) epochOrder(epoch, world, skip int) ([]int, error) {
	if t.train.Shards != nil {
		return t.train.Shards.EpochOrder(t.cfg.Seed, epoch, t.sync.rank(), world)
	}
	sampler := data.Sampler{N: t.train.Len(), Shuffle: true, Seed: t.cfg.Seed, Rank: t.sync.rank(), World: world, Skip: skip}
	if err := sampler.Validate(); err != nil {
		return nil, err
	}
	return sampler.Indices(epoch), nil
}

// reportStep tells the reporter about a finished batch at position in
// the epoch's order (samples of all ranks before it); done is this
// rank's samples since elapsed began, the batch's included.
// rank's samples before it, n its size; counts are scaled to all ranks.
func (t *Trainer) reportStep(epoch, batch, batches, position, done int, loss float32, elapsed time.Duration) error {
	if t.Report == nil {
		return nil
	}
	err := t.Report.Step(report.Step{Epoch: epoch, Batch: batch, Batches: batches, Seen: position, Total: t.train.Len(),
		GlobalStep: t.step, Loss: float64(loss), LR: t.opt.LR(), Elapsed: elapsed,
		ImagesPerSec: float64(done*t.sync.world()) / elapsed.Seconds()})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Evaluate runs the model in evaluation mode over ds; in a distributed
// run every rank must call it.
func (t *Trainer) Evaluate(ctx context.Context, ds *data.Dataset) (Evaluation, error) {
	t0 := time.Now()
	defer func() { t.times.Eval += time.Since(t0) }()
	loader := t.testLoader
	if ds != t.test || loader == nil {
		var err error
		if loader, err = data.NewLoader(ds, t.cfg.TestBatchSize, data.Plain(ds), t.loaderConfig(2)); err != nil {
			return Evaluation{}, err
		}
	}
	return t.compute.evaluate(ctx, t, loader, ds, t.sync)
}
