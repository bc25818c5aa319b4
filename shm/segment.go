package shm

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/gorun/gorun/comm/mailbox"
	"golang.org/x/sys/unix"
)

// A segment is one rank's shared memory: a header with its doorbell, and
// one ring per rank of the machine (indexed by its place among them),
// which only that sender writes frames into and only this rank reads. The
// memory is an anonymous memfd: it has no name under /dev/shm, so nothing
// outlives the processes that map it, however they end. Peers map it by
// opening /proc/PID/fd/FD while the owner still holds the descriptor.
//
// Layout (all offsets multiples of 64, so counters own their cache lines):
//
//	header (64 B): magic, ranks, slots, slot bytes
//	doorbell line (64 B): bell (futex word), sleepers
//	ring[0..local ranks): tail line, slots × (64 B slot header + slot bytes)
//
// A slot header holds a fragment's mailbox.Header, then a word that
// carries fragments of up to inlineBytes in place of the slot's data (a
// scalar all-reduce then costs the receiver one cache line, not two), and
// in its last word the slot's sequence number: the sender publishes its
// i-th slot by storing i+1 there once the header and data are written.
// The receiver polls that word, so a fragment costs it the slot's own
// cache lines and no shared head counter; the sender keeps its head to
// itself and reads the receiver's tail only when its cached copy says the
// ring is full.
type segment struct {
	mem   []byte
	fd    int // -1 once closed (the mapping stays)
	ranks int
	slots int
	slotB int
}

const (
	magic      = 0x676f72756e73686d // "gorunshm"
	lineBytes  = 64
	headerSize = 2 * lineBytes
	slotHeader = lineBytes
)

// inlineWord, in a slot header, follows the mailbox header and holds a
// fragment of at most inlineBytes; seqWord, the header line's last word,
// is the slot's sequence number.
const (
	inlineWord  = mailbox.HeaderWords
	inlineBytes = 8
	seqWord     = slotHeader/8 - 1
)

// The mailbox header, the inline word and the sequence word share the
// slot's header line.
const _ = uint(seqWord - inlineWord - 1)

func ringBytes(slots, slotB int) int { return lineBytes + slots*(slotHeader+slotB) }

func segmentBytes(ranks, slots, slotB int) int { return headerSize + ranks*ringBytes(slots, slotB) }

// createSegment makes this rank's segment, pre-faulted so no frame pays
// for page faults.
func createSegment(rank, ranks, slots, slotB int) (*segment, error) {
	fd, err := unix.MemfdCreate(fmt.Sprintf("gorun-rank%d", rank), unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	size := segmentBytes(ranks, slots, slotB)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: sizing the %d-byte segment: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: mapping the %d-byte segment: %w", size, err)
	}
	s := &segment{mem: mem, fd: fd, ranks: ranks, slots: slots, slotB: slotB}
	h := s.words(0, 4)
	h[1], h[2], h[3] = uint64(ranks), uint64(slots), uint64(slotB)
	atomic.StoreUint64(&h[0], magic)
	return s, nil
}

// openSegment maps the segment of process pid, descriptor fd.
func openSegment(pid, fd, ranks, slots, slotB int) (*segment, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: opening the peer's segment: %w", err)
	}
	defer f.Close()
	size := segmentBytes(ranks, slots, slotB)
	if st, err := f.Stat(); err != nil || st.Size() != int64(size) {
		return nil, fmt.Errorf("shm: %s is not a segment of %d bytes (stat: %v)", path, size, err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("shm: mapping %s: %w", path, err)
	}
	s := &segment{mem: mem, fd: -1, ranks: ranks, slots: slots, slotB: slotB}
	h := s.words(0, 4)
	if atomic.LoadUint64(&h[0]) != magic || h[1] != uint64(ranks) || h[2] != uint64(slots) || h[3] != uint64(slotB) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("shm: %s does not hold a segment laid out for %d ranks × %d slots of %d bytes", path, ranks, slots, slotB)
	}
	return s, nil
}

// words views n uint64s at byte offset off.
func (s *segment) words(off, n int) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&s.mem[off])), n)
}

func (s *segment) bell() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[lineBytes]))
}

func (s *segment) sleepers() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[lineBytes+4]))
}

// ring returns the ring that the local rank at index from writes into.
func (s *segment) ring(from int) *ring {
	off := headerSize + from*ringBytes(s.slots, s.slotB)
	return &ring{
		tail:  (*atomic.Uint64)(unsafe.Pointer(&s.mem[off])),
		slots: s.mem[off+lineBytes : off+ringBytes(s.slots, s.slotB)],
		n:     uint64(s.slots),
		slotB: s.slotB,
	}
}

// ringBell wakes whoever sleeps on the segment's doorbell, after the
// caller published something (with an atomic store). It touches the bell
// only when someone sleeps: a sleeper announces itself in sleepers before
// it re-checks and sleeps, and atomics are sequentially consistent, so
// either this load sees the sleeper or the sleeper's check sees what was
// published.
func (s *segment) ringBell() {
	if s.sleepers().Load() > 0 {
		s.bell().Add(1)
		futexWakeAll(s.bell())
	}
}

// closeFD drops the descriptor; the mapping stays.
func (s *segment) closeFD() {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

func (s *segment) unmap() {
	s.closeFD()
	if s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

// ring is a single-producer single-consumer queue of fixed slots. Slot i
// (of all slots ever sent) sits at i mod n and is published when its
// sequence word holds i+1; tail counts the slots the receiver released.
// Both only grow.
type ring struct {
	tail  *atomic.Uint64
	slots []byte
	n     uint64
	slotB int
}

func (r *ring) slot(i uint64) (hdr []uint64, data []byte) {
	off := int(i%r.n) * (slotHeader + r.slotB)
	b := r.slots[off : off+slotHeader+r.slotB]
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), slotHeader/8), b[slotHeader:]
}

// seq returns the sequence word of slot i.
func (r *ring) seq(i uint64) *atomic.Uint64 {
	off := int(i%r.n)*(slotHeader+r.slotB) + seqWord*8
	return (*atomic.Uint64)(unsafe.Pointer(&r.slots[off]))
}

// published reports whether slot i holds a fragment to read.
func (r *ring) published(i uint64) bool { return r.seq(i).Load() == i+1 }

// fragment returns where a fragment of n bytes lies in a slot: the header
// line's inline word when n is at most inlineBytes, else the slot's data.
// Sender and receiver both ask it, so they agree.
func fragment(hdr []uint64, data []byte, n int) []byte {
	if n <= inlineBytes {
		return unsafe.Slice((*byte)(unsafe.Pointer(&hdr[inlineWord])), inlineBytes)
	}
	return data
}
