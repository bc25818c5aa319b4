package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/comm/rendezvous"
	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/shm"
	"github.com/gorun/gorun/tcp"
)

// Op is a reduction: Sum, Avg, Max, Min or Prod.
type Op = ring.Op

// Reductions.
const (
	Sum  = ring.Sum
	Avg  = ring.Avg
	Max  = ring.Max
	Min  = ring.Min
	Prod = ring.Prod
)

// Elem is an element type the collectives accept: float32, float64,
// BFloat16, Float16, int8, int16, int32, int64, uint8, uint16, uint32,
// uint64.
type Elem = ring.Elem

// BFloat16 is a bfloat16 number. Sum, Avg and Prod of 16-bit floats
// combine every rank's contribution in float32 and round once, the bytes
// on the wire staying 16-bit (ring/halfreduce.go).
type BFloat16 = ring.BFloat16

// Float16 is an IEEE 754 half-precision number, reduced as BFloat16 is.
type Float16 = ring.Float16

// NewBFloat16 rounds f to the nearest bfloat16, ties to even (torch's
// conversion); read it back with its Float32 method.
func NewBFloat16(f float32) BFloat16 { return ring.NewBFloat16(f) }

// NewFloat16 rounds f to the nearest float16, ties to even, overflowing
// to infinity (torch's conversion); read it back with its Float32 method.
func NewFloat16(f float32) Float16 { return ring.NewFloat16(f) }

// MismatchError reports that ranks made different calls.
type MismatchError = ring.MismatchError

// PeerError names the rank an error concerns (a dead peer, a broken connection).
type PeerError = tcp.PeerError

// AbortError carries the error another rank aborted the job with.
type AbortError = tcp.AbortError

// MaxTag bounds point-to-point tags: 0 <= tag <= MaxTag.
const MaxTag = 1<<16 - 4

// The streams of a group's hierarchical all-reduce, after its
// point-to-point tags' (id<<16 | tag+1).
const (
	localStream = 1<<16 - 2
	crossStream = 1<<16 - 1
)

// world is what all groups of one process share: the transport and the
// counter that keeps communicator ids unique.
type world struct {
	t        *tcp.Transport // connections, failures, aborts; data to other hosts
	data     *dataPath      // where each peer's data goes: shared memory or t
	settings Settings
	// crowded: some host of the job runs more ranks than it has cores
	// (agreed on by all ranks in Join).
	crowded bool
	// net is the link between hosts the cost model prices (netLink; zero:
	// none).
	net    ring.Link
	mu     sync.Mutex
	nextID uint32 // lowest communicator id this rank has not used
	// stopWatch stops watching the launcher (GORUN_LAUNCHER_PID).
	stopWatch func()
	// stall answers where this rank is and reports stalled calls.
	stall *stallWatch
	// agree holds what the other ranks sent this one's agreements (Shrink).
	agree *agreement
	// host is the address this rank listens on (a shrunk world's too).
	host string
	// shrunkFrom maps this world's ranks to the ranks of the world it was
	// shrunk from (nil: not shrunk).
	shrunkFrom []int
	// hook, when set (tests only), is called at named points of Shrink
	// and Close.
	hook func(point string)
	// subs are the sub-groups made from this world (guarded by mu; at most
	// Split's 65,535): the world's Close closes them and waits for their
	// calls too.
	subs []*Group
}

// Group is a set of ranks that run collectives together. The world group
// comes from Init; Split makes sub-groups sharing its connections. A Group's
// methods may be called from several goroutines; collectives run one at a
// time in the order they are issued.
type Group struct {
	w    *world
	id   uint32
	ring ring.Collectives

	mu      sync.Mutex   // held while a collective runs
	act     activity     // the running or last collective, for farewells and stall reports
	recvAct activity     // the latest point-to-point receive waited for, for stall reports
	qmu     sync.RWMutex // guards sending on queue against Close
	pending atomic.Int64
	queue   chan queued
	startQ  sync.Once
	closed  atomic.Bool

	// err holds the first error: the group is broken after it. An atomic
	// pointer, not a lock, because every call checks it.
	err atomic.Pointer[error]

	p2pMu   sync.Mutex
	sendSeq map[[2]int]uint64 // (peer, tag) → next sequence number
	recvSeq map[[2]int]uint64
	senders map[int]chan queued // per-peer ordered async sends

	// workers counts the goroutines running queued calls (the
	// collectives' queue, the per-peer senders): Close waits for them
	// before it unmaps the transports they may still be using.
	workers sync.WaitGroup
}

type queued struct {
	ctx  context.Context
	call call
	run  func(context.Context) error
	w    *Work
}

// Work is the handle of an asynchronous call.
type Work struct {
	done       chan struct{}
	err        error
	once       sync.Once
	lazy       func() error
	start, end time.Time
}

// Wait blocks until the call has finished and returns its error.
func (w *Work) Wait() error {
	if w.lazy != nil {
		w.once.Do(func() { w.err = w.lazy(); close(w.done) })
	}
	<-w.done
	return w.err
}

