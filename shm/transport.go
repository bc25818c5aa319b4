package shm

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/mailbox"
	"golang.org/x/sys/unix"
)

// Defaults for Config. A fragment as large as the ring algorithms' chunk
// (1 MiB) moves each chunk in one hand-off, which measured faster for large
// all-reduces than more, smaller slots in the same memory
// (bench/results/HISTORY.md).
const (
	DefaultSlots     = 8
	DefaultSlotBytes = 1 << 20
	// SegmentBudget bounds the rings of one rank's segment (one per rank
	// of its machine): with more local ranks than the default rings fit
	// (8), the slots shrink, down to MinSlotBytes, so that 64 ranks on a
	// machine use 64 MiB each, not 512 MiB (32 GiB in all).
	SegmentBudget = 64 << 20
	MinSlotBytes  = 64 << 10
	// prefaultRanks is the most local ranks whose rings are prefaulted
	// as peers attach, so that no frame pays for the first use of a page.
	// With more, touching every page of every ring up front costs more
	// than the first frames' faults, which only the pages used pay, and
	// holds up the join: examples/allreduce under gorun took 0.16 s at
	// np 2, 0.71 s at np 4 and 2.85 s at np 8 with prefaulting, 0.06,
	// 0.12 and 0.25 s without (2026-11-26, Zen 5 VM, where a page's
	// first touch costs about 15 µs); 38–40 s against 6.8–7.2 s at 64.
	// The faults then fall in the first calls that use the pages
	// (benchmarks warm up over several laps of every ring: bench.WarmupCalls).
	prefaultRanks = 2
	// sleepSlice bounds each futex sleep, so that failures seen elsewhere,
	// cancellations and deadlines are noticed within it.
	sleepSlice = time.Millisecond
	// yieldPhase is how long a wait polls with sched_yield after its spin,
	// before it sleeps on the doorbell.
	yieldPhase = 200 * time.Microsecond
	// spinChecks: while spinning, a wait looks at the clock, its context
	// and failures seen elsewhere only every spinChecks polls (reading the
	// clock on a VM costs as much as a poll of the rings).
	spinChecks = 32
)

// Config describes this rank among the job's ranks.
type Config struct {
	Rank, Size int
	// Local lists, in increasing order, the ranks on this machine, this
	// one included: only they get a ring in the segment (all of them must
	// pass the same list). Empty: every rank of the job.
	Local []int
	// SlotBytes is the largest fragment a frame is cut into, and a ring
	// holds Slots of them (defaults DefaultSlots and DefaultSlotBytes,
	// less when the machine's rings would not fit in SegmentBudget: see
	// SlotBytesFor and ringCap); all ranks must agree.
	Slots, SlotBytes int
	// Timeout bounds every wait whose context has no deadline.
	Timeout time.Duration
	// Spin is how long a wait polls before it sleeps.
	Spin time.Duration
	// Failed, when set, reports a failure detected elsewhere (a peer's TCP
	// connection breaking): waits and sends return it.
	Failed func() error
	// Left, when set, reports that a rank closed its end on purpose (its
	// goodbye comes elsewhere, over TCP): waits for that rank's data and
	// sends to it return the error, after one last look at what it sent.
	Left func(rank int) error
	// DirectBytes: frames of at least this many bytes sent by SendDirect
	// are read by the receiver straight from the sender's memory, one
	// copy instead of two (see direct.go). 0: DefaultDirectBytes;
	// negative: never; otherwise at least MinDirectBytes.
	DirectBytes int
	// Watch makes waits hear the end of the peer they wait for from
	// shared memory itself, for peers no other transport connects (lazy
	// TCP): a goodbye or an abort in its segment's status (Leave, Abort),
	// or its process gone (a pidfd).
	Watch bool
}

// SlotBytesFor returns the default slot size for a machine of local
// ranks with slots slots per ring: DefaultSlotBytes, halved while the
// local rings would take more than SegmentBudget, but not below
// MinSlotBytes.
func SlotBytesFor(local, slots int) int {
	b := DefaultSlotBytes
	for b > MinSlotBytes && local*ringCap(slots, b) > SegmentBudget {
		b /= 2
	}
	return b
}

// Info is what a peer needs to map this rank's segment.
type Info struct {
	PID, FD int
}

// ErrFrameTooLarge is wrapped by the error of a receive whose frame is
// larger than the posted buffer.
var ErrFrameTooLarge = mailbox.ErrFrameTooLarge

