package netcluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The link emulator stands in for tc netem on kernels built without it.
// Every host gets a TUN device in place of its veth; this process reads
// the IPv4 packets a host sends, applies the host's outgoing link —
// random loss, a queue drained at the link's rate, a fixed delay — and
// writes each packet into the TUN device of the host it is addressed to
// when it would arrive. Each host's link is one goroutine on an OS thread
// of its own, with a 1 ns timer slack: it reads what the host sent,
// delivers what is due, and waits in ppoll for the next packet or until
// shortly before the next one is due, spinning the rest (still reading).
// Go's timers wake about a millisecond late on the development VM; a
// thread's sleep with the default 50 µs slack 60–110 µs late, with 1 ns
// 30–50 µs (BenchmarkWakeUp). A reader handing packets to a delivering
// goroutine cost another wake-up, about 50 µs, on every packet.

// LinkStats counts what the user-space link emulator did with the
// packets the hosts sent (all zero for links tc shapes).
type LinkStats struct {
	Forwarded int64 // delivered to the host they were addressed to
	Lost      int64 // dropped at random (Config.Loss)
	Overflow  int64 // dropped because the link's queue was full
	Stray     int64 // not IPv4 to another host of the cluster, or refused by that host's stack: dropped
}

// queuePackets is the most packets a link holds waiting for its rate or
// delay, netem's default limit; more are dropped, as a full queue drops
// them.
const queuePackets = 1000

// spinWindow is how long before a packet is due its link's thread stops
// waiting in ppoll and spins: the VM's wake-up lateness with a 1 ns timer
// slack.
const spinWindow = 40 * time.Microsecond

type emulator struct {
	devs   []int // host i's TUN device
	stop   int   // an eventfd: readable once the emulator closes
	subnet [3]byte
	bps    int64 // 0: no rate limit
	delay  time.Duration
	loss   atomic.Uint64 // math.Float64bits of the fraction lost (SetLoss)
	mtu    int
	stats  struct{ forwarded, lost, overflow, stray atomic.Int64 }
	wg     sync.WaitGroup
}

// packet is one IPv4 packet on its way to host to, due there at due.
type packet struct {
	buf []byte
	to  int
	due time.Time
}

// openTUN makes a TUN device named name (without packet information: each
// read and write is one IP packet) in this network namespace; it goes
// away when the returned descriptor (non-blocking) is closed.
func openTUN(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: /dev/net/tun: %v", ErrNoNamespaces, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netcluster: TUN device %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netcluster: TUN device %q: %w", name, err)
	}
	return fd, nil
}

// startEmulator makes each host's TUN device, moves it into the host's
// namespace with the host's address, and starts the links.
func (c *Cluster) startEmulator(ctx context.Context) error {
	e := &emulator{stop: -1, delay: c.cfg.Delay, mtu: c.cfg.MTU}
	e.loss.Store(math.Float64bits(c.cfg.Loss))
	if _, err := fmt.Sscanf(c.cfg.Subnet, "%d.%d.%d", &e.subnet[0], &e.subnet[1], &e.subnet[2]); err != nil {
		return fmt.Errorf("netcluster: subnet %q: want three octets (\"10.79.3\")", c.cfg.Subnet)
	}
	if c.cfg.Rate != "" {
		bps, err := bitsPerSecond(c.cfg.Rate)
		if err != nil {
			return err
		}
		e.bps = bps
	}
	c.emu = e
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("netcluster: eventfd: %w", err)
	}
	e.stop = stop
	for i, n := range c.Names {
		name := c.tun(i)
		dev, err := openTUN(name)
		if err != nil {
			return err
		}
		e.devs = append(e.devs, dev)
		for _, s := range [][]string{
			{"link", "set", name, "netns", n},
			{"-n", n, "addr", "add", c.Addrs[i] + "/24", "dev", name},
			{"-n", n, "link", "set", name, "mtu", fmt.Sprint(e.mtu), "txqueuelen", fmt.Sprint(queuePackets), "up"},
			{"-n", n, "link", "set", "lo", "up"},
		} {
			if err := c.ip(ctx, s...); err != nil {
				return err
			}
		}
	}
	for i := range e.devs {
		e.wg.Add(1)
		go e.link(i, rand.New(rand.NewPCG(uint64(i), uint64(os.Getpid()))))
	}
	return nil
}

