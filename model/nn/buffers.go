package nn

import (
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"slices"

	"github.com/gorun/gorun/model/tensor"
)

// Activation memory. A layer's input gradient is needed only until the
// layer before it has run its backward, and with gradients off a layer's
// output only until the next layer has read it; so a network does not need
// one such tensor per layer: containers (Chain, Residual, Checkpoint) lend
// their children buffers from a pool shared by the whole network, one call
// at a time, and take them back as soon as the next child has consumed
// them. A backward pass through a ResNet then holds a handful of gradient
// tensors at a time instead of one per layer
// (TestBackwardGradientBuffers).
//
// The pool belongs to the outermost container and is handed down on every
// call; a layer used on its own (a test calling Backward) keeps its own
// tensors, as before. Replicas have pools of their own unless
// ShareBuffers makes them borrow from their original's (a pipeline stage,
// whose microbatches run one pass at a time).

// buffer is storage that layers take turns writing, one at a time: a
// region of one of its pool's chunks while it holds one.
type buffer struct {
	t    *tensor.Tensor // the region, flat; no storage while it holds none
	pool *bufferPool    // the pool it belongs to
	at   *chunk         // the chunk holding the region, nil when none
	span span           // the region within at
}

// holds reports whether t lies (partly) in b's storage.
func (b *buffer) holds(t *tensor.Tensor) bool {
	return b != nil && tensor.Overlaps(b.t, t)
}

// bufferPool lends buffers; a buffer is either in the free list or held by
// exactly one borrower.
type bufferPool struct {
	free []*buffer
	made int // buffers created, for tests
	// chunks are the storage buffers' regions are cut from (fit), and
	// largest the largest region asked for so far, a new chunk's size.
	chunks  []*chunk
	largest int
	// recomputing, while set (a Checkpoint rebuilding its layer's
	// activations), makes forward passes with gradients on keep their
	// outputs in pool buffers, each held by its container until the
	// layer's backward is done, instead of the layers' own storage.
	recomputing bool
	// reads are the output gradients that deferred weight passes will
	// read (DeferWeightGrads); later the buffers holding them, kept out
	// of circulation until WeightGrads has run.
	reads []*tensor.Tensor
	later []*buffer
}

func (p *bufferPool) get() *buffer {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	p.made++
	return &buffer{pool: p}
}

// fit gives b a region of at least n elements on like's device, its
// contents unspecified except that a region b already holds, large
// enough, is kept (its tail given back): a layer writing its output over
// its input, which lies there, finds the input where it was.
//
// Regions come from chunks, best fit: the smallest free span large
// enough (the first such, chunk by chunk, lowest first), so that a
// request of a size just given back takes that place again and large
// free spans stay whole; spans given back merge with their free
// neighbours. A new chunk is as large as the largest region asked for
// so far, so that small regions pack into chunks the large ones later
// reuse, and a pass that repeats the last one's requests (a training
// step) finds everything it needs. Storage then follows what a pass
// holds at once, where a pool of storage per size class held, for each
// class, the most its pass ever held of it: ResNet-50's training step at
// batch 32 peaks 0.38 GiB lower, its inference 0.07 GiB (BENCHMARKS.md,
// "ResNet-50 on the CPU").
func (p *bufferPool) fit(b *buffer, like *tensor.Tensor, n int) {
	dev := like.Device()
	class := regionSize(n)
	if b.at != nil && b.at.t.Device() == dev && b.span.n >= class {
		b.at.give(span{b.span.off + class, b.span.n - class})
		b.place(b.at, span{b.span.off, class})
		return
	}
	old, oldSpan := b.at, b.span
	p.largest = max(p.largest, class)
	var c *chunk
	at := -1 // c.free's index of the span that fits best
	for _, k := range p.chunks {
		if k.t.Device() != dev {
			continue
		}
		for i, s := range k.free {
			if s.n >= class && (c == nil || s.n < c.free[at].n) {
				c, at = k, i
			}
		}
	}
	if c == nil {
		c = &chunk{free: []span{{0, p.largest}}}
		tensor.ReuseOn(dev, &c.t, p.largest)
		p.chunks = append(p.chunks, c)
		at = 0
	}
	b.place(c, span{c.take(at, class), class})
	if old != nil {
		old.give(oldSpan) // only now: the new region must not overlap it
	}
}

