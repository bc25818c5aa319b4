package train

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train/data"
)

// Evaluation is a model's result on a dataset.
type Evaluation struct {
	Loss    float64 // mean per sample
	Correct int
	// Top5 counts the samples whose class is among the 5 highest scores
	// (fewer classes: all of them).
	Top5  int
	Total int
	// Skipped counts the images left out of Total because their files
	// could not be read (Config.SkipBadImages).
	Skipped int
	// Confusion[true][predicted] counts samples.
	Confusion [][]int
	// Shares counts, where ranks shared the evaluation, the samples each
	// rank scored (nil for one process).
	Shares []int
}

// Accuracy returns Correct/Total.
func (e Evaluation) Accuracy() float64 { return float64(e.Correct) / float64(max(e.Total, 1)) }

// Evaluate runs m in evaluation mode, gradients off, weights frozen
// (nn.Freeze: prepared once for the whole evaluation), over the images of
// ds at indices (every image when nil) through loader, and leaves it so.
func Evaluate(ctx context.Context, m *zoo.Model, be tensor.Backend, loader *data.Loader, ds *data.Dataset, indices []int) (Evaluation, error) {
	m.Net.SetTraining(false)
	nn.SetGradEnabled(m.Net, false)
	nn.Freeze(m.Net, true)
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
			row := scores[i*m.Classes : (i+1)*m.Classes]
			pred := argmax(row)
			ev.Confusion[label][pred]++
			if pred == int(label) {
				ev.Correct++
			}
			if rank(row, int(label)) < 5 {
				ev.Top5++
			}
		}
		ev.Total += b.Len()
	}
	if err := loader.Err(); err != nil {
		return ev, fmt.Errorf("evaluate: %w", err)
	}
	ev.Skipped = len(loader.Skipped())
	ev.Loss = lossSum / float64(max(ev.Total, 1))
	return ev, nil
}

// rank counts the scores above v[i] (ties in i's favour).
func rank(v []float32, i int) int {
	n := 0
	for _, x := range v {
		if x > v[i] {
			n++
		}
	}
	return n
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
