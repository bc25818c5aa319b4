package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// tools is where this package's tests find gorun and the other commands,
// each built once per test binary (linking them again for every test
// took a good share of the package's time in CI).
var tools struct {
	mu    sync.Mutex
	dir   string
	built map[string]bool // by command directory, relative to this package
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gorun-tools-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tools.dir, tools.built = dir, map[string]bool{}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildTools returns a directory holding gorun and the commands in dirs
// (relative to this package: "../train"), building those not built yet.
// The tests only run the binaries there; none writes to it.
func buildTools(t *testing.T, dirs ...string) string {
	t.Helper()
	tools.mu.Lock()
	defer tools.mu.Unlock()
	var missing []string
	for _, d := range append([]string{"."}, dirs...) {
		if !tools.built[d] {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		if out, err := exec.Command("go", append([]string{"build", "-o", tools.dir + "/"}, missing...)...).CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		for _, d := range missing {
			tools.built[d] = true
		}
	}
	return filepath.Clean(tools.dir)
}
