package ring

import (
	"context"
	"fmt"
	"math/bits"
)

// The rooted collectives (ReduceToRoot, Gather, Scatter) and AllToAll.
// Every message is cut into frames of messageChunkElems (sendChunks,
// postChunks, waitChunks): MessageChunkBytes (else ChunkBytes), or
// quarters of a message that it would leave in fewer than four (not the
// all-to-all's, sent as direct frames of ChunkBytes); an empty range
// still sends one frame, so that a
// mismatch between ranks is always seen.

// ReduceToRoot reduces buf across the group into root's buf; the other
// ranks' buf are left as they were. Up to LinearReduceBytes among more
// than two ranks, every rank's buffer straight to the root
// (linearReduce); up to SmallBytes, a binomial tree (treeReduce); above,
// among more than two ranks, a ring reduce-scatter then a gather of the
// reduced blocks to the root (scatterGatherReduce), which spreads the
// reduction's work and links over every rank.
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
	if n > 2 && len(AsBytes(buf)) <= c.LinearReduceBytes {
		call := c.begin(KindReduce, DTypeOf[T](), op, AlgoDirect, root, len(buf))
		return linearReduce(ctx, c, call, buf, op, root)
	}
	if n > 2 && len(AsBytes(buf)) > c.smallBytes() {
		call := c.begin(KindReduce, DTypeOf[T](), op, AlgoScatterGather, root, len(buf))
		return scatterGatherReduce(ctx, c, call, buf, op, root)
	}
	call := c.begin(KindReduce, DTypeOf[T](), op, AlgoTree, root, len(buf))
	return treeReduce(ctx, c, call, buf, op, root)
}