// sizeClass rounds n up to the nearest number whose binary form has at
// most five significant bits (sixteen classes per doubling, at most 6.25%
// unused), so that tensors of one shape, and of nearly equal sizes, take
// regions of one size, which the next ones of that size fit exactly.
func sizeClass(n int) int {
	shift := bits.Len(uint(n)) - 5
	if shift <= 0 {
		return n
	}
	unit := 1 << shift
	return (n + unit - 1) &^ (unit - 1)
}

// regionAlign is the alignment of regions within a chunk, in elements:
// 256 bytes, so that vector loads and stores over a region's rows start on
// cache lines as they do in storage of its own.
const regionAlign = 64

// regionSize is the size of the region fit gives a request for n
// elements: its size class, aligned.
func regionSize(n int) int {
	return (sizeClass(n) + regionAlign - 1) &^ (regionAlign - 1)
}

// place makes s of c b's region, b.t a flat tensor over it.
func (b *buffer) place(c *chunk, s span) {
	b.at, b.span = c, s
	if b.t == nil {
		b.t = &tensor.Tensor{}
	}
	t := b.t
	if c.t.Mem != nil {
		t.Data, t.Mem, t.Off = nil, c.t.Mem, c.t.Off+s.off
	} else {
		t.Data, t.Mem, t.Off = c.t.Data[s.off:s.off+s.n:s.off+s.n], nil, 0
	}
	if !t.SameShape(s.n) {
		t.Shape = append(t.Shape[:0], s.n)
	}
}

// release gives b's region back to its chunk; b then holds no storage.
func (b *buffer) release() {
	if b.at == nil {
		return
	}
	b.at.give(b.span)
	b.at = nil
	b.t.Data, b.t.Mem, b.t.Off = nil, nil, 0
}

// chunk is one allocation of storage that buffers' regions are cut from.
type chunk struct {
	t    *tensor.Tensor // flat storage, on the host or a device
	free []span         // unused spans, by offset, none adjacent
}

// span is elements [off, off+n) of a chunk.
type span struct{ off, n int }

// take cuts n elements from the start of free span i, which has them, and
// returns their offset.
func (c *chunk) take(i, n int) int {
	s := c.free[i]
	if s.n == n {
		c.free = slices.Delete(c.free, i, i+1)
	} else {
		c.free[i] = span{s.off + n, s.n - n}
	}
	return s.off
}

// give returns s to c's free spans, merged with the free spans beside it.
func (c *chunk) give(s span) {
	if s.n == 0 {
		return
	}
	i, _ := slices.BinarySearchFunc(c.free, s.off, func(f span, off int) int { return f.off - off })
	if i > 0 && c.free[i-1].off+c.free[i-1].n == s.off {
		i--
		s = span{c.free[i].off, c.free[i].n + s.n}
		c.free = slices.Delete(c.free, i, i+1)
	}
	if i < len(c.free) && s.off+s.n == c.free[i].off {
		s.n += c.free[i].n
		c.free = slices.Delete(c.free, i, i+1)
	}
	c.free = slices.Insert(c.free, i, s)
}

func (p *bufferPool) put(b *buffer) {
	switch {
	case b == nil:
	case len(p.reads) > 0 && p.heldForLater(b):
		p.later = append(p.later, b)
	default:
		p.recycle(b)
	}
}

// recycle gives b's region back and b to the free list.
func (p *bufferPool) recycle(b *buffer) {
	b.release()
	p.free = append(p.free, b)
}

// output is where a layer writes a result: its own tensor, or a view of the
// buffer its container lent it for the current call.
type output struct {
	own  *tensor.Tensor
	lent *buffer
	view *tensor.Tensor // the layer's header over lent's storage
}

