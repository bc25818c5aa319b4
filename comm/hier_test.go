package comm

import (
	"slices"
	"testing"

	"github.com/gorun/gorun/ring"
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
		above        ring.Thresholds
	}{
		{"3 hosts × 2", "auto", []int{0, 0, 1, 1, 2, 2}, []int{0, 1, 2, 3, 4, 5}, 3, []int{2, 3}, []int{1, 3, 5}, autoThresholds()},
		{"interleaved", "hierarchical", []int{0, 1, 0, 1}, []int{0, 1, 2, 3}, 2, []int{0, 2}, []int{2, 3}, forcedThresholds()},
		{"a sub-group", "auto", []int{0, 0, 0, 1, 1, 1}, []int{5, 4, 1, 0}, 0, []int{5, 4}, []int{5, 1}, autoThresholds()},
		{"uneven", "auto", []int{0, 0, 0, 1, 1, 2}, []int{0, 1, 2, 3, 4, 5}, 0, nil, nil, ring.Thresholds{}},
		{"one host", "auto", []int{0, 0, 0, 0}, []int{0, 1, 2, 3}, 0, nil, nil, ring.Thresholds{}},
		{"one rank per host", "auto", []int{0, 1, 2, 3}, []int{0, 1, 2, 3}, 0, nil, nil, ring.Thresholds{}},
		{"flat", "flat", []int{0, 0, 1, 1}, []int{0, 1, 2, 3}, 0, nil, nil, ring.Thresholds{}},
		{"hosts unknown", "auto", nil, []int{0, 1, 2, 3}, 0, nil, nil, ring.Thresholds{}},
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
			if !slices.Equal(h.Local.Peers, c.local) || !slices.Equal(h.Cross.Peers, c.cross) || h.Above != c.above ||
				h.Local.Peers[h.Local.Rank] != c.peers[c.rank] || h.Cross.Peers[h.Cross.Rank] != c.peers[c.rank] ||
				h.Local.Stream != 7<<16|localStream || h.Cross.Stream != 7<<16|crossStream || h.Forced != (c.algo == "hierarchical") {
				t.Errorf("local %v (rank %d, stream %#x), cross %v (rank %d, stream %#x), thresholds %+v",
					h.Local.Peers, h.Local.Rank, h.Local.Stream, h.Cross.Peers, h.Cross.Rank, h.Cross.Stream, h.Above)
			}
			// Every member's position: its host's index in Cross, and its
			// index among its host's members.
			hostAt := map[int]int{} // host index → the host
			seen := map[ring.Position]bool{}
			for q, p := range h.Positions {
				if host, ok := hostAt[p.Host]; ok && host != c.hostOf[c.peers[q]] {
					t.Fatalf("group ranks on hosts %d and %d share host index %d", host, c.hostOf[c.peers[q]], p.Host)
				}
				hostAt[p.Host] = c.hostOf[c.peers[q]]
				if seen[p] || p.Local >= len(c.local) || p.Host >= len(c.cross) {
					t.Fatalf("position %+v of group rank %d repeated or out of range", p, q)
				}
				seen[p] = true
				if p.Host == h.Cross.Rank && h.Local.Peers[p.Local] != c.peers[q] {
					t.Errorf("group rank %d is at local index %d, which is world rank %d", q, p.Local, h.Local.Peers[p.Local])
				}
				if p.Local == h.Local.Rank && h.Cross.Peers[p.Host] != c.peers[q] {
					t.Errorf("group rank %d is at host index %d, where Cross has world rank %d", q, p.Host, h.Cross.Peers[p.Host])
				}
			}
			if len(h.Positions) != len(c.peers) {
				t.Errorf("%d positions for %d members", len(h.Positions), len(c.peers))
			}
		})
	}
}

// TestDescribeThresholds: rank 0's first line says which collectives go
// host by host always, which above a size or where the cost model says,
// and which never.
func TestDescribeThresholds(t *testing.T) {
	for _, c := range []struct {
		t       ring.Thresholds
		modeled bool
		want    string
	}{
		{autoThresholds(), false, "all-gathers, reduce-scatters, barriers; all-reduces above 8 MiB; not broadcasts"},
		{autoThresholds(), true, "barriers; all-reduces, all-gathers, reduce-scatters where the cost model predicts it faster; not broadcasts"},
		{forcedThresholds(), false, "all-reduces, broadcasts, all-gathers, reduce-scatters, barriers"},
		{ring.Thresholds{AllReduce: 1536, Broadcast: 64 << 10, AllGather: ring.Never, ReduceScatter: ring.Never, Barrier: ring.Never}, false,
			"all-reduces above 1536 bytes; broadcasts above 64 KiB; not all-gathers, reduce-scatters, barriers"},
	} {
		if got := describeThresholds(c.t, c.modeled); got != c.want {
			t.Errorf("describeThresholds(%+v) = %q, want %q", c.t, got, c.want)
		}
	}
}
