package data

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestSampler(t *testing.T) {
	cases := []struct {
		n, world int
		dropLast bool
		perRank  int
	}{
		{10, 1, false, 10}, {10, 3, false, 4}, {10, 3, true, 3}, {12, 4, false, 3}, {12, 4, true, 3}, {3, 4, false, 1},
	}
	for _, c := range cases {
		var all []int
		for rank := range c.world {
			s := Sampler{N: c.n, Shuffle: true, Seed: 7, Rank: rank, World: c.world, DropLast: c.dropLast}
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			idx := s.Indices(3)
			if len(idx) != s.Len() || s.Len() != c.perRank {
				t.Fatalf("%+v: %d indices, Len %d, want %d", c, len(idx), s.Len(), c.perRank)
			}
			all = append(all, idx...)
		}
		// Together the ranks cover every sample (or, dropping, distinct
		// ones), each at most as often as padding requires.
		seen := map[int]int{}
		for _, i := range all {
			seen[i]++
		}
		if c.dropLast {
			if len(seen) != len(all) {
				t.Fatalf("%+v: ranks overlap with drop_last: %v", c, all)
			}
		} else if len(seen) != c.n {
			t.Fatalf("%+v: ranks cover %d of %d samples", c, len(seen), c.n)
		}
	}
	// Epochs reshuffle; the same epoch gives the same order; no shuffle is 0..n-1.
	s := Sampler{N: 100, Shuffle: true, Seed: 1, World: 1}
	if !slices.Equal(s.Indices(1), s.Indices(1)) || slices.Equal(s.Indices(1), s.Indices(2)) {
		t.Fatal("epochs should reshuffle deterministically")
	}
	seq := Sampler{N: 5, World: 1}.Indices(9)
	if !slices.Equal(seq, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("sequential sampler: %v", seq)
	}
	for _, bad := range []Sampler{{N: 5, World: 0}, {N: 5, World: 2, Rank: 2}, {N: 0, World: 1}, {N: 1, World: 2, DropLast: true}} {
		if bad.Validate() == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

// referenceTransform is the transform written the obvious way: pad with
// zeros, crop, flip, normalise.
func referenceTransform(tf Transform, img []byte, shape [3]int, epoch, index int) []float32 {
	c, h, w := shape[0], shape[1], shape[2]
	dy, dx, flip := tf.choices(epoch, index)
	p := tf.Pad
	out := make([]float32, c*h*w)
	for ch := range c {
		for y := range h {
			for x := range w {
				cx := x
				if flip {
					cx = w - 1 - x
				}
				py, px := y+dy, cx+dx // in the padded image
				var v byte
				if sy, sx := py-p, px-p; sy >= 0 && sy < h && sx >= 0 && sx < w {
					v = img[(ch*h+sy)*w+sx]
				}
				out[(ch*h+y)*w+x] = (float32(v)/255 - tf.Mean[ch]) / tf.Std[ch]
			}
		}
	}
	return out
}

func TestTransform(t *testing.T) {
	d := synth(t, FormatCIFAR10, 40, 5)
	tf := CIFARAugmentation(d, 11)
	tab := tf.table(3)
	out := make([]float32, d.ImageSize())
	flips, crops := 0, map[[2]int]bool{}
	for i := range d.Len() {
		tf.apply(tab, d.Image(i), d.Shape, out, 2, i)
		want := referenceTransform(tf, d.Image(i), d.Shape, 2, i)
		if !slices.Equal(out, want) {
			t.Fatalf("image %d differs from the reference transform", i)
		}
		dy, dx, flip := tf.choices(2, i)
		if flip {
			flips++
		}
		if dy < 0 || dy > 8 || dx < 0 || dx > 8 {
			t.Fatalf("crop offset %d,%d outside 0..8", dy, dx)
		}
		crops[[2]int{dy, dx}] = true
	}
	if flips == 0 || flips == d.Len() || len(crops) < 10 {
		t.Fatalf("augmentation not random enough: %d flips, %d distinct crops of %d", flips, len(crops), d.Len())
	}
	// Deterministic in (seed, epoch, index); another epoch draws again.
	same := 0
	for i := range 100 {
		a1, b1, c1 := tf.choices(1, i)
		a2, b2, c2 := tf.choices(2, i)
		if a1 == a2 && b1 == b2 && c1 == c2 {
			same++
		}
	}
	if same > 20 {
		t.Fatalf("epochs 1 and 2 drew the same augmentation for %d of 100 images", same)
	}
}

func TestLoader(t *testing.T) {
	d := synth(t, FormatCIFAR10, 50, 6)
	tf := CIFARAugmentation(d, 3)
	l, err := NewLoader(d, 16, tf, LoaderConfig{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	idx := Sampler{N: d.Len(), Shuffle: true, Seed: 4, World: 1}.Indices(0)
	for epoch := range 2 {
		if err := l.Start(epoch, idx); err != nil {
			t.Fatal(err)
		}
		var sizes []int
		for b, ok := l.Next(); ok; b, ok = l.Next() {
			sizes = append(sizes, b.Len())
			if b.X.Shape[0] != b.Len() || len(b.X.Data) != b.Len()*d.ImageSize() {
				t.Fatalf("batch tensor %v for %d labels", b.X.Shape, b.Len())
			}
			for j := range b.Len() {
				i := idx[b.First+j]
				if b.Labels[j] != int32(d.Labels[i]) {
					t.Fatalf("batch at %d: label %d, want %d", b.First, b.Labels[j], d.Labels[i])
				}
				want := referenceTransform(tf, d.Image(i), d.Shape, epoch, i)
				if !slices.Equal(b.X.Data[j*d.ImageSize():(j+1)*d.ImageSize()], want) {
					t.Fatalf("epoch %d image %d differs from the reference transform", epoch, i)
				}
			}
		}
		if !slices.Equal(sizes, []int{16, 16, 16, 2}) {
			t.Fatalf("batch sizes %v", sizes)
		}
	}
	// Stopping mid-epoch and starting again works; bad indices are refused.
	l.Start(0, idx)
	l.Next()
	l.Stop()
	if err := l.Start(0, []int{0, 50}); err == nil {
		t.Fatal("index 50 of 50 accepted")
	}
	if err := l.Start(1, idx[:3]); err != nil {
		t.Fatal(err)
	}
	var got []int
	for b, ok := l.Next(); ok; b, ok = l.Next() {
		for j := range b.Len() {
			got = append(got, int(b.Labels[j]))
		}
	}
	want := []int{int(d.Labels[idx[0]]), int(d.Labels[idx[1]]), int(d.Labels[idx[2]])}
	sort.Ints(got)
	sort.Ints(want)
	if !slices.Equal(got, want) {
		t.Fatalf("restarted epoch labels %v, want %v", got, want)
	}
}

// TestSamplerSkip: a job of 4 ranks trains 3 batches of 5 each, then
// shrinks to 3 ranks, which are dealt the rest of the epoch's order with
// Skip: together they see every sample exactly once (but for the padding
// that evens out the last round, which repeats samples of the rest).
func TestSamplerSkip(t *testing.T) {
	const n, batch, done = 103, 5, 3
	count := map[int]int{}
	for rank := range 4 {
		idx := Sampler{N: n, Shuffle: true, Seed: 7, Rank: rank, World: 4}.Indices(2)
		for _, i := range idx[:done*batch] {
			count[i]++
		}
	}
	rest := map[int]int{}
	total := 0
	for rank := range 3 {
		s := Sampler{N: n, Shuffle: true, Seed: 7, Rank: rank, World: 3, Skip: done * batch * 4}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		idx := s.Indices(2)
		if len(idx) != s.Len() || s.Len() != 15 {
			t.Fatalf("rank %d: %d indices, Len %d, want 15", rank, len(idx), s.Len())
		}
		for _, i := range idx {
			rest[i]++
		}
		total += len(idx)
	}
	for i := range rest {
		if count[i] > 0 {
			t.Errorf("sample %d trained on before the shrink is dealt out again", i)
		}
		count[i]++
	}
	if len(count) != n || total != n-done*batch*4+2 {
		t.Errorf("%d distinct samples of %d, %d dealt after the shrink (want %d: 2 of padding)", len(count), n, total, n-done*batch*4+2)
	}
	for _, skip := range []int{-1, n + 1} {
		if err := (Sampler{N: n, World: 3, Skip: skip}).Validate(); err == nil {
			t.Errorf("skip %d accepted", skip)
		}
	}
	if s := (Sampler{N: n, World: 3, Skip: n}); s.Validate() != nil || len(s.Indices(1)) != 0 {
		t.Errorf("skipping the whole epoch: %v, %d indices", s.Validate(), len(s.Indices(1)))
	}
}

// TestLoaderTooLarge: a loader whose batch buffers alone would take more
// memory than the machine has is refused before it allocates anything,
// with an error naming the batch size and image shape, instead of ending
// the program in the Go runtime's out-of-memory crash.
func TestLoaderTooLarge(t *testing.T) {
	d := synth(t, FormatCIFAR10, 10, 6)
	_, err := NewLoader(d, 1<<40, Plain(d), LoaderConfig{Prefetch: 2})
	if err == nil {
		t.Fatal("a batch of 2^40 images accepted")
	}
	for _, want := range []string{"4 batches of 1099511627776 images of 3×32×32", "TiB", "GiB of memory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The bound is the machine's memory: just within it passes, just
	// beyond it is refused (checked without allocating either).
	have := physicalMemory()
	if have == 0 {
		t.Fatal("sysinfo reported no memory")
	}
	shape := [3]int{1, 1024, 1024} // 4 MiB an image
	fits := int(have / (4 << 20) / 4)
	for _, tc := range []struct {
		batch int
		ok    bool
	}{{fits, true}, {fits + 1, false}} {
		if err := checkFits(4, tc.batch, shape); (err == nil) != tc.ok {
			t.Errorf("4 batches of %d images of 4 MiB with %.0f bytes of memory: error %v", tc.batch, have, err)
		}
	}
}