// get returns a tensor of the given shape on like's device, its contents
// unspecified.
func (o *output) get(like *tensor.Tensor, shape ...int) *tensor.Tensor {
	if o.lent == nil {
		return tensor.ReuseLike(&o.own, like, shape...)
	}
	n := tensor.Volume(shape)
	if o.lent.pool != nil {
		o.lent.pool.fit(o.lent, like, n)
	}
	s := tensor.ReuseLike(&o.lent.t, like, n)
	v, err := tensor.View(&o.view, s, shape...)
	if err != nil {
		panic(fmt.Sprintf("nn: %v", err)) // the volumes agree by construction
	}
	return v
}

// borrower is a layer that writes its input gradient where its container
// says: a buffer lent for the next Backward call (nil: its own storage),
// and, for containers, the pool their own children borrow from and the
// pool buffer holding the gradient they are given (in), which is theirs
// for the call: they may overwrite it and must give it back.
type borrower interface {
	borrow(grad *buffer, pool *bufferPool, in *buffer)
}

// takesInput reports whether l takes over the buffer holding its output
// gradient (containers do: their first step is an elementwise one, or a
// child that can take it over in turn).
func takesInput(l Layer) bool {
	_, ok := l.(interface{ takeIn() *buffer })
	return ok
}

// inputGrad is a plain layer's input-gradient storage; layers embed it and
// take their gradient tensor from dx.get.
type inputGrad struct {
	dx   output
	pool *bufferPool // the pool lending for the current call, if any
}

func (g *inputGrad) borrow(b *buffer, p *bufferPool, _ *buffer) { g.dx.lent, g.pool = b, p }

// lending is a container's side: the pool its children borrow from (the
// network's, or its own when it is the outermost), the buffers its caller
// lent for its input gradient and its output, whether gradients are off
// (outputs are lent only then: SetGradEnabled), and the pool buffers it
// keeps because its last result lies there (a child that passes its input
// through, such as Flatten, at the end of the pass), given back on the
// next call in the same direction.
type lending struct {
	shared    *bufferPool
	own       bufferPool
	target    *buffer
	outTarget *buffer
	noGrad    bool
	in        *buffer // holds the gradient given to this Backward, ours
	kept      *buffer // the last Backward's result
	keptOut   *buffer // the last Forward's result, gradients off
	// acts holds, by child, the pool buffer with that child's recomputed
	// output (forwardAll while the pool recomputes), given back when the
	// container's backward is done. (Giving each back as soon as its
	// child's backward was done left the pool 12% larger when each
	// buffer kept storage of its own: small requests then took the large
	// buffers freed early, and large ones later needed new storage.)
	acts     []*buffer
	children capsCache
	// replicaOf is the pool of the layer this one is a replica of, which
	// it borrows from when it is the outermost (ShareBuffers).
	replicaOf *bufferPool
}

func (l *lending) borrow(b *buffer, p *bufferPool, in *buffer) {
	l.target, l.shared, l.in = b, p, in
}

// takeIn returns the buffer given with this call's gradient, if any; the
// caller must give it back to the pool.
func (l *lending) takeIn() *buffer {
	in := l.in
	l.in = nil
	return in
}
func (l *lending) borrowOut(b *buffer, p *bufferPool) { l.outTarget, l.shared = b, p }

// pool returns the pool for this call.
func (l *lending) pool() *bufferPool {
	if l.shared != nil {
		return l.shared
	}
	if l.replicaOf != nil {
		return l.replicaOf
	}
	return &l.own
}

// ShareBuffers makes replicas of l (Layer.Replica) borrow their gradient
// buffers from l's pool instead of each keeping a pool of its own: a
// pipeline stage runs its microbatches' passes one at a time, so the
// buffers one backward pass needs serve them all. l and the replicas must
// then never run at the same time. Only containers have pools; other
// layers are left as they are.
func ShareBuffers(l Layer, replicas ...Layer) {
	owner, ok := l.(interface{ pool() *bufferPool })
	if !ok {
		return
	}
	for _, r := range replicas {
		if c, ok := r.(interface{ borrowFrom(*bufferPool) }); ok {
			c.borrowFrom(owner.pool())
		}
	}
}

