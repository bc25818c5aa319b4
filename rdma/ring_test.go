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

// TestRootedAndVectorOverRDMA runs Reduce, Gather, Scatter, AllToAll and
// the v forms (uneven counts with zeros) over RDMA transports on the fake
// fabric, writes carried out late, against the sequential reference; with
// small, the linear Reduce and the tree Scatter at every size (their
// messages sent from scratch that the next call reuses).
func TestRootedAndVectorOverRDMA(t *testing.T) {
	for _, np := range []int{2, 3, 4} {
		for _, count := range []int{0, 1, np + 1, 4097} {
			for _, small := range []bool{false, true} {
				t.Run(fmt.Sprintf("np=%d/count=%d/small=%v", np, count, small), func(t *testing.T) {
					ts, _ := rdmatest.Mesh(t, rdmatest.NewFabric(uint64(np*count+3), true), np, rdma.Config{Slots: 4, SlotBytes: 4096, Timeout: 20 * time.Second})
					input := func(r, i int) float32 { return float32((r+1)*(i%97)) - 3*float32(r) }
					counts := make([]int, np) // uneven, zeros among them
					off := make([]int, np+1)
					for k := range counts {
						counts[k] = max(count-k, 0) + k%2
						off[k+1] = off[k] + counts[k]
					}
					peers := make([]int, np)
					for i := range peers {
						peers[i] = i
					}
					ctx := context.Background()
					errs := make(chan error, np)
					var wg sync.WaitGroup
					for r := range np {
						c := &ring.Collectives{T: ts[r], Peers: peers, Rank: r, Stream: 1 << 16, ChunkBytes: 8192}
						if small {
							c.LinearReduceBytes, c.TreeScatterBytes = 1<<30, 1<<30
						}
						wg.Go(func() {
							if err := rootedAndVector(ctx, c, count, counts, off, input); err != nil {
								errs <- fmt.Errorf("rank %d: %w", r, err)
							}
						})
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

// rootedAndVector is one rank's part of TestRootedAndVectorOverRDMA.
func rootedAndVector(ctx context.Context, c *ring.Collectives, count int, counts, off []int, input func(r, i int) float32) error {
	np, r, root := c.Size(), c.Rank, c.Size()-1
	check := func(what string, got []float32, want func(i int) float32) error {
		for i, v := range got {
			if w := want(i); v != w {
				return fmt.Errorf("%s[%d] = %v, want %v", what, i, v, w)
			}
		}
		return nil
	}
	buf := make([]float32, count)
	for i := range buf {
		buf[i] = input(r, i)
	}
	if err := ring.ReduceToRoot(ctx, c, buf, ring.Max, root); err != nil {
		return err
	}
	if err := check("reduce", buf, func(i int) float32 {
		if r != root {
			return input(r, i)
		}
		m := input(0, i)
		for q := range np {
			m = max(m, input(q, i))
		}
		return m
	}); err != nil {
		return err
	}
	mine := make([]float32, count)
	for i := range mine {
		mine[i] = input(r, i)
	}
	var all []float32
	if r == root {
		all = make([]float32, np*count)
	}
	if err := ring.Gather(ctx, c, mine, all, root); err != nil {
		return err
	}
	if err := check("gather", all, func(i int) float32 { return input(i/count, i%count) }); err != nil {
		return err
	}
	back := make([]float32, count)
	if err := ring.Scatter(ctx, c, all, back, root); err != nil {
		return err
	}
	if err := check("scatter", back, func(i int) float32 { return input(r, i) }); err != nil {
		return err
	}
	send := make([]float32, np*count) // block p: input(r·np+p, ·)
	for i := range send {
		send[i] = input(r*np+i/count, i%count)
	}
	recv := make([]float32, np*count)
	if err := ring.AllToAll(ctx, c, send, recv); err != nil {
		return err
	}
	if err := check("alltoall", recv, func(i int) float32 { return input(i/count*np+r, i%count) }); err != nil {
		return err
	}
	// The v forms: rank k's block is input(k, ·) over counts[k] elements.
	owner := func(i int) int {
		k := 0
		for off[k+1] <= i {
			k++
		}
		return k
	}
	whole := func(i int) float32 { k := owner(i); return input(k, i-off[k]) }
	vmine := make([]float32, counts[r])
	for i := range vmine {
		vmine[i] = input(r, i)
	}
	vall := make([]float32, off[np])
	if err := ring.AllGatherV(ctx, c, vmine, vall, counts); err != nil {
		return err
	}
	if err := check("allgatherv", vall, whole); err != nil {
		return err
	}
	var vgathered []float32
	if r == root {
		vgathered = make([]float32, off[np])
	}
	if err := ring.GatherV(ctx, c, vmine, vgathered, counts, root); err != nil {
		return err
	}
	if err := check("gatherv", vgathered, whole); err != nil {
		return err
	}
	vback := make([]float32, counts[r])
	if err := ring.ScatterV(ctx, c, vgathered, counts, vback, root); err != nil {
		return err
	}
	if err := check("scatterv", vback, func(i int) float32 { return input(r, i) }); err != nil {
		return err
	}
	// AllToAllV: rank r sends counts[(r+p)%np] elements of input(r·np+p, ·) to p.
	sc, rc := make([]int, np), make([]int, np)
	var vsend []float32
	for p := range np {
		sc[p], rc[p] = counts[(r+p)%np], counts[(p+r)%np]
		for i := range sc[p] {
			vsend = append(vsend, input(r*np+p, i))
		}
	}
	vrecv := make([]float32, len(vsend))
	if err := ring.AllToAllV(ctx, c, vsend, sc, vrecv, rc); err != nil {
		return err
	}
	at := 0
	for p := range np {
		for i := range rc[p] {
			if w := input(p*np+r, i); vrecv[at] != w {
				return fmt.Errorf("alltoallv from %d [%d] = %v, want %v", p, i, vrecv[at], w)
			}
			at++
		}
	}
	wsend := make([]float32, off[np])
	for i := range wsend {
		wsend[i] = input(r, i)
	}
	out := make([]float32, counts[r])
	if err := ring.ReduceScatterV(ctx, c, wsend, out, counts, ring.Max); err != nil {
		return err
	}
	return check("reducescatterv", out, func(i int) float32 {
		m := input(0, off[r]+i)
		for q := range np {
			m = max(m, input(q, off[r]+i))
		}
		return m
	})
}
