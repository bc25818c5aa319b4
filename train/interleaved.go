package train

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/comm"
)

// pass is one step of a rank's schedule: a forward or a backward of one
// microbatch through one of the rank's chunks.
type pass struct {
	kind  Pass // PassForward or PassBackward
	chunk int  // the rank's chunk, 0..V−1 (the model's chunk chunk·p + rank)
	micro int
}

// interleavedOrders returns the passes of every rank of a pipeline of p
// ranks each holding v chunks, for m microbatches, in the interleaved 1F1B
// order of Megatron-LM (Narayanan et al., "Efficient Large-Scale Language
// Model Training on GPU Clusters", SC 2021): the microbatches go in groups
// of p (the last group may be smaller); a group's forwards run through the
// rank's first chunk, then its second, and so on, and its backwards
// through the chunks in reverse order. Rank r first runs 2(p−r−1) +
// (v−1)·p forwards (the warm-up: what the later chunks need before the
// first backward can come back), then alternates one forward and one
// backward, then runs the remaining backwards. With v = 1 this is 1F1B's
// order.
//
// Each forward's input comes from the previous rank (rank 0's chunks after
// the first: from rank p−1) and each backward's gradient from the next
// one. When the last group is small, that warm-up can leave ranks waiting
// on each other in a cycle (p = 4, v = 3, m = 5: Megatron-LM asks for a
// multiple of p); so the orders are run in simulation, and a rank stuck
// at a backward warms up with one forward more, until all finish. That
// ends: with every forward first, no rank waits on a later one.
func interleavedOrders(p, v, m int) [][]pass {
	warm := make([]int, p)
	for r := range warm {
		warm[r] = 2*(p-r-1) + (v-1)*p
		if v == 1 {
			warm[r] = p - r - 1 // 1F1B's
		}
	}
	orders := make([][]pass, p)
	for {
		for r := range orders {
			orders[r] = orderWithWarmup(p, v, m, warm[r])
		}
		stuck := simulate(orders, p, v)
		if len(stuck) == 0 {
			return orders
		}
		for _, r := range stuck {
			warm[r]++
		}
	}
}

// orderWithWarmup is one rank's interleaved order with warm forwards
// before the first backward.
func orderWithWarmup(p, v, m, warm int) []pass {
	forwards := groupOrder(p, v, m, false)
	backwards := groupOrder(p, v, m, true)
	warm = min(warm, len(forwards))
	order := make([]pass, 0, 2*len(forwards))
	for i := range warm {
		order = append(order, pass{PassForward, forwards[i].chunk, forwards[i].micro})
	}
	for i := range len(forwards) - warm {
		f, b := forwards[warm+i], backwards[i]
		order = append(order, pass{PassForward, f.chunk, f.micro}, pass{PassBackward, b.chunk, b.micro})
	}
	for _, b := range backwards[len(forwards)-warm:] {
		order = append(order, pass{PassBackward, b.chunk, b.micro})
	}
	return order
}

// groupOrder lists the (chunk, microbatch) pairs of m microbatches through
// v chunks, microbatches in groups of p, each group through the chunks in
// order (reverse: last chunk first).
func groupOrder(p, v, m int, reverse bool) []pass {
	var out []pass
	for lo := 0; lo < m; lo += p {
		hi := min(lo+p, m)
		for c := range v {
			if reverse {
				c = v - 1 - c
			}
			for k := lo; k < hi; k++ {
				out = append(out, pass{chunk: c, micro: k})
			}
		}
	}
	return out
}

// slotsNeeded returns, for each of the v chunks, the most microbatches
// whose activations order holds at once (a forward takes a slot, its
// backward gives it back).
func slotsNeeded(order []pass, v int) []int {
	live, most := make([]int, v), make([]int, v)
	for _, o := range order {
		if o.kind == PassForward {
			live[o.chunk]++
			most[o.chunk] = max(most[o.chunk], live[o.chunk])
		} else {
			live[o.chunk]--
		}
	}
	return most
}

