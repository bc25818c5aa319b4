package train

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// Bucket sizes, as PyTorch's DistributedDataParallel: the first bucket
// (the last layers' gradients, ready first) is small so its all-reduce
// starts early; the others hold about 25 MB.
const (
	firstBucketBytes = 1 << 20
	bucketBytes      = 25 << 20
)

// DDP averages a model's gradients across a comm.Group, as PyTorch's
// DistributedDataParallel does. The gradients live in a few flat buckets
// (each parameter's gradient tensor is a view into one), filled in reverse
// parameter order; during Backward, as soon as every gradient of a bucket
// is final, an asynchronous all-reduce (average) of the bucket starts, so
// communication overlaps the rest of backward. Finish waits for what is
// still in flight.
type DDP struct {
	g       *comm.Group
	ctx     context.Context
	buckets []*bucket
	// units maps each layer that reports through nn.Chain.GradReady to the
	// buckets of its parameters (one entry per parameter).
	units map[nn.Layer][]int
	sync  bool

	// On a GPU: where the buckets live and how they reach the network.
	dev         tensor.Device
	stager      comm.Stager
	closeStager func()

	// compress is the 16-bit type gradients travel as ("": float32), or
	// "powersgd" (psgd).
	compress string
	psgd     *powerSGD

	// Per-run accounting.
	busy, exposed time.Duration
	steps         int // Finish calls that reduced
	wireBytes     int64
}

type bucket struct {
	buf       []float32       // on the host
	bf16      []comm.BFloat16 // buf on the wire, with bf16 compression
	fp16      []comm.Float16  // buf on the wire, with fp16 compression
	dev       *tensor.Tensor  // on a device (buf nil)
	index     int             // place in DDP.buckets
	params    int             // parameters in the bucket
	shapes    [][]int         // each parameter's gradient shape
	offs      []int           // and where it starts in the bucket
	remaining int             // parameters whose gradient is not final yet this step
	work      *comm.Work
}

// NewDDP broadcasts rank 0's parameters and buffers to every rank and
// prepares net's gradients for averaging across g. On a GPU backend the
// gradient buckets live in device memory and are reduced through pinned
// host buffers (comm.CUDAStager).
func NewDDP(ctx context.Context, g *comm.Group, net nn.Layer, be tensor.Backend) (*DDP, error) {
	return newDDP(ctx, g, net, be, 0)
}

// broadcastVars gives every rank of g root's values of vars.
func broadcastVars(ctx context.Context, g *comm.Group, vars []nn.Var, root int) error {
	for _, v := range vars {
		var err error
		switch {
		case v.Count != nil:
			c := []int64{*v.Count}
			err = comm.Broadcast(ctx, g, c, root)
			*v.Count = c[0]
		case v.Value.Mem != nil:
			h := v.Value.HostData()
			if err = g.Broadcast(ctx, h, root); err == nil {
				v.Value.SetHostData(h)
			}
		default:
			err = g.Broadcast(ctx, v.Value.Data, root)
		}
		if err != nil {
			return fmt.Errorf("broadcasting %s from rank %d: %w", v.Name, root, err)
		}
	}
	return nil
}

// newDDP is NewDDP with root's parameters and buffers.
func newDDP(ctx context.Context, g *comm.Group, net nn.Layer, be tensor.Backend, root int) (*DDP, error) {
	if err := broadcastVars(ctx, g, net.State(), root); err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	d := &DDP{g: g, ctx: ctx, units: map[nn.Layer][]int{}, dev: tensor.DeviceOf(be)}
	var err error
	if d.stager, d.closeStager, err = stagerFor(be); err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	params := nn.Params(net)
	// Assign parameters to buckets in reverse order.
	bucketOf := make(map[*tensor.Tensor]int, len(params))
	capBytes, size := firstBucketBytes, 0
	var cur []nn.Var
	closeBucket := func() {
		if len(cur) == 0 {
			return
		}
		n := 0
		for _, p := range cur {
			n += p.Grad.Len()
		}
		b := &bucket{index: len(d.buckets), params: len(cur)}
		if d.dev != nil {
			b.dev = tensor.NewOn(d.dev, n)
		} else {
			b.buf = make([]float32, n)
		}
		off := 0
		for _, p := range cur {
			m := p.Grad.Len()
			if d.dev != nil {
				// The gradient becomes a view of the bucket, in place.
				view, _ := b.dev.Slice(off, p.Grad.Shape...)
				view.SetHostData(p.Grad.HostData())
				p.Grad.Data, p.Grad.Mem, p.Grad.Off = nil, view.Mem, view.Off
			} else {
				view := b.buf[off : off+m]
				copy(view, p.Grad.Data)
				p.Grad.Data = view
			}
			bucketOf[p.Grad] = len(d.buckets)
			b.shapes, b.offs = append(b.shapes, p.Grad.Shape), append(b.offs, off)
			off += m
		}
		d.buckets = append(d.buckets, b)
		cur, size, capBytes = nil, 0, bucketBytes
	}
	for i := len(params) - 1; i >= 0; i-- {
		cur = append(cur, params[i])
		size += 4 * params[i].Grad.Len()
		if size >= capBytes {
			closeBucket()
		}
	}
	closeBucket()
	// Which layers report which parameters: the outermost layers that are
	// some chain's children and not chains themselves. A chain's child
	// reports for every parameter inside it, so nothing inside it (a
	// residual block's downsampling chain, a checkpoint's inner layers)
	// reports again: a parameter counted twice would never let its bucket
	// start.
	reported := 0
	var visit func(l nn.Layer)
	visit = func(l nn.Layer) {
		c, ok := l.(*nn.Chain)
		if !ok {
			if box, ok := l.(nn.Container); ok {
				for _, child := range box.Children() {
					visit(child)
				}
			}
			return
		}
		c.GradReady = d.gradReady
		for _, child := range c.Layers {
			if _, nested := child.(*nn.Chain); nested {
				visit(child)
				continue
			}
			for _, p := range nn.Params(child) {
				if p.Grad.Len() > 0 {
					d.units[child] = append(d.units[child], bucketOf[p.Grad])
					reported++
				}
			}
		}
	}
	visit(net)
	if reported != len(params) {
		// Parameters outside any chain: they are reduced at Finish.
		d.units = map[nn.Layer][]int{}
	}
	return d, nil
}

