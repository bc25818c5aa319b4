// Command bench is gorun's benchmark harness.
//
//	bench collectives [-np 2,4] [-sizes 8B:64MB] [-ops all_reduce,...] [-variants default,ring,small,s2] [-csv F] [-json F]
//	bench train [-np 1,2,4] [-model mnist] [-samples 12800]
//	bench data -data DIR [-workers 1] [-images 2048] [-batch 32] [-size 224] [-eval] [-json]
//	bench cluster -hosts 3 -np 2 [-rate 10gbit] [-delay 25us] [-loss 0.001] -- PROGRAM [ARGS]
//	bench model [-ranks 8,16,...,1024] [-sizes 1MB,25MB] [-per-node 8] [-efficiency 0.92] ...
//
// collectives starts the ranks itself (as gorun does) for each world size
// and variant and prints nccl-tests-style tables: size, count, type,
// redop, root, time, algorithm and bus bandwidth, and #wrong (elements
// that differ from the definition), then a summary of bus bandwidth by
// size. train runs the same training work on each world size, one thread
// per rank, and prints run time, throughput and speed-up (seed 003's table).
// data measures the image pipeline on an image folder's training images:
// decoding, torchvision's RandomResizedCrop and flip (or evaluation's
// resize and center crop) and normalisation, in images per second
// (bench/competitors/torch_data.py measures torchvision's DataLoader).
// cluster runs a gorun job across hosts simulated on this machine:
// network namespaces on a bridge, links shaped with tc (bench/netcluster;
// root), gorun -nnodes on each; everything is removed afterwards, also
// after a failure or an interrupt. model prints the cost model's
// prediction of all-reduce times on 100 Gb InfiniBand and 25 GbE clusters
// up to 1024 ranks, flat ring against hierarchical, tree and recursive
// doubling, calibrated by gorun's own measurements (bench.Calibration).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/bench"
	"github.com/gorun/gorun/bench/netcluster"
	"github.com/gorun/gorun/cmd/internal/cli"
	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/launch"
	"github.com/gorun/gorun/train/data"
)

const workerEnv = "GORUN_BENCH_WORKER_OUT"

// variantNames lists the variants, sorted.
func variantNames() string {
	names := slices.Sorted(maps.Keys(variants))
	return strings.Join(names, ", ")
}

// variants are the algorithm settings compared side by side.
var variants = map[string][]string{
	"default":  nil,                                 // shared memory between ranks of one machine
	"tcp":      {"GORUN_TRANSPORT=tcp"},             // loopback TCP instead
	"rdma":     {"GORUN_TRANSPORT=rdma"},            // RDMA between every pair, where a device allows (else as default)
	"ring":     {"GORUN_SMALL_BYTES=-1"},            // ring algorithms at every size
	"small":    {"GORUN_SMALL_BYTES=1099511627776"}, // recursive doubling / trees at every size
	"s2":       {"GORUN_COMPRESS=s2"},               // S2 compression of payloads
	"bruck":    {"GORUN_BRUCK_BYTES=1099511627776"}, // Bruck's all-to-all at every block size (3 ranks or more)
	"pairwise": {"GORUN_BRUCK_BYTES=-1"},            // pairwise all-to-all at every size
}

func main() {
	os.Exit(cli.Status(os.Stderr, "bench", run(os.Args[1:], os.Stdout)))
}

// command is one of bench's commands.
type command struct {
	name     string
	synopsis string // after "bench NAME"
	about    string
	run      func(args []string, stdout io.Writer) error
}

