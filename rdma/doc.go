// Package rdma is gorun's InfiniBand / RoCE transport: one reliable-connected
// queue pair to each peer reached over RDMA, and frames moved by RDMA writes
// into registered, page-locked memory.
//
// # How frames move
//
// Every rank maps one region (mmap, mlock, registered once with the device
// and reused for the whole job; see Region). For each peer it holds an
// incoming ring of fixed slots that the peer writes into, an outgoing ring
// of the same shape that stages this rank's frames, and a credit word. A
// frame is cut into fragments of at most a slot (the format of
// the mailbox package, shared with shm); each fragment is copied into the next
// outgoing slot and written into the same slot of the peer's incoming ring
// with one RDMA write with immediate data, which also consumes one of the
// receive requests the peer keeps posted and so tells it a slot is full.
// The receiver copies fragments into the receives the algorithms posted
// (or keeps them until they are posted), and after draining writes its
// count of consumed slots into the sender's credit word with a plain RDMA
// write: the sender never has more slots in flight than the ring holds.
// Payloads that already lie in registered memory (Register: the pinned
// buffers GPU data is staged through) are written from where they are,
// without the copy into the outgoing ring.
//
// Completions are polled by the waiting caller, as shm drains its rings:
// busy for Config.Spin, then yielding, then in short sleeps, never past
// the call's deadline. Connection set-up (queue-pair numbers, LIDs, GIDs,
// ring addresses and rkeys) travels as Endpoint records through comm's
// rendezvous store; dead peers and aborts are detected by the TCP mesh
// comm keeps beside this transport (Config.Failed), and a failed work
// completion names its peer.
//
// # Why libibverbs, loaded at run time
//
// The verbs are reached through libibverbs.so.1, opened at run time with
// purego (as the cuda package opens libcuda): no cgo, no headers at build
// time, and a binary that runs where the library is absent (Open says
// why). The other road, the kernel's uverbs interface through
// golang.org/x/sys, covers only the slow path (opening the device,
// creating queue pairs, registering memory): posting work and polling
// completions are done in user space by a provider driver that knows the
// NIC's queue formats and doorbells (mlx5, efa, rxe, ...), which would
// have to be rewritten in Go for every NIC. libibverbs brings every
// provider. golang.org/x/sys maps and locks the memory. The data-path
// calls (ibv_post_send, ibv_post_recv, ibv_poll_cq) are inline functions
// in verbs.h that jump through the device context's operation table; this
// package reads that table and calls through it the same way, with
// structures whose layout a test compares with the C header's.
//
// # Status
//
// This transport has been run only against the fake verbs layer of its
// tests, never on an RDMA device (none exists where it was written; see
// bench/rdma.sh to run it on one).
package rdma
