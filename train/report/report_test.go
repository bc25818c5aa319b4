package report

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLogLines(t *testing.T) {
	var buf bytes.Buffer
	l := &LogLines{W: &buf, Interval: 10}
	for b := range 25 {
		l.Step(Step{Epoch: 1, Batch: b, Batches: 938, Seen: b * 64, Total: 60000, Loss: 0.546140})
	}
	l.Epoch(Epoch{Epoch: 1, TrainLoss: 0.5, TestLoss: 0.33012, TestCorrect: 8813, TestTotal: 10000, Seconds: 2, ImagesPerSec: 30000})
	want := "Train Epoch: 1 [0/60000 (0%)]\tLoss: 0.546140\n" +
		"Train Epoch: 1 [640/60000 (1%)]\tLoss: 0.546140\n" +
		"Train Epoch: 1 [1280/60000 (2%)]\tLoss: 0.546140\n" +
		"Epoch 1: train loss 0.5000, 2.0 s, 30000 img/s\n" +
		"\nTest set: Average loss: 0.3301, Accuracy: 8813/10000 (88.13%)\n\n"
	if buf.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", buf.String(), want)
	}
	// More than 10 classes: top-5 accuracy too, as ImageNet's logs have.
	buf.Reset()
	l.Epoch(Epoch{Epoch: 2, TrainLoss: 0.5, TestLoss: 2.5, TestCorrect: 200, TestTop5: 450, TestTotal: 1000, Classes: 1000, Seconds: 2, ImagesPerSec: 30000})
	if want := "Test set: Average loss: 2.5000, Accuracy: 200/1000 (20.00%), Top-5: 450/1000 (45.00%)\n"; !strings.Contains(buf.String(), want) {
		t.Fatalf("got\n%q\nwant it to contain\n%q", buf.String(), want)
	}
}

func TestJSONL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	j, err := NewJSONL(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 3 {
		j.Step(Step{Epoch: 1, Batch: b, Batches: 3, GlobalStep: int64(b + 1), Loss: float64(b), LR: 0.5})
	}
	j.Epoch(Epoch{Epoch: 1, GlobalStep: 3, TrainLoss: 1, TestLoss: 0.25, TestCorrect: 3, TestTotal: 4})
	j.Epoch(Epoch{Epoch: 2, GlobalStep: 6, TrainLoss: 1})
	j.Epoch(Epoch{Epoch: 3, GlobalStep: 9, TrainLoss: 1, TestLoss: 2, TestCorrect: 1, TestTop5: 3, TestTotal: 4, Classes: 100})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(p)
	defer f.Close()
	var recs []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 5 || recs[0]["kind"] != "step" || recs[1]["batch"] != 2.0 || recs[2]["test_accuracy"] != 0.75 || recs[3]["test_accuracy"] != nil ||
		recs[2]["test_top5_accuracy"] != nil || recs[4]["test_top5_accuracy"] != 0.75 {
		t.Fatalf("records %v", recs)
	}
}

