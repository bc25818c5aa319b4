package train

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
)

// stage returns this rank's pipeline stage, or nil without a pipeline.
func (t *Trainer) stage() *pipelineStage {
	s, _ := t.compute.(*pipelineStage)
	return s
}

// Bubble returns each pipeline stage's measured idle fraction and the
// GPipe ideal (nil without a pipeline). Every rank must call it.
func (t *Trainer) Bubble(ctx context.Context) (idle []float64, ideal float64, err error) {
	s := t.stage()
	if s == nil {
		return nil, 0, nil
	}
	return s.pipe.Bubble(ctx)
}

// WriteTimeline gathers the pipeline's last full batch from every stage
// and, on the last stage, draws it as an SVG at path, titled with the
// stages' idle fractions and the ideal bubble (from Bubble), and writes
// the same as a Chrome trace beside it (tracePath: the name ending in
// .json; a path ending in .json gets the trace only). Every rank must
// call it.
func (t *Trainer) WriteTimeline(ctx context.Context, path string, idle []float64, ideal float64) error {
	s := t.stage()
	if s == nil {
		return fmt.Errorf("--timeline needs a pipeline run")
	}
	p := s.pipe
	events, err := p.Timeline(ctx)
	if err != nil || !p.last() {
		return err
	}
	var parts []string
	for s, f := range idle {
		parts = append(parts, fmt.Sprintf("%d: %.0f%%", s, 100*f))
	}
	sched := p.schedule
	if v := len(p.chunks); v > 1 {
		sched = fmt.Sprintf("%s, %d chunks per stage", sched, v)
	}
	m := p.microbatches()
	title := fmt.Sprintf("%s, %d stages, %d microbatches: idle per stage %s (ideal bubble %.0f%%)", sched, p.stages, m, strings.Join(parts, ", "), 100*ideal)
	sum := TraceSummary{Title: title, Schedule: p.schedule, Stages: p.stages, Chunks: len(p.chunks), Microbatches: m, Idle: idle, IdealBubble: ideal}
	if err := WriteTimelineTrace(tracePath(path), events, sum); err != nil {
		return err
	}
	if filepath.Ext(path) == ".json" {
		return nil
	}
	return WriteTimelineSVG(path, events, p.stages, title)
}

// Summarize writes what a finished run measured beyond its epochs: on a
// pipeline, every stage's idle time (and, when timeline is set, the last
// batch's schedule drawn as an SVG there) and every stage's peak memory;
// otherwise this process's peak memory. Every rank must call it.
func (t *Trainer) Summarize(ctx context.Context, w io.Writer, timeline string) error {
	if t.stage() == nil {
		if timeline != "" {
			return fmt.Errorf("--timeline needs a pipeline run")
		}
		if dp, ok := t.sync.(*dataParallel); ok {
			delays, err := dp.ddp.ArrivalDelays(ctx)
			if err != nil {
				return err
			}
			parts := make([]string, len(delays))
			for r, d := range delays {
				parts[r] = fmt.Sprintf("rank %d %.1f ms", r, float64(d)/float64(time.Millisecond))
			}
			fmt.Fprintf(w, "Arrival at the gradient all-reduce, mean delay per step (the others waited that long for it): %s\n", strings.Join(parts, ", "))
		}
		if rss := PeakRSS(); rss > 0 {
			fmt.Fprintf(w, "Peak memory (RSS) = %.0f MiB\n", float64(rss)/(1<<20))
		}
		return nil
	}
	idle, ideal, err := t.Bubble(ctx)
	if err != nil {
		return err
	}
	if timeline != "" {
		if err := t.WriteTimeline(ctx, timeline, idle, ideal); err != nil {
			return err
		}
		if filepath.Ext(timeline) == ".json" {
			fmt.Fprintf(w, "Wrote the pipeline timeline to %s (Chrome trace: chrome://tracing, Perfetto)\n", timeline)
		} else {
			fmt.Fprintf(w, "Wrote the pipeline timeline to %s, and as a Chrome trace (chrome://tracing, Perfetto) to %s\n", timeline, tracePath(timeline))
		}
	}
	var parts []string
	for s, f := range idle {
		parts = append(parts, fmt.Sprintf("stage %d %.1f%%", s, 100*f))
	}
	_, formula := t.stage().pipe.IdealBubble()
	fmt.Fprintf(w, "Pipeline idle time per stage: %s (%s = %.1f%%)\n", strings.Join(parts, ", "), formula, 100*ideal)
	// Every stage's peak, on the reporting rank.
	g, p := t.job, t.cfg.Pipeline
	rss := make([]float64, g.Size())
	rss[g.Rank()] = float64(PeakRSS()) / (1 << 20)
	if err := comm.AllReduce(ctx, g, rss, comm.Sum); err != nil {
		return err
	}
	parts = parts[:0]
	for r, v := range rss {
		if g.Size() == p {
			parts = append(parts, fmt.Sprintf("stage %d %.0f MiB", r, v))
		} else {
			parts = append(parts, fmt.Sprintf("rank %d (pipeline %d stage %d) %.0f MiB", r, r/p, r%p, v))
		}
	}
	fmt.Fprintf(w, "Peak memory (RSS) per stage: %s\n", strings.Join(parts, ", "))
	return nil
}
