package cpu

import (
	"math"

	"github.com/gorun/gorun/model/tensor"
)

// LogSoftmax implements tensor.Backend.
func (b *Backend) LogSoftmax(x, y *tensor.Tensor) {
	n, c := x.Shape[0], x.Shape[1]
	for i := 0; i < n; i++ {
		in := x.Data[i*c : (i+1)*c]
		out := y.Data[i*c : (i+1)*c]
		mx := float32(math.Inf(-1))
		for _, v := range in {
			mx = max(mx, v)
		}
		var s float64
		for _, v := range in {
			s += math.Exp(float64(v - mx))
		}
		lse := mx + float32(math.Log(s))
		for j, v := range in {
			out[j] = v - lse
		}
	}
}

// LogSoftmaxBackward implements tensor.Backend.
func (b *Backend) LogSoftmaxBackward(y, dy, dx *tensor.Tensor) {
	n, c := y.Shape[0], y.Shape[1]
	for i := 0; i < n; i++ {
		out := y.Data[i*c : (i+1)*c]
		g := dy.Data[i*c : (i+1)*c]
		d := dx.Data[i*c : (i+1)*c]
		var s float32
		for _, v := range g {
			s += v
		}
		for j, v := range out {
			d[j] = g[j] - float32(math.Exp(float64(v)))*s
		}
	}
}

// NLLLoss implements tensor.Backend.
func (b *Backend) NLLLoss(logp *tensor.Tensor, target []int32) float32 {
	n, c := logp.Shape[0], logp.Shape[1]
	var s float64
	for i := 0; i < n; i++ {
		s -= float64(logp.Data[i*c+int(target[i])])
	}
	return float32(s / float64(n))
}

// NLLLossBackward implements tensor.Backend.
func (b *Backend) NLLLossBackward(target []int32, dlogp *tensor.Tensor, scale float32) {
	n, c := dlogp.Shape[0], dlogp.Shape[1]
	clear(dlogp.Data)
	v := -scale / float32(n)
	for i := 0; i < n; i++ {
		dlogp.Data[i*c+int(target[i])] = v
	}
}
