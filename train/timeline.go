package train

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
)

// Timeline gathers every stage's events of the last full batch (all
// stages must call it) and returns them, ordered by stage, with times
// relative to the earliest start. Stages on one host share a clock; across
// hosts the picture is as good as their clock synchronisation.
func (p *Pipeline) Timeline(ctx context.Context) ([]Event, error) {
	// A forward and a backward per microbatch and chunk, and its weight
	// passes (zero bubble, one chunk) in at most 3m stretches: each is
	// broken only by the 2m forwards and backwards.
	const fields = 5 // chunk, micro, pass, start, end (ns since the Unix epoch)
	per := (2*len(p.chunks) + 3) * p.micro
	buf := make([]float64, fields*per)
	for i, e := range p.fullEvents[:min(len(p.fullEvents), per)] {
		copy(buf[fields*i:], []float64{float64(e.Chunk), float64(e.Micro), float64(e.Pass), float64(e.Start.UnixNano()), float64(e.End.UnixNano())})
	}
	all := make([]float64, len(buf)*p.stages)
	if err := comm.AllGather(ctx, p.g, buf, all); err != nil {
		return nil, fmt.Errorf("pipeline: gathering the timeline: %w", err)
	}
	var events []Event
	for s := range p.stages {
		for i := range per {
			v := all[(s*per+i)*fields:]
			if v[4] == 0 {
				continue // no full batch on that stage
			}
			events = append(events, Event{Stage: s, Chunk: int(v[0]), Micro: int(v[1]), Pass: Pass(v[2]),
				Start: time.Unix(0, int64(v[3])), End: time.Unix(0, int64(v[4]))})
		}
	}
	return events, nil
}

// colour is the pass's colour in the SVG timeline: forwards blue,
// backwards green, deferred weight passes orange; a stage's later chunks
// (interleaved schedule) in darker shades of the same.
func (k Pass) colour(chunk int) string {
	base := [...][3]int{{0x4a, 0x90, 0xd9}, {0x5c, 0xb8, 0x5c}, {0xf0, 0xad, 0x4e}}[k]
	f := 1 / (1 + 0.45*float64(chunk))
	return fmt.Sprintf("#%02x%02x%02x", int(float64(base[0])*f), int(float64(base[1])*f), int(float64(base[2])*f))
}

// label names an event in timelines: its pass and microbatch (F3), and
// with several chunks per stage the chunk after a dot (F3.1).
func (e Event) label(chunks int) string {
	if chunks > 1 {
		return fmt.Sprintf("%s%d.%d", e.Pass.Letter(), e.Micro, e.Chunk)
	}
	return fmt.Sprintf("%s%d", e.Pass.Letter(), e.Micro)
}

// chunksOf is how many chunks per stage events show.
func chunksOf(events []Event) int {
	n := 0
	for _, e := range events {
		n = max(n, e.Chunk+1)
	}
	return n
}

// category is the pass's category in the Chrome trace.
func (k Pass) category() string { return [...]string{"forward", "backward", "weights"}[k] }

// WriteTimelineSVG draws events as the GPipe schedule diagram: one row per
// stage, forwards blue, backwards green and weight passes orange, each
// labelled with its pass and microbatch (F3, B3, W3; with interleaved
// chunks also the stage's chunk, F3.1, drawn darker for later chunks);
// idle time stays white.
func WriteTimelineSVG(path string, events []Event, stages int, title string) error {
	if len(events) == 0 {
		return fmt.Errorf("timeline: no events (no full batch was trained)")
	}
	t0, t1 := span(events)
	const left, top, rowH, width = 80, 40, 36, 900
	span := t1.Sub(t0).Seconds()
	x := func(t time.Time) float64 { return left + width*t.Sub(t0).Seconds()/span }
	var b strings.Builder
	h := top + rowH*stages + 30
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+width+20, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, html.EscapeString(title))
	for s := range stages {
		y := top + s*rowH
		fmt.Fprintf(&b, `<text x="8" y="%d">stage %d</text>`+"\n", y+rowH/2+4, s)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`+"\n", left, y, width, rowH-6)
	}
	chunks := chunksOf(events)
	for _, e := range events {
		fill, label := e.Pass.colour(e.Chunk), e.label(chunks)
		x0, x1 := x(e.Start), x(e.End)
		y := top + e.Stage*rowH
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="#fff"><title>stage %d %s: %.2f–%.2f ms</title></rect>`+"\n",
			x0, y, max(x1-x0, 0.5), rowH-6, fill, e.Stage, label, 1e3*e.Start.Sub(t0).Seconds(), 1e3*e.End.Sub(t0).Seconds())
		if x1-x0 > 18 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#fff" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y+rowH/2+1, label)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">0</text><text x="%d" y="%d" text-anchor="end">%.1f ms</text>`+"\n", left, h-8, left+width, h-8, 1e3*span)
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// TraceSummary is what a timeline's JSON says beside its events: the
// schedule, and every stage's idle fraction with the schedule's ideal
// bubble (Pipeline.Bubble).
type TraceSummary struct {
	Title        string    `json:"title"`
	Schedule     string    `json:"schedule"`
	Stages       int       `json:"stages"`
	Chunks       int       `json:"chunks_per_stage"`
	Microbatches int       `json:"microbatches"`
	Idle         []float64 `json:"idle_per_stage"`
	IdealBubble  float64   `json:"ideal_bubble"`
}

// traceEvent is one record of the Chrome trace event format, which
// chrome://tracing and Perfetto open: "X" a complete event (ts and dur in
// microseconds), "M" metadata naming the process or a thread.
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteTimelineTrace writes events as a Chrome trace (JSON): one thread
// per stage, a complete event per forward (F), backward (B) and weight
// pass (W) of each microbatch, times in microseconds from the earliest start, and the
// summary under otherData.
func WriteTimelineTrace(path string, events []Event, sum TraceSummary) error {
	if len(events) == 0 {
		return fmt.Errorf("timeline: no events (no full batch was trained)")
	}
	t0, _ := span(events)
	out := []traceEvent{{Name: "process_name", Ph: "M", Args: map[string]any{"name": sum.Title}}}
	for s := range sum.Stages {
		out = append(out, traceEvent{Name: "thread_name", Ph: "M", Tid: s, Args: map[string]any{"name": fmt.Sprintf("stage %d", s)}})
	}
	chunks := chunksOf(events)
	for _, e := range events {
		args := map[string]any{"microbatch": e.Micro}
		if chunks > 1 {
			args["chunk"] = e.Chunk*sum.Stages + e.Stage // the model's
		}
		out = append(out, traceEvent{Name: e.label(chunks), Cat: e.Pass.category(), Ph: "X", Tid: e.Stage,
			Ts: float64(e.Start.Sub(t0).Nanoseconds()) / 1e3, Dur: float64(e.End.Sub(e.Start).Nanoseconds()) / 1e3,
			Args: args})
	}
	doc := struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
		OtherData       TraceSummary `json:"otherData"`
	}{out, "ms", sum}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// tracePath is where a timeline drawn at path writes its trace: the same
// name ending in .json.
func tracePath(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".json"
}

// span returns the earliest start and the latest end of events (at
// least one).
func span(events []Event) (start, end time.Time) {
	start, end = events[0].Start, events[0].End
	for _, e := range events {
		if e.Start.Before(start) {
			start = e.Start
		}
		if e.End.After(end) {
			end = e.End
		}
	}
	return start, end
}
