package cpu

// Batch norm over planes shorter than minVectorRow — the 2×2 and 1×1 maps
// of ResNet-18's last stages on CIFAR-10's images, a row per image and
// channel — runs its phases in the loops below instead of a vector call
// per plane: at 32 images × 512 channels of 1×1 the calls were nearly all
// of a batch norm's time (BenchmarkBatchNorm). The loops add each plane's
// terms as the vector kernels and laneSums do (shortTotal), so the bits
// are the per-plane path's. Every product is converted explicitly, as
// there, so that no compiler fuses it into a multiply-add (Go may, on
// arm64 and with GOAMD64=v3).

// shortGrain is the fewest elements of short planes worth handing to
// another thread: their loops take some 2 ns an element and phase.
const shortGrain = 1 << 12

// shortPlanes reports whether t's planes take the loops below.
func (t *bnTask) shortPlanes() bool { return t.hw < minVectorRow && !t.perPlane }

// shortRange is bnTask.Do's work on channels [lo, hi) when the planes are
// short: each phase over the range image by image, where the channels'
// planes lie side by side in memory (a channel's own planes lie c·hw
// floats apart).
func (t *bnTask) shortRange(lo, hi int) {
	switch t.phase {
	case bnForward:
		t.shortPhase(bnMoments, lo, hi)
		for ch := lo; ch < hi; ch++ {
			t.statistics(ch)
		}
		t.shortPhase(bnNormalize, lo, hi)
	case bnBackward:
		t.shortPhase(bnGradSums, lo, hi)
		for ch := lo; ch < hi; ch++ {
			t.paramGrads(ch)
		}
		t.shortPhase(bnGradInput, lo, hi)
	default:
		t.shortPhase(t.phase, lo, hi)
	}
}

// bnCoefs is what a phase needs of one channel, gathered before its loop
// over the images: k, moments' K or the channel's mean; the fused relu's
// y = x·scale + shift; the input gradient's map out = (a·g + bx·(x −
// mu)) + d in training, g·a in evaluation. (The normalisation's map goes
// to bnTask.normScale and normShift, the form affineRows takes.)
type bnCoefs struct {
	k                          float64
	a, bx, mu, d, scale, shift float32
}

// shortPhase runs one phase over channels [lo, hi) of short planes, with
// phaseChannel's arithmetic for each channel: the channels' coefficients
// first, then image by image a loop over the channels' planes (a function
// of its own per phase, small enough to keep its values in registers).
func (t *bnTask) shortPhase(phase bnPhase, lo, hi int) {
	c, hw := t.c, t.hw
	cf := t.coefs[lo:hi]
	for ch := range cf {
		if phase == bnNormalize {
			t.normScale[lo+ch], t.normShift[lo+ch] = t.affine(lo + ch)
			continue
		}
		t.phaseCoefs(&cf[ch], phase, lo+ch)
	}
	var s1, s2 []float64
	switch phase {
	case bnMoments:
		s1, s2 = t.stats[lo:hi], t.stats[c+1+lo:c+1+hi]
	case bnGradSums:
		s1 = t.stats[2*lo : 2*hi] // Σdy, Σdy·(x − mean) by channel
	}
	clear(s1)
	clear(s2)
	for i := range t.n {
		at, end := (i*c+lo)*hw, (i*c+hi)*hw
		x := t.x.Data[at:end]
		switch phase {
		case bnMoments:
			shortMoments(cf, x, s1, s2, hw)
		case bnNormalize:
			affineRows(t.y.Data[at:end], x, hw, t.normScale[lo:hi], t.normShift[lo:hi], t.relu)
		case bnGradSums:
			shortGradSums(cf, x, t.dy.Data[at:end], s1, hw, t.relu)
		case bnGradInput:
			shortGradInput(cf, x, t.dy.Data[at:end], t.dx.Data[at:end], hw, t.relu, t.training)
		}
	}
	if phase == bnGradSums {
		for ch := range cf {
			s1[2*ch+1] *= float64(t.saveInvStd.Data[lo+ch])
		}
	}
}

// shortMoments adds one image's terms to the channels' moments about
// their K: s1[ch] += Σ(x − K), s2[ch] += Σ(x − K)² over each plane of hw
// elements in x.
func shortMoments(cf []bnCoefs, x []float32, s1, s2 []float64, hw int) {
	s1, s2 = s1[:len(cf)], s2[:len(cf)]
	switch hw {
	case 1:
		x = x[:len(cf)]
		for ch := range cf {
			d := float64(x[ch]) - cf[ch].k
			s1[ch] += d
			s2[ch] += float64(d * d)
		}
	case 4:
		x = x[:4*len(cf)]
		for ch := range cf {
			k, v := cf[ch].k, x[4*ch:4*ch+4:4*ch+4]
			d0, d1, d2, d3 := float64(v[0])-k, float64(v[1])-k, float64(v[2])-k, float64(v[3])-k
			s1[ch] += (d0 + d2) + (d1 + d3)
			s2[ch] += (float64(d0*d0) + float64(d2*d2)) + (float64(d1*d1) + float64(d3*d3))
		}
	default:
		var d, q [minVectorRow]float64
		for ch := range cf {
			k := cf[ch].k
			for j, v := range x[ch*hw : ch*hw+hw] {
				dj := float64(v) - k
				d[j], q[j] = dj, float64(dj*dj)
			}
			s1[ch] += shortTotal(&d, hw)
			s2[ch] += shortTotal(&q, hw)
		}
	}
}

