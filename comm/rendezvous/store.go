// Package rendezvous is the small key-value store rank 0 serves while a job
// starts (like torch's TCPStore): ranks publish the addresses of their data
// ports and wait for each other's. Every connection is authenticated with
// the job token, like the data connections.
package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/tcp"
)

const (
	opSet   = 1
	opGet   = 2 // waits until the key exists or the request's timeout passes
	opCheck = 3 // answers at once whether the key exists
	// opGetMany waits until every key of a list exists (or the timeout
	// passes) and answers with all their values: one round trip where a
	// rank needs a value from each of hundreds of ranks.
	opGetMany = 4

	statusOK      = 0
	statusMissing = 1

	maxKey   = 1 << 10
	maxValue = 1 << 20
)

// ErrMissing is returned by Get when the key did not appear in time.
var ErrMissing = errors.New("key not set")

// Server serves the store on a listener until Close.
type Server struct {
	ln    net.Listener
	token []byte
	size  int

	mu      sync.Mutex
	data    map[string][]byte
	changed chan struct{} // closed and replaced on every set

	wg     sync.WaitGroup
	conns  map[net.Conn]struct{}
	joined map[int32]bool // ranks with a live connection
	closed bool
}

// Serve starts serving on ln for a job of size ranks.
func Serve(ln net.Listener, token []byte, size int) *Server {
	s := &Server{ln: ln, token: token, size: size, data: map[string][]byte{},
		changed: make(chan struct{}), conns: map[net.Conn]struct{}{}, joined: map[int32]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr returns the address the store listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server and drops every connection.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// WaitIdle waits until no client is connected, or timeout passes.
func (s *Server) WaitIdle(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) accept() {
	defer s.wg.Done()
	pause := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && s.open() {
				// Out of descriptors or buffers for a moment (EMFILE,
				// ENOBUFS): the ranks still to come must be heard, as
				// net/http's server goes on after such errors. (open, not
				// ErrClosed alone: a listener that fails otherwise once
				// closed must not keep Close waiting.)
				time.Sleep(pause)
				pause = min(2*pause, time.Second)
				continue
			}
			return
		}
		pause = 5 * time.Millisecond
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			holds := int32(-1) // the rank this connection joined as
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				if holds >= 0 {
					delete(s.joined, holds)
				}
				s.mu.Unlock()
				c.Close()
			}()
			check := func(id tcp.Identity) error {
				if id.Purpose != tcp.PurposeStore || int(id.Size) != s.size || id.From < 0 || int(id.From) >= s.size {
					return fmt.Errorf("unexpected identity %+v", id)
				}
				return nil
			}
			// A second process joining as a rank that has a live
			// connection is turned away, and recorded for the join's
			// report: two processes given the same rank.
			taken := func(id tcp.Identity) bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.joined[id.From] {
					s.addToList(DuplicatesKey, strconv.Itoa(int(id.From)))
					return true
				}
				s.joined[id.From], holds = true, id.From
				return false
			}
			id, err := tcp.AcceptHandshakeUnless(c, s.token, check, taken, 10*time.Second)
			if err != nil {
				switch rank := id.Purpose == tcp.PurposeStore && id.From >= 0 && int(id.From) < s.size; {
				case rank && id.Size != int32(s.size):
					// Likely one of this job's ranks, started with
					// another world size: for the join's report.
					s.mu.Lock()
					s.addToList(RefusedKey, fmt.Sprintf("%d:%d", id.From, id.Size))
					s.mu.Unlock()
				case rank && errors.Is(err, tcp.ErrAuth):
					// Likely one of this job's ranks, given another
					// token (GORUN_TOKEN set on one node only).
					s.mu.Lock()
					s.addToList(WrongTokenKey, strconv.Itoa(int(id.From)))
					s.mu.Unlock()
				}
				return // a stranger: dropped
			}
			s.set(ReachedKey(int(id.From)), nil)
			s.serve(c)
		}()
	}
}

