package train

import (
	"cmp"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train/checkpoint"
)

// TestPipelineMatchesOneProcess trains the MNIST net (dropout off) split
// into p stages on p processes with m microbatches, with the GPipe, 1F1B,
// zero-bubble and interleaved schedules, and unsplit in this process with
// the same batches: after k steps every stage's weights equal the unsplit
// model's within 1e-5, and the zero-bubble and interleaved schedules'
// equal 1F1B's bit for bit (the same gradients, accumulated in the same
// order: each layer's microbatches in order, wherever the cuts fall).
func TestPipelineMatchesOneProcess(t *testing.T) {
	const batch, steps = 16, 4
	type pcase struct {
		p, m     int
		schedule string
		chunks   int
	}
	var cases []pcase
	for _, p := range []int{2, 3} {
		for _, m := range []int{1, 2, 4, 8} {
			cases = append(cases, pcase{p, m, "gpipe", 1})
		}
	}
	for _, s := range []string{"1f1b", "zb", "zb-h2"} {
		cases = append(cases, pcase{2, 4, s, 1}, pcase{3, 3, s, 1}, pcase{3, 8, s, 1})
	}
	cases = append(cases, pcase{2, 4, "interleaved", 2}, pcase{3, 3, "interleaved", 2}, pcase{3, 8, "interleaved", 2},
		pcase{2, 4, "interleaved", 3}, pcase{3, 2, "1f1b", 1}, pcase{3, 2, "interleaved", 2},
		// 5 microbatches asked of a batch of 16: torch.chunk cuts 4 of 4.
		pcase{2, 5, "gpipe", 1})
	if testing.Short() {
		// (GPipe, the default, runs in -short in TestPipelineTimesDataParallel.)
		cases = []pcase{{3, 8, "1f1b", 1}, {3, 8, "zb", 1}, {3, 8, "zb-h2", 1}, {3, 8, "interleaved", 2}}
	}
	weights := map[pcase]map[string][]float32{}
	cfg, trainSet, testSet := ddpSetup(1, batch, steps, 1)
	ref := trainReference(t, cfg, trainSet, testSet)
	for _, c := range cases {
		p, m := c.p, c.m
		name := fmt.Sprintf("%s/p=%d/m=%d", c.schedule, p, m)
		if c.chunks > 1 {
			name += fmt.Sprintf("/v=%d", c.chunks)
		}
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "pipe.safetensors")
			env := []string{"DDP_PER_RANK=" + strconv.Itoa(batch), "DDP_STEPS=" + strconv.Itoa(steps),
				"DDP_EPOCHS=1", "DDP_DATA_WORLD=1", "DDP_OUT=" + out, "PIPE_MICRO=" + strconv.Itoa(m), "PIPE_SCHEDULE=" + c.schedule}
			if c.chunks > 1 {
				env = append(env, "PIPE_CHUNKS="+strconv.Itoa(c.chunks))
			}
			res, log := runJob(t, p, "pipe", env...)
			if err := res.Error(); err != nil {
				t.Fatalf("job: %v\n%s", err, log)
			}
			if n := strings.Count(log, fmt.Sprintf("step %d\n", steps)); n != p {
				t.Fatalf("%d of %d stages finished %d steps:\n%s", n, p, steps, log)
			}
			var files []string
			for s := range p {
				files = append(files, StagePath(out, s))
			}
			got := savedTensors(t, files...)
			weights[c] = got
			worst := sameParams(t, ref, got, fmt.Sprintf("%s p=%d m=%d vs the unsplit model", c.schedule, p, m))
			if c.schedule != "gpipe" && c.schedule != "1f1b" {
				oneF, ok := weights[pcase{p, m, "1f1b", 1}]
				if !ok {
					t.Fatalf("no 1f1b run with p=%d m=%d to compare with", p, m)
				}
				for name, w := range oneF {
					if !slices.Equal(got[name], w) {
						t.Fatalf("%s p=%d m=%d: %s differs from 1f1b's", c.schedule, p, m, name)
					}
				}
			}
			t.Logf("%s p=%d m=%d: weights after %d steps within %.2g of the unsplit model", c.schedule, p, m, steps, worst)

			// The last stage drew the schedule: a forward and a backward
			// box per stage and microbatch.
			svg, err := os.ReadFile(out + ".svg")
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Rects []struct {
					Title string `xml:"title"`
				} `xml:"rect"`
			}
			if err := xml.Unmarshal(svg, &doc); err != nil {
				t.Fatalf("timeline SVG: %v", err)
			}
			// A forward and a backward box per stage, chunk and
			// microbatch, and with the zero-bubble schedule weight passes
			// (titled "stage 1 W3: …").
			passes := map[byte]int{}
			for _, r := range doc.Rects {
				if _, label, ok := strings.Cut(r.Title, " "); ok {
					if _, label, ok = strings.Cut(label, " "); ok {
						passes[label[0]]++
					}
				}
			}
			// The microbatches a batch is cut into, as torch.chunk cuts.
			cut := (batch + (batch+m-1)/m - 1) / ((batch + m - 1) / m)
			if n := p * cut * c.chunks; passes['F'] != n || passes['B'] != n || (passes['W'] > 0) != strings.HasPrefix(c.schedule, "zb") {
				t.Fatalf("timeline boxes %v, want %d F and B each, and W only with zb and zb-h2", passes, n)
			}
			checkTrace(t, out+".json", c.schedule, p, cut, c.chunks)

			// The stage files load as one model, and merge into one file.
			be := cpu.New(1)
			defer be.Close()
			c, err := LoadClassifier(out, "", "", be)
			if err != nil {
				t.Fatal(err)
			}
			whole := filepath.Join(t.TempDir(), "whole.safetensors")
			if err := c.SaveWhole(whole); err != nil {
				t.Fatal(err)
			}
			merged, err := safetensors.ReadFile(whole)
			if err != nil {
				t.Fatal(err)
			}
			for name, w := range got {
				mt, ok := merged.Get(name)
				if !ok || !slices.Equal(mt.F32, w) {
					t.Fatalf("merged file: %s missing or different", name)
				}
			}
		})
	}
}

