package rdma

import (
	"errors"
	"fmt"
)

// Verbs is the part of the verbs API the transport uses: one port of one
// opened device, with a protection domain, a completion queue for sends
// and one for receives. The library binding (Open) and the fake of the
// tests implement it. Queue pairs are named by their numbers.
type Verbs interface {
	// Port describes the port the transport uses.
	Port() Port
	// Register registers mem (which must stay mapped until Deregister) for
	// local writes and remote RDMA writes.
	Register(mem []byte) (Keys, error)
	// Deregister releases a registration.
	Deregister(k Keys) error
	// CreateQP creates a reliable-connected queue pair on the two
	// completion queues, with room for sendDepth outstanding sends and
	// recvDepth receives, and brings it to the INIT state.
	CreateQP(sendDepth, recvDepth int) (qpn uint32, err error)
	// Connect brings a queue pair through RTR to RTS, connected to the
	// peer's queue pair described by remote.
	Connect(qpn uint32, local, remote Endpoint) error
	// DestroyQP destroys a queue pair.
	DestroyQP(qpn uint32) error
	// PostWrite posts one RDMA write on a queue pair.
	PostWrite(qpn uint32, w *Write) error
	// PostRecv posts one receive request without buffers (for writes with
	// immediate data).
	PostRecv(qpn uint32, id uint64) error
	// PollSend and PollRecv fill wc with up to len(wc) completions of the
	// send and receive queues and return how many they filled.
	PollSend(wc []Completion) (int, error)
	PollRecv(wc []Completion) (int, error)
	// Close releases the completion queues, the protection domain and the
	// device.
	Close() error
}

// Keys identify a registered memory range: its address, the local key
// work requests use and the remote key peers write with.
type Keys struct {
	Addr, Len  uint64
	LKey, RKey uint32
}

// Write is one RDMA write: the local pieces (each within a registered
// range, gathered in order) to the remote address.
type Write struct {
	ID         uint64
	Local      [2]Piece // Local[1] is used when its Len is not 0
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32
	WithImm    bool // an RDMA write with immediate data: consumes a receive at the peer
	Signaled   bool // report a completion on the send queue
}

// Piece is a local range of registered memory.
type Piece struct {
	Addr uint64
	Len  uint32
	LKey uint32
}

// Len returns the bytes the write moves.
func (w *Write) Len() int { return int(w.Local[0].Len + w.Local[1].Len) }

// Completion is one work completion.
type Completion struct {
	ID     uint64
	Status Status
	QPN    uint32 // the local queue pair it belongs to
	Imm    uint32 // immediate data of a received write
	Len    uint32
}

// Status is a work completion's status (enum ibv_wc_status).
type Status uint32

// Completion statuses the transport tells apart.
const (
	StatusSuccess      Status = 0
	StatusFlushed      Status = 5  // IBV_WC_WR_FLUSH_ERR: the queue pair was already in error
	StatusRemoteAccess Status = 10 // IBV_WC_REM_ACCESS_ERR
	StatusRetryExc     Status = 12 // IBV_WC_RETRY_EXC_ERR: the peer stopped answering
	StatusRNRRetryExc  Status = 13 // IBV_WC_RNR_RETRY_EXC_ERR: the peer had no receive posted
)

var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "work request flushed", "memory window bind error", "bad response",
	"local access error", "remote invalid request", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation",
	"remote invalid RD request", "remote aborted", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout", "general error",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return fmt.Sprintf("%s (status %d)", statusNames[s], uint32(s))
	}
	return fmt.Sprintf("status %d", uint32(s))
}

// ErrNoDevice is wrapped by Open's error when no usable RDMA port exists:
// no library, no device, or no active port. The job then runs over TCP.
var ErrNoDevice = errors.New("no usable RDMA device")
