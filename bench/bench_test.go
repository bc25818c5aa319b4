package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
)

func TestParseSizes(t *testing.T) {
	cases := []struct {
		in   string
		want []int64
	}{
		{"8B:64B", []int64{8, 16, 32, 64}},
		{"1KB,1MB", []int64{1024, 1 << 20}},
		{"4:4", []int64{4}},
		{"2G", []int64{2 << 30}},
	}
	for _, c := range cases {
		got, err := ParseSizes(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseSizes(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []struct{ in, err string }{
		{"", `size "": want a positive whole number`},
		{"x", `size "x": want a positive whole number`},
		{"1.5KB", `size "1.5KB": want a positive whole number`},
		{"8B,,16B", `size "": want a positive whole number`},
		{"64B:8B", `size range "64B:8B": want 4B ≤ first ≤ last`},
		{"-1KB", `size "-1KB": want a positive whole number`},
		{"2B:8B", `size "2B": want a multiple of 4 bytes`},
		{"3B", `size "3B": want a multiple of 4 bytes`},
		{"6B", `size "6B": want a multiple of 4 bytes`},
		{"65GB", `size "65GB": at most 64GB`},
		{"99999999999GB", `size "99999999999GB": at most 64GB`},
		{"99999999999999999999", `size "99999999999999999999": at most 64GB`},
		{"-99999999999999999999", `size "-99999999999999999999": want a positive whole number`},
	} {
		if _, err := ParseSizes(bad.in); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("ParseSizes(%q): error %v, want one saying %q", bad.in, err, bad.err)
		}
	}
}

// TestBandwidths checks the nccl-tests arithmetic on known inputs: 1 GB in
// one second is 1 GB/s of algorithm bandwidth; the bus factors are
// 2(n−1)/n for all-reduce, (n−1)/n for all-gather and reduce-scatter, 1
// otherwise.
func TestBandwidths(t *testing.T) {
	cases := []struct {
		op    string
		n     int
		busbw float64
	}{{"all_reduce", 4, 1.5}, {"all_reduce", 2, 1}, {"all_gather", 4, 0.75}, {"reduce_scatter", 8, 0.875}, {"broadcast", 4, 1}, {"sendrecv", 2, 1}}
	for _, c := range cases {
		alg, bus := Bandwidths(c.op, c.n, 1e9, time.Second)
		if alg != 1 || bus != c.busbw {
			t.Errorf("%s n=%d: algbw %v busbw %v, want 1 and %v", c.op, c.n, alg, bus, c.busbw)
		}
	}
}

// TestIterations: the per-size call counts match the Open MPI helper's rule
// (mpi_allreduce.c): 2e8 bytes' worth counting at least 1 KiB a call,
// clamped to 20..20,000.
func TestIterations(t *testing.T) {
	cases := []struct {
		bytes int64
		want  int
	}{{8, 20_000}, {1024, 20_000}, {4096, 20_000}, {65536, 3051}, {1 << 20, 190}, {16 << 20, 20}, {64 << 20, 20}}
	for _, c := range cases {
		if got := Iterations(c.bytes); got != c.want {
			t.Errorf("Iterations(%d) = %d, want %d", c.bytes, got, c.want)
		}
	}
}

// runAll runs cfg on every rank and returns rank 0's results.
func runAll(t *testing.T, gs []*comm.Group, cfg Config) []Result {
	t.Helper()
	res := make([][]Result, len(gs))
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		var err error
		res[g.Rank()], err = Run(context.Background(), g, cfg)
		return err
	})
	return res[0]
}

