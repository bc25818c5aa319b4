package train

import (
	"strings"
	"testing"

	"github.com/gorun/gorun/train/checkpoint"
)

// TestCutAsSaved: a run resuming a checkpoint must cut the model into
// pipeline stages (and chunks) as the saved run did; otherwise it is
// refused naming the saved layout and how to resume it.
func TestCutAsSaved(t *testing.T) {
	single := &checkpoint.Meta{}
	twoStages := &checkpoint.Meta{Stage: 0, Stages: 2, Split: []int{3}}
	interleaved := &checkpoint.Meta{Stages: 2, Chunks: 2, Split: []int{1, 3, 5}}
	for _, tc := range []struct {
		name string
		m    *checkpoint.Meta
		c    Config
		want string // "" for none
	}{
		{"no pipeline", single, Config{}, ""},
		{"pipeline 1 is none", single, Config{Pipeline: 1}, ""},
		{"a pipeline on a single run's", single, Config{Pipeline: 2}, "--pipeline 2, but ck was saved by a run without a pipeline: resume it without --pipeline"},
		{"same stages", twoStages, Config{Pipeline: 2}, ""},
		{"same stages, another one-chunk schedule", twoStages, Config{Pipeline: 2, Schedule: "1f1b"}, ""},
		{"more stages", twoStages, Config{Pipeline: 3}, "--pipeline 3, but ck was saved by a pipeline of 2 stages, a file for each: resume it with --pipeline 2, or start a new run from its weights (infer --weights ck --merge OUT, then --init OUT)"},
		{"no pipeline on stages", twoStages, Config{}, "--pipeline 1, but ck was saved by a pipeline of 2 stages"},
		{"interleaved on one chunk", twoStages, Config{Pipeline: 2, Schedule: "interleaved"}, "--schedule interleaved, but ck was saved by a pipeline of one chunk per stage"},
		{"same chunks", interleaved, Config{Pipeline: 2, Schedule: "interleaved", Chunks: 2}, ""},
		{"default chunks are 2", interleaved, Config{Pipeline: 2, Schedule: "interleaved"}, ""},
		{"more chunks", interleaved, Config{Pipeline: 2, Schedule: "interleaved", Chunks: 3}, "--chunks 3, but ck was saved with 2 chunks per stage: resume it with --chunks 2"},
		{"one chunk on chunks", interleaved, Config{Pipeline: 2, Schedule: "zb"}, "--schedule zb, but ck was saved by an interleaved pipeline of 2 chunks per stage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.CutAsSaved("ck", tc.m)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
