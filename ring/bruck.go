package ring

import "context"

// bruckAllToAll is Bruck et al.'s all-to-all ("Efficient algorithms for
// all-to-all communications in multiport message-passing systems", 1997):
// ⌈log2 n⌉ steps instead of pairwise exchange's n−1 messages. Blocks are
// indexed by distance: block i of this rank goes to rank r+i. At the step
// of bit b every rank sends the blocks whose index has bit b set, packed
// into one message, to rank r+b and receives the same positions from rank
// r−b; a block thus travels once per set bit of its distance and, after
// the last step, block i holds what rank r−i sent here. Each rank moves
// about (n/2)·log2(n) blocks rather than n−1, so it pays for small blocks
// among many ranks, where a message's latency outweighs its bytes.
func bruckAllToAll[T Elem](ctx context.Context, c *Collectives, call Call, send, recv []T, cnt int) error {
	n, r := c.Size(), c.Rank
	c.tickets = c.tickets[:0]
	most := n / 2 // blocks in one step's message: indices below n with a given bit set
	s := scratchOf[T](c, (n+2*most)*cnt)
	blocks, out, in := s[:n*cnt], s[n*cnt:(n+most)*cnt], s[(n+most)*cnt:]
	for i := range n { // rotate: block i is the one for rank r+i
		p := mod(r+i, n)
		copy(blocks[i*cnt:(i+1)*cnt], send[p*cnt:(p+1)*cnt])
	}
	for step, bit := 0, 1; bit < n; step, bit = step+1, bit<<1 {
		k := 0
		for i := bit; i < n; i++ {
			if i&bit != 0 {
				copy(out[k*cnt:(k+1)*cnt], blocks[i*cnt:(i+1)*cnt])
				k++
			}
		}
		msg := AsBytes(in[:k*cnt])
		if err := c.sendRecv(ctx, call, step, 0, mod(r+bit, n), AsBytes(out[:k*cnt]), mod(r-bit, n), msg, len(msg)); err != nil {
			return err
		}
		k = 0
		for i := bit; i < n; i++ {
			if i&bit != 0 {
				copy(blocks[i*cnt:(i+1)*cnt], in[k*cnt:(k+1)*cnt])
				k++
			}
		}
	}
	for i := range n { // block i came from rank r−i
		p := mod(r-i, n)
		copy(recv[p*cnt:(p+1)*cnt], blocks[i*cnt:(i+1)*cnt])
	}
	return nil
}
