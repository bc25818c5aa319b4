package ring

import "context"

// halvingAllReduce is Rabenseifner's all-reduce: a reduce-scatter by
// recursive halving, then an all-gather by recursive doubling. Each rank
// sends and receives what the ring moves, (n−1)/n of the buffer twice, but
// in 2·log2(n) steps instead of 2(n−1): fewer hand-offs between ranks,
// which is what medium messages pay for when ranks share cores.
//
// For n not a power of two, ranks pair up first (fold).
//
// At halving step m (m = p2/2, p2/4, …, 1) a rank keeps the half of its
// window of blocks on its side of bit m and trades the other half with the
// rank across that bit, so at the end virtual rank v holds block v reduced
// over all ranks; the doubling steps run the other way and hand blocks back.
// Each block is reduced on one rank only, so every rank ends with the same
// bits. Every step's range goes out in chunks of ChunkBytes, all posted
// before the first is waited for, so reducing one chunk overlaps receiving
// the next.
func halvingAllReduce[T Elem](ctx context.Context, c *Collectives, call Call, buf []T, op Op) error {
	n, count := c.Size(), len(buf)
	f := newFold(n)
	p2, final := f.p2, 2*f.levels()+1
	tmp := scratchOf[T](c, count)
	vr, err := foldIn(ctx, c, call, f, buf, tmp, op, final)
	if err != nil || vr < 0 {
		return err
	}
	elems := func(blo, bhi int) (int, int) { // elements of blocks [blo, bhi)
		lo, _ := segment(blo, p2, count)
		_, hi := segment(bhi-1, p2, count)
		return lo, hi
	}

	// Reduce-scatter: the window of blocks this rank is responsible for
	// halves at every step.
	combine := combineOf[T](c, op)
	wlo, whi := 0, p2
	step := 1
	for m := p2 / 2; m >= 1; m, step = m/2, step+1 {
		partner := f.real(vr ^ m)
		mid := (wlo + whi) / 2
		keepLo, keepHi, sendLo, sendHi := wlo, mid, mid, whi
		if vr&m != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, whi, wlo, mid
		}
		klo, khi := elems(keepLo, keepHi)
		slo, shi := elems(sendLo, sendHi)
		first := len(c.tickets)
		combined := c.combined[:0]
		ce := c.messageChunkElems(elemSize[T](), khi-klo)
		for j := range subchunks(klo, khi, ce) {
			a, b := sub(klo, khi, ce, j)
			folded, err := c.postCombine(partner, AsBytes(buf[a:b]), combine, AsBytes(tmp[a:b]))
			if err != nil {
				return err
			}
			combined = append(combined, folded)
		}
		c.combined = combined
		if err := sendChunks(ctx, c, call, partner, step, buf, slo, shi); err != nil {
			return err
		}
		err := waitChunks(ctx, c, call, partner, first, step, buf, klo, khi, func(j, a, b int) {
			if !combined[j] {
				Reduce(op, buf[a:b], buf[a:b], tmp[a:b])
			}
		})
		if err != nil {
			return err
		}
		wlo, whi = keepLo, keepHi
	}
	if op == Avg {
		lo, hi := elems(wlo, whi)
		Divide(buf[lo:hi], n)
	}

	// All-gather: the window doubles at every step, the partner's half
	// landing straight in buf.
	for m := 1; m < p2; m, step = m*2, step+1 {
		partner := f.real(vr ^ m)
		size := whi - wlo
		olo, ohi := wlo+size, whi+size
		if vr&m != 0 {
			olo, ohi = wlo-size, wlo
		}
		mlo, mhi := elems(wlo, whi)
		plo, phi := elems(olo, ohi)
		first := len(c.tickets)
		if err := postChunks(c, partner, buf, plo, phi); err != nil {
			return err
		}
		if err := sendChunks(ctx, c, call, partner, step, buf, mlo, mhi); err != nil {
			return err
		}
		if err := waitChunks(ctx, c, call, partner, first, step, buf, plo, phi, nil); err != nil {
			return err
		}
		wlo, whi = min(wlo, olo), max(whi, ohi)
	}
	return foldOut(ctx, c, call, f, buf, final)
}
