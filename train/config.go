package train

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gorun/gorun/model/amp"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/train/checkpoint"
)

// Config is a training run's configuration; it is saved with checkpoints.
type Config struct {
	Model         string  `json:"model"`
	Epochs        int     `json:"epochs"`
	BatchSize     int     `json:"batch_size"`
	TestBatchSize int     `json:"test_batch_size"`
	Optimizer     string  `json:"optimizer"` // sgd, adam, adadelta
	LR            float64 `json:"lr"`
	Momentum      float64 `json:"momentum"` // SGD only
	WeightDecay   float64 `json:"weight_decay"`
	Scheduler     string  `json:"scheduler"` // none, step, cosine
	StepSize      int     `json:"step_size"` // StepLR's period in epochs
	Gamma         float64 `json:"gamma"`     // StepLR's factor
	Seed          uint64  `json:"seed"`
	// Augment applies random crop and flip to the training images: a
	// padded crop to 3-channel data held in memory (CIFAR), torchvision's
	// RandomResizedCrop to images read from files (an image folder).
	Augment bool `json:"augment"`
	// Threads is the compute backend's thread count (recorded: results are
	// bit-reproducible for a given count).
	Threads int `json:"threads"`
	// LogInterval is how many batches apart progress lines are written.
	LogInterval int `json:"log_interval"`
	// Accumulate is the number of batches whose gradients are added up
	// (without communication in a distributed run) before each optimizer
	// step; 0 or 1: step after every batch. Gradients are summed, as
	// PyTorch's no_sync accumulation does.
	Accumulate int `json:"accumulate,omitempty"`
	// SyncBatchNorm makes batch norm use the statistics of the whole
	// distributed batch (PyTorch's SyncBatchNorm) instead of each rank's.
	SyncBatchNorm bool `json:"sync_batch_norm,omitempty"`
	// GradCompression puts data-parallel gradients on the wire as 16-bit
	// floats ("bf16", "fp16"; "" or "none": float32), as PyTorch's
	// bf16/fp16 compression hooks: every rank's gradient is rounded to 16
	// bits, the average is taken in float32 and rounded once, and every
	// rank widens the same result back. Half the bytes per step.
	// "powersgd:R" (or "powersgd:R:START", compressing from step START
	// on) sends a rank-R approximation of each gradient matrix with error
	// feedback, as PyTorch's PowerSGD hook.
	GradCompression string `json:"grad_compression,omitempty"`
	// Precision is the arithmetic of matrix products and convolutions:
	// "fp32" (or ""), "tf32" (on a GPU), "bf16" or "fp16" (as
	// torch.autocast, emulated on the CPU; fp16 with a GradScaler).
	Precision string `json:"precision,omitempty"`
	// Pipeline splits the model into this many stages, one per rank
	// (GPipe); Microbatches cuts each batch for it.
	Pipeline     int    `json:"pipeline,omitempty"`
	Microbatches int    `json:"microbatches,omitempty"`
	Schedule     string `json:"schedule,omitempty"` // gpipe (default), 1f1b, zb, zb-h2 or interleaved
	// Chunks is, with the interleaved schedule, how many chunks of the
	// model each stage holds (0: 2): the model is cut into
	// Pipeline·Chunks chunks, stage s holding chunks s, s+Pipeline, ….
	Chunks int `json:"chunks,omitempty"`
	// Balance chooses how a pipeline's stages are cut when the model has
	// no stages of its own and Split is empty: "time" (default) measures
	// each layer's forward and backward on a microbatch and evens out the
	// stages' time; "params" evens out their parameter counts.
	Balance string `json:"balance,omitempty"`
	// Split gives explicit cut points: Split[i] is the index of the first
	// layer (zoo.Spec.Pieces) of stage i+1, or with chunks of chunk i+1
	// (Pipeline·Chunks − 1 increasing indices).
	Split []int `json:"split,omitempty"`
	// NumClasses is the model's outputs (0: the training data's class
	// count).
	NumClasses int `json:"num_classes,omitempty"`
	// ZeroInitResidual starts each residual block as the identity
	// (torchvision's zero_init_residual; ResNets only).
	ZeroInitResidual bool `json:"zero_init_residual,omitempty"`
	// Recompute checkpoints the model's residual blocks: backward
	// recomputes their activations instead of keeping them (ResNets;
	// activation checkpointing, less memory for more arithmetic).
	Recompute bool `json:"recompute,omitempty"`
	// Nesterov uses Nesterov momentum (SGD with a momentum only).
	Nesterov bool `json:"nesterov,omitempty"`
	// NoDecayNormBias exempts batch-norm parameters and biases (every
	// one-dimensional parameter) from weight decay, as Goyal et al.
	NoDecayNormBias bool `json:"no_decay_norm_bias,omitempty"`
	// WarmupEpochs raises the learning rate linearly from 1% over this
	// many epochs before the schedule starts (torchvision's reference
	// warm-up: LinearLR, then the schedule, as SequentialLR).
	WarmupEpochs int `json:"warmup_epochs,omitempty"`
	// LabelSmoothing is the training loss's label smoothing (as
	// torch.nn.CrossEntropyLoss's label_smoothing; cross-entropy models,
	// not pipelines).
	LabelSmoothing float64 `json:"label_smoothing,omitempty"`
	// Workers is the number of goroutines that decode and transform
	// images read from files (0: one per core the compute threads leave,
	// at least one). Results do not depend on it.
	Workers int `json:"workers,omitempty"`
	// SkipBadImages leaves image files that cannot be decoded out of
	// their batch, counted at the end of each epoch, instead of stopping
	// with an error naming the file.
	SkipBadImages bool `json:"skip_bad_images,omitempty"`
}

