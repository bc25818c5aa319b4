package shm

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/gorun/gorun/mailbox"
	"golang.org/x/sys/unix"
)

// A segment is one rank's shared memory: a header with its doorbell, and
// one ring per rank of the machine (indexed by its place among them),
// which only that sender writes fragments into and only this rank reads. The
// memory is an anonymous memfd: it has no name under /dev/shm, so nothing
// outlives the processes that map it, however they end. Peers map it by
// opening /proc/PID/fd/FD while the owner still holds the descriptor.
//
// Layout (all offsets multiples of 64, so counters own their cache lines):
//
//	header (64 B): magic, ranks, slots, slot bytes
//	doorbell line (64 B): bell (futex word), sleepers
//	ring[0..local ranks): tail line, then the ring's bytes
//
// A ring is a circular byte buffer of records, each as long as its
// fragment needs: a header line holding the fragment's mailbox.Header, a
// word that carries fragments of up to inlineBytes in place of data (a
// scalar all-reduce then costs the receiver one cache line, not two), and
// in its last word the record's sequence number; then the fragment's
// data. Where a record ends depends on what it carries and why:
//
//   - A small record (at most smallRecord bytes: a fragment of up to 192
//     bytes) sent one way — no frame taken from the peer since this rank
//     last sent to it, as the senders of a Gather, a Reduce or a Scatter
//     — ends at the next cache line, and a sender keeps at most
//     smallAhead bytes of such records that the receiver has not
//     released (see reserve), so the receiver reads lines written
//     moments before, a few pages apart: through pages of their own, a
//     stream of small frames that ran a ring ahead (2,048 pages) gave its
//     receiver a cache and a TLB miss per frame.
//   - A small record that answers the peer (this rank took a frame from
//     it since it last sent to it, as each rank of a small all-reduce
//     does) is paged: it runs to the end of its page, marked by pagedFlag
//     in its sequence word. Packed line after line, such records had the
//     receiver's stream prefetcher fetch the lines the sender was about
//     to write, which the sender then had to take back (slower small
//     all-reduces; prefetchers stay within a page).
//   - A larger record runs to the end of the page its data ends in, so
//     that the records after it start on a page again.
//
// (The measurements are in bench/results/HISTORY.md.) The sender
// publishes the record at ring position pos (bytes sent before it,
// counting from the ring's creation) by storing pos+1 (with pagedFlag for
// a paged record) in its sequence word, once the header and the data are
// written, and, where an earlier lap left data at the next record's spot
// (see dirtyLines), a zero in that record's sequence word, so the receiver
// cannot take those bytes for a record. The receiver polls the word at
// its tail, so a fragment costs it the record's own cache lines and no
// shared head counter; it releases records by advancing the tail (in
// bytes), which the sender reads only when its cached copy says the ring
// is too full. Records do not wrap around the ring's end: a sender that
// reaches it fills the rest with a wrap record. Small fragments take
// small records, so a stream of small messages goes round the ring far
// more slowly than through fixed slots of the largest fragment (8 such
// slots made the sender fetch the tail line every seventh message).
type segment struct {
	mem   []byte
	fd    int // -1 once closed (the mapping stays)
	ranks int
	slots int
	slotB int
}

const (
	magic     = 0x676f72756e73686d // "gorunshm"
	lineBytes = 64
	// The header: the layout (line 0), the doorbell (line 1), how this
	// rank's group ended (statusOff: a word and the text's length) and
	// that text (textOff to headerSize).
	statusOff    = 2 * lineBytes
	textOff      = 3 * lineBytes
	headerSize   = 4096
	recordHeader = lineBytes
)

// A segment's status: how its rank's group ended, for the peers that
// hear of it from no other transport (Config.Watch).
const (
	statusOpen    = 0
	statusClosed  = 1 // closed on purpose; the text is its farewell
	statusAborted = 2 // gave up; the text is why
)

// inlineWord, in a slot header, follows the mailbox header and holds a
// fragment of at most inlineBytes; seqWord, the header line's last word,
// is the slot's sequence number.
const (
	inlineWord  = mailbox.HeaderWords
	inlineBytes = 8
	seqWord     = recordHeader/8 - 1
)

