package rdma

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Link layers of a port (enum ibv_link_layer).
const (
	LinkInfiniBand = 1
	LinkEthernet   = 2 // RoCE
)

// Port is where a device port sits on the fabric.
type Port struct {
	Device    string // e.g. mlx5_0
	Num       uint8  // port number, from 1
	LinkLayer uint8  // LinkInfiniBand or LinkEthernet
	LID       uint16 // InfiniBand local identifier
	GID       [16]byte
	GIDIndex  uint8
	MTU       uint8 // active MTU (enum ibv_mtu: 1 = 256 B … 5 = 4096 B)
}

func (p Port) String() string {
	link := "InfiniBand"
	if p.LinkLayer == LinkEthernet {
		link = "RoCE"
	}
	return fmt.Sprintf("%s port %d (%s, LID %d, MTU %d)", p.Device, p.Num, link, p.LID, mtuBytes(p.MTU))
}

func mtuBytes(m uint8) int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// subnet is the GID's subnet prefix.
func (p Port) subnet() []byte { return p.GID[:8] }

// Offer is what a rank publishes before any queue pair exists: the host
// it runs on and either the port it would use or why it has none.
type Offer struct {
	Host   string // host identity (ranks with the same one share memory)
	Port   Port
	Reason string // not empty: no RDMA on this rank, and why
}

// Usable reports whether the rank has a port to offer.
func (o *Offer) Usable() bool { return o.Reason == "" }

// Reaches reports whether two offers' ports can be connected: both usable,
// on the same link layer and, for InfiniBand, the same subnet (LID routing
// does not cross subnets). When not, it says why.
func (o *Offer) Reaches(p *Offer) (bool, string) {
	switch {
	case !o.Usable():
		return false, o.Reason
	case !p.Usable():
		return false, p.Reason
	case o.Port.LinkLayer != p.Port.LinkLayer:
		return false, fmt.Sprintf("%v and %v are on different link layers", o.Port, p.Port)
	case o.Port.LinkLayer == LinkInfiniBand && !bytes.Equal(o.Port.subnet(), p.Port.subnet()):
		return false, fmt.Sprintf("%v and %v are in different subnets (GID prefixes %x and %x)", o.Port, p.Port, o.Port.subnet(), p.Port.subnet())
	}
	return true, ""
}

// Endpoint is what a peer needs to connect its queue pair to this rank's
// and write into this rank's memory: one per pair of ranks.
type Endpoint struct {
	QPN, PSN  uint32
	LID       uint16
	GID       [16]byte
	GIDIndex  uint8
	MTU       uint8
	Ring      uint64 // address of the incoming ring the peer writes into
	Credit    uint64 // address of the credit word the peer writes its consumed count into
	RKey      uint32 // remote key of both
	Slots     uint32
	SlotBytes uint32 // bytes per slot, header included
}

const (
	offerMagic    = "GROF"
	endpointMagic = "GREP"
	formatVersion = 1
	endpointBytes = 4 + 1 + 4 + 4 + 2 + 16 + 1 + 1 + 8 + 8 + 4 + 4 + 4
)

// MarshalBinary encodes the offer.
func (o *Offer) MarshalBinary() ([]byte, error) {
	b := append([]byte(offerMagic), formatVersion)
	b = append(b, o.Port.Num, o.Port.LinkLayer, o.Port.MTU, o.Port.GIDIndex)
	b = binary.BigEndian.AppendUint16(b, o.Port.LID)
	b = append(b, o.Port.GID[:]...)
	for _, s := range []string{o.Host, o.Port.Device, o.Reason} {
		if len(s) > 1<<15 {
			return nil, fmt.Errorf("rdma: offer field of %d bytes is too long", len(s))
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	return b, nil
}

// decoder reads a record, remembering the first error and where it was.
type decoder struct {
	what string
	b    []byte
	off  int
	err  error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return make([]byte, n)
	}
	if len(d.b)-d.off < n {
		d.err = fmt.Errorf("rdma: %s truncated at offset %d: %d bytes left, %d needed", d.what, d.off, len(d.b)-d.off, n)
		return make([]byte, n)
	}
	s := d.b[d.off : d.off+n]
	d.off += n
	return s
}

func (d *decoder) u8() uint8   { return d.take(1)[0] }
func (d *decoder) u16() uint16 { return binary.BigEndian.Uint16(d.take(2)) }
func (d *decoder) u32() uint32 { return binary.BigEndian.Uint32(d.take(4)) }
func (d *decoder) u64() uint64 { return binary.BigEndian.Uint64(d.take(8)) }
func (d *decoder) str() string { return string(d.take(int(d.u16()))) }

func (d *decoder) header(magic string) {
	if m := d.take(len(magic)); d.err == nil && string(m) != magic {
		d.err = fmt.Errorf("rdma: %s does not start with %q (got %q)", d.what, magic, m)
	}
	if v := d.u8(); d.err == nil && v != formatVersion {
		d.err = fmt.Errorf("rdma: %s has format version %d at offset %d, this build reads %d", d.what, v, d.off-1, formatVersion)
	}
}

func (d *decoder) end() error {
	if d.err == nil && d.off != len(d.b) {
		d.err = fmt.Errorf("rdma: %s has %d extra bytes at offset %d", d.what, len(d.b)-d.off, d.off)
	}
	return d.err
}

// UnmarshalBinary decodes an offer, with an error naming the offset of the
// first thing wrong.
func (o *Offer) UnmarshalBinary(b []byte) error {
	d := decoder{what: "offer", b: b}
	d.header(offerMagic)
	var x Offer
	x.Port.Num, x.Port.LinkLayer, x.Port.MTU, x.Port.GIDIndex = d.u8(), d.u8(), d.u8(), d.u8()
	x.Port.LID = d.u16()
	copy(x.Port.GID[:], d.take(16))
	x.Host, x.Port.Device, x.Reason = d.str(), d.str(), d.str()
	if err := d.end(); err != nil {
		return err
	}
	*o = x
	return nil
}

// MarshalBinary encodes the endpoint.
func (e *Endpoint) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, endpointBytes)
	b = append(append(b, endpointMagic...), formatVersion)
	b = binary.BigEndian.AppendUint32(b, e.QPN)
	b = binary.BigEndian.AppendUint32(b, e.PSN)
	b = binary.BigEndian.AppendUint16(b, e.LID)
	b = append(b, e.GID[:]...)
	b = append(b, e.GIDIndex, e.MTU)
	b = binary.BigEndian.AppendUint64(b, e.Ring)
	b = binary.BigEndian.AppendUint64(b, e.Credit)
	b = binary.BigEndian.AppendUint32(b, e.RKey)
	b = binary.BigEndian.AppendUint32(b, e.Slots)
	b = binary.BigEndian.AppendUint32(b, e.SlotBytes)
	return b, nil
}

// UnmarshalBinary decodes an endpoint, with an error naming the offset of
// the first thing wrong.
func (e *Endpoint) UnmarshalBinary(b []byte) error {
	d := decoder{what: "endpoint", b: b}
	d.header(endpointMagic)
	var x Endpoint
	x.QPN, x.PSN, x.LID = d.u32(), d.u32(), d.u16()
	copy(x.GID[:], d.take(16))
	x.GIDIndex, x.MTU = d.u8(), d.u8()
	x.Ring, x.Credit = d.u64(), d.u64()
	x.RKey, x.Slots, x.SlotBytes = d.u32(), d.u32(), d.u32()
	if err := d.end(); err != nil {
		return err
	}
	*e = x
	return nil
}
