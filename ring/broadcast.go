package ring

import "context"

// Broadcast copies root's buf to every rank's buf. Small messages follow a
// binomial tree (log2(n) steps); large ones a pipelined chain from the root,
// chunk after chunk, so every link is busy at once; across hosts, above
// the hierarchy's threshold, host by host (hierarchicalBroadcast). Each
// rank's last send in the tree, and a chain's only chunk, go as direct
// frames where the transport has them: nothing else waits behind them.
func Broadcast[T Elem](ctx context.Context, c *Collectives, buf []T, root int) error {
	if c.hierarchical(KindBroadcast, len(AsBytes(buf))) {
		c.begin(KindBroadcast, DTypeOf[T](), 0, AlgoHierarchical, root, len(buf))
		return hierarchicalBroadcast(ctx, c, buf, root)
	}
	algo := AlgoChain
	if len(AsBytes(buf)) <= c.smallBytes() {
		algo = AlgoTree
	}
	call := c.begin(KindBroadcast, DTypeOf[T](), 0, algo, root, len(buf))
	c.tickets = c.tickets[:0]
	n := c.Size()
	if n == 1 {
		return nil
	}
	vr := mod(c.Rank-root, n)
	rankOf := func(v int) int { return mod(v+root, n) }
	data := AsBytes(buf)

	if algo == AlgoTree {
		mask := 1
		for mask < n {
			if vr&mask != 0 {
				parent := rankOf(vr - mask)
				if err := c.recvOne(ctx, call, 0, 0, parent, data, len(data)); err != nil {
					return err
				}
				break
			}
			mask <<= 1
		}
		for mask >>= 1; mask > 0; mask >>= 1 {
			if vr+mask >= n {
				continue
			}
			// The last child (mask 1) reads the frame straight from this
			// rank's buffer; the others, sent first, go through the rings,
			// so that this rank need not wait for their reads before it
			// serves the next (measured: BENCHMARKS.md).
			send := (*Collectives).send
			if mask == 1 {
				send = (*Collectives).sendDirectLarge
			}
			if err := send(c, ctx, rankOf(vr+mask), call, 0, 0, data); err != nil {
				return err
			}
		}
		return nil
	}

	ce := c.messageChunkElems(elemSize[T](), len(buf))
	chunks := subchunks(0, len(buf), ce)
	prev, next := rankOf(vr-1), rankOf(vr+1)
	if vr > 0 {
		for j := range chunks {
			a, b := sub(0, len(buf), ce, j)
			if err := c.post(prev, AsBytes(buf[a:b])); err != nil {
				return err
			}
		}
	}
	for j := range chunks {
		a, b := sub(0, len(buf), ce, j)
		if vr > 0 {
			if err := c.wait(ctx, prev, j, call, 0, j, len(AsBytes(buf[a:b]))); err != nil {
				return err
			}
		}
		if vr == n-1 {
			continue
		}
		send := (*Collectives).send
		if chunks == 1 { // nothing waits behind it
			send = (*Collectives).sendDirectLarge
		}
		if err := send(c, ctx, next, call, 0, j, AsBytes(buf[a:b])); err != nil {
			return err
		}
	}
	return nil
}

// Barrier returns once every rank of the group has entered it: the
// dissemination algorithm, ceil(log2(n)) rounds of empty messages; across
// hosts, unless the hierarchy says Never, within each host and then
// between them (hierarchicalBarrier).
func Barrier(ctx context.Context, c *Collectives) error {
	if c.hierarchical(KindBarrier, 0) {
		c.begin(KindBarrier, Uint8, 0, AlgoHierarchical, 0, 0)
		return hierarchicalBarrier(ctx, c)
	}
	call := c.begin(KindBarrier, Uint8, 0, AlgoDissemination, 0, 0)
	c.tickets = c.tickets[:0]
	n, r := c.Size(), c.Rank
	for round, dist := 0, 1; dist < n; round, dist = round+1, dist*2 {
		from, to := mod(r-dist, n), mod(r+dist, n)
		if err := c.sendRecv(ctx, call, round, 0, to, nil, from, nil, 0); err != nil {
			return err
		}
	}
	return nil
}
