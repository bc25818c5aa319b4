package nn

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/torchfile"
)

// CheckFinite reports the first value of l's state that is not finite
// (NaN or ±Inf), naming its tensor and element: weights with one make the
// model's outputs NaN or infinite, predictions and losses meaningless.
func CheckFinite(l Layer) error {
	for _, t := range StateTensors(l) {
		for i, v := range t.F32 {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("tensor %q holds %v at element %d", t.Name, v, i)
			}
		}
	}
	return nil
}

// StateTensors returns l's parameters and buffers as safetensors entries
// under PyTorch's state_dict names (sharing l's memory on the host, copied
// from a device).
func StateTensors(l Layer) []safetensors.Tensor { return VarTensors("", l.State()) }

// VarTensors returns vars as safetensors entries named prefix+Name
// (sharing their memory on the host, copied from a device).
func VarTensors(prefix string, vars []Var) []safetensors.Tensor {
	var out []safetensors.Tensor
	for _, v := range vars {
		if v.Count != nil {
			out = append(out, safetensors.Tensor{Name: prefix + v.Name, DType: safetensors.I64, Shape: []int{}, I64: []int64{*v.Count}})
			continue
		}
		out = append(out, safetensors.Tensor{Name: prefix + v.Name, DType: safetensors.F32, Shape: v.Value.Shape, F32: hostView(v.Value)})
	}
	return out
}

// SaveFile writes l's state to path as safetensors, atomically.
func SaveFile(path string, l Layer, metadata map[string]string) error {
	return safetensors.WriteFile(path, StateTensors(l), metadata)
}

// LoadFile reads a weights file — safetensors, or a state dict PyTorch's
// torch.save wrote (model/torchfile) — into l's state, as PyTorch's
// load_state_dict(strict=True) does.
func LoadFile(path string, l Layer) error {
	f, err := torchfile.ReadAny(path)
	if err != nil {
		return err
	}
	if err := LoadState(f, l); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// LoadState copies tensors into l's state. Every state entry must be
// present with the same shape and no extra tensors may be left over; the
// error names each missing, unexpected or mismatched tensor. Nothing is
// changed unless everything matches. Frozen convolutions (Freeze) prepare
// the new weights on their next pass.
func LoadState(f *safetensors.File, l Layer) error {
	err := LoadVars(f, "", l.State())
	if err == nil {
		dropPrepared(l)
	}
	return err
}

// LoadVars copies the tensors named prefix+Name into vars, with
// LoadState's checks; tensors whose names lack the prefix are ignored.
func LoadVars(f *safetensors.File, prefix string, state []Var) error {
	var differ, missing, extra []string
	want := map[string]bool{}
	for _, v := range state {
		want[prefix+v.Name] = true
		t, ok := f.Get(prefix + v.Name)
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%q", prefix+v.Name))
		case v.Count != nil:
			if t.I64 == nil || len(t.I64) != 1 {
				differ = append(differ, fmt.Sprintf("tensor %q: want one integer, have %s %v", prefix+v.Name, t.DType, t.Shape))
			}
		case t.F32 == nil:
			differ = append(differ, fmt.Sprintf("tensor %q: want floating point, have %s", prefix+v.Name, t.DType))
		case !v.Value.SameShape(t.Shape...):
			differ = append(differ, fmt.Sprintf("tensor %q: shape %v in file, model has %s", prefix+v.Name, t.Shape, v.Value))
		}
	}
	for _, t := range f.Tensors {
		if strings.HasPrefix(t.Name, prefix) && !want[t.Name] {
			extra = append(extra, fmt.Sprintf("%q", t.Name))
		}
	}
	sort.Strings(extra)
	// A file of another model's weights would list every tensor: the
	// first few of each kind, and how many more.
	var problems []string
	if len(differ) > 0 {
		problems = append(problems, someOf(differ, "; ", "tensors differ"))
	}
	if len(missing) > 0 {
		problems = append(problems, plural(len(missing), "missing tensor")+" "+someOf(missing, ", ", "missing"))
	}
	if len(extra) > 0 {
		problems = append(problems, plural(len(extra), "unexpected tensor")+" "+someOf(extra, ", ", "unexpected"))
	}
	if len(problems) > 0 {
		return fmt.Errorf("state does not match the model (%d tensors in the model, %d in the file): %s", len(state), len(f.Tensors), strings.Join(problems, "; "))
	}
	for _, v := range state {
		t, _ := f.Get(prefix + v.Name)
		if v.Count != nil {
			*v.Count = t.I64[0]
			continue
		}
		v.Value.SetHostData(t.F32)
	}
	return nil
}

// CopyState copies every state entry of src into dst, which must have the
// same structure.
func CopyState(dst, src Layer) error {
	ds, ss := dst.State(), src.State()
	if len(ds) != len(ss) {
		return fmt.Errorf("state sizes differ: %d and %d entries", len(ds), len(ss))
	}
	for i := range ds {
		if ds[i].Name != ss[i].Name {
			return fmt.Errorf("entry %d: %q and %q", i, ds[i].Name, ss[i].Name)
		}
		if ds[i].Count != nil {
			*ds[i].Count = *ss[i].Count
			continue
		}
		if !ds[i].Value.SameShape(ss[i].Value.Shape...) {
			return fmt.Errorf("%s: shapes %s and %s", ds[i].Name, ds[i].Value, ss[i].Value)
		}
		if ds[i].Value.Mem == nil && ss[i].Value.Mem == nil {
			copy(ds[i].Value.Data, ss[i].Value.Data)
		} else {
			ds[i].Value.SetHostData(ss[i].Value.HostData())
		}
	}
	return nil
}

// hostView is t's data itself on the host, a copy from a device.
func hostView(t *tensor.Tensor) []float32 {
	if t.Mem == nil {
		return t.Data
	}
	return t.HostData()
}

// ToDevice moves l's parameters, gradients and buffers to dev (the host
// when dev is nil), as PyTorch's module.to(device): models are built and
// initialised on the host, then moved. Activations follow their inputs.
func ToDevice(l Layer, dev tensor.Device) {
	for _, v := range l.State() {
		if v.Value != nil {
			v.Value.MoveTo(dev)
		}
		if v.Grad != nil {
			v.Grad.MoveTo(dev)
		}
	}
}

// someOf joins up to five of items with sep and says how many more
// (kind) there are.
func someOf(items []string, sep, kind string) string {
	const most = 5
	if len(items) <= most {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%s… and %d more %s", strings.Join(items[:most], sep), sep, len(items)-most, kind)
}

// plural is "what" for one and "whats" for more.
func plural(n int, what string) string {
	if n == 1 {
		return what
	}
	return what + "s"
}
