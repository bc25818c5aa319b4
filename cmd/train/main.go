// Command train trains one of the workshop CNNs: with no flags, the MNIST
// net on Fashion-MNIST (installed by apt-get install dataset-fashion-mnist)
// for 3 epochs, as PyTorch's MNIST example does, printing progress, test
// accuracy after each epoch and where the time went.
//
// Started as several ranks (gorun -np N train, srun train, torchrun- or
// mpirun-style environments), it trains data-parallel: every rank a shard
// of each epoch, gradients averaged across ranks (train.DDP); rank 0
// prints and saves.
//
//	train                                   # MNIST net, Fashion-MNIST
//	train --model cifarnet --data DIR       # CIFAR-10 binary batches
//	train --model cifarnet --synthetic      # generated CIFAR-shaped data
//	train --save net.safetensors            # checkpoint after every epoch
//	train --resume net.safetensors --epochs 5
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/gorun/gorun/cmd/internal/cli"
	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
	"github.com/gorun/gorun/train/report"
	"golang.org/x/sys/unix"
)

const fashionMNIST = "/usr/share/datasets/fashion-mnist"

// options are the flags that are not part of train.Config.
type options struct {
	device                                                            string
	tf32                                                              bool
	dataDir, save, resume, metrics, tensorboard, cpuprofile, progress string
	init                                                              string
	saveEvery                                                         int
	onFailure                                                         string
	timeline                                                          string
	synthetic, verbose                                                bool
	trainSamples, testSamples                                         int
	imageSize                                                         int
}

func main() {
	os.Exit(cli.Status(os.Stderr, "train", run(cli.SignalContext(), os.Args[1:], os.Stdout)))
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, o, err := parseFlags(args)
	if err != nil {
		return err
	}
	return runJob(ctx, cfg, o, stdout)
}