// TestPipelineStageDies kills stage 1 of 3 after its second step, with
// the GPipe, the zero-bubble (ZB-H1 and ZB-H2, whose receives may be
// waited for while weight passes run) and the interleaved schedules: the
// other stages fail with errors naming rank 1.
func TestPipelineStageDies(t *testing.T) {
	for _, schedule := range []string{"gpipe", "zb", "zb-h2", "interleaved"} {
		t.Run(schedule, func(t *testing.T) {
			if testing.Short() && schedule != "zb" {
				t.Skip("-short (the race pass): the zero-bubble schedule's receives are the one path of their own; the full pass runs all")
			}
			out := filepath.Join(t.TempDir(), "pipe.safetensors")
			env := []string{"DDP_PER_RANK=16", "DDP_STEPS=6", "DDP_EPOCHS=1", "DDP_DATA_WORLD=1",
				"DDP_OUT=" + out, "PIPE_MICRO=4", "PIPE_KILL=1", "PIPE_SCHEDULE=" + schedule}
			if schedule == "interleaved" {
				env = append(env, "PIPE_CHUNKS=2") // rank 0 then waits on rank 2 as well as rank 1
			}
			res, log := runJob(t, 3, "pipe", env...)
			if res.First == nil || res.First.Rank != 1 {
				t.Fatalf("first failure %v, want rank 1\n%s", res.First, log)
			}
			for _, r := range []string{"[0] WORKER-ERROR", "[2] WORKER-ERROR"} {
				i := strings.Index(log, r)
				if i < 0 || !strings.Contains(log[i:i+strings.Index(log[i:]+"\n", "\n")], "rank 1") {
					t.Fatalf("%s... naming rank 1 missing:\n%s", r, log)
				}
			}
		})
	}
}

