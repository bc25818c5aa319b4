package train

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/cuda"
	"github.com/gorun/gorun/model/amp"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/gpu"
	"github.com/gorun/gorun/model/tensor"
)

// Device is the compute backend a rank opened, with what to close.
type Device struct {
	Backend tensor.Backend
	// Note says how the device was chosen ("no GPU …: training on the
	// CPU"); empty when it was the one asked for.
	Note  string
	close func()
}

// Close releases the backend.
func (d *Device) Close() {
	if d.close != nil {
		d.close()
	}
}

// OpenBackend opens the compute device a rank trains on: "cpu", "cuda"
// (a GPU or an error), or "auto" (a GPU when the driver sees one, else the
// CPU). The rank takes GPU localRank mod the number of visible GPUs
// (CUDA_VISIBLE_DEVICES narrows them, as the driver applies it), so ranks
// of one machine spread over its GPUs and share them when there are more
// ranks than GPUs; localRank is comm's (LOCAL_RANK, SLURM_LOCALID or
// OMPI_COMM_WORLD_LOCAL_RANK). threads is the CPU backend's thread count.
// precision is --precision's name: on a GPU, "tf32" lets matrix products
// and convolutions use TF32 and "bf16" or "fp16" opens the backend
// autocasting them (gpu.Options.Autocast); the CPU's 16-bit arithmetic is
// emulated by the trainer (amp.Autocast). The CPU backend takes the
// GEMM micro-kernel GORUN_CPU_KERNEL names (avx512, avx2-fma or go), when
// set, instead of the best this CPU runs; one it cannot run is an error
// naming those it can.
func OpenBackend(device string, localRank, threads int, precision string) (*Device, error) {
	p, err := amp.Parse(precision)
	if err != nil {
		return nil, err
	}
	openCPU := func(note string) (*Device, error) {
		c, err := cpu.NewFromEnv(threads)
		if err != nil {
			return nil, err
		}
		if p == amp.TF32 {
			note = strings.TrimPrefix(note+"; TF32 is a GPU's: --tf32 (--precision tf32) is without effect on the CPU, which computes in fp32", "; ")
		}
		return &Device{Backend: c, close: c.Close, Note: note}, nil
	}
	switch device {
	case "", "auto", "cuda", "gpu":
	case "cpu":
		return openCPU("")
	default:
		return nil, fmt.Errorf("unknown device %q (want auto, cpu or cuda)", device)
	}
	g, err := openGPU(localRank, p)
	if err == nil {
		return &Device{Backend: g, close: func() {
			if p := g.Profile(); p != "" {
				fmt.Fprint(os.Stderr, p)
			}
			if err := g.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "gpu: %v\n", err)
			}
		}}, nil
	}
	if device == "cuda" || device == "gpu" || !(errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice)) {
		return nil, fmt.Errorf("device %s: %w", device, err)
	}
	return openCPU(fmt.Sprintf("%v: training on the CPU", err))
}

func openGPU(localRank int, p amp.Precision) (*gpu.Backend, error) {
	d, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	dv, err := d.Device(max(localRank, 0) % n)
	if err != nil {
		return nil, err
	}
	o := gpu.Options{TF32: p == amp.TF32, Profile: os.Getenv("GORUN_GPU_PROFILE") != "", Convolutions: os.Getenv("GORUN_CONV")}
	if p.Half() {
		o.Autocast = string(p)
	}
	return gpu.NewOn(dv, o)
}

// onDevice returns x where be computes: x itself for a host backend, else
// a copy uploaded into *dst (reused from call to call).
func onDevice(be tensor.Backend, x *tensor.Tensor, dst **tensor.Tensor) *tensor.Tensor {
	dev := tensor.DeviceOf(be)
	if dev == nil || x.Device() == dev {
		return x
	}
	d := tensor.ReuseOn(dev, dst, x.Shape...)
	d.SetHostData(x.Data)
	return d
}

// deviceErr reports a device backend's failure (nil for the CPU).
func deviceErr(be tensor.Backend) error {
	if d, ok := be.(tensor.DeviceBackend); ok {
		return d.Err()
	}
	return nil
}

// hostRows returns y's elements on the host: y.Data itself, or a copy
// into *buf from a device.
func hostRows(y *tensor.Tensor, buf *[]float32) []float32 {
	if y.Mem == nil {
		return y.Data
	}
	if cap(*buf) < y.Len() {
		*buf = make([]float32, y.Len())
	}
	*buf = (*buf)[:y.Len()]
	y.ReadInto(*buf)
	return *buf
}

// stagerFor returns the comm.Stager for be's GPU, nil for host backends.
func stagerFor(be tensor.Backend) (comm.Stager, func(), error) {
	g, ok := be.(*gpu.Backend)
	if !ok {
		return nil, func() {}, nil
	}
	_, s := g.CUDA()
	st, err := comm.NewCUDAStager(s, 0)
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Close() }, nil
}
