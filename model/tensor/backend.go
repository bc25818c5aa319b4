package tensor

// ConvParams describes a 2-D convolution: square or rectangular kernels,
// stride and zero padding per dimension, as in torch.nn.Conv2d (dilation 1,
// groups 1).
type ConvParams struct {
	KernelH, KernelW int
	StrideH, StrideW int
	PadH, PadW       int
}

// OutSize returns the output height and width for an h×w input; zero when
// the window does not fit.
func (p ConvParams) OutSize(h, w int) (int, int) {
	return outLen(h, p.KernelH, p.StrideH, p.PadH), outLen(w, p.KernelW, p.StrideW, p.PadW)
}

func outLen(in, k, stride, pad int) int {
	if in+2*pad < k || stride <= 0 {
		return 0
	}
	return (in+2*pad-k)/stride + 1
}

// PoolParams describes max or average pooling windows, as in
// torch.nn.MaxPool2d / AvgPool2d (ceil_mode false; average pooling counts
// padding, count_include_pad true).
type PoolParams = ConvParams

// BatchNormParams configures batch normalisation: torch.nn.BatchNorm2d with
// momentum 0.1 and eps 1e-5 by default.
type BatchNormParams struct {
	Training bool
	Momentum float32
	Eps      float32
	// SumAcross, when set (SyncBatchNorm), adds its argument up
	// element-wise across all the processes that share the batch, in
	// place. In training the backend passes it the per-channel statistics
	// it needs ([Σx, count] then [Σ(x−mean)²] forward; [Σdy, Σdy·x̂]
	// backward) and normalises with the totals, so every process uses the
	// statistics of the whole distributed batch. Parameter gradients stay
	// local (DDP averages them).
	SumAcross func(v []float64)
	// SavedStats, in training, says that saveMean and saveInvStd hold
	// this batch's statistics already, from an earlier pass over the
	// same x (activation checkpointing's recomputation): x is normalised
	// with them as they are, to the same bits as that pass, and neither
	// the running statistics nor SumAcross are touched.
	SavedStats bool
}

// ConvBatchNormBackend is a Backend that runs a convolution followed by a
// batch norm in evaluation mode (and the relu after it) as one layer: the
// batch norm's per-channel scale and shift applied to each output plane as
// the convolution finishes it, while it is still in cache, instead of in a
// pass of their own over the whole output. Layers use it for inference
// (gradients off, batch norm not training). The results are those of
// Conv2d, then BatchNorm with p.Training false (BatchNormReLU with relu),
// to the bit.
type ConvBatchNormBackend interface {
	Backend
	Conv2dBatchNorm(x, w, bias, y, gamma, beta, runMean, runVar *Tensor, p ConvParams, bn BatchNormParams, relu bool)
}

// PreparedWeights is where a backend keeps a convolution's weights in
// the form it runs them (transformed, unrolled, permuted) from one call to
// the next (PreparedConvBackend). Its zero value holds nothing; State
// belongs to the backend that filled it.
type PreparedWeights struct {
	State any
}

// Reset drops what p holds: the next prepared call prepares the weights
// again.
func (p *PreparedWeights) Reset() { p.State = nil }

// PreparedConvBackend is a Backend that can prepare a convolution's
// weights once for many forward passes (evaluation with weights frozen,
// nn.Freeze) instead of on every call. Each method is Conv2d (with gamma
// nil) or Conv2dBatchNorm, given that w has not changed since prep was
// filled: to the bit, or within the rounding of an algorithm the backend
// keeps for frozen weights, which it documents (the CPU's Winograd
// F(4×4, 3×3)). It fills prep on the first call, and again when x's
// shape, w's storage or p differ from the call that filled it. Callers
// Reset prep whenever w may have changed.
type PreparedConvBackend interface {
	Backend
	Conv2dPrepared(prep *PreparedWeights, x, w, bias, y, gamma, beta, runMean, runVar *Tensor, p ConvParams, bn BatchNormParams, relu bool)
}

// ResidualConvBackend is a PreparedConvBackend that can also end a
// prepared convolution and its batch norm with a residual block's sum
// and relu: y = relu(bn(conv(x)) + residual), residual shaped as y, each
// image's output finished while it is in cache instead of in a pass of
// its own over the whole output. The results are Conv2dPrepared's (relu
// false), then AddReLU's with residual, to the bit.
type ResidualConvBackend interface {
	PreparedConvBackend
	Conv2dPreparedResidual(prep *PreparedWeights, x, w, bias, y, gamma, beta, runMean, runVar, residual *Tensor, p ConvParams, bn BatchNormParams)
}

