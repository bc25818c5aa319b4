package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
)

// TestCheckSame: ranks that pass the same settings go on; where they
// differ every rank fails with one error naming each setting that
// differs, its values and the ranks holding each; a setting a rank does
// not give is named so.
func TestCheckSame(t *testing.T) {
	const n = 4
	gs := commtest.Groups(t, n)
	base := func() []comm.Setting {
		return []comm.Setting{{Name: "--batch-size", Value: "64"}, {Name: "training images", Value: "60000"}, {Name: "--lr", Value: "1"}}
	}
	for _, tc := range []struct {
		name   string
		change func(rank int, s []comm.Setting) []comm.Setting
		want   string // "": no error
	}{
		{"same", func(_ int, s []comm.Setting) []comm.Setting { return s }, ""},
		{"one differs", func(r int, s []comm.Setting) []comm.Setting {
			if r == 2 {
				s[1].Value = "59000"
			}
			return s
		}, "the ranks differ where they must agree: training images is 60000 on ranks 0, 1, 3 but 59000 on rank 2"},
		{"three kinds, two settings", func(r int, s []comm.Setting) []comm.Setting {
			switch r {
			case 0:
				s[0].Value = "32"
			case 3:
				s[0].Value = "16"
				s[2].Value = "0.5"
			}
			return s
		}, "--batch-size is 32 (rank 0), 64 (ranks 1, 2), 16 (rank 3); --lr is 1 on ranks 0–2 but 0.5 on rank 3"},
		{"not given", func(r int, s []comm.Setting) []comm.Setting {
			if r == 1 {
				return s[:2]
			}
			return s
		}, "--lr is 1 on ranks 0, 2, 3 but not given on rank 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make([]error, n)
			commtest.EachRank(t, gs, func(g *comm.Group) error {
				errs[g.Rank()] = g.CheckSame(context.Background(), tc.change(g.Rank(), base()))
				return nil
			})
			commtest.WantErrors(t, errs, tc.want)
			for r, err := range errs {
				if err != nil && errs[0] != nil && err.Error() != errs[0].Error() {
					t.Errorf("rank %d's error %q is not rank 0's %q", r, err, errs[0])
				}
			}
		})
	}
	// The group still works after a difference was found.
	commtest.EachRank(t, gs, func(g *comm.Group) error { return g.Barrier(context.Background()) })

	// In sub-groups each compares its own ranks, numbered as in it: the
	// even ranks agree among themselves, the odd ones differ.
	errs := make([]error, n)
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		sub, err := g.Split(context.Background(), g.Rank()%2, g.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		s := base()
		s[2].Value = fmt.Sprint(g.Rank() % 2)
		if g.Rank() == 3 {
			s[0].Value = "8"
		}
		errs[g.Rank()] = sub.CheckSame(context.Background(), s)
		return nil
	})
	commtest.WantErrors(t, []error{errs[0], errs[2]}, "")
	commtest.WantErrors(t, []error{errs[1], errs[3]}, "--batch-size is 64 on rank 0 but 8 on rank 1")
}
