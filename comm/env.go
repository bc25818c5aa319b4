package comm

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/shm"
	"github.com/gorun/gorun/tcp"
)

// Settings is everything Init needs to join a job. ResolveSettings fills it
// from options and the environment; programs rarely build one by hand.
type Settings struct {
	Rank, Size           int
	LocalRank, LocalSize int
	// MasterAddr and MasterPort locate rank 0's rendezvous store.
	MasterAddr string
	MasterPort int
	// Source names where rank and size came from: "options", "gorun/torchrun", "slurm", "openmpi" or "single".
	Source string
	// AgentStore says that torchrun's agent serves a torch TCPStore at
	// MASTER_ADDR:MASTER_PORT for the job (TORCHELASTIC_USE_AGENT_STORE):
	// every rank rendezvouses there as a TCPStore client, under the key
	// prefix "gorun/attempt_N/" (N: TORCHELASTIC_RESTART_COUNT), and no
	// rank serves a store of its own.
	AgentStore bool
	// Attempt is torchrun's restart count (TORCHELASTIC_RESTART_COUNT).
	Attempt int
	// Algo picks the collectives across hosts (GORUN_ALGO): "auto"
	// (host by host when every host holds the same number of ranks, two
	// or more: all-reduces above DefaultHierBytes, all-gathers,
	// reduce-scatters and barriers always, broadcasts never; where the
	// cost model knows the link (NetMode), all-reduces, all-gathers and
	// reduce-scatters as it predicts), "flat"
	// (never host by host), or "hierarchical" (all of these, at every
	// size, where the hosts allow it).
	Algo string
	// NetMode says how the cost model learns the link between hosts
	// (GORUN_NET): "auto" (measured while joining, when the job spans
	// hosts), "none" (no model: collectives chosen by size), or "set"
	// (Net, from GORUN_NET=STEP,RATE).
	NetMode string
	// Net is the link between hosts when NetMode is "set".
	Net ring.Link
	// Connect says when the ranks connect over TCP (GORUN_CONNECT):
	// "eager" (every pair while joining), "lazy" (a pair when it first
	// exchanges anything: sockets for the peers the algorithms use, not for
	// all), or "auto" (lazy past LazyAbove ranks).
	Connect string
	// Token authenticates connections (GORUN_TOKEN; gorun sets a fresh one per job).
	Token []byte
	// JoinTimeout bounds the rendezvous: every rank must arrive within it.
	JoinTimeout time.Duration
	// Timeout bounds each wait for a peer's data and each send, when the
	// call's context has no deadline.
	Timeout time.Duration
	// StallAfter is how long a collective may wait before every waiting
	// rank logs where each rank of the job is (GORUN_STALL, default
	// DefaultStallAfter; 0 disables), and again after twice as long, and so
	// on. A call that then fails carries the same table in its error. A
	// report that finds ranks in one call of a group with different
	// arguments ends the job, every rank failing with both calls named.
	StallAfter time.Duration
	// SmallBytes is the all-reduce/broadcast size up to which latency-optimal algorithms run.
	SmallBytes int
	// ChunkBytes is the ring algorithms' pipelining chunk (GORUN_CHUNK_BYTES;
	// 0: DefaultNetChunkBytes for groups on one host that talk over TCP
	// when no host runs more ranks than it has cores, else
	// ring.DefaultChunkBytes). All ranks must use the same value.
	ChunkBytes int
	// OneShotBytes is the all-reduce size up to which a group of more than
	// two ranks, all on one machine and talking through shared memory,
	// sends every rank's buffer to every other at once (GORUN_ONESHOT_BYTES;
	// 0: DefaultOneShotBytes, -1: never).
	OneShotBytes int
	// HalvingBytes is the all-reduce size up to which a group of more than
	// two ranks, not all talking through shared memory, uses
	// halving-doubling above SmallBytes; the ring runs above it
	// (GORUN_HALVING_BYTES; 0: DefaultHalvingBytes, -1: never).
	HalvingBytes int
	// BruckBytes is the block size up to which all-to-alls use Bruck's
	// algorithm, log2(n) messages per rank instead of n−1
	// (GORUN_BRUCK_BYTES; -1: never; 0: DefaultBruckBytes in groups of at
	// least BruckMinRanks with a member across the network; a size set
	// applies to every group of more than two). All ranks must use the
	// same value.
	BruckBytes int
	// LinearReduceBytes is the size up to which a Reduce among more than
	// two ranks sends every rank's buffer straight to the root instead of
	// up a binomial tree (GORUN_LINEAR_REDUCE_BYTES; -1: never; 0:
	// DefaultLinearReduceBytes in groups of at most LinearReduceMaxRanks
	// with a member reached over the network; a size set applies to every
	// group of more than two). All ranks must use the same value.
	LinearReduceBytes int
	// TreeScatterBytes is the size of the root's buffer up to which a
	// Scatter among more than two ranks goes down a binomial tree instead
	// of straight from the root (GORUN_TREE_SCATTER_BYTES; -1: never; 0:
	// DefaultTreeScatterBytes in groups with a member reached over the
	// network; a size set applies to every group of more than two). All
	// ranks must use the same value.
	TreeScatterBytes int
	// DirectBytes is the frame size from which ranks of one machine read
	// each other's frames straight from the sender's memory, one copy
	// instead of two through the shared-memory rings (GORUN_DIRECT_BYTES;
	// 0: shm.DefaultDirectBytes, -1: never; at least shm.MinDirectBytes).
	DirectBytes int
	// Compress sends large payloads compressed with S2.
	Compress bool
	// Addr is the address peers reach this rank's data port by (GORUN_ADDR:
	// an address, a host name, or an interface's name); empty: IfName's,
	// else the address of the interface that reaches the master.
	Addr string
	// IfName chooses the interface whose address peers reach this rank by,
	// where Addr is empty, as NCCL_SOCKET_IFNAME's value does: name
	// prefixes (eth,ib), ^ to exclude them (^docker,lo), = for exact names
	// (=eth0). From GORUN_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME, else
	// GLOO_SOCKET_IFNAME; IfNameVar is the one it came from.
	IfName, IfNameVar string
	// Spin is how long a waiting call busy-polls its socket or rings
	// (GORUN_SPIN); after it every transport polls a little longer giving
	// the core away between looks, then sleeps. Default: DefaultSpin when
	// this host runs no more ranks than it has cores, else 0 (spinning would
	// steal the other ranks' cores).
	Spin time.Duration
	// SocketBuffer, when positive, sets the data sockets' kernel buffers (bytes).
	SocketBuffer int
	// Transport chooses how ranks talk (GORUN_TRANSPORT): "auto" (default):
	// through shared memory on one machine, over RDMA between machines
	// whose ports share a fabric, else TCP; "tcp": TCP only; "rdma": RDMA
	// between every pair that can (on one machine too), else as auto. A
	// missing or broken RDMA device never fails the job: it runs over
	// TCP, and rank 0 says why.
	Transport string
	// RDMADevice and RDMAGIDIndex choose the RDMA port (GORUN_RDMA_DEVICE,
	// e.g. mlx5_0 or mlx5_0:1; GORUN_RDMA_GID_INDEX, default 0).
	RDMADevice   string
	RDMAGIDIndex int
	// StoreFD, when positive, is an inherited listening socket rank 0 serves the store on (set by gorun).
	StoreFD int
	// LauncherPID, when positive, is the launcher that started this rank
	// (GORUN_LAUNCHER_PID, set by gorun): when it is gone the rank exits,
	// also where it is not the launcher's child (a wrapper script, go run).
	LauncherPID int
	// BlameFile, when set (GORUN_BLAME_FILE, set by gorun), is where the
	// group writes the rank its first error names — a peer that died,
	// left or aborted — so that the launcher reports that rank's failure
	// as the job's cause even when this rank's exit is reaped first.
	BlameFile string
	// build names the gorun build this rank runs (buildIdentity, filled by
	// Join); tests set it.
	build string
}