// ReachedKey is the key the server sets when rank has connected to it
// and shown the job's token: a rank that reached the store but never
// published its address is told apart from one that never arrived.
func ReachedKey(rank int) string { return "gorun/reached/" + strconv.Itoa(rank) }

// Records the server keeps of dialers it turned away, for the join's
// report; each value is a comma-separated list.
const (
	// DuplicatesKey lists the ranks a second process tried to join as
	// while the first was connected.
	DuplicatesKey = "gorun/duplicates"
	// RefusedKey lists, as RANK:SIZE, the dialers that announced
	// themselves as a rank of this job but of a job of SIZE ranks.
	RefusedKey = "gorun/refused"
	// WrongTokenKey lists the ranks of this job's size whose dialers did
	// not prove the job's token.
	WrongTokenKey = "gorun/wrong-token"
)

// addToList adds item to the comma-separated list under key, once. The
// caller holds s.mu.
func (s *Server) addToList(key, item string) {
	old := string(s.data[key])
	if slices.Contains(strings.Split(old, ","), item) {
		return
	}
	if old != "" {
		item = old + "," + item
	}
	s.setLocked(key, []byte(item))
}

// open reports whether Close has not been called.
func (s *Server) open() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed
}

// set stores val under key and wakes the waiting requests.
func (s *Server) set(key string, val []byte) {
	s.mu.Lock()
	s.setLocked(key, val)
	s.mu.Unlock()
}

// setLocked is set for a caller holding s.mu.
func (s *Server) setLocked(key string, val []byte) {
	s.data[key] = val
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) serve(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		op, key, val, timeout, err := readRequest(r)
		if err != nil {
			return
		}
		var status byte = statusOK
		var out []byte
		switch op {
		case opSet:
			s.set(key, val)
		case opCheck:
			s.mu.Lock()
			if _, ok := s.data[key]; !ok {
				status = statusMissing
			}
			s.mu.Unlock()
		case opGet:
			out, status = s.waitFor(key, timeout)
		case opGetMany:
			keys, err := decodeKeys(val)
			if err != nil {
				return
			}
			out, status = s.waitForAll(keys, timeout)
		default:
			return
		}
		if err := writeResponse(c, status, out); err != nil {
			return
		}
	}
}

// waitFor returns key's value once it is set, or statusMissing after timeout.
func (s *Server) waitFor(key string, timeout time.Duration) ([]byte, byte) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		v, ok := s.data[key]
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return v, statusOK
		}
		select {
		case <-ch:
		case <-deadline.C:
			return nil, statusMissing
		}
	}
}

// waitForAll returns the values of keys, each behind its 4-byte length,
// once all are set; statusMissing after timeout, or when they would not
// fit in one response.
func (s *Server) waitForAll(keys []string, timeout time.Duration) ([]byte, byte) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	next := 0 // keys before next are set (keys are never removed)
	for {
		s.mu.Lock()
		for next < len(keys) {
			if _, ok := s.data[keys[next]]; !ok {
				break
			}
			next++
		}
		ch := s.changed
		if next == len(keys) {
			out, size := []byte(nil), 0
			for _, k := range keys {
				size += 4 + len(s.data[k])
			}
			if size > maxValue {
				s.mu.Unlock()
				return nil, statusMissing
			}
			out = make([]byte, 0, size)
			for _, k := range keys {
				out = binary.LittleEndian.AppendUint32(out, uint32(len(s.data[k])))
				out = append(out, s.data[k]...)
			}
			s.mu.Unlock()
			return out, statusOK
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return nil, statusMissing
		}
	}
}

// encodeKeys lays out a key list as opGetMany's value: each key behind
// its 2-byte length.
func encodeKeys(keys []string) ([]byte, error) {
	var b []byte
	for _, k := range keys {
		if len(k) > maxKey {
			return nil, fmt.Errorf("store: key of %d bytes", len(k))
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
	}
	if len(b) > maxValue {
		return nil, fmt.Errorf("store: %d keys take %d bytes, more than one request carries", len(keys), len(b))
	}
	return b, nil
}

func decodeKeys(b []byte) ([]string, error) {
	var keys []string
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, errors.New("store: truncated key list")
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return nil, errors.New("store: truncated key list")
		}
		keys = append(keys, string(b[2:2+n]))
		b = b[2+n:]
	}
	return keys, nil
}

