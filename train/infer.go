package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

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
	be      tensor.Backend
}

// LoadClassifier loads the weights at path into the model named in its
// checkpoint metadata. model overrides or, for plain weights without
// metadata (e.g. exported from PyTorch), supplies the model name; labels
// then names the classes' dataset ("fashion-mnist", "mnist", "cifar10").
func LoadClassifier(path, model, labels string, be tensor.Backend) (*Classifier, error) {
	meta, _, err := checkpoint.ReadMeta(path)
	if err != nil && model == "" {
		return nil, fmt.Errorf("%w; pass --model to load plain weights", err)
	}
	if meta != nil && model == "" {
		model = meta.Model
	}
	m, err := zoo.New(model, be, rand.New(rand.NewPCG(0, 0)))
	if err != nil {
		return nil, err
	}
	if _, err := checkpoint.LoadWeights(path, m.Net); err != nil {
		return nil, err
	}
	m.Net.SetTraining(false)
	c := &Classifier{Model: m, be: be}
	if meta != nil && meta.Model == model {
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
	return c, nil
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
	in := c.Model.Input
	ds := &data.Dataset{Shape: [3]int(in), Classes: c.Classes, Mean: c.Mean, Std: c.Std, Labels: make([]uint8, len(images))}
	for i, img := range images {
		if len(img) != ds.ImageSize() {
			return nil, fmt.Errorf("image %d has %d bytes, want %d×%d×%d", i, len(img), in[0], in[1], in[2])
		}
		ds.Images = append(ds.Images, img...)
	}
	loader, err := data.NewLoader(ds, 64, data.Plain(ds), 1)
	if err != nil {
		return nil, err
	}
	if err := loader.Start(0, data.Sampler{N: ds.Len(), World: 1}.Indices(0)); err != nil {
		return nil, err
	}
	defer loader.Stop()
	var out [][]Prediction
	for b, ok := loader.Next(); ok; b, ok = loader.Next() {
		y, err := c.Model.Net.Forward(b.X)
		if err != nil {
			return nil, err
		}
		for i := range b.Len() {
			probs := probabilities(y.Data[i*c.Model.Classes:(i+1)*c.Model.Classes], c.Model.LogProbs)
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

// Evaluate runs the classifier over ds (its labels must be the
// classifier's classes).
func (c *Classifier) Evaluate(ctx context.Context, ds *data.Dataset, batch int) (Evaluation, error) {
	if ds.Shape != [3]int(c.Model.Input) {
		return Evaluation{}, fmt.Errorf("model %s takes %v images; %s has %v", c.Model.Name, c.Model.Input, ds.Name, ds.Shape)
	}
	loader, err := data.NewLoader(ds, batch, data.Transform{Mean: c.Mean, Std: c.Std}, 2)
	if err != nil {
		return Evaluation{}, err
	}
	return Evaluate(ctx, c.Model, c.be, loader, ds, nil)
}