// Defaults for Settings.
const (
	DefaultMasterPort  = 29500
	DefaultJoinTimeout = 60 * time.Second
	DefaultTimeout     = 5 * time.Minute
	DefaultStallAfter  = 30 * time.Second
	DefaultSpin        = 50 * time.Microsecond
	// LazyAbove is the most ranks GORUN_CONNECT=auto connects eagerly.
	LazyAbove = 16
	// DefaultOneShotBytes: up to 4 KiB the one-shot all-reduce beat
	// recursive doubling through shared memory at 3, 4 and 8 ranks on the
	// 2-core test machine; at 16 KiB it lost (bench/results/HISTORY.md).
	DefaultOneShotBytes = 4 << 10
	// DefaultHalvingBytes: over loopback TCP on the 2-core test machine
	// halving-doubling beat the ring at 3 ranks up to 4 MiB and at 4 ranks
	// up to 2 MiB, tied at 4 ranks and 4 MiB, and lost at 8 MiB. Through shared memory the ring, which
	// folds frames in as they land, wins or ties at every size, so groups
	// whose members all share memory never use it (bench/results/HISTORY.md).
	DefaultHalvingBytes = 4 << 20
	// DefaultBruckBytes and BruckMinRanks: over loopback TCP on the
	// 2-core test machine Bruck's all-to-all beat pairwise exchange at 8
	// ranks with blocks of 16 B to 8 KiB and at 16 ranks with 8 B to 4
	// KiB (1.05–3.2× faster), and lost or tied at 4 ranks; through shared
	// memory it lost at 4, 8 and 16 ranks (bench/results/HISTORY.md).
	DefaultBruckBytes = 4 << 10
	BruckMinRanks     = 8
	// DefaultLinearReduceBytes and LinearReduceMaxRanks: over loopback
	// TCP on the 2-core test machine, Reduces of 8 and 512 bytes among 4
	// and 6 ranks ran 1.12–1.58× faster (medians of six alternated
	// rounds) with every rank sending straight to the root than up the
	// binomial tree, whose inner ranks wait for their children; through
	// shared memory the tree won or tied (bench/results/HISTORY.md). Open
	// MPI's fixed rules use its linear Reduce below 8 ranks and 512 bytes.
	DefaultLinearReduceBytes = 512
	LinearReduceMaxRanks     = 7
	// DefaultTreeScatterBytes: over loopback TCP on the 2-core test
	// machine, Scatters whose root's buffer held 16 B to 64 KiB ran
	// 1.11–2.26× faster (medians of four alternated rounds at 3, 4, 6
	// and 8 ranks) down a binomial tree than straight from the root, whose
	// n−1 sends in a row were the call's bottleneck; at 128–256 KiB the
	// tree lost at 4 ranks. Through shared memory the tree lost at 16 B,
	// tied at 1–4 KiB and gained 1.10–1.17× only at 16–64 KiB, where
	// gorun already leads Open MPI several times over
	// (bench/results/HISTORY.md).
	DefaultTreeScatterBytes = 64 << 10
	// DefaultNetChunkBytes is the chunk of a group on one host that talks
	// over TCP (GORUN_TRANSPORT=tcp): over loopback at np = 2, 128 KiB
	// chunks were faster for large all-reduces than 1 MiB ones (and than
	// 64 or 256 KiB): a chunk the kernel has just copied in is still in the
	// core's cache when it is reduced or forwarded. With more ranks than
	// cores every chunk handed over can cost a context switch, and there
	// 1 MiB won (bench/results/HISTORY.md, "TCP: 128 KiB ring chunks").
	// The group's messages (the rooted collectives', the broadcast
	// chain's, the 16-bit types' exchanges, halving-doubling's halves)
	// still go in ring.DefaultChunkBytes frames (messageChunkBytes).
	// That is the host's choice, not a law: on a Zen 3 host 1 MiB chunks
	// were faster over loopback for every collective at np = 2, 1–16
	// MiB (level in two cells of eighteen; BENCHMARKS.md, "Loopback TCP's
	// chunk on Zen 3"); GORUN_CHUNK_BYTES sets it.
	// Groups that span hosts use ring.DefaultChunkBytes: across 10 Gbit/s
	// links two hosts' 64 MiB all-reduces ran at 90–92% of the line's rate
	// with 1 MiB chunks, 55–78% with 128 KiB (bench/results/current/
	// tcp-frames-2026-11-29-zen4.txt, sections 7 and 8).
	DefaultNetChunkBytes = 128 << 10
)

