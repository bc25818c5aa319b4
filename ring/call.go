package ring

import (
	"fmt"
	"strings"
)

// Kind names a collective.
type Kind uint8

// Collective kinds.
const (
	KindAllReduce Kind = iota + 1
	KindBroadcast
	KindAllGather
	KindReduceScatter
	KindBarrier
	KindSend
	KindReduce
	KindGather
	KindScatter
	KindAllToAll
	KindAllGatherV
	KindGatherV
	KindScatterV
	KindAllToAllV
	KindReduceScatterV
)

var kindNames = [...]string{"", "AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Barrier", "Send", "Reduce", "Gather", "Scatter", "AllToAll",
	"AllGatherV", "GatherV", "ScatterV", "AllToAllV", "ReduceScatterV"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// DType names an element type.
type DType uint8

// Element types.
const (
	Float32 DType = iota + 1
	Float64
	Int32
	Int64
	Uint8
	BF16 // BFloat16
	FP16 // Float16
	Int8
	Int16
	Uint16
	Uint32
	Uint64
)

var dtypeNames = [...]string{"", "float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16", "int8", "int16", "uint16", "uint32", "uint64"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) && d != 0 {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Float64, Int64, Uint64:
		return 8
	case Float32, Int32, Uint32:
		return 4
	case BF16, FP16, Int16, Uint16:
		return 2
	case Uint8, Int8:
		return 1
	}
	return 0
}

// Algo names the algorithm a call runs; all ranks must pick the same.
type Algo uint8

// Algorithms.
const (
	AlgoNone Algo = iota
	AlgoRing
	AlgoDoubling
	AlgoTree
	AlgoChain
	AlgoDissemination
	AlgoOneShot
	AlgoHalving
	AlgoHierarchical
	AlgoDirect        // every rank to or from the root
	AlgoPairwise      // every rank to every other, one peer after the other
	AlgoScatterGather // a ring reduce-scatter, then a gather to the root
	AlgoBruck         // all-to-all in log2(n) steps of packed blocks
)

var algoNames = [...]string{"-", "ring", "recursive-doubling", "binomial-tree", "chain", "dissemination", "one-shot", "halving-doubling", "hierarchical", "direct", "pairwise", "reduce-scatter+gather", "bruck"}

func (a Algo) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("Algo(%d)", uint8(a))
}

// Call identifies one collective call. Every frame of the call carries it.
type Call struct {
	Seq   uint64
	Kind  Kind
	DType DType
	Op    Op
	Algo  Algo
	Root  int
	// Count is the call's element count: per rank, or for the vector
	// collectives the counts' sum; -1 where ranks may differ (AllToAllV).
	Count int
}

func (c Call) String() string {
	var b strings.Builder
	if c.Count < 0 {
		fmt.Fprintf(&b, "%v #%d (%v", c.Kind, c.Seq, c.DType)
	} else {
		fmt.Fprintf(&b, "%v #%d (%d × %v", c.Kind, c.Seq, c.Count, c.DType)
	}
	switch c.Kind {
	case KindAllReduce, KindReduceScatter, KindReduceScatterV:
		fmt.Fprintf(&b, ", op %v", c.Op)
	case KindReduce:
		fmt.Fprintf(&b, ", op %v, root %d", c.Op, c.Root)
	case KindBroadcast, KindGather, KindScatter, KindGatherV, KindScatterV:
		fmt.Fprintf(&b, ", root %d", c.Root)
	case KindSend:
		fmt.Fprintf(&b, ", tag %d", c.Root)
	}
	if c.Algo != AlgoNone {
		fmt.Fprintf(&b, ", %v", c.Algo)
	}
	b.WriteString(")")
	return b.String()
}

func (c Call) meta(step, chunk int) [4]uint64 {
	return [4]uint64{
		c.Seq,
		uint64(c.Kind) | uint64(c.DType)<<8 | uint64(c.Op)<<16 | uint64(c.Algo)<<24 | uint64(uint32(int32(c.Root)))<<32,
		uint64(c.Count),
		uint64(uint32(step))<<32 | uint64(uint32(chunk)),
	}
}

// Meta returns the frame metadata for step and chunk of c.
func (c Call) Meta(step, chunk int) [4]uint64 { return c.meta(step, chunk) }

func decodeCall(m [4]uint64) Call {
	return Call{
		Seq:   m[0],
		Kind:  Kind(m[1]),
		DType: DType(m[1] >> 8),
		Op:    Op(m[1] >> 16),
		Algo:  Algo(m[1] >> 24),
		Root:  int(int32(uint32(m[1] >> 32))),
		Count: int(m[2]),
	}
}

// MismatchError reports that this rank and a peer are in different calls.
type MismatchError struct {
	// Peer is the peer's rank in the group.
	Peer   int
	Local  Call
	Remote Call
	// Earlier, when this rank is past the peer's call (a call that needed
	// nothing from that peer, such as a broadcast's root, completed here),
	// is the call this rank made with the peer's sequence number; its Kind
	// is zero when unknown.
	Earlier Call
}

func (e *MismatchError) Error() string {
	if e.Earlier.Kind != 0 {
		return fmt.Sprintf("collective mismatch: group rank %d called %v where this rank called %v (completed here; this rank is now in %v)",
			e.Peer, e.Remote, e.Earlier, e.Local)
	}
	return fmt.Sprintf("collective mismatch: this rank called %v but group rank %d called %v", e.Local, e.Peer, e.Remote)
}
