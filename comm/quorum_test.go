package comm

import (
	"errors"
	"strings"
	"testing"
)

// TestQuorum: the ranks that agreed in Shrink go on with more than half of
// the ranks not known to have ended, or half with the lowest of them;
// otherwise ErrMinority names the silent ranks.
func TestQuorum(t *testing.T) {
	for _, c := range []struct {
		name       string
		size       int
		ended, set []int
		want       string // "" to go on, else what the error says
	}{
		{"one rank died on this host", 4, []int{2}, []int{0, 1, 3}, ""},
		{"two of four ended", 4, []int{1, 2}, []int{0, 3}, ""},
		{"one left of four, three ended", 4, []int{0, 1, 2}, []int{3}, ""},
		{"a host of two silent, the lowest kept", 4, nil, []int{0, 1}, ""},
		{"a host of two silent, the lowest with it", 4, nil, []int{2, 3}, "ranks [2 3] agreed; ranks [0 1] went silent"},
		{"the lowest ended: the next lowest breaks the tie", 5, []int{0}, []int{1, 4}, ""},
		{"the lowest ended, the tie lost", 5, []int{0}, []int{2, 3}, "half of them with the lowest (rank 1)"},
		{"a minority", 5, nil, []int{3, 4}, "ranks [0 1 2] went silent"},
		{"a majority", 5, nil, []int{0, 3, 4}, ""},
		{"a member reported ended counts as alive", 4, []int{2}, []int{2, 3}, "ranks [2 3] agreed; ranks [0 1] went silent"},
		{"two ranks, rank 1 silent", 2, nil, []int{0}, ""},
		{"two ranks, rank 0 silent", 2, nil, []int{1}, "more than half of the 2 ranks not known to have ended"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := quorum(c.size, c.ended, c.set)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (!errors.Is(err, ErrMinority) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want ErrMinority saying %q", err, c.want)
			}
		})
	}
}

// TestQuorumNeverTwoGroups: for every world of up to 6 ranks, every way
// of placing each rank in one of two groups cut off from each other, in
// neither, or dead, and every set of the dead each group may know to have
// ended, at most one group passes quorum.
func TestQuorumNeverTwoGroups(t *testing.T) {
	for size := 1; size <= 6; size++ {
		place := make([]int, size) // 0: group A, 1: group B, 2: alive in neither, 3: dead
		for {
			var a, b, dead []int
			for r, p := range place {
				switch p {
				case 0:
					a = append(a, r)
				case 1:
					b = append(b, r)
				case 3:
					dead = append(dead, r)
				}
			}
			if len(a) > 0 && len(b) > 0 {
				for ea := 0; ea < 1<<len(dead); ea++ {
					if quorum(size, subset(dead, ea), a) != nil {
						continue
					}
					for eb := 0; eb < 1<<len(dead); eb++ {
						if quorum(size, subset(dead, eb), b) == nil {
							t.Fatalf("size %d: groups %v (knowing %v ended) and %v (knowing %v ended) both go on", size, a, subset(dead, ea), b, subset(dead, eb))
						}
					}
				}
			}
			i := 0
			for ; i < size && place[i] == 3; i++ {
				place[i] = 0
			}
			if i == size {
				break
			}
			place[i]++
		}
	}
}

// subset is the members of rs that mask's bits select.
func subset(rs []int, mask int) []int {
	var out []int
	for i, r := range rs {
		if mask&(1<<i) != 0 {
			out = append(out, r)
		}
	}
	return out
}
