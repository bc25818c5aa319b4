package comm

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/ring"
)

// TestParseNet reads GORUN_NET: auto and none, a step and a rate in tc's
// words or in bytes, and names what is wrong otherwise.
func TestParseNet(t *testing.T) {
	for _, c := range []struct {
		in, mode string
		link     ring.Link
		err      string
	}{
		{"", "auto", ring.Link{}, ""},
		{"auto", "auto", ring.Link{}, ""},
		{"none", "none", ring.Link{}, ""},
		{"50us,10gbit", "set", ring.Link{Step: 50 * time.Microsecond, BytesPerSec: 1.25e9}, ""},
		{"1ms, 100mbit", "set", ring.Link{Step: time.Millisecond, BytesPerSec: 12.5e6}, ""},
		{"2us,12.5GB/s", "set", ring.Link{Step: 2 * time.Microsecond, BytesPerSec: 12.5e9}, ""},
		{"10us,800MB/s", "set", ring.Link{Step: 10 * time.Microsecond, BytesPerSec: 8e8}, ""},
		{"fast", "", ring.Link{}, "want auto, none, or STEP,RATE"},
		{"soon,10gbit", "", ring.Link{}, `"soon" is not a step time`},
		{"-1us,10gbit", "", ring.Link{}, `"-1us" is not a step time`},
		{"5us,10", "", ring.Link{}, `"10" is not a rate like 10gbit`},
		{"5us,0gbit", "", ring.Link{}, `"0gbit" is not a rate`},
		{"5us,xgbit", "", ring.Link{}, `"xgbit" is not a rate`},
	} {
		mode, link, err := parseNet(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseNet(%q): error %v, want one saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || mode != c.mode || link != c.link {
			t.Errorf("parseNet(%q) = %q, %+v, %v; want %q, %+v", c.in, mode, link, err, c.mode, c.link)
		}
	}
}

// slowLink is a ring.Transport between two ends in this process that
// keep time on clocks of their own: a frame arrives a fixed delay plus its
// size over a rate after it was sent, by the sender's clock, and the
// receiver's clock moves on to its arrival when it waits for it. The
// probe's arithmetic is checked exactly, whatever else the machine runs.
type slowLink struct {
	delay time.Duration
	rate  float64 // bytes per second
	in    [2]chan slowFrame
	// burst, when set, shapes each direction as tc's token bucket does:
	// up to burst bytes banked while the link idles pass at once, the
	// rest at rate. (Each direction is sent on by one end only.)
	burst  float64
	tokens [2]float64
	filled [2]time.Duration // when tokens was last brought up to date
}

// transit is how long a frame of n bytes sent at time at from end me
// takes to cross, the delay aside.
func (l *slowLink) transit(me int, at time.Duration, n int) time.Duration {
	if l.burst == 0 {
		return time.Duration(float64(n) / l.rate * 1e9)
	}
	if at > l.filled[me] {
		l.tokens[me] = min(l.burst, l.tokens[me]+(at-l.filled[me]).Seconds()*l.rate)
		l.filled[me] = at
	}
	if float64(n) <= l.tokens[me] {
		l.tokens[me] -= float64(n)
		return 0
	}
	wait := time.Duration((float64(n) - l.tokens[me]) / l.rate * 1e9)
	l.tokens[me], l.filled[me] = 0, l.filled[me]+wait
	return l.filled[me] - at
}

type slowFrame struct {
	payload []byte
	arrives time.Duration
}

type slowEnd struct {
	l    *slowLink
	me   int
	at   time.Duration // this end's clock
	bufs [][]byte
}

func (e *slowEnd) now() time.Time { return time.Unix(0, 0).Add(e.at) }

func (e *slowEnd) Send(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error {
	arrives := e.at + e.l.delay + e.l.transit(e.me, e.at, len(payload))
	e.l.in[1-e.me] <- slowFrame{append([]byte(nil), payload...), arrives}
	return nil
}

func (e *slowEnd) Post(peer int, stream uint32, buf []byte) (uint64, error) {
	e.bufs = append(e.bufs, buf)
	return uint64(len(e.bufs) - 1), nil
}

func (e *slowEnd) Wait(ctx context.Context, peer int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	select {
	case f := <-e.l.in[e.me]:
		copy(e.bufs[ticket], f.payload)
		e.at = max(e.at, f.arrives)
		return [4]uint64{}, len(f.payload), nil
	case <-ctx.Done():
		return [4]uint64{}, 0, ctx.Err()
	}
}

// TestProbeLink measures a link that delays every frame 2 ms and carries
// 50 MB/s: the step is half a round trip of 8-byte frames, 2 ms and
// 0.16 µs; the rate 50 MB/s, what every frame pays alike (the delay, the
// answer) dropping out. Shaped by a token bucket of 1 MB (tc tbf's burst:
// a millisecond's bytes at 10 Gbit/s is 1.25 MB) the rate is still found
// to 1%, where one 2 MiB frame less a round trip (the probe before)
// made it 96 MB/s.
func TestProbeLink(t *testing.T) {
	for _, c := range []struct {
		name     string
		burst    float64
		min, max float64
	}{
		{"steady", 0, 49.99e6, 50.01e6},
		{"token bucket", 1e6, 49.5e6, 50.5e6},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &slowLink{delay: 2 * time.Millisecond, rate: 50e6, burst: c.burst, in: [2]chan slowFrame{make(chan slowFrame, 4), make(chan slowFrame, 4)}}
			l.tokens = [2]float64{c.burst, c.burst}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var got ring.Link
			var errs [2]error
			for me := range 2 {
				wg.Go(func() {
					end := &slowEnd{l: l, me: me}
					link, err := probeLink(ctx, end, 1-me, me == 0, end.now)
					errs[me] = err
					if me == 0 {
						got = link
					}
				})
			}
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				t.Fatal(errs)
			}
			if want := 2*time.Millisecond + 160*time.Nanosecond; c.burst == 0 && got.Step != want {
				t.Errorf("step %v, want %v", got.Step, want)
			}
			if got.BytesPerSec < c.min || got.BytesPerSec > c.max {
				t.Errorf("rate %.5g B/s, want 50e6 (%.3g to %.3g)", got.BytesPerSec, c.min, c.max)
			}
		})
	}
}

