package train

import "testing"

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
