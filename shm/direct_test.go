package shm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// directPair is a pair whose frames of MinDirectBytes or more go as
// direct records, with a patience long enough that a busy test machine
// does not make a sender take its record back (TestDirectWithdrawn sets
// its own).
func directPair(t testing.TB) (*Transport, *Transport) {
	t.Helper()
	a, b := pairOf(t, Config{Slots: 16, SlotBytes: 64 << 10, Timeout: 10 * time.Second, Spin: 20 * time.Microsecond, DirectBytes: MinDirectBytes})
	a.patience, b.patience = 10*time.Second, 10*time.Second
	return a, b
}

// sendCounting sends payload from tr to rank and returns how far the
// frame moved tr's ring: recordBytes(0) for a direct record alone.
func sendCounting(ctx context.Context, tr *Transport, rank int, stream uint32, meta [4]uint64, payload []byte) (uint64, error) {
	p := tr.peers[rank]
	p.sendMu.Lock()
	before := p.head
	p.sendMu.Unlock()
	err := tr.SendDirect(ctx, rank, stream, meta, payload)
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return p.head - before, err
}

// addBytes is a Combine: dst[i] += src[i] (mod 256).
func addBytes(dst, src []byte) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// TestDirectFrames: frames of the direct size and more — posted before
// they come, arriving before their receive (drained while the receiver
// waits on another stream), folded into a combining receive over several
// scratch pieces, and too large for their receive — land whole with
// their metadata, each having moved the ring by one direct record.
func TestDirectFrames(t *testing.T) {
	sizes := []int{MinDirectBytes, MinDirectBytes + 13, 3<<20 + 5}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("posted/%d", n), func(t *testing.T) {
			a, b := directPair(t)
			ctx := context.Background()
			in := make([]byte, n)
			tk, _ := b.Post(0, 1, in)
			done := waitAsync(ctx, b, 0, 1, tk)
			moved, err := sendCounting(ctx, a, 1, 1, [4]uint64{7, 8}, payload(1, n))
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.n != n || r.meta != [4]uint64{7, 8} || !bytes.Equal(in, payload(1, n)) {
				t.Fatalf("meta %v, %d bytes, %v; data equal: %v", r.meta, r.n, r.err, bytes.Equal(in, payload(1, n)))
			}
			if moved != uint64(recordBytes(0)) {
				t.Fatalf("the frame moved the ring by %d bytes, want one direct record (%d)", moved, recordBytes(0))
			}
		})
		t.Run(fmt.Sprintf("early/%d", n), func(t *testing.T) {
			a, b := directPair(t)
			ctx := context.Background()
			tk2, _ := b.Post(0, 2, make([]byte, 1))
			other := waitAsync(ctx, b, 0, 2, tk2) // drains the direct record of stream 1 meanwhile
			moved, err := sendCounting(ctx, a, 1, 1, [4]uint64{3}, payload(2, n))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Send(ctx, 1, 2, [4]uint64{}, []byte{1}); err != nil {
				t.Fatal(err)
			}
			if r := <-other; r.err != nil {
				t.Fatal(r.err)
			}
			in := make([]byte, n+100)
			tk, _ := b.Post(0, 1, in)
			meta, got, err := b.Wait(ctx, 0, 1, tk)
			if err != nil || got != n || meta[0] != 3 || !bytes.Equal(in[:n], payload(2, n)) {
				t.Fatalf("meta %v, %d bytes, %v", meta, got, err)
			}
			if moved != uint64(recordBytes(0)) {
				t.Fatalf("the frame moved the ring by %d bytes, want one direct record (%d)", moved, recordBytes(0))
			}
		})
		t.Run(fmt.Sprintf("combined/%d", n), func(t *testing.T) {
			a, b := directPair(t)
			ctx := context.Background()
			acc := payload(3, n)
			tk, _ := b.PostCombine(0, 1, acc, addBytes)
			done := waitAsync(ctx, b, 0, 1, tk)
			if _, err := sendCounting(ctx, a, 1, 1, [4]uint64{}, payload(4, n)); err != nil {
				t.Fatal(err)
			}
			if r := <-done; r.err != nil || r.n != n {
				t.Fatalf("%d bytes, %v", r.n, r.err)
			}
			want := payload(3, n)
			addBytes(want, payload(4, n))
			if !bytes.Equal(acc, want) {
				t.Fatal("the combined receive differs from the sum")
			}
		})
	}
	t.Run("larger than the receive", func(t *testing.T) {
		a, b := directPair(t)
		ctx := context.Background()
		tk, _ := b.Post(0, 1, make([]byte, 100))
		done := waitAsync(ctx, b, 0, 1, tk)
		if _, err := sendCounting(ctx, a, 1, 1, [4]uint64{}, payload(5, MinDirectBytes)); err != nil {
			t.Fatalf("the sender got %v; the receiver's side reports the size", err)
		}
		if r := <-done; !errors.Is(r.err, ErrFrameTooLarge) || !strings.Contains(r.err.Error(), fmt.Sprintf("%d bytes arrived for a 100-byte receive", MinDirectBytes)) {
			t.Fatalf("got %v, want ErrFrameTooLarge naming both sizes", r.err)
		}
		checkNextFrame(t, a, b)
	})
}

