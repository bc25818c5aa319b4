package comm_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
)

// TestSilentMasterBoundedByJoinTimeout: a listener at MASTER_ADDR that
// accepts connections and says nothing (not a gorun store) fails the join
// at GORUN_JOIN_TIMEOUT, naming the address; the handshake's own 10 s
// timeout once held it nearly three times longer.
func TestSilentMasterBoundedByJoinTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	const join = 2 * time.Second
	start := time.Now()
	g, err := comm.Init(context.Background(), comm.WithRank(1, 2), comm.WithMaster("127.0.0.1", addr.Port),
		comm.WithToken("secret"), comm.WithJoinTimeout(join))
	took := time.Since(start)
	if err == nil {
		g.Close()
		t.Fatal("joined a silent listener")
	}
	if !strings.Contains(err.Error(), addr.String()) {
		t.Errorf("error does not name %s: %v", addr, err)
	}
	if took > join+time.Second {
		t.Errorf("the join took %v with GORUN_JOIN_TIMEOUT=%v: %v", took, join, err)
	}
}

// TestJoinRefusesDifferentJobs: ranks that differ in a setting every rank
// must share, or run different builds of gorun, all fail while joining,
// each naming the settings (or builds), their values and the ranks holding
// them. Before the check, a rank forced onto TCP left its local peers
// waiting for its shared memory until the join's deadline, and ranks with
// other chunks failed in their first call over frame sizes.
func TestJoinRefusesDifferentJobs(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts map[int][]comm.Option // by rank
		want string                // "": every rank joins
	}{
		{"chunk", map[int][]comm.Option{0: {comm.WithChunkBytes(8192)}, 2: {comm.WithChunkBytes(8192)}},
			"the ranks' settings differ where every rank must share them: GORUN_CHUNK_BYTES is 8192 on ranks 0, 2 but unset on ranks 1, 3"},
		{"transport", map[int][]comm.Option{3: {comm.WithTransport("tcp")}},
			"GORUN_TRANSPORT is auto on ranks 0–2 but tcp on rank 3"},
		{"three kinds", map[int][]comm.Option{1: {comm.WithBruckBytes(-1)}, 2: {comm.WithTransport("tcp"), comm.WithBruckBytes(-1)}, 3: {comm.WithTransport("tcp")}},
			"GORUN_TRANSPORT is auto on ranks 0, 1 but tcp on ranks 2, 3; GORUN_BRUCK_BYTES is unset on ranks 0, 3 but -1 (never) on ranks 1, 2"},
		{"builds", map[int][]comm.Option{0: {comm.WithBuild("v1.2.0")}, 1: {comm.WithBuild("v1.2.0")}, 2: {comm.WithBuild("v1.3.0")}},
			"the ranks run different builds of gorun (v1.2.0 on ranks 0, 1 but v1.3.0 on rank 2)"},
		// A build without version information (rank 3) matches any.
		{"same build", map[int][]comm.Option{0: {comm.WithBuild("v1.2.0")}, 1: {comm.WithBuild("v1.2.0")}, 2: {comm.WithBuild("v1.2.0")}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4
			gs, errs := commtest.Join(t, n, func(r int) []comm.Option { return tc.opts[r] })
			commtest.WantErrors(t, errs, tc.want)
			for r, err := range errs {
				if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("rank %d of %d: ", r, n)) {
					t.Errorf("rank %d's error does not name it: %v", r, err)
				}
			}
			if tc.want == "" && !t.Failed() {
				// Every rank joined: one call shows they work together.
				commtest.EachRank(t, gs, func(g *comm.Group) error {
					buf := []float32{1}
					if err := g.AllReduce(context.Background(), buf, comm.Sum); err != nil || buf[0] != n {
						return fmt.Errorf("sum %v, want %d: %v", buf[0], n, err)
					}
					return nil
				})
			}
			var wg sync.WaitGroup
			for _, g := range gs {
				if g != nil {
					wg.Go(func() { g.Close() })
				}
			}
			wg.Wait()
		})
	}
}
