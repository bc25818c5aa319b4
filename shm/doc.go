// Package shm moves frames between ranks on the same machine through shared
// memory. Each rank owns a segment (an anonymous memfd, so nothing is left
// behind however the processes end) holding one single-producer ring per
// sender, pre-faulted, of page-aligned records as long as their fragments;
// a sender copies a frame into its ring in the receiver's segment,
// fragment by fragment, and rings the receiver's doorbell. A waiting rank
// drains its rings itself, spinning briefly and then sleeping on the
// doorbell with a futex, so an idle rank burns no core; before each sleep
// it lets the rank's other goroutines run (its compute, which a futex
// sleep would keep off the core), and looks again instead of sleeping if
// one did. SendDirect sends
// large frames as direct records instead, which the receiver reads
// straight out of the sender's memory (process_vm_readv): see direct.go.
//
// Transport offers the same Send, Post and Wait as the tcp transport (and
// so satisfies the ring package's interface without importing it), and
// SendRecv, which hands a small frame from the ring straight to its
// caller. It moves data only: connection set-up, failure detection and
// abort messages stay with tcp, whose failures the waits here observe
// through Config.Failed.
package shm
