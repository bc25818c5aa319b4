package train

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
)

// Message tags: the activations chunk c sends on, and the gradients it
// sends back. Each boundary between chunks has tags of its own, so that
// with interleaved chunks the messages between two ranks cannot be taken
// for another chunk's.
func activationTag(c int) int { return 2*c + 1 }
func gradientTag(c int) int   { return 2*c + 2 }

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
// whole batch. The 1F1B, zero-bubble and interleaved schedules reorder the
// passes (run1F1B, runZeroBubble, runInterleaved); with the interleaved
// one, each rank holds several chunks of the model (NewInterleavedPipeline).
type Pipeline struct {
	g             *comm.Group // rank = stage
	stage, stages int
	micro         int
	schedule      string // "gpipe", "1f1b", "zb", "zb-h2" or "interleaved"
	layer         nn.Layer
	chunks        []*chunk // the rank's chunks, in model order
	losses        []*nn.Loss
	be            tensor.Backend

	// The step in progress: the batch, its microbatch sizes and offsets,
	// the loss so far, the sends in flight.
	x      *tensor.Tensor
	labels []int32
	sizes  []int
	offs   []int
	loss   float32
	sends  []*comm.Work
	// orders caches this rank's interleaved schedule by microbatch count.
	orders map[int]rankOrder

	// Timeline of the last step, the last full batch's, and totals for
	// the bubble fraction. A full batch is the largest one trained
	// (fullSamples samples, cut into fullMicro microbatches: torch.chunk
	// makes fewer than micro when micro does not suit the batch — a
	// batch of 64 cut 24 ways gives 21 of 3 samples and one of 1).
	Events      []Event
	fullEvents  []Event
	fullSamples int
	fullMicro   int
	busy, total time.Duration
}

// Chunk is a run of consecutive layers of a model, as a pipeline rank
// holds it: the layers, and the per-sample shapes of their input and
// output.
type Chunk struct {
	Layer   nn.Layer
	In, Out []int
}

// chunk is one of a rank's chunks with what its microbatches in flight
// use: a replica of its layers per slot (a microbatch whose activations
// are alive), and the slot's received inputs and gradients. On a GPU: the
// received (or stage 0's) inputs and received gradients uploaded per
// slot, and per microbatch the host copies of what is sent (kept until the
// sends finish at the step's end).
type chunk struct {
	index             int // in the model: v·p + stage for the rank's v-th chunk
	layer             nn.Layer
	inShape, outShape []int // per sample
	replicas          []nn.Layer
	inBufs, dyBufs    []*tensor.Tensor
	xViews, scales    []*tensor.Tensor // stage 0: microbatch views of the batch; last: loss scales
	inDev, dyDev      []*tensor.Tensor
	outHost, dxHost   [][]float32
	// The interleaved schedule's slot bookkeeping: the slot of each
	// microbatch in flight; per slot, when it was freed (−1: in use), and
	// the last sends of its output and of its input gradient, if they may
	// be in flight.
	slotOf            []int
	freedAt           []int
	freed             int
	outSent, gradSent []*comm.Work
}

