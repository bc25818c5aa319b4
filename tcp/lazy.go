package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	shared "github.com/gorun/gorun/mailbox"
)

// With Config.Lazy a connection is opened when one of its two ranks first
// needs it: a send, a posted receive (so that a rank waiting for a peer's
// data hears at once when that peer is gone), a control message, or Reach.
// Either rank may dial. When both dial at once, both handshakes reach
// their verdicts and the dial of the lower rank wins: the higher rank's
// listener keeps it, the lower rank's refuses the other (refuseDuplicate),
// and the higher rank's dialer then waits for the winner to arrive. A
// refused TCP connection means the peer's listener is closed — it closed
// its group or its process ended — and it counts as gone, with a
// LeftError, like a goodbye: waits for its data take a last look, then
// fail naming it.

// linkState is where a peer's connection stands (lazy mode).
type linkState uint8

const (
	linkIdle    linkState = iota // none, and none under way
	linkDialing                  // this rank is dialing the peer
	linkTaken                    // a connection is kept (attached, or about to be)
	linkFailed                   // the peer could not be reached
)

// lazyMesh is a lazy transport's listener and the goroutines that accept
// and dial.
type lazyMesh struct {
	mu     sync.Mutex // guards every peer's link, and the start of new dials
	ln     *net.TCPListener
	ctx    context.Context // ends when the transport closes
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop, handshakes and dials
}

// newPeer makes the state of one peer, without a connection yet.
func (t *Transport) newPeer(rank int, addr string) *peer {
	p := &peer{rank: rank, addr: addr, order: &t.order, rs: recvState{order: &t.order},
		boxes: make(map[uint32]*mailbox), flow: flow{stalled: &t.stalled}, linked: make(chan struct{})}
	t.bindReader(p)
	return p
}

// attach makes c p's connection and starts its reader. Only the party
// that set p.link to linkTaken (or the eager mesh) calls it.
func (t *Transport) attach(p *peer, c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	p.conn, p.rc = c, rc
	p.rs.stage = make([]byte, stageSize)
	// Up before the reader starts: whatever the peer sends is taken only
	// once the connection counts as up, so an Abort that follows a
	// message from this peer reaches it too.
	p.up.Store(true)
	t.readers.Add(1)
	go t.read(p)
	close(p.linked)
	return nil
}

// startLazy serves ln for the transport's life: peers dial in when they
// first need this rank.
func (t *Transport) startLazy(ln *net.TCPListener) {
	t.lazy.ln = ln
	t.lazy.ctx, t.lazy.cancel = context.WithCancel(context.Background())
	t.lazy.wg.Add(1)
	go func() {
		defer t.lazy.wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return // closed by stopLinking
			}
			t.lazy.wg.Add(1)
			go func() {
				defer t.lazy.wg.Done()
				t.acceptPeer(c)
			}()
		}
	}()
}

// stopLinking ends the accept loop, the handshakes and the dials under
// way, and waits for them: after it no connection is added.
func (t *Transport) stopLinking() {
	if t.lazy.ln == nil {
		return
	}
	t.lazy.mu.Lock()
	t.lazy.cancel()
	t.lazy.ln.Close()
	t.lazy.mu.Unlock()
	t.lazy.wg.Wait()
}

