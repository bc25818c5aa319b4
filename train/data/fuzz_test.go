package data

import (
	"archive/tar"
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The readers of files users bring — images, tar shards, IDX — fuzzed:
// whatever the bytes, an error or a result that holds together, never a
// panic, a crash or an allocation the input does not justify. `go test`
// runs the seeds; `go test ./train/data -run '^$' -fuzz FuzzImageDecode`
// searches further.

// FuzzImageDecode decodes the bytes with libjpeg-turbo (where it loads)
// and with Go's decoders: a decoded image has a size within the
// readers' limit and a pixel buffer to match, and after any failure the
// same reader still decodes a good JPEG to the same pixels.
func FuzzImageDecode(f *testing.F) {
	names, err := filepath.Glob("testdata/images/*")
	if err != nil || len(names) == 0 {
		f.Fatalf("no seed images: %v", err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(pngDeclaring(100_000, 100_000))
	f.Add(jpegDeclaring(60_000, 60_000, 3))
	f.Add(jpegDeclaring(40_000, 40_000, 4))
	good, err := os.ReadFile("testdata/images/rgb.jpg")
	if err != nil {
		f.Fatal(err)
	}
	const limit = 1 << 20 // pixels: decoding garbage into larger images only slows the search
	turbo := NewImageReader()
	turbo.maxPixels = limit
	f.Cleanup(turbo.Close)
	readers := []*ImageReader{turbo, {why: "the fuzz test asks", maxPixels: limit}}
	want := make([]*RGB, len(readers))
	for i, r := range readers {
		if want[i], err = r.decode(good, "rgb.jpg", nil); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i, r := range readers {
			m, err := r.decode(b, "fuzzed", nil)
			if err != nil {
				if m, err := r.decode(good, "rgb.jpg", nil); err != nil || !slices.Equal(m.Pix, want[i].Pix) {
					t.Fatalf("%s: a good JPEG after a failed one: %v", r.Decoder(), err)
				}
				continue
			}
			if checkImageSize(m.W, m.H, limit) != nil || len(m.Pix) != 3*m.W*m.H {
				t.Fatalf("%s: decoded %d×%d pixels into %d bytes", r.Decoder(), m.W, m.H, len(m.Pix))
			}
		}
	})
}

// FuzzShardReader reads every sample of a tar shard: each is an error or
// a sample with an image and a class in range.
func FuzzShardReader(f *testing.F) {
	png, err := os.ReadFile("testdata/images/rgb-up.png")
	if err != nil {
		f.Fatal(err)
	}
	for _, members := range [][]string{
		{"000000.png", string(png), "000000.cls", "3", "000001.jpg", "jpeg", "000001.cls", "9"},
		{"000000.cls", "1", "000000.png", string(png)},
		{"000000.png", string(png)},
	} {
		f.Add(tarOf(members...))
	}
	const samples, classes = 4, 10
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &shardReader{path: "fuzzed.tar", tr: tar.NewReader(bytes.NewReader(b)), end: samples}
		for want := range samples {
			id, s, err := r.next(true, classes)
			if err != nil {
				return
			}
			if id != want || s.image == nil || s.label < 0 || s.label >= classes {
				t.Fatalf("sample %d: number %d, %d image bytes, class %d", want, id, len(s.image), s.label)
			}
		}
		if _, _, err := r.next(true, classes); err == nil {
			t.Fatalf("a sample past the shard's %d", samples)
		}
	})
}

// FuzzParseIDX parses IDX bytes, plain or gzip-compressed: a result's
// data is exactly what its dimensions describe.
func FuzzParseIDX(f *testing.F) {
	good := idxBytes([]int{2, 3}, []byte{1, 2, 3, 4, 5, 6})
	f.Add(good)
	f.Add(gz(f, good))
	f.Add(idxBytes([]int{1 << 30, 1 << 30}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := maybeGunzip(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		idx, err := parseIDX(r)
		if err != nil {
			return
		}
		n := 1
		for _, d := range idx.Dims {
			n *= d
		}
		if len(idx.Data) != n {
			t.Fatalf("dimensions %v with %d data bytes", idx.Dims, len(idx.Data))
		}
	})
}

// FuzzCIFARPython reads the bytes as a batch of CIFAR-10's Python
// version: an error, or whole records with labels 0 to 9.
func FuzzCIFARPython(f *testing.F) {
	for _, form := range []string{"py2", "py3p2", "py3p4"} {
		b, err := os.ReadFile(filepath.Join("testdata", "cifar-python", form, "test_batch"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x80\x02]q\x00h\x00a."))                       // a list holding itself
	f.Add([]byte("\x80\x02}q\x00(X\x04\x00\x00\x00datah\x00u.")) // a dict holding itself
	f.Fuzz(func(t *testing.T, b []byte) {
		records, err := cifarPythonRecords(b, "fuzzed")
		if err != nil {
			return
		}
		if len(records) == 0 || len(records)%cifarRecord != 0 {
			t.Fatalf("%d bytes of records", len(records))
		}
		for off := 0; off < len(records); off += cifarRecord {
			if records[off] > 9 {
				t.Fatalf("label %d", records[off])
			}
		}
	})
}
