package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// exchange sends msg from rank a to rank b on stream and checks that b
// receives it.
func exchange(t *testing.T, ts []*Transport, a, b int, stream uint32, msg []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	buf := make([]byte, len(msg))
	ticket, err := ts[b].Post(a, stream, buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := ts[a].Send(ctx, b, stream, [4]uint64{}, msg); err != nil {
		t.Fatalf("send %d→%d: %v", a, b, err)
	}
	if _, n, err := ts[b].Wait(ctx, a, stream, ticket); err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("receive %d→%d: %q, %v", a, b, buf[:n], err)
	}
}

func TestLazyConnectsOnFirstUse(t *testing.T) {
	ts := mesh(t, 4, Config{Token: []byte("tok"), Lazy: true}, nil)
	for r, tr := range ts {
		if n := tr.Linked(); n != 0 {
			t.Errorf("rank %d holds %d connections before any traffic", r, n)
		}
	}
	exchange(t, ts, 0, 1, 1, []byte("hello"))
	exchange(t, ts, 1, 0, 1, []byte("back")) // the same connection, both ways
	exchange(t, ts, 3, 2, 1, []byte("other pair"))
	for r, want := range []int{1, 1, 1, 1} {
		if n := ts[r].Linked(); n != want {
			t.Errorf("rank %d holds %d connections, want %d", r, n, want)
		}
	}
}

