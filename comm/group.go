package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// oneShotMaxRanks is the largest group the one-shot all-reduce serves:
// each rank reads every other's frame (n² frames in all, against n·log n
// for recursive doubling), and its crossover was measured up to 8 ranks.
// At 128 ranks of one host it made every rank touch every peer's ring in
// the join's first all-reduce.
const oneShotMaxRanks = 8

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
// A wait that outlived GORUN_TIMEOUT says so, in every group and in
// point-to-point calls (stallWatch.hintTimeout).
func (g *Group) fail(what string, err error) error {
	err = g.w.stall.hintTimeout(err)
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
