package ring

import (
	"context"
	"fmt"
)

// AllGather concatenates every rank's send, in rank order, into recv on
// every rank: len(recv) must be Size()·len(send). Ring algorithm, chunked,
// with receives landing directly in recv; across hosts, above the
// hierarchy's threshold, host by host (hierarchicalAllGather).
func AllGather[T Elem](ctx context.Context, c *Collectives, send, recv []T) error {
	n, cnt := c.Size(), len(send)
	if len(recv) != n*cnt {
		return fmt.Errorf("ring: AllGather: recv holds %d elements, want %d (%d ranks × %d)", len(recv), n*cnt, n, cnt)
	}
	if c.hierarchical(KindAllGather, len(AsBytes(recv))) {
		c.begin(KindAllGather, DTypeOf[T](), 0, AlgoHierarchical, 0, cnt)
		return hierarchicalAllGather(ctx, c, send, recv)
	}
	call := c.begin(KindAllGather, DTypeOf[T](), 0, AlgoRing, 0, cnt)
	return allGather(ctx, c, call, send, recv, equalBlocks(cnt))
}

// AllGatherV is AllGather with blocks of any sizes: rank k's send holds
// counts[k] elements, and recv their sum, the blocks end to end in rank
// order. Every rank passes the same counts.
func AllGatherV[T Elem](ctx context.Context, c *Collectives, send, recv []T, counts []int) error {
	l, err := c.vectorLayout("AllGatherV", counts, "send", len(send), "recv", len(recv))
	if err != nil {
		return err
	}
	call := c.begin(KindAllGatherV, DTypeOf[T](), 0, AlgoRing, 0, len(recv))
	return allGather(ctx, c, call, send, recv, l)
}