// PeerError is a failure while talking to one rank.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("rank %d (shared memory): %v", e.Rank, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// Transport is this rank's end of the shared-memory paths.
type Transport struct {
	cfg   Config
	own   *segment
	peers []*peer // nil where a rank is not reached through shared memory
	// plain: this rank publishes slots and releases them with plain
	// stores, and runs a barrier on every process before it sleeps (see
	// publish).
	plain bool

	statusMu sync.Mutex           // serialises Leave and Abort
	leftFn   func(rank int) error // t.left, made once (a method value allocates)
	readv    vmReader             // reads peers' memory: unix.ProcessVMReadv
	patience time.Duration        // how long a direct record waits for its claim: directPatience
	// directNote says why peers will refuse direct records ("" when
	// they may read them; see letPeersRead).
	directNote string
}

type peer struct {
	rank   int
	seg    *segment // the peer's: this rank writes into its ring and rings its bell
	out    *ring
	in     *ring // in this rank's segment, written by the peer
	sendMu sync.Mutex
	head   uint64     // out's position after the records this rank published; under sendMu
	freed  uint64     // out's tail as last read; under sendMu
	dirty  dirtyLines // out's lines that may hold data; under sendMu
	looked uint64     // the window (position ÷ smallWindow) wrapEarly last read the tail in; under sendMu
	plain  bool       // publish with plain stores (Transport.plain)
	direct bool       // large frames go as direct records (until the peer refuses one); under sendMu
	lent   []byte     // the payload of the direct record in flight (see direct.go); under sendMu
	// smallFrom is where the run of small records that ends at head
	// began: after the last larger, paged or wrap record. Under sendMu.
	smallFrom uint64
	// inAt is in's tail when this rank last sent to the peer (see
	// reserve). Under sendMu.
	inAt uint64

	rxMu  sync.Mutex // held while draining in and touching the mailboxes
	boxes *mailbox.Peer
	// delivered counts drains that moved fragments into boxes; waits look
	// at the mailbox again only when it changed. unclaimed mirrors
	// boxes.Unclaimed, for SendRecv to read without the lock. Both are
	// written under rxMu.
	delivered atomic.Uint64
	unclaimed atomic.Int64
	// Reading direct records, under rxMu: whether the peer's memory can
	// be read, and the reader.
	readable int
	probe    [8]byte
	src      remoteBytes

	pid   int // the peer's process
	pidfd int // readable once that process ended (Config.Watch); -1: none

	// seg, out and dirty are set once the peer's segment is mapped: at
	// Attach, or (Config.Watch) when first needed, by mapSeg through
	// mapOnce; mapped tells it is done.
	mapOnce sync.Once
	mapSeg  func()
	mapErr  error
	mapped  atomic.Bool
}

// ensureMapped maps p's segment unless it is mapped, and returns why it
// cannot be.
func (p *peer) ensureMapped() error {
	if p.mapped.Load() {
		return nil
	}
	p.mapOnce.Do(p.mapSeg)
	return p.mapErr
}

// wake rings p's doorbell: this rank freed room in the ring p writes.
func (p *peer) wake() {
	if p.ensureMapped() == nil {
		p.seg.ringBell()
	}
}

// noteUnclaimed updates p.unclaimed after the mailboxes changed. The
// caller holds rxMu.
func (p *peer) noteUnclaimed() {
	if u := int64(p.boxes.Unclaimed()); u != p.unclaimed.Load() {
		p.unclaimed.Store(u)
	}
}

