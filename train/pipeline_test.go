package train

import (
	"encoding/xml"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
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

// TestStageLayers checks the automatic split: contiguous, every child
// once, names kept, parameter counts balanced as far as the children allow.
func TestStageLayers(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	for _, name := range []string{"mnist", "resnet18"} {
		m := mustZoo(t, name, be)
		whole := m.Net.(*nn.Chain)
		for _, p := range []int{2, 3} {
			stages, err := StageLayers(m, p)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range stages {
				c := s.(*nn.Chain)
				if len(c.Layers) == 0 {
					t.Fatalf("%s p=%d: empty stage", name, p)
				}
				names = append(names, c.Names...)
			}
			if strings.Join(names, ",") != strings.Join(whole.Names, ",") {
				t.Fatalf("%s p=%d: stages hold %v, the model %v", name, p, names, whole.Names)
			}
		}
	}
	if _, err := StageLayers(mustZoo(t, "mnist", be), 40); err == nil {
		t.Fatal("40 stages of a 12-layer model accepted")
	}
}

func mustZoo(t *testing.T, name string, be *cpu.Backend) *zoo.Model {
	t.Helper()
	m, err := zoo.New(name, be, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return m
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
	for i, job := range [][]string{env(straight, 2), env(split, 1), env(split, 2, "PIPE_RESUME=1")} {
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