// Done is closed when the call has finished (for a receive, once Wait has run).
func (w *Work) Done() <-chan struct{} { return w.done }

// Span returns when a queued collective started running and when it
// finished (zero times for point-to-point work). Valid after Wait.
func (w *Work) Span() (start, end time.Time) { return w.start, w.end }

func finished(err error) *Work {
	w := &Work{done: make(chan struct{}), err: err}
	close(w.done)
	return w
}

// Init joins the job the environment and opts describe and returns the
// world group. It returns when every rank has joined and every connection is
// up, or with an error naming the ranks that did not arrive within the join
// timeout.
func Init(ctx context.Context, opts ...Option) (*Group, error) {
	s, err := ResolveSettings(nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	return Join(ctx, s)
}

// Join is Init with settings resolved by the caller.
func Join(ctx context.Context, s Settings) (*Group, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	if s.build == "" {
		s.build = buildIdentity()
	}
	jctx, cancel := context.WithTimeout(ctx, s.JoinTimeout)
	defer cancel()
	ctl := newControls(&s)
	data, err := connect(jctx, &s, ctl.control)
	if err != nil {
		return nil, fmt.Errorf("comm: rank %d of %d: %w", s.Rank, s.Size, err)
	}
	host := s.Addr
	if data.host != "" {
		host = data.host
	}
	return openWorld(jctx, s, data, ctl, host)
}

// openWorld makes the world group over a connected data path: once every rank
// has joined it (an all-reduce that settles what the ranks must agree on),
// it is ready. host is the address this rank listens on.
func openWorld(ctx context.Context, s Settings, data *dataPath, ctl *controls, host string) (*Group, error) {
	w := &world{t: data.tcp, settings: s, nextID: 1, data: data, stopWatch: func() {}, stall: ctl.stall, agree: ctl.agree, host: host}
	peers := make([]int, s.Size)
	for i := range peers {
		peers[i] = i
	}
	g := newGroup(w, 0, peers, s.Rank)
	ctl.stall.start(w.t, &g.act, data.abort)
	// Everyone is connected, and has mapped the segments it shares with
	// its peers, once this all-reduce returns: it needs every rank's
	// contribution. It also settles what ranks must agree on and cannot
	// know alone: whether any host of the job runs more ranks than cores.
	crowded := []float32{0}
	if s.LocalSize > runtime.NumCPU() {
		crowded[0] = 1
	}
	if err := g.AllReduce(ctx, crowded, Max); err != nil {
		g.Close()
		return nil, err
	}
	w.crowded = crowded[0] > 0
	net, err := netLink(ctx, w, g)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("comm: rank %d of %d: %w", s.Rank, s.Size, err)
	}
	w.net = net
	g.act.joined()
	g.ring.ChunkBytes, g.ring.MessageChunkBytes = chunkBytes(w, peers), messageChunkBytes(w, peers)
	g.ring.Costs = costsFor(w, peers, 1)
	g.ring.Hier = hierarchy(w, g.id, peers, g.ring.Rank) // (with the chunks now known)
	if w.data.shm != nil {
		w.data.shm.Sealed()
	}
	if s.Rank == 0 && s.Size > 1 {
		msg := describePaths(w.data, s.Rank, s.Size, g.ring.ChunkBytes, s.lazy())
		if h := g.ring.Hier; h != nil {
			msg += fmt.Sprintf("; host by host (%d hosts × %d ranks; GORUN_ALGO=flat: never): %s", h.Cross.Size(), h.Local.Size(), describeThresholds(h.Above, g.ring.Costs != nil && !h.Forced))
		}
		if w.net.BytesPerSec > 0 {
			how := "measured while joining"
			if s.NetMode == "set" {
				how = "set"
			}
			msg += fmt.Sprintf("; collectives chosen by a cost model, the link between hosts at %v (GORUN_NET: %s)", w.net, how)
		}
		fmt.Fprintln(os.Stderr, msg)
	}
	if s.LauncherPID > 0 {
		w.stopWatch = watchLauncher(s.LauncherPID, func(err error) {
			// Tell the others why, then go: whatever this rank was doing
			// (computing, or blocked outside comm) must not outlive the job.
			err = g.wrap("", err)
			fmt.Fprintln(os.Stderr, err)
			g.w.data.abort(err)
			os.Exit(exitLauncherGone)
		})
	}
	return g, nil
}

// exitLauncherGone is a rank's exit status when its launcher is gone: 128
// + SIGHUP, as a terminal's processes get when it closes.
const exitLauncherGone = 129

