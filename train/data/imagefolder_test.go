package data

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gorun/gorun/model/safetensors"
)

// TestEvalTransformMatchesTorchvision decodes the fixture images (made by
// testdata/gen_imagefolder.py) and applies Resize(40), CenterCrop(32), as
// torchvision 0.14 with PIL did. With libjpeg-turbo (the library Pillow
// decodes JPEG with) every result is PIL's to the byte. With Go's
// image/jpeg, the PNG files give PIL's bytes (the resampling is Pillow's,
// fixed point and rounding included) and the JPEG files (4:2:0 colour,
// progressive, grayscale, CMYK) come within 2 levels, 0.1 on average:
// libjpeg's chroma upsampling and colour tables are reproduced, the IDCTs
// differ by a level at most.
func TestEvalTransformMatchesTorchvision(t *testing.T) {
	f, err := safetensors.ReadFile("testdata/eval.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	turbo := NewImageReader()
	defer turbo.Close()
	for _, dec := range []struct {
		name   string
		reader *ImageReader
	}{{"libjpeg-turbo", turbo}, {"go", &ImageReader{why: "the test asks"}}} {
		t.Run(dec.name, func(t *testing.T) {
			if dec.name == "libjpeg-turbo" && turbo.tj == nil {
				t.Skipf("no TurboJPEG library here (%s): Go's decoder is tested alone", turbo.Decoder())
			}
			for _, c := range []struct {
				name        string
				decodedMean float64 // mean |Go − PIL| over the decoded image, at most
				maxDiff     float64 // the largest |Go − PIL| after the transform, at most
			}{
				{"rgb-down.png", 0, 0}, {"rgb-up.png", 0, 0}, {"gray.png", 0, 0}, {"alpha.png", 0, 0}, {"palette.png", 0, 0},
				{"rgb.jpg", 0.1, 2}, {"progressive.jpg", 0.1, 2}, {"gray.jpg", 0.1, 2}, {"cmyk.jpg", 0.1, 2},
			} {
				if dec.reader.tj != nil && c.name != "cmyk.jpg" { // (CMYK: Go's conversion)
					c.decodedMean, c.maxDiff = 0, 0
				}
				m, err := dec.reader.Read(filepath.Join("testdata/images", c.name))
				if err != nil {
					t.Fatal(err)
				}
				dec, _ := f.Get("decoded/" + c.name)
				if dec.Shape[0] != m.H || dec.Shape[1] != m.W {
					t.Fatalf("%s: decoded %d×%d, PIL %d×%d", c.name, m.W, m.H, dec.Shape[1], dec.Shape[0])
				}
				mean := 0.0
				for i, v := range dec.F32 {
					mean += math.Abs(float64(m.Pix[i]) - float64(v))
				}
				mean /= float64(len(dec.F32))
				out, err := EvalTransform(m, 40, 32)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := f.Get(c.name)
				worst := 0.0
				for i, v := range want.F32 {
					worst = max(worst, math.Abs(float64(out.Pix[i])-float64(v)))
				}
				t.Logf("%s: decoding: mean |ours − PIL| %.3f; after Resize+CenterCrop: largest %v", c.name, mean, worst)
				if mean > c.decodedMean || worst > c.maxDiff {
					t.Errorf("%s: mean decoding difference %.3f (at most %v), largest after the transform %v (at most %v)", c.name, mean, c.decodedMean, worst, c.maxDiff)
				}
			}
		})
	}
}

// TestImageReaderErrors: files that are not images, empty or truncated
// JPEGs, and missing files are errors naming the file, with either
// decoder; so are files whose header declares more pixels than Pillow
// opens (decompression bombs), before anything of that size is
// allocated — the same for DecodeImageFile (infer's single images).
// After each, the same reader still decodes a good JPEG.
func TestImageReaderErrors(t *testing.T) {
	dir := t.TempDir()
	good := "testdata/images/rgb.jpg"
	jpg, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"text.jpg": []byte("not an image"), "empty.jpg": nil, "truncated.jpg": jpg[:len(jpg)/2],
		"header-only.jpg": jpg[:2], "cut-in-header.jpg": jpg[:200], "zero-size.jpg": jpegDeclaring(0, 0, 3),
		"too-wide.jpg": jpegDeclaring(65_535, 1, 3)} // over libjpeg-turbo's 65,500 pixels a side
	bombs := map[string][]byte{
		"bomb.png":      pngDeclaring(100_000, 100_000),
		"bomb.jpg":      jpegDeclaring(60_000, 60_000, 3),
		"bomb-cmyk.jpg": jpegDeclaring(40_000, 40_000, 4), // Go decodes CMYK either way
		"wide.png":      pngDeclaring(1<<31-1, 1),
	}
	for name, b := range files {
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	for name, b := range bombs {
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	huge := filepath.Join(dir, "huge.png") // sparse: no disk taken
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 3<<30); err != nil {
		t.Fatal(err)
	}
	turbo := NewImageReader()
	defer turbo.Close()
	for _, r := range []*ImageReader{turbo, {why: "the test asks"}} {
		want, err := r.Read(good)
		if err != nil {
			t.Fatal(err)
		}
		stillReads := func(after string) {
			t.Helper()
			if m, err := r.Read(good); err != nil || !slices.Equal(m.Pix, want.Pix) {
				t.Errorf("%s: a good JPEG after %s: %v", r.Decoder(), after, err)
			}
		}
		for name := range files {
			p := filepath.Join(dir, name)
			if _, err := r.Read(p); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("%s, %s: %v; want an error naming the file", r.Decoder(), name, err)
			}
			stillReads(name)
		}
		for name := range bombs {
			p := filepath.Join(dir, name)
			if _, err := r.Read(p); err == nil || !strings.Contains(err.Error(), p+": ") || !strings.Contains(err.Error(), "decompression-bomb limit") {
				t.Errorf("%s, %s: %v; want an error naming the file and the limit", r.Decoder(), name, err)
			}
			stillReads(name)
		}
		if _, err := r.Read(huge); err == nil || !strings.Contains(err.Error(), huge+": 3221225472 bytes: more than the 2147483648 an image file may have") {
			t.Errorf("%s: a file of 3 GiB: %v", r.Decoder(), err)
		}
		empty := filepath.Join(dir, "empty.jpg")
		if _, err := r.Read(empty); err == nil || err.Error() != empty+": an empty file (0 bytes), not an image" {
			t.Errorf("%s: an empty file: %v", r.Decoder(), err)
		}
		if _, err := r.Read(filepath.Join(dir, "missing.jpg")); err == nil || !strings.Contains(err.Error(), "missing.jpg") {
			t.Errorf("%s: a missing file: %v", r.Decoder(), err)
		}
	}
	for name := range bombs {
		p := filepath.Join(dir, name)
		if _, err := DecodeImageFile(p); err == nil || !strings.Contains(err.Error(), p+": ") || !strings.Contains(err.Error(), "decompression-bomb limit") {
			t.Errorf("DecodeImageFile %s: %v; want an error naming the file and the limit", name, err)
		}
	}
	empty := filepath.Join(dir, "empty.jpg")
	if _, err := DecodeImageFile(empty); err == nil || err.Error() != empty+": an empty file (0 bytes), not an image" {
		t.Errorf("DecodeImageFile of an empty file: %v", err)
	}
}

