// Package torchfile reads the state dicts PyTorch's torch.save writes (the
// .pt and .pth files of PyTorch 1.6 and later: a zip archive of a pickle,
// data.pkl, and one raw file per storage), so that weights trained with
// PyTorch load into gorun's models as safetensors files do. The pickle is
// read as data (model/pickle): nothing in the file runs. Tensors of
// floating types come out as float32, integer ones as int64; views
// (strided tensors, shared storages) are copied out in row-major order.
package torchfile

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/gorun/gorun/model/pickle"
	"github.com/gorun/gorun/model/safetensors"
)

// IsTorchFile reports whether the file starts as torch.save's files do:
// a zip archive's local file header.
func IsTorchFile(head []byte) bool { return bytes.HasPrefix(head, []byte("PK\x03\x04")) }

// legacyMagic starts the files torch.save wrote before PyTorch 1.6 (a
// pickled magic number, 0x1950a86a20f9469cfc6c, as a LONG1).
var legacyMagic = []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

// IsLegacyTorchFile reports whether the file starts as those of PyTorch
// before 1.6 do, which Read does not read.
func IsLegacyTorchFile(head []byte) bool { return bytes.HasPrefix(head, legacyMagic) }

// maxFile bounds what a torch file may hold (its members are read whole).
const maxFile = 16 << 30

// storage is a persistent reference: a tensor storage's element type,
// its file in the archive and its element count.
type storage struct {
	dtype safetensors.DType
	size  int // bytes an element
	key   string
	numel int64
}

// storageTypes are the storage classes read, by name in module torch.
var storageTypes = map[string]struct {
	dtype safetensors.DType
	size  int
}{
	"FloatStorage":    {safetensors.F32, 4},
	"DoubleStorage":   {safetensors.F64, 8},
	"HalfStorage":     {safetensors.F16, 2},
	"BFloat16Storage": {safetensors.BF16, 2},
	"LongStorage":     {safetensors.I64, 8},
	"IntStorage":      {safetensors.I32, 4},
	"ShortStorage":    {safetensors.I16, 2},
	"CharStorage":     {safetensors.I8, 1},
	"ByteStorage":     {safetensors.U8, 1},
	"BoolStorage":     {safetensors.BOOL, 1},
}

// Read loads the state dict in the torch.save file at path as a
// safetensors.File (its Path set, no metadata). The file holds a dict of
// tensors — or a training checkpoint whose "state_dict",
// "model_state_dict" or "model" entry is one. Errors name the file and
// what in it is at fault.
func Read(p string) (*safetensors.File, error) {
	f, err := read(p)
	if err != nil {
		return nil, fmt.Errorf("torch file %s: %w", p, err)
	}
	return f, nil
}

func read(p string) (*safetensors.File, error) {
	z, err := zip.OpenReader(p)
	if err != nil {
		return nil, err
	}
	defer z.Close()
	members := map[string]*zip.File{}
	var pkl string
	for _, m := range z.File {
		members[m.Name] = m
		if path.Base(m.Name) == "data.pkl" && strings.Count(m.Name, "/") == 1 {
			pkl = m.Name
		}
	}
	if pkl == "" {
		return nil, errors.New("no DIR/data.pkl in the archive: not a file torch.save wrote")
	}
	dir := path.Dir(pkl)
	b, err := member(members[pkl])
	if err != nil {
		return nil, err
	}
	storages := map[string]*storage{}
	v, err := pickle.Load(b, func(id any) (any, error) { return persistent(id, storages) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkl, err)
	}
	state, err := stateDict(v)
	if err != nil {
		return nil, err
	}
	// Only the state dict's storages are read: a training checkpoint's
	// optimizer state (Adam's, twice the weights) is left in the archive.
	used := map[string]*storage{}
	for _, v := range state.M {
		if o, ok := v.(*pickle.Object); ok && len(o.Args) > 0 {
			if s, ok := o.Args[0].(*storage); ok {
				used[s.key] = s
			}
		}
	}
	data := map[string][]byte{}
	for key, s := range used {
		m, ok := members[dir+"/data/"+key]
		if !ok {
			return nil, fmt.Errorf("no %s/data/%s for the storage the pickle names", dir, key)
		}
		if b, err = member(m); err != nil {
			return nil, err
		}
		if s.numel > int64(len(b))/int64(s.size) || int64(len(b)) != s.numel*int64(s.size) {
			return nil, fmt.Errorf("%s: %d bytes for a storage of %d elements of %d bytes", m.Name, len(b), s.numel, s.size)
		}
		data[key] = b
	}
	var tensors []safetensors.Tensor
	for _, name := range keys(state) {
		t, err := tensor(name, state.M[name], data)
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, t)
	}
	f, err := safetensors.FromTensors(tensors)
	if err != nil {
		return nil, err
	}
	f.Path = p
	return f, nil
}

