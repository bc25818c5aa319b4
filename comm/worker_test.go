package comm_test

// The multi-process tests run this test binary as the ranks of a real job
// (started by comm/launch, as gorun does). A rank finds its scenario in
// COMM_TEST_WORKER, checks every result against a reference it computes
// itself, and reports through its output and exit status.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/rendezvous"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/tcp"
)

const workerEnv = "COMM_TEST_WORKER"

func TestMain(m *testing.M) {
	if scenario := os.Getenv(workerEnv); scenario != "" {
		os.Exit(runWorker(scenario))
	}
	os.Exit(m.Run())
}

func runWorker(scenario string) int {
	ctx := context.Background()
	if (scenario == "stranger" || scenario == "absent-stranger") && os.Getenv("RANK") == "1" {
		// Before joining, so that the others wait in the join meanwhile;
		// the idle connections stay open through this rank's join.
		defer stranger(os.Getenv("MASTER_ADDR") + ":" + os.Getenv("MASTER_PORT"))()
	}
	if strings.HasPrefix(scenario, "absent") && os.Getenv("RANK") == "2" {
		return 0 // never joins
	}
	if scenario == "absent-othersize" && os.Getenv("RANK") == "1" {
		// Another node's rank 1, started with another -np: turned away.
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := rendezvous.Dial(dctx, os.Getenv("MASTER_ADDR")+":"+os.Getenv("MASTER_PORT"), []byte(os.Getenv("GORUN_TOKEN")), 1, 2)
		cancel()
		fmt.Println("OTHER-SIZE-DIAL:", err)
	}
	if scenario == "nostore" && os.Getenv("RANK") == "0" {
		return 0 // never serves the store
	}
	if scenario == "othersize" && os.Getenv("RANK") == "2" {
		os.Setenv("WORLD_SIZE", "4") // a rank started with another world size
	}
	if scenario == "othertoken" && os.Getenv("RANK") == "2" {
		os.Setenv("GORUN_TOKEN", "another job's") // set on one node only
	}
	if scenario == "othersettings" && os.Getenv("RANK") == "2" {
		// As if set in one node's shell profile only.
		os.Setenv("GORUN_TRANSPORT", "tcp")
		os.Setenv("GORUN_SMALL_BYTES", "65536")
	}
	if scenario == "twice" && os.Getenv("RANK") == "2" {
		os.Setenv("RANK", "1") // two processes given rank 1, none rank 2
		os.Setenv("LOCAL_RANK", "1")
	}
	if scenario == "mute" && os.Getenv("RANK") == "2" {
		// Reaches the store, then never publishes its address: stuck
		// inside its join until the launcher stops it.
		size, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
		c, err := rendezvous.Dial(ctx, os.Getenv("MASTER_ADDR")+":"+os.Getenv("MASTER_PORT"), []byte(os.Getenv("GORUN_TOKEN")), 2, size)
		if err != nil {
			fmt.Println("MUTE-DIAL-ERROR:", err)
			return 1
		}
		defer c.Close()
		time.Sleep(time.Minute)
		return 0
	}
	start := time.Now()
	g, err := comm.Init(ctx)
	if err != nil {
		fmt.Printf("INIT-ERROR after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
		return 3
	}
	defer g.Close()
	switch scenario {
	case "matrix":
		err = matrix(ctx, g)
	case "large-blocks":
		// Blocks of 1.2 MB: a 1 MiB chunk and a 151,424-byte rest each.
		err = checkRooted[float32](ctx, g, 300_000)
		if err == nil {
			err = largeBroadcasts(ctx, g)
		}
		if err == nil {
			err = largeAllGathers(ctx, g)
		}
	case "stranger", "sum":
		buf := []float32{float32(g.Rank() + 1)}
		if err = g.AllReduce(ctx, buf, comm.Sum); err == nil && buf[0] != float32(g.Size()*(g.Size()+1)/2) {
			err = fmt.Errorf("sum %v", buf[0])
		}
	case "sockets":
		err = socketsScenario(ctx, g)
	case "kill":
		err = killScenario(ctx, g)
	case "killall":
		err = killAllScenario(ctx, g)
	case "bench":
		err = benchScenario(ctx, g)
	case "staged":
		err = stagedScenario(ctx, g)
	case "early":
		err = earlyScenario(ctx, g)
	case "stall":
		err = stallScenario(ctx, g)
	case "stoppedzero":
		err = stoppedZeroScenario(ctx, g)
	case "shrink":
		err = shrinkScenario(ctx, g)
	case "partition":
		err = partitionScenario(ctx, g)
	case "latefirst":
		// Rank 2 works STALL_SLEEP before its first call, as a rank
		// preparing data alone would.
		if g.Rank() == 2 {
			pause, _ := time.ParseDuration(os.Getenv("STALL_SLEEP"))
			time.Sleep(pause)
		}
		err = g.Barrier(ctx)
	case "substall":
		// As latefirst, in a group Split made: rank 2 works STALL_SLEEP
		// before the sub-group's first collective.
		var sub *comm.Group
		if sub, err = g.Split(ctx, 0, g.Rank()); err == nil {
			if g.Rank() == 2 {
				pause, _ := time.ParseDuration(os.Getenv("STALL_SLEEP"))
				time.Sleep(pause)
			}
			err = sub.AllReduce(ctx, make([]float32, 4), comm.Sum)
		}
	case "recvstall":
		// Rank 0 waits for a message rank 1 sends only after STALL_SLEEP.
		buf := make([]float32, 5)
		if g.Rank() == 0 {
			err = g.Recv(ctx, buf, 1, 3)
		} else {
			pause, _ := time.ParseDuration(os.Getenv("STALL_SLEEP"))
			time.Sleep(pause)
			err = g.Send(ctx, buf, 0, 3)
		}
	case "disagree":
		err = disagreeScenario(ctx, g)
	case "closesub":
		err = closeSubScenario(ctx, g)
	case "mismatch":
		if g.Rank() == 1 {
			err = g.AllReduce(ctx, make([]float32, 1000), comm.Sum)
		} else {
			err = g.Broadcast(ctx, make([]float32, 2000), 0)
		}
		if err == nil {
			// A broadcast root needs nothing from the others, so it can only
			// learn of the mismatch at its next call.
			err = g.Barrier(ctx)
		}
		if err == nil {
			err = errors.New("mismatched calls succeeded")
		}
		fmt.Printf("ERROR %v\n", err)
		return 3
	default:
		err = fmt.Errorf("unknown scenario %q", scenario)
	}
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		return 3
	}
	fmt.Println("OK")
	return 0
}