// The mailbox header, the inline word and the sequence word share the
// record's header line.
const _ = uint(seqWord - inlineWord - 1)

// ringCap is how many bytes a ring holds: room for slots fragments of
// slotB bytes, and for at least four records of the largest fragment,
// rounded up to a power of two (positions map to offsets with a mask).
// The default 8 MiB holds seven 1 MiB fragments in flight, and 2,048
// records of up to 4 KiB.
func ringCap(slots, slotB int) int {
	need := max(slots*slotB, 4*int(recordLen(0, slotB, true)))
	c := lineBytes
	for c < need {
		c <<= 1
	}
	return c
}

// pageBytes is the size of the pages the segments are mapped in.
const pageBytes = 4096

// smallRecord is the longest record packed on cache lines (see segment):
// the header line and up to three lines of data.
const smallRecord = 4 * lineBytes

// recordLen is the length of the record of an n-byte fragment at ring
// position pos: whole lines for a small record (at most smallRecord)
// unless it is paged; a paged or larger one runs to the first page
// boundary after its data, so that the records after it start on a page
// again, whatever small records came before it. Sender and receiver both
// ask it (the receiver reads paged from the record's sequence word), so
// they agree.
func recordLen(pos uint64, n int, paged bool) uint64 {
	b := uint64(recordHeader)
	if n > inlineBytes {
		b += uint64(n)
	}
	if b <= smallRecord && !paged {
		return (b + lineBytes - 1) &^ (lineBytes - 1)
	}
	end := pos + b
	return (end+pageBytes-1)&^(pageBytes-1) - pos
}

func ringBytes(slots, slotB int) int { return lineBytes + ringCap(slots, slotB) }

func segmentBytes(ranks, slots, slotB int) int { return headerSize + ranks*ringBytes(slots, slotB) }

// createSegment makes this rank's segment.
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
	// The rings are prefaulted as the peers that write them attach
	// (prefaultRing): this rank's own never carries anything.
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: mapping the %d-byte segment: %w", size, err)
	}
	prefault(mem[:headerSize])
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
	// Only the header and this rank's ring in it are used here: the
	// caller prefaults the ring (prefaultRing).
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mapping %s: %w", path, err)
	}
	prefault(mem[:headerSize])
	s := &segment{mem: mem, fd: -1, ranks: ranks, slots: slots, slotB: slotB}
	h := s.words(0, 4)
	if atomic.LoadUint64(&h[0]) != magic || h[1] != uint64(ranks) || h[2] != uint64(slots) || h[3] != uint64(slotB) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("shm: %s does not hold a segment laid out for %d ranks × %d slots of %d bytes", path, ranks, slots, slotB)
	}
	return s, nil
}

