package cpu

import (
	"math"

	"github.com/gorun/gorun/model/tensor"
)

// Batch norm runs in phases over channel ranges spread across the threads
// (each channel's work is the same whatever the thread count, so results
// do not depend on it): the statistics, then — after SumAcross has
// combined them over the replicas, on the calling goroutine — the
// normalisation. Sums accumulate in float64, in independent partial sums
// per plane so that the additions do not wait on each other. The mean and
// variance come from one pass: Σ(x − K) and Σ(x − K)², K a value of the
// channel itself (its first) — within a few standard deviations of the
// mean, so the variance Σ(x − K)² − (Σ(x − K))²/m loses nothing to
// cancellation. Statistics combined across replicas need one K for all:
// there K is the running mean, the same on every replica, which costs
// precision only while the variance is below about 1e-10 of
// (mean − running mean)².
//
// Without a cross-replica sum (one process, or DDP without SyncBatchNorm)
// a channel's two passes run back to back (bnForward, bnBackward): the
// second reads the channel's planes while the first has left them in the
// core's caches, where running each pass over every channel first sent
// them out to memory and back. Each channel's arithmetic is the same
// either way, so are the bits.

// bnPhase is what a bnTask computes for its channels.
type bnPhase int

const (
	bnMoments   bnPhase = iota // stats[ch], stats[c+1+ch] = Σ(x − K), Σ(x − K)², K = shift[ch]
	bnNormalize                // y = x·scale + shift with saveMean, saveInvStd
	bnGradSums                 // stats[2ch], stats[2ch+1] = Σdy, Σdy·x̂
	bnGradInput                // dx from the sums
	bnForward                  // bnMoments, the channel's statistics, then bnNormalize
	bnBackward                 // bnGradSums, dgamma and dbeta, then bnGradInput
)

// bnTask is one phase of a batch norm, kept in the backend so that handing
// it to the pool allocates nothing.
type bnTask struct {
	phase                bnPhase
	x, y, dy, dx         *tensor.Tensor
	gamma, beta          *tensor.Tensor
	saveMean, saveInvStd *tensor.Tensor
	shift                []float32 // bnMoments' K per channel
	stats                []float64
	n, c, hw, per        int
	training             bool
	relu                 bool // the relu after the batch norm is fused in (BatchNormReLU)
	runMean, runVar      *tensor.Tensor
	dgamma, dbeta        *tensor.Tensor
	momentum, eps        float64
	vec                  vecOps    // the per-element passes' kernels (vecops.go)
	perPlane             bool      // planes shorter than a vector still go to vec (Backend.bnPerPlane)
	coefs                []bnCoefs // short planes' coefficients by channel (norm_short.go)
	normScale, normShift []float32 // short planes' normalising maps by channel
}

// runBN runs phase over every channel, in ranges across the threads.
func (b *Backend) runBN(phase bnPhase) {
	t := &b.bn
	t.phase, t.vec = phase, b.vec
	grain := elemGrain
	if t.shortPlanes() {
		t.coefs = grow(&b.bnCoefs, t.c)
		t.normScale, t.normShift = grow(&b.bnScale, t.c), grow(&b.bnShift, t.c)
		grain = shortGrain
	}
	chunks := min(b.pool.Threads(), t.c, ceilDiv(t.n*t.c*t.hw, grain))
	if chunks <= 1 {
		t.per = t.c
		t.Do(0, 0)
		return
	}
	t.per = ceilDiv(t.c, chunks)
	b.pool.Run(ceilDiv(t.c, t.per), t)
}

func (t *bnTask) Do(_, i int) {
	lo, hi := i*t.per, min((i+1)*t.per, t.c)
	if t.shortPlanes() {
		t.shortRange(lo, hi)
		return
	}
	for ch := lo; ch < hi; ch++ {
		t.channel(ch)
	}
}

// plane returns image i's plane of channel ch of v.
func (t *bnTask) plane(v *tensor.Tensor, i, ch int) []float32 {
	at := (i*t.c + ch) * t.hw
	return v.Data[at : at+t.hw]
}

func (t *bnTask) channel(ch int) {
	switch t.phase {
	case bnForward:
		t.phaseChannel(bnMoments, ch)
		t.statistics(ch)
		t.phaseChannel(bnNormalize, ch)
	case bnBackward:
		t.phaseChannel(bnGradSums, ch)
		t.paramGrads(ch)
		t.phaseChannel(bnGradInput, ch)
	default:
		t.phaseChannel(t.phase, ch)
	}
}