// Buckets returns the sizes of the gradient buckets in elements, in the
// order they are reduced.
func (d *DDP) Buckets() []int {
	var s []int
	for _, b := range d.buckets {
		if b.dev != nil {
			s = append(s, b.dev.Len())
		} else {
			s = append(s, len(b.buf))
		}
	}
	return s
}

// BeginStep prepares a backward pass; with sync false (a micro-step of
// gradient accumulation, like PyTorch's no_sync) gradients only
// accumulate locally.
func (d *DDP) BeginStep(sync bool) {
	d.sync = sync
	for _, b := range d.buckets {
		b.remaining = b.params
		b.work = nil
	}
}

// gradReady is the chains' GradReady hook.
func (d *DDP) gradReady(l nn.Layer) {
	if !d.sync {
		return
	}
	for _, bi := range d.units[l] {
		b := d.buckets[bi]
		if b.remaining--; b.remaining == 0 {
			d.launch(b)
		}
	}
}

func (d *DDP) launch(b *bucket) {
	switch {
	case b.dev != nil && d.compress == "bf16":
		b.work = launchDeviceHalf(d, b, &b.bf16)
	case b.dev != nil && d.compress == "fp16":
		b.work = launchDeviceHalf(d, b, &b.fp16)
	case b.dev != nil:
		b.work = d.g.AllReduceDeviceAsync(d.ctx, d.stager, b.dev.Ptr(), b.dev.Len(), comm.Avg)
		d.wireBytes += 4 * int64(b.dev.Len())
	case d.compress == "bf16":
		b.work = launchHalf(d, &b.bf16, b.buf)
	case d.compress == "fp16":
		b.work = launchHalf(d, &b.fp16, b.buf)
	case d.psgd != nil && d.psgd.active():
		d.wireBytes += d.psgd.launch(d, b.index, b.buf)
		b.work = d.psgd.buckets[b.index].work
	default:
		b.work = d.g.AllReduceAsync(d.ctx, b.buf, comm.Avg)
		d.wireBytes += 4 * int64(len(b.buf))
	}
}

// launchDeviceHalf starts averaging a GPU bucket with 16-bit floats on
// the wire: each staged chunk is rounded on the host into *wire (one
// chunk's worth, reused) and widened back before it goes up.
func launchDeviceHalf[H comm.Half](d *DDP, b *bucket, wire *[]H) *comm.Work {
	n := b.dev.Len()
	*wire = grown(*wire, min(n, d.stager.Chunk()))
	d.wireBytes += 2 * int64(n)
	return comm.AllReduceDeviceHalfAsync(d.ctx, d.g, d.stager, b.dev.Ptr(), n, comm.Avg, *wire)
}

// decompress widens a compressed bucket's average back into its
// gradients (a GPU bucket's came back widened).
func (d *DDP) decompress(b *bucket) {
	if b.dev != nil {
		return
	}
	switch d.compress {
	case "bf16":
		comm.WidenInto(b.buf, b.bf16)
	case "fp16":
		comm.WidenInto(b.buf, b.fp16)
	}
}

// launchHalf rounds src into *wire and starts averaging it.
func launchHalf[H comm.Half](d *DDP, wire *[]H, src []float32) *comm.Work {
	*wire = grown(*wire, len(src))
	comm.NarrowInto(*wire, src)
	d.wireBytes += 2 * int64(len(src))
	return comm.AllReduceAsync(d.ctx, d.g, *wire, comm.Avg)
}

