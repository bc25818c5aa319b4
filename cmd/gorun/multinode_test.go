package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/bench/netcluster"
	"github.com/gorun/gorun/bench/netcluster/netclustertest"
)

// twoHosts makes two hosts (network namespaces with their own addresses,
// bench/netcluster), removed when the test ends. Without root, or where
// namespaces cannot be made, it skips the test saying so, except under
// CI (CI=true), which installs iproute2 and runs as root: there it fails,
// so that the multi-node tests cannot pass by not running.
func twoHosts(t *testing.T) *netcluster.Cluster {
	t.Helper()
	return netclustertest.Start(context.Background(), t, "gmn", netcluster.Config{Hosts: 2})
}

// buildAllreduce returns a directory holding gorun and examples/allreduce.
func buildAllreduce(t *testing.T) string {
	t.Helper()
	return buildTools(t, "../../examples/allreduce")
}

// TestMultiNodeAcrossNamespaces runs one job over two "hosts" — network
// namespaces with their own addresses — with gorun started on each, as
// torchrun's multi-node mode: 2 ranks per node, global ranks from the node
// rank, rendezvous at node 0's address, traffic between the hosts over
// their links (veth pairs on a bridge).
func TestMultiNodeAcrossNamespaces(t *testing.T) {
	hosts, bin := twoHosts(t), buildAllreduce(t)
	master := hosts.Addrs[0] + ":29517"
	outs := runTwoNodes(t, hosts, bin, [2]string{master, master})
	// Node 0's rank 0 reports how it reaches the others: rank 1 through
	// shared memory, ranks 2 and 3 (the other namespace) over TCP.
	if !strings.Contains(outs[0], "reaches ranks [1] through shared memory and ranks [2 3] over TCP") {
		t.Errorf("rank 0 did not reach ranks 2 and 3 over TCP:\n%s", outs[0])
	}
}

// TestMultiNodeMasterThroughLoopback: the master's node reaches the
// rendezvous store through its loopback — its own name resolves to
// 127.0.1.1 there (Debian's hosts file) — while the other node reaches it
// over the network. Its ranks must not publish the loopback address the
// store connection left by, which the other node cannot reach: the launch
// says the job spans hosts, so they publish their network interface's.
func TestMultiNodeMasterThroughLoopback(t *testing.T) {
	hosts, bin := twoHosts(t), buildAllreduce(t)
	runTwoNodes(t, hosts, bin, [2]string{"127.0.1.1:29519", hosts.Addrs[0] + ":29519"})
}

// runTwoNodes runs gorun -np 2 examples/allreduce on both hosts as one job
// of 4 ranks, node i told the master is at masters[i], and fails the test
// unless every rank prints the sum; it returns each node's output.
func runTwoNodes(t *testing.T, hosts *netcluster.Cluster, bin string, masters [2]string) [2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var outs [2]string
	var errs [2]error
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Go(func() {
			cmd := hosts.Command(ctx, node, filepath.Join(bin, "gorun"),
				"-nnodes", "2", "-node-rank", fmt.Sprint(node), "-master", masters[node], "-np", "2", filepath.Join(bin, "allreduce"))
			cmd.Env = append(os.Environ(), "GORUN_TOKEN=test-token-shared-by-both-nodes", "GORUN_JOIN_TIMEOUT=30s")
			out, err := cmd.CombinedOutput()
			outs[node], errs[node] = string(out), err
		})
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
	return outs
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

// TestMultiNodeSameNodeRank: both machines started with -node-rank 0 (the
// launch command copied without changing it). Each claims ranks 0 and 1;
// the store at the master turns away the second process of each rank,
// which stops at once saying the rank was given twice, and the job fails
// on both machines instead of waiting for ranks 2 and 3 in silence.
func TestMultiNodeSameNodeRank(t *testing.T) {
	hosts, bin := twoHosts(t), buildAllreduce(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master := hosts.Addrs[0] + ":29518"
	outs := make([]string, 2)
	errs := make([]error, 2)
	took := make([]time.Duration, 2)
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Go(func() {
			cmd := hosts.Command(ctx, node, filepath.Join(bin, "gorun"),
				"-nnodes", "2", "-node-rank", "0", "-master", master, "-np", "2", filepath.Join(bin, "allreduce"))
			cmd.Env = append(os.Environ(), "GORUN_TOKEN=test-token-shared-by-both-nodes", "GORUN_JOIN_TIMEOUT=20s")
			start := time.Now()
			out, err := cmd.CombinedOutput()
			outs[node], errs[node], took[node] = string(out), err, time.Since(start)
		})
	}
	wg.Wait()
	all := outs[0] + outs[1]
	for node := range 2 {
		if errs[node] == nil {
			t.Errorf("node %d's gorun succeeded with half the job:\n%s", node, outs[node])
		}
	}
	turnedAway := 0
	for node := range 2 {
		if strings.Contains(outs[node], "another process has joined as rank") {
			turnedAway++
			// Told at once, not at the join's deadline.
			if took[node] > 15*time.Second {
				t.Errorf("node %d was turned away after %v", node, took[node])
			}
		}
	}
	if turnedAway == 0 || !strings.Contains(all, "(the rank, or the node rank, given twice?)") {
		t.Errorf("no process was told its rank was given twice:\n--- node 0:\n%s\n--- node 1:\n%s", outs[0], outs[1])
	}
}