// shortGradSums adds one image's terms to the channels' gradient sums:
// sums[2ch] += Σg, sums[2ch+1] += Σg·(x − mean), g the output gradient
// (through the fused relu's gate with relu set).
func shortGradSums(cf []bnCoefs, x, g []float32, sums []float64, hw int, relu bool) {
	x, g, sums = x[:hw*len(cf)], g[:hw*len(cf)], sums[:2*len(cf)]
	// term is one element's two terms.
	term := func(k *bnCoefs, v, gj float32) (float64, float64) {
		if relu {
			gj = reluGate(gj, v, k.scale, k.shift)
		}
		gd := float64(gj)
		return gd, float64(gd * (float64(v) - k.k))
	}
	switch hw {
	case 1:
		for ch := range cf {
			a, b := term(&cf[ch], x[ch], g[ch])
			sums[2*ch] += a
			sums[2*ch+1] += b
		}
	case 4:
		for ch := range cf {
			k, v, gc := &cf[ch], x[4*ch:4*ch+4:4*ch+4], g[4*ch:4*ch+4:4*ch+4]
			a0, b0 := term(k, v[0], gc[0])
			a1, b1 := term(k, v[1], gc[1])
			a2, b2 := term(k, v[2], gc[2])
			a3, b3 := term(k, v[3], gc[3])
			sums[2*ch] += (a0 + a2) + (a1 + a3)
			sums[2*ch+1] += (b0 + b2) + (b1 + b3)
		}
	default:
		var a, b [minVectorRow]float64
		for ch := range cf {
			k, gc := &cf[ch], g[ch*hw:ch*hw+hw]
			for j, v := range x[ch*hw : ch*hw+hw] {
				a[j], b[j] = term(k, v, gc[j])
			}
			sums[2*ch] += shortTotal(&a, hw)
			sums[2*ch+1] += shortTotal(&b, hw)
		}
	}
}

// shortGradInput sets one image's input gradient out from the output
// gradient g by the channels' maps (bnCoefs).
func shortGradInput(cf []bnCoefs, x, g, out []float32, hw int, relu, training bool) {
	x, g, out = x[:hw*len(cf)], g[:hw*len(cf)], out[:hw*len(cf)]
	// grad is one element's.
	grad := func(k *bnCoefs, v, gj float32) float32 {
		if relu {
			gj = reluGate(gj, v, k.scale, k.shift)
		}
		if training {
			return float32(k.a*gj) + float32(k.bx*(v-k.mu)) + k.d
		}
		return gj * k.a
	}
	if hw == 1 {
		for ch := range cf {
			out[ch] = grad(&cf[ch], x[ch], g[ch])
		}
		return
	}
	for ch := range cf {
		k, gc, oc := &cf[ch], g[ch*hw:ch*hw+hw], out[ch*hw:ch*hw+hw]
		for j, v := range x[ch*hw : ch*hw+hw] {
			oc[j] = grad(k, v, gc[j])
		}
	}
}

// phaseCoefs sets r to what phase needs of channel ch, computed as
// phaseChannel computes it. (Filled in place: a 32-byte result returned
// by value cost 20 ns a channel in stores to the stack and loads back.)
func (t *bnTask) phaseCoefs(r *bnCoefs, phase bnPhase, ch int) {
	switch phase {
	case bnMoments:
		r.k = float64(t.shift[ch])
	case bnGradSums:
		r.k = float64(t.saveMean.Data[ch])
		r.scale, r.shift = t.reluAffine(ch)
	case bnGradInput:
		invStd := float64(t.saveInvStd.Data[ch])
		k := float64(t.gamma.Data[ch]) * invStd
		r.a = float32(k)
		r.scale, r.shift = t.reluAffine(ch)
		if t.training {
			m := t.stats[2*t.c]
			meanDy, meanDyXhat := t.stats[2*ch]/m, t.stats[2*ch+1]/m
			r.mu = t.saveMean.Data[ch]
			r.bx = float32(-k * invStd * meanDyXhat)
			r.d = float32(-k * meanDy)
		}
	}
}

// shortTotal adds a plane's n < minVectorRow terms in the order the
// vector kernels and laneSums do — the first four in lanes 0–3 (then
// summed as lanes8 sums), the rest one after another into the ninth sum
// — giving their bits but for the sign of a zero total, which cannot
// change a sum over the planes that starts at +0.
func shortTotal(a *[minVectorRow]float64, n int) float64 {
	if n < 4 {
		s := a[0]
		for _, v := range a[1:n] {
			s += v
		}
		return s
	}
	s := (a[0] + a[2]) + (a[1] + a[3])
	if n == 4 {
		return s
	}
	r := a[4]
	for _, v := range a[5:n] {
		r += v
	}
	return s + r
}