// prefault maps every page of mem writable in this process and touches
// it, so that no frame pays for the first use of a page. MAP_POPULATE maps
// a shared mapping's pages for reading only, so the first write to each
// page of a peer's ring still faulted, and even after MADV_POPULATE_WRITE
// (Linux 5.14 and later; older kernels refuse it) a first pass over the
// ring cost far more than the next one (bench/results/HISTORY.md). The touch adds zero atomically, so
// it changes nothing even where a peer already uses the page.
func prefault(mem []byte) {
	unix.Madvise(mem, unix.MADV_POPULATE_WRITE)
	for off := 0; off+8 <= len(mem); off += pageBytes {
		atomic.AddUint64((*uint64)(unsafe.Pointer(&mem[off])), 0)
	}
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

// setStatus records how this rank's group ended, once: the text first,
// then the status word that publishes it. The caller serialises calls.
func (s *segment) setStatus(st uint32, text string) {
	word := (*atomic.Uint32)(unsafe.Pointer(&s.mem[statusOff]))
	if word.Load() != statusOpen {
		return
	}
	n := copy(s.mem[textOff:headerSize], text)
	binary.LittleEndian.PutUint32(s.mem[statusOff+4:], uint32(n))
	word.Store(st)
}

// status returns how the segment's rank ended its group (statusOpen
// while it has not) and the text it left.
func (s *segment) status() (uint32, string) {
	st := (*atomic.Uint32)(unsafe.Pointer(&s.mem[statusOff])).Load()
	if st == statusOpen {
		return st, ""
	}
	n := min(int(binary.LittleEndian.Uint32(s.mem[statusOff+4:])), headerSize-textOff)
	return st, string(s.mem[textOff : textOff+n])
}

// prefaultRing prefaults the ring that the local rank at index from
// writes into, its tail line included.
func (s *segment) prefaultRing(from int) {
	off := headerSize + from*ringBytes(s.slots, s.slotB)
	prefault(s.mem[off : off+ringBytes(s.slots, s.slotB)])
}

// ring returns the ring that the local rank at index from writes into.
func (s *segment) ring(from int) *ring {
	off := headerSize + from*ringBytes(s.slots, s.slotB)
	c := ringCap(s.slots, s.slotB)
	return &ring{
		tail:    (*atomic.Uint64)(unsafe.Pointer(&s.mem[off])),
		mem:     s.mem[off+lineBytes : off+lineBytes+c],
		size:    uint64(c),
		maxFrag: s.slotB,
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

// ring is a single-producer single-consumer queue of records in a circular
// buffer of size bytes (a power of two). Positions count bytes from the
// ring's creation and only grow; the record at position pos lies at pos
// mod size and is published when its sequence word holds pos+1; tail is
// the position of the first record the receiver has not released.
type ring struct {
	tail    *atomic.Uint64
	mem     []byte
	size    uint64
	maxFrag int // the largest fragment a record carries
}

// wrapMark, as a record's first header word, marks a wrap record: the
// ring's bytes from it to the end carry nothing. No mailbox header encodes
// to it (its fragment length would exceed MaxFragment's multiples of 8).
const wrapMark = ^uint64(0)

// header returns the header line of the record at pos.
func (r *ring) header(pos uint64) []uint64 {
	off := pos & (r.size - 1)
	return unsafe.Slice((*uint64)(unsafe.Pointer(&r.mem[off])), recordHeader/8)
}

// inline returns the inline word of the record at pos (a direct record's
// state: see direct.go).
func (r *ring) inline(pos uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[pos&(r.size-1)+inlineWord*8]))
}

// seq returns the sequence word of the record at pos.
func (r *ring) seq(pos uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[pos&(r.size-1)+seqWord*8]))
}

// published reports whether the record at pos was published.
func (r *ring) published(pos uint64) bool {
	published, _ := r.record(pos)
	return published
}

// record reports, from one load of its sequence word, whether the record
// at pos was published and whether it is paged.
func (r *ring) record(pos uint64) (published, paged bool) {
	seq := r.seq(pos).Load()
	return seq&^pagedFlag == pos+1, seq&pagedFlag != 0
}

// pagedFlag, added to a record's sequence number (pos+1, whose bit 1 is
// 0 as positions are multiples of lineBytes), marks a paged record: a
// small one that takes the rest of its page, as small frames that answer
// the peer's do (see reserve). An old sequence number left on a line by
// an earlier lap differs from pos+1 by a multiple of the ring's size, so
// the flag cannot make it pass for a record of this lap.
const pagedFlag = 2

// toEnd is how many bytes lie between pos and the ring's end.
func (r *ring) toEnd(pos uint64) uint64 { return r.size - pos&(r.size-1) }

// fragment returns where the n bytes of the record at pos lie, and the
// record's length: the header line's inline word when n is at most
// inlineBytes, else the lines after the header. Sender and receiver both
// ask it, so they agree (the sender says whether the record is paged, the
// receiver reads it with r.record). A length the record cannot hold (a
// corrupt header) gets an empty slice, so the mailbox reports the
// overflow.
func (r *ring) fragment(pos uint64, n int, paged bool) ([]byte, uint64) {
	if n <= inlineBytes {
		return unsafe.Slice((*byte)(unsafe.Pointer(&r.header(pos)[inlineWord])), inlineBytes), recordLen(pos, n, paged)
	}
	rec := recordLen(pos, n, paged)
	if n > r.maxFrag || rec > r.toEnd(pos) {
		return nil, recordLen(pos, 0, paged)
	}
	off := pos&(r.size-1) + recordHeader
	return r.mem[off : off+uint64(n)], rec
}
