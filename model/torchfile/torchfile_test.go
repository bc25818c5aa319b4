package torchfile

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/safetensors"
)

// value is element i of every tensor testdata/gen_torchfiles.py made.
func value(i int, floating bool) float64 {
	v := float64(i%13 - 6)
	if floating {
		v += 0.5
	}
	return v
}

// TestReadState reads a state dict torch.save wrote (testdata/state.pth):
// every element type, a 0-d tensor, a transposed view and a view at an
// offset into another tensor's storage, each with its shape and values.
func TestReadState(t *testing.T) {
	f, err := ReadAny("testdata/state.pth")
	if err != nil {
		t.Fatal(err)
	}
	floats := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(value(i, true))
		}
		return v
	}
	ints := func(n int, add int64) []int64 {
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(value(i, false)) + add
		}
		return v
	}
	base := floats(12) // 4 × 3
	var transposed []float32
	for j := range 3 {
		for i := range 4 {
			transposed = append(transposed, base[3*i+j])
		}
	}
	for _, c := range []struct {
		name  string
		dtype safetensors.DType
		shape []int
		f32   []float32
		i64   []int64
	}{
		{"conv.weight", safetensors.F32, []int{2, 1, 3, 3}, floats(18), nil},
		{"bn.running_var", safetensors.F64, []int{2}, floats(2), nil},
		{"bn.num_batches_tracked", safetensors.I64, []int{}, nil, []int64{7}},
		{"half", safetensors.F16, []int{5}, floats(5), nil},
		{"bf16", safetensors.BF16, []int{2, 2}, floats(4), nil},
		{"i32", safetensors.I32, []int{3}, nil, ints(3, 0)},
		{"u8", safetensors.U8, []int{3}, nil, ints(3, 6)},
		{"mask", safetensors.BOOL, []int{4}, nil, []int64{0, 0, 0, 0}},
		{"base", safetensors.F32, []int{4, 3}, base, nil},
		{"transposed", safetensors.F32, []int{3, 4}, transposed, nil},
		{"rows", safetensors.F32, []int{3, 3}, base[3:], nil},
	} {
		got, ok := f.Get(c.name)
		if !ok {
			t.Errorf("%s: missing", c.name)
			continue
		}
		if got.DType != c.dtype || !slices.Equal(got.Shape, c.shape) || !slices.Equal(got.F32, c.f32) || !slices.Equal(got.I64, c.i64) {
			t.Errorf("%s: %s %v, %v %v; want %s %v, %v %v", c.name, got.DType, got.Shape, got.F32, got.I64, c.dtype, c.shape, c.f32, c.i64)
		}
	}
	if len(f.Tensors) != 11 || f.Path != "testdata/state.pth" {
		t.Errorf("%d tensors, path %q", len(f.Tensors), f.Path)
	}
}

// TestReadCheckpoint: a training checkpoint's model_state_dict is the
// state dict read; the optimizer's storage is not (the file reads the same
// without it).
func TestReadCheckpoint(t *testing.T) {
	without := filepath.Join(t.TempDir(), "c.pth")
	os.WriteFile(without, rezip(t, "testdata/checkpoint.pth", func(name string, b []byte) (string, []byte) {
		if name == "checkpoint/data/2" { // the momentum buffer
			return "", nil
		}
		return name, b
	}), 0o644)
	f, err := Read(without)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 2 {
		t.Fatalf("%d tensors, want conv.weight and bn.running_var", len(f.Tensors))
	}
	if w, ok := f.Get("conv.weight"); !ok || len(w.F32) != 18 || w.F32[17] != float32(value(17, true)) {
		t.Fatalf("conv.weight: %+v", w)
	}
}

