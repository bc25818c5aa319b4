package rendezvous

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzRequest feeds rank 0's store what a connection may send: a request
// is refused or within the size limits, and a key list decodes only where
// encoding its keys gives back the same bytes. Answers to GetMany split
// into values that lay the answer out again. (`go test` runs the seeds;
// -fuzz FuzzRequest searches further.)
func FuzzRequest(f *testing.F) {
	keys, err := encodeKeys([]string{"gorun/reached/0", "", "k"})
	if err != nil {
		f.Fatal(err)
	}
	request := func(op byte, key string, val []byte, ms uint32) []byte {
		b := []byte{op}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
		b = binary.LittleEndian.AppendUint32(b, ms)
		return append(append(b, key...), val...)
	}
	f.Add(request(opSet, "a", []byte("value"), 0))
	f.Add(request(opGet, "a", nil, 1000))
	f.Add(request(opGetMany, "", keys, 1000))
	f.Add(request(opGetMany, "", []byte{5, 0, 'a'}, 1000))
	f.Add(request(opCheck, "a", nil, 0)[:9])
	f.Fuzz(func(t *testing.T, b []byte) {
		_, key, val, _, err := readRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(key) > maxKey || len(val) > maxValue {
			t.Fatalf("a request with a %d-byte key and a %d-byte value", len(key), len(val))
		}
		if keys, err := decodeKeys(val); err == nil {
			again, err := encodeKeys(keys)
			if err != nil || !bytes.Equal(again, val) {
				t.Fatalf("keys %q decoded from % x encode as % x (%v)", keys, val, again, err)
			}
		}
		n := 0
		if len(val) > 0 {
			n = int(val[0] % 8)
		}
		if vals, err := decodeValues(val, n); err == nil {
			var again []byte
			for _, v := range vals {
				again = binary.LittleEndian.AppendUint32(again, uint32(len(v)))
				again = append(again, v...)
			}
			if !bytes.Equal(again, val) {
				t.Fatalf("%d values %q split from an answer of % x", n, vals, val)
			}
		}
	})
}
