package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// channelSums returns Σx per channel of x [N, C, ...] in float64.
func refChannelSums(x *tensor.Tensor, out []float64) {
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

// refBatchNorm is batch norm as it was written first: every channel in
// turn, one running float64 sum, the test's reference.
func refBatchNorm(stats []float64, x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	n, c, hw := tensor.Planes(x)
	if p.Training {
		// Pass 1: the mean. Pass 2: the variance about it.
		stats = stats[:c+1]
		refChannelSums(x, stats[:c])
		stats[c] = float64(n * hw)
		if p.SumAcross != nil {
			p.SumAcross(stats)
		}
		m := stats[c]
		means := stats[:c]
		for ch := range means {
			means[ch] /= m
		}
		ss := make([]float64, c)
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

// refBatchNormBackward is refBatchNorm's backward.
func refBatchNormBackward(stats []float64, x, dy, dx, gamma, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	n, c, hw := tensor.Planes(x)
	// Per channel: Σdy and Σdy·x̂, then the element count.
	sums := stats
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

// batchNormCases runs body for every combination the batch norm tests
// cover: one and two threads, each shape, training and evaluation, with
// and without statistics combined across (here: two identical) replicas.
func batchNormCases(t *testing.T, shapes [][]int, body func(be *Backend, name string, shape []int, p tensor.BatchNormParams)) {
	t.Helper()
	double := func(v []float64) {
		for i := range v {
			v[i] *= 2
		}
	}
	for _, threads := range []int{1, 2} {
		be := New(threads)
		defer be.Close()
		for _, shape := range shapes {
			for _, training := range []bool{true, false} {
				for _, across := range []bool{false, true} {
					p := tensor.BatchNormParams{Training: training, Momentum: 0.1, Eps: 1e-5}
					if across {
						p.SumAcross = double
					}
					body(be, fmt.Sprintf("threads=%d/%v/training=%v/across=%v", threads, shape, training, across), shape, p)
				}
			}
		}
	}
}

// bnOuts is what a batch norm's forward and backward passes write.
type bnOuts struct{ y, runMean, runVar, mean, invStd, dx, dgamma, dbeta *tensor.Tensor }

// newBNOuts returns zeroed outputs for x of shape, the running statistics
// starting at runMean and runVar.
func newBNOuts(shape []int, runMean, runVar float32) bnOuts {
	c := shape[1]
	o := bnOuts{tensor.New(shape...), tensor.New(c), tensor.New(c), tensor.New(c), tensor.New(c), tensor.New(shape...), tensor.New(c), tensor.New(c)}
	for i := range c {
		o.runMean.Data[i], o.runVar.Data[i] = runMean, runVar
	}
	return o
}

// run runs a batch norm's forward and backward passes (with the relu
// fused when relu is set) on be, into o.
func (o bnOuts) run(be *Backend, x, dy, gamma, beta *tensor.Tensor, p tensor.BatchNormParams, relu bool) bnOuts {
	if relu {
		be.BatchNormReLU(x, o.y, gamma, beta, o.runMean, o.runVar, o.mean, o.invStd, p)
		be.BatchNormReLUBackward(x, dy, o.dx, gamma, beta, o.dgamma, o.dbeta, o.mean, o.invStd, p)
		return o
	}
	be.BatchNorm(x, o.y, gamma, beta, o.runMean, o.runVar, o.mean, o.invStd, p)
	be.BatchNormBackward(x, dy, o.dx, gamma, o.dgamma, o.dbeta, o.mean, o.invStd, p)
	return o
}

// bnPair is one output of two runs, named.
type bnPair struct {
	what      string
	got, want *tensor.Tensor
}

// pairs returns got's outputs beside want's.
func (got bnOuts) pairs(want bnOuts) []bnPair {
	return []bnPair{{"y", got.y, want.y}, {"running mean", got.runMean, want.runMean}, {"running var", got.runVar, want.runVar},
		{"mean", got.mean, want.mean}, {"inverse std", got.invStd, want.invStd}, {"dx", got.dx, want.dx},
		{"dgamma", got.dgamma, want.dgamma}, {"dbeta", got.dbeta, want.dbeta}}
}

// sameBNBits fails t at the first output of got whose bits differ from
// want's; how names the two runs.
func sameBNBits(t *testing.T, name string, got, want bnOuts, how string) {
	t.Helper()
	for _, r := range got.pairs(want) {
		for i, v := range r.want.Data {
			if math.Float32bits(r.got.Data[i]) != math.Float32bits(v) {
				t.Fatalf("%s: %s[%d] = %v, %v", name, r.what, i, r.got.Data[i], fmt.Sprintf(how, v))
			}
		}
	}
}

// TestBatchNormMatchesReference runs batch norm forward and backward,
// training and evaluation, on one and two threads, with and without
// statistics combined across (here: two identical) replicas, against the
// straightforward float64 version it replaced.
func TestBatchNormMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	batchNormCases(t, [][]int{{2, 3, 5, 7}, {4, 64, 17, 17}, {3, 1, 1, 1}, {6, 5}, {32, 40, 8, 8}}, func(be *Backend, name string, shape []int, p tensor.BatchNormParams) {
		c := shape[1]
		x := randTensor(rng, shape...)
		for i := range x.Data {
			x.Data[i] = x.Data[i]*0.5 + 50 // a mean far from zero against the spread, as activations can have
		}
		gamma, beta := randTensor(rng, c), randTensor(rng, c)
		run := func(ref bool) bnOuts {
			o := newBNOuts(shape, 0.5, 2)
			dy := tensor.New(shape...)
			for i := range dy.Data {
				dy.Data[i] = float32(math.Sin(float64(i)))
			}
			if ref {
				stats := make([]float64, 2*c+1)
				refBatchNorm(stats, x, o.y, gamma, beta, o.runMean, o.runVar, o.mean, o.invStd, p)
				refBatchNormBackward(stats, x, dy, o.dx, gamma, o.dgamma, o.dbeta, o.mean, o.invStd, p)
			} else {
				be.BatchNorm(x, o.y, gamma, beta, o.runMean, o.runVar, o.mean, o.invStd, p)
				be.BatchNormBackward(x, dy, o.dx, gamma, o.dgamma, o.dbeta, o.mean, o.invStd, p)
			}
			return o
		}
		got, want := run(false), run(true)
		for _, r := range got.pairs(want) {
			scale := 0.0
			for _, v := range r.want.Data {
				scale = max(scale, math.Abs(float64(v)))
			}
			tol := 1e-5 * (1 + scale)
			if r.what == "dx" {
				tol = 2e-6 * scale // float32 elements, float64 coefficients: a few roundings, no cancellation
			}
			for i, v := range r.want.Data {
				if d := math.Abs(float64(r.got.Data[i]) - float64(v)); d > tol || math.IsNaN(float64(r.got.Data[i])) {
					t.Fatalf("%s: %s[%d] = %v, the reference gives %v", name, r.what, i, r.got.Data[i], v)
				}
			}
		}
	})
}

// TestBatchNormNearlyConstant: a channel far from zero with a tiny spread
// (1000 ± 0.001: the variance 1e-12 of the mean's square) gets its
// variance right, with and without statistics combined across replicas
// (the running mean then starts at 1000, as after training on such data).
func TestBatchNormNearlyConstant(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	be := New(1)
	defer be.Close()
	shape := []int{4, 2, 8, 8}
	x := randTensor(rng, shape...)
	for i := range x.Data {
		x.Data[i] = 1000 + 1e-3*x.Data[i]
	}
	for _, across := range []bool{false, true} {
		p := tensor.BatchNormParams{Training: true, Momentum: 0.1, Eps: 0}
		if across {
			p.SumAcross = func([]float64) {}
		}
		gamma, beta := tensor.New(2), tensor.New(2)
		rm, rv, mean, invStd := tensor.New(2), tensor.New(2), tensor.New(2), tensor.New(2)
		wantMean, wantInvStd := tensor.New(2), tensor.New(2)
		rm.Data[0], rm.Data[1] = 1000, 1000
		refBatchNorm(make([]float64, 5), x, tensor.New(shape...), gamma, beta, tensor.New(2), tensor.New(2), wantMean, wantInvStd, p)
		be.BatchNorm(x, tensor.New(shape...), gamma, beta, rm, rv, mean, invStd, p)
		for ch := range 2 {
			if d := math.Abs(float64(invStd.Data[ch])/float64(wantInvStd.Data[ch]) - 1); d > 1e-6 || mean.Data[ch] != wantMean.Data[ch] {
				t.Errorf("across %v, channel %d: mean %v, 1/σ %v; the reference gives %v, %v", across, ch, mean.Data[ch], invStd.Data[ch], wantMean.Data[ch], wantInvStd.Data[ch])
			}
		}
	}
}

// BenchmarkBatchNorm times a training batch norm forward and backward at
// batch 32: on one of ResNet-50's shapes (256 channels of 56×56), plain,
// and on ResNet-18's smallest maps over CIFAR-10's images (4×4 to 1×1,
// planes shorter than a vector), with the relu fused as its blocks run it.
//
//	go test ./model/cpu -run '^$' -bench BatchNorm
func BenchmarkBatchNorm(b *testing.B) {
	for _, s := range []struct {
		shape []int
		relu  bool
	}{{[]int{32, 256, 56, 56}, false}, {[]int{32, 128, 4, 4}, true}, {[]int{32, 256, 2, 2}, true}, {[]int{32, 512, 1, 1}, true}} {
		rng := rand.New(rand.NewPCG(1, 2))
		x, dy := randTensor(rng, s.shape...), randTensor(rng, s.shape...)
		y, dx := tensor.New(s.shape...), tensor.New(s.shape...)
		c := s.shape[1]
		gamma, beta := randTensor(rng, c), randTensor(rng, c)
		rm, rv, mean, invStd, dg, db := tensor.New(c), tensor.New(c), tensor.New(c), tensor.New(c), tensor.New(c), tensor.New(c)
		p := tensor.BatchNormParams{Training: true, Momentum: 0.1, Eps: 1e-5}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%dx%dx%dx%d/relu=%v/threads=%d", s.shape[0], s.shape[1], s.shape[2], s.shape[3], s.relu, threads), func(b *testing.B) {
				be := New(threads)
				defer be.Close()
				step := func() {
					if s.relu {
						be.BatchNormReLU(x, y, gamma, beta, rm, rv, mean, invStd, p)
						be.BatchNormReLUBackward(x, dy, dx, gamma, beta, dg, db, mean, invStd, p)
						return
					}
					be.BatchNorm(x, y, gamma, beta, rm, rv, mean, invStd, p)
					be.BatchNormBackward(x, dy, dx, gamma, dg, db, mean, invStd, p)
				}
				b.SetBytes(int64(4 * len(x.Data) * 8)) // the arrays read and written: 3 forward, 5 backward
				step()                                 // the outputs' first touch, outside the timing
				for b.Loop() {
					step()
				}
			})
		}
	}
}

