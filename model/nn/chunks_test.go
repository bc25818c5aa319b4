package nn

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// TestChunkSpans: take cuts from the start of the span it is given; give
// merges a span with its free neighbours on either side.
func TestChunkSpans(t *testing.T) {
	for _, c := range []struct {
		name     string
		free     []span
		take     [2]int // span index, elements
		wantOff  int
		give     span
		wantFree []span
	}{
		{"take part", []span{{0, 4}, {10, 8}, {30, 20}}, [2]int{1, 6}, 10, span{}, []span{{0, 4}, {16, 2}, {30, 20}}},
		{"take all", []span{{0, 4}, {10, 8}}, [2]int{1, 8}, 10, span{}, []span{{0, 4}}},
		{"give alone", []span{{0, 4}, {30, 20}}, [2]int{}, 0, span{10, 8}, []span{{0, 4}, {10, 8}, {30, 20}}},
		{"give merges left", []span{{0, 10}, {30, 20}}, [2]int{}, 0, span{10, 8}, []span{{0, 18}, {30, 20}}},
		{"give merges right", []span{{0, 4}, {18, 20}}, [2]int{}, 0, span{10, 8}, []span{{0, 4}, {10, 28}}},
		{"give merges both", []span{{0, 10}, {18, 20}}, [2]int{}, 0, span{10, 8}, []span{{0, 38}}},
		{"give first", []span{{18, 20}}, [2]int{}, 0, span{0, 8}, []span{{0, 8}, {18, 20}}},
		{"give last", []span{{0, 4}}, [2]int{}, 0, span{10, 8}, []span{{0, 4}, {10, 8}}},
		{"give to a full chunk", nil, [2]int{}, 0, span{10, 8}, []span{{10, 8}}},
		{"give nothing", []span{{0, 4}}, [2]int{}, 0, span{4, 0}, []span{{0, 4}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := &chunk{free: slices.Clone(c.free)}
			if c.take[1] > 0 {
				if off := k.take(c.take[0], c.take[1]); off != c.wantOff {
					t.Errorf("take(%d, %d) = %d, want %d", c.take[0], c.take[1], off, c.wantOff)
				}
			} else {
				k.give(c.give)
			}
			if !slices.Equal(k.free, c.wantFree) {
				t.Errorf("free spans %v, want %v", k.free, c.wantFree)
			}
		})
	}
}

// TestPoolBestFit: a request takes the smallest free span that holds it,
// in whichever chunk, and a new chunk, as large as the largest request
// so far, only when none does.
func TestPoolBestFit(t *testing.T) {
	p := &bufferPool{}
	like := tensor.New(1)
	var bufs []*buffer
	for _, n := range []int{1024, 256, 64, 128, 64, 512} {
		b := p.get()
		p.fit(b, like, n)
		bufs = append(bufs, b)
	}
	// Chunk 0 holds the first; chunk 1 (1024 elements, the largest
	// request so far) the rest, at 0, 256, 320, 448 and 512.
	if len(p.chunks) != 2 || p.chunks[1].t.Len() != 1024 || bufs[5].span != (span{512, 512}) {
		t.Fatalf("%d chunks, the second of %d elements, the last request at %v; want 2, 1024, {512 512}", len(p.chunks), p.chunks[1].t.Len(), bufs[5].span)
	}
	p.put(bufs[1]) // 256 free at 0
	p.put(bufs[3]) // 128 free at 320
	for _, c := range []struct {
		n    int
		want span
	}{
		{120, span{320, 128}}, // the 128 free, not the lower 256
		{200, span{0, 256}},
	} {
		b := p.get()
		p.fit(b, like, c.n)
		if b.at != p.chunks[1] || b.span != c.want {
			t.Errorf("%d elements went to %v in chunk %d; want %v in chunk 1", c.n, b.span, slices.Index(p.chunks, b.at), c.want)
		}
	}
	b := p.get()
	p.fit(b, like, 2000)
	if len(p.chunks) != 3 || b.at != p.chunks[2] || p.chunks[2].t.Len() != 2048 {
		t.Errorf("2000 elements: %d chunks, the last of %d; want a third chunk of 2048", len(p.chunks), p.chunks[len(p.chunks)-1].t.Len())
	}
}

// region is where a buffer's storage lies: its chunk and span.
type region struct {
	at *chunk
	s  span
}

func regionOf(b *buffer) region { return region{b.at, b.span} }

func (r region) overlaps(o region) bool {
	return r.at != nil && r.at == o.at && r.s.off < o.s.off+o.s.n && o.s.off < r.s.off+r.s.n
}

