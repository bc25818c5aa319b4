package tcp

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the fixed size in bytes of every frame header on the wire.
const HeaderSize = 64

// frameMagic opens every frame header ("GRF1" little-endian); a stream that
// loses its framing fails on the next header instead of reading garbage.
const frameMagic = 0x31465247

// MaxFrame is the largest payload one frame may carry. Algorithms cut large
// buffers into chunks far below it; a header announcing more is corrupt.
const MaxFrame = 1 << 30

// Kind says what a frame carries.
type Kind uint8

const (
	// KindData carries payload for a posted receive.
	KindData Kind = 1
	// KindAbort carries the text of an error that made the sender abort the job.
	KindAbort Kind = 2
	// KindBye says the sender closes the connection on purpose; its
	// payload, when any, says where the sender was (its farewell).
	KindBye Kind = 3
	// KindControl carries a small message for the transport's user beside
	// the data (Config.Control): a question about where a rank is.
	KindControl Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindAbort:
		return "abort"
	case KindBye:
		return "bye"
	case KindControl:
		return "control"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// flagS2 marks a payload compressed with S2; Header.RawLen is its size after decoding.
const flagS2 = 1

// maxAbortText bounds the error text an abort frame may carry.
const maxAbortText = 64 << 10

// Header is the decoded form of a frame header.
//
// Layout (little-endian): magic u32, kind u8, flags u8, reserved u16,
// stream u32, reserved u32, meta 4×u64, length u64, rawLen u64.
type Header struct {
	Kind   Kind
	Flags  uint8
	Stream uint32
	// Meta is opaque to the transport: the algorithms put the call's identity
	// (sequence number, kind, type, count, step) here and check it on arrival.
	Meta [4]uint64
	// Len is the number of payload bytes that follow the header on the wire.
	Len uint64
	// RawLen is the payload size after decompression (equal to Len when uncompressed).
	RawLen uint64
}

// Encode writes h into b, which must hold HeaderSize bytes.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4] = byte(h.Kind)
	b[5] = h.Flags
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint32(b[8:], h.Stream)
	binary.LittleEndian.PutUint32(b[12:], 0)
	for i, m := range h.Meta {
		binary.LittleEndian.PutUint64(b[16+8*i:], m)
	}
	binary.LittleEndian.PutUint64(b[48:], h.Len)
	binary.LittleEndian.PutUint64(b[56:], h.RawLen)
}

// DecodeHeader parses and validates a frame header. It never trusts a length
// beyond MaxFrame, so a corrupt or hostile header cannot cause a huge allocation.
func DecodeHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("frame header: %d bytes, want %d", len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != frameMagic {
		return h, fmt.Errorf("frame header: bad magic %#08x (stream out of sync or not a gorun peer)", m)
	}
	h.Kind = Kind(b[4])
	h.Flags = b[5]
	h.Stream = binary.LittleEndian.Uint32(b[8:])
	for i := range h.Meta {
		h.Meta[i] = binary.LittleEndian.Uint64(b[16+8*i:])
	}
	h.Len = binary.LittleEndian.Uint64(b[48:])
	h.RawLen = binary.LittleEndian.Uint64(b[56:])
	switch h.Kind {
	case KindData:
	case KindAbort:
		if h.Len > maxAbortText {
			return h, fmt.Errorf("frame header: abort text of %d bytes exceeds %d", h.Len, maxAbortText)
		}
	case KindBye, KindControl:
		if h.Len > maxAbortText {
			return h, fmt.Errorf("frame header: %v frame of %d bytes exceeds %d", h.Kind, h.Len, maxAbortText)
		}
	default:
		return h, fmt.Errorf("frame header: unknown kind %d", uint8(h.Kind))
	}
	if h.Flags&^flagS2 != 0 {
		return h, fmt.Errorf("frame header: unknown flags %#x", h.Flags)
	}
	if h.Len > MaxFrame || h.RawLen > MaxFrame {
		return h, fmt.Errorf("frame header: length %d (raw %d) exceeds the %d-byte frame limit", h.Len, h.RawLen, MaxFrame)
	}
	if h.Flags&flagS2 == 0 && h.RawLen != h.Len {
		return h, fmt.Errorf("frame header: uncompressed frame with length %d but raw length %d", h.Len, h.RawLen)
	}
	return h, nil
}
