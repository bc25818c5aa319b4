package cpu

import (
	"math"

	"github.com/gorun/gorun/model/tensor"
)

// SGDStep implements tensor.Backend with torch.optim.SGD's arithmetic.
func (b *Backend) SGDStep(p, g, buf *tensor.Tensor, o tensor.SGDOptions, first bool) {
	b.runElem(elemTask{op: opSGD, n: len(p.Data), x: p, y: g, z: buf, sgd: o, first: first}, elemGrain)
}

func sgdRange(vec vecOps, pd, gd, bd []float32, o tensor.SGDOptions, first bool) {
	if o.Momentum != 0 && !first && !o.Nesterov {
		// Every step but the first: the vector kernel where there is one.
		vec.sgdMomentum(pd, gd, bd, o.LR, o.WeightDecay, o.Momentum, 1-o.Dampening)
		return
	}
	gd = gd[:len(pd)]
	if o.Momentum != 0 {
		bd = bd[:len(pd)]
	}
	for i, w := range pd {
		d := gd[i]
		if o.WeightDecay != 0 {
			d += o.WeightDecay * w
		}
		if o.Momentum != 0 {
			if first {
				bd[i] = d
			} else {
				bd[i] = o.Momentum*bd[i] + (1-o.Dampening)*d
			}
			if o.Nesterov {
				d += o.Momentum * bd[i]
			} else {
				d = bd[i]
			}
		}
		pd[i] = w - o.LR*d
	}
}

// AdamStep implements tensor.Backend with torch.optim.Adam's arithmetic
// (amsgrad off).
func (b *Backend) AdamStep(p, g, m, v *tensor.Tensor, o tensor.AdamOptions, step int) {
	b.runElem(elemTask{op: opAdam, n: len(p.Data), x: p, y: g, z: m, w: v, adam: o, step: step}, elemGrain)
}

func adamRange(vec vecOps, pd, gd, md, vd []float32, o tensor.AdamOptions, step int) {
	bc1 := 1 - math.Pow(float64(o.Beta1), float64(step))
	bc2 := 1 - math.Pow(float64(o.Beta2), float64(step))
	stepSize := float32(float64(o.LR) / bc1)
	bc2Sqrt := float32(math.Sqrt(bc2))
	vec.adam(pd, gd, md, vd, adamConsts{step: stepSize, bc2: bc2Sqrt, eps: o.Eps, b1c: 1 - o.Beta1, b2: o.Beta2, b2c: 1 - o.Beta2, wd: o.WeightDecay})
}

// AdadeltaStep implements tensor.Backend with torch.optim.Adadelta's
// arithmetic.
func (b *Backend) AdadeltaStep(p, g, sqAvg, accDelta *tensor.Tensor, o tensor.AdadeltaOptions) {
	b.runElem(elemTask{op: opAdadelta, n: len(p.Data), x: p, y: g, z: sqAvg, w: accDelta, adadelta: o}, elemGrain)
}
