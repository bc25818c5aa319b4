package launch

import (
	"errors"
	"io/fs"
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

// blameLock is the file in a blame directory its launcher holds locked
// (flock) while it runs: the lock goes with the process, however it ends,
// and other processes see it in any pid namespace.
const blameLock = ".lock"

// makeBlameDir makes this launch's blame directory in the temporary
// directory and locks it; unlock releases the lock.
func makeBlameDir() (dir string, unlock func(), err error) {
	dir, err = os.MkdirTemp("", blameDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, blameLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, func() { f.Close() }, nil
}

// sweepBlameDirs removes the blame directories in dir that launchers
// killed by SIGKILL (which cannot clean up) left behind: those of this
// user whose lock no process holds or, without a lock file, whose
// launcher's pid no process has.
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
		if path := filepath.Join(dir, e.Name()); ownerGone(path, pid) {
			os.RemoveAll(path)
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

// ownerGone reports whether the launcher of the blame directory at path,
// with pid in its name, has ended: its lock is free (taken here for a
// moment), or, where there is no lock file, no process has its pid.
func ownerGone(path string, pid int) bool {
	f, err := os.Open(filepath.Join(path, blameLock))
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) && syscall.Kill(pid, 0) == syscall.ESRCH
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
