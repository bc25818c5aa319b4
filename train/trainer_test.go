package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

func synthetic(t *testing.T, f data.Format, nTrain, nTest int) (*data.Dataset, *data.Dataset) {
	t.Helper()
	train, err := data.Synthetic(f, nTrain, 1)
	if err != nil {
		t.Fatal(err)
	}
	test, err := data.Synthetic(f, nTest, 2)
	if err != nil {
		t.Fatal(err)
	}
	return train, test
}

func newTrainer(t *testing.T, cfg Config, train, test *data.Dataset, opts ...Option) *Trainer {
	t.Helper()
	be := cpu.New(cfg.Threads)
	t.Cleanup(be.Close)
	tr, err := New(context.Background(), cfg, be, train, test, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// TestTrainingLearns trains the MNIST net with its default settings on
// generated data and checks that it learns: test accuracy far above the
// 10% of guessing and a falling loss.
// resumeErr is the error of setting up cfg's run resumed from path.
func resumeErr(cfg Config, train, test *data.Dataset, path string) error {
	be := cpu.New(cfg.Threads)
	defer be.Close()
	tr, err := New(context.Background(), cfg, be, train, test, ResumeFrom(path))
	if err == nil {
		tr.Close()
	} else if tr != nil {
		return fmt.Errorf("New returned a trainer with the error %w", err)
	}
	return err
}

func TestTrainingLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("two epochs of training under the race detector take minutes; the main pass runs this, and TestResumeIsBitIdentical trains under -short")
	}
	train, test := synthetic(t, data.FormatMNIST, 1536, 512)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads = 2, 2
	tr := newTrainer(t, cfg, train, test)
	before, err := tr.Evaluate(context.Background(), test)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := tr.last
	if after.TestAccuracy() < 0.9 || after.TestLoss > before.Loss/3 {
		t.Fatalf("after 2 epochs: accuracy %.3f, loss %.3f (before: %.3f, %.3f)", after.TestAccuracy(), after.TestLoss, before.Accuracy(), before.Loss)
	}
	tm := tr.Times()
	if tm.Forward <= 0 || tm.Backward <= 0 || tm.Optimizer <= 0 || tm.Eval <= 0 || tm.Total < tm.Forward+tm.Backward {
		t.Fatalf("time breakdown %+v", tm)
	}
	// The confusion matrix accounts for every test image.
	sum := 0
	for _, row := range before.Confusion {
		for _, n := range row {
			sum += n
		}
	}
	if sum != test.Len() || before.Total != test.Len() {
		t.Fatalf("confusion matrix holds %d of %d images", sum, test.Len())
	}
}

// stateOf returns copies of every model and optimizer value.
func stateOf(tr *Trainer) map[string][]float32 {
	out := map[string][]float32{}
	add := func(prefix string, vars []nn.Var) {
		for _, v := range vars {
			if v.Count != nil {
				out[prefix+v.Name] = []float32{float32(*v.Count)}
			} else {
				out[prefix+v.Name] = slices.Clone(v.Value.Data)
			}
		}
	}
	add("model.", tr.model.Net.State())
	add("opt.", tr.opt.State())
	return out
}

// sameState fails the test unless resumed ends with straight's weights and
// optimizer state, bit for bit.
func sameState(t *testing.T, straight, resumed *Trainer) {
	t.Helper()
	want, got := stateOf(straight), stateOf(resumed)
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Fatalf("%s differs between the straight and the resumed run", name)
		}
	}
}

