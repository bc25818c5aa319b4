package zoo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
)

// formulaWeights sets every parameter as torchref.formula_weights does in
// model/testdata: an integer formula both sides evaluate exactly.
func formulaWeights(l nn.Layer) {
	for _, v := range nn.Params(l) {
		off := 0
		for _, b := range []byte(v.Name) {
			off += int(b)
		}
		off %= 97
		n := v.Value.Len()
		for i := 0; i < n; i++ {
			u := float64((int64(i)*7919+int64(off)*131)%2003)/2003 - 0.5
			var w float64
			switch {
			case v.Value.Dims() >= 2:
				w = 2 * u / math.Sqrt(float64(n/v.Value.Shape[0]))
			case strings.HasSuffix(v.Name, "weight"):
				w = 1 + 0.2*u
			default:
				w = 0.2 * u
			}
			v.Value.Data[i] = float32(w)
		}
	}
}

func noDropout(l nn.Layer) {
	nn.Walk(l, func(l nn.Layer) {
		if d, ok := l.(*nn.Dropout); ok {
			d.P = 0
		}
	})
}

type fixture struct {
	t *testing.T
	f *safetensors.File
}

func (fx fixture) get(name string) *safetensors.Tensor {
	fx.t.Helper()
	e, ok := fx.f.Get(name)
	if !ok {
		fx.t.Fatalf("fixture has no %q", name)
	}
	return e
}

func (fx fixture) tensor(name string) *tensor.Tensor {
	e := fx.get(name)
	t, err := tensor.FromData(append([]float32(nil), e.F32...), e.Shape...)
	if err != nil {
		fx.t.Fatal(err)
	}
	return t
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// compareVars checks each parameter's gradient (prefix "grad") or value
// (prefix "p1", "p2") with the fixture: in full for small tensors, at the
// sampled indices plus the norm for big ones.
func compareVars(t *testing.T, fx fixture, prefix string, vars []nn.Var, tol float64) {
	t.Helper()
	for _, v := range vars {
		data := v.Value.Data
		if prefix == "grad" {
			data = v.Grad.Data
		}
		want := fx.get(prefix + "/" + v.Name).F32
		got := data
		if idx, ok := fx.f.Get(prefix + "idx/" + v.Name); ok {
			got = make([]float32, len(idx.I64))
			for i, j := range idx.I64 {
				got[i] = data[j]
			}
		}
		if e := tensor.RelDiff(got, want, 1e-3); e > tol || math.IsNaN(e) {
			t.Errorf("%s %s: relative error %.3g against PyTorch", prefix, v.Name, e)
		}
		wantNorm := float64(fx.get(prefix + "norm/" + v.Name).F32[0])
		if d := math.Abs(norm(data) - wantNorm); d > tol*math.Max(wantNorm, 1e-3) {
			t.Errorf("%s %s: norm %.6g, PyTorch %.6g", prefix, v.Name, norm(data), wantNorm)
		}
	}
}

// TestModelsMatchPyTorch builds each model with the formula weights, trains
// on PyTorch's batch (training mode, dropout off) and compares outputs,
// losses, every gradient, batch-norm buffers and the weights after one and
// two optimizer steps with PyTorch 1.13's.
func TestModelsMatchPyTorch(t *testing.T) {
	// Everything agrees within 1e-4 relative, except ResNet-18's gradients:
	// through its twenty training-mode batch norms float32 rounding grows to
	// about 2e-3 (its output and loss still agree within 1e-4).
	cases := []struct {
		name    string
		gradTol float64
		opt     func(tensor.Backend, []nn.Var) optim.Optimizer
		eval    bool // in evaluation mode
	}{
		{"mnist", 1e-4, func(be tensor.Backend, p []nn.Var) optim.Optimizer {
			return optim.NewAdadelta(be, p, tensor.AdadeltaOptions{LR: 1})
		}, false},
		{"cifarnet", 1e-4, func(be tensor.Backend, p []nn.Var) optim.Optimizer {
			o, _ := optim.NewSGD(be, p, tensor.SGDOptions{LR: 0.01, Momentum: 0.9})
			return o
		}, false},
		{"resnet18", 3e-3, nil, false},
		// In evaluation mode (gen_fixtures.py says why).
		{"resnet50", 1e-4, nil, true},
	}
	be := cpu.New(2)
	defer be.Close()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.name != "mnist" {
				t.Skip("-short: the big models' parity runs in the full test pass")
			}
			f, err := safetensors.ReadFile("../testdata/" + c.name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			fx := fixture{t, f}
			m, err := New(c.name, be, rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				t.Fatal(err)
			}
			noDropout(m.Net)
			formulaWeights(m.Net)
			m.Net.SetTraining(!c.eval)
			params := nn.Params(m.Net)
			var opt optim.Optimizer
			if c.opt != nil {
				opt = c.opt(be, params)
			}
			loss := m.NewLoss(be)
			x := fx.tensor("x")
			var target []int32
			for _, v := range fx.get("target").I64 {
				target = append(target, int32(v))
			}
			for step := 0; ; step++ {
				nn.ZeroGrad(be, params)
				y, err := m.Net.Forward(x)
				if err != nil {
					t.Fatal(err)
				}
				l, err := loss.Forward(y, target)
				if err != nil {
					t.Fatal(err)
				}
				want := fx.get("loss" + string(rune('0'+step))).F32[0]
				if math.Abs(float64(l-want)) > 1e-4*math.Abs(float64(want)) {
					t.Errorf("step %d: loss %v, PyTorch %v", step, l, want)
				}
				if step == 0 {
					if e := tensor.RelDiff(y.Data, fx.get("y0").F32, 1e-3); e > 1e-4 {
						t.Errorf("output: relative error %.3g against PyTorch", e)
					}
					for _, v := range m.Net.State() {
						if v.Value != nil && !v.IsParam() {
							if e := tensor.RelDiff(v.Value.Data, fx.get("buf/"+v.Name).F32, 1e-3); e > 1e-4 {
								t.Errorf("buffer %s: relative error %.3g", v.Name, e)
							}
						}
					}
				}
				if opt == nil || !fx.has("loss"+string(rune('0'+step+1))) {
					if step == 0 {
						dy, err := loss.Backward()
						if err != nil {
							t.Fatal(err)
						}
						if _, err := m.Net.Backward(dy); err != nil {
							t.Fatal(err)
						}
						compareVars(t, fx, "grad", params, c.gradTol)
					}
					break
				}
				dy, err := loss.Backward()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Net.Backward(dy); err != nil {
					t.Fatal(err)
				}
				if step == 0 {
					compareVars(t, fx, "grad", params, c.gradTol)
				}
				opt.Step()
				compareVars(t, fx, "p"+string(rune('0'+step+1)), params, 1e-4)
			}
		})
	}
}