// TestScanImageFolderIsTorchvisions: the classes and the order of the
// samples are torchvision's ImageFolder's on the same tree — class
// directories that are symbolic links, links to directories and files
// inside a class, files beside subdirectories, names differing in case
// (the list below is what Debian's torchvision 0.14 gave for this tree,
// its paths relative to the root). A link to a directory above it is
// an error naming the link.
func TestScanImageFolderIsTorchvisions(t *testing.T) {
	tmp := t.TempDir()
	root, elsewhere := filepath.Join(tmp, "root"), filepath.Join(tmp, "elsewhere")
	for _, f := range []string{"root/a/2.jpg", "root/a/10.jpg", "root/a/x.txt", "root/b/z.PNG", "root/b/sub/a.jpeg",
		"root/c/b.jpg", "root/c/a/x.jpg", "root/c/a-x/y.jpg", "root/c/B/q.jpg",
		"elsewhere/extra/e.jpg", "elsewhere/extra/d.png", "elsewhere2/k.jpg"} {
		p := filepath.Join(tmp, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"root/linked":       elsewhere,
		"root/c/m-link":     filepath.Join(elsewhere, "extra"),
		"root/a/k-link.jpg": filepath.Join(tmp, "elsewhere2", "k.jpg"),
	} {
		if err := os.Symlink(target, filepath.Join(tmp, link)); err != nil {
			t.Fatal(err)
		}
	}
	classes, samples, err := ScanImageFolder(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range samples {
		rel, _ := filepath.Rel(root, s.Path)
		got = append(got, fmt.Sprintf("%d %s", s.Class, rel))
	}
	want := []string{"0 a/10.jpg", "0 a/2.jpg", "0 a/k-link.jpg", "1 b/z.PNG", "1 b/sub/a.jpeg",
		"2 c/b.jpg", "2 c/B/q.jpg", "2 c/a/x.jpg", "2 c/a-x/y.jpg", "2 c/m-link/d.png", "2 c/m-link/e.jpg",
		"3 linked/extra/d.png", "3 linked/extra/e.jpg"}
	if !slices.Equal(classes, []string{"a", "b", "c", "linked"}) || !slices.Equal(got, want) {
		t.Fatalf("classes %q, samples\n%s\nwant classes [a b c linked], samples\n%s", classes, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	loop := filepath.Join(root, "c", "a", "back")
	if err := os.Symlink(filepath.Join(root, "c"), loop); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ScanImageFolder(root); err == nil || !strings.Contains(err.Error(), loop+": a symbolic link loop") {
		t.Fatalf("a link to a directory above it: %v", err)
	}
}

// pngDeclaring returns a PNG file whose header declares w×h 8-bit RGBA
// pixels, followed by a few rows' worth of data.
func pngDeclaring(w, h uint32) []byte {
	chunk := func(b *bytes.Buffer, kind string, data []byte) {
		binary.Write(b, binary.BigEndian, uint32(len(data)))
		crc := crc32.NewIEEE()
		crc.Write([]byte(kind))
		crc.Write(data)
		b.WriteString(kind)
		b.Write(data)
		binary.Write(b, binary.BigEndian, crc.Sum32())
	}
	var b, z bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, w), h)
	chunk(&b, "IHDR", append(ihdr, 8, 6, 0, 0, 0))
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 100))
	zw.Close()
	chunk(&b, "IDAT", z.Bytes())
	chunk(&b, "IEND", nil)
	return b.Bytes()
}