// Option overrides one setting; options win over the environment.
type Option func(*Settings)

// WithRank sets this process's rank and the world size.
func WithRank(rank, size int) Option {
	return func(s *Settings) { s.Rank, s.Size, s.Source = rank, size, "options" }
}

// WithLocalRank sets the rank and process count on this node.
func WithLocalRank(localRank, localSize int) Option {
	return func(s *Settings) { s.LocalRank, s.LocalSize = localRank, localSize }
}

// WithMaster sets the rendezvous address.
func WithMaster(addr string, port int) Option {
	return func(s *Settings) { s.MasterAddr, s.MasterPort = addr, port }
}

// WithToken sets the job token.
func WithToken(token string) Option { return func(s *Settings) { s.Token = []byte(token) } }

// WithJoinTimeout bounds the rendezvous.
func WithJoinTimeout(d time.Duration) Option { return func(s *Settings) { s.JoinTimeout = d } }

// WithTimeout bounds every wait and send whose context has no deadline.
func WithTimeout(d time.Duration) Option { return func(s *Settings) { s.Timeout = d } }

// WithStallAfter sets Settings.StallAfter (0 disables stall reports).
func WithStallAfter(d time.Duration) Option { return func(s *Settings) { s.StallAfter = d } }

// WithSmallBytes sets the crossover to the latency-optimal algorithms; -1 disables them.
func WithSmallBytes(n int) Option { return func(s *Settings) { s.SmallBytes = n } }

