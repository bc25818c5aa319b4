package rdmatest

import (
	"fmt"
	"testing"

	"github.com/gorun/gorun/rdma"
)

// Mesh connects size transports on fab, every rank with every other,
// passing the endpoints through their binary encoding as comm does, and
// closes them when the test ends.
func Mesh(t testing.TB, fab *Fabric, size int, cfg rdma.Config) ([]*rdma.Transport, []*NIC) {
	t.Helper()
	ts := make([]*rdma.Transport, size)
	nics := make([]*NIC, size)
	for r := range size {
		var peers []int
		for q := range size {
			if q != r {
				peers = append(peers, q)
			}
		}
		c := cfg
		c.Rank, c.Size = r, size
		var err error
		nics[r] = fab.NIC(fmt.Sprintf("fake_%d", r))
		if ts[r], err = rdma.New(c, nics[r], peers); err != nil {
			t.Fatal(err)
		}
	}
	for r, tr := range ts {
		for q := range size {
			if q == r {
				continue
			}
			ep, err := ts[q].Endpoint(r)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := ep.MarshalBinary()
			var got rdma.Endpoint
			if err := got.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if err := tr.Connect(q, got); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, tr := range ts {
			if err := tr.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	return ts, nics
}
