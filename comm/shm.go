package comm

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/gorun/gorun/mailbox"
	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/shm"
	"github.com/gorun/gorun/tcp"
)

// dataPath routes each peer's frames: over RDMA when the pair set it up,
// through shared memory when the peer shares this machine, over TCP
// otherwise. It has the transport methods the ring algorithms and
// point-to-point calls use.
type dataPath struct {
	tcp   *tcp.Transport
	shm   *shm.Transport  // nil: no peer on this machine, or TCP forced
	rdma  *rdma.Transport // nil: no peer over RDMA
	links []ring.Transport
	rdmaW string // why a pair that wanted RDMA has none ("" when none did)
	port  rdma.Port
}

// route fixes, for each peer, which transport carries its frames.
func (d *dataPath) route(size int) {
	d.links = make([]ring.Transport, size)
	for r := range d.links {
		switch {
		case d.rdma != nil && d.rdma.Has(r):
			d.links[r] = d.rdma
		case d.shm != nil && d.shm.Has(r):
			d.links[r] = d.shm
		default:
			d.links[r] = d.tcp
		}
	}
}

func (d *dataPath) link(peer int) ring.Transport {
	if peer < 0 || peer >= len(d.links) {
		return d.tcp // reports the bad rank
	}
	return d.links[peer]
}

func (d *dataPath) Send(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error {
	return d.link(peer).Send(ctx, peer, stream, meta, payload)
}

func (d *dataPath) Post(peer int, stream uint32, buf []byte) (uint64, error) {
	return d.link(peer).Post(peer, stream, buf)
}

// PostCombine implements ring.Combiner for the peers reached through
// shared memory or RDMA, whose frames are folded in straight from the
// slots they land in.
func (d *dataPath) PostCombine(peer int, stream uint32, buf []byte, combine func(dst, src []byte)) (uint64, bool, error) {
	l, ok := d.link(peer).(interface {
		PostCombine(int, uint32, []byte, mailbox.Combine) (uint64, error)
	})
	if !ok {
		return 0, false, nil
	}
	t, err := l.PostCombine(peer, stream, buf, combine)
	return t, err == nil, err
}

func (d *dataPath) Wait(ctx context.Context, peer int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	return d.link(peer).Wait(ctx, peer, stream, ticket)
}

// SendRecv implements ring.SendRecver for pairs of peers both reached
// through shared memory, whose frames SendRecv takes straight from the
// ring; for others ok is false and the caller posts, sends and waits.
func (d *dataPath) SendRecv(ctx context.Context, to int, stream uint32, meta [4]uint64, payload []byte, from int, buf []byte) ([4]uint64, int, bool, error) {
	if d.shm == nil || d.link(to) != ring.Transport(d.shm) || d.link(from) != ring.Transport(d.shm) {
		return [4]uint64{}, 0, false, nil
	}
	rmeta, n, err := d.shm.SendRecv(ctx, to, stream, meta, payload, from, buf)
	return rmeta, n, true, err
}

// setupStream carries the shared-memory handshake over TCP; no group uses
// it (group ids stay far below 2^16−1).
const setupStream = math.MaxUint32

// hostIdentity names this machine and its PID and network namespaces:
// ranks with the same identity can map each other's memory. The boot id
// changes with every boot and differs between machines, unlike host
// names, which repeat. A separate network namespace counts as another
// host (a container, or the namespaces the multi-node tests use), so its
// ranks talk over the network like those of other machines.
func hostIdentity() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(boot))
	for _, ns := range []string{"pid", "net"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return "", err
		}
		id += "/" + l
	}
	return id, nil
}

