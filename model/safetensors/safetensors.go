// Package safetensors reads and writes the safetensors format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// then the raw little-endian data. PyTorch (safetensors.torch), Hugging Face
// and gorun all read it; unlike pickle it runs no code when loaded.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"

	"github.com/gorun/gorun/model/atomicfile"
)

// DType is a safetensors element type.
type DType string

// The element types gorun reads; F16, BF16 and F64 are widened or narrowed
// to float32 on load, the smaller integers (and BOOL) widened to int64.
const (
	F32  DType = "F32"
	F64  DType = "F64"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U8   DType = "U8"
	BOOL DType = "BOOL"
)

func (d DType) size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16, I16:
		return 2
	case I8, U8, BOOL:
		return 1
	}
	return 0
}

// elements is the number of elements of a tensor of shape (1 for a
// scalar's empty shape).
func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// DecodeTensor returns the tensor named name of dtype and shape whose
// little-endian data is b, decoded as ReadFile decodes a file's tensors.
func DecodeTensor(name string, dtype DType, shape []int, b []byte) (Tensor, error) {
	size := dtype.size()
	if size == 0 {
		return Tensor{}, fmt.Errorf("tensor %q: unsupported dtype %q", name, dtype)
	}
	count := elements(shape)
	if len(b) != count*size {
		return Tensor{}, fmt.Errorf("tensor %q: %d bytes for shape %v of %s, want %d", name, len(b), shape, dtype, count*size)
	}
	t := Tensor{Name: name, DType: dtype, Shape: shape}
	decode(&t, b)
	return t, nil
}

// FromTensors returns a File holding tensors (decoded, each with F32 or
// I64 set to match its shape), as if read from a file: what another
// format's reader gives the loaders of safetensors files.
func FromTensors(tensors []Tensor) (*File, error) {
	f := &File{Tensors: tensors, byName: map[string]int{}}
	for i, t := range tensors {
		if _, ok := f.byName[t.Name]; ok {
			return nil, fmt.Errorf("tensor %q twice", t.Name)
		}
		count := elements(t.Shape)
		if (t.F32 == nil) == (t.I64 == nil) && count > 0 || max(len(t.F32), len(t.I64)) != count {
			return nil, fmt.Errorf("tensor %q: shape %v and %d float32 and %d int64 values", t.Name, t.Shape, len(t.F32), len(t.I64))
		}
		f.byName[t.Name] = i
	}
	return f, nil
}

// Tensor is one named tensor. Exactly one of F32 and I64 is set: floating
// types load as F32, integer ones as I64.
type Tensor struct {
	Name  string
	DType DType // the type on disk
	Shape []int
	F32   []float32
	I64   []int64
}

// File is a loaded safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	Tensors  []Tensor // in data order
	byName   map[string]int
}

// Get returns the tensor with the given name.
func (f *File) Get(name string) (*Tensor, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// maxHeader bounds the JSON header, as the reference implementation does.
const maxHeader = 100 << 20

type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// ReadFile loads and validates a safetensors file.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// ReadMetadata reads only the header of the safetensors file at path and
// returns its metadata (nil when it has none): what a caller needs before
// it decides to load the tensors, without reading them.
func ReadMetadata(path string) (map[string]string, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var prefix [8]byte
	if _, err := io.ReadFull(fd, prefix[:]); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %d bytes is too short for the 8-byte header length", path, st.Size())
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > maxHeader || n > uint64(st.Size()-8) {
		return nil, fmt.Errorf("safetensors: %s: header length %d at offset 0 exceeds the file (%d bytes) or the %d-byte limit", path, n, st.Size(), maxHeader)
	}
	header := make([]byte, n)
	if _, err := io.ReadFull(fd, header); err != nil {
		return nil, fmt.Errorf("safetensors: %s: reading the header: %w", path, err)
	}
	var raw struct {
		Metadata map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(header, &raw); err != nil {
		return nil, fmt.Errorf("safetensors: %s: header (offset 8, %d bytes): %w", path, n, err)
	}
	return raw.Metadata, nil
}

// Parse decodes a safetensors file held in memory. Errors name the tensor
// and byte offset at fault.
func Parse(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%d bytes is too short for the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("header length %d at offset 0 exceeds the file (%d bytes) or the %d-byte limit", n, len(b), maxHeader)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b[8 : 8+n]))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("header (offset 8, %d bytes): %w", n, err)
	}
	data := b[8+n:]
	f := &File{byName: map[string]int{}}
	type item struct {
		t          Tensor
		begin, end int64
	}
	var items []item
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__: %w", err)
			}
			continue
		}
		var h headerEntry
		if err := json.Unmarshal(msg, &h); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		size := h.DType.size()
		if size == 0 {
			return nil, fmt.Errorf("tensor %q: unsupported dtype %q", name, h.DType)
		}
		count := int64(1)
		for _, d := range h.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %q: negative dimension in shape %v", name, h.Shape)
			}
			count *= int64(d)
			if count > int64(len(data)) {
				return nil, fmt.Errorf("tensor %q: shape %v is larger than the file", name, h.Shape)
			}
		}
		begin, end := h.DataOffsets[0], h.DataOffsets[1]
		if begin < 0 || end < begin || end > int64(len(data)) {
			return nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] outside the %d data bytes (file offset %d): truncated or corrupt", name, begin, end, len(data), 8+n)
		}
		if end-begin != count*int64(size) {
			return nil, fmt.Errorf("tensor %q: %d bytes for shape %v of %s, want %d", name, end-begin, h.Shape, h.DType, count*int64(size))
		}
		shape := h.Shape
		if shape == nil {
			shape = []int{}
		}
		items = append(items, item{Tensor{Name: name, DType: h.DType, Shape: shape}, begin, end})
	}
	sort.Slice(items, func(i, j int) bool {
		return items[i].begin < items[j].begin || items[i].begin == items[j].begin && items[i].end < items[j].end
	})
	var at int64
	for _, it := range items {
		if it.begin != at {
			return nil, fmt.Errorf("tensor %q: starts at data offset %d, want %d (tensors must tile the data without gaps or overlaps)", it.t.Name, it.begin, at)
		}
		at = it.end
	}
	if at != int64(len(data)) {
		return nil, fmt.Errorf("%d trailing data bytes after the last tensor (file offset %d)", int64(len(data))-at, 8+int64(n)+at)
	}
	for i, it := range items {
		decode(&it.t, data[it.begin:it.end])
		f.Tensors = append(f.Tensors, it.t)
		f.byName[it.t.Name] = i
	}
	return f, nil
}