// jpegDeclaring returns the start of a baseline JPEG whose frame header
// declares w×h pixels of comps components (4: Adobe CMYK), up to its
// scan header.
func jpegDeclaring(w, h uint16, comps byte) []byte {
	b := []byte{0xff, 0xd8}
	if comps == 4 { // APP14 "Adobe", transform 0: CMYK as stored
		b = append(b, 0xff, 0xee, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0)
	}
	b = append(b, 0xff, 0xc0, 0, 8+3*comps, 8, byte(h>>8), byte(h), byte(w>>8), byte(w), comps)
	for c := range comps {
		b = append(b, c+1, 0x11, 0)
	}
	b = append(b, 0xff, 0xda, 0, 6+2*comps, comps)
	for c := range comps {
		b = append(b, c+1, 0)
	}
	return append(b, 0, 63, 0, 0xff, 0xd9)
}

// TestResizeIsPillows: Pillow's bilinear resize keeps a constant image
// constant and sizes come out as asked, down and up.
func TestResizeIsPillows(t *testing.T) {
	m := NewRGB(17, 9)
	for i := range m.Pix {
		m.Pix[i] = 200
	}
	for _, s := range [][2]int{{5, 3}, {17, 9}, {40, 31}, {1, 1}} {
		r := m.Resize(s[0], s[1])
		if r.W != s[0] || r.H != s[1] || len(r.Pix) != 3*s[0]*s[1] {
			t.Fatalf("resize to %v: %d×%d, %d bytes", s, r.W, r.H, len(r.Pix))
		}
		for _, v := range r.Pix {
			if v != 200 {
				t.Fatalf("resize to %v: a constant 200 became %d", s, v)
			}
		}
	}
	if r := m.ResizeShort(6); r.W != 11 || r.H != 6 {
		t.Errorf("ResizeShort(6) of 17×9: %d×%d, want 11×6 (the long side truncated)", r.W, r.H)
	}
}