// commands lists bench's commands in the order its usage shows them.
func commands() []command {
	return []command{
		{"collectives", "[-np 2,4] [-sizes 8B:64MB] [-ops all_reduce,...] [-variants default,tcp,...] [flags]",
			"Times every collective at each world size, message size and variant in nccl-tests'\nlayout, Open MPI's (mpirun) in the same run.", collectives},
		{"train", "[-np 1,2,4] [-model mnist|cifarnet] [flags]",
			"Runs the same training work at each world size: run time, throughput, speed-up;\nPyTorch DDP over gloo in the same run.", trainScaling},
		{"data", "-data DIR [-workers N] [-json] [flags]",
			"Measures the image pipeline on an image folder or its shards: decoding,\ntorchvision's crops and flip, normalisation.", dataPipeline},
		{"cluster", "[-hosts 3] [-np 2] [-rate 10gbit] [-delay 25us] [flags] -- PROGRAM [ARGS...]",
			"Runs a gorun job across hosts simulated on this machine: network namespaces on a\nbridge, links shaped with tc (root).", cluster},
		{"model", "[-ranks 8,16,...] [-sizes 1MB,25MB] [flags]",
			"Prints the cost model's all-reduce times on clusters of up to 1024 ranks,\ncalibrated by gorun's own measurements.", costModel},
	}
}

// usage is what bench -h prints.
func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: bench COMMAND [flags]\n\ngorun's benchmark harness. Commands:\n\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %s\n    \t%s\n", c.name, strings.ReplaceAll(c.about, "\n", "\n    \t"))
	}
	fmt.Fprintf(w, "\nbench COMMAND -h lists a command's flags.\n")
}

// flagSet is the flag set of bench's command name, its -h showing the
// command's synopsis and what it does.
func flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("bench "+name, flag.ContinueOnError)
	for _, c := range commands() {
		if c.name == name {
			cli.SetUsage(fs, "bench "+name+" "+c.synopsis, c.about)
		}
	}
	return fs
}