func (fx fixture) has(name string) bool { _, ok := fx.f.Get(name); return ok }

// TestStateNamesMatchPyTorch checks that each model's state has exactly the
// keys of the PyTorch model's state_dict, as recorded in the fixtures
// (parameters by their gradients, float buffers by their values).
func TestStateNamesMatchPyTorch(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	for _, name := range []string{"mnist", "cifarnet", "resnet18"} {
		f, err := safetensors.ReadFile("../testdata/" + name + ".safetensors")
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range f.Tensors {
			for _, p := range []string{"gradnorm/", "buf/"} {
				if k, ok := strings.CutPrefix(e.Name, p); ok {
					want = append(want, k)
				}
			}
		}
		m, _ := New(name, be, rand.New(rand.NewPCG(1, 1)))
		var got []string
		for _, v := range m.Net.State() {
			if v.Count == nil {
				got = append(got, v.Name)
			}
		}
		sort.Strings(want)
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: state keys\n%v\nPyTorch\n%v", name, got, want)
		}
	}
}

// torchPython returns Debian's Python when it can import torch.
func torchPython(t *testing.T) string {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		t.Skipf("PyTorch not available (%s -c 'import torch': %v); install python3-torch to run this round trip", py, err)
	}
	return py
}

// TestRoundTripThroughPyTorch saves each model's weights (after a training
// step, so running statistics are not the defaults) as safetensors, loads
// them into the PyTorch definition (torchvision's own ResNets) with
// load_state_dict(strict=True), and compares PyTorch's evaluation-mode
// logits with ours. The way back: PyTorch saves its state_dict with
// torch.save, and that file loaded into a fresh model of ours gives our
// logits to the bit.
func TestRoundTripThroughPyTorch(t *testing.T) {
	py := torchPython(t)
	be := cpu.New(2)
	defer be.Close()
	for _, name := range []string{"mnist", "cifarnet", "cifarnet-staged", "resnet18", "resnet50"} {
		t.Run(name, func(t *testing.T) {
			if testing.Short() && name != "mnist" {
				t.Skip("-short")
			}
			rng := rand.New(rand.NewPCG(5, 5))
			m, err := New(name, be, rng)
			if err != nil {
				t.Fatal(err)
			}
			shape := m.Input
			if s, _ := Lookup(name); s.AnySize {
				shape = []int{3, 64, 64} // any size will do: a small one is quick
			}
			x := tensor.New(append([]int{3}, shape...)...)
			for i := range x.Data {
				x.Data[i] = float32(rng.NormFloat64())
			}
			if _, err := m.Net.Forward(x); err != nil { // updates the running statistics
				t.Fatal(err)
			}
			m.Net.SetTraining(false)
			y, err := m.Net.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			weights := filepath.Join(dir, "w.safetensors")
			if err := nn.SaveFile(weights, m.Net, map[string]string{"model": name}); err != nil {
				t.Fatal(err)
			}
			in := filepath.Join(dir, "x.safetensors")
			if err := safetensors.WriteFile(in, []safetensors.Tensor{{Name: "x", Shape: x.Shape, F32: x.Data}}, nil); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "y.safetensors")
			pth := filepath.Join(dir, "state.pth")
			cmd := exec.Command(py, "../testdata/roundtrip.py", name, weights, in, out, pth)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("roundtrip.py: %v\n%s", err, b)
			}
			f, err := safetensors.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := f.Get("y")
			if e := tensor.RelDiff(y.Data, want.F32, 1e-3); e > 1e-4 {
				t.Errorf("PyTorch logits differ: relative error %.3g", e)
			}

			back, err := New(name, be, rand.New(rand.NewPCG(6, 6)))
			if err != nil {
				t.Fatal(err)
			}
			if err := nn.LoadFile(pth, back.Net); err != nil {
				t.Fatal(err)
			}
			back.Net.SetTraining(false)
			yBack, err := back.Net.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(yBack.Data, y.Data) {
				t.Errorf("logits after loading PyTorch's torch.save file differ (relative error %.3g)", tensor.RelDiff(yBack.Data, y.Data, 1e-3))
			}
		})
	}
}