// allGather is the ring all-gather of send into block Rank of recv, laid
// out as l. Its frames of directBytes or more go as direct frames
// where the transport has them (every rank copies at once: measured
// faster, bench/results/HISTORY.md). This rank's own block goes out from
// send, not from the copy just made in recv: a peer reading lines this
// core has just written takes each from its cache, which made two-rank
// all-gathers of 128 KiB to 8 MiB take 1.5–2× as long
// (bench/results/current/allgather-send-2026-11-29-zen4.txt).
func allGather[T Elem](ctx context.Context, c *Collectives, call Call, send, recv []T, l layout) error {
	n, r := c.Size(), c.Rank
	c.tickets = c.tickets[:0]
	lo, hi := l.block(r)
	copy(recv[lo:hi], send)
	if n == 1 {
		return nil
	}
	left, right := mod(r-1, n), mod(r+1, n)
	ce := c.chunkElems(elemSize[T]())
	for t := 0; t < n-1; t++ {
		lo, hi := l.block(mod(r-t-1, n))
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.post(left, AsBytes(recv[a:b])); err != nil {
				return err
			}
		}
	}
	for j := range subchunks(lo, hi, ce) {
		a, b := sub(lo, hi, ce, j)
		if err := c.sendDirectLarge(ctx, right, call, 0, j, AsBytes(send[a-lo:b-lo])); err != nil {
			return err
		}
	}
	k := 0
	for t := 0; t < n-1; t++ {
		lo, hi := l.block(mod(r-t-1, n))
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.wait(ctx, left, k, call, t, j, len(AsBytes(recv[a:b]))); err != nil {
				return err
			}
			k++
			if t < n-2 {
				if err := c.sendDirectLarge(ctx, right, call, t+1, j, AsBytes(recv[a:b])); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ReduceScatter reduces send (Size()·len(recv) elements) across the group
// and leaves block Rank of the result in recv. Ring algorithm: partial sums
// travel around the ring, each rank adding its contribution; across hosts,
// above the hierarchy's threshold, host by host (hierarchicalReduceScatter; not for
// 16-bit floats, whose ring accumulates in float32).
func ReduceScatter[T Elem](ctx context.Context, c *Collectives, send, recv []T, op Op) error {
	if err := ValidOp[T](op); err != nil {
		return err
	}
	n, cnt := c.Size(), len(recv)
	if len(send) != n*cnt {
		return fmt.Errorf("ring: ReduceScatter: send holds %d elements, want %d (%d ranks × %d)", len(send), n*cnt, n, cnt)
	}
	if dt := DTypeOf[T](); !dt.IsHalf() && c.hierarchical(KindReduceScatter, len(AsBytes(send))) {
		c.begin(KindReduceScatter, dt, op, AlgoHierarchical, 0, cnt)
		return hierarchicalReduceScatter(ctx, c, send, recv, op)
	}
	return reduceScatter(ctx, c, KindReduceScatter, cnt, send, recv, equalBlocks(cnt), op)
}

// ReduceScatterV is ReduceScatter with blocks of any sizes: send holds
// the sum of counts, laid end to end in rank order, and rank k's recv
// receives block k of the result (counts[k] elements). Every rank passes
// the same counts.
func ReduceScatterV[T Elem](ctx context.Context, c *Collectives, send, recv []T, counts []int, op Op) error {
	if err := ValidOp[T](op); err != nil {
		return err
	}
	l, err := c.vectorLayout("ReduceScatterV", counts, "recv", len(recv), "send", len(send))
	if err != nil {
		return err
	}
	return reduceScatter(ctx, c, KindReduceScatterV, len(send), send, recv, l, op)
}

// reduceScatter runs the reduce-scatter of send, laid out as l, into
// recv, as a call of kind and count.
func reduceScatter[T Elem](ctx context.Context, c *Collectives, kind Kind, count int, send, recv []T, l layout, op Op) error {
	switch s := any(send).(type) {
	case []BFloat16:
		return halfReduceScatter(ctx, c, kind, count, s, any(recv).([]BFloat16), l, op)
	case []Float16:
		return halfReduceScatter(ctx, c, kind, count, s, any(recv).([]Float16), l, op)
	}
	call := c.begin(kind, DTypeOf[T](), op, AlgoRing, 0, count)
	return ringReduceScatter(ctx, c, call, send, recv, l, op)
}

// ringReduceScatter is the ring reduce-scatter of send, laid out as l,
// into recv (this rank's block), as steps 0 to n−2 of call. Its scratch
// is the first len(send) elements of the Collectives' scratch.
func ringReduceScatter[T Elem](ctx context.Context, c *Collectives, call Call, send, recv []T, l layout, op Op) error {
	n, r := c.Size(), c.Rank
	c.tickets = c.tickets[:0]
	if n == 1 {
		copy(recv, send)
		return nil
	}
	left, right := mod(r-1, n), mod(r+1, n)
	ce := ringChunkElems(c.chunkElems(elemSize[T]()), len(send), n, elemSize[T]())
	tmp := scratchOf[T](c, len(send))
	for t := 0; t < n-1; t++ {
		lo, hi := l.block(mod(r-t-2, n))
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.post(left, AsBytes(tmp[a:b])); err != nil {
				return err
			}
		}
	}
	lo, hi := l.block(mod(r-1, n))
	for j := range subchunks(lo, hi, ce) {
		a, b := sub(lo, hi, ce, j)
		if err := c.send(ctx, right, call, 0, j, AsBytes(send[a:b])); err != nil {
			return err
		}
	}
	k := 0
	for t := 0; t < n-1; t++ {
		lo, hi := l.block(mod(r-t-2, n))
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.wait(ctx, left, k, call, t, j, len(AsBytes(tmp[a:b]))); err != nil {
				return err
			}
			k++
			if t < n-2 {
				Reduce(op, tmp[a:b], tmp[a:b], send[a:b])
				if err := c.send(ctx, right, call, t+1, j, AsBytes(tmp[a:b])); err != nil {
					return err
				}
				continue
			}
			out := recv[a-lo : b-lo] // the last step's block is our own
			Reduce(op, out, tmp[a:b], send[a:b])
			if op == Avg {
				Divide(out, n)
			}
		}
	}
	return nil
}
