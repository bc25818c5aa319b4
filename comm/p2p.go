package comm

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/ring"
)

// p2pChunkBytes is the frame size large point-to-point messages are cut into.
const p2pChunkBytes = 16 << 20

func (g *Group) checkPeer(what string, peer, tag int) error {
	switch {
	case g.closed.Load():
		return g.wrap(what, errClosed)
	case peer < 0 || peer >= g.Size():
		return g.wrap(what, fmt.Errorf("rank %d outside the group of %d", peer, g.Size()))
	case peer == g.Rank():
		return g.wrap(what, fmt.Errorf("rank %d cannot send to or receive from itself", peer))
	case tag < 0 || tag > MaxTag:
		return g.wrap(what, fmt.Errorf("tag %d outside 0..%d", tag, MaxTag))
	}
	return g.failed(what)
}

func (g *Group) p2pStream(tag int) uint32 { return g.id<<16 | uint32(tag+1) }

func p2pChunks[T Elem](n int) (per, chunks int) {
	per = max(p2pChunkBytes/ring.DTypeOf[T]().Size(), 1)
	return per, max((n+per-1)/per, 1)
}

// Send sends buf to rank dst of the group with a tag; the matching Recv on
// dst must use the same tag, element type and length.
func Send[T Elem](ctx context.Context, g *Group, buf []T, dst, tag int) error {
	return SendAsync(ctx, g, buf, dst, tag).Wait()
}

// SendAsync starts Send and returns at once; buf must not change until Wait
// returns. Sends to one peer go out in the order they were issued.
func SendAsync[T Elem](ctx context.Context, g *Group, buf []T, dst, tag int) *Work {
	what := fmt.Sprintf("Send of %d elements to rank %d, tag %d", len(buf), dst, tag)
	if err := g.checkPeer(what, dst, tag); err != nil {
		return finished(err)
	}
	g.p2pMu.Lock()
	defer g.p2pMu.Unlock()
	if g.senders == nil {
		return finished(g.wrap(what, errClosed))
	}
	key := [2]int{dst, tag}
	call := ring.Call{Seq: g.sendSeq[key], Kind: ring.KindSend, DType: ring.DTypeOf[T](), Root: tag, Count: len(buf)}
	g.sendSeq[key]++
	ch := g.senders[dst]
	if ch == nil {
		ch = make(chan queued, 256)
		g.senders[dst] = ch
		g.workers.Go(func() {
			for q := range ch {
				q.w.err = q.run(q.ctx)
				close(q.w.done)
			}
		})
	}
	w := &Work{done: make(chan struct{})}
	ch <- queued{ctx: ctx, w: w, run: func(ctx context.Context) error {
		per, chunks := p2pChunks[T](len(buf))
		stream := g.p2pStream(tag)
		for j := range chunks {
			a, b := min(j*per, len(buf)), min((j+1)*per, len(buf))
			if err := g.w.data.Send(ctx, g.WorldRank(dst), stream, call.Meta(0, j), ring.AsBytes(buf[a:b])); err != nil {
				return g.fail(what, err)
			}
		}
		return nil
	}}
	return w
}

// Recv receives into buf the message rank src of the group sent with tag.
func Recv[T Elem](ctx context.Context, g *Group, buf []T, src, tag int) error {
	return RecvAsync(ctx, g, buf, src, tag).Wait()
}

// RecvAsync posts the receive at once (the data is read straight into buf
// as it arrives) and returns; Wait completes it. buf must not be touched
// until Wait returns.
func RecvAsync[T Elem](ctx context.Context, g *Group, buf []T, src, tag int) *Work {
	what := fmt.Sprintf("Recv of %d elements from rank %d, tag %d", len(buf), src, tag)
	if err := g.checkPeer(what, src, tag); err != nil {
		return finished(err)
	}
	g.p2pMu.Lock()
	defer g.p2pMu.Unlock()
	key := [2]int{src, tag}
	call := ring.Call{Seq: g.recvSeq[key], Kind: ring.KindSend, DType: ring.DTypeOf[T](), Root: tag, Count: len(buf)}
	g.recvSeq[key]++
	per, chunks := p2pChunks[T](len(buf))
	stream := g.p2pStream(tag)
	peer := g.WorldRank(src)
	tickets := make([]uint64, chunks)
	for j := range chunks {
		a, b := min(j*per, len(buf)), min((j+1)*per, len(buf))
		t, err := g.w.data.Post(peer, stream, ring.AsBytes(buf[a:b]))
		if err != nil {
			return finished(g.fail(what, err))
		}
		tickets[j] = t
	}
	return &Work{done: make(chan struct{}), lazy: func() error {
		g.recvAct.begin(call.Seq, recvCall(src, tag, len(buf), call.DType))

		defer g.recvAct.end()
		for j, t := range tickets {
			a, b := min(j*per, len(buf)), min((j+1)*per, len(buf))
			meta, n, err := g.w.data.Wait(ctx, peer, stream, t)
			if err := ring.Check(src, call, 0, j, len(ring.AsBytes(buf[a:b])), meta, n, err); err != nil {
				return g.fail(what, err)
			}
		}
		return nil
	}}
}

// recvCall names a receive in stall reports.
func recvCall(src, tag, n int, dt ring.DType) call {
	return call{kind: recvKind, count: n, dtype: dt, src: src, tag: tag}
}

// Send is Send on float32.
func (g *Group) Send(ctx context.Context, buf []float32, dst, tag int) error {
	return Send(ctx, g, buf, dst, tag)
}

// Recv is Recv on float32.
func (g *Group) Recv(ctx context.Context, buf []float32, src, tag int) error {
	return Recv(ctx, g, buf, src, tag)
}

// SendAsync is SendAsync on float32.
func (g *Group) SendAsync(ctx context.Context, buf []float32, dst, tag int) *Work {
	return SendAsync(ctx, g, buf, dst, tag)
}

// RecvAsync is RecvAsync on float32.
func (g *Group) RecvAsync(ctx context.Context, buf []float32, src, tag int) *Work {
	return RecvAsync(ctx, g, buf, src, tag)
}