// WithOneShotBytes sets the size up to which all-reduces among ranks that
// share a machine send every buffer to every rank at once; -1 disables it.
func WithOneShotBytes(n int) Option { return func(s *Settings) { s.OneShotBytes = n } }

// WithHalvingBytes sets the size up to which all-reduces among more than
// two ranks use halving-doubling instead of the ring; -1 disables it.
func WithHalvingBytes(n int) Option { return func(s *Settings) { s.HalvingBytes = n } }

// WithDirectBytes sets the chunk size from which ranks of one machine
// read each other's frames straight from the sender's memory (see
// Settings.DirectBytes); -1 disables it.
func WithDirectBytes(n int) Option { return func(s *Settings) { s.DirectBytes = n } }

// WithBruckBytes sets the block size up to which all-to-alls among more
// than two ranks use Bruck's algorithm; -1 disables it.
func WithBruckBytes(n int) Option { return func(s *Settings) { s.BruckBytes = n } }

// WithLinearReduceBytes sets the size up to which Reduces among more
// than two ranks send every buffer straight to the root; -1 disables it.
func WithLinearReduceBytes(n int) Option { return func(s *Settings) { s.LinearReduceBytes = n } }

// WithTreeScatterBytes sets the size of the root's buffer up to which
// Scatters among more than two ranks go down a binomial tree; -1
// disables it.
func WithTreeScatterBytes(n int) Option { return func(s *Settings) { s.TreeScatterBytes = n } }

// WithChunkBytes sets the pipelining chunk of the ring algorithms.
func WithChunkBytes(n int) Option { return func(s *Settings) { s.ChunkBytes = n } }

// WithCompression turns S2 payload compression on or off.
func WithCompression(on bool) Option { return func(s *Settings) { s.Compress = on } }

// WithTransport chooses how ranks talk: "auto", "tcp" or "rdma" (see
// Settings.Transport).
func WithTransport(name string) Option { return func(s *Settings) { s.Transport = name } }

// lazy reports whether the ranks connect over TCP when first needed
// (Connect).
func (s *Settings) lazy() bool {
	return s.Connect == "lazy" || (s.Connect == "" || s.Connect == "auto") && s.Size > LazyAbove
}

// WithSpin sets how long a waiting call busy-polls before sleeping (0: never).
func WithSpin(d time.Duration) Option { return func(s *Settings) { s.Spin = d } }

// WithAddr sets the address this rank advertises for its data connections.
func WithAddr(addr string) Option { return func(s *Settings) { s.Addr = addr } }

