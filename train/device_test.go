package train

import (
	"errors"
	"strings"
	"testing"

	"github.com/gorun/gorun/cuda"
	"github.com/gorun/gorun/model/amp"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// TestOpenBackendWithoutGPU: where no GPU can be used, auto falls back to
// the CPU saying why, cuda fails with the driver's reason, cpu never looks,
// and an unknown device is named.
func TestOpenBackendWithoutGPU(t *testing.T) {
	if _, err := cuda.Open(); err == nil {
		t.Skip("a GPU is here: auto and cuda open it (bench/gpu.sh covers that)")
	}
	for _, c := range []struct {
		device  string
		wantCPU bool
		note    string
		err     string
	}{
		{"auto", true, "training on the CPU", ""},
		{"", true, "training on the CPU", ""},
		{"cpu", true, "", ""},
		{"cuda", false, "", "device cuda"},
		{"tpu", false, "", `unknown device "tpu"`},
	} {
		d, err := OpenBackend(c.device, 1, 1, "fp32")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one containing %q", c.device, err, c.err)
			}
			if c.device == "cuda" && !errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoDevice) {
				t.Errorf("%q: %v does not say there is no driver or device", c.device, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.device, err)
		}
		if _, ok := d.Backend.(*cpu.Backend); ok != c.wantCPU {
			t.Errorf("%q: backend %s", c.device, d.Backend.Name())
		}
		if !strings.Contains(d.Note, c.note) || (c.note == "" && d.Note != "") {
			t.Errorf("%q: note %q, want %q", c.device, d.Note, c.note)
		}
		d.Close()
	}
	// TF32, a GPU's format, asked for on the CPU: said to be without
	// effect, after the reason there is no GPU when there is one.
	for _, c := range []struct{ device, note string }{
		{"cpu", "TF32 is a GPU's: --tf32 (--precision tf32) is without effect on the CPU, which computes in fp32"},
		{"auto", ": training on the CPU; TF32 is a GPU's: --tf32"},
	} {
		d, err := OpenBackend(c.device, 1, 1, "tf32")
		if err != nil {
			t.Fatalf("%q, tf32: %v", c.device, err)
		}
		if !strings.Contains(d.Note, c.note) || strings.HasPrefix(d.Note, ";") {
			t.Errorf("%q, tf32: note %q, want one containing %q", c.device, d.Note, c.note)
		}
		d.Close()
	}
}

// TestOpenBackendCPUKernel: GORUN_CPU_KERNEL picks the CPU backend's GEMM
// micro-kernel, which the backend's description (the run's first lines)
// names; one this CPU cannot run is an error naming the variable.
func TestOpenBackendCPUKernel(t *testing.T) {
	t.Setenv("GORUN_CPU_KERNEL", "go")
	d, err := OpenBackend("cpu", 0, 1, "fp32")
	if err != nil {
		t.Fatal(err)
	}
	if name := d.Backend.Name(); !strings.HasPrefix(name, "cpu go 4x8") {
		t.Errorf("GORUN_CPU_KERNEL=go: backend %q", name)
	}
	d.Close()
	t.Setenv("GORUN_CPU_KERNEL", "avx1024")
	if _, err := OpenBackend("cpu", 0, 1, "fp32"); err == nil || !strings.Contains(err.Error(), "GORUN_CPU_KERNEL") || !strings.Contains(err.Error(), "avx1024") {
		t.Fatalf("GORUN_CPU_KERNEL=avx1024: %v", err)
	}
}

// TestOpenBackendPrecision: an unknown precision is refused before any
// device is opened, naming it.
func TestOpenBackendPrecision(t *testing.T) {
	for _, device := range []string{"cpu", "auto", "cuda"} {
		if _, err := OpenBackend(device, 0, 1, "fp8"); err == nil || !strings.Contains(err.Error(), `"fp8"`) {
			t.Errorf("device %s, precision fp8: error %v, want one naming it", device, err)
		}
	}
}

// TestAutocastBackend: a 16-bit precision wraps a host backend in the
// CPU's emulation and takes a device backend as it is only when that was
// opened autocasting to the same format — and not for fp16, whose loss
// scaler reads gradients on the host.
func TestAutocastBackend(t *testing.T) {
	host := cpu.New(1)
	for _, c := range []struct {
		name string
		be   tensor.Backend
		p    amp.Precision
		same bool   // the backend itself is returned
		err  string // else the error names this
	}{
		{"host bf16", host, amp.BF16, false, ""},
		{"host fp16", host, amp.FP16, false, ""},
		{"device autocasting bf16", autocastingDevice{host, "bf16"}, amp.BF16, true, ""},
		{"device in float32", autocastingDevice{host, ""}, amp.BF16, false, "not opened for it"},
		{"device autocasting fp16, bf16 asked", autocastingDevice{host, "fp16"}, amp.BF16, false, "not opened for it"},
		{"device autocasting fp16", autocastingDevice{host, "fp16"}, amp.FP16, false, "loss scaler"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := autocast(c.be, c.p)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "gpu:0") {
					t.Errorf("error %v, want one naming the device and %q", err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case c.same && got != c.be:
				t.Errorf("got %s, want the device backend itself", got.Name())
			case !c.same:
				if _, ok := got.(*amp.Autocast); !ok {
					t.Errorf("got %T, want the CPU's emulation", got)
				}
			}
		})
	}
}

// autocastingDevice stands in for a GPU backend opened with
// gpu.Options.Autocast.
type autocastingDevice struct {
	tensor.Backend
	format string
}

func (d autocastingDevice) Autocast() string    { return d.format }
func (autocastingDevice) Device() tensor.Device { return namedDevice("gpu:0") }
func (autocastingDevice) Err() error            { return nil }
func (autocastingDevice) Synchronize() error    { return nil }

// namedDevice is a tensor.Device that holds nothing.
type namedDevice string

func (d namedDevice) String() string            { return string(d) }
func (namedDevice) Alloc(int) uintptr           { return 0 }
func (namedDevice) Free(uintptr)                {}
func (namedDevice) Upload(uintptr, []float32)   {}
func (namedDevice) Download([]float32, uintptr) {}
