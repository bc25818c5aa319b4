package ring

import (
	"context"
	"unsafe"
)

// Reductions of 16-bit floats. A ring rounds the partial sum to 16 bits at
// every hop, losing precision n−1 times over. Here every element is
// rounded once: each rank owns a block of the result, receives that block
// from every other rank (16-bit on the wire), and combines the n
// contributions in float32, in rank order, before rounding; an all-reduce
// then gives every rank the owners' blocks. Every exchange is pairwise
// (all receives posted, then rank r sends to r+1, r+2, …), so each rank
// sends and receives (n−1)/n of the buffer per phase, as the ring does.

// halfAllReduce is AllReduce for BFloat16 and Float16.
func halfAllReduce[H half](ctx context.Context, c *Collectives, buf []H, op Op) error {
	n, r := c.Size(), c.Rank
	call := c.begin(KindAllReduce, DTypeOf[H](), op, AlgoPairwise, 0, len(buf))
	c.tickets = c.tickets[:0]
	if n == 1 {
		return nil
	}
	block := func(k int) (int, int) { return segment(k, n, len(buf)) }
	lo, hi := block(r)
	if err := ownerReduce(ctx, c, call, buf, block, op, buf[lo:hi]); err != nil {
		return err
	}
	// All-gather the owners' blocks, as step 1 of the call.
	c.tickets = c.tickets[:0]
	first := 0
	for i := 1; i < n; i++ {
		a, b := block(mod(r-i, n))
		if err := postChunks(c, mod(r-i, n), buf, a, b); err != nil {
			return err
		}
	}
	for i := 1; i < n; i++ {
		if err := sendChunks(ctx, c, call, mod(r+i, n), 1, buf, lo, hi); err != nil {
			return err
		}
	}
	for i := 1; i < n; i++ {
		from := mod(r-i, n)
		a, b := block(from)
		if err := waitChunks(ctx, c, call, from, first, 1, buf, a, b, nil); err != nil {
			return err
		}
		first += messageFrames[H](c, a, b)
	}
	return nil
}

// halfReduceScatter is ReduceScatter and ReduceScatterV (kind, count)
// for BFloat16 and Float16, send laid out as l.
func halfReduceScatter[H half](ctx context.Context, c *Collectives, kind Kind, count int, send, recv []H, l layout, op Op) error {
	call := c.begin(kind, DTypeOf[H](), op, AlgoPairwise, 0, count)
	c.tickets = c.tickets[:0]
	if c.Size() == 1 {
		copy(recv, send)
		return nil
	}
	return ownerReduce(ctx, c, call, send, l.block, op, recv)
}

// halfReduceToRoot is ReduceToRoot for BFloat16 and Float16: every rank
// sends its buffer to the root, which combines them.
func halfReduceToRoot[H half](ctx context.Context, c *Collectives, buf []H, op Op, root int) error {
	n, r := c.Size(), c.Rank
	call := c.begin(KindReduce, DTypeOf[H](), op, AlgoDirect, root, len(buf))
	c.tickets = c.tickets[:0]
	if n == 1 {
		return nil
	}
	whole := func(k int) (int, int) {
		if k == root {
			return 0, len(buf)
		}
		return 0, 0
	}
	if r != root {
		return sendChunks(ctx, c, call, root, 0, buf, 0, len(buf))
	}
	return ownerReduce(ctx, c, call, buf, whole, op, buf)
}

// ownerReduce sends block(p) of send to every other rank p that owns a
// block (a non-empty one, or every rank when all are empty), receives this
// rank's block from every other rank, and sets out to the n contributions
// combined with op in float32, in rank order, rounded once (Avg divided by
// n before rounding). out may be this rank's block of send. Frames are
// step 0 of call.
func ownerReduce[H half](ctx context.Context, c *Collectives, call Call, send []H, block func(k int) (int, int), op Op, out []H) error {
	n, r := c.Size(), c.Rank
	lo, hi := block(r)
	size := hi - lo
	owns := func(k int) bool { return call.Kind != KindReduce || k == call.Root }
	// Scratch: the other ranks' contributions (slot q for rank q, slot r
	// unused), then the float32 accumulator of one tile.
	var recvd []H
	var acc []float32
	if owns(r) {
		hb := n * size * int(unsafe.Sizeof(H(0)))
		hb = (hb + 7) &^ 7
		tb := 4 * min(size, combineTile)
		raw := scratchOf[uint8](c, hb+tb)
		recvd = fromBytes[H](raw[:n*size*int(unsafe.Sizeof(H(0)))])
		acc = fromBytes[float32](raw[hb : hb+tb])
		for i := 1; i < n; i++ {
			from := mod(r-i, n)
			if err := postChunks(c, from, recvd, from*size, (from+1)*size); err != nil {
				return err
			}
		}
	}
	for i := 1; i < n; i++ {
		to := mod(r+i, n)
		if !owns(to) {
			continue
		}
		a, b := block(to)
		if err := sendChunks(ctx, c, call, to, 0, send, a, b); err != nil {
			return err
		}
	}
	if !owns(r) {
		return nil
	}
	first := 0
	for i := 1; i < n; i++ {
		from := mod(r-i, n)
		if err := waitChunks(ctx, c, call, from, first, 0, recvd, from*size, (from+1)*size, nil); err != nil {
			return err
		}
		first += messageFrames[H](c, from*size, (from+1)*size)
	}
	// Tile by tile, so that the float32 sums stay in the cache: one pass
	// over each contribution instead of three over a float32 copy of the
	// block. out may be this rank's block of send: a tile is read whole
	// before it is written.
	for t := 0; t < size; t += combineTile {
		e := min(t+combineTile, size)
		a := acc[:e-t]
		for q := range n {
			src := recvd[q*size+t : q*size+e]
			if q == r {
				src = send[lo+t : lo+e]
			}
			if q == 0 {
				WidenInto(a, src)
			} else {
				accumulateInto(op, a, src)
			}
		}
		if op == Avg {
			narrowDivInto(out[t:e], a, float32(n))
		} else {
			NarrowInto(out[t:e], a)
		}
	}
	return nil
}

// combineTile is how many elements ownerReduce combines at a time (8 KiB
// of float32 sums): two ranks' bfloat16 all-reduces and reduce-scatters
// of 16 MiB ran 1.6× and 1.7× faster than with the whole block at once,
// four ranks' 1.3× and 1.45× (bench/results/current/
// bf16-vector-2026-11-29-zen4.txt, section 2).
const combineTile = 2048
