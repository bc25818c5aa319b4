package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/comm/rendezvous"
	"github.com/gorun/gorun/rdma"
)

// rdmaSetup is what the RDMA rounds of the rendezvous decided: the
// transport (nil when no pair uses RDMA) and, when some pair that wanted
// RDMA cannot have it, why.
type rdmaSetup struct {
	t       *rdma.Transport
	port    rdma.Port
	without string
	// hosts holds every rank's host identity, from the offers: ranks
	// with the same one share memory.
	hosts []string
}

// openVerbs opens this rank's RDMA port; tests replace it.
type openVerbs func(s *Settings) (rdma.Verbs, error)

func openDevice(s *Settings) (rdma.Verbs, error) {
	cfg := rdma.OpenConfig{Device: s.RDMADevice, GIDIndex: s.RDMAGIDIndex, CQDepth: (rdma.DefaultSlots + 4) * max(s.Size-1, 1)}
	if name, port, ok := strings.Cut(s.RDMADevice, ":"); ok {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("GORUN_RDMA_DEVICE=%q: the port after the colon must be a number from 1", s.RDMADevice)
		}
		cfg.Device, cfg.Port = name, n
	}
	d, err := rdma.Open(cfg)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return d, nil
}

func rdmaKey(kind string, ranks ...int) string {
	k := "rdma/" + kind
	for _, r := range ranks {
		k += "/" + strconv.Itoa(r)
	}
	return k
}

// wantsRDMA reports whether the pair (a, b) should talk over RDMA if
// their ports allow: always under GORUN_TRANSPORT=rdma; under auto when
// they are on different hosts (shared memory serves ranks of one host).
func wantsRDMA(mode string, a, b *rdma.Offer) bool {
	return mode == "rdma" || mode == "auto" && a.Host != b.Host
}

// setupRDMA runs three rounds through the rendezvous store: every rank
// offers its port (or says why it has none); the pairs that want RDMA and
// can have it (both decide alike from the same two offers) publish an
// endpoint for each other; each rank connects its queue pairs and
// publishes which came up, and a pair uses RDMA only when both ends did.
// Nothing here fails the job: whatever goes wrong, the pair uses TCP.
func setupRDMA(ctx context.Context, store store, s *Settings, open openVerbs, failed func() error, left func(int) error) (*rdmaSetup, error) {
	host, err := hostIdentity()
	if err != nil {
		host = fmt.Sprintf("unknown-%d", s.Rank)
	}
	offer := rdma.Offer{Host: host}
	var dev rdma.Verbs
	if s.Transport == "tcp" {
		offer.Reason = "GORUN_TRANSPORT=tcp"
	} else if dev, err = open(s); err != nil {
		offer.Reason = err.Error()
	} else {
		offer.Port = dev.Port()
	}
	closeDev := func() {
		if dev != nil {
			dev.Close()
		}
	}
	b, err := offer.MarshalBinary()
	if err == nil {
		err = store.Set(ctx, rdmaKey("offer", s.Rank), b)
	}
	if err != nil {
		closeDev()
		return nil, err
	}
	keys := make([]string, s.Size)
	for r := range keys {
		keys[r] = rdmaKey("offer", r)
	}
	vals, err := store.GetMany(ctx, keys)
	if errors.Is(err, rendezvous.ErrMissing) {
		err = fmt.Errorf("ranks %v did not offer within the join's time (did they die?): %w", missingRanks(store, keys), err)
	}
	if err != nil {
		closeDev()
		return nil, fmt.Errorf("RDMA offers: %w", err)
	}
	offers := make([]rdma.Offer, s.Size)
	setup := &rdmaSetup{port: offer.Port, hosts: make([]string, s.Size)}
	for r, v := range vals {
		if err := offers[r].UnmarshalBinary(v); err != nil {
			closeDev()
			return nil, fmt.Errorf("RDMA offer of rank %d: %w", r, err)
		}
		setup.hosts[r] = offers[r].Host
	}
	// Rank 0 reports for the whole job: the first pair that wanted RDMA and
	// cannot have it.
	for a := 0; a < s.Size && setup.without == ""; a++ {
		for b := a + 1; b < s.Size; b++ {
			if !wantsRDMA(s.Transport, &offers[a], &offers[b]) {
				continue
			}
			if ok, why := offers[a].Reaches(&offers[b]); !ok {
				setup.without = fmt.Sprintf("ranks %d and %d: %s", a, b, why)
				break
			}
		}
	}
	var peers []int
	for r := range s.Size {
		if r != s.Rank && wantsRDMA(s.Transport, &offer, &offers[r]) {
			if ok, _ := offer.Reaches(&offers[r]); ok {
				peers = append(peers, r)
			}
		}
	}
	if len(peers) == 0 {
		closeDev()
		return setup, nil
	}
	// Round 2: an endpoint for each peer (empty when this rank could not
	// make its queue pairs).
	t, newErr := rdma.New(rdma.Config{Rank: s.Rank, Size: s.Size, Timeout: s.Timeout, Spin: s.Spin, Failed: failed, Left: left}, dev, peers)
	if newErr != nil {
		closeDev()
		if setup.without == "" {
			setup.without = fmt.Sprintf("rank %d: %v", s.Rank, newErr)
		}
	}
	for _, r := range peers {
		var v []byte
		if t != nil {
			ep, _ := t.Endpoint(r)
			v, _ = ep.MarshalBinary()
		}
		if err := store.Set(ctx, rdmaKey("endpoint", s.Rank, r), v); err != nil {
			return nil, closeAll(t, err)
		}
	}
	var up []int
	for _, r := range peers {
		v, err := store.Get(ctx, rdmaKey("endpoint", r, s.Rank))
		if err != nil {
			return nil, closeAll(t, err)
		}
		if t == nil || len(v) == 0 {
			continue
		}
		var ep rdma.Endpoint
		if err := ep.UnmarshalBinary(v); err != nil {
			setup.without = fmt.Sprintf("rank %d's endpoint for rank %d: %v", r, s.Rank, err)
			continue
		}
		if err := t.Connect(r, ep); err != nil {
			setup.without = fmt.Sprintf("rank %d: %v", s.Rank, err)
			continue
		}
		up = append(up, r)
	}
	// Round 3: which queue pairs came up; a pair uses RDMA when both did.
	if err := store.Set(ctx, rdmaKey("up", s.Rank), []byte(fmt.Sprint(up))); err != nil {
		return nil, closeAll(t, err)
	}
	upKeys := make([]string, len(peers))
	for i, r := range peers {
		upKeys[i] = rdmaKey("up", r)
	}
	ups, err := store.GetMany(ctx, upKeys)
	if err != nil {
		return nil, closeAll(t, err)
	}
	var both []int
	for i, r := range peers {
		v := ups[i]
		if slices.Contains(up, r) && slices.Contains(strings.Fields(strings.Trim(string(v), "[]")), strconv.Itoa(s.Rank)) {
			both = append(both, r)
		} else if setup.without == "" {
			setup.without = fmt.Sprintf("the queue pairs of ranks %d and %d did not both come up", s.Rank, r)
		}
	}
	if t != nil {
		t.Keep(both)
		if len(both) == 0 {
			t.Close()
			t = nil
		}
	}
	setup.t = t
	return setup, nil
}

func closeAll(t *rdma.Transport, err error) error {
	if t != nil {
		t.Close()
	}
	return err
}
