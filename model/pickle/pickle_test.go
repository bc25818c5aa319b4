package pickle

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestLoad: each opcode read builds the value Python's pickle.loads
// builds (the bytes are what Python 3.11's pickle.dumps wrote at the
// protocol named, or cPickle's protocol 2 for the byte strings).
func TestLoad(t *testing.T) {
	for _, c := range []struct {
		name   string
		pickle string
		want   any
	}{
		{"None, bools, ints (protocol 2)", "\x80\x02(NK\x07M\x00\x01J\xff\xff\xff\xff\x8a\x01\x80\x88\x89t.", Tuple{nil, int64(7), int64(256), int64(-1), int64(-128), true, false}},
		{"a float", "\x80\x02G?\xf8\x00\x00\x00\x00\x00\x00.", 1.5},
		{"text and bytes (protocol 4)", "\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x03h\xc3\xa9C\x02\x00\x01\x86\x94.", Tuple{"hé", []byte{0, 1}}},
		{"py2 strings", "\x80\x02U\x03abcT\x02\x00\x00\x00de\x86.", Tuple{[]byte("abc"), []byte("de")}},
		{"bytes at protocol 2", "\x80\x02c_codecs\nencode\nq\x00X\x02\x00\x00\x00\xc3\xbfq\x01X\x06\x00\x00\x00latin1q\x02\x86q\x03Rq\x04.", []byte{0xff}},
		{"a list and a dict", "\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02eX\x01\x00\x00\x00bh\x02u.",
			&Dict{M: map[any]any{"a": &List{Items: []any{int64(1), int64(2)}}, "b": &List{Items: []any{int64(1), int64(2)}}}}},
		{"int keys (an optimizer's state)", "\x80\x02}(K\x00}X\x01\x00\x00\x00mK\x05sK\x01Nu.",
			&Dict{M: map[any]any{int64(0): &Dict{M: map[any]any{"m": int64(5)}}, int64(1): nil}}},
		{"an OrderedDict with attributes", "\x80\x02ccollections\nOrderedDict\n)R}X\x01\x00\x00\x00xK\x01sb.", &Dict{M: map[any]any{}}},
		{"a call recorded", "\x80\x04\x8c\x05numpy\x8c\x05dtype\x93\x8c\x02u1\x85R}b.",
			&Object{Fn: Global{"numpy", "dtype"}, Args: Tuple{"u1"}, State: &Dict{M: map[any]any{}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Load([]byte(c.pickle), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%#v, want %#v", got, c.want)
			}
		})
	}
}

// TestPersistent: a persistent reference goes to the caller's function,
// whose value takes its place; without one it is an error.
func TestPersistent(t *testing.T) {
	p := []byte("\x80\x02(X\x07\x00\x00\x00storageK\x03tQ.")
	got, err := Load(p, func(id any) (any, error) { return fmt.Sprint(id), nil })
	if err != nil || got != "[storage 3]" {
		t.Fatalf("%v, %v", got, err)
	}
	if _, err := Load(p, nil); err == nil || !strings.Contains(err.Error(), "a persistent reference") {
		t.Fatalf("without a resolver: %v", err)
	}
}

// TestCallsAreRecorded: a pickle that would run os.system("ls") gives
// the call, named, with its arguments; nothing runs.
func TestCallsAreRecorded(t *testing.T) {
	v, err := Load([]byte("\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R."), nil)
	want := &Object{Fn: Global{"os", "system"}, Args: Tuple{"ls"}}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Fatalf("%#v, %v; want %#v", v, err, want)
	}
}

// TestLoadErrors: bytes that are not a pickle of plain data are errors
// naming the opcode and its offset.
func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ name, pickle, want string }{
		{"empty", "", "the pickle ends inside it"},
		{"no STOP", "\x80\x02K\x01", "the pickle ends inside it"},
		{"an opcode of protocol 0", "I1\n.", "pickle opcode 0x49 at offset 0: not one of the opcodes read"},
		{"a string longer than the pickle", "\x80\x02X\xff\x00\x00\x00ab.", "pickle opcode 0x58 at offset 2: a string of 255 bytes, 3 left"},
		{"a memo entry never stored", "\x80\x02h\x05.", "memo entry 5 was never stored"},
		{"two values left", "\x80\x02K\x01K\x02.", "STOP with 2 values and 0 marks left"},
		{"TUPLE without MARK", "\x80\x02K\x01t.", "no MARK before it"},
		{"pop past a MARK", "\x80\x02(\x85.", "the stack is empty"},
		{"protocol 6", "\x80\x06N.", "protocol 6 (5 is the newest)"},
		{"a list key", "\x80\x02}(]K\x01u.", "a dict key that is a list of 0"},
		{"appending to an int", "\x80\x02K\x01K\x02a.", "appending to an int"},
		{"a long of 9 bytes", "\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", "an integer of 9 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte(c.pickle), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v; want %q", err, c.want)
			}
		})
	}
}

// FuzzLoad: whatever the bytes, a value or an error — no panic, no
// allocation larger than the input justifies.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02eX\x01\x00\x00\x00bh\x02u.",
		"\x80\x02]q\x00h\x00a.", // a list holding itself
		"\x80\x02(X\x07\x00\x00\x00storageK\x03tQ.",
		"\x80\x04\x8c\x05numpy\x8c\x05dtype\x93\x8c\x02u1\x85R}b.",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Load(b, func(id any) (any, error) { return id, nil })
		if err == nil {
			_ = Describe(v)
		}
	})
}
