package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
)

// StagePlan says how a model's pieces (zoo.Spec's Pieces: its top-level
// layers, and the residual blocks of a ResNet's stages one by one) are cut
// into pipeline stages, and what was measured to decide.
type StagePlan struct {
	// Split[i] is the first piece of stage i+1 (with several chunks per
	// stage: of chunk i+1); stage 0 starts at piece 0.
	Split []int
	// Stages is the number of pipeline stages; Chunks, how many chunks of
	// the model each holds (1, or more with the interleaved schedule:
	// chunk c is on stage c mod Stages).
	Stages, Chunks int
	// How names what decided the cut: the model's own stages, --split,
	// measured time or parameter count.
	How string
	// Shapes[i] is piece i's per-sample output shape.
	Shapes [][]int
	// Params[i] is piece i's parameter count.
	Params []int
	// Seconds[i] is piece i's measured forward+backward time on one
	// microbatch (zero when time was not measured).
	Seconds []float64
	// Microbatch is the number of samples the probe ran.
	Microbatch int
	names      []string
}

// Bounds returns the pieces [lo, hi) of chunk s (with one chunk per
// stage: of stage s).
func (p *StagePlan) Bounds(s int) (lo, hi int) {
	lo, hi = 0, len(p.Shapes)
	if s > 0 {
		lo = p.Split[s-1]
	}
	if s < len(p.Split) {
		hi = p.Split[s]
	}
	return lo, hi
}

// Describe lists the stages (or chunks), their layers and what was
// measured of them.
func (p *StagePlan) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Pipeline stages (cut by %s):", p.How)
	stages := max(p.Stages, 1)
	stageSecs := make([]float64, stages)
	for c := range len(p.Split) + 1 {
		lo, hi := p.Bounds(c)
		params, secs := 0, 0.0
		for i := lo; i < hi; i++ {
			params += p.Params[i]
			secs += p.Seconds[i]
		}
		stageSecs[c%stages] += secs
		first, last := p.label(lo), p.label(hi-1)
		layers := first
		if hi-lo > 1 {
			layers = first + "…" + last
		}
		if p.Chunks > 1 {
			fmt.Fprintf(&b, "\n  chunk %d (stage %d)", c, c%stages)
		} else {
			fmt.Fprintf(&b, "\n  stage %d", c)
		}
		fmt.Fprintf(&b, ": layers %d–%d (%s), %d parameters", lo, hi-1, layers, params)
		if secs > 0 {
			fmt.Fprintf(&b, ", %.1f ms forward+backward per microbatch of %d", 1e3*secs, p.Microbatch)
		}
	}
	if p.Chunks > 1 && stageSecs[0] > 0 {
		for s, secs := range stageSecs {
			fmt.Fprintf(&b, "\n  stage %d: %.1f ms per microbatch in all", s, 1e3*secs)
		}
	}
	return b.String()
}

func (p *StagePlan) label(i int) string {
	if i < len(p.names) {
		return p.names[i]
	}
	return fmt.Sprintf("#%d", i)
}

