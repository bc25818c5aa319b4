package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// torchStore starts torch's own TCPStore (Debian's python3-torch) on a
// free port in a Python process running script after it (store: s) and
// returns its address and the process's output lines; the test is
// skipped when this machine's /usr/bin/python3 has no torch.
func torchStore(t *testing.T, script string) (addr string, lines *bufio.Scanner) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("no torch in /usr/bin/python3 (Debian: apt-get install python3-torch): %v", err)
	}
	cmd := exec.Command("/usr/bin/python3", "-c", `
import sys, time
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(s.port, flush=True)
`+script+`
time.sleep(60)
`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines = bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatal("the TCPStore process printed no port")
	}
	return "127.0.0.1:" + strings.TrimSpace(lines.Text()), lines
}

// TestTorchClientAgainstTCPStore: against torch 1.13's own TCPStore, the
// client finds protocol version 1, reads a key torch set (waiting for
// it), sets one torch reads, answers Has, and after a Get that timed out
// (ErrMissing) goes on working on a fresh connection.
func TestTorchClientAgainstTCPStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python with torch; the full run covers it")
	}
	addr, lines := torchStore(t, `
s.set("job/from-torch", b"hello")
s.set("job/second", b"")
s.wait(["job/from-go"])
print("torch read", s.get("job/from-go").decode(), flush=True)
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := DialTorch(ctx, addr, "job/")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Version() != 1 {
		t.Errorf("protocol version %d against torch 1.13's store, want 1", c.Version())
	}
	if v, err := c.Get(ctx, "from-torch"); err != nil || string(v) != "hello" {
		t.Fatalf("Get: %q, %v", v, err)
	}
	if vals, err := c.GetMany(ctx, []string{"second", "from-torch"}); err != nil || len(vals) != 2 || len(vals[0]) != 0 || string(vals[1]) != "hello" {
		t.Fatalf("GetMany: %q, %v", vals, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Get(short, "never")
	cancelShort()
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("Get of a key never set: %v, want ErrMissing", err)
	}
	if ok, err := c.Has(ctx, "never"); ok || err != nil {
		t.Fatalf("Has(never) after a timed-out Get: %v, %v", ok, err)
	}
	if err := c.Set(ctx, "from-go", []byte("world")); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != "torch read world" {
		t.Fatalf("torch printed %q, want %q", lines.Text(), "torch read world")
	}
	if ok, err := c.Has(ctx, "from-go"); !ok || err != nil {
		t.Fatalf("Has(from-go): %v, %v", ok, err)
	}
}

// TestTorchClientVersion2: a store that does not answer PyTorch 1's key
// count (PyTorch 2 reads query 6 as WAIT) is spoken to as PyTorch 2's:
// VALIDATE with the magic number first on a new connection, then the
// queries numbered one higher. The store here is a stand-in written from
// PyTorch 2's TCPStoreBackend.hpp (no PyTorch 2 is installed here).
func TestTorchClientVersion2(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				b, _ := io.ReadAll(conn)
				got <- b
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialTorch(ctx, ln.Addr().String(), "p/")
	if err != nil {
		t.Fatal(err)
	}
	if c.Version() != 2 {
		t.Fatalf("version %d, want 2", c.Version())
	}
	if err := c.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	probe, b := <-got, <-got // (the two connections end in either order)
	if len(probe) > len(b) {
		probe, b = b, probe
	}
	if string(probe) != "\x06" {
		t.Errorf("the probe sent %q, want PyTorch 1's GETNUMKEYS (6)", probe)
	}
	want := []byte{0}
	want = binary.LittleEndian.AppendUint32(want, 0x3C85F7CE)
	want = append(want, 1) // SET
	want = binary.LittleEndian.AppendUint64(want, 4)
	want = append(want, "/p/k"...)
	want = binary.LittleEndian.AppendUint64(want, 1)
	want = append(want, 'v')
	if string(b) != string(want) {
		t.Errorf("sent %q, want %q", b, want)
	}
	t.Setenv("GORUN_TORCH_STORE", "3")
	if _, err := DialTorch(ctx, ln.Addr().String(), "p/"); err == nil || !strings.Contains(err.Error(), `GORUN_TORCH_STORE="3"`) {
		t.Errorf("GORUN_TORCH_STORE=3: %v", err)
	}
}