// TestResumeIsBitIdentical checks that training 3 epochs straight and
// training 1 epoch, saving, then resuming in a fresh trainer for the other
// 2 give bit-identical weights and optimizer state, for each optimizer and
// schedule (dropout counters, momentum buffers and the schedule included).
func TestResumeIsBitIdentical(t *testing.T) {
	images, epochs := 320, 3
	cases := []struct{ optimizer, scheduler string }{{"adadelta", "step"}, {"sgd", "cosine"}, {"adam", "none"}}
	if testing.Short() {
		// The race-detector pass: one optimizer, a shorter run (a resume
		// in the middle of a schedule either way).
		cases, images, epochs = cases[:1], 160, 2
	}
	train, test := synthetic(t, data.FormatMNIST, images, 64)
	for _, c := range cases {
		t.Run(c.optimizer, func(t *testing.T) {
			cfg, _ := Defaults("mnist")
			cfg.Epochs, cfg.Threads, cfg.BatchSize, cfg.Optimizer, cfg.Scheduler, cfg.Momentum = epochs, 2, 32, c.optimizer, c.scheduler, 0.9
			if c.optimizer != "adadelta" {
				cfg.LR = 0.01
			}
			straight := newTrainer(t, cfg, train, test)
			if err := straight.Run(context.Background()); err != nil {
				t.Fatal(err)
			}

			path := filepath.Join(t.TempDir(), "net.safetensors")
			first := cfg
			first.Epochs = 1
			a := newTrainer(t, first, train, test)
			a.SavePath = path
			if err := a.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			b := newTrainer(t, cfg, train, test, ResumeFrom(path))
			if b.Epoch() != 1 || b.step != a.step {
				t.Fatalf("resumed at epoch %d step %d, want 1 and %d", b.Epoch(), b.step, a.step)
			}
			if err := b.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			sameState(t, straight, b)
			if straight.opt.LR() != b.opt.LR() {
				t.Fatalf("learning rate %v after resuming, %v straight", b.opt.LR(), straight.opt.LR())
			}
		})
	}
}

// TestResumeMidEpochIsBitIdentical: a run checkpointing every few steps
// (SaveEvery) and stopped at several points, mid-epoch and across an
// epoch's end, then resumed in a fresh trainer, ends with the same weights
// and optimizer state, bit for bit, as one run straight through; with and
// without gradient accumulation (dropout and a learning-rate schedule on).
func TestResumeMidEpochIsBitIdentical(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 320, 64)
	accumulates := []int{1, 3}
	if testing.Short() {
		accumulates = accumulates[1:] // the race run: accumulation's path includes the plain one
	}
	for _, accumulate := range accumulates {
		cfg, _ := Defaults("mnist")
		cfg.Epochs, cfg.Threads, cfg.BatchSize, cfg.Accumulate = 2, 2, 32, accumulate
		straight := newTrainer(t, cfg, train, test)
		if err := straight.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		perEpoch := (10 + accumulate - 1) / accumulate // optimizer steps per epoch: 10 batches
		const every = 2
		stops := []int64{2, 4, int64(perEpoch) + 1, int64(perEpoch) + 2}
		if testing.Short() {
			stops = []int64{4, int64(perEpoch) + 1} // (one within each epoch: the race run)
		}
		for _, stop := range stops {
			t.Run(fmt.Sprintf("accumulate=%d/stop=%d", accumulate, stop), func(t *testing.T) {
				path := interruptedRun(t, cfg, train, test, every, stop)
				b := newTrainer(t, cfg, train, test, ResumeFrom(path))
				wantStep := stop - stop%every
				if last := int64(perEpoch); stop > last && wantStep < last {
					wantStep = last // the epoch's end saved too
				}
				if b.Step() != wantStep {
					t.Fatalf("resumed at step %d, want %d", b.Step(), wantStep)
				}
				if err := b.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				sameState(t, straight, b)
				if b.last.TrainLoss != straight.last.TrainLoss {
					t.Errorf("last epoch's training loss %v resumed, %v straight", b.last.TrainLoss, straight.last.TrainLoss)
				}
			})
		}
	}
}

// interruptedRun trains cfg saving a checkpoint every `every` optimizer
// steps, stops it after step stop as a killed run would stop, and returns
// the checkpoint's path.
func interruptedRun(t *testing.T, cfg Config, train, test *data.Dataset, every int, stop int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "net.safetensors")
	a := newTrainer(t, cfg, train, test)
	a.SavePath, a.SaveEvery = path, every
	killed := errors.New("killed")
	a.AfterStep = func(step int64) error {
		if step == stop {
			return killed
		}
		return nil
	}
	if err := a.Run(context.Background()); !errors.Is(err, killed) {
		t.Fatalf("the interrupted run: %v", err)
	}
	return path
}