// ResolveSettings reads the environment through getenv (os.Getenv when nil)
// and then applies opts. Rank and size come from the first of these sources
// that is present, whole: options; gorun/torchrun (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE); Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NODEID, SLURM_TASKS_PER_NODE); Open MPI
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE); else a single
// process. MASTER_ADDR and MASTER_PORT apply to every source (under
// torchrun with TORCHELASTIC_USE_AGENT_STORE=True they locate its
// agent's TCPStore, Settings.AgentStore); under Slurm
// they default to the first host of SLURM_JOB_NODELIST and a port derived
// from SLURM_JOB_ID, under Open MPI on one node to 127.0.0.1 and a port
// derived from the job id.
func ResolveSettings(getenv func(string) string, opts ...Option) (Settings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	s := Settings{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Source: "single",
		JoinTimeout: DefaultJoinTimeout, Timeout: DefaultTimeout, StallAfter: DefaultStallAfter}
	e := envReader{getenv: getenv}
	var defaultMaster func() (string, int, error)

	switch {
	case getenv("RANK") != "" || getenv("WORLD_SIZE") != "":
		s.Source = "gorun/torchrun"
		s.Rank = e.int("RANK", -1)
		s.Size = e.int("WORLD_SIZE", -1)
		if s.Rank < 0 && e.err == nil {
			e.err = fmt.Errorf("WORLD_SIZE is set but RANK is not")
		}
		if s.Size < 0 && e.err == nil {
			e.err = fmt.Errorf("RANK is set but WORLD_SIZE is not")
		}
		s.LocalRank = e.int("LOCAL_RANK", 0)
		s.LocalSize = e.int("LOCAL_WORLD_SIZE", max(s.LocalRank+1, 1))
		switch v := getenv("TORCHELASTIC_USE_AGENT_STORE"); strings.ToLower(v) {
		case "true", "1":
			s.AgentStore = true
			s.Attempt = e.int("TORCHELASTIC_RESTART_COUNT", 0)
		case "", "false", "0":
		default:
			if e.err == nil {
				e.err = fmt.Errorf("TORCHELASTIC_USE_AGENT_STORE=%q: want True or False", v)
			}
		}
	case getenv("SLURM_PROCID") != "":
		s.Source = "slurm"
		s.Rank = e.int("SLURM_PROCID", 0)
		s.Size = e.int("SLURM_NTASKS", -1)
		if s.Size < 0 && e.err == nil {
			e.err = fmt.Errorf("SLURM_PROCID is set but SLURM_NTASKS is not (run the program with srun inside an allocation)")
		}
		if s.Size > 1 && !InSlurmStep(getenv) && e.err == nil {
			// sbatch runs its script as one process with the job's
			// SLURM_PROCID (0) and SLURM_NTASKS; only srun starts the
			// tasks, each in a step. Waiting for the others would end
			// only at the join's deadline.
			e.err = fmt.Errorf("SLURM_PROCID is set but not SLURM_STEP_ID: this is Slurm's batch script itself, one process, where the job asks for %d tasks (SLURM_NTASKS): start them with srun (srun PROGRAM ...), which gives each its rank", s.Size)
		}
		s.LocalRank = e.int("SLURM_LOCALID", 0)
		s.LocalSize = max(s.LocalRank+1, 1)
		if tpn := getenv("SLURM_TASKS_PER_NODE"); tpn != "" && e.err == nil {
			counts, err := expandTasksPerNode(tpn)
			node := e.int("SLURM_NODEID", 0)
			switch {
			case err != nil:
				e.err = fmt.Errorf("SLURM_TASKS_PER_NODE=%q: %w", tpn, err)
			case node >= len(counts):
				e.err = fmt.Errorf("SLURM_NODEID=%d but SLURM_TASKS_PER_NODE=%q lists %d nodes", node, tpn, len(counts))
			default:
				s.LocalSize = counts[node]
			}
		}
		defaultMaster = func() (string, int, error) { return SlurmMaster(getenv) }
	case getenv("OMPI_COMM_WORLD_RANK") != "":
		s.Source = "openmpi"
		s.Rank = e.int("OMPI_COMM_WORLD_RANK", 0)
		s.Size = e.int("OMPI_COMM_WORLD_SIZE", -1)
		if s.Size < 0 && e.err == nil {
			e.err = fmt.Errorf("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not")
		}
		s.LocalRank = e.int("OMPI_COMM_WORLD_LOCAL_RANK", 0)
		s.LocalSize = e.int("OMPI_COMM_WORLD_LOCAL_SIZE", max(s.LocalRank+1, 1))
		defaultMaster = func() (string, int, error) {
			if s.LocalSize != s.Size {
				return "", 0, fmt.Errorf("MASTER_ADDR is not set: Open MPI spans several nodes, so set MASTER_ADDR (and MASTER_PORT) to rank 0's host")
			}
			id := getenv("OMPI_MCA_ess_base_jobid") + getenv("PMIX_NAMESPACE") + getenv("OMPI_MCA_orte_ess_jobid")
			return "127.0.0.1", derivePort(id), nil
		}
	}

	s.Token = []byte(getenv("GORUN_TOKEN"))
	s.JoinTimeout = e.duration("GORUN_JOIN_TIMEOUT", s.JoinTimeout)
	s.Timeout = e.duration("GORUN_TIMEOUT", s.Timeout)
	s.StallAfter = e.duration("GORUN_STALL", s.StallAfter)
	s.SmallBytes = e.int("GORUN_SMALL_BYTES", 0)
	s.ChunkBytes = e.int("GORUN_CHUNK_BYTES", 0)
	s.OneShotBytes = e.int("GORUN_ONESHOT_BYTES", 0)
	s.HalvingBytes = e.int("GORUN_HALVING_BYTES", 0)
	s.BruckBytes = e.int("GORUN_BRUCK_BYTES", 0)
	s.LinearReduceBytes = e.int("GORUN_LINEAR_REDUCE_BYTES", 0)
	s.TreeScatterBytes = e.int("GORUN_TREE_SCATTER_BYTES", 0)
	s.DirectBytes = e.int("GORUN_DIRECT_BYTES", 0)
	switch c := getenv("GORUN_COMPRESS"); c {
	case "", "0", "none", "off":
	case "1", "s2", "on":
		s.Compress = true
	default:
		if e.err == nil {
			e.err = fmt.Errorf("GORUN_COMPRESS=%q: want s2 or none", c)
		}
	}
	s.Addr = getenv("GORUN_ADDR")
	for _, v := range []string{"GORUN_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} {
		if spec := getenv(v); spec != "" {
			s.IfName, s.IfNameVar = spec, v
			break
		}
	}
	s.SocketBuffer = e.int("GORUN_SOCKET_BUFFER", 0)
	if err := tcp.CheckSocketBuffer(s.SocketBuffer); err != nil && e.err == nil {
		e.err = fmt.Errorf("GORUN_SOCKET_BUFFER=%d: %w", s.SocketBuffer, err)
	}
	s.Spin = e.duration("GORUN_SPIN", -1)
	s.StoreFD = e.int("GORUN_STORE_FD", 0)
	s.LauncherPID = e.int("GORUN_LAUNCHER_PID", 0)
	s.BlameFile = getenv("GORUN_BLAME_FILE")
	switch v := getenv("GORUN_TRANSPORT"); v {
	case "", "auto":
		s.Transport = "auto"
	case "tcp", "rdma":
		s.Transport = v
	default:
		e.err = fmt.Errorf("GORUN_TRANSPORT=%q: want auto, tcp or rdma", v)
	}
	s.Algo = e.oneOf("GORUN_ALGO", "auto", "flat", "hierarchical")
	s.Connect = e.oneOf("GORUN_CONNECT", "auto", "eager", "lazy")
	if mode, link, err := parseNet(getenv("GORUN_NET")); err != nil {
		if e.err == nil {
			e.err = err
		}
	} else {
		s.NetMode, s.Net = mode, link
	}
	s.RDMADevice = getenv("GORUN_RDMA_DEVICE")
	s.RDMAGIDIndex = e.int("GORUN_RDMA_GID_INDEX", 0)
	s.MasterAddr = getenv("MASTER_ADDR")
	s.MasterPort = e.int("MASTER_PORT", 0)
	if e.err != nil {
		return s, e.err
	}
	for _, o := range opts {
		o(&s)
	}
	if s.Size > 1 && (s.MasterAddr == "" || s.MasterPort == 0) && defaultMaster != nil && s.Source != "options" {
		addr, port, err := defaultMaster()
		if err != nil {
			return s, err
		}
		if s.MasterAddr == "" {
			s.MasterAddr = addr
		}
		if s.MasterPort == 0 {
			s.MasterPort = port
		}
	}
	if s.MasterPort == 0 {
		s.MasterPort = DefaultMasterPort
	}
	if s.Spin < 0 {
		s.Spin = 0
		if s.LocalSize <= runtime.NumCPU() {
			s.Spin = DefaultSpin
		}
	}
	return s, s.validate()
}

