package rdma

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gorun/gorun/mailbox"
)

// Defaults for Config.
const (
	DefaultSlots     = 8
	DefaultSlotBytes = 256 << 10
	// slotHeader is the bytes in front of every slot's fragment.
	slotHeader = 64
	// creditsInFlight bounds the credit writes outstanding on one queue pair.
	creditsInFlight = 2
	// yieldPhase is how long a wait polls with yields after its spin, and
	// maxSleep the longest sleep between polls after that.
	yieldPhase = 200 * time.Microsecond
	maxSleep   = time.Millisecond
)

// Config describes this rank and tunes the transport. All ranks must
// agree on Slots and SlotBytes.
type Config struct {
	Rank, Size int
	// Slots and SlotBytes size each peer's rings (defaults DefaultSlots and
	// DefaultSlotBytes; SlotBytes includes a 64-byte header and is a
	// multiple of 64).
	Slots, SlotBytes int
	// Timeout bounds every wait whose context has no deadline (default 5 minutes).
	Timeout time.Duration
	// Spin is how long a wait polls without pausing.
	Spin time.Duration
	// Failed, when set, reports a failure detected elsewhere (a peer's TCP
	// connection breaking): waits and sends return it.
	Failed func() error
	// Left, when set, reports that a rank closed its end on purpose (its
	// goodbye comes elsewhere, over TCP): waits for that rank's data and
	// sends to it return the error, after one last look at what it sent.
	Left func(rank int) error
}

// PeerError is a failure while talking to one rank.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("rank %d (RDMA): %v", e.Rank, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// Transport is this rank's end of the RDMA paths: Send, Post and Wait, as
// the tcp and shm transports have.
type Transport struct {
	cfg   Config
	v     Verbs
	mem   *region
	reg   Registry // mem and the ranges added with Register
	peers []*peer  // by rank; nil where a rank is not reached over RDMA
	byQP  map[uint32]*peer

	pollMu sync.Mutex // held while polling the completion queues
	wcs    [32]Completion

	failMu sync.Mutex
	err    error
}

type peer struct {
	rank           int
	qpn            uint32
	local, remote  Endpoint
	in, out        []byte         // the incoming and outgoing rings
	credit         *atomic.Uint64 // written by the peer: slots of ours it consumed
	creditSrc      *atomic.Uint64 // our consumed count, as written to the peer
	creditSrcAddr  uint64
	slots, slotB   uint64
	connected      bool
	sendMu         sync.Mutex
	sent           uint64        // fragments posted (under sendMu)
	sendDone       atomic.Uint64 // fragment writes completed
	arrived        atomic.Uint64 // fragments received
	creditsOut     atomic.Int32  // credit writes in flight
	rxMu           sync.Mutex    // held while draining and touching the mailboxes
	consumed       atomic.Uint64 // fragments drained (written under rxMu)
	creditSent     atomic.Uint64 // consumed count last written to the peer (written under rxMu)
	boxes          *mailbox.Peer
	dataWR         Write // scratch of Send (under sendMu): no allocation per write
	creditWR       Write // scratch of drain (under rxMu)
	recvID, dataID uint64
	creditID       uint64
}

// Work request ids: the peer's rank and what the request was.
const (
	kindRecv = iota + 1
	kindData
	kindCredit
)

func wrID(rank, kind int) uint64  { return uint64(rank)<<8 | uint64(kind) }
func wrKind(id uint64) (int, int) { return int(id >> 8), int(id & 0xff) }
func (p *peer) slot(b []byte, i uint64) []byte {
	off := (i % p.slots) * p.slotB
	return b[off : off+p.slotB]
}

func headerWords(s []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&s[0])), mailbox.HeaderWords)
}

