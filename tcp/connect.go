package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
)

// Listen opens the data listener a rank advertises to its peers, on host
// (an address of the interface peers reach this rank by) and a free port.
func Listen(host string) (*net.TCPListener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: listen on %s: %w", host, err)
	}
	return ln.(*net.TCPListener), nil
}

// keepAlive detects a peer whose host vanished (no FIN, no RST) within
// about 15 seconds even while the connection is idle: probes after 5 s
// of silence, 10 of them 1 s apart. Ten, not three, so that lost probes
// do not close a live connection: with 3 (2 s apart) an idle connection
// died of a 12 s outage, and on a link losing 1% of its packets about
// once in 130,000 silences (a probe or its answer lost three times in a
// row), which a large job's idle connections meet within a day; 10 lost
// in a row take a 1% link 10¹⁷ silences (TestKeepAliveOutlastsOutage;
// the kernel counts probes in whole seconds).
func keepAlive() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: time.Second, Count: 10}
}

func tune(c *net.TCPConn, cfg *Config) error {
	if err := c.SetNoDelay(true); err != nil {
		return err
	}
	if err := c.SetKeepAliveConfig(keepAlive()); err != nil {
		return err
	}
	if cfg.SocketBuffer > 0 {
		if err := c.SetReadBuffer(cfg.SocketBuffer); err != nil {
			return err
		}
		if err := c.SetWriteBuffer(cfg.SocketBuffer); err != nil {
			return err
		}
	}
	return nil
}

// Connect builds the full mesh: rank r dials every lower rank at addrs[j] and
// accepts every higher rank on ln. Connections that fail the handshake
// (strangers, wrong token, wrong job) are dropped without stalling the others.
// It returns when all Size−1 peers are connected, or with an error naming the
// ranks still missing when ctx ends. ln is closed on return.
//
// With cfg.Lazy it connects nobody: it returns at once, and ln serves
// until Close, as ranks first need each other (see lazyMesh).
func Connect(ctx context.Context, cfg Config, ln *net.TCPListener, addrs []string) (*Transport, error) {
	cfg.defaults()
	serving := false // a lazy transport serves ln until Close
	defer func() {
		if !serving && ln != nil {
			ln.Close()
		}
	}()
	if len(addrs) != cfg.Size {
		return nil, fmt.Errorf("tcp: %d addresses for %d ranks", len(addrs), cfg.Size)
	}
	if err := CheckSocketBuffer(cfg.SocketBuffer); err != nil {
		return nil, fmt.Errorf("tcp: Config.SocketBuffer: %w", err)
	}
	t := &Transport{cfg: cfg, peers: make([]*peer, cfg.Size), failed: make(chan struct{}), shut: make(chan struct{})}
	if cfg.Size == 1 {
		return t, nil
	}
	if cfg.Lazy {
		for r, addr := range addrs {
			if r != cfg.Rank {
				t.peers[r] = t.newPeer(r, addr)
			}
		}
		serving = true
		t.startLazy(ln)
		go t.watchHosts()
		return t, nil
	}

	results := make(chan result, cfg.Size)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Accept the higher ranks.
	want := cfg.Size - 1 - cfg.Rank
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		stop := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				check := func(id Identity) error {
					if id.Purpose != PurposeData || int(id.To) != cfg.Rank || int(id.Size) != cfg.Size ||
						int(id.From) <= cfg.Rank || int(id.From) >= cfg.Size {
						return fmt.Errorf("unexpected identity %+v", id)
					}
					return nil
				}
				id, err := AcceptHandshake(c, cfg.Token, check, Within(ctx, cfg.HandshakeTimeout))
				if err != nil {
					// A stranger or a confused peer: drop it, keep waiting for the real ones.
					c.Close()
					return
				}
				if err := tune(c, &cfg); err != nil {
					c.Close()
					results <- result{rank: int(id.From), err: err}
					return
				}
				results <- result{rank: int(id.From), conn: c}
			}()
		}
	}()

	// Dial the lower ranks, retrying refused connections until ctx ends.
	for j := 0; j < cfg.Rank; j++ {
		go func(j int) {
			c, err := dial(ctx, &cfg, j, addrs[j])
			results <- result{rank: j, conn: c, err: err}
		}(j)
	}

	var errs *multierror.Error
	answered := make([]bool, cfg.Size) // a dial's or an accepted handshake's result came
	pending := cfg.Rank + want
	for pending > 0 {
		select {
		case r := <-results:
			answered[r.rank] = true
			switch {
			case r.err != nil:
				errs = multierror.Append(errs, &PeerError{Rank: r.rank, Addr: addrs[r.rank], Err: r.err})
				pending--
			case t.peers[r.rank] != nil:
				r.conn.Close() // a duplicate: keep the first
			default:
				t.peers[r.rank] = t.newPeer(r.rank, addrs[r.rank])
				t.peers[r.rank].conn = r.conn
				pending--
			}
		case <-ctx.Done():
			pending = 0
		}
	}
	ctxErr := ctx.Err()
	cancel()
	<-acceptDone
	var missing []int
	for j, p := range t.peers {
		if p == nil && j != cfg.Rank {
			missing = append(missing, j)
		}
	}
	if len(missing) > 0 {
		for _, p := range t.peers {
			if p != nil {
				p.conn.Close()
			}
		}
		sort.Ints(missing)
		return nil, fmt.Errorf("tcp: rank %d could not connect to ranks %v: %w", cfg.Rank, missing,
			whyUnconnected(&cfg, addrs, missing, answered, results, errs, ctxErr))
	}
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		if err := t.attach(p, p.conn); err != nil {
			err = fmt.Errorf("tcp: rank %d: connection to rank %d: %w", cfg.Rank, p.rank, err)
			t.Abort(err)
			t.Close(ctx)
			return nil, err
		}
	}
	go t.watchHosts()
	return t, nil
}

