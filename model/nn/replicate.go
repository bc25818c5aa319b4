package nn

import (
	"fmt"
)

// Replicate returns a copy of l that shares l's parameters, gradients and
// buffers (running statistics, batch counters, dropout counters) but has
// its own activation memory. A pipeline stage keeps one replica per
// microbatch in flight, so each microbatch's Backward finds the
// activations of its own Forward, while all of them accumulate into the
// same gradients. A replica of a Dropout draws from the same counter, so
// every microbatch gets its own mask.
func Replicate(l Layer) (Layer, error) {
	switch v := l.(type) {
	case *Conv2d:
		c := *v
		c.x, c.y, c.dx = nil, nil, nil
		return &c, nil
	case *Linear:
		c := *v
		c.x, c.y, c.dx = nil, nil, nil
		return &c, nil
	case *BatchNorm2d:
		c := *v
		c.x, c.y, c.dx = nil, nil, nil
		c.mean, c.invStd = nil, nil
		c.tracked = v.counter()
		return &c, nil
	case *ReLU:
		return &ReLU{be: v.be}, nil
	case *Pool2d:
		return &Pool2d{be: v.be, Max: v.Max, P: v.P}, nil
	case *AdaptiveAvgPool2d:
		return &AdaptiveAvgPool2d{be: v.be, OH: v.OH, OW: v.OW}, nil
	case *Dropout:
		c := &Dropout{be: v.be, P: v.P, Seed: v.Seed, training: v.training, calls: v.calls}
		if c.calls == nil {
			c.calls = &v.Calls
		}
		return c, nil
	case *Flatten:
		return &Flatten{}, nil
	case *LogSoftmax:
		return &LogSoftmax{be: v.be}, nil
	case *Chain:
		c := &Chain{Names: v.Names}
		for _, child := range v.Layers {
			r, err := Replicate(child)
			if err != nil {
				return nil, err
			}
			c.Layers = append(c.Layers, r)
		}
		return c, nil
	case *BasicBlock:
		b := &BasicBlock{be: v.be}
		var err error
		rep := func(src Layer) Layer {
			if err != nil {
				return nil
			}
			var r Layer
			r, err = Replicate(src)
			return r
		}
		b.Conv1, _ = rep(v.Conv1).(*Conv2d)
		b.BN1, _ = rep(v.BN1).(*BatchNorm2d)
		b.Relu1, _ = rep(v.Relu1).(*ReLU)
		b.Conv2, _ = rep(v.Conv2).(*Conv2d)
		b.BN2, _ = rep(v.BN2).(*BatchNorm2d)
		if v.Downsample != nil {
			b.Downsample, _ = rep(v.Downsample).(*Chain)
		}
		if err != nil {
			return nil, err
		}
		b.mainPath = [5]Layer{b.Conv1, b.BN1, b.Relu1, b.Conv2, b.BN2}
		return b, nil
	}
	return nil, fmt.Errorf("nn: cannot replicate %T", l)
}
