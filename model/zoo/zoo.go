// Package zoo builds the workshops' models with PyTorch's layer names, so
// their state matches the PyTorch definitions key for key:
//
//   - mnist: the PyTorch MNIST example network (seed 004), 1×28×28 input,
//     log-softmax output trained with NLL loss;
//   - cifarnet: CIFARNet (seed 000), 4 conv + batch norm + max pool and
//     3 fully connected layers with dropout, 3×32×32 input;
//   - cifarnet-staged: the same network as StagedCIFARNet's three
//     nn.Sequential stages (stage1, stage2, stage3) for pipelining;
//   - resnet18: torchvision's resnet18 with a 10-class fc (seed 002);
//   - resnet34, resnet50, resnet101, resnet152: torchvision's ImageNet
//     ResNets (50 and up of v1.5 Bottlenecks), 1000 classes, 224×224
//     nominal input (seed 001).
package zoo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// Model is a network with what a trainer needs to know about it.
type Model struct {
	Name string
	// Net is the network; nil for a model described but not built
	// (Spec.Unbuilt).
	Net nn.Layer
	// Input is the per-sample shape [C, H, W].
	Input []int
	// Classes is the number of outputs.
	Classes int
	// LogProbs reports that Net ends in log-softmax (train with NLL loss
	// rather than cross-entropy).
	LogProbs bool
}

// NewLoss returns the criterion the model is trained with.
func (m *Model) NewLoss(be tensor.Backend) *nn.Loss {
	if m.LogProbs {
		return nn.NewNLLLoss(be)
	}
	return nn.NewCrossEntropyLoss(be)
}

// Spec describes a model without building it: what it takes and gives,
// and its top-level children ("parts") in forward order, each built on
// demand. A pipeline stage builds only its own parts, so no rank ever
// holds the whole model.
type Spec struct {
	Name     string
	Input    []int // per-sample shape [C, H, W]
	Classes  int
	LogProbs bool
	Parts    []Part
	// Staged reports that the parts are the model's own pipeline stages
	// (StagedCIFARNet's split points).
	Staged bool
	// AnySize reports that the model takes any input of Input's channels
	// and at least 32×32 (its pooling adapts), not only Input's size.
	AnySize bool
	// ZeroInitResidual starts every residual block's last batch norm at
	// zero weight, so that each block starts as the identity (torchvision's
	// zero_init_residual; ResNets only).
	ZeroInitResidual bool
	// Recompute checkpoints every residual block and, in Build, the stem
	// before them (nn.Checkpoint): only the blocks' inputs and outputs,
	// and in Bottlenecks the outputs of the costliest convolutions
	// (checkpointBlock), are kept for backward, which recomputes the rest
	// block by block — less memory for more arithmetic (ResNets only).
	Recompute bool
}

// SetClasses makes the model's classifier (its last linear part) give n
// outputs.
func (s *Spec) SetClasses(n int) error {
	if n < 1 {
		return fmt.Errorf("zoo: %s with %d classes: want at least 1", s.Name, n)
	}
	if n == s.Classes {
		return nil
	}
	for i := len(s.Parts) - 1; i >= 0; i-- {
		if s.Parts[i].Kind == "linear" {
			s.Parts[i] = linear(s.Parts[i].Name, s.Parts[i].in, n)
			s.Classes = n
			return nil
		}
	}
	return fmt.Errorf("zoo: %s has no classifier of its own to give %d outputs (its stages hold it)", s.Name, n)
}

// Accepts reports whether the model takes per-sample inputs of shape
// [C, H, W].
func (s *Spec) Accepts(shape [3]int) bool {
	if !s.AnySize {
		return shape == [3]int(s.Input)
	}
	return shape[0] == s.Input[0] && shape[1] >= 32 && shape[2] >= 32
}

