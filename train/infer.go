package train

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

// Classifier is a trained model ready for inference, with what it needs
// to prepare inputs and name outputs.
type Classifier struct {
	Model   *zoo.Model
	Classes []string
	Mean    []float32
	Std     []float32
	Dataset string
	// SkipBadImages leaves the images whose files cannot be decoded out
	// of an evaluation (Evaluation.Skipped counts them) instead of
	// stopping at the first with an error naming it.
	SkipBadImages bool
	be            tensor.Backend
}

// LoadClassifier loads the weights at path into the model named in its
// checkpoint metadata. model overrides or, for plain weights without
// metadata (e.g. exported from PyTorch), supplies the model name; labels
// then names the classes' dataset ("fashion-mnist", "mnist", "cifar10").
//
// A pipeline run's per-stage files (NAME.stage0.safetensors, …) load as
// one model when path is NAME.safetensors and only the stage files exist.
func LoadClassifier(path, model, labels string, be tensor.Backend) (*Classifier, error) {
	if err := checkpoint.RefuseState(path); err != nil {
		return nil, err
	}
	var m *zoo.Model
	var meta *checkpoint.Meta
	var err error
	if _, statErr := os.Stat(path); errors.Is(statErr, fs.ErrNotExist) && fileExists(StagePath(path, 0)) {
		if m, meta, err = loadStages(path, be); m != nil {
			model = m.Name
		}
	} else {
		m, meta, err = loadWhole(path, model, be)
		if m != nil {
			model = m.Name
		}
	}
	if err != nil {
		return nil, err
	}
	if err := nn.CheckFinite(m.Net); err != nil {
		return nil, fmt.Errorf("%s: %w: the model's outputs would be NaN or infinite (the weights of a run that diverged?)", path, err)
	}
	m.Net.SetTraining(false)
	nn.SetGradEnabled(m.Net, false)
	nn.Freeze(m.Net, true)
	c := &Classifier{Model: m, be: be}
	if meta != nil && (meta.Model == model || pipelineModel(meta.Model, meta.Stages, meta.Chunks) == model) {
		c.Classes, c.Mean, c.Std, c.Dataset = meta.Classes, meta.Mean, meta.Std, meta.Dataset
	}
	if labels != "" || c.Classes == nil {
		if labels == "" {
			labels = "cifar10"
			if m.Input[0] == 1 {
				labels = "mnist"
			}
		}
		names, ok := data.ClassNames(labels)
		if !ok {
			return nil, fmt.Errorf("labels %q: want fashion-mnist, mnist or cifar10", labels)
		}
		c.Classes, c.Dataset = names, labels
		if c.Mean == nil {
			c.Mean, c.Std = data.Normalization(labels)
		}
	}
	if len(c.Classes) != m.Classes {
		return nil, fmt.Errorf("%s: %d class names for a model with %d outputs", path, len(c.Classes), m.Classes)
	}
	if err := checkNormalization(c.Mean, c.Std, m.Input[0]); err != nil {
		return nil, fmt.Errorf("%s: checkpoint metadata: %w", path, err)
	}
	if meta != nil && meta.Input != nil && !slices.Equal(meta.Input, m.Input[:]) {
		return nil, fmt.Errorf("%s: checkpoint metadata: input %v for model %s, whose input is %v", path, meta.Input, model, m.Input)
	}
	return c, nil
}

// checkNormalization refuses an input normalisation that would make every
// prediction silently wrong: one mean and one standard deviation per
// input channel, all finite, every deviation positive.
func checkNormalization(mean, std []float32, channels int) error {
	if len(mean) != channels || len(std) != channels {
		return fmt.Errorf("mean %v and std %v for a model with %d input channels: want one of each per channel", mean, std, channels)
	}
	for i := range channels {
		m, s := float64(mean[i]), float64(std[i])
		if math.IsNaN(m) || math.IsInf(m, 0) {
			return fmt.Errorf("mean %v: channel %d is not finite", mean, i)
		}
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("std %v: channel %d is not a positive, finite number", std, i)
		}
	}
	return nil
}

// Prediction is one class and its probability.
type Prediction struct {
	Class       int
	Name        string
	Probability float64
}