// parseFlags turns the command line into the run's configuration (flags
// not given come from the checkpoint resumed, else the model's defaults)
// and the other options.
func parseFlags(args []string) (train.Config, options, error) {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	var o options
	var cfg train.Config
	fs.StringVar(&cfg.Model, "model", "mnist", "model: mnist, cifarnet, resnet18 (CIFAR-10), resnet34, resnet50, resnet101, resnet152 (ImageNet)")
	fs.IntVar(&cfg.NumClasses, "num-classes", 0, "the model's outputs (default: the training data's class count)")
	fs.BoolVar(&cfg.Recompute, "recompute", false, "ResNets: keep only each residual block's input and output, the stem's input and, in Bottlenecks, the outputs of the convolutions costliest to recompute, for backward and recompute the rest there (activation checkpointing; the same results): ResNet-50 in less than half the memory, for part of a forward pass more per step")
	fs.BoolVar(&cfg.ZeroInitResidual, "zero-init-residual", false, "ResNets: start each residual block's last batch norm at zero weight, so the block starts as the identity (torchvision's zero_init_residual)")
	fs.StringVar(&o.dataDir, "data", "", "dataset directory: MNIST-format files (or the root torchvision's MNIST or FashionMNIST downloaded them to), CIFAR-10 (binary, or the Python version torchvision downloads), or an image folder (train/CLASS/*.jpg and val/CLASS/*.jpg, as torchvision's ImageFolder; JPEG or PNG) (default "+fashionMNIST+" when installed)")
	fs.BoolVar(&o.synthetic, "synthetic", false, "train on generated data shaped for the model instead of --data")
	fs.IntVar(&cfg.Epochs, "epochs", 0, "epochs to train (default per model: mnist 3, cifarnet 10, resnet18 2)")
	fs.IntVar(&cfg.BatchSize, "batch-size", 0, "training batch size (default per model: mnist 64, cifarnet 128, resnet18 32)")
	fs.IntVar(&cfg.TestBatchSize, "test-batch-size", 0, "evaluation batch size (default: the training batch size)")
	fs.Float64Var(&cfg.LR, "lr", 0, "learning rate (default per model: mnist 1.0, cifarnet 0.01, resnet18 0.001)")
	fs.StringVar(&cfg.Optimizer, "optimizer", "", "sgd, adam or adadelta (default per model: mnist adadelta, others sgd)")
	fs.Float64Var(&cfg.Momentum, "momentum", 0, "SGD momentum (default per model: cifarnet 0.9)")
	fs.BoolVar(&cfg.NoDecayNormBias, "no-decay-norm-bias", false, "no weight decay on batch-norm parameters and biases (Goyal et al.; PyTorch: a second parameter group with weight_decay 0)")
	fs.BoolVar(&cfg.Nesterov, "nesterov", false, "SGD with Nesterov momentum (as torch.optim.SGD(nesterov=True))")
	fs.IntVar(&cfg.WarmupEpochs, "warmup-epochs", 0, "raise the learning rate linearly from 1% over this many epochs, then follow --scheduler (as torchvision's reference: LinearLR, then the schedule)")
	fs.Float64Var(&cfg.LabelSmoothing, "label-smoothing", 0, "the training loss's label smoothing, 0 to below 1 (as torch.nn.CrossEntropyLoss(label_smoothing=...))")
	fs.Float64Var(&cfg.WeightDecay, "weight-decay", 0, "weight decay")
	fs.StringVar(&cfg.Scheduler, "scheduler", "", "learning-rate schedule: none, step or cosine (default per model: mnist step)")
	fs.IntVar(&cfg.StepSize, "step-size", 0, "StepLR period in epochs (default 1)")
	fs.Float64Var(&cfg.Gamma, "gamma", 0, "StepLR factor (default 0.7)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed: weights, shuffling, augmentation, dropout (default 1)")
	fs.BoolVar(&cfg.Augment, "augment", false, "random crop and flip of the training images: a padded crop for CIFAR data, torchvision's RandomResizedCrop for an image folder (default per model: on for cifarnet and the resnets)")
	fs.IntVar(&cfg.Workers, "workers", 0, "goroutines decoding and transforming an image folder's images (default: one per core the compute threads leave, at least 1)")
	fs.BoolVar(&cfg.SkipBadImages, "skip-bad-images", false, "leave image files that cannot be decoded out of their batch and count them at the end of each epoch (default: stop with an error naming the file)")
	fs.StringVar(&o.device, "device", "auto", "compute device: cuda (a GPU: LOCAL_RANK mod the visible ones), cpu, or auto (a GPU when the CUDA driver sees one, else the CPU)")
	fs.BoolVar(&o.tf32, "tf32", false, "on a GPU, let matrix products use TF32 (as torch.backends.cuda.matmul.allow_tf32)")
	fs.IntVar(&cfg.Threads, "threads", 0, "compute threads (default: GOMAXPROCS, which gorun sets to cores/ranks)")
	fs.IntVar(&cfg.LogInterval, "log-interval", 0, "batches between progress lines (default 10)")
	fs.IntVar(&o.trainSamples, "train-samples", 0, "use only the first N training images (0: all)")
	fs.IntVar(&o.imageSize, "image-size", 224, "an image folder's images are resized (shorter side) to N·8/7 and center-cropped to N×N, as torchvision's Resize(256), CenterCrop(224)")
	fs.IntVar(&o.testSamples, "test-samples", 0, "use only the first N test images (0: all)")
	fs.StringVar(&o.save, "save", "", "write a checkpoint here after every epoch (weights as safetensors, training state in PATH.train)")
	fs.StringVar(&o.resume, "resume", "", "continue the run saved in this checkpoint; auto: the one at --save's path if there is one, else start afresh (for restarts)")
	fs.StringVar(&o.init, "init", "", "start from these weights (safetensors, or a state dict PyTorch's torch.save wrote) instead of the model's initialisation, to fine-tune: names must match; tensors of another shape (a classifier trained on another number of classes) keep their initial values, named in the run's description; with --pipeline, each stage takes the tensors of its own layers; not loaded when a run resumes")
	fs.IntVar(&o.saveEvery, "save-every", 0, "with --save: also checkpoint every N optimizer steps within an epoch (--resume continues at the next batch, bit for bit)")
	fs.StringVar(&o.onFailure, "on-failure", "", "when a rank of the job fails: abort (the job ends), restart (the job ends for the launcher to start again, as gorun -max-restarts; implies --resume auto), or shrink (the others go on without it: data parallelism only; under gorun, run gorun -on-failure shrink); default $GORUN_ON_FAILURE, which gorun sets, else abort")
	fs.StringVar(&o.metrics, "metrics", "", "write JSON lines of step and epoch metrics to this file")
	fs.StringVar(&o.tensorboard, "tensorboard", "", "write TensorBoard event files into this directory")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a pprof CPU profile to this file")
	fs.StringVar(&o.progress, "progress", "auto", "bar, lines or auto (a bar on a terminal, but for the one Open MPI gives its ranks; lines otherwise)")
	fs.IntVar(&cfg.Accumulate, "accumulate", 0, "batches whose gradients are summed before each optimizer step (default 1)")
	fs.IntVar(&cfg.Pipeline, "pipeline", 0, "split the model into this many stages, one per rank (GPipe; the job must have as many ranks)")
	fs.IntVar(&cfg.Microbatches, "microbatches", 0, "with --pipeline: microbatches per batch (default 4)")
	fs.StringVar(&cfg.Schedule, "schedule", "", "with --pipeline: gpipe (all forwards, then all backwards), 1f1b (at most p microbatches' activations held), zb (1f1b with each backward split: the input gradient sent back at once, the weight gradients run while waiting for a neighbour; zero-bubble ZB-H1), zb-h2 (zb with 2p-1 microbatches per stage: the first stage runs further ahead and the others keep weight passes for the step's end, so the stages need not wait for each other between steps; zero-bubble ZB-H2) or interleaved (1f1b over --chunks chunks per stage, the model cut into stages×chunks pieces dealt round the stages: a smaller bubble for more messages); default gpipe")
	fs.IntVar(&cfg.Chunks, "chunks", 0, "with --schedule interleaved: chunks of the model per stage (default 2; stage s holds chunks s, s+P, …)")
	fs.StringVar(&cfg.Balance, "balance", "", "with --pipeline, for models without stages of their own: cut where the stages' measured forward+backward times are most even (time, the default) or their parameter counts (params)")
	fs.Func("split", "with --pipeline: cut before these layer indices instead (comma-separated, one per stage after the first, or with --chunks per chunk after the first; layers are the top-level ones, and a ResNet stage's residual blocks one by one; the run's description lists them)", func(v string) error {
		cfg.Split = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("%q is not a layer index: want whole numbers separated by commas", f)
			}
			cfg.Split = append(cfg.Split, n)
		}
		return nil
	})
	fs.StringVar(&o.timeline, "timeline", "", "with --pipeline: draw the last batch's schedule (every stage's forwards, backwards and weight passes) as an SVG here, and write it as a Chrome trace (chrome://tracing, Perfetto) beside it, the name ending in .json (a name ending in .json: the trace only)")
	fs.StringVar(&cfg.Precision, "precision", "fp32", "matrix products and convolutions in fp32, tf32 (on a GPU, as --tf32), bf16 or fp16 (as torch.autocast: 16-bit operands and results, float32 accumulation, batch norm, loss and optimizer in float32 on float32 weights; fp16 with GradScaler's loss scaling; emulated on the CPU, on a GPU's tensor cores for bf16)")
	fs.StringVar(&cfg.GradCompression, "grad-compression", "none", "in a distributed run, gradients travel as none (float32), bf16 or fp16 (averaged in float32 and rounded once; half the bytes), or powersgd:R[:START] (rank-R PowerSGD with error feedback from step START, default 0), as PyTorch's communication hooks")
	fs.BoolVar(&cfg.SyncBatchNorm, "sync-bn", false, "in a distributed run, batch norm uses the statistics of the whole batch across ranks (SyncBatchNorm)")
	fs.BoolVar(&o.verbose, "verbose", false, "in a distributed run, every rank prints its progress (default: rank 0 only)")
	cli.SetUsage(fs, "train [flags]",
		"Trains a workshop CNN on one process, or data-parallel when started as several ranks\n(gorun -np N train, srun, torchrun's or mpirun's variables): every rank a shard of\neach epoch, gradients averaged across ranks; rank 0 prints and saves.",
		"train                                      # the MNIST net on Fashion-MNIST, 3 epochs",
		"gorun -np 2 train                          # the same on two ranks",
		"train --model cifarnet --data DIR          # CIFAR-10 binary batches",
		"train --model resnet50 --data DIR          # an image folder (DIR/train/CLASS/*.jpg) or its shards",
		"train --save net.safetensors --resume auto # checkpoint each epoch; continue from the last one")
	if err := cli.ParseFlagsOnly(fs, args); err != nil {
		return cfg, o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.imageSize < 1 {
		return cfg, o, fmt.Errorf("--image-size %d: want at least 1", o.imageSize)
	}
	for name, n := range map[string]int{"train-samples": o.trainSamples, "test-samples": o.testSamples, "save-every": o.saveEvery} {
		if n < 0 {
			return cfg, o, fmt.Errorf("--%s %d: want 0 or more", name, n)
		}
	}
	if o.saveEvery > 0 && o.save == "" {
		return cfg, o, fmt.Errorf("--save-every %d needs --save PATH", o.saveEvery)
	}
	if err := checkOnFailure(&o, set); err != nil {
		return cfg, o, err
	}
	if o.resume == "auto" {
		if o.save == "" {
			return cfg, o, fmt.Errorf("--resume auto resumes from --save's path: give --save PATH")
		}
		o.resume = ""
		// (A pipeline's stage 0 killed while saving may hold only the
		// training state it kept from before: checkpoint.KeepPrevious.)
		for _, p := range append([]string{checkpoint.TrainPath(o.save)}, checkpoint.StateFiles(train.StagePath(o.save, 0))...) {
			if _, err := os.Stat(p); err == nil {
				o.resume = o.save
				break
			}
		}
	}
	cfg, err := resolveConfig(cfg, set, o.resume)
	if err == nil && o.onFailure == train.OnFailureShrink && cfg.Pipeline > 1 {
		err = fmt.Errorf("--on-failure shrink with --pipeline %d: a pipeline cannot go on without a lost rank (its stage is gone); use --on-failure restart", cfg.Pipeline)
	}
	return cfg, o, err
}

