package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// netns makes two network namespaces joined by a veth pair with private
// addresses 10.77.N.1 and 10.77.N.2, and returns their names and
// addresses; they are removed when the test ends. Without root it skips
// the test, saying so; where root cannot make them it skips too, except
// under CI (CI=true), which installs iproute2 and runs as root: there it
// fails, so that the multi-node tests cannot pass by not running.
func netns(t *testing.T) (names, addrs [2]string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("making network namespaces needs root")
	}
	cannot := t.Skipf
	if os.Getenv("CI") == "true" {
		cannot = t.Fatalf
	}
	if _, err := exec.LookPath("ip"); err != nil {
		cannot("ip (iproute2) is not installed: %v", err)
	}
	id := os.Getpid() % 250
	names = [2]string{fmt.Sprintf("gorun-a%d", id), fmt.Sprintf("gorun-b%d", id)}
	addrs = [2]string{fmt.Sprintf("10.77.%d.1", id), fmt.Sprintf("10.77.%d.2", id)}
	veth := [2]string{fmt.Sprintf("gra%d", id), fmt.Sprintf("grb%d", id)}
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		for _, n := range names {
			exec.Command("ip", "netns", "del", n).Run()
		}
	})
	if err := ip("netns", "add", names[0]); err != nil {
		cannot("this machine does not allow network namespaces: %v", err)
	}
	for _, step := range [][]string{
		{"netns", "add", names[1]},
		{"link", "add", veth[0], "type", "veth", "peer", "name", veth[1]},
		{"link", "set", veth[0], "netns", names[0]},
		{"link", "set", veth[1], "netns", names[1]},
		{"-n", names[0], "addr", "add", addrs[0] + "/24", "dev", veth[0]},
		{"-n", names[1], "addr", "add", addrs[1] + "/24", "dev", veth[1]},
		{"-n", names[0], "link", "set", veth[0], "up"},
		{"-n", names[1], "link", "set", veth[1], "up"},
		{"-n", names[0], "link", "set", "lo", "up"},
		{"-n", names[1], "link", "set", "lo", "up"},
	} {
		if err := ip(step...); err != nil {
			t.Fatal(err)
		}
	}
	return names, addrs
}

// TestMultiNodeAcrossNamespaces runs one job over two "hosts" — network
// namespaces with their own addresses — with gorun started on each, as
// torchrun's multi-node mode: 2 ranks per node, global ranks from the node
// rank, rendezvous at node 0's address, all traffic over the veth pair.
func TestMultiNodeAcrossNamespaces(t *testing.T) {
	names, addrs := netns(t)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", ".", "../../examples/allreduce").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master := addrs[0] + ":29517"
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", names[node], filepath.Join(bin, "gorun"),
				"-nnodes", "2", "-node-rank", fmt.Sprint(node), "-master", master, "-np", "2", filepath.Join(bin, "allreduce"))
			cmd.Env = append(os.Environ(), "GORUN_TOKEN=test-token-shared-by-both-nodes", "GORUN_JOIN_TIMEOUT=30s")
			out, err := cmd.CombinedOutput()
			outs[node], errs[node] = string(out), err
		}()
	}
	wg.Wait()
	for node := range 2 {
		if errs[node] != nil {
			t.Fatalf("node %d: %v\n%s\nnode %d's output:\n%s", node, errs[node], outs[node], 1-node, outs[1-node])
		}
		for _, r := range []int{2 * node, 2*node + 1} {
			want := fmt.Sprintf("[%d] rank %d of 4: sum of ranks = 6, ranks counted = 4", r, r)
			if !strings.Contains(outs[node], want) {
				t.Errorf("node %d's output lacks %q:\n%s", node, want, outs[node])
			}
		}
	}
	// Node 0's rank 0 reports how it reaches the others: rank 1 through
	// shared memory, ranks 2 and 3 (the other namespace) over TCP.
	if !strings.Contains(outs[0], "reaches ranks [1] through shared memory and ranks [2 3] over TCP") {
		t.Errorf("rank 0 did not reach ranks 2 and 3 over TCP:\n%s", outs[0])
	}
}

// TestMultiNodeNeedsToken: a multi-node launch without a shared token is
// refused with a message saying what to set.
func TestMultiNodeNeedsToken(t *testing.T) {
	t.Setenv("GORUN_TOKEN", "")
	var out strings.Builder
	code := run([]string{"-nnodes", "2", "-node-rank", "1", "-master", "10.0.0.1:29500", "-np", "1", "true"}, nil, &out, &out)
	if code == 0 || !strings.Contains(out.String(), "GORUN_TOKEN") {
		t.Errorf("exit %d, output %q; want a refusal naming GORUN_TOKEN", code, out.String())
	}
	out.Reset()
	code = run([]string{"-nnodes", "2", "-node-rank", "2", "-master", "10.0.0.1:29500", "true"}, nil, &out, &out)
	if code == 0 || !strings.Contains(out.String(), "node rank 2") {
		t.Errorf("exit %d, output %q; want a refusal naming the node rank", code, out.String())
	}
}
