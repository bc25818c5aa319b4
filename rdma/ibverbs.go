package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

// The C structures of <infiniband/verbs.h> this binding fills or reads,
// for 64-bit Linux. TestLayoutMatchesHeader compares them with the
// header's, where a C compiler and the header are installed.
type (
	ibvQPCap struct {
		MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData uint32
	}
	ibvQPInitAttr struct {
		QPContext, SendCQ, RecvCQ, SRQ unsafe.Pointer
		Cap                            ibvQPCap
		QPType                         uint32
		SQSigAll                       int32
		_                              [4]byte
	}
	ibvGlobalRoute struct {
		DGID                              [16]byte
		FlowLabel                         uint32
		SGIDIndex, HopLimit, TrafficClass uint8
		_                                 uint8
	}
	ibvAHAttr struct {
		GRH                                         ibvGlobalRoute
		DLID                                        uint16
		SL, SrcPathBits, StaticRate, IsGlobal, Port uint8
		_                                           uint8
	}
	ibvQPAttr struct {
		QPState, CurQPState, PathMTU, PathMigState, QKey, RQPSN, SQPSN, DestQPNum, QPAccessFlags uint32
		Cap                                                                                      ibvQPCap
		AHAttr, AltAHAttr                                                                        ibvAHAttr
		PKeyIndex, AltPKeyIndex                                                                  uint16
		EnSQDAsyncNotify, SQDraining, MaxRDAtomic, MaxDestRDAtomic, MinRNRTimer                  uint8
		PortNum, Timeout, RetryCnt, RNRRetry, AltPortNum, AltTimeout                             uint8
		_                                                                                        uint8
		RateLimit                                                                                uint32
		_                                                                                        [4]byte
	}
	ibvSGE struct {
		Addr         uint64
		Length, LKey uint32
	}
	ibvSendWR struct {
		WRID                       uint64
		Next, SGList               uintptr
		NumSGE                     int32
		Opcode, SendFlags, ImmData uint32
		RemoteAddr                 uint64
		RKey                       uint32
		_                          [76]byte // the rest of the unions
	}
	ibvRecvWR struct {
		WRID         uint64
		Next, SGList uintptr
		NumSGE       int32
		_            [4]byte
	}
	ibvWC struct {
		WRID                                                               uint64
		Status, Opcode, VendorErr, ByteLen, ImmData, QPNum, SrcQP, WCFlags uint32
		PKeyIndex, SLID                                                    uint16
		SL, DLIDPathBits                                                   uint8
		_                                                                  [2]byte
	}
)

// Offsets into structures this binding only reads.
const (
	ctxOps           = 8  // ibv_context.ops
	opsPollCQ        = 88 // ibv_context_ops.poll_cq
	opsPostSend      = 200
	opsPostRecv      = 208
	qpNum            = 52 // ibv_qp.qp_num
	mrLKey, mrRKey   = 36, 40
	portAttrBytes    = 64 // room for struct ibv_port_attr (52 bytes in rdma-core 44)
	portState        = 0
	portActiveMTU    = 8
	portLID          = 34
	portLinkLayer    = 46
	portStateActive  = 4
	qptRC            = 2
	wrRDMAWrite      = 0
	wrRDMAWriteImm   = 1
	sendSignaled     = 2
	accessLocalWrite = 1
	accessRemoteWrit = 2
)

// QP states and attribute masks (enum ibv_qp_state, enum ibv_qp_attr_mask).
const (
	qpsInit, qpsRTR, qpsRTS = 1, 2, 3

	maskState, maskAccess, maskPKey, maskPort                 = 1, 8, 16, 32
	maskAV, maskPathMTU, maskTimeout, maskRetry, maskRNRRetry = 128, 256, 512, 1024, 2048
	maskRQPSN, maskMaxQPRDAtomic, maskMinRNRTimer, maskSQPSN  = 4096, 8192, 32768, 65536
	maskMaxDestRDAtomic, maskDestQPN                          = 131072, 1048576
)

