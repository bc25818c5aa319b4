package data

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// packed writes a small image folder (PNG: decoded alike everywhere) and
// packs it into shards of perShard samples.
func packed(t *testing.T, perShard int) (folder, shards string) {
	t.Helper()
	folder, _, _ = imageFolderSet(t, 32)
	shards = filepath.Join(t.TempDir(), "shards")
	if err := WriteShards(folder, shards, ShardOptions{Samples: perShard, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return folder, shards
}

// TestShardsRoundTrip: an image folder packed into shards reads back as
// the same samples: the validation split (packed in order) gives the
// folder's batches value for value, labels included; the training split
// holds every training image once, shuffled. Detect and LoadSized know
// the shard directory.
func TestShardsRoundTrip(t *testing.T) {
	folder, dir := packed(t, 7)
	if f, err := Detect(dir); err != nil || f != FormatShards {
		t.Fatalf("Detect: %v, %v", f, err)
	}
	trainF, testF, err := LoadSized(folder, 32)
	if err != nil {
		t.Fatal(err)
	}
	train, test, err := LoadSized(dir, 32)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60 || test.Len() != 40 || len(train.Shards.Files) != 9 || len(test.Shards.Files) != 6 || !slices.Equal(train.Classes, trainF.Classes) {
		t.Fatalf("train %d samples in %d shards, val %d in %d; classes %v", train.Len(), len(train.Shards.Files), test.Len(), len(test.Shards.Files), train.Classes)
	}
	all := Sampler{N: test.Len(), World: 1}.Indices(0)
	want, wantLabels := loadAll(t, testF, Plain(testF), all)
	got, gotLabels := loadAll(t, test, Plain(test), all)
	if !slices.Equal(got, want) || !slices.Equal(gotLabels, wantLabels) {
		t.Fatal("the val shards' batches differ from the folder's")
	}
	// Training: every image once (compared by its evaluation pixels).
	seen := map[string]int32{}
	x, labels := loadAll(t, trainF, Plain(trainF), Sampler{N: 60, World: 1}.Indices(0))
	per := trainF.ImageSize()
	for i := range 60 {
		seen[string(f32bytes(x[i*per:(i+1)*per]))] = labels[i]
	}
	x, labels = loadAll(t, train, Plain(train), Sampler{N: 60, World: 1}.Indices(0))
	inOrder := 0
	for i := range 60 {
		l, ok := seen[string(f32bytes(x[i*per:(i+1)*per]))]
		if !ok || l != labels[i] {
			t.Fatalf("shard sample %d (label %d) is none of the folder's images", i, labels[i])
		}
		delete(seen, string(f32bytes(x[i*per:(i+1)*per])))
		if labels[i] == trainF.Labels[i] {
			inOrder++
		}
	}
	if len(seen) != 0 || inOrder == 60 {
		t.Fatalf("%d folder images missing; %d of 60 labels in the folder's order (want shuffled)", len(seen), inOrder)
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// loadAll returns all the images and labels of one epoch over idx.
func loadAll(t *testing.T, ds *Dataset, tf Transform, idx []int) ([]float32, []int32) {
	t.Helper()
	l, err := NewLoader(ds, 8, tf, LoaderConfig{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	x, labels := epochOf(t, l, 0, idx)
	return slices.Concat(x...), slices.Concat(labels...)
}

// TestShardEpochOrder: each rank takes whole shards of its own, the same
// number of samples as every other rank, a different shard order each
// epoch; the shuffle buffer moves a sample at most its size earlier; the
// same seed gives the same order. Fewer shards than ranks are refused.
func TestShardEpochOrder(t *testing.T) {
	set := &ShardSet{Dir: "d", Files: make([]string, 10), first: []int{0}, Buffer: 16}
	for range 9 {
		set.first = append(set.first, set.first[len(set.first)-1]+20)
	}
	set.first = append(set.first, set.first[len(set.first)-1]+13) // a short last shard: 193 samples
	for epoch := range 2 {
		owner := map[int]int{} // shard → rank
		counts := map[int]bool{}
		for rank := range 3 {
			ids, err := set.EpochOrder(7, epoch, rank, 3)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := set.EpochOrder(7, epoch, rank, 3)
			if !slices.Equal(ids, again) {
				t.Fatal("the same seed gave another order")
			}
			counts[len(ids)] = true
			for _, id := range ids {
				k := set.shardOf(id)
				if o, ok := owner[k]; ok && o != rank {
					t.Fatalf("shard %d read by ranks %d and %d", k, o, rank)
				}
				owner[k] = rank
			}
			// Without the buffer (size 1) the samples come in the shards'
			// own order, shard after shard; with it, the same samples, none
			// earlier than Buffer places before that.
			plain := *set
			plain.Buffer = 1
			stream, _ := plain.EpochOrder(7, epoch, rank, 3)
			for i := 1; i < len(stream); i++ {
				if stream[i] != stream[i-1]+1 && set.shardOf(stream[i]) == set.shardOf(stream[i-1]) {
					t.Fatalf("without a buffer, %d follows %d", stream[i], stream[i-1])
				}
			}
			at := map[int]int{}
			for i, id := range stream {
				at[id] = i
			}
			for i, id := range ids {
				p, ok := at[id]
				if !ok || p > i+set.Buffer {
					t.Fatalf("sample %d comes out at %d, read at %d (%v) with a buffer of %d", id, i, p, ok, set.Buffer)
				}
			}
			if slices.Equal(ids, stream) {
				t.Fatal("the buffer shuffled nothing")
			}
		}
		if len(counts) != 1 {
			t.Fatalf("epoch %d: ranks take different numbers of samples: %v", epoch, counts)
		}
	}
	orders := [][]int{}
	for epoch := range 2 {
		ids, _ := set.EpochOrder(7, epoch, 0, 1)
		if len(ids) != 193 {
			t.Fatalf("one rank takes %d samples, want all 193", len(ids))
		}
		orders = append(orders, ids)
	}
	if slices.Equal(orders[0], orders[1]) {
		t.Fatal("epochs 0 and 1 in the same order")
	}
	if _, err := set.EpochOrder(7, 0, 0, 11); err == nil || !strings.Contains(err.Error(), "10 shards for 11 ranks") {
		t.Fatalf("11 ranks, 10 shards: %v", err)
	}
}

// TestShardResume: an epoch started part way through its order (a run
// resumed from a mid-epoch checkpoint) gives exactly the batches the
// whole epoch gives from there, augmentation included.
func TestShardResume(t *testing.T) {
	_, dir := packed(t, 7)
	train, _, err := LoadShards(dir, 32)
	if err != nil {
		t.Fatal(err)
	}
	train.Shards.Buffer = 10
	ids, err := train.Shards.EpochOrder(1, 2, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	tf := ImageNetAugmentation(train, 4)
	whole, wholeLabels := loadAll(t, train, tf, ids)
	per := train.ImageSize()
	tail, tailLabels := loadAll(t, train, tf, ids[16:])
	if !slices.Equal(tail, whole[16*per:]) || !slices.Equal(tailLabels, wholeLabels[16:]) {
		t.Fatal("resumed at sample 16: the batches differ from the whole epoch's")
	}
}

// TestShardErrors: a shard cut short, an index promising more samples
// than a shard has, a class out of range, a sample without its class, a
// missing shard and a foreign index are errors naming the file.
func TestShardErrors(t *testing.T) {
	epoch := func(dir string) error {
		train, _, err := LoadShards(dir, 32)
		if err != nil {
			return err
		}
		l, err := NewLoader(train, 8, Plain(train), LoaderConfig{Workers: 2, SkipBad: true})
		if err != nil {
			return err
		}
		defer l.Stop()
		if err := l.Start(0, Sampler{N: train.Len(), World: 1}.Indices(0)); err != nil {
			return err
		}
		for _, ok := l.Next(); ok; _, ok = l.Next() {
		}
		return l.Err()
	}
	edit := func(t *testing.T, change func(dir string)) string {
		_, dir := packed(t, 7)
		change(dir)
		return dir
	}
	shard := func(dir string) string { return filepath.Join(dir, "train-000001.tar") }
	writeTar := func(path string, members ...string) { os.WriteFile(path, tarOf(members...), 0o644) }
	png, _ := os.ReadFile("testdata/images/rgb-up.png")
	for _, c := range []struct {
		name   string
		change func(dir string)
		want   func(dir string) string
	}{
		{"cut short", func(dir string) {
			b, _ := os.ReadFile(shard(dir))
			os.WriteFile(shard(dir), b[:len(b)/2], 0o644)
		}, shard},
		{"fewer samples than the index says", func(dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, ShardsIndex))
			os.WriteFile(filepath.Join(dir, ShardsIndex), bytes.Replace(b, []byte(`"samples": 7`), []byte(`"samples": 8`), 1), 0o644)
		}, func(dir string) string { return "train-000000.tar: ends after 7 samples; shards.json says 8" }},
		{"class out of range", func(dir string) {
			writeTar(shard(dir), "000007.png", string(png), "000007.cls", "99")
		}, func(dir string) string { return shard(dir) + ": 000007.cls: class \"99\", want 0 to 9" }},
		{"an image member larger than an image file may be", func(dir string) {
			var b bytes.Buffer // the header alone: the data is never read
			tar.NewWriter(&b).WriteHeader(&tar.Header{Name: "000007.png", Mode: 0o644, Size: 3 << 30, Typeflag: tar.TypeReg})
			os.WriteFile(shard(dir), b.Bytes(), 0o644)
		}, func(dir string) string {
			return shard(dir) + ": 000007.png: 3221225472 bytes: more than the 2147483648 an image file may have"
		}},
		{"no class", func(dir string) {
			writeTar(shard(dir), "000007.png", string(png), "000008.png", string(png), "000008.cls", "1")
		}, func(dir string) string {
			return shard(dir) + ": sample 000007 has no image (.jpg, .png) or no class (.cls)"
		}},
		{"missing shard", func(dir string) { os.Remove(shard(dir)) }, shard},
		{"foreign index", func(dir string) {
			os.WriteFile(filepath.Join(dir, ShardsIndex), []byte(`{"format": "webdataset"}`), 0o644)
		}, func(dir string) string { return `format "webdataset", want "gorun-shards/1"` }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := edit(t, c.change)
			if err := epoch(dir); err == nil || !strings.Contains(err.Error(), c.want(dir)) {
				t.Fatalf("%v; want an error saying %q", err, c.want(dir))
			}
		})
	}
	folder, _, _ := imageFolderSet(t, 32)
	for _, o := range []ShardOptions{{Samples: 0}, {Samples: 5, Resize: -1}} {
		if err := WriteShards(folder, t.TempDir(), o); err == nil {
			t.Errorf("WriteShards %+v succeeded", o)
		}
	}
	if err := WriteShards(t.TempDir(), t.TempDir(), ShardOptions{Samples: 5}); err == nil || !strings.Contains(err.Error(), "is not an image folder") {
		t.Errorf("packing an empty directory: %v", err)
	}
	// Files that are no image (an HTML page a download saved as .jpg, an
	// empty file, a PNG header declaring more pixels than the loaders
	// take) are refused when packed, named by their path, not stored
	// for training to find: with and without resizing.
	huge := append([]byte(nil), png[:33]...) // the signature and IHDR, whose size and CRC are changed
	binary.BigEndian.PutUint32(huge[16:], 100000)
	binary.BigEndian.PutUint32(huge[20:], 100000)
	binary.BigEndian.PutUint32(huge[29:], crc32.ChecksumIEEE(huge[12:29]))
	for _, bad := range []struct{ name, body, want string }{
		{"page.jpg", "<html>404 Not Found</html>", "not an image the loaders decode (JPEG or PNG): image: unknown format"},
		{"empty.jpg", "", "an empty file (0 bytes), not an image"},
		{"huge.png", string(huge), "100000×100000 pixels"},
	} {
		for _, resize := range []int{0, 16} {
			folder, _, _ := imageFolderSet(t, 32)
			path := filepath.Join(folder, "val", "cat", bad.name)
			if err := os.WriteFile(path, []byte(bad.body), 0o644); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			err := WriteShards(folder, out, ShardOptions{Samples: 5, Resize: resize})
			if err == nil || !strings.Contains(err.Error(), path) || (resize == 0 && !strings.Contains(err.Error(), bad.want)) {
				t.Errorf("packing %s (resize %d): %v; want an error naming it (%q)", bad.name, resize, err, bad.want)
			}
			if _, err := os.Stat(filepath.Join(out, ShardsIndex)); err == nil {
				t.Errorf("packing %s (resize %d) left an index", bad.name, resize)
			}
		}
	}
	// A file larger than an image file may be is refused unread (sparse:
	// no disk taken).
	folder, _, _ = imageFolderSet(t, 32)
	huge3 := filepath.Join(folder, "train", "cat", "huge.png")
	if err := os.WriteFile(huge3, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge3, 3<<30); err != nil {
		t.Fatal(err)
	}
	if err := WriteShards(folder, t.TempDir(), ShardOptions{Samples: 5}); err == nil || !strings.Contains(err.Error(), huge3+": 3221225472 bytes: more than the 2147483648 an image file may have") {
		t.Errorf("packing a 3 GiB file: %v", err)
	}
}

// TestShardNamesPackedFile: an image cut short after its header passes
// the packing's check and fails when the loader decodes it; the error
// names the shard, the key and the file it was packed from (a PAX record
// on the image member), so that the file can be found in the folder; with
// SkipBad the epoch goes on and the skipped image is named the same way.
func TestShardNamesPackedFile(t *testing.T) {
	folder, _, _ := imageFolderSet(t, 32)
	pngs, _ := filepath.Glob(filepath.Join(folder, "train", "*", "*.png"))
	if len(pngs) == 0 {
		t.Fatal("no PNG files in the folder")
	}
	cut := pngs[len(pngs)/2]
	raw, err := os.ReadFile(cut)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, raw[:len(raw)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(folder, cut)
	dir := filepath.Join(t.TempDir(), "shards")
	if err := WriteShards(folder, dir, ShardOptions{Samples: 7}); err != nil {
		t.Fatalf("packing an image cut after its header: %v", err)
	}
	train, _, err := LoadShards(dir, 32)
	if err != nil {
		t.Fatal(err)
	}
	for _, skip := range []bool{false, true} {
		l, err := NewLoader(train, 8, Plain(train), LoaderConfig{Workers: 2, SkipBad: skip})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(0, Sampler{N: train.Len(), World: 1}.Indices(0)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for b, ok := l.Next(); ok; b, ok = l.Next() {
			n += b.Len()
		}
		want := "(packed from " + filepath.ToSlash(rel) + ")"
		if !skip {
			if err := l.Err(); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "train-0000") {
				t.Errorf("the epoch's error %v; want one naming the shard and %q", err, want)
			}
		} else if err := l.Err(); err != nil || n != train.Len()-1 || len(l.Skipped()) != 1 || !strings.Contains(l.Skipped()[0], want) {
			t.Errorf("with SkipBad: %v, %d of %d images, skipped %q; want all but one, named %q", err, n, train.Len(), l.Skipped(), want)
		}
		l.Stop()
	}
}

// TestShardRepack: packing again into a directory replaces the earlier
// packing: its shards the new index does not list are removed, other
// files left (also one a hand-edited index names); a packing that fails part-way leaves no index naming
// shards of either; an index of another format is not overwritten.
func TestShardRepack(t *testing.T) {
	folder, dir := packed(t, 7) // 9 train and 6 val shards
	for _, other := range []string{"notes.txt", "train-1.tar"} {
		if err := os.WriteFile(filepath.Join(dir, other), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An index edited by hand to name a file of the user's: not removed.
	index := filepath.Join(dir, ShardsIndex)
	b, _ := os.ReadFile(index)
	os.WriteFile(index, bytes.Replace(b, []byte(`"val": [`), []byte(`"val": [{"file": "notes.txt", "samples": 1},`), 1), 0o644)
	if err := WriteShards(folder, dir, ShardOptions{Samples: 20}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"notes.txt", "shards.json", "train-000000.tar", "train-000001.tar", "train-000002.tar", "train-1.tar", "val-000000.tar", "val-000001.tar"}
	if !slices.Equal(names, want) {
		t.Fatalf("after packing again: %v, want %v", names, want)
	}
	if train, test, err := LoadShards(dir, 32); err != nil || train.Len() != 60 || test.Len() != 40 {
		t.Fatalf("LoadShards: %v", err)
	}

	// A folder refused before any shard is written (val's classes are
	// not train's): the earlier packing stays as it was.
	extra := filepath.Join(folder, "val", "zebra")
	os.MkdirAll(extra, 0o755)
	png, _ := os.ReadFile("testdata/images/rgb-up.png")
	os.WriteFile(filepath.Join(extra, "z.png"), png, 0o644)
	if err := WriteShards(folder, dir, ShardOptions{Samples: 5}); err == nil || !strings.Contains(err.Error(), "they must be the same") {
		t.Fatalf("packing a folder whose val classes are not train's: %v", err)
	}
	if train, _, err := LoadShards(dir, 32); err != nil || train.Len() != 60 || len(train.Shards.Files) != 3 {
		t.Fatalf("the earlier packing after a refused one: %v", err)
	}
	os.RemoveAll(extra)

	// A packing that fails at its validation images (resized, so decoded).
	bad := filepath.Join(folder, "val", "bird", "broken.jpg")
	if err := os.WriteFile(bad, []byte("not a JPEG"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteShards(folder, dir, ShardOptions{Samples: 20, Resize: 36}); err == nil || !strings.Contains(err.Error(), "broken.jpg") {
		t.Fatalf("packing a folder with a broken image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ShardsIndex)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed packing left an index (%v): it would name shards of two packings", err)
	}

	foreign := t.TempDir()
	index = filepath.Join(foreign, ShardsIndex)
	os.WriteFile(index, []byte(`{"format": "webdataset"}`), 0o644)
	if err := WriteShards(folder, foreign, ShardOptions{Samples: 20}); err == nil || !strings.Contains(err.Error(), index+`: format "webdataset", want "gorun-shards/1": not overwriting it`) {
		t.Fatalf("packing over another format's index: %v", err)
	}
	if b, _ := os.ReadFile(index); string(b) != `{"format": "webdataset"}` {
		t.Fatalf("the other format's index was changed: %q", b)
	}
}

// TestShardResize: with Resize, images whose shorter side is longer are
// stored scaled down to it as JPEG; smaller ones as they are.
func TestShardResize(t *testing.T) {
	folder, _, _ := imageFolderSet(t, 32) // 48×40 images
	for _, c := range []struct {
		resize int
		ext    string
		w, h   int
	}{{36, ".jpg", 43, 36}, {40, ".png", 48, 40}} {
		dir := t.TempDir()
		if err := WriteShards(folder, dir, ShardOptions{Samples: 100, Resize: c.resize}); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(filepath.Join(dir, "val-000000.tar"))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(f)
		h, err := tr.Next()
		if err != nil || filepath.Ext(h.Name) != c.ext {
			t.Fatalf("resize %d: first member %v, %v; want a %s", c.resize, h, err, c.ext)
		}
		b, _ := io.ReadAll(tr)
		r := NewImageReader()
		m, err := r.decode(b, h.Name, nil)
		r.Close()
		f.Close()
		if err != nil || m.W != c.w || m.H != c.h {
			t.Fatalf("resize %d: %v, %d×%d; want %d×%d", c.resize, err, m.W, m.H, c.w, c.h)
		}
	}
}

// tarOf returns a tar stream of the members, given as name, contents
// pairs, in that order.
func tarOf(members ...string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i < len(members); i += 2 {
		tw.WriteHeader(&tar.Header{Name: members[i], Mode: 0o644, Size: int64(len(members[i+1])), Typeflag: tar.TypeReg})
		tw.Write([]byte(members[i+1]))
	}
	tw.Close()
	return b.Bytes()
}
