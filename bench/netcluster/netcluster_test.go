package netcluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// start makes a cluster for a test, skipping where this machine cannot
// (no root, no iproute2) except under CI (CI=true), which runs as root
// with iproute2 installed: there it fails.
func start(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), cfg)
	if errors.Is(err, ErrNoNamespaces) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCluster: three hosts with rate-limited links have their addresses
// and tbf shaping; a cluster of the same name left behind by a killed
// run is replaced; Close removes every namespace; bad settings are
// refused, and a delay on a kernel without netem is an error saying so.
func TestCluster(t *testing.T) {
	cfg := Config{Hosts: 3, Rate: "1gbit", Name: "gnct"}
	start(t, cfg)
	c := start(t, cfg) // over the first one's leftovers
	for i, n := range c.Names {
		out, err := exec.Command("ip", "-n", n, "addr", "show").CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.Addrs[i]+"/24") {
			t.Errorf("%s: %v\n%s", n, err, out)
		}
		out, err = exec.Command("ip", "netns", "exec", n, "tc", "qdisc", "show").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "tbf") || !strings.Contains(string(out), "rate 1Gbit") {
			t.Errorf("%s's shaping: %v\n%s", n, err, out)
		}
	}
	if d := c.Describe(); !strings.Contains(d, "3 hosts") || !strings.Contains(d, "rate 1gbit") {
		t.Errorf("Describe: %s", d)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Names {
		if _, err := os.Stat("/run/netns/" + n); err == nil {
			t.Errorf("%s is still there after Close", n)
		}
	}
	delayed, err := Start(context.Background(), Config{Hosts: 2, Delay: 25 * time.Microsecond, Name: "gncd"})
	if err == nil {
		defer delayed.Close()
		out, _ := exec.Command("ip", "netns", "exec", delayed.Names[0], "tc", "qdisc", "show").CombinedOutput()
		if !strings.Contains(string(out), "delay 25us") {
			t.Errorf("a 25 µs delay: %s", out)
		}
	} else if !strings.Contains(err.Error(), "this kernel has no tc netem") {
		t.Errorf("a delay: %v", err)
	}
	for _, bad := range []Config{{Hosts: 0}, {Hosts: 2, Loss: 1}, {Hosts: 2, Delay: -time.Second}, {Hosts: 2, Name: "much-too-long"}, {Hosts: 2, Rate: "fast"}} {
		if _, err := Start(context.Background(), bad); err == nil {
			t.Errorf("Start(%+v) succeeded", bad)
		}
	}
}
