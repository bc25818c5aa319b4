package tcp

import (
	"fmt"
	"time"
)

// A host that vanishes (powered off, its network down) sends no FIN and no
// RST. Keep-alive finds it within 15 s on a connection that is idle; on
// one with data in flight to it the kernel retransmits for about 15
// minutes, and a call blocked in a send or a wait ended only at
// GORUN_TIMEOUT (5 minutes), blaming a peer "not reading". The host watch
// looks at each connection once every hostCheck: data in flight that its
// host has acknowledged none of for unreachableAfter means the host is
// gone, and the transport fails naming the peer.
//
// The kernel's own bound for this, TCP_USER_TIMEOUT, cannot be used: it
// also ends a connection whose peer is alive but has not read for that
// long (its window closed), as a rank computing alone while another sends
// to it does (tried on Linux 6.18: the connection to a peer busy for 8 s
// ended after 3.4 s at a bound of 3 s). Such a peer still acknowledges
// the window probes, and holds no data in flight: the watch waits for it.
const (
	hostCheck = time.Second
	// unreachableAfter is keep-alive's reach (5 s idle, then 10 probes 1 s
	// apart). Retransmissions of one segment start 0.2 s apart and double
	// (12.6 s to the seventh); at a link's 1% loss, 7 lost in a row.
	unreachableAfter = 15 * time.Second
)

// watchHosts runs for the transport's life, failing it when a peer's host
// has acknowledged none of the data in flight to it for
// Config.unreachableAfter. The connection's deadline is then set to now,
// so that a send blocked on it returns at once with the transport's error,
// and its reader ends: the peer is gone (not Ended). It goes on after a
// failure, for the control messages the survivors send (Shrink's
// agreement): a silent peer is given up on, not waited for.
func (t *Transport) watchHosts() {
	tick := time.NewTicker(hostCheck)
	defer tick.Stop()
	look := newSilence()
	for {
		select {
		case <-t.shut:
			return
		case <-tick.C:
		}
		for _, p := range t.peers {
			if p == nil || !p.up.Load() || p.gone.Load() {
				continue
			}
			if d := look.of(p); d >= t.cfg.unreachableAfter {
				t.fail(&PeerError{Rank: p.rank, Addr: p.addr,
					Err: fmt.Errorf("%w: its host acknowledged none of the data sent to it for %v (the network between the hosts is down, or the machine stopped)", ErrPeerDied, d.Round(time.Second))})
				p.conn.SetDeadline(time.Now())
			}
		}
	}
}
