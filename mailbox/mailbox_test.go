package mailbox

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// send cuts frame into fragments of at most frag bytes and delivers them.
func send(p *Peer, stream uint32, meta [4]uint64, frame []byte, frag int) {
	h := Header{Stream: stream, Flags: First, Total: uint64(len(frame)), Meta: meta}
	for off := 0; off == 0 || off < len(frame); {
		n := min(frag, len(frame)-off)
		h.N = uint32(n)
		if off+n == len(frame) {
			h.Flags |= Last
		}
		var w [HeaderWords]uint64
		h.Put(w[:]) // through the wire format
		g := Get(w[:])
		p.Deliver(&g, frame[off:off+n])
		off += n
		h.Flags = 0
		if len(frame) == 0 {
			break
		}
	}
}

func TestFramesFillReceivesInOrder(t *testing.T) {
	frames := [][]byte{[]byte("first frame, three fragments"), {}, []byte("x"), bytes.Repeat([]byte("ab"), 50)}
	for _, tc := range []struct {
		name      string
		postFirst bool
		frag      int
	}{{"posted before", true, 10}, {"arrived early", false, 10}, {"one fragment each", true, 1 << 10}, {"early, byte fragments", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPeer()
			var tickets []uint64
			post := func() {
				for range frames {
					tickets = append(tickets, p.Post(7, make([]byte, 128)))
				}
			}
			if tc.postFirst {
				post()
			}
			for i, f := range frames {
				send(p, 7, [4]uint64{uint64(i), 2, 3, 4}, f, tc.frag)
			}
			if !tc.postFirst {
				post()
			}
			for i, tk := range tickets {
				meta, n, err, ok := p.Result(7, tk)
				if !ok || err != nil || meta[0] != uint64(i) || meta[3] != 4 {
					t.Fatalf("frame %d: ok %v err %v meta %v", i, ok, err, meta)
				}
				if got := tc.name; n != len(frames[i]) {
					t.Fatalf("%s: frame %d: %d bytes, want %d", got, i, n, len(frames[i]))
				}
			}
		})
	}
}

func TestStreamsAreIndependent(t *testing.T) {
	p := NewPeer()
	a := p.Post(1, make([]byte, 8))
	send(p, 2, [4]uint64{}, []byte("two"), 8) // early on stream 2
	if _, _, _, ok := p.Result(1, a); ok {
		t.Fatal("stream 1's receive was filled by stream 2's frame")
	}
	send(p, 1, [4]uint64{}, []byte("one"), 8)
	buf := make([]byte, 8)
	b := p.Post(2, buf)
	if _, n, err, ok := p.Result(2, b); !ok || err != nil || string(buf[:n]) != "two" {
		t.Fatalf("stream 2: %q %v %v", buf[:n], err, ok)
	}
	if _, n, err, ok := p.Result(1, a); !ok || err != nil || n != 3 {
		t.Fatalf("stream 1: %d %v %v", n, err, ok)
	}
}

func TestReceivingFrameStillArriving(t *testing.T) {
	p := NewPeer()
	h := Header{Stream: 3, Flags: First, Total: 6, N: 3}
	p.Deliver(&h, []byte("abc"))
	buf := make([]byte, 6)
	tk := p.Post(3, buf)
	if _, _, _, ok := p.Result(3, tk); ok {
		t.Fatal("receive done before the frame's last fragment")
	}
	h = Header{Stream: 3, Flags: Last, N: 3}
	p.Deliver(&h, []byte("def"))
	if _, n, err, ok := p.Result(3, tk); !ok || err != nil || string(buf[:n]) != "abcdef" {
		t.Fatalf("got %q %v %v", buf[:n], err, ok)
	}
}

func TestBadFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		early bool
		deliv func(p *Peer)
		want  string
	}{
		{"larger than the receive", false, func(p *Peer) { send(p, 0, [4]uint64{}, make([]byte, 5000), 1000) }, "5000 bytes arrived for a 100-byte receive"},
		{"larger than the receive, early", true, func(p *Peer) { send(p, 0, [4]uint64{}, make([]byte, 5000), 1000) }, "5000 bytes arrived for a 100-byte receive"},
		{"fragments overflow the declared length", false, func(p *Peer) {
			p.Deliver(&Header{Flags: First, Total: 10, N: 8}, make([]byte, 8))
			p.Deliver(&Header{Flags: Last, N: 8}, make([]byte, 8))
		}, "a 8-byte fragment after 8 bytes of a 10-byte frame"},
		{"fragments overflow, early", true, func(p *Peer) {
			p.Deliver(&Header{Flags: First | Last, Total: 4, N: 9}, make([]byte, 9))
		}, "a 9-byte fragment after 0 bytes of a 4-byte frame"},
		{"fragment longer than its slot", false, func(p *Peer) {
			p.Deliver(&Header{Flags: First | Last, Total: 50, N: 50}, make([]byte, 20))
		}, "slot of 20 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPeer()
			var tk uint64
			if !tc.early {
				tk = p.Post(0, make([]byte, 100))
			}
			tc.deliv(p)
			if tc.early {
				tk = p.Post(0, make([]byte, 100))
			}
			_, _, err, ok := p.Result(0, tk)
			if !ok || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got ok %v err %v, want an error containing %q", ok, err, tc.want)
			}
			if strings.Contains(tc.want, "arrived for") && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("%v does not wrap ErrFrameTooLarge", err)
			}
			// The mailbox goes on working.
			buf := make([]byte, 100)
			tk = p.Post(0, buf)
			send(p, 0, [4]uint64{}, []byte("after"), 3)
			if _, n, err, ok := p.Result(0, tk); !ok || err != nil || string(buf[:n]) != "after" {
				t.Fatalf("next frame: %q %v %v", buf[:n], err, ok)
			}
		})
	}
}

func TestUnknownTicket(t *testing.T) {
	p := NewPeer()
	if _, _, err, ok := p.Result(9, 42); !ok || err == nil || !strings.Contains(err.Error(), "unknown ticket 42") {
		t.Fatalf("got %v %v", err, ok)
	}
}

// TestResultsInAnyOrder: results taken in any order, with more receives
// outstanding than the pending ring first holds (so it grows, with holes
// from results already taken), each return their own frame; a ticket
// whose result was taken is unknown afterwards.
func TestResultsInAnyOrder(t *testing.T) {
	p := NewPeer()
	const n = 40
	bufs := make([][]byte, n)
	tickets := make([]uint64, n)
	post := func(i int) {
		bufs[i] = make([]byte, 4)
		tickets[i] = p.Post(5, bufs[i])
	}
	frame := func(i int) []byte { return []byte{byte(i), byte(i >> 8), 0xAB, byte(3 * i)} }
	check := func(i int) {
		t.Helper()
		meta, got, err, ok := p.Result(5, tickets[i])
		if !ok || err != nil || got != 4 || meta[0] != uint64(i) || !bytes.Equal(bufs[i], frame(i)) {
			t.Fatalf("receive %d: ok=%v err=%v n=%d meta=%v buf=%v, want %v", i, ok, err, got, meta, bufs[i], frame(i))
		}
	}
	// Ten posted and filled; every other result taken, leaving holes.
	for i := range 10 {
		post(i)
		send(p, 5, [4]uint64{uint64(i)}, frame(i), 4)
	}
	for i := 1; i < 10; i += 2 {
		check(i)
	}
	// Thirty more posted while those holes stand, then filled.
	for i := 10; i < n; i++ {
		post(i)
	}
	for i := 10; i < n; i++ {
		send(p, 5, [4]uint64{uint64(i)}, frame(i), 4)
	}
	for i := n - 1; i >= 10; i-- {
		check(i)
	}
	for i := 0; i < 10; i += 2 {
		check(i)
	}
	for _, i := range []int{0, 7, 39} {
		if _, _, err, ok := p.Result(5, tickets[i]); !ok || err == nil || !strings.Contains(err.Error(), "unknown ticket") {
			t.Fatalf("ticket %d taken twice: ok=%v err=%v", tickets[i], ok, err)
		}
	}
	// Still in step afterwards.
	post(0)
	send(p, 5, [4]uint64{0}, frame(0), 4)
	check(0)
}