// link carries the packets host i sends until the emulator closes.
func (e *emulator) link(i int, rng *rand.Rand) {
	defer e.wg.Done()
	// The thread stays locked to this goroutine (and ends with it): its
	// timer slack is changed.
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	fd := e.devs[i]
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(e.stop), Events: unix.POLLIN}}
	var (
		queue      [queuePackets]packet // waiting for their time, in order: a ring
		head, held int
		free       [][]byte  // buffers
		busy       time.Time // when the link has sent what it holds
	)
	deliver := func(p packet) {
		e.write(p.to, p.buf)
		free = append(free, p.buf[:cap(p.buf)])
	}
	for {
		now := time.Now()
		for held > 0 && !queue[head].due.After(now) {
			deliver(queue[head])
			queue[head] = packet{}
			head, held = (head+1)%queuePackets, held-1
		}
		// Due soon: spin, reading what comes meanwhile; else wait in
		// ppoll for a packet, or until the next is due soon.
		var timeout *unix.Timespec
		spin := false
		if held > 0 {
			wait := queue[head].due.Sub(now) - spinWindow
			spin = wait <= 0
			ts := unix.NsecToTimespec(int64(wait))
			timeout = &ts
		}
		var buf []byte
		if k := len(free); k > 0 {
			buf, free = free[k-1], free[:k-1]
		} else {
			buf = make([]byte, e.mtu)
		}
		n, err := unix.Read(fd, buf)
		if err != nil {
			free = append(free, buf)
			if err != unix.EAGAIN && err != unix.EINTR {
				return
			}
			if spin {
				continue
			}
			if _, err := unix.Ppoll(fds, timeout, nil); err != nil && err != unix.EINTR {
				return
			}
			if fds[1].Revents != 0 {
				return
			}
			continue
		}
		p := buf[:n]
		to, ok := e.route(p)
		switch {
		case !ok || to == i:
			e.stats.stray.Add(1)
			free = append(free, buf)
			continue
		case rng.Float64() < math.Float64frombits(e.loss.Load()):
			e.stats.lost.Add(1)
			free = append(free, buf)
			continue
		case e.delay == 0 && e.bps == 0: // nothing to wait for
			deliver(packet{buf: p, to: to})
			continue
		case held == queuePackets:
			e.stats.overflow.Add(1)
			free = append(free, buf)
			continue
		}
		if now := time.Now(); busy.Before(now) {
			busy = now // the link was idle
		}
		if e.bps > 0 {
			busy = busy.Add(time.Duration(int64(n) * 8 * int64(time.Second) / e.bps))
		}
		queue[(head+held)%queuePackets] = packet{buf: p, to: to, due: busy.Add(e.delay)}
		held++
	}
}

// route returns the host an IPv4 packet is addressed to.
func (e *emulator) route(p []byte) (int, bool) {
	if len(p) < 20 || p[0]>>4 != 4 || [3]byte(p[16:19]) != e.subnet {
		return 0, false
	}
	host := int(p[19]) - 1
	return host, host >= 0 && host < len(e.devs)
}

// write hands packet p to host to's network stack.
func (e *emulator) write(to int, p []byte) {
	if _, err := unix.Write(e.devs[to], p); err == nil {
		e.stats.forwarded.Add(1)
	} else {
		e.stats.stray.Add(1) // the host's stack refused it
	}
}

// close stops forwarding and removes the TUN devices (they go with their
// descriptors, closed once nothing writes to them).
func (e *emulator) close() error {
	var errs []error
	if e.stop >= 0 {
		if _, err := unix.Write(e.stop, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
			errs = append(errs, fmt.Errorf("eventfd: %w", err))
		}
	}
	e.wg.Wait()
	for _, fd := range append(e.devs, e.stop) {
		if fd < 0 {
			continue
		}
		if err := unix.Close(fd); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (e *emulator) linkStats() LinkStats {
	return LinkStats{Forwarded: e.stats.forwarded.Load(), Lost: e.stats.lost.Load(), Overflow: e.stats.overflow.Load(), Stray: e.stats.stray.Load()}
}
