package data

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// physicalMemory returns the machine's memory in bytes, 0 when the kernel
// does not say.
func physicalMemory() float64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return float64(si.Totalram) * float64(max(si.Unit, 1))
}

// checkFits returns an error when buffers batches of batchSize images of
// shape take more memory than the machine has: such a loader could only
// end the program with the Go runtime's out-of-memory crash, or the
// kernel's OOM killer, before its first batch.
func checkFits(buffers, batchSize int, shape [3]int) error {
	need := float64(buffers) * float64(batchSize) * float64(shape[0]) * float64(shape[1]) * float64(shape[2]) * 4
	have := physicalMemory()
	if have == 0 || need <= have {
		return nil
	}
	return fmt.Errorf("data: the loader's %d batches of %d images of %d×%d×%d would take %s, more than the %s of memory this machine has",
		buffers, batchSize, shape[0], shape[1], shape[2], gibibytes(need), gibibytes(have))
}

// gibibytes writes n bytes in GiB, or TiB when that reads better.
func gibibytes(n float64) string {
	const gib = 1 << 30
	if n >= 1024*gib {
		return fmt.Sprintf("%.1f TiB", n/(1024*gib))
	}
	return fmt.Sprintf("%.1f GiB", n/gib)
}
