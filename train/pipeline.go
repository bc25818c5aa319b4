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
// (Layer.Replica: shared parameters, own activations; the gradient
// buffers of the backward passes, which run one at a time, come from one
// pool: nn.ShareBuffers). The last stage computes the loss, weighting each
// microbatch by its share of the batch, so the gradients are those of the
// whole batch. The 1F1B and zero-bubble schedules reorder the passes
// (run1F1B, runZeroBubble).
type Pipeline struct {
	g              *comm.Group // rank = stage
	stage, stages  int
	micro          int
	schedule       string // "gpipe", "1f1b" or "zb"
	layer          nn.Layer
	replicas       []nn.Layer
	losses         []*nn.Loss
	inShape        []int // per-sample input of this stage
	outShape       []int // per-sample output
	inBufs, dyBufs []*tensor.Tensor
	xViews         []*tensor.Tensor // stage 0: microbatch views of the batch
	scales         []*tensor.Tensor
	// On a GPU: the received (or stage 0's) inputs and received gradients
	// uploaded per slot, and per microbatch the host copies of what is
	// sent (kept until the sends finish at the step's end).
	inDev, dyDev    []*tensor.Tensor
	outHost, dxHost [][]float32
	be              tensor.Backend

	// The step in progress: the batch, its microbatch sizes and offsets,
	// the loss so far, the sends in flight.
	x      *tensor.Tensor
	labels []int32
	sizes  []int
	offs   []int
	loss   float32
	sends  []*comm.Work

	// Timeline of the last step, the last full batch's, and totals for
	// the bubble fraction.
	Events      []Event
	fullEvents  []Event
	busy, total time.Duration
}

// Event is one pass of one microbatch on one stage.
type Event struct {
	Stage, Micro int
	Pass         Pass
	Start, End   time.Time
}

// Pass is what an Event computed.
type Pass uint8

const (
	// PassForward is a forward pass.
	PassForward Pass = iota
	// PassBackward is a backward pass: with the zero-bubble schedule,
	// only the gradient of the stage's input (B); else the whole of it.
	PassBackward
	// PassWeights is the zero-bubble schedule's deferred pass for the
	// parameter gradients (W).
	PassWeights
)

// Letter is the pass's letter in timelines: F, B or W.
func (k Pass) Letter() string { return [...]string{"F", "B", "W"}[k] }

// NewPipeline sets up stage g.Rank() of a pipeline of g.Size() stages:
// layer is the stage's part of model m, taking per-sample inputs of shape
// in and giving out; micro microbatches per batch.
func NewPipeline(g *comm.Group, be tensor.Backend, m *zoo.Model, layer nn.Layer, in, out []int, micro int, schedule string) (*Pipeline, error) {
	switch schedule {
	case "", "gpipe":
		schedule = "gpipe"
	case "1f1b", "zb":
	default:
		return nil, fmt.Errorf("pipeline: schedule %q: want gpipe, 1f1b or zb", schedule)
	}
	if micro < 1 {
		return nil, fmt.Errorf("pipeline: %d microbatches", micro)
	}
	p := &Pipeline{g: g, stage: g.Rank(), stages: g.Size(), micro: micro, layer: layer, be: be, schedule: schedule,
		inShape: append([]int(nil), in...), outShape: append([]int(nil), out...)}
	// GPipe holds every microbatch's activations until the backwards;
	// 1F1B at most p−s on stage s, so it needs only that many replicas.
	slots := micro
	switch schedule {
	case "1f1b":
		slots = min(micro, p.stages-p.stage)
	case "zb":
		// One slot more than 1F1B's on every stage but the first, which
		// keeps its p: no stage holds more than 1F1B's busiest one, and a
		// weight pass can wait past the next forward (with p−s slots, the
		// last stage's would sit between each backward and the next
		// forward, on the critical path).
		slots = min(micro, p.stages, p.stages-p.stage+1)
		nn.DeferWeightGrads(p.layer, true)
	}
	for k := range slots {
		r := p.layer
		if k > 0 {
			r = p.layer.Replica()
		}
		p.replicas = append(p.replicas, r)
		p.inBufs = append(p.inBufs, &tensor.Tensor{})
		p.dyBufs = append(p.dyBufs, &tensor.Tensor{})
		p.xViews = append(p.xViews, &tensor.Tensor{})
		p.scales = append(p.scales, &tensor.Tensor{})
		p.inDev = append(p.inDev, nil)
		p.dyDev = append(p.dyDev, nil)
	}
	// The replicas' backward passes run one at a time: they borrow their
	// gradient buffers from one pool.
	nn.ShareBuffers(p.layer, p.replicas[1:]...)
	p.outHost, p.dxHost = make([][]float32, micro), make([][]float32, micro)
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
	p.begin(x, labels)
	stepStart := time.Now()
	var err error
	switch p.schedule {
	case "1f1b":
		err = p.run1F1B(ctx)
	case "zb":
		err = p.runZeroBubble(ctx)
	default:
		err = p.runGPipe(ctx)
	}
	if err == nil {
		err = p.waitSends()
	}
	if err != nil {
		return 0, err
	}
	p.account(stepStart)
	return p.loss, nil
}

