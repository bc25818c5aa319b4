package ring

import (
	"context"
	"fmt"
	"unsafe"
)

// Transport moves frames between ranks. Post registers a buffer for the next
// frame from peer on stream and returns a ticket; Wait blocks until that
// frame has arrived and returns its metadata and length. Send hands a frame
// to peer. Meta is opaque to the transport.
type Transport interface {
	Send(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error
	Post(peer int, stream uint32, buf []byte) (ticket uint64, err error)
	Wait(ctx context.Context, peer int, stream uint32, ticket uint64) (meta [4]uint64, n int, err error)
}

// Defaults for Collectives's tuning knobs. DefaultSmallBytes was measured on a
// 2-core machine over loopback TCP (see bench/results/HISTORY.md): below it recursive
// doubling's log2(n) exchanges of the whole buffer beat the ring's 2(n−1)
// exchanges of a 1/n share.
const (
	DefaultSmallBytes = 256 << 10
	DefaultChunkBytes = 1 << 20
)

// Collectives is one group's view of the transport: its members, this
// rank's place among them, its stream, and the state the algorithms reuse
// from call to call. It runs one collective at a time. (comm.Group wraps
// one; programs use the Group.)
type Collectives struct {
	T Transport
	// Peers maps group ranks to transport ranks.
	Peers []int
	// Rank is this rank's index in Peers.
	Rank int
	// Stream is the transport stream the collectives of this group use.
	Stream uint32
	// SmallBytes: all-reduce and broadcast of at most this many bytes use the
	// latency-optimal algorithms. All ranks must use the same value (a
	// difference is detected as a mismatch).
	SmallBytes int
	// ChunkBytes is the pipelining granularity of the ring algorithms
	// (the ring all-reduce and reduce-scatter cut blocks of fewer than
	// four chunks finer: ringChunkElems).
	ChunkBytes int
	// MessageChunkBytes is the frame size of the messages sendChunks cuts
	// up — the rooted collectives', the broadcast chain's, the 16-bit
	// types' exchanges, halving-doubling's halves (messageChunkElems; not
	// the all-to-all's, which keep ChunkBytes) — where it differs from
	// ChunkBytes (0: ChunkBytes). A stream one way gains from larger
	// frames where a ring's pipelining may want smaller ones.
	MessageChunkBytes int
	// OneShotBytes: all-reduces of at most this many bytes among more than
	// two ranks send the whole buffer to every rank in one round (0: never).
	// It pays where a message costs little next to a round's latency
	// (shared memory, and above all more ranks than cores). All ranks must
	// use the same value.
	OneShotBytes int
	// HalvingBytes: all-reduces above SmallBytes and of at most this many
	// bytes among more than two ranks use halving-doubling (0: never). All
	// ranks must use the same value.
	HalvingBytes int
	// BruckBytes: all-to-alls among more than two ranks whose blocks hold
	// at most this many bytes use Bruck's algorithm (0: never). All ranks
	// must use the same value.
	BruckBytes int
	// LinearReduceBytes: Reduces of at most this many bytes among more
	// than two ranks send every rank's buffer straight to the root, which
	// adds them up in rank order (linearReduce), instead of passing
	// partial sums up a binomial tree (0: never). All ranks must use the
	// same value.
	LinearReduceBytes int
	// TreeScatterBytes: Scatters among more than two ranks whose root's
	// buffer holds at most this many bytes go down a binomial tree
	// (treeScatter) instead of straight from the root (0: never). All
	// ranks must use the same value.
	TreeScatterBytes int
	// Hier, when set, runs collectives above its thresholds host by
	// host (all-reduce, broadcast, all-gather, reduce-scatter, barrier).
	Hier *Hierarchy
	// Costs, when set, choose the all-reduce by predicted time.
	Costs *Costs

	seq      uint64
	history  [historyCalls]Call // the latest calls, by Seq mod historyCalls
	scratch  []byte
	tickets  []uint64
	offs     [2][]int // the vector collectives' layouts (layoutOf)
	combined []bool   // per posted receive of a ring all-reduce: folded in by the transport

	combineFn func(dst, src []byte) // the last combine function made, for combineOp on combineDT
	combineOp Op
	combineDT DType
}

// Combiner is implemented by transports that can fold an arriving frame
// into the posted buffer straight from where it lands (shared memory,
// registered memory), which saves copying it into scratch and a separate
// pass of the reduction. ok is false when frames from that peer cannot be
// combined; nothing was posted then.
type Combiner interface {
	PostCombine(peer int, stream uint32, buf []byte, combine func(dst, src []byte)) (ticket uint64, ok bool, err error)
}

// SendRecver is implemented by transports that can send a frame to one
// peer and take the next frame from another (or the same) peer in one
// call, more cheaply than Post, Send and Wait: shared memory hands a
// small frame from the ring it arrives in straight to the caller, with no
// mailbox in between. The frame received must be the one a Post made
// before the Send would have received. ok is false when the transport
// cannot do it for these peers; nothing was sent then.
type SendRecver interface {
	SendRecv(ctx context.Context, to int, stream uint32, meta [4]uint64, payload []byte, from int, buf []byte) (rmeta [4]uint64, n int, ok bool, err error)
}

// Recver is implemented by transports that can receive a frame more
// cheaply than Post and Wait when nothing else is posted before it and
// nothing waits to be sent meanwhile: shared memory copies a small frame
// from the ring it arrives in straight into buf. ok is false when the
// transport cannot do it for this peer; nothing was posted then.
type Recver interface {
	Recv(ctx context.Context, peer int, stream uint32, buf []byte) (meta [4]uint64, n int, ok bool, err error)
}

// DirectSender is implemented by transports that can have the receiver
// copy a frame straight out of the sender's memory (shared memory, by
// cross-memory attach): one copy instead of two, but the send returns
// only once the receiver has read the frame. That pays where every rank
// sends and receives whole blocks at once, so that the copying is the
// work (all-to-all, and the all-gather's ring, which only forwards), and
// where nothing waits behind the send (a broadcast tree's last child, a
// chain of one chunk); chunks streaming one way, or added in as they land
// round a ring, run faster through the transport's own buffers, where
// sender and receiver work at the same time (bench/results/HISTORY.md).
// SendDirect is Send for frames or peers it cannot take.
type DirectSender interface {
	SendDirect(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error
}

// Size returns the number of members.
func (c *Collectives) Size() int { return len(c.Peers) }

// Seq returns the sequence number the next collective will carry.
func (c *Collectives) Seq() uint64 { return c.seq }

func (c *Collectives) begin(kind Kind, dt DType, op Op, algo Algo, root, count int) Call {
	call := Call{Seq: c.seq, Kind: kind, DType: dt, Op: op, Algo: algo, Root: root, Count: count}
	c.history[c.seq%historyCalls] = call
	c.seq++
	return call
}

func (c *Collectives) peer(groupRank int) int { return c.Peers[groupRank] }

func (c *Collectives) post(from int, b []byte) error {
	t, err := c.T.Post(c.peer(from), c.Stream, b)
	if err != nil {
		return err
	}
	c.tickets = append(c.tickets, t)
	return nil
}

// postCombine posts into for a frame that fn folds into it, when the
// transport can, and reports that it did; else it posts otherwise for a
// plain copy.
func (c *Collectives) postCombine(from int, into []byte, fn func(dst, src []byte), otherwise []byte) (bool, error) {
	if cb, ok := c.T.(Combiner); ok {
		t, ok, err := cb.PostCombine(c.peer(from), c.Stream, into, fn)
		if err != nil {
			return false, err
		}
		if ok {
			c.tickets = append(c.tickets, t)
			return true, nil
		}
	}
	return false, c.post(from, otherwise)
}

// combineOf returns the function that folds a frame of T into a buffer
// with op, reusing the last one made.
func combineOf[T Elem](c *Collectives, op Op) func(dst, src []byte) {
	dt := DTypeOf[T]()
	if c.combineFn == nil || c.combineOp != op || c.combineDT != dt {
		c.combineFn = func(dst, src []byte) {
			d := fromBytes[T](dst)
			Reduce(op, d, d, fromBytes[T](src))
		}
		c.combineOp, c.combineDT = op, dt
	}
	return c.combineFn
}

// fromBytes views b as elements, without copying.
func fromBytes[T Elem](b []byte) []T {
	var zero T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}

func (c *Collectives) send(ctx context.Context, to int, call Call, step, chunk int, b []byte) error {
	return c.T.Send(ctx, c.peer(to), c.Stream, call.meta(step, chunk), b)
}

// sendDirect is send through the transport's DirectSender, where it has
// one.
func (c *Collectives) sendDirect(ctx context.Context, to int, call Call, step, chunk int, b []byte) error {
	if ds, ok := c.T.(DirectSender); ok {
		return ds.SendDirect(ctx, c.peer(to), c.Stream, call.meta(step, chunk), b)
	}
	return c.send(ctx, to, call, step, chunk, b)
}

// directBytes is the smallest frame the collectives send as a direct
// frame, except the all-to-all between two ranks, which sends every
// frame the transport takes as one (16 KiB and more in shared memory).
// Below it they send through the transport's buffers: all-gathers and
// broadcasts of 16 and 32 KiB frames ran slower direct than through the
// rings, and so did all-to-alls among four ranks (whose direct sends go
// to the peers one after another, each waiting for its reader), while
// two-rank all-to-alls of the same frames ran faster direct
// (bench/results/current/direct-threshold-2026-11-27.txt).
const directBytes = 64 << 10

// sendDirectLarge is sendDirect for frames of directBytes or more, send
// for smaller ones.
func (c *Collectives) sendDirectLarge(ctx context.Context, to int, call Call, step, chunk int, b []byte) error {
	if len(b) < directBytes {
		return c.send(ctx, to, call, step, chunk, b)
	}
	return c.sendDirect(ctx, to, call, step, chunk, b)
}

// wait completes the k-th posted receive and checks that it belongs to the
// same call, step and chunk, with the expected number of bytes.
func (c *Collectives) wait(ctx context.Context, from int, k int, call Call, step, chunk, bytes int) error {
	if k >= len(c.tickets) {
		return fmt.Errorf("ring: internal error in %v: receive %d from group rank %d waited for before it was posted", call, k, from)
	}
	meta, n, err := c.T.Wait(ctx, c.peer(from), c.Stream, c.tickets[k])
	return c.check(from, call, step, chunk, bytes, meta, n, err)
}

// sendRecv sends payload to group rank to as step and chunk of call, and
// receives the frame of the same step and chunk from group rank from into
// buf, which must then hold bytes: Post, send and wait in one, through the
// transport's SendRecv where it has one.
func (c *Collectives) sendRecv(ctx context.Context, call Call, step, chunk, to int, payload []byte, from int, buf []byte, bytes int) error {
	if sr, ok := c.T.(SendRecver); ok {
		meta, n, ok, err := sr.SendRecv(ctx, c.peer(to), c.Stream, call.meta(step, chunk), payload, c.peer(from), buf)
		if ok || err != nil {
			return c.check(from, call, step, chunk, bytes, meta, n, err)
		}
	}
	k := len(c.tickets)
	if err := c.post(from, buf); err != nil {
		return err
	}
	if err := c.send(ctx, to, call, step, chunk, payload); err != nil {
		return err
	}
	return c.wait(ctx, from, k, call, step, chunk, bytes)
}

// recvOne receives the frame of step and chunk of call from group rank
// from into buf, which must then hold bytes: through the transport's
// Recver where it has one, else Post and Wait. Only for a receive
// nothing is posted before (c.tickets empty), by a rank that sends
// nothing until it has the frame or has already sent all it sends in
// the call.
func (c *Collectives) recvOne(ctx context.Context, call Call, step, chunk, from int, buf []byte, bytes int) error {
	if rv, ok := c.T.(Recver); ok {
		meta, n, ok, err := rv.Recv(ctx, c.peer(from), c.Stream, buf)
		if ok || err != nil {
			return c.check(from, call, step, chunk, bytes, meta, n, err)
		}
	}
	k := len(c.tickets)
	if err := c.post(from, buf); err != nil {
		return err
	}
	return c.wait(ctx, from, k, call, step, chunk, bytes)
}

// check is Check, naming this rank's earlier call in a mismatch when the
// peer is behind.
func (c *Collectives) check(from int, call Call, step, chunk, bytes int, meta [4]uint64, n int, err error) error {
	err = Check(from, call, step, chunk, bytes, meta, n, err)
	if m, ok := err.(*MismatchError); ok && m.Remote.Seq < call.Seq && call.Seq-m.Remote.Seq < historyCalls {
		if h := c.history[m.Remote.Seq%historyCalls]; h.Seq == m.Remote.Seq {
			m.Earlier = h
		}
	}
	return err
}

// historyCalls is how many of its latest calls a Collectives remembers, to name
// its side of a mismatch found only in a later call.
const historyCalls = 16

// Check validates an arrived frame against the call this rank is in. A frame
// from another call gives a *MismatchError naming both calls, even when the
// transport also reported a size error.
func Check(from int, call Call, step, chunk, bytes int, meta [4]uint64, n int, err error) error {
	if meta != ([4]uint64{}) || err == nil {
		want := call.meta(step, chunk)
		if meta[0] != want[0] || meta[1] != want[1] || meta[2] != want[2] {
			return &MismatchError{Peer: from, Local: call, Remote: decodeCall(meta)}
		}
		if err == nil && meta[3] != want[3] {
			return fmt.Errorf("ring: protocol error in %v with group rank %d: got step/chunk %#x, want %#x", call, from, meta[3], want[3])
		}
	}
	if err != nil {
		return err
	}
	if n != bytes {
		return fmt.Errorf("ring: %v: group rank %d sent %d bytes, want %d", call, from, n, bytes)
	}
	return nil
}

// scratchOf returns a scratch slice of n elements, reused across calls.
func scratchOf[T Elem](c *Collectives, n int) []T {
	var zero T
	need := n * int(unsafe.Sizeof(zero))
	if cap(c.scratch) < need {
		c.scratch = make([]byte, need)
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(c.scratch))), n)
}

