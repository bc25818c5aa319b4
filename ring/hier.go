package ring

import "context"

// Hierarchy describes a group whose members sit on several hosts, the
// same number L of them on each: Local is this member's host's members,
// Cross the members with this member's local index on every host (one
// per host). Both must be laid out alike on every member: Local in group
// order, Cross in the order of the hosts.
type Hierarchy struct {
	Local, Cross *Collectives
	// MinBytes: all-reduces of more bytes are hierarchical.
	MinBytes int
}

// hierarchicalAllReduce all-reduces buf in three steps, so that the
// links between hosts carry 1/L of the data each and every host's link
// works at once: reduce-scatter among the host's members (shared memory),
// leaving member i of each host with block i summed over its host;
// all-reduce of block i among the members with local index i, one per
// host (the cross-host algorithm chosen for the block's size); then
// all-gather among the host's members. Blocks are whole elements: the
// last len(buf) mod L elements are all-reduced over the whole group.
func hierarchicalAllReduce[T Elem](ctx context.Context, c *Collectives, buf []T, op Op) error {
	h := c.Hier
	l, i := h.Local.Size(), h.Local.Rank
	k := len(buf) / l
	if k > 0 {
		main := buf[:k*l]
		mine := main[i*k : (i+1)*k]
		// In place: each member's own block of main is read only in the
		// reduce-scatter's last step, where it is also written.
		if err := ReduceScatter(ctx, h.Local, main, mine, op); err != nil {
			return err
		}
		if err := AllReduce(ctx, h.Cross, mine, op); err != nil {
			return err
		}
		if err := AllGather(ctx, h.Local, mine, main); err != nil {
			return err
		}
	}
	if tail := buf[k*l:]; len(tail) > 0 {
		return flatAllReduce(ctx, c, tail, op)
	}
	return nil
}
