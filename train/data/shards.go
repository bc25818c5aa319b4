package data

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image/jpeg"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/model/atomicfile"
)

// Shards are WebDataset-style tar files: each sample is a run of members
// sharing a key, KEY.jpg (or .png) and KEY.cls (the class index as
// decimal text). ShardsIndex (shards.json) beside them names the classes
// and lists each split's shards with their sample counts. A rank streams
// its own shards front to back in large sequential reads (what parallel
// file systems serve best), holding samples in a shuffle buffer.

// ShardsIndex is the name of a shard directory's index file.
const ShardsIndex = "shards.json"

// shardsFormat identifies the index's layout.
const shardsFormat = "gorun-shards/1"

// shardIndex is shards.json.
type shardIndex struct {
	Format  string                 `json:"format"`
	Classes []string               `json:"classes"`
	Splits  map[string][]shardFile `json:"splits"`
	// LeftOut counts, per split and extension, the image folder's files
	// of the image formats gorun does not decode, which were not packed
	// (Dataset.LeftOut); absent when there were none.
	LeftOut map[string]map[string]int `json:"left_out,omitempty"`
}

// shardFile is one shard in the index.
type shardFile struct {
	File    string `json:"file"`
	Samples int    `json:"samples"`
}

// ShardSet is a split of a shard directory: its shards, in the index's
// order, with the samples numbered consecutively through them.
type ShardSet struct {
	Dir   string
	Files []string // shard file names, relative to Dir
	// first[s] is shard s's first sample number; first[len(Files)] the
	// total.
	first []int
	// Buffer is the number of samples each rank holds to shuffle among
	// (WebDataset's shuffle buffer).
	Buffer int
}

// Len returns the number of samples.
func (s *ShardSet) Len() int { return s.first[len(s.Files)] }

// shardOf returns the shard that holds sample id.
func (s *ShardSet) shardOf(id int) int {
	i, found := slices.BinarySearch(s.first, id)
	if !found {
		i--
	}
	return i
}

// head returns the set cut after its first n samples (n ≤ Len).
func (s *ShardSet) head(n int) *ShardSet {
	h := *s
	k := s.shardOf(max(n-1, 0)) + 1
	h.Files = s.Files[:k]
	h.first = slices.Clone(s.first[:k+1])
	h.first[k] = n
	return &h
}

// DefaultShuffleBuffer is the shuffle buffer's size in samples.
const DefaultShuffleBuffer = 1000

// EpochOrder returns the samples rank of world trains in epoch, in order:
// the shards in an order drawn from seed and epoch, rank taking every
// world-th of them (rank, rank+world, ...), each read front to back
// through a shuffle buffer of s.Buffer samples (drawn from seed, epoch
// and rank). Every rank takes the same number of samples, the smallest
// rank's share: the rest of a longer share waits for another epoch's
// order. A shard directory needs at least as many shards as ranks.
func (s *ShardSet) EpochOrder(seed uint64, epoch, rank, world int) ([]int, error) {
	if len(s.Files) < world {
		return nil, fmt.Errorf("%s: %d shards for %d ranks: each rank reads shards of its own; pack the data into at least %d", s.Dir, len(s.Files), world, world)
	}
	order := make([]int, len(s.Files))
	for i := range order {
		order[i] = i
	}
	r := rand.New(rand.NewPCG(seed, 0x7368617264<<16|uint64(epoch)))
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	share := func(rank int) (n int) {
		for k := rank; k < len(order); k += world {
			n += s.first[order[k]+1] - s.first[order[k]]
		}
		return n
	}
	quota := share(0)
	for q := 1; q < world; q++ {
		quota = min(quota, share(q))
	}
	stream := make([]int, 0, share(rank))
	for k := rank; k < len(order); k += world {
		for id := s.first[order[k]]; id < s.first[order[k]+1]; id++ {
			stream = append(stream, id)
		}
	}
	stream = stream[:quota]
	// The shuffle buffer: full, each next sample read replaces one drawn
	// at random; at the end the rest come out in a random order.
	out := make([]int, 0, quota)
	buf := make([]int, 0, max(s.Buffer, 1))
	rb := rand.New(rand.NewPCG(seed^0x6275666665720000, uint64(epoch)<<20|uint64(rank)))
	for _, id := range stream {
		if len(buf) < cap(buf) {
			buf = append(buf, id)
			continue
		}
		j := rb.IntN(len(buf))
		out = append(out, buf[j])
		buf[j] = id
	}
	rb.Shuffle(len(buf), func(i, j int) { buf[i], buf[j] = buf[j], buf[i] })
	return append(out, buf...), nil
}

