package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/gorun/gorun/model/atomicfile"
)

// JSONL writes one JSON object per line: {"kind":"step",...} every
// Interval batches and {"kind":"epoch",...} after each epoch, for scripts
// and notebooks.
type JSONL struct {
	f        *os.File
	w        *bufio.Writer
	enc      *json.Encoder
	Interval int
}

// NewJSONL creates (truncates) the metrics file at path.
func NewJSONL(path string, interval int) (*JSONL, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return newJSONL(f, interval), nil
}

func newJSONL(f *os.File, interval int) *JSONL {
	w := bufio.NewWriter(f)
	return &JSONL{f: f, w: w, enc: json.NewEncoder(w), Interval: max(interval, 1)}
}

// ContinueJSONL opens the metrics file at path for a run resumed from a
// checkpoint taken after step: the records up to that step (the run's
// history until its checkpoint) are kept, those the run that stopped wrote
// after it are dropped, as is a last line the stop cut short, and new
// records are appended. A missing file is created; a negative step is a
// run from its start (NewJSONL).
func ContinueJSONL(path string, interval int, step int64) (*JSONL, error) {
	if step < 0 {
		return NewJSONL(path, interval)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return NewJSONL(path, interval)
	}
	if err != nil {
		return nil, err
	}
	var kept []byte
	for line := range bytes.Lines(b) {
		var r struct {
			Step *int64 `json:"step"`
		}
		if json.Unmarshal(line, &r) != nil || r.Step == nil || *r.Step > step || line[len(line)-1] != '\n' {
			continue
		}
		kept = append(kept, line...)
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(kept)
		return err
	})
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	return newJSONL(f, interval), nil
}

type stepRecord struct {
	Kind         string  `json:"kind"`
	Time         float64 `json:"time"`
	Epoch        int     `json:"epoch"`
	Batch        int     `json:"batch"`
	Step         int64   `json:"step"`
	Samples      int     `json:"samples"`
	Loss         float64 `json:"loss"`
	LR           float32 `json:"lr"`
	ImagesPerSec float64 `json:"images_per_sec"`
}

type epochRecord struct {
	Kind         string   `json:"kind"`
	Time         float64  `json:"time"`
	Epoch        int      `json:"epoch"`
	Step         int64    `json:"step"`
	TrainLoss    float64  `json:"train_loss"`
	TestLoss     *float64 `json:"test_loss,omitempty"`
	TestAccuracy *float64 `json:"test_accuracy,omitempty"`
	TestTop5     *float64 `json:"test_top5_accuracy,omitempty"`
	Seconds      float64  `json:"seconds"`
	ImagesPerSec float64  `json:"images_per_sec"`
	LR           float32  `json:"lr"`
}

func unixNow() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// Step implements Reporter.
func (j *JSONL) Step(s Step) error {
	if s.Batch%j.Interval != 0 {
		return nil
	}
	return j.enc.Encode(stepRecord{"step", unixNow(), s.Epoch, s.Batch, s.GlobalStep, s.Seen, s.Loss, s.LR, s.ImagesPerSec})
}

// Epoch implements Reporter.
func (j *JSONL) Epoch(e Epoch) error {
	r := epochRecord{Kind: "epoch", Time: unixNow(), Epoch: e.Epoch, Step: e.GlobalStep, TrainLoss: e.TrainLoss,
		Seconds: e.Seconds, ImagesPerSec: e.ImagesPerSec, LR: e.LR}
	if e.TestTotal > 0 {
		loss, acc := e.TestLoss, e.TestAccuracy()
		r.TestLoss, r.TestAccuracy = &loss, &acc
		if e.ShowsTop5() {
			top5 := e.TestTop5Accuracy()
			r.TestTop5 = &top5
		}
	}
	if err := j.enc.Encode(r); err != nil {
		return err
	}
	return j.w.Flush()
}

// Close implements Reporter.
func (j *JSONL) Close() error {
	err := j.w.Flush()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}