// TestOverfitsOneBatch trains the MNIST net on one fixed batch of 16 random
// images and drives the loss near zero.
func TestOverfitsOneBatch(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	rng := rand.New(rand.NewPCG(9, 9))
	m := MNISTNet(be, rng)
	x := tensor.New(16, 1, 28, 28)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	target := make([]int32, 16)
	for i := range target {
		target[i] = int32(i % 10)
	}
	opt := optim.NewAdam(be, nn.Params(m.Net), tensor.AdamOptions{LR: 1e-3})
	loss := m.NewLoss(be)
	var first, last float32
	for step := 0; step < 60; step++ {
		opt.ZeroGrad()
		y, err := m.Net.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		if last, err = loss.Forward(y, target); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			first = last
		}
		dy, _ := loss.Backward()
		if _, err := m.Net.Backward(dy); err != nil {
			t.Fatal(err)
		}
		opt.Step()
	}
	if last > 0.05 {
		t.Fatalf("loss %v after 60 steps (from %v); want < 0.05", last, first)
	}
}

func TestUnknownModel(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	if _, err := New("vgg", be, rand.New(rand.NewPCG(1, 1))); err == nil || !strings.Contains(err.Error(), "resnet18") {
		t.Fatalf("error %v should list the known models", err)
	}
}

// TestPartsBuildAlone: in every model, every range of pieces built alone
// (BuildPieces) has the state the same layers have in the whole model
// (SelectPieces of Build: names and bits), so a pipeline stage can build
// only its own layers and its file loads into the whole model.
func TestPartsBuildAlone(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	for _, name := range Names() {
		if testing.Short() && (name == "resnet101" || name == "resnet152" || name == "resnet34") {
			continue // the race pass (-short): the same blocks as resnet50 and resnet18, three to six times the weights to draw
		}
		spec, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		whole := spec.Build(be, 11).Net.(*nn.Chain)
		n := len(spec.Pieces())
		for _, r := range [][2]int{{0, 1}, {0, n / 2}, {n / 2, n}, {n - 1, n}, {1, n - 1}, {5, 7}} {
			if r[1] > n {
				continue
			}
			got, want := spec.BuildPieces(be, 11, r[0], r[1]).State(), spec.SelectPieces(whole, r[0], r[1]).State()
			if len(got) != len(want) {
				t.Fatalf("%s pieces %v: %d state entries, the whole model's have %d", name, r, len(got), len(want))
			}
			for i := range got {
				if got[i].Name != want[i].Name || got[i].Value != nil && !slices.Equal(got[i].Value.Data, want[i].Value.Data) {
					t.Fatalf("%s pieces %v: %s differs from the whole model's %s", name, r, got[i].Name, want[i].Name)
				}
			}
		}
	}
}

