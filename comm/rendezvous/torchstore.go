package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// TorchClient speaks torch.distributed's TCPStore protocol as a client,
// for jobs started by torchrun: its agent already serves a TCPStore at
// MASTER_ADDR:MASTER_PORT and tells the workers to use it
// (TORCHELASTIC_USE_AGENT_STORE=True), so no rank may serve its own.
// Keys are prefixed, so that gorun's keys do not meet torch's.
//
// The protocol is the TCPStore's binary one: a query byte, keys and
// values as a 64-bit length and the bytes, in the host's (little-endian)
// byte order. PyTorch 2 numbers the queries one higher than PyTorch 1
// (it added VALIDATE first, sent on connecting); which one the store
// speaks is found by asking it for its key count as PyTorch 1 does, which
// a PyTorch 1 store answers at once and a PyTorch 2 store does not
// (GORUN_TORCH_STORE=1 or 2 skips the probe).
type TorchClient struct {
	addr, prefix string
	version      int // 1 or 2
	conn         net.Conn
	r            *bufio.Reader
}

// The TCPStore queries used, as PyTorch 1 numbers them (PyTorch 2: one
// more).
const (
	torchSet        = 0
	torchGet        = 2
	torchCheck      = 4
	torchWait       = 5
	torchGetNumKeys = 6

	torchValidate      = 0 // PyTorch 2 only
	torchValidateMagic = 0x3C85F7CE

	torchReady = 0 // CHECK's answer when every key exists

	// redialTimeout bounds reconnecting after a Get that timed out.
	redialTimeout = 10 * time.Second
)

// DialTorch connects to the TCPStore at addr, retrying until ctx ends
// (the agent may come up after its workers), and finds the protocol
// version it speaks. Keys are stored under prefix.
func DialTorch(ctx context.Context, addr, prefix string) (*TorchClient, error) {
	c := &TorchClient{addr: addr, prefix: prefix}
	switch v := os.Getenv("GORUN_TORCH_STORE"); v {
	case "1", "2":
		c.version = int(v[0] - '0')
	case "":
	default:
		return nil, fmt.Errorf("GORUN_TORCH_STORE=%q: want 1 (PyTorch 1.x's TCPStore) or 2 (PyTorch 2.x's)", v)
	}
	if err := c.dial(ctx); err != nil {
		return nil, err
	}
	if c.version == 0 {
		if err := c.probe(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// dial opens the connection, retrying until ctx ends; for PyTorch 2 it
// sends VALIDATE first.
func (c *TorchClient) dial(ctx context.Context) error {
	var d net.Dialer
	backoff := 20 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err == nil {
			c.conn, c.r = conn, bufio.NewReader(conn)
			if c.version == 2 {
				var b [5]byte
				b[0] = torchValidate
				binary.LittleEndian.PutUint32(b[1:], torchValidateMagic)
				if _, err := conn.Write(b[:]); err != nil {
					conn.Close()
					return fmt.Errorf("torch's TCPStore at %s: %w", c.addr, err)
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("torch's TCPStore at %s (MASTER_ADDR:MASTER_PORT, served by torchrun's agent: TORCHELASTIC_USE_AGENT_STORE=True) not reachable: %w (last error: %v)", c.addr, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// probe finds the store's protocol version: PyTorch 1 answers
// GETNUMKEYS (query 6) with a count; for PyTorch 2, 6 is WAIT, which
// waits for a key list that never comes, or a store that wants VALIDATE
// first drops the connection.
func (c *TorchClient) probe(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.conn.SetDeadline(deadline)
	var n [8]byte
	_, err := c.conn.Write([]byte{torchGetNumKeys})
	if err == nil {
		_, err = io.ReadFull(c.r, n[:])
	}
	if err == nil {
		c.version = 1
		return nil
	}
	c.conn.Close()
	c.version = 2
	return c.dial(ctx)
}

// Version returns the TCPStore protocol version in use: 1 or 2.
func (c *TorchClient) Version() int { return c.version }

// LocalAddr returns this end's address: the interface that reaches the store.
func (c *TorchClient) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// Close closes the connection.
func (c *TorchClient) Close() error { return c.conn.Close() }

// query returns PyTorch 1's query number q in the store's numbering.
func (c *TorchClient) query(q byte) byte {
	if c.version == 2 {
		return q + 1
	}
	return q
}

// send writes query q with strings (64-bit length, then the bytes).
func (c *TorchClient) send(ctx context.Context, q byte, strs ...[]byte) error {
	if d, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(d)
	} else {
		c.conn.SetDeadline(time.Time{})
	}
	b := []byte{c.query(q)}
	if q == torchCheck || q == torchWait {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(strs)))
	}
	for _, s := range strs {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("torch's TCPStore at %s: %w", c.addr, err)
	}
	return nil
}

// key is the key as torch's clients send it: each TCPStore prefixes its
// keys with "/" (so a Python client's store.get("gorun/x") reads our
// "gorun/x").
func (c *TorchClient) key(k string) []byte { return []byte("/" + c.prefix + k) }

// Set stores val under key.
func (c *TorchClient) Set(ctx context.Context, key string, val []byte) error {
	if len(key) > maxKey || len(val) > maxValue {
		return fmt.Errorf("store: key or value too large")
	}
	return c.send(ctx, torchSet, c.key(key), val)
}

// Get waits until key is set, then returns its value; ErrMissing when
// ctx's deadline passes first (the connection is then opened anew, as the
// store still owes an answer on the old one).
func (c *TorchClient) Get(ctx context.Context, key string) ([]byte, error) {
	if err := c.send(ctx, torchWait, c.key(key)); err != nil {
		return nil, err
	}
	var b [1]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.conn.Close()
			// A fresh context: ctx's deadline has just passed.
			rctx, cancel := context.WithTimeout(context.Background(), redialTimeout)
			defer cancel()
			if err := c.dial(rctx); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%q: %w", key, ErrMissing)
		}
		return nil, fmt.Errorf("torch's TCPStore at %s: %w", c.addr, err)
	}
	if err := c.send(ctx, torchGet, c.key(key)); err != nil {
		return nil, err
	}
	return c.readBytes()
}

// GetMany returns the values of keys in their order, waiting for each
// (torch 1.13's store answers one key per request).
func (c *TorchClient) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		v, err := c.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

// Has reports at once whether key is set.
func (c *TorchClient) Has(ctx context.Context, key string) (bool, error) {
	if err := c.send(ctx, torchCheck, c.key(key)); err != nil {
		return false, err
	}
	var b [1]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return false, fmt.Errorf("torch's TCPStore at %s: %w", c.addr, err)
	}
	return b[0] == torchReady, nil
}

// readBytes reads a 64-bit length and that many bytes.
func (c *TorchClient) readBytes() ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		return nil, fmt.Errorf("torch's TCPStore at %s: %w", c.addr, err)
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > maxValue {
		return nil, fmt.Errorf("torch's TCPStore at %s: a value of %d bytes", c.addr, size)
	}
	v := make([]byte, size)
	if _, err := io.ReadFull(c.r, v); err != nil {
		return nil, fmt.Errorf("torch's TCPStore at %s: %w", c.addr, err)
	}
	return v, nil
}