// New creates this rank's segment. Publish Info to the peers, Attach
// theirs, and call Sealed once every peer has attached.
func New(cfg Config) (*Transport, Info, error) {
	if cfg.Slots <= 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.SlotBytes <= 0 {
		cfg.SlotBytes = SlotBytesFor(len(cfg.Local), cfg.Slots)
	}
	if cfg.SlotBytes%8 != 0 || cfg.SlotBytes > mailbox.MaxFragment {
		return nil, Info{}, fmt.Errorf("shm: slot size %d is not a multiple of 8 below 1 GiB", cfg.SlotBytes)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	switch {
	case cfg.DirectBytes == 0:
		cfg.DirectBytes = DefaultDirectBytes
	case cfg.DirectBytes > 0 && cfg.DirectBytes < MinDirectBytes:
		return nil, Info{}, fmt.Errorf("shm: direct frames of %d bytes: want at least %d, or a negative size for none", cfg.DirectBytes, MinDirectBytes)
	}
	if len(cfg.Local) == 0 {
		for r := range cfg.Size {
			cfg.Local = append(cfg.Local, r)
		}
	}
	if !slices.IsSorted(cfg.Local) || !slices.Contains(cfg.Local, cfg.Rank) || cfg.Local[0] < 0 || cfg.Local[len(cfg.Local)-1] >= cfg.Size {
		return nil, Info{}, fmt.Errorf("shm: local ranks %v: want increasing ranks of the %d, this rank %d among them", cfg.Local, cfg.Size, cfg.Rank)
	}
	own, err := createSegment(cfg.Rank, len(cfg.Local), cfg.Slots, cfg.SlotBytes)
	if err != nil {
		return nil, Info{}, err
	}
	t := &Transport{cfg: cfg, own: own, peers: make([]*peer, cfg.Size), plain: storesInOrder && registerBarriers()}
	t.leftFn, t.readv, t.patience = t.left, unix.ProcessVMReadv, directPatience
	if cfg.DirectBytes > 0 {
		t.directNote = letPeersRead(yamaScopeFile, "/proc/self/status", allowAnyPtracer)
	}
	return t, Info{PID: os.Getpid(), FD: own.fd}, nil
}

// DirectNote says, for the log, why the ranks of this machine will not
// read each other's frames straight from the sender's memory (direct
// records, see direct.go) and frames go through the rings instead; ""
// when they may.
func (t *Transport) DirectNote() string { return t.directNote }

// slot is the index of rank's ring in every segment: its place among the
// local ranks; -1 when it is not one.
func (t *Transport) slot(rank int) int {
	i, ok := slices.BinarySearch(t.cfg.Local, rank)
	if !ok {
		return -1
	}
	return i
}

// Attach maps rank's segment, described by its Info; from then on frames
// to and from rank go through shared memory.
func (t *Transport) Attach(rank int, info Info) error {
	if rank == t.cfg.Rank || t.slot(rank) < 0 {
		return fmt.Errorf("shm: cannot attach rank %d (this is rank %d; the local ranks are %v)", rank, t.cfg.Rank, t.cfg.Local)
	}
	p := &peer{rank: rank, in: t.own.ring(t.slot(rank)), boxes: mailbox.NewPeer(), plain: t.plain, direct: true, pid: info.PID, pidfd: -1}
	p.src.pid, p.src.readv = info.PID, t.readv
	p.mapSeg = func() {
		seg, err := openSegment(info.PID, info.FD, len(t.cfg.Local), t.cfg.Slots, t.cfg.SlotBytes)
		if err != nil {
			p.mapErr = &PeerError{Rank: rank, Err: err}
			return
		}
		if len(t.cfg.Local) <= prefaultRanks {
			seg.prefaultRing(t.slot(t.cfg.Rank))
			t.own.prefaultRing(t.slot(rank))
		}
		p.seg, p.out = seg, seg.ring(t.slot(t.cfg.Rank))
		p.dirty = newDirtyLines(p.out.size)
		p.mapped.Store(true)
	}
	if !t.cfg.Watch {
		if err := p.ensureMapped(); err != nil {
			return err
		}
	} else if fd, err := unix.PidfdOpen(info.PID, 0); err == nil {
		// Segments are mapped when first needed: most pairs of many
		// local ranks never exchange a frame. Without pidfds (Linux
		// before 5.3) a dead peer is found by the deadline instead.
		p.pidfd = fd
	}
	t.peers[rank] = p
	return nil
}

// Leave records in this rank's segment that its group closed on purpose,
// with farewell (where it was), for peers that hear of it from no other
// transport (Config.Watch).
func (t *Transport) Leave(farewell string) { t.setStatus(statusClosed, farewell) }

// Abort records in this rank's segment that it gave up, and why: the
// peers waiting for it (Config.Watch) fail with that.
func (t *Transport) Abort(err error) { t.setStatus(statusAborted, err.Error()) }

func (t *Transport) setStatus(st uint32, text string) {
	t.statusMu.Lock()
	defer t.statusMu.Unlock()
	if t.own.mem != nil {
		t.own.setStatus(st, text)
	}
}

// left is the goodbye a wait for rank takes its last looks after: the
// one Config.Left reports, else (Config.Watch) the one in rank's segment.
func (t *Transport) left(rank int) error {
	if l := t.cfg.Left; l != nil {
		if err := l(rank); err != nil {
			return err
		}
	}
	if !t.cfg.Watch || !t.Has(rank) || t.peers[rank].ensureMapped() != nil {
		return nil
	}
	if st, farewell := t.peers[rank].seg.status(); st == statusClosed {
		return &mailbox.LeftError{Rank: rank, Farewell: farewell}
	}
	return nil
}

// ended returns an error when rank (watched) aborted, or its process
// ended without closing its group.
func (t *Transport) ended(rank int) error {
	p := t.peers[rank]
	if err := p.ensureMapped(); err != nil {
		return fmt.Errorf("its process ended, or closed its segment: %w", err)
	}
	st, text := p.seg.status()
	switch {
	case st == statusAborted:
		return &PeerError{Rank: rank, Err: fmt.Errorf("aborted the job: %s", text)}
	case st != statusOpen || p.pidfd < 0:
		return nil
	}
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
		if st, _ := p.seg.status(); st == statusOpen {
			return &PeerError{Rank: rank, Err: fmt.Errorf("its process (pid %d) ended without closing its group: it crashed or was killed", p.pid)}
		}
	}
	return nil
}

