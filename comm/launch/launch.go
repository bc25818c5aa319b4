package launch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-multierror"
)

// Config describes a local job.
type Config struct {
	// NP is the number of ranks.
	NP int
	// Program and Args are what every rank runs.
	Program string
	Args    []string
	// Env is added to every rank's environment (after the launcher's variables, so it can override them).
	Env []string
	// Stdout and Stderr receive the ranks' output (default os.Stdout, os.Stderr).
	Stdout, Stderr io.Writer
	// Stdin goes to rank 0 only, like mpirun.
	Stdin io.Reader
	// NoPrefix turns off the "[rank] " label on every line.
	NoPrefix bool
	// Timeout, when positive, bounds the whole job.
	Timeout time.Duration
	// Grace is how long the other ranks get to exit on their own after one
	// fails before they are sent SIGTERM, and again before SIGKILL (default 3 s).
	Grace time.Duration
	// ForwardSignals relays SIGINT and SIGTERM received by this process to the ranks.
	ForwardSignals bool
	// KeepGoing lets the other ranks go on when one fails, for jobs that
	// shrink past a lost rank (comm.Group.Shrink, train --on-failure
	// shrink): the failure is reported and listed in Result.Lost, and the
	// job succeeds when at least one rank ends well.
	KeepGoing bool

	// Nodes, when above 1, makes this launch one node of a job spread over
	// Nodes machines, as torchrun's --nnodes: the NP ranks started here are
	// global ranks NodeRank·NP … NodeRank·NP+NP−1 of Nodes·NP, every node
	// starting the same NP. Master is the host:port of the rendezvous
	// store, which node 0 serves (on every interface, at that port); Token
	// is the job token every node must share (connections prove they know
	// it).
	Nodes, NodeRank int
	Master          string
	Token           string

	// Status, when set, receives rank 0's status lines as they come: rank
	// 0 (of the job, so on node 0) gets a pipe, its file descriptor named
	// by GORUN_STATUS_FD, where it may write one line per update — a
	// progress bar's text — for the launcher to show (StatusTerminal keeps
	// the latest at the bottom of a terminal).
	Status func(line string)
}

// RankError describes how a rank ended badly.
type RankError struct {
	Rank int
	Pid  int
	// ExitCode is the exit status, or -1 when killed by a signal.
	ExitCode int
	Signal   syscall.Signal
	Err      error // a start failure
	// OutOfMemory says the rank most likely ran out of memory: killed by
	// SIGKILL while the kernel's OOM killer killed a process of the
	// launcher's memory cgroup (or, where that count cannot be read, of
	// the machine), or ended by the Go runtime's fatal out-of-memory
	// error.
	OutOfMemory bool
	// Blames is the rank this rank's error named as the cause, -1 for
	// none: comm writes it to GORUN_BLAME_FILE when a group fails on a
	// peer that died, left or aborted. A failure that blames another
	// failed rank is not the job's first failure.
	Blames int
	// BlamedElsewhere says another node runs the blamed rank: node
	// BlamedNode (gorun -node-rank).
	BlamedElsewhere bool
	BlamedNode      int
	// exited is when the launcher saw the process end: a rank's exit is
	// reported only once its output has been copied, which on a busy
	// machine can put a rank that failed first behind its victims.
	exited time.Time
}

func (e *RankError) Error() string {
	s := e.what()
	if e.BlamedElsewhere {
		s += fmt.Sprintf(", having lost rank %d, which node %d runs (its log says why)", e.Blames, e.BlamedNode)
	}
	return s
}

func (e *RankError) what() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("rank %d failed to start: %v", e.Rank, e.Err)
	case e.ExitCode < 0 && e.OutOfMemory:
		return fmt.Sprintf("rank %d (pid %d) was killed by signal %d (%v), most likely by the kernel's out-of-memory killer (it killed a process while the job ran): the rank needed more memory than it could get", e.Rank, e.Pid, int(e.Signal), e.Signal)
	case e.ExitCode < 0:
		return fmt.Sprintf("rank %d (pid %d) was killed by signal %d (%v)", e.Rank, e.Pid, int(e.Signal), e.Signal)
	case e.OutOfMemory:
		return fmt.Sprintf("rank %d (pid %d) exited with status %d: the Go runtime ran out of memory (the kernel refused what the rank asked for)", e.Rank, e.Pid, e.ExitCode)
	default:
		return fmt.Sprintf("rank %d (pid %d) exited with status %d", e.Rank, e.Pid, e.ExitCode)
	}
}