// decodeValues splits opGetMany's answer into n values.
func decodeValues(b []byte, n int) ([][]byte, error) {
	vals := make([][]byte, n)
	for i := range vals {
		if len(b) < 4 {
			return nil, fmt.Errorf("store: answer holds %d of %d values", i, n)
		}
		l := int(binary.LittleEndian.Uint32(b))
		if len(b)-4 < l {
			return nil, fmt.Errorf("store: value %d of %d is truncated", i, n)
		}
		vals[i] = b[4 : 4+l : 4+l]
		b = b[4+l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("store: %d bytes after %d values", len(b), n)
	}
	return vals, nil
}

func readRequest(r io.Reader) (op byte, key string, val []byte, timeout time.Duration, err error) {
	var hdr [1 + 2 + 4 + 4]byte
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	op = hdr[0]
	kl := binary.LittleEndian.Uint16(hdr[1:])
	vl := binary.LittleEndian.Uint32(hdr[3:])
	timeout = time.Duration(binary.LittleEndian.Uint32(hdr[7:])) * time.Millisecond
	if kl > maxKey || vl > maxValue {
		return 0, "", nil, 0, fmt.Errorf("store request too large (key %d, value %d bytes)", kl, vl)
	}
	buf := make([]byte, int(kl)+int(vl))
	if _, err = io.ReadFull(r, buf); err != nil {
		return
	}
	return op, string(buf[:kl]), buf[kl:], timeout, nil
}

func writeResponse(w io.Writer, status byte, val []byte) error {
	b := make([]byte, 5+len(val))
	b[0] = status
	binary.LittleEndian.PutUint32(b[1:], uint32(len(val)))
	copy(b[5:], val)
	_, err := w.Write(b)
	return err
}

// Client talks to the store. Its methods may be called from one goroutine at a time.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	addr string
}

// Dial connects to the store at addr, retrying until ctx ends (rank 0 may
// start later than the others).
func Dial(ctx context.Context, addr string, token []byte, rank, size int) (*Client, error) {
	return DialNoting(ctx, addr, token, rank, size, 0, nil)
}

// DialNoting is Dial that, once it has tried for noteAfter without
// success, calls note (from another goroutine) with that time and the
// last failed attempt's error — nil while the first attempt still waits
// for the store's handshake (a listening socket nobody serves yet) — so
// that a rank can say what it waits for before its deadline ends the wait
// (note nil: no note).
func DialNoting(ctx context.Context, addr string, token []byte, rank, size int, noteAfter time.Duration, note func(waited time.Duration, last error)) (*Client, error) {
	var d net.Dialer
	backoff := 20 * time.Millisecond
	var (
		mu   sync.Mutex
		last error
		done bool // the dial returned: no note
	)
	if note != nil {
		timer := time.AfterFunc(noteAfter, func() {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				note(noteAfter, last)
			}
		})
		defer func() {
			timer.Stop()
			mu.Lock()
			done = true
			mu.Unlock()
		}()
	}
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			id := tcp.Identity{Purpose: tcp.PurposeStore, From: int32(rank), To: -1, Size: int32(size)}
			// A listener that accepts and says nothing (not a gorun
			// store) must not hold the join past its deadline.
			if err = tcp.DialHandshake(c, token, id, tcp.Within(ctx, 10*time.Second)); err == nil {
				return &Client{conn: c, r: bufio.NewReader(c), addr: addr}, nil
			}
			c.Close()
			if errors.Is(err, tcp.ErrAuth) {
				return nil, fmt.Errorf("rendezvous store at %s: %w (GORUN_TOKEN must be the same on every rank: set on one node only, or another job's store at this address?)", addr, err)
			}
			if errors.Is(err, tcp.ErrTaken) {
				return nil, fmt.Errorf("rendezvous store at %s refused rank %d: another process has joined as rank %d (the rank, or the node rank, given twice?): %w", addr, rank, rank, err)
			}
			if errors.Is(err, tcp.ErrIdentity) {
				return nil, fmt.Errorf("rendezvous store at %s refused rank %d of a job of %d ranks: its job has another number of ranks (the world size, WORLD_SIZE, must be the same on every rank): %w", addr, rank, size, err)
			}
		}
		mu.Lock()
		last = err
		mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("rendezvous store at %s (MASTER_ADDR:MASTER_PORT) not reachable: %w (last error: %v)", addr, ctx.Err(), err)
		case <-time.After(backoff):
		}
		if backoff < 500*time.Millisecond {
			backoff *= 2
		}
	}
}