// Sealed drops the descriptor peers opened the segment through, once all
// of them have: from then on only the mappings keep the memory.
func (t *Transport) Sealed() {
	if !t.cfg.Watch { // (watching peers map segments when first needed)
		t.own.closeFD()
	}
}

// Has reports whether frames to and from rank go through shared memory.
func (t *Transport) Has(rank int) bool {
	return rank >= 0 && rank < len(t.peers) && t.peers[rank] != nil
}

// Close unmaps every segment. Call it once no frame is in flight.
func (t *Transport) Close() {
	for _, p := range t.peers {
		if p != nil {
			if p.mapped.Load() {
				p.seg.unmap()
			}
			if p.pidfd >= 0 {
				unix.Close(p.pidfd)
				p.pidfd = -1
			}
		}
	}
	t.statusMu.Lock()
	t.own.unmap()
	t.statusMu.Unlock()
}

func (t *Transport) peer(rank int) (*peer, error) {
	if !t.Has(rank) {
		return nil, fmt.Errorf("shm: rank %d is not reached through shared memory", rank)
	}
	return t.peers[rank], nil
}

// waiter bounds one blocking call: its context, the transport's timeout,
// failures seen elsewhere, and the spin-then-sleep policy.
type waiter struct {
	t        *Transport
	ctx      context.Context
	rank     int
	what     string
	start    time.Time // of the first check; zero before it
	deadline time.Time
	polls    int
	spinning bool
	gone     mailbox.Goodbye // when a wait gives up on a peer that left
	probed   time.Time       // when the peer's end was last looked for (Config.Watch)
}

// probeEvery is how often a sleeping wait looks whether its peer aborted
// or its process ended (Config.Watch).
const probeEvery = 5 * time.Millisecond

// A waiter starts in its spin phase (when there is one), so the first
// look at the clock, the context and failures comes after spinChecks
// polls: most waits of a small message end before that, and reading the
// clock is a good part of such a wait's own cost.
func (t *Transport) waiter(ctx context.Context, rank int, what string) waiter {
	return waiter{t: t, ctx: ctx, rank: rank, what: what, spinning: t.cfg.Spin > 0, gone: mailbox.Goodbye{Left: t.leftFn, Looks: lastLooks}}
}

