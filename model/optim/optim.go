package optim

import (
	"fmt"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Step applies one update to every parameter.
	Step()
	// LR returns the current learning rate.
	LR() float32
	// SetLR changes the learning rate (schedules call it).
	SetLR(lr float32)
	// ZeroGrad clears the parameters' gradients, as
	// torch.optim.Optimizer.zero_grad(). It allocates nothing.
	ZeroGrad()
	// State lists the optimizer's per-parameter buffers under stable names
	// ("<param>.<buffer>") plus its step count, for checkpoints.
	State() []nn.Var
}

// slots are what every optimizer keeps: its parameters, named buffers
// shaped like each parameter, and its step count.
type slots struct {
	be     tensor.Backend
	params []nn.Var
	names  []string           // buffer names, as torch.optim calls them
	bufs   [][]*tensor.Tensor // bufs[i][k]: parameter i's buffer names[k]
	steps  int64
	// noDecay[i]: parameter i takes no weight decay (nil: all do).
	noDecay []bool
}

// SetNoDecay exempts the parameters for which exempt is true from weight
// decay, as a second parameter group with weight_decay 0 does in PyTorch
// (say batch-norm parameters and biases: Goyal et al.'s recipe).
func (s *slots) SetNoDecay(exempt func(nn.Var) bool) {
	s.noDecay = make([]bool, len(s.params))
	for i, p := range s.params {
		s.noDecay[i] = exempt(p)
	}
}

// decays reports whether parameter i takes weight decay.
func (s *slots) decays(i int) bool { return s.noDecay == nil || !s.noDecay[i] }

func newSlots(be tensor.Backend, params []nn.Var, names ...string) slots {
	s := slots{be: be, params: params, names: names}
	for _, p := range params {
		b := make([]*tensor.Tensor, len(names))
		for k := range names {
			b[k] = tensor.NewOn(p.Value.Device(), p.Value.Shape...)
		}
		s.bufs = append(s.bufs, b)
	}
	return s
}

// ZeroGrad implements Optimizer.
func (s *slots) ZeroGrad() { nn.ZeroGrad(s.be, s.params) }

// State implements Optimizer: "step", then "<param>.<buffer>" for every
// parameter and buffer.
func (s *slots) State() []nn.Var {
	st := []nn.Var{{Name: "step", Count: &s.steps}}
	for i, p := range s.params {
		for k, name := range s.names {
			st = append(st, nn.Var{Name: p.Name + "." + name, Value: s.bufs[i][k]})
		}
	}
	return st
}

// SGD is torch.optim.SGD.
type SGD struct {
	slots
	O tensor.SGDOptions
}

// NewSGD returns SGD over params.
func NewSGD(be tensor.Backend, params []nn.Var, o tensor.SGDOptions) (*SGD, error) {
	if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
		return nil, fmt.Errorf("optim: Nesterov momentum requires a momentum and zero dampening")
	}
	return &SGD{slots: newSlots(be, params, "momentum_buffer"), O: o}, nil
}

// Step implements Optimizer.
func (s *SGD) Step() {
	for i, p := range s.params {
		o := s.O
		if !s.decays(i) {
			o.WeightDecay = 0
		}
		s.be.SGDStep(p.Value, p.Grad, s.bufs[i][0], o, s.steps == 0)
	}
	s.steps++
}

// LR implements Optimizer.
func (s *SGD) LR() float32 { return s.O.LR }

// SetLR implements Optimizer.
func (s *SGD) SetLR(lr float32) { s.O.LR = lr }

// Adam is torch.optim.Adam (amsgrad off).
type Adam struct {
	slots
	O tensor.AdamOptions
}

// NewAdam returns Adam over params; zero betas and eps take PyTorch's
// defaults (0.9, 0.999, 1e-8).
func NewAdam(be tensor.Backend, params []nn.Var, o tensor.AdamOptions) *Adam {
	if o.Beta1 == 0 && o.Beta2 == 0 {
		o.Beta1, o.Beta2 = 0.9, 0.999
	}
	if o.Eps == 0 {
		o.Eps = 1e-8
	}
	return &Adam{slots: newSlots(be, params, "exp_avg", "exp_avg_sq"), O: o}
}

// Step implements Optimizer.
func (a *Adam) Step() {
	a.steps++
	for i, p := range a.params {
		o := a.O
		if !a.decays(i) {
			o.WeightDecay = 0
		}
		a.be.AdamStep(p.Value, p.Grad, a.bufs[i][0], a.bufs[i][1], o, int(a.steps))
	}
}

// LR implements Optimizer.
func (a *Adam) LR() float32 { return a.O.LR }

// SetLR implements Optimizer.
func (a *Adam) SetLR(lr float32) { a.O.LR = lr }

// Adadelta is torch.optim.Adadelta.
type Adadelta struct {
	slots
	O tensor.AdadeltaOptions
}

// NewAdadelta returns Adadelta over params; zero Rho and Eps take PyTorch's
// defaults (0.9, 1e-6).
func NewAdadelta(be tensor.Backend, params []nn.Var, o tensor.AdadeltaOptions) *Adadelta {
	if o.Rho == 0 {
		o.Rho = 0.9
	}
	if o.Eps == 0 {
		o.Eps = 1e-6
	}
	return &Adadelta{slots: newSlots(be, params, "square_avg", "acc_delta"), O: o}
}

// Step implements Optimizer.
func (a *Adadelta) Step() {
	for i, p := range a.params {
		o := a.O
		if !a.decays(i) {
			o.WeightDecay = 0
		}
		a.be.AdadeltaStep(p.Value, p.Grad, a.bufs[i][0], a.bufs[i][1], o)
	}
	a.steps++
}

// LR implements Optimizer.
func (a *Adadelta) LR() float32 { return a.O.LR }

// SetLR implements Optimizer.
func (a *Adadelta) SetLR(lr float32) { a.O.LR = lr }
