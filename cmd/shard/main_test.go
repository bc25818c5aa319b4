package main

import (
	"bytes"
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
	if f, err := data.Detect(out); err != nil || f != data.FormatShards {
		t.Errorf("Detect %s: %v, %v", out, f, err)
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