// checkOnFailure settles --on-failure: its default from the launcher
// (GORUN_ON_FAILURE), what restart implies (--resume auto), and what
// shrink needs of the launcher.
func checkOnFailure(o *options, set map[string]bool) error {
	from := "--on-failure"
	if o.onFailure == "" {
		o.onFailure, from = os.Getenv("GORUN_ON_FAILURE"), "GORUN_ON_FAILURE"
	}
	switch o.onFailure {
	case "":
		o.onFailure = train.OnFailureAbort
	case train.OnFailureAbort:
	case train.OnFailureRestart:
		if o.save == "" {
			return fmt.Errorf("%s restart: a restarted job resumes from the last checkpoint: give --save PATH", from)
		}
		if !set["resume"] {
			o.resume = "auto"
		}
	case train.OnFailureShrink:
		if os.Getenv("GORUN_LAUNCHER_PID") != "" && os.Getenv("GORUN_ON_FAILURE") != train.OnFailureShrink {
			return fmt.Errorf("--on-failure shrink under gorun needs gorun -on-failure shrink: else gorun stops every rank when one fails")
		}
	default:
		return fmt.Errorf("%s %q: want one of %s", from, o.onFailure, strings.Join(train.OnFailureModes, ", "))
	}
	return nil
}

// runJob runs one training job: this process's rank of it.
func runJob(ctx context.Context, cfg train.Config, o options, stdout io.Writer) error {
	// A single process unless the environment describes a job (gorun,
	// torchrun, Slurm, Open MPI).
	g, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	reporter := train.ReportingRank(cfg)
	// The reporting rank prints; after a shrink (--on-failure shrink) that
	// may be another process than at the start.
	var t *train.Trainer
	rank := func() int {
		if t != nil && t.Group() != nil {
			return t.Group().Rank()
		}
		return g.Rank()
	}
	if !o.verbose {
		stdout = &rankWriter{w: stdout, print: func() bool { return rank() == reporter }}
	}

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	if o.tf32 {
		switch cfg.Precision {
		case "", "fp32", "tf32":
			cfg.Precision = "tf32"
		default:
			return fmt.Errorf("--tf32 with --precision %s: choose one", cfg.Precision)
		}
	}
	trainSet, testSet, err := loadData(cfg.Model, o)
	if err != nil {
		return err
	}
	dev, err := train.OpenBackend(o.device, g.LocalRank(), cfg.Threads, cfg.Precision)
	if err != nil {
		return err
	}
	defer dev.Close()
	if dev.Note != "" {
		fmt.Fprintln(stdout, dev.Note)
	}
	be := dev.Backend
	t, err = train.New(ctx, cfg, be, trainSet, testSet, train.WithGroup(g), train.ResumeFrom(o.resume), train.InitFrom(o.init))
	if err != nil {
		return err
	}
	defer t.Close()
	if o.resume != "" {
		if epoch, batch := t.Position(); batch > 0 {
			fmt.Fprintf(stdout, "Resumed from %s in epoch %d after batch %d (step %d)\n", o.resume, epoch+1, batch, t.Step())
		} else {
			fmt.Fprintf(stdout, "Resumed from %s after epoch %d\n", o.resume, epoch)
		}
	}
	if n := os.Getenv("GORUN_RESTART"); n != "" && n != "0" {
		fmt.Fprintf(stdout, "Restart %s (GORUN_RESTART)\n", n)
	}
	t.SavePath, t.SaveEvery, t.OnFailure, t.Log = o.save, o.saveEvery, o.onFailure, os.Stderr
	if g.Rank() != reporter {
		o.metrics, o.tensorboard = "", "" // rank 0 writes them
	}
	resumedAt := int64(-1) // a fresh run's metrics start afresh
	if o.resume != "" && t.Step() > 0 {
		resumedAt = t.Step()
	}
	t.Report, err = reporters(o, cfg, stdout, resumedAt, g.Settings().Source)
	if err != nil {
		return err
	}
	t.Describe(stdout, be.Name())
	idle := t.Finished() // resumed with no epoch left: no times to show either
	runErr := t.Run(ctx)
	trained := t.Times().Total > 0 // a run refused before its first batch has no times to show
	if (runErr == nil || trained) && !idle {
		t.Times().Print(stdout)
	}
	if runErr != nil {
		if rss := train.PeakRSS(); rss > 0 && trained {
			fmt.Fprintf(stdout, "Peak memory (RSS) = %.0f MiB\n", float64(rss)/(1<<20))
		}
		// Interrupted: this rank's own signal, or another rank's abort
		// that came first (Ctrl-C reaches every rank of the terminal's
		// process group, and gorun forwards it too).
		if errors.Is(runErr, context.Canceled) || ctx.Err() != nil {
			runErr = fmt.Errorf("interrupted during epoch %d (the last checkpoint, if any, is intact)", t.Epoch()+1)
		}
		return runErr
	}
	if idle {
		return nil // nothing trained, measured or saved
	}
	if scale, skipped := t.LossScale(); scale > 0 {
		fmt.Fprintf(stdout, "Loss scale %g at the end; %d optimizer steps skipped for gradients that were not finite\n", scale, skipped)
	}
	if err := t.Summarize(ctx, stdout, o.timeline); err != nil {
		if o.onFailure != train.OnFailureShrink {
			return err
		}
		// The training is done and saved; only the summary is lost.
		fmt.Fprintf(os.Stderr, "train: the run's summary is incomplete: %v\n", err)
	}
	if o.save != "" {
		if cfg.Pipeline > 1 {
			fmt.Fprintf(stdout, "Saved each stage's weights to %s (stage s in %s)\n", train.StagePath(o.save, 0), strings.Replace(train.StagePath(o.save, 0), "stage0", "stageS", 1))
		} else {
			fmt.Fprintf(stdout, "Saved weights to %s (training state in %s)\n", o.save, checkpoint.TrainPath(o.save))
		}
	}
	return nil
}