// Share returns the samples rank of world evaluates: every sample of its
// shards (rank, rank+world, ... in the index's order), so that the ranks
// together score each sample once.
func (s *ShardSet) Share(rank, world int) []int {
	var ids []int
	for k := rank; k < len(s.Files); k += world {
		for id := s.first[k]; id < s.first[k+1]; id++ {
			ids = append(ids, id)
		}
	}
	return ids
}

// isShardDir reports whether dir holds a shard index.
func isShardDir(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, ShardsIndex))
	return err == nil && st.Mode().IsRegular()
}

// LoadShards reads a shard directory's index: the train and val splits
// as datasets of crop×crop images streamed from their shards.
func LoadShards(dir string, crop int) (train, test *Dataset, err error) {
	path := filepath.Join(dir, ShardsIndex)
	idx, err := readIndex(path)
	if err != nil {
		return nil, nil, err
	}
	if len(idx.Classes) == 0 {
		return nil, nil, fmt.Errorf("%s: no classes", path)
	}
	var splits [2]*Dataset
	for i, split := range []string{"train", "val"} {
		files := idx.Splits[split]
		if len(files) == 0 {
			return nil, nil, fmt.Errorf("%s: no %s shards", path, split)
		}
		set := &ShardSet{Dir: dir, first: []int{0}, Buffer: DefaultShuffleBuffer}
		for _, f := range files {
			if f.Samples < 1 || filepath.Base(f.File) != f.File {
				return nil, nil, fmt.Errorf("%s: %s shard %q with %d samples", path, split, f.File, f.Samples)
			}
			if _, err := os.Stat(filepath.Join(dir, f.File)); err != nil {
				return nil, nil, fmt.Errorf("%s lists %w", path, err)
			}
			set.Files = append(set.Files, f.File)
			set.first = append(set.first, set.first[len(set.first)-1]+f.Samples)
		}
		splits[i] = &Dataset{Name: imageFolderPrefix + filepath.Base(filepath.Clean(dir)), Shape: [3]int{3, crop, crop},
			Classes: slices.Clone(idx.Classes), Mean: slices.Clone(ImageNetMean), Std: slices.Clone(ImageNetStd), Shards: set,
			LeftOut: leftOutNote(idx.LeftOut[split])}
	}
	return splits[0], splits[1], nil
}

// sourceRecord is the PAX record in which a shard's image member names
// the file it was packed from (relative to the image folder), so that the
// loader's errors name it; tar readers that do not know it skip it.
const sourceRecord = "GORUN.source"

// shardSample is one sample read from a shard.
type shardSample struct {
	image []byte
	label int32
	where string // shard and key (and the file packed), for errors
}

// shardStream reads the samples a loader needs from their shards, each
// shard front to back, keeping those read before they are wanted.
type shardStream struct {
	set     *ShardSet
	classes int
	want    map[int]bool // samples still to be handed out
	held    map[int]shardSample
	open    map[int]*shardReader
}