// pause waits a little for the doorbell (after the spin phase) and
// returns an error when the call must give up. ready re-checks the
// condition after announcing the sleep, so no ring of the bell is lost.
func (w *waiter) pause(ready func() bool) error {
	if w.polls++; w.spinning && w.polls%spinChecks != 0 {
		return nil
	}
	if f := w.t.cfg.Failed; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	if err := w.gone.Err(w.rank); err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return &PeerError{Rank: w.rank, Err: fmt.Errorf("%s: %w", w.what, err)}
	}
	now := time.Now()
	if w.start.IsZero() {
		w.start, w.deadline = now, now.Add(w.t.cfg.Timeout)
		if d, ok := w.ctx.Deadline(); ok {
			w.deadline = d
		}
	}
	if now.After(w.deadline) {
		if _, ok := w.ctx.Deadline(); ok {
			return &PeerError{Rank: w.rank, Err: fmt.Errorf("%s: %w", w.what, context.DeadlineExceeded)}
		}
		return &PeerError{Rank: w.rank, Err: fmt.Errorf("%s: nothing moved within %v (%w)", w.what, w.t.cfg.Timeout, mailbox.ErrTimeout)}
	}
	waited := now.Sub(w.start)
	if w.spinning = waited < w.t.cfg.Spin; w.spinning {
		// Poll; let other goroutines of this process in now and then.
		if w.polls%(2*spinChecks) == 0 {
			runtime.Gosched()
		}
		return nil
	}
	if waited < w.t.cfg.Spin+yieldPhase {
		// Poll, giving the core away between looks: to this process's
		// other goroutines (a backward pass the all-reduce overlaps), and
		// to other processes (with more ranks than cores the rank this one
		// waits for may need it). A futex wake-up would cost more: on this
		// VM waking a sleeping rank takes up to a few hundred µs.
		runtime.Gosched()
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		return nil
	}
	if w.t.cfg.Watch && now.Sub(w.probed) >= probeEvery && w.t.Has(w.rank) {
		w.probed = now
		if err := w.t.ended(w.rank); err != nil {
			return err
		}
	}
	// The futex sleep keeps this goroutine's P (Go's right to run code)
	// until the runtime's monitor takes it back, which can take
	// milliseconds: meanwhile another goroutine of this process that
	// wants the core — the compute of a pipeline stage whose receive
	// waits, a backward pass an all-reduce overlaps — cannot run, and with
	// one P per rank (gorun's default) the core idles. So let such a
	// goroutine run first, and when one did, look again instead of
	// sleeping: this wait comes back when it yields or is preempted.
	yielded := time.Now()
	runtime.Gosched()
	if time.Since(yielded) > othersRan {
		return nil
	}
	own := w.t.own
	own.sleepers().Add(1)
	if w.t.plain {
		barrierAll() // see publish
	}
	v := own.bell().Load()
	if !ready() {
		futexSleep(own.bell(), v, min(sleepSlice, w.deadline.Sub(now)))
	}
	own.sleepers().Add(^uint32(0))
	// Whatever became runnable while this one held the P runs first.
	runtime.Gosched()
	return nil
}

// othersRan is how long a Gosched must take for a sleeping wait to take
// it that another goroutine ran meanwhile (a yield with none to run to
// takes a microsecond or less).
const othersRan = 20 * time.Microsecond

// lastLooks is how many looks that found the peer's ring empty a wait
// takes after the peer left before it gives up: one suffices, since the
// peer published all it sent before its goodbye.
const lastLooks = 1

// Send copies payload into rank's ring as one frame, blocking while the
// ring is full (draining this rank's own rings meanwhile, so two ranks
// sending to each other cannot deadlock).
func (t *Transport) Send(ctx context.Context, rank int, stream uint32, meta [4]uint64, payload []byte) error {
	return t.send(ctx, rank, stream, meta, payload, false)
}

// SendDirect is Send, except that a frame of Config.DirectBytes or more
// is read by rank straight out of payload, one copy instead of two,
// and SendDirect returns once it was (see direct.go); it goes through the
// ring where rank cannot read this process's memory or does not start
// reading within a short patience. The copy saved pays where both ranks
// are busy copying (all-to-all, all-gather); a stream of chunks one way,
// or added in round a ring, runs faster through the ring, where sender
// and receiver work at the same time (bench/results/HISTORY.md).
func (t *Transport) SendDirect(ctx context.Context, rank int, stream uint32, meta [4]uint64, payload []byte) error {
	return t.send(ctx, rank, stream, meta, payload, true)
}