// TestDirectExchange: two ranks sending each other large frames at once
// (as all-to-all does; each sender waits for its record to be read while
// its own receive waits to be read into) both get the other's frame,
// each through one direct record; a plain Send of as large a frame goes
// through the ring.
func TestDirectExchange(t *testing.T) {
	a, b := directPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 1<<20 + 8
	onBoth(t, a, b, func(r int, tr *Transport) error {
		in := make([]byte, n)
		tk, _ := tr.Post(1-r, 4, in)
		moved, err := sendCounting(ctx, tr, 1-r, 4, [4]uint64{}, payload(uint64(10+r), n))
		if err == nil && moved != uint64(recordBytes(0)) {
			err = fmt.Errorf("rank %d's frame moved the ring by %d bytes, want one direct record", r, moved)
		}
		if err == nil {
			var got int
			if _, got, err = tr.Wait(ctx, 1-r, 4, tk); err == nil && (got != n || !bytes.Equal(in, payload(uint64(11-r), n))) {
				err = fmt.Errorf("rank %d received %d bytes, or wrong ones", r, got)
			}
		}
		return err
	})
	in := make([]byte, n)
	tk, _ := b.Post(0, 5, in)
	done := waitAsync(ctx, b, 0, 5, tk)
	before := a.peers[1].head
	if err := a.Send(ctx, 1, 5, [4]uint64{}, payload(12, n)); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || !bytes.Equal(in, payload(12, n)) {
		t.Fatalf("plain send: %v", r.err)
	}
	if moved := a.peers[1].head - before; moved < n {
		t.Fatalf("a plain Send moved the ring by %d bytes: it sent a direct record", moved)
	}
}

// TestDirectWithdrawn: a receiver that does not look at its ring within
// the sender's patience does not hold the sender up: the sender takes its
// record back and copies the frame through the ring behind it, and the
// receiver, when it comes, passes over the withdrawn record and gets the
// frame.
func TestDirectWithdrawn(t *testing.T) {
	a, b := directPair(t)
	a.patience = time.Millisecond
	ctx := context.Background()
	const n = MinDirectBytes + 13
	out := payload(6, n)
	moved, err := sendCounting(ctx, a, 1, 1, [4]uint64{6}, out)
	if err != nil {
		t.Fatal(err)
	}
	out[0] ^= 0xff // the sender's buffer is its own again: a read of it now would see this
	if moved <= uint64(recordBytes(0))+n {
		t.Fatalf("the frame moved the ring by %d bytes: want the withdrawn record and the frame's records", moved)
	}
	in := make([]byte, n)
	tk, _ := b.Post(0, 1, in)
	if meta, got, err := b.Wait(ctx, 0, 1, tk); err != nil || got != n || meta[0] != 6 || !bytes.Equal(in, payload(6, n)) {
		t.Fatalf("meta %v, %d bytes, %v", meta, got, err)
	}
	if u := b.peers[0].boxes.Unclaimed(); u != 0 {
		t.Fatalf("%d frames wait unclaimed: the withdrawn record was delivered too", u)
	}
	if !a.peers[1].direct {
		t.Fatal("a withdrawn record stopped direct frames to the peer")
	}
	checkNextFrame(t, a, b)
}

