package comm

import (
	"slices"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "", want: nil},
		{in: "node1", want: []string{"node1"}},
		{in: "gpu[01-04,07],login2", want: []string{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login2"}},
		{in: "n[1-2]", want: []string{"n1", "n2"}},
		{in: "n[8-11]", want: []string{"n8", "n9", "n10", "n11"}},
		{in: "a,b[3],c", want: []string{"a", "b3", "c"}},
		{in: "r[1-2]n[01-02]", want: []string{"r1n01", "r1n02", "r2n01", "r2n02"}},
		{in: "x[009-011]-ib", want: []string{"x009", "x010", "x011"}[:0]},
		{in: "n[1-", wantErr: "unclosed"},
		{in: "n]1", wantErr: "without '['"},
		{in: "n[3-1]", wantErr: "start above end"},
		{in: "n[a-b]", wantErr: "not decimal"},
		{in: "n[]", wantErr: "empty brackets"},
		{in: "n[[1]]", wantErr: "nested"},
		{in: "n[1-99999999]", wantErr: "more than"},
	}
	// Suffix after a range keeps its text.
	tests[7].want = []string{"x009-ib", "x010-ib", "x011-ib"}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ExpandHostlist(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzExpandHostlist: never panics, never returns more than maxHosts names,
// and a list of plain names (no brackets) comes back as given.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"gpu[01-04,07],login2", "n[1-2]", "r[1-2]n[1-3]", "a,b,,c", "n[1-", "x[0-65535]", "[", "]", "n[1-2]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			return
		}
		if len(hosts) > maxHosts {
			t.Fatalf("%d hosts", len(hosts))
		}
		if !strings.ContainsAny(s, "[]") {
			var want []string
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					want = append(want, p)
				}
			}
			if !slices.Equal(hosts, want) {
				t.Fatalf("plain list %q expanded to %q", s, hosts)
			}
		}
	})
}
