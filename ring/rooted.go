package ring

import (
	"context"
	"fmt"
)

// The rooted collectives (ReduceToRoot, Gather, Scatter) and AllToAll.
// Every message is cut into ChunkBytes frames (sendChunks, postChunks,
// waitChunks); an empty range still sends one frame, so that a mismatch
// between ranks is always seen.

// ReduceToRoot reduces buf across the group into root's buf; the other
// ranks' buf are left as they were. Binomial tree: ceil(log2(n)) rounds,
// each rank adding its children's partial results to its own, chunk by
// chunk as they land, before passing the sum to its parent.
func ReduceToRoot[T Elem](ctx context.Context, c *Collectives, buf []T, op Op, root int) error {
	if err := ValidOp[T](op); err != nil {
		return err
	}
	n := c.Size()
	if root < 0 || root >= n {
		return fmt.Errorf("ring: Reduce: root %d outside the group of %d", root, n)
	}
	switch b := any(buf).(type) {
	case []BFloat16:
		return halfReduceToRoot(ctx, c, b, op, root)
	case []Float16:
		return halfReduceToRoot(ctx, c, b, op, root)
	}
	call := c.begin(KindReduce, DTypeOf[T](), op, AlgoTree, root, len(buf))
	c.tickets = c.tickets[:0]
	vr := mod(c.Rank-root, n)
	// acc holds the partial result (buf itself on the root, a copy
	// elsewhere); in receives each child's.
	acc, in := buf, scratchOf[T](c, 2*len(buf))
	if vr != 0 {
		acc, in = in[:len(buf)], in[len(buf):]
		copy(acc, buf)
	}
	cnt := len(buf)
	for mask, step := 1, 0; mask < n; mask, step = mask<<1, step+1 {
		if vr&mask != 0 {
			return sendChunks(ctx, c, call, mod(vr-mask+root, n), step, acc, 0, cnt)
		}
		if vr+mask >= n {
			continue
		}
		child, first := mod(vr+mask+root, n), len(c.tickets)
		if err := postChunks(c, child, in, 0, cnt); err != nil {
			return err
		}
		err := waitChunks(ctx, c, call, child, first, step, in, 0, cnt, func(_, a, b int) {
			Reduce(op, acc[a:b], acc[a:b], in[a:b])
		})
		if err != nil {
			return err
		}
	}
	if op == Avg { // only the root gets here
		Divide(acc, n)
	}
	return nil
}

// Gather concatenates every rank's send, in rank order, into root's recv
// (Size()·len(send) elements; ignored elsewhere). Every rank sends its
// block straight to the root, which receives them in place.
func Gather[T Elem](ctx context.Context, c *Collectives, send, recv []T, root int) error {
	r, cnt := c.Rank, len(send)
	if err := checkRooted(c, "Gather", root, "recv", len(recv), cnt); err != nil {
		return err
	}
	call := c.begin(KindGather, DTypeOf[T](), 0, AlgoDirect, root, cnt)
	c.tickets = c.tickets[:0]
	if r != root {
		return sendChunks(ctx, c, call, root, 0, send, 0, cnt)
	}
	copy(recv[r*cnt:(r+1)*cnt], send)
	return exchange(ctx, c, call, recv, cnt, nil)
}

// Scatter sends block i of root's send (Size()·len(recv) elements; ignored
// elsewhere) to rank i's recv, straight from the root.
func Scatter[T Elem](ctx context.Context, c *Collectives, send, recv []T, root int) error {
	n, r, cnt := c.Size(), c.Rank, len(recv)
	if err := checkRooted(c, "Scatter", root, "send", len(send), cnt); err != nil {
		return err
	}
	call := c.begin(KindScatter, DTypeOf[T](), 0, AlgoDirect, root, cnt)
	c.tickets = c.tickets[:0]
	if r != root {
		if err := postChunks(c, root, recv, 0, cnt); err != nil {
			return err
		}
		return waitChunks(ctx, c, call, root, 0, 0, recv, 0, cnt, nil)
	}
	for i := 1; i < n; i++ { // the next ranks first
		to := mod(r+i, n)
		if err := sendChunks(ctx, c, call, to, 0, send, to*cnt, (to+1)*cnt); err != nil {
			return err
		}
	}
	copy(recv, send[r*cnt:(r+1)*cnt])
	return nil
}

// AllToAll sends block i of every rank's send to rank i, which receives it
// as block (sender) of its recv: equal blocks of len(send)/Size()
// elements. Pairwise exchange: every receive is posted first, then rank r
// sends to r+1, r+2, …, so that at each moment the ranks send to
// different peers.
func AllToAll[T Elem](ctx context.Context, c *Collectives, send, recv []T) error {
	n, r := c.Size(), c.Rank
	if len(send)%n != 0 || len(recv) != len(send) {
		return fmt.Errorf("ring: AllToAll: send holds %d and recv %d elements, want the same multiple of the %d ranks", len(send), len(recv), n)
	}
	cnt := len(send) / n
	call := c.begin(KindAllToAll, DTypeOf[T](), 0, AlgoPairwise, 0, cnt)
	c.tickets = c.tickets[:0]
	copy(recv[r*cnt:(r+1)*cnt], send[r*cnt:(r+1)*cnt])
	return exchange(ctx, c, call, recv, cnt, send)
}

// checkRooted fails unless root is a group rank and, on the root, the
// buffer named whole holds Size() blocks of cnt elements.
func checkRooted(c *Collectives, what string, root int, whole string, have, cnt int) error {
	n := c.Size()
	if root < 0 || root >= n {
		return fmt.Errorf("ring: %s: root %d outside the group of %d", what, root, n)
	}
	if c.Rank == root && have != n*cnt {
		return fmt.Errorf("ring: %s: %s holds %d elements, want %d (%d ranks × %d)", what, whole, have, n*cnt, n, cnt)
	}
	return nil
}

// exchange receives block p of recv (cnt elements) from every other group
// rank p: all receives posted, then, when send is not nil, block p of send
// sent to each rank p from the next rank on, then the receives waited for
// in the order posted.
func exchange[T Elem](ctx context.Context, c *Collectives, call Call, recv []T, cnt int, send []T) error {
	n, r := c.Size(), c.Rank
	for i := 1; i < n; i++ {
		from := mod(r-i, n)
		if err := postChunks(c, from, recv, from*cnt, (from+1)*cnt); err != nil {
			return err
		}
	}
	if send != nil {
		for i := 1; i < n; i++ {
			to := mod(r+i, n)
			if err := sendChunks(ctx, c, call, to, 0, send, to*cnt, (to+1)*cnt); err != nil {
				return err
			}
		}
	}
	first := 0
	for i := 1; i < n; i++ {
		from := mod(r-i, n)
		if err := waitChunks(ctx, c, call, from, first, 0, recv, from*cnt, (from+1)*cnt, nil); err != nil {
			return err
		}
		first += subchunks(from*cnt, (from+1)*cnt, c.chunkElems(elemSize[T]()))
	}
	return nil
}
