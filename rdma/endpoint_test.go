package rdma

import (
	"strings"
	"testing"
)

func sampleOffer() Offer {
	o := Offer{Host: "boot-id/pid:[4026531836]/net:[4026531840]", Port: Port{Device: "mlx5_0", Num: 1, LinkLayer: LinkInfiniBand, LID: 17, GIDIndex: 0, MTU: 5}}
	o.Port.GID[0], o.Port.GID[1], o.Port.GID[15] = 0xfe, 0x80, 17
	return o
}

func TestRecordsRoundTrip(t *testing.T) {
	offers := []Offer{sampleOffer(), {Host: "h", Reason: "no RDMA device: libibverbs.so.1 not found"}, {}}
	for _, o := range offers {
		b, err := o.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Offer
		if err := got.UnmarshalBinary(b); err != nil || got != o {
			t.Fatalf("offer %+v came back as %+v (%v)", o, got, err)
		}
	}
	e := Endpoint{QPN: 0xabcdef, PSN: 0x123456, LID: 9, GIDIndex: 3, MTU: 4, Ring: 0x7f0000001000, Credit: 0x7f0000801000, RKey: 77, Slots: 8, SlotBytes: 262144}
	e.GID[3] = 1
	b, _ := e.MarshalBinary()
	if len(b) != endpointBytes {
		t.Fatalf("endpoint encodes to %d bytes, want %d", len(b), endpointBytes)
	}
	var got Endpoint
	if err := got.UnmarshalBinary(b); err != nil || got != e {
		t.Fatalf("endpoint %+v came back as %+v (%v)", e, got, err)
	}
}

func TestBadRecordsAreNamed(t *testing.T) {
	o := sampleOffer()
	ob, _ := o.MarshalBinary()
	var e Endpoint
	eb, _ := e.MarshalBinary()
	for _, tc := range []struct {
		name string
		b    []byte
		dst  interface{ UnmarshalBinary([]byte) error }
		want string
	}{
		{"empty offer", nil, &Offer{}, "offer truncated at offset 0: 0 bytes left, 4 needed"},
		{"wrong magic", append([]byte("GREP"), ob[4:]...), &Offer{}, `offer does not start with "GROF"`},
		{"newer version", append(append([]byte("GROF"), 9), ob[5:]...), &Offer{}, "format version 9 at offset 4"},
		{"truncated host", ob[:30], &Offer{}, "offer truncated at offset 29"},
		{"trailing bytes", append(ob, 0), &Offer{}, "1 extra bytes at offset"},
		{"endpoint cut", eb[:endpointBytes-1], &Endpoint{}, "endpoint truncated at offset 57: 3 bytes left, 4 needed"},
		{"offer as endpoint", ob, &Endpoint{}, `endpoint does not start with "GREP"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.dst.UnmarshalBinary(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func FuzzRecords(f *testing.F) {
	o := sampleOffer()
	ob, _ := o.MarshalBinary()
	eb, _ := (&Endpoint{QPN: 1, Slots: 8}).MarshalBinary()
	f.Add(ob)
	f.Add(eb)
	f.Add([]byte("GROF\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var o Offer
		if o.UnmarshalBinary(b) == nil {
			again, err := o.MarshalBinary()
			if err != nil || string(again) != string(b) {
				t.Fatalf("offer decoded from %x encodes to %x", b, again)
			}
		}
		var e Endpoint
		if e.UnmarshalBinary(b) == nil {
			if again, _ := e.MarshalBinary(); string(again) != string(b) {
				t.Fatalf("endpoint decoded from %x encodes to %x", b, again)
			}
		}
	})
}

func TestReaches(t *testing.T) {
	ib := sampleOffer()
	otherSubnet := ib
	otherSubnet.Port.GID[7] = 1
	roce := ib
	roce.Port.LinkLayer = LinkEthernet
	roceElsewhere := roce
	roceElsewhere.Port.GID[7] = 1
	none := Offer{Reason: "no RDMA device: port 1 of mlx5_0 is DOWN"}
	for _, tc := range []struct {
		name string
		a, b Offer
		ok   bool
		why  string
	}{
		{"same InfiniBand subnet", ib, ib, true, ""},
		{"InfiniBand subnets differ", ib, otherSubnet, false, "different subnets"},
		{"RoCE routes across subnets", roce, roceElsewhere, true, ""},
		{"link layers differ", ib, roce, false, "different link layers"},
		{"peer has none", ib, none, false, "port 1 of mlx5_0 is DOWN"},
		{"this rank has none", none, ib, false, "port 1 of mlx5_0 is DOWN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := tc.a.Reaches(&tc.b)
			back, _ := tc.b.Reaches(&tc.a)
			if ok != tc.ok || back != ok || !strings.Contains(why, tc.why) {
				t.Fatalf("got %v %q (reverse %v), want %v %q", ok, why, back, tc.ok, tc.why)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	var r Registry
	for _, k := range []Keys{{Addr: 1000, Len: 100, LKey: 1}, {Addr: 3000, Len: 1000, LKey: 3}, {Addr: 2000, Len: 500, LKey: 2}} {
		if err := r.Add(k); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []Keys{{Addr: 1050, Len: 10}, {Addr: 900, Len: 101}, {Addr: 2499, Len: 2}, {Addr: 10, Len: 0}, {Addr: 0, Len: 5000}} {
		if err := r.Add(bad); err == nil {
			t.Errorf("adding %+v succeeded", bad)
		}
	}
	for _, tc := range []struct {
		a    uint64
		n    int
		key  uint32
		find bool
	}{
		{1000, 100, 1, true}, {1099, 1, 1, true}, {1099, 2, 0, false}, {999, 1, 0, false},
		{2000, 0, 2, true}, {2400, 100, 2, true}, {2400, 101, 0, false}, {2600, 1, 0, false},
		{3999, 1, 3, true}, {4000, 1, 0, false}, {0, 1, 0, false},
	} {
		k, ok := r.Find(tc.a, tc.n)
		if ok != tc.find || ok && k.LKey != tc.key {
			t.Errorf("Find(%d, %d) = %+v %v, want key %d %v", tc.a, tc.n, k, ok, tc.key, tc.find)
		}
	}
	if _, ok := r.Remove(2000); !ok || r.Len() != 2 {
		t.Fatal("remove failed")
	}
	if _, ok := r.Find(2100, 1); ok {
		t.Fatal("found a removed range")
	}
	if _, ok := r.Remove(2000); ok {
		t.Fatal("removed twice")
	}
}

func TestStatusNames(t *testing.T) {
	for s, want := range map[Status]string{StatusSuccess: "success (status 0)", StatusRetryExc: "transport retry counter exceeded (status 12)", 99: "status 99"} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d) = %q, want %q", uint32(s), got, want)
		}
	}
}
