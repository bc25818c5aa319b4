// Package pickle reads Python pickles of plain data — what CIFAR-10's
// Python version and PyTorch's torch.save files hold — without running
// anything: the opcodes of protocols 2 to 5 that build None, booleans,
// integers, floats, strings, byte strings, tuples, lists and dicts; the
// calls a pickle makes (a numpy array's reconstruction, a torch tensor's)
// are recorded as Objects naming the function and its arguments, for the
// caller to interpret; persistent references (torch's storages) are
// handed to the caller's function. An opcode outside that set is an error
// naming it and its offset.
package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Values come out as nil, bool, int64, float64, string (text), []byte
// (byte strings; a Python 2 str is one), Tuple, *List, *Dict, Global and
// *Object.
type (
	// Tuple is a tuple.
	Tuple []any
	// List is a list.
	List struct{ Items []any }
	// Dict is a dict (or an OrderedDict). Its keys are text or byte
	// strings, held as strings, or ints (int64), bools, floats or None
	// (an optimizer's state is keyed by parameter number).
	Dict struct{ M map[any]any }
	// Global is a class or function a pickle names (module.name).
	Global struct{ Module, Name string }
	// Object is what a call of Fn with Args made, and the state a BUILD
	// gave it.
	Object struct {
		Fn    Global
		Args  Tuple
		State any
	}
)

// Describe names what v is in Python's terms, for errors: "a list of 3".
func Describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int64:
		return "an int"
	case float64:
		return "a float"
	case string:
		return "a str"
	case []byte:
		return "a bytes"
	case Tuple:
		return "a tuple"
	case *List:
		return fmt.Sprintf("a list of %d", len(v.Items))
	case *Dict:
		return "a dict"
	case Global:
		return v.Module + "." + v.Name
	case *Object:
		return "what " + v.Fn.Module + "." + v.Fn.Name + "() made"
	}
	return fmt.Sprintf("%T", v)
}

// Load reads the one value of the pickle b. persistent, when not nil,
// turns each persistent reference (the BINPERSID opcode: torch's storages)
// into a value; without it such a reference is an error.
func Load(b []byte, persistent func(id any) (any, error)) (any, error) {
	u := unpickler{b: b, memo: map[int]any{}, persistent: persistent}
	v, err := u.run()
	if err != nil {
		return nil, fmt.Errorf("pickle opcode %#02x at offset %d: %w", u.op, u.at, err)
	}
	return v, nil
}

type unpickler struct {
	b     []byte
	off   int
	op    byte // the opcode being run, and where it starts (for errors)
	at    int
	stack []any
	marks []int // where each MARK left the stack
	memo  map[int]any

	persistent func(id any) (any, error)
}

var errShort = errors.New("the pickle ends inside it")

// take returns the next n bytes.
func (u *unpickler) take(n int) ([]byte, error) {
	if n < 0 || n > len(u.b)-u.off {
		return nil, errShort
	}
	s := u.b[u.off : u.off+n : u.off+n]
	u.off += n
	return s, nil
}

// uint reads an unsigned little-endian integer of n bytes (1, 2, 4 or 8).
func (u *unpickler) uint(n int) (uint64, error) {
	s, err := u.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v, nil
}

// sized reads a length of n bytes, then that many bytes.
func (u *unpickler) sized(n int) ([]byte, error) {
	l, err := u.uint(n)
	if err != nil {
		return nil, err
	}
	if l > uint64(len(u.b)-u.off) {
		return nil, fmt.Errorf("a string of %d bytes, %d left in the pickle", l, len(u.b)-u.off)
	}
	return u.take(int(l))
}

