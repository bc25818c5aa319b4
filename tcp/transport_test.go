package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// mesh connects n transports in this process over loopback.
func mesh(t testing.TB, n int, cfg Config, beforeConnect func(addrs []string)) []*Transport {
	t.Helper()
	return meshOf(t, n, func(int) Config { return cfg }, beforeConnect)
}

// meshOf is mesh with each rank's own configuration, cfg(rank).
func meshOf(t testing.TB, n int, cfg func(rank int) Config, beforeConnect func(addrs []string)) []*Transport {
	t.Helper()
	lns := make([]*net.TCPListener, n)
	addrs := make([]string, n)
	for i := range n {
		ln, err := Listen("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	if beforeConnect != nil {
		beforeConnect(addrs)
	}
	ts := make([]*Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg(i)
			c.Rank, c.Size = i, n
			ts[i], errs[i] = Connect(ctx, c, lns[i], addrs)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, tr := range ts {
			wg.Add(1)
			go func() { defer wg.Done(); tr.Close(context.Background()) }()
		}
		wg.Wait()
	})
	return ts
}

func TestSendPostWait(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			ts := mesh(t, 2, Config{Token: []byte("secret"), Compress: compress}, nil)
			ctx := context.Background()
			sizes := []int{0, 1, 100, smallFrame, smallFrame + 1, 1 << 20}
			// Half the receives are posted before the data arrives, half after.
			for i, n := range sizes {
				payload := bytes.Repeat([]byte{byte(i + 1), 0, 0, 7}, n/4+1)[:n]
				buf := make([]byte, n)
				var ticket uint64
				if i%2 == 0 {
					ticket, _ = ts[1].Post(0, 5, buf)
				}
				meta := [4]uint64{uint64(i), 2, 3, 4}
				if err := ts[0].Send(ctx, 1, 5, meta, payload); err != nil {
					t.Fatal(err)
				}
				if i%2 == 1 {
					time.Sleep(5 * time.Millisecond)
					ticket, _ = ts[1].Post(0, 5, buf)
				}
				gotMeta, got, err := ts[1].Wait(ctx, 0, 5, ticket)
				if err != nil || got != n || gotMeta != meta || !bytes.Equal(buf, payload) {
					t.Fatalf("size %d: got %d bytes, meta %v, err %v", n, got, gotMeta, err)
				}
			}
		})
	}
}

func TestFrameLargerThanPostedReceive(t *testing.T) {
	ts := mesh(t, 2, Config{}, nil)
	ctx := context.Background()
	ticket, _ := ts[1].Post(0, 1, make([]byte, 10))
	if err := ts[0].Send(ctx, 1, 1, [4]uint64{9}, make([]byte, 11)); err != nil {
		t.Fatal(err)
	}
	meta, _, err := ts[1].Wait(ctx, 0, 1, ticket)
	if !errors.Is(err, ErrFrameTooLarge) || meta[0] != 9 {
		t.Fatalf("got meta %v, err %v; want ErrFrameTooLarge with the frame's meta", meta, err)
	}
	// The connection stays in sync: the next frame arrives intact.
	buf := make([]byte, 3)
	ticket, _ = ts[1].Post(0, 1, buf)
	ts[0].Send(ctx, 1, 1, [4]uint64{10}, []byte("abc"))
	if _, n, err := ts[1].Wait(ctx, 0, 1, ticket); err != nil || n != 3 || string(buf) != "abc" {
		t.Fatalf("next frame: n=%d err=%v buf=%q", n, err, buf)
	}
}