// member reads a member of the archive whole.
func member(m *zip.File) ([]byte, error) {
	if m.UncompressedSize64 > maxFile {
		return nil, fmt.Errorf("%s: %d bytes", m.Name, m.UncompressedSize64)
	}
	r, err := m.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, int64(m.UncompressedSize64)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	if uint64(len(b)) != m.UncompressedSize64 {
		return nil, fmt.Errorf("%s: %d bytes where the archive says %d", m.Name, len(b), m.UncompressedSize64)
	}
	return b, nil
}

// persistent resolves torch's storage references: ("storage", torch.XStorage,
// key, location, numel).
func persistent(id any, storages map[string]*storage) (any, error) {
	t, ok := id.(pickle.Tuple)
	if !ok || len(t) != 5 || t[0] != "storage" {
		return nil, fmt.Errorf("a persistent reference in %s, want a tuple (\"storage\", type, key, location, elements)", pickle.Describe(id))
	}
	g, ok := t[1].(pickle.Global)
	st, known := storageTypes[g.Name]
	if !ok || g.Module != "torch" || !known {
		return nil, fmt.Errorf("a storage of type %s, not one of torch's storages of numbers", pickle.Describe(t[1]))
	}
	key, ok1 := t[2].(string)
	numel, ok2 := t[4].(int64)
	if !ok1 || !ok2 || numel < 0 || key == "" || strings.ContainsAny(key, "/\\") {
		return nil, fmt.Errorf("a storage's key %s and size %s", pickle.Describe(t[2]), pickle.Describe(t[4]))
	}
	if s, ok := storages[key]; ok {
		if s.dtype != st.dtype || s.numel != numel {
			return nil, fmt.Errorf("storage %s named twice, as different storages", key)
		}
		return s, nil
	}
	s := &storage{dtype: st.dtype, size: st.size, key: key, numel: numel}
	storages[key] = s
	return s, nil
}

// stateDict finds the dict of tensors in what the pickle holds.
func stateDict(v any) (*pickle.Dict, error) {
	d, ok := v.(*pickle.Dict)
	if !ok {
		return nil, fmt.Errorf("the file holds %s, not a state dict", pickle.Describe(v))
	}
	if tensors(d) {
		return d, nil
	}
	for _, k := range []string{"state_dict", "model_state_dict", "model"} {
		if s, ok := d.M[k].(*pickle.Dict); ok && tensors(s) {
			return s, nil
		}
	}
	return nil, fmt.Errorf("the file holds a dict of %q, neither a state dict (names and tensors) nor a checkpoint with one as state_dict, model_state_dict or model", keys(d))
}

// tensors reports whether d has text keys and tensors for values (and
// some of them).
func tensors(d *pickle.Dict) bool {
	for k, v := range d.M {
		if _, ok := k.(string); !ok || !isTensor(v) {
			return false
		}
	}
	return len(d.M) > 0
}

// keys returns d's keys as text, sorted.
func keys(d *pickle.Dict) []string {
	var ks []string
	for k := range d.M {
		ks = append(ks, fmt.Sprint(k))
	}
	slices.Sort(ks)
	return ks
}

func isTensor(v any) bool {
	o, ok := v.(*pickle.Object)
	return ok && o.Fn == pickle.Global{Module: "torch._utils", Name: "_rebuild_tensor_v2"}
}