// AsBytes views a slice of elements as its bytes, without copying.
func AsBytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

func (c *Collectives) chunkElems(size uintptr) int { return chunkElemsOf(c.ChunkBytes, size) }

// chunkElemsOf is how many elements of size bytes a chunk of cb bytes
// holds (cb ≤ 0: DefaultChunkBytes), at least one.
func chunkElemsOf(cb int, size uintptr) int {
	if cb <= 0 {
		cb = DefaultChunkBytes
	}
	if e := cb / int(size); e > 0 {
		return e
	}
	return 1
}

func (c *Collectives) smallBytes() int {
	if c.SmallBytes < 0 {
		return 0
	}
	if c.SmallBytes == 0 {
		return DefaultSmallBytes
	}
	return c.SmallBytes
}

// subchunks returns how many frames carry the range [lo, hi) in chunks of
// ce elements: at least one, so every step exchanges a frame even when the
// range is empty and a mismatch is always seen.
func subchunks(lo, hi, ce int) int {
	if hi <= lo {
		return 1
	}
	return (hi - lo + ce - 1) / ce
}

// sub returns chunk j of [lo, hi).
func sub(lo, hi, ce, j int) (int, int) {
	a := lo + j*ce
	b := a + ce
	if b > hi {
		b = hi
	}
	if a > hi {
		a = hi
	}
	return a, b
}

func mod(a, n int) int { return ((a % n) + n) % n }