// TestImageFolderWrittenAgain: writing a generated folder again with the
// same images succeeds; with other counts, where the earlier run's files
// would mix in, it is refused before anything is written, naming them.
func TestImageFolderWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	train, _ := Synthetic(FormatCIFAR10, 60, 1)
	test, _ := Synthetic(FormatCIFAR10, 40, 2)
	for range 2 {
		if err := WriteImageFolder(dir, train, test, 24, 20, ".png"); err != nil {
			t.Fatal(err)
		}
	}
	fewer, _ := Synthetic(FormatCIFAR10, 50, 1)
	err := WriteImageFolder(dir, fewer, test, 24, 20, ".png")
	want := "image folder: " + filepath.Join(dir, "train") + " already holds "
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "remove "+dir+" or write to another directory") {
		t.Fatalf("writing 50 images over 60: %v; want %q...", err, want)
	}
	tr, te, err := Load(dir)
	if err != nil || tr.Len() != 60 || te.Len() != 40 {
		t.Fatalf("after the refusal: %v; %d and %d images, want the 60 and 40 written first", err, tr.Len(), te.Len())
	}
	os.WriteFile(filepath.Join(dir, "val", "README"), []byte("mine"), 0o644)
	if err := WriteImageFolder(dir, train, test, 24, 20, ".png"); err == nil || !strings.Contains(err.Error(), "already holds a file or directory this run would not write ("+filepath.Join(dir, "val", "README")+")") {
		t.Fatalf("writing over a file of the user's: %v", err)
	}
}

