package shm

import "testing"

// TestDirtyLines: ranges of data lines, within one word of the bitmap and
// across several, are marked exactly; header lines clear their bit.
func TestDirtyLines(t *testing.T) {
	cases := []struct{ first, n int }{{0, 1}, {3, 5}, {60, 8}, {64, 64}, {63, 130}, {5, 0}, {200, 56}}
	for _, c := range cases {
		d := newDirtyLines(256 * lineBytes)
		d.data(uint64(c.first*lineBytes), c.n)
		for i := range 256 {
			if want := i >= c.first && i < c.first+c.n; d.isData(uint64(i*lineBytes)) != want {
				t.Fatalf("data(line %d, %d lines): line %d marked %v, want %v", c.first, c.n, i, !want, want)
			}
		}
		if c.n > 0 {
			d.header(uint64(c.first * lineBytes))
			if d.isData(uint64(c.first*lineBytes)) || (c.n > 1 && !d.isData(uint64((c.first+1)*lineBytes))) {
				t.Fatalf("header(line %d) cleared the wrong bits", c.first)
			}
		}
	}
}