// acceptPeer runs the listening side of one connection and keeps it when
// no other connection with that rank is kept or preferred.
func (t *Transport) acceptPeer(c *net.TCPConn) {
	cfg := &t.cfg
	stop := context.AfterFunc(t.lazy.ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	check := func(id Identity) error {
		if id.Purpose != PurposeData || int(id.To) != cfg.Rank || int(id.Size) != cfg.Size ||
			id.From < 0 || int(id.From) >= cfg.Size || int(id.From) == cfg.Rank {
			return fmt.Errorf("unexpected identity %+v", id)
		}
		return nil
	}
	var kept *peer
	decide := func(id Identity) byte {
		p := t.peers[id.From]
		t.lazy.mu.Lock()
		defer t.lazy.mu.Unlock()
		switch {
		case t.closing.Load() || t.lazy.ctx.Err() != nil:
			return refuseClosing
		case p.link == linkTaken || p.link == linkFailed:
			return refuseDuplicate
		case p.link == linkDialing && int(id.From) > cfg.Rank:
			return refuseDuplicate // this rank's own dial wins
		}
		p.link = linkTaken
		kept = p
		return refuseNone
	}
	_, err := acceptHandshake(c, cfg.Token, check, decide, cfg.HandshakeTimeout)
	if kept == nil {
		c.Close() // a stranger, a duplicate, or too late
		return
	}
	if err == nil {
		err = tune(c, cfg)
	}
	if err == nil {
		err = t.attach(kept, c)
	}
	if err != nil {
		// The handshake broke after the verdict: let either side try anew.
		// If this is the transport closing, the dialer, should it have
		// heard the verdict, hears that this rank left.
		if t.lazy.ctx.Err() != nil {
			abandon(c)
		}
		c.Close()
		t.lazy.mu.Lock()
		kept.link = linkIdle
		t.lazy.mu.Unlock()
	}
}

// reach starts connecting to p in the background unless a connection is
// kept or under way (lazy mode only).
func (t *Transport) reach(p *peer) {
	if !t.cfg.Lazy || p.up.Load() {
		return
	}
	t.lazy.mu.Lock()
	defer t.lazy.mu.Unlock()
	if p.link != linkIdle || t.closing.Load() || t.lazy.ctx.Err() != nil {
		return
	}
	p.link = linkDialing
	t.lazy.wg.Add(1)
	go t.dialPeer(p)
}

// Reach starts connecting to rank in the background when the transport
// is lazy and has no connection with it: a transport beside this one that
// carries rank's data calls it, so that rank's end (a goodbye, or its
// connection lost) is heard here as with a full mesh.
func (t *Transport) Reach(rank int) {
	if rank >= 0 && rank < len(t.peers) && t.peers[rank] != nil {
		t.reach(t.peers[rank])
	}
}

// Linked reports how many peers this rank holds a connection with.
func (t *Transport) Linked() int {
	n := 0
	for _, p := range t.peers {
		if p != nil && p.up.Load() {
			n++
		}
	}
	return n
}

// dialPeer connects to p for reach: refused means p's listener is closed
// (unreachable); a duplicate verdict means p's own dial is the one kept,
// so it waits for that; other failures are retried until the handshake
// timeout has passed three times.
func (t *Transport) dialPeer(p *peer) {
	defer t.lazy.wg.Done()
	ctx := t.lazy.ctx
	giveUp := time.Now().Add(3 * t.cfg.HandshakeTimeout)
	backoff := 10 * time.Millisecond
	for {
		c, err := t.dialOnce(ctx, p)
		switch {
		case err == nil:
			t.lazy.mu.Lock()
			mine := p.link == linkDialing
			if mine {
				p.link = linkTaken
			}
			t.lazy.mu.Unlock()
			if !mine { // cannot happen: the peer refuses a second connection
				c.Close()
				return
			}
			if err := t.attach(p, c); err != nil {
				c.Close()
				t.unreachable(p, err, linkTaken)
			}
			return
		case errors.Is(err, errDuplicate):
			// The peer keeps the connection it dialed: it arrives on
			// the listener. Wait for it, and dial again if it does not
			// come (the peer's dial failed after all).
			t.lazy.mu.Lock()
			if p.link == linkDialing {
				p.link = linkIdle
			}
			t.lazy.mu.Unlock()
			wait := time.NewTimer(t.cfg.HandshakeTimeout)
			select {
			case <-p.linked:
			case <-ctx.Done():
			case <-wait.C:
				t.lazy.mu.Lock()
				again := p.link == linkIdle
				if again {
					p.link = linkDialing
				}
				t.lazy.mu.Unlock()
				if again {
					continue
				}
			}
			wait.Stop()
			return
		case ctx.Err() != nil:
			t.unreachable(p, errors.New("the transport closed"), linkDialing)
			return
		case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, ErrAuth), time.Now().After(giveUp):
			t.unreachable(p, err, linkDialing)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// dialOnce dials p and runs the handshake, within the handshake timeout.
func (t *Transport) dialOnce(ctx context.Context, p *peer) (*net.TCPConn, error) {
	d := net.Dialer{KeepAliveConfig: keepAlive(), Timeout: t.cfg.HandshakeTimeout}
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	id := Identity{Purpose: PurposeData, From: int32(t.cfg.Rank), To: int32(p.rank), Size: int32(t.cfg.Size)}
	if err = DialHandshake(tc, t.cfg.Token, id, t.cfg.HandshakeTimeout); err == nil {
		err = tune(tc, &t.cfg)
	}
	if err != nil {
		if ctx.Err() != nil {
			abandon(tc)
		}
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// abandon says goodbye on c, a connection this rank gives up while its
// transport closes, in case the other end took it — its verdict sent, its
// reader started — before this end heard: that end then reads that this
// rank left, not that it died. Where the other end had not taken it, the
// frame ends its handshake as any other stray bytes would.
func abandon(c *net.TCPConn) {
	var b [HeaderSize]byte
	h := Header{Kind: KindBye}
	h.Encode(b[:])
	c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write(b[:])
	c.CloseWrite()
}

// unreachable records that p cannot be reached, unless its link has left
// state from meanwhile (a connection from p was kept after all): p
// counts as gone, with a LeftError, and whoever waits for the link hears why.
func (t *Transport) unreachable(p *peer, err error, from linkState) {
	t.lazy.mu.Lock()
	if p.link != from {
		t.lazy.mu.Unlock()
		return
	}
	p.link = linkFailed
	t.lazy.mu.Unlock()
	p.left.Store(&LeftError{Rank: p.rank, Farewell: "(it takes no connections: its group is closed, or its process ended)"})
	p.unreachable = &PeerError{Rank: p.rank, Addr: p.addr, Err: fmt.Errorf("cannot connect (it closed its group, or its process ended): %w", err)}
	if surelyEnded(err) {
		p.sure.Store(true)
	}
	p.gone.Store(true)
	close(p.linked)
}

// linkTo waits until p is connected (starting the connection if none is
// under way), or cannot be, the transport fails (unless the connection
// is for control messages, which a failed transport still carries: the
// survivors agree over them), or ctx ends (the transport's timeout when
// ctx has no deadline).
func (t *Transport) linkTo(ctx context.Context, p *peer, control bool) error {
	t.reach(p)
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		tm := t.getTimer()
		defer func() {
			tm.Stop()
			t.timers.Put(tm)
		}()
		timeout = tm.C
	}
	failed := t.failed
	if control {
		failed = nil
	}
	select {
	case <-p.linked:
		if p.unreachable != nil {
			return p.unreachable
		}
		return nil
	case <-failed:
		return t.Err()
	case <-ctx.Done():
		return &PeerError{Rank: p.rank, Addr: p.addr, Err: fmt.Errorf("connecting: %w", ctx.Err())}
	case <-timeout:
		return &PeerError{Rank: p.rank, Addr: p.addr, Err: fmt.Errorf("no connection within %v (%w)", t.cfg.Timeout, shared.ErrTimeout)}
	}
}
