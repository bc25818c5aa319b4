package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/cuda"
)

// fakeDevice is a Stager over "device memory" that is a Go slice at a made
// up address, whose copies finish after random delays on goroutines of
// their own, so a scheduler that reuses a host buffer too early, or reads
// a chunk before its copy is done, computes wrong sums.
type fakeDevice struct {
	base  uintptr
	mem   []float32
	chunk int
	bufs  [][]float32
	mu    sync.Mutex
	rng   *rand.Rand
}

// newFakeDevice has 2 host buffers on even ranks and 3 on odd ones.
func newFakeDevice(n, chunk int, rank uint64) *fakeDevice {
	d := &fakeDevice{base: 0x7000_0000_0000, mem: make([]float32, n), chunk: chunk, rng: rand.New(rand.NewPCG(rank, 7))}
	for range 2 + rank%2 {
		d.bufs = append(d.bufs, make([]float32, chunk))
	}
	return d
}

type fakePending chan error

func (p fakePending) Wait() error { return <-p }

func (d *fakeDevice) Chunk() int                    { return d.chunk }
func (d *fakeDevice) Buffers() ([][]float32, error) { return d.bufs, nil }
func (d *fakeDevice) Mark() (comm.Pending, error)   { return d.later(func() {}), nil }

func (d *fakeDevice) index(addr uintptr, n int) (int, error) {
	off := int(addr-d.base) / 4
	if addr < d.base || (addr-d.base)%4 != 0 || off+n > len(d.mem) {
		return 0, fmt.Errorf("address %#x (%d elements) outside the fake device", addr, n)
	}
	return off, nil
}

// later runs f after a random delay of up to 300 µs.
func (d *fakeDevice) later(f func()) fakePending {
	d.mu.Lock()
	delay := time.Duration(d.rng.IntN(300)) * time.Microsecond
	d.mu.Unlock()
	p := make(fakePending, 1)
	go func() {
		time.Sleep(delay)
		f()
		p <- nil
	}()
	return p
}

func (d *fakeDevice) ToHost(dst []float32, src uintptr) (comm.Pending, error) {
	off, err := d.index(src, len(dst))
	if err != nil {
		return nil, err
	}
	return d.later(func() { copy(dst, d.mem[off:off+len(dst)]) }), nil
}

func (d *fakeDevice) ToDevice(dst uintptr, src []float32) (comm.Pending, error) {
	off, err := d.index(dst, len(src))
	if err != nil {
		return nil, err
	}
	return d.later(func() { copy(d.mem[off:off+len(src)], src) }), nil
}

// stagedScenario all-reduces and broadcasts device buffers of sizes around
// the chunk through a fake device (and, where a GPU is visible, through
// the GPU), checking every element against a reference every rank
// computes from the others' seeds.
func stagedScenario(ctx context.Context, g *comm.Group) error {
	const chunk = 1000
	value := func(rank, i int) float32 { return float32((rank+1)*(i%97+1)) * 0.5 }
	for _, n := range []int{0, 1, chunk - 1, chunk, chunk + 1, 5*chunk + 3} {
		d := newFakeDevice(n, chunk, uint64(g.Rank()))
		for i := range d.mem {
			d.mem[i] = value(g.Rank(), i)
		}
		if err := g.AllReduceDevice(ctx, d, d.base, n, comm.Sum); err != nil {
			return fmt.Errorf("staged all-reduce of %d: %w", n, err)
		}
		for i, got := range d.mem {
			var want float32
			for r := range g.Size() {
				want += value(r, i)
			}
			if got != want {
				return fmt.Errorf("staged all-reduce of %d: element %d = %v, want %v", n, i, got, want)
			}
		}
		root := g.Size() - 1
		for i := range d.mem {
			d.mem[i] = value(g.Rank(), i)
		}
		if err := g.BroadcastDevice(ctx, d, d.base, n, root); err != nil {
			return fmt.Errorf("staged broadcast of %d: %w", n, err)
		}
		for i, got := range d.mem {
			if want := value(root, i); got != want {
				return fmt.Errorf("staged broadcast of %d: element %d = %v, want %v", n, i, got, want)
			}
		}
	}
	if err := stagedHalf(ctx, g, chunk, value, comm.NewBFloat16); err != nil {
		return err
	}
	if err := stagedHalf(ctx, g, chunk, value, comm.NewFloat16); err != nil {
		return err
	}
	return stagedCUDA(ctx, g, value)
}

