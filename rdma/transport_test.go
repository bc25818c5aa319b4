package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/rdma/rdmatest"
)

func pattern(seed, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestFramesBothWays: frames of every shape relative to the slots (empty,
// one byte, exactly a slot's payload, several slots, many times the ring)
// cross in both directions at once and arrive whole, in order, with their
// metadata, whether the device carries writes out at once or late.
func TestFramesBothWays(t *testing.T) {
	const slotB = 256
	room := slotB - 64 // each slot starts with a 64-byte header
	sizes := []int{0, 1, room - 1, room, room + 1, 3*room + 5, 40 * room, 7}
	for _, deferred := range []bool{false, true} {
		for _, postFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("deferred=%v/postFirst=%v", deferred, postFirst), func(t *testing.T) {
				ts, _ := rdmatest.Mesh(t, rdmatest.NewFabric(1, deferred), 2, rdma.Config{Slots: 4, SlotBytes: slotB, Timeout: 10 * time.Second})
				ctx := context.Background()
				var wg sync.WaitGroup
				errs := make(chan error, 4)
				for r := range 2 {
					peer := 1 - r
					tr := ts[r]
					bufs := make([][]byte, len(sizes))
					tickets := make([]uint64, len(sizes))
					post := func() {
						for i, n := range sizes {
							bufs[i] = make([]byte, n+3)
							var err error
							if tickets[i], err = tr.Post(peer, uint32(10+i%2), bufs[i]); err != nil {
								errs <- err
							}
						}
					}
					if postFirst {
						post()
					}
					wg.Add(2)
					go func() {
						defer wg.Done()
						for i, n := range sizes {
							if err := tr.Send(ctx, peer, uint32(10+i%2), [4]uint64{uint64(r), uint64(i), 0, 1}, pattern(r*100+i, n)); err != nil {
								errs <- err
								return
							}
						}
					}()
					go func() {
						defer wg.Done()
						if !postFirst {
							time.Sleep(10 * time.Millisecond) // let frames arrive first
							post()
						}
						for i, n := range sizes {
							meta, got, err := tr.Wait(ctx, peer, uint32(10+i%2), tickets[i])
							if err != nil {
								errs <- err
								return
							}
							if meta != [4]uint64{uint64(peer), uint64(i), 0, 1} || got != n || !bytes.Equal(bufs[i][:n], pattern(peer*100+i, n)) {
								errs <- fmt.Errorf("rank %d, frame %d: meta %v, %d bytes (want %d), content equal %v", r, i, meta, got, n, bytes.Equal(bufs[i][:got], pattern(peer*100+i, n)))
								return
							}
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

// TestRegisteredPayloadIsWrittenInPlace: a payload in registered memory
// goes without the copy into the ring, and Send returns only once the
// device has read it, so overwriting it after Send cannot change what
// arrives (the deferred fabric reads memory late, as a device does).
func TestRegisteredPayloadIsWrittenInPlace(t *testing.T) {
	fab := rdmatest.NewFabric(7, true)
	ts, _ := rdmatest.Mesh(t, fab, 2, rdma.Config{Slots: 3, SlotBytes: 1024, Timeout: 10 * time.Second})
	pinned := make([]byte, 10000)
	if err := ts[0].Register(pinned); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Register(pinned[100:200]); err == nil {
		t.Fatal("registering an overlapping range succeeded")
	}
	ctx := context.Background()
	// Unregistered, a payload is copied into the ring.
	tk, _ := ts[1].Post(0, 1, make([]byte, 2000)) // fits the ring: no reader needed yet
	if err := ts[0].Send(ctx, 1, 1, [4]uint64{}, make([]byte, 2000)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ts[1].Wait(ctx, 0, 1, tk); err != nil {
		t.Fatal(err)
	}
	want := pattern(3, 9000)
	copy(pinned[500:], want)
	got := make([]byte, 9000)
	tk, _ = ts[1].Post(0, 1, got)
	done := make(chan error, 1)
	go func() {
		_, n, err := ts[1].Wait(ctx, 0, 1, tk)
		if err == nil && n != len(want) {
			err = fmt.Errorf("%d bytes, want %d", n, len(want))
		}
		done <- err
	}()
	if err := ts[0].Send(ctx, 1, 1, [4]uint64{}, pinned[500:9500]); err != nil {
		t.Fatal(err)
	}
	clear(pinned)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the payload changed in flight: Send returned before the device read it")
	}
	// 9000 bytes in 1024-byte slots of 960 payload bytes: 10 writes, each
	// gathering its fragment from pinned itself.
	if n := fab.GatheredFrom(pinned); n != 10 {
		t.Fatalf("%d writes gathered from the registered payload, want 10", n)
	}
	if err := ts[0].Unregister(pinned); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Unregister(pinned); err == nil {
		t.Fatal("unregistering twice succeeded")
	}
}

// TestDeadPeerIsNamed: when the peer's device stops answering, the
// failed write's completion fails the waiting call with the peer's rank.
func TestDeadPeerIsNamed(t *testing.T) {
	fab := rdmatest.NewFabric(1, false)
	ts, nics := rdmatest.Mesh(t, fab, 3, rdma.Config{Slots: 2, SlotBytes: 128, Timeout: 10 * time.Second})
	nics[2].Kill()
	ctx := context.Background()
	if err := ts[0].Send(ctx, 2, 1, [4]uint64{}, []byte("hello")); err != nil {
		t.Fatalf("posting the write failed at once: %v", err)
	}
	tk, _ := ts[0].Post(1, 1, make([]byte, 8))
	_, _, err := ts[0].Wait(ctx, 1, 1, tk)
	var pe *rdma.PeerError
	if !errors.As(err, &pe) || pe.Rank != 2 || !strings.Contains(err.Error(), "transport retry counter exceeded") || !strings.Contains(err.Error(), "stopped answering") {
		t.Fatalf("got %v, want a PeerError naming rank 2 and the retry status", err)
	}
	if err := ts[0].Send(ctx, 1, 1, [4]uint64{}, nil); !errors.As(err, &pe) || pe.Rank != 2 {
		t.Fatalf("later send: got %v, want the first failure", err)
	}
}

func TestWaitsEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  rdma.Config
		ctx  func() (context.Context, context.CancelFunc)
		want string
	}{
		{"transport timeout", rdma.Config{Timeout: 30 * time.Millisecond}, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
			"rank 1 (RDMA): waiting for data: nothing moved within 30ms"},
		{"context deadline", rdma.Config{}, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 20*time.Millisecond)
		},
			"rank 1 (RDMA): waiting for data: context deadline exceeded"},
		{"failure elsewhere", rdma.Config{Failed: func() error { return errors.New("rank 1 died (seen over TCP)") }},
			func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, "rank 1 died (seen over TCP)"},
		{"peer left", rdma.Config{Left: func(r int) error { return fmt.Errorf("rank %d closed its group after its call #13", r) }},
			func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, "rank 1 closed its group after its call #13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, _ := rdmatest.Mesh(t, rdmatest.NewFabric(1, false), 2, tc.cfg)
			ctx, cancel := tc.ctx()
			defer cancel()
			tk, _ := ts[0].Post(1, 1, make([]byte, 8))
			start := time.Now()
			_, _, err := ts[0].Wait(ctx, 1, 1, tk)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("gave up after %v", d)
			}
		})
	}
}

// TestLeftPeerFramesTaken: a frame a peer wrote before it left, in
// several fragments, is received whole after its goodbye is heard; the
// next wait for it gets its farewell.
func TestLeftPeerFramesTaken(t *testing.T) {
	var left sync.Map // rank → true once it left
	gone := func(r int) error {
		if _, ok := left.Load(r); ok {
			return fmt.Errorf("rank %d closed its group after its call #4", r)
		}
		return nil
	}
	ts, _ := rdmatest.Mesh(t, rdmatest.NewFabric(1, false), 2, rdma.Config{Slots: 8, SlotBytes: 256, Timeout: 10 * time.Second, Left: gone})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sent := bytes.Repeat([]byte("0123456789abcdef"), 40) // several fragments
	if err := ts[1].Send(ctx, 0, 1, [4]uint64{5}, sent); err != nil {
		t.Fatal(err)
	}
	left.Store(1, true)
	got := make([]byte, len(sent))
	tk, _ := ts[0].Post(1, 1, got)
	if meta, n, err := ts[0].Wait(ctx, 1, 1, tk); err != nil || meta[0] != 5 || !bytes.Equal(got[:n], sent) {
		t.Fatalf("the frame written before leaving: meta %v, %d of %d bytes, err %v", meta, n, len(sent), err)
	}
	tk, _ = ts[0].Post(1, 1, got)
	if _, _, err := ts[0].Wait(ctx, 1, 1, tk); err == nil || !strings.Contains(err.Error(), "rank 1 closed its group after its call #4") {
		t.Fatalf("a wait after it: got %v, want the farewell", err)
	}
}

// TestSendBlocksOnFullRingUntilDrained: with the peer not draining, a
// sender stops after one ring of fragments and resumes when it drains.
func TestSendBlocksOnFullRingUntilDrained(t *testing.T) {
	fab := rdmatest.NewFabric(1, false)
	ts, _ := rdmatest.Mesh(t, fab, 2, rdma.Config{Slots: 2, SlotBytes: 128, Timeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := ts[0].Send(ctx, 1, 1, [4]uint64{}, make([]byte, 5*64))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ring stayed full") {
		t.Fatalf("got %v, want the send to wait on the full ring", err)
	}
	if w := fab.Writes(); w != 2 {
		t.Fatalf("%d writes went out before the peer drained, want the ring's 2", w)
	}
}

func TestMismatchedRingsAreRefused(t *testing.T) {
	fab := rdmatest.NewFabric(1, false)
	a, err := rdma.New(rdma.Config{Rank: 0, Size: 2, Slots: 4, SlotBytes: 256}, fab.NIC("a"), []int{1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := rdma.New(rdma.Config{Rank: 1, Size: 2, Slots: 8, SlotBytes: 256}, fab.NIC("b"), []int{0})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ep, _ := b.Endpoint(0)
	if err := a.Connect(1, ep); err == nil || !strings.Contains(err.Error(), "rank 1 (RDMA): its rings have 8 slots of 256 bytes, this rank's 4 of 256") {
		t.Fatalf("got %v", err)
	}
	for _, tc := range []struct {
		cfg   rdma.Config
		peers []int
		want  string
	}{
		{rdma.Config{Rank: 0, Size: 2, SlotBytes: 100}, []int{1}, "slot size 100"},
		{rdma.Config{Rank: 0, Size: 2}, []int{0}, "peer rank 0"},
		{rdma.Config{Rank: 0, Size: 2}, []int{2}, "peer rank 2"},
		{rdma.Config{Rank: 0, Size: 3}, []int{1, 1}, "peer rank 1"},
	} {
		if _, err := rdma.New(tc.cfg, fab.NIC("c"), tc.peers); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rdma.New(%+v, %v): got %v, want %q", tc.cfg, tc.peers, err, tc.want)
		}
	}
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	ts, _ := rdmatest.Mesh(t, rdmatest.NewFabric(1, false), 2, rdma.Config{Slots: 4, SlotBytes: 4096})
	ctx := context.Background()
	out, in := make([]byte, 10000), make([]byte, 10000)
	step := func() {
		tk, _ := ts[1].Post(0, 1, in)
		if err := ts[0].Send(ctx, 1, 1, [4]uint64{}, out); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ts[1].Wait(ctx, 0, 1, tk); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		step()
	}
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Fatalf("%v allocations per frame, want 0", a)
	}
}
