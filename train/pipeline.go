package train

import (
	"context"
	"fmt"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
)

// Message tags between neighbouring stages.
const (
	tagActivation = 1
	tagGradient   = 2
)

// Pipeline runs this rank's stage of a pipeline-parallel model with the
// GPipe schedule: each batch is cut into microbatches; every microbatch
// goes forward through the stages (activations sent on with asynchronous
// Send, the next one's received while this one computes), then every
// microbatch comes back (gradients of the activations sent back), the
// stage's parameter gradients accumulating; then one optimizer step. Each
// microbatch in flight has its own replica of the stage's layers
// (nn.Replicate: shared parameters, own activations). The last stage
// computes the loss, weighting each microbatch by its share of the batch,
// so the gradients are those of the whole batch.
type Pipeline struct {
	g              *comm.Group // rank = stage
	stage, stages  int
	micro          int
	schedule       string // "gpipe" or "1f1b"
	layer          nn.Layer
	replicas       []nn.Layer
	losses         []*nn.Loss
	inShape        []int // per-sample input of this stage
	outShape       []int // per-sample output
	inBufs, dyBufs []*tensor.Tensor
	xViews         []*tensor.Tensor // stage 0: microbatch views of the batch
	scales         []*tensor.Tensor
	be             tensor.Backend

	// Timeline of the last step, the last full batch's, and totals for
	// the bubble fraction.
	Events      []Event
	fullEvents  []Event
	busy, total time.Duration
}

// Event is one forward or backward of one microbatch on one stage.
type Event struct {
	Stage, Micro int
	Backward     bool
	Start, End   time.Time
}

// StageLayers splits m into stages: its own Stages when there are
// exactly stages of them, else its top-level children cut into stages
// contiguous groups with parameter counts as even as possible (each
// group keeps the children's names, so a stage's state names are the
// whole model's).
func StageLayers(m *zoo.Model, stages int) ([]nn.Layer, error) {
	if len(m.Stages) == stages {
		return m.Stages, nil
	}
	c, ok := m.Net.(*nn.Chain)
	if !ok || len(c.Layers) < stages {
		return nil, fmt.Errorf("model %s cannot be split into %d stages", m.Name, stages)
	}
	weights := make([]int, len(c.Layers))
	total := 0
	for i, l := range c.Layers {
		for _, p := range nn.Params(l) {
			weights[i] += p.Value.Len()
		}
		weights[i]++ // every child costs something
		total += weights[i]
	}
	// Greedy contiguous cut: close a stage once it holds its share.
	var out []nn.Layer
	start, acc := 0, 0
	for i := range c.Layers {
		acc += weights[i]
		left := len(c.Layers) - i - 1
		need := stages - len(out) - 1
		if need > 0 && (acc*stages >= total*(len(out)+1) || left == need) {
			out = append(out, nn.NewChain(children(c, start, i+1)...))
			start = i + 1
		}
	}
	out = append(out, nn.NewChain(children(c, start, len(c.Layers))...))
	return out, nil
}

func children(c *nn.Chain, lo, hi int) []nn.Child {
	var ch []nn.Child
	for i := lo; i < hi; i++ {
		ch = append(ch, nn.Child{Name: c.Names[i], Layer: c.Layers[i]})
	}
	return ch
}

// NewPipeline sets up stage g.Rank() of stages for m, with micro
// microbatches per batch. Every rank builds the whole model (the same
// weights from the same seed) and keeps its stage.
func NewPipeline(g *comm.Group, be tensor.Backend, m *zoo.Model, stages []nn.Layer, micro int, schedule string) (*Pipeline, error) {
	switch schedule {
	case "", "gpipe":
		schedule = "gpipe"
	case "1f1b":
	default:
		return nil, fmt.Errorf("pipeline: schedule %q: want gpipe or 1f1b", schedule)
	}
	if g.Size() != len(stages) {
		return nil, fmt.Errorf("pipeline: %d stages need %d ranks, the job has %d", len(stages), len(stages), g.Size())
	}
	if micro < 1 {
		return nil, fmt.Errorf("pipeline: %d microbatches", micro)
	}
	p := &Pipeline{g: g, stage: g.Rank(), stages: len(stages), micro: micro, layer: stages[g.Rank()], be: be, schedule: schedule}
	// Shapes between stages, from one sample through the whole model.
	x := tensor.New(append([]int{1}, m.Input...)...)
	m.Net.SetTraining(false)
	for i, s := range stages {
		if i == p.stage {
			p.inShape = append([]int(nil), x.Shape[1:]...)
		}
		y, err := s.Forward(x)
		if err != nil {
			return nil, fmt.Errorf("pipeline: stage %d on a %v sample: %w", i, m.Input, err)
		}
		if i == p.stage {
			p.outShape = append([]int(nil), y.Shape[1:]...)
		}
		x = tensor.New(y.Shape...)
		copy(x.Data, y.Data)
	}
	m.Net.SetTraining(true)
	// GPipe holds every microbatch's activations until the backwards;
	// 1F1B at most p−s on stage s, so it needs only that many replicas.
	slots := micro
	if schedule == "1f1b" {
		slots = min(micro, p.stages-p.stage)
	}
	for k := range slots {
		r := p.layer
		if k > 0 {
			var err error
			if r, err = nn.Replicate(p.layer); err != nil {
				return nil, err
			}
		}
		p.replicas = append(p.replicas, r)
		p.inBufs = append(p.inBufs, &tensor.Tensor{})
		p.dyBufs = append(p.dyBufs, &tensor.Tensor{})
		p.xViews = append(p.xViews, &tensor.Tensor{})
		p.scales = append(p.scales, &tensor.Tensor{})
	}
	if p.last() {
		for range micro {
			p.losses = append(p.losses, m.NewLoss(be))
		}
	}
	return p, nil
}

