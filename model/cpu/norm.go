package cpu

import (
	"math"

	"github.com/gorun/gorun/model/tensor"
)

// BatchNorm implements tensor.Backend. Statistics accumulate in float64.
func (b *Backend) BatchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	n, c, hw := planes(x)
	m := n * hw
	for ch := 0; ch < c; ch++ {
		var mean, invStd float64
		if p.Training {
			var s float64
			for i := 0; i < n; i++ {
				for _, v := range x.Data[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					s += float64(v)
				}
			}
			mean = s / float64(m)
			var ss float64
			for i := 0; i < n; i++ {
				for _, v := range x.Data[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					d := float64(v) - mean
					ss += d * d
				}
			}
			variance := ss / float64(m)
			invStd = 1 / math.Sqrt(variance+float64(p.Eps))
			mom := float64(p.Momentum)
			unbiased := variance
			if m > 1 {
				unbiased = ss / float64(m-1)
			}
			runMean.Data[ch] = float32((1-mom)*float64(runMean.Data[ch]) + mom*mean)
			runVar.Data[ch] = float32((1-mom)*float64(runVar.Data[ch]) + mom*unbiased)
		} else {
			mean = float64(runMean.Data[ch])
			invStd = 1 / math.Sqrt(float64(runVar.Data[ch])+float64(p.Eps))
		}
		saveMean.Data[ch] = float32(mean)
		saveInvStd.Data[ch] = float32(invStd)
		scale := float32(invStd) * gamma.Data[ch]
		shift := beta.Data[ch] - float32(mean)*scale
		for i := 0; i < n; i++ {
			in := x.Data[(i*c+ch)*hw : (i*c+ch+1)*hw]
			out := y.Data[(i*c+ch)*hw : (i*c+ch+1)*hw]
			for s, v := range in {
				out[s] = v*scale + shift
			}
		}
	}
}

// BatchNormBackward implements tensor.Backend.
func (b *Backend) BatchNormBackward(x, dy, dx, gamma, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	n, c, hw := planes(x)
	m := float64(n * hw)
	for ch := 0; ch < c; ch++ {
		mean, invStd := float64(saveMean.Data[ch]), float64(saveInvStd.Data[ch])
		var sumDy, sumDyXhat float64
		for i := 0; i < n; i++ {
			in := x.Data[(i*c+ch)*hw : (i*c+ch+1)*hw]
			g := dy.Data[(i*c+ch)*hw : (i*c+ch+1)*hw]
			for s, v := range in {
				sumDy += float64(g[s])
				sumDyXhat += float64(g[s]) * (float64(v) - mean) * invStd
			}
		}
		dgamma.Data[ch] += float32(sumDyXhat)
		dbeta.Data[ch] += float32(sumDy)
		gm := float64(gamma.Data[ch])
		for i := 0; i < n; i++ {
			in := x.Data[(i*c+ch)*hw : (i*c+ch+1)*hw]
			g := dy.Data[(i*c+ch)*hw : (i*c+ch+1)*hw]
			out := dx.Data[(i*c+ch)*hw : (i*c+ch+1)*hw]
			if !p.Training {
				k := float32(gm * invStd)
				for s := range out {
					out[s] = g[s] * k
				}
				continue
			}
			// dx = γ·σ⁻¹·(dy − mean(dy) − x̂·mean(dy·x̂))
			k := gm * invStd / m
			for s, v := range in {
				xhat := (float64(v) - mean) * invStd
				out[s] = float32(k * (m*float64(g[s]) - sumDy - xhat*sumDyXhat))
			}
		}
	}
}