// TestDirectRefused: where the receiver may not read the sender's memory
// (process_vm_readv refused, as under a ptrace policy or a seccomp
// filter), the frame comes through the ring instead, and so do later
// frames to that peer, with no direct record tried again.
func TestDirectRefused(t *testing.T) {
	for _, refusal := range []error{unix.EPERM, unix.EACCES, unix.ENOSYS} {
		t.Run(refusal.Error(), func(t *testing.T) {
			a, b := directPair(t)
			tries := 0
			b.peers[0].src.readv = func(int, []unix.Iovec, []unix.RemoteIovec, uint) (int, error) {
				tries++
				return 0, refusal
			}
			ctx := context.Background()
			const n = MinDirectBytes
			for i := range 2 {
				in := make([]byte, n)
				tk, _ := b.Post(0, 1, in)
				done := waitAsync(ctx, b, 0, 1, tk)
				moved, err := sendCounting(ctx, a, 1, 1, [4]uint64{uint64(i)}, payload(uint64(i), n))
				if err != nil {
					t.Fatal(err)
				}
				if r := <-done; r.err != nil || r.n != n || r.meta[0] != uint64(i) || !bytes.Equal(in, payload(uint64(i), n)) {
					t.Fatalf("frame %d: meta %v, %d bytes, %v", i, r.meta, r.n, r.err)
				}
				if moved <= uint64(recordBytes(0)) {
					t.Fatalf("frame %d moved the ring by %d bytes: it did not go through the ring", i, moved)
				}
				if a.peers[1].direct {
					t.Fatalf("after frame %d the sender still sends direct records to a peer that refused one", i)
				}
			}
			if tries != 1 {
				t.Fatalf("the receiver tried to read the sender's memory %d times, want once", tries)
			}
		})
	}
}

// TestDirectReadFails: a read that fails otherwise (the sender's memory
// gone) fails both ends of that frame — the receive with the read's
// error, the send naming the peer — and the next frame goes through.
func TestDirectReadFails(t *testing.T) {
	a, b := directPair(t)
	b.peers[0].readable = readYes // past the first read's probe
	b.peers[0].src.readv = func(int, []unix.Iovec, []unix.RemoteIovec, uint) (int, error) { return 0, unix.EFAULT }
	ctx := context.Background()
	tk, _ := b.Post(0, 1, make([]byte, MinDirectBytes))
	done := waitAsync(ctx, b, 0, 1, tk)
	_, err := sendCounting(ctx, a, 1, 1, [4]uint64{}, payload(7, MinDirectBytes))
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 1 || !strings.Contains(err.Error(), "could not read a frame") {
		t.Fatalf("the sender got %v, want a PeerError naming rank 1", err)
	}
	if r := <-done; r.err == nil || !strings.Contains(r.err.Error(), "process_vm_readv") || !errors.Is(r.err, unix.EFAULT) {
		t.Fatalf("the receiver got %v, want the read's error", r.err)
	}
	b.peers[0].src.readv = unix.ProcessVMReadv
	checkNextFrame(t, a, b)
}

// TestDirectSteadyStateAllocatesNothing: direct frames, copied and
// combined, allocate nothing once warm.
func TestDirectSteadyStateAllocatesNothing(t *testing.T) {
	a, b := directPair(t)
	ctx := context.Background()
	const n = MinDirectBytes + 8
	out, in := payload(1, n), make([]byte, n)
	// One goroutine waits for every frame, handed its tickets over
	// channels made once, so the test itself allocates nothing per step.
	tickets, results := make(chan uint64), make(chan error)
	go func() {
		for tk := range tickets {
			_, _, err := b.Wait(ctx, 0, 3, tk)
			results <- err
		}
	}()
	defer close(tickets)
	for _, combine := range []func(dst, src []byte){nil, addBytes} {
		step := func() {
			tk, err := b.PostCombine(0, 3, in, combine)
			if err != nil {
				t.Fatal(err)
			}
			tickets <- tk
			if err := a.SendDirect(ctx, 1, 3, [4]uint64{1}, out); err != nil {
				t.Fatal(err)
			}
			if err := <-results; err != nil {
				t.Fatal(err)
			}
		}
		step()
		if n := testing.AllocsPerRun(50, step); n != 0 {
			t.Fatalf("combine %v: %v allocations per post/send/wait", combine != nil, n)
		}
	}
}