// New makes this rank's side of the connections to peers over v: the
// registered memory and a queue pair for each. Publish each peer's
// Endpoint, Connect each with the peer's, and only then send.
func New(cfg Config, v Verbs, peers []int) (*Transport, error) {
	if cfg.Slots <= 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.SlotBytes <= 0 {
		cfg.SlotBytes = DefaultSlotBytes
	}
	if cfg.SlotBytes%64 != 0 || cfg.SlotBytes <= slotHeader || cfg.SlotBytes > mailbox.MaxFragment {
		return nil, fmt.Errorf("rdma: slot size %d: want a multiple of 64 above %d and below 1 GiB", cfg.SlotBytes, slotHeader)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	ring := cfg.Slots * cfg.SlotBytes
	perPeer := 2*ring + 64
	mem, err := newRegion(v, max(len(peers), 1)*perPeer)
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, v: v, mem: mem, peers: make([]*peer, cfg.Size), byQP: map[uint32]*peer{}}
	t.reg.Add(mem.keys)
	port := v.Port()
	for i, r := range peers {
		if r < 0 || r >= cfg.Size || r == cfg.Rank || t.peers[r] != nil {
			t.Close()
			return nil, fmt.Errorf("rdma: peer rank %d: want distinct ranks of the %d other than %d", r, cfg.Size, cfg.Rank)
		}
		base := mem.mem[i*perPeer : (i+1)*perPeer]
		line := base[2*ring:]
		p := &peer{rank: r, in: base[:ring], out: base[ring : 2*ring],
			credit:    (*atomic.Uint64)(unsafe.Pointer(&line[0])),
			creditSrc: (*atomic.Uint64)(unsafe.Pointer(&line[8])), creditSrcAddr: addr(line[8:]),
			slots: uint64(cfg.Slots), slotB: uint64(cfg.SlotBytes), boxes: mailbox.NewPeer(),
			recvID: wrID(r, kindRecv), dataID: wrID(r, kindData), creditID: wrID(r, kindCredit)}
		p.qpn, err = v.CreateQP(cfg.Slots+creditsInFlight+1, cfg.Slots)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("rdma: queue pair for rank %d: %w", r, err)
		}
		t.peers[r] = p
		t.byQP[p.qpn] = p
		for range cfg.Slots {
			if err := v.PostRecv(p.qpn, p.recvID); err != nil {
				t.Close()
				return nil, fmt.Errorf("rdma: posting receives for rank %d: %w", r, err)
			}
		}
		p.local = Endpoint{QPN: p.qpn, PSN: rand.Uint32() & 0xffffff, LID: port.LID, GID: port.GID, GIDIndex: port.GIDIndex, MTU: port.MTU,
			Ring: addr(p.in), Credit: addr(line), RKey: mem.keys.RKey, Slots: uint32(cfg.Slots), SlotBytes: uint32(cfg.SlotBytes)}
	}
	return t, nil
}

// Endpoint returns what rank needs to connect to this rank.
func (t *Transport) Endpoint(rank int) (Endpoint, error) {
	p, err := t.peer(rank)
	if err != nil {
		return Endpoint{}, err
	}
	return p.local, nil
}

// Connect connects the queue pair of rank to the peer's, described by its
// endpoint.
func (t *Transport) Connect(rank int, remote Endpoint) error {
	p, err := t.peer(rank)
	if err != nil {
		return err
	}
	if remote.Slots != p.local.Slots || remote.SlotBytes != p.local.SlotBytes {
		return &PeerError{Rank: rank, Err: fmt.Errorf("its rings have %d slots of %d bytes, this rank's %d of %d (every rank must run the same gorun build)",
			remote.Slots, remote.SlotBytes, p.local.Slots, p.local.SlotBytes)}
	}
	if err := t.v.Connect(p.qpn, p.local, remote); err != nil {
		return &PeerError{Rank: rank, Err: fmt.Errorf("connecting queue pair %d to its %d: %w", p.qpn, remote.QPN, err)}
	}
	p.remote, p.connected = remote, true
	return nil
}

// Has reports whether frames to and from rank go over RDMA.
func (t *Transport) Has(rank int) bool {
	return rank >= 0 && rank < len(t.peers) && t.peers[rank] != nil && t.peers[rank].connected
}

// Port describes the device port in use.
func (t *Transport) Port() Port { return t.v.Port() }

func (t *Transport) peer(rank int) (*peer, error) {
	if rank < 0 || rank >= len(t.peers) || t.peers[rank] == nil {
		return nil, fmt.Errorf("rdma: rank %d is not reached over RDMA", rank)
	}
	return t.peers[rank], nil
}

// Register registers mem with the device, so that sends of payloads inside
// it are written from where they lie; mem must stay mapped (and, being
// registered, it is pinned) until Unregister.
func (t *Transport) Register(mem []byte) error {
	k, err := t.v.Register(mem)
	if err != nil {
		return fmt.Errorf("rdma: registering %d bytes: %w (%s)", len(mem), err, memlockLimit())
	}
	if err := t.reg.Add(k); err != nil {
		t.v.Deregister(k)
		return err
	}
	return nil
}