var portStates = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

// libibverbs holds the library's entry points.
type libibverbs struct {
	getDeviceList  func(n *int32) unsafe.Pointer
	freeDeviceList func(list unsafe.Pointer)
	getDeviceName  func(dev unsafe.Pointer) string
	openDevice     func(dev unsafe.Pointer) unsafe.Pointer
	closeDevice    func(ctx unsafe.Pointer) int32
	queryPort      func(ctx unsafe.Pointer, port uint8, attr *[portAttrBytes]byte) int32
	queryGID       func(ctx unsafe.Pointer, port uint8, index int32, gid *[16]byte) int32
	allocPD        func(ctx unsafe.Pointer) unsafe.Pointer
	deallocPD      func(pd unsafe.Pointer) int32
	regMR          func(pd, addr unsafe.Pointer, length uintptr, access int32) unsafe.Pointer
	deregMR        func(mr unsafe.Pointer) int32
	createCQ       func(ctx unsafe.Pointer, cqe int32, cqCtx, channel unsafe.Pointer, vector int32) unsafe.Pointer
	destroyCQ      func(cq unsafe.Pointer) int32
	createQP       func(pd unsafe.Pointer, attr *ibvQPInitAttr) unsafe.Pointer
	modifyQP       func(qp unsafe.Pointer, attr *ibvQPAttr, mask int32) int32
	destroyQP      func(qp unsafe.Pointer) int32
}

