package main

import (
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestInferSharedByRanks: infer started as 3 ranks shares --data's
// evaluation (50 test images: 17, 17 and 16 each) and prints, from rank 0
// alone, the same loss, accuracy and confusion matrix as one process;
// ranks given different weights stop, naming them; image files are
// classified once, by rank 0.
func TestInferSharedByRanks(t *testing.T) {
	bin := buildTools(t, "../train", "../infer", "../gendata")
	dir := filepath.Join(t.TempDir(), "digits")
	weights := filepath.Join(t.TempDir(), "net.safetensors")
	for _, cmd := range [][]string{
		{"gendata", "--format", "mnist", "--train", "128", "--test", "50", "--out", dir},
		{"train", "--data", dir, "--epochs", "1", "--threads", "1", "--save", weights},
	} {
		if out, err := exec.Command(filepath.Join(bin, cmd[0]), cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd[0], err, out)
		}
	}
	alone, err := exec.Command(filepath.Join(bin, "infer"), "--weights", weights, "--data", dir, "--threads", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("infer: %v\n%s", err, alone)
	}
	shared, err := exec.Command(filepath.Join(bin, "gorun"), "-np", "3", filepath.Join(bin, "infer"), "--weights", weights, "--data", dir, "--threads", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("gorun infer: %v\n%s", err, shared)
	}
	// Rank 0's lines without their label, but for the transport's line.
	var rank0 []string
	for _, line := range strings.Split(string(shared), "\n") {
		if strings.HasPrefix(line, "[1] ") || strings.HasPrefix(line, "[2] ") {
			t.Errorf("rank %s printed: %q", line[1:2], line)
		}
		if rest, ok := strings.CutPrefix(line, "[0] "); ok && !strings.HasPrefix(rest, "comm: ") {
			rank0 = append(rank0, rest)
		}
	}
	want := strings.Replace(strings.TrimRight(string(alone), "\n"), "): Average loss", ", shared by 3 ranks: 17, 17, 16 images): Average loss", 1)
	if got := strings.Join(rank0, "\n"); got != want {
		t.Errorf("3 ranks printed\n%s\none process\n%s", got, want)
	}
	if !regexp.MustCompile(`Accuracy: \d+/50 `).MatchString(want) {
		t.Errorf("one process did not score the 50 test images:\n%s", alone)
	}

	// Rank 1 given other weights (a stale copy on one node): both ranks
	// stop, naming the difference, instead of adding up shares of two
	// models' results.
	other := filepath.Join(t.TempDir(), "other.safetensors")
	if out, err := exec.Command(filepath.Join(bin, "train"), "--data", dir, "--epochs", "1", "--threads", "1", "--seed", "2", "--save", other).CombinedOutput(); err != nil {
		t.Fatalf("train: %v\n%s", err, out)
	}
	script := `w="$0"; [ "$RANK" = 1 ] && w="$1"; exec "$2" --weights "$w" --data "$3" --threads 1`
	out, err := exec.Command(filepath.Join(bin, "gorun"), "-np", "2", "sh", "-c", script, weights, other, filepath.Join(bin, "infer"), dir).CombinedOutput()
	if err == nil || strings.Count(string(out), "the ranks differ where they must agree: the weights' digest is ") != 2 || strings.Contains(string(out), "Test set") {
		t.Errorf("ranks given different weights: %v\n%s\nwant both to stop naming the weights' digest, nothing scored", err, out)
	}

	photo := filepath.Join(t.TempDir(), "shoe.png")
	f, err := os.Create(photo)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, image.NewGray(image.Rect(0, 0, 28, 28))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err = exec.Command(filepath.Join(bin, "gorun"), "-np", "2", filepath.Join(bin, "infer"), "--weights", weights, "--threads", "1", photo).CombinedOutput()
	if err != nil {
		t.Fatalf("gorun infer %s: %v\n%s", photo, err, out)
	}
	if n := strings.Count(string(out), photo+": "); n != 1 || !strings.Contains(string(out), "[0] "+photo+": ") {
		t.Errorf("the image was classified %d times, want once by rank 0:\n%s", n, out)
	}
}