// Status is the exit code a launcher should end with for this failure.
func (e *RankError) Status() int {
	if e.ExitCode > 0 {
		return e.ExitCode
	}
	if e.ExitCode < 0 {
		return 128 + int(e.Signal)
	}
	return 1
}

// BlameFileEnv names the variable that tells each rank where to write the
// rank its failure blames (comm does, when a group fails on a peer that
// died, left or aborted): a decimal rank and a newline. The launcher
// reads it when the rank exits with an error (RankError.Blames).
const BlameFileEnv = "GORUN_BLAME_FILE"

// ErrTimeout is returned (wrapped) when the job outlives Config.Timeout.
var ErrTimeout = errors.New("job timed out")

// InterruptError is Result.Err when a signal (SIGINT, SIGTERM) stopped the
// job; with Config.ForwardSignals it was passed on to every rank.
type InterruptError struct {
	Signal syscall.Signal
}

func (e *InterruptError) Error() string { return fmt.Sprintf("interrupted by %v", e.Signal) }

// Status is the exit code a launcher should end with, as shells and Slurm
// report a process killed by the signal: 128 + its number.
func (e *InterruptError) Status() int { return 128 + int(e.Signal) }

// Result tells how a job ended.
type Result struct {
	// First is the failure that most likely caused the others (nil when all
	// succeeded): among the failures whose error did not name another
	// failed rank as its cause (RankError.Blames), the first rank killed by
	// a signal gorun did not send, or else the first rank to exit with a
	// non-zero status. A rank that fails makes its peers fail a moment
	// later, and on a busy machine their exits can be reaped before its
	// own; and a rank's exit is reported once its output is copied, so
	// "first" goes by what the ranks said and by when each process ended,
	// not by when its exit was reported.
	First *RankError
	// Failures lists every rank that failed on its own, before being stopped.
	Failures []*RankError
	// Err is ErrTimeout or a context error when the job was stopped from outside.
	Err error
	// Lost lists, with Config.KeepGoing, the ranks that failed while the
	// others went on to succeed (First is then nil).
	Lost []*RankError
}

// Error summarises the result; nil when every rank exited 0.
func (r *Result) Error() error {
	if r.First == nil && r.Err == nil {
		return nil
	}
	var errs *multierror.Error
	if r.Err != nil {
		errs = multierror.Append(errs, r.Err)
	}
	if r.First != nil {
		errs = multierror.Append(errs, fmt.Errorf("first failure: %w", r.First))
	}
	return errs.ErrorOrNil()
}

