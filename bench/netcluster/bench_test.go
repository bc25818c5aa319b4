package netcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkLinks measures what a link between two hosts gives a TCP
// connection: the median round trip of one byte and the rate of a 64 MiB
// echo (both directions at once, each on its own link), for links the
// user-space emulator makes (unshaped, delayed, rate-limited) beside
// veths on a bridge, unshaped and shaped by tc — the emulator's own cost.
// Each iteration is one connection's run.
//
//	go test ./bench/netcluster -run '^$' -bench Links -benchtime 1x -count 3
func BenchmarkLinks(b *testing.B) {
	for _, cfg := range []Config{
		{Link: "user"}, {Link: "tc"},
		{Link: "user", Delay: 25 * time.Microsecond}, {Link: "user", Delay: 100 * time.Microsecond}, {Link: "user", Delay: time.Millisecond},
		{Link: "user", Rate: "1gbit"}, {Link: "tc", Rate: "1gbit"}, {Link: "user", Rate: "10gbit"}, {Link: "tc", Rate: "10gbit"},
	} {
		name := fmt.Sprintf("%s/rate=%s/delay=%v", cfg.Link, cfg.Rate, cfg.Delay)
		b.Run(name, func(b *testing.B) {
			cfg.Hosts, cfg.Name = 2, "gncb"
			c, err := Start(context.Background(), cfg)
			if errors.Is(err, ErrNoNamespaces) {
				b.Skip(err)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			const bytes = 64 << 20
			var rtt, echo time.Duration
			for i := range b.N {
				r, e, err := echoRun(c, fmt.Sprintf("%s:%d", c.Addrs[1], 29700+i), bytes)
				if err != nil {
					b.Fatal(err)
				}
				rtt, echo = rtt+r, echo+e
			}
			b.ReportMetric(float64(rtt.Microseconds())/float64(b.N), "rtt-µs")
			b.ReportMetric(float64(bytes)*8*float64(b.N)/echo.Seconds()/1e9, "Gbit/s")
		})
	}
}

// echoRun runs TestHelperProcess's server on host 1 and client on host 0
// and returns the client's median round trip and the time its bytes took
// to go and come back.
func echoRun(c *Cluster, addr string, bytes int) (rtt, echo time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := c.Command(ctx, 1, os.Args[0], "-test.run=^TestHelperProcess$")
	server.Env = append(os.Environ(), "NETCLUSTER_HELPER=server", "NETCLUSTER_ADDR="+addr)
	if err := server.Start(); err != nil {
		return 0, 0, err
	}
	defer server.Wait()
	defer server.Process.Kill()
	client := c.Command(ctx, 0, os.Args[0], "-test.run=^TestHelperProcess$")
	client.Env = append(os.Environ(), "NETCLUSTER_HELPER=client", "NETCLUSTER_ADDR="+addr, fmt.Sprintf("NETCLUSTER_BYTES=%d", bytes))
	out, err := client.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("client: %w\n%s", err, out)
	}
	if _, err := fmt.Sscanf(resultLine(out), "rtt %d echo %d", &rtt, &echo); err != nil {
		return 0, 0, fmt.Errorf("client's output: %w\n%s", err, out)
	}
	return rtt, echo, nil
}

// BenchmarkWakeUp measures how late a sleep of d wakes, the reason the
// emulator's links wait in ppoll on threads with a 1 ns timer slack and
// spin the last spinWindow: Go's timer (time.Sleep), and nanosleep on a
// locked thread with the default slack and with 1 ns. Reports the mean
// lateness in µs.
//
//	go test ./bench/netcluster -run '^$' -bench WakeUp
func BenchmarkWakeUp(b *testing.B) {
	sleeps := []struct {
		name string
		run  func(time.Duration)
	}{
		{"go-timer", time.Sleep},
		{"nanosleep", func(d time.Duration) {
			ts := unix.NsecToTimespec(int64(d))
			unix.Nanosleep(&ts, nil)
		}},
	}
	for _, d := range []time.Duration{25 * time.Microsecond, 100 * time.Microsecond, time.Millisecond} {
		for _, s := range sleeps {
			for _, slack := range []int{0, 1} {
				if s.name == "go-timer" && slack == 1 {
					continue // Go's timers run on its own threads
				}
				b.Run(fmt.Sprintf("%v/%s/slack=%d", d, s.name, slack), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					if slack == 1 {
						unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
						defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0) // back to the thread's default
					}
					var late time.Duration
					for b.Loop() {
						start := time.Now()
						s.run(d)
						late += time.Since(start) - d
					}
					b.ReportMetric(float64(late.Microseconds())/float64(b.N), "late-µs")
				})
			}
		}
	}
}