// TestLazySimultaneousDials: two ranks that first need each other at the
// same moment end with one connection between them, whichever dial
// arrives first, and every frame arrives once, in order.
func TestLazySimultaneousDials(t *testing.T) {
	for round := range 20 {
		ts := mesh(t, 2, Config{Token: []byte("tok"), Lazy: true}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		const frames = 5
		bufs := [2][frames][]byte{}
		tickets := [2][frames]uint64{}
		for r := range 2 {
			for i := range frames {
				bufs[r][i] = make([]byte, 8)
				var err error
				if tickets[r][i], err = ts[r].Post(1-r, 7, bufs[r][i]); err != nil {
					t.Fatal(err)
				}
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range frames {
					if err := ts[r].Send(ctx, 1-r, 7, [4]uint64{uint64(i)}, []byte{byte(r), byte(i)}); err != nil {
						errs[r] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		for r := range 2 {
			if errs[r] != nil {
				t.Fatalf("round %d, rank %d: %v", round, r, errs[r])
			}
			for i := range frames {
				meta, n, err := ts[r].Wait(ctx, 1-r, 7, tickets[r][i])
				if err != nil || meta[0] != uint64(i) || !bytes.Equal(bufs[r][i][:n], []byte{byte(1 - r), byte(i)}) {
					t.Fatalf("round %d: rank %d's frame %d: meta %v, %v, %v", round, r, i, meta, bufs[r][i][:n], err)
				}
			}
			if n := ts[r].Linked(); n != 1 {
				t.Fatalf("round %d: rank %d holds %d connections, want 1", round, r, n)
			}
		}
		cancel()
	}
}

// TestLazyClosedPeerIsLeft: a rank waiting for a peer it never connected
// to, which has closed meanwhile, fails at once naming it (its listener
// refuses the connection), instead of waiting for the deadline.
func TestLazyClosedPeerIsLeft(t *testing.T) {
	ts := mesh(t, 3, Config{Token: []byte("tok"), Lazy: true, Timeout: time.Minute}, nil)
	if err := ts[2].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ticket, err := ts[0].Post(2, 1, make([]byte, 8))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ts[0].Wait(context.Background(), 2, 1, ticket)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 2 {
		t.Fatalf("wait for the closed rank: %v, want a PeerError naming rank 2", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to notice", d)
	}
	if !ts[0].Gone(2) || ts[0].Left(2) == nil {
		t.Errorf("rank 2 is not gone (%v) or has not left (%v)", ts[0].Gone(2), ts[0].Left(2))
	}
	// The others are untouched.
	exchange(t, ts, 0, 1, 1, []byte("still here"))
}

// TestLazyAbortReachesConnectedPeers: an abort reaches the peers a rank
// is connected to; they fail with it.
func TestLazyAbortReachesConnectedPeers(t *testing.T) {
	ts := mesh(t, 3, Config{Token: []byte("tok"), Lazy: true}, nil)
	exchange(t, ts, 0, 1, 1, []byte("x"))
	ts[0].Abort(errors.New("out of memory"))
	ticket, _ := ts[1].Post(0, 2, make([]byte, 8))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := ts[1].Wait(ctx, 0, 2, ticket)
	var ae *AbortError
	if !errors.As(err, &ae) || ae.Rank != 0 || ae.Msg != "out of memory" {
		t.Fatalf("rank 1: %v, want rank 0's abort", err)
	}
}

// TestLazyTieBreak: when both ranks of a pair dial, the lower rank's dial
// is the one kept. Rank 0 is made to look as if it were dialing rank 1
// when rank 1's dial arrives: rank 0 turns it away, rank 1 waits, and
// rank 0's own dial then connects the pair. The other way round, rank
// 1's listener takes rank 0's dial although rank 1 is dialing too.
func TestLazyTieBreak(t *testing.T) {
	setLink := func(tr *Transport, peer int, st linkState) {
		tr.lazy.mu.Lock()
		tr.peers[peer].link = st
		tr.lazy.mu.Unlock()
	}
	link := func(tr *Transport, peer int) linkState {
		tr.lazy.mu.Lock()
		defer tr.lazy.mu.Unlock()
		return tr.peers[peer].link
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}

	ts := mesh(t, 2, Config{Token: []byte("tok"), Lazy: true}, nil)
	setLink(ts[0], 1, linkDialing) // rank 0's dial, in flight
	ts[1].Reach(0)
	waitFor("rank 1's dial is turned away", func() bool { return link(ts[1], 0) == linkIdle })
	if ts[0].Linked()+ts[1].Linked() != 0 {
		t.Fatal("the higher rank's dial was kept")
	}
	setLink(ts[0], 1, linkIdle)
	ts[0].Reach(1)
	waitFor("rank 0's dial connects", func() bool { return ts[0].Linked() == 1 && ts[1].Linked() == 1 })
	exchange(t, ts, 0, 1, 1, []byte("down"))
	exchange(t, ts, 1, 0, 1, []byte("up"))

	ts = mesh(t, 2, Config{Token: []byte("tok"), Lazy: true}, nil)
	setLink(ts[1], 0, linkDialing) // rank 1's dial, in flight
	ts[0].Reach(1)
	waitFor("rank 1 takes rank 0's dial", func() bool { return ts[0].Linked() == 1 && ts[1].Linked() == 1 })
	if st := link(ts[1], 0); st != linkTaken {
		t.Fatalf("rank 1's link to rank 0: %d, want taken", st)
	}
	exchange(t, ts, 1, 0, 1, []byte("up"))
}

// TestAbandonedDialIsAGoodbye: a rank that gives up a connection while
// its transport closes — its handshake cut short after the listener had
// sent its verdict and taken the connection — says goodbye on it
// (abandon), so the listener hears that the rank left, not that it died;
// a connection merely dropped there still counts as a death.
func TestAbandonedDialIsAGoodbye(t *testing.T) {
	for _, c := range []struct {
		name    string
		abandon bool
	}{{"abandoned", true}, {"dropped", false}} {
		t.Run(c.name, func(t *testing.T) {
			token := []byte("tok")
			ts := mesh(t, 2, Config{Token: token, Lazy: true}, nil)
			// Rank 0's dial, by hand: rank 1 takes it once the handshake
			// is through.
			conn, err := net.Dial("tcp", ts[0].peers[1].addr)
			if err != nil {
				t.Fatal(err)
			}
			tc := conn.(*net.TCPConn)
			if err := DialHandshake(tc, token, Identity{Purpose: PurposeData, From: 0, To: 1, Size: 2}, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ticket, err := ts[1].Post(0, 3, make([]byte, 8))
			if err != nil {
				t.Fatal(err)
			}
			if c.abandon {
				abandon(tc)
			}
			tc.Close()
			_, _, err = ts[1].Wait(ctx, 0, 3, ticket)
			var left *LeftError
			switch {
			case c.abandon && !errors.As(err, &left):
				t.Errorf("wait: %v, want rank 0's goodbye (a *LeftError)", err)
			case c.abandon && ts[1].Err() != nil:
				t.Errorf("the transport failed: %v, want it healthy", ts[1].Err())
			case !c.abandon && !errors.Is(err, ErrPeerDied):
				t.Errorf("wait: %v, want ErrPeerDied", err)
			}
		})
	}
}
