package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/gorun/gorun/comm/rendezvous"
	"github.com/gorun/gorun/shm"
	"github.com/gorun/gorun/tcp"
)

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

// hostIndices numbers the hosts of ranks with identities ids in the
// order they first appear: every rank computes the same numbers.
func hostIndices(ids [][]byte) []int {
	seen := map[string]int{}
	out := make([]int, len(ids))
	for r, id := range ids {
		h, ok := seen[string(id)]
		if !ok {
			h = len(seen)
			seen[string(id)] = h
		}
		out[r] = h
	}
	return out
}

// setupSharedMemory connects the ranks of this machine through shared
// memory. hosts holds every rank's host identity (both ends of a pair
// decide alike from the same two identities). The ranks of each machine
// make segments with a ring for each other and tell each other where
// they are through share, which sends msg to the ranks in with and
// returns what each sent (the rendezvous store at the join; the TCP
// mesh after a shrink, which has no store). It returns nil when no other
// rank shares this machine, and the host index of every rank.
func setupSharedMemory(hosts []string, s *Settings, t *tcp.Transport, share func(msg []byte, with []int) ([][]byte, error)) (*shm.Transport, []int, error) {
	ids := make([][]byte, len(hosts))
	for r, h := range hosts {
		ids[r] = []byte(h)
	}
	hostOf := hostIndices(ids)
	var local []int
	for r, h := range hosts {
		if h == hosts[s.Rank] {
			local = append(local, r)
		}
	}
	if len(local) < 2 {
		return nil, hostOf, nil
	}
	st, info, err := shm.New(shm.Config{Rank: s.Rank, Size: s.Size, Local: local, Timeout: s.Timeout, Spin: s.Spin, Failed: t.Err, Left: t.Left, Watch: s.lazy(), DirectBytes: s.DirectBytes})
	if err != nil {
		return nil, nil, err
	}
	where, err := share(fmt.Appendf(nil, "%d %d", info.PID, info.FD), local)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("shared memory handshake: %w", err)
	}
	for _, r := range local {
		if r == s.Rank {
			continue
		}
		var pid, fd int
		if _, err := fmt.Sscanf(string(where[r]), "%d %d", &pid, &fd); err != nil {
			st.Close()
			return nil, nil, fmt.Errorf("shared memory: rank %d sent a malformed handshake %q", r, where[r])
		}
		if err := st.Attach(r, shm.Info{PID: pid, FD: fd}); err != nil {
			st.Close()
			return nil, nil, fmt.Errorf("shared memory with rank %d on this host: %w (GORUN_TRANSPORT=tcp uses TCP instead)", r, err)
		}
	}
	return st, hostOf, nil
}

// shareThroughStore is setupSharedMemory's share at the join: each rank
// publishes msg under its key and reads those of the ranks in with, in
// one round trip.
func shareThroughStore(ctx context.Context, store store, s *Settings) func(msg []byte, with []int) ([][]byte, error) {
	return func(msg []byte, with []int) ([][]byte, error) {
		if err := store.Set(ctx, shmKey(s.Rank), msg); err != nil {
			return nil, err
		}
		keys := make([]string, len(with))
		for i, r := range with {
			keys[i] = shmKey(r)
		}
		vals, err := store.GetMany(ctx, keys)
		if errors.Is(err, rendezvous.ErrMissing) {
			var missing []int
			for _, i := range missingRanks(store, keys) {
				missing = append(missing, with[i])
			}
			if len(missing) == 0 {
				// The store did not answer which (rank 0, which
				// serves it, stopped or failed meanwhile).
				return nil, fmt.Errorf("the ranks of this host %v did not all say where their segments are within the join's time, and the store stopped answering which (rank 0, which serves it, gone?): %w", with, err)
			}
			return nil, fmt.Errorf("ranks %v of this host did not say where their segments are within the join's time (did they die?): %w", missing, err)
		}
		if err != nil {
			return nil, err
		}
		got := make([][]byte, s.Size)
		for i, r := range with {
			got[r] = vals[i]
		}
		return got, nil
	}
}

func shmKey(r int) string { return "shm/" + strconv.Itoa(r) }

// shareThroughMesh is setupSharedMemory's share over the TCP mesh.
func shareThroughMesh(ctx context.Context, t *tcp.Transport, s *Settings) func(msg []byte, with []int) ([][]byte, error) {
	return func(msg []byte, with []int) ([][]byte, error) { return exchange(ctx, t, s, msg, with) }
}

// exchange sends msg to the ranks in with and returns what each of them
// sent back, by rank.
func exchange(ctx context.Context, t *tcp.Transport, s *Settings, msg []byte, with []int) ([][]byte, error) {
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