// statistics sets channel ch's mean and inverse standard deviation, and
// updates its running statistics, from its moments (bnMoments) and the
// element count in stats[c].
func (t *bnTask) statistics(ch int) {
	c := t.c
	m := t.stats[c]
	d := t.stats[ch] / m // mean − K
	mean := float64(t.shift[ch]) + d
	ss := max(t.stats[c+1+ch]-d*t.stats[ch], 0) // Σ(x − mean)²
	variance := ss / m
	unbiased := variance
	if m > 1 {
		unbiased = ss / (m - 1)
	}
	mom := t.momentum
	t.runMean.Data[ch] = float32((1-mom)*float64(t.runMean.Data[ch]) + mom*mean)
	t.runVar.Data[ch] = float32((1-mom)*float64(t.runVar.Data[ch]) + mom*unbiased)
	t.saveMean.Data[ch] = float32(mean)
	t.saveInvStd.Data[ch] = float32(1 / math.Sqrt(variance+t.eps))
}

// paramGrads adds channel ch's weight and bias gradients from its sums
// (bnGradSums).
func (t *bnTask) paramGrads(ch int) {
	t.dgamma.Data[ch] += float32(t.stats[2*ch+1])
	t.dbeta.Data[ch] += float32(t.stats[2*ch])
}

// phaseChannel runs one phase's work for channel ch.
func (t *bnTask) phaseChannel(phase bnPhase, ch int) {
	c := t.c
	switch phase {
	case bnMoments:
		k := float64(t.shift[ch])
		var s1, s2 float64
		for i := range t.n {
			a, b := t.vec.moments(t.plane(t.x, i, ch), k)
			s1 += a
			s2 += b
		}
		t.stats[ch], t.stats[c+1+ch] = s1, s2
	case bnNormalize:
		scale, shift := t.affine(ch)
		for i := range t.n {
			if t.relu {
				t.vec.affineReLU(t.plane(t.y, i, ch), t.plane(t.x, i, ch), scale, shift)
			} else {
				t.vec.affine(t.plane(t.y, i, ch), t.plane(t.x, i, ch), scale, shift)
			}
		}
	case bnGradSums:
		mean, invStd := float64(t.saveMean.Data[ch]), float64(t.saveInvStd.Data[ch])
		scale, shift := t.reluAffine(ch)
		var sumDy, sumDyDev float64
		for i := range t.n {
			var a, b float64
			if t.relu {
				a, b = t.vec.gradSumsReLU(t.plane(t.x, i, ch), t.plane(t.dy, i, ch), mean, scale, shift)
			} else {
				a, b = t.vec.gradSums(t.plane(t.x, i, ch), t.plane(t.dy, i, ch), mean)
			}
			sumDy += a
			sumDyDev += b
		}
		t.stats[2*ch], t.stats[2*ch+1] = sumDy, sumDyDev*invStd
	case bnGradInput:
		invStd := float64(t.saveInvStd.Data[ch])
		k := float64(t.gamma.Data[ch]) * invStd
		if !t.training {
			kf := float32(k)
			scale, shift := t.reluAffine(ch)
			for i := range t.n {
				g, x := t.plane(t.dy, i, ch), t.plane(t.x, i, ch)
				out := t.plane(t.dx, i, ch)[:len(g)]
				for s, v := range g {
					if t.relu {
						v = reluGate(v, x[s], scale, shift)
					}
					out[s] = v * kf
				}
			}
			return
		}
		// dx = γ·σ⁻¹·(dy − mean(dy) − x̂·mean(dy·x̂)), x̂ = (x − μ)·σ⁻¹:
		// dx = a·dy + b·(x − μ) + d, the coefficients in float64, the
		// elements in float32 (x − μ first: x·b and μ·b can be large
		// and cancel).
		m := t.stats[2*c]
		meanDy, meanDyXhat := t.stats[2*ch]/m, t.stats[2*ch+1]/m
		mu := t.saveMean.Data[ch]
		a := float32(k)
		bx := float32(-k * invStd * meanDyXhat)
		d := float32(-k * meanDy)
		if !t.relu {
			for i := range t.n {
				t.vec.bnGrad(t.plane(t.dx, i, ch), t.plane(t.dy, i, ch), t.plane(t.x, i, ch), a, bx, mu, d)
			}
			return
		}
		scale, shift := t.affine(ch)
		for i := range t.n {
			t.vec.bnGradReLU(t.plane(t.dx, i, ch), t.plane(t.dy, i, ch), t.plane(t.x, i, ch), a, bx, mu, d, scale, shift)
		}
	}
}