// planStages decides the stages of a pipeline of size stages, each
// holding chunks chunks (1, or more for the interleaved schedule), over
// spec's pieces for steps of micro microbatches of microbatch samples: it
// cuts them into stages·chunks parts. Rank 0 of g builds the pieces one at a time (never the whole
// model), runs a microbatch through each to learn the shapes between them
// and, for balance "time", times forward and backward; it broadcasts what
// it found, and every rank cuts the same way: at split when given, at the
// model's own stages when it has that many, else into contiguous groups
// whose largest cost (time, or parameter count) is as small as possible.
func planStages(ctx context.Context, g *comm.Group, be tensor.Backend, spec *zoo.Spec, seed uint64, stages, chunks, micro, microbatch int, balance string, split []int) (*StagePlan, error) {
	pieces := spec.Pieces()
	n, parts := len(pieces), stages*chunks
	if n < parts {
		into := fmt.Sprintf("%d stages", stages)
		if chunks > 1 {
			into = fmt.Sprintf("%d chunks (%d stages of %d)", parts, stages, chunks)
		}
		return nil, fmt.Errorf("pipeline: model %s has %d layers; it cannot be split into %s", spec.Name, n, into)
	}
	how := ""
	switch {
	case len(split) > 0:
		if err := checkSplit(split, parts, n); err != nil {
			return nil, err
		}
		how = "--split"
	case spec.Staged && n == parts:
		split = make([]int, parts-1)
		for i := range split {
			split[i] = i + 1
		}
		how = "the model's own stages"
	case balance == "params":
		how = "parameter count"
	default:
		how = "measured time"
	}
	timed := how == "measured time"

	// Rank 0 probes; the others receive its findings: per part, seconds,
	// parameters, output rank and up to 3 dimensions. A NaN first word
	// says the probe failed.
	const per = 6
	msg := make([]float64, n*per)
	var probeErr error
	if g.Rank() == 0 {
		var plan *StagePlan
		mb := microbatch
		if !timed {
			mb = 1 // shapes only
		}
		plan, probeErr = probe(be, spec, seed, mb, timed)
		if probeErr != nil {
			msg[0] = math.NaN()
		} else {
			for i := range n {
				w := msg[i*per : (i+1)*per]
				w[0], w[1], w[2] = plan.Seconds[i], float64(plan.Params[i]), float64(len(plan.Shapes[i]))
				for d, v := range plan.Shapes[i] {
					w[3+d] = float64(v)
				}
			}
		}
	}
	if err := comm.Broadcast(ctx, g, msg, 0); err != nil {
		return nil, fmt.Errorf("pipeline: sharing the stage measurements: %w", err)
	}
	if probeErr != nil {
		return nil, probeErr
	}
	if math.IsNaN(msg[0]) {
		return nil, fmt.Errorf("pipeline: rank 0 could not run the model's layers to plan the stages (its log says why)")
	}
	p := &StagePlan{How: how, Stages: stages, Chunks: chunks, Microbatch: microbatch, Shapes: make([][]int, n), Params: make([]int, n), Seconds: make([]float64, n)}
	for i := range n {
		w := msg[i*per : (i+1)*per]
		p.Seconds[i], p.Params[i] = w[0], int(w[1])
		for d := range int(w[2]) {
			p.Shapes[i] = append(p.Shapes[i], int(w[3+d]))
		}
		p.names = append(p.names, spec.PieceLabel(pieces[i]))
	}
	if split == nil {
		costs := make([]float64, n)
		for i := range costs {
			if timed {
				costs[i] = p.Seconds[i]
			} else {
				costs[i] = float64(p.Params[i] + 1) // every layer costs something
			}
		}
		split = partitionChunks(costs, stages, chunks, micro)
	}
	p.Split = split
	return p, nil
}

// checkSplit validates explicit split points cutting pieces into parts.
func checkSplit(split []int, parts, pieces int) error {
	if len(split) != parts-1 {
		return fmt.Errorf("pipeline: split %v: %d parts (stages, or chunks with the interleaved schedule) need %d split points", split, parts, parts-1)
	}
	prev := 0
	for _, s := range split {
		if s <= prev || s >= pieces {
			return fmt.Errorf("pipeline: split %v: points must increase strictly within 1..%d (the model has %d layers)", split, pieces-1, pieces)
		}
		prev = s
	}
	return nil
}

// probe builds spec's pieces one at a time with seed's weights and runs a
// microbatch of mb random samples through them: output shapes, parameter
// counts and, when timed, the best of two forward+backward times after a
// warm-up. Only one piece exists at a time.
func probe(be tensor.Backend, spec *zoo.Spec, seed uint64, mb int, timed bool) (*StagePlan, error) {
	pieces := spec.Pieces()
	n := len(pieces)
	p := &StagePlan{Shapes: make([][]int, n), Params: make([]int, n), Seconds: make([]float64, n)}
	rng := rand.New(rand.NewPCG(seed, 0x70726f6265))
	x := tensor.New(append([]int{mb}, spec.Input...)...)
	for i := range x.Data {
		x.Data[i] = float32(rng.NormFloat64())
	}
	for i := range n {
		l := spec.BuildPieces(be, seed, i, i+1)
		label := spec.PieceLabel(pieces[i])
		// Shapes alone come from an evaluation pass: in training, batch
		// norm needs more than one value per channel, which a sample at
		// a ResNet's 1×1 end (CIFAR-sized input) does not have.
		l.SetTraining(timed)
		for _, v := range nn.Params(l) {
			p.Params[i] += v.Value.Len()
		}
		reps := 1
		if timed {
			reps = 3
		}
		var y, xd, dyd *tensor.Tensor
		best := math.Inf(1)
		for r := range reps {
			t0 := time.Now()
			var err error
			if y, err = l.Forward(onDevice(be, x, &xd)); err != nil {
				return nil, fmt.Errorf("pipeline: planning stages: layer %d (%s) on %v: %w", i, label, x.Shape, err)
			}
			if timed {
				dy := tensor.New(y.Shape...)
				for j := range dy.Data {
					dy.Data[j] = 1
				}
				if _, err := l.Backward(onDevice(be, dy, &dyd)); err != nil {
					return nil, fmt.Errorf("pipeline: planning stages: layer %d (%s) backward: %w", i, label, err)
				}
				if d, ok := be.(tensor.DeviceBackend); ok { // time the work, not its queuing
					if err := d.Synchronize(); err != nil {
						return nil, fmt.Errorf("pipeline: planning stages: layer %d (%s): %w", i, label, err)
					}
				}
			}
			if d := time.Since(t0).Seconds(); r > 0 && d < best {
				best = d
			}
		}
		if timed {
			p.Seconds[i] = best
		}
		p.Shapes[i] = append([]int(nil), y.Shape[1:]...)
		if err := deviceErr(be); err != nil {
			return nil, fmt.Errorf("pipeline: planning stages: layer %d (%s): %w", i, label, err)
		}
		x = &tensor.Tensor{Shape: append([]int(nil), y.Shape...), Data: y.HostData()}
	}
	return p, nil
}

