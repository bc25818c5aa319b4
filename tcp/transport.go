package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	shared "github.com/gorun/gorun/mailbox"
	"github.com/hashicorp/go-multierror"
	"github.com/klauspost/compress/s2"
)

// ErrFrameTooLarge is returned by Wait when a frame is larger than the buffer
// posted for it: the two sides disagree about the operation.
var ErrFrameTooLarge = errors.New("frame larger than the posted receive")

// ErrClosed is returned by operations on a transport after Close.
var ErrClosed = errors.New("transport closed")

// PeerError says which rank an error concerns.
type PeerError struct {
	Rank int
	Addr string
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("rank %d (%s): %v", e.Rank, e.Addr, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// ErrPeerDied is wrapped by the error a rank reports when a peer's connection
// ends without the goodbye a clean Close sends.
var ErrPeerDied = errors.New("connection lost without goodbye: the process died, was killed, or its host is unreachable")

// LeftError says that a peer closed the transport on purpose (see
// mailbox.LeftError); shared memory reports the same type.
type LeftError = shared.LeftError

// AbortError carries the error a peer aborted the job with.
type AbortError struct {
	Rank int
	Msg  string
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("rank %d aborted the job: %s", e.Rank, e.Msg)
}

// Config tunes a transport.
type Config struct {
	Rank, Size int
	// Token authenticates every connection (see DialHandshake). Empty: no authentication.
	Token []byte
	// Timeout bounds each send and each wait whose context has no deadline. Default 5 minutes.
	Timeout time.Duration
	// HandshakeTimeout bounds one connection's handshake. Default 10 seconds.
	HandshakeTimeout time.Duration
	// Compress sends payloads of at least CompressMin bytes compressed with S2
	// when that makes them smaller.
	Compress bool
	// Spin is how long a call waiting for data polls the socket in a busy
	// loop. Spinning saves the wake-ups that dominate small-message latency,
	// but steals the core from other ranks when the machine is
	// oversubscribed. After the spin a wait keeps polling for YieldPhase,
	// giving its core away between looks, and only then sleeps.
	Spin time.Duration
	// Control, when set, receives the control messages peers send with
	// SendControl, in the order each peer sent them, on the peer's receive
	// path: it must not block (hand slow work to a goroutine). msg is its
	// own; Control may keep it.
	Control func(from int, msg []byte)
	// SocketBuffer, when positive, sets SO_SNDBUF and SO_RCVBUF (bytes); zero
	// leaves the kernel's auto-tuning on, which is best on most systems. It
	// must be at least MinSocketBuffer.
	SocketBuffer int
	// Lazy opens the connection with a peer when it is first needed (a
	// send to it, a receive posted for it, Reach) instead of connecting
	// every pair in Connect: each rank then holds sockets for the peers its
	// algorithms use, not for all Size−1.
	Lazy bool

	// unreachableAfter is the host watch's bound (default
	// unreachableAfter; tests shorten it).
	unreachableAfter time.Duration
}

// CheckSocketBuffer returns an error when n, a Config.SocketBuffer, is
// neither 0 (the kernel's auto-tuning) nor at least MinSocketBuffer.
func CheckSocketBuffer(n int) error {
	if n != 0 && n < MinSocketBuffer {
		return fmt.Errorf("%d bytes is below the %d-byte minimum for socket buffers (smaller ones stall loopback TCP; 0 leaves the kernel's auto-tuning on)", n, MinSocketBuffer)
	}
	return nil
}

// MinSocketBuffer is the smallest Config.SocketBuffer accepted. Below about
// 16 KiB, Linux's loopback (whose segments are 64 KiB) advertises a receive
// window smaller than a segment and the sender falls back to probing it on
// a timer of hundreds of milliseconds: small buffers made a transfer crawl,
// and the smallest stalled it (TestSmallFramesThroughAFullSocket).
const MinSocketBuffer = 64 << 10

// YieldPhase is how long a wait for data polls the socket after its spin,
// giving the core away between looks (to this process's other goroutines and
// to other processes), before it sleeps until the reader wakes it. With more
// ranks than cores the rank a call waits for often needs the very core the
// call holds, and waking a sleeping goroutine costs more than a few yields
// (with more ranks than cores, small all-reduces took nearly twice as long
// sleeping at once: bench/results/HISTORY.md, "TCP: yield before sleeping").
const YieldPhase = 200 * time.Microsecond

// CompressMin is the smallest payload considered for compression.
const CompressMin = 4096

// smallFrame: payloads up to this size are copied behind the header and sent
// with one write; larger ones go out with writev.
const smallFrame = 32 << 10

func (c *Config) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.unreachableAfter <= 0 {
		c.unreachableAfter = unreachableAfter
	}
}

// Transport is a mesh of connections among Size ranks: full from the
// start, or (Config.Lazy) grown as pairs of ranks first need each other.
type Transport struct {
	cfg   Config
	peers []*peer // indexed by rank; nil at our own rank

	lazy lazyMesh // the listener and the connections under way (Config.Lazy)

	timers sync.Pool // *time.Timer: bounds on waits whose context has no deadline, and their stallRelease

	failOnce sync.Once
	failed   chan struct{}         // closed when the transport failed
	failErr  atomic.Pointer[error] // set before failed is closed
	closing  atomic.Bool
	shut     chan struct{} // closed by Close: the host watch ends
	readers  sync.WaitGroup
	order    ioOrder      // sends before later reads, for the race detector
	stalled  atomic.Int32 // waits past stallRelease: no peer's reader pauses (flow)
}

type peer struct {
	rank int
	addr string
	conn *net.TCPConn
	rc   syscall.RawConn

	// With Config.Lazy, conn and rc are set once up is true; linked is
	// closed then, or when the peer cannot be reached (unreachable).
	up          atomic.Bool
	linked      chan struct{}
	link        linkState // guarded by the transport's lazy.mu
	unreachable error     // set before linked is closed

	rmu      sync.Mutex // held while pumping the receive side
	rs       recvState
	missed   atomic.Bool           // someone found rmu taken: the holder pumps again
	pumpFn   func(fd uintptr)      // t.pump(p, fd), for RawConn.Control
	pollFn   func(fd uintptr)      // sets readable, for RawConn.Control
	readable atomic.Bool           // the socket had data when last polled
	readFn   func(fd uintptr) bool // the reader goroutine's RawConn.Read callback
	ended    bool                  // set by readFn (reader goroutine only): the connection ended

	boxMu sync.Mutex
	boxes map[uint32]*mailbox
	flow  flow // the receive side's flow control, over every box

	wmu     sync.Mutex // one frame at a time on the wire
	order   *ioOrder   // the transport's, released before every write
	whdr    [HeaderSize]byte
	wbuf    []byte                // header plus small payload
	iov     [2][]byte             // what is left to write of the frame
	werr    error                 // why writeFn stopped
	writeFn func(fd uintptr) bool // writes iov, for RawConn.Write
	rest    []byte                // what a frame cut short left unsent (write)
	zbuf    []byte                // compressed payload being sent

	rz   []byte // compressed or discarded payload being received
	bye  atomic.Bool
	left atomic.Pointer[LeftError] // set with bye
	gone atomic.Bool               // the peer said goodbye, aborted, or its connection ended
	sure atomic.Bool               // set with gone when the peer's end is certain (Ended)
}

func (p *peer) box(stream uint32) *mailbox {
	p.boxMu.Lock()
	defer p.boxMu.Unlock()
	m := p.boxes[stream]
	if m == nil {
		m = newMailbox(&p.flow)
		p.boxes[stream] = m
	}
	return m
}

// Rank returns this transport's rank.
func (t *Transport) Rank() int { return t.cfg.Rank }

// Size returns the number of ranks.
func (t *Transport) Size() int { return t.cfg.Size }

// PeerAddr returns the address a peer's connection goes to (empty for our own rank).
func (t *Transport) PeerAddr(rank int) string {
	if rank >= 0 && rank < len(t.peers) && t.peers[rank] != nil {
		return t.peers[rank].addr
	}
	return ""
}

// Err returns the error the transport failed with, or nil. Every
// collective call asks, so it is one atomic load.
func (t *Transport) Err() error {
	if err := t.failErr.Load(); err != nil {
		return *err
	}
	return nil
}

// Left returns a *LeftError when rank has closed its end on purpose (said
// goodbye), else nil. Transports beside this one ask it while they wait
// for that rank's data: the goodbye comes only over TCP.
func (t *Transport) Left(rank int) error {
	if rank >= 0 && rank < len(t.peers) && t.peers[rank] != nil {
		if e := t.peers[rank].left.Load(); e != nil {
			return e
		}
	}
	return nil
}

// Gone reports whether rank will send nothing more: it said goodbye or
// its connection ended. Every control message it sent before is delivered
// before Gone turns true. A rank that waits for answers from its peers (the
// stall watch, an agreement) stops waiting for the gone ones. A rank that
// aborted is not gone: it may still answer, and agree on who is alive.
func (t *Transport) Gone(rank int) bool {
	return rank >= 0 && rank < len(t.peers) && t.peers[rank] != nil && t.peers[rank].gone.Load()
}

// Ended reports whether rank is gone for certain: it said goodbye, or its
// host closed or reset the connection, or refused a new one — which only
// the end of its transport or its process does (or its host's restart).
// A rank Gone but not Ended went silent: its host stopped, or the network
// to it is cut, and it may be alive beyond the cut. (Nothing in this
// package closes a connection to a live peer before Close: Abort waits for
// a stuck frame's write to end instead.)
func (t *Transport) Ended(rank int) bool {
	return rank >= 0 && rank < len(t.peers) && t.peers[rank] != nil && t.peers[rank].sure.Load()
}

// surelyEnded reports whether a connection's error says its peer's host
// ended it: a close (end of stream) or a reset.
func surelyEnded(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// Failed is closed once the transport has failed.
func (t *Transport) Failed() <-chan struct{} { return t.failed }

func (t *Transport) fail(err error) {
	first := false
	t.failOnce.Do(func() {
		t.failErr.Store(&err)
		close(t.failed)
		first = true
	})
	if first {
		t.afterFailure()
	}
}

// afterFailure frees what waits on a peer that is not reading or read:
// a data frame blocked on a full socket returns now, with the failure
// (Send; its unsent rest goes out before the next frame), and frames left
// in the socket for receives not yet posted (flow) are read and dropped,
// so that the control messages behind them arrive — the survivors agree
// over them (Shrink).
func (t *Transport) afterFailure() {
	now := time.Now()
	for _, p := range t.peers {
		if p != nil && p.up.Load() {
			p.conn.SetWriteDeadline(now)
		}
	}
	go func() {
		for _, p := range t.peers {
			if p != nil && p.up.Load() {
				t.progress(p)
			}
		}
	}()
}

func (t *Transport) peer(rank int) (*peer, error) {
	if rank < 0 || rank >= len(t.peers) || t.peers[rank] == nil {
		return nil, fmt.Errorf("tcp: no peer rank %d (size %d, self %d)", rank, t.cfg.Size, t.cfg.Rank)
	}
	return t.peers[rank], nil
}

func (t *Transport) deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(t.cfg.Timeout)
}

// Send writes one data frame to peer. It returns once the frame is handed to
// the kernel; the peer's reader takes it from there.
func (t *Transport) Send(ctx context.Context, rank int, stream uint32, meta [4]uint64, payload []byte) error {
	if err := t.Err(); err != nil {
		return err
	}
	if t.closing.Load() {
		return ErrClosed
	}
	if len(payload) > MaxFrame {
		return fmt.Errorf("tcp: payload of %d bytes exceeds the %d-byte frame limit", len(payload), MaxFrame)
	}
	p, err := t.peer(rank)
	if err != nil {
		return err
	}
	if !p.up.Load() {
		if err := t.linkTo(ctx, p, false); err != nil {
			return err
		}
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	h := Header{Kind: KindData, Stream: stream, Meta: meta, Len: uint64(len(payload)), RawLen: uint64(len(payload))}
	if t.cfg.Compress && len(payload) >= CompressMin {
		if need := s2.MaxEncodedLen(len(payload)); cap(p.zbuf) < need {
			p.zbuf = make([]byte, need)
		}
		if z := s2.Encode(p.zbuf[:cap(p.zbuf)], payload); len(z) < len(payload) {
			payload = z
			h.Flags = flagS2
			h.Len = uint64(len(z))
		}
	}
	if err := p.conn.SetWriteDeadline(t.deadline(ctx)); err != nil {
		return t.sendFailure(p, err)
	}
	if err := t.Err(); err != nil {
		return err // (failed after the check above: its deadline may come after ours)
	}
	if err := p.write(&h, payload); err != nil {
		return t.sendFailure(p, err)
	}
	return nil
}

// write sends one frame; the caller holds p.wmu. A frame cut short (its
// deadline passed, or the transport failed: afterFailure) leaves the
// bytes not sent in p.rest, which go first on the next write, so that the
// peer's reader stays in step.
func (p *peer) write(h *Header, payload []byte) error {
	if len(p.rest) > 0 {
		p.iov[0], p.iov[1] = p.rest, nil
		err := p.writeIOV()
		p.rest = p.iov[0]
		p.iov[0] = nil
		if err != nil {
			return fmt.Errorf("the rest of an earlier frame, %d bytes: %w", len(p.rest), err)
		}
		p.rest = nil
	}
	if len(payload) <= smallFrame {
		need := HeaderSize + len(payload)
		if cap(p.wbuf) < need {
			p.wbuf = make([]byte, HeaderSize+smallFrame)
		}
		b := p.wbuf[:need]
		h.Encode(b)
		copy(b[HeaderSize:], payload)
		p.iov[0], p.iov[1] = b, nil
	} else {
		h.Encode(p.whdr[:])
		p.iov[0], p.iov[1] = p.whdr[:], payload
	}
	size := len(p.iov[0]) + len(p.iov[1])
	err := p.writeIOV()
	if left := len(p.iov[0]) + len(p.iov[1]); err != nil && left > 0 && left < size {
		p.rest = append(append(make([]byte, 0, left), p.iov[0]...), p.iov[1]...)
	}
	p.iov[0], p.iov[1] = nil, nil
	return err
}

// writeIOV writes p.iov, leaving in it what was not written.
func (p *peer) writeIOV() error {
	p.order.released()
	p.werr = nil
	err := p.rc.Write(p.writeFn)
	if err == nil {
		err = p.werr
	}
	return err
}

// sendFailure fails the transport for a send to p that failed with err.
func (t *Transport) sendFailure(p *peer, err error) error {
	// A peer that hangs up usually said why first (an abort naming the rank
	// that really failed): read what it sent before blaming it.
	t.progress(p)
	if ferr := t.Err(); ferr != nil {
		return ferr
	}
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		err = fmt.Errorf("send timed out: the peer is not reading (stuck, deadlocked, or in another call): %w", err)
	} else {
		err = fmt.Errorf("send failed (%w): %w", ErrPeerDied, err)
	}
	t.fail(&PeerError{Rank: p.rank, Addr: p.addr, Err: err})
	return t.Err()
}

// Post registers buf to receive the next frame from rank on stream and
// returns a ticket for Wait. Posting before the peer sends lets the reader
// place the data directly in buf; a frame that came first is copied in.
func (t *Transport) Post(rank int, stream uint32, buf []byte) (uint64, error) {
	p, err := t.peer(rank)
	if err != nil {
		return 0, err
	}
	if !p.up.Load() {
		t.reach(p)
	}
	return p.box(stream).post(buf), nil
}

// Wait blocks until the frame for ticket has arrived and returns its
// metadata and length. It returns early when ctx ends or the transport fails.
// For a frame larger than the posted buffer it returns the frame's metadata
// with an error wrapping ErrFrameTooLarge.
func (t *Transport) Wait(ctx context.Context, rank int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	p, err := t.peer(rank)
	if err != nil {
		return [4]uint64{}, 0, err
	}
	if !p.up.Load() {
		if err := t.linkTo(ctx, p, false); err != nil {
			return [4]uint64{}, 0, err
		}
	}
	m := p.box(stream)
	var start time.Time   // of the first poll that found nothing
	var timer *time.Timer // bounds the wait when ctx has no deadline
	var timeout <-chan time.Time
	var release *time.Timer // stallRelease after the wait began to sleep
	var released <-chan time.Time
	stalled := false
	defer func() {
		if timer != nil {
			timer.Stop()
			t.timers.Put(timer)
		}
		if release != nil {
			release.Stop()
			t.timers.Put(release)
		}
		if stalled {
			t.stalled.Add(-1)
		}
	}()
	// The first look reads nothing: a frame that came early (copied in by
	// Post) or that a pump already delivered is taken without a system
	// call — a stream of small frames from a peer far ahead made one
	// read(2) per frame here. pumpNow: read this peer's socket before
	// looking again, whether or not it polls readable, once the wait
	// counts as unfilled (the reader may have paused with this wait's
	// frame already read into its staging buffer).
	pumpNow, counted := false, false
	for polling, looked := true, false; ; looked = true {
		if polling && looked && (pumpNow || t.readable(p)) {
			t.progress(p)
		}
		pumpNow = false
		s, meta, n, err, ok := m.result(ticket)
		if ok {
			if err != nil {
				err = &PeerError{Rank: p.rank, Addr: p.addr, Err: err}
			}
			return meta, n, err
		}
		if !counted {
			counted, pumpNow = true, true
			m.waiting(ticket)
			continue
		}
		if polling {
			now := time.Now()
			if start.IsZero() {
				start = now
			}
			if waited := now.Sub(start); waited < t.cfg.Spin+YieldPhase {
				if waited >= t.cfg.Spin {
					runtime.Gosched()
					rawYield()
				}
				select {
				case <-t.failed:
				case <-ctx.Done():
				default:
					continue
				}
			}
			polling = false
		}
		if _, ok := ctx.Deadline(); !ok && timer == nil {
			timer = t.getTimer()
			timeout = timer.C
		}
		if release == nil && !stalled {
			release = t.timerFor(stallRelease)
			released = release.C
		}
		select {
		case <-released:
			// Long enough: read every peer again, paused or not, so a
			// peer's end behind its unread frames is seen (flow).
			released, stalled = nil, true
			t.stalled.Add(1)
			for _, q := range t.peers {
				if q != nil && q.up.Load() {
					t.progress(q)
				}
			}
			continue
		case <-timeout:
			m.unwait(ticket)
			return [4]uint64{}, 0, &PeerError{Rank: p.rank, Addr: p.addr,
				Err: fmt.Errorf("no data from this rank within %v (%w)", t.cfg.Timeout, shared.ErrTimeout)}
		case <-s.ready:
		case <-t.failed:
			// Data that arrived before the failure is still good.
			if _, meta, n, err, ok := m.result(ticket); ok && err == nil {
				return meta, n, nil
			}
			m.unwait(ticket)
			return [4]uint64{}, 0, t.Err()
		case <-ctx.Done():
			m.unwait(ticket)
			return [4]uint64{}, 0, &PeerError{Rank: p.rank, Addr: p.addr,
				Err: fmt.Errorf("waiting for data from this rank: %w", ctx.Err())}
		}
	}
}

// readable tells whether p's socket has something to read. Polling is
// lock-free in the kernel, unlike read(2), which takes the socket's lock and
// so, when a waiting call spins on it, contends with the peer's writes
// delivering data into the same socket.
func (t *Transport) readable(p *peer) bool {
	p.rc.Control(p.pollFn)
	return p.readable.Load()
}

// getTimer returns a pooled timer running for cfg.Timeout.
func (t *Transport) getTimer() *time.Timer { return t.timerFor(t.cfg.Timeout) }

// timerFor returns a timer from the pool, set to fire after d.
func (t *Transport) timerFor(d time.Duration) *time.Timer {
	tm, _ := t.timers.Get().(*time.Timer)
	if tm == nil {
		return time.NewTimer(d)
	}
	tm.Reset(d)
	return tm
}

// Abort tells every peer that this rank gives up with err, so their pending
// calls fail at once with err's text instead of waiting for a deadline, and
// fails this transport. It never blocks for long.
func (t *Transport) Abort(err error) {
	t.fail(err)
	if t.closing.Load() {
		return
	}
	msg := []byte(err.Error())
	if len(msg) > maxAbortText {
		msg = msg[:maxAbortText]
	}
	var wg sync.WaitGroup
	for _, p := range t.peers {
		if p == nil || !p.up.Load() || p.bye.Load() {
			continue
		}
		wg.Add(1)
		go func(p *peer) {
			defer wg.Done()
			if !tryLock(&p.wmu, 500*time.Millisecond) {
				// A frame holds the connection, stuck on a peer that does
				// not read (a control message, whose own deadline came
				// after the failure's): end its write now. The connection
				// is never closed here — the peer would take this rank,
				// alive, for one that ended (Ended).
				p.conn.SetWriteDeadline(time.Now())
				if !tryLock(&p.wmu, 1500*time.Millisecond) {
					return
				}
			}
			defer p.wmu.Unlock()
			p.conn.SetWriteDeadline(time.Now().Add(time.Second))
			h := Header{Kind: KindAbort, Len: uint64(len(msg)), RawLen: uint64(len(msg))}
			// A peer that does not read within the second gets no abort
			// (what was written of it goes first on the next write): the
			// connection stays, for the agreement's control messages.
			p.write(&h, msg)
		}(p)
	}
	wg.Wait()
}

// SendControl sends a small message (at most 64 KiB) to rank's
// Config.Control, beside the data on the same connection: the peer's
// reader takes it whatever calls the peer is in. It gives up within a
// second when a data frame being sent holds the connection (a peer that
// stopped reading).
func (t *Transport) SendControl(rank int, msg []byte) error {
	if len(msg) > maxAbortText {
		return fmt.Errorf("tcp: control message of %d bytes exceeds %d", len(msg), maxAbortText)
	}
	if t.closing.Load() {
		return ErrClosed
	}
	p, err := t.peer(rank)
	if err != nil {
		return err
	}
	if !p.up.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.HandshakeTimeout)
		err := t.linkTo(ctx, p, true)
		cancel()
		if err != nil {
			return err
		}
	}
	if p.bye.Load() {
		return p.left.Load()
	}
	if !tryLock(&p.wmu, time.Second) {
		return &PeerError{Rank: rank, Addr: p.addr, Err: errors.New("control message: a data frame to this rank has been stuck for a second (it does not read)")}
	}
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(time.Second))
	h := Header{Kind: KindControl, Len: uint64(len(msg)), RawLen: uint64(len(msg))}
	if err := p.write(&h, msg); err != nil {
		return &PeerError{Rank: rank, Addr: p.addr, Err: fmt.Errorf("control message: %w", err)}
	}
	return nil
}