func newGroup(w *world, id uint32, peers []int, rank int) *Group {
	g := &Group{
		w:       w,
		id:      id,
		ring:    tuned(w, peers, rank, id<<16),
		sendSeq: map[[2]int]uint64{},
		recvSeq: map[[2]int]uint64{},
		senders: map[int]chan queued{},
	}
	g.ring.Costs = costsFor(w, peers, 1)
	g.ring.Hier = hierarchy(w, id, peers, rank)
	g.act.clock, g.recvAct.clock = &w.stall.clock, &w.stall.clock
	g.recvAct.label = "receives"
	if id != 0 {
		g.act.label = fmt.Sprintf("sub-group %d", id)
		g.act.group = subGroupName(id, peers)
		g.recvAct.label = fmt.Sprintf("sub-group %d receives", id)
		w.stall.acts.add(&g.act)
		w.mu.Lock()
		w.subs = append(w.subs, g)
		w.mu.Unlock()
	}
	w.stall.acts.add(&g.recvAct)
	return g
}

// subGroupName names sub-group id of the world ranks peers alike on every
// member and unlike any other group: groups that share an id share no rank
// (Split), so the first members tell them apart.
func subGroupName(id uint32, peers []int) string {
	const shown = 8
	names := make([]string, 0, shown)
	for _, p := range peers[:min(len(peers), shown)] {
		names = append(names, strconv.Itoa(p))
	}
	list := strings.Join(names, ", ")
	if len(peers) > shown {
		list += fmt.Sprintf(", ... (%d ranks)", len(peers))
	}
	return fmt.Sprintf("sub-group %d (world ranks %s)", id, list)
}

// DefaultHierBytes is the all-reduce size above which GORUN_ALGO=auto
// goes hierarchical. Measured on 3 hosts × 2 ranks (network namespaces,
// links limited to 1 Gbit/s; BENCHMARKS.md, "Across nodes"): the
// hierarchical all-reduce took 1.2–1.35× the flat one's time at 1 and
// 4 MiB and 0.85× at 16 and 64 MiB.
const DefaultHierBytes = 8 << 20

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

// oneShotMaxRanks is the largest group the one-shot all-reduce serves:
// each rank reads every other's frame (n² frames in all, against n·log n
// for recursive doubling), and its crossover was measured up to 8 ranks.
// At 128 ranks of one host it made every rank touch every peer's ring in
// the join's first all-reduce.
const oneShotMaxRanks = 8

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