// statusPipe returns the pipe gorun gives rank 0 for its progress bar
// when its output is a terminal (GORUN_STATUS_FD), gated like stdout;
// nil when there is none.
func statusPipe(stdout io.Writer) (io.Writer, error) {
	v := os.Getenv("GORUN_STATUS_FD")
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err == nil && fd < 3 {
		err = errors.New("not above stderr's 2")
	}
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("GORUN_STATUS_FD=%s: want an open file descriptor, as gorun passes (unset it to print progress lines): %w", v, err)
	}
	var w io.Writer = os.NewFile(uintptr(fd), "gorun status pipe")
	if r, ok := stdout.(*rankWriter); ok {
		w = &rankWriter{w: w, print: r.print}
	}
	return w, nil
}

// rankWriter passes on what is written while print says so.
type rankWriter struct {
	w     io.Writer
	print func() bool
}

func (r *rankWriter) Write(p []byte) (int, error) {
	if !r.print() {
		return len(p), nil
	}
	return r.w.Write(p)
}

// resumeMissing explains err, from reading the training state of the
// checkpoint at path, when that state is missing: path is the state
// itself, or weights without one (a file PyTorch or infer reads, for
// --init), or nothing at all. Other errors come back as they are.
func resumeMissing(path string, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	state := checkpoint.TrainPath(path)
	if base, ok := checkpoint.WeightsOf(path); ok {
		return fmt.Errorf("--resume %s: that is the training state of the checkpoint %s: resume from %s", path, base, base)
	}
	if _, statErr := os.Stat(path); errors.Is(statErr, fs.ErrNotExist) {
		return fmt.Errorf("--resume %s: no checkpoint there (neither %s nor its training state %s exists)", path, path, state)
	}
	if _, f, readErr := checkpoint.ReadMeta(path); f == nil {
		return fmt.Errorf("--resume %s: %w", path, readErr) // not weights either: --init would not read it
	}
	return fmt.Errorf("--resume %s: weights without a run's training state (%s, which --save writes beside them, is missing): to start a new run from these weights, use --init %s", path, state, path)
}