// Run starts the job and waits for it to end.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.NP < 1 {
		return nil, fmt.Errorf("launch: -np %d: need at least one rank", cfg.NP)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 3 * time.Second
	}
	prog, err := exec.LookPath(cfg.Program)
	if err != nil {
		return nil, fmt.Errorf("launch: %w%s", err, nearbyProgram(cfg.Program, err))
	}
	masterAddr, port, token, lnFile, err := rendezvous(cfg)
	if err != nil {
		return nil, err
	}
	if lnFile != nil {
		defer lnFile.Close()
	}

	out := &lineWriter{w: cfg.Stdout}
	errOut := &lineWriter{w: cfg.Stderr}
	if cfg.Stdout == cfg.Stderr {
		errOut = out
	}
	sweepBlameDirs(os.TempDir())
	blameDir, unlock, err := makeBlameDir()
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	defer unlock()
	defer os.RemoveAll(blameDir)
	j := &job{cfg: cfg, ranks: make([]*rank, cfg.NP), exited: make(chan int, cfg.NP), errOut: errOut}
	j.oomFile = oomKillsFile()
	j.oomKillsBefore, _ = readOOMKills(j.oomFile)
	nodes := max(cfg.Nodes, 1)
	for r := range cfg.NP {
		global := cfg.NodeRank*cfg.NP + r
		cmd := exec.Command(prog, cfg.Args...)
		cmd.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(global),
			"WORLD_SIZE="+strconv.Itoa(nodes*cfg.NP),
			"LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(cfg.NP),
			"GROUP_RANK="+strconv.Itoa(cfg.NodeRank),
			"MASTER_ADDR="+masterAddr,
			"MASTER_PORT="+strconv.Itoa(port),
			"GORUN_TOKEN="+token,
			"GORUN_LAUNCHER_PID="+strconv.Itoa(os.Getpid()),
		)
		if os.Getenv("GOMAXPROCS") == "" {
			// Like torchrun's OMP_NUM_THREADS: ranks that each assume the
			// whole machine oversubscribe it and wake each other up slowly.
			cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(max(1, runtime.NumCPU()/cfg.NP)))
		}
		if global == 0 {
			cmd.ExtraFiles = []*os.File{lnFile}
			cmd.Env = append(cmd.Env, "GORUN_STORE_FD=3")
			cmd.Stdin = cfg.Stdin
		}
		cmd.Env = append(cmd.Env, cfg.Env...)
		// Its own process group, so that stopping it reaches what it
		// started; killed by the kernel if the launcher dies, even by
		// SIGKILL (ranks that are not its children, behind a wrapper,
		// watch GORUN_LAUNCHER_PID: comm.Init).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		prefix := ""
		if !cfg.NoPrefix {
			prefix = "[" + strconv.Itoa(global) + "] "
		}
		rk := &rank{id: r, global: global, cmd: cmd, blameFile: filepath.Join(blameDir, "rank-"+strconv.Itoa(global))}
		cmd.Env = append(cmd.Env, BlameFileEnv+"="+rk.blameFile)
		if global == 0 && cfg.Status != nil {
			pr, pw, err := outputPipe(global, "status lines")
			if err != nil {
				j.killAll(syscall.SIGKILL)
				return nil, err
			}
			cmd.ExtraFiles = append(cmd.ExtraFiles, pw)
			cmd.Env = append(cmd.Env, "GORUN_STATUS_FD="+strconv.Itoa(2+len(cmd.ExtraFiles)))
			rk.closeAfterStart = append(rk.closeAfterStart, pw)
			rk.copiers.Add(1)
			go func() {
				defer rk.copiers.Done()
				defer pr.Close()
				eachLine(pr, func(line []byte) { cfg.Status(string(line)) })
			}()
		}
		for i, dst := range []*lineWriter{out, errOut} {
			pr, pw, err := outputPipe(global, [...]string{"standard output", "standard error"}[i])
			if err != nil {
				j.killAll(syscall.SIGKILL)
				return nil, err
			}
			if i == 0 { // not dst == out: both may be the same writer
				cmd.Stdout = pw
			} else {
				cmd.Stderr = pw
			}
			rk.closeAfterStart = append(rk.closeAfterStart, pw)
			rk.copiers.Add(1)
			var watch func(line []byte)
			if i == 1 {
				watch = func(line []byte) {
					if goOutOfMemory(line) {
						rk.runtimeOutOfMemory = true // read once the copiers are done
					}
				}
			}
			go func(pr *os.File, dst *lineWriter) {
				defer rk.copiers.Done()
				defer pr.Close()
				dst.copyLines(pr, prefix, watch)
			}(pr, dst)
		}
		j.ranks[r] = rk
	}
	return j.run(ctx)
}

// outputPipe makes the pipe that carries what (its standard output, say)
// from rank global to the launcher; its error names the rank and, where
// the launcher ran out of file descriptors, its limit.
func outputPipe(global int, what string) (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err == nil {
		return r, w, nil
	}
	var lim syscall.Rlimit
	if errors.Is(err, syscall.EMFILE) && syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		err = fmt.Errorf("%w (the launcher holds 4 file descriptors a rank while the ranks start, and may open %d: raise ulimit -n, or start fewer ranks)", err, lim.Cur)
	}
	return nil, nil, fmt.Errorf("rank %d's %s: %w", global, what, err)
}

