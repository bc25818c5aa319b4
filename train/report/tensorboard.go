package report

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"
)

// TensorBoard writes scalar summaries to a TensorBoard event file in Dir,
// so `tensorboard --logdir DIR` plots them: train/loss, train/lr and
// train/images_per_sec every Interval batches; after each epoch
// train/epoch_loss, train/epoch_images_per_sec, test/loss, test/accuracy
// (and test/top5_accuracy where reports show it), and the epoch's time
// breakdown in seconds as time/epoch and time/NAME for each of
// Epoch.Times (time/allreduce and time/allreduce_wait in data-parallel
// runs).
//
// An event file is a sequence of records: the payload length (uint64,
// little-endian), its masked CRC-32C, the payload, and the payload's masked
// CRC-32C. Each payload is a tensorflow.Event protocol buffer; the few
// fields used are encoded by hand.
type TensorBoard struct {
	f        *os.File
	Interval int
	buf      []byte
}

// NewTensorBoard creates an event file in dir (made if missing) for a run
// from its start. Its second event marks the run's start (a SessionLog
// START event at step 0), so that TensorBoard takes the START of a run
// resumed into the same directory as a restart (ContinueTensorBoard):
// newer TensorBoards purge nothing at a run's first START.
func NewTensorBoard(dir string, interval int) (*TensorBoard, error) {
	return newTensorBoard(dir, interval, 0)
}

// ContinueTensorBoard is NewTensorBoard for a run resumed from a
// checkpoint taken after step: its START event is at step+1, from which
// TensorBoard drops what the earlier files of dir hold (as PyTorch's
// SummaryWriter does for its purge_step): the points the run that stopped
// logged after its checkpoint, which the resumed run logs again. A
// negative step is a run from its start (NewTensorBoard).
func ContinueTensorBoard(dir string, interval int, step int64) (*TensorBoard, error) {
	return newTensorBoard(dir, interval, max(step+1, 0))
}

// newTensorBoard creates the event file; start is its START event's step,
// from which TensorBoard drops the earlier files' events.
func newTensorBoard(dir string, interval int, start int64) (*TensorBoard, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	name := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.%s.%d", time.Now().Unix(), host, os.Getpid()))
	// A second file of the same second and process (a run resumed in
	// it) gets a suffix, which sorts it after the first, where
	// TensorBoard reads it.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	for n := 1; errors.Is(err, fs.ErrExist) && n < 1000; n++ {
		f, err = os.OpenFile(fmt.Sprintf("%s.%d", name, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if err != nil {
		return nil, err
	}
	tb := &TensorBoard{f: f, Interval: max(interval, 1)}
	// The first event declares the file version.
	ev := appendEventHeader(nil, wallTime(), 0)
	ev = appendBytesField(ev, 3, []byte("brain.Event:2"))
	if err := tb.writeRecord(ev); err != nil {
		f.Close()
		return nil, err
	}
	// Event{session_log = 7: SessionLog{status = 1: START (1)}}
	ev = appendEventHeader(nil, wallTime(), start)
	ev = appendBytesField(ev, 7, binary.AppendUvarint(appendTag(nil, 1, 0), 1))
	if err := tb.writeRecord(ev); err != nil {
		f.Close()
		return nil, err
	}
	return tb, nil
}

// Path returns the event file's path.
func (t *TensorBoard) Path() string { return t.f.Name() }

func wallTime() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// Scalar writes one scalar value at step.
func (t *TensorBoard) Scalar(tag string, step int64, v float64) error {
	// Summary.Value{tag = 1, simple_value = 2}
	val := appendBytesField(nil, 1, []byte(tag))
	val = appendTag(val, 2, 5)
	val = binary.LittleEndian.AppendUint32(val, math.Float32bits(float32(v)))
	summary := appendBytesField(nil, 1, val) // Summary{value = 1}
	ev := appendEventHeader(t.buf[:0], wallTime(), step)
	ev = appendBytesField(ev, 5, summary) // Event{summary = 5}
	t.buf = ev
	return t.writeRecord(ev)
}

// Step implements Reporter.
func (t *TensorBoard) Step(s Step) error {
	if s.Batch%t.Interval != 0 {
		return nil
	}
	for _, sc := range []struct {
		tag string
		v   float64
	}{{"train/loss", s.Loss}, {"train/lr", float64(s.LR)}, {"train/images_per_sec", s.ImagesPerSec}} {
		if err := t.Scalar(sc.tag, s.GlobalStep, sc.v); err != nil {
			return err
		}
	}
	return nil
}

// Epoch implements Reporter.
func (t *TensorBoard) Epoch(e Epoch) error {
	scalars := []struct {
		tag string
		v   float64
	}{{"train/epoch_loss", e.TrainLoss}, {"train/epoch_images_per_sec", e.ImagesPerSec}, {"time/epoch", e.Seconds}}
	for _, p := range e.Times {
		scalars = append(scalars, struct {
			tag string
			v   float64
		}{"time/" + p.Name, p.Seconds})
	}
	for _, sc := range scalars {
		if err := t.Scalar(sc.tag, e.GlobalStep, sc.v); err != nil {
			return err
		}
	}
	if e.TestTotal == 0 {
		return nil
	}
	if err := t.Scalar("test/loss", e.GlobalStep, e.TestLoss); err != nil {
		return err
	}
	if e.ShowsTop5() {
		if err := t.Scalar("test/top5_accuracy", e.GlobalStep, e.TestTop5Accuracy()); err != nil {
			return err
		}
	}
	return t.Scalar("test/accuracy", e.GlobalStep, e.TestAccuracy())
}

// Close implements Reporter.
func (t *TensorBoard) Close() error {
	err := t.f.Sync()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TensorFlow's masked CRC-32C of b.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

func (t *TensorBoard) writeRecord(payload []byte) error {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(payload)))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	var crc [4]byte
	binary.LittleEndian.PutUint32(crc[:], maskedCRC(payload))
	for _, b := range [][]byte{hdr[:], payload, crc[:]} {
		if _, err := t.f.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// Protocol buffer encoding: a field's key is (number << 3 | wire type).
func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field<<3|wire))
}

func appendBytesField(b []byte, field int, v []byte) []byte {
	b = appendTag(b, field, 2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendEventHeader encodes Event.wall_time (1, double) and Event.step
// (2, int64).
func appendEventHeader(b []byte, wall float64, step int64) []byte {
	b = appendTag(b, 1, 1)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(wall))
	b = appendTag(b, 2, 0)
	return binary.AppendUvarint(b, uint64(step))
}