// TestPiecesBuildAlone: a ResNet's pieces are its top-level layers with
// each stage's residual blocks one by one; any range of them built alone
// (BuildPieces, cuts inside a stage included) has the state the same
// layers have in the whole model (torchvision's names, the same bits),
// and a model cut in two gives the whole model's output, bit for bit.
func TestPiecesBuildAlone(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	for _, name := range []string{"mnist", "cifarnet-staged", "resnet18", "resnet50"} {
		t.Run(name, func(t *testing.T) {
			spec, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			pieces := spec.Pieces()
			blocks := 0
			for _, p := range pieces {
				if p.Block >= 0 {
					blocks++
				}
			}
			if want := map[string]int{"resnet18": 8, "resnet50": 16}[name]; blocks != want {
				t.Fatalf("%d pieces are residual blocks, want %d", blocks, want)
			}
			m := spec.Build(be, 11)
			whole := m.Net.State()
			n := len(pieces)
			for _, r := range [][2]int{{0, 1}, {0, n / 2}, {n / 2, n}, {n - 1, n}, {1, n - 1}, {5, 7}, {6, n - 4}} {
				if r[0] >= r[1] || r[1] > n {
					continue
				}
				got := spec.BuildPieces(be, 11, r[0], r[1]).State()
				var want []nn.Var
				for _, v := range whole {
					for _, p := range pieces[r[0]:r[1]] {
						prefix := spec.Parts[p.Part].Name + "."
						if p.Block >= 0 {
							prefix += strconv.Itoa(p.Block) + "."
						}
						if spec.Parts[p.Part].Name != "" && strings.HasPrefix(v.Name, prefix) {
							want = append(want, v)
							break
						}
					}
				}
				if len(got) != len(want) {
					t.Fatalf("pieces %v: %d state entries, the whole model's have %d", r, len(got), len(want))
				}
				for i := range got {
					if got[i].Name != want[i].Name || got[i].Value != nil && !slices.Equal(got[i].Value.Data, want[i].Value.Data) {
						t.Fatalf("pieces %v: %s differs from the whole model's %s", r, got[i].Name, want[i].Name)
					}
				}
			}
			if name != "resnet18" {
				return
			}
			// Cut inside layer2 (pieces: conv1, bn1, relu, maxpool,
			// layer1.0, layer1.1, layer2.0 | layer2.1, …).
			rng := rand.New(rand.NewPCG(3, 4))
			x := tensor.New(2, 3, 32, 32)
			for i := range x.Data {
				x.Data[i] = rng.Float32()
			}
			want, err := m.Net.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			h, err := spec.BuildPieces(be, 11, 0, 7).Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			got, err := spec.BuildPieces(be, 11, 7, n).Forward(h)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Data, want.Data) {
				t.Fatal("resnet18 cut after layer2.0 gives another output than the whole model")
			}
			if l := spec.PieceLabel(pieces[7]); l != "layer2.1" {
				t.Fatalf("piece 7 is labelled %q, want layer2.1", l)
			}
		})
	}
}