// partitionChunks cuts costs (per microbatch) into stages·chunks
// contiguous non-empty chunks, chunk c going to stage c mod stages, for a
// step of micro microbatches, and returns where each chunk after the
// first starts. A step of the interleaved schedule takes about micro·S +
// (stages−1)·C, S the largest stage's sum and C the largest chunk's: the
// stages work through every microbatch, and the warm-up and cool-down
// take a chunk's time per stage. With one chunk per stage that is
// partition's cut; with more, the cuts are searched through, pruning
// every cut that is already as slow as the best found, starting from
// partition's cut into chunks (even chunks alone are not enough: two
// heavy layers may land on one stage); a search longer than budget steps
// keeps the best found so far.
func partitionChunks(costs []float64, stages, chunks, micro int) []int {
	k, n := stages*chunks, len(costs)
	best := partition(costs, k)
	if chunks == 1 {
		return best
	}
	m, fill := float64(micro), float64(stages-1)
	bestVal := stepTime(costs, best, stages, micro)
	prefix := make([]float64, n+1)
	for i, c := range costs {
		prefix[i+1] = prefix[i] + c
	}
	sums, cut := make([]float64, stages), make([]int, k-1)
	budget := 1 << 22
	var search func(c, lo int, largest float64)
	search = func(c, lo int, largest float64) {
		if budget--; budget < 0 {
			return
		}
		s := c % stages
		if c == k-1 { // the last chunk takes the rest
			add := prefix[n] - prefix[lo]
			worst := sums[s] + add
			for _, v := range sums {
				worst = max(worst, v)
			}
			if t := m*worst + fill*max(largest, add); t < bestVal {
				bestVal, best = t, slices.Clone(cut)
			}
			return
		}
		for hi := lo + 1; hi <= n-(k-1-c); hi++ {
			add := prefix[hi] - prefix[lo]
			if m*(sums[s]+add)+fill*max(largest, add) >= bestVal {
				break // costs are not negative: a longer chunk is slower
			}
			sums[s] += add
			cut[c] = hi
			search(c+1, hi, max(largest, add))
			sums[s] -= add
		}
	}
	search(0, 0, 0)
	return best
}

// stepTime is micro·S + (stages−1)·C for split (partitionChunks).
func stepTime(costs []float64, split []int, stages, micro int) float64 {
	return float64(micro)*maxStage(costs, split, stages) + float64(stages-1)*maxGroup(costs, split)
}

// maxStage is the largest stage's sum when split cuts costs into chunks
// dealt round the stages (chunk c to stage c mod stages).
func maxStage(costs []float64, split []int, stages int) float64 {
	sums := make([]float64, stages)
	bounds := append(append([]int{0}, split...), len(costs))
	for c := 1; c < len(bounds); c++ {
		for _, v := range costs[bounds[c-1]:bounds[c]] {
			sums[(c-1)%stages] += v
		}
	}
	return slices.Max(sums)
}

// maxGroup is the largest sum of the groups split cuts costs into.
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

// partition cuts costs into k contiguous non-empty groups so that the
// largest group sum is as small as possible, and returns the index where
// each group after the first starts. Ties go to the earliest cut.
func partition(costs []float64, k int) []int {
	n := len(costs)
	prefix := make([]float64, n+1)
	for i, c := range costs {
		prefix[i+1] = prefix[i] + c
	}
	// best[j][i]: the smallest largest sum cutting costs[:i] into j groups;
	// from[j][i]: where its last group starts.
	best := make([][]float64, k+1)
	from := make([][]int, k+1)
	for j := range best {
		best[j] = make([]float64, n+1)
		from[j] = make([]int, n+1)
		for i := range best[j] {
			best[j][i] = math.Inf(1)
		}
	}
	best[0][0] = 0
	for j := 1; j <= k; j++ {
		for i := j; i <= n; i++ {
			for s := j - 1; s < i; s++ {
				if v := math.Max(best[j-1][s], prefix[i]-prefix[s]); v < best[j][i] {
					best[j][i], from[j][i] = v, s
				}
			}
		}
	}
	split := make([]int, k-1)
	i := n
	for j := k; j > 1; j-- {
		i = from[j][i]
		split[j-2] = i
	}
	return split
}