// TestBatchNormReLUMatchesSeparate holds the fused batch norm + relu to
// the two calls it replaces, bit for bit: BatchNorm then ReLU in place,
// and ReLUBackward then BatchNormBackward (its dx, dgamma and dbeta),
// training and evaluation, with and without statistics combined across
// replicas, on one and two threads; inputs centred on zero so the relu
// cuts about half, exact zeros among them.
func TestBatchNormReLUMatchesSeparate(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	batchNormCases(t, [][]int{{2, 3, 5, 7}, {4, 64, 17, 17}, {3, 2, 1, 1}, {6, 5}, {8, 16, 7, 7}}, func(be *Backend, name string, shape []int, p tensor.BatchNormParams) {
		c := shape[1]
		x, dy := randTensor(rng, shape...), randTensor(rng, shape...)
		for i := range x.Data {
			if rng.IntN(10) == 0 {
				x.Data[i] = 0
			}
		}
		gamma, beta := randTensor(rng, c), randTensor(rng, c)
		run := func(fused bool) bnOuts {
			o := newBNOuts(shape, 0.1, 0.9)
			if fused {
				be.BatchNormReLU(x, o.y, gamma, beta, o.runMean, o.runVar, o.mean, o.invStd, p)
				be.BatchNormReLUBackward(x, dy, o.dx, gamma, beta, o.dgamma, o.dbeta, o.mean, o.invStd, p)
				return o
			}
			be.BatchNorm(x, o.y, gamma, beta, o.runMean, o.runVar, o.mean, o.invStd, p)
			be.ReLU(o.y, o.y)
			g := tensor.New(shape...)
			be.ReLUBackward(o.y, dy, g)
			be.BatchNormBackward(x, g, o.dx, gamma, o.dgamma, o.dbeta, o.mean, o.invStd, p)
			return o
		}
		sameBNBits(t, name, run(true), run(false), "fused; %v separately")
	})
}

