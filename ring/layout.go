package ring

import "fmt"

// layout places one block per group rank in a buffer: equal blocks of
// cnt elements, or, for the vector (v) collectives, blocks of any sizes
// laid end to end in rank order.
type layout struct {
	cnt  int   // every block holds cnt elements, when offs is nil
	offs []int // else block k is [offs[k], offs[k+1])
}

// equalBlocks is the layout of blocks of cnt elements each.
func equalBlocks(cnt int) layout { return layout{cnt: cnt} }

// block returns the range block k spans.
func (l layout) block(k int) (int, int) {
	if l.offs == nil {
		return k * l.cnt, (k + 1) * l.cnt
	}
	return l.offs[k], l.offs[k+1]
}

// size returns block k's element count.
func (l layout) size(k int) int {
	lo, hi := l.block(k)
	return hi - lo
}

// total returns the element count of n blocks.
func (l layout) total(n int) int {
	_, hi := l.block(n - 1)
	return hi
}

// layoutOf checks that counts holds one non-negative count per group rank
// and returns their layout, kept in the Collectives' scratch slot which
// (0 or 1, so that a call can hold two). what and name describe the call
// and the argument for errors.
func (c *Collectives) layoutOf(which int, what, name string, counts []int) (layout, error) {
	n := c.Size()
	if len(counts) != n {
		return layout{}, fmt.Errorf("ring: %s: %s holds %d counts, want one per rank of the %d", what, name, len(counts), n)
	}
	offs := c.offs[which][:0]
	offs = append(offs, 0)
	for k, cnt := range counts {
		if cnt < 0 {
			return layout{}, fmt.Errorf("ring: %s: %s[%d] is %d, want a count ≥ 0", what, name, k, cnt)
		}
		offs = append(offs, offs[k]+cnt)
	}
	c.offs[which] = offs
	return layout{offs: offs}, nil
}

// vectorLayout checks a v form's counts (layoutOf, slot 0) and buffers:
// this rank's own block, the argument named mine, must hold its count,
// and the argument named whole all the blocks (haveWhole < 0: not
// checked, a rooted call's buffer off the root).
func (c *Collectives) vectorLayout(what string, counts []int, mine string, haveMine int, whole string, haveWhole int) (layout, error) {
	l, err := c.layoutOf(0, what, "counts", counts)
	if err != nil {
		return layout{}, err
	}
	if want := l.size(c.Rank); haveMine != want {
		return layout{}, fmt.Errorf("ring: %s: %s holds %d elements, want this rank's count, %d", what, mine, haveMine, want)
	}
	if want := l.total(c.Size()); haveWhole >= 0 && haveWhole != want {
		return layout{}, fmt.Errorf("ring: %s: %s holds %d elements, want the counts' sum, %d", what, whole, haveWhole, want)
	}
	return l, nil
}

// segments returns the layout of count elements cut into one nearly equal
// segment per group rank (segment), kept in scratch slot 1.
func (c *Collectives) segments(count int) layout {
	n := c.Size()
	offs := c.offs[1][:0]
	for k := range n {
		lo, _ := segment(k, n, count)
		offs = append(offs, lo)
	}
	offs = append(offs, count)
	c.offs[1] = offs
	return layout{offs: offs}
}
