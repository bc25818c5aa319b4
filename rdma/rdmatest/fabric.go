// Package rdmatest provides a verbs layer in memory for testing code that
// runs on rdma transports without an RDMA device.
package rdmatest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gorun/gorun/rdma"
)

// Fabric is a verbs layer in memory, for tests: NICs on one fabric
// whose queue pairs carry RDMA writes between the NICs' registered
// memory, checking everything a device checks (queue-pair states, keys,
// bounds, posted receives, queue depths). Deferred, a write is carried
// out not when it is posted but on some later poll of any NIC, as a real
// device reads the memory it sends when it gets to it: a transport that
// reuses a buffer before its write completes sends the wrong bytes.
type Fabric struct {
	mu       sync.Mutex
	rng      *rand.Rand
	deferred bool
	nics     map[uint16]*NIC
	nextQPN  uint32
	nextKey  uint32
	queue    []fakeOp
	writes   int            // writes carried out
	gathered map[uint32]int // writes that gathered from each local key
}

// NewFabric returns an empty fabric; seed drives the deferral.
func NewFabric(seed uint64, deferred bool) *Fabric {
	return &Fabric{rng: rand.New(rand.NewPCG(seed, 1)), deferred: deferred, nics: map[uint16]*NIC{}, gathered: map[uint32]int{}, nextQPN: 100, nextKey: 1000}
}

// NIC is one port on a Fabric; it implements Verbs.
type NIC struct {
	fab     *Fabric
	port    rdma.Port
	regions map[uint32]fakeRegion // by key
	qps     map[uint32]*fakeQP
	sendCQ  []rdma.Completion
	recvCQ  []rdma.Completion
	dead    bool
	closed  bool
}

type fakeRegion struct {
	mem  []byte
	keys rdma.Keys
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
	nic *NIC
	qp  *fakeQP
	w   rdma.Write
}

// NIC adds a port to the fabric.
func (f *Fabric) NIC(name string) *NIC {
	f.mu.Lock()
	defer f.mu.Unlock()
	lid := uint16(len(f.nics) + 1)
	n := &NIC{fab: f, regions: map[uint32]fakeRegion{}, qps: map[uint32]*fakeQP{}}
	n.port = rdma.Port{Device: name, Num: 1, LinkLayer: rdma.LinkInfiniBand, LID: lid, MTU: 5}
	binary.BigEndian.PutUint64(n.port.GID[:8], 0xfe80000000000000)
	binary.BigEndian.PutUint64(n.port.GID[8:], uint64(lid))
	f.nics[lid] = n
	return n
}

// Kill makes the NIC stop answering, as when its host dies.
func (n *NIC) Kill() {
	n.fab.mu.Lock()
	n.dead = true
	n.fab.mu.Unlock()
}

// Writes returns the number of writes the fabric carried out.
func (f *Fabric) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// GatheredFrom returns how many writes carried out so far read from the
// registration that starts at mem.
func (f *Fabric) GatheredFrom(mem []byte) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := addr(mem)
	for _, n := range f.nics {
		for key, r := range n.regions {
			if r.keys.Addr == a {
				return f.gathered[key]
			}
		}
	}
	return 0
}

var errFake = errors.New("fake verbs")

// Port implements rdma.Verbs.
func (n *NIC) Port() rdma.Port { return n.port }

// Register implements rdma.Verbs.
func (n *NIC) Register(mem []byte) (rdma.Keys, error) {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if len(mem) == 0 {
		return rdma.Keys{}, fmt.Errorf("%w: empty registration", errFake)
	}
	n.fab.nextKey++
	k := rdma.Keys{Addr: addr(mem), Len: uint64(len(mem)), LKey: n.fab.nextKey, RKey: n.fab.nextKey}
	n.regions[k.LKey] = fakeRegion{mem: mem, keys: k}
	return k, nil
}

// Deregister implements rdma.Verbs.
func (n *NIC) Deregister(k rdma.Keys) error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if _, ok := n.regions[k.LKey]; !ok {
		return fmt.Errorf("%w: deregistering unknown key %d", errFake, k.LKey)
	}
	delete(n.regions, k.LKey)
	return nil
}