// TestBatchNormOneSweepSameBits holds the one-sweep batch norm (each
// channel's two passes back to back, used without a cross-replica sum)
// to the bits of the phase-by-phase one that a cross-replica sum needs:
// with a sum that changes nothing and a running mean starting at each
// channel's first value (the one sweep's shift K), forward and backward,
// with and without the relu, on one and two threads, give the same y,
// statistics, dx, dgamma and dbeta.
func TestBatchNormOneSweepSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, threads := range []int{1, 2} {
		be := New(threads)
		defer be.Close()
		for _, shape := range [][]int{{2, 3, 5, 7}, {4, 64, 17, 17}, {3, 2, 1, 1}, {6, 5}, {32, 40, 8, 8}} {
			for _, relu := range []bool{false, true} {
				name := fmt.Sprintf("threads=%d/%v/relu=%v", threads, shape, relu)
				n, c := shape[0], shape[1]
				hw := tensor.Volume(shape) / (n * c)
				x, dy := randTensor(rng, shape...), randTensor(rng, shape...)
				for i := range x.Data {
					x.Data[i] = x.Data[i]*0.5 + 3
				}
				gamma, beta := randTensor(rng, c), randTensor(rng, c)
				run := func(across func([]float64)) bnOuts {
					o := newBNOuts(shape, 0, 0.9)
					for ch := range c {
						o.runMean.Data[ch] = x.Data[ch*hw]
					}
					return o.run(be, x, dy, gamma, beta, tensor.BatchNormParams{Training: true, Momentum: 0.1, Eps: 1e-5, SumAcross: across}, relu)
				}
				sameBNBits(t, name, run(nil), run(func([]float64) {}), "in one sweep, %v phase by phase")
			}
		}
	}
}

