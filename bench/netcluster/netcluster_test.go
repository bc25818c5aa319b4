package netcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
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
	if err := c.SetLoss(0.1); err == nil || !strings.Contains(err.Error(), "the loss of links tc shapes is fixed") {
		t.Errorf("SetLoss on links tc shapes: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Names {
		if _, err := os.Stat("/run/netns/" + n); err == nil {
			t.Errorf("%s is still there after Close", n)
		}
	}
	// A delay: tc netem's where the kernel has it, else the emulator's;
	// asked of tc alone, an error on a kernel without netem.
	delayed := start(t, Config{Hosts: 2, Delay: 25 * time.Microsecond, Name: "gncd"})
	netem := hasNetem(context.Background(), delayed.Names[0])
	out, _ := exec.Command("ip", "netns", "exec", delayed.Names[0], "tc", "qdisc", "show").CombinedOutput()
	if d := delayed.Describe(); netem && !strings.Contains(string(out), "delay 25us") || !netem && !strings.Contains(d, "emulated in user space (unshaped, delay 25µs, MTU 9000)") {
		t.Errorf("a 25 µs delay (netem %v): %s\n%s", netem, d, out)
	}
	delayed.Close()
	if _, err := Start(context.Background(), Config{Hosts: 2, Delay: time.Millisecond, Link: "tc", Name: "gncd"}); !netem && (err == nil || !strings.Contains(err.Error(), "this kernel has no tc netem")) {
		t.Errorf("a delay by tc without netem: %v", err)
	}
	for _, bad := range []Config{{Hosts: 0}, {Hosts: 2, Loss: 1}, {Hosts: 2, Delay: -time.Second}, {Hosts: 2, Name: "much-too-long"}, {Hosts: 2, Rate: "fast"},
		{Hosts: 2, Link: "netem"}, {Hosts: 2, Link: "user", MTU: 100}, {Hosts: 2, Link: "user", Rate: "fast"}} {
		if _, err := Start(context.Background(), bad); err == nil {
			t.Errorf("Start(%+v) succeeded", bad)
		}
	}
}

// TestEmulatedLinks runs TCP between two hosts over links the user-space
// emulator makes (as it would on a kernel without netem): a 2 ms delay
// shows in the round trips, a rate bounds how fast data moves, and with
// a tenth of the packets lost TCP still delivers every byte while the
// emulator counts the losses. The client and server are this test binary
// run in the hosts' namespaces (TestMain's helper).
func TestEmulatedLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the emulated links' runs take a few seconds")
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		// the client's round trips of one byte (median) at least min and
		// under max; bytes each way
		min, max time.Duration
		bytes    int
		minTime  time.Duration // the echo of bytes at the least
	}{
		{"delay", Config{Delay: 2 * time.Millisecond}, 4 * time.Millisecond, 7 * time.Millisecond, 1 << 20, 0},
		{"rate", Config{Rate: "100mbit", MTU: 1500}, 0, 3 * time.Millisecond, 1 << 20, (1 << 20) * 8 * time.Second / 100e6}, // each way on its own link
		{"loss", Config{Loss: 0.1}, 0, time.Second, 1 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Hosts, cfg.Link, cfg.Name = 2, "user", "gnce"
			c := start(t, cfg)
			if d := c.Describe(); !strings.Contains(d, "emulated in user space") {
				t.Errorf("Describe: %s", d)
			}
			for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
				if err := c.SetLoss(bad); err == nil {
					t.Errorf("SetLoss(%v) succeeded", bad)
				}
			}
			rtt, echo, err := echoRun(c, c.Addrs[1]+":29601", tc.bytes)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: median round trip %v, %d bytes echoed in %v; %+v", c.Describe(), rtt, tc.bytes, echo, c.LinkStats())
			if rtt < tc.min || rtt >= tc.max {
				t.Errorf("median round trip %v: want %v to %v", rtt, tc.min, tc.max)
			}
			if echo < tc.minTime {
				t.Errorf("%d bytes echoed in %v: faster than the link's rate allows (%v)", tc.bytes, echo, tc.minTime)
			}
			s := c.LinkStats()
			if s.Forwarded == 0 || (cfg.Loss > 0) != (s.Lost > 0) || s.Overflow != 0 && tc.name != "rate" {
				t.Errorf("link stats %+v", s)
			}
		})
	}
}

// resultLine returns the helper client's line of results.
func resultLine(out []byte) string {
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "rtt ") {
			return line
		}
	}
	return ""
}

// TestHelperProcess is TestEmulatedLinks' server and client when
// NETCLUSTER_HELPER says so, and passes at once otherwise. The server
// echoes one connection; the client times 101 one-byte round trips, then
// NETCLUSTER_BYTES bytes sent and echoed back, and checks them.
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv("NETCLUSTER_ADDR")
	switch os.Getenv("NETCLUSTER_HELPER") {
	case "server":
		if err := EchoOnce(addr, nil); err != nil {
			t.Fatal(err)
		}
	case "client":
		conn, err := DialWhenListening(&net.Dialer{}, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var rtts []time.Duration
		b := []byte{1}
		for range 101 {
			start := time.Now()
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(conn, b); err != nil {
				t.Fatal(err)
			}
			rtts = append(rtts, time.Since(start))
		}
		slices.Sort(rtts)
		n, _ := strconv.Atoi(os.Getenv("NETCLUSTER_BYTES"))
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			_, err := conn.Write(data)
			errc <- err
		}()
		got := make([]byte, n)
		if _, err := io.ReadFull(conn, got); err != nil {
			t.Fatal(err)
		}
		echo := time.Since(start)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("the echoed bytes differ from those sent")
		}
		fmt.Printf("\nrtt %d echo %d\n", rtts[len(rtts)/2], echo) // ns
	}
}
