package rendezvous

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
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
