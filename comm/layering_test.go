package comm_test

import (
	"go/build"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gorun/gorun"

// moduleImports returns the packages of this module that the package in
// dir imports, directly or through others (test files excluded).
func moduleImports(t *testing.T, root, dir string) []string {
	t.Helper()
	seen := map[string]bool{}
	var visit func(dir string)
	visit = func(dir string) {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok || seen[rel] {
				continue
			}
			seen[rel] = true
			visit(filepath.Join(root, rel))
		}
	}
	visit(filepath.Join(root, dir))
	out := make([]string, 0, len(seen))
	for rel := range seen {
		out = append(out, rel)
	}
	slices.Sort(out)
	return out
}

// TestLayering holds the architecture's rule that dependencies point one
// way: transports know no algorithm and no group (they satisfy ring's
// interface without importing it), the algorithms know no transport, and
// nothing of the communication side knows the models or the trainer.
func TestLayering(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	rules := []struct {
		pkg       string
		forbidden []string // package path prefixes, relative to the module
	}{
		{"tcp", []string{"comm", "ring", "shm", "rdma", "model", "train"}},
		{"shm", []string{"comm", "ring", "tcp", "rdma", "model", "train"}},
		{"rdma", []string{"comm", "ring", "tcp", "shm", "model", "train"}},
		{"rdma/rdmatest", []string{"comm", "ring", "model", "train"}},
		{"mailbox", []string{"comm", "ring", "tcp", "shm", "rdma", "model", "train"}},
		{"ring", []string{"comm", "tcp", "shm", "rdma", "mailbox", "model", "train"}},
		{"comm", []string{"model", "train", "bench", "cmd"}},
		{"comm/rendezvous", []string{"comm", "model", "train"}},
		{"comm/launch", []string{"model", "train"}},
	}
	for _, r := range rules {
		for _, imp := range moduleImports(t, root, r.pkg) {
			for _, f := range r.forbidden {
				if imp == f || strings.HasPrefix(imp, f+"/") {
					t.Errorf("%s imports %s (directly or through another package): it must not depend on %s", r.pkg, imp, f)
				}
			}
		}
	}
}