// TestPartition checks the contiguous cut against every possible cut of
// small random inputs, and a few hand-worked cases.
func TestPartition(t *testing.T) {
	for _, c := range []struct {
		costs []float64
		k     int
		want  []int
	}{
		{[]float64{1, 1, 1, 1}, 2, []int{2}},
		{[]float64{5, 1, 1, 1, 1, 1}, 2, []int{1}},
		{[]float64{1, 1, 1, 1, 1, 5}, 2, []int{5}},
		{[]float64{3, 3, 3}, 3, []int{1, 2}},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 3, []int{5, 7}}, // 15 | 13 | 17
		{[]float64{0, 0, 10, 0, 0}, 2, []int{1}},
	} {
		if got := partition(c.costs, c.k); !slices.Equal(got, c.want) {
			t.Errorf("partition(%v, %d) = %v, want %v", c.costs, c.k, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for range 300 {
		n := 1 + rng.IntN(8)
		k := 1 + rng.IntN(n)
		costs := make([]float64, n)
		for i := range costs {
			costs[i] = float64(rng.IntN(20))
		}
		got := partition(costs, k)
		if err := checkSplit(got, k, n); k > 1 && err != nil {
			t.Fatalf("partition(%v, %d) = %v: %v", costs, k, got, err)
		}
		if g, b := maxGroup(costs, got), bruteBest(costs, k); g != b {
			t.Fatalf("partition(%v, %d) = %v with largest group %v; the best cut has %v", costs, k, got, g, b)
		}
	}
}

// TestPartitionChunks: cut into chunks dealt round the stages, a step's
// modelled time (micro·largest stage + (p−1)·largest chunk) is as small as
// the best of every cut (brute force), and two dominant layers go to
// different stages.
func TestPartitionChunks(t *testing.T) {
	// Even chunks ([1 1] [10] [1 1] [10]) put both heavy layers on stage
	// 1; the best cut gives each stage one.
	costs := []float64{1, 1, 10, 1, 1, 10}
	got := partitionChunks(costs, 2, 2, 4)
	if v, even := maxStage(costs, got, 2), maxStage(costs, partition(costs, 4), 2); v != 12 || even <= v {
		t.Errorf("partitionChunks(%v, 2, 2, 4) = %v, largest stage %v, want 12 (even chunks: %v)", costs, got, v, even)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for range 300 {
		stages, chunks, micro := 1+rng.IntN(3), 1+rng.IntN(3), 1+rng.IntN(8)
		k := stages * chunks
		n := k + rng.IntN(5)
		costs := make([]float64, n)
		for i := range costs {
			costs[i] = float64(rng.IntN(20))
		}
		got := partitionChunks(costs, stages, chunks, micro)
		if err := checkSplit(got, k, n); k > 1 && err != nil {
			t.Fatalf("partitionChunks(%v, %d, %d, %d) = %v: %v", costs, stages, chunks, micro, got, err)
		}
		cost := func(split []int) float64 { return stepTime(costs, split, stages, micro) }
		if chunks == 1 {
			cost = func(split []int) float64 { return maxGroup(costs, split) }
		}
		best := -1.0
		var rec func(split []int, from int)
		rec = func(split []int, from int) {
			if len(split) == k-1 {
				if v := cost(split); best < 0 || v < best {
					best = v
				}
				return
			}
			for s := from; s < n; s++ {
				rec(append(split, s), s+1)
			}
		}
		rec(nil, 1)
		if v := cost(got); v != best {
			t.Fatalf("partitionChunks(%v, %d, %d, %d) = %v costs %v; the best cut %v", costs, stages, chunks, micro, got, v, best)
		}
	}
}

func bruteBest(costs []float64, k int) float64 {
	best := -1.0
	var rec func(split []int, from int)
	rec = func(split []int, from int) {
		if len(split) == k-1 {
			if v := maxGroup(costs, split); best < 0 || v < best {
				best = v
			}
			return
		}
		for s := from; s < len(costs); s++ {
			rec(append(split, s), s+1)
		}
	}
	rec(nil, 1)
	return best
}

// TestPlanStages plans stages in a one-rank job: the shapes between the
// parts are the whole model's, the parameter counts add up to its own,
// each way of cutting is honoured, and bad requests are refused.
func TestPlanStages(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (CI's race pass): one rank planning alone, 19 s under the race detector; the full run covers it")
	}
	ctx := context.Background()
	g, err := comm.Init(ctx, comm.WithRank(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	be := cpu.New(1)
	defer be.Close()
	for _, c := range []struct {
		model, balance string
		stages         int
		split          []int
		how            string
		chunks         int
		// long: skipped with -short (the race pass, where each ResNet-18
		// case took 13 s): the MNIST net's cases take the same paths.
		long bool
	}{
		{"mnist", "", 2, nil, "measured time", 1, false},
		{"mnist", "params", 3, nil, "parameter count", 1, false},
		{"mnist", "time", 3, []int{2, 7}, "--split", 1, false},
		{"cifarnet-staged", "", 3, nil, "the model's own stages", 1, false},
		{"cifarnet-staged", "params", 2, nil, "parameter count", 1, false},
		{"resnet18", "", 3, nil, "measured time", 1, true},
		{"resnet18", "", 2, []int{7}, "--split", 1, false}, // inside layer2: after layer2.0
		{"mnist", "", 2, nil, "measured time", 3, false},
		{"resnet18", "params", 2, []int{2, 5, 9}, "--split", 2, true},
	} {
		t.Run(fmt.Sprintf("%s/%d/%s/%v/v=%d", c.model, c.stages, c.balance, c.split, c.chunks), func(t *testing.T) {
			if c.long && testing.Short() {
				t.Skip("-short (the race pass): the MNIST net's cases take this path; the full pass runs it")
			}
			spec, err := zoo.Lookup(c.model)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := planStages(ctx, g, be, spec, 7, c.stages, c.chunks, 4, 2, c.balance, c.split)
			if err != nil {
				t.Fatal(err)
			}
			if plan.How != c.how || checkSplit(plan.Split, c.stages*c.chunks, len(spec.Pieces())) != nil || c.split != nil && !slices.Equal(plan.Split, c.split) {
				t.Fatalf("cut %v by %q, want a valid cut by %q (%v)", plan.Split, plan.How, c.how, c.split)
			}
			if c.how == "the model's own stages" && !slices.Equal(plan.Split, []int{1, 2}) {
				t.Fatalf("StagedCIFARNet cut at %v, want its stages [1 2]", plan.Split)
			}
			timed := c.how == "measured time"
			for i, s := range plan.Seconds {
				if timed != (s > 0) {
					t.Fatalf("part %d measured %v s; time measured: %v", i, s, timed)
				}
			}
			// The model, piece by piece, agrees with the plan, and its
			// pieces hold the whole model's parameters.
			x := tensor.New(append([]int{2}, spec.Input...)...)
			params, whole := 0, 0
			for i := range spec.Pieces() {
				l := spec.BuildPieces(be, 7, i, i+1)
				y, err := l.Forward(x)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(y.Shape[1:], plan.Shapes[i]) {
					t.Fatalf("piece %d gives %v per sample, the plan says %v", i, y.Shape[1:], plan.Shapes[i])
				}
				x = tensor.New(y.Shape...)
				for _, v := range nn.Params(l) {
					params += v.Value.Len()
				}
			}
			for _, v := range nn.Params(spec.Build(be, 7).Net) {
				whole += v.Value.Len()
			}
			if params != whole {
				t.Fatalf("the pieces hold %d parameters, the whole model %d", params, whole)
			}
			sum := 0
			for _, n := range plan.Params {
				sum += n
			}
			if sum != params {
				t.Fatalf("plan counts %d parameters, the model has %d", sum, params)
			}
			// One line per stage; with chunks, one per chunk naming its
			// stage, and each stage's total time when measured.
			d := plan.Describe()
			stageLines, chunkLines := c.stages, 0
			if c.chunks > 1 {
				chunkLines = c.stages * c.chunks
				if !timed {
					stageLines = 0
				}
			}
			if strings.Count(d, "\n  stage ") != stageLines || strings.Count(d, "\n  chunk ") != chunkLines ||
				c.chunks > 1 && !strings.Contains(d, fmt.Sprintf("\n  chunk %d (stage %d)", c.stages+1, 1)) {
				t.Fatalf("description:\n%s", d)
			}
		})
	}
	spec, _ := zoo.Lookup("mnist")
	for _, bad := range []struct {
		stages int
		split  []int
		want   string
	}{
		{40, nil, "cannot be split into 40 stages"},
		{-6, nil, "cannot be split into 18 chunks (6 stages of 3)"},
		{3, []int{4}, "need 2 split points"},
		{3, []int{4, 4}, "must increase strictly"},
		{2, []int{12}, "must increase strictly"},
	} {
		stages, chunks := bad.stages, 1
		if stages < 0 { // (a negative count: that many stages of 3 chunks)
			stages, chunks = -stages, 3
		}
		if _, err := planStages(ctx, g, be, spec, 7, stages, chunks, 4, 2, "", bad.split); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%d stages split at %v: %v, want an error saying %q", bad.stages, bad.split, err, bad.want)
		}
	}
}

// TestPipelineTimesDataParallel runs 4 ranks as 2 pipelines of 2 stages,
// each pipeline on its own shard with batch b, the stages' gradients
// averaged across the pipelines: the weights equal one unsplit process
// with batch 2b within 1e-5.
func TestPipelineTimesDataParallel(t *testing.T) {
	const perPipeline, steps = 8, 4
	out := filepath.Join(t.TempDir(), "pdp.safetensors")
	res, log := runJob(t, 4, "pipe", "DDP_PER_RANK="+strconv.Itoa(perPipeline), "DDP_STEPS="+strconv.Itoa(steps),
		"DDP_EPOCHS=1", "DDP_DATA_WORLD=2", "DDP_OUT="+out, "PIPE_MICRO=2")
	if err := res.Error(); err != nil {
		t.Fatalf("job: %v\n%s", err, log)
	}
	cfg, trainSet, testSet := ddpSetup(2, perPipeline, steps, 1)
	ref := trainReference(t, cfg, trainSet, testSet)
	sameParams(t, ref, savedTensors(t, StagePath(out, 0), StagePath(out, 1)), fmt.Sprintf("2 pipelines vs one process with batch %d", 2*perPipeline))
}

// TestPipelineResume trains 2 stages for 2 epochs straight, and for 1
// epoch then resumed for the second, with the GPipe schedule and with two
// interleaved chunks per stage: every stage's weights come out
// bit-identical.
func TestPipelineResume(t *testing.T) {
	for _, schedule := range []string{"gpipe", "interleaved"} {
		t.Run(schedule, func(t *testing.T) {
			if testing.Short() && schedule == "gpipe" {
				t.Skip("-short (the race pass): the interleaved run resumes through the same path; the full pass runs both")
			}
			dir := t.TempDir()
			straight, split := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
			env := func(out string, epochs int, extra ...string) []string {
				e := []string{"DDP_PER_RANK=8", "DDP_STEPS=3", "DDP_EPOCHS=" + strconv.Itoa(epochs), "DDP_DATA_WORLD=1",
					"DDP_OUT=" + out, "PIPE_MICRO=2", "PIPE_SCHEDULE=" + schedule}
				if schedule == "interleaved" {
					e = append(e, "PIPE_CHUNKS=2")
				}
				return append(e, extra...)
			}
			// The first two cut by parameter count, so they cut alike; the
			// resumed job would measure time, but takes the saved cut.
			for i, job := range [][]string{env(straight, 2, "PIPE_BALANCE=params"), env(split, 1, "PIPE_BALANCE=params"), env(split, 2, "PIPE_RESUME=1")} {
				res, log := runJob(t, 2, "pipe", job...)
				if res.Error() != nil {
					t.Fatalf("job %v: %v\n%s", job, res.Error(), log)
				}
				if i == 2 && (!strings.Contains(log, "START rank 0 epoch 2 step 3") || !strings.Contains(log, "START rank 1 epoch 2 step 3")) {
					t.Fatalf("the resumed job did not start at epoch 2, step 3:\n%s", log)
				}
			}
			sameStageFiles(t, straight, split, 2)
		})
	}
}

// checkTrace reads the Chrome trace the timeline wrote beside its SVG:
// a thread named per stage, a complete event per forward and backward of
// every microbatch on every stage, none overlapping another of its stage,
// and the schedule's summary.
func checkTrace(t *testing.T, path, schedule string, p, m, chunks int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name, Cat, Ph string
			Tid           int
			Ts, Dur       float64
			Args          map[string]any
		} `json:"traceEvents"`
		OtherData TraceSummary `json:"otherData"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("trace %s: %v", path, err)
	}
	threads := map[int]string{}
	spans := map[int][][2]float64{}
	seen := map[string]bool{}
	busy := map[string]float64{} // total duration by category
	warm := map[int]int{}        // forwards before the first backward, by stage
	backed := map[int]bool{}     // stages whose first backward was seen
	for _, e := range doc.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				threads[e.Tid] = fmt.Sprint(e.Args["name"])
			}
		case "X":
			// A pass over a chunk with next to nothing to do can read the
			// same clock at both ends (seen once on the VM: a backward of
			// 0 ns), so a single event may last 0; a category may not.
			if e.Ts < 0 || e.Dur < 0 || e.Tid < 0 || e.Tid >= p {
				t.Fatalf("trace event %+v: want ts ≥ 0, dur ≥ 0 and a stage's thread", e)
			}
			busy[e.Cat] += e.Dur
			key := fmt.Sprintf("%d/%s", e.Tid, e.Name)
			// F and B once each; W (weight passes) in one stretch or more.
			if (seen[key] && e.Name[0] != 'W') || (e.Name[0] == 'F') != (e.Cat == "forward") || (e.Name[0] == 'W') != (e.Cat == "weights") {
				t.Fatalf("trace event %+v repeated or in the wrong category", e)
			}
			seen[key] = true
			spans[e.Tid] = append(spans[e.Tid], [2]float64{e.Ts, e.Ts + e.Dur})
			// (Events are written in each stage's order.)
			switch e.Name[0] {
			case 'F':
				if !backed[e.Tid] {
					warm[e.Tid]++
				}
			case 'B':
				backed[e.Tid] = true
			}
		}
	}
	for cat, d := range busy {
		if d <= 0 {
			t.Errorf("%s passes last %v µs in all: their durations were not recorded", cat, d)
		}
	}
	for s := range p {
		if threads[s] != fmt.Sprintf("stage %d", s) {
			t.Errorf("thread %d named %q", s, threads[s])
		}
		// A stage with parameters has weight passes for every microbatch
		// with the zero-bubble schedule; a stage without (relu, pooling)
		// has none.
		kinds := []string{"F", "B"}
		if seen[fmt.Sprintf("%d/W0", s)] {
			if !strings.HasPrefix(schedule, "zb") {
				t.Errorf("stage %d: weight passes in a %s schedule", s, schedule)
			}
			kinds = append(kinds, "W")
		}
		for mb := range m {
			for _, kind := range kinds {
				for v := range chunks {
					name := fmt.Sprintf("%s%d", kind, mb)
					if chunks > 1 {
						name += fmt.Sprintf(".%d", v)
					}
					if !seen[fmt.Sprintf("%d/%s", s, name)] {
						t.Errorf("no %s on stage %d in the trace", name, s)
					}
				}
			}
		}
		// The schedule's warm-up: stage s runs p−s−1 forwards before its
		// steady alternation of a forward and a backward (1F1B, ZB-H1), or
		// 2(p−s−1) (ZB-H2); GPipe all m.
		want := map[string]int{"gpipe": m, "1f1b": p - s - 1, "zb": p - s - 1, "zb-h2": 2 * (p - s - 1)}
		if w, ok := want[schedule]; ok && warm[s] != min(w+1, m) {
			t.Errorf("%s: stage %d ran %d forwards before its first backward, want %d", schedule, s, warm[s], min(w+1, m))
		}
		sp := spans[s]
		slices.SortFunc(sp, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
		for i := 1; i < len(sp); i++ {
			if sp[i][0] < sp[i-1][1]-1 { // (1 µs: rounding)
				t.Errorf("stage %d: events at %v and %v µs overlap", s, sp[i-1], sp[i])
			}
		}
	}
	ideal := float64(p-1) / float64(chunks*m+p-1)
	if schedule == "zb-h2" {
		ideal = 0
	}
	if o := doc.OtherData; o.Schedule != schedule || o.Stages != p || o.Chunks != chunks || o.Microbatches != m || len(o.Idle) != p ||
		o.IdealBubble != ideal || o.Title == "" {
		t.Errorf("trace summary %+v", o)
	}
}

// TestStageFilesCutInsideALayer: a ResNet-18 pipeline cut after layer2.0
// (inside torchvision's layer2) saves two stage files; they load as one
// model (LoadClassifier), every tensor where the stage had it, and merge.
func TestStageFilesCutInsideALayer(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	spec, err := zoo.Lookup("resnet18")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "r.safetensors")
	split := []int{7} // pieces: conv1, bn1, relu, maxpool, layer1.0, layer1.1, layer2.0 | layer2.1, …
	n := len(spec.Pieces())
	want := map[string][]float32{} // nil for counters
	for s, r := range [][2]int{{0, 7}, {7, n}} {
		stage := spec.BuildPieces(be, 5, r[0], r[1])
		for _, v := range stage.State() {
			want[v.Name] = nil
			if v.Value != nil {
				want[v.Name] = v.Value.Data
			}
		}
		meta := checkpoint.Meta{Model: "resnet18", Input: spec.Input, Stage: s, Stages: 2, Split: split}
		if err := checkpoint.Save(StagePath(path, s), stage, nil, meta); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := want["layer2.0.conv1.weight"]; !ok {
		t.Fatal("stage 0 lacks layer2.0")
	}
	if _, ok := want["layer2.1.conv1.weight"]; !ok {
		t.Fatal("stage 1 lacks layer2.1")
	}
	c, err := LoadClassifier(path, "", "", be)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Model.Net.State()
	if len(got) != len(want) {
		t.Fatalf("the loaded model has %d state entries, the stages %d", len(got), len(want))
	}
	for _, v := range got {
		w, ok := want[v.Name]
		if !ok || v.Value != nil && !slices.Equal(v.Value.Data, w) {
			t.Fatalf("%s differs from the stage file's", v.Name)
		}
	}
}

// TestStageFilesRefused: stage files that do not make a pipeline's model
// — a lone stage 0 saved as a single stage, a split that does not fit the
// model, a missing stage 1 — are errors naming the file, not a crash.
func TestStageFilesRefused(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	spec, err := zoo.Lookup("resnet18")
	if err != nil {
		t.Fatal(err)
	}
	n := len(spec.Pieces())
	for _, c := range []struct {
		name           string
		stages, chunks int
		split          []int
		want           string
	}{
		{"one stage", 1, 0, nil, "is not a pipeline stage's file"},
		{"split past the end", 2, 0, []int{n}, "must increase strictly"},
		{"stage 1 missing", 2, 0, []int{7}, "stage 1 of 2"},
		{"chunks without their cuts", 2, 2, []int{7}, "4 parts (stages, or chunks with the interleaved schedule) need 3 split points"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.safetensors")
			meta := checkpoint.Meta{Model: "resnet18", Input: spec.Input, Stage: 0, Stages: c.stages, Chunks: c.chunks, Split: c.split}
			if err := checkpoint.Save(StagePath(path, 0), spec.BuildPieces(be, 5, 0, 7), nil, meta); err != nil {
				t.Fatal(err)
			}
			_, err := LoadClassifier(path, "", "", be)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadClassifier: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestResumeRefusesOtherChunks: a stage file saved with two interleaved
// chunks per stage does not resume a run with one, nor the reverse, nor
// another stage's file.
func TestResumeRefusesOtherChunks(t *testing.T) {
	for _, c := range []struct {
		saved, now int
		want       string
	}{
		{2, 1, "--schedule gpipe, but x.stage1.safetensors was saved by an interleaved pipeline of 2 chunks per stage"},
		{0, 2, "--schedule interleaved, but x.stage1.safetensors was saved by a pipeline of one chunk per stage"},
		{3, 2, "--chunks 2, but x.stage1.safetensors was saved with 3 chunks per stage"},
	} {
		cfg := Config{Pipeline: 2}
		if c.now > 1 {
			cfg.Schedule, cfg.Chunks = "interleaved", c.now
		}
		tr := &Trainer{cfg: cfg, compute: &pipelineStage{pipe: &Pipeline{stage: 1, stages: 2, chunks: make([]*chunk, c.now)}, plan: &StagePlan{Split: []int{2, 4, 6}}}}
		err := tr.checkSaved("x.stage1.safetensors", &checkpoint.Meta{Stage: 1, Stages: 2, Chunks: c.saved, Split: []int{2, 4, 6}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("saved with %d chunks, resumed with %d: %v; want %q", c.saved, c.now, err, c.want)
		}
	}
	tr := &Trainer{cfg: Config{Pipeline: 2}, compute: &pipelineStage{pipe: &Pipeline{stage: 1, stages: 2, chunks: make([]*chunk, 1)}, plan: &StagePlan{Split: []int{4}}}}
	if err := tr.checkSaved("x.stage0.safetensors", &checkpoint.Meta{Stage: 0, Stages: 2, Split: []int{4}}); err == nil || !strings.Contains(err.Error(), "is stage 0 of 2; this rank runs stage 1") {
		t.Errorf("stage 0's file resumed by stage 1: %v", err)
	}
}

// TestPipelineModel: CIFARNet in 3 stages is seed 000's StagedCIFARNet,
// whose 3 pieces cannot be cut into interleaved chunks: with chunks it is
// the plain model.
func TestPipelineModel(t *testing.T) {
	for _, c := range []struct {
		model          string
		stages, chunks int
		want           string
	}{
		{"cifarnet", 3, 0, "cifarnet-staged"},
		{"cifarnet", 3, 1, "cifarnet-staged"},
		{"cifarnet", 3, 2, "cifarnet"},
		{"cifarnet", 2, 0, "cifarnet"},
		{"mnist", 3, 0, "mnist"},
	} {
		if got := pipelineModel(c.model, c.stages, c.chunks); got != c.want {
			t.Errorf("pipelineModel(%s, %d, %d) = %s, want %s", c.model, c.stages, c.chunks, got, c.want)
		}
	}
}

// TestNewPipelineBadSchedule: an unknown schedule is refused before
// anything is set up, naming it and the schedules there are; the
// interleaved one is sent to its own constructor.
func TestNewPipelineBadSchedule(t *testing.T) {
	for schedule, want := range map[string]string{
		"zigzag":      `pipeline: schedule "zigzag": want gpipe, 1f1b, zb, zb-h2 or interleaved`,
		"interleaved": "NewInterleavedPipeline",
	} {
		_, err := NewPipeline(nil, nil, nil, nil, nil, nil, 4, schedule)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("schedule %q: %v, want an error with %q", schedule, err, want)
		}
	}
}

// TestPipelineInitFrom: a pipeline started from a whole model's weights
// file (--init) starts each stage from the file's tensors of its own
// layers: between them, the stages take every tensor of the file.
func TestPipelineInitFrom(t *testing.T) {
	cfg, trainSet, testSet := ddpSetupModel("mnist", 1, 8, 2, 1)
	cfg.Seed = 7 // other weights than the pipeline's own initialisation
	donor := newTrainer(t, cfg, trainSet, testSet)
	weights := filepath.Join(t.TempDir(), "donor.safetensors")
	if err := nn.SaveFile(weights, donor.Model().Net, nil); err != nil {
		t.Fatal(err)
	}
	res, log := runJob(t, 2, "pipe", "DDP_PER_RANK=8", "DDP_STEPS=2", "DDP_EPOCHS=1", "DDP_DATA_WORLD=1",
		"DDP_OUT="+filepath.Join(t.TempDir(), "p.safetensors"), "PIPE_MICRO=2", "PIPE_BALANCE=params", "PIPE_INIT="+weights)
	if res.Error() != nil {
		t.Fatalf("%v\n%s", res.Error(), log)
	}
	total := 0
	for r := range 2 {
		var rank, n int
		i := strings.Index(log, fmt.Sprintf("INIT rank %d: ", r))
		if i < 0 {
			t.Fatalf("rank %d did not check its stage's initial weights:\n%s", r, log)
		}
		if _, err := fmt.Sscanf(log[i:], "INIT rank %d: %d tensors", &rank, &n); err != nil || n == 0 {
			t.Fatalf("rank %d: %v, %d tensors\n%s", r, err, n, log)
		}
		total += n
	}
	if want := len(nn.StateTensors(donor.Model().Net)); total != want {
		t.Errorf("the stages took %d tensors between them, want the file's %d", total, want)
	}
}

// sameAsFile reports whether every state tensor of net holds the values
// of the weights file's tensor of its name.
func sameAsFile(net nn.Layer, path string) error {
	f, err := safetensors.ReadFile(path)
	if err != nil {
		return err
	}
	for _, c := range nn.StateTensors(net) {
		w, ok := f.Get(c.Name)
		if !ok || !slices.Equal(w.F32, c.F32) || !slices.Equal(w.I64, c.I64) {
			return fmt.Errorf("%s is not the file's", c.Name)
		}
	}
	return nil
}

// TestPipelineResumeAfterPartialSave: a job killed while its stages saved
// — stage 0 had saved the end of epoch 2, stage 1 had not — resumes with
// every stage at the newest point all of them saved (stage 0 from the
// training state it kept from before, checkpoint.KeepPrevious) and ends
// bit for bit where an uninterrupted job does.
func TestPipelineResumeAfterPartialSave(t *testing.T) {
	dir := t.TempDir()
	straight, split := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	env := func(out string, extra ...string) []string {
		return append([]string{"DDP_PER_RANK=8", "DDP_STEPS=3", "DDP_EPOCHS=2", "DDP_DATA_WORLD=1",
			"DDP_OUT=" + out, "PIPE_MICRO=2", "PIPE_BALANCE=params"}, extra...)
	}
	for _, job := range [][]string{env(straight), env(split)} {
		if res, log := runJob(t, 2, "pipe", job...); res.Error() != nil {
			t.Fatalf("job %v: %v\n%s", job, res.Error(), log)
		}
	}
	// Stage 1 "killed" before saving epoch 2: its latest training state
	// is epoch 1's again; stage 0 holds epoch 2's and, before it, epoch 1's.
	stage1 := StagePath(split, 1)
	if err := os.Rename(checkpoint.PreviousTrainPath(stage1), checkpoint.TrainPath(stage1)); err != nil {
		t.Fatal(err)
	}
	res, log := runJob(t, 2, "pipe", env(split, "PIPE_RESUME=1")...)
	if res.Error() != nil {
		t.Fatalf("the resumed job: %v\n%s", res.Error(), log)
	}
	if !strings.Contains(log, "START rank 0 epoch 2 step 3") || !strings.Contains(log, "START rank 1 epoch 2 step 3") {
		t.Fatalf("the resumed job's stages did not both start at epoch 2, step 3:\n%s", log)
	}
	sameStageFiles(t, straight, split, 2)
	// Stage 1's training state gone altogether: no point every stage
	// holds, said by each rank, naming what each holds.
	for _, f := range []string{checkpoint.TrainPath(stage1), checkpoint.PreviousTrainPath(stage1)} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	res, log = runJob(t, 2, "pipe", env(split, "PIPE_RESUME=1")...)
	if want := "the pipeline's stages hold no checkpoint of one point in training (rank 0: after epoch 2 (step 6); rank 1: none)"; res.Error() == nil || !strings.Contains(log, want) {
		t.Fatalf("resumed without stage 1's state: %v, want a failure saying %q:\n%s", res.Error(), want, log)
	}
}

// sameStageFiles fails t unless the stage files of the checkpoints at
// straight and resumed hold the same tensors, bit for bit.
func sameStageFiles(t *testing.T, straight, resumed string, stages int) {
	t.Helper()
	for s := range stages {
		a, err := safetensors.ReadFile(StagePath(straight, s))
		if err != nil {
			t.Fatal(err)
		}
		b, err := safetensors.ReadFile(StagePath(resumed, s))
		if err != nil {
			t.Fatal(err)
		}
		for _, ta := range a.Tensors {
			tb, ok := b.Get(ta.Name)
			if !ok || !slices.Equal(ta.F32, tb.F32) || !slices.Equal(ta.I64, tb.I64) {
				t.Fatalf("stage %d: %s differs between the straight and the resumed run", s, ta.Name)
			}
		}
	}
}
