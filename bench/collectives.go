package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/shm"
)

// Ops are the collectives the harness runs, in order.
var Ops = []string{"all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce", "gather", "scatter", "alltoall", "sendrecv"}

// Barrier is the one collective the harness runs only when asked
// (-ops barrier): it moves no data, so a row per size would repeat itself;
// its rows say 0 bytes.
const Barrier = "barrier"

// CheckOps fails unless every name in ops is a collective the harness
// runs (Ops, or Barrier), naming the first that is not.
func CheckOps(ops []string) error {
	for _, op := range ops {
		if op != Barrier && !slices.Contains(Ops, op) {
			return unknownOp(op)
		}
	}
	return nil
}

func unknownOp(op string) error {
	return fmt.Errorf("unknown collective %q (have %s, %s)", op, strings.Join(Ops, ", "), Barrier)
}

// Config says what to measure.
type Config struct {
	Ops   []string
	Sizes []int64 // bytes (of the whole buffer, as nccl-tests counts)
	// Warmup is how many untimed calls each size gets first, at least
	// enough to walk the shared-memory rings (WarmupCalls).
	Warmup int
	// WarmupTime is how long the job warms up before the first size
	// (small all-reduces): freshly started processes run their first
	// thousands of calls slower, which the first size measured would
	// otherwise pay for (small all-reduces through shared memory measured
	// first took about twice as long as after 20,000 warm-up calls).
	WarmupTime time.Duration
	// Iters is how many timed calls each size gets; 0 or less picks them
	// per size with Iterations, as the competitor helpers do. When set,
	// a size gets no more untimed calls than max(Warmup, Iters).
	Iters int
	// Break makes the named collective compute the wrong thing (Max
	// instead of Sum), so tests can see #wrong count it.
	Break string
}

// Result is one line of the table.
type Result struct {
	Op      string  `json:"op"`
	NP      int     `json:"np"`
	Bytes   int64   `json:"bytes"`
	Count   int     `json:"count"`
	Type    string  `json:"type"`
	RedOp   string  `json:"redop"`
	Root    int     `json:"root"`
	TimeUS  float64 `json:"time_us"`
	AlgBW   float64 `json:"algbw_gbs"`
	BusBW   float64 `json:"busbw_gbs"`
	Wrong   int64   `json:"wrong"`
	Variant string  `json:"variant,omitempty"`
}

// BusFactor is nccl-tests' bus bandwidth factor for op on n ranks: the
// bandwidth each link must carry relative to the algorithm bandwidth.
func BusFactor(op string, n int) float64 {
	f := float64(n)
	switch op {
	case "all_reduce":
		return 2 * (f - 1) / f
	case "all_gather", "reduce_scatter", "gather", "scatter", "alltoall":
		return (f - 1) / f
	}
	return 1 // broadcast, reduce, sendrecv
}

// Bandwidths returns the algorithm bandwidth (bytes/time) and the bus
// bandwidth in GB/s for a measured time.
func Bandwidths(op string, n int, bytes int64, t time.Duration) (algbw, busbw float64) {
	algbw = float64(bytes) / t.Seconds() / 1e9
	return algbw, algbw * BusFactor(op, n)
}

// Iterations is how many timed calls a message of the given size gets when
// the caller does not say: enough for about 200 MB to move (counting at
// least 1 KiB a call), at least 20 and at most 20,000. It is the rule of the
// Open MPI helper (bench/competitors/mpi_allreduce.c), so the two sides of
// a comparison average over the same number of calls: a run of 100 small
// calls lasts a few milliseconds and one descheduling doubles its mean.
func Iterations(bytes int64) int {
	return int(min(max(200_000_000/max(bytes, 1024), 20), 20_000))
}