func tryLock(mu *sync.Mutex, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for !mu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// closeWait bounds how long Close waits for the peers' goodbyes.
const closeWait = 10 * time.Second

// Close says goodbye to every peer, waits (bounded by ctx and closeWait) until each has
// said goodbye too, and closes the connections. Errors from several peers are
// gathered into one.
func (t *Transport) Close(ctx context.Context) error { return t.CloseWith(ctx, "") }

// CloseWith is Close with a farewell: a peer still waiting for this rank's
// data fails with a *LeftError carrying it (at most 64 KiB are sent).
func (t *Transport) CloseWith(ctx context.Context, farewell string) error {
	if len(farewell) > maxAbortText {
		farewell = farewell[:maxAbortText]
	}
	if t.closing.Swap(true) {
		return nil
	}
	close(t.shut)
	t.stopLinking()
	var errs *multierror.Error
	healthy := t.Err() == nil
	for _, p := range t.peers {
		if p == nil || !p.up.Load() {
			continue
		}
		if healthy && tryLock(&p.wmu, time.Second) {
			p.conn.SetWriteDeadline(t.deadline(ctx))
			h := Header{Kind: KindBye, Len: uint64(len(farewell)), RawLen: uint64(len(farewell))}
			if err := p.write(&h, []byte(farewell)); err != nil {
				errs = multierror.Append(errs, &PeerError{Rank: p.rank, Addr: p.addr, Err: fmt.Errorf("goodbye: %w", err)})
			}
			p.conn.CloseWrite()
			p.wmu.Unlock()
		}
	}
	done := make(chan struct{})
	go func() { t.readers.Wait(); close(done) }()
	if healthy {
		bound := time.NewTimer(closeWait)
		select {
		case <-done:
		case <-ctx.Done():
		case <-bound.C:
		}
		bound.Stop()
	}
	for _, p := range t.peers {
		if p != nil && p.up.Load() {
			p.conn.Close()
		}
	}
	<-done
	t.fail(ErrClosed)
	return errs.ErrorOrNil()
}

func (t *Transport) readFailed(p *peer, err error) {
	if surelyEnded(err) {
		p.sure.Store(true)
	}
	p.gone.Store(true)
	if t.closing.Load() {
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = ErrPeerDied
	} else {
		err = fmt.Errorf("%w: %w", ErrPeerDied, err)
	}
	t.fail(&PeerError{Rank: p.rank, Addr: p.addr, Err: err})
}
