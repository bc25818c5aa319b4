package launch

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A rank that ran out of memory is named as such (RankError.OutOfMemory):
// the kernel's OOM killer ends it with SIGKILL, which says nothing by
// itself, and the Go runtime with a fatal error among hundreds of lines
// of goroutine stacks.

// goOutOfMemory reports whether line is the one the Go runtime writes to
// standard error when the kernel refuses it memory: "fatal error: out of
// memory" (no address space left) or "fatal error: runtime: out of
// memory" (no memory behind it).
func goOutOfMemory(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("fatal error: "))
	return ok && (string(rest) == "out of memory" || string(rest) == "runtime: out of memory")
}

// oomKillsFile returns the file whose "oom_kill N" line counts the
// processes the kernel's out-of-memory killer killed in this process's
// memory cgroup, which its ranks inherit (cgroup v2's memory.events, v1's
// memory.oom_control), else the machine's count (/proc/vmstat, Linux 4.13
// and later); "" when none can be read.
func oomKillsFile() string {
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, path := range append(cgroupOOMFiles(string(b)), "/proc/vmstat") {
		if _, ok := readOOMKills(path); ok {
			return path
		}
	}
	return ""
}

// cgroupOOMFiles returns the files that may count OOM kills in the memory
// cgroup a /proc/PID/cgroup listing names, the likelier first: cgroup v1's
// memory hierarchy (where v2 then has no memory controller), then v2's.
func cgroupOOMFiles(listing string) []string {
	var v1, v2 []string
	for line := range strings.Lines(listing) {
		// hierarchy-ID:controllers:path
		fields := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(fields) != 3:
		case fields[0] == "0" && fields[1] == "":
			v2 = append(v2, filepath.Join("/sys/fs/cgroup", fields[2], "memory.events"))
		case slices.Contains(strings.Split(fields[1], ","), "memory"):
			v1 = append(v1, filepath.Join("/sys/fs/cgroup/memory", fields[2], "memory.oom_control"))
		}
	}
	return append(v1, v2...)
}

// readOOMKills returns the count on path's "oom_kill N" line, and whether
// there was one.
func readOOMKills(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
