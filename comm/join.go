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
	"time"

	"github.com/gorun/gorun/comm/rendezvous"
	"github.com/gorun/gorun/tcp"
)

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
		msg += crowdedText(w.crowded, s.LocalSize, runtime.NumCPU(), s.Spin)
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

	host, err := listenHost(s, store.LocalAddr().(*net.TCPAddr).IP.String(), hostInterfaces)
	if err != nil {
		return nil, err
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
	if errors.Is(err, tcp.ErrNotReached) {
		return nil, fmt.Errorf("%w (this rank's address: GORUN_ADDR, else the interface GORUN_SOCKET_IFNAME names, else the one that reaches MASTER_ADDR)", err)
	}
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
	// A process refused for another world size whose rank joined all the
	// same (as rank 1 of 2 from a node started with another -np, beside
	// this job's rank 1): the ranks missing are likely the same mistake's.
	var others []string
	for r, n := range otherSize {
		if !slices.Contains(missing, r) {
			others = append(others, fmt.Sprintf("rank %d of %s", r, n))
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		parts = append(parts, fmt.Sprintf("a process announcing a job of another size was turned away (%s, where this job has %d ranks: gorun's -np and -nnodes, or WORLD_SIZE, must be the same on every node)", strings.Join(others, ", "), size))
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

// crowdedText adds to rank 0's first line that a host of the job runs
// more ranks than it has cores (crowded), where ranks take turns on the
// cores: "" when none does. local and cores are rank 0's host's ranks and
// cores; spin is how long its waits spin (GORUN_SPIN: 0 by default on a
// crowded host).
func crowdedText(crowded bool, local, cores int, spin time.Duration) string {
	switch {
	case !crowded:
		return ""
	case local <= cores:
		return "; another host of the job runs more ranks than it has cores: they take turns on them"
	case spin == 0:
		return fmt.Sprintf("; %d ranks share this host's %d cores, taking turns: a waiting rank gives its core away at once instead of spinning", local, cores)
	}
	return fmt.Sprintf("; %d ranks share this host's %d cores, taking turns, and a waiting rank spins %v first (GORUN_SPIN) before giving its core away", local, cores, spin)
}
