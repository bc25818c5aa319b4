package commtest

import "testing"

// TestEndsOK: the library's diagnostics after a rank's "OK" are passed
// over; any other line after it, or no "OK", is not a finished rank.
func TestEndsOK(t *testing.T) {
	for _, c := range []struct {
		lines []string
		want  bool
	}{
		{nil, false},
		{[]string{"OK"}, true},
		{[]string{"SHRUNK to [1 3]", "OK", "comm: rank 0 reaches ranks [1] through shared memory"}, true},
		{[]string{"OK", "FAILED at step 3"}, false},
		{[]string{"comm: rank 0 reaches ranks [1]"}, false},
		{[]string{"SHRUNK to [1 3]", "comm: rank 0 reaches ranks [1]"}, false},
	} {
		if got := EndsOK(c.lines); got != c.want {
			t.Errorf("EndsOK(%q) = %v, want %v", c.lines, got, c.want)
		}
	}
}
