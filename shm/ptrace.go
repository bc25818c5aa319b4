package shm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// yamaScopeFile holds the ptrace scope of Linux's Yama security module,
// where the kernel has it. process_vm_readv, which direct records are read
// with, needs the access ptrace needs to attach; Yama narrows that:
//
//	0  any process of the same user (no narrowing)
//	1  only the process's ancestors, or a process it names with
//	   prctl(PR_SET_PTRACER) — Ubuntu's default, under which sibling ranks
//	   cannot read each other
//	2  only processes with CAP_SYS_PTRACE
//	3  none
const yamaScopeFile = "/proc/sys/kernel/yama/ptrace_scope"

// capSysPtrace is CAP_SYS_PTRACE's bit in /proc/self/status's CapEff.
const capSysPtrace = 19

// letPeersRead lets the other ranks of this machine read this process's
// memory where Yama's scope 1 would refuse them, by naming every process
// of this user as an allowed reader (prctl PR_SET_PTRACER_ANY), as Open
// MPI's shared-memory transport does for the same reads. It returns, for
// the log, why direct records will be refused all the same ("" when they
// may be read): scope 2 without CAP_SYS_PTRACE, scope 3, or the prctl
// failing. Frames then go through the rings, as they do after a refusal
// (see direct.go). scope is the Yama file's path (yamaScopeFile), status
// the process's status file (/proc/self/status); allow makes the prctl
// call (allowAnyPtracer).
func letPeersRead(scope, status string, allow func() error) string {
	b, err := os.ReadFile(scope)
	if err != nil {
		return "" // no Yama: the user's own processes may read each other
	}
	const off = "single-copy transfers between ranks of this machine off"
	switch s := strings.TrimSpace(string(b)); s {
	case "0":
		return ""
	case "1":
		if err := allow(); err != nil {
			return fmt.Sprintf("%s: kernel.yama.ptrace_scope is 1 and prctl(PR_SET_PTRACER) failed: %v", off, err)
		}
		return ""
	case "2":
		if hasCapability(status, capSysPtrace) {
			return ""
		}
		return off + ": kernel.yama.ptrace_scope is 2, which lets only processes with CAP_SYS_PTRACE read another's memory"
	case "3":
		return off + ": kernel.yama.ptrace_scope is 3, which lets no process read another's memory"
	default:
		return fmt.Sprintf("%s: %s holds %q, not a scope from 0 to 3", off, scope, s)
	}
}

// allowAnyPtracer names every process of this user as an allowed ptrace
// (and process_vm_readv) caller for this process under Yama's scope 1.
func allowAnyPtracer() error {
	return unix.Prctl(unix.PR_SET_PTRACER, ^uintptr(0), 0, 0, 0) // PR_SET_PTRACER_ANY: (unsigned long)-1
}

// hasCapability reports whether the status file (/proc/self/status's
// format) lists capability bit in CapEff; false when it cannot be read.
func hasCapability(status string, bit uint) bool {
	b, err := os.ReadFile(status)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		hex, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		return err == nil && caps&(1<<bit) != 0
	}
	return false
}