// resolveConfig fills in the flags not given: from the checkpoint being
// resumed, else from the model's defaults.
func resolveConfig(flags train.Config, set map[string]bool, resume string) (train.Config, error) {
	var base train.Config
	var saved *checkpoint.Meta // the resumed run's metadata
	if resume != "" {
		m, err := checkpoint.ReadTrainMeta(resume)
		if err != nil {
			// A pipeline run: its stages' files.
			stage0 := train.StagePath(resume, 0)
			for _, f := range checkpoint.StateFiles(stage0) {
				if sm, serr := checkpoint.ReadStateMeta(stage0, f); serr == nil {
					m, err = sm, nil
					break
				}
			}
		}
		if err != nil {
			return base, resumeMissing(resume, err)
		}
		if err := jsonUnmarshal(m.Config, &base); err != nil {
			return base, fmt.Errorf("%s: configuration: %w", resume, err)
		}
		saved = m
		if m.Stages > 1 {
			base.Split = m.Split // cut as the saved stages were
		}
		if set["model"] && flags.Model != base.Model {
			return base, fmt.Errorf("--model %s, but %s was trained as %s", flags.Model, resume, base.Model)
		}
		if set["optimizer"] && flags.Optimizer != base.Optimizer {
			return base, fmt.Errorf("--optimizer %s, but %s was trained with %s, whose state another optimizer cannot take up: resume with --optimizer %s, or start a new run from its weights with --init %s", flags.Optimizer, resume, base.Optimizer, base.Optimizer, resume)
		}
	} else {
		var err error
		if base, err = train.Defaults(flags.Model); err != nil {
			return base, fmt.Errorf("--model %q: want one of %v", flags.Model, zoo.Names())
		}
	}
	override := map[string]func(){
		"epochs": func() { base.Epochs = flags.Epochs }, "batch-size": func() { base.BatchSize = flags.BatchSize },
		"test-batch-size": func() { base.TestBatchSize = flags.TestBatchSize }, "lr": func() { base.LR = flags.LR },
		"optimizer": func() { base.Optimizer = flags.Optimizer }, "momentum": func() { base.Momentum = flags.Momentum },
		"weight-decay": func() { base.WeightDecay = flags.WeightDecay }, "scheduler": func() { base.Scheduler = flags.Scheduler },
		"step-size": func() { base.StepSize = flags.StepSize }, "gamma": func() { base.Gamma = flags.Gamma },
		"seed": func() { base.Seed = flags.Seed }, "augment": func() { base.Augment = flags.Augment },
		"threads": func() { base.Threads = flags.Threads }, "log-interval": func() { base.LogInterval = flags.LogInterval },
		"accumulate": func() { base.Accumulate = flags.Accumulate }, "sync-bn": func() { base.SyncBatchNorm = flags.SyncBatchNorm },
		"grad-compression": func() { base.GradCompression = flags.GradCompression }, "precision": func() { base.Precision = flags.Precision },
		"pipeline": func() { base.Pipeline = flags.Pipeline }, "schedule": func() { base.Schedule = flags.Schedule }, "chunks": func() { base.Chunks = flags.Chunks }, "microbatches": func() { base.Microbatches = flags.Microbatches },
		"balance": func() { base.Balance = flags.Balance }, "split": func() { base.Split = flags.Split },
		"num-classes": func() { base.NumClasses = flags.NumClasses }, "zero-init-residual": func() { base.ZeroInitResidual = flags.ZeroInitResidual },
		"recompute": func() { base.Recompute = flags.Recompute },
		"nesterov":  func() { base.Nesterov = flags.Nesterov }, "label-smoothing": func() { base.LabelSmoothing = flags.LabelSmoothing },
		"warmup-epochs": func() { base.WarmupEpochs = flags.WarmupEpochs }, "no-decay-norm-bias": func() { base.NoDecayNormBias = flags.NoDecayNormBias },
		"workers": func() { base.Workers = flags.Workers }, "skip-bad-images": func() { base.SkipBadImages = flags.SkipBadImages },
	}
	for name, apply := range override {
		if set[name] {
			apply()
		}
	}
	if saved != nil {
		if err := base.CutAsSaved(resume, saved); err != nil {
			return base, err
		}
	}
	if err := base.Validate(); err != nil {
		return base, fmt.Errorf("invalid settings: %w", err)
	}
	if resume != "" && !set["workers"] {
		base.Workers = 0 // the saved count fits the machine it was saved on
	}
	if resume != "" && !set["threads"] {
		base.Threads = 0 // likewise
	}
	if base.Threads <= 0 {
		// gorun gives each of N ranks on a host GOMAXPROCS = cores/N.
		base.Threads = runtime.GOMAXPROCS(0)
	}
	if base.Pipeline > 1 && base.Microbatches == 0 {
		base.Microbatches = 4
	}
	if err := base.Validate(); err != nil {
		return base, fmt.Errorf("invalid settings: %w", err)
	}
	return base, nil
}

