package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
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
	// Split[i] is the first piece of stage i+1; stage 0 starts at piece 0.
	Split []int
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

// Bounds returns the pieces [lo, hi) of stage s.
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

// Describe lists the stages, their layers and what was measured of them.
func (p *StagePlan) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Pipeline stages (cut by %s):", p.How)
	for s := range len(p.Split) + 1 {
		lo, hi := p.Bounds(s)
		params, secs := 0, 0.0
		for i := lo; i < hi; i++ {
			params += p.Params[i]
			secs += p.Seconds[i]
		}
		first, last := p.label(lo), p.label(hi-1)
		layers := first
		if hi-lo > 1 {
			layers = first + "…" + last
		}
		fmt.Fprintf(&b, "\n  stage %d: layers %d–%d (%s), %d parameters", s, lo, hi-1, layers, params)
		if secs > 0 {
			fmt.Fprintf(&b, ", %.1f ms forward+backward per microbatch of %d", 1e3*secs, p.Microbatch)
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

// planStages decides the stages of a pipeline of size stages over spec's
// pieces. Rank 0 of g builds the pieces one at a time (never the whole
// model), runs a microbatch through each to learn the shapes between them
// and, for balance "time", times forward and backward; it broadcasts what
// it found, and every rank cuts the same way: at split when given, at the
// model's own stages when it has that many, else into contiguous groups
// whose largest cost (time, or parameter count) is as small as possible.
func planStages(ctx context.Context, g *comm.Group, be tensor.Backend, spec *zoo.Spec, seed uint64, stages, microbatch int, balance string, split []int) (*StagePlan, error) {
	pieces := spec.Pieces()
	n := len(pieces)
	if n < stages {
		return nil, fmt.Errorf("pipeline: model %s has %d layers; it cannot be split into %d stages", spec.Name, n, stages)
	}
	how := ""
	switch {
	case len(split) > 0:
		if err := checkSplit(split, stages, n); err != nil {
			return nil, err
		}
		how = "--split"
	case spec.Staged && n == stages:
		split = make([]int, stages-1)
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
	p := &StagePlan{How: how, Microbatch: microbatch, Shapes: make([][]int, n), Params: make([]int, n), Seconds: make([]float64, n)}
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
		split = partition(costs, stages)
	}
	p.Split = split
	return p, nil
}

// checkSplit validates explicit split points.
func checkSplit(split []int, stages, parts int) error {
	if len(split) != stages-1 {
		return fmt.Errorf("pipeline: split %v: %d stages need %d split points", split, stages, stages-1)
	}
	prev := 0
	for _, s := range split {
		if s <= prev || s >= parts {
			return fmt.Errorf("pipeline: split %v: points must increase strictly within 1..%d (the model has %d layers)", split, parts-1, parts)
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
