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
)

// TestPipelineMatchesOneProcess trains the MNIST net (dropout off) split
// into p stages on p processes with m microbatches, with the GPipe and the
// 1F1B schedules, and unsplit in this process with the same batches:
// after k steps every stage's weights equal the unsplit model's within
// 1e-5.
func TestPipelineMatchesOneProcess(t *testing.T) {
	const batch, steps = 16, 4
	type pcase struct {
		p, m     int
		schedule string
	}
	var cases []pcase
	for _, p := range []int{2, 3} {
		for _, m := range []int{1, 2, 4, 8} {
			cases = append(cases, pcase{p, m, "gpipe"})
		}
	}
	cases = append(cases, pcase{2, 4, "1f1b"}, pcase{3, 3, "1f1b"}, pcase{3, 8, "1f1b"})
	if testing.Short() {
		cases = []pcase{{3, 4, "gpipe"}, {3, 8, "1f1b"}}
	}
	cfg, trainSet, testSet := ddpSetup(1, batch, steps, 1)
	ref := trainReference(t, cfg, trainSet, testSet)
	for _, c := range cases {
		p, m := c.p, c.m
		t.Run(fmt.Sprintf("%s/p=%d/m=%d", c.schedule, p, m), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "pipe.safetensors")
			res, log := runJob(t, p, "pipe", "DDP_PER_RANK="+strconv.Itoa(batch), "DDP_STEPS="+strconv.Itoa(steps),
				"DDP_EPOCHS=1", "DDP_DATA_WORLD=1", "DDP_OUT="+out, "PIPE_MICRO="+strconv.Itoa(m), "PIPE_SCHEDULE="+c.schedule)
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
			worst := sameParams(t, ref, got, fmt.Sprintf("%s p=%d m=%d vs the unsplit model", c.schedule, p, m))
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
			boxes := 0
			for _, r := range doc.Rects {
				if r.Title != "" {
					boxes++
				}
			}
			if boxes != 2*p*m {
				t.Fatalf("timeline has %d boxes, want %d", boxes, 2*p*m)
			}
			checkTrace(t, out+".json", c.schedule, p, m)

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

// TestPipelineStageDies kills stage 1 of 3 after its second step: the
// other stages fail with errors naming rank 1.
func TestPipelineStageDies(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pipe.safetensors")
	res, log := runJob(t, 3, "pipe", "DDP_PER_RANK=16", "DDP_STEPS=6", "DDP_EPOCHS=1", "DDP_DATA_WORLD=1",
		"DDP_OUT="+out, "PIPE_MICRO=4", "PIPE_KILL=1")
	if res.First == nil || res.First.Rank != 1 {
		t.Fatalf("first failure %v, want rank 1\n%s", res.First, log)
	}
	for _, r := range []string{"[0] WORKER-ERROR", "[2] WORKER-ERROR"} {
		i := strings.Index(log, r)
		if i < 0 || !strings.Contains(log[i:i+strings.Index(log[i:]+"\n", "\n")], "rank 1") {
			t.Fatalf("%s... naming rank 1 missing:\n%s", r, log)
		}
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

func maxGroup(costs []float64, split []int) float64 {
	bounds := append(append([]int{0}, split...), len(costs))
	worst := 0.0
	for i := 1; i < len(bounds); i++ {
		sum := 0.0
		for _, c := range costs[bounds[i-1]:bounds[i]] {
			sum += c
		}
		worst = max(worst, sum)
	}
	return worst
}

// bruteBest tries every way to choose k−1 cut points.
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
	}{
		{"mnist", "", 2, nil, "measured time"},
		{"mnist", "params", 3, nil, "parameter count"},
		{"mnist", "time", 3, []int{2, 7}, "--split"},
		{"cifarnet-staged", "", 3, nil, "the model's own stages"},
		{"cifarnet-staged", "params", 2, nil, "parameter count"},
		{"resnet18", "", 3, nil, "measured time"},
	} {
		t.Run(fmt.Sprintf("%s/%d/%s/%v", c.model, c.stages, c.balance, c.split), func(t *testing.T) {
			spec, err := zoo.Lookup(c.model)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := planStages(ctx, g, be, spec, 7, c.stages, 2, c.balance, c.split)
			if err != nil {
				t.Fatal(err)
			}
			if plan.How != c.how || checkSplit(plan.Split, c.stages, len(spec.Parts)) != nil || c.split != nil && !slices.Equal(plan.Split, c.split) {
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
			// The whole model, built at once, agrees with the plan.
			m := spec.Build(be, 7)
			x := tensor.New(append([]int{2}, spec.Input...)...)
			params := 0
			for i, l := range m.Net.(*nn.Chain).Layers {
				y, err := l.Forward(x)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(y.Shape[1:], plan.Shapes[i]) {
					t.Fatalf("part %d gives %v per sample, the plan says %v", i, y.Shape[1:], plan.Shapes[i])
				}
				x = tensor.New(y.Shape...)
				for _, v := range nn.Params(l) {
					params += v.Value.Len()
				}
			}
			sum := 0
			for _, n := range plan.Params {
				sum += n
			}
			if sum != params {
				t.Fatalf("plan counts %d parameters, the model has %d", sum, params)
			}
			if d := plan.Describe(); strings.Count(d, "\n  stage ") != c.stages {
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
		{3, []int{4}, "need 2 split points"},
		{3, []int{4, 4}, "must increase strictly"},
		{2, []int{12}, "must increase strictly"},
	} {
		if _, err := planStages(ctx, g, be, spec, 7, bad.stages, 2, "", bad.split); err == nil || !strings.Contains(err.Error(), bad.want) {
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
// epoch then resumed for the second: every stage's weights come out
// bit-identical.
func TestPipelineResume(t *testing.T) {
	dir := t.TempDir()
	straight, split := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	env := func(out string, epochs int, extra ...string) []string {
		return append([]string{"DDP_PER_RANK=8", "DDP_STEPS=3", "DDP_EPOCHS=" + strconv.Itoa(epochs), "DDP_DATA_WORLD=1",
			"DDP_OUT=" + out, "PIPE_MICRO=2"}, extra...)
	}
	// The first two cut by parameter count, so they cut alike; the resumed
	// job would measure time, but takes the saved cut.
	for i, job := range [][]string{env(straight, 2, "PIPE_BALANCE=params"), env(split, 1, "PIPE_BALANCE=params"), env(split, 2, "PIPE_RESUME=1")} {
		res, log := runJob(t, 2, "pipe", job...)
		if res.Error() != nil {
			t.Fatalf("job %v: %v\n%s", job, res.Error(), log)
		}
		if i == 2 && (!strings.Contains(log, "START rank 0 epoch 2 step 3") || !strings.Contains(log, "START rank 1 epoch 2 step 3")) {
			t.Fatalf("the resumed job did not start at epoch 2, step 3:\n%s", log)
		}
	}
	for s := range 2 {
		a, err := safetensors.ReadFile(StagePath(straight, s))
		if err != nil {
			t.Fatal(err)
		}
		b, err := safetensors.ReadFile(StagePath(split, s))
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

// checkTrace reads the Chrome trace the timeline wrote beside its SVG:
// a thread named per stage, a complete event per forward and backward of
// every microbatch on every stage, none overlapping another of its stage,
// and the schedule's summary.
func checkTrace(t *testing.T, path, schedule string, p, m int) {
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
	for _, e := range doc.TraceEvents {
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				threads[e.Tid] = fmt.Sprint(e.Args["name"])
			}
		case "X":
			if e.Ts < 0 || e.Dur <= 0 || e.Tid < 0 || e.Tid >= p {
				t.Fatalf("trace event %+v: want ts ≥ 0, dur > 0 and a stage's thread", e)
			}
			key := fmt.Sprintf("%d/%s", e.Tid, e.Name)
			if seen[key] || (e.Name[0] == 'F') != (e.Cat == "forward") {
				t.Fatalf("trace event %+v repeated or in the wrong category", e)
			}
			seen[key] = true
			spans[e.Tid] = append(spans[e.Tid], [2]float64{e.Ts, e.Ts + e.Dur})
		}
	}
	for s := range p {
		if threads[s] != fmt.Sprintf("stage %d", s) {
			t.Errorf("thread %d named %q", s, threads[s])
		}
		for mb := range m {
			for _, kind := range []string{"F", "B"} {
				if !seen[fmt.Sprintf("%d/%s%d", s, kind, mb)] {
					t.Errorf("no %s%d on stage %d in the trace", kind, mb, s)
				}
			}
		}
		sp := spans[s]
		slices.SortFunc(sp, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
		for i := 1; i < len(sp); i++ {
			if sp[i][0] < sp[i-1][1]-1 { // (1 µs: rounding)
				t.Errorf("stage %d: events at %v and %v µs overlap", s, sp[i-1], sp[i])
			}
		}
	}
	if o := doc.OtherData; o.Schedule != schedule || o.Stages != p || o.Microbatches != m || len(o.Idle) != p || o.IdealBubble <= 0 || o.Title == "" {
		t.Errorf("trace summary %+v", o)
	}
}