func (p *Pipeline) last() bool { return p.stage == p.stages-1 }

// Stage returns this rank's stage index.
func (p *Pipeline) Stage() int { return p.stage }

// Layer returns this rank's stage.
func (p *Pipeline) Layer() nn.Layer { return p.layer }

// split returns the microbatch sizes of a batch of n, as torch.chunk cuts
// it: ⌈n/m⌉ each, the last smaller, perhaps fewer than m.
func (p *Pipeline) split(n int) []int {
	per := (n + p.micro - 1) / p.micro
	var sizes []int
	for left := n; left > 0; left -= per {
		sizes = append(sizes, min(per, left))
	}
	return sizes
}

func shaped(t *tensor.Tensor, data []float32, n int, sample []int) *tensor.Tensor {
	t.Shape = append(append(t.Shape[:0], n), sample...)
	t.Data = data[:n*tensor.Volume(sample)]
	return t
}

func reuseShaped(t *tensor.Tensor, n int, sample []int) *tensor.Tensor {
	vol := n * tensor.Volume(sample)
	if cap(t.Data) < vol {
		t.Data = make([]float32, vol)
	}
	return shaped(t, t.Data[:cap(t.Data)], n, sample)
}

// Step runs one batch through the pipeline: x is the batch (used by stage
// 0), labels its labels (used by the last stage). It returns the batch's
// mean loss on the last stage (0 elsewhere). Gradients accumulate into the
// stage's parameters; the caller steps the optimizer.
func (p *Pipeline) Step(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error) {
	if p.schedule == "1f1b" {
		return p.step1F1B(ctx, x, labels)
	}
	n := len(labels)
	sizes := p.split(n)
	stepStart := time.Now()
	p.Events = p.Events[:0]
	var sends []*comm.Work
	var loss float32
	// Forward: receive microbatch k+1 while computing k.
	var recv *comm.Work
	post := func(k int, tag int, bufs []*tensor.Tensor, shape []int, src int) *comm.Work {
		t := reuseShaped(bufs[k], sizes[k], shape)
		return p.g.RecvAsync(ctx, t.Data, src, tag)
	}
	if p.stage > 0 {
		recv = post(0, tagActivation, p.inBufs, p.inShape, p.stage-1)
	}
	off := 0
	for k, nk := range sizes {
		var in *tensor.Tensor
		if p.stage == 0 {
			per := tensor.Volume(p.inShape)
			in = shaped(p.xViews[k], x.Data[off*per:], nk, p.inShape)
		} else {
			if err := recv.Wait(); err != nil {
				return 0, fmt.Errorf("stage %d: receiving microbatch %d from stage %d: %w", p.stage, k, p.stage-1, err)
			}
			in = p.inBufs[k]
			if k+1 < len(sizes) {
				recv = post(k+1, tagActivation, p.inBufs, p.inShape, p.stage-1)
			}
		}
		t0 := time.Now()
		y, err := p.replicas[k].Forward(in)
		if err != nil {
			return 0, fmt.Errorf("stage %d microbatch %d: forward: %w", p.stage, k, err)
		}
		if p.last() {
			l, err := p.losses[k].Forward(y, labels[off:off+nk])
			if err != nil {
				return 0, fmt.Errorf("stage %d microbatch %d: loss: %w", p.stage, k, err)
			}
			loss += l * float32(nk) / float32(n)
		}
		p.Events = append(p.Events, Event{Stage: p.stage, Micro: k, Start: t0, End: time.Now()})
		if !p.last() {
			sends = append(sends, p.g.SendAsync(ctx, y.Data, p.stage+1, tagActivation))
		}
		off += nk
	}
	// Backward, last microbatch first.
	if !p.last() {
		recv = post(len(sizes)-1, tagGradient, p.dyBufs, p.outShape, p.stage+1)
	}
	for k := len(sizes) - 1; k >= 0; k-- {
		var dy *tensor.Tensor
		if p.last() {
			g, err := p.losses[k].Backward()
			if err != nil {
				return 0, err
			}
			// d(batch mean)/dy = (n_k/n)·d(microbatch mean)/dy.
			s := tensor.Reuse(&p.scales[k], g.Shape...)
			p.be.Fill(s, float32(sizes[k])/float32(n))
			p.be.Mul(g, s, g)
			dy = g
		} else {
			if err := recv.Wait(); err != nil {
				return 0, fmt.Errorf("stage %d: receiving the gradient of microbatch %d from stage %d: %w", p.stage, k, p.stage+1, err)
			}
			dy = p.dyBufs[k]
			if k > 0 {
				recv = post(k-1, tagGradient, p.dyBufs, p.outShape, p.stage+1)
			}
		}
		t0 := time.Now()
		dx, err := p.replicas[k].Backward(dy)
		if err != nil {
			return 0, fmt.Errorf("stage %d microbatch %d: backward: %w", p.stage, k, err)
		}
		p.Events = append(p.Events, Event{Stage: p.stage, Micro: k, Backward: true, Start: t0, End: time.Now()})
		if p.stage > 0 {
			sends = append(sends, p.g.SendAsync(ctx, dx.Data, p.stage-1, tagGradient))
		}
	}
	if err := p.waitSends(sends); err != nil {
		return 0, err
	}
	p.account(stepStart, len(sizes))
	return loss, nil
}