// stranger pokes the rendezvous store without the token: with a wrong one,
// with garbage, and by connecting and saying nothing. It prints how many
// probes of each kind provably reached the store: the wrong token was
// refused by a store that answered, the garbage was dropped (the store
// closed the connection), the idle connection was accepted. It returns a
// function closing the idle connections.
func stranger(addr string) (closeIdle func()) {
	var refused, dropped, idle int
	var idles []net.Conn
	for range 5 {
		if c, err := net.Dial("tcp", addr); err == nil {
			err := tcp.DialHandshake(c, []byte("wrong token"), tcp.Identity{Purpose: tcp.PurposeStore, From: 0, To: -1, Size: 3}, 2*time.Second)
			switch {
			case err == nil:
				fmt.Println("STRANGER-ACCEPTED")
			case errors.Is(err, tcp.ErrAuth):
				refused++
			}
			c.Close()
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(make([]byte, 64)); errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				dropped++
			}
			c.Close()
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			idle++
			idles = append(idles, c) // idle: must not stall the job
		}
	}
	fmt.Printf("STRANGER-PROBES refused=%d dropped=%d idle=%d\n", refused, dropped, idle)
	return func() {
		for _, c := range idles {
			c.Close()
		}
	}
}

func killScenario(ctx context.Context, g *comm.Group) error {
	victim, _ := strconv.Atoi(os.Getenv("VICTIM"))
	buf := make([]float32, 4<<20)
	call := func() error { return g.AllReduce(ctx, buf, comm.Sum) }
	var after time.Duration // the victim's least time in the loop
	switch os.Getenv("KILL_DURING") {
	case "alltoall":
		// Blocks of 16/np MiB: direct frames in flight through shared memory.
		recv := make([]float32, len(buf))
		call = func() error { return g.AllToAll(ctx, buf, recv) }
	case "smallalltoall":
		// Blocks of 4 bytes through shared memory: every rank sends its
		// blocks, then takes each peer's straight from its ring, in
		// order (no receive posted), the victim's among them.
		send, recv := buf[:g.Size()], make([]float32, g.Size())
		call = func() error { return g.AllToAll(ctx, send, recv) }
	case "gather":
		// Blocks of 16 bytes: the root takes each rank's straight from
		// its ring, in order, the victim's among them.
		recv := make([]float32, 4*g.Size())
		call = func() error { return g.Gather(ctx, buf[:4], recv, 0) }
		after = 200 * time.Millisecond
	case "scatter":
		// Blocks of 16 bytes: over TCP they go down the binomial tree,
		// where the victim's children wait on it, not on the root. The
		// root waits for nobody, so a few calls could end before the
		// others are through Init: the victim dies 200 ms in.
		recv := make([]float32, 4)
		call = func() error { return g.Scatter(ctx, buf[:4*g.Size()], recv, 0) }
		after = 200 * time.Millisecond
	}
	start := time.Now()
	for i := 0; ; i++ {
		if g.Rank() == victim && i >= 3 && time.Since(start) >= after {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		t0 := time.Now()
		if err := call(); err != nil {
			fmt.Printf("FAILED-AFTER %.3f %v\n", time.Since(t0).Seconds(), err)
			return err
		}
		if time.Since(start) > time.Minute {
			return errors.New("victim never died")
		}
	}
}

// killAllScenario shows this rank's shared-memory segment, then every
// rank kills itself with SIGKILL in the middle of all-reduces.
func killAllScenario(ctx context.Context, g *comm.Group) error {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "memfd:gorun") {
			fmt.Println("SEGMENT " + l)
		}
	}
	// The descriptor is closed once every rank has mapped the segments;
	// the mapping shows it then.
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil {
		for _, l := range strings.Split(string(maps), "\n") {
			if i := strings.Index(l, "/memfd:gorun-rank"+strconv.Itoa(g.Rank())); i >= 0 {
				fmt.Println("SEGMENT " + strings.Fields(l[i+1:])[0])
				break
			}
		}
	}
	buf := make([]float32, 4<<20)
	for i := 0; ; i++ {
		if i == 2 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
	}
}

