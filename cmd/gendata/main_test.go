package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/train/data"
)

// TestGendata writes each format and reads it back with data.Load.
func TestGendata(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args   []string
		path   string
		format data.Format
	}{
		{[]string{"--format", "cifar10"}, filepath.Join(dir, "cifar"), data.FormatCIFAR10},
		{[]string{"--format", "cifar10", "--archive"}, filepath.Join(dir, "cifar-10-binary.tar.gz"), data.FormatCIFAR10},
		{[]string{"--format", "mnist"}, filepath.Join(dir, "mnist"), data.FormatMNIST},
		// The format named first, as a subcommand.
		{[]string{"mnist"}, filepath.Join(dir, "mnist-word"), data.FormatMNIST},
		{[]string{"cifar10", "--format", "cifar10"}, filepath.Join(dir, "cifar-word"), data.FormatCIFAR10},
	}
	for _, c := range cases {
		var out bytes.Buffer
		if err := run(append(c.args, "--train", "30", "--test", "10", "--out", c.path), &out); err != nil {
			t.Fatal(err)
		}
		train, test, err := data.Load(c.path)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := data.Synthetic(c.format, 30, 1)
		if train.Len() != 30 || test.Len() != 10 || !bytes.Equal(train.Images, want.Images) {
			t.Fatalf("%v: read back %d/%d images", c.args, train.Len(), test.Len())
		}
	}
	folder := filepath.Join(dir, "photos")
	if err := run([]string{"--format", "imagefolder", "--size", "40x34", "--image-format", "png", "--train", "60", "--test", "40", "--out", folder}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if train, test, err := data.LoadSized(folder, 32); err != nil || train.Len() != 60 || test.Len() != 40 || len(train.Classes) != 10 {
		t.Fatalf("image folder read back: %v, %v, %v", err, train, test)
	}
	// `gendata imagefolder`, as issue 27 spells it: JPEG class folders.
	words := filepath.Join(dir, "photos-word")
	if err := run([]string{"imagefolder", "--size", "40x34", "--train", "60", "--test", "40", "--out", words}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if jpegs, _ := filepath.Glob(filepath.Join(words, "train", "*", "*.jpg")); len(jpegs) != 60 {
		t.Fatalf("gendata imagefolder: %d JPEG files under train/CLASS, want 60", len(jpegs))
	}
	if train, test, err := data.LoadSized(words, 32); err != nil || train.Len() != 60 || test.Len() != 40 {
		t.Fatalf("gendata imagefolder read back: %v, %v, %v", err, train, test)
	}
	for _, bad := range [][]string{{}, {"--out", dir, "--format", "svhn"}, {"--out", dir, "--train", "0"}, {"--out", dir, "--format", "mnist", "--archive"},
		{"--out", dir, "--format", "imagefolder", "--size", "9"}, {"--out", dir, "--format", "imagefolder", "--image-format", "gif"},
		{"--out", filepath.Join(dir, "few"), "--format", "imagefolder", "--train", "5"}} {
		if err := run(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("gendata %v succeeded", bad)
		}
	}
}

// TestGendataArguments: an argument where a flag belongs is named (and a
// format named late points to the places it may go), rather than "--out
// is required" for the flags after it that went unread; a format named
// first and another with --format are refused, not one picked.
func TestGendataArguments(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", dir, "imagefolder"}, `unexpected argument "imagefolder": name the format first (gendata imagefolder --out DIR) or with --format imagefolder`},
		{[]string{"imagefolder", "--format", "mnist", "--out", dir}, "gendata imagefolder --format mnist: two formats; name one"},
		{[]string{"imagefolder", "mnist", "--out", dir}, `unexpected argument "mnist": name the format first`},
		{[]string{"imagefolder"}, "--out is required"},
		{[]string{"--out", dir, "photos"}, `unexpected arguments ["photos"]: gendata takes flags only ("gendata -h" lists them)`},
		{[]string{}, "--out is required"},
		// Formats the readers know but gendata does not write: named, not
		// written in another format's files.
		{[]string{"--out", dir, "--format", "imagenet"}, `--format "imagenet": want cifar10, mnist or imagefolder`},
		{[]string{"--out", dir, "--format", "svhn"}, `--format "svhn": want cifar10, mnist or imagefolder`},
		// Images the loaders would refuse (larger than Pillow's bound),
		// refused before anything is allocated or written.
		{[]string{"--out", dir, "--format", "imagefolder", "--size", "100000x100000"}, "--size 100000x100000: 10000000000 pixels, more than the 178956970 an image may have"},
		{[]string{"--out", dir, "--format", "imagefolder", "--size", "0x5"}, `--size "0x5": want WIDTHxHEIGHT`},
	} {
		err := run(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gendata %q: error %v, want %q", c.args, err, c.want)
		}
	}
}
