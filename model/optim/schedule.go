package optim

import "math"

// Schedule changes an optimizer's learning rate once per epoch, as PyTorch's
// schedulers do when scheduler.step() is called after each epoch.
type Schedule interface {
	// Step advances one epoch and sets the optimizer's learning rate.
	Step()
	// Epoch returns the number of Steps taken (last_epoch).
	Epoch() int
	// SetEpoch restores a schedule to the state after epoch Steps.
	SetEpoch(epoch int)
}

// StepLR is torch.optim.lr_scheduler.StepLR: the rate is multiplied by Gamma
// every StepSize epochs.
type StepLR struct {
	opt      Optimizer
	base     float32
	StepSize int
	Gamma    float64
	epoch    int
}

// NewStepLR returns StepLR on opt, starting from its current rate.
func NewStepLR(opt Optimizer, stepSize int, gamma float64) *StepLR {
	if stepSize < 1 {
		stepSize = 1
	}
	return &StepLR{opt: opt, base: opt.LR(), StepSize: stepSize, Gamma: gamma}
}

// Step implements Schedule.
func (s *StepLR) Step() { s.SetEpoch(s.epoch + 1) }

// Epoch implements Schedule.
func (s *StepLR) Epoch() int { return s.epoch }

// SetEpoch implements Schedule. The rate is the closed form
// base·γ^⌊epoch/step⌋.
func (s *StepLR) SetEpoch(epoch int) {
	s.epoch = epoch
	s.opt.SetLR(float32(float64(s.base) * math.Pow(s.Gamma, float64(epoch/s.StepSize))))
}

// CosineAnnealingLR is torch.optim.lr_scheduler.CosineAnnealingLR: the rate
// follows half a cosine from its base to EtaMin over TMax epochs.
type CosineAnnealingLR struct {
	opt    Optimizer
	base   float32
	TMax   int
	EtaMin float64
	epoch  int
}

// NewCosineAnnealingLR returns the schedule on opt.
func NewCosineAnnealingLR(opt Optimizer, tMax int, etaMin float64) *CosineAnnealingLR {
	if tMax < 1 {
		tMax = 1
	}
	return &CosineAnnealingLR{opt: opt, base: opt.LR(), TMax: tMax, EtaMin: etaMin}
}

// Step implements Schedule.
func (c *CosineAnnealingLR) Step() { c.SetEpoch(c.epoch + 1) }

// Epoch implements Schedule.
func (c *CosineAnnealingLR) Epoch() int { return c.epoch }

// SetEpoch implements Schedule with the closed form
// η_min + (base − η_min)(1 + cos(π·epoch/T_max))/2.
func (c *CosineAnnealingLR) SetEpoch(epoch int) {
	c.epoch = epoch
	lr := c.EtaMin + (float64(c.base)-c.EtaMin)*(1+math.Cos(math.Pi*float64(epoch)/float64(c.TMax)))/2
	c.opt.SetLR(float32(lr))
}

// Warmup is torchvision's warm-up: torch.optim.lr_scheduler.SequentialLR
// of a LinearLR from Start·base up to base over Epochs epochs, then Main
// (nil: the base rate) from its first epoch.
type Warmup struct {
	opt    Optimizer
	base   float32
	Epochs int
	Start  float64
	Main   Schedule
	epoch  int
}

// NewWarmup returns the warm-up on opt before main, which must have been
// made on opt at its base rate; it sets the rate of epoch 0.
func NewWarmup(opt Optimizer, epochs int, start float64, main Schedule) *Warmup {
	w := &Warmup{opt: opt, base: opt.LR(), Epochs: max(epochs, 1), Start: start, Main: main}
	w.SetEpoch(0)
	return w
}

// Step implements Schedule.
func (w *Warmup) Step() { w.SetEpoch(w.epoch + 1) }

// Epoch implements Schedule.
func (w *Warmup) Epoch() int { return w.epoch }

// SetEpoch implements Schedule: base·(Start + (1 − Start)·epoch/Epochs)
// before Epochs, then Main at epoch − Epochs.
func (w *Warmup) SetEpoch(epoch int) {
	w.epoch = epoch
	switch {
	case epoch < w.Epochs:
		w.opt.SetLR(float32(float64(w.base) * (w.Start + (1-w.Start)*float64(epoch)/float64(w.Epochs))))
	case w.Main != nil:
		w.Main.SetEpoch(epoch - w.Epochs)
	default:
		w.opt.SetLR(w.base)
	}
}