// TestContinueJSONL: a run resumed from its checkpoint after step 4 keeps
// the metrics up to that step, drops those the run that stopped wrote
// after it (and the line the stop cut short), and appends its own; a
// missing file is created.
func TestContinueJSONL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.jsonl")
	j, err := NewJSONL(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	for s := range 6 {
		j.Step(Step{Epoch: 1 + s/3, Batch: s % 3, GlobalStep: int64(s + 1), Loss: float64(s)})
		if s == 2 {
			j.Epoch(Epoch{Epoch: 1, GlobalStep: 3, TrainLoss: 1})
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"kind":"step","time":1,"epoch":2,"batch":3,"st`) // cut short
	f.Close()

	j, err = ContinueJSONL(p, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	j.Step(Step{Epoch: 2, Batch: 1, GlobalStep: 5, Loss: 9})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(string(b)) {
		var r struct {
			Kind string  `json:"kind"`
			Step int64   `json:"step"`
			Loss float64 `json:"loss"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, fmt.Sprintf("%s %d %g", r.Kind, r.Step, r.Loss))
	}
	want := []string{"step 1 0", "step 2 1", "step 3 2", "epoch 3 0", "step 4 3", "step 5 9"}
	if !slices.Equal(got, want) {
		t.Fatalf("records %q, want %q", got, want)
	}

	// A negative step is a run from its start: the file starts afresh.
	if j, err := ContinueJSONL(p, 1, -1); err != nil {
		t.Fatal(err)
	} else if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Size() != 0 {
		t.Fatalf("continued from step -1: %v, %v", st, err)
	}

	fresh := filepath.Join(t.TempDir(), "new.jsonl")
	if j, err := ContinueJSONL(fresh, 1, 4); err != nil {
		t.Fatal(err)
	} else if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(fresh); err != nil || st.Size() != 0 {
		t.Fatalf("a missing file continued: %v, %v", st, err)
	}
}

// event is the part of a decoded tensorflow.Event the test checks.
type event struct {
	wall    float64
	step    int64
	version string
	session int // SessionLog.status: 1 is START
	tag     string
	value   float32
}

// readEvents decodes an event file, checking every record's CRCs.
func readEvents(t *testing.T, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []event
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("%d trailing bytes", len(b))
		}
		n := binary.LittleEndian.Uint64(b)
		if binary.LittleEndian.Uint32(b[8:]) != maskedCRC(b[:8]) {
			t.Fatal("bad length CRC")
		}
		payload := b[12 : 12+n]
		if binary.LittleEndian.Uint32(b[12+n:]) != maskedCRC(payload) {
			t.Fatal("bad payload CRC")
		}
		b = b[16+n:]
		var ev event
		fields(t, payload, func(num int, v uint64, raw []byte) {
			switch num {
			case 1:
				ev.wall = math.Float64frombits(v)
			case 2:
				ev.step = int64(v)
			case 3:
				ev.version = string(raw)
			case 7:
				fields(t, raw, func(num int, v uint64, _ []byte) {
					if num == 1 {
						ev.session = int(v)
					}
				})
			case 5:
				fields(t, raw, func(_ int, _ uint64, val []byte) {
					fields(t, val, func(num int, v uint64, raw []byte) {
						if num == 1 {
							ev.tag = string(raw)
						} else {
							ev.value = math.Float32frombits(uint32(v))
						}
					})
				})
			}
		})
		out = append(out, ev)
	}
	return out
}

// fields walks a protocol buffer message.
func fields(t *testing.T, b []byte, f func(num int, v uint64, raw []byte)) {
	t.Helper()
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		b = b[n:]
		switch key & 7 {
		case 0:
			v, n := binary.Uvarint(b)
			b = b[n:]
			f(int(key>>3), v, nil)
		case 1:
			f(int(key>>3), binary.LittleEndian.Uint64(b), nil)
			b = b[8:]
		case 5:
			f(int(key>>3), uint64(binary.LittleEndian.Uint32(b)), nil)
			b = b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			f(int(key>>3), 0, b[n:n+int(l)])
			b = b[n+int(l):]
		default:
			t.Fatalf("wire type %d", key&7)
		}
	}
}

func TestTensorBoard(t *testing.T) {
	// The CRC-32C check value of "123456789" is 0xe3069283.
	if c := crc32.Checksum([]byte("123456789"), castagnoli); c != 0xe3069283 {
		t.Fatalf("crc32c %#x", c)
	}
	dir := t.TempDir()
	tb, err := NewTensorBoard(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 6 {
		tb.Step(Step{Epoch: 1, Batch: b, Batches: 6, GlobalStep: int64(b + 1), Loss: 2.5 - float64(b)/10, LR: 1, ImagesPerSec: 600})
	}
	tb.Epoch(Epoch{Epoch: 1, GlobalStep: 6, TrainLoss: 2, TestLoss: 0.5, TestCorrect: 9, TestTotal: 10, Seconds: 3.5, ImagesPerSec: 640,
		Times: []Part{{"forward", 1.25}, {"backward", 2}, {"allreduce", 0.75}, {"allreduce_wait", 0.125}}})
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(tb.Path()), "events.out.tfevents.") {
		t.Fatalf("file name %s", tb.Path())
	}
	evs := readEvents(t, tb.Path())
	want := tensorBoardWant()
	// The file version, then the run's start: a SessionLog START at step 0.
	if len(evs) != 2+len(want) || evs[0].version != "brain.Event:2" || evs[0].wall < 1.7e9 || evs[1].session != 1 || evs[1].step != 0 {
		t.Fatalf("events %+v", evs)
	}
	for i, w := range want {
		got := evs[i+2]
		if got.step != w.step || got.tag != w.tag || got.value != w.value {
			t.Fatalf("event %d: %+v, want %+v", i+2, got, w)
		}
	}
	checkWithProtobuf(t, tb.Path(), evs)

	// A run resumed from a checkpoint after step 4 into the same directory
	// starts at step 5: TensorBoard drops the points the first file holds
	// from there on (the run that stopped logged them after its
	// checkpoint; the resumed run logs them again).
	again, err := ContinueTensorBoard(dir, 5, 4)
	if err != nil {
		t.Fatal(err)
	}
	again.Step(Step{Epoch: 1, Batch: 5, Batches: 6, GlobalStep: 6, Loss: 1.5, LR: 1, ImagesPerSec: 600})
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	if again.Path() == tb.Path() {
		t.Fatalf("the resumed run wrote into the first run's file %s", tb.Path())
	}
	evs = readEvents(t, again.Path())
	if len(evs) != 5 || evs[1].session != 1 || evs[1].step != 5 || evs[2].step != 6 || evs[2].tag != "train/loss" {
		t.Fatalf("the resumed run's events %+v", evs)
	}
	checkWithProtobuf(t, again.Path(), evs)

	// A negative step is a run from its start: START at step 0.
	fresh, err := ContinueTensorBoard(t.TempDir(), 5, -1)
	if err != nil {
		t.Fatal(err)
	}
	fresh.Close()
	if evs := readEvents(t, fresh.Path()); len(evs) != 2 || evs[1].session != 1 || evs[1].step != 0 {
		t.Fatalf("a run from its start: events %+v", evs)
	}
}

// tensorBoardWant is what TestTensorBoard's run logs, in order.
func tensorBoardWant() []event {
	return []event{{step: 1, tag: "train/loss", value: 2.5}, {step: 1, tag: "train/lr", value: 1}, {step: 1, tag: "train/images_per_sec", value: 600},
		{step: 6, tag: "train/loss", value: 2.0}, {step: 6, tag: "train/lr", value: 1}, {step: 6, tag: "train/images_per_sec", value: 600},
		{step: 6, tag: "train/epoch_loss", value: 2}, {step: 6, tag: "train/epoch_images_per_sec", value: 640}, {step: 6, tag: "time/epoch", value: 3.5},
		{step: 6, tag: "time/forward", value: 1.25}, {step: 6, tag: "time/backward", value: 2},
		{step: 6, tag: "time/allreduce", value: 0.75}, {step: 6, tag: "time/allreduce_wait", value: 0.125},
		{step: 6, tag: "test/loss", value: 0.5}, {step: 6, tag: "test/accuracy", value: 0.9}}
}

// checkWithProtobuf reads the event file with a second, independent
// reader (testdata/tfevents.py: Python's protobuf decoding a declaration
// of TensorFlow's Event, its own CRC-32C) and compares it with evs, this
// package's reading; and checks that reader refuses the file with one
// byte of its last record changed.
func checkWithProtobuf(t *testing.T, path string, evs []event) {
	t.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import google.protobuf").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI installs python3-protobuf: %v", err)
		}
		t.Skipf("the independent reader needs Debian's python3-protobuf (apt-get install python3-protobuf): %v", err)
	}
	out, err := exec.Command(python, "testdata/tfevents.py", path).CombinedOutput()
	if err != nil {
		t.Fatalf("tfevents.py: %v\n%s", err, out)
	}
	var got []event
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Step        int64   `json:"step"`
			Wall        float64 `json:"wall_time"`
			FileVersion string  `json:"file_version"`
			Session     int     `json:"session_status"`
			Tag         string  `json:"tag"`
			Value       float64 `json:"value"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("tfevents.py line %q: %v", line, err)
		}
		got = append(got, event{wall: r.Wall, step: r.Step, version: r.FileVersion, session: r.Session, tag: r.Tag, value: float32(r.Value)})
	}
	if len(got) != len(evs) {
		t.Fatalf("protobuf read %d events, we read %d:\n%s", len(got), len(evs), out)
	}
	for i := range evs {
		if got[i] != evs[i] {
			t.Fatalf("event %d: protobuf reads %+v, we read %+v", i, got[i], evs[i])
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-6] ^= 1 // in the last record's payload
	bad := filepath.Join(t.TempDir(), "events.out.tfevents.bad")
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(python, "testdata/tfevents.py", bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "payload checksum mismatch") {
		t.Fatalf("a changed byte: %v\n%s", err, out)
	}
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	p := &Progress{W: &buf, Epochs: 3, Width: 10}
	p.Step(Step{Epoch: 1, Batch: 0, Batches: 4, Loss: 2.5, ImagesPerSec: 900, Elapsed: time.Second})
	p.Step(Step{Epoch: 1, Batch: 1, Batches: 4, Loss: 2.4}) // within 100 ms: not drawn
	p.Step(Step{Epoch: 1, Batch: 3, Batches: 4, Loss: 0.5, ImagesPerSec: 1000, Elapsed: 4 * time.Second})
	p.Epoch(Epoch{Epoch: 1, TrainLoss: 1, Seconds: 4, ImagesPerSec: 1000})
	p.Close()
	got := buf.String()
	for _, want := range []string{"\r\033[KEpoch 1/3 [==>       ]  25%  step 1/4  loss 2.5000  900 img/s  ETA 3s", "[==========] 100%  step 4/4  loss 0.5000  1000 img/s  ETA 0s\nEpoch 1: train loss 1.0000"} {
		if !strings.Contains(got, want) {
			t.Fatalf("progress output %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "loss 2.4000") {
		t.Fatalf("redrew within 100 ms: %q", got)
	}
}
