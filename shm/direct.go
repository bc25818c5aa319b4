package shm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"github.com/gorun/gorun/mailbox"
	"golang.org/x/sys/unix"
)

// Frames of Config.DirectBytes or more that SendDirect sends are copied
// once instead of twice (into the ring, out of it): the sender publishes
// a direct record — the frame's mailbox header with a fragment length of
// zero (a frame with bytes never has such a fragment otherwise) and, in
// the inline word, the address of the payload in its own memory — and
// the receiver copies the payload from there straight into the posted
// receive with process_vm_readv, Linux's cross-memory attach, which Open
// MPI's shared memory transport uses for the same. The inline word then
// settles the record's fate, by compare-and-swap on the address, so that
// exactly one side decides:
//
//   - the receiver claims it (directClaimed), reads, stores the outcome
//     (directCopied, directRefused when this machine does not let it read
//     another process's memory, directFailed) and releases the record;
//     the sender waits for the release and returns (or, refused, sends
//     the frame through the ring and sends no direct record to that peer
//     again);
//   - or the sender, having waited directPatience without a claim, takes
//     it back (directWithdrawn) and sends the frame through the ring right
//     behind it; the receiver passes over a withdrawn record. A receiver
//     busy elsewhere — waiting for another transport's data in a
//     hierarchical collective, say — therefore never holds a sender up
//     longer than that, as a ring with room would not.
//
// SendDirect returns only once its payload was read or will not be: the
// receiver reads the sender's live memory. The payload must not move
// meanwhile. Go's collector does not move heap objects, but a goroutine's
// stack moves when it grows, and with it any buffer placed there: the
// payload is held in the peer (peer.lent) while it is lent, which makes
// every buffer passed to SendDirect escape to the heap, by the
// compiler's own escape analysis.
const (
	// DefaultDirectBytes: all-to-alls between two ranks with blocks of
	// 16 and 32 KiB ran faster with direct frames than through the ring
	// (8 KiB ones slower), and larger blocks faster still
	// (bench/results/current/direct-threshold-2026-11-27.txt and
	// direct-*-2026-11-27.txt; BENCHMARKS.md). The ring's collectives
	// other than two-rank all-to-alls send direct frames from 64 KiB
	// only (ring's directBytes).
	DefaultDirectBytes = 16 << 10
	// MinDirectBytes bounds DirectBytes from below: the smallest size
	// measured to gain (a read's system call and hand-over cost a few µs,
	// which smaller frames would not win back).
	MinDirectBytes = 16 << 10
	// directPatience is shorter than the waits' spin and yield phases,
	// so a sender waiting for a claim never sleeps.
	directPatience = 150 * time.Microsecond
)

// States of a direct record's inline word after the address.
const (
	directClaimed = iota + 1
	directCopied
	directRefused
	directFailed
	directWithdrawn
	directStates // addresses are larger: no user memory lies in the first page
)

// isDirect reports whether h heads a direct record.
func isDirect(h *mailbox.Header) bool { return h.N == 0 && h.Total != 0 }

