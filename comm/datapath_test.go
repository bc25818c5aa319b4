package comm

import (
	"context"
	"strings"
	"testing"

	"github.com/gorun/gorun/tcp"
)

// fakeLink is a transport that reaches the ranks in reach and records
// which calls it got.
type fakeLink struct {
	reach map[int]bool
	calls []string
}

func (f *fakeLink) Has(r int) bool { return f.reach[r] }
func (f *fakeLink) Send(_ context.Context, peer int, _ uint32, _ [4]uint64, _ []byte) error {
	f.calls = append(f.calls, "send")
	return nil
}
func (f *fakeLink) Post(peer int, _ uint32, _ []byte) (uint64, error) {
	f.calls = append(f.calls, "post")
	return 0, nil
}
func (f *fakeLink) Wait(context.Context, int, uint32, uint64) ([4]uint64, int, error) {
	f.calls = append(f.calls, "wait")
	return [4]uint64{}, 0, nil
}

// fakeExchanger also exchanges in one step (ring.SendRecver's capability).
type fakeExchanger struct{ fakeLink }

func (f *fakeExchanger) SendRecv(context.Context, int, uint32, [4]uint64, []byte, int, []byte) ([4]uint64, int, error) {
	f.calls = append(f.calls, "sendrecv")
	return [4]uint64{}, 0, nil
}

// TestDataPathRegistration: a transport added to the data path carries the
// peers it reaches unless one registered before it does, keeps its
// optional capabilities, is named in the log line and closed with it;
// TCP carries the rest.
func TestDataPathRegistration(t *testing.T) {
	first := &fakeExchanger{fakeLink{reach: map[int]bool{1: true, 2: true}}}
	second := &fakeLink{reach: map[int]bool{2: true, 3: true}}
	closed := ""
	d := &dataPath{tcp: &tcp.Transport{}}
	d.add(first, "through the first", func() { closed += "first " })
	d.add(second, "through the second", func() { closed += "second" })
	d.route(5)
	want := map[int]any{1: first, 2: first, 3: second}
	for r := 1; r < 5; r++ {
		got := d.link(r)
		if w, ok := want[r]; ok && got != w {
			t.Errorf("rank %d goes through %T %p, want %p", r, got, got, w)
		}
		if _, ok := want[r]; !ok && got != d.tcp {
			t.Errorf("rank %d goes through %T, want TCP", r, got)
		}
	}
	ctx := context.Background()
	if _, _, ok, _ := d.SendRecv(ctx, 1, 0, [4]uint64{}, nil, 2, nil); !ok || first.calls[0] != "sendrecv" {
		t.Errorf("an exchange between two peers of an exchanging transport: ok %v, calls %v", ok, first.calls)
	}
	if _, _, ok, _ := d.SendRecv(ctx, 2, 0, [4]uint64{}, nil, 3, nil); ok {
		t.Error("an exchange across two transports was taken in one step")
	}
	if _, _, ok, _ := d.SendRecv(ctx, 3, 0, [4]uint64{}, nil, 3, nil); ok {
		t.Error("a transport without SendRecv was asked to exchange in one step")
	}
	d.Send(ctx, 3, 0, [4]uint64{}, nil)
	if len(second.calls) != 1 || second.calls[0] != "send" {
		t.Errorf("a send to rank 3: calls %v on the second transport", second.calls)
	}
	line := describePaths(d, 0, 5, 1<<20, false)
	for _, part := range []string{"ranks [1 2] through the first", "ranks [3] through the second", "ranks [4] over TCP", "forces TCP"} {
		if !strings.Contains(line, part) {
			t.Errorf("log line %q lacks %q", line, part)
		}
	}
	if strings.Contains(line, "when first needed") || !strings.HasSuffix(line, "ring chunks of 1024 KiB") {
		t.Errorf("eager connections: log line %q", line)
	}
	if line := describePaths(d, 0, 5, 1<<20, true); !strings.Contains(line, "pairs connect when first needed") || !strings.HasSuffix(line, "ring chunks of 1024 KiB") {
		t.Errorf("lazy connections: log line %q does not say so before the chunks", line)
	}
	d.shmNote = "single-copy transfers between ranks of this machine off: the reason"
	if line := describePaths(d, 0, 5, 1<<20, false); !strings.Contains(line, "; "+d.shmNote+"; ring chunks") {
		t.Errorf("shared memory's note is not in the log line %q", line)
	}
	d.close()
	if closed != "first second" {
		t.Errorf("closed %q, want both in order", closed)
	}
}
