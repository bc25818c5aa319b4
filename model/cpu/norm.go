package cpu

import (
	"math"

	"github.com/gorun/gorun/model/tensor"
)

// channelSums returns Σx per channel of x [N, C, ...] in float64.
func channelSums(x *tensor.Tensor, out []float64) {
	n, c, hw := tensor.Planes(x)
	for ch := 0; ch < c; ch++ {
		var s float64
		for i := 0; i < n; i++ {
			for _, v := range x.Data[(i*c+ch)*hw : (i*c+ch+1)*hw] {
				s += float64(v)
			}
		}
		out[ch] = s
	}
}

// BatchNorm implements tensor.Backend. Statistics accumulate in float64;
// with p.SumAcross they are the whole distributed batch's.
func (b *Backend) BatchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	n, c, hw := tensor.Planes(x)
	if p.Training {
		// Pass 1: the mean. Pass 2: the variance about it.
		stats := growF64(&b.stats, 2*c+1)[:c+1]
		channelSums(x, stats[:c])
		stats[c] = float64(n * hw)
		if p.SumAcross != nil {
			p.SumAcross(stats)
		}
		m := stats[c]
		means := stats[:c]
		for ch := range means {
			means[ch] /= m
		}
		ss := b.stats[c+1 : 2*c+1]
		for ch := 0; ch < c; ch++ {
			mean := means[ch]
			var acc float64
			for i := 0; i < n; i++ {
				for _, v := range x.Data[(i*c+ch)*hw : (i*c+ch+1)*hw] {
					d := float64(v) - mean
					acc += d * d
				}
			}
			ss[ch] = acc
		}
		if p.SumAcross != nil {
			p.SumAcross(ss)
		}
		mom := float64(p.Momentum)
		for ch := 0; ch < c; ch++ {
			variance := ss[ch] / m
			unbiased := variance
			if m > 1 {
				unbiased = ss[ch] / (m - 1)
			}
			runMean.Data[ch] = float32((1-mom)*float64(runMean.Data[ch]) + mom*means[ch])
			runVar.Data[ch] = float32((1-mom)*float64(runVar.Data[ch]) + mom*unbiased)
			saveMean.Data[ch] = float32(means[ch])
			saveInvStd.Data[ch] = float32(1 / math.Sqrt(variance+float64(p.Eps)))
		}
	} else {
		for ch := 0; ch < c; ch++ {
			saveMean.Data[ch] = runMean.Data[ch]
			saveInvStd.Data[ch] = float32(1 / math.Sqrt(float64(runVar.Data[ch])+float64(p.Eps)))
		}
	}
	for ch := 0; ch < c; ch++ {
		scale := saveInvStd.Data[ch] * gamma.Data[ch]
		shift := beta.Data[ch] - saveMean.Data[ch]*scale
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
	n, c, hw := tensor.Planes(x)
	// Per channel: Σdy and Σdy·x̂, then the element count.
	sums := growF64(&b.stats, 2*c+1)
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
		sums[2*ch], sums[2*ch+1] = sumDy, sumDyXhat
	}
	sums[2*c] = float64(n * hw)
	if p.Training && p.SumAcross != nil {
		p.SumAcross(sums)
	}
	m := sums[2*c]
	for ch := 0; ch < c; ch++ {
		invStd := float64(saveInvStd.Data[ch])
		mean := float64(saveMean.Data[ch])
		gm := float64(gamma.Data[ch])
		sumDy, sumDyXhat := sums[2*ch], sums[2*ch+1]
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

// growF64 returns (*buf)[:n], reallocating only when it is too short.
func growF64(buf *[]float64, n int) []float64 {
	if cap(*buf) < n {
		*buf = make([]float64, n)
	}
	*buf = (*buf)[:n]
	return *buf
}