// CreateQP implements rdma.Verbs.
func (n *NIC) CreateQP(sendDepth, recvDepth int) (uint32, error) {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	n.fab.nextQPN++
	q := &fakeQP{num: n.fab.nextQPN, state: "INIT", sendDepth: sendDepth, recvDepth: recvDepth}
	n.qps[q.num] = q
	return q.num, nil
}

// Connect implements rdma.Verbs.
func (n *NIC) Connect(qpn uint32, local, remote rdma.Endpoint) error {
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

// DestroyQP implements rdma.Verbs.
func (n *NIC) DestroyQP(qpn uint32) error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if n.qps[qpn] == nil {
		return fmt.Errorf("%w: destroying unknown queue pair %d", errFake, qpn)
	}
	delete(n.qps, qpn)
	return nil
}

// PostRecv implements rdma.Verbs.
func (n *NIC) PostRecv(qpn uint32, id uint64) error {
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
func (n *NIC) local(p rdma.Piece) ([]byte, error) {
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

// PostWrite implements rdma.Verbs.
func (n *NIC) PostWrite(qpn uint32, w *rdma.Write) error {
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
func (f *Fabric) execute(op fakeOp) {
	n, q, w := op.nic, op.qp, op.w
	status := func(s rdma.Status) {
		if s != rdma.StatusSuccess {
			q.state = "ERR"
		}
		if w.Signaled || s != rdma.StatusSuccess {
			n.sendCQ = append(n.sendCQ, rdma.Completion{ID: w.ID, Status: s, QPN: q.num})
		} else {
			q.outstanding--
		}
	}
	if q.state == "ERR" || n.dead {
		status(rdma.StatusFlushed)
		return
	}
	peer := f.nics[q.remoteLID]
	if peer == nil || peer.dead || peer.closed {
		status(rdma.StatusRetryExc)
		return
	}
	rq := peer.qps[q.remoteQPN]
	if rq == nil || rq.state != "RTS" || rq.remoteLID != n.port.LID || rq.remoteQPN != q.num {
		status(rdma.StatusRetryExc)
		return
	}
	var local [2][]byte
	size := 0
	for i, p := range w.Local {
		if p.Len > 0 {
			b, err := n.local(p)
			if err != nil { // deregistered since it was posted
				status(4) // IBV_WC_LOC_PROT_ERR
				return
			}
			local[i], size = b, size+len(b)
			f.gathered[p.LKey]++
		}
	}
	r, ok := peer.regions[w.RKey]
	if !ok || w.RemoteAddr < r.keys.Addr || w.RemoteAddr+uint64(size) > r.keys.Addr+r.keys.Len {
		status(rdma.StatusRemoteAccess)
		return
	}
	if w.WithImm && len(rq.recvs) == 0 {
		status(rdma.StatusRNRRetryExc)
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
		peer.recvCQ = append(peer.recvCQ, rdma.Completion{ID: id, QPN: rq.num, Imm: w.Imm, Len: uint32(size)})
	}
	status(rdma.StatusSuccess)
}

// advance carries out some of the deferred writes, oldest first.
func (f *Fabric) advance() {
	if len(f.queue) == 0 {
		return
	}
	k := f.rng.IntN(len(f.queue) + 1)
	for _, op := range f.queue[:k] {
		f.execute(op)
	}
	f.queue = append(f.queue[:0], f.queue[k:]...)
}

func (n *NIC) poll(cq *[]rdma.Completion, wc []rdma.Completion, sends bool) (int, error) {
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

// PollSend implements rdma.Verbs.
func (n *NIC) PollSend(wc []rdma.Completion) (int, error) { return n.poll(&n.sendCQ, wc, true) }

// PollRecv implements rdma.Verbs.
func (n *NIC) PollRecv(wc []rdma.Completion) (int, error) { return n.poll(&n.recvCQ, wc, false) }

// Close implements rdma.Verbs.
func (n *NIC) Close() error {
	n.fab.mu.Lock()
	defer n.fab.mu.Unlock()
	if len(n.qps) > 0 || len(n.regions) > 0 {
		return fmt.Errorf("%w: closing with %d queue pairs and %d registrations left", errFake, len(n.qps), len(n.regions))
	}
	n.closed = true
	return nil
}

// addr returns the address of b's first byte (b is not empty).
func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