func (l *lending) borrowFrom(p *bufferPool) { l.replicaOf = p }

// giveBack returns *kept, a previous result's buffer, to its pool.
func giveBack(kept **buffer) {
	if *kept != nil {
		(*kept).pool.put(*kept)
		*kept = nil
	}
}

// through runs one pass through layers — backward (last layer first,
// each lent the buffer for its input gradient) or forward in evaluation
// (each lent the buffer for its output) — taking every buffer back from
// pool as soon as the next layer has consumed it. The final layer of the
// pass writes into final (nil: its own storage). inBuf is the pool buffer
// holding in, if the caller gives it up (nil: in stays untouched in the
// caller's hands). ready, when set, is called after each layer. It returns
// the result and the pool buffer holding it, if any (a final layer that
// passes its input through, as Flatten does), which the caller then owns.
func through(layers []Layer, cs []caps, in *tensor.Tensor, inBuf, final *buffer, pool *bufferPool, backward bool, label func(int) string, ready func(Layer)) (*tensor.Tensor, *buffer, error) {
	held := inBuf
	n := len(layers)
	for k := range n {
		i, out := k, final
		if backward {
			i = n - 1 - k
		}
		var folding *Conv2d // a convolution applying the batch norm after it
		if !backward {
			folding = foldsPair(layers, i)
			if conv, ok := layers[i].(*Conv2d); ok {
				conv.offNext = true // gradients are off (Freeze)
			}
		}
		switch {
		case k == n-1:
		case folding != nil && final != nil && foldsToEnd(layers, i, folding):
			out = final // the layers after it pass its output through
		case !backward && held != nil && cs[i].inPlace:
			out = held // an elementwise layer over an input only it reads
		default:
			out = pool.get()
		}
		var res *tensor.Tensor
		var err error
		// A loan lasts one call: called again on its own, a layer uses
		// its own storage.
		if backward {
			var give *buffer
			if held != nil && cs[i].takes {
				give, held = held, nil
			}
			cs[i].lend(out, pool, give)
			res, err = layers[i].Backward(in)
			cs[i].lend(nil, nil, nil)
		} else {
			if folding != nil {
				folding.foldNext = true // its batch norm is the next call
			}
			cs[i].lendOut(out, pool)
			res, err = layers[i].Forward(in)
			cs[i].lendOut(nil, nil)
		}
		if err != nil {
			pool.put(held)
			if k < n-1 && out != held {
				pool.put(out)
			}
			if backward {
				return nil, nil, fmt.Errorf("%s backward: %w", label(i), err)
			}
			return nil, nil, fmt.Errorf("%s: %w", label(i), err)
		}
		// The input is dead now, unless the result is a view of it.
		if held != nil && !held.holds(res) {
			pool.put(held)
			held = nil
		}
		if k < n-1 && out != held && out != final {
			if out.holds(res) {
				held = out
			} else {
				pool.put(out)
			}
		}
		if ready != nil {
			ready(layers[i])
		}
		in = res
	}
	return in, held, nil
}

// inPlaceCapable is a layer whose Forward may write its output over its
// input (an elementwise layer: batch norm). Containers let it when nothing
// else reads the input: with gradients off, inside the container.
type inPlaceCapable interface{ elementwise() }

func (*BatchNorm2d) elementwise() {}

func overwritesInput(l Layer) bool {
	_, ok := l.(inPlaceCapable)
	return ok
}

// outputUnread is a layer whose Backward does not read its own output, so
// the layer after it may overwrite that output in place (an in-place relu,
// a residual block's sum).
type outputUnread interface{ backwardIgnoresOutput() }

func (*BatchNorm2d) backwardIgnoresOutput() {}
func (*Conv2d) backwardIgnoresOutput()      {}
func (*Linear) backwardIgnoresOutput()      {}

