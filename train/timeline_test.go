package train

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestWriteTimelineTraceErrors: no events, and a directory that does not
// exist, are errors that say so (the latter naming the file); nothing is
// written.
func TestWriteTimelineTraceErrors(t *testing.T) {
	sum := TraceSummary{Title: "t", Schedule: "gpipe", Stages: 1, Microbatches: 1}
	if err := WriteTimelineTrace(t.TempDir()+"/t.json", nil, sum); err == nil || !strings.Contains(err.Error(), "no events") {
		t.Errorf("no events: %v", err)
	}
	now := time.Now()
	events := []Event{{Stage: 0, Micro: 0, Start: now, End: now.Add(time.Millisecond)}}
	path := t.TempDir() + "/missing/t.json"
	if err := WriteTimelineTrace(path, events, sum); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("missing directory: %v, want an error naming %s", err, path)
	}
}

// TestTracePath: the trace goes beside the drawing, its name ending in
// .json.
func TestTracePath(t *testing.T) {
	for in, want := range map[string]string{"t.svg": "t.json", "/a/b.c/run.svg": "/a/b.c/run.json", "t.json": "t.json", "t": "t.json"} {
		if got := tracePath(in); got != want {
			t.Errorf("tracePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIdealBubble: the ideal bubble the run's summary and trace report,
// and its formula, by schedule: GPipe's (p−1)/(m+p−1) for gpipe, 1f1b
// and zb; (p−1)/(V·m+p−1) with V interleaved chunks; none for zb-h2.
func TestIdealBubble(t *testing.T) {
	for _, c := range []struct {
		schedule              string
		stages, micro, chunks int
		want                  float64
		formula               string
	}{
		{"gpipe", 2, 4, 1, 1.0 / 5, "GPipe bubble (p-1)/(m+p-1)"},
		{"1f1b", 4, 8, 1, 3.0 / 11, "GPipe bubble (p-1)/(m+p-1)"},
		{"zb", 2, 8, 1, 1.0 / 9, "GPipe bubble (p-1)/(m+p-1)"},
		{"interleaved", 2, 4, 2, 1.0 / 9, "interleaved bubble (p-1)/(2m+p-1)"},
		{"zb-h2", 2, 4, 1, 0, "ZB-H2's bubble, passes of equal length"},
	} {
		p := &Pipeline{schedule: c.schedule, stages: c.stages, micro: c.micro, chunks: make([]*chunk, c.chunks)}
		if got, formula := p.IdealBubble(); math.Abs(got-c.want) > 1e-12 || formula != c.formula {
			t.Errorf("%s, p=%d m=%d V=%d: %v (%s), want %v (%s)", c.schedule, c.stages, c.micro, c.chunks, got, formula, c.want, c.formula)
		}
	}
	// Once a batch has been cut, m is what it was cut into: 24 asked of a
	// batch of 64 are 22 (torch.chunk's 21 of 3 samples and one of 1).
	p := &Pipeline{schedule: "gpipe", stages: 2, micro: 24, chunks: make([]*chunk, 1), fullSamples: 64, fullMicro: 22}
	if got, _ := p.IdealBubble(); math.Abs(got-1.0/23) > 1e-12 {
		t.Errorf("24 microbatches asked, 22 cut: bubble %v, want 1/23", got)
	}
}