// TestProbeLinkDeadline: a peer that never answers ends the probe
// at the join's deadline, with the error.
func TestProbeLinkDeadline(t *testing.T) {
	l := &slowLink{rate: 1e9, in: [2]chan slowFrame{make(chan slowFrame, 64), make(chan slowFrame, 64)}}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	end := &slowEnd{l: l}
	_, err := probeLink(ctx, end, 1, true, end.now)
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("error %v, want the deadline's", err)
	}
}

// TestStepFor: the step netLink settles makes the model predict the small
// all-reduce's measured time; without hosts to price, none.
func TestStepFor(t *testing.T) {
	w := &world{settings: Settings{Size: 6}, data: &dataPath{hostOf: []int{0, 0, 1, 1, 2, 2}}}
	link := ring.Link{Step: 400 * time.Microsecond, BytesPerSec: 125e6}
	all := []int{0, 1, 2, 3, 4, 5}
	for _, algo := range []ring.Algo{ring.AlgoDoubling, ring.AlgoRing, ring.AlgoHalving} {
		took, _ := costsOver(w.data.hostOf, link, all, 1).Predict(algo, 4, nil)
		if got := stepFor(w, ring.Link{BytesPerSec: 125e6}, algo, took.Seconds()); got < link.Step-time.Microsecond || got > link.Step+time.Microsecond {
			t.Errorf("%v taking %v: step %v, want %v", algo, took, got, link.Step)
		}
	}
	w.data.hostOf = []int{0, 0, 0, 0, 0, 0}
	if got := stepFor(w, link, ring.AlgoDoubling, 0.01); got != 0 {
		t.Errorf("one host: step %v, want 0", got)
	}
}

// TestCostsForPricesReductions: a group across hosts gets a model that
// prices the reductions and the ring's chunks (the group's own, 1 MiB
// across hosts), so that two hosts over a 10 Gbit/s link run small
// all-reduces by recursive doubling and large ones by the ring.
func TestCostsForPricesReductions(t *testing.T) {
	w := &world{settings: Settings{Size: 2}, data: &dataPath{hostOf: []int{0, 1}},
		net: ring.Link{Step: 50 * time.Microsecond, BytesPerSec: 1.25e9}}
	m := costsFor(w, []int{0, 1}, 1)
	if m == nil || m.Reduce != reduceRate || m.Chunk != ring.DefaultChunkBytes {
		t.Fatalf("costs %+v, want the reduction at %v B/s and chunks of %d bytes", m, reduceRate, ring.DefaultChunkBytes)
	}
	c := &ring.Collectives{Peers: []int{0, 1}, Costs: m}
	for _, tc := range []struct {
		bytes int
		want  ring.Algo
	}{{64 << 10, ring.AlgoDoubling}, {16 << 20, ring.AlgoRing}} {
		if got := c.AllReduceAlgorithm(tc.bytes); got != tc.want {
			t.Errorf("%d bytes: %v, want %v", tc.bytes, got, tc.want)
		}
	}
}

