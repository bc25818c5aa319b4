package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/gorun/gorun/tcp"
)

// ErrExcluded is Shrink's error on a rank the others left out: it came to
// the agreement after their deadline.
var ErrExcluded = errors.New("left out of the shrunk group: it did not come to the agreement before the others' deadline")

// ErrMinority is Shrink's error on the ranks that agreed when they are too
// few to go on: others went silent instead of ending (no goodbye, no
// closed connection), as a cut network makes them look, and may be going
// on beyond the cut. A group goes on only with more than half of the
// ranks not known to have ended, or half of them including the lowest,
// so that two halves of a partitioned job never both train on, each
// saving over the other's checkpoints.
var ErrMinority = errors.New("too few ranks left to go on without the silent ones")

// errShrinking is the failure a healthy group is broken with when one of
// its ranks shrinks it.
var errShrinking = errors.New("shrinking the group")

// Shrink makes, after a failure, a new world group of the ranks still
// alive, like ULFM's MPIX_Comm_shrink: every rank of this group that is
// alive calls it (a call that fails in the others sends them here), they
// agree on who is alive, and each gets a group of those ranks, renumbered
// densely in their old order. Every member gets the same set even if
// another rank dies while they agree; a rank that is slow but alive is
// waited for until ctx's deadline (GORUN_TIMEOUT without one), and one
// that misses it gets ErrExcluded. A rank that answers none of the
// others' questions for 10 s — stopped, hung, beyond a cut network — is
// given up on then, without waiting for that deadline. A rank that dies
// while the new group is connected makes the survivors agree again
// without it.
//
// Only the world group shrinks (split the shrunk world again for
// sub-groups). This group is closed after: its sub-groups fail. The new
// group reaches its peers over TCP and shared memory (RDMA is not set up
// again). ShrunkFrom tells the new ranks' old numbers.
func (g *Group) Shrink(ctx context.Context) (*Group, error) {
	if g.id != 0 {
		return nil, g.wrap("Shrink", errors.New("only the world group shrinks (split the shrunk world again)"))
	}
	if g.closed.Load() {
		return nil, g.wrap("Shrink", errClosed)
	}
	w := g.w
	s := w.settings
	// Break this group if nothing has: calls the other ranks wait in fail,
	// and they come here too.
	if g.failed("Shrink") == nil {
		g.fail("Shrink", errShrinking)
	}
	// The members are waited for until entry; then those that came get
	// GORUN_TIMEOUT more to agree (they answer at once unless they die,
	// which is seen at once) and GORUN_JOIN_TIMEOUT to connect, per try.
	// ctx's deadline bounds it all.
	entry := time.Now().Add(s.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(entry) {
		entry = d
	}
	giveUp := entry.Add(s.Timeout + s.JoinTimeout)
	host, err := hostIdentity()
	if err != nil {
		host = fmt.Sprintf("unknown-%d", s.Rank)
	}
	members := make([]int, s.Size)
	for r := range members {
		members[r] = r
	}
	defer g.Close()
	for epoch := uint32(1); ; epoch++ {
		ln, err := tcp.Listen(w.host)
		if err != nil {
			return nil, g.wrap("Shrink", err)
		}
		agreeOn := func(phase uint8, members []int) *round {
			r := &round{a: w.agree, t: w.t, me: s.Rank, members: members, epoch: epoch, phase: phase, entry: entry, answers: w.stall.answers, hook: w.hook}
			if phase > 1 || epoch > 1 {
				// The members are all here by now, unless they died.
				r.entry = time.Now().Add(s.Timeout)
			}
			return r
		}
		r1 := agreeOn(1, members)
		est, err := r1.agree(ctx, encodeMember(ln.Addr().String(), host), r1.entry.Add(s.Timeout), proposeMembers(members, w.t.Ended, s.Size))
		if err != nil {
			ln.Close()
			return nil, g.wrap("Shrink", err)
		}
		set, ended, err := decodeMembers(est)
		if err != nil {
			ln.Close()
			return nil, g.wrap("Shrink", err)
		}
		ranks := make([]int, len(set))
		for i, m := range set {
			ranks[i] = m.rank
		}
		idx := slices.Index(ranks, s.Rank)
		if idx < 0 {
			ln.Close()
			return nil, g.wrap("Shrink", ErrExcluded)
		}
		if err := quorum(s.Size, ended, ranks); err != nil {
			ln.Close()
			return nil, g.wrap("Shrink", err)
		}
		if w.hook != nil {
			w.hook("agreed")
		}
		built, berr := build(ctx, w, set, idx, ln, time.Now().Add(s.JoinTimeout))
		ok := byte(0)
		if berr == nil {
			ok = 1
		}
		r2 := agreeOn(2, ranks)
		est, err = r2.agree(ctx, []byte{ok}, r2.entry.Add(s.Timeout), proposeAll)
		if err == nil && len(est) == 1 && est[0] == 1 && built != nil {
			built.w.shrunkFrom = ranks
			return built, nil
		}
		if built != nil {
			built.w.t.Abort(errShrinking)
			built.Close()
		}
		switch {
		case err != nil:
			return nil, g.wrap("Shrink", err)
		case !time.Now().Before(giveUp):
			return nil, g.wrap("Shrink", fmt.Errorf("no working group of %v before the deadline: %w", ranks, errors.Join(berr, context.DeadlineExceeded)))
		}
		members = ranks
	}
}

// ShrunkFrom returns, for each rank of a group that Shrink made, its rank
// in the group it was shrunk from; nil for a group not made by Shrink.
func (g *Group) ShrunkFrom() []int {
	if g.id != 0 {
		return nil
	}
	return slices.Clone(g.w.shrunkFrom)
}

// build connects a new world of the members of set (this rank is set[idx])
// and makes its world group, by the deadline.
func build(ctx context.Context, old *world, set []member, idx int, ln *net.TCPListener, deadline time.Time) (*Group, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// A member that dies meanwhile cannot be waited for: give up at once,
	// and agree again without it.
	ctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go func() {
		tick := time.NewTicker(agreePoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, m := range set {
				if old.t.Gone(m.rank) {
					lost(fmt.Errorf("rank %d died while the new group was connected", m.rank))
					return
				}
			}
		}
	}()
	s := old.settings
	s.Rank, s.Size, s.LocalRank, s.LocalSize = idx, len(set), 0, 0
	addrs := make([]string, len(set))
	for i, m := range set {
		addrs[i] = m.addr
		if m.host == set[idx].host {
			if i < idx {
				s.LocalRank++
			}
			s.LocalSize++
		}
	}
	ctl := newControls(&s)
	t, err := tcp.Connect(ctx, tcpConfig(&s, ctl.control), ln, addrs)
	if err != nil {
		return nil, becauseLost(ctx, err)
	}
	d := &dataPath{tcp: t, host: old.host}
	if s.Size > 1 && s.Transport != "tcp" {
		hosts := make([]string, len(set))
		for i, m := range set {
			hosts[i] = m.host
		}
		if d.shm, d.hostOf, err = setupSharedMemory(hosts, &s, t, shareThroughMesh(ctx, t, &s)); err != nil {
			t.Abort(err)
			t.Close(ctx)
			return nil, err
		}
		if d.shm != nil {
			d.add(d.shm, "through shared memory", d.shm.Close)
		}
	}
	d.route(s.Size)
	g, err := openWorld(ctx, s, d, ctl, old.host)
	if err != nil {
		err = becauseLost(ctx, err)
	}
	if err == nil && old.hook != nil {
		g.w.hook = old.hook
		old.hook("built")
	}
	return g, err
}

// becauseLost puts first, in an error of build, the member that died.
func becauseLost(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// A member of a shrunk world: its rank before, where it listens, and its
// host (members on one host share memory).
type member struct {
	rank       int
	addr, host string
}

func encodeMember(addr, host string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(addr)))
	b = append(b, addr...)
	return append(b, host...)
}