// TestSteadyStateAllocatesNothing: once warmed up, a frame costs no
// allocation, whether its receive was posted before it came, after it
// came, or while it was arriving.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	first := Header{Stream: 1, Flags: First, Total: 64, N: 32}
	last := Header{Stream: 1, Flags: Last, N: 32}
	whole := Header{Stream: 1, Flags: First | Last, Total: 64, N: 64}
	tests := []struct {
		name  string
		cycle func(p *Peer, buf, frame []byte) uint64
	}{
		{"posted first", func(p *Peer, buf, frame []byte) uint64 {
			tk := p.Post(1, buf)
			p.Deliver(&whole, frame)
			return tk
		}},
		{"frame first", func(p *Peer, buf, frame []byte) uint64 {
			p.Deliver(&whole, frame)
			return p.Post(1, buf)
		}},
		{"posted mid-frame", func(p *Peer, buf, frame []byte) uint64 {
			p.Deliver(&first, frame[:32])
			tk := p.Post(1, buf)
			p.Deliver(&last, frame[32:])
			return tk
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPeer()
			buf, frame := make([]byte, 64), bytes.Repeat([]byte{7}, 64)
			allocs := testing.AllocsPerRun(100, func() {
				clear(buf)
				tk := tt.cycle(p, buf, frame)
				if _, n, err, ok := p.Result(1, tk); !ok || err != nil || n != 64 || !bytes.Equal(buf, frame) {
					t.Fatalf("got n=%d err=%v ok=%v buf=%v", n, err, ok, buf)
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per frame, want 0", allocs)
			}
		})
	}
}

// TestSpareBuffersFollowFrameSizes: after a run of small early frames
// has filled the spares, early frames of a larger size allocate only
// until the spares have grown to it (before, every one allocated: the
// small spares were kept and the large buffers dropped).
func TestSpareBuffersFollowFrameSizes(t *testing.T) {
	p := NewPeer()
	// maxSpares small frames in flight at once: all become spares.
	small := bytes.Repeat([]byte{1}, 1024)
	var tickets []uint64
	var bufs [][]byte
	for range maxSpares {
		send(p, 1, [4]uint64{}, small, len(small))
	}
	for range maxSpares {
		buf := make([]byte, len(small))
		bufs = append(bufs, buf)
		tickets = append(tickets, p.Post(1, buf))
	}
	for i, tk := range tickets {
		if _, n, err, ok := p.Result(1, tk); !ok || err != nil || n != len(small) || !bytes.Equal(bufs[i], small) {
			t.Fatalf("small frame %d: n=%d err=%v ok=%v", i, n, err, ok)
		}
	}
	large, buf := bytes.Repeat([]byte{2}, 64<<10), make([]byte, 64<<10)
	cycle := func() {
		send(p, 1, [4]uint64{}, large, 4096)
		tk := p.Post(1, buf)
		if _, n, err, ok := p.Result(1, tk); !ok || err != nil || n != len(large) || !bytes.Equal(buf, large) {
			t.Fatalf("large frame: n=%d err=%v ok=%v", n, err, ok)
		}
	}
	cycle() // the first large frame allocates its buffer; the spares keep it
	if allocs := testing.AllocsPerRun(100, cycle); allocs != 0 {
		t.Errorf("%v allocations per 64 KiB early frame after a run of 1 KiB ones, want 0", allocs)
	}
}

// TestCombine: a receive posted with a combine function folds the frame
// into its buffer, fragment by fragment, whether the frame arrives after
// the post or before it.
func TestCombine(t *testing.T) {
	add := func(dst, src []byte) {
		for i := range dst {
			dst[i] += src[i]
		}
	}
	for _, early := range []bool{false, true} {
		p := NewPeer()
		buf := bytes.Repeat([]byte{10}, 20)
		frame := make([]byte, 20)
		for i := range frame {
			frame[i] = byte(i)
		}
		var tk uint64
		if !early {
			tk = p.PostCombine(1, buf, add)
		}
		send(p, 1, [4]uint64{7}, frame, 8)
		if early {
			tk = p.PostCombine(1, buf, add)
		}
		meta, n, err, ok := p.Result(1, tk)
		if !ok || err != nil || n != 20 || meta[0] != 7 {
			t.Fatalf("early %v: %v %d %v %v", early, ok, n, err, meta)
		}
		for i, b := range buf {
			if b != byte(10+i) {
				t.Fatalf("early %v: buf[%d] = %d, want %d", early, i, b, 10+i)
			}
		}
		// A later plain receive copies again.
		plain := make([]byte, 3)
		tk = p.Post(1, plain)
		send(p, 1, [4]uint64{}, []byte{1, 2, 3}, 8)
		if _, _, _, ok := p.Result(1, tk); !ok || !bytes.Equal(plain, []byte{1, 2, 3}) {
			t.Fatalf("plain receive after a combining one: %v", plain)
		}
	}
}

// BenchmarkSmallFrame is the mailbox's share of a scalar all-reduce: a
// receive posted, an 8-byte frame delivered into it, its result taken.
func BenchmarkSmallFrame(b *testing.B) {
	p := NewPeer()
	buf, frame := make([]byte, 8), []byte{1, 2, 3, 4, 5, 6, 7, 8}
	h := Header{Stream: 3, Flags: First | Last, Total: 8, N: 8}
	for b.Loop() {
		tk := p.Post(3, buf)
		p.Deliver(&h, frame)
		if _, _, err, ok := p.Result(3, tk); !ok || err != nil {
			b.Fatalf("ok=%v err=%v", ok, err)
		}
	}
}

// TestIdleAndUnclaimed: a stream is idle while no receive on it waits for
// a frame, no frame of it waits for a receive and none of it is arriving;
// Unclaimed counts the frames that wait for a receive, over all streams.
func TestIdleAndUnclaimed(t *testing.T) {
	p := NewPeer()
	state := func(when string, idle1, idle2 bool, unclaimed int) {
		t.Helper()
		if p.Idle(1) != idle1 || p.Idle(2) != idle2 || p.Unclaimed() != unclaimed {
			t.Fatalf("%s: idle %v %v, unclaimed %d; want %v %v, %d", when, p.Idle(1), p.Idle(2), p.Unclaimed(), idle1, idle2, unclaimed)
		}
	}
	state("new", true, true, 0)
	buf := make([]byte, 8)
	tk := p.Post(1, buf)
	state("receive posted on 1", false, true, 0)
	send(p, 1, [4]uint64{}, []byte("12345678"), 8)
	state("its frame came", true, true, 0)
	p.Result(1, tk)
	send(p, 2, [4]uint64{}, []byte("early"), 8)
	state("early frame on 2", true, false, 1)
	h := Header{Stream: 1, Flags: First, Total: 16, N: 8}
	p.Deliver(&h, []byte("abcdefgh"))
	state("half a frame on 1", false, false, 2)
	h = Header{Stream: 1, Flags: Last, N: 8}
	p.Deliver(&h, []byte("ijklmnop"))
	state("it came whole", false, false, 2)
	p.Post(2, buf)
	state("2's frame claimed", false, true, 1)
	p.Post(1, make([]byte, 16))
	state("1's frame claimed", true, true, 0)
}

// failingReader fails every read after the first ok bytes.
type failingReader struct {
	r  *bytes.Reader
	ok int64
}

var errRead = errors.New("the sender's memory is gone")

func (f failingReader) ReadAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) > f.ok {
		return 0, errRead
	}
	return f.r.ReadAt(b, off)
}

