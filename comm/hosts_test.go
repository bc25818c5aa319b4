package comm_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/bench/netcluster"
	"github.com/gorun/gorun/bench/netcluster/netclustertest"
	"github.com/gorun/gorun/comm/commtest"
)

// TestCollectivesAcrossHosts runs the collective matrix (every
// collective, op and element type at the matrix's counts, checked against
// the sequential reference), all-reduce, broadcast, all-gather,
// reduce-scatter and barrier host by host at every size
// (GORUN_ALGO=hierarchical) and never (flat), on 3 hosts × 2 ranks: network namespaces on a
// bridge (bench/netcluster), links limited to 1 Gbit/s, gorun started on
// each host (-nnodes 3); and with the cost model's choice (auto) on links
// that also delay every packet by 300 µs and lose one in 500 (netem's, or
// the user-space emulator's where the kernel has no netem), where the
// step the model measures while joining must show the delay. Ranks of a
// host talk through shared memory, hosts over TCP. It needs root; CI
// (CI=true) runs it as root and fails where the hosts cannot be made.
func TestCollectivesAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("a 6-rank matrix across network namespaces; the full run covers it")
	}
	link := regexp.MustCompile(`collectives chosen by a cost model, the link between hosts at ([0-9.]+[µm]?s) per step, [0-9.e+-]+ GB/s \(GORUN_NET: measured while joining\)`)
	for _, c := range []struct {
		name, algo, log string
		delay           time.Duration
		loss            float64
	}{
		{"hierarchical", "hierarchical", "; host by host (3 hosts × 2 ranks; GORUN_ALGO=flat: never): all-reduces, broadcasts, all-gathers, reduce-scatters, barriers", 0, 0},
		{"flat", "flat", "", 0, 0},
		{"auto-delayed-lossy", "auto", "; host by host (3 hosts × 2 ranks; GORUN_ALGO=flat: never): ", 300 * time.Microsecond, 0.002},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := netcluster.Config{Hosts: 3, Rate: "1gbit", Delay: c.delay, Loss: c.loss}
			all := matrixAcrossHosts(t, c.algo, cfg)
			if c.log != "" && !strings.Contains(all, c.log) || c.log == "" && strings.Contains(all, "host by host") {
				t.Errorf("GORUN_ALGO=%s: rank 0's log does not say %q:\n%s", c.algo, c.log, all)
			}
			m := link.FindStringSubmatch(all)
			if m == nil {
				t.Fatalf("GORUN_ALGO=%s: rank 0's log does not give the link it measured for the cost model:\n%s", c.algo, all)
			}
			if step, err := time.ParseDuration(m[1]); err != nil || step < c.delay {
				t.Errorf("the link measured at %s per step: want at least the links' delay, %v", m[1], c.delay)
			}
		})
	}
}

// matrixAcrossHosts runs the matrix with GORUN_ALGO=algo on 3 hosts made
// as cfg says and returns the job's output.
func matrixAcrossHosts(t *testing.T, algo string, cfg netcluster.Config) string {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startHosts(ctx, t, "gch", cfg)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../cmd/gorun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	outs, errs := make([]string, 3), make([]error, 3)
	var wg sync.WaitGroup
	for h := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := c.Command(ctx, h, filepath.Join(bin, "gorun"), "-nnodes", "3", "-node-rank", fmt.Sprint(h), "-master", c.Addrs[0]+":29518",
				"-np", "2", os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), workerEnv+"=matrix", "GORUN_TOKEN=hosts-test", "GORUN_JOIN_TIMEOUT=60s", "GORUN_TIMEOUT=120s", "GORUN_ALGO="+algo)
			out, err := cmd.CombinedOutput()
			outs[h], errs[h] = string(out), err
		}()
	}
	wg.Wait()
	all := strings.Join(outs, "")
	for h := range 3 {
		if errs[h] != nil {
			t.Fatalf("host %d: %v\n%s", h, errs[h], all)
		}
	}
	if s := c.LinkStats(); s.Forwarded > 0 { // links emulated in user space
		t.Logf("%s: %+v", c.Describe(), s)
		if (cfg.Loss > 0) != (s.Lost > 0) {
			t.Errorf("loss %g, yet %d packets lost", cfg.Loss, s.Lost)
		}
	}
	lines := commtest.RankLines(all)
	for r := range 6 {
		if !commtest.EndsOK(lines[r]) {
			t.Errorf("rank %d did not report OK:\n%s", r, all)
		}
	}
	if !strings.Contains(all, "reaches ranks [1] through shared memory and ranks [2 3 4 5] over TCP") {
		t.Errorf("rank 0 does not reach its host's rank by shared memory and the others by TCP:\n%s", all)
	}
	return all
}