func loadLibibverbs() (*libibverbs, error) {
	// The loader's error message (dlerror) is kept per thread: purego
	// reads it after dlopen or dlsym fails, which must be on the same one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen("libibverbs.so.1", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: libibverbs.so.1 cannot be loaded (install rdma-core's libibverbs1): %v", ErrNoDevice, err)
	}
	l := &libibverbs{}
	for _, s := range []struct {
		fn   any
		name string
	}{
		{&l.getDeviceList, "ibv_get_device_list"}, {&l.freeDeviceList, "ibv_free_device_list"},
		{&l.getDeviceName, "ibv_get_device_name"}, {&l.openDevice, "ibv_open_device"},
		{&l.closeDevice, "ibv_close_device"}, {&l.queryPort, "ibv_query_port"}, {&l.queryGID, "ibv_query_gid"},
		{&l.allocPD, "ibv_alloc_pd"}, {&l.deallocPD, "ibv_dealloc_pd"}, {&l.regMR, "ibv_reg_mr"},
		{&l.deregMR, "ibv_dereg_mr"}, {&l.createCQ, "ibv_create_cq"}, {&l.destroyCQ, "ibv_destroy_cq"},
		{&l.createQP, "ibv_create_qp"}, {&l.modifyQP, "ibv_modify_qp"}, {&l.destroyQP, "ibv_destroy_qp"},
	} {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil || sym == 0 {
			return nil, fmt.Errorf("%w: libibverbs.so.1 has no %s: %v", ErrNoDevice, s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	return l, nil
}

// OpenConfig chooses the device port.
type OpenConfig struct {
	Device   string // device name (GORUN_RDMA_DEVICE); empty: the first with an active port
	Port     int    // port number; 0: the first active one
	GIDIndex int    // GID table index (GORUN_RDMA_GID_INDEX); RoCE v2 often needs 1 or 3
	CQDepth  int    // completions each queue holds: at least the outstanding work of all queue pairs
}

// Device is an opened port of an RDMA device through libibverbs: the
// Verbs the transport runs on.
type Device struct {
	lib            *libibverbs
	ctx, pd        unsafe.Pointer
	sendCQ, recvCQ unsafe.Pointer
	cqDepth        int
	port           Port
	pollCQ         uintptr // the provider's poll_cq, post_send, post_recv
	postSend       uintptr
	postRecv       uintptr
	wcMem          []byte // work completions (C-side memory)

	mu  sync.Mutex
	qps map[uint32]*verbsQP
	mrs map[uint64]unsafe.Pointer // by address
}

type verbsQP struct {
	qp      unsafe.Pointer
	mu      sync.Mutex // guards the scratch work requests
	scratch []byte     // C-side memory: a send WR, its two SGEs, a receive WR, bad-WR pointer
}

// Open opens the RDMA port cfg chooses. Its error wraps ErrNoDevice when
// none is usable, saying why.
func Open(cfg OpenConfig) (*Device, error) {
	lib, err := loadLibibverbs()
	if err != nil {
		return nil, err
	}
	var n int32
	list := lib.getDeviceList(&n)
	if list == nil || n == 0 {
		if list != nil {
			lib.freeDeviceList(list)
		}
		return nil, fmt.Errorf("%w: libibverbs found no RDMA device (nothing under /sys/class/infiniband)", ErrNoDevice)
	}
	defer lib.freeDeviceList(list)
	devs := unsafe.Slice((*unsafe.Pointer)(list), n)
	var why []string
	for _, dev := range devs {
		name := lib.getDeviceName(dev)
		if cfg.Device != "" && name != cfg.Device {
			continue
		}
		ctx := lib.openDevice(dev)
		if ctx == nil {
			why = append(why, name+" cannot be opened")
			continue
		}
		d, reason := openPort(lib, ctx, name, cfg)
		if d != nil {
			return d, nil
		}
		why = append(why, reason)
		lib.closeDevice(ctx)
	}
	if len(why) == 0 {
		return nil, fmt.Errorf("%w: no device named %q (GORUN_RDMA_DEVICE)", ErrNoDevice, cfg.Device)
	}
	return nil, fmt.Errorf("%w: %s", ErrNoDevice, joinReasons(why))
}

func joinReasons(why []string) string {
	s := why[0]
	for _, w := range why[1:] {
		s += "; " + w
	}
	return s
}

// openPort finds the active port of an opened device and sets up the
// protection domain; it returns why not on failure.
func openPort(lib *libibverbs, ctx unsafe.Pointer, name string, cfg OpenConfig) (*Device, string) {
	var attr [portAttrBytes]byte
	num, reason := 0, ""
	for p := 1; p <= 8; p++ {
		if cfg.Port != 0 && p != cfg.Port {
			continue
		}
		clear(attr[:])
		if lib.queryPort(ctx, uint8(p), &attr) != 0 {
			if cfg.Port != 0 || p == 1 {
				reason = fmt.Sprintf("%s has no port %d", name, p)
			}
			break
		}
		if st := binary.LittleEndian.Uint32(attr[portState:]); st != portStateActive {
			state := fmt.Sprint(st)
			if int(st) < len(portStates) {
				state = portStates[st]
			}
			reason = fmt.Sprintf("%s port %d is %s, not ACTIVE", name, p, state)
			continue
		}
		num = p
		break
	}
	if num == 0 {
		return nil, reason
	}
	d := &Device{lib: lib, ctx: ctx, cqDepth: max(cfg.CQDepth, 256), qps: map[uint32]*verbsQP{}, mrs: map[uint64]unsafe.Pointer{}}
	d.port = Port{Device: name, Num: uint8(num), LinkLayer: attr[portLinkLayer], MTU: uint8(binary.LittleEndian.Uint32(attr[portActiveMTU:])),
		LID: binary.LittleEndian.Uint16(attr[portLID:]), GIDIndex: uint8(cfg.GIDIndex)}
	if d.port.LinkLayer == 0 { // unspecified: InfiniBand
		d.port.LinkLayer = LinkInfiniBand
	}
	if lib.queryGID(ctx, uint8(num), int32(cfg.GIDIndex), &d.port.GID) != 0 {
		return nil, fmt.Sprintf("%s port %d has no GID at index %d (GORUN_RDMA_GID_INDEX)", name, num, cfg.GIDIndex)
	}
	if d.port.LinkLayer == LinkEthernet && d.port.GID == [16]byte{} {
		return nil, fmt.Sprintf("%s port %d (RoCE) has an empty GID at index %d: no IP address on its interface? (GORUN_RDMA_GID_INDEX)", name, num, cfg.GIDIndex)
	}
	if d.pd = lib.allocPD(ctx); d.pd == nil {
		return nil, fmt.Sprintf("%s: cannot allocate a protection domain", name)
	}
	ops := unsafe.Add(ctx, ctxOps)
	d.pollCQ = *(*uintptr)(unsafe.Add(ops, opsPollCQ))
	d.postSend = *(*uintptr)(unsafe.Add(ops, opsPostSend))
	d.postRecv = *(*uintptr)(unsafe.Add(ops, opsPostRecv))
	if d.pollCQ == 0 || d.postSend == 0 || d.postRecv == 0 {
		lib.deallocPD(d.pd)
		return nil, fmt.Sprintf("%s: its provider has no poll_cq/post_send/post_recv in the context's operations", name)
	}
	return d, ""
}

// Port implements Verbs.
func (d *Device) Port() Port { return d.port }

// cqs creates the completion queues at the first queue pair; the caller holds d.mu.
func (d *Device) cqs() error {
	if d.sendCQ != nil {
		return nil
	}
	var err error
	if d.wcMem, err = unix.Mmap(-1, 0, 32*int(unsafe.Sizeof(ibvWC{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return err
	}
	if d.sendCQ = d.lib.createCQ(d.ctx, int32(d.cqDepth), nil, nil, 0); d.sendCQ == nil {
		return fmt.Errorf("creating a completion queue of %d entries failed", d.cqDepth)
	}
	if d.recvCQ = d.lib.createCQ(d.ctx, int32(d.cqDepth), nil, nil, 0); d.recvCQ == nil {
		return fmt.Errorf("creating a completion queue of %d entries failed", d.cqDepth)
	}
	return nil
}

// Register implements Verbs.
func (d *Device) Register(mem []byte) (Keys, error) {
	if len(mem) == 0 {
		return Keys{}, errors.New("registering an empty range")
	}
	mr := d.lib.regMR(d.pd, unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)), accessLocalWrite|accessRemoteWrit)
	if mr == nil {
		return Keys{}, fmt.Errorf("ibv_reg_mr of %d bytes failed", len(mem))
	}
	k := Keys{Addr: addr(mem), Len: uint64(len(mem)), LKey: *(*uint32)(unsafe.Add(mr, mrLKey)), RKey: *(*uint32)(unsafe.Add(mr, mrRKey))}
	d.mu.Lock()
	d.mrs[k.Addr] = mr
	d.mu.Unlock()
	return k, nil
}

// Deregister implements Verbs.
func (d *Device) Deregister(k Keys) error {
	d.mu.Lock()
	mr := d.mrs[k.Addr]
	delete(d.mrs, k.Addr)
	d.mu.Unlock()
	if mr == nil {
		return fmt.Errorf("deregistering unknown memory at %#x", k.Addr)
	}
	if rc := d.lib.deregMR(mr); rc != 0 {
		return fmt.Errorf("ibv_dereg_mr: %w", unix.Errno(rc))
	}
	return nil
}

// CreateQP implements Verbs.
func (d *Device) CreateQP(sendDepth, recvDepth int) (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.cqs(); err != nil {
		return 0, err
	}
	attr := ibvQPInitAttr{SendCQ: d.sendCQ, RecvCQ: d.recvCQ, QPType: qptRC,
		Cap: ibvQPCap{MaxSendWR: uint32(sendDepth), MaxRecvWR: uint32(recvDepth), MaxSendSGE: 2, MaxRecvSGE: 1}}
	qp := d.lib.createQP(d.pd, &attr)
	if qp == nil {
		return 0, fmt.Errorf("ibv_create_qp (RC, %d sends, %d receives) failed", sendDepth, recvDepth)
	}
	num := *(*uint32)(unsafe.Add(qp, qpNum))
	scratch, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		d.lib.destroyQP(qp)
		return 0, err
	}
	init := ibvQPAttr{QPState: qpsInit, PortNum: d.port.Num, QPAccessFlags: accessLocalWrite | accessRemoteWrit}
	if rc := d.lib.modifyQP(qp, &init, maskState|maskPKey|maskPort|maskAccess); rc != 0 {
		d.lib.destroyQP(qp)
		unix.Munmap(scratch)
		return 0, fmt.Errorf("queue pair %d to INIT: %w", num, unix.Errno(rc))
	}
	d.qps[num] = &verbsQP{qp: qp, scratch: scratch}
	return num, nil
}

func (d *Device) qp(num uint32) (*verbsQP, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.qps[num]
	if q == nil {
		return nil, fmt.Errorf("no queue pair %d", num)
	}
	return q, nil
}

// Connect implements Verbs: INIT → RTR → RTS.
func (d *Device) Connect(num uint32, local, remote Endpoint) error {
	q, err := d.qp(num)
	if err != nil {
		return err
	}
	rtr := ibvQPAttr{QPState: qpsRTR, PathMTU: uint32(min(local.MTU, remote.MTU)), DestQPNum: remote.QPN, RQPSN: remote.PSN,
		MaxDestRDAtomic: 1, MinRNRTimer: 12}
	rtr.AHAttr = ibvAHAttr{DLID: remote.LID, Port: d.port.Num}
	if d.port.LinkLayer == LinkEthernet || remote.LID == 0 {
		rtr.AHAttr.IsGlobal = 1
		rtr.AHAttr.GRH = ibvGlobalRoute{DGID: remote.GID, SGIDIndex: local.GIDIndex, HopLimit: 64}
	}
	if rc := d.lib.modifyQP(q.qp, &rtr, maskState|maskAV|maskPathMTU|maskDestQPN|maskRQPSN|maskMaxDestRDAtomic|maskMinRNRTimer); rc != 0 {
		return fmt.Errorf("queue pair %d to RTR: %w", num, unix.Errno(rc))
	}
	rts := ibvQPAttr{QPState: qpsRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: local.PSN, MaxRDAtomic: 1}
	if rc := d.lib.modifyQP(q.qp, &rts, maskState|maskTimeout|maskRetry|maskRNRRetry|maskSQPSN|maskMaxQPRDAtomic); rc != 0 {
		return fmt.Errorf("queue pair %d to RTS: %w", num, unix.Errno(rc))
	}
	return nil
}

// DestroyQP implements Verbs.
func (d *Device) DestroyQP(num uint32) error {
	d.mu.Lock()
	q := d.qps[num]
	delete(d.qps, num)
	d.mu.Unlock()
	if q == nil {
		return fmt.Errorf("no queue pair %d", num)
	}
	rc := d.lib.destroyQP(q.qp)
	unix.Munmap(q.scratch)
	if rc != 0 {
		return fmt.Errorf("ibv_destroy_qp %d: %w", num, unix.Errno(rc))
	}
	return nil
}

// Scratch layout of a queue pair.
const (
	scratchSendWR = 0
	scratchSGE    = 128
	scratchRecvWR = 160
	scratchBad    = 192
)

// PostWrite implements Verbs through the provider's post_send.
func (d *Device) PostWrite(num uint32, w *Write) error {
	q, err := d.qp(num)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	base := unsafe.Pointer(unsafe.SliceData(q.scratch))
	sge := unsafe.Slice((*ibvSGE)(unsafe.Add(base, scratchSGE)), 2)
	wr := (*ibvSendWR)(unsafe.Add(base, scratchSendWR))
	*wr = ibvSendWR{WRID: w.ID, SGList: uintptr(unsafe.Add(base, scratchSGE)), NumSGE: 1, Opcode: wrRDMAWrite,
		RemoteAddr: w.RemoteAddr, RKey: w.RKey}
	sge[0] = ibvSGE{Addr: w.Local[0].Addr, Length: w.Local[0].Len, LKey: w.Local[0].LKey}
	if w.Local[1].Len > 0 {
		sge[1] = ibvSGE{Addr: w.Local[1].Addr, Length: w.Local[1].Len, LKey: w.Local[1].LKey}
		wr.NumSGE = 2
	}
	if w.WithImm {
		wr.Opcode, wr.ImmData = wrRDMAWriteImm, bits.ReverseBytes32(w.Imm) // network byte order
	}
	if w.Signaled {
		wr.SendFlags = sendSignaled
	}
	rc, _, _ := purego.SyscallN(d.postSend, uintptr(q.qp), uintptr(unsafe.Pointer(wr)), uintptr(unsafe.Add(base, scratchBad)))
	if rc := int32(rc); rc != 0 {
		return fmt.Errorf("post_send on queue pair %d: %w", num, unix.Errno(rc))
	}
	return nil
}

// PostRecv implements Verbs through the provider's post_recv.
func (d *Device) PostRecv(num uint32, id uint64) error {
	q, err := d.qp(num)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	base := unsafe.Pointer(unsafe.SliceData(q.scratch))
	wr := (*ibvRecvWR)(unsafe.Add(base, scratchRecvWR))
	*wr = ibvRecvWR{WRID: id}
	rc, _, _ := purego.SyscallN(d.postRecv, uintptr(q.qp), uintptr(unsafe.Pointer(wr)), uintptr(unsafe.Add(base, scratchBad)))
	if rc := int32(rc); rc != 0 {
		return fmt.Errorf("post_recv on queue pair %d: %w", num, unix.Errno(rc))
	}
	return nil
}

func (d *Device) poll(cq unsafe.Pointer, out []Completion) (int, error) {
	if cq == nil {
		return 0, nil
	}
	wcs := unsafe.Slice((*ibvWC)(unsafe.Pointer(unsafe.SliceData(d.wcMem))), len(d.wcMem)/int(unsafe.Sizeof(ibvWC{})))
	k := min(len(out), len(wcs))
	r, _, _ := purego.SyscallN(d.pollCQ, uintptr(cq), uintptr(k), uintptr(unsafe.Pointer(&wcs[0])))
	n := int(int32(r))
	if n < 0 {
		return 0, fmt.Errorf("poll_cq returned %d", n)
	}
	for i, wc := range wcs[:n] {
		out[i] = Completion{ID: wc.WRID, Status: Status(wc.Status), QPN: wc.QPNum, Imm: bits.ReverseBytes32(wc.ImmData), Len: wc.ByteLen}
	}
	return n, nil
}

// PollSend implements Verbs. The transport polls from one goroutine at a
// time, which the shared completion buffer relies on.
func (d *Device) PollSend(out []Completion) (int, error) { return d.poll(d.sendCQ, out) }

// PollRecv implements Verbs.
func (d *Device) PollRecv(out []Completion) (int, error) { return d.poll(d.recvCQ, out) }

// Close implements Verbs.
func (d *Device) Close() error {
	var errs []error
	for _, cq := range []unsafe.Pointer{d.sendCQ, d.recvCQ} {
		if cq != nil {
			if rc := d.lib.destroyCQ(cq); rc != 0 {
				errs = append(errs, fmt.Errorf("ibv_destroy_cq: %w", unix.Errno(rc)))
			}
		}
	}
	if d.wcMem != nil {
		unix.Munmap(d.wcMem)
	}
	if rc := d.lib.deallocPD(d.pd); rc != 0 {
		errs = append(errs, fmt.Errorf("ibv_dealloc_pd: %w", unix.Errno(rc)))
	}
	if rc := d.lib.closeDevice(d.ctx); rc != 0 {
		errs = append(errs, fmt.Errorf("ibv_close_device: %w", unix.Errno(rc)))
	}
	return errors.Join(errs...)
}
