package train

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

// TestClassifierRefusesBadMetadata: a weights file whose normalisation or
// input shape does not fit its model is refused, naming the file and the
// field, instead of giving silently wrong predictions.
func TestClassifierRefusesBadMetadata(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	m := zoo.MNISTNet(be, rand.New(rand.NewPCG(1, 2)))
	classes, _ := data.ClassNames("mnist")
	good := checkpoint.Meta{Model: m.Name, Input: m.Input[:], Classes: classes, Mean: []float32{0.1307}, Std: []float32{0.3081}}
	cases := []struct {
		name string
		edit func(*checkpoint.Meta)
		want string // "" for a file that loads
	}{
		{"good", func(*checkpoint.Meta) {}, ""},
		{"empty mean", func(m *checkpoint.Meta) { m.Mean = []float32{} }, "mean [] and std"},
		{"zero std", func(m *checkpoint.Meta) { m.Std = []float32{0} }, "std [0]: channel 0"},
		{"negative std", func(m *checkpoint.Meta) { m.Std = []float32{-1} }, "std [-1]: channel 0"},
		{"three channels", func(m *checkpoint.Meta) { m.Mean, m.Std = []float32{0, 0, 0}, []float32{1, 1, 1} }, "1 input channels"},
		{"input shape", func(m *checkpoint.Meta) { m.Input = []int{3, 32, 32} }, "input [3 32 32]"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			meta := good
			c.edit(&meta)
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".safetensors")
			if err := checkpoint.Save(path, m.Net, nil, meta); err != nil {
				t.Fatal(err)
			}
			_, err := LoadClassifier(path, "", "", be)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("a good file: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path)):
				t.Fatalf("error %v, want one naming %s and saying %q", err, path, c.want)
			}
		})
	}
}
