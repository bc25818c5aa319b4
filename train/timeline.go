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
	// A forward and a backward per microbatch, and its weight passes
	// (zero bubble) in at most 3m stretches: each is broken only by the
	// 2m forwards and backwards.
	per := 5 * p.micro
	buf := make([]float64, 4*per) // micro, pass, start, end (ns since the Unix epoch)
	for i, e := range p.fullEvents[:min(len(p.fullEvents), per)] {
		buf[4*i], buf[4*i+1], buf[4*i+2], buf[4*i+3] = float64(e.Micro), float64(e.Pass), float64(e.Start.UnixNano()), float64(e.End.UnixNano())
	}
	all := make([]float64, len(buf)*p.stages)
	if err := comm.AllGather(ctx, p.g, buf, all); err != nil {
		return nil, fmt.Errorf("pipeline: gathering the timeline: %w", err)
	}
	var events []Event
	for s := range p.stages {
		for i := range per {
			v := all[(s*per+i)*4:]
			if v[3] == 0 {
				continue // no full batch on that stage
			}
			events = append(events, Event{Stage: s, Micro: int(v[0]), Pass: Pass(v[1]),
				Start: time.Unix(0, int64(v[2])), End: time.Unix(0, int64(v[3]))})
		}
	}
	return events, nil
}

// colour is the pass's colour in the SVG timeline: forwards blue,
// backwards green, deferred weight passes orange.
func (k Pass) colour() string { return [...]string{"#4a90d9", "#5cb85c", "#f0ad4e"}[k] }

// category is the pass's category in the Chrome trace.
func (k Pass) category() string { return [...]string{"forward", "backward", "weights"}[k] }

// WriteTimelineSVG draws events as the GPipe schedule diagram: one row per
// stage, forwards blue, backwards green and weight passes orange, each
// labelled with its pass and microbatch (F3, B3, W3); idle time stays
// white.
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
	for _, e := range events {
		fill, label := e.Pass.colour(), fmt.Sprintf("%s%d", e.Pass.Letter(), e.Micro)
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
	for _, e := range events {
		name, cat := fmt.Sprintf("%s%d", e.Pass.Letter(), e.Micro), e.Pass.category()
		out = append(out, traceEvent{Name: name, Cat: cat, Ph: "X", Tid: e.Stage,
			Ts: float64(e.Start.Sub(t0).Nanoseconds()) / 1e3, Dur: float64(e.End.Sub(e.Start).Nanoseconds()) / 1e3,
			Args: map[string]any{"microbatch": e.Micro}})
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
