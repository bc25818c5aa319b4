package comm_test

import (
	"context"
	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"regexp"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm/launch"
)

// TestShrink: 4 ranks run all-reduces; rank 2 is SIGKILLed; the others
// shrink the group, agree on the same members, and go on, every result
// checked against the sum over the ranks that remain. Also: a second rank
// dies during the agreement (after it sent its input, and while
// it coordinates, having told only one member), or while the new group is
// connected; a rank that is only slow is kept.
func TestShrink(t *testing.T) {
	for _, c := range []struct {
		name     string
		env      []string
		kept     string // the members the survivors agree on, by original rank
		survivor []int
		leftOut  bool // rank 1 gets ErrExcluded
	}{
		{"one lost", nil, "[0 1 3]", []int{0, 1, 3}, false},
		{"one lost over TCP", []string{"GORUN_TRANSPORT=tcp"}, "[0 1 3]", []int{0, 1, 3}, false},
		{"second lost after its input", []string{"SHRINK_SLOW=3:300ms", "SHRINK_DIE=3:input sent"}, "[0 1]", []int{0, 1}, false},
		{"coordinator lost having told one", []string{"SHRINK_DIE=0:estimate sent to one"}, "[1 3]", []int{1, 3}, false},
		{"second lost while connecting", []string{"SHRINK_DIE=1:agreed"}, "[0 3]", []int{0, 3}, false},
		{"slow rank kept", []string{"SHRINK_SLOW=1:2s"}, "[0 1 3]", []int{0, 1, 3}, false},
		// Rank 1 comes after the others' deadline (GORUN_TIMEOUT): left
		// out, it learns so from what they sent, and does not go on alone.
		{"late rank left out", []string{"SHRINK_SLOW=1:4s", "GORUN_TIMEOUT=2s"}, "[0 3]", []int{0, 3}, true},
		// Rank 1 is stopped (SIGSTOP) for 18 s: answering nothing, it is
		// given up on after agreeSilence, long before GORUN_TIMEOUT (20 s).
		{"stopped rank given up on", []string{"SHRINK_STOP=1:18s"}, "[0 3]", []int{0, 3}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.name != "one lost" && c.name != "coordinator lost having told one" {
				t.Skip("-short: two cases; the full run covers all")
			}
			res, out := runJobWith(t, launch.Config{KeepGoing: true}, 4, "shrink", append([]string{"SHRINK_VICTIM=2", "GORUN_TIMEOUT=20s"}, c.env...)...)
			if err := res.Error(); err != nil {
				t.Fatalf("job failed: %v\n%s", err, out)
			}
			lines := commtest.RankLines(out)
			final := regexp.MustCompile(`^SHRUNK to (\[[0-9 ]+\]): rank (\d+) of (\d+) after`)
			for _, r := range c.survivor {
				var last string
				for _, l := range lines[r] {
					if m := final.FindStringSubmatch(l); m != nil {
						last = m[1]
					}
				}
				if last != c.kept {
					t.Errorf("rank %d shrank to %q, want %s:\n%s", r, last, c.kept, out)
				}
				if !commtest.EndsOK(lines[r]) {
					t.Errorf("rank %d did not finish:\n%s", r, out)
				}
			}
			if c.leftOut && !strings.Contains(strings.Join(lines[1], "\n"), "rank 1: Shrink: left out of the shrunk group") {
				t.Errorf("rank 1 was not told it was left out:\n%s", out)
			}
			if len(res.Lost) != 4-len(c.survivor) {
				t.Errorf("launcher lost %v, want %d ranks", res.Lost, 4-len(c.survivor))
			}
			if !strings.Contains(out, "the others go on without it") {
				t.Errorf("launcher did not report the lost rank:\n%s", out)
			}
		})
	}
}

// TestShrinkRefused: only the world group shrinks, and not once closed.
func TestShrinkRefused(t *testing.T) {
	gs := commtest.Groups(t, 2)
	subs := make([]*comm.Group, 2)
	commtest.EachRank(t, gs, func(g *comm.Group) (err error) {
		subs[g.Rank()], err = g.Split(context.Background(), 0, g.Rank())
		return err
	})
	if _, err := subs[0].Shrink(context.Background()); err == nil || !strings.Contains(err.Error(), "only the world group shrinks") {
		t.Errorf("a sub-group's Shrink: %v", err)
	}
	go gs[1].Close()
	gs[0].Close()
	if _, err := gs[0].Shrink(context.Background()); err == nil || !strings.Contains(err.Error(), "group closed") {
		t.Errorf("a closed group's Shrink: %v", err)
	}
}