func (s *Settings) validate() error {
	switch s.Transport {
	case "", "auto", "tcp", "rdma":
	default:
		return fmt.Errorf("transport %q: want auto, tcp or rdma", s.Transport)
	}
	switch s.Connect {
	case "", "auto", "eager", "lazy":
	default:
		return fmt.Errorf("connect %q: want auto, eager or lazy", s.Connect)
	}
	// Sizes up to which an algorithm runs: 0 is the default, -1 never.
	for _, t := range []struct {
		name  string
		bytes int
	}{{"GORUN_SMALL_BYTES", s.SmallBytes}, {"GORUN_ONESHOT_BYTES", s.OneShotBytes}, {"GORUN_HALVING_BYTES", s.HalvingBytes},
		{"GORUN_BRUCK_BYTES", s.BruckBytes}, {"GORUN_LINEAR_REDUCE_BYTES", s.LinearReduceBytes}, {"GORUN_TREE_SCATTER_BYTES", s.TreeScatterBytes}} {
		if t.bytes < -1 {
			return fmt.Errorf("%s=%d: want a size in bytes, 0 for the default or -1 for never", t.name, t.bytes)
		}
	}
	src := s.Source
	switch {
	case s.Size < 1:
		return fmt.Errorf("world size %d from %s: must be at least 1", s.Size, src)
	case s.Rank < 0 || s.Rank >= s.Size:
		return fmt.Errorf("rank %d from %s is outside the world of size %d", s.Rank, src, s.Size)
	case s.LocalSize < 1 || s.LocalRank < 0 || s.LocalRank >= s.LocalSize:
		return fmt.Errorf("local rank %d from %s is outside the local size %d", s.LocalRank, src, s.LocalSize)
	case s.LocalSize > s.Size:
		return fmt.Errorf("local size %d from %s exceeds the world size %d", s.LocalSize, src, s.Size)
	case s.Size > 1 && s.MasterAddr == "":
		return fmt.Errorf("MASTER_ADDR is not set (world size %d from %s): set it to rank 0's host, or start the job with gorun", s.Size, src)
	case s.MasterPort < 1 || s.MasterPort > 65535:
		return fmt.Errorf("MASTER_PORT=%d is not a TCP port", s.MasterPort)
	case s.JoinTimeout <= 0:
		return fmt.Errorf("GORUN_JOIN_TIMEOUT=%v (the join's timeout): want a positive duration", s.JoinTimeout)
	case s.Timeout <= 0:
		return fmt.Errorf("GORUN_TIMEOUT=%v (each wait's timeout): want a positive duration", s.Timeout)
	case s.ChunkBytes < 0 || s.ChunkBytes > 0 && s.ChunkBytes < MinChunkBytes:
		return fmt.Errorf("GORUN_CHUNK_BYTES=%d: want at least %d bytes, or 0 for the default", s.ChunkBytes, MinChunkBytes)
	case s.StallAfter < 0:
		return fmt.Errorf("GORUN_STALL=%v: want 0 (off) or a positive duration", s.StallAfter)
	case s.DirectBytes < -1 || s.DirectBytes > 0 && s.DirectBytes < shm.MinDirectBytes:
		return fmt.Errorf("GORUN_DIRECT_BYTES=%d: want at least %d bytes, or -1 for none", s.DirectBytes, shm.MinDirectBytes)
	case s.Size > 1<<20:
		return fmt.Errorf("world size %d is too large", s.Size)
	}
	return nil
}

