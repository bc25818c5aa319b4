package rendezvous

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/tcp"
)

func serve(t *testing.T, token string) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, []byte(token), 4)
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String()
}

func TestSetGetWaits(t *testing.T) {
	_, addr := serve(t, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := Dial(ctx, addr, []byte("tok"), 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Dial(ctx, addr, []byte("tok"), 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	go func() {
		time.Sleep(50 * time.Millisecond)
		a.Set(ctx, "k", []byte("v"))
	}()
	v, err := b.Get(ctx, "k") // blocks until a sets it
	if err != nil || string(v) != "v" {
		t.Fatalf("got %q, %v", v, err)
	}
	if ok, err := b.Has(ctx, "missing"); ok || err != nil {
		t.Fatalf("Has(missing) = %v, %v", ok, err)
	}
}

func TestGetTimesOut(t *testing.T) {
	_, addr := serve(t, "")
	c, err := Dial(context.Background(), addr, nil, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "never"); !errors.Is(err, ErrMissing) {
		t.Fatalf("got %v, want ErrMissing", err)
	}
}

func TestWrongTokenRefused(t *testing.T) {
	_, addr := serve(t, "right")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := Dial(ctx, addr, []byte("wrong"), 0, 4); err == nil {
		t.Fatal("a client with the wrong token connected")
	}
}

// TestOtherWorldSizeRefused: a rank announcing a job of another size is
// turned away at once (retrying cannot help), and the store records it
// for the join's report.
func TestOtherWorldSizeRefused(t *testing.T) {
	_, addr := serve(t, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, addr, []byte("tok"), 1, 3)
	if !errors.Is(err, tcp.ErrIdentity) || ctx.Err() != nil {
		t.Fatalf("Dial as rank 1 of 3 into a job of 4: %v (context: %v); want ErrIdentity at once", err, ctx.Err())
	}
	c, err := Dial(ctx, addr, []byte("tok"), 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Get(ctx, RefusedKey); err != nil || string(v) != "1:3" {
		t.Fatalf("RefusedKey = %q, %v; want \"1:3\"", v, err)
	}
}

// TestSameRankTwice: a second connection as a rank that has a live one is
// turned away and listed under DuplicatesKey; once the first is closed,
// the rank can join again.
func TestSameRankTwice(t *testing.T) {
	_, addr := serve(t, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, err := Dial(ctx, addr, []byte("tok"), 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, addr, []byte("tok"), 1, 4); !errors.Is(err, tcp.ErrTaken) || ctx.Err() != nil {
		t.Fatalf("a second rank 1: %v (context: %v); want ErrTaken at once", err, ctx.Err())
	}
	other, err := Dial(ctx, addr, []byte("tok"), 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if v, err := other.Get(ctx, DuplicatesKey); err != nil || string(v) != "1" {
		t.Fatalf("DuplicatesKey = %q, %v; want \"1\"", v, err)
	}
	first.Close()
	// The server sees the first connection end when its read fails.
	for {
		again, err := Dial(ctx, addr, []byte("tok"), 1, 4)
		if err == nil {
			again.Close()
			break
		}
		if !errors.Is(err, tcp.ErrTaken) {
			t.Fatalf("rank 1 after its first connection closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDialRetriesUntilServerStarts(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	go func() {
		time.Sleep(200 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return
		}
		s := Serve(ln, nil, 2)
		time.Sleep(2 * time.Second)
		s.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, nil, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestDialNotesTheWait: a dial still trying after noteAfter says so once,
// with the last attempt's error (none while its first attempt waits for
// a handshake from a socket nobody serves yet), and goes on until the
// store starts; one that connects at once says nothing.
func TestDialNotesTheWait(t *testing.T) {
	type noted struct {
		waited time.Duration
		last   error
	}
	dial := func(addr string, rank int, noteAfter time.Duration) []noted {
		t.Helper()
		var mu sync.Mutex
		var notes []noted
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c, err := DialNoting(ctx, addr, nil, rank, 2, noteAfter, func(waited time.Duration, last error) {
			mu.Lock()
			defer mu.Unlock()
			notes = append(notes, noted{waited, last})
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		mu.Lock()
		defer mu.Unlock()
		return notes
	}
	// Nothing listens for 600 ms.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	go func() {
		time.Sleep(600 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return
		}
		s := Serve(ln, nil, 2)
		time.Sleep(3 * time.Second)
		s.Close()
	}()
	if notes := dial(addr, 1, 100*time.Millisecond); len(notes) != 1 || notes[0].waited != 100*time.Millisecond || notes[0].last == nil || !strings.Contains(notes[0].last.Error(), "connection refused") {
		t.Fatalf("notes %v, want one after 100ms saying the connection was refused", notes)
	}
	// As the other rank: the store may not yet have seen rank 1's
	// connection close, and would turn a second rank 1 away (CI saw it).
	if notes := dial(addr, 0, time.Second); len(notes) != 0 {
		t.Errorf("a dial that connected at once noted %v", notes)
	}
	// A socket that listens, served only after 600 ms.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(600 * time.Millisecond)
		s := Serve(ln, nil, 2)
		time.Sleep(3 * time.Second)
		s.Close()
	}()
	if notes := dial(ln.Addr().String(), 1, 100*time.Millisecond); len(notes) != 1 || notes[0].last != nil {
		t.Errorf("notes %v, want one without an error (connected, no handshake yet)", notes)
	}
}

func TestGetManyWaitsForEveryKey(t *testing.T) {
	_, addr := serve(t, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	setter, err := Dial(ctx, addr, []byte("tok"), 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer setter.Close()
	getter, err := Dial(ctx, addr, []byte("tok"), 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer getter.Close()
	keys := []string{"addr/0", "addr/1", "empty", "addr/2"}
	want := map[string]string{"addr/0": "a:1", "addr/1": "bb:22", "empty": "", "addr/2": "ccc:333"}
	// Set out of order and one at a time: the answer waits for the last.
	go func() {
		for _, k := range []string{"addr/2", "empty", "addr/0", "addr/1"} {
			time.Sleep(10 * time.Millisecond)
			setter.Set(ctx, k, []byte(want[k]))
		}
	}()
	vals, err := getter.GetMany(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != len(keys) {
		t.Fatalf("%d values for %d keys", len(vals), len(keys))
	}
	for i, k := range keys {
		if string(vals[i]) != want[k] {
			t.Errorf("%s = %q, want %q", k, vals[i], want[k])
		}
	}

	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if _, err := getter.GetMany(short, []string{"addr/0", "never"}); !errors.Is(err, ErrMissing) {
		t.Fatalf("GetMany with a key never set: %v, want ErrMissing", err)
	}
	// The connection still serves after a timed-out GetMany.
	if vals, err := getter.GetMany(ctx, []string{"addr/1"}); err != nil || string(vals[0]) != "bb:22" {
		t.Fatalf("after the time-out: %q, %v", vals, err)
	}
}

func TestDecodeValuesRejectsTruncated(t *testing.T) {
	good := []byte{2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0}
	if v, err := decodeValues(good, 2); err != nil || string(v[0]) != "hi" || len(v[1]) != 0 {
		t.Fatalf("decodeValues(good) = %q, %v", v, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		n    int
	}{
		{"fewer values", good, 3},
		{"more bytes", good, 1},
		{"length past the end", []byte{9, 0, 0, 0, 'x'}, 1},
		{"short length", []byte{1, 0}, 1},
	} {
		if _, err := decodeValues(tc.b, tc.n); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := decodeKeys([]byte{5, 0, 'a'}); err == nil {
		t.Error("decodeKeys of a truncated list: no error")
	}
}

// failingListener fails its first n Accepts the way a process out of
// descriptors does.
type failingListener struct {
	net.Listener
	n int
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestServerOutlivesAcceptErrors: a failed accept (EMFILE) must not stop
// the store from hearing the ranks still to come; after Close it stops.
func TestServerOutlivesAcceptErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(&failingListener{Listener: ln, n: 3}, []byte("tok"), 4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, ln.Addr().String(), []byte("tok"), 3, 4)
	if err != nil {
		t.Fatalf("after failed accepts: %v", err)
	}
	defer c.Close()
	if ok, err := c.Has(ctx, ReachedKey(3)); !ok || err != nil {
		t.Fatalf("Has(ReachedKey(3)) = %v, %v: want the store to record the rank that reached it", ok, err)
	}
	if ok, err := c.Has(ctx, ReachedKey(2)); ok || err != nil {
		t.Fatalf("Has(ReachedKey(2)) = %v, %v for a rank that never came", ok, err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the accept loop")
	}
}
