package data

import (
	"math/rand/v2"
	"testing"
)

// TestClamp8: the clamp of the colour conversion's sums (a sample plus a
// table entry: −227 to 480) and of the resampling's (clip8) is min(max(v,
// 0), 255) on every value around that range and at int32's ends.
func TestClamp8(t *testing.T) {
	for v := int32(-1024); v <= 1024; v++ {
		if got, want := clamp8(v), byte(min(max(v, 0), 255)); got != want {
			t.Fatalf("clamp8(%d) = %d, want %d", v, got, want)
		}
	}
	for _, v := range []int32{-1 << 31, 1<<31 - 1} {
		if got, want := clamp8(v), byte(min(max(v, 0), 255)); got != want {
			t.Fatalf("clamp8(%d) = %d, want %d", v, got, want)
		}
	}
}

// TestFancyRow: libjpeg's horizontal fancy upsampling, as fancyRow runs
// it with its edges outside the loop, against its definition sample by
// sample, for both cases' constants (h2v1, h2v2), odd and even widths.
func TestFancyRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, c := range []struct {
		shift              uint
		bias0, bias1, edge int32
		max                int32 // a column sum's largest value
	}{{2, 1, 2, 4, 255}, {4, 8, 7, 4, 4 * 255}} {
		for w := 1; w <= 9; w++ {
			n := (w + 1) / 2
			sums := make([]int32, n)
			for i := range sums {
				sums[i] = rng.Int32N(c.max + 1)
			}
			got := make([]byte, w)
			fancyRow(sums, got, c.shift, c.bias0, c.bias1, c.edge)
			for j := range w {
				i := j / 2
				var v int32
				switch {
				case j == 0 || j == 2*n-1:
					v = sums[i] * c.edge
				case j%2 == 0:
					v = sums[i]*3 + sums[i-1]
				default:
					v = sums[i]*3 + sums[i+1]
				}
				bias := c.bias0
				if j%2 == 1 {
					bias = c.bias1
				}
				if want := byte((v + bias) >> c.shift); got[j] != want {
					t.Fatalf("shift %d, width %d, sums %v: sample %d is %d, want %d", c.shift, w, sums, j, got[j], want)
				}
			}
		}
	}
}