// LocalAddr returns this end's address: the interface that reaches the store.
func (c *Client) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) do(ctx context.Context, op byte, key string, val []byte, wait time.Duration) (byte, []byte, error) {
	if len(key) > maxKey || len(val) > maxValue {
		return 0, nil, fmt.Errorf("store: key or value too large")
	}
	if d, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(d.Add(time.Second))
	} else {
		c.conn.SetDeadline(time.Time{})
	}
	req := make([]byte, 11+len(key)+len(val))
	req[0] = op
	binary.LittleEndian.PutUint16(req[1:], uint16(len(key)))
	binary.LittleEndian.PutUint32(req[3:], uint32(len(val)))
	binary.LittleEndian.PutUint32(req[7:], uint32(wait/time.Millisecond))
	copy(req[11:], key)
	copy(req[11+len(key):], val)
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, fmt.Errorf("store at %s: %w", c.addr, err)
	}
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("store at %s: %w", c.addr, err)
	}
	n := binary.LittleEndian.Uint32(hdr[1:])
	if n > maxValue {
		return 0, nil, fmt.Errorf("store at %s: response of %d bytes", c.addr, n)
	}
	out := make([]byte, n)
	if _, err := io.ReadFull(c.r, out); err != nil {
		return 0, nil, fmt.Errorf("store at %s: %w", c.addr, err)
	}
	return hdr[0], out, nil
}

// Set stores val under key.
func (c *Client) Set(ctx context.Context, key string, val []byte) error {
	_, _, err := c.do(ctx, opSet, key, val, 0)
	return err
}

// Get waits until key is set, then returns its value; ErrMissing when ctx's deadline passes first.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	wait := time.Hour
	if d, ok := ctx.Deadline(); ok {
		wait = max(time.Until(d), 0)
	}
	st, v, err := c.do(ctx, opGet, key, nil, wait)
	if err != nil {
		return nil, err
	}
	if st != statusOK {
		return nil, fmt.Errorf("%q: %w", key, ErrMissing)
	}
	return v, nil
}

// GetMany waits until every key is set, then returns their values in
// the order of keys, in one round trip; ErrMissing when ctx's deadline
// passes first (Has then tells which are missing).
func (c *Client) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	req, err := encodeKeys(keys)
	if err != nil {
		return nil, err
	}
	wait := time.Hour
	if d, ok := ctx.Deadline(); ok {
		wait = max(time.Until(d), 0)
	}
	st, v, err := c.do(ctx, opGetMany, "", req, wait)
	if err != nil {
		return nil, err
	}
	if st != statusOK {
		return nil, fmt.Errorf("%d keys from %q: %w", len(keys), keys[0], ErrMissing)
	}
	vals, err := decodeValues(v, len(keys))
	if err != nil {
		return nil, fmt.Errorf("store at %s: %w", c.addr, err)
	}
	return vals, nil
}

// Has reports at once whether key is set.
func (c *Client) Has(ctx context.Context, key string) (bool, error) {
	st, _, err := c.do(ctx, opCheck, key, nil, 0)
	return st == statusOK, err
}
