package comm

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/ring"
)

// Stager moves float32 data between one accelerator's memory and host
// memory for the collectives on device buffers: the transports only ever
// see host memory. NewCUDAStager makes one for a GPU; tests use a fake.
//
// A staged collective cuts the device buffer into chunks of Chunk()
// elements and cycles them through the stager's host buffers (at least
// two), so the copy of chunk i+1 to the host and of chunk i−1 back to the
// device overlap the network exchange of chunk i, as Gloo's CUDA ring
// algorithms do; with three buffers the next chunk's copy is queued before
// the current one is waited for, so the copy engines never wait for the
// host. The reduction runs on the host, inside the ring, where the data
// already are.
type Stager interface {
	// Chunk is the staging unit in elements.
	Chunk() int
	// Buffers returns the host buffers of Chunk() elements the copies use
	// (page-locked for a GPU), at least two. One collective uses them at a
	// time.
	Buffers() ([][]float32, error)
	// Mark returns a point in the device work queued so far: a staged
	// collective started now waits for it before its first copy, so the
	// data it reads are the data the caller has queued.
	Mark() (Pending, error)
	// ToHost queues copying len(dst) elements at device address src to
	// dst.
	ToHost(dst []float32, src uintptr) (Pending, error)
	// ToDevice queues copying src to device address dst.
	ToDevice(dst uintptr, src []float32) (Pending, error)
}

// Pending is a queued copy or mark; Wait blocks until it is done and may
// be called once.
type Pending interface {
	Wait() error
}

// AllReduceDevice is AllReduce on n float32s at device address ptr, staged
// through st.
func (g *Group) AllReduceDevice(ctx context.Context, st Stager, ptr uintptr, n int, op Op) error {
	return g.AllReduceDeviceAsync(ctx, st, ptr, n, op).Wait()
}

// AllReduceDeviceAsync starts AllReduceDevice and returns at once. The
// collective waits for the device work queued before the call (a mark
// taken now), so a caller may queue the kernels that produce the buffer
// and start its reduction without synchronising; the buffer must not be
// touched until Wait returns.
func (g *Group) AllReduceDeviceAsync(ctx context.Context, st Stager, ptr uintptr, n int, op Op) *Work {
	c := call{kind: "AllReduce", count: n, dtype: ring.Float32, op: op}
	return g.stagedAsync(ctx, c, st, ptr, n, func(ctx context.Context, host []float32) error {
		return ring.AllReduce(ctx, &g.ring, host, op)
	})
}

// stagedAsync queues call c on n float32s at device address ptr: a mark
// of the device work queued so far is taken now, and the collective,
// when its turn comes, stages the buffer through st chunk by chunk with
// exchange run on each chunk in host memory.
func (g *Group) stagedAsync(ctx context.Context, c call, st Stager, ptr uintptr, n int, exchange func(context.Context, []float32) error) *Work {
	ready, err := st.Mark()
	if err != nil {
		return finished(g.wrap(c.String()+" on a device buffer", err))
	}
	return g.enqueue(ctx, c, func(ctx context.Context) error {
		g.w.stageWith(st)
		return staged(ctx, st, ready, ptr, n, exchange)
	})
}

// Half is a 16-bit float type device gradients may travel as.
type Half interface {
	BFloat16 | Float16
	Float32() float32
}

// NarrowInto sets dst[i] to src[i] rounded to the 16-bit type, to
// nearest with ties to even (as torch converts); dst is at least as long
// as src.
func NarrowInto[H Half](dst []H, src []float32) { ring.NarrowInto(dst, src) }

// WidenInto sets dst[i] to src[i] exactly; dst is at least as long as
// src.
func WidenInto[H Half](dst []float32, src []H) { ring.WidenInto(dst, src) }

// AllReduceDeviceHalfAsync is AllReduceDeviceAsync with the data on the
// wire as 16-bit floats, as DDP's bf16 and fp16 compression hooks send
// them: each staged chunk is rounded on the host into wire (to nearest,
// ties to even), reduced by the ring in float32 over the 16-bit wire
// format, and widened back before it goes up to the device.
// Half the bytes of the float32 collective cross the network. wire, at
// least min(n, st.Chunk()) elements, is the caller's scratch: one staged
// chunk at a time uses it, and it must not be touched until Wait returns.
func AllReduceDeviceHalfAsync[H Half](ctx context.Context, g *Group, st Stager, ptr uintptr, n int, op Op, wire []H) *Work {
	c := call{kind: "AllReduce", count: n, dtype: ring.DTypeOf[H](), op: op}
	if need := min(n, st.Chunk()); len(wire) < need {
		return finished(g.wrap(c.String()+" on a device buffer", fmt.Errorf("a wire buffer of %d elements; staging needs %d", len(wire), need)))
	}
	return g.stagedAsync(ctx, c, st, ptr, n, func(ctx context.Context, host []float32) error {
		w := wire[:len(host)]
		NarrowInto(w, host)
		if err := ring.AllReduce(ctx, &g.ring, w, op); err != nil {
			return err
		}
		WidenInto(host, w)
		return nil
	})
}

