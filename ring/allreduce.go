package ring

import "context"

// AllReduce reduces buf element-wise across the group, in place: afterwards
// every rank holds the same bits. Messages of at most OneShotBytes, among
// more than two ranks, go to every rank at once; messages of at most
// SmallBytes use recursive doubling; among more than two ranks, messages
// of at most HalvingBytes use halving-doubling; larger ones the pipelined
// ring. Across hosts, the hierarchy's threshold sends larger ones host by
// host, and Costs, when set, choose instead by predicted time
// (allReduceAlgo).
func AllReduce[T Elem](ctx context.Context, c *Collectives, buf []T, op Op) error {
	if err := ValidOp[T](op); err != nil {
		return err
	}
	switch b := any(buf).(type) {
	case []BFloat16:
		return halfAllReduce(ctx, c, b, op)
	case []Float16:
		return halfAllReduce(ctx, c, b, op)
	}
	if c.allReduceAlgo(len(AsBytes(buf)), true) == AlgoHierarchical {
		c.begin(KindAllReduce, DTypeOf[T](), op, AlgoHierarchical, 0, len(buf))
		return hierarchicalAllReduce(ctx, c, buf, op)
	}
	return flatAllReduce(ctx, c, buf, op)
}

// allReduceAlgo picks the all-reduce of bytes: host by host (only where
// hosts is true) when the hierarchy is Forced; the one-shot one up to
// OneShotBytes; else, where the group has Costs, the algorithm they
// predict fastest; else by size: host by host above the hierarchy's
// threshold, recursive doubling up to SmallBytes, halving-doubling up to
// HalvingBytes, the ring above.
func (c *Collectives) allReduceAlgo(bytes int, hosts bool) Algo {
	n, h := c.Size(), c.Hier
	if !hosts {
		h = nil
	}
	switch {
	case h != nil && h.Forced:
		return AlgoHierarchical
	case n > 2 && bytes <= c.OneShotBytes:
		return AlgoOneShot
	case c.Costs != nil && n > 1:
		return c.Costs.choose(bytes, h)
	case h != nil && bytes > h.Above.AllReduce:
		return AlgoHierarchical
	case bytes <= c.smallBytes():
		return AlgoDoubling
	case n > 2 && bytes <= c.HalvingBytes:
		return AlgoHalving
	}
	return AlgoRing
}

// AllReduceAlgorithm returns the algorithm an all-reduce of bytes (of
// 32- or 64-bit elements) would use.
func (c *Collectives) AllReduceAlgorithm(bytes int) Algo {
	return c.allReduceAlgo(bytes, true)
}

// flatAllReduce is AllReduce over the whole group at once: one-shot,
// recursive doubling, halving-doubling or the ring (allReduceAlgo).
func flatAllReduce[T Elem](ctx context.Context, c *Collectives, buf []T, op Op) error {
	algo := c.allReduceAlgo(len(AsBytes(buf)), false)
	call := c.begin(KindAllReduce, DTypeOf[T](), op, algo, 0, len(buf))
	c.tickets = c.tickets[:0]
	switch {
	case c.Size() == 1:
		return nil
	case algo == AlgoOneShot:
		return oneShotAllReduce(ctx, c, call, buf, op)
	case algo == AlgoDoubling:
		return doublingAllReduce(ctx, c, call, buf, op)
	case algo == AlgoHalving:
		return halvingAllReduce(ctx, c, call, buf, op)
	default:
		return ringAllReduce(ctx, c, call, buf, op)
	}
}

// segment returns the bounds of segment k when count elements are split
// into n nearly equal parts.
func segment(k, n, count int) (int, int) {
	return k * count / n, (k + 1) * count / n
}