// connect runs the rendezvous and builds the data path: TCP to every
// rank, then each faster transport for the peers it reaches (the queue
// pairs of the ranks that reach each other over RDMA, the shared-memory
// rings of the ranks on this machine), routed (dataPath.route).
func connect(ctx context.Context, s *Settings, control func(from int, msg []byte)) (d *dataPath, err error) {
	cfg := tcpConfig(s, control)
	if s.Size == 1 {
		t, err := tcp.Connect(ctx, cfg, nil, []string{""})
		if err != nil {
			return nil, err
		}
		d = &dataPath{tcp: t}
		d.route(s.Size)
		return d, nil
	}
	master := net.JoinHostPort(s.MasterAddr, strconv.Itoa(s.MasterPort))
	store, err := joinStore(ctx, s, master)
	if err != nil {
		return nil, err
	}
	defer func() {
		if served, ok := store.(*servedStore); ok && err != nil {
			served.failed = true
		}
		store.Close()
	}()

	host := s.Addr
	if host == "" {
		host = store.LocalAddr().(*net.TCPAddr).IP.String()
	}
	ln, err := tcp.Listen(host)
	if err != nil {
		return nil, err
	}
	// The job-wide settings first: a rank whose address is published has
	// published them.
	mine := encodeSettings(jobWide(s))
	if err := store.Set(ctx, jobKey(s.Rank), mine); err != nil {
		ln.Close()
		return nil, err
	}
	rec := joinRecord{addr: ln.Addr().String(), digest: strconv.FormatUint(digestSettings(mine), 16), build: s.build}
	if err := store.Set(ctx, addrKey(s.Rank), rec.encode()); err != nil {
		ln.Close()
		return nil, err
	}
	recs, err := gatherAddrs(ctx, store, s, master)
	if err == nil {
		err = checkSameJob(ctx, store, recs, s.Rank, mine)
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	addrs := make([]string, len(recs))
	for r, rec := range recs {
		addrs[r] = rec.addr
	}
	// The data connections, then one last store round so that rank 0 keeps
	// the store up until every rank is past the rendezvous.
	t, err := tcp.Connect(ctx, cfg, ln, addrs)
	if err != nil {
		return nil, err
	}
	d = &dataPath{tcp: t, host: host}
	if err := d.setUp(ctx, store, s); err != nil {
		t.Abort(err)
		t.Close(ctx)
		return nil, err
	}
	// Rank 0 stops the store as soon as it has read every done key,
	// which can be before the store has answered this Set: an error
	// here is not fatal (the mesh is up; the barrier in Join decides,
	// and names rank 0 if it is gone). Treating it as fatal failed one
	// Slurm job in CI with "store at n1:25481: EOF".
	_ = store.Set(ctx, doneKey(s.Rank), nil)
	if s.Rank == 0 {
		keys := make([]string, 0, s.Size-1)
		for r := 1; r < s.Size; r++ {
			keys = append(keys, doneKey(r))
		}
		// Not fatal if some never come: the mesh is up; the barrier in
		// Join decides.
		_, _ = store.GetMany(ctx, keys)
	}
	return d, nil
}

// store is the rendezvous store as the join uses it: gorun's own
// (rendezvous.Client) or torchrun's agent's TCPStore
// (rendezvous.TorchClient).
type store interface {
	Set(ctx context.Context, key string, val []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	// GetMany waits for every key and returns their values in order.
	GetMany(ctx context.Context, keys []string) ([][]byte, error)
	Has(ctx context.Context, key string) (bool, error)
	LocalAddr() net.Addr
	Close() error
}

// joinStore connects to the job's rendezvous store: torchrun's agent's
// when it serves one, else rank 0's, which rank 0 starts here (it serves
// until this rank is past the rendezvous: closing the returned store
// stops it; after a failed rendezvous it stays up a little longer, so
// that the other ranks can still ask it which ranks are missing).
func joinStore(ctx context.Context, s *Settings, master string) (store, error) {
	if s.AgentStore {
		c, err := rendezvous.DialTorch(ctx, master, "gorun/attempt_"+strconv.Itoa(s.Attempt)+"/")
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	if s.Rank != 0 {
		note := func(waited time.Duration, last error) {
			why := "connected, but rank 0 has not answered yet (still starting, or busy before comm.Init?)"
			if last != nil {
				why = last.Error()
			}
			fmt.Fprintf(os.Stderr, "comm: rank %d of %d: no answer for %v from the rendezvous store at %s (MASTER_ADDR:MASTER_PORT), which rank 0 serves: %s; trying until the join gives up after %v (GORUN_JOIN_TIMEOUT)\n",
				s.Rank, s.Size, waited.Round(100*time.Millisecond), master, why, s.JoinTimeout)
		}
		c, err := rendezvous.DialNoting(ctx, master, s.Token, s.Rank, s.Size, joinNoteAfter(s.JoinTimeout), note)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	storeLn, err := storeListener(s)
	if err != nil {
		return nil, err
	}
	srv := rendezvous.Serve(storeLn, s.Token, s.Size)
	c, err := rendezvous.Dial(ctx, master, s.Token, s.Rank, s.Size)
	if err != nil {
		srv.WaitIdle(1500 * time.Millisecond)
		srv.Close()
		return nil, err
	}
	return &servedStore{Client: c, srv: srv}, nil
}

// servedStore is rank 0's connection to the store it serves.
type servedStore struct {
	*rendezvous.Client
	srv    *rendezvous.Server
	failed bool
}

// Close closes the connection and stops the server, after a grace
// period when the rendezvous failed.
func (s *servedStore) Close() error {
	err := s.Client.Close()
	if s.failed {
		s.srv.WaitIdle(1500 * time.Millisecond)
	}
	s.srv.Close()
	return err
}

// tcpConfig is the TCP transport's configuration for settings s.
func tcpConfig(s *Settings, control func(from int, msg []byte)) tcp.Config {
	return tcp.Config{Rank: s.Rank, Size: s.Size, Token: s.Token, Timeout: s.Timeout, Compress: s.Compress, SocketBuffer: s.SocketBuffer, Spin: s.Spin, Control: control, Lazy: s.lazy()}
}

// joinNoteAfter is how long a join waits for its store or its ranks
// before saying so: a sixth of its timeout, at most 10 s.
func joinNoteAfter(timeout time.Duration) time.Duration {
	return min(10*time.Second, timeout/6)
}

func addrKey(r int) string { return "addr/" + strconv.Itoa(r) }
func doneKey(r int) string { return "done/" + strconv.Itoa(r) }

// gatherAddrs waits for every rank's join record (its data address, the
// digest of its job-wide settings, its build). When the join deadline
// passes it names the ranks that never published one.
func gatherAddrs(ctx context.Context, store store, s *Settings, master string) ([]joinRecord, error) {
	// Keep a second of the join time to find out who is missing.
	wctx := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, d.Add(-time.Second))
		defer cancel()
	}
	keys := make([]string, s.Size)
	for r := range keys {
		keys[r] = addrKey(r)
	}
	var vals [][]byte
	var err error
	if s.Rank == 0 {
		// Rank 0 says, once, whom the join still waits for, long before
		// its deadline (the others would say the same).
		nctx, cancel := context.WithTimeout(wctx, joinNoteAfter(s.JoinTimeout))
		vals, err = store.GetMany(nctx, keys)
		cancel()
		if errors.Is(err, rendezvous.ErrMissing) && wctx.Err() == nil {
			if missing := missingRanks(store, keys); len(missing) > 0 {
				fmt.Fprintf(os.Stderr, "comm: rank 0 of %d: the join has waited %v for ranks %v%s; it gives up after %v (GORUN_JOIN_TIMEOUT)\n",
					s.Size, joinNoteAfter(s.JoinTimeout).Round(100*time.Millisecond), missing, whereMissing(store, missing, s.Size), s.JoinTimeout)
			}
			err = nil
		}
	}
	if vals == nil && err == nil {
		vals, err = store.GetMany(wctx, keys)
	}
	if err == nil {
		recs := make([]joinRecord, s.Size)
		for r, v := range vals {
			recs[r] = decodeJoinRecord(v)
		}
		return recs, nil
	}
	if !errors.Is(err, rendezvous.ErrMissing) {
		return nil, fmt.Errorf("rendezvous at %s: %w", master, err)
	}
	missing := missingRanks(store, keys)
	return nil, fmt.Errorf("rendezvous at %s: ranks %v did not join within %v (GORUN_JOIN_TIMEOUT)%s",
		master, missing, s.JoinTimeout, whereMissing(store, missing, s.Size))
}

// whereMissing tells, for gorun's own store, which of the missing ranks
// reached it (and stopped before publishing an address), which were
// turned away for announcing a job of another size than this one's size,
// and which never reached it (not started, or the store's address
// unreachable from them); "" for torchrun's agent's store, which keeps no
// such record.
func whereMissing(store store, missing []int, size int) string {
	if _, torch := store.(*rendezvous.TorchClient); torch || len(missing) == 0 {
		return ""
	}
	qctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// The store's lists of the dialers it turned away (absent: none).
	list := func(key string) []string {
		if ok, err := store.Has(qctx, key); err != nil || !ok {
			return nil
		}
		v, err := store.Get(qctx, key)
		if err != nil {
			return nil
		}
		return strings.Split(string(v), ",")
	}
	otherSize := map[int]string{}
	for _, e := range list(rendezvous.RefusedKey) {
		r, n, _ := strings.Cut(e, ":")
		if rank, err := strconv.Atoi(r); err == nil {
			otherSize[rank] = n
		}
	}
	wrongToken := list(rendezvous.WrongTokenKey)
	var reached, never []int
	var parts []string
	for _, r := range missing {
		ok, err := store.Has(qctx, rendezvous.ReachedKey(r))
		if err != nil {
			return ""
		}
		switch n, refused := otherSize[r]; {
		case ok:
			reached = append(reached, r)
		case refused:
			parts = append(parts, fmt.Sprintf("rank %d reached the store announcing a job of %s ranks, where this job has %d (the world size, WORLD_SIZE, must be the same on every rank)", r, n, size))
		case slices.Contains(wrongToken, strconv.Itoa(r)):
			parts = append(parts, fmt.Sprintf("rank %d reached the store with another job token (GORUN_TOKEN must be the same on every rank: set on one node only?)", r))
		default:
			never = append(never, r)
		}
	}
	if dup := list(rendezvous.DuplicatesKey); dup != nil {
		parts = append(parts, fmt.Sprintf("a second process tried to join as rank %s and was turned away (the rank, or the node rank, given twice?)", strings.Join(dup, ",")))
	}
	if len(never) > 0 {
		parts = append(parts, fmt.Sprintf("%v never reached the store (not started, or MASTER_ADDR:MASTER_PORT unreachable from their hosts)", never))
	}
	if len(reached) > 0 {
		parts = append(parts, fmt.Sprintf("%v reached it but published no address (stopped or stuck inside their join)", reached))
	}
	return ": " + strings.Join(parts, "; ")
}

// missingRanks lists the ranks whose key is not set, after a GetMany of
// keys (one per rank, indexed by rank) timed out. It asks with a fresh
// second: the join's deadline has passed.
func missingRanks(store store, keys []string) []int {
	qctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	missing := []int{}
	for r, k := range keys {
		if ok, err := store.Has(qctx, k); err == nil && !ok {
			missing = append(missing, r)
		}
	}
	return missing
}

func storeListener(s *Settings) (net.Listener, error) {
	if s.StoreFD > 0 {
		f := os.NewFile(uintptr(s.StoreFD), "gorun-store")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("GORUN_STORE_FD=%d: %w", s.StoreFD, err)
		}
		return ln, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(s.MasterPort)))
	if err != nil {
		return nil, fmt.Errorf("rank 0 cannot serve the rendezvous store on port %d (MASTER_PORT; another job on this host?): %w", s.MasterPort, err)
	}
	return ln, nil
}

