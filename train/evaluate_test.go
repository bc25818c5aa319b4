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
