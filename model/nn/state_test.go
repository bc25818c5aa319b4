package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
)

func smallNet(seed uint64) *Chain {
	be := cpu.New(1)
	rng := rand.New(rand.NewPCG(seed, seed))
	return NewChain(
		Child{"conv", NewConv2d(be, 1, 2, 3, Conv2dOptions{}, rng)},
		Child{"bn", NewBatchNorm2d(be, 2)},
		Child{"", NewFlatten()},
		Child{"fc", NewLinear(be, 8, 3, rng)},
	)
}

func TestSaveLoadRoundTrip(t *testing.T) {
	a, b := smallNet(1), smallNet(2)
	a.Layers[1].(*BatchNorm2d).BatchesTracked = 7
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := SaveFile(path, a, nil); err != nil {
		t.Fatal(err)
	}
	if err := LoadFile(path, b); err != nil {
		t.Fatal(err)
	}
	as, bs := a.State(), b.State()
	for i := range as {
		if as[i].Count != nil {
			if *as[i].Count != *bs[i].Count {
				t.Errorf("%s: %d, want %d", as[i].Name, *bs[i].Count, *as[i].Count)
			}
			continue
		}
		if tensor.RelDiff(bs[i].Value.Data, as[i].Value.Data, 1e-6) != 0 {
			t.Errorf("%s differs after the round trip", as[i].Name)
		}
	}
}

func TestLoadRejectsMismatchedState(t *testing.T) {
	net := smallNet(1)
	good := StateTensors(net)
	tests := []struct {
		name, want string
		edit       func([]safetensors.Tensor) []safetensors.Tensor
	}{
		{"missing", `missing tensor "fc.bias"`, func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[:len(ts)-1] }},
		{"extra", `unexpected tensor "head.weight"`, func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "head.weight", Shape: []int{1}, F32: []float32{1}})
		}},
		// Another model's file: the first five of each kind and a count,
		// not every name.
		{"another model", `unexpected tensors "other.0", "other.1", "other.10", "other.100", "other.101", … and 195 more unexpected`, func([]safetensors.Tensor) []safetensors.Tensor {
			var ts []safetensors.Tensor
			for i := range 200 {
				ts = append(ts, safetensors.Tensor{Name: fmt.Sprintf("other.%d", i), Shape: []int{1}, F32: []float32{1}})
			}
			return ts
		}},
		{"shape", `tensor "fc.weight": shape [8 3] in file, model has [3 8]`, func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == "fc.weight" {
					ts[i].Shape = []int{8, 3}
				}
			}
			return ts
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := tt.edit(append([]safetensors.Tensor(nil), good...))
			path := filepath.Join(t.TempDir(), "w.safetensors")
			if err := safetensors.WriteFile(path, ts, nil); err != nil {
				t.Fatal(err)
			}
			before := net.State()[0].Value.Clone()
			err := LoadFile(path, net)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one naming %s and %q", err, path, tt.want)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("error of %d bytes: %v", len(err.Error()), err)
			}
			if tensor.RelDiff(net.State()[0].Value.Data, before.Data, 1e-6) != 0 {
				t.Error("a failed load changed the model")
			}
		})
	}
}

// TestCheckFinite: a NaN or an infinity anywhere in a model's state —
// parameters or batch norm's running statistics — is named by tensor and
// element; finite state passes.
func TestCheckFinite(t *testing.T) {
	for _, c := range []struct {
		name   string
		layer  int // in smallNet
		target func(Layer) *tensor.Tensor
		at     int
		v      float32
		want   string
	}{
		{"finite", 0, nil, 0, 0, ""},
		{"NaN weight", 3, func(l Layer) *tensor.Tensor { return l.(*Linear).Weight }, 5, float32(math.NaN()), `tensor "fc.weight" holds NaN at element 5`},
		{"+Inf bias", 0, func(l Layer) *tensor.Tensor { return l.(*Conv2d).Bias }, 1, float32(math.Inf(1)), `tensor "conv.bias" holds +Inf at element 1`},
		{"-Inf running variance", 1, func(l Layer) *tensor.Tensor { return l.(*BatchNorm2d).RunningVar }, 0, float32(math.Inf(-1)), `tensor "bn.running_var" holds -Inf at element 0`},
	} {
		net := smallNet(1)
		if c.target != nil {
			c.target(net.Layers[c.layer]).Data[c.at] = c.v
		}
		err := CheckFinite(net)
		if (c.want == "") != (err == nil) || (err != nil && err.Error() != c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