// begin resets the per-step state for a batch: microbatch sizes as
// torch.chunk cuts it (⌈n/m⌉ each, the last smaller, perhaps fewer than m)
// and their offsets.
func (p *Pipeline) begin(x *tensor.Tensor, labels []int32) {
	p.x, p.labels, p.loss = x, labels, 0
	p.Events, p.sends = p.Events[:0], p.sends[:0]
	n := len(labels)
	per := (n + p.micro - 1) / p.micro
	p.sizes, p.offs = p.sizes[:0], append(p.offs[:0], 0)
	for left := n; left > 0; left -= per {
		p.sizes = append(p.sizes, min(per, left))
		p.offs = append(p.offs, p.offs[len(p.offs)-1]+min(per, left))
	}
}

// runGPipe runs every forward, then every backward (last microbatch
// first), each stage receiving the next microbatch while computing this one.
func (p *Pipeline) runGPipe(ctx context.Context) error {
	m := len(p.sizes)
	var recv *comm.Work
	if p.stage > 0 {
		recv = p.recvActivation(ctx, 0, 0)
	}
	for k := range m {
		if p.stage > 0 {
			if err := p.waitRecv(recv, "microbatch", k, p.stage-1); err != nil {
				return err
			}
			if k+1 < m {
				recv = p.recvActivation(ctx, k+1, k+1)
			}
		}
		if err := p.forward(ctx, k, k); err != nil {
			return err
		}
	}
	if !p.last() {
		recv = p.recvGradient(ctx, m-1, m-1)
	}
	for k := m - 1; k >= 0; k-- {
		if !p.last() {
			if err := p.waitRecv(recv, "the gradient of microbatch", k, p.stage+1); err != nil {
				return err
			}
			if k > 0 {
				recv = p.recvGradient(ctx, k-1, k-1)
			}
		}
		if err := p.backward(ctx, k, k); err != nil {
			return err
		}
	}
	return nil
}

// run1F1B runs stage s's p−s−1 warm-up forwards, then one forward and one
// backward in turn, then the remaining backwards, so at most p−s
// microbatches' activations are alive at once (microbatch k in replica
// slot k mod slots). Backwards run in microbatch order. Receives are made
// when needed: a slot's buffers are free only once its earlier microbatch
// went back.
func (p *Pipeline) run1F1B(ctx context.Context) error {
	m, slots := len(p.sizes), len(p.replicas)
	warm := min(p.stages-p.stage-1, m)
	fwd := func(k int) error { // receive into the slot, then compute
		if p.stage > 0 {
			if err := p.waitRecv(p.recvActivation(ctx, k, k%slots), "microbatch", k, p.stage-1); err != nil {
				return err
			}
		}
		return p.forward(ctx, k, k%slots)
	}
	bwd := func(k int) error {
		if !p.last() {
			if err := p.waitRecv(p.recvGradient(ctx, k, k%slots), "the gradient of microbatch", k, p.stage+1); err != nil {
				return err
			}
		}
		return p.backward(ctx, k, k%slots)
	}
	return p.inOneFOneBOrder(m, warm, fwd, bwd)
}

// inOneFOneBOrder runs m microbatches' forwards and backwards in 1F1B's
// order: warm forwards, then one forward and one backward in turn, then
// the remaining backwards.
func (p *Pipeline) inOneFOneBOrder(m, warm int, fwd, bwd func(k int) error) error {
	for k := range warm {
		if err := fwd(k); err != nil {
			return err
		}
	}
	for k := 0; k < m-warm; k++ {
		// A slot is about to be reused: its earlier sends must be done.
		if err := p.waitSends(); err != nil {
			return err
		}
		if err := fwd(warm + k); err != nil {
			return err
		}
		if err := bwd(k); err != nil {
			return err
		}
	}
	for k := m - warm; k < m; k++ {
		if err := bwd(k); err != nil {
			return err
		}
	}
	return nil
}