// Part is one top-level child of a model.
type Part struct {
	Name  string // its state-name prefix ("" for layers without state)
	Kind  string // what it is: conv, linear, relu, …
	build func(be tensor.Backend, rng *rand.Rand) nn.Layer
	in    int // a linear part's input features
	// blocks, when set, is the number of children of a sequential part
	// (a ResNet stage's residual blocks) that pipeline stages may divide
	// between them: each is a Piece of its own.
	blocks int
}

// Label names the part for people: its name, else its kind.
func (p Part) Label() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Kind
}

var specs = map[string]func() *Spec{
	"mnist":           mnistSpec,
	"cifarnet":        func() *Spec { return cifarSpec(false) },
	"cifarnet-staged": func() *Spec { return cifarSpec(true) },
	"resnet18":        resnet18Spec,
	"resnet34":        func() *Spec { return resnetSpec("resnet34", false, [4]int{3, 4, 6, 3}, 1000, imageNetInput) },
	"resnet50":        func() *Spec { return resnetSpec("resnet50", true, [4]int{3, 4, 6, 3}, 1000, imageNetInput) },
	"resnet101":       func() *Spec { return resnetSpec("resnet101", true, [4]int{3, 4, 23, 3}, 1000, imageNetInput) },
	"resnet152":       func() *Spec { return resnetSpec("resnet152", true, [4]int{3, 8, 36, 3}, 1000, imageNetInput) },
}

// imageNetInput is the ImageNet models' nominal input: 224×224 crops.
var imageNetInput = []int{3, 224, 224}