func newShardStream(set *ShardSet, classes int, ids []int) *shardStream {
	want := make(map[int]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	return &shardStream{set: set, classes: classes, want: want, held: map[int]shardSample{}, open: map[int]*shardReader{}}
}

// get returns sample id, reading on in its shard as far as needed.
func (st *shardStream) get(id int) (shardSample, error) {
	if s, ok := st.held[id]; ok {
		delete(st.held, id)
		delete(st.want, id)
		return s, nil
	}
	k := st.set.shardOf(id)
	r := st.open[k]
	if r != nil && r.id > id { // wanted again, after it was read
		r.close()
		delete(st.open, k)
		r = nil
	}
	if r == nil {
		var err error
		if r, err = openShard(filepath.Join(st.set.Dir, st.set.Files[k]), st.set.first[k], st.set.first[k+1]); err != nil {
			return shardSample{}, err
		}
		st.open[k] = r
	}
	for {
		n, s, err := r.next(st.want[r.id], st.classes)
		if err != nil {
			return shardSample{}, err
		}
		if r.id >= st.set.first[k+1] {
			r.close()
			delete(st.open, k)
		}
		if n == id {
			delete(st.want, id)
			return s, nil
		}
		if st.want[n] {
			st.held[n] = s
		}
		if r.id >= st.set.first[k+1] {
			return shardSample{}, fmt.Errorf("%s: sample %d (key %d) not found", st.set.Files[k], id, id-st.set.first[k])
		}
	}
}

// close closes every open shard.
func (st *shardStream) close() {
	for k, r := range st.open {
		r.close()
		delete(st.open, k)
	}
}

// shardReader reads one shard's samples in order.
type shardReader struct {
	path    string
	f       *os.File
	tr      *tar.Reader
	first   int         // the shard's first sample's number
	id, end int         // the next sample's number; one past the shard's last
	pending *tar.Header // a member read ahead: the next sample's first
}

// shardReadSize is the size of a shard's sequential reads.
const shardReadSize = 4 << 20

func openShard(path string, first, end int) (*shardReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &shardReader{path: path, f: f, tr: tar.NewReader(bufio.NewReaderSize(f, shardReadSize)), first: first, id: first, end: end}, nil
}

// next reads the next sample: its number, and its image and label when
// keep is set (else they are skipped).
func (r *shardReader) next(keep bool, classes int) (int, shardSample, error) {
	if r.id >= r.end {
		return 0, shardSample{}, fmt.Errorf("%s: read past its %d samples", r.path, r.end)
	}
	var s shardSample
	key := ""
	haveImage, haveLabel := false, false
	for {
		h := r.pending
		r.pending = nil
		if h == nil {
			var err error
			if h, err = r.tr.Next(); err == io.EOF {
				break
			} else if err != nil {
				return 0, shardSample{}, fmt.Errorf("%s: sample %d: %w", r.path, r.id, err)
			}
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		base := filepath.Base(h.Name)
		k, ext, _ := strings.Cut(base, ".")
		if key != "" && k != key {
			r.pending = h
			break
		}
		if key == "" {
			s.where = r.path + ": " + k
		}
		key = k
		switch strings.ToLower(ext) {
		case "jpg", "jpeg", "png":
			haveImage = true
			if src := h.PAXRecords[sourceRecord]; src != "" {
				s.where = r.path + ": " + key + " (packed from " + src + ")"
			}
			if err := checkImageFileSize(h.Size); err != nil {
				return 0, shardSample{}, fmt.Errorf("%s: %s: %w", r.path, h.Name, err)
			}
			if keep {
				s.image = make([]byte, h.Size)
				if _, err := io.ReadFull(r.tr, s.image); err != nil {
					return 0, shardSample{}, fmt.Errorf("%s: %s: %w", r.path, h.Name, err)
				}
			}
		case "cls":
			b, err := io.ReadAll(io.LimitReader(r.tr, 32))
			if err != nil {
				return 0, shardSample{}, fmt.Errorf("%s: %s: %w", r.path, h.Name, err)
			}
			c, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || c < 0 || c >= classes {
				return 0, shardSample{}, fmt.Errorf("%s: %s: class %q, want 0 to %d", r.path, h.Name, b, classes-1)
			}
			s.label, haveLabel = int32(c), true
		}
	}
	if key == "" {
		return 0, shardSample{}, fmt.Errorf("%s: ends after %d samples; %s says %d", r.path, r.id-r.first, ShardsIndex, r.end-r.first)
	}
	if !haveImage || !haveLabel {
		return 0, shardSample{}, fmt.Errorf("%s: sample %s has no image (.jpg, .png) or no class (.cls)", r.path, key)
	}
	id := r.id
	r.id++
	return id, s, nil
}

func (r *shardReader) close() { r.f.Close() }

// ShardOptions sets how WriteShards packs an image folder.
type ShardOptions struct {
	// Samples is the number of samples per shard (the last may have
	// fewer).
	Samples int
	// Resize, when above 0, scales each image whose shorter side is
	// longer down to that size (Pillow's bilinear, aspect kept) and stores
	// it as a JPEG of quality 90; otherwise files are stored as they are.
	Resize int
	// Seed shuffles the training samples before packing (WebDataset's
	// advice: the loader only shuffles within its buffer).
	Seed uint64
}

// WriteShards packs the image folder at dir (train/ and val/) into shards
// in out: train-NNNNNN.tar and val-NNNNNN.tar of o.Samples samples each,
// and shards.json, the index, written last. Each file goes to a
// temporary name, is synced and renamed, so an interrupted run leaves no
// half-written shard or index. Packing again into the same directory
// removes the earlier index before the first shard is written (an
// interrupted run leaves none that would name shards of another packing;
// a folder refused before leaves it as it was) and, at the end, the
// earlier index's shards the new one does not list.
func WriteShards(dir, out string, o ShardOptions) error {
	if o.Samples < 1 {
		return fmt.Errorf("shards: %d samples per shard: want at least 1", o.Samples)
	}
	if o.Resize < 0 {
		return fmt.Errorf("shards: resize to %d: want 0 (keep the files) or more", o.Resize)
	}
	if !isImageFolder(dir) {
		return fmt.Errorf("%s is not an image folder: want %s/train/CLASS/IMAGE and %s/val/CLASS/IMAGE", dir, dir, dir)
	}
	// Both splits are read, and checked, before anything is written.
	idx := shardIndex{Format: shardsFormat, Splits: map[string][]shardFile{}}
	splits := []string{"train", "val"}
	samples := make(map[string][]FolderSample, len(splits))
	for _, split := range splits {
		scan, err := scanImageFolder(filepath.Join(dir, split))
		if err != nil {
			return err
		}
		if len(scan.LeftOut) > 0 {
			if idx.LeftOut == nil {
				idx.LeftOut = map[string]map[string]int{}
			}
			idx.LeftOut[split] = scan.LeftOut
		}
		if split == "train" {
			idx.Classes = scan.Classes
			r := rand.New(rand.NewPCG(o.Seed, 0x7061636b))
			r.Shuffle(len(scan.Samples), func(i, j int) { scan.Samples[i], scan.Samples[j] = scan.Samples[j], scan.Samples[i] })
		} else if !slices.Equal(scan.Classes, idx.Classes) {
			return fmt.Errorf("%s has classes %v, %s has %v: they must be the same", filepath.Join(dir, "val"), scan.Classes, filepath.Join(dir, "train"), idx.Classes)
		}
		samples[split] = scan.Samples
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	earlier, err := takeIndex(out)
	if err != nil {
		return err
	}
	reader := NewImageReader()
	defer reader.Close()
	for _, split := range splits {
		all := samples[split]
		for first := 0; first < len(all); first += o.Samples {
			name := fmt.Sprintf("%s-%06d.tar", split, first/o.Samples)
			part := all[first:min(first+o.Samples, len(all))]
			if err := writeShard(filepath.Join(out, name), dir, part, first, o.Resize, reader); err != nil {
				return err
			}
			idx.Splits[split] = append(idx.Splits[split], shardFile{File: name, Samples: len(part)})
		}
	}
	b, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(out, ShardsIndex), append(b, '\n')); err != nil {
		return err
	}
	return removeStale(out, earlier, idx)
}

// readIndex reads the shard index at path, refusing another format's.
func readIndex(path string) (shardIndex, error) {
	var idx shardIndex
	b, err := os.ReadFile(path)
	if err != nil {
		return idx, err
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("%s: %w", path, err)
	}
	if idx.Format != shardsFormat {
		return idx, fmt.Errorf("%s: format %q, want %q", path, idx.Format, shardsFormat)
	}
	return idx, nil
}

// takeIndex removes the shard index in out, if there is one, and returns
// the shard files it listed.
func takeIndex(out string) ([]string, error) {
	path := filepath.Join(out, ShardsIndex)
	idx, err := readIndex(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: not overwriting it; pack into another directory", err)
	}
	var files []string
	for _, split := range idx.Splits {
		for _, f := range split {
			if filepath.Base(f.File) == f.File && isShardName(f.File) {
				files = append(files, f.File)
			}
		}
	}
	return files, os.Remove(path)
}

// isShardName reports whether name is one WriteShards gives shards:
// train-NNNNNN.tar or val-NNNNNN.tar.
func isShardName(name string) bool {
	num, ok := strings.CutSuffix(name, ".tar")
	if !ok {
		return false
	}
	if n, ok := strings.CutPrefix(num, "train-"); ok {
		num = n
	} else if num, ok = strings.CutPrefix(num, "val-"); !ok {
		return false
	}
	return len(num) == 6 && strings.Trim(num, "0123456789") == ""
}

// removeStale removes from out the earlier packing's shard files that
// idx, the new index, does not list.
func removeStale(out string, earlier []string, idx shardIndex) error {
	kept := map[string]bool{}
	for _, split := range idx.Splits {
		for _, f := range split {
			kept[f.File] = true
		}
	}
	for _, f := range earlier {
		if !kept[f] {
			if err := os.Remove(filepath.Join(out, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// writeShard writes one shard of samples, keys numbered from first, each
// image member naming its file relative to root (sourceRecord).
func writeShard(path, root string, samples []FolderSample, first, resize int, reader *ImageReader) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for i, s := range samples {
			key := fmt.Sprintf("%06d", first+i)
			img, ext, err := shardImage(s.Path, resize, reader)
			if err != nil {
				return err
			}
			// The image's file in the folder, for the loader's errors.
			src := s.Path
			if rel, err := filepath.Rel(root, s.Path); err == nil {
				src = filepath.ToSlash(rel)
			}
			cls := []byte(strconv.Itoa(s.Class))
			for _, m := range []struct {
				name string
				b    []byte
				pax  map[string]string
			}{{key + ext, img, map[string]string{sourceRecord: src}}, {key + ".cls", cls, nil}} {
				if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.b)), Typeflag: tar.TypeReg, PAXRecords: m.pax}); err != nil {
					return err
				}
				if _, err := tw.Write(m.b); err != nil {
					return err
				}
			}
		}
		return tw.Close()
	})
}

// shardImage returns the bytes a shard stores for the image file at path,
// and their extension: the file as it is (its header checked), or with
// resize above 0 the image decoded and, if larger, scaled down. The file
// is read once, within the loaders' bound on an image file's size, into
// reader's buffer: the bytes returned are valid until reader's next read.
func shardImage(path string, resize int, reader *ImageReader) ([]byte, string, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".jpeg" {
		ext = ".jpg"
	}
	b, err := reader.readFile(path)
	if err != nil {
		return nil, "", err
	}
	if resize == 0 {
		// Stored as it is, undecoded: its header at least is checked
		// here, so that a file that is no image is named now, by its
		// path, not hours into training by a shard member's key.
		if err := checkImageHeader(b, path); err != nil {
			return nil, "", err
		}
		return b, ext, nil
	}
	m, err := reader.decode(b, path, nil)
	if err != nil {
		return nil, "", err
	}
	if min(m.W, m.H) <= resize {
		return b, ext, nil
	}
	var enc bytes.Buffer
	if err := jpeg.Encode(&enc, m.ResizeShort(resize).nrgba(), &jpeg.Options{Quality: 90}); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return enc.Bytes(), ".jpg", nil
}