type rank struct {
	id              int // index among this launch's ranks
	global          int // rank in the job
	cmd             *exec.Cmd
	closeAfterStart []*os.File
	copiers         sync.WaitGroup
	err             *RankError // how it ended, nil for success
	stopped         bool       // we stopped it
	exited          time.Time  // when its process ended (zero: running)
	done            bool       // it has exited and its output is copied
	blameFile       string     // where comm writes the rank its error named (BlameFileEnv)
	// runtimeOutOfMemory: its standard error had the Go runtime's fatal
	// out-of-memory line (set by the copier, read after copiers.Wait).
	runtimeOutOfMemory bool
}

type job struct {
	cfg    Config
	errOut *lineWriter // the launcher's own messages, whole lines like the ranks'
	ranks  []*rank
	exited chan int
	mu     sync.Mutex
	// oomFile holds the kernel's count of OOM kills among the ranks
	// (oomKillsFile), oomKillsBefore its value when the job started; ""
	// when there is none to read.
	oomFile        string
	oomKillsBefore uint64
}

func (j *job) killAll(sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, rk := range j.ranks {
		if rk != nil && rk.cmd.Process != nil && !rk.done {
			syscall.Kill(-rk.cmd.Process.Pid, sig) // the whole process group: `go run` children too
		}
	}
}

func (j *job) run(ctx context.Context) (*Result, error) {
	res := &Result{}
	running := 0
	for _, rk := range j.ranks {
		err := rk.cmd.Start()
		for _, f := range rk.closeAfterStart {
			f.Close()
		}
		if err != nil {
			rk.err = &RankError{Rank: rk.global, Err: err, Blames: -1}
			res.First = rk.err
			res.Failures = append(res.Failures, rk.err)
			rk.copiers.Wait()
			break
		}
		running++
		go func(rk *rank) {
			err := rk.cmd.Wait()
			j.mu.Lock()
			rk.exited = time.Now()
			j.mu.Unlock()
			// A process it left behind may hold its output open: until
			// the copiers are done it stays among those killAll stops.
			rk.copiers.Wait()
			j.mu.Lock()
			rk.err = j.exitError(rk, err)
			rk.done = true
			j.mu.Unlock()
			j.exited <- rk.id
		}(rk)
	}

	var sigs chan os.Signal
	if j.cfg.ForwardSignals {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	var timeout <-chan time.Time
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var stopping bool
	var escalate <-chan time.Time
	var stage int
	stop := func() {
		if !stopping {
			stopping = true
			escalate = time.After(j.cfg.Grace)
		}
	}
	if res.First != nil {
		stop()
	}
	interrupts, succeeded := 0, 0
	for running > 0 {
		select {
		case id := <-j.exited:
			running--
			j.mu.Lock()
			rk := j.ranks[id]
			if rk.err != nil && !rk.stopped {
				res.Failures = append(res.Failures, rk.err)
				switch first := cause(res.Failures); {
				case j.cfg.KeepGoing:
					j.errOut.printf("gorun: %v; the others go on without it\n", rk.err)
				case res.First == nil:
					res.First = first
					j.errOut.printf("gorun: %v; stopping the other ranks\n", rk.err)
				case first == res.First: // a failure it caused, most likely
				case res.First.Blames == first.Rank:
					j.errOut.printf("gorun: %v: the first failure (rank %d's error named it)\n", first, res.First.Rank)
					res.First = first
				case first.Signal != 0 && res.First.Signal == 0:
					j.errOut.printf("gorun: %v: the first failure\n", first)
					res.First = first
				default:
					j.errOut.printf("gorun: %v before rank %d did: the first failure\n", first, res.First.Rank)
					res.First = first
				}
			}
			if rk.err == nil {
				succeeded++
			}
			j.mu.Unlock()
			if rk.err != nil && !j.cfg.KeepGoing {
				stop()
			}
		case <-timeout:
			res.Err = fmt.Errorf("%w after %v", ErrTimeout, j.cfg.Timeout)
			j.errOut.printf("gorun: job timed out after %v; stopping all ranks\n", j.cfg.Timeout)
			j.markStopped()
			j.killAll(syscall.SIGTERM)
			stopping, stage, escalate = true, 1, time.After(j.cfg.Grace)
		case <-ctx.Done():
			res.Err = ctx.Err()
			j.markStopped()
			j.killAll(syscall.SIGKILL)
		case s := <-sigs:
			interrupts++
			if res.Err == nil {
				res.Err = &InterruptError{Signal: s.(syscall.Signal)}
			}
			j.markStopped()
			if interrupts > 1 {
				j.killAll(syscall.SIGKILL)
			} else {
				j.killAll(s.(syscall.Signal))
				stopping, stage, escalate = true, 1, time.After(j.cfg.Grace)
			}
		case <-escalate:
			j.markStopped()
			if stage == 0 {
				j.killAll(syscall.SIGTERM)
				stage, escalate = 1, time.After(j.cfg.Grace)
			} else {
				j.killAll(syscall.SIGKILL)
				escalate = nil
			}
		}
	}
	if j.cfg.KeepGoing && len(res.Failures) > 0 && res.First == nil {
		if succeeded > 0 && res.Err == nil {
			res.Lost = res.Failures
		} else {
			res.First = cause(res.Failures)
		}
	}
	return res, nil
}

// markStopped records that ranks still running from now on were stopped by
// us, so their exit is not counted as a failure of their own.
func (j *job) markStopped() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, rk := range j.ranks {
		if !rk.done && rk.exited.IsZero() {
			rk.stopped = true
		}
	}
}