// Names lists the models New knows.
func Names() []string {
	var n []string
	for k := range specs {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Lookup returns the named model's Spec.
func Lookup(name string) (*Spec, error) {
	s, ok := specs[name]
	if !ok {
		return nil, fmt.Errorf("zoo: unknown model %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return s(), nil
}

// New builds the named model with weights drawn from a seed taken from rng.
func New(name string, be tensor.Backend, rng *rand.Rand) (*Model, error) {
	s, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return s.Build(be, rng.Uint64()), nil
}

// Unbuilt describes the model (input, classes, loss) without building
// any layer: a pipeline stage builds its own with BuildPieces.
func (s *Spec) Unbuilt() *Model {
	return &Model{Name: s.Name, Input: s.Input, Classes: s.Classes, LogProbs: s.LogProbs}
}

// Build builds the whole model with weights drawn from seed.
func (s *Spec) Build(be tensor.Backend, seed uint64) *Model {
	m := s.Unbuilt()
	net := s.BuildPieces(be, seed, 0, len(s.Pieces()))
	if s.Recompute {
		checkpointStem(be, net)
	}
	net.SliceImages = evalSliceImages(s.Input)
	m.Net = net
	return m
}

// evalSliceImages is how many images at a time a model's evaluation
// passes run (nn.Chain.SliceImages): sliceInput elements of input, eight
// ImageNet images, so that inference holds a slice's activations rather
// than a whole batch's; on small images (CIFAR-10's, MNIST's) a slice is
// larger than any usual batch, which runs whole. What it costs: each
// convolution's weights are packed (and for Winograd transformed) once
// a slice rather than once a pass.
func evalSliceImages(input []int) int {
	return max(1, sliceInput/tensor.Volume(input))
}

// sliceInput is the input, in elements, of one evaluation slice
// (evalSliceImages).
const sliceInput = 8 * 3 * 224 * 224

// checkpointStem puts a ResNet's stem — every top-level child before the
// first stage of residual blocks: conv1, bn1, relu, max pool — under one
// nn.Checkpoint, so that only the image is kept of it for backward. At
// 224² the stem's activations are ResNet-50's largest (three tensors of
// 64×112×112 a sample), and without this they would outlive every
// checkpointed block. The state's names do not change. Pipeline stages
// (BuildPieces) keep the stem as it is.
func checkpointStem(be tensor.Backend, net *nn.Chain) {
	n := 0
	for n < len(net.Layers) && !containsResidual(net.Layers[n]) {
		n++
	}
	if n > 0 && n < len(net.Layers) {
		_ = nn.CheckpointSteps(be, net, 0, n) // in range by construction
	}
}

// containsResidual reports whether l is or holds a residual block
// (checkpointed or not).
func containsResidual(l nn.Layer) bool {
	found := false
	nn.Walk(l, func(l nn.Layer) {
		if _, ok := l.(*nn.Residual); ok {
			found = true
		}
	})
	return found
}

func child(name string, l nn.Layer) nn.Child { return nn.Child{Name: name, Layer: l} }

// Piece is what a pipeline cuts a model into stages by: a top-level part,
// or one block of a part whose blocks may go to different stages (a
// ResNet stage's residual blocks, so that a cut can fall inside
// torchvision's layer3).
type Piece struct {
	Part  int // the index of the part in Spec.Parts
	Block int // the block's index within the part; -1: the whole part
}

// Pieces lists the model's pieces in forward order.
func (s *Spec) Pieces() []Piece {
	var ps []Piece
	for i, p := range s.Parts {
		if p.blocks == 0 {
			ps = append(ps, Piece{Part: i, Block: -1})
			continue
		}
		for b := range p.blocks {
			ps = append(ps, Piece{Part: i, Block: b})
		}
	}
	return ps
}

// PieceLabel names piece for people: the part's label, with the block's
// index when the piece is one block ("layer3.2").
func (s *Spec) PieceLabel(piece Piece) string {
	l := s.Parts[piece.Part].Label()
	if piece.Block >= 0 {
		l += "." + strconv.Itoa(piece.Block)
	}
	return l
}

// BuildPieces builds pieces [lo, hi) of Pieces() as a chain named as in
// the whole model: each part from its own random stream of seed (so it
// comes out the same built alone or with the rest), and the blocks of a
// part that the range divides as a chain of those blocks under the
// part's name, each under its own index (layer3.2.conv1.weight stays
// layer3.2.conv1.weight). A part's blocks draw their weights from the
// part's stream one after another, so a divided part is built whole and
// the blocks outside the range are dropped.
func (s *Spec) BuildPieces(be tensor.Backend, seed uint64, lo, hi int) *nn.Chain {
	var children []nn.Child
	for _, sp := range s.spans(lo, hi) {
		l := s.Parts[sp.part].build(be, rand.New(rand.NewPCG(seed, uint64(sp.part))))
		l = sp.cut(l)
		nn.ToDevice(l, tensor.DeviceOf(be))
		children = append(children, child(s.Parts[sp.part].Name, l))
	}
	c := nn.NewChain(children...)
	if lo == 0 && hi > 0 {
		// The first layer's input is data: nothing uses its gradient.
		nn.SkipInputGrad(c)
	}
	return c
}

// SelectPieces returns pieces [lo, hi) of net, a model Build built from
// s, as BuildPieces would build them, but made of net's own layers (a
// pipeline stage's file loads into them).
func (s *Spec) SelectPieces(net *nn.Chain, lo, hi int) *nn.Chain {
	var children []nn.Child
	for _, sp := range s.spans(lo, hi) {
		children = append(children, child(net.Names[sp.part], sp.cut(net.Layers[sp.part])))
	}
	return nn.NewChain(children...)
}

// span is the part of Spec.Parts that some pieces cover: blocks first to
// last, or the whole part.
type span struct {
	part, first, last int
	whole             bool
}

// spans lists the parts pieces [lo, hi) cover, in order.
func (s *Spec) spans(lo, hi int) []span {
	var out []span
	for _, p := range s.Pieces()[lo:hi] {
		if n := len(out); n > 0 && out[n-1].part == p.Part {
			out[n-1].last = p.Block
			continue
		}
		out = append(out, span{part: p.Part, first: p.Block, last: p.Block})
	}
	for i := range out {
		sp := &out[i]
		sp.whole = sp.first < 0 || (sp.first == 0 && sp.last == s.Parts[sp.part].blocks-1)
	}
	return out
}

// cut returns the blocks of the built part l that sp covers: l itself
// when sp covers it whole, else a chain of those blocks under their
// indices.
func (sp span) cut(l nn.Layer) nn.Layer {
	if sp.whole {
		return l
	}
	whole := l.(*nn.Chain)
	var blocks []nn.Child
	for b := sp.first; b <= sp.last; b++ {
		blocks = append(blocks, child(whole.Names[b], whole.Layers[b]))
	}
	return nn.NewChain(blocks...)
}

// part makes a Part of a layer that needs no random numbers.
func part(name, kind string, build func(be tensor.Backend) nn.Layer) Part {
	return Part{Name: name, Kind: kind, build: func(be tensor.Backend, _ *rand.Rand) nn.Layer { return build(be) }}
}

// relu is torch.nn.ReLU(inplace=True), as torchvision's models use it:
// every relu of the zoo follows a convolution, linear layer or batch norm,
// which leave their output to it.
func relu() Part {
	return part("", "relu", func(be tensor.Backend) nn.Layer { return nn.NewReLUInPlace(be) })
}

func dropout(p float32) Part {
	return Part{Kind: "dropout", build: func(be tensor.Backend, rng *rand.Rand) nn.Layer { return nn.NewDropout(be, p, rng.Uint64()) }}
}

func flatten() Part {
	return part("", "flatten", func(tensor.Backend) nn.Layer { return nn.NewFlatten() })
}

func linear(name string, in, out int) Part {
	return Part{Name: name, Kind: "linear", in: in, build: func(be tensor.Backend, rng *rand.Rand) nn.Layer { return nn.NewLinear(be, in, out, rng) }}
}

func conv(name string, in, out, kernel int, o nn.Conv2dOptions) Part {
	return Part{Name: name, Kind: "conv", build: func(be tensor.Backend, rng *rand.Rand) nn.Layer { return nn.NewConv2d(be, in, out, kernel, o, rng) }}
}

func batchNorm(name string, c int) Part {
	return part(name, "batchnorm", func(be tensor.Backend) nn.Layer { return nn.NewBatchNorm2d(be, c) })
}

func maxPool(kernel, stride, padding int) Part {
	return part("", "maxpool", func(be tensor.Backend) nn.Layer { return nn.NewMaxPool2d(be, kernel, stride, padding) })
}

// MNISTNet is PyTorch's MNIST example:
// conv1(1→32, 3) → relu → conv2(32→64, 3) → relu → max_pool2d(2) →
// dropout1(0.25) → flatten → fc1(9216→128) → relu → dropout2(0.5) →
// fc2(128→10) → log_softmax.
func MNISTNet(be tensor.Backend, rng *rand.Rand) *Model {
	return mnistSpec().Build(be, rng.Uint64())
}

func mnistSpec() *Spec {
	return &Spec{Name: "mnist", Input: []int{1, 28, 28}, Classes: 10, LogProbs: true, Parts: []Part{
		conv("conv1", 1, 32, 3, nn.Conv2dOptions{}), relu(),
		conv("conv2", 32, 64, 3, nn.Conv2dOptions{}), relu(),
		maxPool(2, 0, 0), dropout(0.25), flatten(),
		linear("fc1", 9216, 128), relu(), dropout(0.5),
		linear("fc2", 128, 10),
		part("", "log_softmax", func(be tensor.Backend) nn.Layer { return nn.NewLogSoftmax(be) }),
	}}
}

// cifarParts returns CIFARNet's layers in forward order, with their
// CIFARNet attribute names.
func cifarParts() []Part {
	c3 := func(name string, in, out int) Part { return conv(name, in, out, 3, nn.Conv2dOptions{Padding: 1}) }
	return []Part{
		c3("conv1", 3, 64), maxPool(2, 2, 0), batchNorm("bn1", 64), relu(),
		c3("conv2", 64, 128), maxPool(2, 2, 0), batchNorm("bn2", 128), relu(),
		c3("conv3", 128, 256), batchNorm("bn3", 256), relu(),
		c3("conv4", 256, 512), batchNorm("bn4", 512), relu(),
		flatten(),
		linear("fc1", 512*8*8, 512), relu(), dropout(0.5),
		linear("fc2", 512, 256), relu(), dropout(0.5),
		linear("fc3", 256, 10),
	}
}

// CIFARNet is seed 000's network: per conv block conv3×3(pad 1) → [max
// pool 2 for blocks 1–2] → batch norm → relu (3→64→128→256→512), then
// flatten → fc1(32768→512) → relu → dropout(0.5) → fc2(512→256) → relu →
// dropout(0.5) → fc3(256→10).
func CIFARNet(be tensor.Backend, rng *rand.Rand) *Model {
	return cifarSpec(false).Build(be, rng.Uint64())
}

// StagedCIFARNet is CIFARNet split at seed 000's stage boundaries into
// stage1 (conv1–conv2 blocks), stage2 (conv3–conv4 blocks and flatten) and
// stage3 (the fully connected layers), each an nn.Sequential, so its state
// keys are stage1.0.weight, …, stage3.6.bias, as PyTorch names them.
func StagedCIFARNet(be tensor.Backend, rng *rand.Rand) *Model {
	return cifarSpec(true).Build(be, rng.Uint64())
}

func cifarSpec(staged bool) *Spec {
	s := &Spec{Name: "cifarnet", Input: []int{3, 32, 32}, Classes: 10, Parts: cifarParts()}
	if !staged {
		return s
	}
	stage := func(name string, ps []Part) Part {
		return Part{Name: name, Kind: "sequential", build: func(be tensor.Backend, rng *rand.Rand) nn.Layer {
			layers := make([]nn.Layer, len(ps))
			for i, p := range ps {
				layers[i] = p.build(be, rng)
			}
			return nn.NewSequential(layers...)
		}}
	}
	ps := s.Parts
	s.Name, s.Staged = "cifarnet-staged", true
	s.Parts = []Part{stage("stage1", ps[:8]), stage("stage2", ps[8:15]), stage("stage3", ps[15:])}
	return s
}

// ResNet18 is torchvision.models.resnet18 with a 10-class fc: conv 7×7/2 →
// bn → relu → max pool 3×3/2 → four stages of two BasicBlocks (64, 128,
// 256, 512 channels) → adaptive average pool → fc. Convolutions are
// initialised as torchvision does (kaiming-normal, fan-out, ReLU gain).
func ResNet18(be tensor.Backend, rng *rand.Rand) *Model {
	return resnet18Spec().Build(be, rng.Uint64())
}

func resnet18Spec() *Spec {
	return resnetSpec("resnet18", false, [4]int{2, 2, 2, 2}, 10, []int{3, 32, 32})
}

// resnetSpec is torchvision's ResNet of BasicBlocks (bottleneck false) or
// Bottlenecks, with blocks[i] blocks in stage i: conv 7×7/2 → bn → relu →
// max pool 3×3/2 → the four stages (64, 128, 256, 512 channels wide; ×4
// out of a Bottleneck) → adaptive average pool → fc. Any input of at
// least 32×32 works (Spec.AnySize); input is the nominal one.
func resnetSpec(name string, bottleneck bool, blocks [4]int, classes int, input []int) *Spec {
	s := &Spec{Name: name, Input: input, Classes: classes, AnySize: true}
	s.Parts = []Part{
		kaiming(conv("conv1", 3, 64, 7, nn.Conv2dOptions{Stride: 2, Padding: 3, NoBias: true})),
		batchNorm("bn1", 64), relu(), maxPool(3, 2, 1),
	}
	in := 64
	for i, width := range []int{64, 128, 256, 512} {
		stride := 2
		if i == 0 {
			stride = 1
		}
		out := width
		if bottleneck {
			out = width * nn.BottleneckExpansion
		}
		stageIn, n := in, blocks[i]
		s.Parts = append(s.Parts, kaiming(Part{Name: fmt.Sprintf("layer%d", i+1), Kind: "sequential", blocks: n, build: func(be tensor.Backend, rng *rand.Rand) nn.Layer {
			layers := make([]nn.Layer, n)
			for b := range n {
				bin, bstride := out, 1
				if b == 0 {
					bin, bstride = stageIn, stride
				}
				var r *nn.Residual
				if bottleneck {
					r = nn.NewBottleneck(be, bin, width, bstride, rng)
				} else {
					r = nn.NewBasicBlock(be, bin, width, bstride, rng)
				}
				if s.ZeroInitResidual {
					clear(r.LastBN().Weight.Data) // built on the host
				}
				layers[b] = r
				if s.Recompute {
					layers[b] = checkpointBlock(be, r, bottleneck)
				}
			}
			return nn.NewSequential(layers...)
		}}))
		in = out
	}
	s.Parts = append(s.Parts,
		part("", "adaptive_avgpool", func(be tensor.Backend) nn.Layer { return nn.NewAdaptiveAvgPool2d(be, 1, 1) }),
		flatten(), linear("fc", in, classes))
	return s
}

// checkpointBlock wraps a residual block in an nn.Checkpoint. A
// Bottleneck's checkpoint keeps the outputs of its costliest
// convolutions from the first pass (nn.Checkpoint.Save): those that take
// at least saveMinMACs multiply-adds an output element. What a saved
// output spares the recomputation is proportional to that figure, what
// it costs in memory to its size, so the figure ranks them; in ResNet-50
// the threshold takes every 3×3 convolution, the first 1×1 of every
// block of layer3 but the first and of layer4, and layer4's downsample:
// 240 MB held through the step at batch 32. From layer2 on (1024 and
// up) they spare about 1.2 s of a one-thread step's recomputed forward
// (by the layers' forward times on Zen 4) for 163 MB; layer1's 3×3 ones
// (576) another 0.14 s (3 × 46 ms) for 77 MB, 44–51 MiB more peak RSS
// in BENCHMARKS.md's rounds. The next ones down (512: the first 1×1 of
// layer2's blocks after the first, layer3's first block's and its
// downsample, layer4's last 1×1 ones) would hold 128 MB more, which
// ResNet-50 at two threads cannot spend and stay under half PyTorch's
// memory. A BasicBlock's convolutions are as wide as the block: keeping
// one output would double what the checkpoint holds, so none is kept.
func checkpointBlock(be tensor.Backend, r *nn.Residual, bottleneck bool) nn.Layer {
	c := nn.NewCheckpoint(be, r)
	if !bottleneck {
		return c
	}
	nn.Walk(r, func(l nn.Layer) {
		if conv, ok := l.(*nn.Conv2d); ok && conv.In*conv.P.KernelH*conv.P.KernelW >= saveMinMACs {
			if err := c.Save(conv); err != nil {
				panic(err) // inside r by construction
			}
		}
	})
	return c
}

// saveMinMACs is the cost, in multiply-adds an output element, from which
// a checkpointed block keeps a convolution's output (checkpointBlock).
const saveMinMACs = 576

// kaiming re-draws the part's convolution weights from torchvision's
// kaiming-normal (fan-out, ReLU gain).
func kaiming(p Part) Part {
	build := p.build
	p.build = func(be tensor.Backend, rng *rand.Rand) nn.Layer {
		l := build(be, rng)
		for _, v := range l.State() {
			if strings.HasSuffix(v.Name, "weight") && v.Value.Dims() == 4 {
				fanOut := v.Value.Shape[0] * v.Value.Shape[2] * v.Value.Shape[3]
				std := math.Sqrt(2 / float64(fanOut))
				for i := range v.Value.Data {
					v.Value.Data[i] = float32(rng.NormFloat64() * std)
				}
			}
		}
		return l
	}
	return p
}
