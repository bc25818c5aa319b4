package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/train"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
	"github.com/gorun/gorun/train/report"
)

// TestTrainCommand runs the command on generated data with every output
// switched on, then resumes it for one more epoch.
func TestTrainCommand(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "net.safetensors")
	metrics := filepath.Join(dir, "m.jsonl")
	tb := filepath.Join(dir, "tb")
	prof := filepath.Join(dir, "cpu.pprof")
	var out bytes.Buffer
	err := run(context.Background(), []string{"--synthetic", "--train-samples", "640", "--test-samples", "128", "--epochs", "1", "--threads", "2",
		"--save", ckpt, "--metrics", metrics, "--tensorboard", tb, "--cpuprofile", prof}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"Train Epoch: 1 [0/640 (0%)]\tLoss: ", "Test set: Average loss: ", "Training time = ", "  forward ", "  backward ", "Saved weights to " + ckpt} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, p := range []string{ckpt, checkpoint.TrainPath(ckpt), metrics, prof} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if ev, _ := filepath.Glob(filepath.Join(tb, "events.out.tfevents.*")); len(ev) != 1 {
		t.Fatalf("event files %v", ev)
	}
	m, err := os.ReadFile(metrics)
	if err != nil || !strings.Contains(string(m), `"kind":"epoch"`) {
		t.Fatalf("metrics %s: %v", m, err)
	}

	out.Reset()
	if err := run(context.Background(), []string{"--synthetic", "--train-samples", "640", "--test-samples", "128", "--resume", ckpt, "--epochs", "2", "--save", ckpt,
		"--metrics", metrics, "--tensorboard", tb}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Resumed from "+ckpt+" after epoch 1") || !strings.Contains(out.String(), "Training epoch 2 of 2, batch") ||
		!strings.Contains(out.String(), "Train Epoch: 2 ") || strings.Contains(out.String(), "Train Epoch: 1 ") {
		t.Fatalf("resumed run:\n%s", out.String())
	}
	// The resumed run's metrics continue the first run's file, and its
	// TensorBoard events go to a second file beside the first.
	m, err = os.ReadFile(metrics)
	if err != nil || strings.Count(string(m), `"kind":"epoch"`) != 2 || !strings.Contains(string(m), `"epoch":1,"step":10,`) || !strings.Contains(string(m), `"epoch":2,"step":20,`) {
		t.Fatalf("metrics after resuming (want epochs 1 and 2): %v\n%s", err, m)
	}
	if ev, _ := filepath.Glob(filepath.Join(tb, "events.out.tfevents.*")); len(ev) != 2 {
		t.Fatalf("event files after resuming: %v", ev)
	}
	if meta, err := checkpoint.ReadTrainMeta(ckpt); err != nil || meta.Epoch != 2 {
		t.Fatalf("after resuming: %+v %v", meta, err)
	}

	// Resumed with no epoch left (--epochs no larger than the
	// checkpoint's, or a restart after the last): says so, trains, times
	// and saves nothing, and succeeds.
	out.Reset()
	if err := run(context.Background(), []string{"--synthetic", "--train-samples", "640", "--test-samples", "128", "--resume", ckpt, "--epochs", "2", "--save", ckpt}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Nothing to train: the run has trained its 2 epochs (--epochs 2); a larger --epochs trains on") {
		t.Fatalf("resumed past its last epoch:\n%s", out.String())
	}
	for _, not := range []string{"Training 2 epochs", "Train Epoch", "Training time", "Saved weights"} {
		if strings.Contains(out.String(), not) {
			t.Fatalf("resumed past its last epoch, the output says %q:\n%s", not, out.String())
		}
	}

	// Resumed under another optimizer: refused before anything is built,
	// naming both optimizers and the way to start from the weights.
	out.Reset()
	err = run(context.Background(), []string{"--synthetic", "--resume", ckpt, "--epochs", "3", "--optimizer", "sgd"}, &out)
	if want := "--optimizer sgd, but " + ckpt + " was trained with adadelta, whose state another optimizer cannot take up: resume with --optimizer adadelta, or start a new run from its weights with --init " + ckpt; err == nil || err.Error() != want {
		t.Fatalf("resumed with another optimizer: error %v, want %q", err, want)
	}

	// Resumed as a pipeline: refused before anything is built, not with a
	// split point count the user never gave (train.Config.CutAsSaved).
	out.Reset()
	err = run(context.Background(), []string{"--synthetic", "--resume", ckpt, "--epochs", "3", "--pipeline", "2"}, &out)
	if want := "--pipeline 2, but " + ckpt + " was saved by a run without a pipeline: resume it without --pipeline"; err == nil || err.Error() != want {
		t.Fatalf("resumed as a pipeline: error %v, want %q", err, want)
	}
}