// TestHarness runs every collective (the barrier too) on 3 ranks at tiny
// sizes: all results correct, the table has one line per size in
// nccl-tests' columns, and a planted broken reduction is counted in
// #wrong.
func TestHarness(t *testing.T) {
	gs := commtest.Groups(t, 3)
	ops := append(slices.Clone(Ops), Barrier)
	cfg := Config{Ops: ops, Sizes: []int64{24, 96, 4 << 10}, Warmup: 1, WarmupTime: 10 * time.Millisecond, Iters: 2}
	res := runAll(t, gs, cfg)
	if len(res) != len(ops)*len(cfg.Sizes) {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		if r.Wrong != 0 || r.TimeUS <= 0 || r.NP != 3 || r.Bytes != int64(r.Count)*4 {
			t.Fatalf("result %+v", r)
		}
		if want := r.AlgBW * BusFactor(r.Op, 3); r.BusBW != want {
			t.Fatalf("%s: busbw %v, want algbw × factor = %v", r.Op, r.BusBW, want)
		}
	}
	var buf bytes.Buffer
	WriteTable(&buf, res)
	out := buf.String()
	if strings.Count(out, "# Collective test:") != len(ops) || strings.Count(out, "# Avg bus bandwidth") != len(ops) ||
		!strings.Contains(out, "#wrong") || !strings.Contains(out, "(GB/s)") {
		t.Fatalf("table:\n%s", out)
	}
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			if f := strings.Fields(l); len(f) != 9 {
				t.Fatalf("row %q has %d columns, want 9", l, len(f))
			}
			lines++
		}
	}
	if lines != len(res) {
		t.Fatalf("%d rows for %d results", lines, len(res))
	}
	buf.Reset()
	if err := WriteCSV(&buf, res); err != nil || strings.Count(buf.String(), "\n") != len(res)+1 {
		t.Fatalf("CSV: %v\n%s", err, buf.String())
	}

	broken := runAll(t, gs, Config{Ops: []string{"all_reduce", "reduce_scatter"}, Sizes: []int64{96}, Iters: 1, Break: "all_reduce"})
	if broken[0].Wrong == 0 || broken[1].Wrong != 0 {
		t.Fatalf("a Max instead of Sum all-reduce should be counted wrong: %+v", broken)
	}
}

func TestParseCompetitor(t *testing.T) {
	in := "noise\ngloo np=2 bytes=8 us=180.5\nmpi np=4 bytes=1048576 us=1297.9\nmpi op=alltoall np=2 bytes=64 us=12.5\n"
	got := parseCompetitor(strings.NewReader(in))
	want := []Competitor{{"gloo", "all_reduce", 2, 8, 180.5}, {"mpi", "all_reduce", 4, 1048576, 1297.9}, {"mpi", "alltoall", 2, 64, 12.5}}
	if !slices.Equal(got, want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	var buf bytes.Buffer
	got = append(got, Competitor{"mpi-shm", "all_reduce", 2, 8, 45.125})
	ours := []Result{{Op: "all_reduce", NP: 2, Bytes: 8, TimeUS: 90.25}, {Op: "alltoall", NP: 2, Bytes: 64, TimeUS: 25}, {Op: "alltoall", NP: 2, Bytes: 8, TimeUS: 1}}
	WriteComparison(&buf, ours, got[:2], "")
	WriteComparison(&buf, ours, got[2:], "")
	out := buf.String()
	if !strings.Contains(out, "# all_reduce against") || !strings.Contains(out, "90.25     180.50   2.00x") || !strings.Contains(out, "45.12   0.50x") {
		t.Fatalf("comparison:\n%s", out)
	}
	// The alltoall table compares like with like: the competitor's 64
	// bytes against gorun's 64 (half the speed), nothing against 8.
	if !strings.Contains(out, "# alltoall against") || !strings.Contains(out, "64      25.00          -       -") || !strings.Contains(out, "8       1.00          -       -          -       -          -       -") {
		t.Fatalf("alltoall comparison:\n%s", out)
	}
}

// TestWarmupCalls: a size gets enough untimed calls to send each peer
// warmLaps laps of an 8 MiB ring (a page at least per call), at most
// maxWarmCalls, and never fewer than asked for.
func TestWarmupCalls(t *testing.T) {
	for _, c := range []struct {
		warmup int
		bytes  int64
		n      int
		want   int
	}{
		{5, 8, 2, maxWarmCalls},        // a page a call: 16,384 calls, capped
		{5, 1 << 20, 4, 256},           // 256 KiB to each peer a call
		{5, 1 << 20, 2, 128},           // 512 KiB
		{300, 1 << 20, 2, 300},         // more asked for
		{5, 64 << 20, 4, 5},            // 16 MiB a peer: 4 calls walk 8 laps
		{0, 256 << 20, 1, 1},           // one rank: 64 MiB in one call
		{5, 64 << 10, 4, maxWarmCalls}, // 16 KiB a peer: 4,096 calls, capped
		{5, 16 << 20, 16, 64},          // 1 MiB a peer
		{5, 3 << 20, 2, 43},            // 1.5 MiB a peer: 42.7 rounded up
	} {
		if got := WarmupCalls(c.warmup, c.bytes, c.n); got != c.want {
			t.Errorf("WarmupCalls(%d, %d, %d) = %d, want %d", c.warmup, c.bytes, c.n, got, c.want)
		}
	}
}
