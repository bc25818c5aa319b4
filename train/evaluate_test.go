package train

import (
	"slices"
	"testing"

	"github.com/gorun/gorun/model/nn"
)

// TestRank: a class is in the top 5 when fewer than 5 scores beat it;
// ties go its way.
func TestRank(t *testing.T) {
	scores := []float32{0.1, 0.9, 0.3, 0.3, 0.5, 0.2, 0.8, 0.05}
	for _, c := range []struct{ class, rank int }{{1, 0}, {6, 1}, {4, 2}, {2, 3}, {3, 3}, {5, 5}, {0, 6}, {7, 7}} {
		if got := rank(scores, c.class); got != c.rank {
			t.Errorf("rank of class %d = %d, want %d", c.class, got, c.rank)
		}
	}
}

// TestLabelSmoothingReachesTheLoss: the training loss smooths the labels
// as configured (the loss itself is compared with PyTorch's in model/nn).
func TestLabelSmoothingReachesTheLoss(t *testing.T) {
	cfg, trainSet, testSet := ddpSetupModel("resnet18", 1, 2, 1, 1)
	cfg.LabelSmoothing = 0.1
	tr := newTrainer(t, cfg, trainSet, testSet)
	if w, ok := tr.compute.(*wholeModel); !ok || w.loss.Smoothing != 0.1 {
		t.Fatalf("the training loss's smoothing is not 0.1: %#v", tr.compute)
	}
}

// TestNoDecayNormBias: with zero gradients, a step of SGD with weight
// decay shrinks the weights but leaves batch norm and biases alone.
func TestNoDecayNormBias(t *testing.T) {
	cfg, trainSet, testSet := ddpSetupModel("resnet18", 1, 2, 1, 1)
	cfg.Optimizer, cfg.Momentum, cfg.LR, cfg.WeightDecay, cfg.NoDecayNormBias = "sgd", 0, 0.1, 0.5, true
	tr := newTrainer(t, cfg, trainSet, testSet)
	params := nn.Params(tr.model.Net)
	tr.opt.ZeroGrad()
	before := make([][]float32, len(params))
	for i, p := range params {
		before[i] = slices.Clone(p.Value.Data)
	}
	tr.opt.Step()
	for i, p := range params {
		if same := slices.Equal(before[i], p.Value.Data); same != (p.Value.Dims() == 1) {
			t.Errorf("%s (%d dimensions): unchanged %v", p.Name, p.Value.Dims(), same)
		}
	}
}
