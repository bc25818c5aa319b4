package train

// The DDP tests run this test binary as the ranks of a real job over
// loopback (started by comm/launch, as gorun does). A rank finds its
// scenario in TRAIN_TEST_WORKER.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/launch"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

const workerEnv = "TRAIN_TEST_WORKER"

func TestMain(m *testing.M) {
	if scenario := os.Getenv(workerEnv); scenario != "" {
		if err := runWorker(scenario); err != nil {
			fmt.Printf("WORKER-ERROR %v\n", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ddpSetup is what a scenario trains: the MNIST net on generated data,
// dropout off (so one process with the whole batch is an exact reference),
// SGD with momentum, one thread.
func ddpSetup(world, perRank, steps, epochs int) (Config, *data.Dataset, *data.Dataset) {
	return ddpSetupModel("mnist", world, perRank, steps, epochs)
}

// ddpSetupModel is ddpSetup for another model; CIFARNet keeps its
// augmentation and uses synchronised batch norm.
func ddpSetupModel(model string, world, perRank, steps, epochs int) (Config, *data.Dataset, *data.Dataset) {
	cfg, _ := Defaults(model)
	cfg.Epochs, cfg.BatchSize, cfg.TestBatchSize, cfg.Threads = epochs, perRank*world, 64, 1
	cfg.Optimizer, cfg.LR, cfg.Momentum, cfg.Scheduler = "sgd", 0.05, 0.9, "none"
	format := data.FormatMNIST
	if model != "mnist" {
		format, cfg.LR, cfg.SyncBatchNorm = data.FormatCIFAR10, 0.01, true
	}
	train, _ := data.Synthetic(format, steps*perRank*world, 1)
	test, _ := data.Synthetic(format, 96, 2)
	return cfg, train, test
}

func noDropout(t *Trainer) {
	for _, d := range t.dropouts {
		d.P = 0
	}
	if s := t.stage(); s != nil { // every microbatch's replica has its own layers
		for _, ch := range s.pipe.chunks {
			for _, r := range ch.replicas {
				nn.Walk(r, func(l nn.Layer) {
					if d, ok := l.(*nn.Dropout); ok {
						d.P = 0
					}
				})
			}
		}
	}
}

// paramHash hashes every parameter's bits.
func paramHash(t *Trainer) int64 {
	h := fnv.New64a()
	var b [4]byte
	for _, p := range nn.Params(t.model.Net) {
		for _, v := range p.Value.Data {
			u := math.Float32bits(v)
			b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			h.Write(b[:])
		}
	}
	return int64(h.Sum64())
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

func runWorker(scenario string) error {
	ctx := context.Background()
	g, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	perRank, steps, epochs := envInt("DDP_PER_RANK"), envInt("DDP_STEPS"), envInt("DDP_EPOCHS")
	model := os.Getenv("DDP_MODEL")
	if model == "" {
		model = "mnist"
	}
	cfg, trainSet, testSet := ddpSetupModel(model, envInt("DDP_DATA_WORLD"), perRank, steps, epochs)
	cfg.BatchSize = perRank
	cfg.GradCompression = os.Getenv("DDP_COMPRESS")
	if scenario == "equiv-localbn" {
		cfg.SyncBatchNorm = false
	}
	out := os.Getenv("DDP_OUT")
	resume := ""
	if scenario == "resume" || os.Getenv("PIPE_RESUME") != "" {
		resume = out
	}
	if scenario == "pipe" {
		cfg.Pipeline, cfg.Microbatches, cfg.Schedule = g.Size()/max(envInt("DDP_DATA_WORLD"), 1), envInt("PIPE_MICRO"), os.Getenv("PIPE_SCHEDULE")
		cfg.Balance, cfg.Chunks = os.Getenv("PIPE_BALANCE"), envInt("PIPE_CHUNKS")
		if resume != "" {
			if cfg.Split, err = SavedSplit(out); err != nil {
				return err
			}
		}
	}
	be := cpu.New(1)
	defer be.Close()
	init := os.Getenv("PIPE_INIT")
	t, err := New(ctx, cfg, be, trainSet, testSet, WithGroup(g), ResumeFrom(resume), InitFrom(init))
	if err != nil {
		return err
	}
	defer t.Close()
	noDropout(t)
	if init != "" {
		if err := sameAsFile(t.compute.layer(), init); err != nil {
			return fmt.Errorf("rank %d: %w", g.Rank(), err)
		}
		fmt.Printf("INIT rank %d: %d tensors as the file's\n", g.Rank(), len(nn.StateTensors(t.compute.layer())))
	}
	if scenario == "pipe" {
		fmt.Printf("START rank %d epoch %d step %d\n", g.Rank(), t.Epoch()+1, t.step)
		if os.Getenv("PIPE_KILL") != "" {
			t.AfterStep = func(step int64) error {
				if g.Rank() == 1 && step == 2 {
					// Killed, not an exit status: the launcher names a
					// rank killed by a signal it did not send as the
					// cause, whatever order the exits are reaped in (the
					// peers' error exits can be reaped first on a busy
					// machine: CI saw it).
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
				return nil
			}
		}
		t.SavePath = out
		if err := t.Run(ctx); err != nil {
			return err
		}
		idle, ideal, err := t.Bubble(ctx)
		if err != nil {
			return err
		}
		if err := t.WriteTimeline(ctx, out+".svg", idle, ideal); err != nil {
			return err
		}
		fmt.Printf("DONE rank %d step %d\n", g.Rank(), t.step)
		return nil
	}
	if scenario == "shrink" || scenario == "stopat" {
		return shrinkWorker(ctx, t, g, scenario, out)
	}
	// After every step all ranks must hold the same parameters.
	t.AfterStep = func(step int64) error {
		h := paramHash(t)
		lo, hi := []int64{h}, []int64{h}
		if err := comm.AllReduce(ctx, g, lo, comm.Min); err != nil {
			return err
		}
		if err := comm.AllReduce(ctx, g, hi, comm.Max); err != nil {
			return err
		}
		if lo[0] != hi[0] {
			return fmt.Errorf("rank %d: parameters differ between ranks after step %d", g.Rank(), step)
		}
		if scenario == "kill" && g.Rank() == 1 && step == int64(steps+2) {
			fmt.Println("rank 1 dies now")
			os.Exit(7)
		}
		return nil
	}
	t.SavePath = out
	if err := t.Run(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		ev := t.last
		fmt.Printf("DONE epoch %d step %d test %d/%d\n", t.Epoch(), t.step, ev.TestCorrect, ev.TestTotal)
	}
	return nil
}

// shrinkWorker trains with OnFailureShrink until step SHRINK_AT, checking
// after every step that all ranks hold the same parameters. Then, with
// scenario shrink, rank 2 is SIGKILLed and the others go on without it;
// with stopat, every rank stops there, the checkpoint saved. With
// SHRINK_POINT=epoch-state rank 2 is killed at the end of the first epoch
// instead (beforeEpochState).
func shrinkWorker(ctx context.Context, t *Trainer, g *comm.Group, scenario, out string) error {
	at := int64(envInt("SHRINK_AT"))
	errStop := errors.New("stopped")
	orig := g.Rank()
	t.SavePath, t.OnFailure, t.Log = out, OnFailureShrink, os.Stdout
	if scenario == "stopat" {
		t.SaveEvery = int(at)
	}
	if os.Getenv("SHRINK_POINT") == "epoch-state" {
		// Rank 2 dies as the replicas gather the gradient sync's state for
		// the first epoch's checkpoint, not during a step.
		at = -1
		t.beforeEpochState = func(epoch int) {
			if epoch == 1 && orig == 2 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
	t.AfterStep = func(step int64) error {
		switch {
		case step == at && scenario == "stopat":
			return errStop
		case step == at && orig == 2:
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		h := paramHash(t)
		lo, hi := []int64{h}, []int64{h}
		if err := comm.AllReduce(ctx, t.Group(), lo, comm.Min); err != nil {
			return err
		}
		if err := comm.AllReduce(ctx, t.Group(), hi, comm.Max); err != nil {
			return err
		}
		if lo[0] != hi[0] {
			return fmt.Errorf("rank %d: parameters differ between ranks after step %d", t.Group().Rank(), step)
		}
		return nil
	}
	err := t.Run(ctx)
	if errors.Is(err, errStop) {
		fmt.Printf("STOPPED at step %d\n", t.step)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("DONE rank %d of %d, step %d\n", t.Group().Rank(), t.Group().Size(), t.step)
	return nil
}

// runJob runs np ranks of this test binary with the scenario.
func runJob(t *testing.T, np int, scenario string, env ...string) (*launch.Result, string) {
	t.Helper()
	return runJobWith(t, launch.Config{}, np, scenario, env...)
}

// runJobWith is runJob with the launcher's other settings from cfg.
func runJobWith(t *testing.T, cfg launch.Config, np int, scenario string, env ...string) (*launch.Result, string) {
	t.Helper()
	var out launch.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg.NP, cfg.Program, cfg.Args = np, os.Args[0], []string{"-test.run=^$"}
	cfg.Env = append([]string{workerEnv + "=" + scenario, "GORUN_JOIN_TIMEOUT=30s", "GORUN_TIMEOUT=60s", "GOMAXPROCS=1"}, env...)
	cfg.Stdout, cfg.Stderr, cfg.Grace = &out, &out, 2*time.Second
	res, err := launch.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	return res, out.String()
}

// TestDDPMatchesOneProcess trains np ranks with batch b each and one
// process with batch np·b on the same samples, dropout off, and requires
// the same weights within 1e-5 (relative, per tensor); the ranks check
// after every step that they all hold identical parameters.
func TestDDPMatchesOneProcess(t *testing.T) {
	worlds := []int{2, 3, 4}
	if testing.Short() {
		worlds = []int{2}
	}
	const perRank, steps = 8, 8
	for _, np := range worlds {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ddp.safetensors")
			res, log := runJob(t, np, "equiv", "DDP_PER_RANK="+strconv.Itoa(perRank), "DDP_STEPS="+strconv.Itoa(steps),
				"DDP_EPOCHS=1", "DDP_DATA_WORLD="+strconv.Itoa(np), "DDP_OUT="+out)
			if err := res.Error(); err != nil {
				t.Fatalf("job: %v\n%s", err, log)
			}
			if !strings.Contains(log, fmt.Sprintf("DONE epoch 1 step %d test", steps)) {
				t.Fatalf("rank 0 did not finish %d steps:\n%s", steps, log)
			}
			cfg, trainSet, testSet := ddpSetup(np, perRank, steps, 1)
			ref := trainReference(t, cfg, trainSet, testSet)
			worst := sameParams(t, ref, savedTensors(t, out), fmt.Sprintf("np=%d vs one process with batch %d", np, np*perRank))
			t.Logf("np=%d: weights after %d steps within %.2g of one process with batch %d", np, steps, worst, np*perRank)
		})
	}
}

// TestDDPRankDies kills rank 1 in the second epoch: the job fails with an
// error naming rank 1 within seconds, the checkpoint of epoch 1 stays
// intact, and a job of another size resumes from it to the end.
func TestDDPRankDies(t *testing.T) {
	const perRank, steps = 8, 6
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "run.safetensors")
	env := []string{"DDP_PER_RANK=" + strconv.Itoa(perRank), "DDP_STEPS=" + strconv.Itoa(steps), "DDP_EPOCHS=2", "DDP_DATA_WORLD=2", "DDP_OUT=" + ckpt}
	start := time.Now()
	res, log := runJob(t, 2, "kill", env...)
	elapsed := time.Since(start)
	if res.First == nil || res.First.Rank != 1 {
		t.Fatalf("first failure %v, want rank 1\n%s", res.First, log)
	}
	if !strings.Contains(log, "[0] WORKER-ERROR") || !strings.Contains(log, "rank 1") {
		t.Fatalf("rank 0 should fail naming rank 1:\n%s", log)
	}
	blamed := map[int]int{} // rank → the rank its failure blames
	for _, f := range res.Failures {
		blamed[f.Rank] = f.Blames
	}
	if len(blamed) != 2 || blamed[0] != 1 || blamed[1] != -1 {
		t.Errorf("failures %v blame %v, want rank 0's blaming rank 1 (comm's blame file) and rank 1's blaming none\n%s", res.Failures, blamed, log)
	}
	if elapsed > 30*time.Second {
		t.Fatalf("the job took %v to fail after a rank died", elapsed)
	}
	meta, err := checkpoint.ReadTrainMeta(ckpt)
	if err != nil || meta.Epoch != 1 {
		t.Fatalf("checkpoint after the failure: %+v, %v", meta, err)
	}
	// Three ranks (the data divides into batches of 8 per rank, padded)
	// continue from epoch 1.
	res, log = runJob(t, 3, "resume", env...)
	if err := res.Error(); err != nil {
		t.Fatalf("resume: %v\n%s", err, log)
	}
	if !strings.Contains(log, "DONE epoch 2") {
		t.Fatalf("resumed job did not finish epoch 2:\n%s", log)
	}
	if meta, err := checkpoint.ReadTrainMeta(ckpt); err != nil || meta.Epoch != 2 {
		t.Fatalf("checkpoint after resuming: %+v, %v", meta, err)
	}
}

// TestSyncBatchNorm trains CIFARNet (batch norm, augmentation on, dropout
// off) with synchronised batch norm on 2 ranks of batch b and in one
// process with batch 2b: parameters and running statistics agree within
// 1e-5.
func TestSyncBatchNorm(t *testing.T) {
	if testing.Short() {
		t.Skip("CIFARNet in three processes is too slow under the race detector; the full pass (go test ./...) runs it")
	}
	const np, perRank, steps = 2, 4, 4
	out := filepath.Join(t.TempDir(), "sync.safetensors")
	res, log := runJob(t, np, "equiv", "DDP_MODEL=cifarnet", "DDP_PER_RANK="+strconv.Itoa(perRank), "DDP_STEPS="+strconv.Itoa(steps),
		"DDP_EPOCHS=1", "DDP_DATA_WORLD="+strconv.Itoa(np), "DDP_OUT="+out)
	if err := res.Error(); err != nil {
		t.Fatalf("job: %v\n%s", err, log)
	}
	cfg, trainSet, testSet := ddpSetupModel("cifarnet", np, perRank, steps, 1)
	cfg.SyncBatchNorm = false // one process: its batch norm sees the whole batch anyway
	ref := trainReference(t, cfg, trainSet, testSet)
	f, err := safetensors.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for _, v := range ref.model.Net.State() {
		got, _ := f.Get(v.Name)
		if v.Count != nil {
			if got.I64[0] != *v.Count {
				t.Fatalf("%s: %d, want %d", v.Name, got.I64[0], *v.Count)
			}
			continue
		}
		rel := tensor.RelDiff(got.F32, v.Value.Data, 1e-15)
		if rel > 1e-5 {
			t.Fatalf("%s differs from one process with batch %d by %.2g (relative)", v.Name, np*perRank, rel)
		}
		worst = max(worst, rel)
	}
	t.Logf("SyncBatchNorm, 2 ranks: parameters and running statistics within %.2g of one process", worst)

	// Without synchronisation the running statistics are rank 0's own
	// and differ: the comparison above is not vacuous.
	res, log = runJob(t, np, "equiv-localbn", "DDP_MODEL=cifarnet", "DDP_PER_RANK="+strconv.Itoa(perRank), "DDP_STEPS="+strconv.Itoa(steps),
		"DDP_EPOCHS=1", "DDP_DATA_WORLD="+strconv.Itoa(np), "DDP_OUT="+out)
	if err := res.Error(); err != nil {
		t.Fatalf("job: %v\n%s", err, log)
	}
	f, _ = safetensors.ReadFile(out)
	got, _ := f.Get("bn1.running_mean")
	var diff float64
	for _, v := range ref.model.Net.State() {
		if v.Name == "bn1.running_mean" {
			for i, w := range v.Value.Data {
				diff = max(diff, math.Abs(float64(got.F32[i]-w)))
			}
		}
	}
	if diff < 1e-6 {
		t.Fatalf("local batch norm matched the whole batch's statistics (max diff %g)", diff)
	}
}

// trainReference trains cfg unsplit in this process with dropout off: the
// exact reference the distributed runs are compared with.
func trainReference(t *testing.T, cfg Config, train, test *data.Dataset) *Trainer {
	t.Helper()
	ref := newTrainer(t, cfg, train, test)
	noDropout(ref)
	if err := ref.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ref
}

// savedTensors reads the float tensors of the given safetensors files into
// one map by name.
func savedTensors(t *testing.T, paths ...string) map[string][]float32 {
	t.Helper()
	got := map[string][]float32{}
	for _, p := range paths {
		f, err := safetensors.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range f.Tensors {
			got[tn.Name] = tn.F32
		}
	}
	return got
}

// sameParams fails unless every parameter of ref is in got within 1e-5
// relative difference, and returns the largest difference.
func sameParams(t *testing.T, ref *Trainer, got map[string][]float32, what string) float64 {
	t.Helper()
	worst := 0.0
	for _, v := range nn.Params(ref.model.Net) {
		g, ok := got[v.Name]
		if !ok {
			t.Fatalf("%s: %s was not saved (have %d tensors)", what, v.Name, len(got))
		}
		rel := tensor.RelDiff(g, v.Value.Data, 1e-15)
		if rel > 1e-5 {
			t.Fatalf("%s: %s differs by %.2g (relative)", what, v.Name, rel)
		}
		worst = max(worst, rel)
	}
	return worst
}
