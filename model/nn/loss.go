package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// Loss is a criterion over a batch of class scores: torch.nn.NLLLoss on
// log-probabilities, or torch.nn.CrossEntropyLoss (log-softmax then NLL) on
// raw scores, both with mean reduction.
type Loss struct {
	be          tensor.Backend
	logSoftmax  *LogSoftmax // nil for NLL
	target      []int32
	logp, dlogp *tensor.Tensor
	// Smoothing is torch.nn.CrossEntropyLoss's label_smoothing: the target
	// is (1 − Smoothing) on the true class plus Smoothing spread evenly
	// over all classes (0: none).
	Smoothing float32
	// Scale multiplies the gradient Backward returns (a GradScaler's loss
	// scale; 0 means 1): backward runs on Scale × the loss.
	Scale   float32
	ones    *tensor.Tensor // [C 1], for the rows' sums
	rowSums *tensor.Tensor // [N 1]
	spread  *tensor.Tensor // the smoothing's gradient, constant
}

// NewNLLLoss returns torch.nn.NLLLoss().
func NewNLLLoss(be tensor.Backend) *Loss { return &Loss{be: be} }

// NewCrossEntropyLoss returns torch.nn.CrossEntropyLoss().
func NewCrossEntropyLoss(be tensor.Backend) *Loss {
	return &Loss{be: be, logSoftmax: NewLogSoftmax(be)}
}

// Forward returns the mean loss of scores [N, C] against class indices.
func (l *Loss) Forward(scores *tensor.Tensor, target []int32) (float32, error) {
	if scores.Dims() != 2 {
		return 0, fmt.Errorf("loss: scores %s, want [N C]", scores)
	}
	n, c := scores.Shape[0], scores.Shape[1]
	if len(target) != n {
		return 0, fmt.Errorf("loss: %d targets for a batch of %d", len(target), n)
	}
	if n == 0 {
		return 0, fmt.Errorf("loss: empty batch")
	}
	for i, t := range target {
		if t < 0 || int(t) >= c {
			return 0, fmt.Errorf("loss: target %d of sample %d outside [0, %d)", t, i, c)
		}
	}
	logp := scores
	if l.logSoftmax != nil {
		var err error
		if logp, err = l.logSoftmax.Forward(scores); err != nil {
			return 0, fmt.Errorf("loss: %w", err)
		}
	}
	l.target, l.logp = target, logp
	nll := l.be.NLLLoss(logp, target)
	if l.Smoothing == 0 {
		return nll, nil
	}
	// Smoothing's part: the mean over rows of −(1/C)·Σₖ logp[i, k].
	if l.ones == nil || l.ones.Shape[0] != c {
		l.ones = tensor.NewOn(logp.Device(), c, 1)
		l.be.Fill(l.ones, 1)
	}
	sums := tensor.ReuseLike(&l.rowSums, logp, n, 1)
	l.be.MatMul(logp, false, l.ones, false, sums, 1, 0)
	total := 0.0
	for _, v := range sums.HostData() {
		total += float64(v)
	}
	return (1-l.Smoothing)*nll - l.Smoothing*float32(total/float64(n*c)), nil
}

// Backward returns the gradient of the last Forward's loss with respect to
// its scores.
func (l *Loss) Backward() (*tensor.Tensor, error) {
	if l.logp == nil {
		return nil, fmt.Errorf("loss: backward before forward")
	}
	d := tensor.ReuseLike(&l.dlogp, l.logp, l.logp.Shape...)
	scale := l.Scale
	if scale == 0 {
		scale = 1
	}
	l.be.NLLLossBackward(l.target, d, scale*(1-l.Smoothing))
	if l.Smoothing != 0 {
		n, c := l.logp.Shape[0], l.logp.Shape[1]
		spread := tensor.ReuseLike(&l.spread, l.logp, n, c)
		l.be.Fill(spread, -scale*l.Smoothing/float32(n*c))
		l.be.Add(d, spread, d)
	}
	if l.logSoftmax != nil {
		return l.logSoftmax.Backward(d)
	}
	return d, nil
}
