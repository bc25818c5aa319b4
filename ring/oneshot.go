package ring

import "context"

// oneShotAllReduce sends the whole buffer to every other rank and reduces
// the n contributions locally: one round of messages where recursive
// doubling needs log2(n), at the price of n−1 sends per rank. Every rank
// combines the contributions in rank order, so all end with the same bits.
func oneShotAllReduce[T Elem](ctx context.Context, c *Collectives, call Call, buf []T, op Op) error {
	n, r, m := c.Size(), c.Rank, len(buf)
	bytes := len(AsBytes(buf))
	// One scratch slot per rank, indexed by rank; this rank's slot keeps
	// its own contribution, which buf loses once the combining starts.
	all := scratchOf[T](c, n*m)
	slot := func(k int) []T { return all[k*m : (k+1)*m : (k+1)*m] }
	for i := 1; i < n; i++ {
		from := mod(r-i, n)
		if err := c.post(from, AsBytes(slot(from))); err != nil {
			return err
		}
	}
	for i := 1; i < n; i++ {
		if err := c.send(ctx, mod(r+i, n), call, 0, 0, AsBytes(buf)); err != nil {
			return err
		}
	}
	copy(slot(r), buf)
	for i := 1; i < n; i++ {
		if err := c.wait(ctx, mod(r-i, n), i-1, call, 0, 0, bytes); err != nil {
			return err
		}
	}
	Reduce(op, buf, slot(0), slot(1))
	for k := 2; k < n; k++ {
		Reduce(op, buf, buf, slot(k))
	}
	if op == Avg {
		Divide(buf, n)
	}
	return nil
}
