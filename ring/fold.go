package ring

import (
	"context"
	"math/bits"
)

// fold maps n ranks onto the largest power of two p2 ≤ n, for the
// algorithms that pair ranks across the bits of their rank (recursive
// doubling, halving-doubling), as MPICH does: the first 2·rem ranks (rem =
// n − p2) pair up, and the even one of each pair hands its buffer to the
// odd one, sits the algorithm out, and receives the result at the end.
type fold struct{ p2, rem int }

func newFold(n int) fold {
	p2 := 1 << (bits.Len(uint(n)) - 1)
	return fold{p2: p2, rem: n - p2}
}

// levels is log2(p2): the steps across bits.
func (f fold) levels() int { return bits.Len(uint(f.p2)) - 1 }

// virtual returns rank r's place among the p2 that take part, or -1 when r
// sits out.
func (f fold) virtual(r int) int {
	switch {
	case r < 2*f.rem && r%2 == 0:
		return -1
	case r < 2*f.rem:
		return r / 2
	}
	return r - f.rem
}

// real returns the rank at virtual place v.
func (f fold) real(v int) int {
	if v < f.rem {
		return 2*v + 1
	}
	return v + f.rem
}

// foldIn runs the pairing before the algorithm and returns this rank's
// virtual place. A rank that sits out hands buf over, waits for the result
// (the frames of step final) and returns -1 with buf complete; its partner
// reduces the buffer in (step 0). Frames are cut as sendChunks cuts them.
func foldIn[T Elem](ctx context.Context, c *Collectives, call Call, f fold, buf, tmp []T, op Op, final int) (int, error) {
	r, count := c.Rank, len(buf)
	vr := f.virtual(r)
	switch {
	case vr < 0:
		// The result goes to tmp: buf is still being sent when it is posted.
		first := len(c.tickets)
		if err := postChunks(c, r+1, tmp, 0, count); err != nil {
			return vr, err
		}
		if err := sendChunks(ctx, c, call, r+1, 0, buf, 0, count); err != nil {
			return vr, err
		}
		if err := waitChunks(ctx, c, call, r+1, first, final, tmp, 0, count, nil); err != nil {
			return vr, err
		}
		copy(buf, tmp)
	case r < 2*f.rem:
		first := len(c.tickets)
		if err := postChunks(c, r-1, tmp, 0, count); err != nil {
			return vr, err
		}
		err := waitChunks(ctx, c, call, r-1, first, 0, tmp, 0, count, func(_, a, b int) {
			Reduce(op, buf[a:b], buf[a:b], tmp[a:b])
		})
		if err != nil {
			return vr, err
		}
	}
	return vr, nil
}

// foldOut hands the result to the partner that sat out, if any.
func foldOut[T Elem](ctx context.Context, c *Collectives, call Call, f fold, buf []T, final int) error {
	if r := c.Rank; r < 2*f.rem {
		return sendChunks(ctx, c, call, r-1, final, buf, 0, len(buf))
	}
	return nil
}

// sendChunks sends elements [lo, hi) of buf to group rank to, in frames of
// messageChunkElems numbered from 0 (at least one frame, even when the
// range is empty).
func sendChunks[T Elem](ctx context.Context, c *Collectives, call Call, to, step int, buf []T, lo, hi int) error {
	ce := c.messageChunkElems(elemSize[T](), hi-lo)
	return sendChunksBy(ctx, c, (*Collectives).send, call, to, step, buf, lo, hi, ce)
}

// sendChunksDirect sends [lo, hi) of buf in frames of ce elements through
// the transport's DirectSender (where it has one), for blocks every rank
// sends while it receives others' (all-to-all): every chunk where the
// group has two ranks, else chunks of directBytes or more.
func sendChunksDirect[T Elem](ctx context.Context, c *Collectives, call Call, to, step int, buf []T, lo, hi, ce int) error {
	send := (*Collectives).sendDirectLarge
	if c.Size() == 2 {
		send = (*Collectives).sendDirect
	}
	return sendChunksBy(ctx, c, send, call, to, step, buf, lo, hi, ce)
}

func sendChunksBy[T Elem](ctx context.Context, c *Collectives, send func(*Collectives, context.Context, int, Call, int, int, []byte) error, call Call, to, step int, buf []T, lo, hi, ce int) error {
	for j := range subchunks(lo, hi, ce) {
		a, b := sub(lo, hi, ce, j)
		if err := send(c, ctx, to, call, step, j, AsBytes(buf[a:b])); err != nil {
			return err
		}
	}
	return nil
}