func TestCheckpointErrors(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 64, 32)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads = 1, 1
	tr := newTrainer(t, cfg, train, test)
	dir := t.TempDir()
	path := filepath.Join(dir, "net.safetensors")
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Save(path); err != nil {
		t.Fatal(err)
	}
	// The weights file alone describes the run.
	meta, _, err := checkpoint.ReadMeta(path)
	if err != nil || meta.Model != "mnist" || meta.Epoch != 1 || meta.Dataset != "synthetic-mnist" || len(meta.DropoutCalls) != 2 {
		t.Fatalf("meta %+v, %v", meta, err)
	}

	other := cfg
	other.Optimizer = "sgd"
	if err := resumeErr(other, train, test, path); err == nil || !strings.Contains(err.Error(), "optimizer") {
		t.Fatalf("resuming Adadelta state into SGD: %v", err)
	}
	cifar, cifarTest := synthetic(t, data.FormatCIFAR10, 8, 8)
	cc, _ := Defaults("cifarnet")
	cc.Threads = 1
	if err := resumeErr(cc, cifar, cifarTest, path); err == nil || !strings.Contains(err.Error(), "holds model mnist") {
		t.Fatalf("resuming mnist into cifarnet: %v", err)
	}
	// A damaged training state is refused.
	b, _ := os.ReadFile(checkpoint.TrainPath(path))
	os.WriteFile(checkpoint.TrainPath(path), b[:len(b)/2], 0o644)
	if err := resumeErr(cfg, train, test, path); err == nil || !strings.Contains(err.Error(), checkpoint.TrainPath(path)) {
		t.Fatalf("truncated training state: %v", err)
	}
	os.Remove(checkpoint.TrainPath(path))
	if err := resumeErr(cfg, train, test, path); err == nil || !strings.Contains(err.Error(), "cannot resume") {
		t.Fatalf("missing training state: %v", err)
	}
	// Data of the wrong shape for the model is refused up front.
	if _, err := New(context.Background(), cfg, cpu.New(1), cifar, nil); err == nil || !strings.Contains(err.Error(), "takes 1×28×28 images") {
		t.Fatalf("CIFAR data for the MNIST net: %v", err)
	}
}

// TestClassifier saves a trained model and classifies with the loaded
// checkpoint: the predictions match the trainer's own model, and the
// checkpoint's evaluation matches the trainer's.
func TestClassifier(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 512, 128)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads = 1, 1
	tr := newTrainer(t, cfg, train, test)
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "net.safetensors")
	if err := tr.Save(path); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(1)
	defer be.Close()
	c, err := LoadClassifier(path, "", "", be)
	if err != nil {
		t.Fatal(err)
	}
	if c.Dataset != "synthetic-mnist" || c.Classes[3] != "3" {
		t.Fatalf("classifier for %q with classes %v", c.Dataset, c.Classes)
	}
	ev, err := c.Evaluate(context.Background(), test, 50)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tr.Evaluate(context.Background(), test)
	if ev.Correct != want.Correct || !slices.EqualFunc(ev.Confusion, want.Confusion, slices.Equal) {
		t.Fatalf("checkpoint evaluates to %d correct, the trainer's model to %d", ev.Correct, want.Correct)
	}
	var images [][]byte
	for i := range 10 {
		images = append(images, test.Image(i))
	}
	for _, k := range []int{0, -5} {
		if _, err := c.Classify(images, k); err == nil || !strings.Contains(err.Error(), "want 1 or more") {
			t.Fatalf("the top %d classes: %v", k, err)
		}
	}
	preds, err := c.Classify(images, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, ps := range preds {
		if len(ps) != 3 || ps[0].Probability < ps[1].Probability || ps[0].Probability > 1 {
			t.Fatalf("image %d: %+v", i, ps)
		}
		if ps[0].Class != argmaxRow(t, tr, test, i) {
			t.Fatalf("image %d: classified %d, the model says %d", i, ps[0].Class, argmaxRow(t, tr, test, i))
		}
	}
	// Plain weights need the model named.
	if _, err := LoadClassifier(path, "cifarnet", "", be); err == nil {
		t.Fatal("MNIST weights loaded into CIFARNet")
	}
}