// Classify returns, for each image (bytes shaped as the model's input),
// the top k classes by probability.
func (c *Classifier) Classify(images [][]byte, k int) ([][]Prediction, error) {
	if k < 1 {
		return nil, fmt.Errorf("classify: the top %d classes: want 1 or more", k)
	}
	in := c.Model.Input
	ds := &data.Dataset{Shape: [3]int(in), Classes: c.Classes, Mean: c.Mean, Std: c.Std, Labels: make([]int32, len(images))}
	for i, img := range images {
		if len(img) != ds.ImageSize() {
			return nil, fmt.Errorf("image %d has %d bytes, want %d×%d×%d", i, len(img), in[0], in[1], in[2])
		}
		ds.Images = append(ds.Images, img...)
	}
	loader, err := data.NewLoader(ds, 64, data.Plain(ds), data.LoaderConfig{Prefetch: 1})
	if err != nil {
		return nil, err
	}
	if err := loader.Start(0, data.Sampler{N: ds.Len(), World: 1}.Indices(0)); err != nil {
		return nil, err
	}
	defer loader.Stop()
	var out [][]Prediction
	var input *tensor.Tensor
	var host []float32
	for b, ok := loader.Next(); ok; b, ok = loader.Next() {
		y, err := c.Model.Net.Forward(onDevice(c.be, b.X, &input))
		if err != nil {
			return nil, err
		}
		if err := deviceErr(c.be); err != nil {
			return nil, err
		}
		scores := hostRows(y, &host)
		for i := range b.Len() {
			probs := probabilities(scores[i*c.Model.Classes:(i+1)*c.Model.Classes], c.Model.LogProbs)
			ps := make([]Prediction, len(probs))
			for j, p := range probs {
				ps[j] = Prediction{Class: j, Name: c.Classes[j], Probability: p}
			}
			sort.SliceStable(ps, func(a, b int) bool { return ps[a].Probability > ps[b].Probability })
			out = append(out, ps[:min(k, len(ps))])
		}
	}
	return out, nil
}