// Rank returns this process's rank in the group.
func (g *Group) Rank() int { return g.ring.Rank }

// Size returns the number of ranks in the group.
func (g *Group) Size() int { return g.ring.Size() }

// LocalRank returns this process's rank among the job's processes on its node.
func (g *Group) LocalRank() int { return g.w.settings.LocalRank }

// LocalSize returns the number of the job's processes on this node.
func (g *Group) LocalSize() int { return g.w.settings.LocalSize }

// WorldRank returns the world rank of the group's rank r.
func (g *Group) WorldRank(r int) int { return g.ring.Peers[r] }

// Settings returns the settings the job was joined with.
func (g *Group) Settings() Settings { return g.w.settings }

// Err returns the error that broke the group, or nil.
func (g *Group) Err() error {
	if err := g.err.Load(); err != nil {
		return *err
	}
	if err := g.w.t.Err(); err != nil {
		return g.wrap("", err)
	}
	return nil
}

// failed returns the group's error. A failure the transport saw that no
// call has reported yet (a peer's death noticed between calls) is
// recorded and told to the other ranks first, as a call's failure is:
// otherwise this rank would return, exit and leave its peers to blame its
// own silent exit instead of the rank that really failed.
func (g *Group) failed(what string) error {
	if err := g.err.Load(); err != nil {
		return *err
	}
	if err := g.w.t.Err(); err != nil {
		return g.fail(what, err)
	}
	return nil
}

