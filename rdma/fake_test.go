package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// FakeFabric is a verbs layer in memory, for tests: NICs on one fabric
// whose queue pairs carry RDMA writes between the NICs' registered
// memory, checking everything a device checks (queue-pair states, keys,
// bounds, posted receives, queue depths). Deferred, a write is carried
// out not when it is posted but on some later poll of any NIC, as a real
// device reads the memory it sends when it gets to it: a transport that
// reuses a buffer before its write completes sends the wrong bytes.
type FakeFabric struct {
	mu       sync.Mutex
	rng      *rand.Rand
	deferred bool
	nics     map[uint16]*FakeNIC
	nextQPN  uint32
	nextKey  uint32
	queue    []fakeOp
	writes   int // writes carried out
}

// NewFakeFabric returns an empty fabric; seed drives the deferral.
func NewFakeFabric(seed uint64, deferred bool) *FakeFabric {
	return &FakeFabric{rng: rand.New(rand.NewPCG(seed, 1)), deferred: deferred, nics: map[uint16]*FakeNIC{}, nextQPN: 100, nextKey: 1000}
}

// FakeNIC is one port on a FakeFabric; it implements Verbs.
type FakeNIC struct {
	fab     *FakeFabric
	port    Port
	regions map[uint32]fakeRegion // by key
	qps     map[uint32]*fakeQP
	sendCQ  []Completion
	recvCQ  []Completion
	dead    bool
	closed  bool
}

type fakeRegion struct {
	mem  []byte
	keys Keys
}

type fakeQP struct {
	num                  uint32
	state                string // INIT, RTS, ERR
	remoteLID            uint16
	remoteQPN            uint32
	recvs                []uint64
	sendDepth, recvDepth int
	outstanding          int // posted sends whose completion was not polled
}

type fakeOp struct {
	nic *FakeNIC
	qp  *fakeQP
	w   Write
}

// NIC adds a port to the fabric.
func (f *FakeFabric) NIC(name string) *FakeNIC {
	f.mu.Lock()
	defer f.mu.Unlock()
	lid := uint16(len(f.nics) + 1)
	n := &FakeNIC{fab: f, regions: map[uint32]fakeRegion{}, qps: map[uint32]*fakeQP{}}
	n.port = Port{Device: name, Num: 1, LinkLayer: LinkInfiniBand, LID: lid, MTU: 5}
	binary.BigEndian.PutUint64(n.port.GID[:8], 0xfe80000000000000)
	binary.BigEndian.PutUint64(n.port.GID[8:], uint64(lid))
	f.nics[lid] = n
	return n
}

// Kill makes the NIC stop answering, as when its host dies.
func (n *FakeNIC) Kill() {
	n.fab.mu.Lock()
	n.dead = true
	n.fab.mu.Unlock()
}

// Writes returns the number of writes the fabric carried out.
func (f *FakeFabric) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

var errFake = errors.New("fake verbs")

func (n *FakeNIC) Port() Port { return n.port }

func (n *FakeNIC) Register(mem []byte) (Keys, error) {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if len(mem) == 0 {
		return Keys{}, fmt.Errorf("%w: empty registration", errFake)
	}
	n.fab.nextKey++
	k := Keys{Addr: addr(mem), Len: uint64(len(mem)), LKey: n.fab.nextKey, RKey: n.fab.nextKey}
	n.regions[k.LKey] = fakeRegion{mem: mem, keys: k}
	return k, nil
}

func (n *FakeNIC) Deregister(k Keys) error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if _, ok := n.regions[k.LKey]; !ok {
		return fmt.Errorf("%w: deregistering unknown key %d", errFake, k.LKey)
	}
	delete(n.regions, k.LKey)
	return nil
}

func (n *FakeNIC) CreateQP(sendDepth, recvDepth int) (uint32, error) {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	n.fab.nextQPN++
	q := &fakeQP{num: n.fab.nextQPN, state: "INIT", sendDepth: sendDepth, recvDepth: recvDepth}
	n.qps[q.num] = q
	return q.num, nil
}

func (n *FakeNIC) Connect(qpn uint32, local, remote Endpoint) error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	q := n.qps[qpn]
	switch {
	case q == nil:
		return fmt.Errorf("%w: connecting unknown queue pair %d", errFake, qpn)
	case q.state != "INIT":
		return fmt.Errorf("%w: queue pair %d is in state %s, not INIT", errFake, qpn, q.state)
	case local.QPN != qpn || local.LID != n.port.LID:
		return fmt.Errorf("%w: local endpoint %+v is not queue pair %d on LID %d", errFake, local, qpn, n.port.LID)
	}
	q.state, q.remoteLID, q.remoteQPN = "RTS", remote.LID, remote.QPN
	return nil
}

func (n *FakeNIC) DestroyQP(qpn uint32) error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if n.qps[qpn] == nil {
		return fmt.Errorf("%w: destroying unknown queue pair %d", errFake, qpn)
	}
	delete(n.qps, qpn)
	return nil
}

func (n *FakeNIC) PostRecv(qpn uint32, id uint64) error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	q := n.qps[qpn]
	if q == nil {
		return fmt.Errorf("%w: posting a receive on unknown queue pair %d", errFake, qpn)
	}
	if len(q.recvs) >= q.recvDepth {
		return fmt.Errorf("%w: receive queue of queue pair %d is full (%d)", errFake, qpn, q.recvDepth)
	}
	q.recvs = append(q.recvs, id)
	return nil
}

