package comm

import (
	"slices"
	"testing"
)

// TestHierarchyLayout: a group spanning hosts with the same number of
// ranks on each, two or more, gets a hierarchy: this rank's host's
// members in group order, and one member per host with its local index
// in the order the hosts first appear; GORUN_ALGO sets the threshold or
// turns it off; uneven hosts, one host, one rank per host and unknown
// hosts get none.
func TestHierarchyLayout(t *testing.T) {
	for _, c := range []struct {
		name         string
		algo         string
		hostOf       []int
		peers        []int
		rank         int
		local, cross []int
		min          int
	}{
		{"3 hosts × 2", "auto", []int{0, 0, 1, 1, 2, 2}, []int{0, 1, 2, 3, 4, 5}, 3, []int{2, 3}, []int{1, 3, 5}, DefaultHierBytes},
		{"interleaved", "hierarchical", []int{0, 1, 0, 1}, []int{0, 1, 2, 3}, 2, []int{0, 2}, []int{2, 3}, 0},
		{"a sub-group", "auto", []int{0, 0, 0, 1, 1, 1}, []int{5, 4, 1, 0}, 0, []int{5, 4}, []int{5, 1}, DefaultHierBytes},
		{"uneven", "auto", []int{0, 0, 0, 1, 1, 2}, []int{0, 1, 2, 3, 4, 5}, 0, nil, nil, 0},
		{"one host", "auto", []int{0, 0, 0, 0}, []int{0, 1, 2, 3}, 0, nil, nil, 0},
		{"one rank per host", "auto", []int{0, 1, 2, 3}, []int{0, 1, 2, 3}, 0, nil, nil, 0},
		{"flat", "flat", []int{0, 0, 1, 1}, []int{0, 1, 2, 3}, 0, nil, nil, 0},
		{"hosts unknown", "auto", nil, []int{0, 1, 2, 3}, 0, nil, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := &world{settings: Settings{Algo: c.algo, Size: len(c.hostOf)}, data: &dataPath{hostOf: c.hostOf}}
			h := hierarchy(w, 7, c.peers, c.rank)
			if c.local == nil {
				if h != nil {
					t.Fatalf("a hierarchy: local %v, cross %v", h.Local.Peers, h.Cross.Peers)
				}
				return
			}
			if h == nil {
				t.Fatal("no hierarchy")
			}
			if !slices.Equal(h.Local.Peers, c.local) || !slices.Equal(h.Cross.Peers, c.cross) || h.MinBytes != c.min ||
				h.Local.Peers[h.Local.Rank] != c.peers[c.rank] || h.Cross.Peers[h.Cross.Rank] != c.peers[c.rank] ||
				h.Local.Stream != 7<<16|localStream || h.Cross.Stream != 7<<16|crossStream {
				t.Errorf("local %v (rank %d, stream %#x), cross %v (rank %d, stream %#x), above %d bytes",
					h.Local.Peers, h.Local.Rank, h.Local.Stream, h.Cross.Peers, h.Cross.Rank, h.Cross.Stream, h.MinBytes)
			}
		})
	}
}