// TestGroupSizeSettings: Bruck's all-to-all is the default only in
// groups of at least BruckMinRanks, the linear Reduce only in groups of at
// most LinearReduceMaxRanks, each with a member across the network (here:
// no shared memory at all); a size set applies to every group, and -1
// turns it off.
func TestGroupSizeSettings(t *testing.T) {
	bruck := func(w *world, peers []int, set int) int {
		w.settings.BruckBytes = set
		return bruckBytes(w, peers)
	}
	linear := func(w *world, peers []int, set int) int {
		w.settings.LinearReduceBytes = set
		return linearReduceBytes(w, peers)
	}
	tree := func(w *world, peers []int, set int) int {
		w.settings.TreeScatterBytes = set
		return treeScatterBytes(w, peers)
	}
	for _, tc := range []struct {
		name    string
		knob    func(w *world, peers []int, set int) int
		setting int
		ranks   int
		want    int
	}{
		{"bruck, default, small group", bruck, 0, BruckMinRanks - 1, 0},
		{"bruck, default, large group", bruck, 0, BruckMinRanks, DefaultBruckBytes},
		{"bruck, set, small group", bruck, 512, 3, 512},
		{"bruck, off", bruck, -1, 64, 0},
		{"linear, default, small group", linear, 0, 3, DefaultLinearReduceBytes},
		{"linear, default, largest group", linear, 0, LinearReduceMaxRanks, DefaultLinearReduceBytes},
		{"linear, default, large group", linear, 0, LinearReduceMaxRanks + 1, 0},
		{"linear, set, large group", linear, 4096, 64, 4096},
		{"linear, off", linear, -1, 4, 0},
		{"tree scatter, default, small group", tree, 0, 3, DefaultTreeScatterBytes},
		{"tree scatter, default, large group", tree, 0, 64, DefaultTreeScatterBytes},
		{"tree scatter, set", tree, 1 << 20, 4, 1 << 20},
		{"tree scatter, off", tree, -1, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &world{data: &dataPath{}}
			peers := make([]int, tc.ranks)
			for i := range peers {
				peers[i] = i
			}
			if got := tc.knob(w, peers, tc.setting); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestChunkBytesByPlace: a group across hosts and a group through shared
// memory (or on a crowded host) cut ring.DefaultChunkBytes; a group on
// one host over TCP, DefaultNetChunkBytes, its messages one way
// ring.DefaultChunkBytes; a setting wins, for both.
func TestChunkBytesByPlace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hostOf  []int // nil: hosts not compared (TCP forced)
		crowded bool
		set     int
		peers   []int
		want    int
		message int // messageChunkBytes (0: the chunk)
	}{
		{"two hosts", []int{0, 1}, false, 0, []int{0, 1}, ring.DefaultChunkBytes, 0},
		{"three ranks, two hosts", []int{0, 0, 1}, false, 0, []int{0, 1, 2}, ring.DefaultChunkBytes, 0},
		{"a sub-group on one host", []int{0, 0, 1}, false, 0, []int{0, 1}, DefaultNetChunkBytes, ring.DefaultChunkBytes},
		{"TCP forced", nil, false, 0, []int{0, 1}, DefaultNetChunkBytes, ring.DefaultChunkBytes},
		{"crowded", nil, true, 0, []int{0, 1}, ring.DefaultChunkBytes, 0},
		{"set", []int{0, 1}, false, 65536, []int{0, 1}, 65536, 0},
		{"set to the loopback chunk", nil, false, DefaultNetChunkBytes, []int{0, 1}, DefaultNetChunkBytes, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &world{settings: Settings{Size: len(tc.peers), ChunkBytes: tc.set}, crowded: tc.crowded, data: &dataPath{hostOf: tc.hostOf}}
			if got := chunkBytes(w, tc.peers); got != tc.want {
				t.Fatalf("chunkBytes = %d, want %d", got, tc.want)
			}
			if got := messageChunkBytes(w, tc.peers); got != tc.message {
				t.Fatalf("messageChunkBytes = %d, want %d", got, tc.message)
			}
		})
	}
}
