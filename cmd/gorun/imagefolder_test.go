package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/train/checkpoint"
)

// TestResNet50OnImageFolder: gendata writes a small image folder (JPEG,
// 48×40); gorun runs ResNet-50 on it with DDP over 2 ranks for a few
// steps (images resized and cropped to 32×32); the checkpoint names the
// folder's classes in torchvision's order.
func TestResNet50OnImageFolder(t *testing.T) {
	if testing.Short() {
		t.Skip("trains ResNet-50; the full run covers it")
	}
	bin := buildTools(t, "../train", "../gendata")
	dir := filepath.Join(t.TempDir(), "photos")
	if out, err := exec.Command(filepath.Join(bin, "gendata"), "--format", "imagefolder", "--size", "48x40", "--train", "60", "--test", "40", "--out", dir).CombinedOutput(); err != nil {
		t.Fatalf("gendata: %v\n%s", err, out)
	}
	save := filepath.Join(t.TempDir(), "r50.safetensors")
	out, err := exec.Command(filepath.Join(bin, "gorun"), "-np", "2", filepath.Join(bin, "train"), "--model", "resnet50", "--data", dir,
		"--image-size", "32", "--batch-size", "4", "--epochs", "1", "--train-samples", "16", "--test-samples", "8", "--threads", "1",
		"--save", save).CombinedOutput()
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	for _, want := range []string{"Model resnet50: ", "Data imagefolder:photos: 16 training and 8 test images", "Data parallel over 2 ranks", "Test set"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	m, err := checkpoint.ReadTrainMeta(save)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Classes) != 10 || !slices.IsSorted(m.Classes) || m.Model != "resnet50" || !slices.Equal(m.Input, []int{3, 32, 32}) {
		t.Errorf("checkpoint: model %s, input %v, classes %v", m.Model, m.Input, m.Classes)
	}
}

// TestDDPOnShards: shard packs a generated image folder; gorun trains
// CIFARNet on the shards with DDP over 2 ranks, each streaming shards of
// its own; evaluation scores every validation sample once across the
// ranks — also with one validation shard for the two (rank 1, which has
// none, scored the whole set: 80 of 40 images).
func TestDDPOnShards(t *testing.T) {
	if testing.Short() {
		t.Skip("packs shards and trains; the full run covers it")
	}
	bin := buildTools(t, "../train", "../gendata", "../shard")
	dir := filepath.Join(t.TempDir(), "photos")
	shards := filepath.Join(t.TempDir(), "shards")
	for _, cmd := range [][]string{
		{"gendata", "--format", "imagefolder", "--size", "48x40", "--train", "100", "--test", "40", "--out", dir},
		{"shard", "--data", dir, "--out", shards, "--samples", "50"}, // 2 training shards, 1 validation shard
	} {
		if out, err := exec.Command(filepath.Join(bin, cmd[0]), cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd[0], err, out)
		}
	}
	out, err := exec.Command(filepath.Join(bin, "gorun"), "-np", "2", filepath.Join(bin, "train"), "--model", "cifarnet", "--data", shards,
		"--image-size", "32", "--batch-size", "8", "--epochs", "1", "--threads", "1", "--workers", "1", "--progress", "lines").CombinedOutput()
	if err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	for _, want := range []string{"Data imagefolder:shards: 100 training and 40 test images, augmented (RandomResizedCrop 32, flip)", "Data parallel over 2 ranks", "[0] Test set: Average loss: ", "/40 ("} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestPipelineRanksNotAMultiple: a pipeline of 2 stages started on 3
// ranks stops at once on every rank, saying how many ranks to run.
func TestPipelineRanksNotAMultiple(t *testing.T) {
	bin := buildTools(t, "../train")
	out, err := exec.Command(filepath.Join(bin, "gorun"), "-np", "3", filepath.Join(bin, "train"), "--synthetic", "--model", "cifarnet",
		"--pipeline", "2", "--train-samples", "64", "--threads", "1").CombinedOutput()
	want := "pipeline: 3 ranks cannot form pipelines of 2 stages: run a multiple of 2 ranks"
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("gorun -np 3 train --pipeline 2: %v, want the ranks to say %q:\n%s", err, want, out)
	}
}
