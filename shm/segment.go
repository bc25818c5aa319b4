package shm

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A segment is one rank's shared memory: a header with its doorbell, and
// one ring per rank of the machine (indexed by its place among them), which only that sender writes frames into
// and only this rank reads. The memory is an anonymous memfd: it has no
// name under /dev/shm, so nothing outlives the processes that map it,
// however they end. Peers map it by opening /proc/PID/fd/FD while the
// owner still holds the descriptor.
//
// Layout (all offsets multiples of 64, so counters own their cache lines):
//
//	header (64 B): magic, ranks, slots, slot bytes
//	doorbell line (64 B): bell (futex word), sleepers
//	ring[0..local ranks): head line, tail line, slots × (64 B slot header + slot bytes)
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

func ringBytes(slots, slotB int) int { return 2*lineBytes + slots*(slotHeader+slotB) }

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
		head:  (*atomic.Uint64)(unsafe.Pointer(&s.mem[off])),
		tail:  (*atomic.Uint64)(unsafe.Pointer(&s.mem[off+lineBytes])),
		slots: s.mem[off+2*lineBytes : off+ringBytes(s.slots, s.slotB)],
		n:     uint64(s.slots),
		slotB: s.slotB,
	}
}

// ring rings the segment's doorbell: whoever sleeps on it re-checks.
func (s *segment) ringBell() {
	s.bell().Add(1)
	if s.sleepers().Load() > 0 {
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

// ring is a single-producer single-consumer queue of fixed slots. head
// counts slots published by the sender, tail slots released by the
// receiver; both only grow.
type ring struct {
	head, tail *atomic.Uint64
	slots      []byte
	n          uint64
	slotB      int
}

func (r *ring) slot(i uint64) (hdr []uint64, data []byte) {
	off := int(i%r.n) * (slotHeader + r.slotB)
	b := r.slots[off : off+slotHeader+r.slotB]
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), slotHeader/8), b[slotHeader:]
}