// BroadcastDevice is Broadcast on n float32s at device address ptr,
// staged through st.
func (g *Group) BroadcastDevice(ctx context.Context, st Stager, ptr uintptr, n int, root int) error {
	c := call{kind: "Broadcast", count: n, dtype: ring.Float32, root: int32(root)}
	if root < 0 || root >= g.Size() {
		return g.wrap(c.String(), fmt.Errorf("root %d outside the group of %d", root, g.Size()))
	}
	return g.stagedAsync(ctx, c, st, ptr, n, func(ctx context.Context, host []float32) error {
		return ring.Broadcast(ctx, &g.ring, host, root)
	}).Wait()
}

// stageWith registers the stager's host buffers with the RDMA transport,
// when the job has one and the stager can (a CUDAStager's pinned buffers):
// device data then goes to the network through page-locked, registered
// memory with no further copy.
func (w *world) stageWith(st Stager) {
	if w.data.rdma == nil {
		return
	}
	if r, ok := st.(interface{ registerWith(*rdma.Transport) }); ok {
		r.registerWith(w.data.rdma)
	}
}

// staged runs exchange on the n elements at ptr chunk by chunk through
// st's host buffers: while chunk i is exchanged, chunk i+1 travels to the
// host and chunk i−1 back to the device.
func staged(ctx context.Context, st Stager, ready Pending, ptr uintptr, n int, exchange func(context.Context, []float32) error) (err error) {
	if err := ready.Wait(); err != nil {
		return fmt.Errorf("waiting for the device: %w", err)
	}
	if n == 0 {
		return nil
	}
	chunk := st.Chunk()
	if chunk <= 0 {
		return fmt.Errorf("staging chunk of %d elements", chunk)
	}
	bufs, err := st.Buffers()
	if err != nil {
		return err
	}
	slots := len(bufs)
	if slots < 2 {
		return fmt.Errorf("staging needs two host buffers, the stager has %d", slots)
	}
	// down[s] and up[s] are the copies in flight through buffer s.
	var downs, ups [maxSlots]Pending
	down, up := downs[:slots], ups[:slots]
	// However it ends, no copy may still use the host buffers.
	defer func() {
		for _, p := range downs {
			if p != nil {
				err = errors.Join(err, p.Wait())
			}
		}
		for _, p := range ups {
			if p != nil {
				err = errors.Join(err, p.Wait())
			}
		}
	}()
	chunks := (n + chunk - 1) / chunk
	span := func(i int) (uintptr, []float32, int) {
		off := i * chunk
		return ptr + uintptr(4*off), bufs[i%slots][:min(chunk, n-off)], i % slots
	}
	// fetch queues chunk i's copy to the host once its buffer is free.
	fetch := func(i int) error {
		if i >= chunks {
			return nil
		}
		addr, host, s := span(i)
		if p := up[s]; p != nil { // chunk i−slots is still going back from it
			up[s] = nil
			if err := p.Wait(); err != nil {
				return fmt.Errorf("copying chunk %d to the device: %w", i-slots, err)
			}
		}
		down[s], err = st.ToHost(host, addr)
		return err
	}
	for i := range slots - 1 {
		if err := fetch(i); err != nil {
			return err
		}
	}
	for i := range chunks {
		if err := fetch(i + slots - 1); err != nil {
			return err
		}
		addr, host, s := span(i)
		p := down[s]
		down[s] = nil
		if err := p.Wait(); err != nil {
			return fmt.Errorf("copying chunk %d to the host: %w", i, err)
		}
		if err := exchange(ctx, host); err != nil {
			return err
		}
		if up[s], err = st.ToDevice(addr, host); err != nil {
			return err
		}
	}
	return nil
}

// maxSlots is the most host buffers a staged collective cycles through.
const maxSlots = 8
