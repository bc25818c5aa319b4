// Package ring holds gorun's collective algorithms. It is named for the
// one that carries the large messages, but it holds every algorithm the
// collectives choose from, one file each:
//
//   - allreduce.go: the choice by size and group, and the ring all-reduce
//     (reduce-scatter then all-gather, pipelined in chunks) for large
//     messages;
//   - doubling.go: recursive doubling, latency-optimal for small messages;
//   - halving.go: halving-doubling (Rabenseifner) for mid sizes;
//   - oneshot.go: every rank sends the whole buffer to every other in one
//     round (small messages among more ranks than cores);
//   - fold.go: folding ranks beyond a power of two for the last two;
//   - broadcast.go: binomial-tree and pipelined-chain broadcast, and the
//     dissemination barrier;
//   - gather.go: ring all-gather and reduce-scatter;
//   - hier.go: the collectives of a group spread over several hosts, host
//     by host (within each host, then among the ranks of one local index
//     across hosts, every host's link busy at once), and the thresholds
//     that choose them;
//   - cost.go: a latency–bandwidth model of a group's links (between
//     hosts and within them) that chooses each all-reduce by predicted
//     time, when the group's Costs are known;
//   - rooted.go: reduce, gather, scatter and all-to-all, with their vector
//     forms (layout.go);
//   - reduce.go: the element types and reduction operators, with the
//     assembly kernels of reduce_amd64.s.
//
// The algorithms run over the small Transport interface declared here; the
// transports (tcp, shm, rdma) satisfy it without importing this package,
// and may also offer the optional interfaces (Combiner, SendRecver,
// Recver, DirectSender) that save a copy or a round trip. Every frame carries
// the identity of the call it belongs to (sequence number, kind, element
// type, count, reduction, root, algorithm) and the step within it, and
// every arrival is checked against what this rank expects: ranks that
// make different calls get an error naming both.
package ring