// local returns the bytes of a local piece, checked against its key.
func (n *FakeNIC) local(p Piece) ([]byte, error) {
	r, ok := n.regions[p.LKey]
	if !ok {
		return nil, fmt.Errorf("%w: unknown local key %d", errFake, p.LKey)
	}
	if p.Addr < r.keys.Addr || p.Addr+uint64(p.Len) > r.keys.Addr+r.keys.Len {
		return nil, fmt.Errorf("%w: [%#x, +%d) is outside the region of key %d", errFake, p.Addr, p.Len, p.LKey)
	}
	off := p.Addr - r.keys.Addr
	return r.mem[off : off+uint64(p.Len)], nil
}

func (n *FakeNIC) PostWrite(qpn uint32, w *Write) error {
	f := n.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	q := n.qps[qpn]
	switch {
	case q == nil:
		return fmt.Errorf("%w: posting on unknown queue pair %d", errFake, qpn)
	case q.state == "INIT":
		return fmt.Errorf("%w: posting on queue pair %d before it is connected", errFake, qpn)
	case q.outstanding >= q.sendDepth:
		return fmt.Errorf("%w: send queue of queue pair %d is full (%d)", errFake, qpn, q.sendDepth)
	}
	for _, p := range w.Local {
		if p.Len > 0 {
			if _, err := n.local(p); err != nil {
				return err
			}
		}
	}
	q.outstanding++
	op := fakeOp{nic: n, qp: q, w: *w}
	if f.deferred {
		f.queue = append(f.queue, op)
	} else {
		f.execute(op)
	}
	return nil
}

// execute carries out one write; the caller holds f.mu.
func (f *FakeFabric) execute(op fakeOp) {
	n, q, w := op.nic, op.qp, op.w
	status := func(s Status) {
		if s != StatusSuccess {
			q.state = "ERR"
		}
		if w.Signaled || s != StatusSuccess {
			n.sendCQ = append(n.sendCQ, Completion{ID: w.ID, Status: s, QPN: q.num})
		} else {
			q.outstanding--
		}
	}
	if q.state == "ERR" || n.dead {
		status(StatusFlushed)
		return
	}
	peer := f.nics[q.remoteLID]
	if peer == nil || peer.dead || peer.closed {
		status(StatusRetryExc)
		return
	}
	rq := peer.qps[q.remoteQPN]
	if rq == nil || rq.state != "RTS" || rq.remoteLID != n.port.LID || rq.remoteQPN != q.num {
		status(StatusRetryExc)
		return
	}
	var local [2][]byte
	size := 0
	for i, p := range w.Local {
		if p.Len > 0 {
			b, err := n.local(p)
			if err != nil { // deregistered since it was posted
				status(4) // local protection error
				return
			}
			local[i], size = b, size+len(b)
		}
	}
	r, ok := peer.regions[w.RKey]
	if !ok || w.RemoteAddr < r.keys.Addr || w.RemoteAddr+uint64(size) > r.keys.Addr+r.keys.Len {
		status(StatusRemoteAccess)
		return
	}
	if w.WithImm && len(rq.recvs) == 0 {
		status(StatusRNRRetryExc)
		return
	}
	dst := r.mem[w.RemoteAddr-r.keys.Addr:][:size]
	if size == 8 && len(local[0]) == 8 && uintptr(unsafe.Pointer(&dst[0]))%8 == 0 {
		// A device writes an aligned word at once; readers poll it atomically.
		(*atomic.Uint64)(unsafe.Pointer(&dst[0])).Store((*atomic.Uint64)(unsafe.Pointer(&local[0][0])).Load())
	} else {
		copy(dst[copy(dst, local[0]):], local[1])
	}
	f.writes++
	if w.WithImm {
		id := rq.recvs[0]
		rq.recvs = append(rq.recvs[:0], rq.recvs[1:]...)
		peer.recvCQ = append(peer.recvCQ, Completion{ID: id, QPN: rq.num, Imm: w.Imm, Len: uint32(size)})
	}
	status(StatusSuccess)
}

// advance carries out some of the deferred writes, oldest first.
func (f *FakeFabric) advance() {
	if len(f.queue) == 0 {
		return
	}
	k := f.rng.IntN(len(f.queue) + 1)
	for _, op := range f.queue[:k] {
		f.execute(op)
	}
	f.queue = append(f.queue[:0], f.queue[k:]...)
}

func (n *FakeNIC) poll(cq *[]Completion, wc []Completion, sends bool) (int, error) {
	f := n.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if n.closed {
		return 0, fmt.Errorf("%w: polling a closed device", errFake)
	}
	f.advance()
	k := copy(wc, *cq)
	if sends {
		for _, c := range wc[:k] {
			for _, q := range n.qps {
				if q.num == c.QPN {
					q.outstanding--
				}
			}
		}
	}
	*cq = append((*cq)[:0], (*cq)[k:]...)
	return k, nil
}

func (n *FakeNIC) PollSend(wc []Completion) (int, error) { return n.poll(&n.sendCQ, wc, true) }
func (n *FakeNIC) PollRecv(wc []Completion) (int, error) { return n.poll(&n.recvCQ, wc, false) }

func (n *FakeNIC) Close() error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if len(n.qps) > 0 || len(n.regions) > 0 {
		return fmt.Errorf("%w: closing with %d queue pairs and %d registrations left", errFake, len(n.qps), len(n.regions))
	}
	n.closed = true
	return nil
}