// Unregister undoes Register.
func (t *Transport) Unregister(mem []byte) error {
	k, ok := t.reg.Remove(addr(mem))
	if !ok {
		return fmt.Errorf("rdma: %d bytes at %#x were not registered", len(mem), addr(mem))
	}
	return t.v.Deregister(k)
}

// Close destroys the queue pairs and releases the memory and the device.
// Call it once no frame is in flight.
func (t *Transport) Close() error {
	t.fail(fmt.Errorf("rdma: transport closed"))
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, p := range t.peers {
		if p != nil {
			if err := t.v.DestroyQP(p.qpn); err != nil {
				keep(err)
			}
		}
	}
	t.reg.mu.Lock()
	for _, k := range t.reg.ranges {
		if k.Addr != t.mem.keys.Addr {
			keep(t.v.Deregister(k))
		}
	}
	t.reg.ranges = nil
	t.reg.mu.Unlock()
	if err := t.mem.free(t.v); err != nil {
		keep(err)
	}
	if err := t.v.Close(); err != nil {
		keep(err)
	}
	return first
}

// fail records the transport's first error.
func (t *Transport) fail(err error) {
	t.failMu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.failMu.Unlock()
}

// failure returns the error this transport or the rest of comm failed with.
func (t *Transport) failure() error {
	t.failMu.Lock()
	err := t.err
	t.failMu.Unlock()
	if err != nil {
		return err
	}
	if f := t.cfg.Failed; f != nil {
		return f()
	}
	return nil
}

