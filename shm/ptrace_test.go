package shm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLetPeersRead: under each of Yama's ptrace scopes, the ranks are let
// read each other's memory where a prctl can do it (scope 1: Ubuntu's
// default, which refuses sibling processes) and the log is told why not
// where nothing can.
func TestLetPeersRead(t *testing.T) {
	const (
		withPtrace    = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000080000\n"
		withoutPtrace = "Name:\tx\nCapEff:\t00000000a80425fb\n" // Docker's default set: no CAP_SYS_PTRACE
	)
	for _, tc := range []struct {
		name, scope, status string
		allowErr            error
		wantAllow           bool
		wantNote            string // "" or a part of the note
	}{
		{name: "no Yama", scope: "", status: withoutPtrace},
		{name: "scope 0", scope: "0\n", status: withoutPtrace},
		{name: "scope 1", scope: "1\n", status: withoutPtrace, wantAllow: true},
		{name: "scope 1, prctl refused", scope: "1\n", status: withoutPtrace, allowErr: errors.New("operation not permitted"), wantAllow: true,
			wantNote: "single-copy transfers between ranks of this machine off: kernel.yama.ptrace_scope is 1 and prctl(PR_SET_PTRACER) failed: operation not permitted"},
		{name: "scope 2 with CAP_SYS_PTRACE", scope: "2\n", status: withPtrace},
		{name: "scope 2 without", scope: "2\n", status: withoutPtrace, wantNote: "ptrace_scope is 2, which lets only processes with CAP_SYS_PTRACE"},
		{name: "scope 2, status unreadable", scope: "2\n", wantNote: "ptrace_scope is 2"},
		{name: "scope 3", scope: "3\n", status: withPtrace, wantNote: "ptrace_scope is 3, which lets no process"},
		{name: "not a scope", scope: "x\n", status: withPtrace, wantNote: `holds "x", not a scope from 0 to 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			scope, status := filepath.Join(dir, "ptrace_scope"), filepath.Join(dir, "status")
			for path, content := range map[string]string{scope: tc.scope, status: tc.status} {
				if content != "" {
					if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			allowed := false
			note := letPeersRead(scope, status, func() error { allowed = true; return tc.allowErr })
			if allowed != tc.wantAllow {
				t.Errorf("prctl called: %v, want %v", allowed, tc.wantAllow)
			}
			if (note == "") != (tc.wantNote == "") || !strings.Contains(note, tc.wantNote) {
				t.Errorf("note %q, want one containing %q", note, tc.wantNote)
			}
		})
	}
}

// TestAllowAnyPtracer: the prctl is one this kernel accepts where Yama is
// there; elsewhere it refuses it as unknown (EINVAL), which letPeersRead
// never asks of it, since it calls it only under scope 1.
func TestAllowAnyPtracer(t *testing.T) {
	err := allowAnyPtracer()
	if _, statErr := os.Stat(yamaScopeFile); statErr == nil {
		if err != nil {
			t.Fatalf("Yama is here (%s) and PR_SET_PTRACER_ANY failed: %v", yamaScopeFile, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no %s, yet prctl(PR_SET_PTRACER) succeeded: is Yama there after all?", yamaScopeFile)
	}
}

// TestHasCapability reads CapEff's bits.
func TestHasCapability(t *testing.T) {
	status := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(status, []byte("CapPrm:\tffffffffffffffff\nCapEff:\t0000000000080001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for bit, want := range map[uint]bool{0: true, 19: true, 1: false, 21: false} {
		if got := hasCapability(status, bit); got != want {
			t.Errorf("bit %d: %v, want %v", bit, got, want)
		}
	}
	if hasCapability(filepath.Join(t.TempDir(), "none"), 0) {
		t.Error("an unreadable status file reported a capability")
	}
}