// reluAffine is affine where the relu is fused in and its mask needs it,
// else zeros (the backward of a plain batch norm has no beta).
func (t *bnTask) reluAffine(ch int) (scale, shift float32) {
	if !t.relu {
		return 0, 0
	}
	return t.affine(ch)
}

// affine is channel ch's normalisation as one multiply and one add, y =
// x·scale + shift: the forward pass's, and the fused relu's backward
// finds the relu's output again with the same arithmetic.
func (t *bnTask) affine(ch int) (scale, shift float32) {
	return evalAffine(t.saveInvStd.Data[ch], t.gamma.Data[ch], t.beta.Data[ch], t.saveMean.Data[ch])
}

// evalAffine is a channel's normalising map y = x·scale + shift from its
// inverse standard deviation, weight, bias and mean.
func evalAffine(invStd, gamma, beta, mean float32) (scale, shift float32) {
	scale = invStd * gamma
	return scale, beta - mean*scale
}

// BatchNorm implements tensor.Backend. Statistics accumulate in float64;
// with p.SumAcross they are the whole distributed batch's.
func (b *Backend) BatchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	b.batchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd, p, false)
}

// BatchNormReLU implements tensor.BatchNormReLUBackend: the relu is applied
// as each element is normalised.
func (b *Backend) BatchNormReLU(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	b.batchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd, p, true)
}

func (b *Backend) batchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams, relu bool) {
	n, c, hw := tensor.Planes(x)
	t := &b.bn
	*t = bnTask{x: x, y: y, gamma: gamma, beta: beta, saveMean: saveMean, saveInvStd: saveInvStd, n: n, c: c, hw: hw, training: p.Training, relu: relu,
		runMean: runMean, runVar: runVar, momentum: float64(p.Momentum), eps: float64(p.Eps), perPlane: b.bnPerPlane}
	switch {
	case p.Training && p.SavedStats:
		// The statistics as the earlier pass over x left them.
	case p.Training:
		// The first two moments about K, in one pass.
		t.stats = grow(&b.stats, 2*c+1)
		t.stats[c] = float64(n * hw)
		if p.SumAcross == nil {
			t.shift = grow(&b.shift, c)
			for ch := range c {
				t.shift[ch] = x.Data[ch*hw]
			}
			b.runBN(bnForward)
			return
		}
		t.shift = runMean.Data
		b.runBN(bnMoments)
		p.SumAcross(t.stats)
		for ch := range c {
			t.statistics(ch)
		}
	default:
		for ch := range c {
			saveMean.Data[ch] = runMean.Data[ch]
			saveInvStd.Data[ch] = float32(1 / math.Sqrt(float64(runVar.Data[ch])+float64(p.Eps)))
		}
	}
	b.runBN(bnNormalize)
}

// BatchNormBackward implements tensor.Backend.
func (b *Backend) BatchNormBackward(x, dy, dx, gamma, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	b.batchNormBackward(x, dy, dx, gamma, nil, dgamma, dbeta, saveMean, saveInvStd, p)
}

// BatchNormReLUBackward implements tensor.BatchNormReLUBackend: where the
// relu stopped the gradient is found again from x as each element is
// read, with the forward pass's arithmetic.
func (b *Backend) BatchNormReLUBackward(x, dy, dx, gamma, beta, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	b.batchNormBackward(x, dy, dx, gamma, beta, dgamma, dbeta, saveMean, saveInvStd, p)
}

// batchNormBackward is BatchNormBackward, with the relu fused in when beta
// is set.
func (b *Backend) batchNormBackward(x, dy, dx, gamma, beta, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	n, c, hw := tensor.Planes(x)
	t := &b.bn
	*t = bnTask{x: x, dy: dy, dx: dx, gamma: gamma, beta: beta, saveMean: saveMean, saveInvStd: saveInvStd, n: n, c: c, hw: hw, training: p.Training, relu: beta != nil,
		dgamma: dgamma, dbeta: dbeta, perPlane: b.bnPerPlane}
	// Per channel: Σdy and Σdy·x̂, then the element count.
	t.stats = grow(&b.stats, 2*c+1)
	t.stats[2*c] = float64(n * hw)
	if !p.Training || p.SumAcross == nil {
		b.runBN(bnBackward)
		return
	}
	b.runBN(bnGradSums)
	for ch := range c {
		t.paramGrads(ch)
	}
	p.SumAcross(t.stats)
	b.runBN(bnGradInput)
}