// MinChunkBytes is the smallest pipelining chunk GORUN_CHUNK_BYTES may
// set: a page. Smaller chunks only multiply the messages (7 bytes holds
// one float32: a ring would send a 4 MiB buffer element by element).
const MinChunkBytes = 4096

// Derived rendezvous ports lie in [derivedPortBase, derivedPortBase+derivedPorts):
// below Linux's default ephemeral range (32768-60999), so the kernel never
// hands the port to some process's outgoing connection just before rank 0
// listens on it, and above the well-known services.
const (
	derivedPortBase = 16384
	derivedPorts    = 16384
)

// SlurmMaster is where a Slurm job step's rank 0 serves the rendezvous
// store when MASTER_ADDR and MASTER_PORT do not say: the first host of
// the step's node list (where srun starts task 0; the job's, outside a
// step), and a port derived from the job and step ids, so that two steps
// sharing a node do not collide. getenv reads the environment
// (os.Getenv).
func SlurmMaster(getenv func(string) string) (host string, port int, err error) {
	name := "SLURM_STEP_NODELIST"
	for _, n := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if getenv(n) != "" {
			name = n
			break
		}
	}
	hosts, err := ExpandHostlist(getenv(name))
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", name, err)
	}
	if len(hosts) == 0 {
		return "", 0, fmt.Errorf("MASTER_ADDR is not set and SLURM_JOB_NODELIST is empty")
	}
	return hosts[0], derivePort(getenv("SLURM_JOB_ID") + "." + slurmStepID(getenv)), nil
}