// Event is one pass of one microbatch on one stage (through the stage's
// Chunk-th chunk, with the interleaved schedule).
type Event struct {
	Stage, Chunk, Micro int
	Pass                Pass
	Start, End          time.Time
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

// Schedules are the pipeline schedules, by name (--schedule; "" is gpipe).
var Schedules = []string{"gpipe", "1f1b", "zb", "zb-h2", "interleaved"}

// scheduleList names the schedules for an error: "gpipe, …, zb-h2 or
// interleaved".
func scheduleList() string {
	n := len(Schedules)
	return strings.Join(Schedules[:n-1], ", ") + " or " + Schedules[n-1]
}

// NewPipeline sets up stage g.Rank() of a pipeline of g.Size() stages:
// layer is the stage's part of model m, taking per-sample inputs of shape
// in and giving out; micro microbatches per batch; schedule gpipe (the
// default), 1f1b, zb or zb-h2.
func NewPipeline(g *comm.Group, be tensor.Backend, m *zoo.Model, layer nn.Layer, in, out []int, micro int, schedule string) (*Pipeline, error) {
	switch schedule {
	case "", "gpipe":
		schedule = "gpipe"
	case "1f1b", "zb", "zb-h2":
	case "interleaved":
		return nil, fmt.Errorf("pipeline: the interleaved schedule takes several chunks per stage (NewInterleavedPipeline)")
	default:
		return nil, fmt.Errorf("pipeline: schedule %q: want %s", schedule, scheduleList())
	}
	return newPipeline(g, be, m, []Chunk{{Layer: layer, In: in, Out: out}}, micro, schedule)
}

// NewInterleavedPipeline sets up stage g.Rank() of a pipeline of g.Size()
// stages with the interleaved 1F1B schedule: the model is cut into
// V·g.Size() chunks, and chunks[v] is the model's chunk v·g.Size() +
// g.Rank() (so rank 0 holds chunks 0, p, 2p, …); micro microbatches per
// batch.
func NewInterleavedPipeline(g *comm.Group, be tensor.Backend, m *zoo.Model, chunks []Chunk, micro int) (*Pipeline, error) {
	if len(chunks) < 2 {
		return nil, fmt.Errorf("pipeline: the interleaved schedule needs 2 or more chunks per stage, not %d", len(chunks))
	}
	return newPipeline(g, be, m, chunks, micro, "interleaved")
}

func newPipeline(g *comm.Group, be tensor.Backend, m *zoo.Model, chunks []Chunk, micro int, schedule string) (*Pipeline, error) {
	if micro < 1 {
		return nil, fmt.Errorf("pipeline: %d microbatches", micro)
	}
	p := &Pipeline{g: g, stage: g.Rank(), stages: g.Size(), micro: micro, be: be, schedule: schedule}
	// GPipe holds every microbatch's activations until the backwards;
	// 1F1B at most p−s on stage s, so it needs only that many replicas.
	slots := []int{micro}
	switch schedule {
	case "1f1b":
		slots[0] = min(micro, p.stages-p.stage)
	case "zb":
		// One slot more than 1F1B's on every stage but the first, which
		// keeps its p: no stage holds more than 1F1B's busiest one, and a
		// weight pass can wait past the next forward (with p−s slots, the
		// last stage's would sit between each backward and the next
		// forward, on the critical path).
		slots[0] = min(micro, p.stages, p.stages-p.stage+1)
		nn.DeferWeightGrads(chunks[0].Layer, true)
	case "zb-h2":
		// 2p−1 slots on every stage: the first holds 2p−1 microbatches
		// after its warm-up; the later ones keep the weight passes of
		// that many, to run while the first stage finishes the step
		// and starts the next (runZeroBubble).
		slots[0] = min(micro, 2*p.stages-1)
		nn.DeferWeightGrads(chunks[0].Layer, true)
	case "interleaved":
		slots = p.order(micro, len(chunks)).slots
	}
	for v, c := range chunks {
		ch := &chunk{index: v*p.stages + p.stage, layer: c.Layer,
			inShape: append([]int(nil), c.In...), outShape: append([]int(nil), c.Out...)}
		ch.outHost, ch.dxHost = make([][]float32, micro), make([][]float32, micro)
		p.chunks = append(p.chunks, ch)
		p.addSlots(ch, slots[v])
	}
	p.layer = chunks[0].Layer
	if len(chunks) > 1 {
		// The rank's parameters, for the optimizer and checkpoints, are
		// all its chunks': their parts side by side, named as in the
		// whole model. (Never run as one.)
		var parts []nn.Child
		for _, ch := range p.chunks {
			parts = append(parts, chainChildren(ch.layer, ch.index)...)
		}
		p.layer = nn.NewChain(parts...)
	}
	if p.last() {
		for range micro {
			p.losses = append(p.losses, m.NewLoss(be))
		}
	}
	return p, nil
}

// addSlots gives ch n slots: a replica of its layers each (the first, the
// layers themselves) with its buffers. The passes run one at a time: a
// chunk's replicas borrow their gradient buffers from its layers' pool
// (nn.ShareBuffers). (One pool for all the chunks made ResNet-50's
// passes a third slower, 12.3 s of compute a step of 8 microbatches
// against 9.1, and its memory a fifth larger, one run each: the chunks'
// tensors differ in size, and one chunk's requests kept missing the
// storage another's had left in the pool.)
func (p *Pipeline) addSlots(ch *chunk, n int) {
	for len(ch.replicas) < n {
		r := ch.layer
		if len(ch.replicas) > 0 {
			r = ch.layer.Replica()
		}
		if owner := ch.layer; r != owner {
			nn.ShareBuffers(owner, r)
		}
		ch.replicas = append(ch.replicas, r)
		ch.inBufs = append(ch.inBufs, &tensor.Tensor{})
		ch.dyBufs = append(ch.dyBufs, &tensor.Tensor{})
		ch.xViews = append(ch.xViews, &tensor.Tensor{})
		ch.scales = append(ch.scales, &tensor.Tensor{})
		ch.inDev = append(ch.inDev, nil)
		ch.dyDev = append(ch.dyDev, nil)
		ch.freedAt = append(ch.freedAt, 0)
		ch.outSent = append(ch.outSent, nil)
		ch.gradSent = append(ch.gradSent, nil)
	}
}

// chainChildren returns l's children when it is a chain, else l as one
// child named by the chunk's index.
func chainChildren(l nn.Layer, index int) []nn.Child {
	c, ok := l.(*nn.Chain)
	if !ok {
		return []nn.Child{{Name: strconv.Itoa(index), Layer: l}}
	}
	var out []nn.Child
	for i := range c.Layers {
		out = append(out, nn.Child{Name: c.Names[i], Layer: c.Layers[i]})
	}
	return out
}

// last reports whether the rank holds the model's last chunk (and the
// loss): the last stage.
func (p *Pipeline) last() bool { return p.stage == p.stages-1 }

// first and final report whether ch is the model's first chunk (its input
// is the batch) or its last (its output goes to the loss).
func (p *Pipeline) first(ch *chunk) bool { return ch.index == 0 }
func (p *Pipeline) final(ch *chunk) bool { return ch.index == p.stages*len(p.chunks)-1 }

// prev and next are the ranks before and after this one in the pipeline's
// ring: chunk c's input comes from rank (c−1) mod p.
func (p *Pipeline) prev() int { return (p.stage + p.stages - 1) % p.stages }
func (p *Pipeline) next() int { return (p.stage + 1) % p.stages }

// Stage returns this rank's stage index.
func (p *Pipeline) Stage() int { return p.stage }

// Layer returns this rank's stage: with several chunks, a chain of their
// layers side by side, named as in the whole model, which holds their
// parameters but is not to be run.
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
	case "zb", "zb-h2":
		err = p.runZeroBubble(ctx)
	case "interleaved":
		err = p.runInterleaved(ctx)
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
	for _, ch := range p.chunks { // the last step waited for its sends
		clear(ch.outSent)
		clear(ch.gradSent)
	}
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
	m, ch := len(p.sizes), p.chunks[0]
	var recv *comm.Work
	if !p.first(ch) {
		recv = p.recvActivation(ctx, ch, 0, 0)
	}
	for k := range m {
		if !p.first(ch) {
			if err := p.waitRecv(recv, "microbatch", k, p.prev()); err != nil {
				return err
			}
			if k+1 < m {
				recv = p.recvActivation(ctx, ch, k+1, k+1)
			}
		}
		if err := p.forward(ctx, ch, k, k); err != nil {
			return err
		}
	}
	if !p.final(ch) {
		recv = p.recvGradient(ctx, ch, m-1, m-1)
	}
	for k := m - 1; k >= 0; k-- {
		if !p.final(ch) {
			if err := p.waitRecv(recv, "the gradient of microbatch", k, p.next()); err != nil {
				return err
			}
			if k > 0 {
				recv = p.recvGradient(ctx, ch, k-1, k-1)
			}
		}
		if err := p.backward(ctx, ch, k, k); err != nil {
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
	ch := p.chunks[0]
	m, slots := len(p.sizes), len(ch.replicas)
	warm := min(p.stages-p.stage-1, m)
	fwd := func(k int) error { // receive into the slot, then compute
		if err := p.receiveActivation(ctx, ch, k, k%slots, p.waitRecv); err != nil {
			return err
		}
		return p.forward(ctx, ch, k, k%slots)
	}
	bwd := func(k int) error {
		if err := p.receiveGradient(ctx, ch, k, k%slots, p.waitRecv); err != nil {
			return err
		}
		return p.backward(ctx, ch, k, k%slots)
	}
	return inOneFOneBOrder(m, warm, fwd, bwd)
}

// receiveActivation readies ch's slot for microbatch k's forward: the
// slot's last send of an output done (the output may share the input's
// storage; runInterleaved says why this send and not every one in
// flight), then, after the first chunk, the input received there, waited
// for by wait.
func (p *Pipeline) receiveActivation(ctx context.Context, ch *chunk, k, slot int, wait func(*comm.Work, string, int, int) error) error {
	if err := p.waitSent(ch.outSent, slot); err != nil {
		return err
	}
	if p.first(ch) {
		return nil
	}
	return wait(p.recvActivation(ctx, ch, k, slot), "microbatch", k, p.prev())
}

// receiveGradient readies ch's slot for microbatch k's backward: the
// slot's last send of an input gradient done (it may share the output
// gradient's storage), then, before the last chunk, the output gradient
// received there, waited for by wait.
func (p *Pipeline) receiveGradient(ctx context.Context, ch *chunk, k, slot int, wait func(*comm.Work, string, int, int) error) error {
	if err := p.waitSent(ch.gradSent, slot); err != nil {
		return err
	}
	if p.final(ch) {
		return nil
	}
	return wait(p.recvGradient(ctx, ch, k, slot), "the gradient of microbatch", k, p.next())
}

// inOneFOneBOrder runs m microbatches' forwards and backwards in 1F1B's
// order: warm forwards, then one forward and one backward in turn, then
// the remaining backwards.
func inOneFOneBOrder(m, warm int, fwd, bwd func(k int) error) error {
	for k := range warm {
		if err := fwd(k); err != nil {
			return err
		}
	}
	for k := 0; k < m-warm; k++ {
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

// runZeroBubble runs the zero-bubble schedules of Qi et al. ("Zero Bubble
// Pipeline Parallelism", ICLR 2024): 1F1B with each backward split. The
// backward pass computes only the gradient of the stage's input (B) and
// sends it back at once, so the stages before wait less; the parameter
// gradients (W) are deferred (nn.DeferWeightGrads) and run, in
// microbatch order and a layer at a time, whenever the next forward or
// backward would wait for its input from a neighbour, at the latest
// before a replica slot is reused, and the rest after the last backward.
//
// ZB-H1 ("zb"): forwards and backwards in 1F1B's order (p−s−1 warm-up
// forwards on stage s); stage s holds at most min(p, p−s+1) microbatches
// (1F1B's busiest stage, the first, holds p).
//
// ZB-H2 ("zb-h2"): 2(p−s−1) warm-up forwards, and 2p−1 microbatches per
// stage. The first stage runs ahead further, and the later ones keep more
// weight passes for the step's end, so that while the first stage
// finishes the step (its last backward, its weight passes, the optimizer)
// and starts the next one's forwards, the others still have weight passes
// to run: the stages do not wait for each other between steps (every
// stage steps its optimizer on its own parameters alone). With F = B = W,
// p = 2 and m = 4, a step takes 12 units of a stage's time against ZB-H1's
// 13 and 1F1B's 15, for 1.5 times the first stage's activations and 3
// times the last's.
//
// The gradients accumulate in the order 1F1B accumulates them: the
// weights are the same, bit for bit. Weight passes only compute, so
// placing them anywhere cannot make the stages wait on each other in a
// cycle.
func (p *Pipeline) runZeroBubble(ctx context.Context) error {
	ch := p.chunks[0]
	m, slots := len(p.sizes), len(ch.replicas)
	warm := min(p.stages-p.stage-1, m)
	if p.schedule == "zb-h2" {
		warm = min(2*(p.stages-p.stage-1), m)
	}
	nextW, doneB := 0, 0 // the microbatch whose weight passes run next; backwards done
	// weights runs one layer's weight pass of microbatch nextW, or moves
	// on to the next microbatch when it has none left.
	weights := func() error {
		ran, err := p.weightsStep(ch, nextW, nextW%slots)
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
		if err := p.receiveActivation(ctx, ch, k, k%slots, await); err != nil {
			return err
		}
		return p.forward(ctx, ch, k, k%slots)
	}
	bwd := func(k int) error {
		if err := p.receiveGradient(ctx, ch, k, k%slots, await); err != nil {
			return err
		}
		if err := p.backward(ctx, ch, k, k%slots); err != nil {
			return err
		}
		doneB = k + 1
		return nil
	}
	if err := inOneFOneBOrder(m, warm, fwd, bwd); err != nil {
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
// ch's replica slot (nn.WeightGradsStep) and reports whether there was
// one. Steps run back to back make one W event.
func (p *Pipeline) weightsStep(ch *chunk, k, slot int) (bool, error) {
	t0 := time.Now()
	if !nn.WeightGradsStep(ch.replicas[slot]) {
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

// recvActivation posts the receive of microbatch k's input to ch into
// slot.
func (p *Pipeline) recvActivation(ctx context.Context, ch *chunk, k, slot int) *comm.Work {
	t := reuseShaped(ch.inBufs[slot], p.sizes[k], ch.inShape)
	return p.g.RecvAsync(ctx, t.Data, p.prev(), activationTag(ch.index-1))
}

// recvGradient posts the receive of microbatch k's output gradient of ch
// into slot.
func (p *Pipeline) recvGradient(ctx context.Context, ch *chunk, k, slot int) *comm.Work {
	t := reuseShaped(ch.dyBufs[slot], p.sizes[k], ch.outShape)
	return p.g.RecvAsync(ctx, t.Data, p.next(), gradientTag(ch.index+1))
}

func (p *Pipeline) waitRecv(w *comm.Work, what string, k, from int) error {
	if err := w.Wait(); err != nil {
		return fmt.Errorf("stage %d: receiving %s %d from stage %d: %w", p.stage, what, k, from, err)
	}
	return nil
}

// forward computes microbatch k through ch in replica slot (its input
// already received there, or a view of the batch in the first chunk),
// then sends the output on or, after the last chunk, adds its share of
// the loss.
func (p *Pipeline) forward(ctx context.Context, ch *chunk, k, slot int) error {
	nk, off := p.sizes[k], p.offs[k]
	in := ch.inBufs[slot]
	if p.first(ch) {
		per := tensor.Volume(ch.inShape)
		in = shaped(ch.xViews[slot], p.x.Data[off*per:], nk, ch.inShape)
	}
	t0 := time.Now()
	y, err := ch.replicas[slot].Forward(onDevice(p.be, in, &ch.inDev[slot]))
	if err != nil {
		return fmt.Errorf("stage %d%s microbatch %d: forward: %w", p.stage, p.chunkName(ch), k, err)
	}
	if p.final(ch) {
		l, err := p.losses[k].Forward(y, p.labels[off:off+nk])
		if err != nil {
			return fmt.Errorf("stage %d microbatch %d: loss: %w", p.stage, k, err)
		}
		p.loss += l * float32(nk) / float32(len(p.labels))
	}
	p.Events = append(p.Events, Event{Stage: p.stage, Chunk: ch.index / p.stages, Micro: k, Pass: PassForward, Start: t0, End: time.Now()})
	if !p.final(ch) {
		w := p.g.SendAsync(ctx, hostRows(y, &ch.outHost[k]), p.next(), activationTag(ch.index))
		p.sends = append(p.sends, w)
		ch.outSent[slot] = w
	}
	return deviceErr(p.be)
}

// backward takes microbatch k back through ch's replica slot (its output
// gradient already received there, or from the loss after the last
// chunk) and sends the input gradient back.
func (p *Pipeline) backward(ctx context.Context, ch *chunk, k, slot int) error {
	dy := ch.dyBufs[slot]
	if p.final(ch) {
		g, err := p.losses[k].Backward()
		if err != nil {
			return err
		}
		// d(batch mean)/dy = (n_k/n)·d(microbatch mean)/dy.
		s := tensor.ReuseLike(&ch.scales[slot], g, g.Shape...)
		p.be.Fill(s, float32(p.sizes[k])/float32(len(p.labels)))
		p.be.Mul(g, s, g)
		dy = g
	}
	t0 := time.Now()
	dx, err := ch.replicas[slot].Backward(onDevice(p.be, dy, &ch.dyDev[slot]))
	if err != nil {
		return fmt.Errorf("stage %d%s microbatch %d: backward: %w", p.stage, p.chunkName(ch), k, err)
	}
	p.Events = append(p.Events, Event{Stage: p.stage, Chunk: ch.index / p.stages, Micro: k, Pass: PassBackward, Start: t0, End: time.Now()})
	if !p.first(ch) {
		w := p.g.SendAsync(ctx, hostRows(dx, &ch.dxHost[k]), p.prev(), gradientTag(ch.index))
		p.sends = append(p.sends, w)
		ch.gradSent[slot] = w
	}
	return deviceErr(p.be)
}

// chunkName names ch in errors when the rank has several.
func (p *Pipeline) chunkName(ch *chunk) string {
	if len(p.chunks) == 1 {
		return ""
	}
	return fmt.Sprintf(" chunk %d (of the model's %d)", ch.index, p.stages*len(p.chunks))
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
	if n := p.offs[len(p.offs)-1]; n >= p.fullSamples {
		p.fullSamples, p.fullMicro = n, len(p.sizes)
		p.fullEvents = append(p.fullEvents[:0], p.Events...)
	}
}

// microbatches is how many microbatches a full batch is cut into: the
// largest batch trained so far, else as many as asked for.
func (p *Pipeline) microbatches() int {
	if p.fullMicro > 0 {
		return p.fullMicro
	}
	return p.micro
}

// IdealBubble is the fraction of a step the schedule leaves a stage idle
// when every pass takes equally long, and the formula it comes from:
// GPipe's (p−1)/(m+p−1), which 1F1B and ZB-H1 share; (p−1)/(V·m+p−1) with
// V interleaved chunks per stage (the warm-up and cool-down shrink with
// the chunks); none for ZB-H2 (from one step to the next).
func (p *Pipeline) IdealBubble() (ideal float64, formula string) {
	m := p.microbatches()
	switch v := len(p.chunks); {
	case p.schedule == "zb-h2":
		return 0, "ZB-H2's bubble, passes of equal length"
	case v > 1:
		return float64(p.stages-1) / float64(v*m+p.stages-1), fmt.Sprintf("interleaved bubble (p-1)/(%dm+p-1)", v)
	}
	return float64(p.stages-1) / float64(m+p.stages-1), "GPipe bubble (p-1)/(m+p-1)"
}

// Bubble returns, for every stage, the fraction of its step time spent
// not computing (waiting for its neighbours), measured over all steps so
// far, and the schedule's ideal (IdealBubble). Every stage must call it
// (the stages exchange their figures).
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
	ideal, _ = p.IdealBubble()
	return idle, ideal, nil
}

// Forward runs an evaluation batch through the pipeline in one piece and
// returns the model's output on the last stage (nil elsewhere).
func (p *Pipeline) Forward(ctx context.Context, x *tensor.Tensor, n int) (*tensor.Tensor, error) {
	var y *tensor.Tensor
	for _, ch := range p.chunks {
		in := x
		if !p.first(ch) {
			in = reuseShaped(ch.inBufs[0], n, ch.inShape)
			if err := p.g.Recv(ctx, in.Data, p.prev(), activationTag(ch.index-1)); err != nil {
				return nil, fmt.Errorf("stage %d: receiving from stage %d: %w", p.stage, p.prev(), err)
			}
		}
		var err error
		if y, err = ch.replicas[0].Forward(onDevice(p.be, in, &ch.inDev[0])); err != nil {
			return nil, fmt.Errorf("stage %d%s: forward: %w", p.stage, p.chunkName(ch), err)
		}
		if err := deviceErr(p.be); err != nil {
			return nil, fmt.Errorf("stage %d%s: forward: %w", p.stage, p.chunkName(ch), err)
		}
		if p.final(ch) {
			return y, nil
		}
		if err := p.g.Send(ctx, hostRows(y, &ch.outHost[0]), p.next(), activationTag(ch.index)); err != nil {
			return nil, fmt.Errorf("stage %d: sending to stage %d: %w", p.stage, p.next(), err)
		}
	}
	return nil, nil
}

// SetTraining switches every replica of the stage.
func (p *Pipeline) SetTraining(training bool) {
	for _, ch := range p.chunks {
		for _, r := range ch.replicas {
			r.SetTraining(training)
		}
	}
}