// argmaxRow runs the trainer's model on test image i alone.
func argmaxRow(t *testing.T, tr *Trainer, ds *data.Dataset, i int) int {
	one := ds.Head(i + 1)
	one = &data.Dataset{Shape: one.Shape, Images: one.Image(i), Labels: one.Labels[i : i+1], Classes: one.Classes, Mean: one.Mean, Std: one.Std}
	l, _ := data.NewLoader(one, 1, data.Plain(one), data.LoaderConfig{Prefetch: 1})
	l.Start(0, []int{0})
	defer l.Stop()
	b, _ := l.Next()
	tr.model.Net.SetTraining(false)
	y, err := tr.model.Net.Forward(b.X)
	if err != nil {
		t.Fatal(err)
	}
	return argmax(y.Data)
}

// TestPipelineNeedsAJob: a pipeline configuration without the job's
// group is refused before anything is built.
func TestPipelineNeedsAJob(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 64, 32)
	cfg, _ := Defaults("mnist")
	cfg.Threads, cfg.Pipeline, cfg.Microbatches = 1, 2, 2
	be := cpu.New(1)
	defer be.Close()
	tr, err := New(context.Background(), cfg, be, train, test)
	if err == nil || tr != nil || !strings.Contains(err.Error(), "2 stages need a job") {
		t.Fatalf("a 2-stage pipeline alone: %v", err)
	}
}

// TestFP16SkipsOverflowingSteps: with a loss scale too large for the
// gradients, the fp16 run's first step overflows: the optimizer does not
// step (the weights stay), the step counts as skipped, the scale halves.
func TestFP16SkipsOverflowingSteps(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 128, 32)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads, cfg.BatchSize, cfg.Precision = 1, 2, 32, "fp16"
	tr := newTrainer(t, cfg, train, test)
	before := stateOf(tr)
	tr.scaler.Scale = 1 << 100 // the loss gradient itself overflows float16
	stop := errors.New("stop")
	tr.AfterStep = func(int64) error { return stop }
	if err := tr.Run(context.Background()); !errors.Is(err, stop) {
		t.Fatal(err)
	}
	scale, skipped := tr.LossScale()
	if skipped != 1 || scale != 1<<99 {
		t.Errorf("after an overflowing step: %d skipped, scale %v; want 1, 2^99", skipped, scale)
	}
	after := stateOf(tr)
	for name, v := range before {
		if !slices.Equal(v, after[name]) && !strings.HasSuffix(name, "num_batches_tracked") {
			t.Errorf("%s changed in a skipped step", name)
		}
	}
	// With GradScaler's initial scale the same data trains: steps are taken.
	tr2 := newTrainer(t, cfg, train, test)
	if err := tr2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if scale, skipped := tr2.LossScale(); skipped >= 4 || scale <= 0 {
		t.Errorf("a normal fp16 epoch of 4 steps: %d skipped, scale %v", skipped, scale)
	}
	if reflect.DeepEqual(stateOf(tr2), before) {
		t.Error("a normal fp16 epoch left the weights as they were")
	}
}

// TestFP16ResumeIsBitIdentical: the loss scale and its count of good
// steps travel in the checkpoint, so an fp16 run resumed mid-epoch ends
// exactly as one never interrupted.
func TestFP16ResumeIsBitIdentical(t *testing.T) {
	// 10 steps an epoch, 2 epochs; the race run: 3 and 2, resumed at 4.
	n, stop := 320, int64(13)
	if testing.Short() {
		n, stop = 96, 5
	}
	train, test := synthetic(t, data.FormatMNIST, n, 64)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads, cfg.BatchSize, cfg.Precision = 2, 2, 32, "fp16"
	straight := newTrainer(t, cfg, train, test)
	if err := straight.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := interruptedRun(t, cfg, train, test, 2, stop)
	b := newTrainer(t, cfg, train, test, ResumeFrom(path))
	if err := b.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameState(t, straight, b)
	s1, k1 := straight.LossScale()
	s2, _ := b.LossScale()
	if s1 != s2 || straight.scaler.GoodSteps != b.scaler.GoodSteps {
		t.Errorf("loss scale %v (%d good steps) resumed, %v (%d) straight", s2, b.scaler.GoodSteps, s1, straight.scaler.GoodSteps)
	}
	t.Logf("scale %v, %d steps skipped", s1, k1)
}