// tensor copies the tensor v — torch._utils._rebuild_tensor_v2(storage,
// offset, size, stride, ...) — out of its storage's bytes.
func tensor(name string, v any, data map[string][]byte) (safetensors.Tensor, error) {
	bad := func(format string, a ...any) (safetensors.Tensor, error) {
		return safetensors.Tensor{}, fmt.Errorf("tensor %q: "+format, append([]any{name}, a...)...)
	}
	o, ok := v.(*pickle.Object)
	if !ok || !isTensor(v) || len(o.Args) < 4 {
		return bad("%s, not a tensor", pickle.Describe(v))
	}
	s, ok := o.Args[0].(*storage)
	if !ok {
		return bad("its storage is %s", pickle.Describe(o.Args[0]))
	}
	offset, ok := o.Args[1].(int64)
	shape, err := ints(o.Args[2])
	if err != nil || !ok {
		return bad("offset %s, size %s", pickle.Describe(o.Args[1]), pickle.Describe(o.Args[2]))
	}
	stride, err := ints(o.Args[3])
	if err != nil || len(stride) != len(shape) {
		return bad("stride %s for %d dimensions", pickle.Describe(o.Args[3]), len(shape))
	}
	// Every element's position, offset + Σ index·stride, must lie in the
	// storage (checked without overflow: the largest is the last one's).
	n := int64(1)
	for i, d := range shape {
		if d < 0 || stride[i] < 0 {
			return bad("size %v, stride %v", shape, stride)
		}
		if d > math.MaxInt32 {
			return bad("size %v: too many elements", shape)
		}
		if n *= d; n > math.MaxInt32 {
			return bad("size %v: too many elements", shape)
		}
	}
	if n > 0 {
		outside := offset < 0 || offset >= s.numel
		for i, last := 0, offset; i < len(shape) && !outside; i++ {
			outside = stride[i] > 0 && shape[i]-1 > (s.numel-1-last)/stride[i]
			last += (shape[i] - 1) * stride[i]
		}
		if outside {
			return bad("size %v, stride %v from offset %d reach past its storage of %d elements", shape, stride, offset, s.numel)
		}
	}
	dims := make([]int, len(shape))
	for i, d := range shape {
		dims[i] = int(d)
	}
	// The elements' bytes gathered row-major over shape, then decoded.
	raw, size := data[s.key], int64(s.size)
	b := make([]byte, 0, n*size)
	if n > 0 {
		index := make([]int64, len(shape))
		for {
			pos := offset
			for i, k := range index {
				pos += k * stride[i]
			}
			b = append(b, raw[pos*size:(pos+1)*size]...)
			i := len(index) - 1
			for ; i >= 0; i-- {
				if index[i]++; index[i] < shape[i] {
					break
				}
				index[i] = 0
			}
			if i < 0 {
				break
			}
		}
	}
	return safetensors.DecodeTensor(name, s.dtype, dims, b)
}

// ints reads a tuple of integers (a size or a stride).
func ints(v any) ([]int64, error) {
	t, ok := v.(pickle.Tuple)
	if !ok {
		return nil, fmt.Errorf("%s, not a tuple", pickle.Describe(v))
	}
	out := make([]int64, len(t))
	for i, e := range t {
		if out[i], ok = e.(int64); !ok {
			return nil, fmt.Errorf("%s in a tuple of ints", pickle.Describe(e))
		}
	}
	return out, nil
}

// ReadAny reads the weights file at p: a torch.save file (zip) or
// safetensors, told apart by their first bytes; a file torch saved before
// PyTorch 1.6 is an error saying how to convert it.
func ReadAny(p string) (*safetensors.File, error) {
	fd, err := os.Open(p)
	if err != nil {
		return nil, err // names the file
	}
	head := make([]byte, len(legacyMagic))
	n, _ := io.ReadFull(fd, head)
	fd.Close()
	switch head = head[:n]; {
	case IsTorchFile(head):
		return Read(p)
	case IsLegacyTorchFile(head):
		return nil, fmt.Errorf("weights: %s was saved by PyTorch before 1.6 (torch.save's legacy format), which gorun does not read: load it and save it again with a newer PyTorch, or as safetensors (safetensors.torch.save_file)", p)
	}
	f, err := safetensors.ReadFile(p)
	if kind := imageKind(head); err != nil && kind != "" {
		return nil, fmt.Errorf("%s is a %s image, not weights (a safetensors or torch.save file)", p, kind)
	}
	return f, err
}

// imageKind names the image format a file beginning with head is in, or
// returns "" for none: for a file given as weights that is not, the image
// the user meant to classify.
func imageKind(head []byte) string {
	for _, k := range []struct{ magic, name string }{
		{"\x89PNG\r\n\x1a\n", "PNG"}, {"\xff\xd8\xff", "JPEG"}, {"GIF8", "GIF"},
	} {
		if bytes.HasPrefix(head, []byte(k.magic)) {
			return k.name
		}
	}
	return ""
}