// quorum returns nil when the ranks of set, all that agreed in a world of
// size ranks of which those in ended are known to have ended, may go on:
// more than half of the others, or half with the lowest of them.
// Otherwise ErrMinority, naming the silent ranks. A member counts as
// alive even when listed as ended (a connection to it was cut, yet it
// answered). Two groups that pass it cannot both exist: each holds at
// least half of the ranks alive, and only one can hold the lowest (a rank
// known ended to either, and in neither group, is dead).
func quorum(size int, ended, set []int) error {
	var open []int // not known to have ended (a member is alive, whatever a connection to it said)
	for r := range size {
		if !slices.Contains(ended, r) || slices.Contains(set, r) {
			open = append(open, r)
		}
	}
	if 2*len(set) > len(open) || 2*len(set) == len(open) && slices.Contains(set, open[0]) {
		return nil
	}
	var silent []int
	for _, r := range open {
		if !slices.Contains(set, r) {
			silent = append(silent, r)
		}
	}
	return fmt.Errorf("%w: ranks %v agreed; ranks %v went silent (no goodbye, no closed connection: a cut network looks so, and they may go on beyond it); a group goes on only with more than half of the %d ranks not known to have ended, or half of them with the lowest (rank %d)",
		ErrMinority, set, silent, len(open), open[0])
}

// proposeMembers is a coordinator's estimate of who is alive: the ranks of
// the world (of size ranks) it knows to have ended, then the members it
// heard from, with where they listen.
func proposeMembers(members []int, ended func(rank int) bool, size int) func(inputs [][]byte) []byte {
	return func(inputs [][]byte) []byte {
		var gone []int
		for r := range size {
			if ended(r) {
				gone = append(gone, r)
			}
		}
		b := binary.AppendUvarint(nil, uint64(len(gone)))
		for _, r := range gone {
			b = binary.AppendUvarint(b, uint64(r))
		}
		for i, in := range inputs {
			if in != nil {
				b = binary.AppendUvarint(b, uint64(members[i]))
				b = binary.AppendUvarint(b, uint64(len(in)))
				b = append(b, in...)
			}
		}
		return b
	}
}

func decodeMembers(b []byte) (set []member, ended []int, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, nil, errors.New("malformed membership")
	}
	b = b[k:]
	for range n {
		r, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, nil, errors.New("malformed membership")
		}
		ended = append(ended, int(r))
		b = b[k:]
	}
	for len(b) > 0 {
		rank, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, nil, errors.New("malformed membership")
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < size {
			return nil, nil, errors.New("malformed membership")
		}
		in := b[n : n+int(size)]
		b = b[n+int(size):]
		alen, n := binary.Uvarint(in)
		if n <= 0 || uint64(len(in)-n) < alen {
			return nil, nil, errors.New("malformed membership")
		}
		set = append(set, member{rank: int(rank), addr: string(in[n : n+int(alen)]), host: string(in[n+int(alen):])})
	}
	if len(set) == 0 {
		return nil, nil, errors.New("empty membership")
	}
	return set, ended, nil
}

// proposeAll is a coordinator's estimate of whether every member built
// the new group: 1 only when it heard 1 from all.
func proposeAll(inputs [][]byte) []byte {
	for _, in := range inputs {
		if len(in) != 1 || in[0] != 1 {
			return []byte{0}
		}
	}
	return []byte{1}
}
