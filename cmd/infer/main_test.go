package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train"
	"github.com/gorun/gorun/train/data"
)

// TestInfer trains a small model on generated MNIST-shaped data, saves it,
// writes test images as PNG (and one as JPEG, one enlarged to 56×56 RGB),
// and checks infer's top class for each against the classifier's.
func TestInfer(t *testing.T) {
	trainSet, _ := data.Synthetic(data.FormatMNIST, 640, 1)
	testSet, _ := data.Synthetic(data.FormatMNIST, 64, 2)
	dir := t.TempDir()
	if err := data.WriteMNIST(filepath.Join(dir, "digits"), trainSet, testSet); err != nil {
		t.Fatal(err)
	}
	cfg, _ := train.Defaults("mnist")
	cfg.Epochs, cfg.Threads = 1, 1
	be := cpu.New(1)
	defer be.Close()
	tr, err := train.New(context.Background(), cfg, be, trainSet, testSet)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "net.safetensors")
	if err := tr.Save(ckpt); err != nil {
		t.Fatal(err)
	}

	var files []string
	for i := range 4 {
		img := image.NewGray(image.Rect(0, 0, 28, 28))
		copy(img.Pix, testSet.Image(i))
		files = append(files, writeImage(t, dir, i, img, i == 3))
	}
	// An RGB image twice the size: resized and converted to gray.
	big := image.NewRGBA(image.Rect(0, 0, 56, 56))
	for y := range 56 {
		for x := range 56 {
			v := testSet.Image(0)[(y/2)*28+x/2]
			big.Set(x, y, color.RGBA{v, v, v, 255})
		}
	}
	files = append(files, writeImage(t, dir, 9, big, false))

	var out bytes.Buffer
	if err := run(context.Background(), append([]string{"--weights", ckpt, "--threads", "1"}, files...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	c, err := train.LoadClassifier(ckpt, "", "", be)
	if err != nil {
		t.Fatal(err)
	}
	var imgs [][]byte
	for i := range 4 {
		imgs = append(imgs, testSet.Image(i))
	}
	imgs = append(imgs, testSet.Image(0))
	preds, _ := c.Classify(imgs, 1)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(files) {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, line := range lines {
		want := files[i] + ": " + preds[i][0].Name + " "
		if !strings.HasPrefix(line, want) || strings.Count(line, "%") != 3 {
			t.Fatalf("line %q, want it to start %q with 3 classes", line, want)
		}
	}

	// Flags after the files, and a file after "--": the same lines.
	want := out.String()
	out.Reset()
	args := append(append([]string{files[0]}, files[1:len(files)-1]...), "--weights", ckpt, "--threads", "1", "--", files[len(files)-1])
	if err := run(context.Background(), args, &out, io.Discard); err != nil || out.String() != want {
		t.Fatalf("infer %q: %v\n%s\nwant\n%s", args, err, out.String(), want)
	}

	// --json: one object per image, the same predictions.
	out.Reset()
	if err := run(context.Background(), append([]string{"--weights", ckpt, "--threads", "1", "--json", "--top", "2"}, files...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&out)
	for i := range files {
		var got struct {
			File string
			Top  []struct {
				Class int
				Name  string
				Prob  float64
			}
		}
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("JSON object %d: %v", i, err)
		}
		// (Image 3 is a JPEG: its probabilities differ a little.)
		if got.File != files[i] || len(got.Top) != 2 || got.Top[0].Class != preds[i][0].Class || got.Top[0].Name != preds[i][0].Name ||
			math.Abs(got.Top[0].Prob-preds[i][0].Probability) > 0.01 || got.Top[1].Prob > got.Top[0].Prob {
			t.Errorf("JSON object %d: %+v, want %s first with %v", i, got, preds[i][0].Name, preds[i][0].Probability)
		}
	}

	// Batches smaller than the files: the same lines, printed batch by
	// batch.
	out.Reset()
	if err := run(context.Background(), append([]string{"--weights", ckpt, "--threads", "1", "--batch-size", "2"}, files...), &out, io.Discard); err != nil || out.String() != want {
		t.Fatalf("--batch-size 2: %v\n%s\nwant\n%s", err, out.String(), want)
	}

	// Files that do not decode among good ones: each named (on stderr, or
	// as a JSON object in its place), the others classified, and an error
	// at the end that counts them.
	truncated := filepath.Join(dir, "truncated.jpg")
	if raw, err := os.ReadFile(files[3]); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(truncated, raw[:len(raw)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	notImage := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notImage, []byte("not an image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mixed := []string{files[0], truncated, files[1], notImage, files[2]}
	var errs bytes.Buffer
	out.Reset()
	err = run(context.Background(), append([]string{"--weights", ckpt, "--threads", "1", "--batch-size", "2"}, mixed...), &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "2 of 5 images could not be read, each named where it stands") {
		t.Errorf("infer with two bad files: error %v, want one counting 2 of 5", err)
	}
	if wantLines := strings.Split(want, "\n"); out.String() != strings.Join(wantLines[:3], "\n")+"\n" {
		t.Errorf("infer with two bad files printed\n%s\nwant the good files' lines\n%s", out.String(), strings.Join(wantLines[:3], "\n"))
	}
	if e := errs.String(); strings.Count(e, "\n") != 2 || !strings.Contains(e, truncated) || !strings.Contains(e, notImage) {
		t.Errorf("stderr %q: want a line naming each of %s and %s", e, truncated, notImage)
	}
	if err := run(context.Background(), []string{"--weights", ckpt, "--threads", "1", files[0], notImage}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "1 of 2 images could not be read") {
		t.Errorf("infer with one bad file of two: error %v, want one counting 1 of 2", err)
	}
	// One file alone: its error is infer's, said once (not on stderr too).
	errs.Reset()
	if err := run(context.Background(), []string{"--weights", ckpt, "--threads", "1", notImage}, io.Discard, &errs); err == nil || !strings.Contains(err.Error(), notImage+": image: unknown format") || errs.Len() > 0 {
		t.Errorf("infer on one file that is no image: error %v, stderr %q; want the file's error, once", err, errs.String())
	}
	// --skip-bad-images: the same lines, the bad files named and counted
	// on stderr, and no error.
	out.Reset()
	errs.Reset()
	if err := run(context.Background(), append([]string{"--weights", ckpt, "--threads", "1", "--skip-bad-images"}, mixed...), &out, &errs); err != nil {
		t.Errorf("infer --skip-bad-images with two bad files: %v", err)
	}
	if wantLines := strings.Split(want, "\n"); out.String() != strings.Join(wantLines[:3], "\n")+"\n" {
		t.Errorf("infer --skip-bad-images printed\n%s\nwant the good files' lines\n%s", out.String(), strings.Join(wantLines[:3], "\n"))
	}
	if e := errs.String(); !strings.Contains(e, truncated) || !strings.Contains(e, notImage) || !strings.Contains(e, "2 of 5 images could not be read and were left out (--skip-bad-images)") {
		t.Errorf("infer --skip-bad-images: stderr %q, want each bad file named and a count", e)
	}
	out.Reset()
	errs.Reset()
	err = run(context.Background(), append([]string{"--weights", ckpt, "--threads", "1", "--json"}, mixed...), &out, &errs)
	if err == nil || errs.Len() > 0 {
		t.Errorf("infer --json with two bad files: error %v, stderr %q; want an error and nothing on stderr", err, errs.String())
	}
	dec = json.NewDecoder(&out)
	for i, f := range mixed {
		var got struct {
			File  string
			Error string
			Top   []struct{ Name string }
		}
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("--json with bad files, object %d: %v", i, err)
		}
		bad := f == truncated || f == notImage
		if got.File != f || bad != (got.Error != "") || bad == (len(got.Top) == 3) || (bad && !strings.Contains(got.Error, f)) {
			t.Errorf("--json with bad files, object %d: %+v, want file %s (bad: %v)", i, got, f, bad)
		}
	}

	out.Reset()
	if err := run(context.Background(), []string{"--weights", ckpt, "--data", filepath.Join(dir, "digits")}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	ev, _ := c.Evaluate(context.Background(), testSet, 64)
	if want := fmt.Sprintf("Accuracy: %d/%d", ev.Correct, ev.Total); !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "Confusion matrix") {
		t.Fatalf("evaluation output:\n%s", out.String())
	}
	// Interrupted (Ctrl-C, gorun stopping the job): said so, not the
	// evaluation's "context canceled".
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if err := run(stopped, []string{"--weights", ckpt, "--data", filepath.Join(dir, "digits")}, &out, io.Discard); err == nil || err.Error() != "interrupted" {
		t.Errorf("an interrupted evaluation: %v, want \"interrupted\"", err)
	}
	missing := filepath.Join(dir, "nope")
	if err := run(context.Background(), []string{"--weights", ckpt, "--data", missing}, &out, io.Discard); err == nil || !strings.Contains(err.Error(), "--data: stat "+missing) {
		t.Errorf("--data %s: error %v, want one naming --data and the directory", missing, err)
	}

	// The checkpoint's weights with a NaN in them (a run that diverged).
	nanWeights := filepath.Join(dir, "nan.safetensors")
	{
		f, err := safetensors.ReadFile(ckpt)
		if err != nil {
			t.Fatal(err)
		}
		f.Tensors[0].F32[2] = float32(math.NaN())
		if err := safetensors.WriteFile(nanWeights, f.Tensors, f.Metadata); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--weights", nanWeights, "--json", files[0]}, nanWeights + ": tensor \"conv1.weight\" holds NaN at element 2: the model's outputs would be NaN or infinite"},
		{[]string{"--weights", filepath.Join(dir, "missing"), files[0]}, "weights " + filepath.Join(dir, "missing") + ": file does not exist"},
		{[]string{"--weights", ckpt}, "give image files to classify"},
		{[]string{"--weights", ckpt, filepath.Join(dir, "net.safetensors")}, "net.safetensors"},
		{[]string{"--weights", ckpt, dir}, dir + " is a directory: infer classifies image files (" + filepath.Join(dir, "*.jpg") + "), and evaluates a dataset with --data " + dir},
		{[]string{"--weights", filepath.Join(dir, "missing"), filepath.Join(dir, "nope.jpg")}, "stat " + filepath.Join(dir, "nope.jpg") + ": no such file or directory"},
		{[]string{"--weights", ckpt + ".train", files[0]}, ckpt + ".train is a run's training state (optimizer and progress, for --resume); its weights are in " + ckpt},
		{[]string{"--weights", ckpt, "--model", "cifarnet", files[0]}, ckpt + ": --model cifarnet, but the checkpoint was trained as mnist (without --model it is built as that): state does not match the model"},
	} {
		if err := run(context.Background(), bad.args, &out, io.Discard); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("infer %v: error %v, want %q", bad.args, err, bad.want)
		}
	}
}

// TestInferFlagErrors: values that cannot work are refused before
// anything is loaded, naming the flag and the value.
func TestInferFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--weights", "w.safetensors", "--top", "-5", "a.png"}, "--top -5"},
		{[]string{"--weights", "w.safetensors", "--top", "0", "a.png"}, "--top 0"},
		{[]string{"--weights", "w.safetensors", "--threads", "0", "a.png"}, "--threads 0"},
		{[]string{"--weights", "w.safetensors", "--batch-size", "-1", "--data", "d"}, "--batch-size -1"},
		{[]string{"--weights", "w.safetensors", "--merge", "/nonexistent/whole.safetensors"}, "--merge: checkpoint: cannot save to /nonexistent/whole.safetensors: directory /nonexistent does not exist"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		err := run(context.Background(), c.args, &out, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("infer %v: error %v, want %q", c.args, err, c.want)
		}
		if out.Len() > 0 {
			t.Errorf("infer %v printed %q", c.args, out.String())
		}
	}
}

// TestInferWeightsNotWeights: a file given as --weights that holds no
// weights — the image to classify, the arguments swapped, or a text file —
// is an error naming the file and what it is, without the hint to pass
// --model that plain weights get.
func TestInferWeightsNotWeights(t *testing.T) {
	dir := t.TempDir()
	img := image.NewGray(image.Rect(0, 0, 28, 28))
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("learning rate 0.1, 3 epochs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, weights, want string
	}{
		{"png", writeImage(t, dir, 0, img, false), "is a PNG image, not weights"},
		{"jpeg", writeImage(t, dir, 1, img, true), "is a JPEG image, not weights"},
		{"text", text, "exceeds the file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{"--weights", c.weights, c.weights}, &out, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.weights) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "--model") {
				t.Fatalf("error %v; want one naming %s with %q, without --model", err, c.weights, c.want)
			}
			if out.Len() > 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}

func writeImage(t *testing.T, dir string, i int, img image.Image, asJPEG bool) string {
	t.Helper()
	name := filepath.Join(dir, fmt.Sprintf("img%d.png", i))
	var buf bytes.Buffer
	var err error
	if asJPEG {
		name = strings.TrimSuffix(name, ".png") + ".jpg"
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 100})
	} else {
		err = png.Encode(&buf, img)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestInferImageFolderModel: a model trained on an image folder reads a
// photo as its evaluation did (Resize, CenterCrop at its input size):
// infer's answer for a val file is the classifier's on that file's
// evaluation image.
func TestInferImageFolderModel(t *testing.T) {
	dir := t.TempDir()
	trainSet, _ := data.Synthetic(data.FormatCIFAR10, 60, 1)
	testSet, _ := data.Synthetic(data.FormatCIFAR10, 40, 2)
	folder := filepath.Join(dir, "photos")
	if err := data.WriteImageFolder(folder, trainSet, testSet, 45, 37, ".jpg"); err != nil {
		t.Fatal(err)
	}
	tr32, te32, err := data.LoadSized(folder, 32)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := train.Defaults("resnet18")
	cfg.Epochs, cfg.Threads, cfg.BatchSize, cfg.TestBatchSize = 1, 1, 20, 20
	be := cpu.New(1)
	defer be.Close()
	tr, err := train.New(context.Background(), cfg, be, tr32, te32)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "r18.safetensors")
	if err := tr.Save(ckpt); err != nil {
		t.Fatal(err)
	}
	_, samples, err := data.ScanImageFolder(filepath.Join(folder, "val"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--weights", ckpt, "--threads", "1", "--top", "1", samples[5].Path}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	c, err := train.LoadClassifier(ckpt, "", "", be)
	if err != nil {
		t.Fatal(err)
	}
	img, err := data.ReadEvalImage(te32.Files[5], 32)
	if err != nil {
		t.Fatal(err)
	}
	preds, err := c.Classify([][]byte{img}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s: %s %.2f%%", samples[5].Path, preds[0][0].Name, 100*preds[0][0].Probability); strings.TrimSpace(out.String()) != want {
		t.Errorf("infer printed %q, want %q", out.String(), want)
	}

	// Data of other classes than the model's is refused for --data: more
	// of them (labels past its outputs), or other names or order (scored
	// as the wrong classes without a word).
	mixed := filepath.Join(dir, "mixed")
	for _, split := range []string{"train", "val"} {
		for _, c := range []struct{ from, to string }{{"cat", "cat"}, {"dog", "dog"}, {"ship", "ship"}, {"truck", "unicorn"}} {
			if err := os.CopyFS(filepath.Join(mixed, split, c.to), os.DirFS(filepath.Join(folder, split, c.from))); err != nil {
				t.Fatal(err)
			}
		}
	}
	extra := filepath.Join(dir, "extra")
	if err := os.CopyFS(extra, os.DirFS(folder)); err != nil {
		t.Fatal(err)
	}
	for _, split := range []string{"train", "val"} {
		if err := os.CopyFS(filepath.Join(extra, split, "zebra"), os.DirFS(filepath.Join(folder, split, "cat"))); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ dir, want string }{
		{mixed, `the model has 10 classes (airplane, automobile, bird, cat, deer, … 10 in all); imagefolder:mixed's class 0 is "cat", the model's "airplane": its labels would be scored as other classes`},
		{extra, "the model has 10 classes (airplane, automobile, bird, cat, deer, … 10 in all); imagefolder:extra has 11 (airplane, automobile, bird, cat, deer, … 11 in all): its labels"},
	} {
		if err := run(context.Background(), []string{"--weights", ckpt, "--threads", "1", "--data", c.dir}, &bytes.Buffer{}, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--data %s: %v, want %q", c.dir, err, c.want)
		}
	}
	// A file among the val images that does not decode: --data's
	// evaluation stops naming it, or with --skip-bad-images leaves it out
	// and says how many it left out.
	broken := filepath.Join(dir, "broken")
	if err := os.CopyFS(broken, os.DirFS(folder)); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(broken, "val", "cat", "zz-truncated.jpg")
	if raw, err := os.ReadFile(samples[5].Path); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bad, raw[:len(raw)/4], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"--weights", ckpt, "--threads", "1", "--data", broken}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "--skip-bad-images") {
		t.Errorf("--data with a truncated JPEG: error %v, want one naming %s and --skip-bad-images", err, bad)
	}
	var whole, skipped bytes.Buffer
	if err := run(context.Background(), []string{"--weights", ckpt, "--threads", "1", "--data", folder}, &whole, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"--weights", ckpt, "--threads", "1", "--data", broken, "--skip-bad-images"}, &skipped, io.Discard); err != nil {
		t.Fatalf("--data with a truncated JPEG and --skip-bad-images: %v", err)
	}
	// The same 40 images scored, and the one left out said.
	first := func(b *bytes.Buffer) string { return strings.SplitN(b.String(), "\n", 2)[0] }
	wantLine := strings.Replace(first(&whole), "imagefolder:photos", "imagefolder:broken, 1 image file that could not be read left out (--skip-bad-images)", 1)
	if got := first(&skipped); got != wantLine || !strings.Contains(got, "/40 ") {
		t.Errorf("--skip-bad-images printed %q, want %q", got, wantLine)
	}
}