// simulate runs the orders of all p ranks (rank r holding the model's
// chunks r, r+p, …) as the pipeline does, sends never blocking: a rank's
// next pass runs once its input has come (a forward needs the previous
// chunk's forward of its microbatch, a backward the next chunk's backward
// and its own forward). When all ranks cannot finish, it returns the ranks
// stuck at a backward (there is one: the stuck forward first in the group
// order waits on a rank that passed its forwards before it, so that rank
// is stuck at a backward).
func simulate(orders [][]pass, p, v int) []int {
	done := map[[3]int]bool{} // kind, model chunk, microbatch
	next := make([]int, p)
	for {
		progress, finished := false, true
		for r := range p {
			if next[r] == len(orders[r]) {
				continue
			}
			finished = false
			o := orders[r][next[r]]
			c := o.chunk*p + r
			var ready bool
			if o.kind == PassForward {
				ready = c == 0 || done[[3]int{int(PassForward), c - 1, o.micro}]
			} else {
				ready = done[[3]int{int(PassForward), c, o.micro}] &&
					(c == p*v-1 || done[[3]int{int(PassBackward), c + 1, o.micro}])
			}
			if ready {
				done[[3]int{int(o.kind), c, o.micro}] = true
				next[r]++
				progress = true
			}
		}
		if finished {
			return nil
		}
		if !progress {
			var stuck []int
			for r := range p {
				if next[r] < len(orders[r]) && orders[r][next[r]].kind == PassBackward {
					stuck = append(stuck, r)
				}
			}
			return stuck
		}
	}
}

// rankOrder is this rank's interleaved schedule for one microbatch count:
// its passes, and how many microbatches each chunk holds at most.
type rankOrder struct {
	passes []pass
	slots  []int
}

// order returns this rank's interleaved schedule for m microbatches
// through v chunks (interleavedOrders), worked out once per m.
func (p *Pipeline) order(m, v int) rankOrder {
	if o, ok := p.orders[m]; ok {
		return o
	}
	if p.orders == nil {
		p.orders = map[int]rankOrder{}
	}
	passes := interleavedOrders(p.stages, v, m)[p.stage]
	o := rankOrder{passes, slotsNeeded(passes, v)}
	p.orders[m] = o
	return o
}

// runInterleaved runs this rank's passes in the interleaved 1F1B order
// (interleavedOrders). A forward takes the free slot of its chunk that was
// freed longest ago (a chunk has as many replicas as the order ever holds
// microbatches in it at once), receives its input there and computes; a
// backward receives its gradient into its microbatch's slot, computes and
// frees the slot. A replica's output and input gradient are sent straight
// from its storage, which may be the slot's received input or gradient
// (a chunk of layers that pass their input through, or compute the
// gradient in place: a ReLU), so a forward first waits for the send of
// the slot's last output, and a backward for that of its last input
// gradient, before anything is received into the slot — not for every
// send in flight, which would make this stage wait until its neighbour
// posts receives it has no use for yet. (Received first, the race pass of
// TestPipelineMatchesOneProcess caught a gradient arriving in storage
// still being sent from.)
func (p *Pipeline) runInterleaved(ctx context.Context) error {
	m := len(p.sizes)
	order := p.order(m, len(p.chunks))
	for v, n := range order.slots {
		p.beginChunk(p.chunks[v], m, n)
	}
	for _, o := range order.passes {
		ch := p.chunks[o.chunk]
		if o.kind == PassForward {
			slot := ch.take(o.micro)
			if err := p.receiveActivation(ctx, ch, o.micro, slot, p.waitRecv); err != nil {
				return err
			}
			if err := p.forward(ctx, ch, o.micro, slot); err != nil {
				return err
			}
			continue
		}
		slot := ch.slotOf[o.micro]
		if err := p.receiveGradient(ctx, ch, o.micro, slot, p.waitRecv); err != nil {
			return err
		}
		if err := p.backward(ctx, ch, o.micro, slot); err != nil {
			return err
		}
		ch.release(slot)
	}
	return nil
}

// waitSent waits for the send recorded for slot in sent, if any.
func (p *Pipeline) waitSent(sent []*comm.Work, slot int) error {
	if w := sent[slot]; w != nil {
		if err := w.Wait(); err != nil {
			return fmt.Errorf("stage %d: sending: %w", p.stage, err)
		}
		sent[slot] = nil
	}
	return nil
}

// take gives microbatch k the free slot freed longest ago.
func (ch *chunk) take(k int) int {
	slot := -1
	for s, at := range ch.freedAt {
		if at >= 0 && (slot < 0 || at < ch.freedAt[slot]) {
			slot = s
		}
	}
	ch.freedAt[slot] = -1
	ch.slotOf[k] = slot
	return slot
}

// release frees slot.
func (ch *chunk) release(slot int) {
	ch.freed++
	ch.freedAt[slot] = ch.freed
}

// beginChunk readies ch for a step of m microbatches that holds at most n at
// once: n slots, all free (more added if a short batch's order needs more
// than the full one's).
func (p *Pipeline) beginChunk(ch *chunk, m, n int) {
	p.addSlots(ch, n)
	for s := range ch.freedAt {
		ch.freedAt[s] = 0
	}
	ch.freed = 0
	if len(ch.slotOf) < m {
		ch.slotOf = make([]int, m)
	}
}
