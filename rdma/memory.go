package rdma

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// region is page-locked memory registered with the device: mapped
// anonymously, pre-faulted, locked so that it is never paged out while
// the device may write into it, and registered once.
type region struct {
	mem  []byte
	keys Keys
}

func newRegion(v Verbs, size int) (*region, error) {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("rdma: mapping %d bytes: %w", size, err)
	}
	if err := unix.Mlock(mem); err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("rdma: locking %d bytes in memory: %w (%s)", size, err, memlockLimit())
	}
	keys, err := v.Register(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("rdma: registering %d bytes: %w (%s)", size, err, memlockLimit())
	}
	return &region{mem: mem, keys: keys}, nil
}

// memlockLimit describes RLIMIT_MEMLOCK, the usual reason locking or
// registering fails.
func memlockLimit() string {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l); err != nil {
		return "RLIMIT_MEMLOCK unknown"
	}
	if l.Cur == unix.RLIM_INFINITY {
		return "RLIMIT_MEMLOCK is unlimited"
	}
	return fmt.Sprintf("RLIMIT_MEMLOCK is %d bytes: raise it with ulimit -l unlimited, or Slurm's PropagateResourceLimits", l.Cur)
}

func (r *region) free(v Verbs) error {
	err := v.Deregister(r.keys)
	if uerr := unix.Munmap(r.mem); err == nil {
		err = uerr
	}
	return err
}

// addr returns the address of b's first byte (b is not empty).
func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// Registry is the set of memory ranges registered with the device, looked
// up by address: a payload inside one is written from where it lies.
type Registry struct {
	mu     sync.RWMutex
	ranges []Keys // sorted by Addr, disjoint
}

// Add records a registered range. Ranges must not overlap.
func (r *Registry) Add(k Keys) error {
	if k.Len == 0 {
		return fmt.Errorf("rdma: registering an empty range at %#x", k.Addr)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.ranges, k.Addr, func(e Keys, a uint64) int {
		switch {
		case e.Addr < a:
			return -1
		case e.Addr > a:
			return 1
		}
		return 0
	})
	if i > 0 && r.ranges[i-1].Addr+r.ranges[i-1].Len > k.Addr || i < len(r.ranges) && k.Addr+k.Len > r.ranges[i].Addr {
		return fmt.Errorf("rdma: range [%#x, %#x) overlaps one already registered", k.Addr, k.Addr+k.Len)
	}
	r.ranges = slices.Insert(r.ranges, i, k)
	return nil
}

// Remove forgets the range starting at a and returns it.
func (r *Registry) Remove(a uint64) (Keys, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range r.ranges {
		if e.Addr == a {
			r.ranges = slices.Delete(r.ranges, i, i+1)
			return e, true
		}
	}
	return Keys{}, false
}

// Find returns the registered range holding all of [a, a+n).
func (r *Registry) Find(a uint64, n int) (Keys, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	// The last range starting at or before a.
	lo, hi := 0, len(r.ranges)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.ranges[m].Addr <= a {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return Keys{}, false
	}
	e := r.ranges[lo-1]
	if a+uint64(n) > e.Addr+e.Len {
		return Keys{}, false
	}
	return e, true
}

// Len returns the number of registered ranges.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.ranges)
}