// waitSends waits for the step's sends to complete.
func (p *Pipeline) waitSends(sends []*comm.Work) error {
	for _, w := range sends {
		if err := w.Wait(); err != nil {
			return fmt.Errorf("stage %d: sending: %w", p.stage, err)
		}
	}
	return nil
}

// account adds a finished step to the idle-time totals and keeps its
// events when the batch was full.
func (p *Pipeline) account(stepStart time.Time, micro int) {
	for _, e := range p.Events {
		p.busy += e.End.Sub(e.Start)
	}
	p.total += time.Since(stepStart)
	if micro == p.micro {
		p.fullEvents = append(p.fullEvents[:0], p.Events...)
	}
}

// Bubble returns, for every stage, the fraction of its step time spent
// not computing (waiting for its neighbours), measured over all steps so
// far, and the GPipe ideal (p−1)/(m+p−1). Every stage must call it (the
// stages exchange their figures).
func (p *Pipeline) Bubble(ctx context.Context) (idle []float64, ideal float64, err error) {
	times := make([]float64, 2*p.stages)
	times[2*p.stage], times[2*p.stage+1] = p.busy.Seconds(), p.total.Seconds()
	if err := comm.AllReduce(ctx, p.g, times, comm.Sum); err != nil {
		return nil, 0, fmt.Errorf("pipeline: gathering the stages' times: %w", err)
	}
	for s := range p.stages {
		busy, total := times[2*s], times[2*s+1]
		idle = append(idle, 1-busy/max(total, 1e-9))
	}
	return idle, float64(p.stages-1) / float64(p.micro+p.stages-1), nil
}

// Forward runs an evaluation batch through the pipeline in one piece and
// returns the model's output on the last stage (nil elsewhere).
func (p *Pipeline) Forward(ctx context.Context, x *tensor.Tensor, n int) (*tensor.Tensor, error) {
	in := x
	if p.stage > 0 {
		in = reuseShaped(p.inBufs[0], n, p.inShape)
		if err := p.g.Recv(ctx, in.Data, p.stage-1, tagActivation); err != nil {
			return nil, fmt.Errorf("stage %d: receiving from stage %d: %w", p.stage, p.stage-1, err)
		}
	}
	y, err := p.replicas[0].Forward(in)
	if err != nil {
		return nil, fmt.Errorf("stage %d: forward: %w", p.stage, err)
	}
	if p.last() {
		return y, nil
	}
	if err := p.g.Send(ctx, y.Data, p.stage+1, tagActivation); err != nil {
		return nil, fmt.Errorf("stage %d: sending to stage %d: %w", p.stage, p.stage+1, err)
	}
	return nil, nil
}

