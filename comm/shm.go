package comm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/gorun/gorun/shm"
	"github.com/gorun/gorun/tcp"
)

// dataPath routes each peer's frames through shared memory when the peer
// shares this machine and through TCP otherwise. It has the transport
// methods the ring algorithms and point-to-point calls use.
type dataPath struct {
	tcp *tcp.Transport
	shm *shm.Transport // nil: TCP only
}

func (d *dataPath) local(peer int) bool { return d.shm != nil && d.shm.Has(peer) }

func (d *dataPath) Send(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error {
	if d.local(peer) {
		return d.shm.Send(ctx, peer, stream, meta, payload)
	}
	return d.tcp.Send(ctx, peer, stream, meta, payload)
}

func (d *dataPath) Post(peer int, stream uint32, buf []byte) (uint64, error) {
	if d.local(peer) {
		return d.shm.Post(peer, stream, buf)
	}
	return d.tcp.Post(peer, stream, buf)
}

func (d *dataPath) Wait(ctx context.Context, peer int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	if d.local(peer) {
		return d.shm.Wait(ctx, peer, stream, ticket)
	}
	return d.tcp.Wait(ctx, peer, stream, ticket)
}

// setupStream carries the shared-memory handshake over TCP; no group uses
// it (group ids stay far below 2^16−1).
const setupStream = math.MaxUint32

// hostIdentity names this machine and PID namespace: ranks with the same
// identity can map each other's memory. The boot id changes with every
// boot and differs between machines, unlike host names, which repeat.
func hostIdentity() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(boot)) + "/" + ns, nil
}

// setupSharedMemory makes this rank's segment, tells every peer where it
// is and whether this rank shares their machine, and maps the segments of
// the peers that do. Both ends of a pair decide the same way from the same
// two identities. It returns nil when no peer shares the machine.
func setupSharedMemory(ctx context.Context, t *tcp.Transport, s *Settings) (*shm.Transport, error) {
	host, err := hostIdentity()
	if err != nil {
		return nil, nil // no /proc: not Linux-like enough to share memory
	}
	st, info, err := shm.New(shm.Config{Rank: s.Rank, Size: s.Size, Timeout: s.Timeout, Spin: s.Spin, Failed: t.Err})
	if err != nil {
		return nil, err
	}
	msg := fmt.Appendf(nil, "%s %d %d", host, info.PID, info.FD)
	bufs := make([][]byte, s.Size)
	tickets := make([]uint64, s.Size)
	for r := range s.Size {
		if r == s.Rank {
			continue
		}
		bufs[r] = make([]byte, 512)
		if tickets[r], err = t.Post(r, setupStream, bufs[r]); err != nil {
			st.Close()
			return nil, err
		}
	}
	for r := range s.Size {
		if r != s.Rank {
			if err := t.Send(ctx, r, setupStream, [4]uint64{}, msg); err != nil {
				st.Close()
				return nil, err
			}
		}
	}
	shared := 0
	for r := range s.Size {
		if r == s.Rank {
			continue
		}
		_, n, err := t.Wait(ctx, r, setupStream, tickets[r])
		if err != nil {
			st.Close()
			return nil, err
		}
		f := bytes.Fields(bufs[r][:n])
		if len(f) != 3 || string(f[0]) != host {
			continue
		}
		pid, perr := strconv.Atoi(string(f[1]))
		fd, ferr := strconv.Atoi(string(f[2]))
		if perr != nil || ferr != nil {
			st.Close()
			return nil, fmt.Errorf("shared memory: rank %d sent a malformed handshake %q", r, bufs[r][:n])
		}
		if err := st.Attach(r, shm.Info{PID: pid, FD: fd}); err != nil {
			st.Close()
			return nil, fmt.Errorf("shared memory with rank %d on this host: %w (GORUN_TRANSPORT=tcp uses TCP instead)", r, err)
		}
		shared++
	}
	if shared == 0 {
		st.Close()
		return nil, nil
	}
	return st, nil
}

// describePaths says, for the log, how this rank reaches its peers.
func describePaths(d *dataPath, rank, size int) string {
	var local, remote []int
	for r := range size {
		switch {
		case r == rank:
		case d.local(r):
			local = append(local, r)
		default:
			remote = append(remote, r)
		}
	}
	return fmt.Sprintf("comm: rank %d reaches %d ranks through shared memory %v and %d over TCP %v (GORUN_TRANSPORT=tcp: TCP only)", rank, len(local), local, len(remote), remote)
}