// loadData returns the training and test sets the options ask for.
func loadData(model string, o options) (*data.Dataset, *data.Dataset, error) {
	format := syntheticFormat(model)
	var trainSet, testSet *data.Dataset
	var err error
	if o.synthetic {
		if o.dataDir != "" {
			return nil, nil, fmt.Errorf("--synthetic and --data %s: choose one", o.dataDir)
		}
		nTrain, nTest := 10000, 2000
		if o.trainSamples > 0 {
			nTrain = o.trainSamples
		}
		if o.testSamples > 0 {
			nTest = o.testSamples
		}
		if trainSet, err = data.Synthetic(format, nTrain, 1); err != nil {
			return nil, nil, err
		}
		if testSet, err = data.Synthetic(format, nTest, 2); err != nil {
			return nil, nil, err
		}
		return trainSet, testSet, nil
	}
	dir := o.dataDir
	if dir == "" {
		dir = defaultDataDir(format)
		if dir == "" {
			return nil, nil, noDataError(model, format)
		}
	}
	if trainSet, testSet, err = data.LoadSized(dir, o.imageSize); err != nil {
		if o.dataDir != "" {
			return nil, nil, fmt.Errorf("--data: %w", err)
		}
		return nil, nil, err
	}
	return trainSet.Head(o.trainSamples), testSet.Head(o.testSamples), nil
}