// cause returns the failure that most likely caused the others (Result.First):
// failures whose error named another failed rank are passed over (unless
// every one did), then a start failure comes first, then a rank killed by
// a signal, then the earliest exit.
func cause(failures []*RankError) *RankError {
	failed := make(map[int]bool, len(failures))
	for _, f := range failures {
		failed[f.Rank] = true
	}
	var first *RankError
	for _, f := range failures {
		if f.Blames >= 0 && f.Blames != f.Rank && failed[f.Blames] {
			continue
		}
		if first == nil || likelierCause(f, first) {
			first = f
		}
	}
	if first == nil { // they blame each other
		for _, f := range failures {
			if first == nil || likelierCause(f, first) {
				first = f
			}
		}
	}
	return first
}

// likelierCause orders failures that do not blame each other: a start
// failure, then a rank killed by a signal gorun did not send (its peers
// exit with a status because of it), then the earlier exit.
func likelierCause(a, b *RankError) bool {
	if (a.Err != nil) != (b.Err != nil) {
		return a.Err != nil
	}
	if (a.Signal != 0) != (b.Signal != 0) {
		return a.Signal != 0
	}
	return a.exited.Before(b.exited)
}

func (j *job) exitError(rk *rank, err error) *RankError {
	if err == nil {
		return nil
	}
	e := &RankError{Rank: rk.global, Pid: rk.cmd.Process.Pid, exited: rk.exited, Blames: readBlame(rk.blameFile)}
	if np, first := j.cfg.NP, j.cfg.NodeRank*j.cfg.NP; e.Blames >= 0 && np > 0 && (e.Blames < first || e.Blames >= first+np) {
		e.BlamedElsewhere, e.BlamedNode = true, e.Blames/np
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.ExitCode, e.Signal = -1, ws.Signal()
			if e.Signal == syscall.SIGKILL && j.oomFile != "" {
				now, ok := readOOMKills(j.oomFile)
				e.OutOfMemory = ok && now > j.oomKillsBefore
			}
			return e
		}
		e.ExitCode = ee.ExitCode()
		e.OutOfMemory = rk.runtimeOutOfMemory
		return e
	}
	e.Err = err
	return e
}

// lineWriter writes whole lines from many ranks without interleaving them.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lineWriter) printf(format string, args ...any) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	fmt.Fprintf(lw.w, format, args...)
}

