package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func sample() []Tensor {
	return []Tensor{
		{Name: "conv1.weight", Shape: []int{2, 1, 1, 2}, F32: []float32{1, -2, 3.5, 0}},
		{Name: "bn1.num_batches_tracked", Shape: []int{}, I64: []int64{42}},
		{Name: "fc.bias", Shape: []int{3}, F32: []float32{0.25, 0.5, -1}},
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(path, sample(), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", f.Metadata)
	}
	for _, want := range sample() {
		got, ok := f.Get(want.Name)
		if !ok {
			t.Fatalf("%s missing", want.Name)
		}
		if !slices.Equal(got.Shape, want.Shape) || !slices.Equal(got.F32, want.F32) || !slices.Equal(got.I64, want.I64) {
			t.Errorf("%s: got %+v, want %+v", want.Name, got, want)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestCorruptFilesAreNamedErrors(t *testing.T) {
	var good bytes.Buffer
	if err := Write(&good, sample(), nil); err != nil {
		t.Fatal(err)
	}
	b := good.Bytes()
	hdrLen := int(binary.LittleEndian.Uint64(b))
	withHeader := func(h string) []byte {
		var out bytes.Buffer
		binary.Write(&out, binary.LittleEndian, uint64(len(h)))
		out.WriteString(h)
		out.Write(make([]byte, 8))
		return out.Bytes()
	}
	tests := []struct {
		name, want string
		data       []byte
	}{
		{"empty", "too short", nil},
		{"huge header length", "exceeds the file", append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, b[8:]...)},
		{"truncated data", `"fc.bias"`, b[:len(b)-4]},
		{"truncated header", "header", b[:8+hdrLen/2]},
		{"bad dtype", `unsupported dtype "Q8"`, withHeader(`{"a":{"dtype":"Q8","shape":[2],"data_offsets":[0,8]}}`)},
		{"size mismatch", `tensor "a": 8 bytes for shape [3]`, withHeader(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`)},
		{"gap", `starts at data offset 4`, withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`)},
		{"trailing", "trailing data bytes", withHeader(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`)},
		{"negative shape", "negative dimension", withHeader(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestHalfPrecisionWidens(t *testing.T) {
	tests := []struct {
		bits uint16
		want float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x3555, 0.33325195}, {0x0001, 5.9604645e-08}, {0x8000, 0}, {0x7bff, 65504}}
	for _, tt := range tests {
		if got := half(tt.bits); got != tt.want {
			t.Errorf("half(%#04x) = %v, want %v", tt.bits, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	var good bytes.Buffer
	Write(&good, sample(), map[string]string{"k": "v"})
	f.Add(good.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		Parse(b) // must not panic
	})
}
