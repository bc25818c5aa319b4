package comm

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gorun/gorun/cuda"
	"github.com/gorun/gorun/rdma"
)

// DefaultStageBytes is the staging chunk of a CUDAStager: large enough
// that a copy runs near the copy engine's peak, small enough that two
// chunks of a gradient bucket overlap.
const DefaultStageBytes = 16 << 20

// CUDAStager is the Stager of one GPU: three page-locked host buffers, a
// copy stream for each direction (so a chunk going down overlaps one going
// up, on the GPU's two copy engines), and events to mark the work of the
// stream that computes the buffers.
type CUDAStager struct {
	dv       *cuda.Device
	compute  *cuda.Stream
	down, up *cuda.Stream
	chunk    int
	pinned   [stageSlots]*cuda.HostBuffer

	host [][]float32 // the pinned buffers as slices

	mu   sync.Mutex
	free []*cudaPending

	regMu      sync.Mutex
	regWith    *rdma.Transport // the RDMA transport the pinned buffers are registered with
	registered [][]byte
}

// NewCUDAStager stages buffers that kernels on compute write, with chunks
// of chunkBytes (DefaultStageBytes when 0).
func NewCUDAStager(compute *cuda.Stream, chunkBytes int) (*CUDAStager, error) {
	if chunkBytes <= 0 {
		chunkBytes = DefaultStageBytes
	}
	dv := compute.Device()
	c := &CUDAStager{dv: dv, compute: compute, chunk: chunkBytes / 4}
	var err error
	if c.down, err = dv.NewStream(); err != nil {
		return nil, err
	}
	if c.up, err = dv.NewStream(); err != nil {
		c.down.Close()
		return nil, err
	}
	for i := range c.pinned {
		if c.pinned[i], err = dv.AllocHost(4 * c.chunk); err != nil {
			c.Close()
			return nil, err
		}
		c.host = append(c.host, c.pinned[i].Float32s())
	}
	return c, nil
}

// Close frees the pinned buffers and the copy stream.
func (c *CUDAStager) Close() error {
	var first error
	c.regMu.Lock()
	for _, b := range c.registered {
		// An error means the transport closed first and released them.
		c.regWith.Unregister(b)
	}
	c.registered = nil
	c.regMu.Unlock()
	for _, p := range c.pinned {
		if p != nil {
			if err := p.Free(); err != nil && first == nil {
				first = err
			}
		}
	}
	for _, s := range []*cuda.Stream{c.down, c.up} {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// registerWith registers the pinned buffers with an RDMA transport (once),
// so that the ring's sends from them are written by the device from where
// they lie, without the copy into the transport's own registered ring.
// Close unregisters them before freeing them. A failed registration only
// costs that copy.
func (c *CUDAStager) registerWith(t *rdma.Transport) {
	c.regMu.Lock()
	defer c.regMu.Unlock()
	if c.regWith != nil {
		return
	}
	c.regWith = t
	for _, p := range c.pinned {
		if err := t.Register(p.Bytes()); err != nil {
			return
		}
		c.registered = append(c.registered, p.Bytes())
	}
}

// Chunk implements Stager.
func (c *CUDAStager) Chunk() int { return c.chunk }

// stageSlots is the number of pinned buffers a CUDAStager cycles through.
const stageSlots = 3

// Buffers implements Stager.
func (c *CUDAStager) Buffers() ([][]float32, error) { return c.host, nil }

// cudaPending is an event recorded after queued work; events are pooled.
type cudaPending struct {
	c  *CUDAStager
	ev *cuda.Event
}

// Wait implements Pending and returns the event to the pool.
func (p *cudaPending) Wait() error {
	err := p.ev.Synchronize()
	p.c.mu.Lock()
	p.c.free = append(p.c.free, p)
	p.c.mu.Unlock()
	return err
}

// record returns a pooled event recorded on s.
func (c *CUDAStager) record(s *cuda.Stream) (*cudaPending, error) {
	c.mu.Lock()
	var p *cudaPending
	if n := len(c.free); n > 0 {
		p, c.free = c.free[n-1], c.free[:n-1]
	}
	c.mu.Unlock()
	if p == nil {
		ev, err := c.dv.NewEvent()
		if err != nil {
			return nil, err
		}
		p = &cudaPending{c: c, ev: ev}
	}
	if err := p.ev.Record(s); err != nil {
		return nil, err
	}
	return p, nil
}

// Mark implements Stager: an event on the compute stream. (The staged
// collective waits for it on the host before queuing its first copy.)
func (c *CUDAStager) Mark() (Pending, error) { return c.record(c.compute) }

// ToHost implements Stager.
func (c *CUDAStager) ToHost(dst []float32, src uintptr) (Pending, error) {
	if len(dst) == 0 {
		return c.record(c.down)
	}
	if err := c.down.CopyToHost(unsafe.Pointer(&dst[0]), cuda.DevPtr(src), 4*len(dst)); err != nil {
		return nil, fmt.Errorf("staging %d elements to the host: %w", len(dst), err)
	}
	return c.record(c.down)
}

// ToDevice implements Stager.
func (c *CUDAStager) ToDevice(dst uintptr, src []float32) (Pending, error) {
	if len(src) == 0 {
		return c.record(c.up)
	}
	if err := c.up.CopyToDevice(cuda.DevPtr(dst), unsafe.Pointer(&src[0]), 4*len(src)); err != nil {
		return nil, fmt.Errorf("staging %d elements to the device: %w", len(src), err)
	}
	return c.record(c.up)
}
