package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// LogSoftmax is torch.nn.LogSoftmax(dim=1) on [N, C].
type LogSoftmax struct {
	stateless
	be tensor.Backend
	y  *tensor.Tensor
	inputGrad
	result
}

// NewLogSoftmax returns a log-softmax over classes.
func NewLogSoftmax(be tensor.Backend) *LogSoftmax { return &LogSoftmax{be: be} }

// Forward implements Layer.
func (l *LogSoftmax) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if x.Dims() != 2 || x.Shape[1] == 0 {
		return nil, fmt.Errorf("input %s, want [N C]", x)
	}
	y := l.out.get(x, x.Shape...)
	l.y = y
	l.be.LogSoftmax(x, y)
	return y, nil
}

// Backward implements Layer.
func (l *LogSoftmax) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, l.y); err != nil {
		return nil, err
	}
	dx := l.dx.get(dy, dy.Shape...)
	l.be.LogSoftmaxBackward(l.y, dy, dx)
	return dx, nil
}

// Replica implements Layer.
func (l *LogSoftmax) Replica() Layer { return &LogSoftmax{be: l.be} }
