package rdma_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/rdma/rdmatest"
)

// BenchmarkFrame sends frames from rank 0 to rank 1 over the fake fabric,
// which carries writes out at once with memcpy. It measures the
// transport's own cost per frame (staging copy, header, work requests,
// completion and credit bookkeeping, mailbox) — not a network: on a device
// the writes are DMA and the copies of the fake disappear.
func BenchmarkFrame(b *testing.B) {
	for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			ts, _ := rdmatest.Mesh(b, rdmatest.NewFabric(1, false), 2, rdma.Config{})
			ctx := context.Background()
			out, in := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				tk, _ := ts[1].Post(0, 1, in)
				if err := ts[0].Send(ctx, 1, 1, [4]uint64{}, out); err != nil {
					b.Fatal(err)
				}
				if _, _, err := ts[1].Wait(ctx, 0, 1, tk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
