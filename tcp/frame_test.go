package tcp

import (
	"bytes"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Kind: KindData, Flags: flagS2, Stream: 7, Meta: [4]uint64{1, 2, 3, 1 << 63}, Len: 10, RawLen: 99}
	var b [HeaderSize]byte
	h.Encode(b[:])
	got, err := DecodeHeader(b[:])
	if err != nil || got != h {
		t.Fatalf("got %+v, %v", got, err)
	}
}

// FuzzDecodeHeader: any bytes decode to an error or to a header within the
// limits that encodes back to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	var b [HeaderSize]byte
	for _, h := range []Header{
		{Kind: KindData, Len: 5, RawLen: 5},
		{Kind: KindData, Flags: flagS2, Len: 5, RawLen: 50},
		{Kind: KindAbort, Len: 3, RawLen: 3},
		{Kind: KindBye},
	} {
		h.Encode(b[:])
		f.Add(bytes.Clone(b[:]))
	}
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHeader(data)
		if err != nil {
			return
		}
		if h.Len > MaxFrame || h.RawLen > MaxFrame {
			t.Fatalf("accepted length %d/%d", h.Len, h.RawLen)
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		h2, err := DecodeHeader(out[:])
		if err != nil || h2 != h {
			t.Fatalf("re-encoding changed %+v to %+v (%v)", h, h2, err)
		}
	})
}