// Send writes payload to rank as one frame, fragment by fragment, blocking
// while the peer's ring is full. A payload inside registered memory is
// written from where it lies, and Send returns once the device has read
// it; any other is copied into the outgoing ring first.
func (t *Transport) Send(ctx context.Context, rank int, stream uint32, meta [4]uint64, payload []byte) error {
	p, err := t.peer(rank)
	if err != nil {
		return err
	}
	if err := t.failure(); err != nil {
		return err
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	var direct Keys
	zeroCopy := false
	if len(payload) > 0 {
		if k, ok := t.reg.Find(addr(payload), len(payload)); ok && k.Addr != t.mem.keys.Addr {
			direct, zeroCopy = k, true
		}
	}
	var w waiter
	room := p.slotB - slotHeader
	h := mailbox.Header{Stream: stream, Flags: mailbox.First, Total: uint64(len(payload)), Meta: meta}
	for off := 0; off == 0 || off < len(payload); {
		for p.sent-p.credit.Load() >= p.slots || p.sent-p.sendDone.Load() >= p.slots {
			if w.t == nil {
				w = t.waiter(ctx, rank, "sending (the peer's ring stayed full)")
			}
			t.progress()
			w.gone.Drained() // a look that found the send could not go on
			if err := w.pause(); err != nil {
				return err
			}
		}
		s := p.slot(p.out, p.sent)
		n := min(int(room), len(payload)-off)
		h.N = uint32(n)
		if off+n == len(payload) {
			h.Flags |= mailbox.Last
		}
		h.Put(headerWords(s))
		wr := &p.dataWR
		*wr = Write{ID: p.dataID, RemoteAddr: p.remote.Ring + (p.sent%p.slots)*p.slotB, RKey: p.remote.RKey,
			Imm: uint32(p.sent), WithImm: true, Signaled: true}
		if zeroCopy {
			wr.Local[0] = Piece{Addr: addr(s), Len: slotHeader, LKey: t.mem.keys.LKey}
			wr.Local[1] = Piece{Addr: addr(payload[off:]), Len: uint32(n), LKey: direct.LKey}
		} else {
			copy(s[slotHeader:], payload[off:off+n])
			wr.Local[0] = Piece{Addr: addr(s), Len: uint32(slotHeader + n), LKey: t.mem.keys.LKey}
		}
		if err := t.v.PostWrite(p.qpn, wr); err != nil {
			err = &PeerError{Rank: rank, Err: fmt.Errorf("posting a %d-byte write: %w", wr.Len(), err)}
			t.fail(err)
			return err
		}
		p.sent++
		off += n
		h.Flags = 0
		if len(payload) == 0 {
			break
		}
	}
	if zeroCopy {
		// The caller may reuse payload once Send returns.
		for p.sendDone.Load() < p.sent {
			if w.t == nil {
				w = t.waiter(ctx, rank, "sending (waiting for the device to finish the writes)")
			}
			t.progress()
			w.gone.Drained() // a look that found the send could not go on
			if err := w.pause(); err != nil {
				return err
			}
		}
	}
	return nil
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
	return p.boxes.PostCombine(stream, buf, combine), nil
}

// Wait blocks until the frame for ticket has arrived and returns its
// metadata and length.
func (t *Transport) Wait(ctx context.Context, rank int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	p, err := t.peer(rank)
	if err != nil {
		return [4]uint64{}, 0, err
	}
	var w waiter
	for {
		var meta [4]uint64
		var n int
		var err error
		var ok bool
		if w.gone.Heard() {
			// The peer said goodbye: poll and drain waiting for the locks,
			// so that this look counts as drained when it finds no frame.
			meta, n, err, ok = t.takeAll(p, stream, ticket)
			if !ok {
				w.gone.Drained()
			}
		} else {
			t.progress()
			p.rxMu.Lock()
			meta, n, err, ok = p.boxes.Result(stream, ticket)
			p.rxMu.Unlock()
		}
		if ok {
			if err != nil {
				err = &PeerError{Rank: rank, Err: err}
			}
			return meta, n, err
		}
		if w.t == nil {
			w = t.waiter(ctx, rank, "waiting for data")
		}
		if err := w.pause(); err != nil {
			return [4]uint64{}, 0, err
		}
	}
}

// takeAll polls the completion queues and drains p's arrived fragments,
// waiting for other goroutines doing either, then looks up ticket's frame.
func (t *Transport) takeAll(p *peer, stream uint32, ticket uint64) ([4]uint64, int, error, bool) {
	t.pollMu.Lock()
	t.poll()
	t.pollMu.Unlock()
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	t.drain(p)
	return p.boxes.Result(stream, ticket)
}

// progress polls the completion queues (unless another goroutine is) and
// drains every peer's arrived fragments that no other goroutine is draining.
func (t *Transport) progress() {
	if t.pollMu.TryLock() {
		t.poll()
		t.pollMu.Unlock()
	}
	for _, p := range t.peers {
		if p == nil || !p.connected {
			continue
		}
		if c := p.consumed.Load(); p.arrived.Load() == c && p.creditSent.Load() == c {
			continue
		}
		if p.rxMu.TryLock() {
			t.drain(p)
			p.rxMu.Unlock()
		}
	}
}

// poll reaps completions; the caller holds pollMu.
func (t *Transport) poll() {
	for {
		n, err := t.v.PollRecv(t.wcs[:])
		if err != nil {
			t.fail(fmt.Errorf("rdma: polling the receive queue: %w", err))
			return
		}
		for _, wc := range t.wcs[:n] {
			p := t.byQP[wc.QPN]
			if p == nil {
				t.fail(fmt.Errorf("rdma: a receive completion for unknown queue pair %d", wc.QPN))
				continue
			}
			if wc.Status != StatusSuccess {
				t.fail(&PeerError{Rank: p.rank, Err: fmt.Errorf("receive failed: %v", wc.Status)})
				continue
			}
			if seq := p.arrived.Load(); wc.Imm != uint32(seq) {
				t.fail(&PeerError{Rank: p.rank, Err: fmt.Errorf("fragment %d arrived as number %d: the rings are out of step", seq, wc.Imm)})
				continue
			}
			// Repost first: once arrived counts it, a drain may hand the
			// slot back, and the peer's next write needs the receive.
			if err := t.v.PostRecv(p.qpn, p.recvID); err != nil {
				t.fail(&PeerError{Rank: p.rank, Err: fmt.Errorf("posting a receive: %w", err)})
			}
			p.arrived.Add(1)
		}
		m, err := t.v.PollSend(t.wcs[:])
		if err != nil {
			t.fail(fmt.Errorf("rdma: polling the send queue: %w", err))
			return
		}
		for _, wc := range t.wcs[:m] {
			rank, kind := wrKind(wc.ID)
			if wc.Status != StatusSuccess {
				t.fail(&PeerError{Rank: rank, Err: fmt.Errorf("RDMA write failed: %v%s", wc.Status, statusHint(wc.Status))})
				continue
			}
			p := t.peers[rank]
			switch kind {
			case kindData:
				p.sendDone.Add(1)
			case kindCredit:
				p.creditsOut.Add(-1)
			}
		}
		if n < len(t.wcs) && m < len(t.wcs) {
			return
		}
	}
}

func statusHint(s Status) string {
	switch s {
	case StatusRetryExc:
		return ": the peer's device stopped answering (its process died, or the link is down)"
	case StatusRNRRetryExc:
		return ": the peer had no receive posted"
	case StatusRemoteAccess:
		return ": the peer refused the write (wrong key or address: the ranks' endpoints disagree)"
	}
	return ""
}

// drain hands every arrived fragment of p to its mailbox and tells the
// peer how far it got. The caller holds p.rxMu.
func (t *Transport) drain(p *peer) {
	consumed := p.consumed.Load()
	for arrived := p.arrived.Load(); consumed < arrived; consumed++ {
		s := p.slot(p.in, consumed)
		h := mailbox.Get(headerWords(s))
		p.boxes.Deliver(&h, s[slotHeader:])
	}
	p.consumed.Store(consumed)
	if consumed == p.creditSent.Load() || p.creditsOut.Load() >= creditsInFlight {
		return // nothing new, or wait for a credit write to finish
	}
	// A later store before the device reads the word only tells the peer
	// more: the count only grows.
	p.creditSrc.Store(consumed)
	wr := &p.creditWR
	*wr = Write{ID: p.creditID, RemoteAddr: p.remote.Credit, RKey: p.remote.RKey, Signaled: true}
	wr.Local[0] = Piece{Addr: p.creditSrcAddr, Len: 8, LKey: t.mem.keys.LKey}
	p.creditsOut.Add(1)
	if err := t.v.PostWrite(p.qpn, wr); err != nil {
		p.creditsOut.Add(-1)
		t.fail(&PeerError{Rank: p.rank, Err: fmt.Errorf("returning credits: %w", err)})
		return
	}
	p.creditSent.Store(consumed)
}

// waiter bounds one blocking call: its context, the transport's timeout,
// failures, and the spin-yield-sleep polling policy.
type waiter struct {
	t        *Transport
	ctx      context.Context
	rank     int
	what     string
	start    time.Time
	deadline time.Time
	spins    int
	sleep    time.Duration
	gone     mailbox.Goodbye // when a wait gives up on a peer that left
}

func (t *Transport) waiter(ctx context.Context, rank int, what string) waiter {
	w := waiter{t: t, ctx: ctx, rank: rank, what: what, start: time.Now(), sleep: 20 * time.Microsecond,
		gone: mailbox.Goodbye{Left: t.cfg.Left, Looks: lastLooks}}
	w.deadline = w.start.Add(t.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok {
		w.deadline = d
	}
	return w
}

// lastLooks is how many looks that found nothing more from the peer a
// wait takes after the peer left before it gives up: two, in case a
// completion of the peer's last writes is queued after its goodbye is
// heard.
const lastLooks = 2

// pause lets time pass between two polls and returns an error when the
// call must give up.
func (w *waiter) pause() error {
	if err := w.t.failure(); err != nil {
		return err
	}
	if err := w.gone.Err(w.rank); err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return &PeerError{Rank: w.rank, Err: fmt.Errorf("%s: %w", w.what, err)}
	}
	now := time.Now()
	if now.After(w.deadline) {
		if _, ok := w.ctx.Deadline(); ok {
			return &PeerError{Rank: w.rank, Err: fmt.Errorf("%s: %w", w.what, context.DeadlineExceeded)}
		}
		return &PeerError{Rank: w.rank, Err: fmt.Errorf("%s: nothing moved within %v (%w)", w.what, w.t.cfg.Timeout, mailbox.ErrTimeout)}
	}
	switch waited := now.Sub(w.start); {
	case waited < w.t.cfg.Spin:
		if w.spins++; w.spins%64 == 0 {
			runtime.Gosched()
		}
	case waited < w.t.cfg.Spin+yieldPhase:
		runtime.Gosched()
	default:
		time.Sleep(min(w.sleep, w.deadline.Sub(now)))
		w.sleep = min(2*w.sleep, maxSleep)
	}
	return nil
}

// Peers returns the ranks reached over RDMA, in increasing order.
func (t *Transport) Peers() []int {
	var rs []int
	for r := range t.peers {
		if t.Has(r) {
			rs = append(rs, r)
		}
	}
	return slices.Clip(rs)
}

// Keep limits the transport to the ranks listed: the others' queue pairs
// stay unused, and Has reports false for them.
func (t *Transport) Keep(ranks []int) {
	for r, p := range t.peers {
		if p != nil && !slices.Contains(ranks, r) {
			p.connected = false
		}
	}
}