func defaultDataDir(format data.Format) string {
	candidates := []string{fashionMNIST}
	if format == data.FormatCIFAR10 {
		// The binary version, then the Python version where
		// torchvision.datasets.CIFAR10(root="data", download=True) puts it.
		candidates = []string{"data/cifar-10-batches-bin", "data/cifar-10-binary.tar.gz", "cifar-10-batches-bin", "cifar-10-binary.tar.gz",
			"data/cifar-10-batches-py", "data/cifar-10-python.tar.gz", "cifar-10-batches-py", "cifar-10-python.tar.gz"}
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	return ""
}

func noDataError(model string, format data.Format) error {
	if format == data.FormatMNIST {
		return fmt.Errorf("no data: %s is not installed. Install Fashion-MNIST (apt-get install dataset-fashion-mnist), pass --data DIR with MNIST-format files, or train on generated data with --synthetic", fashionMNIST)
	}
	return fmt.Errorf("no data for --model %s: pass --data with CIFAR-10's binary version (a directory of data_batch_*.bin and test_batch.bin, or cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html) or its Python version (the directory torchvision.datasets.CIFAR10 downloaded it to), or train on generated data with --synthetic", model)
}

// reporters sets up progress output and the metrics writers; a run
// resumed from a checkpoint after step resumedAt (-1: a fresh run)
// continues its metrics and TensorBoard logs from that step. source is
// where the job's ranks came from (comm.Settings.Source).
func reporters(o options, cfg train.Config, stdout io.Writer, resumedAt int64, source string) (report.Reporter, error) {
	var out report.Reporter
	bar := o.progress == "bar"
	if o.progress == "auto" {
		w := stdout
		if r, ok := w.(*rankWriter); ok {
			w = r.w
		}
		f, ok := w.(*os.File)
		// Open MPI gives its ranks a terminal of its own whatever mpirun
		// writes to (a job's log file, often): a bar there would fill the
		// log with its redraws.
		bar = ok && report.IsTerminal(f) && source != "openmpi"
	} else if o.progress != "bar" && o.progress != "lines" {
		return nil, fmt.Errorf("--progress %q: want bar, lines or auto", o.progress)
	}
	var status io.Writer
	if o.progress == "auto" {
		var err error
		if status, err = statusPipe(stdout); err != nil {
			return nil, err
		}
	}
	switch {
	case status != nil:
		// Under gorun on a terminal: gorun draws the bar.
		out = &report.Progress{W: stdout, Bar: status, Epochs: cfg.Epochs}
	case bar:
		out = &report.Progress{W: stdout, Epochs: cfg.Epochs}
	default:
		out = &report.LogLines{W: stdout, Interval: cfg.LogInterval}
	}
	rs := report.Multi{out}
	if o.metrics != "" {
		j, err := report.ContinueJSONL(o.metrics, cfg.LogInterval, resumedAt)
		if err != nil {
			return nil, fmt.Errorf("--metrics: %w", err)
		}
		rs = append(rs, j)
	}
	if o.tensorboard != "" {
		tb, err := report.ContinueTensorBoard(o.tensorboard, cfg.LogInterval, resumedAt)
		if err != nil {
			return nil, fmt.Errorf("--tensorboard: %w", err)
		}
		rs = append(rs, tb)
	}
	return rs, nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// syntheticFormat is the shape of the data --synthetic makes for a model:
// MNIST's for the MNIST net, ImageNet's for the models whose nominal input
// is ImageNet's 224×224 crops, CIFAR-10's otherwise.
func syntheticFormat(model string) data.Format {
	if model == "mnist" {
		return data.FormatMNIST
	}
	if s, err := zoo.Lookup(model); err == nil && len(s.Input) == 3 && s.Input[1] == 224 {
		return data.FormatImageNet
	}
	return data.FormatCIFAR10
}