// line reads up to a newline (GLOBAL's module and name).
func (u *unpickler) line() (string, error) {
	i := bytes.IndexByte(u.b[u.off:], '\n')
	if i < 0 {
		return "", errShort
	}
	s := string(u.b[u.off : u.off+i])
	u.off += i + 1
	return s, nil
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || len(u.marks) > 0 && len(u.stack) == u.marks[len(u.marks)-1] {
		return nil, errors.New("the stack is empty")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

// top returns the value on top of the stack, which stays.
func (u *unpickler) top() (any, error) {
	v, err := u.pop()
	if err == nil {
		u.push(v)
	}
	return v, err
}

// popMark returns the values since the last MARK, and drops them and it.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, errors.New("no MARK before it")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	vs := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return vs, nil
}

// popN returns the top n values, in stack order.
func (u *unpickler) popN(n int) (Tuple, error) {
	t := make(Tuple, n)
	for i := n - 1; i >= 0; i-- {
		v, err := u.pop()
		if err != nil {
			return nil, err
		}
		t[i] = v
	}
	return t, nil
}

// key turns a dict key into what it is stored under: a byte string as a
// string, the other keys read as they are.
func key(k any) (any, error) {
	switch k := k.(type) {
	case []byte:
		return string(k), nil
	case string, int64, bool, float64, nil:
		return k, nil
	}
	return nil, fmt.Errorf("a dict key that is %s (text, bytes, int, bool, float and None keys are read)", Describe(k))
}

// setItems stores the key, value pairs kv in the dict under them.
func (u *unpickler) setItems(kv []any) error {
	if len(kv)%2 != 0 {
		return fmt.Errorf("%d values for a dict's keys and values", len(kv))
	}
	d, err := u.top()
	if err != nil {
		return err
	}
	dict, ok := d.(*Dict)
	if !ok {
		return fmt.Errorf("setting items of %s", Describe(d))
	}
	for i := 0; i < len(kv); i += 2 {
		k, err := key(kv[i])
		if err != nil {
			return err
		}
		dict.M[k] = kv[i+1]
	}
	return nil
}

func (u *unpickler) appendItems(vs []any) error {
	l, err := u.top()
	if err != nil {
		return err
	}
	list, ok := l.(*List)
	if !ok {
		return fmt.Errorf("appending to %s", Describe(l))
	}
	list.Items = append(list.Items, vs...)
	return nil
}

// call records fn(args) — but for _codecs.encode(text, "latin1"), the
// way Python 3 pickles bytes at protocol 2, and collections.OrderedDict(),
// which it does.
func call(fn any, args Tuple) (any, error) {
	g, ok := fn.(Global)
	if !ok {
		return nil, fmt.Errorf("calling %s", Describe(fn))
	}
	if g == (Global{"collections", "OrderedDict"}) {
		if len(args) != 0 {
			return nil, fmt.Errorf("collections.OrderedDict with %d arguments", len(args))
		}
		return &Dict{M: map[any]any{}}, nil
	}
	if g == (Global{"_codecs", "encode"}) {
		if len(args) != 2 {
			return nil, fmt.Errorf("_codecs.encode with %d arguments", len(args))
		}
		text, ok1 := args[0].(string)
		enc, ok2 := args[1].(string)
		if !ok1 || !ok2 || (enc != "latin1" && enc != "latin-1") {
			return nil, fmt.Errorf("_codecs.encode(%s, %s): only text to latin1 is read", Describe(args[0]), Describe(args[1]))
		}
		b := make([]byte, 0, len(text))
		for _, r := range text {
			if r > 0xff {
				return nil, fmt.Errorf("_codecs.encode: %U is not latin1", r)
			}
			b = append(b, byte(r))
		}
		return b, nil
	}
	return &Object{Fn: g, Args: args}, nil
}

// The opcodes read (Python's pickletools names them).
const (
	opMark           = '('
	opStop           = '.'
	opBinInt         = 'J'
	opBinInt1        = 'K'
	opBinInt2        = 'M'
	opNone           = 'N'
	opBinFloat       = 'G'
	opBinString      = 'T'
	opShortBinString = 'U'
	opBinUnicode     = 'X'
	opAppend         = 'a'
	opBuild          = 'b'
	opGlobal         = 'c'
	opAppends        = 'e'
	opBinGet         = 'h'
	opLongBinGet     = 'j'
	opEmptyList      = ']'
	opBinPut         = 'q'
	opLongBinPut     = 'r'
	opSetItem        = 's'
	opTuple          = 't'
	opSetItems       = 'u'
	opEmptyDict      = '}'
	opEmptyTuple     = ')'
	opReduce         = 'R'
	opBinPersID      = 'Q'
	opProto          = 0x80
	opNewObj         = 0x81
	opTuple1         = 0x85
	opTuple2         = 0x86
	opTuple3         = 0x87
	opNewTrue        = 0x88
	opNewFalse       = 0x89
	opLong1          = 0x8a
	opBinBytes       = 'B'
	opShortBinBytes  = 'C'
	opShortBinUni    = 0x8c
	opBinUnicode8    = 0x8d
	opBinBytes8      = 0x8e
	opStackGlobal    = 0x93
	opMemoize        = 0x94
	opFrame          = 0x95
)

func (u *unpickler) run() (any, error) {
	for u.off < len(u.b) {
		u.at, u.op = u.off, u.b[u.off]
		u.off++
		var err error
		switch u.op {
		case opProto:
			var v uint64
			if v, err = u.uint(1); err == nil && v > 5 {
				err = fmt.Errorf("protocol %d (5 is the newest)", v)
			}
		case opFrame:
			_, err = u.uint(8) // a hint for buffering; the opcodes follow
		case opStop:
			if len(u.marks) > 0 || len(u.stack) != 1 {
				return nil, fmt.Errorf("STOP with %d values and %d marks left", len(u.stack), len(u.marks))
			}
			return u.stack[0], nil
		case opMark:
			u.marks = append(u.marks, len(u.stack))
		case opNone:
			u.push(nil)
		case opNewTrue, opNewFalse:
			u.push(u.op == opNewTrue)
		case opBinInt:
			var v uint64
			if v, err = u.uint(4); err == nil {
				u.push(int64(int32(uint32(v))))
			}
		case opBinInt1, opBinInt2:
			var v uint64
			if v, err = u.uint(argBytes(u.op)); err == nil {
				u.push(int64(v))
			}
		case opLong1:
			err = u.long1()
		case opBinFloat:
			var s []byte
			if s, err = u.take(8); err == nil {
				u.push(math.Float64frombits(binary.BigEndian.Uint64(s)))
			}
		case opShortBinString, opShortBinBytes, opBinString, opBinBytes, opBinBytes8:
			var s []byte
			if s, err = u.sized(argBytes(u.op)); err == nil {
				u.push(s)
			}
		case opShortBinUni, opBinUnicode, opBinUnicode8:
			var s []byte
			if s, err = u.sized(argBytes(u.op)); err == nil {
				u.push(string(s))
			}
		case opEmptyTuple:
			u.push(Tuple{})
		case opTuple1, opTuple2, opTuple3:
			var t Tuple
			if t, err = u.popN(int(u.op-opTuple1) + 1); err == nil {
				u.push(t)
			}
		case opTuple:
			var vs []any
			if vs, err = u.popMark(); err == nil {
				u.push(Tuple(vs))
			}
		case opEmptyList:
			u.push(&List{})
		case opEmptyDict:
			u.push(&Dict{M: map[any]any{}})
		case opAppend:
			var v any
			if v, err = u.pop(); err == nil {
				err = u.appendItems([]any{v})
			}
		case opAppends:
			var vs []any
			if vs, err = u.popMark(); err == nil {
				err = u.appendItems(vs)
			}
		case opSetItem:
			var kv Tuple
			if kv, err = u.popN(2); err == nil {
				err = u.setItems(kv)
			}
		case opSetItems:
			var kv []any
			if kv, err = u.popMark(); err == nil {
				err = u.setItems(kv)
			}
		case opBinPut, opLongBinPut:
			var i uint64
			if i, err = u.uint(argBytes(u.op)); err == nil {
				err = u.put(int(i))
			}
		case opMemoize:
			err = u.put(len(u.memo))
		case opBinGet, opLongBinGet:
			var i uint64
			if i, err = u.uint(argBytes(u.op)); err == nil {
				v, ok := u.memo[int(i)]
				if !ok {
					err = fmt.Errorf("memo entry %d was never stored", i)
				}
				u.push(v)
			}
		case opGlobal:
			var module, name string
			if module, err = u.line(); err == nil {
				if name, err = u.line(); err == nil {
					u.push(Global{module, name})
				}
			}
		case opStackGlobal:
			var t Tuple
			if t, err = u.popN(2); err == nil {
				module, ok1 := t[0].(string)
				name, ok2 := t[1].(string)
				if !ok1 || !ok2 {
					err = fmt.Errorf("a global named by %s and %s", Describe(t[0]), Describe(t[1]))
				}
				u.push(Global{module, name})
			}
		case opReduce, opNewObj:
			var t Tuple
			if t, err = u.popN(2); err == nil {
				args, ok := t[1].(Tuple)
				if !ok {
					err = fmt.Errorf("arguments in %s", Describe(t[1]))
					break
				}
				var v any
				if v, err = call(t[0], args); err == nil {
					u.push(v)
				}
			}
		case opBuild:
			var t Tuple
			if t, err = u.popN(2); err == nil {
				switch o := t[0].(type) {
				case *Object:
					o.State = t[1]
				case *Dict: // an OrderedDict's attributes (a state_dict's _metadata): not kept
				default:
					err = fmt.Errorf("setting the state of %s", Describe(t[0]))
				}
				u.push(t[0])
			}
		case opBinPersID:
			var id any
			if id, err = u.pop(); err == nil {
				if u.persistent == nil {
					err = errors.New("a persistent reference, which only a torch file's reader resolves")
					break
				}
				var v any
				if v, err = u.persistent(id); err == nil {
					u.push(v)
				}
			}
		default:
			err = errors.New("not one of the opcodes read (those of plain data, calls and persistent references)")
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, errShort
}

// argBytes is the size of op's argument, or of its length.
func argBytes(op byte) int {
	switch op {
	case opBinInt1, opShortBinString, opShortBinBytes, opShortBinUni, opBinPut, opBinGet:
		return 1
	case opBinInt2:
		return 2
	case opBinString, opBinBytes, opBinUnicode, opLongBinPut, opLongBinGet:
		return 4
	}
	return 8 // opBinBytes8, opBinUnicode8
}

// put stores the top of the stack in the memo under i.
func (u *unpickler) put(i int) error {
	v, err := u.top()
	if err == nil {
		u.memo[i] = v
	}
	return err
}

// long1 reads a little-endian two's-complement integer of up to 8 bytes.
func (u *unpickler) long1() error {
	s, err := u.sized(1)
	if err != nil {
		return err
	}
	if len(s) > 8 {
		return fmt.Errorf("an integer of %d bytes (8 are read)", len(s))
	}
	var v int64
	for i := len(s) - 1; i >= 0; i-- {
		v = v<<8 | int64(s[i])
	}
	if n := len(s); n > 0 && n < 8 && s[n-1]&0x80 != 0 {
		v -= 1 << (8 * n) // negative
	}
	u.push(v)
	return nil
}
