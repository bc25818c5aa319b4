package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/comm/rendezvous"
	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/rdma/rdmatest"
)

// TestRDMASetupThroughStore runs the RDMA rounds of the rendezvous for
// ranks in goroutines, with a real store and a fake fabric: the pairs that
// should use RDMA get connected queue pairs and carry a frame each way,
// the others do not, and the reason reported names the pair and the cause.
func TestRDMASetupThroughStore(t *testing.T) {
	const size = 4
	for _, tc := range []struct {
		name     string
		mode     string
		noDevice int // rank without a device (-1: none)
		rdma     func(a, b int) bool
		without  string
	}{
		{"every pair", "rdma", -1, func(a, b int) bool { return true }, ""},
		{"rank 2 has no device", "rdma", 2, func(a, b int) bool { return a != 2 && b != 2 }, "ranks 0 and 2: fake: no device on rank 2"},
		{"auto on one host: shared memory's job", "auto", -1, func(a, b int) bool { return false }, ""},
		{"tcp", "tcp", -1, func(a, b int) bool { return false }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, token := serveStore(t, size)
			fab := rdmatest.NewFabric(3, true)
			var mu sync.Mutex
			open := func(s *Settings) (rdma.Verbs, error) {
				if s.Rank == tc.noDevice {
					return nil, fmt.Errorf("fake: no device on rank %d", s.Rank)
				}
				mu.Lock()
				defer mu.Unlock()
				return fab.NIC(fmt.Sprintf("fake_%d", s.Rank)), nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			setups := make([]*rdmaSetup, size)
			var wg sync.WaitGroup
			errs := make(chan error, size)
			for r := range size {
				wg.Add(1)
				go func() {
					defer wg.Done()
					store, err := rendezvous.Dial(ctx, ln.Addr().String(), token, r, size)
					if err != nil {
						errs <- err
						return
					}
					defer store.Close()
					s := &Settings{Rank: r, Size: size, Transport: tc.mode, Timeout: 10 * time.Second}
					if setups[r], err = setupRDMA(ctx, store, s, open, func() error { return nil }, nil); err != nil {
						errs <- fmt.Errorf("rank %d: %w", r, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			defer func() {
				for _, s := range setups {
					if s.t != nil {
						s.t.Close()
					}
				}
			}()
			if got := setups[0].without; got != tc.without && !strings.Contains(got, tc.without) || (tc.without == "") != (got == "") {
				t.Errorf("rank 0 says RDMA is not used between %q, want %q", got, tc.without)
			}
			for a := range size {
				for b := range size {
					if a == b {
						continue
					}
					has := setups[a].t != nil && setups[a].t.Has(b)
					if has != tc.rdma(a, b) {
						t.Fatalf("rank %d reaches rank %d over RDMA: %v, want %v", a, b, has, tc.rdma(a, b))
					}
					if !has {
						continue
					}
					// One frame from a to b.
					buf := make([]byte, 16)
					tk, err := setups[b].t.Post(a, 9, buf)
					if err != nil {
						t.Fatal(err)
					}
					msg := fmt.Sprintf("from %d to %d", a, b)
					if err := setups[a].t.Send(ctx, b, 9, [4]uint64{}, []byte(msg)); err != nil {
						t.Fatal(err)
					}
					if _, n, err := setups[b].t.Wait(ctx, a, 9, tk); err != nil || string(buf[:n]) != msg {
						t.Fatalf("%s: got %q, %v", msg, buf[:n], err)
					}
				}
			}
		})
	}
}

// TestRDMADeviceSetting: GORUN_RDMA_DEVICE's port part is checked.
func TestRDMADeviceSetting(t *testing.T) {
	_, err := openDevice(&Settings{Size: 2, RDMADevice: "mlx5_0:x"})
	if err == nil || !strings.Contains(err.Error(), `GORUN_RDMA_DEVICE="mlx5_0:x": the port after the colon must be a number from 1`) {
		t.Fatalf("got %v", err)
	}
	if _, err := openDevice(&Settings{Size: 2, RDMADevice: "mlx5_0:1"}); err != nil && !errors.Is(err, rdma.ErrNoDevice) {
		t.Fatalf("got %v, want ErrNoDevice on a machine without the device", err)
	}
}

// TestShareThroughStoreNamesTheSilent: the ranks of a host publish where
// their segments are through the store; when one never does (it died
// after it offered), the others give up at the join's deadline naming it,
// and with every rank there each reads what the others published.
func TestShareThroughStoreNamesTheSilent(t *testing.T) {
	const size = 4
	ln, token := serveStore(t, size)
	dial := func(r int) *rendezvous.Client {
		c, err := rendezvous.Dial(context.Background(), ln.Addr().String(), token, r, size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	local := []int{0, 2, 3}
	stores := []*rendezvous.Client{dial(0), nil, dial(2), dial(3)}

	// Rank 3 stays silent: ranks 0 and 2 name it.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, size)
	for _, r := range []int{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = shareThroughStore(ctx, stores[r], &Settings{Rank: r, Size: size})([]byte(fmt.Sprint("segment of ", r)), local)
		}()
	}
	wg.Wait()
	for _, r := range []int{0, 2} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "ranks [3] of this host") || !errors.Is(errs[r], rendezvous.ErrMissing) {
			t.Errorf("rank %d: %v, want rank 3 named", r, errs[r])
		}
	}

	// Now rank 3 publishes too: everyone reads every local rank's message.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	got, err := shareThroughStore(ctx2, stores[3], &Settings{Rank: 3, Size: size})([]byte("segment of 3"), local)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range local {
		if want := fmt.Sprint("segment of ", r); string(got[r]) != want {
			t.Errorf("rank 3 read %q for rank %d, want %q", got[r], r, want)
		}
	}
	if got[1] != nil {
		t.Errorf("rank 3 read %q for rank 1, not of its host", got[1])
	}
}

// TestShareThroughStoreWithoutStore: when the share times out and the
// store no longer answers which ranks were missing, the error says so
// instead of naming no rank ("ranks [] of this host").
func TestShareThroughStoreWithoutStore(t *testing.T) {
	_, err := shareThroughStore(t.Context(), goneStore{}, &Settings{Rank: 2, Size: 4})([]byte("segment of 2"), []int{0, 2, 3})
	want := "the ranks of this host [0 2 3] did not all say where their segments are within the join's time, and the store stopped answering which (rank 0, which serves it, gone?)"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, rendezvous.ErrMissing) {
		t.Errorf("got %v, want %q", err, want)
	}
}

// goneStore is a store whose keys never come and that then stops
// answering.
type goneStore struct{}

func (goneStore) Set(context.Context, string, []byte) error { return nil }
func (goneStore) Get(context.Context, string) ([]byte, error) {
	return nil, errors.New("store connection closed")
}
func (goneStore) GetMany(context.Context, []string) ([][]byte, error) {
	return nil, fmt.Errorf("waiting for keys: %w", rendezvous.ErrMissing)
}
func (goneStore) Has(context.Context, string) (bool, error) {
	return false, errors.New("store connection closed")
}
func (goneStore) LocalAddr() net.Addr { return nil }
func (goneStore) Close() error        { return nil }

// serveStore serves a rendezvous store for size ranks on loopback until
// the test ends, and returns its listener and token.
func serveStore(t *testing.T, size int) (net.Listener, []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("job-token")
	srv := rendezvous.Serve(ln, token, size)
	t.Cleanup(func() { srv.Close() })
	return ln, token
}
