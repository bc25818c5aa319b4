package ring

import (
	"fmt"
	"math"
	"time"
)

// Link prices a message over one kind of link: a fixed cost per step and
// a rate. Between hosts the rate is one host's interface, which the flows
// leaving a host at the same time share.
type Link struct {
	Step        time.Duration
	BytesPerSec float64
}

func (l Link) String() string {
	return fmt.Sprintf("%v per step, %.3g GB/s", l.Step, l.BytesPerSec/1e9)
}

// Costs describe the links of a group that spans hosts, so that its
// all-reduces, all-gathers and reduce-scatters are chosen by predicted
// time (latency and bandwidth per kind of link) instead of by fixed
// sizes. Every member must hold the same Costs.
type Costs struct {
	Net, Local Link
	// Reduce is the element-wise reduction's rate in bytes of the result
	// per second (0: not priced). Recursive doubling and halving-doubling
	// reduce what a step received only once it has all arrived, so their
	// steps take that much longer; the ring reduces each chunk while the
	// next one travels, so its steps take the longer of the two. (Without
	// it the model chose doubling for two ranks across hosts at every
	// size: one step less than the ring, at the same bandwidth.)
	Reduce float64
	// Chunk is the ring's pipelining chunk in bytes (0: not priced). Its
	// pipeline fills once a call: the first chunk crosses, and is reduced,
	// before the next step has anything to send. A ring whose blocks are
	// no larger than a chunk has no pipeline: each step reduces after its
	// transfer, as doubling's do.
	Chunk int
	// Host[q] is group rank q's host (any labels).
	Host []int

	lines  map[Algo]line // each all-reduce algorithm's time for a buffer: fixed + per-byte
	plain  line          // the ring's without a pipeline (Chunk)
	gather line          // the ring all-gather's (and reduce-scatter's) time for the whole buffer
}

// cost is the predicted seconds of an all-reduce of bytes by algo, and
// whether the model covers it (m prepared).
func (m *Costs) cost(algo Algo, bytes int) (float64, bool) {
	l, ok := m.lines[algo]
	if algo == AlgoRing && bytes <= m.Chunk*len(m.Host) {
		l = m.plain
	}
	return l.at(bytes), ok
}

// line is a predicted time a + b·bytes, in seconds.
type line struct{ a, b float64 }

func (l line) at(bytes int) float64 { return l.a + l.b*float64(bytes) }

// Predict returns the predicted time of an all-reduce of bytes by algo
// (AlgoRing, AlgoDoubling, AlgoHalving, or AlgoHierarchical when h is not
// nil), and whether the model covers it.
func (m *Costs) Predict(algo Algo, bytes int, h *Hierarchy) (time.Duration, bool) {
	if algo == AlgoHierarchical {
		if h == nil {
			return 0, false
		}
		return time.Duration(m.hierarchical(h, bytes) * 1e9), true
	}
	m.prepare()
	t, ok := m.cost(algo, bytes)
	return time.Duration(t * 1e9), ok
}

// choose returns the all-reduce of bytes predicted fastest among those
// this group can run: recursive doubling, halving-doubling (more than two
// ranks), the ring, and host by host when h is not nil.
func (m *Costs) choose(bytes int, h *Hierarchy) Algo {
	m.prepare()
	best, algo := math.Inf(1), AlgoRing
	for _, a := range []Algo{AlgoDoubling, AlgoHalving, AlgoRing} {
		if t, ok := m.cost(a, bytes); ok && t < best {
			best, algo = t, a
		}
	}
	if h != nil && m.hierarchical(h, bytes) < best {
		algo = AlgoHierarchical
	}
	return algo
}

// hierarchical prices hierarchicalAllReduce: a ring reduce-scatter and
// all-gather within the host, and the cross-host all-reduce of 1/L of the
// buffer, the L cross groups sharing each host's interface.
func (m *Costs) hierarchical(h *Hierarchy, bytes int) float64 {
	l := h.Local.Size()
	shard := bytes / l
	local := 2 * float64(l-1) * (m.Local.Step.Seconds() + float64(shard)/m.Local.BytesPerSec)
	cross := h.Cross.Costs
	if cross == nil {
		t, _ := m.cost(AlgoRing, shard) // (not reached: comm sets both)
		return local + t
	}
	t, _ := cross.cost(cross.choose(shard, nil), shard) // (choose prepares cross)
	return local + t
}

