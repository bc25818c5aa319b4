package comm

import (
	"testing"
	"time"
)

// TestCrowdedText: rank 0's first line says when a host of the job runs
// more ranks than it has cores, and what its waits do then.
func TestCrowdedText(t *testing.T) {
	for _, tc := range []struct {
		crowded      bool
		local, cores int
		spin         time.Duration
		want         string
	}{
		{false, 2, 2, DefaultSpin, ""},
		{true, 4, 2, 0, "; 4 ranks share this host's 2 cores, taking turns: a waiting rank gives its core away at once instead of spinning"},
		{true, 4, 2, 10 * time.Microsecond, "; 4 ranks share this host's 2 cores, taking turns, and a waiting rank spins 10µs first (GORUN_SPIN) before giving its core away"},
		{true, 2, 8, DefaultSpin, "; another host of the job runs more ranks than it has cores: they take turns on them"},
	} {
		if got := crowdedText(tc.crowded, tc.local, tc.cores, tc.spin); got != tc.want {
			t.Errorf("crowdedText(%v, %d, %d, %v) = %q, want %q", tc.crowded, tc.local, tc.cores, tc.spin, got, tc.want)
		}
	}
}
