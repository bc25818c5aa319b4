package comm

import (
	"context"
	"fmt"
	"sort"
)

// Split divides the group like MPI_Comm_split: every rank calls it; ranks
// that pass the same color form a new group, ordered by key (ties by their
// rank here). A negative color joins no group and gets nil. Sub-groups share
// the world's connections; their traffic is kept apart by a communicator id
// that every member agrees on without a server.
func (g *Group) Split(ctx context.Context, color, key int) (*Group, error) {
	g.w.mu.Lock()
	next := g.w.nextID
	g.w.mu.Unlock()
	mine := []int64{int64(color), int64(key), int64(next)}
	all := make([]int64, 3*g.Size())
	if err := AllGather(ctx, g, mine, all); err != nil {
		return nil, err
	}
	// The new id exceeds every id any member has used, so no two groups that
	// share a pair of ranks ever share an id.
	var id int64
	type member struct{ key, rank int }
	var members []member
	for r := range g.Size() {
		id = max(id, all[3*r+2])
		if all[3*r] == int64(color) && color >= 0 {
			members = append(members, member{int(all[3*r+1]), r})
		}
	}
	if id >= 1<<16 {
		return nil, g.wrap("Split", fmt.Errorf("too many communicators (%d)", id))
	}
	g.w.mu.Lock()
	g.w.nextID = max(g.w.nextID, uint32(id)+1)
	g.w.mu.Unlock()
	if color < 0 {
		return nil, nil
	}
	sort.Slice(members, func(i, j int) bool {
		if members[i].key != members[j].key {
			return members[i].key < members[j].key
		}
		return members[i].rank < members[j].rank
	})
	peers := make([]int, len(members))
	rank := -1
	for i, m := range members {
		peers[i] = g.WorldRank(m.rank)
		if m.rank == g.Rank() {
			rank = i
		}
	}
	return newGroup(g.w, uint32(id), peers, rank), nil
}