// runZeroBubble is 1F1B with each backward split (ZB-H1 of Qi et al.,
// "Zero Bubble Pipeline Parallelism", ICLR 2024): the backward pass
// computes only the gradient of the stage's input (B) and sends it back at
// once, so the stages before wait less; the parameter gradients (W) are
// deferred (nn.DeferWeightGrads) and run, in microbatch order and a
// layer at a time, whenever the next forward or backward would wait for
// its input from a neighbour, at the latest before a replica slot is
// reused, and the rest after the last backward. Forwards and backwards
// run in 1F1B's order; stage s holds at most min(p, p−s+1) microbatches
// (1F1B's busiest stage, the first, holds p); and the gradients
// accumulate in the order 1F1B accumulates them: the weights are the
// same, bit for bit. Weight passes only compute, so placing them
// anywhere cannot make the stages wait on each other in a cycle.
func (p *Pipeline) runZeroBubble(ctx context.Context) error {
	m, slots := len(p.sizes), len(p.replicas)
	warm := min(p.stages-p.stage-1, m)
	nextW, doneB := 0, 0 // the microbatch whose weight passes run next; backwards done
	// weights runs one layer's weight pass of microbatch nextW, or moves
	// on to the next microbatch when it has none left.
	weights := func() error {
		ran, err := p.weightsStep(nextW, nextW%slots)
		if !ran {
			nextW++
		}
		return err
	}
	// await waits for a receive, running deferred weight passes, a layer
	// at a time, while it has not arrived.
	await := func(w *comm.Work, what string, k, from int) error {
		if nextW < doneB {
			a := inBackground(w)
			for nextW < doneB && !a.ready() {
				if err := weights(); err != nil {
					return err
				}
			}
			w = a.work()
		}
		return p.waitRecv(w, what, k, from)
	}
	fwd := func(k int) error {
		// The slot's previous microbatch must be done with its buffers:
		// its weight pass reads them.
		for nextW <= k-slots {
			if err := weights(); err != nil {
				return err
			}
		}
		if p.stage > 0 {
			if err := await(p.recvActivation(ctx, k, k%slots), "microbatch", k, p.stage-1); err != nil {
				return err
			}
		}
		return p.forward(ctx, k, k%slots)
	}
	bwd := func(k int) error {
		if !p.last() {
			if err := await(p.recvGradient(ctx, k, k%slots), "the gradient of microbatch", k, p.stage+1); err != nil {
				return err
			}
		}
		if err := p.backward(ctx, k, k%slots); err != nil {
			return err
		}
		doneB = k + 1
		return nil
	}
	if err := p.inOneFOneBOrder(m, warm, fwd, bwd); err != nil {
		return err
	}
	for nextW < m {
		if err := weights(); err != nil {
			return err
		}
	}
	return nil
}

// arrival is a receive waited for on its own goroutine, so that a
// schedule can ask whether it has arrived without blocking.
type arrival struct {
	w    *comm.Work
	done chan struct{}
}

func inBackground(w *comm.Work) *arrival {
	a := &arrival{w: w, done: make(chan struct{})}
	go func() {
		w.Wait() // the error stays in w
		close(a.done)
	}()
	return a
}

func (a *arrival) ready() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// work returns the receive, to be waited for as usual.
func (a *arrival) work() *comm.Work { return a.w }

// weightsStep runs one layer's deferred weight pass of microbatch k in
// replica slot (nn.WeightGradsStep) and reports whether there was one.
// Steps run back to back make one W event.
func (p *Pipeline) weightsStep(k, slot int) (bool, error) {
	t0 := time.Now()
	if !nn.WeightGradsStep(p.replicas[slot]) {
		return false, nil
	}
	if n := len(p.Events); n > 0 && p.Events[n-1].Pass == PassWeights && p.Events[n-1].Micro == k {
		p.Events[n-1].End = time.Now()
	} else {
		p.Events = append(p.Events, Event{Stage: p.stage, Micro: k, Pass: PassWeights, Start: t0, End: time.Now()})
	}
	if err := deviceErr(p.be); err != nil {
		return true, fmt.Errorf("stage %d microbatch %d: weight gradients: %w", p.stage, k, err)
	}
	return true, nil
}

// recvActivation posts the receive of microbatch k's input into slot.
func (p *Pipeline) recvActivation(ctx context.Context, k, slot int) *comm.Work {
	t := reuseShaped(p.inBufs[slot], p.sizes[k], p.inShape)
	return p.g.RecvAsync(ctx, t.Data, p.stage-1, tagActivation)
}