// sendDirect sends payload to p as a direct record, unless p cannot read
// this process's memory or does not claim the record in time: then
// nothing is sent (sent false) and the caller sends the frame through the
// ring. The caller holds sendMu; w bounds the wait for room in the ring.
func (t *Transport) sendDirect(ctx context.Context, p *peer, stream uint32, meta [4]uint64, payload []byte, w *waiter) (sent bool, err error) {
	r := p.out
	var head, rec uint64
	var paged bool
	for {
		var wrap bool
		if head, rec, wrap, paged, err = t.reserve(ctx, p, 0, w); err != nil {
			return false, err
		}
		p.dirty.header(head & (r.size - 1))
		if !wrap {
			break
		}
		r.header(head)[0] = wrapMark
		p.publish(head, rec, false)
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(payload))))
	h := mailbox.Header{Stream: stream, Flags: mailbox.First | mailbox.Last, Total: uint64(len(payload)), Meta: meta}
	h.Put(r.header(head))
	state := r.inline(head)
	state.Store(addr)
	p.lent = payload
	defer func() { p.lent = nil }()
	p.publish(head, rec, paged)

	end := head + rec
	var dw waiter
	wait := func(ready func() bool) error {
		if dw.t == nil {
			dw = t.waiter(ctx, p.rank, "waiting for it to read a frame from this rank's memory")
		}
		t.progress(nil)
		dw.gone.Drained() // a look that found the frame not yet read
		return dw.pause(ready)
	}
	giveUp := time.Now().Add(t.patience)
	for state.Load() == addr {
		if time.Now().After(giveUp) && state.CompareAndSwap(addr, directWithdrawn) {
			return false, nil
		}
		if err := wait(func() bool { return state.Load() != addr || t.pending() }); err != nil {
			if state.CompareAndSwap(addr, directWithdrawn) {
				return false, err
			}
			break // claimed meanwhile: the peer reads the payload, which must stay until it is done
		}
	}
	for r.tail.Load() < end {
		if err := wait(func() bool { return r.tail.Load() >= end || t.pending() }); err != nil {
			// The peer failed, or the call was cancelled or ran out of
			// time, while the peer read: the frame is lost with the call
			// (the peer only reads this memory; nothing here is written).
			return true, err
		}
	}
	switch state.Load() {
	case directCopied:
		return true, nil
	case directRefused:
		p.direct = false
		return false, nil
	default:
		return true, &PeerError{Rank: p.rank, Err: errors.New("it could not read a frame from this rank's memory (process_vm_readv)")}
	}
}

// drainDirect delivers the frame of the direct record at tail, whose
// header is h (paged: the record's flag, see pagedFlag), unless its
// sender took it back, and releases the record. The caller holds p.rxMu.
func (p *peer) drainDirect(tail uint64, h *mailbox.Header, paged bool) {
	state := p.in.inline(tail)
	if addr := state.Load(); addr >= directStates && state.CompareAndSwap(addr, directClaimed) {
		p.src.addr, p.src.size = uintptr(addr), int64(h.Total)
		if p.readable == readUnknown {
			switch _, err := p.src.ReadAt(p.probe[:], 0); {
			case err == nil:
				p.readable = readYes
			case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS):
				p.readable = readNo
			}
		}
		outcome := uint64(directCopied)
		if p.readable == readNo {
			outcome = directRefused
		} else if err := p.boxes.DeliverFrom(h, &p.src); err != nil {
			outcome = directFailed
		}
		p.noteUnclaimed()
		state.Store(outcome)
	}
	publish(p.in.tail, tail+recordLen(tail, 0, paged), p.plain)
}

// Whether this rank may read a peer's memory, as first tried.
const (
	readUnknown = iota
	readYes
	readNo
)

// remoteBytes reads a direct record's payload out of its sender's
// memory: the io.ReaderAt mailbox.DeliverFrom reads from. Its vectors
// live in the peer, so a read allocates nothing.
type remoteBytes struct {
	pid    int
	addr   uintptr
	size   int64
	local  [1]unix.Iovec
	remote [1]unix.RemoteIovec
	readv  vmReader
}

// vmReader is unix.ProcessVMReadv's signature (tests stand in for it).
type vmReader func(pid int, local []unix.Iovec, remote []unix.RemoteIovec, flags uint) (int, error)

func (b *remoteBytes) ReadAt(dst []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(dst)) > b.size {
		return 0, fmt.Errorf("read of %d bytes at %d outside the sender's %d", len(dst), off, b.size)
	}
	done := 0
	for done < len(dst) {
		b.local[0].Base = &dst[done]
		b.local[0].SetLen(len(dst) - done)
		b.remote[0] = unix.RemoteIovec{Base: b.addr + uintptr(off) + uintptr(done), Len: len(dst) - done}
		n, err := b.readv(b.pid, b.local[:], b.remote[:], 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return done, fmt.Errorf("process_vm_readv from pid %d: %w", b.pid, err)
		case n == 0:
			return done, io.ErrUnexpectedEOF
		}
		done += n
	}
	b.local[0].Base = nil // hold no receive buffer past the read
	return done, nil
}
