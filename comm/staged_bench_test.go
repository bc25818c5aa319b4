package comm

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gorun/gorun/cuda"
)

// BenchmarkStaging measures the staging path alone on a GPU: a device
// buffer goes to pinned host memory and back in double-buffered chunks
// with no network in between (a one-rank all-reduce). MB/s counts each
// byte once; with both directions overlapping it approaches the slower
// direction's copy bandwidth (compare cuda's BenchmarkCopy/pinned).
func BenchmarkStaging(b *testing.B) {
	d, err := cuda.Open()
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		b.Skipf("no GPU here: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	dv, err := d.Device(0)
	if err != nil {
		b.Fatal(err)
	}
	s, err := dv.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	const size = 256 << 20
	p, err := dv.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer dv.Free(p)
	for _, chunk := range []int{1 << 20, 4 << 20, 16 << 20} {
		st, err := NewCUDAStager(s, chunk)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("chunk=%dMiB", chunk>>20), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				ready, err := st.Mark()
				if err == nil {
					err = staged(context.Background(), st, ready, uintptr(p), size/4, func(context.Context, []float32) error { return nil })
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		st.Close()
	}
}