// TestResNetsAreTorchvisions builds each ResNet and compares its state
// (names, shapes, in order) with torchvision.models' own.
func TestResNetsAreTorchvisions(t *testing.T) {
	py := torchPython(t)
	be := cpu.New(1)
	defer be.Close()
	for _, name := range []string{"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"} {
		t.Run(name, func(t *testing.T) {
			if testing.Short() && name != "resnet18" {
				t.Skip("-short: builds a large model")
			}
			m, err := New(name, be, rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				t.Fatal(err)
			}
			script := fmt.Sprintf(`import torchvision
for k, v in getattr(torchvision.models, %q)(num_classes=%d).state_dict().items():
    print(k, *v.shape)`, name, m.Classes)
			out, err := exec.Command(py, "-c", script).CombinedOutput()
			if err != nil {
				t.Skipf("torchvision: %v\n%s", err, out)
			}
			var got []string
			params := 0
			for _, v := range m.Net.State() {
				shape := ""
				if v.Value != nil {
					for _, d := range v.Value.Shape {
						shape += fmt.Sprintf(" %d", d)
					}
				}
				got = append(got, v.Name+shape)
				if v.IsParam() {
					params += v.Value.Len()
				}
			}
			want := strings.Split(strings.TrimSpace(string(out)), "\n")
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("state differs from torchvision's:\nours\n%s\ntorchvision\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			t.Logf("%s: %d parameters", name, params)
		})
	}
}

// TestSpecOptions: the classifier takes any class count; ResNets take any
// input of at least 32×32, the others only their own; zero_init_residual
// zeroes every block's last batch norm, and only those.
func TestSpecOptions(t *testing.T) {
	s, _ := Lookup("resnet50")
	if err := s.SetClasses(7); err != nil || s.Classes != 7 {
		t.Fatalf("SetClasses(7): %v, classes %d", err, s.Classes)
	}
	if err := s.SetClasses(0); err == nil {
		t.Error("SetClasses(0) accepted")
	}
	for _, c := range []struct {
		model string
		shape [3]int
		ok    bool
	}{
		{"resnet50", [3]int{3, 224, 224}, true}, {"resnet50", [3]int{3, 96, 128}, true}, {"resnet50", [3]int{3, 16, 16}, false},
		{"resnet50", [3]int{1, 224, 224}, false}, {"mnist", [3]int{1, 28, 28}, true}, {"mnist", [3]int{1, 32, 32}, false},
	} {
		s, _ := Lookup(c.model)
		if s.Accepts(c.shape) != c.ok {
			t.Errorf("%s accepts %v: %v, want %v", c.model, c.shape, !c.ok, c.ok)
		}
	}
	if s, _ := Lookup("cifarnet-staged"); s.SetClasses(5) == nil {
		t.Error("cifarnet-staged took 5 classes: its classifier is inside stage3")
	}
	be := cpu.New(1)
	defer be.Close()
	s, _ = Lookup("resnet18")
	if err := s.SetClasses(3); err != nil {
		t.Fatal(err)
	}
	s.ZeroInitResidual = true
	m := s.Build(be, 1)
	zeroed := 0
	for _, v := range m.Net.State() {
		if v.IsParam() && strings.HasSuffix(v.Name, "bn2.weight") {
			for _, w := range v.Value.Data {
				if w != 0 {
					t.Fatalf("%s not zero", v.Name)
				}
			}
			zeroed++
		}
		if v.Name == "bn1.weight" && v.Value.Data[0] != 1 {
			t.Errorf("bn1.weight = %v: only the blocks' last batch norms start at zero", v.Value.Data[0])
		}
		if v.Name == "fc.weight" && v.Value.Shape[0] != 3 {
			t.Errorf("fc has %d outputs, want 3", v.Value.Shape[0])
		}
	}
	if zeroed != 8 {
		t.Errorf("%d batch norms zeroed, want 8 (one per block)", zeroed)
	}

	// Recompute: the stem is one checkpoint and so is every block; the
	// state's names stay torchvision's.
	s, _ = Lookup("resnet18")
	plain := s.Build(be, 1).Net.(*nn.Chain)
	s.Recompute = true
	ckpt := s.Build(be, 1).Net.(*nn.Chain)
	if _, ok := ckpt.Layers[0].(*nn.Checkpoint); !ok || len(ckpt.Layers) != len(plain.Layers)-3 {
		t.Errorf("recompute: the first of %d top-level layers is %T, want the stem's checkpoint (conv1, bn1, relu, max pool)", len(ckpt.Layers), ckpt.Layers[0])
	}
	blocks := 0
	nn.Walk(ckpt, func(l nn.Layer) {
		if c, ok := l.(*nn.Checkpoint); ok {
			if _, ok := c.Inner.(*nn.Residual); ok {
				blocks++
			}
		}
	})
	if blocks != 8 {
		t.Errorf("recompute: %d residual blocks checkpointed, want 8", blocks)
	}
	names := func(net nn.Layer) (n []string) {
		for _, v := range net.State() {
			n = append(n, v.Name)
		}
		return n
	}
	if got, want := names(ckpt), names(plain); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("recompute: state names\n%v\nwant\n%v", got, want)
	}
}