func (g *Group) wrap(what string, err error) error {
	if what == "" {
		return fmt.Errorf("comm: rank %d: %w", g.w.settings.Rank, err)
	}
	return fmt.Errorf("comm: rank %d: %s: %w", g.w.settings.Rank, what, err)
}

// fail records err as the group's error and tells every other rank. A
// peer that closed its group while this rank waits for it is named first,
// with where each of them was: the ranks disagree about the calls to make.
func (g *Group) fail(what string, err error) error {
	wrapped := g.wrap(what, err)
	if left := (*tcp.LeftError)(nil); errors.As(err, &left) { // (shared memory's too)
		wrapped = fmt.Errorf("comm: rank %d: %w while this rank waits in %s", g.w.settings.Rank, left, what)
	}
	if g.err.CompareAndSwap(nil, &wrapped) {
		g.blame(err)
	}
	err = *g.err.Load()
	g.w.data.abort(err)
	return err
}

// blame writes the rank the group's first error names, if any, to the
// launcher's file for this rank (Settings.BlameFile). Best effort: without
// it the launcher goes by the order the ranks exited in.
func (g *Group) blame(err error) {
	path := g.w.settings.BlameFile
	if path == "" {
		return
	}
	if peer, ok := blamedPeer(err); ok && peer != g.w.settings.Rank {
		_ = os.WriteFile(path, []byte(strconv.Itoa(peer)+"\n"), 0o600)
	}
}

// blamedPeer returns the rank err says failed: one that aborted the job,
// closed its group early, or that a transport lost or failed to talk to.
func blamedPeer(err error) (int, bool) {
	var (
		aborted *tcp.AbortError
		left    *tcp.LeftError
		overTCP *tcp.PeerError
		overShm *shm.PeerError
		overIB  *rdma.PeerError
	)
	switch {
	case errors.As(err, &aborted):
		return aborted.Rank, true
	case errors.As(err, &left):
		return left.Rank, true
	case errors.As(err, &overTCP):
		return overTCP.Rank, true
	case errors.As(err, &overShm):
		return overShm.Rank, true
	case errors.As(err, &overIB):
		return overIB.Rank, true
	}
	return 0, false
}

// exec runs one collective now, on this goroutine, holding the group. The
// transport bounds every wait and send by the context's deadline or by
// GORUN_TIMEOUT, so no per-call context is needed. run does not escape, so
// a synchronous call allocates nothing.
func (g *Group) exec(ctx context.Context, c call, run func(context.Context) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return g.wrap(c.String(), errClosed)
	}
	// g.failed, with the call's name made only when needed.
	if err := g.err.Load(); err != nil {
		return *err
	}
	seq := g.ring.Seq()
	if err := g.w.t.Err(); err != nil {
		return g.fail(c.numbered(seq), err)
	}
	g.act.begin(seq, c)
	err := run(ctx)
	if err != nil && g.id == 0 {
		// While this rank still counts as in the call.
		err = g.w.stall.explainFailure(err, &g.act)
	}
	g.act.end()
	if err != nil {
		return g.fail(c.numbered(seq), err)
	}
	return nil
}

// hasQueued reports whether asynchronous calls are pending; a synchronous
// call must then queue behind them to keep the order all ranks agreed on.
func (g *Group) hasQueued() bool { return g.pending.Load() > 0 }

var errClosed = errors.New("group closed")