// ringAllReduce is reduce-scatter then all-gather around the ring: 2(n−1)
// steps; at step t a rank sends one segment to its right neighbour and
// receives one from its left (reduce-scatter steps add it in, all-gather
// steps store it). Segments are cut into chunks, and the work is done in a
// software-pipelined order: on "diagonal" d a rank handles chunk d−t of
// every step t, so sending chunk j+1, reducing chunk j and gathering chunk
// j−1 all overlap. A wait on diagonal d needs only what the left neighbour
// sent on diagonal d−1, so the schedule cannot deadlock. All receives are
// posted up front, in the order the left neighbour sends, so its data lands
// in place (the all-gather phase directly in buf). An all-gather chunk's
// final value is computed from this rank's partial sum of it, so it cannot
// arrive before this rank has reduced and forwarded that chunk: the buffer
// is shared with the transport's reader only in time, never at once.
// (Posting each all-gather receive after that last use instead measured
// 15% slower at 16–64 MiB, np=2: the neighbour's frame then often arrives
// first and is staged in a fresh buffer and copied.)
func ringAllReduce[T Elem](ctx context.Context, c *Collectives, call Call, buf []T, op Op) error {
	n, r := c.Size(), c.Rank
	left, right := mod(r-1, n), mod(r+1, n)
	count := len(buf)
	ce := ringChunkElems(c.chunkElems(elemSize[T]()), count, n, elemSize[T]())
	tmp := scratchOf[T](c, count)
	steps := 2 * (n - 1)
	// recvSeg is the segment received at step t; the one sent at step t+1
	// is the same, so chunk counts always agree between neighbours.
	recvSeg := func(t int) int {
		if t < n-1 {
			return mod(r-t-2, n)
		}
		return mod(r-(t-(n-1))-1, n)
	}
	chunksOf := func(seg int) int {
		lo, hi := segment(seg, n, count)
		return subchunks(lo, hi, ce)
	}
	maxChunks := 0
	for k := range n {
		maxChunks = max(maxChunks, chunksOf(k))
	}
	diagonals := maxChunks + steps

	// Post in the left neighbour's send order: diagonal by diagonal, step by
	// step. Where the transport can, reduce-scatter frames are folded into
	// buf as they arrive instead of landing in tmp.
	combine := combineOf[T](c, op)
	combined := c.combined[:0]
	defer func() { c.combined = combined }()
	for d := range diagonals {
		for t := 0; t < steps; t++ {
			j := d - t
			seg := recvSeg(t)
			if j < 0 || j >= chunksOf(seg) {
				continue
			}
			lo, hi := segment(seg, n, count)
			a, b := sub(lo, hi, ce, j)
			folded := false
			if t < n-1 {
				var err error
				if folded, err = c.postCombine(left, AsBytes(buf[a:b]), combine, AsBytes(tmp[a:b])); err != nil {
					return err
				}
			} else if err := c.post(left, AsBytes(buf[a:b])); err != nil {
				return err
			}
			combined = append(combined, folded)
		}
	}

	k := 0
	first := mod(r-1, n) // the segment sent at step 0: our own data
	for d := range diagonals {
		if d < chunksOf(first) {
			lo, hi := segment(first, n, count)
			a, b := sub(lo, hi, ce, d)
			if err := c.send(ctx, right, call, 0, d, AsBytes(buf[a:b])); err != nil {
				return err
			}
		}
		// Receive step t−1's chunk, reduce or store it, forward it as step t.
		for t := 1; t <= steps; t++ {
			j := d - t
			seg := recvSeg(t - 1)
			if j < 0 || j >= chunksOf(seg) {
				continue
			}
			lo, hi := segment(seg, n, count)
			a, b := sub(lo, hi, ce, j)
			if t-1 < n-1 {
				if err := c.wait(ctx, left, k, call, t-1, j, len(AsBytes(tmp[a:b]))); err != nil {
					return err
				}
				if !combined[k] {
					Reduce(op, buf[a:b], buf[a:b], tmp[a:b])
				}
				if t-1 == n-2 && op == Avg { // this rank's segment is complete
					Divide(buf[a:b], n)
				}
			} else if err := c.wait(ctx, left, k, call, t-1, j, len(AsBytes(buf[a:b]))); err != nil {
				return err
			}
			k++
			if t < steps {
				if err := c.send(ctx, right, call, t, j, AsBytes(buf[a:b])); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// minRingChunk is the smallest chunk ringChunkElems cuts a block into.
const minRingChunk = 256 << 10

// ringChunkElems is the chunk of the ring all-reduce and the ring
// reduce-scatter, in elements of size bytes, for count elements among n
// ranks: the group's chunk ce, or, where a rank's block (count/n) holds
// fewer than four of those, a quarter of the block, but not below
// minRingChunk (nor above ce). A
// block of one or two chunks leaves a rank copying or adding while its
// neighbour waits for the whole chunk; four let them work at once.
// Through shared memory (1 MiB chunks) that made two ranks' 2 and 4 MiB
// all-reduces 1.22–1.23× faster by the medians, four ranks' (on two cores)
// of 2–8 MiB 1.13–1.40× (bench/results/current/
// allreduce-chunks-2026-11-29-zen4.txt), and two ranks' reduce-scatters
// of 2 and 4 MiB 1.39–1.40× (reducescatter-chunks-2026-11-29-zen4.txt),
// where smaller chunks for every size had lost at 16–64 MiB
// (shm-chunk-2026-11-29-zen4.txt). Every rank computes the same from the
// call's count.
func ringChunkElems(ce, count, n int, size uintptr) int {
	floor := min(ce, minRingChunk/int(size))
	return min(ce, max(floor, count/n/4))
}

func elemSize[T Elem]() uintptr {
	return uintptr(DTypeOf[T]().Size())
}
