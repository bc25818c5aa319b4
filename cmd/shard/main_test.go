package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/train/data"
)

// TestShardCommand packs a generated image folder and reads the shards
// back; missing or wrong flags and a directory that is not an image
// folder are errors saying what is wrong.
func TestShardCommand(t *testing.T) {
	folder := filepath.Join(t.TempDir(), "photos")
	tr, _ := data.Synthetic(data.FormatCIFAR10, 60, 1)
	te, _ := data.Synthetic(data.FormatCIFAR10, 40, 2)
	if err := data.WriteImageFolder(folder, tr, te, 48, 40, ".jpg"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "shards")
	var stdout bytes.Buffer
	if err := run([]string{"--data", folder, "--out", out, "--samples", "16"}, &stdout); err != nil {
		t.Fatal(err)
	}
	if want := "60 training samples in 4 shards, 40 validation samples in 3 shards, 10 classes"; !strings.Contains(stdout.String(), want) {
		t.Errorf("printed %q, want %q", stdout.String(), want)
	}
	stdout.Reset()
	if err := run([]string{"--data", folder, "--out", filepath.Join(t.TempDir(), "one"), "--samples", "40"}, &stdout); err != nil {
		t.Fatal(err)
	}
	if want := "60 training samples in 2 shards, 40 validation samples in 1 shard, 10 classes"; !strings.Contains(stdout.String(), want) {
		t.Errorf("printed %q, want %q", stdout.String(), want)
	}
	if f, err := data.Detect(out); err != nil || f != data.FormatShards {
		t.Errorf("Detect %s: %v, %v", out, f, err)
	}
	if strings.Contains(stdout.String(), "left out") {
		t.Errorf("nothing left out, but printed %q", stdout.String())
	}

	// Images of formats gorun does not decode (torchvision reads them):
	// not packed, said so, and recorded in the index for the runs that
	// read the shards.
	for _, f := range []string{"train/cat/a.webp", "train/cat/b.webp", "val/dog/c.bmp"} {
		if err := os.WriteFile(filepath.Join(folder, filepath.FromSlash(f)), []byte("RIFF"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stdout.Reset()
	if err := run([]string{"--data", folder, "--out", out, "--samples", "16"}, &stdout); err != nil {
		t.Fatal(err)
	}
	want := "60 training samples in 4 shards, 40 validation samples in 3 shards, 10 classes: " + out + "\n" +
		"train: 2 image files left out that torchvision's ImageFolder would read (.webp 2): gorun decodes JPEG and PNG; convert them to use them\n" +
		"val: 1 image file left out that torchvision's ImageFolder would read (.bmp 1): gorun decodes JPEG and PNG; convert them to use them\n"
	if stdout.String() != want {
		t.Errorf("with .webp and .bmp files, printed\n%s\nwant\n%s", stdout.String(), want)
	}
	if tr, te, err := data.Load(out); err != nil || !strings.Contains(tr.LeftOut, "(.webp 2)") || !strings.Contains(te.LeftOut, "(.bmp 1)") {
		t.Errorf("the shards read back: %v; left out %q, %q", err, tr.LeftOut, te.LeftOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", out}, "--data DIR and --out DIR are required"},
		{[]string{"--data", folder}, "--data DIR and --out DIR are required"},
		{[]string{"--data", folder, "--out", out, "--samples", "0"}, "0 samples per shard"},
		{[]string{"--data", folder, "--out", out, "--resize", "-3"}, "resize to -3"},
		{[]string{"--data", t.TempDir(), "--out", out}, "is not an image folder"},
		{[]string{"--data", folder, "--out", out, "extra"}, `unexpected arguments ["extra"]: shard takes flags only`},
	} {
		if err := run(c.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("shard %v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}
