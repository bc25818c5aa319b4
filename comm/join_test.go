package comm_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
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