// Defaults returns the workshops' settings for a model: the MNIST net
// as PyTorch's MNIST example (seed 004: Adadelta, lr 1.0, StepLR γ 0.7,
// batch 64), CIFARNet as seed 000 (SGD with momentum 0.9, batch 128,
// augmentation), ResNet-18 as seed 002 (SGD lr 1e-3, batch 32), the
// ImageNet ResNets as seed 001's ResNet-50 (Adam lr 0.02, batch 256, 10
// epochs).
func Defaults(model string) (Config, error) {
	c := Config{Model: model, Epochs: 3, Scheduler: "none", StepSize: 1, Gamma: 0.7, Seed: 1, LogInterval: 10}
	switch model {
	case "mnist":
		c.BatchSize, c.Optimizer, c.LR, c.Scheduler = 64, "adadelta", 1.0, "step"
	case "cifarnet", "cifarnet-staged":
		c.BatchSize, c.Optimizer, c.LR, c.Momentum, c.Augment, c.Epochs = 128, "sgd", 0.01, 0.9, true, 10
	case "resnet18":
		c.BatchSize, c.Optimizer, c.LR, c.Augment, c.Epochs = 32, "sgd", 1e-3, true, 2
	case "resnet34", "resnet50", "resnet101", "resnet152":
		// Seed 001's ResNet-50 on ImageNet: Adam, lr 0.02, batch 256, 10
		// epochs.
		// Training images are augmented as torchvision's ImageNet
		// reference does (RandomResizedCrop and flip).
		c.BatchSize, c.Optimizer, c.LR, c.Epochs, c.Augment = 256, "adam", 0.02, 10, true
	default:
		return c, fmt.Errorf("train: no defaults for model %q", model)
	}
	// Evaluation batches as large as training ones keep the layers'
	// buffers (and the peak memory) at the training size.
	c.TestBatchSize = c.BatchSize
	return c, nil
}

// pipelineOnly names the first option set that only a pipeline uses
// ("" when none is).
func (c Config) pipelineOnly() string {
	switch {
	case c.Schedule != "":
		return "--schedule " + c.Schedule
	case c.Microbatches != 0:
		return fmt.Sprintf("--microbatches %d", c.Microbatches)
	case c.Chunks != 0:
		return fmt.Sprintf("--chunks %d", c.Chunks)
	case c.Balance != "":
		return "--balance " + c.Balance
	}
	return ""
}