// TestDescribeNamesTheCrop: the run's description names the padded
// crop's size as the data's, not CIFAR's 32 (ResNet-50 on generated
// ImageNet-shaped images crops 224).
func TestDescribeNamesTheCrop(t *testing.T) {
	cfg, err := Defaults("resnet50")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Threads, cfg.Augment = 1, true
	imgs := data.SyntheticImageNet(2, 1)
	var out strings.Builder
	newTrainer(t, cfg, imgs, nil).Describe(&out, "cpu")
	if want := "augmented (random crop 224 pad 4, flip)"; !strings.Contains(out.String(), want) {
		t.Errorf("description:\n%s\nwant %q", out.String(), want)
	}
}

// replicaOf is the gradient sync of replica r of world, whose sums stay
// its own: what each replica scores before they are combined.
type replicaOf struct {
	alone
	r, n int
}

func (s replicaOf) rank() int  { return s.r }
func (s replicaOf) world() int { return s.n }

// TestEvaluateReplicasPastTheImages: replicas share the test images, each
// scoring every world-th one; a replica past the last image scores none.
// (It scored every image: four ranks on two test images reported 0/6.)
func TestEvaluateReplicasPastTheImages(t *testing.T) {
	train, test := synthetic(t, data.FormatMNIST, 64, 2)
	cfg, _ := Defaults("mnist")
	cfg.Epochs, cfg.Threads = 1, 1
	tr := newTrainer(t, cfg, train, test)
	var totals []int
	for r := range 4 {
		ev, err := tr.compute.evaluate(context.Background(), tr, tr.testLoader, test, replicaOf{r: r, n: 4})
		if err != nil {
			t.Fatal(err)
		}
		totals = append(totals, ev.Total)
	}
	if !slices.Equal(totals, []int{1, 1, 0, 0}) {
		t.Fatalf("4 replicas scored %v of 2 test images, want [1 1 0 0]", totals)
	}
}

// TestSameClasses: a checkpoint resumes only on data of its classes —
// their number always, their names and order where the data names them
// by folders (an image folder, shards); built-in data sets' names
// (Fashion-MNIST's, MNIST's digits) may differ.
func TestSameClasses(t *testing.T) {
	ten := []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}
	renamed := append(slices.Clone(ten[:9]), "zebra")
	folder := func(classes []string) *data.Dataset {
		return &data.Dataset{Name: "imagefolder:photos", Classes: classes, Files: []string{"x.jpg"}}
	}
	for _, c := range []struct {
		name    string
		classes []string
		data    *data.Dataset
		want    string
	}{
		{"same folder", ten, folder(ten), ""},
		{"fewer classes", ten, folder([]string{"cat", "dog", "ship"}), "checkpoint ck.st was trained on 10 classes (airplane, automobile, bird, cat, deer, … 10 in all); imagefolder:photos has 3 (cat, dog, ship): resume it on the data it was trained on, or start a new run from its weights with --init ck.st"},
		{"a class renamed", ten, folder(renamed), `imagefolder:photos's class 9 is "zebra", the checkpoint's "truck"`},
		{"built-in names", data.MNISTClasses, &data.Dataset{Name: "fashion-mnist", Classes: data.FashionMNISTClasses}, ""},
		{"built-in, other count", data.MNISTClasses, &data.Dataset{Name: "cifar10", Classes: ten[:9]}, "cifar10 has 9"},
		{"no classes saved", nil, folder(renamed), ""},
	} {
		err := sameClasses("ck.st", c.classes, c.data)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestDescribeNamesTheEpochs: the run's description says which epochs it
// trains — a resumed run the ones left, not --epochs more.
func TestDescribeNamesTheEpochs(t *testing.T) {
	cfg, err := Defaults("mnist")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Threads = 1
	imgs, err := data.Synthetic(data.FormatMNIST, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		epochs, done int
		want         string
	}{
		{3, 0, "Training 3 epochs from epoch 1, batch"},
		{1, 0, "Training 1 epoch from epoch 1, batch"},
		{3, 1, "Training epochs 2 to 3 of 3, batch"},
		{3, 2, "Training epoch 3 of 3, batch"},
	} {
		cfg.Epochs = c.epochs
		tr := newTrainer(t, cfg, imgs, nil)
		tr.epoch = c.done
		var out strings.Builder
		tr.Describe(&out, "cpu")
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%d epochs, %d done:\n%s\nwant %q", c.epochs, c.done, out.String(), c.want)
		}
	}
}