func run(args []string, stdout io.Writer) error {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	if len(args) == 0 {
		return fmt.Errorf("no command: want %s (bench -h says what each does)", cli.OrList(names))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return flag.ErrHelp
	case "-version", "--version":
		fmt.Fprintln(stdout, cli.VersionLine("bench"))
		return flag.ErrHelp
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if err := c.run(args[1:], stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			return nil
		}
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if near := cli.Nearest(names, args[0]); len(near) > 0 {
		msg += " (did you mean " + cli.OrList(near) + "?)"
	}
	return fmt.Errorf("%s: want %s (bench -h says what each does)", msg, cli.OrList(names))
}

func cluster(args []string, stdout io.Writer) error {
	fs := flagSet("cluster")
	hosts := fs.Int("hosts", 3, "hosts (network namespaces)")
	np := fs.Int("np", 2, "ranks per host")
	rate := fs.String("rate", "", "each host's link rate, as tc writes it (10gbit, 1gbit, 100mbit; default: unshaped)")
	delay := fs.Duration("delay", 0, "one-way delay added to each host's link (tc netem, or the user-space emulator where the kernel has no netem)")
	loss := fs.Float64("loss", 0, "fraction of packets dropped on each host's link (as -delay)")
	link := fs.String("link", "", "how links are made: tc (veths on a bridge shaped by tc), user (TUN devices and a link emulator in this process), or empty for tc where it can")
	mtu := fs.Int("mtu", 9000, "the emulated links' MTU (-link user)")
	gorun := fs.String("gorun", "bin/gorun", "the gorun binary")
	each := fs.Bool("each", false, "run PROGRAM once per host itself, not under gorun, with torchrun's variables for a host's agent (MASTER_ADDR, MASTER_PORT, GROUP_RANK, LOCAL_WORLD_SIZE = -np, WORLD_SIZE): for competitors such as gloo")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no program to run (bench cluster [flags] -- PROGRAM [ARGS])")
	}
	if *np < 1 {
		return fmt.Errorf("-np %d: want at least 1", *np)
	}
	exe, err := filepath.Abs(*gorun)
	if err != nil {
		return err
	}
	if _, err := os.Stat(exe); err != nil && !*each {
		return fmt.Errorf("-gorun %s: %w (go build -o bin/ ./cmd/gorun)", *gorun, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := netcluster.Start(ctx, netcluster.Config{Hosts: *hosts, Rate: *rate, Delay: *delay, Loss: *loss, Link: *link, MTU: *mtu})
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(stdout, "# %s; %d ranks per host\n", c.Describe(), *np)
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	// A host whose program fails stops the others, which would otherwise
	// wait for it (gloo's rendezvous, for half an hour).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	failed := false // a host's program has failed (under mu)
	errs := make([]error, *hosts)
	var wg sync.WaitGroup
	for h := range *hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := c.Command(ctx, h, exe, append([]string{"-nnodes", fmt.Sprint(*hosts), "-node-rank", fmt.Sprint(h),
				"-master", c.Addrs[0] + ":29519", "-np", fmt.Sprint(*np)}, fs.Args()...)...)
			cmd.Env = append(os.Environ(), "GORUN_TOKEN="+hex.EncodeToString(token))
			if *each {
				cmd = c.Command(ctx, h, fs.Arg(0), fs.Args()[1:]...)
				cmd.Env = append(os.Environ(), "MASTER_ADDR="+c.Addrs[0], "MASTER_PORT=29519", fmt.Sprintf("GROUP_RANK=%d", h),
					fmt.Sprintf("LOCAL_WORLD_SIZE=%d", *np), fmt.Sprintf("WORLD_SIZE=%d", *hosts**np))
			}
			// Stopping a host stops all it started (a shell's children too),
			// and does not wait for pipes a straggler keeps open.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			mu.Lock()
			defer mu.Unlock()
			stdout.Write(out)
			switch {
			case err == nil:
			case failed: // stopped for another host's failure
			case ctx.Err() != nil: // interrupted
				errs[h] = fmt.Errorf("host %d (%s): %w", h, c.Names[h], ctx.Err())
			default:
				failed = true
				errs[h] = fmt.Errorf("host %d (%s): %w", h, c.Names[h], err)
				if *hosts > 1 {
					errs[h] = fmt.Errorf("%w; the other hosts stopped", errs[h])
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func costModel(args []string, stdout io.Writer) error {
	c := bench.DefaultCalibration()
	fs := flagSet("model")
	ranks := fs.String("ranks", "8,16,32,64,128,256,512,1024", "rank counts")
	sizes := fs.String("sizes", "1MB,25MB", "all-reduce sizes (DDP's buckets: 1 MiB first, 25 MiB after)")
	perNode := fs.Int("per-node", 8, "ranks per host")
	fs.Float64Var(&c.Efficiency, "efficiency", c.Efficiency, "fraction of line rate large all-reduces reach (measured: 0.88–0.96)")
	fs.DurationVar(&c.TCPStep, "tcp-step", c.TCPStep, "software cost of one TCP message step (measured over loopback)")
	fs.DurationVar(&c.SHMStep, "shm-step", c.SHMStep, "one message step through shared memory (measured)")
	shmGBs := fs.Float64("shm-bw", c.SHMBandwidth/1e9, "shared memory's bus bandwidth within a host, GB/s (measured on the 2-core VM)")
	fs.DurationVar(&c.EthernetWire, "eth-wire", c.EthernetWire, "an Ethernet hop's latency through NIC and switch (assumed)")
	fs.DurationVar(&c.IBWire, "ib-wire", c.IBWire, "an InfiniBand hop's latency (assumed)")
	if err := cli.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	rs, err := parseInts(*ranks)
	if err != nil {
		return fmt.Errorf("-ranks: %w", err)
	}
	ss, err := bench.ParseSizes(*sizes)
	if err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	switch {
	case *perNode < 1:
		return fmt.Errorf("-per-node %d: want at least 1", *perNode)
	case c.Efficiency <= 0 || c.Efficiency > 1:
		return fmt.Errorf("-efficiency %g: want a fraction in (0, 1]", c.Efficiency)
	case *shmGBs <= 0:
		return fmt.Errorf("-shm-bw %g: want a positive bandwidth", *shmGBs)
	case c.TCPStep < 0 || c.SHMStep < 0 || c.EthernetWire < 0 || c.IBWire < 0:
		return fmt.Errorf("latencies cannot be negative")
	}
	for _, r := range rs {
		if r < 1 {
			return fmt.Errorf("-ranks: %d ranks", r)
		}
	}
	c.SHMBandwidth = *shmGBs * 1e9
	sizesF := make([]float64, len(ss))
	for i, s := range ss {
		sizesF[i] = float64(s)
	}
	return bench.ModelTable(stdout, c.Networks(), c.Local(), *perNode, rs, sizesF)
}

func dataPipeline(args []string, stdout io.Writer) error {
	fs := flagSet("data")
	dir := fs.String("data", "", "an image folder (DIR/train/CLASS/IMAGE, DIR/val/CLASS/IMAGE) or shards packed from one (shard)")
	workers := fs.Int("workers", 1, "decoding goroutines")
	images := fs.Int("images", 2048, "images to time (the training images in a random order, repeated if fewer)")
	batch := fs.Int("batch", 32, "batch size")
	size := fs.Int("size", 224, "output image size")
	eval := fs.Bool("eval", false, "evaluation's Resize(size·8/7)+CenterCrop(size) instead of RandomResizedCrop(size)+flip")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	if err := cli.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return fmt.Errorf("-data DIR: an image folder is needed (bench/gen_photos.py or gendata --format imagefolder write one)")
	case *workers < 1 || *batch < 1 || *size < 1:
		return fmt.Errorf("-workers %d -batch %d -size %d: want positive numbers", *workers, *batch, *size)
	}
	if f, err := data.Detect(*dir); err != nil || (f != data.FormatImageFolder && f != data.FormatShards) {
		return fmt.Errorf("%s is not an image folder (DIR/train/CLASS/IMAGE, DIR/val/CLASS/IMAGE) or shards (%s): %v", *dir, data.ShardsIndex, err)
	}
	train, _, err := data.LoadSized(*dir, *size)
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	tf := data.ImageNetAugmentation(train, 1)
	if *eval {
		tf = data.Plain(train)
	}
	res, err := bench.MeasureData(train, tf, *batch, *workers, *images)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	_, err = fmt.Fprintf(stdout, "%.1f images/s with %d workers (%d images from %s, batch %d, %.2f s): %s; JPEG: %s\n",
		res.ImagesPerSec, res.Workers, res.Images, res.Source, res.Batch, res.Seconds, res.Transform, res.Decoder)
	return err
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", s)
		}
		out = append(out, v)
	}
	return out, nil
}

func collectives(args []string, stdout io.Writer) error {
	fs := flagSet("collectives")
	nps := fs.String("np", "2,4", "world sizes")
	sizes := fs.String("sizes", "8B:64MB", "message sizes: FIRST:LAST doubling, or a list")
	ops := fs.String("ops", strings.Join(bench.Ops, ","), "collectives")
	vars := fs.String("variants", "default", "algorithm variants side by side: "+variantNames())
	warmup := fs.Int("warmup", 5, "untimed iterations per size")
	warmupTime := fs.Duration("warmup-time", 200*time.Millisecond, "how long the job warms up before the first size")
	iters := fs.Int("iters", 0, "timed iterations per size (0: by size, 20 to 20,000, as the Open MPI helper counts them)")
	csvPath := fs.String("csv", "", "also write the results as CSV here")
	jsonPath := fs.String("json", "", "also write the results as JSON here")
	competitors := fs.Bool("competitors", true, "also run gloo and Open MPI all-reduce at the same sizes, when installed")
	helpers := fs.String("helpers", "bench/competitors", "directory of the competitor helper programs")
	chart := fs.String("chart", "", "draw bus bandwidth and latency by message size for every collective, competitors included, here: SVG, or PNG for a name ending in .png")
	brk := fs.String("break", "", "testing: make this collective reduce with Max instead of Sum, to see #wrong count it")
	inJob := fs.Bool("in-job", false, "run as one rank of a job someone else started (srun, gorun, mpirun, torchrun): rank 0 prints the table; -np and the variants do not apply")
	if err := cli.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	switch {
	case *iters < 0:
		return fmt.Errorf("-iters %d: want 0 (by size) or more", *iters)
	case *warmup < 0:
		return fmt.Errorf("-warmup %d: want 0 or more", *warmup)
	case *warmupTime < 0:
		return fmt.Errorf("-warmup-time %v: want 0 or more", *warmupTime)
	}
	cfg := bench.Config{Ops: strings.Split(*ops, ","), Warmup: *warmup, WarmupTime: *warmupTime, Iters: *iters, Break: *brk}
	if err := bench.CheckOps(cfg.Ops); err != nil {
		return fmt.Errorf("-ops: %w", err)
	}
	if err := bench.CheckOps([]string{cfg.Break}); cfg.Break != "" && err != nil {
		return fmt.Errorf("-break: %w", err)
	}
	if *chart != "" {
		if err := bench.ChartFormatOK(*chart); err != nil {
			return fmt.Errorf("-chart: %w", err)
		}
	}
	var err error
	if cfg.Sizes, err = bench.ParseSizes(*sizes); err != nil {
		return err
	}
	if out := os.Getenv(workerEnv); out != "" {
		return worker(cfg, out, nil, outputFiles{})
	}
	files := outputFiles{csv: *csvPath, json: *jsonPath, chart: *chart}
	if *inJob {
		return worker(cfg, "", stdout, files)
	}
	worlds, err := parseInts(*nps)
	if err != nil {
		return fmt.Errorf("-np %w", err)
	}
	for _, variant := range strings.Split(*vars, ",") {
		if _, ok := variants[variant]; !ok {
			return fmt.Errorf("-variants: unknown %q (have %s)", variant, variantNames())
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// Interrupted (Ctrl-C), the ranks are stopped and the results'
	// directory removed, instead of left behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "gorun-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var all []bench.Result
	for _, variant := range strings.Split(*vars, ",") {
		env := variants[variant]
		for _, np := range worlds {
			out := filepath.Join(dir, fmt.Sprintf("%s-%d.json", variant, np))
			var logs launch.Buffer
			res, err := launch.Run(ctx, launch.Config{
				NP: np, Program: exe, Args: append([]string{"collectives"}, args...),
				Env:    append([]string{workerEnv + "=" + out}, env...),
				Stdout: &logs, Stderr: &logs, Timeout: 30 * time.Minute, Grace: 5 * time.Second,
			})
			if err == nil {
				err = res.Error()
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted at np=%d %s", np, variant)
			}
			if err != nil {
				return fmt.Errorf("np=%d %s: %w\n%s", np, variant, err, logs.String())
			}
			b, err := os.ReadFile(out)
			if err != nil {
				return fmt.Errorf("np=%d %s: rank 0 wrote no results: %w\n%s", np, variant, err, logs.String())
			}
			var rs []bench.Result
			if err := json.Unmarshal(b, &rs); err != nil {
				return err
			}
			for i := range rs {
				rs[i].Variant = variant
			}
			fmt.Fprintf(stdout, "# gorun %s, %d ranks, variant %s\n", "collectives", np, variant)
			bench.WriteTable(stdout, rs)
			all = append(all, rs...)
		}
	}
	bench.WriteSummary(stdout, all)
	var theirs []bench.Competitor
	if *competitors && os.Getenv(workerEnv) == "" {
		if _, err := os.Stat(*helpers); err != nil {
			fmt.Fprintf(stdout, "# competitors skipped: %s not found (run from the repository root or pass -helpers)\n", *helpers)
		} else {
			for _, np := range worlds {
				res, skipped := bench.RunCompetitors(ctx, *helpers, np, cfg.Sizes, cfg.Ops)
				if ctx.Err() != nil {
					return fmt.Errorf("interrupted while the competitors ran at np=%d", np)
				}
				theirs = append(theirs, res...)
				for _, s := range skipped {
					fmt.Fprintf(stdout, "# np=%d competitor skipped: %s\n", np, s)
				}
			}
			for _, v := range strings.Split(*vars, ",") {
				bench.WriteComparison(stdout, all, theirs, v)
			}
		}
	}
	if err := files.write(all, theirs); err != nil {
		return err
	}
	for _, r := range all {
		if r.Wrong > 0 {
			return fmt.Errorf("%s np=%d %d bytes (%s): %d wrong elements", r.Op, r.NP, r.Bytes, r.Variant, r.Wrong)
		}
	}
	return nil
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// worker runs one rank of the benchmark. Rank 0 writes the results as
// JSON to out, or, in a job started outside bench, prints the table to
// table and writes files.
func worker(cfg bench.Config, out string, table io.Writer, files outputFiles) error {
	ctx := context.Background()
	g, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	res, err := bench.Run(ctx, g, cfg)
	if err != nil {
		return err
	}
	if g.Rank() != 0 {
		return nil
	}
	if table != nil {
		fmt.Fprintf(table, "# gorun collectives, %d ranks in a job started outside bench\n", g.Size())
		bench.WriteTable(table, res)
		return files.write(res, nil)
	}
	return writeFile(out, func(w io.Writer) error { return bench.WriteJSON(w, res) })
}

// outputFiles are the files the results also go to ("": not written).
type outputFiles struct{ csv, json, chart string }

// write writes gorun's results, and the chart with the competitors'
// times beside them.
func (f outputFiles) write(res []bench.Result, theirs []bench.Competitor) error {
	if f.chart != "" {
		series := bench.ChartSeries(res, theirs)
		if err := writeFile(f.chart, func(w io.Writer) error { return bench.WriteChart(w, f.chart, series) }); err != nil {
			return err
		}
	}
	if f.csv != "" {
		if err := writeFile(f.csv, func(w io.Writer) error { return bench.WriteCSV(w, res) }); err != nil {
			return err
		}
	}
	if f.json != "" {
		if err := writeFile(f.json, func(w io.Writer) error { return bench.WriteJSON(w, res) }); err != nil {
			return err
		}
	}
	return nil
}

var epochLine = regexp.MustCompile(`(?m)^Epoch 1: train loss [0-9.]+, ([0-9.]+) s, ([0-9.]+) img/s`)

// trainScaling is seed 003's table: the same training work on each world
// size, one thread per rank, for gorun (each transport asked for) and
// PyTorch DDP over gloo.
func trainScaling(args []string, stdout io.Writer) error {
	fs := flagSet("train")
	nps := fs.String("np", "1,2,4", "world sizes")
	model := fs.String("model", "mnist", "model: mnist (on Fashion-MNIST) or cifarnet (generated data)")
	samples := fs.Int("samples", 0, "training images (default: mnist 12800, cifarnet 2560)")
	trainBin := fs.String("train", "", "the train binary (default: train beside this program)")
	transports := fs.String("transports", "auto", "gorun's transports, each a contestant: auto (shared memory within a machine), tcp")
	competitors := fs.Bool("competitors", true, "also run PyTorch DDP (gloo, Debian's python3-torch) on the same work")
	helpers := fs.String("helpers", "bench/competitors", "directory of the competitor helper programs")
	jsonPath := fs.String("json", "", "also write the rows as JSON here")
	chart := fs.String("chart", "", "draw img/s and speed-up by world size here: SVG, or PNG for a name ending in .png")
	if err := cli.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	worlds, err := parseInts(*nps)
	if err != nil {
		return fmt.Errorf("-np %w", err)
	}
	if *samples < 0 {
		return fmt.Errorf("-samples %d: want 0 (the model's default) or more", *samples)
	}
	if *chart != "" {
		if err := bench.ChartFormatOK(*chart); err != nil {
			return fmt.Errorf("-chart: %w", err)
		}
	}
	var transportNames []string
	for _, t := range strings.Split(*transports, ",") {
		if t != "auto" && t != "tcp" {
			return fmt.Errorf("-transports: unknown %q (want auto or tcp)", t)
		}
		transportNames = append(transportNames, t)
	}
	if *trainBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		*trainBin = filepath.Join(filepath.Dir(exe), "train")
	}
	if _, err := os.Stat(*trainBin); err != nil {
		return fmt.Errorf("%w (build it: go build -o bin/ ./cmd/train ./cmd/bench)", err)
	}
	targs := []string{"--model", *model, "--epochs", "1", "--threads", "1", "--test-samples", "1000", "--progress", "lines",
		"--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9", "--scheduler", "none", "--augment=false"}
	var n int
	switch *model {
	case "mnist":
		n = cmpOr(*samples, 12800)
		targs = append(targs, "--batch-size", "64", "--train-samples", strconv.Itoa(n))
	case "cifarnet":
		n = cmpOr(*samples, 2560)
		targs = append(targs, "--batch-size", "128", "--synthetic", "--train-samples", strconv.Itoa(n))
	default:
		return fmt.Errorf("-model %q: want mnist or cifarnet", *model)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rows []bench.ScalingRow
	for _, transport := range transportNames {
		name, env := "gorun", []string(nil)
		if transport == "tcp" {
			name, env = "gorun tcp", []string{"GORUN_TRANSPORT=tcp"}
		}
		for _, np := range worlds {
			row, err := runTraining(ctx, *trainBin, targs, env, np)
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted at %s np=%d", name, np)
			}
			if err != nil {
				return fmt.Errorf("%s np=%d: %w", name, np, err)
			}
			row.Contestant = name
			rows = append(rows, row)
		}
	}
	if *competitors {
		if err := bench.TorchDDPAvailable(*helpers); err != nil {
			fmt.Fprintf(stdout, "# pytorch-ddp skipped: %v\n", err)
		} else {
			for _, np := range worlds {
				limited, cancel := context.WithTimeout(ctx, 30*time.Minute)
				row, err := bench.RunTorchDDP(limited, *helpers, *model, n, np)
				cancel()
				if ctx.Err() != nil {
					return fmt.Errorf("interrupted at pytorch-ddp np=%d", np)
				}
				if err != nil {
					return err
				}
				rows = append(rows, row)
			}
		}
	}
	bench.FillSpeedUps(rows)
	title := fmt.Sprintf("seed 003's table: %s, %d training images, one thread per rank, one epoch", *model, n)
	bench.WriteScalingTable(stdout, title, rows)
	if *jsonPath != "" {
		if err := writeFile(*jsonPath, func(w io.Writer) error { return bench.WriteScalingJSON(w, rows) }); err != nil {
			return err
		}
	}
	if *chart != "" {
		return writeFile(*chart, func(w io.Writer) error { return bench.WriteScalingChart(w, *chart, *model, rows) })
	}
	return nil
}

// runTraining runs the train binary as np ranks and reads rank 0's epoch
// summary.
func runTraining(ctx context.Context, trainBin string, args, env []string, np int) (bench.ScalingRow, error) {
	var out launch.Buffer
	res, err := launch.Run(ctx, launch.Config{NP: np, Program: trainBin, Args: args, Env: env, Stdout: &out, Stderr: &out,
		Timeout: 30 * time.Minute, Grace: 5 * time.Second})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return bench.ScalingRow{}, fmt.Errorf("%w\n%s", err, out.String())
	}
	// Rank 0's lines carry the prefix "[0] ".
	text := strings.ReplaceAll(out.String(), "[0] ", "")
	m := epochLine.FindStringSubmatch(text)
	if m == nil {
		return bench.ScalingRow{}, fmt.Errorf("no epoch summary in the output:\n%s", out.String())
	}
	secs, _ := strconv.ParseFloat(m[1], 64)
	ips, _ := strconv.ParseFloat(m[2], 64)
	return bench.ScalingRow{NP: np, Seconds: secs, ImgPerSec: ips}, nil
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
