package ring

import (
	"context"
	"fmt"
)

// AllGather concatenates every rank's send, in rank order, into recv on
// every rank: len(recv) must be Size()·len(send). Ring algorithm, chunked,
// with receives landing directly in recv.
func AllGather[T Elem](ctx context.Context, c *Collectives, send, recv []T) error {
	n, r := c.Size(), c.Rank
	cnt := len(send)
	if len(recv) != n*cnt {
		return fmt.Errorf("ring: AllGather: recv holds %d elements, want %d (%d ranks × %d)", len(recv), n*cnt, n, cnt)
	}
	call := c.begin(KindAllGather, DTypeOf[T](), 0, AlgoRing, 0, cnt)
	c.tickets = c.tickets[:0]
	copy(recv[r*cnt:(r+1)*cnt], send)
	if n == 1 {
		return nil
	}
	left, right := mod(r-1, n), mod(r+1, n)
	ce := c.chunkElems(elemSize[T]())
	block := func(k int) (int, int) { return k * cnt, (k + 1) * cnt }
	for t := 0; t < n-1; t++ {
		lo, hi := block(mod(r-t-1, n))
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.post(left, AsBytes(recv[a:b])); err != nil {
				return err
			}
		}
	}
	lo, hi := block(r)
	for j := range subchunks(lo, hi, ce) {
		a, b := sub(lo, hi, ce, j)
		if err := c.send(ctx, right, call, 0, j, AsBytes(recv[a:b])); err != nil {
			return err
		}
	}
	k := 0
	for t := 0; t < n-1; t++ {
		lo, hi := block(mod(r-t-1, n))
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.wait(ctx, left, k, call, t, j, len(AsBytes(recv[a:b]))); err != nil {
				return err
			}
			k++
			if t < n-2 {
				if err := c.send(ctx, right, call, t+1, j, AsBytes(recv[a:b])); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ReduceScatter reduces send (Size()·len(recv) elements) across the group
// and leaves block Rank of the result in recv. Ring algorithm: partial sums
// travel around the ring, each rank adding its contribution.
func ReduceScatter[T Elem](ctx context.Context, c *Collectives, send, recv []T, op Op) error {
	if err := ValidOp[T](op); err != nil {
		return err
	}
	n, r := c.Size(), c.Rank
	cnt := len(recv)
	if len(send) != n*cnt {
		return fmt.Errorf("ring: ReduceScatter: send holds %d elements, want %d (%d ranks × %d)", len(send), n*cnt, n, cnt)
	}
	switch s := any(send).(type) {
	case []BFloat16:
		return halfReduceScatter(ctx, c, s, any(recv).([]BFloat16), op)
	case []Float16:
		return halfReduceScatter(ctx, c, s, any(recv).([]Float16), op)
	}
	call := c.begin(KindReduceScatter, DTypeOf[T](), op, AlgoRing, 0, cnt)
	c.tickets = c.tickets[:0]
	if n == 1 {
		copy(recv, send)
		return nil
	}
	left, right := mod(r-1, n), mod(r+1, n)
	ce := c.chunkElems(elemSize[T]())
	tmp := scratchOf[T](c, len(send))
	block := func(k int) (int, int) { return k * cnt, (k + 1) * cnt }
	for t := 0; t < n-1; t++ {
		lo, hi := block(mod(r-t-2, n))
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.post(left, AsBytes(tmp[a:b])); err != nil {
				return err
			}
		}
	}
	lo, hi := block(mod(r-1, n))
	for j := range subchunks(lo, hi, ce) {
		a, b := sub(lo, hi, ce, j)
		if err := c.send(ctx, right, call, 0, j, AsBytes(send[a:b])); err != nil {
			return err
		}
	}
	k := 0
	for t := 0; t < n-1; t++ {
		lo, hi := block(mod(r-t-2, n))
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
