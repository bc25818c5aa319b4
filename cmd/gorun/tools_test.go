package main

import (
	"os/exec"
	"testing"
)

// buildTools builds gorun and the commands in dirs (relative to this
// package: "../train") into a temporary directory, which it returns.
func buildTools(t *testing.T, dirs ...string) string {
	t.Helper()
	bin := t.TempDir()
	if out, err := exec.Command("go", append([]string{"build", "-o", bin + "/", "."}, dirs...)...).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}
