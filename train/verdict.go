package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorun/gorun/comm"
)

// maxVerdict bounds the text of a failure shared by shareVerdict.
const maxVerdict = 2048

// shareVerdict makes a check that only some ranks make (rank 0 probing
// where it saves) every rank's: each passes its own result, and all
// return nil, or all the failure of the lowest rank that failed, named.
// A rank that failed alone would leave, under --on-failure shrink, the
// others going on without it, into the same failure one by one.
func shareVerdict(ctx context.Context, g *comm.Group, err error) error {
	if g == nil || g.Size() == 1 {
		return err
	}
	var text []byte
	if err != nil {
		text = []byte(err.Error())
		if len(text) == 0 {
			text = []byte("(an empty error)")
		}
		text = text[:min(len(text), maxVerdict)]
	}
	lengths := make([]int32, g.Size())
	if cerr := comm.AllGather(ctx, g, []int32{int32(len(text))}, lengths); cerr != nil {
		return errors.Join(err, cerr)
	}
	for r, n := range lengths {
		if n == 0 {
			continue
		}
		buf := make([]uint8, n)
		copy(buf, text)
		if cerr := comm.Broadcast(ctx, g, buf, r); cerr != nil {
			return errors.Join(err, cerr)
		}
		if r == g.Rank() {
			return err
		}
		return fmt.Errorf("rank %d: %s", r, buf)
	}
	return nil
}
