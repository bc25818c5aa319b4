package launch

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// blameDirPrefix starts the name of the temporary directory each launch
// keeps its ranks' blame files in: gorun-blame-PID-RANDOM, PID the
// launcher's.
const blameDirPrefix = "gorun-blame-"

// sweepBlameDirs removes the blame directories in dir that launchers
// killed by SIGKILL (which cannot clean up) left behind: those of this
// user whose launcher's pid no process has. A pid taken again since by
// another process keeps its directory, until that process is gone too.
func sweepBlameDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), blameDirPrefix)
		pidText, _, found := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || !found || err != nil || pid <= 0 || !e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// readBlame returns the rank a rank's blame file names (BlameFileEnv), or
// -1 when there is none: a rank that failed on its own writes nothing.
func readBlame(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	r, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || r < 0 {
		return -1
	}
	return r
}