// recvGradient posts the receive of microbatch k's output gradient into
// slot.
func (p *Pipeline) recvGradient(ctx context.Context, k, slot int) *comm.Work {
	t := reuseShaped(p.dyBufs[slot], p.sizes[k], p.outShape)
	return p.g.RecvAsync(ctx, t.Data, p.stage+1, tagGradient)
}

func (p *Pipeline) waitRecv(w *comm.Work, what string, k, from int) error {
	if err := w.Wait(); err != nil {
		return fmt.Errorf("stage %d: receiving %s %d from stage %d: %w", p.stage, what, k, from, err)
	}
	return nil
}

// forward computes microbatch k in replica slot (its input already
// received there, or a view of the batch on stage 0), then sends the
// output on or, on the last stage, adds its share of the loss.
func (p *Pipeline) forward(ctx context.Context, k, slot int) error {
	nk, off := p.sizes[k], p.offs[k]
	in := p.inBufs[slot]
	if p.stage == 0 {
		per := tensor.Volume(p.inShape)
		in = shaped(p.xViews[slot], p.x.Data[off*per:], nk, p.inShape)
	}
	t0 := time.Now()
	y, err := p.replicas[slot].Forward(onDevice(p.be, in, &p.inDev[slot]))
	if err != nil {
		return fmt.Errorf("stage %d microbatch %d: forward: %w", p.stage, k, err)
	}
	if p.last() {
		l, err := p.losses[k].Forward(y, p.labels[off:off+nk])
		if err != nil {
			return fmt.Errorf("stage %d microbatch %d: loss: %w", p.stage, k, err)
		}
		p.loss += l * float32(nk) / float32(len(p.labels))
	}
	p.Events = append(p.Events, Event{Stage: p.stage, Micro: k, Pass: PassForward, Start: t0, End: time.Now()})
	if !p.last() {
		p.sends = append(p.sends, p.g.SendAsync(ctx, hostRows(y, &p.outHost[k]), p.stage+1, tagActivation))
	}
	return deviceErr(p.be)
}

// backward takes microbatch k back through replica slot (its output
// gradient already received there, or from the loss on the last stage) and
// sends the input gradient back.
func (p *Pipeline) backward(ctx context.Context, k, slot int) error {
	dy := p.dyBufs[slot]
	if p.last() {
		g, err := p.losses[k].Backward()
		if err != nil {
			return err
		}
		// d(batch mean)/dy = (n_k/n)·d(microbatch mean)/dy.
		s := tensor.ReuseLike(&p.scales[slot], g, g.Shape...)
		p.be.Fill(s, float32(p.sizes[k])/float32(len(p.labels)))
		p.be.Mul(g, s, g)
		dy = g
	}
	t0 := time.Now()
	dx, err := p.replicas[slot].Backward(onDevice(p.be, dy, &p.dyDev[slot]))
	if err != nil {
		return fmt.Errorf("stage %d microbatch %d: backward: %w", p.stage, k, err)
	}
	p.Events = append(p.Events, Event{Stage: p.stage, Micro: k, Pass: PassBackward, Start: t0, End: time.Now()})
	if p.stage > 0 {
		p.sends = append(p.sends, p.g.SendAsync(ctx, hostRows(dx, &p.dxHost[k]), p.stage-1, tagGradient))
	}
	return deviceErr(p.be)
}

// waitSends waits for the sends made so far to complete.
func (p *Pipeline) waitSends() error {
	for _, w := range p.sends {
		if err := w.Wait(); err != nil {
			return fmt.Errorf("stage %d: sending: %w", p.stage, err)
		}
	}
	p.sends = p.sends[:0]
	return nil
}

// account adds a finished step to the idle-time totals and keeps its
// events when the batch was full.
func (p *Pipeline) account(stepStart time.Time) {
	for _, e := range p.Events {
		p.busy += e.End.Sub(e.Start)
	}
	p.total += time.Since(stepStart)
	if len(p.sizes) == p.micro {
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
	y, err := p.replicas[0].Forward(onDevice(p.be, in, &p.inDev[0]))
	if err != nil {
		return nil, fmt.Errorf("stage %d: forward: %w", p.stage, err)
	}
	if err := deviceErr(p.be); err != nil {
		return nil, fmt.Errorf("stage %d: forward: %w", p.stage, err)
	}
	if p.last() {
		return y, nil
	}
	if err := p.g.Send(ctx, hostRows(y, &p.outHost[0]), p.stage+1, tagActivation); err != nil {
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