// Validate reports settings that cannot work, naming the setting.
func (c Config) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.Epochs < 1:
		return fmt.Errorf("--epochs %d: want at least 1", c.Epochs)
	case c.NumClasses < 0:
		return fmt.Errorf("--num-classes %d: want at least 1 (or 0: the data's class count)", c.NumClasses)
	case c.WarmupEpochs < 0 || c.WarmupEpochs >= c.Epochs && c.WarmupEpochs > 0:
		return fmt.Errorf("--warmup-epochs %d with --epochs %d: want 0 or more, fewer than the epochs", c.WarmupEpochs, c.Epochs)
	case !(c.LabelSmoothing >= 0 && c.LabelSmoothing < 1):
		return fmt.Errorf("--label-smoothing %v: want at least 0 and below 1", c.LabelSmoothing)
	case c.LabelSmoothing > 0 && c.Pipeline > 1:
		return fmt.Errorf("--label-smoothing with --pipeline %d: not built for pipelines", c.Pipeline)
	case c.NoDecayNormBias && c.WeightDecay == 0:
		return fmt.Errorf("--no-decay-norm-bias without --weight-decay: there is no decay to exempt them from")
	case c.Nesterov && (strings.ToLower(c.Optimizer) != "sgd" || c.Momentum <= 0):
		return fmt.Errorf("--nesterov with --optimizer %s --momentum %v: Nesterov momentum is SGD's, with a momentum above 0", c.Optimizer, c.Momentum)
	case c.BatchSize < 1:
		return fmt.Errorf("--batch-size %d: want at least 1", c.BatchSize)
	case c.TestBatchSize < 1:
		return fmt.Errorf("--test-batch-size %d: want at least 1", c.TestBatchSize)
	case !(c.LR > 0) || !finite(c.LR):
		return fmt.Errorf("--lr %v: want a positive, finite learning rate", c.LR)
	case !(c.Momentum >= 0) || !finite(c.Momentum):
		return fmt.Errorf("--momentum %v: want a finite number, 0 or more", c.Momentum)
	case !(c.WeightDecay >= 0) || !finite(c.WeightDecay):
		return fmt.Errorf("--weight-decay %v: want a finite number, 0 or more", c.WeightDecay)
	case !validName(c.Optimizer, "sgd", "adam", "adadelta"):
		return fmt.Errorf("--optimizer %q: want sgd, adam or adadelta", c.Optimizer)
	case !validName(c.Scheduler, "", "none", "step", "cosine"):
		return fmt.Errorf("--scheduler %q: want none, step or cosine", c.Scheduler)
	case c.StepSize < 1 && strings.EqualFold(c.Scheduler, "step"):
		return fmt.Errorf("--step-size %d: want at least 1", c.StepSize)
	case !finite(c.Gamma) || (strings.EqualFold(c.Scheduler, "step") && !(c.Gamma > 0)):
		return fmt.Errorf("--gamma %v: want a positive, finite factor", c.Gamma)
	case c.Workers < 0:
		return fmt.Errorf("--workers %d: want 0 (one per core the compute threads leave) or more", c.Workers)
	case c.Threads < 0:
		return fmt.Errorf("--threads %d: want 0 (all the cores this rank has) or more", c.Threads)
	case c.LogInterval < 0:
		return fmt.Errorf("--log-interval %d: want 0 (the default) or more", c.LogInterval)
	case c.Accumulate < 0:
		return fmt.Errorf("--accumulate %d: want 1 or more (0: 1)", c.Accumulate)
	case c.Pipeline < 0:
		return fmt.Errorf("--pipeline %d: want 2 or more stages (0 or 1: none)", c.Pipeline)
	case c.Microbatches < 0:
		return fmt.Errorf("--microbatches %d: want 1 or more", c.Microbatches)
	case c.Schedule != "" && !slices.Contains(Schedules, c.Schedule):
		return fmt.Errorf("--schedule %q: want %s", c.Schedule, scheduleList())
	case c.Pipeline < 2 && c.pipelineOnly() != "":
		return fmt.Errorf("%s without --pipeline N: it applies to pipelines of 2 or more stages only", c.pipelineOnly())
	case c.Chunks < 0 || c.Chunks == 1:
		return fmt.Errorf("--chunks %d: want 2 or more chunks per stage", c.Chunks)
	case c.Chunks > 1 && c.Schedule != "interleaved":
		return fmt.Errorf("--chunks %d with --schedule %s: chunks are for the interleaved schedule", c.Chunks, cmp.Or(c.Schedule, "gpipe"))
	case c.Balance != "" && c.Balance != "time" && c.Balance != "params":
		return fmt.Errorf("--balance %q: want time or params", c.Balance)
	case len(c.Split) > 0 && len(c.Split) != c.Pipeline*c.chunks()-1:
		of := ""
		if c.chunks() > 1 {
			of = fmt.Sprintf(" of %d chunks each", c.chunks())
		}
		return fmt.Errorf("--split %v: a pipeline of %d stages%s needs %d split points", c.Split, c.Pipeline, of, max(c.Pipeline*c.chunks()-1, 0))
	case !validName(c.GradCompression, "", "none", "bf16", "fp16") && !strings.HasPrefix(strings.ToLower(c.GradCompression), "powersgd:"):
		return fmt.Errorf("--grad-compression %q: want none, bf16, fp16 or powersgd:RANK", c.GradCompression)
	case badPowerSGD(c.GradCompression) != nil:
		return badPowerSGD(c.GradCompression)
	case badPrecision(c.Precision) != nil:
		return badPrecision(c.Precision)
	case c.Pipeline > 1 && c.precision().Half():
		return fmt.Errorf("--precision %s with --pipeline %d: not built for pipelines", c.Precision, c.Pipeline)
	case c.Pipeline > 1 && c.Accumulate > 1:
		return fmt.Errorf("--accumulate %d with a pipeline: the microbatches already accumulate; raise the batch size instead", c.Accumulate)
	}
	return nil
}

