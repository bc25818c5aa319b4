package comm

import "context"

// The vector (v) collectives, as MPI's: blocks of a different size per
// rank, laid end to end in rank order. Every rank passes the same counts
// (for AllToAllV, rank i's recvCounts[j] equals rank j's sendCounts[i]);
// a disagreement fails the call on the ranks it reaches, naming the peer
// and the sizes. Each has an asynchronous form returning a *Work; the
// buffers and counts must not be touched until its Wait returns.
// Algorithms as for the equal-block forms (ring/rooted.go, ring/gather.go).

// AllGatherV gathers every rank's send (counts[k] elements on rank k) into
// recv on every rank, which holds the counts' sum.
func AllGatherV[T Elem](ctx context.Context, g *Group, send, recv []T, counts []int) error {
	return dispatch(ctx, g, collective[T]{kind: allGatherV, buf: send, recv: recv, counts: counts, count: len(recv)})
}

// AllGatherVAsync starts AllGatherV and returns at once.
func AllGatherVAsync[T Elem](ctx context.Context, g *Group, send, recv []T, counts []int) *Work {
	return dispatchAsync(ctx, g, collective[T]{kind: allGatherV, buf: send, recv: recv, counts: counts, count: len(recv)})
}

// GatherV gathers every rank's send (counts[k] elements on rank k) into
// root's recv, which holds the counts' sum (ignored elsewhere, may be nil).
func GatherV[T Elem](ctx context.Context, g *Group, send, recv []T, counts []int, root int) error {
	return rooted(ctx, g, collective[T]{kind: gatherV, buf: send, recv: recv, counts: counts, root: root, count: len(send)})
}

// GatherVAsync starts GatherV and returns at once.
func GatherVAsync[T Elem](ctx context.Context, g *Group, send, recv []T, counts []int, root int) *Work {
	return rootedAsync(ctx, g, collective[T]{kind: gatherV, buf: send, recv: recv, counts: counts, root: root, count: len(send)})
}

// ScatterV sends block k of root's send (which holds the counts' sum;
// ignored elsewhere, may be nil) to rank k's recv, counts[k] elements.
func ScatterV[T Elem](ctx context.Context, g *Group, send []T, counts []int, recv []T, root int) error {
	return rooted(ctx, g, collective[T]{kind: scatterV, buf: send, recv: recv, counts: counts, root: root, count: len(recv)})
}

// ScatterVAsync starts ScatterV and returns at once.
func ScatterVAsync[T Elem](ctx context.Context, g *Group, send []T, counts []int, recv []T, root int) *Work {
	return rootedAsync(ctx, g, collective[T]{kind: scatterV, buf: send, recv: recv, counts: counts, root: root, count: len(recv)})
}

// AllToAllV sends block i of send (sendCounts[i] elements) to rank i, and
// receives from rank i block i of recv (recvCounts[i] elements).
func AllToAllV[T Elem](ctx context.Context, g *Group, send []T, sendCounts []int, recv []T, recvCounts []int) error {
	return dispatch(ctx, g, collective[T]{kind: allToAllV, buf: send, recv: recv, counts: sendCounts, recvCount: recvCounts, count: len(send)})
}

// AllToAllVAsync starts AllToAllV and returns at once.
func AllToAllVAsync[T Elem](ctx context.Context, g *Group, send []T, sendCounts []int, recv []T, recvCounts []int) *Work {
	return dispatchAsync(ctx, g, collective[T]{kind: allToAllV, buf: send, recv: recv, counts: sendCounts, recvCount: recvCounts, count: len(send)})
}

// ReduceScatterV reduces send (the counts' sum of elements) across the
// group and leaves block k of the result, counts[k] elements, in rank k's
// recv.
func ReduceScatterV[T Elem](ctx context.Context, g *Group, send, recv []T, counts []int, op Op) error {
	return dispatch(ctx, g, collective[T]{kind: reduceScatterV, buf: send, recv: recv, counts: counts, op: op, count: len(send)})
}

// ReduceScatterVAsync starts ReduceScatterV and returns at once.
func ReduceScatterVAsync[T Elem](ctx context.Context, g *Group, send, recv []T, counts []int, op Op) *Work {
	return dispatchAsync(ctx, g, collective[T]{kind: reduceScatterV, buf: send, recv: recv, counts: counts, op: op, count: len(send)})
}
