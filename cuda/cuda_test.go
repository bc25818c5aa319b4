package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestArgsPacking(t *testing.T) {
	a := NewArgs()
	a.Ptr(0xdeadbeef00).Int(-3).Float(1.5).Int64(1 << 40)
	want := []uint64{0xdeadbeef00, 0xfffffffd, uint64(math.Float32bits(1.5)), 1 << 40}
	if a.Len() != len(want) {
		t.Fatalf("%d arguments, want %d", a.Len(), len(want))
	}
	for i, w := range want {
		if got := a.Word(i); got != w {
			t.Errorf("argument %d: slot holds %#x, want %#x", i, got, w)
		}
	}
	// The kernel reads a 32-bit int from the slot's first 4 bytes.
	if got := *(*int32)(a.ptrs[1]); got != -3 {
		t.Errorf("int argument reads back as %d", got)
	}
	// The pointer array points at the slots, in order.
	ptrs := (*[MaxArgs]unsafe.Pointer)(a.params())
	for i := range want {
		if ptrs[i] != unsafe.Pointer(&a.vals[i]) {
			t.Errorf("params[%d] does not point at slot %d", i, i)
		}
	}
	for range MaxArgs {
		a.Int(1)
	}
	if a.Err() == nil {
		t.Errorf("%d arguments accepted; the limit is %d", a.Len(), MaxArgs)
	}
	if a.Reset().Len() != 0 || a.Err() != nil {
		t.Errorf("Reset left %d arguments, error %v", a.Len(), a.Err())
	}
}

func TestPTXNeeds(t *testing.T) {
	for _, c := range []struct {
		ptx  string
		want Version
		err  bool
	}{
		{"//\n.version 9.0\n.target sm_75\n", 13000, false},
		{".version 8.0\n", 12000, false},
		{".version 8.5\n", 12050, false},
		{".version 8.7\n", 12080, false},
		{".version 8.8\n", 12090, false},
		{"  .version 7.8\n", 11080, false},
		{".version 6.4\n", 0, true},
		{".target sm_75\n", 0, true},
	} {
		got, err := PTXNeeds([]byte(c.ptx))
		if (err != nil) != c.err || got != c.want {
			t.Errorf("PTXNeeds(%q) = %v, %v; want %v, error %v", c.ptx, got, err, c.want, c.err)
		}
	}
	if s := Version(12040).String(); s != "12.4" {
		t.Errorf("Version(12040) prints %q", s)
	}
}

// open returns the first GPU, or skips the test where there is none.
func open(t testing.TB) *Device {
	t.Helper()
	d, err := Open()
	if err != nil {
		if errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) {
			t.Skipf("no GPU here: %v", err)
		}
		t.Fatal(err)
	}
	dv, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s, driver for CUDA %s", dv, d.Version())
	return dv
}

// TestOpenErrorIsClear: Open without a GPU says why in the same words
// every time, the library named once — also called from many goroutines
// at once, where the dynamic loader's message (per thread) would be read
// on another thread than dlopen's, and lost, if the goroutine moved.
func TestOpenErrorIsClear(t *testing.T) {
	_, err := Open()
	if err == nil {
		t.Skip("a GPU is here; this test covers machines without one")
	}
	if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open without a GPU: %v; want ErrNoDriver or ErrNoDevice", err)
	}
	if strings.Count(err.Error(), "libcuda.so.1") > 1 {
		t.Errorf("Open says %q: the library named more than once", err)
	}
	t.Logf("Open says: %v", err)
	first := err.Error()
	var wg sync.WaitGroup
	said := make(chan string, 64)
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if _, err := Open(); err == nil || err.Error() != first {
					said <- fmt.Sprint(err)
					return
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	close(said)
	for s := range said {
		t.Errorf("Open, called again, says %q; first %q", s, first)
	}
}

func TestRoundTrip(t *testing.T) {
	dv := open(t)
	s, err := dv.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 1<<20 + 3
	p, err := dv.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer dv.Free(p)
	src := make([]float32, n)
	for i := range src {
		src[i] = rand.Float32()
	}
	if err := s.Upload(p, src); err != nil {
		t.Fatal(err)
	}
	pinned, err := dv.AllocHost(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Free()
	dst := pinned.Float32s()
	if err := s.Download(dst, p); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if dst[i] != src[i] {
			t.Fatalf("element %d came back %v, want %v", i, dst[i], src[i])
		}
	}
	if err := s.Fill32(p, math.Float32bits(2.5), n); err != nil {
		t.Fatal(err)
	}
	if err := s.Download(dst, p); err != nil {
		t.Fatal(err)
	}
	if dst[0] != 2.5 || dst[n-1] != 2.5 {
		t.Fatalf("Fill32 left %v … %v", dst[0], dst[n-1])
	}
}

// axpyPTX is y[i] += a·x[i] for i < n, written by hand so the package's
// own test needs no compiler.
const axpyPTX = `
.version 7.0
.target sm_75
.address_size 64

.visible .entry axpy(.param .u64 px, .param .u64 py, .param .f32 a, .param .u32 n)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<5>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [px];
	ld.param.u64 %rd2, [py];
	ld.param.f32 %f1, [a];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd3, %rd1;
	cvta.to.global.u64 %rd4, %rd2;
	mul.wide.u32 %rd5, %r5, 4;
	add.s64 %rd6, %rd3, %rd5;
	add.s64 %rd7, %rd4, %rd5;
	ld.global.f32 %f2, [%rd6];
	ld.global.f32 %f3, [%rd7];
	fma.rn.f32 %f4, %f1, %f2, %f3;
	st.global.f32 [%rd7], %f4;
DONE:
	ret;
}
`

