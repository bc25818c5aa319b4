package cpu

import "github.com/gorun/gorun/model/tensor"

// Element-wise operations, pooling and optimizer updates run as an
// elemTask: the index range [0, n) (elements, or planes for pooling) is
// cut into one contiguous range per thread. Each element's result depends
// only on its own inputs (dropout's random numbers on its global index),
// so results do not depend on the thread count. The task lives in the
// Backend and is described by value, so dispatching allocates nothing.

type elemOp uint8

const (
	opReLU elemOp = iota
	opReLUBackward
	opDropout
	opMul
	opAdd
	opAddReLU
	opSGD
	opAdam
	opAdadelta
	opMaxPool
	opMaxPoolBackward
	opAddChunks
)

// elemGrain is the fewest elements worth handing to another thread.
const elemGrain = 1 << 15

type elemTask struct {
	op         elemOp
	n, per     int
	x, y, z, w *tensor.Tensor
	pool       tensor.PoolParams
	f          float32
	seed       uint64
	first      bool
	step       int
	sgd        tensor.SGDOptions
	adam       tensor.AdamOptions
	adadelta   tensor.AdadeltaOptions
	vec        vecOps    // the vector kernels (vecops.go)
	scratch    []scratch // per-worker buffers (max pooling's; the chunks' weight gradients)
	parts      int       // opAddChunks: how many chunks' sums
}

// runElem runs t over the threads, in ranges of at least grain units.
func (b *Backend) runElem(t elemTask, grain int) {
	e := &b.elem
	*e = t
	e.vec = b.vec
	e.scratch = b.chunks
	chunks := min(b.pool.Threads(), ceilDiv(t.n, max(grain, 1)))
	if chunks <= 1 {
		e.per = t.n
		e.Do(0, 0)
		return
	}
	e.per = ceilDiv(t.n, chunks)
	b.pool.Run(chunks, e)
}

// Do runs range i.
func (t *elemTask) Do(worker, i int) {
	lo := i * t.per
	hi := min(lo+t.per, t.n)
	if lo >= hi {
		return
	}
	switch t.op {
	case opReLU:
		t.vec.relu(t.y.Data[lo:hi], t.x.Data[lo:hi])
	case opReLUBackward:
		t.vec.reluBackward(t.z.Data[lo:hi], t.y.Data[lo:hi], t.x.Data[lo:hi])
	case opDropout:
		keep := float32(0) // the survivors' scale, 1/(1−p)
		if t.f < 1 {
			keep = 1 / (1 - t.f)
		}
		t.vec.dropout(t.y.Data[lo:hi], t.z.Data[lo:hi], t.x.Data[lo:hi], t.f, keep, t.seed, lo)
	case opMul:
		zd, yd := t.z.Data[lo:hi], t.y.Data[lo:hi]
		for i, v := range t.x.Data[lo:hi] {
			zd[i] = v * yd[i]
		}
	case opAdd:
		t.vec.add(t.z.Data[lo:hi], t.x.Data[lo:hi], t.y.Data[lo:hi])
	case opAddChunks:
		y := t.y.Data[lo:hi]
		for _, s := range t.scratch[:t.parts] {
			t.vec.add(y, y, s.dw[lo:hi])
		}
	case opAddReLU:
		t.vec.addReLU(t.z.Data[lo:hi], t.x.Data[lo:hi], t.y.Data[lo:hi])
	case opSGD:
		var buf []float32
		if t.sgd.Momentum != 0 {
			buf = t.z.Data[lo:hi]
		}
		sgdRange(t.vec, t.x.Data[lo:hi], t.y.Data[lo:hi], buf, t.sgd, t.first)
	case opAdam:
		adamRange(t.vec, t.x.Data[lo:hi], t.y.Data[lo:hi], t.z.Data[lo:hi], t.w.Data[lo:hi], t.adam, t.step)
	case opAdadelta:
		a := t.adadelta
		t.vec.adadelta(t.x.Data[lo:hi], t.y.Data[lo:hi], t.z.Data[lo:hi], t.w.Data[lo:hi], a.LR, a.Rho, a.Eps, a.WeightDecay)
	case opMaxPool:
		maxPoolPlanes(t.vec, &t.scratch[worker], t.x, t.y, t.pool, lo, hi)
	case opMaxPoolBackward:
		maxPoolBackwardPlanes(t.vec, &t.scratch[worker], t.x, t.y, t.z, t.pool, lo, hi)
	}
}