// TestInferTorchSaveFile: weights PyTorch saved with torch.save — the
// PyTorch MNIST example's net (seed 004's mnist_cnn.pt), made from our
// weights by Debian's PyTorch — evaluate exactly as the safetensors file
// they came from; without --model the error says to pass it.
func TestInferTorchSaveFile(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		t.Skipf("PyTorch not available (%s -c 'import torch': %v); install python3-torch to run this round trip", py, err)
	}
	testSet, _ := data.Synthetic(data.FormatMNIST, 64, 2)
	dir := t.TempDir()
	if err := data.WriteMNIST(filepath.Join(dir, "digits"), testSet, testSet); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(1)
	defer be.Close()
	m, err := zoo.New("mnist", be, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	st, pth := filepath.Join(dir, "w.safetensors"), filepath.Join(dir, "mnist_cnn.pt")
	if err := nn.SaveFile(st, m.Net, nil); err != nil {
		t.Fatal(err)
	}
	script := `import sys, torch, torchref
m = torchref.MODELS["mnist"]()
m.load_state_dict(torchref.load(sys.argv[1]), strict=True)
torch.save(m.state_dict(), sys.argv[2])`
	cmd := exec.Command(py, "-c", script, st, pth)
	cmd.Dir = "../../model/testdata" // torchref.py
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, b)
	}
	var want, got bytes.Buffer
	if err := run(context.Background(), []string{"--model", "mnist", "--weights", st, "--data", filepath.Join(dir, "digits")}, &want, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"--model", "mnist", "--weights", pth, "--data", filepath.Join(dir, "digits")}, &got, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() || !strings.Contains(got.String(), "Accuracy: ") {
		t.Fatalf("with the torch.save file:\n%s\nwith the safetensors it came from:\n%s", got.String(), want.String())
	}
	if err := run(context.Background(), []string{"--weights", pth, "--data", filepath.Join(dir, "digits")}, &got, io.Discard); err == nil || !strings.Contains(err.Error(), pth+" has no gorun metadata") || !strings.Contains(err.Error(), "pass --model") {
		t.Fatalf("without --model: %v", err)
	}
}
