// Package zoo builds the workshops' models with PyTorch's layer names, so
// their state matches the PyTorch definitions key for key:
//
//   - mnist: the PyTorch MNIST example network (seed 004), 1×28×28 input,
//     log-softmax output trained with NLL loss;
//   - cifarnet: CIFARNet (seed 000), 4 conv + batch norm + max pool and
//     3 fully connected layers with dropout, 3×32×32 input;
//   - cifarnet-staged: the same network as StagedCIFARNet's three
//     nn.Sequential stages (stage1, stage2, stage3) for pipelining;
//   - resnet18: torchvision's resnet18 with a 10-class fc (seed 002).
package zoo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// Model is a network with what a trainer needs to know about it.
type Model struct {
	Name string
	Net  nn.Layer
	// Stages are the pipeline stages, in order, when the model is built
	// for pipelining (Net is then their chain); nil otherwise.
	Stages []nn.Layer
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

var builders = map[string]func(tensor.Backend, *rand.Rand) *Model{
	"mnist":           MNISTNet,
	"cifarnet":        CIFARNet,
	"cifarnet-staged": StagedCIFARNet,
	"resnet18":        ResNet18,
}

// Names lists the models New knows.
func Names() []string {
	var n []string
	for k := range builders {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// New builds the named model with weights drawn from rng.
func New(name string, be tensor.Backend, rng *rand.Rand) (*Model, error) {
	b, ok := builders[name]
	if !ok {
		return nil, fmt.Errorf("zoo: unknown model %q (have %s)", name, strings.Join(Names(), ", "))
	}
	m := b(be, rng)
	skipDataGrad(m.Net)
	return m, nil
}

// skipDataGrad stops the network's first convolution from computing the
// gradient of its input, which is data: nothing uses it (PyTorch skips it
// the same way, the data not requiring grad).
func skipDataGrad(l nn.Layer) {
	for {
		switch c := l.(type) {
		case *nn.Chain:
			l = c.Layers[0]
			continue
		case *nn.Conv2d:
			c.NoInputGrad = true
		}
		return
	}
}

func child(name string, l nn.Layer) nn.Child { return nn.Child{Name: name, Layer: l} }

// MNISTNet is PyTorch's MNIST example:
// conv1(1→32, 3) → relu → conv2(32→64, 3) → relu → max_pool2d(2) →
// dropout1(0.25) → flatten → fc1(9216→128) → relu → dropout2(0.5) →
// fc2(128→10) → log_softmax.
func MNISTNet(be tensor.Backend, rng *rand.Rand) *Model {
	net := nn.NewChain(
		child("conv1", nn.NewConv2d(be, 1, 32, 3, nn.Conv2dOptions{}, rng)),
		child("", nn.NewReLU(be)),
		child("conv2", nn.NewConv2d(be, 32, 64, 3, nn.Conv2dOptions{}, rng)),
		child("", nn.NewReLU(be)),
		child("", nn.NewMaxPool2d(be, 2, 0, 0)),
		child("", nn.NewDropout(be, 0.25, rng.Uint64())),
		child("", nn.NewFlatten()),
		child("fc1", nn.NewLinear(be, 9216, 128, rng)),
		child("", nn.NewReLU(be)),
		child("", nn.NewDropout(be, 0.5, rng.Uint64())),
		child("fc2", nn.NewLinear(be, 128, 10, rng)),
		child("", nn.NewLogSoftmax(be)),
	)
	return &Model{Name: "mnist", Net: net, Input: []int{1, 28, 28}, Classes: 10, LogProbs: true}
}

// cifarLayers returns CIFARNet's layers in forward order, with their
// CIFARNet attribute names.
func cifarLayers(be tensor.Backend, rng *rand.Rand) []nn.Child {
	conv := func(in, out int) nn.Layer { return nn.NewConv2d(be, in, out, 3, nn.Conv2dOptions{Padding: 1}, rng) }
	return []nn.Child{
		child("conv1", conv(3, 64)), child("", nn.NewMaxPool2d(be, 2, 2, 0)), child("bn1", nn.NewBatchNorm2d(be, 64)), child("", nn.NewReLU(be)),
		child("conv2", conv(64, 128)), child("", nn.NewMaxPool2d(be, 2, 2, 0)), child("bn2", nn.NewBatchNorm2d(be, 128)), child("", nn.NewReLU(be)),
		child("conv3", conv(128, 256)), child("bn3", nn.NewBatchNorm2d(be, 256)), child("", nn.NewReLU(be)),
		child("conv4", conv(256, 512)), child("bn4", nn.NewBatchNorm2d(be, 512)), child("", nn.NewReLU(be)),
		child("", nn.NewFlatten()),
		child("fc1", nn.NewLinear(be, 512*8*8, 512, rng)), child("", nn.NewReLU(be)), child("", nn.NewDropout(be, 0.5, rng.Uint64())),
		child("fc2", nn.NewLinear(be, 512, 256, rng)), child("", nn.NewReLU(be)), child("", nn.NewDropout(be, 0.5, rng.Uint64())),
		child("fc3", nn.NewLinear(be, 256, 10, rng)),
	}
}

// CIFARNet is seed 000's network: per conv block conv3×3(pad 1) → [max
// pool 2 for blocks 1–2] → batch norm → relu (3→64→128→256→512), then
// flatten → fc1(32768→512) → relu → dropout(0.5) → fc2(512→256) → relu →
// dropout(0.5) → fc3(256→10).
func CIFARNet(be tensor.Backend, rng *rand.Rand) *Model {
	return &Model{Name: "cifarnet", Net: nn.NewChain(cifarLayers(be, rng)...), Input: []int{3, 32, 32}, Classes: 10}
}

// StagedCIFARNet is CIFARNet split at seed 000's stage boundaries into
// stage1 (conv1–conv2 blocks), stage2 (conv3–conv4 blocks and flatten) and
// stage3 (the fully connected layers), each an nn.Sequential, so its state
// keys are stage1.0.weight, …, stage3.6.bias, as PyTorch names them.
func StagedCIFARNet(be tensor.Backend, rng *rand.Rand) *Model {
	ls := cifarLayers(be, rng)
	seq := func(cs []nn.Child) nn.Layer {
		var layers []nn.Layer
		for _, c := range cs {
			layers = append(layers, c.Layer)
		}
		return nn.NewSequential(layers...)
	}
	stages := []nn.Layer{seq(ls[:8]), seq(ls[8:15]), seq(ls[15:])}
	net := nn.NewChain(child("stage1", stages[0]), child("stage2", stages[1]), child("stage3", stages[2]))
	return &Model{Name: "cifarnet-staged", Net: net, Stages: stages, Input: []int{3, 32, 32}, Classes: 10}
}

// ResNet18 is torchvision.models.resnet18 with a 10-class fc: conv 7×7/2 →
// bn → relu → max pool 3×3/2 → four stages of two BasicBlocks (64, 128,
// 256, 512 channels) → adaptive average pool → fc. Convolutions are
// initialised as torchvision does (kaiming-normal, fan-out, ReLU gain).
func ResNet18(be tensor.Backend, rng *rand.Rand) *Model {
	var children []nn.Child
	children = append(children,
		child("conv1", nn.NewConv2d(be, 3, 64, 7, nn.Conv2dOptions{Stride: 2, Padding: 3, NoBias: true}, rng)),
		child("bn1", nn.NewBatchNorm2d(be, 64)),
		child("", nn.NewReLU(be)),
		child("", nn.NewMaxPool2d(be, 3, 2, 1)),
	)
	in := 64
	for i, width := range []int{64, 128, 256, 512} {
		stride := 2
		if i == 0 {
			stride = 1
		}
		layer := nn.NewSequential(nn.NewBasicBlock(be, in, width, stride, rng), nn.NewBasicBlock(be, width, width, 1, rng))
		children = append(children, child(fmt.Sprintf("layer%d", i+1), layer))
		in = width
	}
	children = append(children,
		child("", nn.NewAdaptiveAvgPool2d(be, 1, 1)),
		child("", nn.NewFlatten()),
		child("fc", nn.NewLinear(be, 512, 10, rng)),
	)
	net := nn.NewChain(children...)
	for _, v := range net.State() {
		if strings.HasSuffix(v.Name, "weight") && v.Value.Dims() == 4 {
			fanOut := v.Value.Shape[0] * v.Value.Shape[2] * v.Value.Shape[3]
			std := math.Sqrt(2 / float64(fanOut))
			for i := range v.Value.Data {
				v.Value.Data[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
	return &Model{Name: "resnet18", Net: net, Input: []int{3, 32, 32}, Classes: 10}
}