// postChunks posts dst's elements [lo, hi) for the frames sendChunks cuts
// that range into.
func postChunks[T Elem](c *Collectives, from int, dst []T, lo, hi int) error {
	return postChunksBy(c, from, dst, lo, hi, c.messageChunkElems(elemSize[T](), hi-lo))
}

// postChunksBy posts dst's elements [lo, hi) for frames of ce elements.
func postChunksBy[T Elem](c *Collectives, from int, dst []T, lo, hi, ce int) error {
	for j := range subchunks(lo, hi, ce) {
		a, b := sub(lo, hi, ce, j)
		if err := c.post(from, AsBytes(dst[a:b])); err != nil {
			return err
		}
	}
	return nil
}

// recvChunks receives range [lo, hi) of dst from group rank from, the
// frames of step of call, when nothing else is posted (c.tickets empty)
// and nothing is sent meanwhile: a range of one chunk through recvOne,
// else posted and waited for chunk by chunk.
func recvChunks[T Elem](ctx context.Context, c *Collectives, call Call, from, step int, dst []T, lo, hi int) error {
	if messageFrames[T](c, lo, hi) == 1 {
		b := AsBytes(dst[lo:hi])
		return c.recvOne(ctx, call, step, 0, from, b, len(b))
	}
	if err := postChunks(c, from, dst, lo, hi); err != nil {
		return err
	}
	return waitChunks(ctx, c, call, from, 0, step, dst, lo, hi, nil)
}

// waitChunks waits for the frames of range [lo, hi) of dst posted from
// ticket first on, checking each against call and step, and calls each(j,
// a, b), when not nil, as chunk j, elements [a, b), lands.
func waitChunks[T Elem](ctx context.Context, c *Collectives, call Call, from, first, step int, dst []T, lo, hi int, each func(j, a, b int)) error {
	return waitChunksBy(ctx, c, call, from, first, step, dst, lo, hi, c.messageChunkElems(elemSize[T](), hi-lo), each)
}

// waitChunksBy is waitChunks for frames of ce elements.
func waitChunksBy[T Elem](ctx context.Context, c *Collectives, call Call, from, first, step int, dst []T, lo, hi, ce int, each func(j, a, b int)) error {
	for j := range subchunks(lo, hi, ce) {
		a, b := sub(lo, hi, ce, j)
		if err := c.wait(ctx, from, first+j, call, step, j, len(AsBytes(dst[a:b]))); err != nil {
			return err
		}
		if each != nil {
			each(j, a, b)
		}
	}
	return nil
}

// messageChunkElems is the frame size, in elements of size bytes, of a
// message of count elements that sendChunks cuts up and postChunks,
// recvChunks and waitChunks take apart (the same count on both sides):
// the group's message chunk (MessageChunkBytes, else ChunkBytes), or,
// for a message of at least four minRingChunks that the chunk would send
// in fewer than four frames, a quarter of the message. A message of one
// or two chunks leaves the receiver adding or copying while the sender
// waits; four let them work at once.
// Through shared memory (1 MiB chunks), between two ranks: Reduces of
// 1–3 MiB 1.3× faster by the medians, a Broadcast of 1 MiB 1.9×, Gathers
// of 2–4 MiB 1.15× in a slower phase of the VM; smaller messages in two
// frames gained nothing (a Reduce of 384 KiB was slower)
// (bench/results/current/message-chunks-2026-11-29-zen4.txt).
func (c *Collectives) messageChunkElems(size uintptr, count int) int {
	ce := c.chunkElems(size)
	if c.MessageChunkBytes > 0 {
		ce = chunkElemsOf(c.MessageChunkBytes, size)
	}
	if count*int(size) < 4*minRingChunk {
		return ce
	}
	return ringChunkElems(ce, count, 1, size)
}

// messageFrames is how many frames sendChunks cuts elements [lo, hi) into:
// what a receiver of several messages in turn counts its tickets by.
func messageFrames[T Elem](c *Collectives, lo, hi int) int {
	return subchunks(lo, hi, c.messageChunkElems(elemSize[T](), hi-lo))
}