// TestReadErrors: files that are not state dicts, a file of PyTorch
// before 1.6, images given in the weights' place, archives that are cut
// or changed — each an error naming
// the file and what is wrong; a safetensors file still reads through
// ReadAny.
func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	state, err := os.ReadFile("testdata/state.pth")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name string
		path string
		want string
	}{
		{"a list", "testdata/list.pth", "the file holds a list of 3, not a state dict"},
		{"legacy", "testdata/legacy.pth", "was saved by PyTorch before 1.6"},
		{"a PNG image", write("photo.png", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")), "is a PNG image, not weights"},
		{"a JPEG image", write("photo.jpg", []byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00")), "is a JPEG image, not weights"},
		{"a GIF image", write("photo.gif", []byte("GIF89a\x01\x00\x01\x00")), "is a GIF image, not weights"},
		{"cut", write("cut.pth", state[:len(state)/2]), "zip: not a valid zip file"},
		{"no pickle", write("nopickle.pth", rezip(t, "testdata/state.pth", func(n string, b []byte) (string, []byte) {
			if strings.HasSuffix(n, "data.pkl") {
				return "", nil
			}
			return n, b
		})), "no DIR/data.pkl in the archive"},
		{"a storage missing", write("nostorage.pth", rezip(t, "testdata/state.pth", func(n string, b []byte) (string, []byte) {
			if strings.HasSuffix(n, "/data/0") {
				return "", nil
			}
			return n, b
		})), "no state/data/0 for the storage the pickle names"},
		{"a storage short", write("short.pth", rezip(t, "testdata/state.pth", func(n string, b []byte) (string, []byte) {
			if strings.HasSuffix(n, "/data/0") {
				return n, b[:len(b)-4]
			}
			return n, b
		})), "state/data/0: 68 bytes for a storage of 18 elements of 4 bytes"},
		{"a pickle cut", write("pklcut.pth", rezip(t, "testdata/state.pth", func(n string, b []byte) (string, []byte) {
			if strings.HasSuffix(n, "data.pkl") {
				return n, b[:len(b)/2]
			}
			return n, b
		})), "state/data.pkl: pickle opcode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadAny(c.path)
			if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v; want an error naming %s and saying %q", err, c.path, c.want)
			}
		})
	}

	st := filepath.Join(dir, "w.safetensors")
	if err := safetensors.WriteFile(st, []safetensors.Tensor{{Name: "w", DType: safetensors.F32, Shape: []int{2}, F32: []float32{1, 2}}}, nil); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadAny(st); err != nil || len(f.Tensors) != 1 {
		t.Fatalf("a safetensors file: %v", err)
	}
	if _, err := ReadAny(filepath.Join(dir, "missing.pth")); err == nil || !strings.Contains(err.Error(), "missing.pth") {
		t.Fatalf("a missing file: %v", err)
	}
}

// rezip returns the torch file at path with change applied to each
// member: it returns the member's new name (none: the member is left out)
// and contents.
func rezip(tb testing.TB, path string, change func(name string, b []byte) (string, []byte)) []byte {
	state, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	z, err := zip.NewReader(bytes.NewReader(state), int64(len(state)))
	if err != nil {
		tb.Fatal(err)
	}
	var out bytes.Buffer
	w := zip.NewWriter(&out)
	for _, m := range z.File {
		r, _ := m.Open()
		var b bytes.Buffer
		b.ReadFrom(r)
		name, data := change(m.Name, b.Bytes())
		if name == "" {
			continue
		}
		mw, _ := w.Create(name)
		mw.Write(data)
	}
	w.Close()
	return out.Bytes()
}

// withPickle returns testdata/state.pth with its data.pkl replaced by pkl.
func withPickle(tb testing.TB, pkl []byte) []byte {
	return rezip(tb, "testdata/state.pth", func(name string, b []byte) (string, []byte) {
		if strings.HasSuffix(name, "/data.pkl") {
			return name, pkl
		}
		return name, b
	})
}

// statePickle returns testdata/state.pth's data.pkl.
func statePickle(tb testing.TB) []byte {
	z, err := zip.OpenReader("testdata/state.pth")
	if err != nil {
		tb.Fatal(err)
	}
	defer z.Close()
	for _, m := range z.File {
		if strings.HasSuffix(m.Name, "/data.pkl") {
			r, _ := m.Open()
			var b bytes.Buffer
			b.ReadFrom(r)
			return b.Bytes()
		}
	}
	tb.Fatal("no data.pkl")
	return nil
}

// TestViewsOutsideStorage: a tensor whose size, stride and offset reach
// past its storage — also where their product overflows int64, and a 0-d
// tensor past it — is an error naming it.
func TestViewsOutsideStorage(t *testing.T) {
	pkl := statePickle(t)
	// "rows" (base[1:]) after its storage's BINPERSID: offset 3 (BININT1),
	// size (3, 3) (TUPLE2), BINPUT 92, stride (3, 1).
	at := bytes.Index(pkl, []byte("X\x04\x00\x00\x00rows"))
	views := []byte("QK\x03K\x03K\x03\x86q\\K\x03K\x01\x86")
	if at < 0 || !bytes.Contains(pkl[at:], views) {
		t.Fatal("state.pth's pickle is not as this test expects: regenerated?")
	}
	for _, c := range []struct {
		name string
		with string
	}{
		{"offset past", "QK\x0aK\x03K\x03\x86q\\K\x03K\x01\x86"},
		{"rows past", "QK\x03K\x04K\x03\x86q\\K\x03K\x01\x86"},
		{"sizes too large", "QK\x03J\xff\xff\xff\x7fJ\xff\xff\xff\x7f\x86q\\K\x03K\x01\x86"},
		{"a stride whose product overflows", "QK\x03K\x03K\x01\x86q\\\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40K\x01\x86"}, // 2·2⁶²
		{"a 0-d tensor past", "QK\x14)q\\)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "v.pth")
			changed := slices.Concat(pkl[:at], bytes.Replace(pkl[at:], views, []byte(c.with), 1))
			os.WriteFile(p, withPickle(t, changed), 0o644)
			if _, err := Read(p); err == nil || !strings.Contains(err.Error(), `tensor "rows": size`) || !strings.Contains(err.Error(), "reach past its storage of 12 elements") && !strings.Contains(err.Error(), "too many elements") {
				t.Fatalf("%v; want an error naming tensor rows and its size", err)
			}
		})
	}
}