// TestEvalSlices: the ImageNet models evaluate in slices of eight images
// (nn.Chain.SliceImages), the small-image ones whole at any usual batch;
// ResNet-50's sliced evaluation of ten images (slices of eight and two)
// gives the bits of the whole batch's.
func TestEvalSlices(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	for _, c := range []struct {
		model     string
		recompute bool
		want      int
	}{{"resnet50", false, 8}, {"resnet50", true, 8}, {"resnet18", false, 392}, {"cifarnet", false, 392}, {"mnist", false, 1536}} {
		spec, err := Lookup(c.model)
		if err != nil {
			t.Fatal(err)
		}
		spec.Recompute = c.recompute
		if got := spec.Build(be, 1).Net.(*nn.Chain).SliceImages; got != c.want {
			t.Errorf("%s (recompute %v) evaluates in slices of %d images, want %d", c.model, c.recompute, got, c.want)
		}
	}
	spec, err := Lookup("resnet50")
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Build(be, 3)
	m.Net.SetTraining(false)
	nn.SetGradEnabled(m.Net, false)
	rng := rand.New(rand.NewPCG(5, 6))
	x := tensor.New(10, 3, 64, 64)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	var ys [2][]float32
	for i, slice := range []int{8, 0} {
		m.Net.(*nn.Chain).SliceImages = slice
		y, err := m.Net.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		ys[i] = y.HostData()
	}
	for i, v := range ys[1] {
		if math.Float32bits(ys[0][i]) != math.Float32bits(v) {
			t.Fatalf("logit %d: %v in slices, %v whole", i, ys[0][i], v)
		}
	}
}

// TestFrozenEvaluation: ResNet-18 on CIFAR-10's images (whose layers take
// every form a frozen convolution keeps: Winograd's on 8×8 and 4×4 maps,
// by rows on the strided ones, dense on 2×2 and 1×1) and CIFARNet (no
// batch norms) evaluate frozen as the same networks unfrozen, pass after
// pass, on one and two threads: to the bits where the frozen layers run
// as the unfrozen ones, within 1e-5 (relative) where they run Winograd
// with 4×4 tiles (the vector kernels: cpu's useWinograd4); and a frozen
// pass again over the same images gives the same bits.
func TestFrozenEvaluation(t *testing.T) {
	probe := cpu.New(1)
	tile4 := strings.Contains(probe.Name(), "frozen layers F(4×4, 3×3)")
	probe.Close()
	worst := 0.0
	defer func() { t.Logf("frozen logits within %.2g (relative) of the unfrozen ones", worst) }()
	for _, model := range []string{"resnet18", "cifarnet"} {
		for _, threads := range []int{1, 2} {
			be := cpu.New(threads)
			spec, err := Lookup(model)
			if err != nil {
				t.Fatal(err)
			}
			plain, frozen := spec.Build(be, 7), spec.Build(be, 7)
			for _, m := range []*Model{plain, frozen} {
				m.Net.SetTraining(false)
				nn.SetGradEnabled(m.Net, false)
			}
			nn.Freeze(frozen.Net, true)
			rng := rand.New(rand.NewPCG(9, 10))
			for pass := range 2 {
				x := tensor.New(append([]int{5}, plain.Input...)...)
				for i := range x.Data {
					x.Data[i] = rng.Float32()
				}
				var ys [3][]float32
				for i, m := range []*Model{plain, frozen, frozen} {
					y, err := m.Net.Forward(x)
					if err != nil {
						t.Fatal(err)
					}
					ys[i] = slices.Clone(y.HostData())
				}
				for i, v := range ys[1] {
					if math.Float32bits(ys[2][i]) != math.Float32bits(v) {
						t.Fatalf("%s, %d threads, pass %d: logit %d frozen %v, again %v", model, threads, pass, i, v, ys[2][i])
					}
				}
				if !tile4 {
					for i, v := range ys[0] {
						if math.Float32bits(ys[1][i]) != math.Float32bits(v) {
							t.Fatalf("%s, %d threads, pass %d: logit %d frozen %v, unfrozen %v", model, threads, pass, i, ys[1][i], v)
						}
					}
				} else if e := tensor.RelDiff(ys[1], ys[0], 1e-3); e > 1e-5 {
					t.Fatalf("%s, %d threads, pass %d: frozen logits %.2g (relative) from the unfrozen ones", model, threads, pass, e)
				} else {
					worst = max(worst, e)
				}
			}
			be.Close()
		}
	}
}
