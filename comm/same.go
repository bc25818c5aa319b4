package comm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// ErrDiffer is what CheckSame's error wraps when the ranks' settings
// differ (not when the comparison itself fails).
var ErrDiffer = errors.New("the ranks differ where they must agree")

// A Setting is a named value that every rank of a group must hold alike:
// a flag, a data set's size, the point a run resumes from.
type Setting struct{ Name, Value string }

// CheckSame returns an error unless every rank of g passes the same
// settings, naming each that differs, its values and the ranks holding
// each: "--batch-size is 64 on ranks 0, 2 but 32 on rank 1"; the error
// wraps ErrDiffer, and every rank returns the same one. PyTorch's DDP
// compares its parameters' shapes across ranks the same way before
// training; what a rank was started with alone (one node's stale data, a
// flag left out of one command line) is otherwise found, if ever, as
// calls that do not match. It is a collective: every rank of g must call
// it. When the settings agree it costs one all-gather of eight bytes a
// rank.
func (g *Group) CheckSame(ctx context.Context, settings []Setting) error {
	mine := encodeSettings(settings)
	digests := make([]uint64, g.Size())
	if err := AllGather(ctx, g, []uint64{digestSettings(mine)}, digests); err != nil {
		return fmt.Errorf("comparing settings across ranks: %w", err)
	}
	if !slices.ContainsFunc(digests, func(d uint64) bool { return d != digests[0] }) {
		return nil
	}
	lens := make([]int64, g.Size())
	if err := AllGather(ctx, g, []int64{int64(len(mine))}, lens); err != nil {
		return fmt.Errorf("comparing settings across ranks: %w", err)
	}
	counts, offs := make([]int, g.Size()), make([]int, g.Size()+1) // rank r's bytes: all[offs[r]:offs[r+1]]
	for r, n := range lens {
		counts[r], offs[r+1] = int(n), offs[r]+int(n)
	}
	all := make([]byte, offs[g.Size()])
	if err := AllGatherV(ctx, g, mine, all, counts); err != nil {
		return fmt.Errorf("comparing settings across ranks: %w", err)
	}
	order, byDigest := byFirstRank(digests)
	list := make([]settingsKind, len(order))
	for i, d := range order {
		first := byDigest[d][0]
		list[i] = settingsKind{ranks: byDigest[d], settings: decodeSettings(all[offs[first]:offs[first+1]])}
	}
	return fmt.Errorf("%w: %s", ErrDiffer, describeDifferences(list))
}

// encodeSettings encodes settings for another rank (decodeSettings).
func encodeSettings(settings []Setting) []byte {
	b, err := json.Marshal(settings)
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return b
}

// decodeSettings reads encodeSettings' bytes; bytes it cannot read (sent
// by another build) read as one setting saying so.
func decodeSettings(b []byte) []Setting {
	var s []Setting
	if err := json.Unmarshal(b, &s); err != nil {
		return []Setting{{"settings", fmt.Sprintf("unreadable (%v)", err)}}
	}
	return s
}

// digestSettings is a short digest of encoded settings.
func digestSettings(encoded []byte) uint64 {
	h := fnv.New64a()
	h.Write(encoded)
	return h.Sum64()
}

// byFirstRank groups ranks by their keys (keys[r] is rank r's): order
// lists the keys by their first ranks, ranks holds each key's ranks,
// ascending.
func byFirstRank[K comparable](keys []K) (order []K, ranks map[K][]int) {
	ranks = map[K][]int{}
	for r, k := range keys {
		if _, ok := ranks[k]; !ok {
			order = append(order, k)
		}
		ranks[k] = append(ranks[k], r)
	}
	return order, ranks
}

// settingsKind is one set of settings and the ranks, ascending, holding it.
type settingsKind struct {
	ranks    []int
	settings []Setting
}

// describeDifferences names each setting whose value differs among
// kinds (ordered by their first ranks), in the order the first kind
// lists them: "NAME is V on ranks 0, 2 but W on rank 1" (describeHeld).
// A setting one kind lacks is "not given" there.
func describeDifferences(kinds []settingsKind) string {
	var names []string
	values := make([]map[string]string, len(kinds))
	for i, k := range kinds {
		values[i] = map[string]string{}
		for _, s := range k.settings {
			if !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
			values[i][s.Name] = s.Value
		}
	}
	var diffs []string
	for _, name := range names {
		var held []valueHeld
		for i, k := range kinds {
			v, ok := values[i][name]
			if !ok {
				v = "not given"
			}
			j := slices.IndexFunc(held, func(h valueHeld) bool { return h.value == v })
			if j < 0 {
				held = append(held, valueHeld{value: v})
				j = len(held) - 1
			}
			held[j].ranks = append(held[j].ranks, k.ranks...)
		}
		if len(held) > 1 {
			diffs = append(diffs, name+" is "+describeHeld(held))
		}
	}
	return strings.Join(diffs, "; ")
}

// valueHeld is a value and the ranks holding it.
type valueHeld struct {
	value string
	ranks []int
}

// describeHeld lists values with the ranks holding each: "V on ranks 0,
// 2 but W on rank 1"; three or more: "V (rank 0), W (ranks 1, 2), X
// (rank 3)".
func describeHeld(held []valueHeld) string {
	parts := make([]string, len(held))
	for i, h := range held {
		slices.Sort(h.ranks)
		if len(held) == 2 {
			parts[i] = h.value + " on " + rankSpan(h.ranks)
		} else {
			parts[i] = h.value + " (" + rankSpan(h.ranks) + ")"
		}
	}
	if len(held) == 2 {
		return parts[0] + " but " + parts[1]
	}
	return strings.Join(parts, ", ")
}

// rankSpan names ascending ranks, runs of three or more as ranges: "rank
// 0", "ranks 1, 2", "ranks 1–3, 7".
func rankSpan(rs []int) string {
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, fmt.Sprintf("%d–%d", rs[i], rs[j]))
		default:
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(rs[k]))
			}
		}
		i = j + 1
	}
	if len(rs) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}