// SetTraining switches every replica of the stage.
func (p *Pipeline) SetTraining(training bool) {
	for _, r := range p.replicas {
		r.SetTraining(training)
	}
}

// step1F1B runs one batch with the 1F1B schedule: stage s first runs
// p−s−1 forwards, then alternates one forward and one backward, then
// drains the remaining backwards, so at most p−s microbatches' activations
// are alive at once (replica slots are reused, microbatch k in slot
// k mod slots). Backwards run in microbatch order.
func (p *Pipeline) step1F1B(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error) {
	n := len(labels)
	sizes := p.split(n)
	stepStart := time.Now()
	p.Events = p.Events[:0]
	slots := len(p.replicas)
	offs := make([]int, len(sizes)+1)
	for k, nk := range sizes {
		offs[k+1] = offs[k] + nk
	}
	var sends []*comm.Work
	var loss float32
	forward := func(k int) error {
		slot := k % slots
		var in *tensor.Tensor
		if p.stage == 0 {
			per := tensor.Volume(p.inShape)
			in = shaped(p.xViews[slot], x.Data[offs[k]*per:], sizes[k], p.inShape)
		} else {
			in = reuseShaped(p.inBufs[slot], sizes[k], p.inShape)
			if err := p.g.Recv(ctx, in.Data, p.stage-1, tagActivation); err != nil {
				return fmt.Errorf("stage %d: receiving microbatch %d from stage %d: %w", p.stage, k, p.stage-1, err)
			}
		}
		t0 := time.Now()
		y, err := p.replicas[slot].Forward(in)
		if err != nil {
			return fmt.Errorf("stage %d microbatch %d: forward: %w", p.stage, k, err)
		}
		if p.last() {
			l, err := p.losses[k].Forward(y, labels[offs[k]:offs[k+1]])
			if err != nil {
				return fmt.Errorf("stage %d microbatch %d: loss: %w", p.stage, k, err)
			}
			loss += l * float32(sizes[k]) / float32(n)
		}
		p.Events = append(p.Events, Event{Stage: p.stage, Micro: k, Start: t0, End: time.Now()})
		if !p.last() {
			sends = append(sends, p.g.SendAsync(ctx, y.Data, p.stage+1, tagActivation))
		}
		return nil
	}
	backward := func(k int) error {
		slot := k % slots
		var dy *tensor.Tensor
		if p.last() {
			g, err := p.losses[k].Backward()
			if err != nil {
				return err
			}
			sc := tensor.Reuse(&p.scales[slot], g.Shape...)
			p.be.Fill(sc, float32(sizes[k])/float32(n))
			p.be.Mul(g, sc, g)
			dy = g
		} else {
			dy = reuseShaped(p.dyBufs[slot], sizes[k], p.outShape)
			if err := p.g.Recv(ctx, dy.Data, p.stage+1, tagGradient); err != nil {
				return fmt.Errorf("stage %d: receiving the gradient of microbatch %d from stage %d: %w", p.stage, k, p.stage+1, err)
			}
		}
		t0 := time.Now()
		dx, err := p.replicas[slot].Backward(dy)
		if err != nil {
			return fmt.Errorf("stage %d microbatch %d: backward: %w", p.stage, k, err)
		}
		p.Events = append(p.Events, Event{Stage: p.stage, Micro: k, Backward: true, Start: t0, End: time.Now()})
		if p.stage > 0 {
			// The sent gradient lives in the slot's replica until it is
			// reused: wait for it then (below) or at the end.
			sends = append(sends, p.g.SendAsync(ctx, dx.Data, p.stage-1, tagGradient))
		}
		return nil
	}
	m := len(sizes)
	warm := min(p.stages-p.stage-1, m)
	for k := range warm {
		if err := forward(k); err != nil {
			return 0, err
		}
	}
	for k := 0; k < m-warm; k++ {
		// A slot's buffers are about to be reused: its earlier sends must
		// be done.
		if err := p.waitSends(sends); err != nil {
			return 0, err
		}
		sends = sends[:0]
		if err := forward(warm + k); err != nil {
			return 0, err
		}
		if err := backward(k); err != nil {
			return 0, err
		}
	}
	for k := m - warm; k < m; k++ {
		if err := backward(k); err != nil {
			return 0, err
		}
	}
	if err := p.waitSends(sends); err != nil {
		return 0, err
	}
	p.account(stepStart, len(sizes))
	return loss, nil
}
