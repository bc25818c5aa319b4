package train

import (
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
