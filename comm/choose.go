package comm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gorun/gorun/ring"
)

// autoThresholds say when GORUN_ALGO=auto goes host by host, from the
// same cluster's measurements (BENCHMARKS.md, "Across nodes"): all-reduces
// above DefaultHierBytes; all-gathers and reduce-scatters always (0.58–
// 0.96× the flat ring's time from 4 KiB to 64 MiB); barriers always
// (0.62×); broadcasts never: the flat chain already crosses each host's
// link once, and hierarchical took 1.0–1.12× its time from 64 KiB to
// 64 MiB and 6× at 4 KiB.
func autoThresholds() ring.Thresholds {
	return ring.Thresholds{AllReduce: DefaultHierBytes, Broadcast: ring.Never, AllGather: ring.Always, ReduceScatter: ring.Always, Barrier: ring.Always}
}

// bytesText writes n bytes in MiB or KiB where they divide it.
func bytesText(n int) string {
	switch {
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// forcedThresholds are GORUN_ALGO=hierarchical's (with Hierarchy.Forced): every call.
func forcedThresholds() ring.Thresholds {
	return ring.Thresholds{AllReduce: ring.Always, Broadcast: ring.Always, AllGather: ring.Always, ReduceScatter: ring.Always, Barrier: ring.Always}
}

// describeThresholds says, for rank 0's first line, what goes host by
// host; modeled: all-reduces, all-gathers and reduce-scatters are chosen
// by a cost model, not by size.
func describeThresholds(t ring.Thresholds, modeled bool) string {
	var always, never, above, model []string
	for _, c := range []struct {
		name    string
		at      int
		byModel bool // chosen by the cost model when there is one
	}{{"all-reduces", t.AllReduce, true}, {"broadcasts", t.Broadcast, false}, {"all-gathers", t.AllGather, true},
		{"reduce-scatters", t.ReduceScatter, true}, {"barriers", t.Barrier, false}} {
		switch {
		case modeled && c.byModel:
			model = append(model, c.name)
		case c.at == ring.Always:
			always = append(always, c.name)
		case c.at == ring.Never:
			never = append(never, c.name)
		default:
			above = append(above, fmt.Sprintf("%s above %s", c.name, bytesText(c.at)))
		}
	}
	parts := above
	if len(model) > 0 {
		parts = append([]string{strings.Join(model, ", ") + " where the cost model predicts it faster"}, parts...)
	}
	if len(always) > 0 {
		parts = append([]string{strings.Join(always, ", ")}, parts...)
	}
	msg := strings.Join(parts, "; ")
	if len(never) > 0 {
		msg += "; not " + strings.Join(never, ", ")
	}
	return msg
}

// hierarchy lays out a group of peers (world ranks; this member is
// peers[rank]) across hosts for hierarchical collectives, or returns nil:
// when the hosts are unknown (TCP forced), the group is on one host, a
// host holds one member, the hosts hold different numbers of members, or
// GORUN_ALGO says flat. All members compute the same answer.
func hierarchy(w *world, id uint32, peers []int, rank int) *ring.Hierarchy {
	s := &w.settings
	hostOf := w.data.hostOf
	if s.Algo == "flat" || hostOf == nil || len(peers) < 4 {
		return nil
	}
	var hosts []int            // in order of first appearance in the group
	members := map[int][]int{} // host → group ranks, in group order
	for i, p := range peers {
		h := hostOf[p]
		if len(members[h]) == 0 {
			hosts = append(hosts, h)
		}
		members[h] = append(members[h], i)
	}
	l := len(members[hosts[0]])
	if len(hosts) < 2 || l < 2 {
		return nil
	}
	for _, h := range hosts {
		if len(members[h]) != l {
			return nil // uneven hosts: flat
		}
	}
	positions := make([]ring.Position, len(peers))
	for j, h := range hosts {
		for li, m := range members[h] {
			positions[m] = ring.Position{Host: j, Local: li}
		}
	}
	mine := members[hostOf[peers[rank]]]
	local := make([]int, l)
	li := 0
	for j, m := range mine {
		local[j] = peers[m]
		if m == rank {
			li = j
		}
	}
	cross := make([]int, len(hosts))
	for j, h := range hosts {
		cross[j] = peers[members[h][li]]
	}
	above := autoThresholds()
	if s.Algo == "hierarchical" {
		above = forcedThresholds()
	}
	sub := func(p []int, r int, stream uint32) *ring.Collectives {
		c := tuned(w, p, r, id<<16|stream)
		return &c
	}
	x := sub(cross, slices.Index(cross, peers[rank]), crossStream)
	x.Costs = costsFor(w, cross, l) // the l cross groups share each host's link
	return &ring.Hierarchy{Local: sub(local, li, localStream), Cross: x, Positions: positions, Above: above, Forced: s.Algo == "hierarchical"}
}

// tuned is the collectives of the group of peers (this rank being rank
// among them) on stream, with every size threshold chosen for that group.
func tuned(w *world, peers []int, rank int, stream uint32) ring.Collectives {
	return ring.Collectives{T: w.data, Peers: peers, Rank: rank, Stream: stream,
		SmallBytes: w.settings.SmallBytes, ChunkBytes: chunkBytes(w, peers), MessageChunkBytes: messageChunkBytes(w, peers),
		OneShotBytes: oneShotBytes(w, peers), HalvingBytes: halvingBytes(w, peers), BruckBytes: bruckBytes(w, peers),
		LinearReduceBytes: linearReduceBytes(w, peers), TreeScatterBytes: treeScatterBytes(w, peers)}
}

// messageChunkBytes is the frame size of a group's messages
// (ring.Collectives.MessageChunkBytes): ring.DefaultChunkBytes where
// chunkBytes gives a group on one host that talks over TCP its smaller
// chunk, else 0 (the chunk). The smaller chunk was chosen for the ring
// all-reduce; the streams of Reduce, Gather, Scatter and Broadcast, and
// the 16-bit types' exchanges, ran faster over loopback in frames of 1–2
// MiB on the two CPUs measured (BENCHMARKS.md, "Loopback TCP's messages
// one way", and bench/results/current/tcp-frames-2026-11-29-zen4.txt,
// section 3).
func messageChunkBytes(w *world, peers []int) int {
	if w.settings.ChunkBytes <= 0 && loopbackTCP(w, peers) {
		return ring.DefaultChunkBytes
	}
	return 0
}

// chunkBytes is the ring algorithms' chunk for a group of peers: the
// setting if there is one, else DefaultNetChunkBytes for a group on one
// host that talks over TCP when no host of the job is crowded, else
// ring.DefaultChunkBytes (through shared memory, and across hosts). Every
// member computes the same answer.
func chunkBytes(w *world, peers []int) int {
	switch {
	case w.settings.ChunkBytes > 0:
		return w.settings.ChunkBytes
	case loopbackTCP(w, peers):
		return DefaultNetChunkBytes
	}
	return ring.DefaultChunkBytes
}

// loopbackTCP reports whether peers are a group on one host that talks
// over TCP, no host of the job crowded: the group DefaultNetChunkBytes
// was measured for.
func loopbackTCP(w *world, peers []int) bool {
	return !w.crowded && !allShared(w, peers) && !spansHosts(w.data.hostOf, peers)
}

// spansHosts reports whether peers live on more than one host, by
// hostOf (the host of each world rank; nil when the ranks did not compare
// hosts: TCP forced, and then false).
func spansHosts(hostOf, peers []int) bool {
	if hostOf == nil {
		return false
	}
	for _, p := range peers {
		if hostOf[p] != hostOf[peers[0]] {
			return true
		}
	}
	return false
}

// halvingBytes is the halving-doubling crossover for a group of peers: 0
// when every member is reached through shared memory, where the ring wins,
// else the setting. Every member computes the same answer.
func halvingBytes(w *world, peers []int) int {
	n := w.settings.HalvingBytes
	switch {
	case n < 0 || allShared(w, peers):
		return 0
	case n == 0:
		return DefaultHalvingBytes
	}
	return n
}

// bruckBytes is the block size up to which a group's all-to-alls use
// Bruck's algorithm: the setting when there is one (-1: never); by
// default DefaultBruckBytes for groups of at least BruckMinRanks with a
// member reached over the network, and never for the rest, where
// pairwise exchange won or tied at every size measured. Every member
// computes the same answer.
func bruckBytes(w *world, peers []int) int {
	return sizeSetting(w.settings.BruckBytes, DefaultBruckBytes, len(peers) >= BruckMinRanks && !allShared(w, peers))
}

// linearReduceBytes is the size up to which a group's Reduces send every
// buffer straight to the root: the setting when there is one (-1:
// never); by default DefaultLinearReduceBytes for groups of at most
// LinearReduceMaxRanks with a member reached over the network, and never
// for the rest (through shared memory the tree won). Every member
// computes the same answer.
func linearReduceBytes(w *world, peers []int) int {
	return sizeSetting(w.settings.LinearReduceBytes, DefaultLinearReduceBytes, len(peers) <= LinearReduceMaxRanks && !allShared(w, peers))
}

// treeScatterBytes is the size of the root's buffer up to which a
// group's Scatters go down a binomial tree: the setting when there is one
// (-1: never); by default DefaultTreeScatterBytes for groups with a member
// reached over the network, and never for groups all on shared memory
// (where the root's sends cost little: the linear Scatter won at 16 B
// and tied at 1–4 KiB). Every member computes the same answer.
func treeScatterBytes(w *world, peers []int) int {
	return sizeSetting(w.settings.TreeScatterBytes, DefaultTreeScatterBytes, !allShared(w, peers))
}

// sizeSetting is a size threshold from its setting: 0 (off) for -1, the
// setting when positive, and for 0 (unset) def where the default applies,
// else 0.
func sizeSetting(setting, def int, applies bool) int {
	switch {
	case setting < 0:
		return 0
	case setting > 0:
		return setting
	case applies:
		return def
	}
	return 0
}

// allShared tells whether this rank reaches every other member of peers
// through shared memory.
func allShared(w *world, peers []int) bool {
	if w.data.shm == nil {
		return false
	}
	for _, p := range peers {
		if p != w.settings.Rank && !w.data.shm.Has(p) {
			return false
		}
	}
	return true
}

// oneShotBytes is the one-shot all-reduce's crossover for a group of
// peers: the setting when every member is reached through shared memory
// (every member computes the same answer: they share one machine) and
// the group has at most oneShotMaxRanks, else 0.
func oneShotBytes(w *world, peers []int) int {
	n := w.settings.OneShotBytes
	switch {
	case n < 0 || len(peers) > oneShotMaxRanks || !allShared(w, peers):
		return 0
	case n == 0:
		return DefaultOneShotBytes
	}
	return n
}
