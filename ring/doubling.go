package ring

import "context"

// doublingAllReduce exchanges the whole buffer with partners at distance
// 1, 2, 4, ...: log2(n) latency-bound steps, ranks beyond a power of two
// paired up first (fold). Each pairwise combination is commutative, so all
// ranks end with identical bits.
func doublingAllReduce[T Elem](ctx context.Context, c *Collectives, call Call, buf []T, op Op) error {
	n := c.Size()
	f := newFold(n)
	final := f.levels() + 1
	tmp := scratchOf[T](c, len(buf))
	bytes := len(AsBytes(buf))
	vr, err := foldIn(ctx, c, call, f, buf, tmp, op, final)
	if err != nil || vr < 0 {
		return err
	}
	for lvl, mask := 1, 1; mask < f.p2; lvl, mask = lvl+1, mask<<1 {
		partner := f.real(vr ^ mask)
		if err := c.sendRecv(ctx, call, lvl, 0, partner, AsBytes(buf), partner, AsBytes(tmp), bytes); err != nil {
			return err
		}
		Reduce(op, buf, buf, tmp)
	}
	if op == Avg {
		Divide(buf, n)
	}
	return foldOut(ctx, c, call, f, buf, final)
}
