package ring

import (
	"context"
	"math"
)

// Hierarchy describes a group whose members sit on several hosts, the
// same number L of them on each: Local is this member's host's members,
// Cross the members with this member's local index on every host (one
// per host). Both must be laid out alike on every member: Local in group
// order, Cross in the order of the hosts.
type Hierarchy struct {
	Local, Cross *Collectives
	// Positions[q] places group rank q: its host (its index in every
	// Cross) and its index among its host's members (in its Local).
	Positions []Position
	// Above says, per collective, when it goes host by host where no
	// cost model chooses (all-reduces, all-gathers and reduce-scatters
	// follow the group's Costs when it has them).
	Above Thresholds
	// Forced sends every collective host by host, whatever the
	// thresholds and costs say (GORUN_ALGO=hierarchical).
	Forced bool
}

// Position is a group member's place in a Hierarchy.
type Position struct{ Host, Local int }

// Thresholds hold, per collective, the size of buffer (in bytes: the
// whole buffer's, for all-gathers recv's and for reduce-scatters send's)
// above which it goes host by host: Always, a size, or Never.
type Thresholds struct {
	AllReduce, Broadcast, AllGather, ReduceScatter, Barrier int
}

// Threshold values: every call goes host by host, or none.
const (
	Always = -1
	Never  = math.MaxInt
)

// For returns kind's threshold (Never for the collectives that have no
// hierarchical form).
func (t Thresholds) For(kind Kind) int {
	switch kind {
	case KindAllReduce:
		return t.AllReduce
	case KindBroadcast:
		return t.Broadcast
	case KindAllGather:
		return t.AllGather
	case KindReduceScatter:
		return t.ReduceScatter
	case KindBarrier:
		return t.Barrier
	}
	return Never
}

// hierarchical reports whether a collective of kind over a buffer of
// bytes goes host by host: forced, chosen by the costs (all-gathers and
// reduce-scatters; all-reduces choose in allReduceAlgo), or above the
// threshold.
func (c *Collectives) hierarchical(kind Kind, bytes int) bool {
	h := c.Hier
	switch {
	case h == nil:
		return false
	case h.Forced:
		return true
	case c.Costs != nil && h.Cross.Costs != nil && (kind == KindAllGather || kind == KindReduceScatter):
		return c.Costs.gatherHierarchical(h, bytes)
	}
	return bytes > h.Above.For(kind)
}

// hierarchicalAllReduce all-reduces buf in three steps, so that the
// links between hosts carry 1/L of the data each and every host's link
// works at once: reduce-scatter among the host's members (shared memory),
// leaving member i of each host with block i summed over its host;
// all-reduce of block i among the members with local index i, one per
// host (the cross-host algorithm chosen for the block's size); then
// all-gather among the host's members. Blocks are whole elements: the
// last len(buf) mod L elements are all-reduced over the whole group.
func hierarchicalAllReduce[T Elem](ctx context.Context, c *Collectives, buf []T, op Op) error {
	h := c.Hier
	l, i := h.Local.Size(), h.Local.Rank
	k := len(buf) / l
	if k > 0 {
		main := buf[:k*l]
		mine := main[i*k : (i+1)*k]
		// In place: each member's own block of main is read only in the
		// reduce-scatter's last step, where it is also written.
		if err := ReduceScatter(ctx, h.Local, main, mine, op); err != nil {
			return err
		}
		if err := AllReduce(ctx, h.Cross, mine, op); err != nil {
			return err
		}
		if err := AllGather(ctx, h.Local, mine, main); err != nil {
			return err
		}
	}
	if tail := buf[k*l:]; len(tail) > 0 {
		return flatAllReduce(ctx, c, tail, op)
	}
	return nil
}

// hierarchicalBroadcast copies root's buf to every member in three
// steps, so that every host's link carries a share of it at once: the
// root scatters buf among its host's members, one nearly equal piece
// each (shared memory); the member with local index i on the root's host
// broadcasts piece i to the members with local index i on the other hosts
// (one cross-host broadcast per local index, all at once); every host
// all-gathers its pieces.
func hierarchicalBroadcast[T Elem](ctx context.Context, c *Collectives, buf []T, root int) error {
	h := c.Hier
	from := h.Positions[root]
	pieces := h.Local.segments(len(buf))
	lo, hi := pieces.block(h.Local.Rank)
	mine := buf[lo:hi]
	if h.Cross.Rank == from.Host {
		call := h.Local.begin(KindScatterV, DTypeOf[T](), 0, AlgoDirect, from.Local, len(buf))
		if err := scatter(ctx, h.Local, call, buf, pieces, mine, from.Local); err != nil {
			return err
		}
	}
	if err := Broadcast(ctx, h.Cross, mine, from.Host); err != nil {
		return err
	}
	call := h.Local.begin(KindAllGatherV, DTypeOf[T](), 0, AlgoRing, 0, len(buf))
	return allGather(ctx, h.Local, call, mine, buf, pieces)
}

// hierarchicalAllGather gathers every member's send into recv (group
// order) in two steps: an all-gather among the members with this member's
// local index, one per host (each host's link carries its L members'
// blocks at once), then an all-gather of those bundles among the host's
// members (shared memory); the bundles, ordered by local index and then
// host, are finally copied to their members' places in recv.
func hierarchicalAllGather[T Elem](ctx context.Context, c *Collectives, send, recv []T) error {
	h := c.Hier
	hosts, cnt := h.Cross.Size(), len(send)
	bundles := scratchOf[T](c, len(recv))
	bundle := hosts * cnt
	mine := bundles[h.Local.Rank*bundle : (h.Local.Rank+1)*bundle]
	if err := AllGather(ctx, h.Cross, send, mine); err != nil {
		return err
	}
	if err := AllGather(ctx, h.Local, mine, bundles); err != nil {
		return err
	}
	for q, p := range h.Positions {
		k := p.Local*hosts + p.Host
		copy(recv[q*cnt:(q+1)*cnt], bundles[k*cnt:(k+1)*cnt])
	}
	return nil
}

// hierarchicalReduceScatter is hierarchicalAllGather reversed: send's
// blocks are copied into bundles by local index, then host; a
// reduce-scatter among the host's members leaves each with its bundle
// reduced over the host (shared memory); a reduce-scatter of the bundle
// among the members with its local index, one per host, leaves each with
// its own block reduced over the group.
func hierarchicalReduceScatter[T Elem](ctx context.Context, c *Collectives, send, recv []T, op Op) error {
	h := c.Hier
	hosts, cnt := h.Cross.Size(), len(recv)
	tmp := scratchOf[T](c, len(send)+hosts*cnt)
	bundles, partial := tmp[:len(send)], tmp[len(send):]
	for q, p := range h.Positions {
		k := p.Local*hosts + p.Host
		copy(bundles[k*cnt:(k+1)*cnt], send[q*cnt:(q+1)*cnt])
	}
	if err := ReduceScatter(ctx, h.Local, bundles, partial, op); err != nil {
		return err
	}
	return ReduceScatter(ctx, h.Cross, partial, recv, op)
}

// hierarchicalBarrier waits for the host's members (shared memory), then
// for the members with this member's local index on every host: each of
// those entered only once its own host's members had, so every member of
// the group has entered when the second barrier returns.
func hierarchicalBarrier(ctx context.Context, c *Collectives) error {
	if err := Barrier(ctx, c.Hier.Local); err != nil {
		return err
	}
	return Barrier(ctx, c.Hier.Cross)
}