func TestTrainCommandErrors(t *testing.T) {
	empty := t.TempDir()
	emptyIDX := filepath.Join(t.TempDir(), "digits")
	none := &data.Dataset{Shape: [3]int{1, 28, 28}}
	if err := data.WriteMNIST(emptyIDX, none, none); err != nil {
		t.Fatal(err)
	}
	// Weights without the training state beside them (as PyTorch or a
	// shared model file come).
	weights := filepath.Join(t.TempDir(), "w.safetensors")
	if err := safetensors.WriteFile(weights, []safetensors.Tensor{{Name: "fc.bias", DType: safetensors.F32, Shape: []int{2}, F32: []float32{1, 2}}}, nil); err != nil {
		t.Fatal(err)
	}
	// An image given where the checkpoint goes.
	photo := filepath.Join(t.TempDir(), "photo.png")
	if err := os.WriteFile(photo, []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--model", "vgg"}, `--model "vgg": want one of`},
		{[]string{"--batch", "32"}, `unknown flag --batch (did you mean --batch-size, --microbatches or --test-batch-size?); "train -h" lists the flags`},
		{[]string{"--epochs", "three"}, `--epochs "three": want a whole number`},
		{[]string{"--lr=0,1"}, `--lr "0,1": want a number`},
		{[]string{"--pipeline", "2", "--split", "3,x"}, `--split "3,x": "x" is not a layer index: want whole numbers separated by commas`},
		{[]string{"--data", empty}, "neither MNIST-format"},
		{[]string{"--model", "cifarnet", "--data", "/nonexistent"}, "--data: stat /nonexistent: no such file or directory"},
		{[]string{"--synthetic", "--epochs", "1", "--metrics", "/nonexistent/m.jsonl"}, "--metrics: open /nonexistent/m.jsonl: no such file or directory"},
		{[]string{"--synthetic", "--epochs", "1", "--tensorboard", "/proc/runs"}, "--tensorboard: mkdir /proc/runs"},
		{[]string{"--synthetic", "--batch-size", "0"}, "--batch-size 0"},
		{[]string{"--synthetic", "--lr", "inf"}, "--lr +Inf"},
		{[]string{"--synthetic", "--lr", "nan"}, "--lr NaN"},
		{[]string{"--synthetic", "--weight-decay", "nan"}, "--weight-decay NaN"},
		{[]string{"--synthetic", "--momentum", "-0.5"}, "--momentum -0.5"},
		{[]string{"--synthetic", "--gamma", "nan"}, "--gamma NaN"},
		{[]string{"--synthetic", "--accumulate", "-2"}, "--accumulate -2"},
		{[]string{"--synthetic", "--pipeline", "-2"}, "--pipeline -2"},
		{[]string{"--synthetic", "--pipeline", "2", "--train-samples", "64"}, "pipeline: 2 stages need a rank each, and this job has 1: start it with gorun -np 2"},
		{[]string{"--synthetic", "--pipeline", "2", "--microbatches", "-1"}, "--microbatches -1"},
		{[]string{"--synthetic", "--threads", "-3"}, "--threads -3"},
		{[]string{"--synthetic", "--workers", "-1"}, "--workers -1"},
		{[]string{"--synthetic", "--train-samples", "-5"}, "--train-samples -5"},
		{[]string{"--synthetic", "--test-samples", "-1"}, "--test-samples -1"},
		{[]string{"--synthetic", "--log-interval", "-1"}, "--log-interval -1"},
		{[]string{"--synthetic", "--image-size", "0"}, "--image-size 0: want at least 1"},
		{[]string{"--synthetic", "--batch-size", "100000000"}, "training data (--batch-size 100000000): data: the loader's 6 batches of 100000000 images of 1×28×28 would take 1.7 TiB, more than the"},
		{[]string{"--synthetic", "--test-batch-size", "100000000"}, "test data (--test-batch-size 100000000): data: the loader's 4 batches of 100000000 images of 1×28×28"},
		{[]string{"--synthetic", "--nesterov"}, "--nesterov with --optimizer adadelta --momentum 0: Nesterov momentum is SGD's"},
		{[]string{"--synthetic", "--num-classes", "7"}, "model mnist has 7 outputs (--num-classes); synthetic-mnist has 10 classes"},
		{[]string{"--synthetic", "--num-classes", "-1"}, "--num-classes -1"},
		{[]string{"--synthetic", "--epochs", "1", "--init", "/nonexistent/w.pth"}, "initial weights: open /nonexistent/w.pth: no such file or directory"},
		{[]string{"--synthetic", "--zero-init-residual"}, "zero-init-residual: mnist has no residual blocks"},
		{[]string{"--synthetic", "--grad-compression", "zstd"}, "--grad-compression \"zstd\": want none, bf16, fp16 or powersgd:RANK"},
		{[]string{"--synthetic", "--grad-compression", "powersgd:0"}, "the rank after powersgd: must be a whole number ≥ 1"},
		{[]string{"--synthetic", "--label-smoothing", "1"}, "--label-smoothing 1: want at least 0 and below 1"},
		{[]string{"--synthetic", "--precision", "fp8"}, `--precision "fp8": want fp32, tf32, bf16 or fp16`},
		{[]string{"--synthetic", "--precision", "bf16", "--tf32"}, "--tf32 with --precision bf16: choose one"},
		{[]string{"--synthetic", "--precision", "fp16", "--pipeline", "2"}, "--precision fp16 with --pipeline 2: not built for pipelines"},
		{[]string{"--synthetic", "--warmup-epochs", "3"}, "--warmup-epochs 3 with --epochs 3: want 0 or more, fewer than the epochs"},
		{[]string{"--synthetic", "--warmup-epochs", "-1"}, "--warmup-epochs -1"},
		{[]string{"--synthetic", "--no-decay-norm-bias"}, "--no-decay-norm-bias without --weight-decay"},
		{[]string{"--synthetic", "--label-smoothing", "nan"}, "--label-smoothing NaN"},
		{[]string{"--synthetic", "--label-smoothing", "0.1"}, "model mnist is trained with NLL loss"},
		{[]string{"--synthetic", "--pipeline", "2", "--schedule", "zigzag"}, `--schedule "zigzag": want gpipe, 1f1b, zb, zb-h2 or interleaved`},
		{[]string{"--synthetic", "--schedule", "zb-h2"}, "--schedule zb-h2 without --pipeline N: it applies to pipelines of 2 or more stages only"},
		{[]string{"--synthetic", "--pipeline", "1", "--microbatches", "4"}, "--microbatches 4 without --pipeline N"},
		{[]string{"--synthetic", "--balance", "params"}, "--balance params without --pipeline N"},
		{[]string{"--synthetic", "--pipeline", "2", "--schedule", "zb-h2", "--chunks", "2"}, "--chunks 2 with --schedule zb-h2: chunks are for the interleaved schedule"},
		{[]string{"--synthetic", "--pipeline", "2", "--chunks", "3"}, "--chunks 3 with --schedule gpipe: chunks are for the interleaved schedule"},
		{[]string{"--synthetic", "--pipeline", "2", "--schedule", "interleaved", "--chunks", "1"}, "--chunks 1: want 2 or more chunks per stage"},
		{[]string{"--synthetic", "--pipeline", "2", "--schedule", "interleaved", "--split", "5"}, "--split [5]: a pipeline of 2 stages of 2 chunks each needs 3 split points"},
		{[]string{"--synthetic", "--scheduler", "linear"}, `--scheduler "linear"`},
		{[]string{"--synthetic", "--optimizer", "lbfgs", "--train-samples", "10"}, `optimizer "lbfgs"`},
		{[]string{"--synthetic", "--data", empty}, "choose one"},
		{[]string{"--resume", filepath.Join(empty, "none.safetensors")}, "--resume " + empty + "/none.safetensors: no checkpoint there (neither " + empty + "/none.safetensors nor its training state " + empty + "/none.safetensors.train exists)"},
		{[]string{"--resume", weights}, "--resume " + weights + ": weights without a run's training state (" + weights + ".train, which --save writes beside them, is missing): to start a new run from these weights, use --init " + weights},
		{[]string{"--resume", weights + ".train"}, "--resume " + weights + ".train: that is the training state of the checkpoint " + weights + ": resume from " + weights},
		{[]string{"--resume", photo}, "--resume " + photo + ": " + photo + " is a PNG image, not weights"},
		{[]string{"extra"}, `unexpected arguments ["extra"]: train takes flags only ("train -h" lists them)`},
		{[]string{"--synthetic", "--save-every", "5"}, "--save-every 5 needs --save PATH"},
		{[]string{"--synthetic", "--save-every", "-1", "--save", filepath.Join(empty, "x")}, "--save-every -1"},
		{[]string{"--synthetic", "--resume", "auto"}, "--resume auto resumes from --save's path"},
		{[]string{"--data", emptyIDX}, filepath.Join(emptyIDX, "train-images-idx3-ubyte.gz") + ": 0 images"},
		{[]string{"--synthetic", "--on-failure", "ignore"}, `--on-failure "ignore": want one of abort, restart, shrink`},
		{[]string{"--synthetic", "--on-failure", "restart"}, "--on-failure restart: a restarted job resumes from the last checkpoint: give --save PATH"},
		{[]string{"--synthetic", "--on-failure", "shrink", "--pipeline", "2"}, "--on-failure shrink with --pipeline 2: a pipeline cannot go on without a lost rank"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		err := run(context.Background(), c.args, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("train %v: error %v, want %q", c.args, err, c.want)
		}
		if strings.Contains(out.String(), "Training ") {
			t.Errorf("train %v: printed the banner before failing:\n%s", c.args, out.String())
		}
	}
}

// TestOnFailureFromLauncher: --on-failure defaults to GORUN_ON_FAILURE,
// named in its errors, and shrink under gorun needs gorun's consent (else
// gorun stops every rank when one fails).
func TestOnFailureFromLauncher(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"GORUN_ON_FAILURE": "retry"}, nil, `GORUN_ON_FAILURE "retry": want one of abort, restart, shrink`},
		{map[string]string{"GORUN_ON_FAILURE": "restart"}, nil, "GORUN_ON_FAILURE restart: a restarted job resumes from the last checkpoint"},
		{map[string]string{"GORUN_LAUNCHER_PID": "1", "GORUN_ON_FAILURE": "abort"}, []string{"--on-failure", "shrink"}, "--on-failure shrink under gorun needs gorun -on-failure shrink"},
	} {
		t.Run(fmt.Sprint(c.env), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, _, err := parseFlags(append([]string{"--synthetic"}, c.args...))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	t.Setenv("GORUN_ON_FAILURE", "restart")
	_, o, err := parseFlags([]string{"--synthetic", "--save", filepath.Join(t.TempDir(), "x.safetensors")})
	if err != nil || o.onFailure != "restart" {
		t.Errorf("GORUN_ON_FAILURE=restart: %v, on failure %q", err, o.onFailure)
	}
}

// TestSaveCheckedBeforeTraining: a --save path that cannot be written
// fails the run before its first epoch, naming the path, and leaves
// nothing behind (a directory path used to cost an epoch and leave a stray
// PATH.train).
func TestSaveCheckedBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, save, want string
	}{
		{"missing directory", filepath.Join(dir, "nope", "net.safetensors"), "does not exist"},
		{"a directory", sub, "it is a directory"},
		{"under a file", filepath.Join(file, "net.safetensors"), "is not a directory"},
		{"read-only file system", "/proc/net.safetensors", "/proc/net.safetensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{"--synthetic", "--train-samples", "64", "--test-samples", "0", "--epochs", "1", "--threads", "1", "--save", c.save}, &out)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.save) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, c.save, c.want)
			}
			if strings.Contains(out.String(), "Train Epoch") || strings.Contains(out.String(), "Training time") {
				t.Errorf("trained, or printed a run's times, before failing:\n%s", out.String())
			}
		})
	}
	var left []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir && p != file && p != sub {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestResNetOptions: --zero-init-residual, --nesterov and --num-classes
// reach the run and its checkpoint.
func TestResNetOptions(t *testing.T) {
	save := filepath.Join(t.TempDir(), "r.safetensors")
	var out bytes.Buffer
	err := run(context.Background(), []string{"--model", "resnet18", "--synthetic", "--train-samples", "32", "--test-samples", "16", "--batch-size", "16",
		"--threads", "1", "--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--zero-init-residual", "--num-classes", "10", "--label-smoothing", "0.1", "--epochs", "2", "--warmup-epochs", "1",
		"--scheduler", "cosine", "--lr", "0.5", "--weight-decay", "1e-4", "--no-decay-norm-bias", "--save", save}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m, err := checkpoint.ReadTrainMeta(save)
	if err != nil {
		t.Fatal(err)
	}
	var cfg train.Config
	if err := json.Unmarshal(m.Config, &cfg); err != nil || !cfg.Nesterov || !cfg.ZeroInitResidual || cfg.NumClasses != 10 || cfg.LabelSmoothing != 0.1 || cfg.WarmupEpochs != 1 || !cfg.NoDecayNormBias {
		t.Errorf("saved configuration %s: %v", m.Config, err)
	}
	// Epoch 1 warms up from 1% (0.005), epoch 2 starts the cosine at 0.5.
	if !strings.Contains(out.String(), "sgd lr 0.5 momentum 0.9 (Nesterov) weight decay 0.0001 (not on batch norm and biases), linear warm-up over 1 epochs, cosine annealing over 1 epochs, label smoothing 0.1") || m.LR != 0 {
		t.Errorf("the run's description or final rate (%v, want 0 after the cosine's one epoch):\n%s", m.LR, out.String())
	}
}

// TestRecompute: --recompute trains a ResNet to the same losses and
// accuracy, to the last printed digit, as keeping every activation, and
// says so in the run's description; a model without residual blocks is an
// error.
func TestRecompute(t *testing.T) {
	results := func(extra ...string) (string, string) {
		var out bytes.Buffer
		args := append([]string{"--model", "resnet18", "--synthetic", "--train-samples", "48", "--test-samples", "16", "--batch-size", "16",
			"--threads", "1", "--epochs", "2", "--log-interval", "1"}, extra...)
		if err := run(context.Background(), args, &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		var keep []string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "Loss:") || strings.HasPrefix(l, "Test set:") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n"), out.String()
	}
	want, _ := results()
	got, out := results("--recompute")
	if got != want || len(want) == 0 {
		t.Errorf("with --recompute:\n%s\nwithout:\n%s", got, want)
	}
	if !strings.Contains(out, "(residual blocks recomputed in backward)") {
		t.Errorf("the run's description does not mention --recompute:\n%s", out)
	}
	var errOut bytes.Buffer
	if err := run(context.Background(), []string{"--synthetic", "--recompute"}, &errOut); err == nil || !strings.Contains(err.Error(), "recompute: mnist has no residual blocks") {
		t.Errorf("--recompute on mnist: %v", err)
	}
}

// TestBadImageInFolder: a file in an image folder that is not an image
// stops training with an error naming it; with --skip-bad-images the
// epoch goes on without it and its end says how many were skipped, with
// one of them named. CIFARNet takes the folder's images at 32×32.
func TestBadImageInFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "photos")
	tr, _ := data.Synthetic(data.FormatCIFAR10, 60, 1)
	te, _ := data.Synthetic(data.FormatCIFAR10, 40, 2)
	if err := data.WriteImageFolder(dir, tr, te, 40, 36, ".jpg"); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "train", "airplane", "000000.jpg")
	if err := os.WriteFile(bad, []byte("<html>not an image</html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A WebP file, which torchvision reads and gorun does not: left out
	// when the folder is read, and the run's description says so.
	if err := os.WriteFile(filepath.Join(dir, "train", "cat", "photo.webp"), []byte("RIFF"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--model", "cifarnet", "--data", dir, "--image-size", "32", "--epochs", "1", "--batch-size", "16", "--threads", "1", "--workers", "2", "--progress", "lines"}
	var out bytes.Buffer
	if err := run(context.Background(), args, &out); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "--skip-bad-images") {
		t.Fatalf("a bad image: %v; want an error naming %s and --skip-bad-images", err, bad)
	}
	out.Reset()
	if err := run(context.Background(), append(args, "--skip-bad-images"), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"augmented (RandomResizedCrop 32, flip)", "Images decoded from their files by 2 workers; JPEG: ", "Epoch 1: skipped 1 unreadable images, e.g. " + bad, "Accuracy: ",
		"Data imagefolder:photos, training split: 1 image file left out that torchvision's ImageFolder would read (.webp 1): gorun decodes JPEG and PNG"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBadStatusFD: a GORUN_STATUS_FD that is not a number, or names no
// open file descriptor, is an error naming the variable before any
// training; with --progress lines it is not looked at.
func TestBadStatusFD(t *testing.T) {
	for _, v := range []string{"abc", "1", "97"} {
		t.Setenv("GORUN_STATUS_FD", v)
		var out bytes.Buffer
		err := run(context.Background(), []string{"--synthetic", "--train-samples", "64", "--test-samples", "16", "--epochs", "1", "--threads", "1"}, &out)
		if err == nil || !strings.Contains(err.Error(), "GORUN_STATUS_FD="+v+": want an open file descriptor") {
			t.Errorf("GORUN_STATUS_FD=%s: %v", v, err)
		}
		if strings.Contains(out.String(), "Epoch 1:") {
			t.Errorf("GORUN_STATUS_FD=%s: trained anyway:\n%s", v, out.String())
		}
	}
	t.Setenv("GORUN_STATUS_FD", "97")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--synthetic", "--train-samples", "64", "--test-samples", "16", "--epochs", "1", "--threads", "1", "--progress", "lines"}, &out); err != nil {
		t.Errorf("--progress lines with a bad GORUN_STATUS_FD: %v", err)
	}
}

// TestSyntheticFormat: --synthetic makes data shaped for the model.
func TestSyntheticFormat(t *testing.T) {
	for _, c := range []struct {
		model string
		want  data.Format
	}{
		{"mnist", data.FormatMNIST},
		{"cifarnet", data.FormatCIFAR10},
		{"resnet18", data.FormatCIFAR10},
		{"resnet34", data.FormatImageNet},
		{"resnet50", data.FormatImageNet},
		{"resnet152", data.FormatImageNet},
		{"no-such-model", data.FormatCIFAR10},
	} {
		if got := syntheticFormat(c.model); got != c.want {
			t.Errorf("syntheticFormat(%s) = %s, want %s", c.model, got, c.want)
		}
	}
}

// TestCIFARWhereTorchvisionPutsIt: without --data, a CIFAR model trains on
// the Python version in data/cifar-10-batches-py, where the workshops'
// torchvision.datasets.CIFAR10(root="data", download=True) leaves it
// (three images a batch: train/data's fixtures).
func TestCIFARWhereTorchvisionPutsIt(t *testing.T) {
	src, err := filepath.Abs("../../train/data/testdata/cifar-python/py2")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	dir := filepath.Join("data", "cifar-10-batches-py")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data_batch_1", "data_batch_2", "test_batch"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--model", "cifarnet", "--epochs", "1", "--batch-size", "3", "--threads", "1"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if want := "Test set: Average loss: "; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "6 training and 3 test images") {
		t.Fatalf("output lacks %q or the data's size:\n%s", want, out.String())
	}
}

// TestDataParallelSettingsAlone: a run given data-parallel settings but
// started as one process trains, and says those settings had no effect.
func TestDataParallelSettingsAlone(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--synthetic", "--model", "cifarnet", "--train-samples", "32", "--test-samples", "16", "--epochs", "1", "--threads", "1",
		"--sync-bn", "--grad-compression", "fp16"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if want := "No data-parallel replicas: --sync-bn and --grad-compression fp16 without effect (they act between replicas: run more ranks, gorun -np N)"; !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}
}

// TestProgressOnOpenMPIsTerminal: --progress auto draws a bar on a
// terminal, but not on the terminal Open MPI gives its ranks, which
// mpirun copies to wherever its own output goes (a job's log file).
// (/dev/null stands in for a terminal: a character device.)
func TestProgressOnOpenMPIsTerminal(t *testing.T) {
	t.Setenv("GORUN_STATUS_FD", "")
	tty, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	for _, tc := range []struct {
		source string
		bar    bool
	}{{"single", true}, {"gorun/torchrun", true}, {"slurm", true}, {"openmpi", false}} {
		r, err := reporters(options{progress: "auto"}, train.Config{Epochs: 1, LogInterval: 10}, tty, -1, tc.source)
		if err != nil {
			t.Fatal(err)
		}
		_, bar := r.(report.Multi)[0].(*report.Progress)
		if bar != tc.bar {
			t.Errorf("ranks from %s: a bar %v, want %v (%T)", tc.source, bar, tc.bar, r.(report.Multi)[0])
		}
	}
}