// TestStrangersAreDropped: while the real ranks connect, strangers connect
// to every data listener with a wrong token, with garbage, and idle. The
// mesh still forms, and data flows.
func TestStrangersAreDropped(t *testing.T) {
	var refused sync.WaitGroup
	var accepted bool
	ts := mesh(t, 3, Config{Token: []byte("job-token"), HandshakeTimeout: 2 * time.Second}, func(addrs []string) {
		for _, a := range addrs {
			refused.Add(1)
			go func() {
				defer refused.Done()
				c, err := net.Dial("tcp", a)
				if err != nil {
					return
				}
				defer c.Close()
				err = DialHandshake(c, []byte("guess"), Identity{Purpose: PurposeData, From: 2, To: 0, Size: 3}, 2*time.Second)
				if err == nil {
					accepted = true
				}
			}()
			go func() {
				if c, err := net.Dial("tcp", a); err == nil {
					c.Write([]byte(strings.Repeat("x", 100)))
					time.Sleep(time.Second)
					c.Close()
				}
			}()
			go func() {
				if c, err := net.Dial("tcp", a); err == nil {
					time.Sleep(3 * time.Second) // idle, never speaks
					c.Close()
				}
			}()
		}
	})
	refused.Wait()
	if accepted {
		t.Fatal("a stranger with the wrong token passed the handshake")
	}
	buf := make([]byte, 4)
	ticket, _ := ts[2].Post(0, 0, buf)
	if err := ts[0].Send(context.Background(), 2, 0, [4]uint64{}, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ts[2].Wait(context.Background(), 0, 0, ticket); err != nil || string(buf) != "ping" {
		t.Fatalf("err %v, buf %q", err, buf)
	}
}

func TestHandshakeWrongTokenBothWays(t *testing.T) {
	a, b := net.Pipe()
	errc := make(chan error, 1)
	go func() {
		_, err := AcceptHandshake(b, []byte("right"), func(Identity) error { return nil }, time.Second)
		errc <- err
	}()
	if err := DialHandshake(a, []byte("wrong"), Identity{Purpose: PurposeData}, time.Second); !errors.Is(err, ErrAuth) {
		t.Errorf("dialer with the wrong token: %v, want ErrAuth", err)
	}
	a.Close() // as every dialer does after a failed handshake
	if err := <-errc; !errors.Is(err, ErrAuth) {
		t.Errorf("listener: %v, want ErrAuth (the dialer hung up on its proof)", err)
	}
}

// TestPeerDeathNamed: a peer whose connections drop without goodbye fails
// every pending wait on every other rank, naming it — also on ranks that
// were waiting for someone else.
func TestPeerDeathNamed(t *testing.T) {
	ts := mesh(t, 3, Config{}, nil)
	ticket, _ := ts[0].Post(1, 0, make([]byte, 8)) // rank 0 waits on rank 1
	for _, p := range ts[2].peers {
		if p != nil {
			p.conn.Close() // rank 2 "dies"
		}
	}
	start := time.Now()
	_, _, err := ts[0].Wait(context.Background(), 1, 0, ticket)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 2 || !errors.Is(err, ErrPeerDied) {
		t.Fatalf("got %v, want a PeerError for rank 2 wrapping ErrPeerDied", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestAbortReachesPeers(t *testing.T) {
	ts := mesh(t, 3, Config{}, nil)
	ticket, _ := ts[2].Post(0, 0, make([]byte, 8))
	ts[1].Abort(errors.New("out of memory"))
	_, _, err := ts[2].Wait(context.Background(), 0, 0, ticket)
	var ae *AbortError
	if !errors.As(err, &ae) || ae.Rank != 1 || ae.Msg != "out of memory" {
		t.Fatalf("got %v, want rank 1's abort", err)
	}
}

func TestCleanCloseIsNotDeath(t *testing.T) {
	ts := mesh(t, 2, Config{}, nil)
	done := make(chan error, 2)
	for _, tr := range ts {
		go func() { done <- tr.Close(context.Background()) }()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// TestFarewellReachesWaiters: a rank that closes with a farewell fails the
// receives still waiting for it with a LeftError carrying the farewell,
// also one posted after it left; the frames it sent before closing are
// still delivered, and no receive reports the metadata of an earlier frame
// (a recycled receive once did, which read as a mismatch between two
// identical calls).
func TestFarewellReachesWaiters(t *testing.T) {
	ts := mesh(t, 2, Config{}, nil)
	ctx := context.Background()
	sent := [4]uint64{13, 1, 103, 0}
	first, _ := ts[0].Post(1, 0, make([]byte, 8))
	if err := ts[1].Send(ctx, 0, 0, sent, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if meta, _, err := ts[0].Wait(ctx, 1, 0, first); err != nil || meta != sent {
		t.Fatalf("first frame: meta %v, err %v", meta, err)
	}
	pending, _ := ts[0].Post(1, 0, make([]byte, 8))
	go ts[1].CloseWith(ctx, "after its call #13")
	for _, ticket := range []uint64{pending, 0} {
		if ticket == 0 {
			ticket, _ = ts[0].Post(1, 0, make([]byte, 8))
		}
		meta, _, err := ts[0].Wait(ctx, 1, 0, ticket)
		var left *LeftError
		if !errors.As(err, &left) || left.Rank != 1 || err.Error() == "" || !strings.Contains(err.Error(), "rank 1 closed its group after its call #13") {
			t.Fatalf("got %v, want rank 1's farewell", err)
		}
		if meta != ([4]uint64{}) {
			t.Errorf("a receive that got no frame reports metadata %v", meta)
		}
	}
	if err := ts[0].Left(1); err == nil {
		t.Error("Left(1) = nil after rank 1 said goodbye")
	}
	if err := ts[1].Left(0); err != nil {
		t.Errorf("Left(0) on the rank that left = %v", err)
	}
}

// TestControlBesideData: control messages reach the peer's handler while
// it waits for data that has not come on a stream, and in between data
// frames, without disturbing them.
func TestControlBesideData(t *testing.T) {
	got := make(chan string, 4)
	ts := mesh(t, 2, Config{Control: func(from int, msg []byte) { got <- fmt.Sprintf("%d:%s", from, msg) }}, nil)
	ctx := context.Background()
	ticket, _ := ts[1].Post(0, 5, make([]byte, 4))
	if err := ts[0].SendControl(1, []byte("where are you?")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "0:where are you?" {
			t.Fatalf("handler got %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the control message did not arrive while the peer waited for data")
	}
	ts[0].Send(ctx, 1, 5, [4]uint64{1}, []byte("data"))
	ts[1].SendControl(0, []byte("here"))
	buf := make([]byte, 4)
	t2, _ := ts[1].Post(0, 5, buf)
	ts[0].Send(ctx, 1, 5, [4]uint64{2}, []byte("more"))
	if meta, n, err := ts[1].Wait(ctx, 0, 5, ticket); err != nil || meta[0] != 1 || n != 4 {
		t.Fatalf("first data frame: %v %d %v", meta, n, err)
	}
	if meta, _, err := ts[1].Wait(ctx, 0, 5, t2); err != nil || meta[0] != 2 || string(buf) != "more" {
		t.Fatalf("second data frame: %v %q %v", meta, buf, err)
	}
	if m := <-got; m != "1:here" {
		t.Fatalf("handler got %q", m)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	ts := mesh(t, 2, Config{}, nil)
	ticket, _ := ts[0].Post(1, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := ts[0].Wait(ctx, 1, 0, ticket)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("got %v, want a deadline error naming rank 1", err)
	}
}

// BenchmarkSendRecv measures one frame's round trip between two ranks in
// this process, and checks that steady state allocates nothing.
func BenchmarkSendRecv(b *testing.B) {
	for _, size := range []int{8, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			ts := mesh(b, 2, Config{}, nil)
			ctx := context.Background()
			payload, buf := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				ticket, _ := ts[1].Post(0, 0, buf)
				if err := ts[0].Send(ctx, 1, 0, [4]uint64{}, payload); err != nil {
					b.Fatal(err)
				}
				if _, _, err := ts[1].Wait(ctx, 0, 0, ticket); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEarlyStream receives frames that all came before their
// receives were posted — a peer far ahead in a stream of small Reduce or
// Gather calls — up to the early frames' limit (16,384 frames of 8 bytes):
// ns/op is one frame's post and wait, which must not grow with the number
// queued ahead of it.
func BenchmarkEarlyStream(b *testing.B) {
	const size = 8
	for _, frames := range []int{16, maxEarlyBytes / size} {
		b.Run(fmt.Sprintf("ahead=%d", frames), func(b *testing.B) {
			ts := mesh(b, 2, Config{}, nil)
			ctx := context.Background()
			payload, buf := make([]byte, size), make([]byte, size)
			box := ts[1].peers[0].box(2)
			queued := func() int {
				box.mu.Lock()
				defer box.mu.Unlock()
				return box.early.Len()
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				for range frames {
					if err := ts[0].Send(ctx, 1, 2, [4]uint64{}, payload); err != nil {
						b.Fatal(err)
					}
				}
				for queued() < frames { // the reader has read them all early
					ts[1].progress(ts[1].peers[0])
				}
				b.StartTimer()
				for range frames {
					ticket, _ := ts[1].Post(0, 2, buf)
					if _, _, err := ts[1].Wait(ctx, 0, 2, ticket); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*frames), "ns/frame")
		})
	}
}

// TestEarlyFrameTakenWithoutRead: a wait whose frame came early — the
// peer a few calls ahead — returns it without a read(2) on the socket; a
// wait whose frame has not come reads.
func TestEarlyFrameTakenWithoutRead(t *testing.T) {
	ts := mesh(t, 2, Config{}, nil)
	ctx := context.Background()
	p := ts[1].peers[0]
	box := p.box(4)
	reads := func() (early int, n uint64) {
		p.rmu.Lock()
		defer p.rmu.Unlock()
		box.mu.Lock()
		defer box.mu.Unlock()
		return box.early.Len(), p.rs.reads
	}
	const frames = 4
	for i := range frames {
		if err := ts[0].Send(ctx, 1, 4, [4]uint64{uint64(i)}, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for early, _ := reads(); early < frames; early, _ = reads() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames read early after 5s", early, frames)
		}
		ts[1].progress(p)
	}
	// The connection's reader goroutine may still be on its way to the
	// read(2) a netpoller wake-up for those frames owes it (it finds the
	// socket empty); the count starts once it has been still for 50 ms.
	_, before := reads()
	for settle := time.Now().Add(5 * time.Second); ; {
		time.Sleep(50 * time.Millisecond)
		_, n := reads()
		if n == before {
			break
		}
		if time.Now().After(settle) {
			t.Fatalf("the connection still reading after 5s (%d read(2) calls)", n)
		}
		before = n
	}
	buf := make([]byte, 1)
	for i := range frames {
		tk, _ := ts[1].Post(0, 4, buf)
		meta, n, err := ts[1].Wait(ctx, 0, 4, tk)
		if err != nil || n != 1 || meta[0] != uint64(i) || buf[0] != byte(i) {
			t.Fatalf("frame %d: meta %v, %d bytes, byte %d, %v", i, meta, n, buf[0], err)
		}
	}
	if _, after := reads(); after != before {
		t.Errorf("%d read(2) calls to take %d frames that had come early, want none", after-before, frames)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = ts[0].Send(ctx, 1, 4, [4]uint64{}, []byte{9})
	}()
	tk, _ := ts[1].Post(0, 4, buf)
	if _, _, err := ts[1].Wait(ctx, 0, 4, tk); err != nil || buf[0] != 9 {
		t.Fatalf("a frame sent after the wait began: byte %d, %v", buf[0], err)
	}
	if _, after := reads(); after == before {
		t.Error("a wait for a frame still to come made no read(2)")
	}
}

// TestSteadyStateAllocatesNothing: once warm, posting, sending and waiting
// allocate nothing.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	ts := mesh(t, 2, Config{Spin: 20 * time.Microsecond}, nil)
	ctx := context.Background()
	for _, size := range []int{8, smallFrame + 1, 1 << 20} {
		payload, buf := make([]byte, size), make([]byte, size)
		round := func() {
			ticket, _ := ts[1].Post(0, 3, buf)
			if err := ts[0].Send(ctx, 1, 3, [4]uint64{1}, payload); err != nil {
				t.Fatal(err)
			}
			if _, _, err := ts[1].Wait(ctx, 0, 3, ticket); err != nil {
				t.Fatal(err)
			}
		}
		for range 10 {
			round()
		}
		if raceEnabled { // see race_test.go; counted in the plain pass
			continue
		}
		if n := testing.AllocsPerRun(200, round); n != 0 {
			t.Errorf("%d-byte frames: %.2f allocations per round trip, want 0", size, n)
		}
	}
}

// TestEarlyFramesAllocateNothing: small frames that arrive before their
// receive is posted (a peer already in its next call) are buffered in
// recycled buffers, so they too allocate nothing once warm; large ones
// wait in the socket and are read straight into their receive; each lands
// in the receive posted for it, in order.
func TestEarlyFramesAllocateNothing(t *testing.T) {
	ts := mesh(t, 2, Config{Spin: 20 * time.Microsecond}, nil)
	ctx := context.Background()
	box := ts[1].peers[0].box(3)
	arrived := func(k int) bool { // k early frames are complete
		box.mu.Lock()
		defer box.mu.Unlock()
		return box.early.Len() == k && (k == 0 || box.early.Back().arrived)
	}
	for _, size := range []int{8, smallFrame + 1, 1 << 20} {
		early := 2 // frames read before their receive is posted
		if 2*size > maxEarlyBytes {
			early = 0
		}
		a, b := bytes.Repeat([]byte{1}, size), bytes.Repeat([]byte{2}, size)
		bufA, bufB := make([]byte, size), make([]byte, size)
		round := func() {
			for i, payload := range [][]byte{a, b} {
				if err := ts[0].Send(ctx, 1, 3, [4]uint64{uint64(i)}, payload); err != nil {
					t.Fatal(err)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); !arrived(early); {
				if time.Now().After(deadline) {
					t.Fatalf("%d-byte frames: not both read by rank 1's transport within 10 s", size)
				}
				time.Sleep(10 * time.Microsecond)
			}
			if early == 0 {
				time.Sleep(5 * time.Millisecond) // time to read them, were they read early
				if !arrived(0) {
					t.Fatalf("%d-byte frames read before their receive was posted, want them left in the socket", size)
				}
			}
			for i, buf := range [][]byte{bufA, bufB} {
				ticket, _ := ts[1].Post(0, 3, buf)
				meta, n, err := ts[1].Wait(ctx, 0, 3, ticket)
				if err != nil || n != size || meta[0] != uint64(i) {
					t.Fatalf("frame %d: meta %v, %d bytes, %v; want meta [%d ...], %d bytes", i, meta, n, err, i, size)
				}
			}
			if !bytes.Equal(bufA, a) || !bytes.Equal(bufB, b) {
				t.Fatalf("%d-byte early frames: payloads swapped or corrupted", size)
			}
		}
		for range 10 {
			round()
		}
		if raceEnabled { // order and contents still checked above
			continue
		}
		if n := testing.AllocsPerRun(50, round); n != 0 {
			t.Errorf("%d-byte early frames: %.2f allocations per round, want 0", size, n)
		}
	}
}

// TestWaitWithoutDeadlineTimesOut: a context without a deadline is bounded
// by Config.Timeout, and the error names the silent rank.
func TestWaitWithoutDeadlineTimesOut(t *testing.T) {
	ts := mesh(t, 2, Config{Timeout: 100 * time.Millisecond}, nil)
	ticket, _ := ts[0].Post(1, 0, nil)
	start := time.Now()
	_, _, err := ts[0].Wait(context.Background(), 1, 0, ticket)
	if err == nil || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "within 100ms") {
		t.Fatalf("got %v, want a timeout naming rank 1", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestSmallFramesThroughAFullSocket: with the smallest socket buffers
// accepted, frames up to smallFrame (header and payload in one buffer) are cut short
// and meet a full socket again and again; every byte must still arrive, in
// order, whether the receive was posted first or not.
func TestSmallFramesThroughAFullSocket(t *testing.T) {
	ts := mesh(t, 2, Config{SocketBuffer: MinSocketBuffer, Spin: 20 * time.Microsecond}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sizes := []int{1, smallFrame, 100, smallFrame - HeaderSize, 4096, 0, 20000}
	const frames = 300
	payload := func(i int) []byte {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(i*7 + j*13)
		}
		return b
	}
	sent := make(chan error, 1)
	go func() {
		for i := range frames {
			if err := ts[0].Send(ctx, 1, 9, [4]uint64{uint64(i)}, payload(i)); err != nil {
				sent <- fmt.Errorf("frame %d: %w", i, err)
				return
			}
		}
		sent <- nil
	}()
	for i := range frames {
		want := payload(i)
		buf := make([]byte, len(want))
		ticket, err := ts[1].Post(0, 9, buf)
		if err != nil {
			t.Fatal(err)
		}
		meta, n, err := ts[1].Wait(ctx, 0, 9, ticket)
		if err != nil || n != len(want) || meta[0] != uint64(i) || !bytes.Equal(buf, want) {
			t.Fatalf("frame %d (%d bytes): got %d bytes, meta %v, err %v, contents equal %v",
				i, len(want), n, meta, err, bytes.Equal(buf, want))
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

func TestTinySocketBufferRefused(t *testing.T) {
	ln, err := Listen("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Rank: 0, Size: 2, SocketBuffer: 4096}
	_, err = Connect(context.Background(), cfg, ln, []string{ln.Addr().String(), "127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "Config.SocketBuffer: 4096 bytes is below the 65536-byte minimum") {
		t.Fatalf("Connect with a 4096-byte socket buffer: %v, want the minimum named", err)
	}
}

// TestGone: a peer is gone once it says goodbye or its connection
// ends, and only then: not when it aborts (it may still agree on who is
// alive). Its end is certain (Ended) when its host closed the connection
// (a goodbye, or its process ending), not when the connection was given
// up on for silence (the host watch's deadline: a cut network looks so).
func TestGone(t *testing.T) {
	for _, c := range []struct {
		name  string
		end   func(ts []*Transport)
		ended bool
	}{
		{"goodbye", func(ts []*Transport) { go ts[1].Close(context.Background()) }, true},
		{"connection lost", func(ts []*Transport) { ts[1].peers[0].conn.Close() }, true},
		{"silent", func(ts []*Transport) { ts[0].peers[1].conn.SetDeadline(time.Now()) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := mesh(t, 3, Config{}, nil)
			if ts[0].Gone(1) || ts[0].Gone(2) {
				t.Fatal("a live peer is gone")
			}
			c.end(ts)
			deadline := time.Now().Add(5 * time.Second)
			for !ts[0].Gone(1) {
				if time.Now().After(deadline) {
					t.Fatalf("rank 1 not gone 5 s after its %s", c.name)
				}
				time.Sleep(time.Millisecond)
			}
			if ts[0].Gone(2) || ts[0].Gone(0) || ts[0].Gone(7) {
				t.Error("ranks 0, 2 or 7 reported gone")
			}
			if got := ts[0].Ended(1); got != c.ended {
				t.Errorf("rank 1 ended: %v, want %v", got, c.ended)
			}
			if ts[0].Ended(2) || ts[0].Ended(7) {
				t.Error("ranks 2 or 7 reported ended")
			}
		})
	}
}

// TestEarlyFramesBounded: a peer that sends far ahead of this rank's
// receives (a stream of Reduce or Gather calls) is held back by TCP once
// the frames queued early hold maxEarlyBytes — frames larger than that
// are never read early: memory stays bounded, the sender blocks, and
// every frame still arrives, in order, once this rank receives.
func TestEarlyFramesBounded(t *testing.T) {
	for _, tc := range []struct {
		name         string
		frames, size int
		wantEarly    bool // some frames are read before their receive
	}{
		{"small frames", 1024, 16 << 10, true},
		{"large frames", 64, 256 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := mesh(t, 2, Config{}, nil)
			ctx := context.Background()
			frames, size := tc.frames, tc.size // 16 MiB
			sent := make(chan int, frames)
			go func() {
				payload := make([]byte, size)
				for i := range frames {
					payload[0] = byte(i)
					if err := ts[0].Send(ctx, 1, 1, [4]uint64{uint64(i)}, payload); err != nil {
						t.Error(err)
						break
					}
					sent <- i
				}
				close(sent)
			}()
			time.Sleep(300 * time.Millisecond) // the sender runs as far ahead as it can
			p := ts[1].peers[0]
			early := p.flow.early.Load()
			if early > maxEarlyBytes {
				t.Errorf("%d bytes held in early frames, want at most %d", early, maxEarlyBytes)
			}
			if tc.wantEarly && early == 0 {
				t.Errorf("no %d-byte frame read early, want up to %d bytes of them", size, maxEarlyBytes)
			}
			if !tc.wantEarly && early != 0 {
				t.Errorf("%d bytes of %d-byte frames read early, want them left in the socket", early, size)
			}
			if len(sent) == frames {
				t.Errorf("all %d frames (%d MiB) sent before any receive: the sender was not held back", frames, frames*size>>20)
			}
			buf := make([]byte, size)
			for i := range frames {
				tk, err := ts[1].Post(0, 1, buf)
				if err != nil {
					t.Fatal(err)
				}
				meta, n, err := ts[1].Wait(ctx, 0, 1, tk)
				if err != nil || n != size || meta[0] != uint64(i) || buf[0] != byte(i) {
					t.Fatalf("frame %d: meta %v, %d bytes, first byte %d, %v", i, meta, n, buf[0], err)
				}
			}
			if early := p.flow.early.Load(); early != 0 {
				t.Errorf("%d bytes still counted as early after every frame was received", early)
			}
		})
	}
}

// TestWaitReadsPastTheLimit: a wait whose frame is behind more than
// maxEarlyBytes of early frames on another stream still gets it — the
// limit never turns a program that works into one that hangs — and the
// early frames arrive afterwards.
func TestWaitReadsPastTheLimit(t *testing.T) {
	ts := mesh(t, 2, Config{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const frames, size = 48, 256 << 10 // 12 MiB on stream 1, then one frame on stream 2
	go func() {
		payload := make([]byte, size)
		for i := range frames {
			if err := ts[0].Send(ctx, 1, 1, [4]uint64{uint64(i)}, payload); err != nil {
				t.Error(err)
				return
			}
		}
		if err := ts[0].Send(ctx, 1, 2, [4]uint64{99}, []byte("last")); err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(100 * time.Millisecond) // the reader pauses at the limit
	buf := make([]byte, 8)
	tk, _ := ts[1].Post(0, 2, buf)
	meta, n, err := ts[1].Wait(ctx, 0, 2, tk)
	if err != nil || meta[0] != 99 || string(buf[:n]) != "last" {
		t.Fatalf("the frame behind the early ones: meta %v, %q, %v", meta, buf[:n], err)
	}
	big := make([]byte, size)
	for i := range frames {
		tk, _ := ts[1].Post(0, 1, big)
		if meta, _, err := ts[1].Wait(ctx, 0, 1, tk); err != nil || meta[0] != uint64(i) {
			t.Fatalf("early frame %d: meta %v, %v", i, meta, err)
		}
	}
}

// TestDeathBehindEarlyFrames: a peer whose early frames have paused this
// rank's reader, and which then dies, is still reported at once to a wait
// on another peer — its end is read past the frames, not left behind
// them in the socket.
func TestDeathBehindEarlyFrames(t *testing.T) {
	ts := mesh(t, 3, Config{}, nil)
	const frames, size = 512, 16 << 10 // 8 MiB from rank 2, never received
	go func() {
		payload := make([]byte, size)
		for i := range frames {
			if ts[2].Send(context.Background(), 0, 1, [4]uint64{uint64(i)}, payload) != nil {
				return // the connections closed under it
			}
		}
	}()
	p := ts[0].peers[2]
	for deadline := time.Now().Add(5 * time.Second); p.flow.early.Load() < maxEarlyBytes; {
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 holds %d early bytes from rank 2 after 5 s, want the %d that pause it", p.flow.early.Load(), maxEarlyBytes)
		}
		time.Sleep(time.Millisecond)
	}
	for _, q := range ts[2].peers {
		if q != nil {
			q.conn.Close() // rank 2 "dies"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ticket, _ := ts[0].Post(1, 0, make([]byte, 8)) // rank 0 waits on rank 1
	start := time.Now()
	_, _, err := ts[0].Wait(ctx, 1, 0, ticket)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 2 || !errors.Is(err, ErrPeerDied) {
		t.Fatalf("got %v after %v, want a PeerError for rank 2 wrapping ErrPeerDied", err, time.Since(start))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestUnconnectedNamed: a mesh that cannot form says, for each missing
// rank, why: a lower rank is dialed, and what the dial last met is told
// (refused: nothing listens at its address); a higher rank never dialed in,
// and the address it was to reach is named (ErrNotReached) — where a rank
// that published a loopback address for peers on other hosts ends.
func TestUnconnectedNamed(t *testing.T) {
	lns := make([]*net.TCPListener, 3)
	addrs := make([]string, 3)
	for i := range 3 {
		ln, err := Listen("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	lns[0].Close() // rank 0 is not there: refused
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// Rank 1 alone: rank 0 refuses its dial; rank 2 never dials in.
	_, err := Connect(ctx, Config{Rank: 1, Size: 3}, lns[1], addrs)
	lns[2].Close()
	for _, want := range []string{
		"tcp: rank 1 could not connect to ranks [0 2]: ",
		"rank 0 (" + addrs[0] + "): dial " + addrs[0] + ": context deadline exceeded (last error: dial tcp " + addrs[0] + ": connect: connection refused); ",
		"ranks [2] never connected to this rank's address " + addrs[1] + ": their hosts may not reach it",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant %q", err, want)
		}
	}
	if !errors.Is(err, ErrNotReached) {
		t.Errorf("%v: not ErrNotReached", err)
	}
}

// TestFailureEndsBlockedSend: a send blocked on a peer that does not read
// returns as soon as the transport fails for another reason (here a third
// rank aborts), not at its deadline; and the connection stays in step:
// the half-sent frame is finished once the failed peer drops the data it
// no longer waits for, so the control messages the survivors then
// exchange over it (Shrink's agreement) arrive, in both directions.
//
// The mesh is lazy so that the abort reaches the sender alone first: in a
// full mesh the receiver hears it too and drops the frame's rest, and if
// it does so before the sender's reader has taken the abort, the send
// completes (nil) and the failure's own ending of it goes untested.
func TestFailureEndsBlockedSend(t *testing.T) {
	got := make([]chan string, 3)
	cfgFor := func(rank int) Config {
		got[rank] = make(chan string, 4)
		return Config{SocketBuffer: MinSocketBuffer, Lazy: true, Control: func(from int, msg []byte) { got[rank] <- fmt.Sprintf("%d:%s", from, msg) }}
	}
	ts := meshOf(t, 3, cfgFor, nil)
	// control sends msg from one rank to another (linking them if they
	// were not) and checks that exactly it arrives.
	control := func(from, to int, msg string) {
		t.Helper()
		if err := ts[from].SendControl(to, []byte(msg)); err != nil {
			t.Fatalf("control message %q from rank %d to rank %d: %v", msg, from, to, err)
		}
		select {
		case m := <-got[to]:
			if want := fmt.Sprintf("%d:%s", from, msg); m != want {
				t.Fatalf("rank %d's handler got %q, want %q", to, m, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("rank %d's control message %q never reached rank %d", from, msg, to)
		}
	}
	control(2, 0, "hello") // rank 2 links to rank 0 only, for now
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		// 16 MiB: far more than the socket buffers hold; rank 1 posts no
		// receive, so the send blocks.
		sent <- ts[0].Send(ctx, 1, 3, [4]uint64{}, make([]byte, 16<<20))
	}()
	select {
	case err := <-sent:
		t.Fatalf("the 16 MiB send returned before any receive: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	abort := errors.New("out of memory")
	ts[2].Abort(abort)
	var err error
	select {
	case err = <-sent:
	case <-time.After(20 * time.Second):
		t.Fatal("the blocked send still waits 20 s after the transport failed (its deadline is a minute away)")
	}
	var ae *AbortError
	if !errors.As(err, &ae) || ae.Rank != 2 {
		t.Fatalf("the blocked send returned %v after %v, want rank 2's abort", err, time.Since(start))
	}
	if ts[1].Err() != nil {
		t.Fatalf("rank 1 failed before rank 2 linked to it: %v", ts[1].Err())
	}
	// Now rank 1 hears of the failure too, and drops the frame's rest.
	control(1, 2, "hello")
	ts[2].Abort(abort)
	select {
	case <-ts[1].Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("rank 1 never heard rank 2's abort")
	}
	// Over the connection that carried the half-sent frame, both ways.
	for _, c := range []struct{ from, to int }{{0, 1}, {1, 0}} {
		control(c.from, c.to, "alive after the failure")
		if ts[c.from].Gone(c.to) {
			t.Errorf("rank %d counts rank %d as gone", c.from, c.to)
		}
	}
}

// TestAbortNeverCutsAConnection: an Abort that cannot take a connection at
// once — a control message holds it, stuck behind the rest of a frame the
// peer does not read — waits for it instead of closing it, so the peer
// never takes this live rank for one whose process ended (Ended), which a
// partition's quorum counts as dead.
func TestAbortNeverCutsAConnection(t *testing.T) {
	ts := meshOf(t, 2, func(int) Config { return Config{SocketBuffer: MinSocketBuffer} }, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		// Far more than the socket buffers hold; rank 1 posts no receive
		// yet, so the send blocks until the abort ends it.
		sent <- ts[0].Send(ctx, 1, 3, [4]uint64{}, make([]byte, 16<<20))
	}()
	time.Sleep(300 * time.Millisecond)
	ts[0].Abort(errors.New("first failure"))
	if err := <-sent; err == nil {
		t.Fatal("the blocked send succeeded after the abort")
	}
	// A control message takes the connection and blocks behind the rest
	// of the cut frame for its second; a second abort comes meanwhile.
	control := make(chan error, 1)
	go func() { control <- ts[0].SendControl(1, []byte("still here")) }()
	time.Sleep(100 * time.Millisecond)
	ts[0].Abort(errors.New("second failure"))
	<-control
	// Rank 1 now reads the frame: what rank 0 wrote of it, and then
	// nothing more (silence), not the end of the connection.
	buf := make([]byte, 16<<20)
	ticket, err := ts[1].Post(0, 3, buf)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, waitCancel := context.WithTimeout(ctx, 3*time.Second)
	defer waitCancel()
	_, _, err = ts[1].Wait(waitCtx, 0, 3, ticket)
	if err == nil {
		t.Fatal("rank 1 received the whole frame, which rank 0 never finished sending")
	}
	if ts[1].Ended(0) {
		t.Errorf("rank 1 takes rank 0, alive, for ended (its receive: %v)", err)
	}
}