// treeReduce is the binomial tree: ceil(log2(n)) rounds, each rank adding
// its children's partial results to its own, chunk by chunk as they land,
// before passing the sum to its parent.
func treeReduce[T Elem](ctx context.Context, c *Collectives, call Call, buf []T, op Op, root int) error {
	n := c.Size()
	c.tickets = c.tickets[:0]
	vr := mod(c.Rank-root, n)
	// acc holds the partial result: buf itself on the root and on a leaf
	// (which sends it unchanged), a copy on the other inner ranks, whose
	// buf must stay as it was; in receives each child's.
	acc, in := buf, []T(nil)
	switch leaf := vr%2 == 1 || vr+1 >= n; {
	case vr == 0:
		in = scratchOf[T](c, len(buf))
	case !leaf:
		s := scratchOf[T](c, 2*len(buf))
		acc, in = s[:len(buf)], s[len(buf):]
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
		child := mod(vr+mask+root, n)
		if len(AsBytes(in)) <= takeBytes {
			// A small message: taken straight from the transport where it
			// can (no receive posted, no mailbox), then added. Nothing
			// else is posted, and this rank sends nothing before its
			// children's messages are in.
			if err := recvChunks(ctx, c, call, child, step, in, 0, cnt); err != nil {
				return err
			}
			Reduce(op, acc, acc, in)
			continue
		}
		first := len(c.tickets)
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

// linearReduce sends every rank's buf to root, which receives them one
// rank after the next (root+1, root+2, …) and adds each into its own: no
// rank but the root waits for another, where the tree has each inner
// rank wait for its children before it sends (a scheduling hop per
// level when ranks share cores, a link's latency per level across
// hosts), at the cost of n−1 messages into one rank. The sum's order is
// fixed, so results are the same from run to run.
func linearReduce[T Elem](ctx context.Context, c *Collectives, call Call, buf []T, op Op, root int) error {
	n := c.Size()
	c.tickets = c.tickets[:0]
	if c.Rank != root {
		return sendChunks(ctx, c, call, root, 0, buf, 0, len(buf))
	}
	in := scratchOf[T](c, len(buf))
	for i := 1; i < n; i++ {
		if err := recvChunks(ctx, c, call, mod(root+i, n), 0, in, 0, len(buf)); err != nil {
			return err
		}
		Reduce(op, buf, buf, in)
	}
	if op == Avg {
		Divide(buf, n)
	}
	return nil
}

// takeBytes bounds the messages taken straight from the transport
// (Recver, SendRecver) instead of through a posted receive: a child's
// message in treeReduce, received whole into scratch and then added, and
// the blocks a two-rank all-to-all swaps in one SendRecv. For treeReduce,
// whose posted receives are folded in as they land, that pays up to it
// (two-rank 8-byte to 2 KiB Reduce 13–21% faster) and not above it,
// where the extra pass over the data costs as much as the mailbox saves
// (bench/results/current/small-take-2026-11-29-zen4.txt).
const takeBytes = 2 << 10

// scatterGatherReduce is the ring reduce-scatter of buf into a block of
// scratch per rank (steps 0 to n−2), then a gather of those blocks into
// root's buf (step n−1).
func scatterGatherReduce[T Elem](ctx context.Context, c *Collectives, call Call, buf []T, op Op, root int) error {
	n, r := c.Size(), c.Rank
	l := c.segments(len(buf))
	lo, hi := l.block(r)
	// The reduce-scatter's scratch is the first len(buf) elements; this
	// rank's reduced block goes after them.
	out := scratchOf[T](c, len(buf)+hi-lo)[len(buf):]
	if err := ringReduceScatter(ctx, c, call, buf, out, l, op); err != nil {
		return err
	}
	var recv []T
	if r == root {
		recv = buf
	}
	return gather(ctx, c, call, n-1, out, recv, l, root)
}

// Gather concatenates every rank's send, in rank order, into root's recv
// (Size()·len(send) elements; ignored elsewhere). Every rank sends its
// block straight to the root, which receives them in place.
func Gather[T Elem](ctx context.Context, c *Collectives, send, recv []T, root int) error {
	cnt := len(send)
	if err := checkRooted(c, "Gather", root, "recv", len(recv), cnt); err != nil {
		return err
	}
	call := c.begin(KindGather, DTypeOf[T](), 0, AlgoDirect, root, cnt)
	return gather(ctx, c, call, 0, send, recv, equalBlocks(cnt), root)
}

// GatherV is Gather with blocks of any sizes: rank k's send holds
// counts[k] elements, and root's recv their sum, end to end in rank
// order. Every rank passes the same counts.
func GatherV[T Elem](ctx context.Context, c *Collectives, send, recv []T, counts []int, root int) error {
	l, err := rootedLayout(c, "GatherV", root, counts, "send", len(send), "recv", len(recv))
	if err != nil {
		return err
	}
	call := c.begin(KindGatherV, DTypeOf[T](), 0, AlgoDirect, root, l.total(c.Size()))
	return gather(ctx, c, call, 0, send, recv, l, root)
}

// gather sends every rank's send to root, into its block of recv (laid
// out as l), as step of call.
func gather[T Elem](ctx context.Context, c *Collectives, call Call, step int, send, recv []T, l layout, root int) error {
	r := c.Rank
	c.tickets = c.tickets[:0]
	if r != root {
		return sendChunks(ctx, c, call, root, step, send, 0, len(send))
	}
	lo, hi := l.block(r)
	copy(recv[lo:hi], send)
	if c.Size() == 2 { // one block to receive
		from := 1 - r
		lo, hi := l.block(from)
		return recvChunks(ctx, c, call, from, step, recv, lo, hi)
	}
	return exchange(ctx, c, call, step, recv, l, nil, layout{}, false)
}

// Scatter sends block i of root's send (Size()·len(recv) elements; ignored
// elsewhere) to rank i's recv: straight from the root, or down a binomial
// tree (treeScatter) among more than two ranks when the root's send holds
// at most TreeScatterBytes.
func Scatter[T Elem](ctx context.Context, c *Collectives, send, recv []T, root int) error {
	cnt := len(recv)
	if err := checkRooted(c, "Scatter", root, "send", len(send), cnt); err != nil {
		return err
	}
	if n := c.Size(); n > 2 && cnt > 0 && n*cnt*int(elemSize[T]()) <= c.TreeScatterBytes {
		call := c.begin(KindScatter, DTypeOf[T](), 0, AlgoTree, root, cnt)
		return treeScatter(ctx, c, call, send, recv, root)
	}
	call := c.begin(KindScatter, DTypeOf[T](), 0, AlgoDirect, root, cnt)
	return scatter(ctx, c, call, send, equalBlocks(cnt), recv, root)
}

// treeScatter is the binomial tree: the root sends each child the blocks
// of that child's subtree in one message, largest subtree first, and
// every inner rank forwards its children's shares of what it received
// the same way, so that no rank sends more than ceil(log2(n)) messages —
// the linear scatter has the root send n−1 one after another. Ranks count
// from the root (vr): rank vr holds blocks vr to vr+span−1, span being
// the lowest set bit of vr (n for the root), clipped at n; a child at
// distance mask gets its blocks as step log2(mask).
func treeScatter[T Elem](ctx context.Context, c *Collectives, call Call, send, recv []T, root int) error {
	n, cnt := c.Size(), len(recv)
	c.tickets = c.tickets[:0]
	vr := mod(c.Rank-root, n)
	span := n
	var hold []T // blocks vr … vr+span−1 in that order
	if vr == 0 {
		hold = send
		if root != 0 { // the root's blocks from its own on, wrapping round
			hold = scratchOf[T](c, n*cnt)
			k := copy(hold, send[root*cnt:])
			copy(hold[k:], send[:root*cnt])
		}
	} else {
		low := vr & -vr
		span = min(low, n-vr)
		hold = recv
		if span > 1 {
			hold = scratchOf[T](c, span*cnt)
		}
		if err := recvChunks(ctx, c, call, mod(vr-low+root, n), bits.TrailingZeros(uint(low)), hold, 0, span*cnt); err != nil {
			return err
		}
	}
	for mask := 1 << bits.Len(uint(span-1)) >> 1; mask >= 1; mask >>= 1 {
		hi := min(2*mask, span)
		if err := sendChunks(ctx, c, call, mod(vr+mask+root, n), bits.TrailingZeros(uint(mask)), hold, mask*cnt, hi*cnt); err != nil {
			return err
		}
	}
	if span > 1 { // hold is send or scratch (the root's span is n)
		copy(recv, hold[:cnt])
	}
	return nil
}

// ScatterV is Scatter with blocks of any sizes: root's send holds the sum
// of counts, end to end in rank order, and rank k's recv receives block k
// (counts[k] elements). Every rank passes the same counts.
func ScatterV[T Elem](ctx context.Context, c *Collectives, send []T, counts []int, recv []T, root int) error {
	l, err := rootedLayout(c, "ScatterV", root, counts, "recv", len(recv), "send", len(send))
	if err != nil {
		return err
	}
	call := c.begin(KindScatterV, DTypeOf[T](), 0, AlgoDirect, root, l.total(c.Size()))
	return scatter(ctx, c, call, send, l, recv, root)
}

func scatter[T Elem](ctx context.Context, c *Collectives, call Call, send []T, l layout, recv []T, root int) error {
	n, r := c.Size(), c.Rank
	c.tickets = c.tickets[:0]
	if r != root {
		return recvChunks(ctx, c, call, root, 0, recv, 0, len(recv))
	}
	for i := 1; i < n; i++ { // the next ranks first
		to := mod(r+i, n)
		lo, hi := l.block(to)
		if err := sendChunks(ctx, c, call, to, 0, send, lo, hi); err != nil {
			return err
		}
	}
	lo, hi := l.block(r)
	copy(recv, send[lo:hi])
	return nil
}

// AllToAll sends block i of every rank's send to rank i, which receives it
// as block (sender) of its recv: equal blocks of len(send)/Size()
// elements. Among more than two ranks, blocks of at most BruckBytes go by
// Bruck's algorithm (log2(n) messages per rank); otherwise pairwise
// exchange: every receive is posted first (small blocks: taken after the
// sends, see exchange), then rank r sends to r+1, r+2, …, so that at each
// moment the ranks send to different peers.
func AllToAll[T Elem](ctx context.Context, c *Collectives, send, recv []T) error {
	n := c.Size()
	if len(send)%n != 0 || len(recv) != len(send) {
		return fmt.Errorf("ring: AllToAll: send holds %d and recv %d elements, want the same multiple of the %d ranks", len(send), len(recv), n)
	}
	cnt := len(send) / n
	if n > 2 && cnt > 0 && cnt*int(elemSize[T]()) <= c.BruckBytes {
		call := c.begin(KindAllToAll, DTypeOf[T](), 0, AlgoBruck, 0, cnt)
		return bruckAllToAll(ctx, c, call, send, recv, cnt)
	}
	call := c.begin(KindAllToAll, DTypeOf[T](), 0, AlgoPairwise, 0, cnt)
	l := equalBlocks(cnt)
	return allToAll(ctx, c, call, send, l, recv, l)
}

// AllToAllV is AllToAll with blocks of any sizes: block i of send
// (sendCounts[i] elements) goes to rank i, and block i of recv
// (recvCounts[i] elements) comes from rank i; blocks lie end to end in
// rank order. Rank i's recvCounts[j] must equal rank j's sendCounts[i].
func AllToAllV[T Elem](ctx context.Context, c *Collectives, send []T, sendCounts []int, recv []T, recvCounts []int) error {
	const what = "AllToAllV"
	n := c.Size()
	sl, err := c.layoutOf(0, what, "sendCounts", sendCounts)
	if err != nil {
		return err
	}
	rl, err := c.layoutOf(1, what, "recvCounts", recvCounts)
	if err != nil {
		return err
	}
	if len(send) != sl.total(n) || len(recv) != rl.total(n) {
		return fmt.Errorf("ring: %s: send holds %d and recv %d elements, want the sums of sendCounts and recvCounts, %d and %d", what, len(send), len(recv), sl.total(n), rl.total(n))
	}
	if a, b := sl.size(c.Rank), rl.size(c.Rank); a != b {
		return fmt.Errorf("ring: %s: this rank sends itself %d elements (sendCounts[%d]) but receives %d (recvCounts[%d])", what, a, c.Rank, b, c.Rank)
	}
	call := c.begin(KindAllToAllV, DTypeOf[T](), 0, AlgoPairwise, 0, -1)
	return allToAll(ctx, c, call, send, sl, recv, rl)
}

func allToAll[T Elem](ctx context.Context, c *Collectives, call Call, send []T, sl layout, recv []T, rl layout) error {
	r := c.Rank
	c.tickets = c.tickets[:0]
	slo, shi := sl.block(r)
	rlo, _ := rl.block(r)
	copy(recv[rlo:], send[slo:shi])
	return exchange(ctx, c, call, 0, recv, rl, send, sl, true)
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

// rootedLayout is vectorLayout for GatherV and ScatterV: root must be a
// group rank, and the argument named whole holds every block on the root
// only.
func rootedLayout(c *Collectives, what string, root int, counts []int, mine string, haveMine int, whole string, haveWhole int) (layout, error) {
	if root < 0 || root >= c.Size() {
		return layout{}, fmt.Errorf("ring: %s: root %d outside the group of %d", what, root, c.Size())
	}
	if c.Rank != root {
		haveWhole = -1 // ignored off the root
	}
	return c.vectorLayout(what, counts, mine, haveMine, whole, haveWhole)
}

// exchange receives block p of recv (laid out as rl) from every other
// group rank p: all receives posted, then, when sending, block p of send
// (laid out as sl) sent to each rank p from the next rank on (as direct
// frames where the transport has them: every rank copies at once), then
// the receives waited for in the order posted; frames are step of call.
// Where every block to receive is one frame of at most takeBytes, none
// is posted: after the sends, each is received in that order straight
// from the transport where it can (Recver: shared memory), which no
// mailbox touches (three- and eight-rank Gathers of 24 B–2 KiB 1.1–1.7×
// faster, all-to-alls 1.1–1.2×, four ranks within the noise;
// bench/results/current/take-small-blocks-2026-11-30-zen3.txt).
func exchange[T Elem](ctx context.Context, c *Collectives, call Call, step int, recv []T, rl layout, send []T, sl layout, sending bool) error {
	n, r := c.Size(), c.Rank
	if sending && n == 2 {
		// Two ranks swapping blocks of one small frame each: sent and
		// received in one call, the frame taken straight from the
		// transport where it can (no receive posted, no mailbox).
		peer := 1 - r
		rlo, rhi := rl.block(peer)
		slo, shi := sl.block(peer)
		in, out := AsBytes(recv[rlo:rhi]), AsBytes(send[slo:shi])
		if one := c.chunkElems(elemSize[T]()); rhi-rlo <= one && shi-slo <= one && len(in) <= takeBytes && len(out) <= takeBytes {
			return c.sendRecv(ctx, call, step, 0, peer, out, peer, in, len(in))
		}
	}
	// A gather's senders cut their blocks as sendChunks does. The
	// all-to-all's direct frames are read straight into place: cutting them
	// finer than the group's chunk pipelines nothing (two-rank 2–4 MiB
	// all-to-alls measured 6–9% slower in quarters;
	// bench/results/current/message-chunks-2026-11-29-zen4.txt).
	chunk := func(lo, hi int) int {
		if sending {
			return c.chunkElems(elemSize[T]())
		}
		return c.messageChunkElems(elemSize[T](), hi-lo)
	}
	take := takesAll(c, recv, rl, chunk) // nothing posted: see above
	for i := 1; i < n && !take; i++ {
		from := mod(r-i, n)
		lo, hi := rl.block(from)
		if err := postChunksBy(c, from, recv, lo, hi, chunk(lo, hi)); err != nil {
			return err
		}
	}
	if sending {
		for i := 1; i < n; i++ {
			to := mod(r+i, n)
			lo, hi := sl.block(to)
			if err := sendChunksDirect(ctx, c, call, to, step, send, lo, hi, chunk(lo, hi)); err != nil {
				return err
			}
		}
	}
	if take {
		for i := 1; i < n; i++ {
			from := mod(r-i, n)
			lo, hi := rl.block(from)
			b := AsBytes(recv[lo:hi])
			if err := c.recvOne(ctx, call, step, 0, from, b, len(b)); err != nil {
				return err
			}
		}
		return nil
	}
	first := 0
	for i := 1; i < n; i++ {
		from := mod(r-i, n)
		lo, hi := rl.block(from)
		ce := chunk(lo, hi)
		if err := waitChunksBy(ctx, c, call, from, first, step, recv, lo, hi, ce, nil); err != nil {
			return err
		}
		first += subchunks(lo, hi, ce)
	}
	return nil
}

// takesAll reports whether every block exchange receives into recv (laid
// out as rl) comes in one frame of at most takeBytes, cut by chunk.
func takesAll[T Elem](c *Collectives, recv []T, rl layout, chunk func(lo, hi int) int) bool {
	n, r := c.Size(), c.Rank
	for i := 1; i < n; i++ {
		lo, hi := rl.block(mod(r-i, n))
		if len(AsBytes(recv[lo:hi])) > takeBytes || subchunks(lo, hi, chunk(lo, hi)) != 1 {
			return false
		}
	}
	return true
}