// waitOrDone waits for wg, or until ctx ends; it reports whether wg's
// goroutines all finished.
func waitOrDone(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func (g *Group) enqueue(ctx context.Context, c call, run func(context.Context) error) *Work {
	g.qmu.RLock()
	defer g.qmu.RUnlock()
	if g.closed.Load() {
		return finished(g.wrap(c.String(), errClosed))
	}
	// Started under qmu, as Close (shutdown) closes it: never after, when
	// nothing would close it and the world's Close would wait for it.
	g.startQ.Do(func() {
		g.queue = make(chan queued, 1024)
		g.workers.Go(func() {
			for q := range g.queue {
				q.w.start = time.Now()
				q.w.err = g.exec(q.ctx, q.call, q.run)
				q.w.end = time.Now()
				g.pending.Add(-1)
				close(q.w.done)
			}
		})
	})
	w := &Work{done: make(chan struct{})}
	g.pending.Add(1)
	g.queue <- queued{ctx: ctx, call: c, run: run, w: w}
	return w
}

// collectiveKind names the collectives dispatch runs.
type collectiveKind uint8

const (
	allReduce collectiveKind = iota
	broadcast
	allGather
	reduceScatter
	barrier
	reduce
	gather
	scatter
	allToAll
	allGatherV
	gatherV
	scatterV
	allToAllV
	reduceScatterV
)

var collectiveNames = [...]string{allReduce: "AllReduce", broadcast: "Broadcast", allGather: "AllGather", reduceScatter: "ReduceScatter", barrier: "Barrier",
	reduce: "Reduce", gather: "Gather", scatter: "Scatter", allToAll: "AllToAll",
	allGatherV: "AllGatherV", gatherV: "GatherV", scatterV: "ScatterV", allToAllV: "AllToAllV", reduceScatterV: "ReduceScatterV"}

// collective is one collective call's arguments: what dispatch runs.
type collective[T Elem] struct {
	kind      collectiveKind
	buf, recv []T // buf is send for AllGather, ReduceScatter, Gather, Scatter and AllToAll, and their v forms
	op        Op
	root      int
	count     int   // the call's element count, for errors; -1 for none
	counts    []int // the v forms' counts; AllToAllV's send counts
	recvCount []int // AllToAllV's receive counts
}

func (c *collective[T]) call() call {
	// (Small enough to inline where every collective makes one: a switch
	// here cost the root of a four-rank 8-byte Reduce stream 3% of its
	// samples. call.agreed works out from the kind which fields count.)
	return call{kind: collectiveNames[c.kind], count: c.count, dtype: ring.DTypeOf[T](), op: c.op, root: int32(c.root)}
}

func (c *collective[T]) run(ctx context.Context, r *ring.Collectives) error {
	switch c.kind {
	case allReduce:
		return ring.AllReduce(ctx, r, c.buf, c.op)
	case broadcast:
		return ring.Broadcast(ctx, r, c.buf, c.root)
	case allGather:
		return ring.AllGather(ctx, r, c.buf, c.recv)
	case reduceScatter:
		return ring.ReduceScatter(ctx, r, c.buf, c.recv, c.op)
	case reduce:
		return ring.ReduceToRoot(ctx, r, c.buf, c.op, c.root)
	case gather:
		return ring.Gather(ctx, r, c.buf, c.recv, c.root)
	case scatter:
		return ring.Scatter(ctx, r, c.buf, c.recv, c.root)
	case allToAll:
		return ring.AllToAll(ctx, r, c.buf, c.recv)
	case allGatherV:
		return ring.AllGatherV(ctx, r, c.buf, c.recv, c.counts)
	case gatherV:
		return ring.GatherV(ctx, r, c.buf, c.recv, c.counts, c.root)
	case scatterV:
		return ring.ScatterV(ctx, r, c.buf, c.counts, c.recv, c.root)
	case allToAllV:
		return ring.AllToAllV(ctx, r, c.buf, c.counts, c.recv, c.recvCount)
	case reduceScatterV:
		return ring.ReduceScatterV(ctx, r, c.buf, c.recv, c.counts, c.op)
	}
	return ring.Barrier(ctx, r)
}

// dispatch runs c now, or behind the asynchronous calls still queued (the
// order all ranks agreed on). Each path has its own copy of c: the queued
// one escapes to the heap, and sharing it would make every synchronous
// call allocate.
func dispatch[T Elem](ctx context.Context, g *Group, c collective[T]) error {
	if g.hasQueued() {
		return dispatchAsync(ctx, g, c).Wait()
	}
	return g.exec(ctx, c.call(), func(ctx context.Context) error { return c.run(ctx, &g.ring) })
}

// dispatchAsync queues c and returns at once.
func dispatchAsync[T Elem](ctx context.Context, g *Group, c collective[T]) *Work {
	q := &c
	return g.enqueue(ctx, q.call(), func(ctx context.Context) error { return q.run(ctx, &g.ring) })
}

// AllReduce reduces buf across the group in place; every rank ends with the same result.
func AllReduce[T Elem](ctx context.Context, g *Group, buf []T, op Op) error {
	return dispatch(ctx, g, collective[T]{kind: allReduce, buf: buf, op: op, count: len(buf)})
}

// AllReduceAsync starts AllReduce and returns at once; buf must not be
// touched until the Work's Wait returns.
func AllReduceAsync[T Elem](ctx context.Context, g *Group, buf []T, op Op) *Work {
	return dispatchAsync(ctx, g, collective[T]{kind: allReduce, buf: buf, op: op, count: len(buf)})
}

// Broadcast copies root's buf into every rank's buf.
func Broadcast[T Elem](ctx context.Context, g *Group, buf []T, root int) error {
	c := collective[T]{kind: broadcast, buf: buf, root: root, count: len(buf)}
	if err := c.checkRoot(g); err != nil {
		return err
	}
	return dispatch(ctx, g, c)
}

// checkRoot fails, naming the call, when c's root is not a rank of g.
func (c *collective[T]) checkRoot(g *Group) error {
	if c.root < 0 || c.root >= g.Size() {
		return g.wrap(c.call().String(), fmt.Errorf("root %d outside the group of %d", c.root, g.Size()))
	}
	return nil
}

// AllGather gathers every rank's send, in rank order, into recv (Size()·len(send) elements).
// send may be this rank's block of recv (an all-gather in place, as
// torch's all_gather_into_tensor allows); no other overlap is allowed.
func AllGather[T Elem](ctx context.Context, g *Group, send, recv []T) error {
	return dispatch(ctx, g, collective[T]{kind: allGather, buf: send, recv: recv, count: len(send)})
}

// ReduceScatter reduces send (Size()·len(recv) elements) and leaves this rank's block in recv.
func ReduceScatter[T Elem](ctx context.Context, g *Group, send, recv []T, op Op) error {
	return dispatch(ctx, g, collective[T]{kind: reduceScatter, buf: send, recv: recv, op: op, count: len(recv)})
}

// AllReduce is AllReduce on float32.
func (g *Group) AllReduce(ctx context.Context, buf []float32, op Op) error {
	return AllReduce(ctx, g, buf, op)
}

// AllReduceAsync is AllReduceAsync on float32.
func (g *Group) AllReduceAsync(ctx context.Context, buf []float32, op Op) *Work {
	return AllReduceAsync(ctx, g, buf, op)
}

// Broadcast is Broadcast on float32.
func (g *Group) Broadcast(ctx context.Context, buf []float32, root int) error {
	return Broadcast(ctx, g, buf, root)
}

// AllGather is AllGather on float32.
func (g *Group) AllGather(ctx context.Context, send, recv []float32) error {
	return AllGather(ctx, g, send, recv)
}

// ReduceScatter is ReduceScatter on float32.
func (g *Group) ReduceScatter(ctx context.Context, send, recv []float32, op Op) error {
	return ReduceScatter(ctx, g, send, recv, op)
}

// Barrier returns once every rank of the group has called it.
func (g *Group) Barrier(ctx context.Context) error {
	return dispatch(ctx, g, collective[uint8]{kind: barrier, count: -1})
}

// Close leaves the job. Closing the world group closes its sub-groups too,
// lets the asynchronous calls of all of them finish (up to 10 s), says
// goodbye to every peer and waits (up to 10 s) for their goodbyes; closing
// a sub-group only stops its use. Calls after Close fail.
func (g *Group) Close() error {
	if !g.shutdown() {
		return nil
	}
	failure := g.failed("Close")
	if g.id != 0 {
		return failure
	}
	g.w.stopWatch()
	g.w.stall.close()
	// The sub-groups go with the world, closed or not: no call of theirs
	// may start once the transports are gone.
	g.w.mu.Lock()
	subs := slices.Clone(g.w.subs)
	g.w.mu.Unlock()
	for _, s := range subs {
		s.shutdown()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A call still running — an asynchronous send nobody waited for, one
	// that failed with its peer, this group's or a sub-group's (a pipeline
	// stage's sends to a rank that died) — must not find its transport
	// unmapped: a sub-group's send once faulted on a ring unmapped under
	// it, killing the rank with SIGSEGV instead of its error.
	idle := waitOrDone(ctx, &g.workers)
	for _, s := range subs {
		idle = waitOrDone(ctx, &s.workers) && idle
	}
	if !idle && failure == nil {
		failure = g.wrap("Close", errors.New("asynchronous calls still running after 10 s"))
	}
	farewell := g.act.farewell()
	if g.w.data.shm != nil {
		g.w.data.shm.Leave(farewell)
	}
	err := g.w.t.CloseWith(ctx, farewell)
	if idle {
		// Unmapped only when no call can touch the rings; else they stay
		// mapped until the process ends.
		if g.w.hook != nil {
			g.w.hook("unmapping")
		}
		g.w.data.close()
	}
	if err != nil && failure == nil {
		return g.wrap("Close", err)
	}
	return failure
}

// shutdown stops g from starting calls: its queue of asynchronous
// collectives and its point-to-point senders are closed, and the calls
// already queued run to their end. It reports whether g was open.
func (g *Group) shutdown() bool {
	g.qmu.Lock()
	if g.closed.Swap(true) {
		g.qmu.Unlock()
		return false
	}
	if g.queue != nil {
		close(g.queue)
	}
	g.qmu.Unlock()
	g.p2pMu.Lock()
	for _, ch := range g.senders {
		close(ch)
	}
	g.senders = nil
	g.p2pMu.Unlock()
	return true
}
