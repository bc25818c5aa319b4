package train

import (
	"errors"
	"strings"
	"testing"

	"github.com/gorun/gorun/cuda"
	"github.com/gorun/gorun/model/cpu"
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
		d, err := OpenBackend(c.device, 1, 1, false)
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
}

// TestOpenBackendCPUKernel: GORUN_CPU_KERNEL picks the CPU backend's GEMM
// micro-kernel, which the backend's description (the run's first lines)
// names; one this CPU cannot run is an error naming the variable.
func TestOpenBackendCPUKernel(t *testing.T) {
	t.Setenv("GORUN_CPU_KERNEL", "go")
	d, err := OpenBackend("cpu", 0, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if name := d.Backend.Name(); !strings.HasPrefix(name, "cpu go 4x8") {
		t.Errorf("GORUN_CPU_KERNEL=go: backend %q", name)
	}
	d.Close()
	t.Setenv("GORUN_CPU_KERNEL", "avx1024")
	if _, err := OpenBackend("cpu", 0, 1, false); err == nil || !strings.Contains(err.Error(), "GORUN_CPU_KERNEL") || !strings.Contains(err.Error(), "avx1024") {
		t.Fatalf("GORUN_CPU_KERNEL=avx1024: %v", err)
	}
}
