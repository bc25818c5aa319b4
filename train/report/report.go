package report

import (
	"errors"
	"time"
)

// Step describes one training batch.
type Step struct {
	Epoch   int
	Batch   int // 0-based index in the epoch
	Batches int // batches in the epoch
	// Seen is the number of samples of the epoch before this batch, over
	// all ranks; Total the epoch's samples.
	Seen, Total int
	// GlobalStep counts optimizer steps since the run began.
	GlobalStep int64
	Loss       float64
	LR         float32
	// ImagesPerSec is the throughput since the epoch began.
	ImagesPerSec float64
	// Elapsed is the time since the epoch began.
	Elapsed time.Duration
}

// Epoch summarises a finished epoch.
type Epoch struct {
	Epoch      int
	GlobalStep int64
	TrainLoss  float64 // mean over the epoch's batches
	// Test results; TestTotal is 0 when there was no evaluation.
	TestLoss    float64
	TestCorrect int
	TestTotal   int
	// TestTop5 counts the test samples whose class was among the 5 best;
	// Classes is the model's class count (reports show top-5 accuracy for
	// more than 10 classes, as ImageNet's runs do).
	TestTop5     int
	Classes      int
	Seconds      float64
	ImagesPerSec float64
	LR           float32
	// Skipped counts the training images left out because their files
	// could not be read (--skip-bad-images), over all ranks;
	// SkippedExample is one of them, the error naming its file.
	Skipped        int
	SkippedExample string
	// TestSkipped counts the test images left out likewise.
	TestSkipped int
	// Times is where the epoch's time went on the reporting rank, in the
	// order of the run's final breakdown: data, forward, backward,
	// optimizer, evaluation, checkpoint, and in data-parallel runs
	// allreduce (the time the gradient all-reduces ran) and
	// allreduce_wait (the part of it steps waited for after backward).
	Times []Part
}

// Part is a named share of an epoch's time.
type Part struct {
	Name    string
	Seconds float64
}

// TestAccuracy returns TestCorrect/TestTotal.
func (e Epoch) TestAccuracy() float64 {
	if e.TestTotal == 0 {
		return 0
	}
	return float64(e.TestCorrect) / float64(e.TestTotal)
}

// Reporter receives a run's progress. Step is called for every batch; a
// reporter decides how often to show it.
type Reporter interface {
	Step(s Step) error
	Epoch(e Epoch) error
	Close() error
}

// Multi sends everything to several reporters.
type Multi []Reporter

// Step implements Reporter.
func (m Multi) Step(s Step) error {
	var errs []error
	for _, r := range m {
		errs = append(errs, r.Step(s))
	}
	return errors.Join(errs...)
}

// Epoch implements Reporter.
func (m Multi) Epoch(e Epoch) error {
	var errs []error
	for _, r := range m {
		errs = append(errs, r.Epoch(e))
	}
	return errors.Join(errs...)
}

// Close implements Reporter.
func (m Multi) Close() error {
	var errs []error
	for _, r := range m {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// TestTop5Accuracy returns TestTop5/TestTotal.
func (e Epoch) TestTop5Accuracy() float64 {
	if e.TestTotal == 0 {
		return 0
	}
	return float64(e.TestTop5) / float64(e.TestTotal)
}

// ShowsTop5 reports whether reports show top-5 accuracy: for more than 10
// classes.
func (e Epoch) ShowsTop5() bool { return e.TestTotal > 0 && e.Classes > 10 }