// TestStorageSizeOverflow: a storage said to hold 2⁶² + 12 float32
// elements, whose byte count overflows to the 48 its member holds, is
// refused — its tensors would index far past the member.
func TestStorageSizeOverflow(t *testing.T) {
	pkl := statePickle(t)
	twelve := []byte("h\x07K\x0ct") // "cpu" (memo 7), 12 elements, TUPLE: base's storage, three times
	if bytes.Count(pkl, twelve) != 3 {
		t.Fatal("state.pth's pickle is not as this test expects: regenerated?")
	}
	huge := []byte("h\x07\x8a\x08\x0c\x00\x00\x00\x00\x00\x00\x40t")
	p := filepath.Join(t.TempDir(), "o.pth")
	os.WriteFile(p, withPickle(t, bytes.ReplaceAll(pkl, twelve, huge)), 0o644)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "state/data/8: 48 bytes for a storage of 4611686018427387916 elements of 4 bytes") {
		t.Fatalf("%v; want the storage refused", err)
	}
}

// FuzzRead reads a torch file whose pickle is the fuzzed bytes (its
// storages those of testdata/state.pth): an error, or tensors whose
// values fill their shapes.
func FuzzRead(f *testing.F) {
	f.Add(statePickle(f))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, pkl []byte) {
		p := filepath.Join(dir, "f.pth")
		if err := os.WriteFile(p, withPickle(t, pkl), 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := Read(p)
		if err != nil {
			return
		}
		for _, tn := range file.Tensors {
			n := 1
			for _, d := range tn.Shape {
				n *= d
			}
			if max(len(tn.F32), len(tn.I64)) != n {
				t.Fatalf("tensor %q: shape %v with %d values", tn.Name, tn.Shape, max(len(tn.F32), len(tn.I64)))
			}
		}
	})
}