func (t *Transport) send(ctx context.Context, rank int, stream uint32, meta [4]uint64, payload []byte, direct bool) error {
	p, err := t.peer(rank)
	if err != nil {
		return err
	}
	if f := t.cfg.Failed; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	if err := p.ensureMapped(); err != nil {
		return err
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	var w waiter
	if d := t.cfg.DirectBytes; direct && d > 0 && len(payload) >= d && p.direct {
		if sent, err := t.sendDirect(ctx, p, stream, meta, payload, &w); sent || err != nil {
			return err
		}
	}
	r := p.out
	h := mailbox.Header{Stream: stream, Flags: mailbox.First, Total: uint64(len(payload)), Meta: meta}
	for off := 0; off == 0 || off < len(payload); {
		n := min(len(payload)-off, r.maxFrag)
		head, rec, wrap, paged, err := t.reserve(ctx, p, n, &w)
		if err != nil {
			return err
		}
		hdr, at := r.header(head), head&(r.size-1)
		p.dirty.header(at)
		if wrap {
			hdr[0] = wrapMark
		} else {
			data, _ := r.fragment(head, n, paged)
			copyToPeer(data, payload[off:off+n])
			if n > inlineBytes {
				p.dirty.data(at+recordHeader, (n+lineBytes-1)/lineBytes)
			}
			off += n
			h.N = uint32(n)
			if off == len(payload) {
				h.Flags |= mailbox.Last
			}
			h.Put(hdr)
			h.Flags = 0
		}
		p.publish(head, rec, paged && !wrap)
		if len(payload) == 0 && !wrap {
			break
		}
	}
	return nil
}

// reserve waits until p's ring has room at p.head for the record of an
// n-byte fragment, or for a wrap record there (wrap: the record goes to
// the next lap), and returns where the record lies, its length and
// whether it is paged (see segment). The caller holds sendMu; w bounds
// the wait (started on its first pause).
func (t *Transport) reserve(ctx context.Context, p *peer, n int, w *waiter) (head, rec uint64, wrap, paged bool, err error) {
	r := p.out
	// A small frame that answers the peer — this rank took a record from
	// it since it last sent to it, as each rank of a small all-reduce does
	// — goes in a paged record, where the receiver's prefetcher cannot
	// reach the lines this rank writes next; a stream of frames one way
	// goes in records packed on lines (see segment).
	in := p.in.tail.Load()
	paged = in != p.inAt
	for {
		head = p.head
		rec = recordLen(head, n, paged)
		wrap = rec > r.toEnd(head) || p.wrapEarly(head, rec)
		if wrap {
			rec = r.toEnd(head) // a wrap record fills the rest of the lap
		}
		small := !wrap && !paged && rec <= smallRecord
		if p.fits(head, rec, small, p.freed) {
			if !small {
				p.smallFrom = head + rec
			}
			if !wrap {
				p.inAt = in
			}
			return head, rec, wrap, paged, nil
		}
		if p.freed = r.tail.Load(); p.fits(head, rec, small, p.freed) {
			continue
		}
		if w.t == nil {
			*w = t.waiter(ctx, p.rank, "sending (its ring stayed full)")
		}
		t.progress(nil)
		w.gone.Drained() // a look that found no room
		if err := w.pause(func() bool { return p.fits(head, rec, small, r.tail.Load()) || t.pending() }); err != nil {
			return 0, 0, false, false, err
		}
	}
}

// smallAhead bounds the bytes of small records a sender keeps in a ring
// its receiver has not released (see segment). Packed records without it
// ran up to a whole ring (8 MiB) ahead, and four-rank 16-byte Gathers
// went at 0.24–1.50× the speed of one page a record from run to run;
// held to 16 KiB, at 1.3–2.5× in six runs (4 KiB did worse at two ranks,
// 64 KiB at four; bench/results/current/shm-records-wakes-tried-2026-11-30-zen3.txt).
const smallAhead = 16 << 10

// fits reports whether the record of rec bytes at head fits p's ring with
// its tail at tail: room for it and for the next record's header line,
// whose sequence word may need a zero before this record is published;
// and for a small record, at most smallAhead bytes of the small records
// sent since the last larger one unreleased, so that a small frame never
// waits for the receiver to take a large one before it. The caller holds
// sendMu.
func (p *peer) fits(head, rec uint64, small bool, tail uint64) bool {
	if head+rec+lineBytes-tail > p.out.size {
		return false
	}
	return !small || head+rec-max(tail, p.smallFrom) <= smallAhead
}

// publish hands the receiver the record of rec bytes at head (paged:
// see pagedFlag), once its header and data are written, and rings its
// bell. The caller holds sendMu.
func (p *peer) publish(head, rec uint64, paged bool) {
	r := p.out
	if next := (head + rec) & (r.size - 1); p.dirty.isData(next) {
		publish(r.seq(next), 0, p.plain)
		p.dirty.header(next)
	}
	p.head = head + rec
	seq := head + 1
	if paged {
		seq |= pagedFlag
	}
	publish(r.seq(head), seq, p.plain)
	p.seg.ringBell()
}

// smallWindow bounds the part of a ring that a stream of frames the
// receiver keeps up with goes round: records of more than 192 bytes, and
// small ones that answer the peer, take whole pages (see segment), and
// streams that walked every page of the ring measured slower where ranks
// talk to several peers (likely a TLB miss per frame;
// bench/results/HISTORY.md).
const smallWindow = 256 << 10

// wrapEarly reports whether the record of rec bytes at head should start
// the next lap instead: when head lies past smallWindow on its lap, the
// receiver holds no more than that window's worth of records, and the
// record fits at the lap's start short of where head lies (else it would
// wait for the receiver to pass the wrap record, which made large frames
// much slower when they were wrapped early). The tail is read for it at
// the first record past each multiple of the window on a lap: a stream
// that was more than a window ahead of its receiver at one multiple comes
// back to the lap's start at the next one its receiver has caught up by.
// Read once a lap instead, a stream of page records that was ahead as
// it first passed the window went round all 8 MiB of the ring, and
// four-rank 256-byte Reduces, 1–4 KiB Gathers and 1 KiB Scatters ran at
// about two thirds of the speed this gives
// (bench/results/current/shm-window-retry-2026-11-30-zen3.txt). A
// stream of large frames, whose receiver holds more than a window,
// still goes round the whole ring. The caller holds sendMu.
func (p *peer) wrapEarly(head, rec uint64) bool {
	at := head & (p.out.size - 1)
	if at < smallWindow || rec+lineBytes > at || head/smallWindow == p.looked {
		return false
	}
	p.looked = head / smallWindow
	p.freed = p.out.tail.Load()
	return head-p.freed <= smallWindow
}

// Post registers buf for the next frame from rank on stream and returns a
// ticket for Wait. A frame that already arrived is copied in at once.
func (t *Transport) Post(rank int, stream uint32, buf []byte) (uint64, error) {
	return t.PostCombine(rank, stream, buf, nil)
}

// PostCombine is Post with the frame folded into buf by combine, straight
// from the slots it arrives in, instead of copied (nil: copied).
func (t *Transport) PostCombine(rank int, stream uint32, buf []byte, combine mailbox.Combine) (uint64, error) {
	p, err := t.peer(rank)
	if err != nil {
		return 0, err
	}
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	return p.post(stream, buf, combine), nil
}

// post registers buf in the mailbox of stream. The caller holds rxMu.
func (p *peer) post(stream uint32, buf []byte, combine mailbox.Combine) uint64 {
	ticket := p.boxes.PostCombine(stream, buf, combine)
	p.noteUnclaimed()
	return ticket
}

// Wait blocks until the frame for ticket has arrived and returns its
// metadata and length.
func (t *Transport) Wait(ctx context.Context, rank int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	p, err := t.peer(rank)
	if err != nil {
		return [4]uint64{}, 0, err
	}
	var w waiter
	return t.wait(ctx, p, stream, ticket, &w)
}

// wait is Wait for p, bounded by w (started on the first pause when w is
// zero), so that a call that already waited on its own, as SendRecv
// does, keeps one deadline.
func (t *Transport) wait(ctx context.Context, p *peer, stream uint32, ticket uint64, w *waiter) ([4]uint64, int, error) {
	for seen := p.delivered.Load() - 1; ; {
		// Drain p's ring and look at the mailbox under one hold of its
		// lock; the mailbox only when something was delivered since the
		// last look (by this goroutine or another). Polls that find
		// neither take no lock.
		// Once p said goodbye, every look takes the lock: a wait gives up
		// only after a look found p's ring empty (gone.Drained).
		if (p.in.published(p.in.tail.Load()) || p.delivered.Load() != seen || w.gone.Heard()) && p.rxMu.TryLock() {
			if p.drain() {
				p.delivered.Add(1)
				p.wake() // its sender may be waiting for room
			}
			if d := p.delivered.Load(); d != seen {
				seen = d
				if meta, n, err, ok := p.boxes.Result(stream, ticket); ok {
					p.rxMu.Unlock()
					if err != nil {
						err = &PeerError{Rank: p.rank, Err: err}
					}
					return meta, n, err
				}
			}
			if !p.in.published(p.in.tail.Load()) {
				w.gone.Drained()
			}
			p.rxMu.Unlock()
		}
		if err := t.idle(ctx, p, w); err != nil {
			return [4]uint64{}, 0, err
		}
	}
}

// idle is what a wait for p's data does between two looks at its ring:
// past its first drainAfter polls, drain the other rings; then pause (w
// starts on the first call).
func (t *Transport) idle(ctx context.Context, p *peer, w *waiter) error {
	if w.t == nil {
		*w = t.waiter(ctx, p.rank, "waiting for data")
	}
	if w.polls >= drainAfter {
		t.progress(p)
	}
	return w.pause(t.pending)
}

// drainAfter is how many polls a wait for one peer's frame leaves the
// other rings alone. Draining them at once moved frames that their own
// receives would have taken straight from the ring (take) into the
// mailboxes, and every receive after that, until they emptied, went
// through a posted receive: the root of a stream of four-rank 8-byte
// Reduces, waiting for one child while the other ran ahead, spent 18% of
// its samples on that path, and 27% more CPU than without it
// (bench/results/current/drain-later-2026-11-30-zen3.txt). Later polls
// still drain, so a peer that waits for room in its ring to this rank
// while this rank waits for another is not left waiting: what draining
// is for.
const drainAfter = 64

// pending reports whether any of this rank's rings holds a slot.
func (t *Transport) pending() bool {
	for _, p := range t.peers {
		if p != nil && p.in.published(p.in.tail.Load()) {
			return true
		}
	}
	return false
}

// progress drains every ring, but skip's, that no other goroutine is
// draining.
func (t *Transport) progress(skip *peer) {
	for _, p := range t.peers {
		if p == nil || p == skip || !p.in.published(p.in.tail.Load()) || !p.rxMu.TryLock() {
			continue
		}
		if p.drain() {
			p.delivered.Add(1)
			p.wake() // its sender may be waiting for room
		}
		p.rxMu.Unlock()
	}
}

// SendRecv sends payload to rank to as one frame and receives the next
// frame from rank from on stream into buf: Send, Post and Wait in one
// call. A frame that arrives whole in one record while from's mailboxes
// hold nothing of stream is copied from the ring straight into buf, with
// no receive posted and no mailbox in between, which is what lets the
// smallest all-reduces keep up with Open MPI's shared memory
// (BENCHMARKS.md); any other goes through Post and Wait.
func (t *Transport) SendRecv(ctx context.Context, to int, stream uint32, meta [4]uint64, payload []byte, from int, buf []byte) ([4]uint64, int, error) {
	p, err := t.peer(from)
	if err != nil {
		return [4]uint64{}, 0, err
	}
	if err := t.Send(ctx, to, stream, meta, payload); err != nil {
		return [4]uint64{}, 0, err
	}
	return t.recv(ctx, p, from, stream, buf)
}

// Recv receives the next frame from rank from on stream into buf, as Post
// then Wait would, the frame taken straight from the ring as SendRecv
// takes it where it can.
func (t *Transport) Recv(ctx context.Context, from int, stream uint32, buf []byte) ([4]uint64, int, error) {
	p, err := t.peer(from)
	if err != nil {
		return [4]uint64{}, 0, err
	}
	return t.recv(ctx, p, from, stream, buf)
}

// recv is the receive of SendRecv and Recv from p, rank from.
func (t *Transport) recv(ctx context.Context, p *peer, from int, stream uint32, buf []byte) ([4]uint64, int, error) {
	var w waiter
	// A frame waiting in the mailboxes for a receive, or moved there by
	// another goroutine meanwhile, may be this one or come before it:
	// Post then finds it.
	// After p's goodbye, Post and wait decide whether anything is left.
	for p.unclaimed.Load() == 0 && !w.gone.Heard() {
		if p.in.published(p.in.tail.Load()) && p.rxMu.TryLock() {
			switch m, n, got := p.take(stream, buf); got {
			case taken:
				p.rxMu.Unlock()
				p.wake() // its sender may be waiting for room
				return m, n, nil
			case cannot:
				ticket := p.post(stream, buf, nil)
				p.rxMu.Unlock()
				return t.wait(ctx, p, stream, ticket, &w)
			}
			p.rxMu.Unlock()
		}
		if err := t.idle(ctx, p, &w); err != nil {
			return [4]uint64{}, 0, err
		}
	}
	ticket, err := t.Post(from, stream, buf)
	if err != nil {
		return [4]uint64{}, 0, err
	}
	return t.wait(ctx, p, stream, ticket, &w)
}
