package train

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

// TestInitFrom: a run started from a weights file has exactly those
// weights before its first step, and says so; a tensor of another shape
// (a classifier trained on another number of classes) keeps the model's
// initial values and is named; a file of another model and a missing file
// are refused; a run that resumes does not load it. (A pipeline's stages:
// TestPipelineInitFrom.)
func TestInitFrom(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 64, 32)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads = 1, 1
	dir := t.TempDir()

	donor := cfg
	donor.Seed = 7 // other weights than cfg's initialisation
	src := newTrainer(t, donor, train, test)
	weights := filepath.Join(dir, "donor.safetensors")
	if err := nn.SaveFile(weights, src.Model().Net, nil); err != nil {
		t.Fatal(err)
	}
	want := nn.StateTensors(src.Model().Net)

	tr := newTrainer(t, cfg, train, test, InitFrom(weights))
	if got := nn.StateTensors(tr.Model().Net); !sameTensors(got, want) {
		t.Fatal("the model's state is not the file's")
	}
	var desc bytes.Buffer
	tr.Describe(&desc, "cpu")
	if !strings.Contains(desc.String(), "Initial weights from "+weights) {
		t.Fatalf("description lacks the initial weights:\n%s", desc.String())
	}

	// The classifier trained on 20 classes: left as initialized.
	fresh := newTrainer(t, cfg, train, test)
	var other []safetensors.Tensor
	for _, w := range want {
		if strings.HasPrefix(w.Name, "fc2.") {
			w.Shape = slices.Concat([]int{20}, w.Shape[1:])
			w.F32 = make([]float32, 20*len(w.F32)/10)
		}
		other = append(other, w)
	}
	wider := filepath.Join(dir, "wider.safetensors")
	if err := safetensors.WriteFile(wider, other, nil); err != nil {
		t.Fatal(err)
	}
	tr = newTrainer(t, cfg, train, test, InitFrom(wider))
	got, initial := nn.StateTensors(tr.Model().Net), nn.StateTensors(fresh.Model().Net)
	for i, g := range got {
		from := want[i]
		if strings.HasPrefix(g.Name, "fc2.") {
			from = initial[i]
		}
		if g.Name != from.Name || !slices.Equal(g.F32, from.F32) || !slices.Equal(g.I64, from.I64) {
			t.Fatalf("%s: not %s's values", g.Name, map[bool]string{true: "the initialisation", false: "the file"}[strings.HasPrefix(g.Name, "fc2.")])
		}
	}
	desc.Reset()
	tr.Describe(&desc, "cpu")
	if s := "left as initialized, their shapes differing: fc2.weight [10 128] (the file's [20 128]), fc2.bias [10] (the file's [20])"; !strings.Contains(desc.String(), s) {
		t.Fatalf("description lacks %q:\n%s", s, desc.String())
	}

	// The same weights with an infinity in them (a run that diverged).
	infinite := filepath.Join(dir, "inf.safetensors")
	diverged := slices.Clone(want)
	for i, w := range diverged {
		if w.Name == "fc1.bias" {
			diverged[i].F32 = slices.Clone(w.F32)
			diverged[i].F32[3] = float32(math.Inf(-1))
		}
	}
	if err := safetensors.WriteFile(infinite, diverged, nil); err != nil {
		t.Fatal(err)
	}

	cifar, cifarTest := synthetic(t, data.FormatCIFAR10, 8, 8)
	cc, _ := Defaults("cifarnet")
	cc.Threads = 1
	for _, c := range []struct {
		name         string
		cfg          Config
		train, test  *data.Dataset
		path, wanted string
	}{
		{"another model's weights", cc, cifar, cifarTest, weights, "initial weights " + weights + ": state does not match the model"},
		{"a missing file", cfg, train, test, filepath.Join(dir, "missing.pth"), "missing.pth"},
		{"an infinite weight", cfg, train, test, infinite, "initial weights " + infinite + ": tensor \"fc1.bias\" holds -Inf at element 3: training would start from NaN or infinite outputs"},
	} {
		be := cpu.New(1)
		tr, err := New(context.Background(), c.cfg, be, c.train, c.test, InitFrom(c.path))
		be.Close()
		if err == nil || tr != nil || !strings.Contains(err.Error(), c.wanted) {
			t.Errorf("%s: %v; want an error saying %q", c.name, err, c.wanted)
		}
	}

	// Resuming: the checkpoint's weights, not the initial ones.
	ckpt := filepath.Join(dir, "run.safetensors")
	if err := fresh.Save(ckpt); err != nil {
		t.Fatal(err)
	}
	// Its training state given as the initial weights: the file to give.
	be := cpu.New(1)
	_, err := New(context.Background(), cfg, be, train, test, InitFrom(checkpoint.TrainPath(ckpt)))
	be.Close()
	if want := "initial weights: " + ckpt + ".train is a run's training state (optimizer and progress, for --resume); its weights are in " + ckpt; err == nil || err.Error() != want {
		t.Errorf("the training state as initial weights: %v; want %q", err, want)
	}
	tr = newTrainer(t, cfg, train, test, ResumeFrom(ckpt), InitFrom(weights))
	if !sameTensors(nn.StateTensors(tr.Model().Net), nn.StateTensors(fresh.Model().Net)) {
		t.Fatal("a resumed run's weights are not its checkpoint's")
	}
	desc.Reset()
	tr.Describe(&desc, "cpu")
	if !strings.Contains(desc.String(), "Initial weights "+weights+" not loaded: the run resumes from its checkpoint") {
		t.Fatalf("description:\n%s", desc.String())
	}
}

func sameTensors(a, b []safetensors.Tensor) bool {
	return slices.EqualFunc(a, b, func(x, y safetensors.Tensor) bool {
		return x.Name == y.Name && slices.Equal(x.Shape, y.Shape) && slices.Equal(x.F32, y.F32) && slices.Equal(x.I64, y.I64)
	})
}

// TestLoadInitStage: a pipeline stage takes the file's tensors of its own
// layers and passes over the others; a file lacking some of its own is
// refused, naming them and the file's.
func TestLoadInitStage(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 64, 32)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads = 1, 1
	net := newTrainer(t, cfg, train, test).Model().Net
	all := nn.StateTensors(net)
	dir := t.TempDir()
	write := func(name string, tensors []safetensors.Tensor) string {
		path := filepath.Join(dir, name)
		if err := safetensors.WriteFile(path, tensors, nil); err != nil {
			t.Fatal(err)
		}
		return path
	}
	other := all[0]
	other.Name = "another_stage.weight"
	more := write("more.safetensors", append(slices.Clone(all), other))
	if note, err := loadInit(more, net, true); err != nil || !strings.HasSuffix(note, "(this stage's 8 of its 9 tensors)") {
		t.Errorf("a file with another stage's tensor besides: note %q, error %v", note, err)
	}
	if _, err := loadInit(more, net, false); err == nil {
		t.Error("a whole model took a file with a tensor it does not have")
	}
	fewer := write("fewer.safetensors", all[:4])
	_, err := loadInit(fewer, net, true)
	if want := `the file lacks 4 of this pipeline stage's 8 tensors: "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" (the file's: "conv1.weight"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a file without some of the stage's tensors: %v; want an error containing %q", err, want)
	}
}