// stagedHalf all-reduces device buffers with 16-bit floats on the wire
// and checks every element against the same chunks averaged from host
// memory by the 16-bit collective (the same ring calls: bit for bit); a
// wire buffer shorter than a chunk is refused.
func stagedHalf[H comm.Half](ctx context.Context, g *comm.Group, chunk int, value func(rank, i int) float32, narrow func(float32) H) error {
	for _, n := range []int{1, chunk, chunk + 1, 3*chunk + 7} {
		d := newFakeDevice(n, chunk, uint64(g.Rank()))
		for i := range d.mem {
			d.mem[i] = value(g.Rank(), i) + 0.01*float32(i)
		}
		wire := make([]H, min(n, chunk))
		if err := comm.AllReduceDeviceHalfAsync(ctx, g, d, d.base, n, comm.Avg, wire).Wait(); err != nil {
			return fmt.Errorf("staged 16-bit all-reduce of %d: %w", n, err)
		}
		for lo := 0; lo < n; lo += chunk {
			ref := make([]H, min(chunk, n-lo))
			for i := range ref {
				ref[i] = narrow(value(g.Rank(), lo+i) + 0.01*float32(lo+i))
			}
			if err := comm.AllReduce(ctx, g, ref, comm.Avg); err != nil {
				return err
			}
			for i, h := range ref {
				if got := d.mem[lo+i]; got != h.Float32() {
					return fmt.Errorf("staged 16-bit all-reduce of %d: element %d = %v, want %v", n, lo+i, got, h.Float32())
				}
			}
		}
	}
	d := newFakeDevice(2*chunk, chunk, uint64(g.Rank()))
	if err := comm.AllReduceDeviceHalfAsync(ctx, g, d, d.base, 2*chunk, comm.Avg, make([]H, chunk-1)).Wait(); err == nil {
		return fmt.Errorf("a wire buffer shorter than a chunk was accepted")
	}
	return nil
}

// stagedCUDA repeats the all-reduce on GPU memory through a CUDAStager
// when a GPU is visible; it prints why not otherwise.
func stagedCUDA(ctx context.Context, g *comm.Group, value func(rank, i int) float32) error {
	drv, err := cuda.Open()
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		fmt.Printf("NO-GPU %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	dv, err := drv.Device(0)
	if err != nil {
		return err
	}
	s, err := dv.NewStream()
	if err != nil {
		return err
	}
	st, err := comm.NewCUDAStager(s, 64<<10)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, n := range []int{1, st.Chunk() + 1, 10*st.Chunk() + 5} {
		host := make([]float32, n)
		for i := range host {
			host[i] = value(g.Rank(), i)
		}
		p, err := dv.Alloc(4 * n)
		if err != nil {
			return err
		}
		if err := s.Upload(p, host); err != nil {
			return err
		}
		if err := g.AllReduceDevice(ctx, st, uintptr(p), n, comm.Sum); err != nil {
			return fmt.Errorf("GPU all-reduce of %d: %w", n, err)
		}
		if err := s.Download(host, p); err != nil {
			return err
		}
		for i, got := range host {
			var want float32
			for r := range g.Size() {
				want += value(r, i)
			}
			if got != want {
				return fmt.Errorf("GPU all-reduce of %d: element %d = %v, want %v", n, i, got, want)
			}
		}
		dv.Free(p)
	}
	fmt.Printf("GPU-STAGED ok on %s\n", dv)
	return nil
}
