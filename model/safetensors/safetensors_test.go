package safetensors

import (
	"bytes"
	"encoding/binary"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// TestReadMetadata: the header alone gives the metadata ReadFile gives
// (also when the tensors' data is cut short, which it does not read), and
// a file whose header cannot be read is an error naming the file.
func TestReadMetadata(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	md := map[string]string{"format": "pt", "gorun": `{"epoch":3}`}
	if err := WriteFile(path, sample(), md); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hdrEnd := 8 + int(binary.LittleEndian.Uint64(whole))
	plain := filepath.Join(dir, "plain.safetensors")
	if err := WriteFile(plain, sample(), nil); err != nil {
		t.Fatal(err)
	}
	cut := func(n int) string {
		p := filepath.Join(dir, "cut"+strconv.Itoa(n))
		if err := os.WriteFile(p, whole[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path string
		want       map[string]string
		err        string
	}{
		{"whole file", path, md, ""},
		{"data cut short", cut(hdrEnd + 3), md, ""},
		{"no metadata", plain, nil, ""},
		{"missing", filepath.Join(dir, "nope"), nil, "no such file"},
		{"shorter than the length", cut(5), nil, "too short for the 8-byte header length"},
		{"header cut short", cut(hdrEnd - 4), nil, "exceeds the file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadMetadata(tc.path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.path) {
					t.Fatalf("got %v, want an error naming %s with %q", err, tc.path, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("metadata %v, want %v", got, tc.want)
			}
		})
	}
	// A header that is not JSON.
	bad := filepath.Join(dir, "bad")
	b := binary.LittleEndian.AppendUint64(nil, 4)
	if err := os.WriteFile(bad, append(b, "{{{{"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMetadata(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "header (offset 8, 4 bytes)") {
		t.Errorf("a header that is not JSON: %v", err)
	}
}
