package cuda

import (
	"fmt"
	"testing"
	"unsafe"
)

// BenchmarkCopy measures host↔device copies from page-locked (pinned) and
// pageable (Go heap) memory; MB/s is the copy bandwidth. The 64 MiB pinned
// copies are the copy engines' peak that staging is judged against.
func BenchmarkCopy(b *testing.B) {
	dv := open(b)
	s, err := dv.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, size := range []int{4 << 20, 64 << 20} {
		p, err := dv.Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		pinned, err := dv.AllocHost(size)
		if err != nil {
			b.Fatal(err)
		}
		pageable := make([]byte, size)
		for _, mem := range []struct {
			name string
			ptr  unsafe.Pointer
		}{{"pinned", unsafe.Pointer(&pinned.Bytes()[0])}, {"pageable", unsafe.Pointer(&pageable[0])}} {
			for _, dir := range []string{"to-device", "to-host"} {
				b.Run(fmt.Sprintf("%s/%s/%dMiB", mem.name, dir, size>>20), func(b *testing.B) {
					b.SetBytes(int64(size))
					for b.Loop() {
						if dir == "to-device" {
							err = s.CopyToDevice(p, mem.ptr, size)
						} else {
							err = s.CopyToHost(mem.ptr, p, size)
						}
						if err == nil {
							err = s.Synchronize()
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		pinned.Free()
		dv.Free(p)
	}
}