// TestImageFolder writes a generated image folder and reads it back:
// classes sorted as torchvision sorts them, every image of every class
// (in subdirectories too, any letter case of the extension), other files
// ignored; a file that is not an image is named; a class without images,
// and val classes that are not train's, are refused.
func TestImageFolder(t *testing.T) {
	dir := t.TempDir()
	train, _ := Synthetic(FormatCIFAR10, 60, 1)
	test, _ := Synthetic(FormatCIFAR10, 40, 2)
	few, _ := Synthetic(FormatCIFAR10, 5, 2)
	refused := t.TempDir()
	if err := WriteImageFolder(refused, train, few, 48, 40, ".png"); err == nil || !strings.Contains(err.Error(), "would have none of the 5 val images") {
		t.Errorf("5 images in 10 classes: %v", err)
	}
	if left, _ := os.ReadDir(refused); len(left) > 0 {
		t.Errorf("a refused image folder left %d entries behind (the train split, written before val was checked)", len(left))
	}
	if err := WriteImageFolder(dir, train, test, 48, 40, ".png"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "train", "bird", "notes.txt"), []byte("not an image"), 0o644)
	sub := filepath.Join(dir, "train", "cat", "more")
	os.MkdirAll(sub, 0o755)
	b, _ := os.ReadFile(filepath.Join(dir, "train", "cat", firstFile(t, filepath.Join(dir, "train", "cat"))))
	os.WriteFile(filepath.Join(sub, "extra.PNG"), b, 0o644)
	tr, te, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(tr.Classes) || len(tr.Classes) != 10 || !slices.Equal(tr.Classes, te.Classes) {
		t.Fatalf("classes %v / %v", tr.Classes, te.Classes)
	}
	if tr.Len() != 61 || te.Len() != 40 || tr.Shape != [3]int{3, 224, 224} {
		t.Fatalf("train %d images, val %d, shape %v; want 61, 40, [3 224 224]", tr.Len(), te.Len(), tr.Shape)
	}
	if tr.LeftOut != "" || te.LeftOut != "" {
		t.Fatalf("nothing left out, but %q, %q", tr.LeftOut, te.LeftOut)
	}
	// Images torchvision reads and gorun does not decode: left out, and
	// said so, so that the counts are never silently below torchvision's.
	for _, f := range []string{"train/cat/a.webp", "train/dog/b.BMP", "train/dog/more/c.webp", "val/cat/d.tif"} {
		p := filepath.Join(dir, filepath.FromSlash(f))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("RIFF"), 0o644)
	}
	if tr, te, err = Load(dir); err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 61 || te.Len() != 40 ||
		tr.LeftOut != "3 image files left out that torchvision's ImageFolder would read (.bmp 1, .webp 2): gorun decodes JPEG and PNG; convert them to use them" ||
		te.LeftOut != "1 image file left out that torchvision's ImageFolder would read (.tif 1): gorun decodes JPEG and PNG; convert them to use them" {
		t.Fatalf("with .webp, .bmp and .tif files: train %d images, val %d, left out %q and %q", tr.Len(), te.Len(), tr.LeftOut, te.LeftOut)
	}
	for i, l := range tr.Labels {
		if int(l) >= len(tr.Classes) {
			t.Fatalf("label %d of image %d", l, i)
		}
	}
	if small, _, err := LoadSized(dir, 32); err != nil || small.Shape != [3]int{3, 32, 32} {
		t.Fatalf("LoadSized 32: %v, %v", err, small)
	}

	os.MkdirAll(filepath.Join(dir, "train", "zebra"), 0o755)
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "class zebra has no images") {
		t.Errorf("an empty class: %v", err)
	}
	os.Remove(filepath.Join(dir, "train", "zebra"))
	os.RemoveAll(filepath.Join(dir, "val", "truck"))
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "they must be the same") {
		t.Errorf("val without a class: %v", err)
	}
	// A part of the folder given for the folder: named, with the folder.
	readme := filepath.Join(dir, "README.txt")
	os.WriteFile(readme, []byte("photos"), 0o644)
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(dir, "train"), filepath.Join(dir, "train") + " is the train/ split of the image folder " + dir + ": give the folder itself"},
		{filepath.Join(dir, "val") + "/", filepath.Join(dir, "val") + "/ is the val/ split of the image folder " + dir},
		{filepath.Join(dir, "train", "cat"), filepath.Join(dir, "train", "cat") + " is a class directory (cat) in the train/ split of the image folder " + dir},
		{filepath.Join(sub, "extra.PNG"), filepath.Join(sub, "extra.PNG") + " is an image of class cat in the train/ split of the image folder " + dir},
		{filepath.Join(dir, "val", "cat", firstFile(t, filepath.Join(dir, "val", "cat"))), "is an image of class cat in the val/ split of the image folder " + dir},
		{readme, readme + " is a file of the image folder in " + dir + ": give that directory"},
	} {
		if _, _, err := Load(c.dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%s): %v, want %q", c.dir, err, c.want)
		}
	}
	// ImageNet's validation images as they come: in one directory.
	os.RemoveAll(filepath.Join(dir, "val"))
	os.MkdirAll(filepath.Join(dir, "val"), 0o755)
	for _, f := range []string{"ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG"} {
		os.WriteFile(filepath.Join(dir, "val", f), b, 0o644)
	}
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "val")+" holds 2 images but no class directories") || !strings.Contains(err.Error(), "valprep.sh") {
		t.Errorf("a flat val directory: %v", err)
	}
	os.RemoveAll(filepath.Join(dir, "val"))
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "holds an image folder's train/ but no val/ beside it") {
		t.Errorf("no val directory: %v", err)
	}
}

func firstFile(t *testing.T, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("%s: %v", dir, err)
	}
	return entries[0].Name()
}

// TestDecoderSaysWhyNotTurbo: where libjpeg-turbo does not load, the
// reader says why in the loader's words, every time — also with many
// readers made at once (the loader's message is per thread; read on
// another thread than dlopen's, it was empty).
func TestDecoderSaysWhyNotTurbo(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libturbojpeg.so.0")
	t.Setenv("GORUN_TURBOJPEG", missing)
	want := "Go image/jpeg: TurboJPEG (libjpeg-turbo) not found (tried [" + missing + "]: " + missing + ": cannot open shared object file: No such file or directory)"
	var wg sync.WaitGroup
	said := make(chan string, 64)
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got := NewImageReader().Decoder(); !strings.HasPrefix(got, want) {
					said <- got
					return
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	close(said)
	for s := range said {
		t.Errorf("decoder %q, want %q...", s, want)
	}
}