// copyLines copies r to the writer line by line, each prefixed, showing
// each line to watch first when it is not nil. A line longer than the
// buffer is written in pieces, each on its own line.
func (lw *lineWriter) copyLines(r io.Reader, prefix string, watch func(line []byte)) {
	line := make([]byte, 0, 64<<10+len(prefix)+1)
	eachLine(r, func(text []byte) {
		if watch != nil {
			watch(text)
		}
		line = append(append(append(line[:0], prefix...), text...), '\n')
		lw.mu.Lock()
		lw.w.Write(line)
		lw.mu.Unlock()
	})
}

// eachLine calls fn with every line of r, without its newline, until r
// ends; a line longer than 64 KiB comes in pieces. The slice is valid
// only during the call.
func eachLine(r io.Reader, fn func(line []byte)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			fn(bytes.TrimSuffix(chunk, []byte("\n")))
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// rendezvous returns where the ranks find rank 0's store and the job
// token. A single-node job gets a fresh token and a port bound here and
// handed to rank 0 as an open socket (no window in which another process
// could take it); node 0 of a multi-node job binds the master's port the
// same way, on every interface.
func rendezvous(cfg Config) (addr string, port int, token string, ln *os.File, err error) {
	listen := "127.0.0.1:0"
	addr = "127.0.0.1"
	// Nodes 0 (the zero Config) is one node, whose node rank is 0: any
	// other would number its ranks past the world.
	if nodes := max(cfg.Nodes, 1); cfg.Nodes < 0 || cfg.NodeRank < 0 || cfg.NodeRank >= nodes {
		return "", 0, "", nil, fmt.Errorf("launch: node rank %d outside 0…%d (%d nodes)", cfg.NodeRank, nodes-1, cfg.Nodes)
	}
	if cfg.Nodes > 1 {
		if cfg.Master == "" {
			return "", 0, "", nil, fmt.Errorf("launch: a job over %d nodes needs --master HOST:PORT, where node 0 serves the rendezvous (the same on every node)", cfg.Nodes)
		}
		host, p, err := net.SplitHostPort(cfg.Master)
		if err != nil || host == "" {
			return "", 0, "", nil, fmt.Errorf("launch: --master %q: want HOST:PORT", cfg.Master)
		}
		if port, err = strconv.Atoi(p); err != nil || port <= 0 || port > 65535 {
			return "", 0, "", nil, fmt.Errorf("launch: --master %q: port %q is not a port number", cfg.Master, p)
		}
		if cfg.Token == "" {
			return "", 0, "", nil, fmt.Errorf("launch: a job over %d nodes needs the same token on every node: set GORUN_TOKEN (e.g. to the output of openssl rand -hex 16) before gorun on each", cfg.Nodes)
		}
		if cfg.NodeRank != 0 {
			return host, port, cfg.Token, nil, nil
		}
		addr, listen, token = host, net.JoinHostPort("", p), cfg.Token
	} else {
		t := make([]byte, 16)
		if _, err := rand.Read(t); err != nil {
			return "", 0, "", nil, err
		}
		token = hex.EncodeToString(t)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return "", 0, "", nil, fmt.Errorf("launch: reserve the rendezvous port: %w", err)
	}
	f, err := l.(*net.TCPListener).File()
	l.Close()
	if err != nil {
		return "", 0, "", nil, fmt.Errorf("launch: %w", err)
	}
	return addr, l.Addr().(*net.TCPAddr).Port, token, f, nil
}

// nearbyProgram says, for a bare program name not found in $PATH, where
// one of that name is near (this directory, or its bin/, where the README
// builds the commands): "; ./bin/train is one: give its path, as a shell
// would need" ("" when there is none, or the name was a path).
func nearbyProgram(name string, err error) string {
	if !errors.Is(err, exec.ErrNotFound) || strings.ContainsRune(name, '/') {
		return ""
	}
	for _, dir := range []string{".", "bin"} {
		p := "./" + filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return fmt.Sprintf("; %s is one: give its path, as a shell would need", p)
		}
	}
	return ""
}