// prepare works out each algorithm's line once: the steps it takes, and
// in each step the transfers made at once, priced on the slowest link any
// of them uses (a step that leaves a host: the step cost between hosts
// and its bytes times the most flows leaving one host, over the
// interface's rate).
func (m *Costs) prepare() {
	if m.lines != nil {
		return
	}
	n := len(m.Host)
	m.lines = map[Algo]line{AlgoRing: {}}
	if n < 2 {
		return
	}
	ring := m.ringStep()
	m.lines[AlgoRing] = m.fill(ring).plus(m.overlapped(ring, 1/float64(n)), n-1).plus(ring, n-1)
	m.plain = line{}.plus(m.then(ring, 1/float64(n)), n-1).plus(ring, n-1)
	m.gather = line{}.plus(ring, n-1)
	f := newFold(n)
	var folds []transfer // the pairing before (and, reversed, after)
	for r := 0; r < 2*f.rem; r += 2 {
		folds = append(folds, transfer{r, r + 1})
	}
	across := func(mask int) []transfer { // every taking part with its partner across bit mask
		var ts []transfer
		for v := range f.p2 {
			ts = append(ts, transfer{f.real(v), f.real(v ^ mask)})
		}
		return ts
	}
	var doubling, halving line
	if len(folds) > 0 { // in, reducing, and out
		fold := m.step(folds, 1)
		doubling = doubling.plus(m.then(fold, 1), 1).plus(fold, 1)
		halving = halving.plus(m.then(fold, 1), 1).plus(fold, 1)
	}
	for mask := 1; mask < f.p2; mask <<= 1 {
		ts := across(mask)
		doubling = doubling.plus(m.then(m.step(ts, 1), 1), 1)
		// Halving sends half its window at bit mask: mask/p2 of the buffer,
		// once while reducing and once while gathering.
		share := float64(mask) / float64(f.p2)
		half := m.step(ts, share)
		halving = halving.plus(m.then(half, share), 1).plus(half, 1)
	}
	m.lines[AlgoDoubling] = doubling
	if n > 2 {
		m.lines[AlgoHalving] = halving
	}
}

// ringStep prices one step of the ring: each rank passing 1/n of the
// buffer to the next. The all-reduce takes 2(n−1) of them, the all-gather
// and the reduce-scatter n−1.
func (m *Costs) ringStep() line {
	n := len(m.Host)
	if n < 2 {
		return line{}
	}
	ts := make([]transfer, n)
	for r := range n {
		ts[r] = transfer{r, (r + 1) % n}
	}
	return m.step(ts, 1/float64(n))
}

// gatherHierarchical reports whether the model predicts an all-gather
// (or reduce-scatter) whose whole buffer is bytes faster host by host
// than by the flat ring: the ring among one local index across hosts
// moves the members' blocks (bytes/n each, the L cross groups sharing
// each host's link), the ring within the host the bundles (bytes/L each
// step), and a copy puts the buffer in order.
func (m *Costs) gatherHierarchical(h *Hierarchy, bytes int) bool {
	m.prepare()
	cross := h.Cross.Costs
	cross.prepare()
	n, l, hosts := len(m.Host), h.Local.Size(), h.Cross.Size()
	b := float64(bytes)
	local := float64(l-1)*(m.Local.Step.Seconds()+b/float64(l)/m.Local.BytesPerSec) + b/m.Local.BytesPerSec
	return local+cross.gather.at(hosts*bytes/n) < m.gather.at(bytes)
}

type transfer struct{ from, to int }

// then prices step s followed by the reduction of share of the buffer.
func (m *Costs) then(s line, share float64) line {
	if m.Reduce > 0 {
		s.b += share / m.Reduce
	}
	return s
}

// fill prices the ring's pipeline filling, given its step s (each rank
// passing 1/n of the buffer): one chunk's transfer at that step's rate,
// and its reduction.
func (m *Costs) fill(s line) line {
	n := len(m.Host)
	l := line{a: float64(m.Chunk) * s.b * float64(n)}
	if m.Reduce > 0 {
		l.a += float64(m.Chunk) / m.Reduce
	}
	return l
}

// overlapped prices step s with the reduction of share of the buffer
// running beside the transfer, chunk by chunk: the slower of the two.
func (m *Costs) overlapped(s line, share float64) line {
	if m.Reduce > 0 {
		s.b = max(s.b, share/m.Reduce)
	}
	return s
}

// step prices one step in which every transfer carries share of the
// buffer at once.
func (m *Costs) step(ts []transfer, share float64) line {
	leaving := map[int]int{} // host → flows leaving it
	most := 0
	for _, t := range ts {
		if m.Host[t.from] != m.Host[t.to] {
			leaving[m.Host[t.from]]++
			most = max(most, leaving[m.Host[t.from]])
		}
	}
	if most == 0 {
		return line{m.Local.Step.Seconds(), share / m.Local.BytesPerSec}
	}
	return line{m.Net.Step.Seconds(), float64(most) * share / m.Net.BytesPerSec}
}

// plus returns l with k more of step s.
func (l line) plus(s line, k int) line {
	return line{l.a + float64(k)*s.a, l.b + float64(k)*s.b}
}