// probabilities turns a row of log-probabilities or logits into
// probabilities.
func probabilities(row []float32, logProbs bool) []float64 {
	p := make([]float64, len(row))
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for i, v := range row {
		if logProbs {
			p[i] = math.Exp(float64(v))
		} else {
			p[i] = math.Exp(float64(v) - mx)
		}
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// Evaluate runs the classifier over ds, whose classes must be the
// classifier's: no more of them and, for data whose classes are named by
// its folders (an image folder, shards), the same names in the same order
// (the model's first ones, or all).
func (c *Classifier) Evaluate(ctx context.Context, ds *data.Dataset, batch int) (Evaluation, error) {
	return c.EvaluateOn(ctx, nil, ds, batch)
}

// EvaluateOn is Evaluate with the work shared among the ranks of g (nil:
// this process alone): each evaluates its share of ds, and every rank
// returns the whole set's evaluation.
func (c *Classifier) EvaluateOn(ctx context.Context, g *comm.Group, ds *data.Dataset, batch int) (Evaluation, error) {
	if ds.Shape != [3]int(c.Model.Input) {
		return Evaluation{}, fmt.Errorf("model %s takes %v images; %s has %v", c.Model.Name, c.Model.Input, ds.Name, ds.Shape)
	}
	// The model's first classes only, or all, are scored right.
	if differ := classesDiffer(c.Classes, c.Model.Classes, ds, false, "the model's"); differ != "" {
		return Evaluation{}, fmt.Errorf("the model has %d classes (%s); %s: its labels would be scored as other classes; evaluate it on data of the model's classes",
			c.Model.Classes, someNames(c.Classes), differ)
	}
	loader, err := data.NewLoader(ds, batch, data.Transform{Mean: c.Mean, Std: c.Std}, data.LoaderConfig{Prefetch: 2, Workers: runtime.GOMAXPROCS(0), SkipBad: c.SkipBadImages})
	if err != nil {
		return Evaluation{}, err
	}
	if g == nil || g.Size() == 1 {
		return Evaluate(ctx, c.Model, c.be, loader, ds, nil)
	}
	// Shares of different weights or data would add up to a result of
	// neither.
	if err := checkSame(ctx, g, []comm.Setting{
		{Name: "the weights' digest", Value: fmt.Sprintf("%016x", weightsDigest(nn.Params(c.Model.Net)))},
		{Name: "test images", Value: fmt.Sprintf("%d of %d×%d×%d", ds.Len(), ds.Shape[0], ds.Shape[1], ds.Shape[2])},
	}, "every rank must evaluate the same weights on the same images: another file, or a stale copy on one node?"); err != nil {
		return Evaluation{}, fmt.Errorf("evaluate: %w", err)
	}
	sum := func(ctx context.Context, v []float64) error { return comm.AllReduce(ctx, g, v, comm.Sum) }
	return evaluateShare(ctx, c.Model, c.be, loader, ds, g.Rank(), g.Size(), sum)
}

// someNames lists up to five class names, and how many more there are.
func someNames(names []string) string {
	if len(names) <= 5 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, … %d in all", strings.Join(names[:5], ", "), len(names))
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// loadWhole loads one weights file into the model named by model or, when
// model is empty, by the file's metadata.
func loadWhole(path, model string, be tensor.Backend) (*zoo.Model, *checkpoint.Meta, error) {
	meta, f, err := checkpoint.ReadMeta(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("weights %s: %w", path, fs.ErrNotExist)
	}
	if err != nil && f == nil {
		return nil, nil, err // not weights at all: --model would not help
	}
	if err != nil && model == "" {
		return nil, nil, fmt.Errorf("%w; pass --model to load plain weights", err)
	}
	if meta != nil && model == "" {
		model = meta.Model
	}
	m, err := buildSaved(model, meta, be)
	if err != nil {
		return nil, nil, err
	}
	if err := nn.LoadState(f, m.Net); err != nil { // the file ReadMeta read: not read again
		if meta != nil && meta.Model != "" && meta.Model != model {
			return nil, nil, fmt.Errorf("%s: --model %s, but the checkpoint was trained as %s (without --model it is built as that): %w", path, model, meta.Model, err)
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, meta, nil
}

// buildSaved builds the zoo model named model as the checkpoint
// described by meta (nil: plain weights, the model's defaults) was
// trained: its class count and, for a model of any input size, its input.
func buildSaved(model string, meta *checkpoint.Meta, be tensor.Backend) (*zoo.Model, error) {
	spec, err := zoo.Lookup(model)
	if err != nil {
		return nil, err
	}
	if meta != nil && len(meta.Classes) > 0 {
		if err := spec.SetClasses(len(meta.Classes)); err != nil {
			return nil, err
		}
	}
	if meta != nil && spec.AnySize && len(meta.Input) == 3 {
		spec.Input = meta.Input
	}
	return spec.Build(be, rand.New(rand.NewPCG(0, 0)).Uint64()), nil
}

// pipelineModel is the zoo model a pipeline of stages, each holding
// chunks chunks (0 or 1: one), trains for model.
func pipelineModel(model string, stages, chunks int) string {
	if stages == 3 && chunks <= 1 && model == "cifarnet" {
		return "cifarnet-staged" // seed 000's three stages
	}
	return model
}

// loadStages loads a pipeline run's stage files into the whole model, each
// into the layers its Split says it holds.
func loadStages(path string, be tensor.Backend) (*zoo.Model, *checkpoint.Meta, error) {
	meta, _, err := checkpoint.ReadMeta(StagePath(path, 0))
	if err != nil {
		return nil, nil, err
	}
	if meta.Stages < 2 {
		return nil, nil, fmt.Errorf("%s is not a pipeline stage's file", StagePath(path, 0))
	}
	name := pipelineModel(meta.Model, meta.Stages, meta.Chunks)
	spec, err := zoo.Lookup(name)
	if err != nil {
		return nil, nil, err
	}
	m, err := buildSaved(name, meta, be)
	if err != nil {
		return nil, nil, err
	}
	pieces, chunks := len(spec.Pieces()), max(meta.Chunks, 1)
	if err := checkSplit(meta.Split, meta.Stages*chunks, pieces); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", StagePath(path, 0), err)
	}
	plan := &StagePlan{Split: meta.Split, Shapes: make([][]int, pieces)}
	for s := range meta.Stages {
		// The stage's chunks s, s+Stages, … side by side, as it saved them.
		var parts []nn.Child
		for v := range chunks {
			lo, hi := plan.Bounds(v*meta.Stages + s)
			parts = append(parts, chainChildren(spec.SelectPieces(m.Net.(*nn.Chain), lo, hi), 0)...)
		}
		sm, err := checkpoint.LoadWeights(StagePath(path, s), nn.NewChain(parts...))
		if err != nil {
			return nil, nil, fmt.Errorf("stage %d of %d: %w", s, meta.Stages, err)
		}
		if sm == nil || sm.Stage != s || sm.Stages != meta.Stages || sm.Chunks != meta.Chunks || sm.Step != meta.Step || !slices.Equal(sm.Split, meta.Split) {
			return nil, nil, fmt.Errorf("%s does not belong with %s (stage, stage count, chunks, split or step differ)", StagePath(path, s), StagePath(path, 0))
		}
	}
	return m, meta, nil
}

// SavedSplit returns where the pipeline run saved at path (its stage files
// NAME.stageS.safetensors) cut the model, for resuming it the same way; nil
// when path has no stage files.
func SavedSplit(path string) ([]int, error) {
	meta, _, err := checkpoint.ReadMeta(StagePath(path, 0))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return meta.Split, nil
}

// SaveWhole writes the classifier's model as one weights file (merging a
// pipeline's stages), with its metadata.
func (c *Classifier) SaveWhole(path string) error {
	meta := checkpoint.Meta{Model: c.Model.Name, Input: c.Model.Input, Dataset: c.Dataset, Classes: c.Classes, Mean: c.Mean, Std: c.Std}
	return checkpoint.Save(path, c.Model.Net, nil, meta)
}