// setupSharedMemory finds the ranks on this machine and connects them
// through shared memory, in two rounds over TCP: every rank tells every
// other its host identity (both ends of a pair decide alike from the same
// two identities); then the ranks of each machine make segments with a
// ring for each other and tell each other where they are. It returns nil
// when no other rank shares this machine.
func setupSharedMemory(ctx context.Context, t *tcp.Transport, s *Settings) (*shm.Transport, error) {
	host, err := hostIdentity()
	if err != nil {
		host = fmt.Sprintf("unknown-%d", s.Rank) // no /proc: share with nobody
	}
	ids, err := exchange(ctx, t, s, []byte(host), nil)
	if err != nil {
		return nil, fmt.Errorf("shared memory handshake: %w", err)
	}
	var local []int
	for r, id := range ids {
		if r == s.Rank || string(id) == host {
			local = append(local, r)
		}
	}
	if len(local) < 2 {
		return nil, nil
	}
	st, info, err := shm.New(shm.Config{Rank: s.Rank, Size: s.Size, Local: local, Timeout: s.Timeout, Spin: s.Spin, Failed: t.Err})
	if err != nil {
		return nil, err
	}
	where, err := exchange(ctx, t, s, fmt.Appendf(nil, "%d %d", info.PID, info.FD), local)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("shared memory handshake: %w", err)
	}
	for _, r := range local {
		if r == s.Rank {
			continue
		}
		var pid, fd int
		if _, err := fmt.Sscanf(string(where[r]), "%d %d", &pid, &fd); err != nil {
			st.Close()
			return nil, fmt.Errorf("shared memory: rank %d sent a malformed handshake %q", r, where[r])
		}
		if err := st.Attach(r, shm.Info{PID: pid, FD: fd}); err != nil {
			st.Close()
			return nil, fmt.Errorf("shared memory with rank %d on this host: %w (GORUN_TRANSPORT=tcp uses TCP instead)", r, err)
		}
	}
	return st, nil
}

// exchange sends msg to the ranks in with (every other rank when with is
// nil) and returns what each of them sent back, by rank.
func exchange(ctx context.Context, t *tcp.Transport, s *Settings, msg []byte, with []int) ([][]byte, error) {
	if with == nil {
		for r := range s.Size {
			with = append(with, r)
		}
	}
	got := make([][]byte, s.Size)
	tickets := make([]uint64, s.Size)
	var err error
	for _, r := range with {
		if r == s.Rank {
			continue
		}
		got[r] = make([]byte, 512)
		if tickets[r], err = t.Post(r, setupStream, got[r]); err != nil {
			return nil, err
		}
	}
	for _, r := range with {
		if r != s.Rank {
			if err := t.Send(ctx, r, setupStream, [4]uint64{}, msg); err != nil {
				return nil, err
			}
		}
	}
	for _, r := range with {
		if r == s.Rank {
			continue
		}
		_, n, err := t.Wait(ctx, r, setupStream, tickets[r])
		if err != nil {
			return nil, err
		}
		got[r] = got[r][:n]
	}
	return got, nil
}

// describePaths says, for the log, how this rank reaches its peers, why
// RDMA is not used where it was wanted, and the world group's ring chunk.
func describePaths(d *dataPath, rank, size, chunk int) string {
	var local, fabric, remote []int
	for r := range size {
		switch l := d.link(r); {
		case r == rank:
		case d.shm != nil && l == ring.Transport(d.shm):
			local = append(local, r)
		case d.rdma != nil && l == ring.Transport(d.rdma):
			fabric = append(fabric, r)
		default:
			remote = append(remote, r)
		}
	}
	var paths []string
	if len(local) > 0 {
		paths = append(paths, fmt.Sprintf("ranks %v through shared memory", local))
	}
	if len(fabric) > 0 {
		paths = append(paths, fmt.Sprintf("ranks %v over RDMA (%v)", fabric, d.port))
	}
	if len(remote) > 0 {
		paths = append(paths, fmt.Sprintf("ranks %v over TCP", remote))
	}
	msg := fmt.Sprintf("comm: rank %d reaches %s", rank, strings.Join(paths, " and "))
	if len(remote) < size-1 {
		msg += " (GORUN_TRANSPORT=tcp forces TCP)"
	}
	if d.rdmaW != "" {
		msg += "; RDMA not used between " + d.rdmaW
	}
	if chunk%1024 == 0 {
		msg += fmt.Sprintf("; ring chunks of %d KiB", chunk/1024)
	} else {
		msg += fmt.Sprintf("; ring chunks of %d bytes", chunk)
	}
	return msg
}