// KeptConvBackend is a Backend whose training convolutions can keep
// from a forward pass what its backward pass would build from the
// weights again (the CPU's dense matrices of layers over maps no larger
// than their kernels). Conv2dKeep is Conv2d, and Conv2dBackwardKept
// Conv2dBackward, to the bit; the backward call reuses what keep holds
// when keep was filled by a forward call on the same x and w, whose
// values have not changed since (as autograd requires of the tensors it
// saves), and builds it as Conv2dBackward does otherwise.
type KeptConvBackend interface {
	Backend
	Conv2dKeep(keep *PreparedWeights, x, w, bias, y *Tensor, p ConvParams)
	Conv2dBackwardKept(keep *PreparedWeights, x, w, dy, dx, dw, db *Tensor, p ConvParams)
}

// BatchNormReLUBackend is a Backend that runs a batch norm and the relu
// after it in one pass over memory (torchvision's bn → relu(inplace)):
// layers use it when their backend has it, and the two separate calls
// otherwise. The results are those of BatchNorm then ReLU(y, y), and of
// ReLUBackward then BatchNormBackward, to the bit (a NaN may come out
// with other bits).
type BatchNormReLUBackend interface {
	Backend
	// BatchNormReLU is BatchNorm followed by the relu of y.
	BatchNormReLU(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *Tensor, p BatchNormParams)
	// BatchNormReLUBackward is BatchNormBackward for dy the gradient of
	// the relu's output: the relu's mask is found again from x, gamma,
	// beta and the saved statistics, so neither the batch norm's output
	// nor a mask is kept.
	BatchNormReLUBackward(x, dy, dx, gamma, beta, dgamma, dbeta, saveMean, saveInvStd *Tensor, p BatchNormParams)
}

// AddReLUBackend is a Backend that adds and applies the relu in one pass
// (a residual block's out += identity; relu(out)): y = max(a + b, 0), the
// result of Add then ReLU(y, y) to the bit (a NaN may come out with other
// bits).
type AddReLUBackend interface {
	Backend
	AddReLU(a, b, y *Tensor)
}

