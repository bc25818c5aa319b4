package comm

import (
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

func TestRankSpan(t *testing.T) {
	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{[]int{0}, "rank 0"},
		{[]int{1, 2}, "ranks 1, 2"},
		{[]int{1, 2, 3}, "ranks 1–3"},
		{[]int{0, 2, 3, 4, 5, 9, 10}, "ranks 0, 2–5, 9, 10"},
	} {
		if got := rankSpan(tc.ranks); got != tc.want {
			t.Errorf("rankSpan(%v) = %q, want %q", tc.ranks, got, tc.want)
		}
	}
}

func TestJoinRecord(t *testing.T) {
	rec := joinRecord{addr: "10.0.0.7:41234", digest: "9f3a", build: "v0.0.0-20261130233416-aea2618e0924+dirty"}
	if got := decodeJoinRecord(rec.encode()); got != rec {
		t.Errorf("round trip: %+v, want %+v", got, rec)
	}
	if got := decodeJoinRecord(joinRecord{addr: "10.0.0.7:41234"}.encode()); got.addr != "10.0.0.7:41234" || got.old {
		t.Errorf("a record without digest or build: %+v", got)
	}
	// An older gorun published the address alone.
	if got := decodeJoinRecord([]byte("10.0.0.7:41234")); !got.old || got.addr != "10.0.0.7:41234" {
		t.Errorf("an older rank's record: %+v, want old with its address", got)
	}
}

// TestJobWideFollowsEnvironment: each variable jobWide names is the one
// that sets its value: setting it alone changes that value and no other.
func TestJobWideFollowsEnvironment(t *testing.T) {
	values := map[string]string{
		"GORUN_TRANSPORT": "tcp", "GORUN_ALGO": "flat", "GORUN_NET": "50us,10gbit",
		"GORUN_SMALL_BYTES": "8192", "GORUN_CHUNK_BYTES": "8192", "GORUN_ONESHOT_BYTES": "-1",
		"GORUN_HALVING_BYTES": "8192", "GORUN_BRUCK_BYTES": "8192",
		"GORUN_LINEAR_REDUCE_BYTES": "8192", "GORUN_TREE_SCATTER_BYTES": "8192",
	}
	resolve := func(env map[string]string) []Setting {
		t.Helper()
		env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"] = "0", "2", "127.0.0.1"
		s, err := ResolveSettings(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		return jobWide(&s)
	}
	base := resolve(map[string]string{})
	if len(base) != len(values) {
		t.Fatalf("jobWide lists %d settings, the test %d", len(base), len(values))
	}
	for i, js := range base {
		v, ok := values[js.Name]
		if !ok {
			t.Fatalf("jobWide lists %s, which the test does not set", js.Name)
		}
		got := resolve(map[string]string{js.Name: v})
		for k := range got {
			if changed := got[k].Value != base[k].Value; changed != (k == i) {
				t.Errorf("%s=%s: %s is %q (unset: %q)", js.Name, v, got[k].Name, got[k].Value, base[k].Value)
			}
		}
	}
}

func TestOlderRankRefused(t *testing.T) {
	mine := encodeSettings(jobWide(&Settings{}))
	now := joinRecord{addr: "a:1", digest: strconv.FormatUint(digestSettings(mine), 16)}
	recs := []joinRecord{now, decodeJoinRecord([]byte("b:2")), now}
	err := checkSameJob(t.Context(), nil, recs, 0, mine)
	if err == nil || !strings.Contains(err.Error(), "rank 1 runs an older gorun build than rank 0") {
		t.Errorf("got %v, want rank 1 named as an older build", err)
	}
}

func TestGorunVersion(t *testing.T) {
	const path = "github.com/gorun/gorun"
	stamped := "v0.0.0-20261130233416-aea2618e0924+dirty"
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"gorun's own command, stamped", debug.BuildInfo{Main: debug.Module{Path: path, Version: stamped}}, stamped},
		{"gorun's own command, unstamped", debug.BuildInfo{Main: debug.Module{Path: path, Version: "(devel)"}}, ""},
		{"a program using gorun", debug.BuildInfo{Main: debug.Module{Path: "example.com/trainer", Version: "v2.0.0"},
			Deps: []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.30.0"}, {Path: path, Version: "v0.4.1"}}}, "v0.4.1"},
		{"gorun replaced", debug.BuildInfo{Main: debug.Module{Path: "example.com/trainer"},
			Deps: []*debug.Module{{Path: path, Version: "v0.4.1", Replace: &debug.Module{Path: "../gorun", Version: "(devel)"}}}}, ""},
		{"gorun replaced by a fork", debug.BuildInfo{Main: debug.Module{Path: "example.com/trainer"},
			Deps: []*debug.Module{{Path: path, Version: "v0.4.1", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.4.2"}}}}, "v0.4.2"},
		{"no gorun", debug.BuildInfo{Main: debug.Module{Path: "example.com/other", Version: "v1.0.0"}}, ""},
	} {
		if got := gorunVersion(&tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
