package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestVanishedHostNamed: a host that vanishes while data is on its way to
// it fails both ranks' sends within the host watch's bound (here 4 s; 15
// in use), each naming the other; before, each send waited out the
// transport's timeout (GORUN_TIMEOUT, 5 minutes) and blamed a peer "not
// reading". A peer that is alive but posts its receive only after twice
// that bound (its window closed meanwhile: TCP_USER_TIMEOUT would end the
// connection there) is waited for. The hosts are network namespaces whose links the
// user-space emulator carries (bench/netcluster); root only, as
// TestKeepAliveOutlastsOutage.
func TestVanishedHostNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("a 13 s run across two network namespaces; the full run covers it")
	}
	c := emulatedHosts(t, "ghw")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs := c.Addrs[0] + ":29612," + c.Addrs[1] + ":29613"
	outs := make([]*bufio.Scanner, 2)
	var logs [2][]string
	done := make(chan int, 2)
	for rank := range 2 {
		cmd := c.Command(ctx, rank, os.Args[0], "-test.run=^TestHostWatchHelper$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("HOSTWATCH_RANK=%d", rank), "HOSTWATCH_ADDRS="+addrs)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		outs[rank] = bufio.NewScanner(out)
		go func() {
			for outs[rank].Scan() {
				line := outs[rank].Text()
				logs[rank] = append(logs[rank], line)
				if strings.HasPrefix(line, "received after being busy") {
					if err := c.SetLoss(1); err != nil {
						t.Error(err)
					}
				}
			}
			if err := cmd.Wait(); err != nil {
				logs[rank] = append(logs[rank], err.Error())
			}
			done <- rank
		}()
	}
	<-done
	<-done
	for rank, log := range logs {
		text := strings.Join(log, "\n")
		want := []string{fmt.Sprintf("rank %d (%s)", 1-rank, strings.Split(addrs, ",")[1-rank]), "its host acknowledged none of the data sent to it for", "PASS"}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("rank %d: want %q:\n%s", rank, w, text)
			}
		}
	}
	t.Logf("rank 0: %s\nrank 1: %s\n%+v", strings.Join(logs[0], "; "), strings.Join(logs[1], "; "), c.LinkStats())
}

// TestHostWatchHelper is one rank of TestVanishedHostNamed when
// HOSTWATCH_RANK says so, and passes at once otherwise.
func TestHostWatchHelper(t *testing.T) {
	// (Seconds: the link emulator runs in the test's process, which CI's
	// other packages may starve of CPU for a moment.)
	const bound, busy, size = 4 * time.Second, 8 * time.Second, 16 << 20
	env := os.Getenv("HOSTWATCH_RANK")
	if env == "" {
		return
	}
	rank := int(env[0] - '0')
	addrs := strings.Split(os.Getenv("HOSTWATCH_ADDRS"), ",")
	l, err := net.Listen("tcp", addrs[rank])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := Connect(ctx, Config{Rank: rank, Size: 2, Timeout: 40 * time.Second, unreachableAfter: bound}, l.(*net.TCPListener), addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	buf := make([]byte, size)
	// A busy peer: rank 1 posts its receive only after busy, while rank
	// 0's send fills both sockets' buffers and waits.
	if rank == 0 {
		start := time.Now()
		if err := tr.Send(context.Background(), 1, 1, [4]uint64{}, buf); err != nil {
			t.Fatalf("sending to a busy peer: %v", err)
		}
		took := time.Since(start)
		if took < busy-time.Second {
			t.Fatalf("the send to a busy peer took %v: it never waited, so the test tested nothing", took)
		}
		fmt.Printf("waited for the busy peer: the send took %v\n", took.Round(time.Second))
	} else {
		time.Sleep(busy)
		ticket, err := tr.Post(0, 1, buf)
		if err == nil {
			_, _, err = tr.Wait(context.Background(), 0, 1, ticket)
		}
		if err != nil {
			t.Fatalf("receiving after being busy: %v", err)
		}
		fmt.Println("received after being busy")
	}
	// The test cuts the link when rank 1 has said so; then each sends to
	// the other, with nothing to answer.
	time.Sleep(time.Second)
	start := time.Now()
	err = tr.Send(context.Background(), 1-rank, 2, [4]uint64{}, buf)
	waited := time.Since(start)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Rank != 1-rank || !errors.Is(err, ErrPeerDied) || waited > 2*bound+time.Second {
		t.Fatalf("a send to a host gone: after %v, %v; want rank %d named within %v", waited.Round(time.Millisecond), err, 1-rank, 2*bound+time.Second)
	}
	fmt.Printf("%v (after %v)\n", err, waited.Round(time.Second))
	// Given up on, not ended: it may be alive beyond the cut.
	for wait := time.Now().Add(5 * time.Second); !tr.Gone(1-rank) && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	if !tr.Gone(1-rank) || tr.Ended(1-rank) {
		t.Fatalf("rank %d: gone %v, ended %v; want gone, not ended", 1-rank, tr.Gone(1-rank), tr.Ended(1-rank))
	}
}

// TestHostWatchQuiet: the host watch's look at a connection finds nothing
// to report on a live one, and allocates nothing (it runs every second
// beside the collectives, whose steady state allocates nothing).
func TestHostWatchQuiet(t *testing.T) {
	ts := mesh(t, 2, Config{}, nil)
	p := ts[0].peers[1]
	buf := make([]byte, 1<<20)
	ticket, err := ts[1].Post(0, 1, buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Send(context.Background(), 1, 1, [4]uint64{}, buf); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ts[1].Wait(context.Background(), 0, 1, ticket); err != nil {
		t.Fatal(err)
	}
	look := newSilence()
	// The acknowledgement of the last segments can lag their receipt (a
	// delayed ACK, a loaded core: 4 ms once under CI's race pass), and
	// data unacknowledged that long is not yet news: wait for it. Then,
	// with nothing in flight, a look finds no silence however long the
	// connection has been idle.
	for wait := time.Now().Add(5 * time.Second); look.of(p) != 0 && time.Now().Before(wait); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if d := look.of(p); d != 0 {
		t.Errorf("a live connection, idle with its data acknowledged, silent for %v", d)
	}
	if n := testing.AllocsPerRun(100, func() { look.of(p) }); n != 0 {
		t.Errorf("a look allocates %v times", n)
	}
}
