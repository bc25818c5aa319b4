package comm

import (
	"context"
	"fmt"
	"strings"

	"github.com/gorun/gorun/mailbox"
	"github.com/gorun/gorun/rdma"
	"github.com/gorun/gorun/ring"
	"github.com/gorun/gorun/shm"
	"github.com/gorun/gorun/tcp"
)

// peerTransport is a transport that reaches some of the peers: shared
// memory those on this machine, RDMA those a verbs device connects.
type peerTransport interface {
	ring.Transport
	Has(rank int) bool
}

// fastPath is one transport registered for the peers it reaches, ahead of
// TCP, which reaches every peer.
type fastPath struct {
	t     peerTransport
	name  string // how the log names it: "through shared memory"
	close func()
}

// dataPath routes each peer's frames through the first registered
// transport that reaches it (RDMA, then shared memory), over TCP
// otherwise. It has the transport methods the ring algorithms and
// point-to-point calls use, and passes on the optional ones (ring.Combiner,
// ring.SendRecver, ring.DirectSender) where the peer's transport has them.
// A new transport is its set-up call in setUp and one add.
type dataPath struct {
	tcp   *tcp.Transport
	host  string     // the address this rank listens on ("" for one rank alone)
	fast  []fastPath // in order of preference
	links []ring.Transport

	// What the group needs of particular transports beyond moving frames.
	shm     *shm.Transport  // nil: no peer on this machine, or TCP forced
	shmNote string          // why its ranks read no frame from each other's memory ("" when they may)
	rdma    *rdma.Transport // nil: no peer over RDMA; staged GPU buffers register with it
	rdmaW   string          // why a pair that wanted RDMA has none ("" when none did)
	port    rdma.Port
	// hostOf numbers each rank's host, alike on every rank (nil when
	// the ranks did not compare hosts: TCP forced).
	hostOf []int
}

// add registers t for the peers it reaches, after those registered
// before it; close releases it with the group.
func (d *dataPath) add(t peerTransport, name string, close func()) {
	d.fast = append(d.fast, fastPath{t: t, name: name, close: close})
}

// setUp sets up the transports beside TCP, during the rendezvous, in
// order of preference: RDMA for the pairs of ranks whose devices reach
// each other, then shared memory for the ranks of this machine
// (GORUN_TRANSPORT=tcp skips both), each through the store: every rank
// offers its RDMA port and names its host in one round, and the rounds
// after are among the ranks concerned. On failure it closes what it set up.
func (d *dataPath) setUp(ctx context.Context, store store, s *Settings) error {
	rd, err := setupRDMA(ctx, store, s, openDevice, d.tcp.Err, d.tcp.Left)
	if err != nil {
		return fmt.Errorf("RDMA set-up: %w", err)
	}
	d.rdma, d.rdmaW, d.port = rd.t, rd.without, rd.port
	if d.rdma != nil {
		d.add(d.rdma, fmt.Sprintf("over RDMA (%v)", d.port), func() { d.rdma.Close() })
	}
	if s.Transport != "tcp" {
		if d.shm, d.hostOf, err = setupSharedMemory(rd.hosts, s, d.tcp, shareThroughStore(ctx, store, s)); err != nil {
			d.close()
			return err
		}
		if d.shm != nil {
			d.add(d.shm, "through shared memory", d.shm.Close)
			d.shmNote = d.shm.DirectNote()
		}
	}
	d.route(s.Size)
	return nil
}

// close closes the transports beside TCP.
func (d *dataPath) close() {
	for _, f := range d.fast {
		f.close()
	}
	d.fast = nil
}

// route fixes, for each peer, which transport carries its frames.
func (d *dataPath) route(size int) {
	d.links = make([]ring.Transport, size)
	for r := range d.links {
		d.links[r] = d.tcp
		for _, f := range d.fast {
			if f.t.Has(r) {
				d.links[r] = f.t
				break
			}
		}
	}
}

func (d *dataPath) link(peer int) ring.Transport {
	if peer < 0 || peer >= len(d.links) {
		return d.tcp // reports the bad rank
	}
	return d.links[peer]
}

// watched is link for a peer this rank is about to exchange data with:
// when that is RDMA, a lazy TCP transport is told to connect, since only
// over TCP does the peer's end (a goodbye, an abort, its death) reach this
// rank. Shared memory hears it from the peer's segment and process
// (shm.Config.Watch).
func (d *dataPath) watched(peer int) ring.Transport {
	l := d.link(peer)
	if d.rdma != nil && l == ring.Transport(d.rdma) {
		d.tcp.Reach(peer)
	}
	return l
}

// abort tells the peers this rank gives up with err: over TCP, and in
// its shared-memory segment for the peers a lazy TCP transport has not
// connected.
func (d *dataPath) abort(err error) {
	d.tcp.Abort(err)
	if d.shm != nil {
		d.shm.Abort(err)
	}
}