// benchScenario times BENCH_ITERS all-reduces of BENCH_BYTES after a
// warm-up; rank 0 prints the slowest rank's time per call.
func benchScenario(ctx context.Context, g *comm.Group) error {
	size, _ := strconv.Atoi(os.Getenv("BENCH_BYTES"))
	iters, _ := strconv.Atoi(os.Getenv("BENCH_ITERS"))
	buf := make([]float32, max(size/4, 2))
	rng := rand.New(rand.NewPCG(uint64(g.Rank()), 9))
	for i := range buf {
		buf[i] = 1
		if os.Getenv("BENCH_DATA") == "random" {
			buf[i] = rng.Float32()
		}
	}
	for range 5 {
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if dir := os.Getenv("BENCH_PROFILE_DIR"); dir != "" {
		f, err := os.Create(fmt.Sprintf("%s/rank%d.prof", dir, g.Rank()))
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	for range iters {
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
	}
	elapsed := []float64{float64(time.Since(start).Nanoseconds()) / float64(iters)}
	if err := comm.AllReduce(ctx, g, elapsed, comm.Max); err != nil {
		return err
	}
	if g.Rank() == 0 {
		fmt.Printf("NS-PER-OP %.0f\n", elapsed[0])
	}
	return nil
}

// value is rank r's element i: small multiples of 1/4, so sums, averages
// and products of up to 8 ranks are exact in every type and any order.
func value[T comm.Elem](r, i int, op comm.Op) T {
	if op == comm.Prod {
		return elem[T]([]float32{1, 2, 1, 3}[(i+r)%4])
	}
	v := float32((i*7+r*13)%17 - 8)
	var z T
	switch any(z).(type) {
	case float32, float64, comm.BFloat16, comm.Float16:
		return elem[T](v / 4)
	case uint8, uint16, uint32, uint64:
		return elem[T](v + 8)
	default:
		return elem[T](v)
	}
}

// valuePeriod is value's period in its element index: the least common
// multiple of its two patterns' periods, 4 and 17 (TestValuePeriodic).
const valuePeriod = 68

// pattern is one period of a sequence that repeats every valuePeriod
// elements: the checks of a million elements compute 68 values of each
// rank (and 68 references) instead of a million, which had been most of
// the matrix's time.
type pattern[T comm.Elem] [valuePeriod]T

// at is element i of the sequence.
func (p *pattern[T]) at(i int) T { return p[i%valuePeriod] }

// values tabulates value[T](r, i, op) over one period of i.
func values[T comm.Elem](r int, op comm.Op) *pattern[T] {
	var p pattern[T]
	for i := range p {
		p[i] = value[T](r, i, op)
	}
	return &p
}

// references tabulates reference[T](n, i, op) over one period of i.
func references[T comm.Elem](n int, op comm.Op) *pattern[T] {
	var p pattern[T]
	for i := range p {
		p[i] = reference[T](n, i, op)
	}
	return &p
}

// TestValuePeriodic checks what pattern relies on: value repeats every
// valuePeriod elements, for every element type, operation and rank the
// matrix uses (ranks up to 8·8, the all-to-all's blocks).
func TestValuePeriodic(t *testing.T) {
	periodic := map[string]func() error{
		"float32": periodicValues[float32], "float64": periodicValues[float64],
		"int8": periodicValues[int8], "int16": periodicValues[int16],
		"int32": periodicValues[int32], "int64": periodicValues[int64],
		"uint8": periodicValues[uint8], "uint16": periodicValues[uint16],
		"uint32": periodicValues[uint32], "uint64": periodicValues[uint64],
		"bfloat16": periodicValues[comm.BFloat16], "float16": periodicValues[comm.Float16],
	}
	for name, check := range periodic {
		if err := check(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func periodicValues[T comm.Elem]() error {
	for _, op := range []comm.Op{comm.Sum, comm.Avg, comm.Max, comm.Min, comm.Prod} {
		for r := range 64 {
			p := values[T](r, op)
			for i := range 5 * valuePeriod {
				if got, want := p.at(i), value[T](r, i, op); got != want {
					return fmt.Errorf("%v, rank %d: element %d is %v in the table, value gives %v", op, r, i, got, want)
				}
			}
		}
	}
	return nil
}

// elem converts x, an integer or a multiple of 1/4, to T.
func elem[T comm.Elem](x float32) T {
	var z T
	switch any(z).(type) {
	case comm.BFloat16:
		return any(comm.NewBFloat16(x)).(T)
	case comm.Float16:
		return any(comm.NewFloat16(x)).(T)
	}
	return T(x)
}

// reference is the result of reducing element i over n ranks: in T's own
// arithmetic, or for the 16-bit floats in float32, rounded once, as the
// collectives define it (the inputs are exact there).
func reference[T comm.Elem](n, i int, op comm.Op) T {
	var z T
	switch any(z).(type) {
	case comm.BFloat16, comm.Float16:
		acc := asFloat32(value[T](0, i, op))
		for r := 1; r < n; r++ {
			acc = combine(op, acc, asFloat32(value[T](r, i, op)))
		}
		if op == comm.Avg {
			acc /= float32(n)
		}
		return elem[T](acc)
	}
	acc := value[T](0, i, op)
	for r := 1; r < n; r++ {
		acc = combine(op, acc, value[T](r, i, op))
	}
	if op == comm.Avg {
		acc /= T(n)
	}
	return acc
}

// combine is acc op x in N's own arithmetic (not for the 16-bit floats,
// whose arithmetic is float32's).
func combine[N comm.Elem](op comm.Op, acc, x N) N {
	switch op {
	case comm.Sum, comm.Avg:
		return acc + x
	case comm.Prod:
		return acc * x
	case comm.Max:
		return max(acc, x)
	}
	return min(acc, x)
}

func asFloat32[T comm.Elem](v T) float32 {
	switch h := any(v).(type) {
	case comm.BFloat16:
		return h.Float32()
	case comm.Float16:
		return h.Float32()
	}
	return float32(v)
}

func counts(n int) []int {
	c := []int{0, 1, n - 1, n + 1, 4097, 1<<20 + 3}
	slices.Sort(c)
	return slices.Compact(c)
}

// shortEnv, set by the parent test under -short (the race pass), makes the
// matrix leave out the element types whose code paths the other types
// share: the race detector looks for concurrency bugs, which they add none
// of; the main pass runs them all.
const shortEnv = "COMM_TEST_SHORT"

func matrix(ctx context.Context, g *comm.Group) error {
	for _, count := range counts(g.Size()) {
		if err := checkType[float32](ctx, g, count); err != nil {
			return err
		}
		if count <= 4097 {
			for _, check := range []func(context.Context, *comm.Group, int) error{
				checkType[float64], checkType[int32], checkType[int64], checkType[uint8],
				checkType[comm.BFloat16], checkType[comm.Float16]} {
				if err := check(ctx, g, count); err != nil {
					return err
				}
			}
		}
		if count == 4097 && os.Getenv(shortEnv) == "" {
			// MPI's other integer types, at one count.
			for _, check := range []func(context.Context, *comm.Group, int) error{
				checkType[int8], checkType[int16], checkType[uint16], checkType[uint32], checkType[uint64]} {
				if err := check(ctx, g, count); err != nil {
					return err
				}
			}
		}
	}
	if err := identicalBits(ctx, g); err != nil {
		return err
	}
	if err := pointToPoint(ctx, g); err != nil {
		return err
	}
	if err := split(ctx, g); err != nil {
		return err
	}
	return g.Barrier(ctx)
}

func ops[T comm.Elem]() []comm.Op {
	if ring.ValidOp[T](comm.Avg) == nil {
		return []comm.Op{comm.Sum, comm.Avg, comm.Max, comm.Min, comm.Prod}
	}
	return []comm.Op{comm.Sum, comm.Max, comm.Min, comm.Prod}
}

func checkType[T comm.Elem](ctx context.Context, g *comm.Group, count int) error {
	n, r := g.Size(), g.Rank()
	where := func(what string, i int, got, want T) error {
		return fmt.Errorf("%s of %d × %v: element %d is %v, want %v", what, count, ring.DTypeOf[T](), i, got, want)
	}
	for _, op := range ops[T]() {
		mine, want := values[T](r, op), references[T](n, op)
		buf := make([]T, count)
		for i := range buf {
			buf[i] = mine.at(i)
		}
		if err := comm.AllReduce(ctx, g, buf, op); err != nil {
			return err
		}
		for i, v := range buf {
			if v != want.at(i) {
				return where("AllReduce "+op.String(), i, v, want.at(i))
			}
		}
		send := make([]T, n*count)
		for i := range send {
			send[i] = mine.at(i)
		}
		recv := make([]T, count)
		if err := comm.ReduceScatter(ctx, g, send, recv, op); err != nil {
			return err
		}
		for i, v := range recv {
			if v != want.at(r*count+i) {
				return where("ReduceScatter "+op.String(), i, v, want.at(r*count+i))
			}
		}
	}
	mine := values[T](r, comm.Sum)
	for _, root := range []int{0, n - 1} {
		buf := make([]T, count)
		for i := range buf {
			buf[i] = mine.at(i)
		}
		if err := comm.Broadcast(ctx, g, buf, root); err != nil {
			return err
		}
		sent := values[T](root, comm.Sum)
		for i, v := range buf {
			if v != sent.at(i) {
				return where(fmt.Sprintf("Broadcast from %d", root), i, v, sent.at(i))
			}
		}
	}
	send := make([]T, count)
	for i := range send {
		send[i] = mine.at(i)
	}
	recv := make([]T, n*count)
	if err := comm.AllGather(ctx, g, send, recv); err != nil {
		return err
	}
	for q := range n {
		theirs := values[T](q, comm.Sum)
		for i, v := range recv[q*count : (q+1)*count] {
			if v != theirs.at(i) {
				return where("AllGather", q*count+i, v, theirs.at(i))
			}
		}
	}
	if count > 4097 || (os.Getenv(shortEnv) != "" && ring.DTypeOf[T]() != ring.Float32) {
		return nil // the rooted collectives, AllToAll and the v forms: the counts (float32 only in the race pass)
	}
	if err := checkRooted[T](ctx, g, count); err != nil {
		return err
	}
	return checkVector[T](ctx, g, count)
}

// checkVector runs the v forms (AllGatherV, GatherV and ScatterV to and
// from rank n−1, AllToAllV, ReduceScatterV with every op) with uneven
// counts around count, zeros among them, against the sequential
// reference.
func checkVector[T comm.Elem](ctx context.Context, g *comm.Group, count int) error {
	n, r := g.Size(), g.Rank()
	counts := make([]int, n)
	off := make([]int, n+1) // block k spans [off[k], off[k+1])
	for k := range counts {
		counts[k] = max(count-k, 0) + k%2
		off[k+1] = off[k] + counts[k]
	}
	total := off[n]
	// owner returns the rank whose block holds element i of the whole.
	owner := func(i int) int {
		k, _ := slices.BinarySearch(off, i+1)
		return k - 1
	}
	where := func(what string, i int, got, want T) error {
		return fmt.Errorf("%s of counts %v × %v: element %d is %v, want %v", what, counts, ring.DTypeOf[T](), i, got, want)
	}
	mine := make([]T, counts[r])
	for i := range mine {
		mine[i] = value[T](r, i, comm.Sum)
	}
	all := make([]T, total)
	if err := comm.AllGatherV(ctx, g, mine, all, counts); err != nil {
		return err
	}
	for i, v := range all {
		if k := owner(i); v != value[T](k, i-off[k], comm.Sum) {
			return where("AllGatherV", i, v, value[T](k, i-off[k], comm.Sum))
		}
	}
	root := n - 1
	var gathered []T
	if r == root {
		gathered = make([]T, total)
	}
	if err := comm.GatherVAsync(ctx, g, mine, gathered, counts, root).Wait(); err != nil {
		return err
	}
	for i, v := range gathered {
		if v != all[i] {
			return where("GatherV", i, v, all[i])
		}
	}
	back := make([]T, counts[r])
	if err := comm.ScatterV(ctx, g, gathered, counts, back, root); err != nil {
		return err
	}
	for i, v := range back {
		if v != mine[i] {
			return where("ScatterV", i, v, mine[i])
		}
	}
	// AllToAllV: rank r sends counts[(r+p)%n] elements to rank p, element
	// i of that block being value(r·n+p, i).
	sendCounts, recvCounts := make([]int, n), make([]int, n)
	var send []T
	for p := range n {
		sendCounts[p], recvCounts[p] = counts[(r+p)%n], counts[(p+r)%n]
		for i := range sendCounts[p] {
			send = append(send, value[T](r*n+p, i, comm.Sum))
		}
	}
	recv := make([]T, len(send))
	if err := comm.AllToAllVAsync(ctx, g, send, sendCounts, recv, recvCounts).Wait(); err != nil {
		return err
	}
	at := 0
	for p := range n {
		for i := range recvCounts[p] {
			if want := value[T](p*n+r, i, comm.Sum); recv[at] != want {
				return where(fmt.Sprintf("AllToAllV, block from %d", p), i, recv[at], want)
			}
			at++
		}
	}
	for _, op := range ops[T]() {
		whole := make([]T, total)
		for i := range whole {
			whole[i] = value[T](r, i, op)
		}
		out := make([]T, counts[r])
		if err := comm.ReduceScatterV(ctx, g, whole, out, counts, op); err != nil {
			return err
		}
		for i, v := range out {
			if want := reference[T](n, off[r]+i, op); v != want {
				return where("ReduceScatterV "+op.String(), i, v, want)
			}
		}
	}
	return nil
}

// checkRooted runs Reduce (every op), Gather, Scatter and AllToAll with
// roots 0 and n−1, synchronously and asynchronously, against the
// sequential reference; Reduce leaves the other ranks' buffers alone.
func checkRooted[T comm.Elem](ctx context.Context, g *comm.Group, count int) error {
	n, r := g.Size(), g.Rank()
	where := func(what string, i int, got, want T) error {
		return fmt.Errorf("%s of %d × %v: element %d is %v, want %v", what, count, ring.DTypeOf[T](), i, got, want)
	}
	for _, root := range []int{0, n - 1} {
		for _, op := range ops[T]() {
			own := values[T](r, op)
			want := own // a rank other than the root keeps its own values
			if r == root {
				want = references[T](n, op)
			}
			buf := make([]T, count)
			for i := range buf {
				buf[i] = own.at(i)
			}
			if err := comm.Reduce(ctx, g, buf, op, root); err != nil {
				return err
			}
			for i, v := range buf {
				if v != want.at(i) {
					return where(fmt.Sprintf("Reduce %v to %d", op, root), i, v, want.at(i))
				}
			}
		}
		mine := values[T](r, comm.Sum)
		send := make([]T, count)
		for i := range send {
			send[i] = mine.at(i)
		}
		var all []T // the gathered blocks, on the root
		if r == root {
			all = make([]T, n*count)
		}
		if err := comm.GatherAsync(ctx, g, send, all, root).Wait(); err != nil {
			return err
		}
		for q := range len(all) / max(count, 1) { // the root's blocks
			theirs := values[T](q, comm.Sum)
			for i, v := range all[q*count : (q+1)*count] {
				if v != theirs.at(i) {
					return where(fmt.Sprintf("Gather to %d", root), q*count+i, v, theirs.at(i))
				}
			}
		}
		got := make([]T, count)
		if err := comm.Scatter(ctx, g, all, got, root); err != nil {
			return err
		}
		for i, v := range got {
			if v != mine.at(i) {
				return where(fmt.Sprintf("Scatter from %d", root), i, v, mine.at(i))
			}
		}
	}
	// AllToAll: block p of rank r's send is value(r·n+p, i); rank r's
	// block p comes from rank p.
	send := make([]T, n*count)
	recv := make([]T, n*count)
	for p := range n {
		block := values[T](r*n+p, comm.Sum)
		for i := range count {
			send[p*count+i] = block.at(i)
		}
	}
	if err := comm.AllToAllAsync(ctx, g, send, recv).Wait(); err != nil {
		return err
	}
	for p := range n {
		block := values[T](p*n+r, comm.Sum)
		for i, v := range recv[p*count : (p+1)*count] {
			if v != block.at(i) {
				return where("AllToAll", p*count+i, v, block.at(i))
			}
		}
	}
	return nil
}

// identicalBits all-reduces random floats (where rounding depends on the
// order of the additions) and checks that every rank got the same bits.
func identicalBits(ctx context.Context, g *comm.Group) error {
	for _, count := range []int{1000, 300000} {
		rng := rand.New(rand.NewPCG(uint64(g.Rank()), 7))
		buf := make([]float32, count)
		for i := range buf {
			buf[i] = rng.Float32()*2 - 1
		}
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
		h := fnv.New64a()
		h.Write(ring.AsBytes(buf))
		mine := []int64{int64(h.Sum64())}
		all := make([]int64, g.Size())
		if err := comm.AllGather(ctx, g, mine, all); err != nil {
			return err
		}
		for r, v := range all {
			if v != all[0] {
				return fmt.Errorf("AllReduce of %d random floats: rank %d's result differs from rank 0's", count, r)
			}
		}
	}
	return nil
}

// pointToPoint passes messages around the ring with tags, asynchronously,
// several in flight.
func pointToPoint(ctx context.Context, g *comm.Group) error {
	n, r := g.Size(), g.Rank()
	if n == 1 {
		return nil
	}
	right, left := (r+1)%n, (r-1+n)%n
	for _, count := range []int{0, 5, 1<<20 + 3} {
		var works []*comm.Work
		recvs := make([][]float32, 3)
		for tag := range 3 {
			recvs[tag] = make([]float32, count)
			works = append(works, g.RecvAsync(ctx, recvs[tag], left, tag))
		}
		for tag := 2; tag >= 0; tag-- {
			send := make([]float32, count)
			for i := range send {
				send[i] = float32(r*1000 + tag*10 + i%7)
			}
			works = append(works, g.SendAsync(ctx, send, right, tag))
		}
		for _, w := range works {
			if err := w.Wait(); err != nil {
				return err
			}
		}
		for tag, buf := range recvs {
			for i, v := range buf {
				if want := float32(left*1000 + tag*10 + i%7); v != want {
					return fmt.Errorf("Recv tag %d of %d floats from %d: element %d is %v, want %v", tag, count, left, i, v, want)
				}
			}
		}
	}
	return nil
}

// split makes even and odd sub-groups, ordered by descending rank, and
// all-reduces in each, concurrently with nothing else.
func split(ctx context.Context, g *comm.Group) error {
	sub, err := g.Split(ctx, g.Rank()%2, -g.Rank())
	if err != nil {
		return err
	}
	defer sub.Close()
	var members []int
	for r := g.Size() - 1; r >= 0; r-- {
		if r%2 == g.Rank()%2 {
			members = append(members, r)
		}
	}
	if sub.Size() != len(members) || members[sub.Rank()] != g.Rank() {
		return fmt.Errorf("Split: rank %d of %d in the sub-group, want rank %d of %d", sub.Rank(), sub.Size(), slices.Index(members, g.Rank()), len(members))
	}
	buf := []int64{int64(g.Rank()), 1}
	if err := comm.AllReduce(ctx, sub, buf, comm.Sum); err != nil {
		return err
	}
	var want int64
	for _, m := range members {
		want += int64(m)
	}
	if buf[0] != want || buf[1] != int64(len(members)) {
		return fmt.Errorf("AllReduce in the sub-group gave %v, want [%d %d]", buf, want, len(members))
	}
	// The world group still works after the split.
	return g.Barrier(ctx)
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// earlyScenario: the last rank makes one all-reduce fewer than the others
// and closes its group; the others must fail fast, naming it and the calls.
func earlyScenario(ctx context.Context, g *comm.Group) error {
	calls := 14
	if g.Rank() == g.Size()-1 {
		calls = 13
	}
	buf := make([]float64, 103)
	start := time.Now()
	for range calls {
		if err := comm.AllReduce(ctx, g, buf, comm.Sum); err != nil {
			return fmt.Errorf("after %d ms: %w", time.Since(start).Milliseconds(), err)
		}
	}
	if g.Rank() == g.Size()-1 {
		return g.Close()
	}
	return errors.New("the extra all-reduce succeeded")
}

// closeSubScenario: rank 0 starts an asynchronous send on a sub-group of
// more than a shared-memory ring holds, which blocks until rank 1 takes
// it, and closes the world while it does (never waiting for the send, nor
// closing the sub-group), as a pipeline stage whose run failed does. Rank
// 1 receives it after CLOSE_SUB_DRAIN; or, with CLOSE_SUB_KILL set, kills
// itself then, and rank 0 closes the moment a receive from it fails.
// Close must wait for the send, not unmap the ring under it.
func closeSubScenario(ctx context.Context, g *comm.Group) error {
	sub, err := g.Split(ctx, 0, g.Rank())
	if err != nil {
		return err
	}
	drain, _ := time.ParseDuration(os.Getenv("CLOSE_SUB_DRAIN"))
	kill := os.Getenv("CLOSE_SUB_KILL") != ""
	buf := make([]float32, 8<<20) // 32 MiB: four rings' worth
	if g.Rank() == 1 {
		time.Sleep(drain)
		if kill {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if err := sub.Recv(ctx, buf, 0, 5); err != nil {
			return err
		}
		if buf[len(buf)-1] != 7 {
			return fmt.Errorf("received %v at the end", buf[len(buf)-1])
		}
		return nil
	}
	buf[len(buf)-1] = 7
	w := sub.SendAsync(ctx, buf, 1, 5)
	comm.SetHook(g, func(point string) {
		if point != "unmapping" {
			return
		}
		select {
		case <-w.Done():
			fmt.Println("SEND-DONE-BEFORE-UNMAP")
		default:
			fmt.Println("SEND-RUNNING-AT-UNMAP")
		}
	})
	if kill {
		err = g.Recv(ctx, make([]float32, 1), 1, 6) // fails when rank 1 dies
		fmt.Printf("RECV-FAILED %v\n", err)
	} else {
		time.Sleep(100 * time.Millisecond) // the send is waiting for room
	}
	start := time.Now()
	cerr := g.Close()
	fmt.Printf("CLOSED after %.1f s: %v\n", time.Since(start).Seconds(), cerr)
	if kill {
		return nil
	}
	return cerr
}

// shrinkScenario runs all-reduces, checking each against the sum over the
// ranks that remain; rank SHRINK_VICTIM kills itself before step 3. A rank
// whose call fails shrinks the group and goes on with the others from the
// furthest step any of them finished. SHRINK_DIE=rank:point kills that
// rank at a point of Shrink; SHRINK_SLOW=rank:duration makes that rank
// wait so long before it shrinks; SHRINK_STOP=rank:duration makes it stop
// itself (SIGSTOP, as a hung host) so long instead, answering nothing.
func shrinkScenario(ctx context.Context, g *comm.Group) error {
	victim, _ := strconv.Atoi(os.Getenv("SHRINK_VICTIM"))
	orig := g.Rank()
	if r, point, ok := strings.Cut(os.Getenv("SHRINK_DIE"), ":"); ok && r == strconv.Itoa(orig) {
		comm.SetHook(g, func(p string) {
			if p == point {
				fmt.Printf("DYING at %s\n", p)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		})
	}
	var slow time.Duration
	if r, d, ok := strings.Cut(os.Getenv("SHRINK_SLOW"), ":"); ok && r == strconv.Itoa(orig) {
		slow, _ = time.ParseDuration(d)
	}
	var stop time.Duration
	if r, d, ok := strings.Cut(os.Getenv("SHRINK_STOP"), ":"); ok && r == strconv.Itoa(orig) {
		stop, _ = time.ParseDuration(d)
	}
	ids := make([]int, g.Size()) // the original ranks of the group's members
	for i := range ids {
		ids[i] = i
	}
	buf := make([]float32, 1000)
	for step := 0; step < 12; {
		if orig == victim && step == 3 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		for i := range buf {
			buf[i] = float32((orig + 1) * (i%7 + 1))
		}
		err := g.AllReduce(ctx, buf, comm.Sum)
		if err == nil {
			sum := 0
			for _, id := range ids {
				sum += id + 1
			}
			for i, v := range buf {
				if v != float32(sum*(i%7+1)) {
					return fmt.Errorf("step %d on ranks %v: element %d = %v, want %v", step, ids, i, v, sum*(i%7+1))
				}
			}
			step++
			continue
		}
		fmt.Printf("FAILED at step %d: %v\n", step, err)
		time.Sleep(slow)
		if stop > 0 {
			wake := exec.Command("sh", "-c", fmt.Sprintf("sleep %g; kill -CONT %d", stop.Seconds(), os.Getpid()))
			if err := wake.Start(); err != nil {
				return err
			}
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			wake.Wait()
		}
		t0 := time.Now()
		shrunk, err := g.Shrink(ctx)
		if err != nil {
			return err
		}
		defer shrunk.Close()
		from := shrunk.ShrunkFrom()
		kept := make([]int, len(from))
		for i, r := range from {
			kept[i] = ids[r]
		}
		ids, g = kept, shrunk
		furthest := []float32{float32(step)}
		if err := g.AllReduce(ctx, furthest, comm.Max); err != nil {
			return err
		}
		fmt.Printf("SHRUNK to %v: rank %d of %d after %v; going on from step %v\n", ids, g.Rank(), g.Size(), time.Since(t0).Round(time.Millisecond), furthest[0])
		step = int(furthest[0])
	}
	return nil
}

// partitionScenario runs all-reduces, 50 ms apart, printing STEP n, until
// one fails (the test cuts the network between the hosts); then it
// shrinks the group. A rank left in a minority prints MINORITY and its
// error; the others print SHRUNK to the members (by original rank), check
// three all-reduces against the sum over them, and finish.
func partitionScenario(ctx context.Context, g *comm.Group) error {
	orig := g.Rank()
	buf := make([]float32, 1000)
	for step := 0; ; step++ {
		if step == 2000 {
			return errors.New("the network was never cut")
		}
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			fmt.Printf("FAILED at step %d: %v\n", step, err)
			break
		}
		fmt.Printf("STEP %d\n", step)
		time.Sleep(50 * time.Millisecond)
	}
	t0 := time.Now()
	shrunk, err := g.Shrink(ctx)
	if errors.Is(err, comm.ErrMinority) {
		fmt.Printf("MINORITY after %v: %v\n", time.Since(t0).Round(time.Second), err)
		return nil
	}
	if err != nil {
		return err
	}
	defer shrunk.Close()
	ids := shrunk.ShrunkFrom()
	fmt.Printf("SHRUNK to %v after %v\n", ids, time.Since(t0).Round(time.Second))
	sum := 0
	for _, id := range ids {
		sum += id + 1
	}
	for range 3 {
		for i := range buf {
			buf[i] = float32(orig + 1)
		}
		if err := shrunk.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
		if buf[0] != float32(sum) {
			return fmt.Errorf("after shrinking to %v: sum %v, want %d", ids, buf[0], sum)
		}
	}
	return nil
}

// stallScenario: rank 2 computes (sleeps) STALL_SLEEP before its third
// all-reduce while the others wait in it; with STALL_SOCKETS=1 each rank
// then prints how many sockets it holds.
func stallScenario(ctx context.Context, g *comm.Group) error {
	pause, err := time.ParseDuration(os.Getenv("STALL_SLEEP"))
	if err != nil {
		return err
	}
	buf := make([]float32, 1000)
	for i := range 4 {
		if i == 2 && g.Rank() == 2 {
			time.Sleep(pause)
		}
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
	}
	if os.Getenv("STALL_SOCKETS") == "1" {
		return printSockets()
	}
	return nil
}

// stoppedZeroScenario: rank 1 stops rank 0's process (SIGSTOP) before
// the third of four all-reduces and lets it go on (SIGCONT) STALL_SLEEP
// later, so that while the others wait rank 0 answers nobody.
func stoppedZeroScenario(ctx context.Context, g *comm.Group) error {
	pause, err := time.ParseDuration(os.Getenv("STALL_SLEEP"))
	if err != nil {
		return err
	}
	pids := make([]int64, g.Size())
	pids[g.Rank()] = int64(os.Getpid())
	if err := comm.AllReduce(ctx, g, pids, comm.Sum); err != nil {
		return err
	}
	buf := make([]float32, 1000)
	for i := range 4 {
		if i == 2 && g.Rank() == 1 {
			if err := syscall.Kill(int(pids[0]), syscall.SIGSTOP); err != nil {
				return err
			}
			time.AfterFunc(pause, func() { syscall.Kill(int(pids[0]), syscall.SIGCONT) })
		}
		if err := g.AllReduce(ctx, buf, comm.Sum); err != nil {
			return err
		}
	}
	return nil
}

// socketsScenario runs an all-reduce of each algorithm's size and a
// barrier, then prints how many sockets this rank holds open.
func socketsScenario(ctx context.Context, g *comm.Group) error {
	for _, n := range []int{1, 1 << 18, 4 << 20} {
		if err := g.AllReduce(ctx, make([]float32, n), comm.Sum); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := printSockets(); err != nil {
		return err
	}
	return g.Barrier(ctx)
}

// printSockets prints how many sockets this process holds open.
func printSockets() error {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	sockets := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			sockets++
		}
	}
	fmt.Printf("SOCKETS %d\n", sockets)
	return nil
}

// largeAllGathers runs all-gathers of blocks of 120 KB and 1.2 MB (one
// frame, and a 1 MiB chunk and a rest), from a send buffer of their own
// and in place (send is this rank's block of recv, as torch's
// all_gather_into_tensor lets FSDP pass it), against the reference.
func largeAllGathers(ctx context.Context, g *comm.Group) error {
	n, r := g.Size(), g.Rank()
	for _, count := range []int{30_000, 300_000} {
		for _, inPlace := range []bool{false, true} {
			recv := make([]float32, n*count)
			send := make([]float32, count)
			if inPlace {
				send = recv[r*count : (r+1)*count]
			}
			mine := values[float32](r, comm.Sum)
			for i := range send {
				send[i] = mine.at(i)
			}
			if err := g.AllGather(ctx, send, recv); err != nil {
				return err
			}
			for q := range n {
				theirs := values[float32](q, comm.Sum)
				for i, v := range recv[q*count : (q+1)*count] {
					if want := theirs.at(i); v != want {
						return fmt.Errorf("AllGather of %d floats a rank (in place: %v): block %d element %d is %v, want %v", count, inPlace, q, i, v, want)
					}
				}
			}
		}
	}
	return nil
}

// largeBroadcasts broadcasts 120 KB (a binomial tree) and 400 KB (a chain
// of one chunk) from ranks 0 and n−1: sizes whose frames go direct
// through shared memory.
func largeBroadcasts(ctx context.Context, g *comm.Group) error {
	n, r := g.Size(), g.Rank()
	for _, count := range []int{30_000, 100_000} {
		for _, root := range []int{0, n - 1} {
			buf := make([]float32, count)
			mine, sent := values[float32](r, comm.Sum), values[float32](root, comm.Sum)
			for i := range buf {
				buf[i] = mine.at(i)
			}
			if err := g.Broadcast(ctx, buf, root); err != nil {
				return err
			}
			for i, v := range buf {
				if want := sent.at(i); v != want {
					return fmt.Errorf("Broadcast of %d floats from %d: element %d is %v, want %v", count, root, i, v, want)
				}
			}
		}
	}
	return nil
}

// disagreeScenario makes calls the ranks disagree on where no frame
// between the disagreeing ranks shows it (DISAGREE): "kind", rank 0
// gathers while the others scatter; "root", a Reduce to root 0 on ranks 0
// and 2 and to root 1 on rank 1 (rank 2, a leaf of root 0, finishes its
// call and waits in a Barrier); "subgroup", the world split
// into ranks 0, 2 and 1, 3: in the first rank 0 gathers while rank 2
// scatters, the second gathers and goes on to a Barrier of the world.
// Only a stall report can tell; the job must end with every rank naming
// both calls, not wait out GORUN_TIMEOUT. "siblings" is the control, with
// no disagreement: the same split, ranks 0 and 2 all-reducing, ranks 1
// and 3 gathering (rank 3 2 s late, so that rank 1 reports a stall); it
// must succeed.
func disagreeScenario(ctx context.Context, g *comm.Group) error {
	r := g.Rank()
	buf := make([]float32, 4*g.Size())
	var err error
	what := os.Getenv("DISAGREE")
	switch what {
	case "kind":
		if r == 0 {
			err = g.Gather(ctx, buf[:4], buf, 0)
		} else {
			err = g.Scatter(ctx, buf, buf[:4], 0)
		}
	case "root":
		err = g.Reduce(ctx, buf[:4], comm.Sum, r%2)
		if err == nil {
			err = g.Barrier(ctx)
		}
	case "subgroup", "siblings":
		// The world split into ranks 0, 2 and 1, 3, each with a buffer of
		// four elements a member; after its sub-group's call each rank
		// makes a Barrier of the world.
		var sub *comm.Group
		if sub, err = g.Split(ctx, r%2, r); err != nil {
			return err
		}
		buf := make([]float32, 4*sub.Size())
		switch {
		case what == "subgroup" && r == 2:
			err = sub.Scatter(ctx, buf, buf[:4], 0)
		case what == "siblings" && r%2 == 0:
			// No disagreement: the sibling groups (one id) make different
			// calls, each alike on its members.
			err = sub.AllReduce(ctx, buf, comm.Sum)
		default:
			if what == "siblings" && r == 3 {
				time.Sleep(2 * time.Second) // so that rank 1 reports a stall
			}
			err = sub.Gather(ctx, buf[:4], buf, 0)
		}
		if err == nil {
			err = g.Barrier(ctx)
		}
		if what == "siblings" {
			return err
		}
	default:
		return fmt.Errorf("DISAGREE=%q", what)
	}
	if err == nil {
		err = errors.New("calls the ranks disagree on succeeded")
	}
	return err
}
