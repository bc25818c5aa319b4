package train

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/torchfile"
	"github.com/gorun/gorun/train/checkpoint"
)

// loadInit loads the weights file at path (safetensors, or a state dict
// torch.save wrote) into net as the run's starting point (InitFrom): names
// strictly, as load_state_dict(strict=True); a tensor whose shape differs
// from the model's keeps the model's values, named in the note returned —
// what a PyTorch user does by deleting the classifier's entries before
// loading a model trained on another number of classes. stage says that
// net is one pipeline stage's layers, which keep the whole model's names:
// the file's tensors of the other stages are passed over, and this
// stage's must all be there.
func loadInit(path string, net nn.Layer, stage bool) (string, error) {
	if err := checkpoint.RefuseState(path); err != nil {
		return "", fmt.Errorf("initial weights: %w", err)
	}
	f, err := torchfile.ReadAny(path)
	if err != nil {
		return "", fmt.Errorf("initial weights: %w", err)
	}
	current := map[string]safetensors.Tensor{}
	for _, t := range nn.StateTensors(net) {
		current[t.Name] = t
	}
	tensors := slices.Clone(f.Tensors)
	if stage {
		tensors = slices.DeleteFunc(tensors, func(t safetensors.Tensor) bool { _, ok := current[t.Name]; return !ok })
		if len(tensors) < len(current) {
			var missing, theirs []string
			for _, c := range nn.StateTensors(net) {
				if _, ok := f.Get(c.Name); !ok {
					missing = append(missing, strconv.Quote(c.Name))
				}
			}
			for _, t := range f.Tensors {
				theirs = append(theirs, strconv.Quote(t.Name))
			}
			return "", fmt.Errorf("initial weights %s: the file lacks %d of this pipeline stage's %d tensors: %s (the file's: %s): weights of another model?", path, len(missing), len(current), someNames(missing), someNames(theirs))
		}
	}
	var kept []string
	for i, t := range tensors {
		if c, ok := current[t.Name]; ok && c.F32 != nil && t.F32 != nil && !slices.Equal(t.Shape, c.Shape) {
			kept = append(kept, fmt.Sprintf("%s %v (the file's %v)", t.Name, c.Shape, t.Shape))
			tensors[i] = c
		}
	}
	loaded, err := safetensors.FromTensors(tensors)
	if err == nil {
		err = nn.LoadState(loaded, net)
	}
	if err == nil {
		if err = nn.CheckFinite(net); err != nil {
			err = fmt.Errorf("%w: training would start from NaN or infinite outputs (the weights of a run that diverged?)", err)
		}
	}
	if err != nil {
		return "", fmt.Errorf("initial weights %s: %w", path, err)
	}
	note := "Initial weights from " + path
	if stage {
		note += fmt.Sprintf(" (this stage's %d of its %d tensors)", len(tensors), len(f.Tensors))
	}
	if len(kept) > 0 {
		note += "; left as initialized, their shapes differing: " + strings.Join(kept, ", ")
	}
	return note, nil
}