// ParseSizes reads "8B:256MB" (doubling from the first to the last) or a
// comma-separated list ("1KB,1MB,64MB"). Units: B, KB, MB, GB (powers of
// 1024).
func ParseSizes(s string) ([]int64, error) {
	if lo, hi, ok := strings.Cut(s, ":"); ok {
		a, err := parseSize(lo)
		if err != nil {
			return nil, err
		}
		b, err := parseSize(hi)
		if err != nil {
			return nil, err
		}
		if a < 4 || b < a {
			return nil, fmt.Errorf("size range %q: want 4B ≤ first ≤ last", s)
		}
		var out []int64
		for v := a; v <= b; v *= 2 {
			out = append(out, v)
		}
		return out, nil
	}
	var out []int64
	for _, part := range strings.Split(s, ",") {
		v, err := parseSize(part)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// maxSize bounds a message size: every rank holds a few buffers of it.
const maxSize = 64 << 30

func parseSize(in string) (int64, error) {
	s := strings.ToUpper(strings.TrimSpace(in))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-"), err == nil && v > maxSize/mult:
		return 0, fmt.Errorf("size %q: at most 64GB", in)
	case err != nil || v <= 0:
		return 0, fmt.Errorf("size %q: want a positive whole number with B, KB, MB or GB", in)
	case v*mult%4 != 0:
		return 0, fmt.Errorf("size %q: want a multiple of 4 bytes (the collectives move float32 elements)", in)
	}
	return v * mult, nil
}

// value is element i of rank r's input: small integers, so every sum is
// exact in float32 and a wrong result cannot hide in rounding.
func value(r, i int) float32 { return float32(r + 1 + i%7) }

// Run measures cfg on g (every rank calls it) and returns, on every rank,
// the results: times are the slowest rank's mean per iteration, #wrong the
// wrong elements summed over ranks.
func Run(ctx context.Context, g *comm.Group, cfg Config) ([]Result, error) {
	n, r := g.Size(), g.Rank()
	if err := warmUp(ctx, g, cfg.WarmupTime); err != nil {
		return nil, fmt.Errorf("bench: warming up on rank %d of %d: %w", r, n, err)
	}
	var out []Result
	for _, op := range cfg.Ops {
		for _, bytes := range cfg.Sizes {
			res, err := runOne(ctx, g, cfg, op, bytes)
			if err != nil {
				return nil, fmt.Errorf("bench: %s of %d bytes on rank %d of %d: %w", op, bytes, r, n, err)
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// warmUp runs 8-byte all-reduces for at least d by rank 0's clock. Each
// call carries rank 0's verdict, so every rank makes the same calls.
func warmUp(ctx context.Context, g *comm.Group, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	start := time.Now()
	flag := []float32{0, 0}
	for {
		flag[0] = 0
		if g.Rank() == 0 && time.Since(start) >= d {
			flag[0] = 1
		}
		if err := g.AllReduce(ctx, flag, comm.Max); err != nil {
			return err
		}
		if flag[0] != 0 {
			return nil
		}
	}
}

func runOne(ctx context.Context, g *comm.Group, cfg Config, op string, bytes int64) (Result, error) {
	n, r := g.Size(), g.Rank()
	count := int(bytes / 4) // elements of the whole buffer
	res := Result{Op: op, NP: n, Type: "float", RedOp: "none", Root: -1}
	var send, recv []float32
	reduce := comm.Sum
	if cfg.Break == op {
		reduce = comm.Max
	}
	switch op {
	case "all_reduce":
		res.RedOp = "sum"
		send = make([]float32, count)
	case "broadcast":
		res.Root = 0
		send = make([]float32, count)
	case "all_gather":
		count = max(count-count%n, n) // whole blocks, at least one element each
		send, recv = make([]float32, count/n), make([]float32, count)
	case "reduce_scatter":
		res.RedOp = "sum"
		count = max(count-count%n, n)
		send, recv = make([]float32, count), make([]float32, count/n)
	case "reduce":
		res.RedOp, res.Root = "sum", 0
		send = make([]float32, count)
	case "gather": // count: the gathered buffer on the root
		res.Root = 0
		count = max(count-count%n, n)
		send, recv = make([]float32, count/n), make([]float32, count)
	case "scatter": // count: the root's buffer
		res.Root = 0
		count = max(count-count%n, n)
		send, recv = make([]float32, count), make([]float32, count/n)
	case "alltoall": // count: each rank's send buffer
		count = max(count-count%n, n)
		send, recv = make([]float32, count), make([]float32, count)
	case "sendrecv":
		send, recv = make([]float32, count), make([]float32, count)
	case Barrier:
		count = 0
	default:
		return res, unknownOp(op)
	}
	if count < 1 && op != Barrier {
		return res, fmt.Errorf("%d bytes is less than one element", bytes)
	}
	if op == "sendrecv" && n < 2 {
		return res, fmt.Errorf("sendrecv needs at least 2 ranks")
	}
	res.Count, res.Bytes = count, int64(count)*4
	fill := func() {
		for i := range send {
			send[i] = value(r, i)
		}
	}
	call := func() error {
		switch op {
		case "all_reduce":
			return g.AllReduce(ctx, send, reduce)
		case "broadcast":
			return g.Broadcast(ctx, send, 0)
		case "all_gather":
			return g.AllGather(ctx, send, recv)
		case "reduce_scatter":
			return g.ReduceScatter(ctx, send, recv, reduce)
		case "reduce":
			return g.Reduce(ctx, send, reduce, 0)
		case "gather":
			return g.Gather(ctx, send, recv, 0)
		case "scatter":
			return g.Scatter(ctx, send, recv, 0)
		case "alltoall":
			return g.AllToAll(ctx, send, recv)
		case Barrier:
			return g.Barrier(ctx)
		default: // ring of pairs: send to the next rank, receive from the previous
			next, prev := (r+1)%n, (r+n-1)%n
			w := g.RecvAsync(ctx, recv, prev, 0)
			if err := g.Send(ctx, send, next, 0); err != nil {
				return err
			}
			return w.Wait()
		}
	}
	// Correctness: one checked call on fresh inputs (the scatter's root
	// sends the blocks a gather of value(q, i) would have made).
	fill()
	if op == "scatter" {
		for i := range send {
			send[i] = value(i/len(recv), i%len(recv))
		}
	}
	if err := call(); err != nil {
		return res, err
	}
	wrong := []int64{check(op, send, recv, r, n)}
	iters, warm := cfg.Iters, WarmupCalls(cfg.Warmup, bytes, n)
	if iters > 0 {
		warm = min(warm, max(cfg.Warmup, iters)) // a short run asked for: warm up no longer than it
	} else {
		iters = Iterations(bytes)
	}
	for range warm {
		if err := call(); err != nil {
			return res, err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return res, err
	}
	t0 := time.Now()
	for range iters {
		if err := call(); err != nil {
			return res, err
		}
	}
	per := []float64{time.Since(t0).Seconds() / float64(iters)}
	if err := comm.AllReduce(ctx, g, per, comm.Max); err != nil {
		return res, err
	}
	if err := comm.AllReduce(ctx, g, wrong, comm.Sum); err != nil {
		return res, err
	}
	t := time.Duration(per[0] * float64(time.Second))
	res.TimeUS = per[0] * 1e6
	res.AlgBW, res.BusBW = Bandwidths(op, n, res.Bytes, t)
	res.Wrong = wrong[0]
	return res, nil
}

// A size's untimed calls send each peer at least warmLaps laps of the
// largest shared-memory ring (ringBytes; a record takes a page at least),
// and at most maxWarmCalls calls. Rings of more than 2 local ranks are not
// prefaulted (shm), so their pages fault on first use, and the first laps
// over a ring cost far more than the later ones: with 16 untimed calls
// (the rule before), 200 timed 1 MiB all-to-alls of 4 ranks took 1.9–2.5
// ms a call, the next 200 in the same job 0.2; with 256 untimed calls
// (8 laps) the first 200 took 0.21; 64 KiB reduces 77 µs against 17 after
// 1,024 untimed calls (bench/results/HISTORY.md).
const (
	ringBytes    = shm.DefaultSlots * shm.DefaultSlotBytes // the largest ring (8 MiB)
	warmLaps     = 8
	maxWarmCalls = 1024
	pageBytes    = 4096 // the shared-memory records' alignment
)

// WarmupCalls is how many untimed calls a size of bytes among n ranks gets
// when warmup are asked for.
func WarmupCalls(warmup int, bytes int64, n int) int {
	perPeer := max(bytes/int64(max(n, 1)), pageBytes)
	calls := min((warmLaps*ringBytes+perPeer-1)/perPeer, maxWarmCalls)
	return max(warmup, int(calls))
}

// check counts the elements of this rank's result that differ from the
// definition of op.
func check(op string, send, recv []float32, r, n int) int64 {
	var wrong int64
	expect := func(got, want float32) {
		if got != want || math.IsNaN(float64(got)) {
			wrong++
		}
	}
	switch op {
	case "all_reduce", "reduce":
		if op == "reduce" && r != 0 {
			break // defined on the root only
		}
		for i, v := range send {
			var want float32
			for q := range n {
				want += value(q, i)
			}
			expect(v, want)
		}
	case "broadcast":
		for i, v := range send {
			expect(v, value(0, i))
		}
	case "all_gather":
		per := len(send)
		for q := range n {
			for i := range per {
				expect(recv[q*per+i], value(q, i))
			}
		}
	case "reduce_scatter":
		per := len(recv)
		for i, v := range recv {
			var want float32
			for q := range n {
				want += value(q, r*per+i)
			}
			expect(v, want)
		}
	case "gather":
		if r != 0 {
			break
		}
		per := len(send)
		for q := range n {
			for i := range per {
				expect(recv[q*per+i], value(q, i))
			}
		}
	case "scatter":
		for i, v := range recv {
			expect(v, value(r, i))
		}
	case "alltoall":
		// Block p of rank q's send holds value(q, p·per + i); rank r's
		// block q is rank q's block r.
		per := len(recv) / n
		for q := range n {
			for i := range per {
				expect(recv[q*per+i], value(q, r*per+i))
			}
		}
	case "sendrecv":
		prev := (r + n - 1) % n
		for i, v := range recv {
			expect(v, value(prev, i))
		}
	}
	return wrong
}
