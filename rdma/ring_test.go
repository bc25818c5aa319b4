package rdma_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/rdma/rdmatest"
	"github.com/gorun/gorun/ring"
)

// TestCollectivesOverRDMA runs the ring package's collectives over RDMA
// transports on a fake fabric that carries writes out late, and compares
// every rank's result with a sequential reference.
// With combine, the reduce-scatter frames are folded into the buffer
// straight from the slots, as comm does.
func TestCollectivesOverRDMA(t *testing.T) {
	for _, np := range []int{2, 3, 4} {
		for _, count := range []int{0, 1, np + 1, 4097, 70001} {
			for _, combine := range []bool{false, true} {
				t.Run(fmt.Sprintf("np=%d/count=%d/combine=%v", np, count, combine), func(t *testing.T) {
					ts, _ := rdmatest.Mesh(t, rdmatest.NewFabric(uint64(np*count+1), true), np, rdma.Config{Slots: 4, SlotBytes: 4096, Timeout: 20 * time.Second})
					input := func(r, i int) float32 { return float32((r+1)*(i%97)) - 3*float32(r) }
					wantSum := make([]float32, count)
					wantMax := make([]float32, count)
					for i := range count {
						wantMax[i] = float32(math.Inf(-1))
						for r := range np {
							wantSum[i] += input(r, i)
							wantMax[i] = max(wantMax[i], input(r, i))
						}
					}
					peers := make([]int, np)
					for i := range peers {
						peers[i] = i
					}
					ctx := context.Background()
					var wg sync.WaitGroup
					errs := make(chan error, np)
					for r := range np {
						wg.Add(1)
						go func() {
							defer wg.Done()
							// A small threshold, so both algorithms run: recursive
							// doubling below 1 KiB, the pipelined ring above.
							var tr ring.Transport = ts[r]
							if combine {
								tr = combining{ts[r]}
							}
							c := &ring.Collectives{T: tr, Peers: peers, Rank: r, Stream: 1 << 16, SmallBytes: 1024, ChunkBytes: 8192}
							fail := func(what string, i int, got, want float32) {
								errs <- fmt.Errorf("rank %d: %s[%d] = %v, want %v", r, what, i, got, want)
							}
							sum := make([]float32, count)
							for i := range sum {
								sum[i] = input(r, i)
							}
							if err := ring.AllReduce(ctx, c, sum, ring.Sum); err != nil {
								errs <- err
								return
							}
							for i := range sum {
								if sum[i] != wantSum[i] {
									fail("sum", i, sum[i], wantSum[i])
									return
								}
							}
							mx := make([]float32, count)
							for i := range mx {
								mx[i] = input(r, i)
							}
							if err := ring.AllReduce(ctx, c, mx, ring.Max); err != nil {
								errs <- err
								return
							}
							for i := range mx {
								if mx[i] != wantMax[i] {
									fail("max", i, mx[i], wantMax[i])
									return
								}
							}
							b := make([]float32, count)
							if r == np-1 {
								for i := range b {
									b[i] = input(7, i)
								}
							}
							if err := ring.Broadcast(ctx, c, b, np-1); err != nil {
								errs <- err
								return
							}
							for i := range b {
								if b[i] != input(7, i) {
									fail("broadcast", i, b[i], input(7, i))
									return
								}
							}
							send := make([]float32, count)
							for i := range send {
								send[i] = input(r, i)
							}
							all := make([]float32, np*count)
							if err := ring.AllGather(ctx, c, send, all); err != nil {
								errs <- err
								return
							}
							for q := range np {
								for i := range count {
									if all[q*count+i] != input(q, i) {
										fail("allgather", q*count+i, all[q*count+i], input(q, i))
										return
									}
								}
							}
							if err := ring.Barrier(ctx, c); err != nil {
								errs <- err
							}
						}()
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Error(err)
					}
				})
			}
		}
	}
}

// combining offers the transport's PostCombine to the ring algorithms.
type combining struct{ *rdma.Transport }

func (c combining) PostCombine(peer int, stream uint32, buf []byte, fn func(dst, src []byte)) (uint64, bool, error) {
	t, err := c.Transport.PostCombine(peer, stream, buf, fn)
	return t, err == nil, err
}