func TestLaunchAndGEMM(t *testing.T) {
	dv := open(t)
	s, err := dv.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := dv.LoadPTX([]byte(axpyPTX))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f, err := m.Function("axpy")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_003
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = rand.Float32(), rand.Float32()
	}
	px, _ := dv.Alloc(4 * n)
	py, _ := dv.Alloc(4 * n)
	defer dv.Free(px)
	defer dv.Free(py)
	if err := s.Upload(px, x); err != nil {
		t.Fatal(err)
	}
	if err := s.Upload(py, y); err != nil {
		t.Fatal(err)
	}
	args := NewArgs()
	args.Ptr(px).Ptr(py).Float(-0.5).Int(n)
	if err := s.Launch(f, Dim3{X: (n + 255) / 256}, Dim3{X: 256}, 0, args); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := s.Download(got, py); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if want := y[i] - 0.5*x[i]; math.Abs(float64(got[i]-want)) > 1e-6 {
			t.Fatalf("axpy element %d = %v, want %v", i, got[i], want)
		}
	}

	// GEMM: c[m×n] = a[m×k]·b[k×n]ᵀ-variants against a float64 reference.
	b, err := s.OpenBLAS()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Logf("cuBLAS %d", b.Version())
	for _, c := range []struct {
		m, n, k    int
		tA, tB     bool
		alpha, bet float32
	}{{37, 53, 19, false, false, 1, 0}, {64, 10, 300, false, true, 1, 1}, {31, 17, 23, true, false, 0.5, 0}, {8, 9, 10, true, true, 2, -1}} {
		am, bm, cm := randSlice(c.m*c.k), randSlice(c.k*c.n), randSlice(c.m*c.n)
		want := make([]float64, c.m*c.n)
		for i := range c.m {
			for j := range c.n {
				var acc float64
				for l := range c.k {
					av := am[i*c.k+l]
					if c.tA {
						av = am[l*c.m+i]
					}
					bv := bm[l*c.n+j]
					if c.tB {
						bv = bm[j*c.k+l]
					}
					acc += float64(av) * float64(bv)
				}
				want[i*c.n+j] = float64(c.alpha)*acc + float64(c.bet)*float64(cm[i*c.n+j])
			}
		}
		pa, _ := dv.Alloc(4 * len(am))
		pb, _ := dv.Alloc(4 * len(bm))
		pc, _ := dv.Alloc(4 * len(cm))
		s.Upload(pa, am)
		s.Upload(pb, bm)
		s.Upload(pc, cm)
		lda, ldb := c.k, c.n
		if c.tA {
			lda = c.m
		}
		if c.tB {
			ldb = c.k
		}
		dv.Enter()
		err := b.GEMM(c.tA, c.tB, c.m, c.n, c.k, c.alpha, pa, lda, pb, ldb, c.bet, pc, c.n)
		dv.Leave()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(cm))
		if err := s.Download(got, pc); err != nil {
			t.Fatal(err)
		}
		var d, nrm float64
		for i, w := range want {
			d += (float64(got[i]) - w) * (float64(got[i]) - w)
			nrm += w * w
		}
		if rel := math.Sqrt(d / nrm); rel > 1e-5 {
			t.Errorf("GEMM %+v: relative error %.2g", c, rel)
		}
		dv.Free(pa)
		dv.Free(pb)
		dv.Free(pc)
	}
	if os.Getenv("GORUN_CUDA_VERBOSE") != "" {
		free, total, _ := dv.MemInfo()
		t.Logf("memory free %d of %d", free, total)
	}
}

func randSlice(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 2*rand.Float32() - 1
	}
	return s
}

// TestFastest: the first algorithm that ran and fits the workspace wins;
// none is an error.
func TestFastest(t *testing.T) {
	ran := func(algo int32, mem uint64) algoPerf { return algoPerf{algo: algo, memory: mem} }
	failed := algoPerf{algo: 9, status: 3}
	for _, c := range []struct {
		name string
		perf []algoPerf
		max  int
		want int
		err  bool
	}{
		{"first", []algoPerf{ran(1, 0), ran(2, 0)}, 0, 0, false},
		{"too big", []algoPerf{ran(1, 1<<31), ran(2, 100)}, 1 << 30, 1, false},
		{"failed", []algoPerf{failed, ran(2, 100)}, 1 << 30, 1, false},
		{"none", []algoPerf{failed, ran(2, 1<<31)}, 1 << 30, 0, true},
		{"empty", nil, 1 << 30, 0, true},
	} {
		got, err := fastest(c.perf, c.max)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("%s: fastest = %d, %v; want %d, error %v", c.name, got, err, c.want, c.err)
		}
	}
}

// TestAlgoPerfLayout: algoPerf matches cuDNN's perf struct (48 bytes, the
// workspace size at offset 16).
func TestAlgoPerfLayout(t *testing.T) {
	var p algoPerf
	if s, off := unsafe.Sizeof(p), unsafe.Offsetof(p.memory); s != 48 || off != 16 {
		t.Errorf("algoPerf: %d bytes, memory at %d; cuDNN's is 48 bytes, memory at 16", s, off)
	}
}