// badPrecision returns the error in a precision's name, if any.
func badPrecision(name string) error {
	if _, err := amp.Parse(name); err != nil {
		return fmt.Errorf("--precision %q: want fp32, tf32, bf16 or fp16", name)
	}
	return nil
}

// precision is c.Precision parsed (FP32 when it does not parse: Validate
// reports that).
func (c Config) precision() amp.Precision {
	p, err := amp.Parse(c.Precision)
	if err != nil {
		return amp.FP32
	}
	return p
}

// validName reports whether v is one of names, ignoring case.
// badPowerSGD returns the error in a "powersgd:R[:START]" kind, if any.
func badPowerSGD(kind string) error {
	_, _, _, err := parsePowerSGD(strings.ToLower(kind))
	return err
}

func validName(v string, names ...string) bool {
	for _, n := range names {
		if strings.EqualFold(v, n) {
			return true
		}
	}
	return false
}

// newOptimizer builds the configured optimizer over params.
func newOptimizer(c Config, be tensor.Backend, params []nn.Var) (optim.Optimizer, error) {
	lr, wd := float32(c.LR), float32(c.WeightDecay)
	switch strings.ToLower(c.Optimizer) {
	case "sgd":
		return optim.NewSGD(be, params, tensor.SGDOptions{LR: lr, Momentum: float32(c.Momentum), WeightDecay: wd, Nesterov: c.Nesterov})
	case "adam":
		return optim.NewAdam(be, params, tensor.AdamOptions{LR: lr, WeightDecay: wd}), nil
	case "adadelta":
		return optim.NewAdadelta(be, params, tensor.AdadeltaOptions{LR: lr, WeightDecay: wd}), nil
	}
	return nil, fmt.Errorf("optimizer %q: want sgd, adam or adadelta", c.Optimizer)
}