// TestPoolRegions drives a pool with random requests and returns, as a
// network's passes do, and checks after each: every held buffer's region
// is at least its class, aligned, lies in its chunk and overlaps no other held
// buffer's, and its tensor is that region; a buffer asked again for no
// more than it holds keeps its offset, and one asked for more gets a
// region apart from its old one (a layer writing over its input reads
// the input there). When everything is back, each chunk is one free span,
// and the same passes again make no new chunk.
func TestPoolRegions(t *testing.T) {
	for _, dev := range []tensor.Device{nil, &countingDevice{}} {
		t.Run(fmt.Sprint(dev), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			sizes := []int{7, 100, 640, 1000, 4096, 5000}
			var ops [][2]int // buffer index, size (0: put)
			for range 400 {
				ops = append(ops, [2]int{rng.IntN(8), sizes[rng.IntN(len(sizes))] * rng.IntN(2)})
			}
			like := tensor.NewOn(dev, 1)
			p := &bufferPool{}
			var chunks int
			for pass := range 3 {
				held := make([]*buffer, 8)
				for i, op := range ops {
					b := held[op[0]]
					if op[1] == 0 {
						p.put(b)
						held[op[0]] = nil
						continue
					}
					if b == nil {
						b = p.get()
						held[op[0]] = b
					}
					before := regionOf(b)
					p.fit(b, like, op[1])
					after := regionOf(b)
					class := regionSize(op[1])
					switch {
					case before.at != nil && before.s.n >= class:
						if after.at != before.at || after.s.off != before.s.off {
							t.Fatalf("pass %d, op %d: a region of %d elements moved from %v to %v for %d", pass, i, before.s.n, before, after, op[1])
						}
					case before.overlaps(after):
						t.Fatalf("pass %d, op %d: growing to %d, the new region %v overlaps the old %v", pass, i, op[1], after, before)
					}
					checkRegions(t, held, dev, fmt.Sprintf("pass %d, op %d", pass, i))
				}
				for i, b := range held {
					p.put(b)
					held[i] = nil
				}
				for _, c := range p.chunks {
					if len(c.free) != 1 || c.free[0] != (span{0, c.t.Len()}) {
						t.Fatalf("pass %d: everything given back, but a chunk of %d elements has free spans %v", pass, c.t.Len(), c.free)
					}
				}
				if pass > 0 && len(p.chunks) != chunks {
					t.Errorf("pass %d: %d chunks after %d", pass, len(p.chunks), chunks)
				}
				chunks = len(p.chunks)
			}
			if len(p.free) != p.made {
				t.Errorf("%d of %d buffers free at the end", len(p.free), p.made)
			}
		})
	}
}

// checkRegions checks the held buffers' regions, as TestPoolRegions says.
func checkRegions(t *testing.T, held []*buffer, dev tensor.Device, where string) {
	t.Helper()
	for i, b := range held {
		if b == nil || b.at == nil {
			continue
		}
		r := regionOf(b)
		if r.s.off < 0 || r.s.off+r.s.n > r.at.t.Len() || r.s.off%regionAlign != 0 {
			t.Fatalf("%s: region %v outside its chunk of %d or not aligned to %d elements", where, r.s, r.at.t.Len(), regionAlign)
		}
		if b.t.Len() != r.s.n || b.t.Device() != dev {
			t.Fatalf("%s: the buffer's tensor %s is not its region %v on %v", where, b.t, r.s, dev)
		}
		if dev == nil && &b.t.Data[0] != &r.at.t.Data[r.s.off] || dev != nil && (b.t.Mem != r.at.t.Mem || b.t.Off != r.at.t.Off+r.s.off) {
			t.Fatalf("%s: the buffer's tensor does not start at its region %v", where, r.s)
		}
		for _, o := range held[i+1:] {
			if o != nil && r.overlaps(regionOf(o)) {
				t.Fatalf("%s: held regions %v and %v overlap", where, r, regionOf(o))
			}
		}
	}
}

// countingDevice is a device whose storage is only addresses: enough for
// the pool, which never reads or writes it.
type countingDevice struct{ next uintptr }

func (d *countingDevice) Alloc(n int) uintptr {
	d.next += 0x1000 + uintptr(4*n)
	return d.next
}
func (d *countingDevice) Free(uintptr)                {}
func (d *countingDevice) Upload(uintptr, []float32)   {}
func (d *countingDevice) Download([]float32, uintptr) {}
func (d *countingDevice) String() string              { return "counting device" }

// TestPoolDevicesApart: a region lies on the device of the tensor it was
// asked for, whatever storage the pool holds elsewhere.
func TestPoolDevicesApart(t *testing.T) {
	dev := &countingDevice{}
	p := &bufferPool{}
	host, onDev := p.get(), p.get()
	p.fit(host, tensor.New(1), 100)
	p.put(host)
	p.fit(onDev, tensor.NewOn(dev, 1), 50)
	if onDev.t.Device() != dev || onDev.at == host.at || len(p.chunks) != 2 {
		t.Errorf("a device request got %s in chunk %p (the host's %p; %d chunks)", onDev.t, onDev.at, host.at, len(p.chunks))
	}
	p.fit(onDev, tensor.New(1), 50)
	if onDev.t.Device() != nil || onDev.at != p.chunks[0] {
		t.Errorf("a host request for a buffer holding device storage got %s", onDev.t)
	}
}