// InSlurmStep reports whether the environment is a task srun started (a
// job step's), not Slurm's batch script itself, which has the job's
// SLURM_PROCID and SLURM_NTASKS but is one process. getenv reads the
// environment (os.Getenv).
func InSlurmStep(getenv func(string) string) bool {
	return slurmStepID(getenv) != ""
}

// slurmStepID is the job step's id: SLURM_STEP_ID, or SLURM_STEPID, the
// name older Slurm releases also set.
func slurmStepID(getenv func(string) string) string {
	if id := getenv("SLURM_STEP_ID"); id != "" {
		return id
	}
	return getenv("SLURM_STEPID")
}

// derivePort maps a job identity to a port in [16384, 32768), so two jobs on
// one node rarely pick the same one; MASTER_PORT overrides it.
func derivePort(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return derivedPortBase + int(h.Sum32()%derivedPorts)
}

// expandTasksPerNode expands Slurm's "2(x3),1" into [2 2 2 1].
func expandTasksPerNode(v string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(v, ",") {
		n, rep := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			n, rep = part[:i], part[i+2:len(part)-1]
		}
		a, err1 := strconv.Atoi(n)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || a < 0 || r < 1 || r > maxHosts || len(out)+r > maxHosts {
			return nil, fmt.Errorf("bad entry %q", part)
		}
		for range r {
			out = append(out, a)
		}
	}
	return out, nil
}

type envReader struct {
	getenv func(string) string
	err    error
}

// oneOf reads a variable that takes one of a few words: def when unset,
// else one of def and others (an error names them otherwise).
func (e *envReader) oneOf(name, def string, others ...string) string {
	v := e.getenv(name)
	if v == "" || v == def || slices.Contains(others, v) {
		return cmp.Or(v, def)
	}
	if e.err == nil {
		e.err = fmt.Errorf("%s=%q: want %s or %s", name, v, strings.Join(append([]string{def}, others[:len(others)-1]...), ", "), others[len(others)-1])
	}
	return def
}

func (e *envReader) int(name string, def int) int {
	v := e.getenv(name)
	if v == "" || e.err != nil {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		e.err = fmt.Errorf("%s=%q is not an integer", name, v)
		return def
	}
	return n
}

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	v := e.getenv(name)
	if v == "" || e.err != nil {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		if secs, err2 := strconv.ParseFloat(v, 64); err2 == nil {
			return time.Duration(secs * float64(time.Second))
		}
		e.err = fmt.Errorf("%s=%q is not a duration (like 30s or 5m)", name, v)
		return def
	}
	return d
}