func dial(ctx context.Context, cfg *Config, rank int, addr string) (*net.TCPConn, error) {
	d := net.Dialer{KeepAliveConfig: keepAlive()}
	backoff := 10 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			tc := c.(*net.TCPConn)
			id := Identity{Purpose: PurposeData, From: int32(cfg.Rank), To: int32(rank), Size: int32(cfg.Size)}
			if err = DialHandshake(tc, cfg.Token, id, Within(ctx, cfg.HandshakeTimeout)); err == nil {
				if err = tune(tc, cfg); err == nil {
					return tc, nil
				}
			}
			tc.Close()
			if errors.Is(err, ErrAuth) {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// result is one peer's connection from Connect's dials and accepts.
type result struct {
	rank int
	conn *net.TCPConn
	err  error
}

// ErrNotReached is wrapped by Connect's error when higher ranks never
// connected to this rank's address: their hosts may not reach it.
var ErrNotReached = errors.New("their hosts may not reach it")

// whyUnconnected says why the mesh lacks the missing ranks: for a lower
// rank, what dialing it last met (its dial ends with the mesh's context:
// up to a second is given for its answer on results); for a higher rank
// that never dialed in, the address it was to reach, which its host may
// not reach (a loopback address, another network's). errs holds the
// failures already seen; ctxErr is why the mesh stopped waiting.
func whyUnconnected(cfg *Config, addrs []string, missing []int, answered []bool, results <-chan result, errs *multierror.Error, ctxErr error) error {
	late := time.NewTimer(time.Second)
	defer late.Stop()
	for _, j := range missing {
		for j < cfg.Rank && !answered[j] {
			select {
			case r := <-results:
				answered[r.rank] = true
				if r.err != nil {
					errs = multierror.Append(errs, &PeerError{Rank: r.rank, Addr: addrs[r.rank], Err: r.err})
				} else {
					r.conn.Close()
				}
			case <-late.C:
				answered[j] = true // (gave up on it)
			}
		}
	}
	var silent []int
	for _, j := range missing {
		if j > cfg.Rank && !answered[j] {
			silent = append(silent, j)
		}
	}
	if len(silent) > 0 {
		errs = multierror.Append(errs, fmt.Errorf("ranks %v never connected to this rank's address %s: %w", silent, addrs[cfg.Rank], ErrNotReached))
	}
	if errs == nil {
		return ctxErr
	}
	errs.ErrorFormat = func(es []error) string {
		texts := make([]string, len(es))
		for i, e := range es {
			texts[i] = e.Error()
		}
		return strings.Join(texts, "; ")
	}
	return errs
}