// result is a plain layer's output storage; layers embed it and take their
// output tensor from out.get. With gradients off containers lend it
// buffers (outputs are dead once the next layer has read them); otherwise
// the layer keeps its own, which backward reads.
type result struct{ out output }

func (r *result) borrowOut(b *buffer, _ *bufferPool) { r.out.lent = b }

// outBorrower is a layer that writes its output where its container says
// (nil: its own storage) and, for containers, the pool their children
// borrow from.
type outBorrower interface {
	borrowOut(out *buffer, pool *bufferPool)
}

// SetGradEnabled turns off (false) or back on what backward needs in l, as
// torch.no_grad() does: with gradients off, the containers in l (Chain,
// Residual) let their children's outputs share a few buffers, each taken
// back once the next layer has read it, so a forward pass holds a handful
// of activations instead of one per layer; Backward then fails. Evaluation
// and inference turn gradients off; training mode (SetTraining) is a
// separate switch, as in PyTorch.
func SetGradEnabled(l Layer, enabled bool) {
	Walk(l, func(x Layer) {
		if c, ok := x.(interface{ setNoGrad(bool) }); ok {
			c.setNoGrad(!enabled)
		}
	})
}

func (l *lending) setNoGrad(off bool) { l.noGrad = off }

// errNoGrad is Backward's failure after a forward pass without gradients.
var errNoGrad = errors.New("backward after a forward pass with gradients off (SetGradEnabled)")

// caps is what a container may do with a child, found by type assertions
// once rather than on every call: an assertion to an interface allocates
// now and then while the runtime fills its per-call-site caches, which
// would break "a training step allocates nothing".
type caps struct {
	layer      Layer
	comparable bool // layer can be compared with ==
	grad       borrower
	out        outBorrower
	takes      bool // takes over the buffer of its output gradient
	inPlace    bool // may overwrite its input (inPlaceCapable)
	unread     bool // its backward does not read its output (outputUnread)
	outTaker   outputTaker
}

// outputTaker is a layer whose Backward reads its output first and then
// never again: given the pool buffer holding that output for one call, it
// gives it back as soon as it is read (a residual block: its relu's mask).
type outputTaker interface {
	takeOutput(b *buffer)
}

// handOut hands c's layer the buffer holding its output for its next
// Backward call, if it takes one; it reports whether the layer took it.
func (c *caps) handOut(b *buffer) bool {
	if c.outTaker == nil || b == nil {
		return false
	}
	c.outTaker.takeOutput(b)
	return true
}

func capsOf(l Layer) caps {
	c := caps{layer: l, comparable: reflect.TypeOf(l).Comparable()}
	c.grad, _ = l.(borrower)
	c.out, _ = l.(outBorrower)
	c.takes = takesInput(l)
	c.inPlace = overwritesInput(l)
	_, c.unread = l.(outputUnread)
	c.outTaker, _ = l.(outputTaker)
	return c
}

// lend lends c's layer the buffer for its next Backward, if it takes one.
func (c *caps) lend(grad *buffer, pool *bufferPool, in *buffer) {
	if c.grad != nil {
		c.grad.borrow(grad, pool, in)
	}
}

// lendOut lends c's layer the buffer for its next Forward's output, if
// it takes one.
func (c *caps) lendOut(out *buffer, pool *bufferPool) {
	if c.out != nil {
		c.out.borrowOut(out, pool)
	}
}

// capsCache holds the caps of a container's children, rebuilt when the
// children change (Chain.Layers is the caller's to edit).
type capsCache []caps

func (cc *capsCache) of(layers []Layer) []caps {
	same := len(*cc) == len(layers)
	for i := 0; same && i < len(layers); i++ {
		c := &(*cc)[i]
		same = c.comparable && c.layer == layers[i]
	}
	if !same {
		*cc = (*cc)[:0]
		for _, l := range layers {
			*cc = append(*cc, capsOf(l))
		}
		fuseReLUs(layers)
		fuseConvBNs(layers)
	}
	return *cc
}