// TestCollectivesAcrossUnevenHosts runs the collective matrix against the
// sequential reference on 3 hosts holding 3, 2 and 1 ranks (network
// namespaces on a bridge, 1 Gbit/s links): no hierarchy fits uneven
// hosts, so the collectives run over the whole group, all-reduces chosen
// by the cost model for this layout. Every rank is started in its host's
// namespace by itself, with torchrun's variables, as a launcher that
// allows uneven hosts would.
func TestCollectivesAcrossUnevenHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("a 6-rank matrix across network namespaces; the full run covers it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := threeHosts(ctx, t, "guh")
	hostOf, localRank, perHost := []int{0, 0, 0, 1, 1, 2}, []int{0, 1, 2, 0, 1, 0}, []int{3, 2, 1}
	outs, errs := make([]string, 6), make([]error, 6)
	var wg sync.WaitGroup
	for r := range 6 {
		wg.Go(func() {
			cmd := c.Command(ctx, hostOf[r], os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), workerEnv+"=matrix", "GORUN_TOKEN=uneven-hosts-test", "GORUN_JOIN_TIMEOUT=60s", "GORUN_TIMEOUT=120s",
				fmt.Sprintf("RANK=%d", r), "WORLD_SIZE=6", fmt.Sprintf("LOCAL_RANK=%d", localRank[r]), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", perHost[hostOf[r]]),
				"MASTER_ADDR="+c.Addrs[0], "MASTER_PORT=29517")
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		})
	}
	wg.Wait()
	all := strings.Join(outs, "\n")
	for r := range 6 {
		if lines := strings.Fields(outs[r]); errs[r] != nil || len(lines) == 0 || lines[len(lines)-1] != "OK" {
			t.Errorf("rank %d: %v, did not report OK:\n%s", r, errs[r], outs[r])
		}
	}
	for _, want := range []string{"reaches ranks [1 2] through shared memory and ranks [3 4 5] over TCP", "collectives chosen by a cost model, the link between hosts at"} {
		if !strings.Contains(outs[0], want) {
			t.Errorf("rank 0's log does not say %q:\n%s", want, all)
		}
	}
	if strings.Contains(outs[0], "host by host") {
		t.Errorf("uneven hosts got a hierarchy:\n%s", outs[0])
	}
}

// TestPartitionOneSideGoesOn: 2 hosts × 2 ranks run all-reduces; the
// network between the hosts is cut for good. Every rank's call fails
// (the host watch, or keep-alive: within about 15 s) and every rank
// shrinks; each side agrees on its own two ranks, but only the side with
// rank 0 goes on (half of the ranks, with the lowest): the other side
// gets ErrMinority naming the silent ranks — two halves never both go on
// training, each saving over the other's checkpoints. The ranks are
// started with torchrun's variables, without a launcher.
func TestPartitionOneSideGoesOn(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s run across network namespaces; the full run covers it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startHosts(ctx, t, "gpt", netcluster.Config{Hosts: 2, Link: "user"})
	outs := make([]strings.Builder, 4)
	var mu sync.Mutex
	steps := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for r := range 4 {
		cmd := c.Command(ctx, r/2, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=partition", "GORUN_TOKEN=partition-test", "GORUN_JOIN_TIMEOUT=60s", "GORUN_TIMEOUT=40s",
			fmt.Sprintf("RANK=%d", r), "WORLD_SIZE=4", fmt.Sprintf("LOCAL_RANK=%d", r%2), "LOCAL_WORLD_SIZE=2",
			"MASTER_ADDR="+c.Addrs[0], "MASTER_PORT=29519")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				mu.Lock()
				outs[r].WriteString(sc.Text() + "\n")
				mu.Unlock()
				if r == 0 && sc.Text() == "STEP 20" {
					steps <- struct{}{}
				}
			}
			if err := cmd.Wait(); err != nil {
				mu.Lock()
				fmt.Fprintf(&outs[r], "exit: %v\n", err)
				mu.Unlock()
			}
		})
	}
	select {
	case <-steps:
	case <-ctx.Done():
	}
	if err := c.SetLoss(1); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	all := ""
	for r := range 4 {
		all += fmt.Sprintf("--- rank %d\n%s", r, outs[r].String())
	}
	for r := range 2 {
		if text := outs[r].String(); !strings.Contains(text, "SHRUNK to [0 1] after") || !commtest.EndsOK(strings.Split(strings.TrimSpace(text), "\n")) {
			t.Errorf("rank %d did not go on with ranks 0 and 1:\n%s", r, all)
		}
	}
	for r := 2; r < 4; r++ {
		if text := outs[r].String(); !strings.Contains(text, "MINORITY after") || !strings.Contains(text, "ranks [2 3] agreed; ranks [0 1] went silent") {
			t.Errorf("rank %d did not stop as a minority naming the silent ranks:\n%s", r, all)
		}
	}
	t.Logf("%s\n%+v", all, c.LinkStats())
}

// threeHosts makes 3 namespace hosts on a bridge with 1 Gbit/s links,
// named from prefix, removed when the test ends. It needs root: without
// it the test is skipped, except under CI (CI=true), which runs as root.
func threeHosts(ctx context.Context, t *testing.T, prefix string) *netcluster.Cluster {
	return startHosts(ctx, t, prefix, netcluster.Config{Hosts: 3, Rate: "1gbit"})
}

// startHosts is threeHosts for the hosts and links cfg gives.
func startHosts(ctx context.Context, t *testing.T, prefix string, cfg netcluster.Config) *netcluster.Cluster {
	t.Helper()
	return netclustertest.Start(ctx, t, prefix, cfg)
}
