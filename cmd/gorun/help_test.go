package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryCommandHelp: each command's -h begins with a usage line naming
// it and says what it does before its flags (the flag package alone
// prints "Usage of NAME:" and the flags), exiting 0; -version prints the
// command's name and build.
func TestEveryCommandHelp(t *testing.T) {
	bin := buildTools(t, "../train", "../infer", "../bench", "../gendata", "../shard")
	for _, tc := range []struct {
		name string
		want []string // in order, after the usage line
	}{
		{"gorun", []string{"Starts PROGRAM", "examples:", "flags:", "-np"}},
		{"train", []string{"Trains a workshop CNN", "examples:", "flags:", "-model"}},
		{"infer", []string{"Classifies images", "examples:", "flags:", "-weights"}},
		{"bench", []string{"Commands:", "collectives", "model", "bench COMMAND -h"}},
		{"gendata", []string{"Writes a dataset", "examples:", "flags:", "-format"}},
		{"shard", []string{"Packs an image folder", "examples:", "flags:", "-samples"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(bin, tc.name), "-h").CombinedOutput()
			if err != nil {
				t.Fatalf("%s -h: %v\n%s", tc.name, err, out)
			}
			text := string(out)
			if !strings.HasPrefix(text, "usage: "+tc.name+" ") {
				t.Fatalf("%s -h begins %q, want its usage line", tc.name, text[:min(40, len(text))])
			}
			last := 0
			for _, want := range tc.want {
				at := strings.Index(text[last:], want)
				if at < 0 {
					t.Fatalf("%s -h lacks %q after byte %d:\n%s", tc.name, want, last, text)
				}
				last += at + len(want)
			}
			out, err = exec.Command(filepath.Join(bin, tc.name), "-version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), tc.name+" ") {
				t.Errorf("%s -version: %v, %q", tc.name, err, out)
			}
		})
	}
}