// grown returns s with n elements, reallocated only when too short.
func grown[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// SetCompression makes the gradients travel as "bf16" or "fp16" (16-bit
// floats averaged in float32), "powersgd:R[:START]" (PowerSGD of rank R
// from step START on, powersgd.go), or "" / "none" (float32):
// Config.GradCompression. PowerSGD runs on host buckets only; GPU
// buckets round and widen each staged chunk on the host.
func (d *DDP) SetCompression(kind string) error {
	if d.psgd != nil {
		d.psgd.eng.Close()
		d.psgd = nil
	}
	rank, start, isPowerSGD, err := parsePowerSGD(kind)
	switch {
	case err != nil:
		return fmt.Errorf("ddp: %w", err)
	case kind == "" || kind == "none":
		d.compress = ""
		return nil
	case kind != "bf16" && kind != "fp16" && !isPowerSGD:
		return fmt.Errorf("ddp: gradient compression %q: want none, bf16, fp16 or powersgd:RANK", kind)
	case d.dev != nil && isPowerSGD:
		return fmt.Errorf("ddp: --grad-compression %s: PowerSGD on GPU gradients is not built yet (bf16 and fp16 are)", kind)
	case isPowerSGD:
		d.compress = "powersgd"
		d.psgd = newPowerSGD(d, rank, start)
		return nil
	}
	d.compress = kind
	return nil
}

// WireBytes returns the gradient bytes this rank has handed to the
// all-reduces so far (each bucket's size in its wire type, per reduction).
func (d *DDP) WireBytes() int64 { return d.wireBytes }

// Close releases the staging buffers of a GPU run and PowerSGD's
// threads.
func (d *DDP) Close() {
	if d.closeStager != nil {
		d.closeStager()
	}
	if d.psgd != nil {
		d.psgd.eng.Close()
	}
}

// Finish starts the reductions not yet started (in bucket order) and waits
// for all of them. It returns the time spent waiting, which counts as
// exposed communication (CommTimes) also when the wait fails: a run that
// ends waiting for a rank that never arrived reports that time where it
// went.
func (d *DDP) Finish() (time.Duration, error) {
	if !d.sync {
		return 0, nil
	}
	t0 := time.Now()
	err := d.finish()
	waited := time.Since(t0)
	d.exposed += waited
	return waited, err
}

// finish is Finish's work: the reductions launched and waited for.
func (d *DDP) finish() error {
	compressing := d.psgd != nil && d.psgd.active()
	for _, b := range d.buckets {
		if b.work == nil {
			d.launch(b)
		}
	}
	if compressing {
		if err := d.finishPowerSGD(); err != nil {
			return err
		}
	} else {
		for i, b := range d.buckets {
			err := b.work.Wait()
			start, end := b.work.Span() // zero for a call refused at once
			d.busy += end.Sub(start)
			if err != nil {
				return fmt.Errorf("ddp: averaging gradient bucket %d: %w", i, err)
			}
			d.decompress(b)
		}
	}
	if d.psgd != nil {
		d.psgd.steps++
	}
	d.steps++
	return nil
}

// finishPowerSGD is Finish for a step PowerSGD compresses: every
// bucket's second all-reduce (Q) starts, in bucket order, once its first
// (P and the uncompressed gradients) is done; then each is decompressed.
func (d *DDP) finishPowerSGD() error {
	for i, b := range d.buckets {
		bytes, err := d.psgd.second(d, i, b.buf)
		if err != nil {
			return fmt.Errorf("ddp: averaging gradient bucket %d (PowerSGD's P): %w", i, err)
		}
		d.wireBytes += bytes
	}
	for i := range d.buckets {
		if err := d.psgd.finish(i, d.buckets[i].buf); err != nil {
			return fmt.Errorf("ddp: averaging gradient bucket %d (PowerSGD's Q): %w", i, err)
		}
		pb := &d.psgd.buckets[i]
		_, end := pb.work.Span()
		d.busy += end.Sub(pb.started)
	}
	return nil
}

// ReduceAll averages every bucket now, whatever BeginStep said (a
// pipeline stage reduces once after all its microbatches), and returns the
// time it took.
func (d *DDP) ReduceAll() (time.Duration, error) {
	d.sync = true
	for _, b := range d.buckets {
		b.work = nil
	}
	return d.Finish()
}

// ArrivalDelays returns, for each rank of the group, how late it came to
// the gradient all-reduces on average per step: how long the others
// waited for it. A rank that arrives late waits least in the reduction,
// so its delay is the longest mean reduction time of any rank less its
// own (no clocks are compared: ranks on different hosts need not agree).
// Every rank must call it.
func (d *DDP) ArrivalDelays(ctx context.Context) ([]time.Duration, error) {
	mean := make([]float64, d.g.Size())
	mean[d.g.Rank()] = float64(d.busy) / float64(max(d.steps, 1))
	if err := comm.AllReduce(ctx, d.g, mean, comm.Sum); err != nil {
		return nil, fmt.Errorf("ddp: gathering the arrival delays: %w", err)
	}
	longest := 0.0
	for _, m := range mean {
		longest = max(longest, m)
	}
	delays := make([]time.Duration, len(mean))
	for r, m := range mean {
		delays[r] = time.Duration(longest - m)
	}
	return delays, nil
}

// CommTimes returns the time gradient reductions ran (summed over buckets
// and steps) and the time the steps waited for them after backward; the
// difference was hidden behind backward.
func (d *DDP) CommTimes() (busy, exposed time.Duration) { return d.busy, d.exposed }
