package checkpoint

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
)

func model(t *testing.T, seed uint64) (*zoo.Model, optim.Optimizer) {
	t.Helper()
	be := cpu.New(1)
	t.Cleanup(be.Close)
	m, err := zoo.New("mnist", be, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewSGD(be, nn.Params(m.Net), tensor.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	// Some optimizer state worth restoring.
	for _, v := range opt.State() {
		if v.Value != nil {
			for i := range v.Value.Data {
				v.Value.Data[i] = float32(i%5) * 0.25
			}
		} else {
			*v.Count = 7
		}
	}
	return m, opt
}

func TestSaveLoadResume(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "net.safetensors")
	m, opt := model(t, 1)
	meta := Meta{Model: "mnist", Input: m.Input, Dataset: "fashion-mnist", Classes: []string{"a"}, Epoch: 2, Step: 40, LR: 0.05, DropoutCalls: []uint64{3, 4}}
	if err := Save(path, m.Net, opt, meta); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 { // no temporary files left behind
		t.Fatalf("directory holds %d files, want the weights and the training state", len(entries))
	}

	// Weights only, into another model: strict load, metadata back.
	other, otherOpt := model(t, 2)
	got, err := LoadWeights(path, other.Net)
	if err != nil || got.Epoch != 2 || got.Format != FormatVersion || got.Dataset != "fashion-mnist" {
		t.Fatalf("LoadWeights: %+v, %v", got, err)
	}
	for i, v := range m.Net.State() {
		w := other.Net.State()[i]
		if v.Count == nil && !slices.Equal(v.Value.Data, w.Value.Data) {
			t.Fatalf("%s not loaded", v.Name)
		}
	}
	// Resume restores the optimizer too.
	for _, v := range otherOpt.State() {
		if v.Value != nil {
			clear(v.Value.Data)
		}
	}
	rm, err := Resume(path, other.Net, otherOpt)
	if err != nil || rm.Step != 40 || !slices.Equal(rm.DropoutCalls, []uint64{3, 4}) {
		t.Fatalf("Resume: %+v, %v", rm, err)
	}
	for i, v := range opt.State() {
		w := otherOpt.State()[i]
		if (v.Count != nil && *v.Count != *w.Count) || (v.Value != nil && !slices.Equal(v.Value.Data, w.Value.Data)) {
			t.Fatalf("optimizer %s not restored", v.Name)
		}
	}

	// Errors: another optimizer's state, a missing training state, plain
	// weights without metadata.
	be := cpu.New(1)
	defer be.Close()
	adam := optim.NewAdam(be, nn.Params(other.Net), tensor.AdamOptions{LR: 0.01})
	if _, err := Resume(path, other.Net, adam); err == nil || !strings.Contains(err.Error(), "optimizer") {
		t.Fatalf("Adam from SGD state: %v", err)
	}
	os.Remove(TrainPath(path))
	if _, err := Resume(path, other.Net, otherOpt); err == nil || !strings.Contains(err.Error(), "cannot resume") {
		t.Fatalf("missing training state: %v", err)
	}
	plain := filepath.Join(dir, "plain.safetensors")
	if err := safetensors.WriteFile(plain, nn.StateTensors(m.Net), nil); err != nil {
		t.Fatal(err)
	}
	if meta, err := LoadWeights(plain, other.Net); err != nil || meta != nil {
		t.Fatalf("plain weights: %+v, %v", meta, err)
	}
	if _, _, err := ReadMeta(plain); err == nil || !strings.Contains(err.Error(), "no gorun metadata") {
		t.Fatalf("ReadMeta of plain weights: %v", err)
	}
}
