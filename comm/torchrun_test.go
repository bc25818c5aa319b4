package comm_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// torchrunEnv is the environment torchrun gives worker rank of size on
// one node whose agent serves the store at port.
func torchrunEnv(rank, size int, port string) []string {
	return append(os.Environ(), workerEnv+"=sum", "GORUN_JOIN_TIMEOUT=30s", "GORUN_TIMEOUT=60s",
		fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("LOCAL_RANK=%d", rank), fmt.Sprintf("WORLD_SIZE=%d", size), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", size),
		"GROUP_RANK=0", "ROLE_RANK="+fmt.Sprint(rank), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port,
		"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_RUN_ID=test", "TORCHELASTIC_MAX_RESTARTS=0")
}

// runWorkers starts size copies of this test binary with env(rank) and
// returns each one's output and error.
func runWorkers(size int, env func(rank int) []string) ([]string, []error) {
	cmds := make([]*exec.Cmd, size)
	outs := make([]bytes.Buffer, size)
	for r := range cmds {
		cmds[r] = exec.Command(os.Args[0], "-test.run=^$")
		cmds[r].Env = env(r)
		cmds[r].Stdout, cmds[r].Stderr = &outs[r], &outs[r]
		cmds[r].Start()
	}
	out, errs := make([]string, size), make([]error, size)
	for r, c := range cmds {
		errs[r] = c.Wait()
		out[r] = outs[r].String()
	}
	return out, errs
}

// TestUnderTorchrun: under torchrun the agent serves torch's TCPStore at
// MASTER_ADDR:MASTER_PORT (here torch's own, from Debian's python3-torch,
// as Debian's torchrun 1.13 crashes before starting workers) and sets
// TORCHELASTIC_USE_AGENT_STORE=True: the ranks join through it as its
// clients (rank 0 binding that port would fail, as it did before) and
// all-reduce; torch sees their keys under gorun/attempt_0/. A restarted
// attempt uses fresh keys, and a rank that never joins is named; without
// the agent's store, every rank says which store it could not reach.
func TestUnderTorchrun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts torch's TCPStore and three jobs; the full run covers it")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("no torch in /usr/bin/python3 (Debian: apt-get install python3-torch): %v", err)
	}
	agent := exec.Command("/usr/bin/python3", "-c", `
import time
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(s.port, flush=True)
s.wait(["gorun/attempt_0/done/2"], __import__("datetime").timedelta(seconds=60))
print("torch saw rank 2 done", flush=True)
time.sleep(60)
`)
	pipe, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { agent.Process.Kill(); agent.Wait() }()
	lines := bufio.NewScanner(pipe)
	if !lines.Scan() {
		t.Fatal("the TCPStore process printed no port")
	}
	port := strings.TrimSpace(lines.Text())
	out, errs := runWorkers(3, func(r int) []string { return torchrunEnv(r, 3, port) })
	for r := range out {
		if errs[r] != nil || !strings.HasSuffix(strings.TrimSpace(out[r]), "OK") {
			t.Errorf("rank %d: %v\n%s", r, errs[r], out[r])
		}
	}
	if !lines.Scan() || lines.Text() != "torch saw rank 2 done" {
		t.Errorf("torch's store did not see the ranks' keys: %q", lines.Text())
	}

	// A restarted attempt (TORCHELASTIC_RESTART_COUNT=1) starts afresh
	// in the same store; a rank that never comes is named by the others.
	out, _ = runWorkers(2, func(r int) []string {
		return append(torchrunEnv(r, 3, port), "TORCHELASTIC_RESTART_COUNT=1", "GORUN_JOIN_TIMEOUT=3s")
	})
	for r := range out {
		if !strings.Contains(out[r], "ranks [2] did not join within 3s") {
			t.Errorf("rank %d of 3, rank 2 missing:\n%s", r, out[r])
		}
	}

	// No agent store: every rank names what it could not reach.
	start := time.Now()
	out, _ = runWorkers(2, func(r int) []string {
		return append(torchrunEnv(r, 2, "1"), "GORUN_JOIN_TIMEOUT=2s")
	})
	for r := range out {
		if !strings.Contains(out[r], "torch's TCPStore at 127.0.0.1:1 (MASTER_ADDR:MASTER_PORT, served by torchrun's agent: TORCHELASTIC_USE_AGENT_STORE=True) not reachable") {
			t.Errorf("rank %d without a store:\n%s", r, out[r])
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the ranks took %v to give up (GORUN_JOIN_TIMEOUT=2s)", d)
	}
}