func (d *dataPath) Send(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error {
	return d.watched(peer).Send(ctx, peer, stream, meta, payload)
}

func (d *dataPath) Post(peer int, stream uint32, buf []byte) (uint64, error) {
	return d.watched(peer).Post(peer, stream, buf)
}

// PostCombine implements ring.Combiner for the peers whose transport folds
// frames in straight from where they land (shared memory, RDMA).
func (d *dataPath) PostCombine(peer int, stream uint32, buf []byte, combine func(dst, src []byte)) (uint64, bool, error) {
	l, ok := d.watched(peer).(interface {
		PostCombine(int, uint32, []byte, mailbox.Combine) (uint64, error)
	})
	if !ok {
		return 0, false, nil
	}
	t, err := l.PostCombine(peer, stream, buf, combine)
	return t, err == nil, err
}

// SendDirect implements ring.DirectSender: through shared memory a large
// frame is read by the peer straight from payload; elsewhere it is Send.
func (d *dataPath) SendDirect(ctx context.Context, peer int, stream uint32, meta [4]uint64, payload []byte) error {
	l := d.watched(peer)
	if ds, ok := l.(ring.DirectSender); ok {
		return ds.SendDirect(ctx, peer, stream, meta, payload)
	}
	return l.Send(ctx, peer, stream, meta, payload)
}

func (d *dataPath) Wait(ctx context.Context, peer int, stream uint32, ticket uint64) ([4]uint64, int, error) {
	return d.link(peer).Wait(ctx, peer, stream, ticket)
}

// pairExchanger and frameReceiver are what a transport offers (shared
// memory does) to exchange with a pair of peers in one step, or to take
// a frame without a posted receive; dataPath turns them into
// ring.SendRecver and ring.Recver, which add whether they applied.
type pairExchanger interface {
	SendRecv(ctx context.Context, to int, stream uint32, meta [4]uint64, payload []byte, from int, buf []byte) ([4]uint64, int, error)
}

type frameReceiver interface {
	Recv(ctx context.Context, from int, stream uint32, buf []byte) ([4]uint64, int, error)
}

// Shared memory offers both: a change to its signatures must not quietly
// turn the fast paths off.
var (
	_ pairExchanger = (*shm.Transport)(nil)
	_ frameReceiver = (*shm.Transport)(nil)
)

// SendRecv implements ring.SendRecver for pairs of peers reached through
// one transport that exchanges in one step (shared memory takes the frame
// straight from its ring); for others ok is false and the caller posts,
// sends and waits.
func (d *dataPath) SendRecv(ctx context.Context, to int, stream uint32, meta [4]uint64, payload []byte, from int, buf []byte) ([4]uint64, int, bool, error) {
	l := d.watched(to)
	if d.watched(from) != l {
		return [4]uint64{}, 0, false, nil
	}
	sr, ok := l.(pairExchanger)
	if !ok {
		return [4]uint64{}, 0, false, nil
	}
	rmeta, n, err := sr.SendRecv(ctx, to, stream, meta, payload, from, buf)
	return rmeta, n, true, err
}

// Recv implements ring.Recver for peers whose transport hands a frame
// over without a posted receive (shared memory takes it straight from its
// ring); for others ok is false and the caller posts and waits.
func (d *dataPath) Recv(ctx context.Context, from int, stream uint32, buf []byte) ([4]uint64, int, bool, error) {
	r, ok := d.watched(from).(frameReceiver)
	if !ok {
		return [4]uint64{}, 0, false, nil
	}
	meta, n, err := r.Recv(ctx, from, stream, buf)
	return meta, n, true, err
}

// describePaths says, for the log, how this rank reaches its peers, why
// RDMA is not used where it was wanted, whether pairs connect when first
// needed (lazy), and the world group's ring chunk.
func describePaths(d *dataPath, rank, size, chunk int, lazy bool) string {
	var paths []string
	reached := 0
	add := func(t ring.Transport, name string) int {
		var ranks []int
		for r := range size {
			if r != rank && d.link(r) == t {
				ranks = append(ranks, r)
			}
		}
		if len(ranks) > 0 {
			paths = append(paths, fmt.Sprintf("ranks %v %s", ranks, name))
		}
		return len(ranks)
	}
	for _, f := range d.fast {
		reached += add(f.t, f.name)
	}
	add(d.tcp, "over TCP")
	msg := fmt.Sprintf("comm: rank %d reaches %s", rank, strings.Join(paths, " and "))
	if reached > 0 {
		msg += " (GORUN_TRANSPORT=tcp forces TCP)"
	}
	if d.rdmaW != "" {
		msg += "; RDMA not used between " + d.rdmaW
	}
	if d.shmNote != "" {
		msg += "; " + d.shmNote
	}
	if lazy {
		msg += "; pairs connect when first needed (GORUN_CONNECT=eager: all while joining)"
	}
	if chunk%1024 == 0 {
		msg += fmt.Sprintf("; ring chunks of %d KiB", chunk/1024)
	} else {
		msg += fmt.Sprintf("; ring chunks of %d bytes", chunk)
	}
	return msg
}
