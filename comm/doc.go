// Package comm is what gorun programs use to talk to each other: a Group of
// ranks with collectives (AllReduce, Broadcast, AllGather, ReduceScatter,
// Barrier), point-to-point Send and Recv, asynchronous forms, and Split into
// sub-groups.
//
// Init joins the job described by the environment (gorun, torchrun, Slurm
// or Open MPI variables; see ResolveSettings): rank 0 serves a rendezvous
// store at MASTER_ADDR:MASTER_PORT, every rank publishes its data address
// there, and the ranks connect to each other over TCP, authenticated with
// the job token: every pair while joining, or, past LazyAbove ranks
// (Settings.Connect), each pair when it first exchanges data. Before
// connecting, the ranks compare the gorun build each runs and the
// settings the algorithms and transports are chosen by (GORUN_TRANSPORT,
// GORUN_ALGO, GORUN_NET, the GORUN_*_BYTES sizes): where they differ,
// every rank fails at once naming what differs and where. Group.CheckSame
// does the same for a program's own settings. A join that waits says so
// long before its deadline: rank 0 which ranks have not come and where
// they stopped, a rank its store does not answer why.
//
// Failures are loud and fast. Every wait for a peer has a deadline. A rank that dies is
// noticed at once by the ranks connected to it (with lazy connections,
// those exchanging data with it, and through shared memory its peers
// there) and named in their errors, which they pass on to the ranks
// waiting for them. Ranks that
// make different calls get an error naming both calls. After any error the
// group is broken (like an aborted NCCL communicator): every later call
// returns the first error, and the other ranks are told so they stop too.
// A rank that closes its group while others still wait for it is named
// with its last call and theirs. A call that waits longer than
// Settings.StallAfter (GORUN_STALL) makes the rank log, asked over the TCP
// connections beside the data, which ranks have not arrived and where each
// rank is; when that shows ranks in one call with different arguments
// (calls no frame between them told apart), it ends the job with an error
// naming both calls. A call that fails at Settings.Timeout (GORUN_TIMEOUT)
// says so, and that a rank working longer than that between calls needs
// it raised. A rank started by gorun exits when gorun is gone. After a
// failure, Shrink gives the ranks still alive a new world group of
// themselves, which they agree on even while more of them die.
package comm