// CutAsSaved refuses c for resuming the checkpoint at path, whose
// metadata m says how its run cut the model into pipeline stages, when c
// cuts it otherwise: a pipeline's checkpoint is a file per stage, each
// holding its stage's layers and their optimizer state.
func (c Config) CutAsSaved(path string, m *checkpoint.Meta) error {
	saved, stages := max(m.Stages, 1), max(c.Pipeline, 1)
	switch {
	case saved == 1 && stages > 1:
		return fmt.Errorf("--pipeline %d, but %s was saved by a run without a pipeline: resume it without --pipeline", stages, path)
	case stages != saved:
		return fmt.Errorf("--pipeline %d, but %s was saved by a pipeline of %d stages, a file for each: resume it with --pipeline %d, or start a new run from its weights (infer --weights %s --merge OUT, then --init OUT)", stages, path, saved, saved, path)
	}
	switch savedChunks, chunks := max(m.Chunks, 1), c.chunks(); {
	case savedChunks == chunks:
	case savedChunks == 1:
		return fmt.Errorf("--schedule interleaved, but %s was saved by a pipeline of one chunk per stage: resume it with its schedule (train --resume keeps it)", path)
	case chunks == 1:
		return fmt.Errorf("--schedule %s, but %s was saved by an interleaved pipeline of %d chunks per stage: resume it with --schedule interleaved", cmp.Or(c.Schedule, "gpipe"), path, savedChunks)
	default:
		return fmt.Errorf("--chunks %d, but %s was saved with %d chunks per stage: resume it with --chunks %d", chunks, path, savedChunks, savedChunks)
	}
	return nil
}

// chunks is how many chunks of the model each pipeline stage holds.
func (c Config) chunks() int {
	if c.Schedule != "interleaved" {
		return 1
	}
	return max(c.Chunks, 2)
}

// newSchedule builds the configured learning-rate schedule (nil for none).
func newSchedule(c Config, opt optim.Optimizer) (optim.Schedule, error) {
	var main optim.Schedule
	switch strings.ToLower(c.Scheduler) {
	case "", "none":
	case "step":
		main = optim.NewStepLR(opt, c.StepSize, c.Gamma)
	case "cosine":
		main = optim.NewCosineAnnealingLR(opt, c.Epochs-c.WarmupEpochs, 0)
	default:
		return nil, fmt.Errorf("scheduler %q: want none, step or cosine", c.Scheduler)
	}
	if c.WarmupEpochs > 0 {
		// As torchvision's reference: from 1% of the rate, linearly.
		return optim.NewWarmup(opt, c.WarmupEpochs, 0.01, main), nil
	}
	return main, nil
}

// describe summarises the optimisation settings in one phrase.
func (c Config) describe() string {
	s := fmt.Sprintf("%s lr %g", c.Optimizer, c.LR)
	if c.Momentum != 0 {
		s += fmt.Sprintf(" momentum %g", c.Momentum)
	}
	if c.Nesterov {
		s += " (Nesterov)"
	}
	if c.WeightDecay != 0 {
		s += fmt.Sprintf(" weight decay %g", c.WeightDecay)
		if c.NoDecayNormBias {
			s += " (not on batch norm and biases)"
		}
	}
	if c.WarmupEpochs > 0 {
		s += fmt.Sprintf(", linear warm-up over %d epochs", c.WarmupEpochs)
	}
	switch c.Scheduler {
	case "step":
		s += fmt.Sprintf(", StepLR(step %d, gamma %g)", c.StepSize, c.Gamma)
	case "cosine":
		s += fmt.Sprintf(", cosine annealing over %d epochs", c.Epochs-c.WarmupEpochs)
	}
	if c.LabelSmoothing > 0 {
		s += fmt.Sprintf(", label smoothing %g", c.LabelSmoothing)
	}
	switch p := c.precision(); p {
	case amp.BF16:
		s += ", bf16 autocast"
	case amp.FP16:
		s += ", fp16 autocast with loss scaling"
	}
	return s
}
