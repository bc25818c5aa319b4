package comm

import "context"

// The rooted collectives (Reduce, Gather, Scatter) and AllToAll, as MPI's
// and torch.distributed's. Each has an asynchronous form returning a
// *Work; a call's buffers must not be touched until its Wait returns.
// Algorithms (ring/rooted.go), among more than two ranks: Reduce sends
// every buffer straight to the root up to GORUN_LINEAR_REDUCE_BYTES, goes
// up a binomial tree up to GORUN_SMALL_BYTES (256 KiB by default; at any
// size between two ranks), and is a ring reduce-scatter then a gather to
// the root above; Gather sends straight to the root; Scatter goes down a
// binomial tree up to GORUN_TREE_SCATTER_BYTES, straight from the root
// above; AllToAll is Bruck's algorithm up to GORUN_BRUCK_BYTES a block,
// pairwise exchange above. The thresholds' defaults depend on the group
// (comm/env.go).

// Reduce reduces buf across the group into root's buf, in place; the
// other ranks' buf are left as they were.
func Reduce[T Elem](ctx context.Context, g *Group, buf []T, op Op, root int) error {
	return rooted(ctx, g, collective[T]{kind: reduce, buf: buf, op: op, root: root, count: len(buf)})
}

// ReduceAsync starts Reduce and returns at once.
func ReduceAsync[T Elem](ctx context.Context, g *Group, buf []T, op Op, root int) *Work {
	return rootedAsync(ctx, g, collective[T]{kind: reduce, buf: buf, op: op, root: root, count: len(buf)})
}

// Gather concatenates every rank's send, in rank order, into root's recv,
// which holds Size()·len(send) elements (recv is ignored elsewhere and may
// be nil).
func Gather[T Elem](ctx context.Context, g *Group, send, recv []T, root int) error {
	return rooted(ctx, g, collective[T]{kind: gather, buf: send, recv: recv, root: root, count: len(send)})
}

// GatherAsync starts Gather and returns at once.
func GatherAsync[T Elem](ctx context.Context, g *Group, send, recv []T, root int) *Work {
	return rootedAsync(ctx, g, collective[T]{kind: gather, buf: send, recv: recv, root: root, count: len(send)})
}

// Scatter sends block i of root's send (Size()·len(recv) elements; ignored
// elsewhere, may be nil) to rank i's recv.
func Scatter[T Elem](ctx context.Context, g *Group, send, recv []T, root int) error {
	return rooted(ctx, g, collective[T]{kind: scatter, buf: send, recv: recv, root: root, count: len(recv)})
}

// ScatterAsync starts Scatter and returns at once.
func ScatterAsync[T Elem](ctx context.Context, g *Group, send, recv []T, root int) *Work {
	return rootedAsync(ctx, g, collective[T]{kind: scatter, buf: send, recv: recv, root: root, count: len(recv)})
}

// AllToAll sends block i of send to rank i, which receives it as block
// (this rank) of its recv: send and recv hold Size() equal blocks.
func AllToAll[T Elem](ctx context.Context, g *Group, send, recv []T) error {
	return dispatch(ctx, g, collective[T]{kind: allToAll, buf: send, recv: recv, count: len(send) / max(g.Size(), 1)})
}

// AllToAllAsync starts AllToAll and returns at once.
func AllToAllAsync[T Elem](ctx context.Context, g *Group, send, recv []T) *Work {
	return dispatchAsync(ctx, g, collective[T]{kind: allToAll, buf: send, recv: recv, count: len(send) / max(g.Size(), 1)})
}

// rooted checks c's root and runs it.
func rooted[T Elem](ctx context.Context, g *Group, c collective[T]) error {
	if err := c.checkRoot(g); err != nil {
		return err
	}
	return dispatch(ctx, g, c)
}

// rootedAsync checks c's root and queues it.
func rootedAsync[T Elem](ctx context.Context, g *Group, c collective[T]) *Work {
	if err := c.checkRoot(g); err != nil {
		return finished(err)
	}
	return dispatchAsync(ctx, g, c)
}

// Reduce is Reduce on float32.
func (g *Group) Reduce(ctx context.Context, buf []float32, op Op, root int) error {
	return Reduce(ctx, g, buf, op, root)
}

// ReduceAsync is ReduceAsync on float32.
func (g *Group) ReduceAsync(ctx context.Context, buf []float32, op Op, root int) *Work {
	return ReduceAsync(ctx, g, buf, op, root)
}

// Gather is Gather on float32.
func (g *Group) Gather(ctx context.Context, send, recv []float32, root int) error {
	return Gather(ctx, g, send, recv, root)
}

// GatherAsync is GatherAsync on float32.
func (g *Group) GatherAsync(ctx context.Context, send, recv []float32, root int) *Work {
	return GatherAsync(ctx, g, send, recv, root)
}

// Scatter is Scatter on float32.
func (g *Group) Scatter(ctx context.Context, send, recv []float32, root int) error {
	return Scatter(ctx, g, send, recv, root)
}

// ScatterAsync is ScatterAsync on float32.
func (g *Group) ScatterAsync(ctx context.Context, send, recv []float32, root int) *Work {
	return ScatterAsync(ctx, g, send, recv, root)
}

// AllToAll is AllToAll on float32.
func (g *Group) AllToAll(ctx context.Context, send, recv []float32) error {
	return AllToAll(ctx, g, send, recv)
}

// AllToAllAsync is AllToAllAsync on float32.
func (g *Group) AllToAllAsync(ctx context.Context, send, recv []float32) *Work {
	return AllToAllAsync(ctx, g, send, recv)
}
