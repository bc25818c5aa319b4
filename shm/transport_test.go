package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pair makes ranks 0 and 1 of a two-rank job inside this process; each
// maps the other's segment through /proc/self/fd, as separate processes
// do through /proc/PID/fd.
func pair(t testing.TB, slots, slotBytes int) (*Transport, *Transport) {
	t.Helper()
	return pairOf(t, Config{Slots: slots, SlotBytes: slotBytes, Timeout: 10 * time.Second, Spin: 20 * time.Microsecond})
}

// pairOf is pair with both ranks configured as cfg (Rank and Size set).
func pairOf(t testing.TB, cfg Config) (*Transport, *Transport) {
	t.Helper()
	ts := ranksOf(t, 2, cfg)
	return ts[0], ts[1]
}

// ranksOf returns the transports of n ranks of one machine, each attached
// to every other, configured as cfg (Rank and Size set).
func ranksOf(t testing.TB, n int, cfg Config) []*Transport {
	t.Helper()
	ts := make([]*Transport, n)
	infos := make([]Info, n)
	for r := range n {
		cfg.Rank, cfg.Size = r, n
		tr, info, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts[r], infos[r] = tr, info
		t.Cleanup(func() { tr.Close() })
	}
	for r := range n {
		for q := range n {
			if q != r {
				if err := ts[r].Attach(q, infos[q]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for r := range n {
		ts[r].Sealed()
	}
	return ts
}

func payload(seed uint64, n int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// recordBytes is the length of the record of an n-byte fragment that
// starts on a page and is not paged.
func recordBytes(n int) int { return int(recordLen(0, n, false)) }

// TestFramesArriveInOrder sends frames of sizes around the slot size and
// the inline word's (whole frames, and last fragments, of up to 8 bytes) on
// three streams, some received into buffers posted before they were sent
// and some after they arrived: every frame lands whole, in order per
// stream, with its metadata.
func TestFramesArriveInOrder(t *testing.T) {
	// Slots of 8 bytes: every fragment of every frame fits the inline word.
	// Atomic stores for publishing as well as plain ones (where the
	// process could register for membarrier).
	for _, slotB := range []int{4096, 8} {
		for _, plain := range []bool{false, true} {
			t.Run(fmt.Sprintf("slot=%d/plain=%v", slotB, plain), func(t *testing.T) { testFramesArriveInOrder(t, slotB, plain) })
		}
	}
}

// setPlain makes tr publish with plain stores or with atomic ones.
func setPlain(tr *Transport, plain bool) {
	tr.plain = plain
	for _, p := range tr.peers {
		if p != nil {
			p.plain = plain
		}
	}
}

func testFramesArriveInOrder(t *testing.T, slotB int, plain bool) {
	a, b := pair(t, 4, slotB)
	setPlain(a, plain)
	setPlain(b, plain)
	ctx := context.Background()
	sizes := []int{0, 1, 7, 8, 9, 16, slotB - 1, slotB, slotB + 1, slotB + 8, slotB + 9, 3*slotB + 5, 9 * slotB}
	type sent struct {
		stream uint32
		data   []byte
		meta   [4]uint64
	}
	var frames []sent
	for i, n := range sizes {
		for s := uint32(1); s <= 3; s++ {
			frames = append(frames, sent{s, payload(uint64(i)*10+uint64(s), n), [4]uint64{uint64(i), uint64(s), uint64(n), 42}})
		}
	}
	// Post receives for the first half in advance.
	tickets := make([]uint64, len(frames))
	bufs := make([][]byte, len(frames))
	for i, f := range frames[:len(frames)/2] {
		bufs[i] = make([]byte, len(f.data)+3)
		var err error
		if tickets[i], err = b.Post(0, f.stream, bufs[i]); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		for _, f := range frames {
			if err := a.Send(ctx, 1, f.stream, f.meta, f.data); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i, f := range frames {
		if i >= len(frames)/2 {
			bufs[i] = make([]byte, len(f.data))
			var err error
			if tickets[i], err = b.Post(0, f.stream, bufs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, f := range frames {
		meta, n, err := b.Wait(ctx, 0, f.stream, tickets[i])
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if meta != f.meta || n != len(f.data) || !bytes.Equal(bufs[i][:n], f.data) {
			t.Fatalf("frame %d (stream %d, %d bytes): got meta %v, %d bytes", i, f.stream, len(f.data), meta, n)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestRingLaps: frames of mixed sizes, from empty to several fragments,
// go round the ring many times (with wrap records wherever a record does
// not fit before the end) and arrive whole and in order.
func TestRingLaps(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			const slotB = 1024
			a, b := pair(t, 4, slotB)
			setPlain(a, plain)
			setPlain(b, plain)
			size := b.peers[0].in.size
			rng := rand.New(rand.NewPCG(3, 4))
			var frames [][]byte
			for total := 0; total < 5*int(size); {
				n := rng.IntN(3*slotB + 2)
				if rng.IntN(3) == 0 {
					n = rng.IntN(inlineBytes + 1)
				}
				frames = append(frames, payload(uint64(len(frames)), n))
				total += recordBytes(min(n, slotB)) * max(1, (n+slotB-1)/slotB)
			}
			exchange(t, a, b, frames)
			if laps := b.peers[0].in.tail.Load() / size; laps < 4 {
				t.Fatalf("the frames went round the ring %d times, want at least 4", laps)
			}
		})
	}
}

// TestStaleRecordsIgnored: the first frame's data, left in the ring, looks
// like records published on the ring's next lap (every word holds the
// sequence number a record there would carry); small frames then fill the
// lap, and on the next one the receiver waits before each frame is sent,
// polling where the stale bytes lie. Only the zero a sender writes ahead
// of each record keeps it from taking those bytes for records.
func TestStaleRecordsIgnored(t *testing.T) {
	const slotB = 2 * pageBytes // the first frame's data spans record starts
	a, b := pair(t, 4, slotB)
	size := b.peers[0].in.size
	first := make([]byte, slotB)
	for j := 0; j < slotB; j += 8 { // the data lies at ring offset 64
		line := uint64(recordHeader+j) &^ (lineBytes - 1)
		binary.LittleEndian.PutUint64(first[j:], size+line+1)
	}
	frames := [][]byte{first}
	for range (int(size) - recordBytes(slotB)) / recordBytes(0) {
		frames = append(frames, nil)
	}
	exchange(t, a, b, frames) // exactly one lap
	ctx := context.Background()
	for i := range 4 {
		want := payload(uint64(i), 4)
		got := make([]byte, 4)
		tk, err := b.Post(0, 7, got)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			meta, n, err := b.Wait(ctx, 0, 7, tk)
			if err == nil && (meta[0] != uint64(i) || n != 4 || !bytes.Equal(got, want)) {
				err = fmt.Errorf("got meta %v, %d bytes %v, want %v", meta, n, got[:n], want)
			}
			waited <- err
		}()
		time.Sleep(time.Millisecond) // the receiver polls the stale bytes meanwhile
		if err := a.Send(ctx, 1, 7, [4]uint64{uint64(i)}, want); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("frame %d of the second lap: %v", i, err)
		}
	}
}

// TestSmallFramesStayInWindow: a stream of small frames that the
// receiver keeps up with goes round the first smallWindow bytes of the
// ring, not all of it, and arrives whole.
func TestSmallFramesStayInWindow(t *testing.T) {
	a, b := pair(t, 8, 1<<20)
	out := a.peers[1].out
	if out.size <= 2*smallWindow {
		t.Fatalf("a ring of %d bytes cannot show the window of %d", out.size, smallWindow)
	}
	ctx := context.Background()
	var furthest uint64
	rec := recordBytes(64)
	for i := range 3 * smallWindow / rec {
		want := payload(uint64(i), 64)
		got := make([]byte, 64)
		tk, err := b.Post(0, 7, got)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Send(ctx, 1, 7, [4]uint64{uint64(i)}, want); err != nil {
			t.Fatal(err)
		}
		furthest = max(furthest, (a.peers[1].head-1)&(out.size-1))
		if meta, n, err := b.Wait(ctx, 0, 7, tk); err != nil || meta[0] != uint64(i) || n != 64 || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: meta %v, %d bytes, %v", i, meta, n, err)
		}
	}
	if furthest >= uint64(smallWindow+rec) {
		t.Fatalf("small frames reached ring offset %d, want below %d", furthest, smallWindow+rec)
	}
}

// TestStreamBackInWindow: a stream of page records more than
// smallWindow bytes ahead of its receiver as it passes the window's end
// goes on past it; once the receiver has caught up, the stream goes back
// to the ring's start at the next multiple of the window, not a whole
// lap later, and every frame arrives whole and in order.
func TestStreamBackInWindow(t *testing.T) {
	a, b := pair(t, 8, 1<<20)
	p, out := a.peers[1], a.peers[1].out
	if out.size <= 4*smallWindow {
		t.Fatalf("a ring of %d bytes cannot show the window of %d", out.size, smallWindow)
	}
	ctx := context.Background()
	const n = 1024 // one way, more than a small record holds: a page a record
	send := func(i int) {
		t.Helper()
		if err := a.Send(ctx, 1, 7, [4]uint64{uint64(i)}, payload(uint64(i), n)); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(i int) {
		t.Helper()
		got := make([]byte, n)
		tk, err := b.Post(0, 7, got)
		if err != nil {
			t.Fatal(err)
		}
		if meta, k, err := b.Wait(ctx, 0, 7, tk); err != nil || meta[0] != uint64(i) || k != n || !bytes.Equal(got, payload(uint64(i), n)) {
			t.Fatalf("frame %d: meta %v, %d bytes, %v", i, meta, k, err)
		}
	}
	ahead := smallWindow/pageBytes + 8 // nothing taken as the window's end passes
	for i := range ahead {
		send(i)
	}
	if at := p.head & (out.size - 1); at <= smallWindow {
		t.Fatalf("with nothing received, the stream wrapped at ring offset %d, want past %d", at, smallWindow)
	}
	for i := range ahead {
		recv(i)
	}
	var furthest uint64
	for i := ahead; i < ahead+2*smallWindow/pageBytes; i++ {
		send(i)
		furthest = max(furthest, (p.head-1)&(out.size-1))
		recv(i)
	}
	if furthest >= 2*smallWindow {
		t.Fatalf("with the receiver caught up, the stream reached ring offset %d, want back at the start by %d", furthest, 2*smallWindow)
	}
	if at := p.head & (out.size - 1); at >= smallWindow {
		t.Fatalf("the stream ended at ring offset %d, want within the window (%d)", at, smallWindow)
	}
}

// TestSmallFramesHeldNearReceiver: a sender keeps at most smallAhead
// bytes of small records unreleased in a ring, so a stream of small
// frames to a receiver that takes none stops there (and goes on, in
// order, as the receiver takes them); a large record after them ends on
// a page; and small frames sent behind a large one that the receiver has
// not taken do not wait for it.
func TestSmallFramesHeldNearReceiver(t *testing.T) {
	a, b := pair(t, 8, 1<<20)
	out := a.peers[1].out
	ctx := context.Background()
	const frames = 2000
	limit := smallAhead / recordBytes(8) // one line per record
	var sent atomic.Int64
	errc, done := make(chan error, 1), make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); <-done }) // before the segments are unmapped
	go func() {
		defer close(done)
		for i := range frames {
			if err := a.Send(sctx, 1, 7, [4]uint64{uint64(i)}, payload(uint64(i), 8)); err != nil {
				errc <- err
				return
			}
			p := a.peers[1] // head and smallFrom are this goroutine's: it alone sends
			if ahead := p.head - max(out.tail.Load(), p.smallFrom); ahead > smallAhead {
				errc <- fmt.Errorf("after frame %d: %d bytes of small records unreleased, want at most %d", i, ahead, smallAhead)
				return
			}
			sent.Add(1)
		}
		errc <- nil
	}()
	for deadline := time.Now().Add(5 * time.Second); sent.Load() < int64(limit) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // a sender past the limit would go on meanwhile
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if n := sent.Load(); n != int64(limit) {
		t.Fatalf("with no frame received, %d small frames were sent, want %d (%d bytes of records)", n, limit, smallAhead)
	}
	for i := range frames {
		buf := make([]byte, 8)
		if meta, n, err := b.Recv(ctx, 0, 7, buf); err != nil || meta[0] != uint64(i) || n != 8 || !bytes.Equal(buf, payload(uint64(i), 8)) {
			t.Fatalf("frame %d: meta %v, %d bytes, %v", i, meta, n, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	// A large frame first, then small ones, none received yet.
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	large := payload(1, 64<<10)
	if h := a.peers[1].head; h%pageBytes == 0 {
		t.Fatalf("the small frames left the ring's head at %d, on a page: nothing to realign", h)
	}
	if err := a.Send(tctx, 1, 8, [4]uint64{}, large); err != nil {
		t.Fatal(err)
	}
	if h := a.peers[1].head; h%pageBytes != 0 {
		t.Fatalf("after a large record the ring's head is at %d, want the next record on a page", h)
	}
	behind := smallAhead / recordBytes(100) // as many records as smallAhead holds
	for i := range behind {
		if err := a.Send(tctx, 1, 8, [4]uint64{uint64(i)}, payload(uint64(i), 100)); err != nil {
			t.Fatalf("small frame %d behind a large one the receiver has not taken: %v", i, err)
		}
	}
	buf := make([]byte, len(large))
	if _, n, err := b.Recv(ctx, 0, 8, buf); err != nil || n != len(large) || !bytes.Equal(buf, large) {
		t.Fatalf("large frame: %d bytes, %v", n, err)
	}
	for i := range behind {
		buf := make([]byte, 100)
		if meta, n, err := b.Recv(ctx, 0, 8, buf); err != nil || meta[0] != uint64(i) || n != 100 || !bytes.Equal(buf, payload(uint64(i), 100)) {
			t.Fatalf("small frame %d: meta %v, %d bytes, %v", i, meta, n, err)
		}
	}
}

// TestSmallRecordsPackedOrPaged: small frames sent one way take records
// packed on cache lines; a small frame that answers the peer (this rank
// took a frame from it since it last sent to it) takes the rest of its
// page; the receiver reads each at its length.
func TestSmallRecordsPackedOrPaged(t *testing.T) {
	a, b := pair(t, 8, 1<<20)
	ctx := context.Background()
	recv := func(to *Transport, rank int, i uint64, n int) {
		t.Helper()
		buf := make([]byte, n)
		if meta, got, err := to.Recv(ctx, rank, 7, buf); err != nil || meta[0] != i || got != n || !bytes.Equal(buf, payload(i, n)) {
			t.Fatalf("frame %d: meta %v, %d bytes, %v", i, meta, got, err)
		}
	}
	p := a.peers[1]
	for i, tc := range []struct {
		n      int
		answer bool   // b sends a frame that a takes first
		want   uint64 // a's head after the frame
	}{
		{8, false, 64},          // one line
		{100, false, 64 + 192},  // three lines
		{192, false, 256 + 256}, // four lines: the largest packed record
		{8, true, pageBytes},    // answering: the rest of the page
		{8, false, pageBytes + 64},
		{8, false, pageBytes + 128},
		{100, true, 2 * pageBytes},
		{193, false, 3 * pageBytes}, // five lines' worth: a page
	} {
		if tc.answer {
			if err := b.Send(ctx, 0, 7, [4]uint64{uint64(100 + i)}, payload(uint64(100+i), 4)); err != nil {
				t.Fatal(err)
			}
			recv(a, 1, uint64(100+i), 4)
		}
		if err := a.Send(ctx, 1, 7, [4]uint64{uint64(i)}, payload(uint64(i), tc.n)); err != nil {
			t.Fatal(err)
		}
		if p.head != tc.want {
			t.Fatalf("frame %d (%d bytes, answering %v): head at %d, want %d", i, tc.n, tc.answer, p.head, tc.want)
		}
		recv(b, 0, uint64(i), tc.n)
	}
}

// TestOtherRingsDrainedLate: a wait for rank 1's frame leaves the frame
// rank 2 sent in its ring for its first drainAfter polls, where rank 2's
// own receive takes it straight from the ring, and then drains it into
// the mailbox (so that a sender waiting for room is never left waiting);
// either way it arrives intact.
func TestOtherRingsDrainedLate(t *testing.T) {
	ctx := context.Background()
	for _, polls := range []int{drainAfter - 1, drainAfter + 1} {
		t.Run(fmt.Sprintf("%d polls", polls), func(t *testing.T) {
			ts := ranksOf(t, 3, Config{Slots: 4, SlotBytes: 1024, Timeout: 10 * time.Second, Spin: 20 * time.Microsecond})
			if err := ts[2].Send(ctx, 0, 1, [4]uint64{5}, payload(5, 24)); err != nil {
				t.Fatal(err)
			}
			from1, from2 := ts[0].peers[1], ts[0].peers[2]
			var w waiter
			for i := range polls {
				if err := ts[0].idle(ctx, from1, &w); err != nil {
					t.Fatal(err)
				}
				if drained := from2.unclaimed.Load() != 0; drained != (i >= drainAfter) {
					t.Fatalf("poll %d of a wait for rank 1: rank 2's frame drained is %v, want %v (drainAfter %d)", i, drained, i >= drainAfter, drainAfter)
				}
			}
			buf := make([]byte, 24)
			meta, n, err := ts[0].Recv(ctx, 2, 1, buf)
			if err != nil || meta[0] != 5 || n != 24 || !bytes.Equal(buf, payload(5, 24)) {
				t.Fatalf("rank 2's frame: meta %v, %d bytes, %v; want meta 5, its 24 bytes", meta, n, err)
			}
		})
	}
}

// TestWaitFreesBlockedSender: rank 0 waits for rank 1, which waits for
// rank 2, which first sends rank 0 more frames than its ring holds: only
// rank 0 draining rank 2's ring while it waits (after drainAfter polls)
// lets rank 2 go on to send rank 1 its frame. Every frame arrives intact.
func TestWaitFreesBlockedSender(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts := ranksOf(t, 3, Config{Slots: 4, SlotBytes: 1024, Timeout: 10 * time.Second, Spin: 20 * time.Microsecond})
	const frames, size = 64, 1000 // 64 records of a page each: more than a ring of 4 slots holds
	errc := make(chan error, 2)
	go func() { // rank 2
		for i := range frames {
			if err := ts[2].Send(ctx, 0, 1, [4]uint64{uint64(i)}, payload(uint64(i), size)); err != nil {
				errc <- fmt.Errorf("rank 2 sending frame %d to rank 0: %w", i, err)
				return
			}
		}
		errc <- ts[2].Send(ctx, 1, 2, [4]uint64{100}, payload(100, 8))
	}()
	go func() { // rank 1
		buf := make([]byte, 8)
		if _, _, err := ts[1].Recv(ctx, 2, 2, buf); err != nil {
			errc <- fmt.Errorf("rank 1 receiving from rank 2: %w", err)
			return
		}
		errc <- ts[1].Send(ctx, 0, 3, [4]uint64{200}, buf)
	}()
	buf := make([]byte, size)
	if meta, n, err := ts[0].Recv(ctx, 1, 3, buf); err != nil || meta[0] != 200 || !bytes.Equal(buf[:n], payload(100, 8)) {
		t.Fatalf("rank 0 receiving rank 1's frame: meta %v, %d bytes, %v", meta, n, err)
	}
	for i := range frames {
		if meta, n, err := ts[0].Recv(ctx, 2, 1, buf); err != nil || meta[0] != uint64(i) || !bytes.Equal(buf[:n], payload(uint64(i), size)) {
			t.Fatalf("rank 2's frame %d: meta %v, %d bytes, %v", i, meta, n, err)
		}
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrentSenders: goroutines sending to the same peer at once,
// each on its own stream, claim records in one order and may publish them
// in another; every frame arrives whole and in order on its stream.
func TestConcurrentSenders(t *testing.T) {
	a, b := pair(t, 4, 4096)
	const senders, frames = 4, 300
	size := func(g, i int) int { return []int{0, 5, 64, 700, 4096, 9000}[(g+i)%6] }
	ctx := context.Background()
	errc := make(chan error, senders)
	for g := range senders {
		go func() {
			for i := range frames {
				if err := a.Send(ctx, 1, uint32(10+g), [4]uint64{uint64(g), uint64(i)}, payload(uint64(g*frames+i), size(g, i))); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	var wg sync.WaitGroup
	bad := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range frames {
				buf := make([]byte, size(g, i))
				tk, err := b.Post(0, uint32(10+g), buf)
				if err == nil {
					var meta [4]uint64
					var n int
					meta, n, err = b.Wait(ctx, 0, uint32(10+g), tk)
					if err == nil && (meta != [4]uint64{uint64(g), uint64(i)} || n != len(buf) || !bytes.Equal(buf, payload(uint64(g*frames+i), n))) {
						err = fmt.Errorf("stream %d frame %d: meta %v, %d bytes", 10+g, i, meta, n)
					}
				}
				if err != nil {
					bad <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(bad)
	for err := range bad {
		t.Fatal(err)
	}
	for range senders {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// exchange sends frames from a to b (rank 0 to rank 1) on one stream and
// checks that each arrives whole, in order, with its metadata.
func exchange(t *testing.T, a, b *Transport, frames [][]byte) {
	t.Helper()
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		for i, f := range frames {
			if err := a.Send(ctx, 1, 7, [4]uint64{uint64(i)}, f); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i, f := range frames {
		buf := make([]byte, len(f))
		tk, err := b.Post(0, 7, buf)
		if err != nil {
			t.Fatal(err)
		}
		meta, n, err := b.Wait(ctx, 0, 7, tk)
		if err != nil || meta[0] != uint64(i) || n != len(f) || !bytes.Equal(buf, f) {
			t.Fatalf("frame %d of %d bytes: meta %v, %d bytes, %v", i, len(f), meta, n, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestBothSendLargeFirst: both ranks send 8 MiB to each other before
// either posts a receive; the rings hold 64 KiB, so each sender must drain
// its own ring while it waits for room, or the two would deadlock.
func TestBothSendLargeFirst(t *testing.T) {
	a, b := pair(t, 4, 16<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	onBoth(t, a, b, func(r int, tr *Transport) error {
		out := payload(uint64(r), 8<<20)
		if err := tr.Send(ctx, 1-r, 5, [4]uint64{uint64(r)}, out); err != nil {
			return err
		}
		in := make([]byte, 8<<20)
		tk, err := tr.Post(1-r, 5, in)
		if err == nil {
			_, _, err = tr.Wait(ctx, 1-r, 5, tk)
		}
		if err == nil && !bytes.Equal(in, payload(uint64(1-r), 8<<20)) {
			err = fmt.Errorf("rank %d received corrupted data", r)
		}
		return err
	})
}

// onBoth runs fn for ranks 0 (a) and 1 (b) at once, each on its own
// goroutine, and fails with their errors.
func onBoth(t *testing.T, a, b *Transport, fn func(r int, tr *Transport) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, tr := range []*Transport{a, b} {
		wg.Go(func() { errs[r] = fn(r, tr) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestFrameLargerThanReceive: the receive fails with ErrFrameTooLarge and
// names the sizes; the next frame is received normally.
func TestFrameLargerThanReceive(t *testing.T) {
	a, b := pair(t, 4, 1024)
	ctx := context.Background()
	small := make([]byte, 100)
	tk, _ := b.Post(0, 1, small)
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, 1, 1, [4]uint64{}, payload(1, 20000)) }() // more than the ring holds
	if _, _, err := b.Wait(ctx, 0, 1, tk); !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "20000 bytes arrived for a 100-byte receive") {
		t.Fatalf("got %v, want ErrFrameTooLarge naming both sizes", err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	next := make([]byte, 10)
	tk, _ = b.Post(0, 1, next)
	if err := a.Send(ctx, 1, 1, [4]uint64{9}, payload(2, 10)); err != nil {
		t.Fatal(err)
	}
	if meta, n, err := b.Wait(ctx, 0, 1, tk); err != nil || n != 10 || meta[0] != 9 || !bytes.Equal(next, payload(2, 10)) {
		t.Fatalf("frame after the refused one: meta %v, %d bytes, %v", meta, n, err)
	}
}

// TestWaitsEnd: a wait for a frame that never comes ends at the context's
// deadline, naming the rank, and at once when a failure is reported
// elsewhere.
func TestWaitsEnd(t *testing.T) {
	_, b := pair(t, 4, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	tk, _ := b.Post(0, 1, make([]byte, 8))
	start := time.Now()
	_, _, err := b.Wait(ctx, 0, 1, tk)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a PeerError for rank 0 wrapping the deadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the wait took %v after a 50 ms deadline", d)
	}
	dead := errors.New("rank 0 died")
	b.cfg.Failed = func() error { return dead }
	if _, _, err := b.Wait(context.Background(), 0, 1, tk); !errors.Is(err, dead) {
		t.Fatalf("got %v, want the failure reported elsewhere", err)
	}
}

// leaves makes t's Config.Left report that rank closed its group (where,
// as its farewell says) and returns the error it reports.
func leaves(t *Transport, rank int, where string) error {
	gone := fmt.Errorf("rank %d closed its group %s", rank, where)
	t.cfg.Left = func(r int) error {
		if r == rank {
			return gone
		}
		return nil
	}
	return gone
}

// TestLeftPeer: once Config.Left reports that a rank left, a wait for its
// data still gets the frames it sent before leaving, then fails at once
// with the reported error (not at the timeout); so does a send to it
// blocked on a full ring.
func TestLeftPeer(t *testing.T) {
	a, b := pair(t, 4, 1024)
	ctx := context.Background()
	sent := payload(1, 100)
	if err := a.Send(ctx, 1, 1, [4]uint64{7}, sent); err != nil {
		t.Fatal(err)
	}
	gone := leaves(b, 0, "after its call #13")
	got := make([]byte, 100)
	tk, _ := b.Post(0, 1, got)
	if meta, n, err := b.Wait(ctx, 0, 1, tk); err != nil || meta[0] != 7 || !bytes.Equal(got[:n], sent) {
		t.Fatalf("the frame sent before leaving: meta %v, %d bytes, err %v", meta, n, err)
	}
	tk, _ = b.Post(0, 1, got)
	start := time.Now()
	if _, _, err := b.Wait(ctx, 0, 1, tk); !errors.Is(err, gone) {
		t.Fatalf("wait: got %v, want the farewell", err)
	}
	for i := 0; ; i++ { // fill rank 0's ring, then one more
		err := b.Send(ctx, 0, 2, [4]uint64{}, payload(2, 1024))
		if err != nil {
			if !errors.Is(err, gone) {
				t.Fatalf("send %d: got %v, want the farewell", i, err)
			}
			break
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("giving up took %v", d)
	}
}

// TestLeftPeerFrameInManyRecords: a peer that left with a frame of many
// records still in this rank's ring (it sent them all before leaving,
// faster than this rank took them) is received whole: a wait gives up
// only after a look found the ring empty. Before, it gave up three looks
// after the goodbye, each taking one record (the sub-group send of
// TestCloseWaitsForSubGroupSends, abandoned now and then). With and
// without a spin phase, received with Recv and with Post and Wait.
func TestLeftPeerFrameInManyRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		spin time.Duration
		post bool
	}{
		{"recv", 0, false},
		{"post-wait", 0, true},
		{"recv-spin", 20 * time.Microsecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pairOf(t, Config{Slots: 64, SlotBytes: 1024, Timeout: 10 * time.Second, Spin: tc.spin})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sent := payload(3, 12*1024) // 12 records or more, all in the ring
			if err := a.Send(ctx, 1, 1, [4]uint64{9}, sent); err != nil {
				t.Fatal(err)
			}
			gone := leaves(b, 0, "after its call #4")
			got := make([]byte, len(sent))
			var meta [4]uint64
			var n int
			var err error
			if tc.post {
				tk, _ := b.Post(0, 1, got)
				meta, n, err = b.Wait(ctx, 0, 1, tk)
			} else {
				meta, n, err = b.Recv(ctx, 0, 1, got)
			}
			if err != nil || meta[0] != 9 || !bytes.Equal(got[:n], sent) {
				t.Fatalf("the frame sent before leaving: meta %v, %d of %d bytes, err %v", meta, n, len(sent), err)
			}
			start := time.Now()
			if _, _, err := b.Recv(ctx, 0, 1, got); !errors.Is(err, gone) {
				t.Fatalf("a receive after it: got %v, want the farewell", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("giving up took %v", d)
			}
		})
	}
}

// TestSleepersAreWoken: frames sent long after the receiver began
// waiting (past its spin and yield phases, so it sleeps on the doorbell)
// reach it, with atomic and with plain publishing stores (the latter
// relying on the sleeper's membarrier).
func TestSleepersAreWoken(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			a, b := pair(t, 4, 1024)
			setPlain(a, plain)
			setPlain(b, plain)
			ctx := context.Background()
			const frames = 4
			errc := make(chan error, 1)
			go func() {
				for i := range frames {
					time.Sleep(2 * time.Millisecond)
					if err := a.Send(ctx, 1, 1, [4]uint64{uint64(i)}, payload(uint64(i), 100)); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for i := range frames {
				buf := make([]byte, 100)
				tk, err := b.Post(0, 1, buf)
				if err != nil {
					t.Fatal(err)
				}
				meta, n, err := b.Wait(ctx, 0, 1, tk)
				if err != nil || meta[0] != uint64(i) || n != 100 || !bytes.Equal(buf, payload(uint64(i), 100)) {
					t.Fatalf("frame %d: meta %v, %d bytes, %v", i, meta, n, err)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSteadyStateAllocatesNothing: posted receives, sends and waits of
// multi-slot frames allocate nothing once warm.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	a, b := pair(t, 8, 4096)
	ctx := context.Background()
	out, in := payload(1, 10000), make([]byte, 10000)
	step := func() {
		tk, err := b.Post(0, 3, in)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Send(ctx, 1, 3, [4]uint64{1}, out); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Wait(ctx, 0, 3, tk); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if n := testing.AllocsPerRun(100, step); n != 0 {
		t.Fatalf("%v allocations per post/send/wait", n)
	}
}

// BenchmarkPingPong is a round trip of one frame each way between two
// goroutines standing in for two ranks.
func BenchmarkPingPong(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{8, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(2 * size))
			twoRanks(b, size, func(x *Transport, buf []byte) error {
				tk, _ := x.Post(1, 1, buf)
				if err := x.Send(ctx, 1, 1, [4]uint64{}, buf); err != nil {
					return err
				}
				_, _, err := x.Wait(ctx, 1, 1, tk)
				return err
			}, func(y *Transport, buf []byte) error {
				tk, _ := y.Post(0, 1, buf)
				if _, _, err := y.Wait(ctx, 0, 1, tk); err != nil {
					return err
				}
				return y.Send(ctx, 0, 1, [4]uint64{}, buf)
			})
		})
	}
}

// BenchmarkOneWay streams frames one way between two goroutines standing
// in for two ranks, the receiver taking each with Recv: what the
// transport alone costs a rooted call whose sender runs ahead.
func BenchmarkOneWay(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{8, 1 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			twoRanks(b, size, func(x *Transport, buf []byte) error {
				return x.Send(ctx, 1, 1, [4]uint64{}, buf)
			}, func(y *Transport, buf []byte) error {
				if _, n, err := y.Recv(ctx, 0, 1, buf); err != nil || n != len(buf) {
					return fmt.Errorf("received %d bytes of %d: %v", n, len(buf), err)
				}
				return nil
			})
		})
	}
}

// twoRanks runs b.N steps of a pair of default-sized transports: rank 0's
// in the benchmark's goroutine, rank 1's in another, each with a buffer
// of size bytes.
func twoRanks(b *testing.B, size int, rank0 func(x *Transport, buf []byte) error, rank1 func(y *Transport, buf []byte) error) {
	x, y := pair(b, DefaultSlots, DefaultSlotBytes)
	bx, by := make([]byte, size), make([]byte, size)
	done := make(chan error, 1)
	go func() {
		for range b.N {
			if err := rank1(y, by); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		if err := rank0(x, bx); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkComputeBesideWait is a compute loop (sums over 256 KiB) with
// one P, alone and beside a receive of this process that waits for the
// whole run: a sleeping wait must leave the P to the compute (a pipeline
// stage computing while it waits for its neighbour's next microbatch).
func BenchmarkComputeBesideWait(b *testing.B) {
	data := make([]float32, 64<<10)
	for i := range data {
		data[i] = float32(i % 7)
	}
	for _, waiting := range []bool{false, true} {
		b.Run(fmt.Sprintf("waiting=%v", waiting), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			x, y := pair(b, 8, 4096)
			ctx := context.Background()
			done := make(chan error, 1)
			if waiting {
				buf := make([]byte, 8)
				tk, err := y.Post(0, 1, buf)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					_, _, err := y.Wait(ctx, 0, 1, tk)
					done <- err
				}()
				time.Sleep(5 * time.Millisecond) // past its spin and yield phases
			}
			var sum float32
			b.ResetTimer()
			for range b.N {
				for _, v := range data {
					sum += v
				}
			}
			b.StopTimer()
			if waiting {
				if err := x.Send(ctx, 1, 1, [4]uint64{}, make([]byte, 8)); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			if sum < 0 {
				b.Fatal("negative sum")
			}
		})
	}
}

// TestOnlyLocalRanksGetRings: ranks 0 and 2 of a three-rank job share a
// machine (rank 1 is elsewhere): their segments hold two rings, not three,
// and frames flow between them; rank 1 is not reached through them, and
// lists of local ranks that cannot be right are refused.
func TestOnlyLocalRanksGetRings(t *testing.T) {
	const slots, slotB = 4, 1024
	var ts [3]*Transport
	var infos [3]Info
	for _, r := range []int{0, 2} {
		tr, info, err := New(Config{Rank: r, Size: 3, Local: []int{0, 2}, Slots: slots, SlotBytes: slotB, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		ts[r], infos[r] = tr, info
		if got, want := len(tr.own.mem), segmentBytes(2, slots, slotB); got != want {
			t.Fatalf("rank %d's segment has %d bytes, want %d (two rings)", r, got, want)
		}
	}
	if err := ts[0].Attach(2, infos[2]); err != nil {
		t.Fatal(err)
	}
	if err := ts[2].Attach(0, infos[0]); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Attach(1, infos[2]); err == nil {
		t.Fatal("attached rank 1, which is not local")
	}
	ctx := context.Background()
	in := make([]byte, 3000)
	tk, _ := ts[0].Post(2, 1, in)
	sent := make(chan error, 1)
	go func() { sent <- ts[2].Send(ctx, 0, 1, [4]uint64{2}, payload(9, 3000)) }() // three slots: more than one
	if meta, n, err := ts[0].Wait(ctx, 2, 1, tk); err != nil || n != 3000 || meta[0] != 2 || !bytes.Equal(in, payload(9, 3000)) {
		t.Fatalf("frame from rank 2: meta %v, %d bytes, %v", meta, n, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if ts[0].Has(1) || !ts[0].Has(2) {
		t.Fatal("Has: want rank 2 and not rank 1")
	}
	for _, local := range [][]int{{1, 2}, {2, 0}, {0, 3}} {
		if _, _, err := New(Config{Rank: 0, Size: 3, Local: local}); err == nil {
			t.Errorf("local ranks %v accepted for rank 0 of 3", local)
		}
	}
}

// TestSendRecv: SendRecv returns the frame a Post made before its Send
// would have received — taken straight from the ring when it is the next
// record and whole, through the mailbox when an earlier frame of the
// stream waits there, another stream's frame comes first, the frame spans
// several records or does not fit.
// sendRecvFrame is a frame rank 0 sends in a TestSendRecv case.
type sendRecvFrame struct {
	stream uint32
	n      int
}

// sendRecvTest is a TestSendRecv case.
type sendRecvTest struct {
	name string
	sent []sendRecvFrame // sent by rank 0 before rank 1 receives
	// drained: how many of them rank 1 moves into its mailbox first
	// (as another goroutine's wait would).
	drained int
	// preposted: rank 1 posted a receive on stream 1 before, which
	// the first frame fills.
	preposted bool
	bufLen    int
	want      int  // index into sent of the frame received
	direct    bool // taken from the ring: no receive posted
	tooBig    bool
}

// TestSendRecv: SendRecv, and Recv, take the next frame of the stream
// from the ring when nothing is in the mailboxes, else as Post and Wait
// would; either way every frame arrives once and in order.
func TestSendRecv(t *testing.T) {
	type frame = sendRecvFrame
	cases := []sendRecvTest{
		{name: "inline", sent: []frame{{1, 8}}, bufLen: 8, direct: true},
		{name: "empty", sent: []frame{{1, 0}}, bufLen: 0, direct: true},
		{name: "one record", sent: []frame{{1, 1000}}, bufLen: 1024, direct: true},
		{name: "frame in the mailbox", sent: []frame{{1, 8}}, drained: 1, bufLen: 8},
		{name: "earlier frame in the mailbox", sent: []frame{{1, 8}, {1, 16}}, drained: 1, bufLen: 16},
		{name: "receive posted before", sent: []frame{{1, 8}, {1, 8}}, preposted: true, bufLen: 8, want: 1},
		{name: "other stream first", sent: []frame{{2, 8}, {1, 8}}, bufLen: 8, want: 1},
		{name: "several records", sent: []frame{{1, 3000}}, bufLen: 3000},
		{name: "larger than the buffer", sent: []frame{{1, 100}}, bufLen: 10, tooBig: true},
	}
	for _, tc := range cases {
		for _, recvOnly := range []bool{false, true} {
			name := "SendRecv/" + tc.name
			if recvOnly {
				name = "Recv/" + tc.name
			}
			t.Run(name, func(t *testing.T) { sendRecvCase(t, tc, recvOnly) })
		}
	}
}

// sendRecvCase is one case of TestSendRecv: rank 0 sends the frames
// sent, rank 1 drains some into its mailbox and preposts a receive, then
// receives one frame by SendRecv (sending one back) or, recvOnly, by
// Recv, which must be frame want, taken from the ring (no receive
// posted) when direct; every other frame still arrives in order.
func sendRecvCase(t *testing.T, tc sendRecvTest, recvOnly bool) {
	a, b := pair(t, 4, 1024)
	ctx := context.Background()
	for i, f := range tc.sent {
		if err := a.Send(ctx, 1, f.stream, [4]uint64{uint64(i), 7}, payload(uint64(i), f.n)); err != nil {
			t.Fatal(err)
		}
	}
	var early []byte
	var earlyTk uint64
	if tc.preposted {
		early = make([]byte, tc.sent[0].n)
		earlyTk, _ = b.Post(0, 1, early)
	}
	p := b.peers[0]
	for range tc.drained {
		p.rxMu.Lock()
		if !p.drain() {
			t.Fatal("nothing to drain")
		}
		p.delivered.Add(1)
		p.noteUnclaimed()
		p.rxMu.Unlock()
	}
	buf := make([]byte, tc.bufLen)
	var meta [4]uint64
	var n int
	var err error
	if recvOnly {
		meta, n, err = b.Recv(ctx, 0, 1, buf)
	} else {
		meta, n, err = b.SendRecv(ctx, 0, 1, [4]uint64{99}, payload(99, 5), 0, buf)
	}
	if tc.tooBig {
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("got %v, want ErrFrameTooLarge", err)
		}
	} else {
		want := tc.sent[tc.want]
		if err != nil || meta != [4]uint64{uint64(tc.want), 7} || n != want.n || !bytes.Equal(buf[:n], payload(uint64(tc.want), want.n)) {
			t.Fatalf("got meta %v, %d bytes, %v; want frame %d", meta, n, err, tc.want)
		}
	}
	// Rank 0 got rank 1's frame, and every frame left is still
	// received in order.
	if !recvOnly {
		got := make([]byte, 5)
		tk, _ := a.Post(1, 1, got)
		if _, n, err := a.Wait(ctx, 1, 1, tk); err != nil || n != 5 || !bytes.Equal(got, payload(99, 5)) {
			t.Fatalf("rank 0 received %d bytes, %v", n, err)
		}
	}
	posted := uint64(0) // receives posted on stream 1 here
	for i, f := range tc.sent {
		if i == tc.want {
			continue
		}
		buf, tk := early, earlyTk
		if i > 0 || !tc.preposted {
			buf = make([]byte, f.n)
			tk, _ = b.Post(0, f.stream, buf)
		}
		if f.stream == 1 {
			posted++
		}
		if meta, n, err := b.Wait(ctx, 0, f.stream, tk); err != nil || meta[0] != uint64(i) || !bytes.Equal(buf[:n], payload(uint64(i), f.n)) {
			t.Fatalf("frame %d afterwards: meta %v, %d bytes, %v", i, meta, n, err)
		}
	}
	// Tickets count the receives posted on the stream: SendRecv
	// posted none when it took the frame from the ring.
	if tk, _ := b.Post(0, 1, nil); (tk == posted) != tc.direct {
		t.Errorf("taken from the ring: %v, want %v (next ticket %d, %d posted here)", tk == posted, tc.direct, tk, posted)
	}
}

// TestSendRecvBesideOtherStreams: two ranks exchange frames of many sizes
// with SendRecv while another goroutine on each side sends and receives
// on a second stream, so that records of the first stream are sometimes
// drained into the mailbox by the other goroutine: every frame arrives
// whole and in order.
func TestSendRecvBesideOtherStreams(t *testing.T) {
	a, b := pair(t, 4, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rounds = 2000
	sizes := []int{0, 8, 9, 64, 1024, 1025, 5000}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, tr := range []*Transport{a, b} {
		me, peer := tr.cfg.Rank, 1-tr.cfg.Rank
		wg.Add(2)
		go func() { // stream 1: SendRecv
			defer wg.Done()
			buf := make([]byte, 5000)
			for i := range rounds {
				n := sizes[i%len(sizes)]
				out := payload(uint64(me*rounds+i), n)
				meta, got, err := tr.SendRecv(ctx, peer, 1, [4]uint64{uint64(i)}, out, peer, buf)
				if err != nil || meta[0] != uint64(i) || got != n || !bytes.Equal(buf[:got], payload(uint64(peer*rounds+i), n)) {
					errs <- fmt.Errorf("rank %d round %d: meta %v, %d bytes, %v", me, i, meta, got, err)
					return
				}
			}
		}()
		go func() { // stream 2: Post, Send, Wait
			defer wg.Done()
			buf := make([]byte, 100)
			for i := range rounds / 4 {
				tk, err := tr.Post(peer, 2, buf)
				if err == nil {
					err = tr.Send(ctx, peer, 2, [4]uint64{uint64(i)}, payload(uint64(i), 100))
				}
				if err != nil {
					errs <- err
					return
				}
				if meta, n, err := tr.Wait(ctx, peer, 2, tk); err != nil || meta[0] != uint64(i) || n != 100 || !bytes.Equal(buf, payload(uint64(i), 100)) {
					errs <- fmt.Errorf("rank %d stream 2 frame %d: meta %v, %d bytes, %v", me, i, meta, n, err)
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
}

// BenchmarkExchange is one step of recursive doubling between two
// goroutines standing in for two ranks: each sends a frame to the other
// and receives the other's, through SendRecv or through Post, Send and
// Wait.
func BenchmarkExchange(b *testing.B) {
	for _, size := range []int{8, 64, 4 << 10} {
		for _, how := range []string{"sendrecv", "post-send-wait"} {
			b.Run(fmt.Sprintf("%d/%s", size, how), func(b *testing.B) {
				x, y := pair(b, DefaultSlots, DefaultSlotBytes)
				ctx := context.Background()
				step := func(tr *Transport, out, in []byte) error {
					peer := 1 - tr.cfg.Rank
					if how == "sendrecv" {
						_, _, err := tr.SendRecv(ctx, peer, 1, [4]uint64{}, out, peer, in)
						return err
					}
					tk, err := tr.Post(peer, 1, in)
					if err == nil {
						err = tr.Send(ctx, peer, 1, [4]uint64{}, out)
					}
					if err == nil {
						_, _, err = tr.Wait(ctx, peer, 1, tk)
					}
					return err
				}
				done := make(chan error, 1)
				go func() {
					out, in := make([]byte, size), make([]byte, size)
					for range b.N {
						if err := step(y, out, in); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				out, in := make([]byte, size), make([]byte, size)
				for range b.N {
					if err := step(x, out, in); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// TestSendRecvKeepsOneDeadline: a SendRecv that polls the ring for a
// while and then has to go through the mailbox (a frame of another
// stream was moved there meanwhile) still ends at the transport's
// timeout, counted from its first wait, not from the switch.
func TestSendRecvKeepsOneDeadline(t *testing.T) {
	a, b := pair(t, 4, 1024)
	const timeout, switchAfter = time.Second, 800 * time.Millisecond
	b.cfg.Timeout = timeout
	ctx := context.Background()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, _, err := b.SendRecv(ctx, 0, 1, [4]uint64{}, nil, 0, make([]byte, 8))
		done <- err
	}()
	time.Sleep(switchAfter)
	if err := a.Send(ctx, 1, 2, [4]uint64{}, payload(1, 8)); err != nil {
		t.Fatal(err)
	}
	// As another goroutine's wait would: stream 2's frame, which no
	// receive was posted for, goes into the mailbox.
	b.progress(nil)
	err := <-done
	if !strings.Contains(fmt.Sprint(err), "nothing moved within") {
		t.Fatalf("got %v, want the transport's timeout", err)
	}
	// Counted from the switch it would end at switchAfter + timeout.
	if d := time.Since(start); d > timeout+switchAfter/2 {
		t.Fatalf("SendRecv gave up after %v; its timeout is %v", d, timeout)
	}
}

// TestSlotBytesFor: up to 8 ranks on a machine keep the default 1 MiB
// slots (8 MiB rings); with more, the slots shrink so that a rank's
// segment stays within SegmentBudget (64 MiB at 64 local ranks, not 512),
// down to MinSlotBytes.
func TestSlotBytesFor(t *testing.T) {
	for _, c := range []struct{ local, slotKiB, segmentMiB int }{
		{2, 1024, 16}, {8, 1024, 64}, {9, 512, 36}, {16, 512, 64}, {64, 128, 64}, {128, 64, 64}, {256, 64, 128},
	} {
		b := SlotBytesFor(c.local, DefaultSlots)
		if seg := segmentBytes(c.local, DefaultSlots, b) >> 20; b>>10 != c.slotKiB || seg != c.segmentMiB {
			t.Errorf("%d local ranks: slots of %d KiB, segment %d MiB; want %d KiB, %d MiB", c.local, b>>10, seg, c.slotKiB, c.segmentMiB)
		}
	}
}