// Backend is the compute seam: every numeric operation a layer or optimizer
// performs. Shapes are checked by the callers (the layers), so
// implementations may assume consistent arguments. Gradients of parameters
// accumulate (+=) as in PyTorch; gradients of activations overwrite.
//
// The CPU backend (package model/cpu) implements it in Go; a GPU backend
// implements the same methods on device memory.
type Backend interface {
	// Name identifies the backend and its kernels ("cpu avx2-fma 6x16, Winograd for
	// 3×3 layers of 64+ channels, 2 threads").
	Name() string

	// MatMul sets c = alpha·op(a)·op(b) + beta·c for 2-D tensors, op being
	// the transpose when the flag is set.
	MatMul(a *Tensor, transA bool, b *Tensor, transB bool, c *Tensor, alpha, beta float32)
	// AddBias adds bias[j] to x[i, j, ...] for every i and trailing position:
	// a [N, C] or [N, C, H, W] tensor and a [C] bias.
	AddBias(x, bias *Tensor)
	// BiasGrad accumulates into db[j] the sum of dy[i, j, ...].
	BiasGrad(dy, db *Tensor)

	// Conv2d computes y = conv(x, w) + b for x [N, C, H, W], w [F, C, KH, KW],
	// b [F] or nil, y [N, F, OH, OW].
	Conv2d(x, w, b, y *Tensor, p ConvParams)
	// Conv2dBackward accumulates dw and db and sets dx from dy, each
	// unless nil: the input gradient alone (dw, db nil) and the parameter
	// gradients alone (dx nil) are the two halves of a pipeline's split
	// backward, each equal to the bit to the same gradient computed
	// together.
	Conv2dBackward(x, w, dy, dx, dw, db *Tensor, p ConvParams)

	// MaxPool2d sets y to the window maxima of x.
	MaxPool2d(x, y *Tensor, p PoolParams)
	// MaxPool2dBackward sets dx: each window's dy goes to the first position
	// holding its maximum (as PyTorch's CPU kernel chooses).
	MaxPool2dBackward(x, dy, dx *Tensor, p PoolParams)
	// AvgPool2d sets y to the window means of x.
	AvgPool2d(x, y *Tensor, p PoolParams)
	// AvgPool2dBackward sets dx.
	AvgPool2dBackward(dy, dx *Tensor, p PoolParams)
	// AdaptiveAvgPool2d averages x [N, C, H, W] into y [N, C, OH, OW] with
	// PyTorch's window bounds.
	AdaptiveAvgPool2d(x, y *Tensor)
	// AdaptiveAvgPool2dBackward sets dx.
	AdaptiveAvgPool2dBackward(dy, dx *Tensor)

	// BatchNorm normalises x [N, C, H, W] (or [N, C]) per channel (y may
	// be x). In training it uses the batch statistics, saves mean and 1/std
	// in saveMean and saveInvStd, and updates runMean and runVar (unbiased
	// variance); in evaluation it uses runMean and runVar.
	BatchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *Tensor, p BatchNormParams)
	// BatchNormBackward sets dx and accumulates dgamma and dbeta.
	BatchNormBackward(x, dy, dx, gamma, dgamma, dbeta, saveMean, saveInvStd *Tensor, p BatchNormParams)

	// ReLU sets y = max(x, 0) (y may be x).
	ReLU(x, y *Tensor)
	// ReLUBackward sets dx = dy where y > 0, else 0 (dx may be dy).
	ReLUBackward(y, dy, dx *Tensor)
	// Dropout zeroes each element of x with probability p and scales the
	// rest by 1/(1-p), recording the factor per element in mask. The pattern
	// is a function of seed only.
	Dropout(x, y, mask *Tensor, p float32, seed uint64)
	// Mul sets z = x ⊙ y elementwise (z may alias either).
	Mul(x, y, z *Tensor)
	// Add sets z = x + y elementwise (z may alias either).
	Add(x, y, z *Tensor)
	// Copy sets dst = src.
	Copy(src, dst *Tensor)
	// Fill sets every element of t to v.
	Fill(t *Tensor, v float32)

	// LogSoftmax sets y[i, :] = log softmax of x[i, :] for x [N, C].
	LogSoftmax(x, y *Tensor)
	// LogSoftmaxBackward sets dx from y (the LogSoftmax output) and dy.
	LogSoftmaxBackward(y, dy, dx *Tensor)
	// NLLLoss returns the mean over rows of -logp[i, target[i]].
	NLLLoss(logp *Tensor, target []int32) float32
	// NLLLossBackward sets dlogp for the mean NLL loss scaled by scale.
	NLLLossBackward(target []int32, dlogp *Tensor, scale float32)

	// SGDStep is one torch.optim.SGD update of p from g with momentum buffer
	// buf (unused when momentum is 0). first marks the buffer's first use.
	SGDStep(p, g, buf *Tensor, o SGDOptions, first bool)
	// AdamStep is one torch.optim.Adam update; step counts from 1.
	AdamStep(p, g, m, v *Tensor, o AdamOptions, step int)
	// AdadeltaStep is one torch.optim.Adadelta update.
	AdadeltaStep(p, g, sqAvg, accDelta *Tensor, o AdadeltaOptions)
}

// SGDOptions are torch.optim.SGD's hyper-parameters.
type SGDOptions struct {
	LR, Momentum, Dampening, WeightDecay float32
	Nesterov                             bool
}

// AdamOptions are torch.optim.Adam's hyper-parameters.
type AdamOptions struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
}

// AdadeltaOptions are torch.optim.Adadelta's hyper-parameters.
type AdadeltaOptions struct {
	LR, Rho, Eps, WeightDecay float32
}

// MatMulDims returns the sizes of MatMul's product op(a)·op(b): m×k times
// k×n.
func MatMulDims(a *Tensor, transA bool, b *Tensor, transB bool) (m, n, k int) {
	m, k = a.Shape[0], a.Shape[1]
	if transA {
		m, k = k, m
	}
	n = b.Shape[1]
	if transB {
		n = b.Shape[0]
	}
	return m, n, k
}

// Planes splits t [N, C, ...] into N, C and the positions per (n, c)
// (C is 1 for a 1-D tensor).
func Planes(t *Tensor) (n, c, hw int) {
	n, c, hw = t.Shape[0], 1, 1
	if len(t.Shape) > 1 {
		c = t.Shape[1]
	}
	for _, d := range t.Shape[2:] {
		hw *= d
	}
	return n, c, hw
}