// TestDeliverFrom: a whole frame the transport reads itself lands in a
// posted receive, in an early frame for a later one, or folded into a
// combining receive over several scratch pieces; a frame larger than its
// receive and a read that fails fail that receive only, and the frame
// after it is delivered normally.
func TestDeliverFrom(t *testing.T) {
	frame := bytes.Repeat([]byte("0123456789abcdef"), (2*scratchBytes+40)/16) // three scratch pieces
	xor := func(dst, src []byte) {
		for i := range dst {
			dst[i] ^= src[i]
		}
	}
	for _, tc := range []struct {
		name      string
		postFirst bool
		buf       int
		combine   Combine
		readable  int64 // bytes the source gives before failing
		want      string
	}{
		{"posted", true, len(frame), nil, 1 << 40, ""},
		{"posted, combined", true, len(frame) + 8, xor, 1 << 40, ""},
		{"early", false, len(frame) + 8, nil, 1 << 40, ""},
		{"early, combined", false, len(frame), xor, 1 << 40, ""},
		{"too large", true, 100, nil, 1 << 40, "frame larger than the posted receive"},
		{"read fails", true, len(frame), nil, scratchBytes, "reading a 524320-byte frame: the sender's memory is gone"},
		{"read fails, combined", true, len(frame), xor, scratchBytes, "reading a 524320-byte frame: the sender's memory is gone"},
		{"read fails, early", false, len(frame), nil, 0, "reading a 524320-byte frame: the sender's memory is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPeer()
			buf := bytes.Repeat([]byte{0x5a}, tc.buf)
			var tk uint64
			if tc.postFirst {
				tk = p.PostCombine(3, buf, tc.combine)
			}
			h := Header{Stream: 3, Total: uint64(len(frame)), Meta: [4]uint64{42}}
			err := p.DeliverFrom(&h, failingReader{bytes.NewReader(frame), tc.readable})
			// Only a failed read is returned (a frame too large is the
			// receive's error alone).
			if readFails := tc.readable < int64(len(frame)); readFails != errors.Is(err, errRead) || !readFails && err != nil {
				t.Fatalf("DeliverFrom returned %v", err)
			}
			if !tc.postFirst {
				tk = p.PostCombine(3, buf, tc.combine)
			}
			meta, n, err, ok := p.Result(3, tk)
			if !ok {
				t.Fatal("the receive is not done")
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
			} else {
				want := frame
				if tc.combine != nil {
					want = bytes.Repeat([]byte{0x5a}, len(frame))
					xor(want, frame)
				}
				if err != nil || n != len(frame) || meta[0] != 42 || !bytes.Equal(buf[:n], want) {
					t.Fatalf("meta %v, %d bytes, %v", meta, n, err)
				}
			}
			send(p, 3, [4]uint64{43}, []byte("next"), 2)
			next := make([]byte, 4)
			tk = p.Post(3, next)
			if meta, n, err, ok := p.Result(3, tk); !ok || err != nil || n != 4 || meta[0] != 43 || string(next) != "next" {
				t.Fatalf("the next frame: ok %v, meta %v, %d bytes, %v", ok, meta, n, err)
			}
		})
	}
}