func decode(t *Tensor, b []byte) {
	switch t.DType {
	case I64:
		t.I64 = make([]int64, len(b)/8)
		for i := range t.I64 {
			t.I64[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return
	case I32:
		t.I64 = make([]int64, len(b)/4)
		for i := range t.I64 {
			t.I64[i] = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case I16:
		t.I64 = make([]int64, len(b)/2)
		for i := range t.I64 {
			t.I64[i] = int64(int16(binary.LittleEndian.Uint16(b[2*i:])))
		}
	case I8:
		t.I64 = make([]int64, len(b))
		for i := range t.I64 {
			t.I64[i] = int64(int8(b[i]))
		}
	case U8, BOOL:
		t.I64 = make([]int64, len(b))
		for i := range t.I64 {
			t.I64[i] = int64(b[i])
		}
	case F32:
		t.F32 = make([]float32, len(b)/4)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case F64:
		t.F32 = make([]float32, len(b)/8)
		for i := range t.F32 {
			t.F32[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case BF16:
		t.F32 = make([]float32, len(b)/2)
		for i := range t.F32 {
			t.F32[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case F16:
		t.F32 = make([]float32, len(b)/2)
		for i := range t.F32 {
			t.F32[i] = half(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
}

// half widens an IEEE 754 binary16 value.
func half(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		return math.Float32frombits(sign) + float32(math.Ldexp(float64(frac), -24))*float32(1-2*int(h>>15))
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | frac<<13)
}

// Write encodes tensors in the given order (F32 from F32 data, I64 from I64
// data) with optional metadata.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata)
		if err != nil {
			return err
		}
		hdr.WriteString(`"__metadata__":`)
		hdr.Write(m)
	}
	var off int64
	seen := map[string]bool{}
	for i, t := range tensors {
		if seen[t.Name] {
			return fmt.Errorf("safetensors: tensor %q written twice", t.Name)
		}
		seen[t.Name] = true
		n, dtype := int64(len(t.F32))*4, F32
		if t.I64 != nil {
			n, dtype = int64(len(t.I64))*8, I64
		}
		count := elements(t.Shape)
		if (dtype == F32 && count != len(t.F32)) || (dtype == I64 && count != len(t.I64)) {
			return fmt.Errorf("safetensors: tensor %q: shape %v does not match its %d values", t.Name, t.Shape, max(len(t.F32), len(t.I64)))
		}
		if i > 0 || len(metadata) > 0 {
			hdr.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		sh, _ := json.Marshal(shape)
		fmt.Fprintf(&hdr, `%s:{"dtype":"%s","shape":%s,"data_offsets":[%s,%s]}`, name, dtype, sh, strconv.FormatInt(off, 10), strconv.FormatInt(off+n, 10))
		off += n
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return err
	}
	buf := make([]byte, 0, 1<<16)
	flush := func() error {
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	for _, t := range tensors {
		for _, v := range t.F32 {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) >= 1<<16-8 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		for _, v := range t.I64 {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
			if len(buf) >= 1<<16-8 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// WriteFile writes tensors to path atomically: into a temporary file in the
// same directory, synced, then renamed over path, so a crash leaves either
// the old file or the new one, never half of one (model/atomicfile).
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	err := atomicfile.Write(path, func(w io.Writer) error { return Write(w, tensors, metadata) })
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
