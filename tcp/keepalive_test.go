package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/bench/netcluster"
	"github.com/gorun/gorun/bench/netcluster/netclustertest"
)

// TestKeepAliveOutlastsOutage cuts two hosts off from each other for 12 s
// while a connection between them, set up as the transport sets up its
// own (keepAlive, tune), sits idle, then uses it: keep-alive must not have
// closed it. Then it cuts them off for good: a read waiting on the idle
// connection must fail with "connection timed out" about 15 s after the
// connection's last exchange, as keep-alive promises for a host that
// vanishes. Probes start after 5 s of silence; with 3 probes 2 s apart
// (the setting before) the kernel gave up at 11 s, within the outage —
// and on a link losing 1% of its packets an idle connection so died about
// once in every 130,000 silences, a few times a day across a large job's
// idle connections. 10 probes 1 s apart give up at 15 s. The hosts are
// network namespaces whose links the user-space emulator carries
// (bench/netcluster); it needs root, and CI (CI=true) runs it as root.
func TestKeepAliveOutlastsOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("an outage of 12 s; the full run covers it")
	}
	c := emulatedHosts(t, "gka")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := c.Addrs[1] + ":29610"
	server := c.Command(ctx, 1, os.Args[0], "-test.run=^TestKeepAliveHelper$")
	server.Env = append(os.Environ(), "KEEPALIVE_HELPER=server", "KEEPALIVE_ADDR="+addr)
	var serverOut strings.Builder
	server.Stdout, server.Stderr = &serverOut, &serverOut
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Wait()
	defer server.Process.Kill()
	client := c.Command(ctx, 0, os.Args[0], "-test.run=^TestKeepAliveHelper$")
	client.Env = append(os.Environ(), "KEEPALIVE_HELPER=client", "KEEPALIVE_ADDR="+addr)
	out, err := client.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	client.Stderr = client.Stdout
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var log []string
	for lines.Scan() { // until the connection has carried its first exchange
		log = append(log, lines.Text())
		if lines.Text() == "connected" {
			break
		}
	}
	if err := c.SetLoss(1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(12 * time.Second)
	if err := c.SetLoss(0); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		log = append(log, lines.Text())
		if lines.Text() == "still connected" {
			if err := c.SetLoss(1); err != nil { // for good
				t.Fatal(err)
			}
		}
	}
	if err := client.Wait(); err != nil {
		t.Fatalf("%v\nclient:\n%s\nserver:\n%s", err, strings.Join(log, "\n"), serverOut.String())
	}
	t.Logf("%s; %+v", strings.Join(log, "; "), c.LinkStats())
}

// emulatedHosts starts two hosts, network namespaces whose links the
// user-space emulator carries (bench/netcluster, so that their loss can
// change), named from prefix; root only: the test is skipped elsewhere,
// but on CI (CI=true), which runs as root.
func emulatedHosts(t *testing.T, prefix string) *netcluster.Cluster {
	t.Helper()
	return netclustertest.Start(context.Background(), t, prefix, netcluster.Config{Hosts: 2, Link: "user"})
}

// TestKeepAliveHelper is TestKeepAliveOutlastsOutage's server and client
// when KEEPALIVE_HELPER says so, and passes at once otherwise. Each
// round trip is one line each way; the client waits 16 s idle (the
// outage, and past where keep-alive gives up) before its second, then
// reads until keep-alive closes the connection (13 to 19 s).
func TestKeepAliveHelper(t *testing.T) {
	addr := os.Getenv("KEEPALIVE_ADDR")
	switch os.Getenv("KEEPALIVE_HELPER") {
	case "server":
		// Echo until the client closes, or keep-alive ends the connection
		// to a client gone for good (the test stops the server first).
		if err := netcluster.EchoOnce(addr, func(c *net.TCPConn) error { return tune(c, &Config{}) }); err != nil {
			t.Fatal(err)
		}
	case "client":
		conn, err := netcluster.DialWhenListening(&net.Dialer{KeepAliveConfig: keepAlive()}, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		roundTrip := func(msg string) {
			t.Helper()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintln(conn, msg); err != nil {
				t.Fatalf("%s: %v", msg, err)
			}
			if got, err := r.ReadString('\n'); err != nil || got != msg+"\n" {
				t.Fatalf("%s: read %q, %v", msg, got, err)
			}
		}
		roundTrip("first")
		fmt.Println("connected")
		time.Sleep(16 * time.Second)
		roundTrip("after the outage")
		fmt.Println("still connected")
		start := time.Now()
		conn.SetDeadline(start.Add(40 * time.Second))
		_, err = r.ReadString('\n')
		waited := time.Since(start)
		if !errors.Is(err, syscall.ETIMEDOUT) || waited < 13*time.Second || waited > 19*time.Second {
			t.Fatalf("a host gone for good: the read ended after %v with %v, want keep-alive's ETIMEDOUT after 13 to 19 s", waited.Round(time.Millisecond), err)
		}
		fmt.Printf("gone for good: %v after %v\n", err, waited.Round(time.Second))
	}
}