// TestDirectAcrossProcesses: two real processes, each sending the other
// a direct frame: each reads the other's memory, and neither frame went
// through the ring. (The other tests run both ranks in one process.)
func TestDirectAcrossProcesses(t *testing.T) {
	const n = 2<<20 + 24
	if os.Getenv("SHM_DIRECT_CHILD") != "" {
		if err := directChild(n); err != nil {
			fmt.Println("child:", err)
			os.Exit(1)
		}
		fmt.Println("ok")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDirectAcrossProcesses$")
	cmd.Env = append(os.Environ(), "SHM_DIRECT_CHILD=1")
	cmd.Stderr = os.Stderr
	toChild, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fromChild, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(fromChild)
	tr, info, err := New(Config{Rank: 0, Size: 2, Timeout: 20 * time.Second, DirectBytes: MinDirectBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.patience = 10 * time.Second
	var child Info
	if !lines.Scan() {
		t.Fatal("the child printed nothing")
	}
	if _, err := fmt.Sscan(lines.Text(), &child.PID, &child.FD); err != nil {
		t.Fatalf("child's handshake %q: %v", lines.Text(), err)
	}
	if err := tr.Attach(1, child); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(toChild, info.PID, info.FD)
	if !lines.Scan() || lines.Text() != "attached" {
		t.Fatalf("child: %q", lines.Text())
	}
	tr.Sealed()
	ctx := context.Background()
	in := make([]byte, n)
	tk, _ := tr.Post(1, 2, in)
	moved, err := sendCounting(ctx, tr, 1, 1, [4]uint64{1}, payload(1, n))
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := tr.Wait(ctx, 1, 2, tk); err != nil || got != n || !bytes.Equal(in, payload(2, n)) {
		t.Fatalf("from the child: %d bytes, %v", got, err)
	}
	if moved != uint64(recordBytes(0)) {
		t.Fatalf("the frame to the child moved the ring by %d bytes, want one direct record", moved)
	}
	var rest strings.Builder
	for lines.Scan() {
		rest.WriteString(lines.Text())
	}
	if err := cmd.Wait(); err != nil || rest.String() != "ok" {
		t.Fatalf("child: %q, %v", rest.String(), err)
	}
}

// directChild is rank 1 of TestDirectAcrossProcesses.
func directChild(n int) error {
	tr, info, err := New(Config{Rank: 1, Size: 2, Timeout: 20 * time.Second, DirectBytes: MinDirectBytes})
	if err != nil {
		return err
	}
	defer tr.Close()
	tr.patience = 10 * time.Second
	fmt.Println(info.PID, info.FD)
	var parent Info
	if _, err := fmt.Scan(&parent.PID, &parent.FD); err != nil {
		return err
	}
	if err := tr.Attach(0, parent); err != nil {
		return err
	}
	tr.Sealed()
	fmt.Println("attached")
	ctx := context.Background()
	in := make([]byte, n)
	tk, _ := tr.Post(0, 1, in)
	moved, err := sendCounting(ctx, tr, 0, 2, [4]uint64{2}, payload(2, n))
	if err != nil {
		return err
	}
	if _, got, err := tr.Wait(ctx, 0, 1, tk); err != nil || got != n || !bytes.Equal(in, payload(1, n)) {
		return fmt.Errorf("from the parent: %d bytes, %v", got, err)
	}
	if moved != uint64(recordBytes(0)) {
		return fmt.Errorf("the frame to the parent moved the ring by %d bytes, want one direct record", moved)
	}
	return nil
}

type waited struct {
	meta [4]uint64
	n    int
	err  error
}

// waitAsync waits for ticket on a goroutine: a direct frame's sender
// returns only once the receiver has read it.
func waitAsync(ctx context.Context, tr *Transport, rank int, stream uint32, ticket uint64) <-chan waited {
	done := make(chan waited, 1)
	go func() {
		meta, n, err := tr.Wait(ctx, rank, stream, ticket)
		done <- waited{meta, n, err}
	}()
	return done
}

// checkNextFrame: a small frame from a to b still arrives.
func checkNextFrame(t *testing.T, a, b *Transport) {
	t.Helper()
	ctx := context.Background()
	next := make([]byte, 10)
	tk, _ := b.Post(0, 9, next)
	if err := a.Send(ctx, 1, 9, [4]uint64{9}, payload(9, 10)); err != nil {
		t.Fatal(err)
	}
	if meta, n, err := b.Wait(ctx, 0, 9, tk); err != nil || n != 10 || meta[0] != 9 || !bytes.Equal(next, payload(9, 10)) {
		t.Fatalf("the next frame: meta %v, %d bytes, %v", meta, n, err)
	}
}
