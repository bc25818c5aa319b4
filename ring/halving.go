package ring

import (
	"context"
	"math/bits"
)

// halvingAllReduce is Rabenseifner's all-reduce: a reduce-scatter by
// recursive halving, then an all-gather by recursive doubling. Each rank
// sends and receives what the ring moves, (n−1)/n of the buffer twice, but
// in 2·log2(n) steps instead of 2(n−1): fewer hand-offs between ranks,
// which is what medium messages pay for when ranks share cores.
//
// For n not a power of two, the first 2·rem ranks pair up as in
// doublingAllReduce: the even one of each pair hands its buffer over, sits
// the halving and doubling out, and receives the result at the end.
//
// At halving step m (m = p2/2, p2/4, …, 1) a rank keeps the half of its
// window of blocks on its side of bit m and trades the other half with the
// rank across that bit, so at the end virtual rank v holds block v reduced
// over all ranks; the doubling steps run the other way and hand blocks back.
// Each block is reduced on one rank only, so every rank ends with the same
// bits. Every step's range goes out in chunks of ChunkBytes, all posted
// before the first is waited for, so reducing one chunk overlaps receiving
// the next.
func halvingAllReduce[T Elem](ctx context.Context, c *Comm, call Call, buf []T, op Op) error {
	n, r, count := c.Size(), c.Rank, len(buf)
	p2 := 1 << (bits.Len(uint(n)) - 1)
	rem := n - p2
	levels := bits.Len(uint(p2)) - 1
	final := 2*levels + 1
	tmp := scratchOf[T](c, count)
	ce := c.chunkElems(elemSize[T]())

	// sendRange sends elements [lo, hi) of buf in chunks; postRange posts
	// dst's chunks of that range; waitRange waits for the chunks posted
	// from ticket first on, calling each(j, a, b) as chunk j, [a, b), lands.
	sendRange := func(to, step, lo, hi int) error {
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.send(ctx, to, call, step, j, AsBytes(buf[a:b])); err != nil {
				return err
			}
		}
		return nil
	}
	postRange := func(from, lo, hi int, dst []T) error {
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.post(from, AsBytes(dst[a:b])); err != nil {
				return err
			}
		}
		return nil
	}
	waitRange := func(from, first, step, lo, hi int, each func(j, a, b int)) error {
		for j := range subchunks(lo, hi, ce) {
			a, b := sub(lo, hi, ce, j)
			if err := c.wait(ctx, from, first+j, call, step, j, len(AsBytes(buf[a:b]))); err != nil {
				return err
			}
			if each != nil {
				each(j, a, b)
			}
		}
		return nil
	}
	reduceChunk := func(_, a, b int) { Reduce(op, buf[a:b], buf[a:b], tmp[a:b]) }

	// The ranks that sit out hand their buffer over and get the result.
	var vr int
	switch {
	case r < 2*rem && r%2 == 0:
		if err := sendRange(r+1, 0, 0, count); err != nil {
			return err
		}
		first := len(c.tickets)
		if err := postRange(r+1, 0, count, buf); err != nil {
			return err
		}
		return waitRange(r+1, first, final, 0, count, nil)
	case r < 2*rem:
		first := len(c.tickets)
		if err := postRange(r-1, 0, count, tmp); err != nil {
			return err
		}
		if err := waitRange(r-1, first, 0, 0, count, reduceChunk); err != nil {
			return err
		}
		vr = r / 2
	default:
		vr = r - rem
	}
	rankOf := func(v int) int {
		if v < rem {
			return 2*v + 1
		}
		return v + rem
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
		partner := rankOf(vr ^ m)
		mid := (wlo + whi) / 2
		keepLo, keepHi, sendLo, sendHi := wlo, mid, mid, whi
		if vr&m != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, whi, wlo, mid
		}
		klo, khi := elems(keepLo, keepHi)
		slo, shi := elems(sendLo, sendHi)
		first := len(c.tickets)
		combined := c.combined[:0]
		for j := range subchunks(klo, khi, ce) {
			a, b := sub(klo, khi, ce, j)
			folded, err := c.postCombine(partner, AsBytes(buf[a:b]), combine, AsBytes(tmp[a:b]))
			if err != nil {
				return err
			}
			combined = append(combined, folded)
		}
		c.combined = combined
		if err := sendRange(partner, step, slo, shi); err != nil {
			return err
		}
		err := waitRange(partner, first, step, klo, khi, func(j, a, b int) {
			if !combined[j] {
				reduceChunk(j, a, b)
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
		partner := rankOf(vr ^ m)
		size := whi - wlo
		olo, ohi := wlo+size, whi+size
		if vr&m != 0 {
			olo, ohi = wlo-size, wlo
		}
		mlo, mhi := elems(wlo, whi)
		plo, phi := elems(olo, ohi)
		first := len(c.tickets)
		if err := postRange(partner, plo, phi, buf); err != nil {
			return err
		}
		if err := sendRange(partner, step, mlo, mhi); err != nil {
			return err
		}
		if err := waitRange(partner, first, step, plo, phi, nil); err != nil {
			return err
		}
		wlo, whi = min(wlo, olo), max(whi, ohi)
	}
	if r < 2*rem {
		return sendRange(r-1, final, 0, count)
	}
	return nil
}