// TestBatchNormSavedStats: a training pass with SavedStats, over the x a
// training pass has just normalised, with that pass's saved statistics,
// gives the same y to the bit, with and without the relu, and leaves the
// statistics, the running statistics and the cross-replica sum alone.
func TestBatchNormSavedStats(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	batchNormCases(t, [][]int{{2, 3, 5, 7}, {4, 64, 17, 17}, {6, 5}, {32, 40, 8, 8}}, func(be *Backend, name string, shape []int, p tensor.BatchNormParams) {
		if !p.Training {
			return
		}
		c := shape[1]
		x, gamma, beta := randTensor(rng, shape...), randTensor(rng, c), randTensor(rng, c)
		runMean, runVar, mean, invStd := tensor.New(c), tensor.New(c), tensor.New(c), tensor.New(c)
		for i := range c {
			runMean.Data[i], runVar.Data[i] = 0.1, 0.9
		}
		for _, relu := range []bool{false, true} {
			norm := be.BatchNorm
			if relu {
				norm = be.BatchNormReLU
			}
			y, again := tensor.New(shape...), tensor.New(shape...)
			norm(x, y, gamma, beta, runMean, runVar, mean, invStd, p)
			kept := slices.Concat(runMean.Data, runVar.Data, mean.Data, invStd.Data)
			summed := 0
			saved := p
			saved.SavedStats = true
			saved.SumAcross = func([]float64) { summed++ }
			norm(x, again, gamma, beta, runMean, runVar, mean, invStd, saved)
			if summed != 0 {
				t.Fatalf("%s/relu=%v: the statistics were summed across %d times", name, relu, summed)
			}
			if !slices.Equal(kept, slices.Concat(runMean.Data, runVar.Data, mean.Data, invStd.Data)) {
				t.Fatalf("%s/relu=%v: the statistics or running statistics changed", name, relu)
			}
			for i, v := range y.Data {
				if math.Float32bits(again.Data[i]) != math.Float32bits(v) {
					t.Fatalf("%s/relu=%v: y[%d] = %v with the saved statistics, %v computed", name, relu, i, again.Data[i], v)
				}
			}
		}
	})
}
