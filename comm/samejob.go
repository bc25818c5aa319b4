package comm

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// What every rank of a job must share, checked while joining, before any
// connection is made: the gorun build each rank runs, and the settings the
// collectives' algorithms and transports are chosen by. Ranks that chose
// differently for one call would exchange frames the other side does not
// expect — the job then fails in its first calls with errors about
// frames, or waits: a rank forced onto TCP left its local peers waiting
// for its shared-memory segments until the join's deadline. A setting
// given in the launcher's environment reaches every rank alike; one set
// in a single node's shell profile, or a binary left from an older build
// on one node's disk, does not.
//
// Each rank publishes its settings in the store (jobKey) and, beside its
// data address (joinRecord), their digest and its build. Every rank
// compares the digests and builds of all; where they differ it reads the
// settings of rank 0 and of the first rank of each other kind, and every
// rank fails with the same error, naming each setting, its values and the
// ranks holding them.

// jobWide lists s's settings that every rank must share, in a fixed
// order. Settings a pair of ranks may hold differently without harm
// (timeouts, spinning, compression and direct frames, which the
// receiver reads from each frame, eager or lazy connections) are not in
// it.
func jobWide(s *Settings) []Setting {
	size := func(n int) string {
		switch n {
		case 0:
			return "unset"
		case -1:
			return "-1 (never)"
		}
		return strconv.Itoa(n)
	}
	orAuto := func(v string) string {
		if v == "" {
			return "auto"
		}
		return v
	}
	net := orAuto(s.NetMode)
	if net == "set" {
		net = s.Net.String()
	}
	return []Setting{
		{"GORUN_TRANSPORT", orAuto(s.Transport)},
		{"GORUN_ALGO", orAuto(s.Algo)},
		{"GORUN_NET", net},
		{"GORUN_SMALL_BYTES", size(s.SmallBytes)},
		{"GORUN_CHUNK_BYTES", size(s.ChunkBytes)},
		{"GORUN_ONESHOT_BYTES", size(s.OneShotBytes)},
		{"GORUN_HALVING_BYTES", size(s.HalvingBytes)},
		{"GORUN_BRUCK_BYTES", size(s.BruckBytes)},
		{"GORUN_LINEAR_REDUCE_BYTES", size(s.LinearReduceBytes)},
		{"GORUN_TREE_SCATTER_BYTES", size(s.TreeScatterBytes)},
	}
}

func jobKey(r int) string { return "job/" + strconv.Itoa(r) }

// Build names the gorun build this program was made from, as the ranks
// of a job compare it while joining (every rank must run the same): the
// version the Go toolchain stamped on the gorun module — a release, or a
// commit's pseudo-version ending in +dirty for a modified tree — or ""
// when the build carries none (built with -buildvcs=false or outside a
// repository), which matches any build.
func Build() string { return buildIdentity() }

// buildIdentity names the gorun code this program was built from: the
// version the Go toolchain stamped on the gorun module (a release, or a
// commit's pseudo-version ending in +dirty for a modified tree); "" when
// the build carries none (built with -buildvcs=false or outside a
// repository, or a test binary), which matches any build.
func buildIdentity() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return gorunVersion(info)
}

// gorunVersion is the version info records for the gorun module, as the
// main module or a dependency (its replacement's, if replaced); "" for
// none or "(devel)".
func gorunVersion(info *debug.BuildInfo) string {
	const path = "github.com/gorun/gorun"
	mod := &info.Main
	if mod.Path != path {
		i := slices.IndexFunc(info.Deps, func(m *debug.Module) bool { return m.Path == path })
		if i < 0 {
			return ""
		}
		mod = info.Deps[i]
	}
	if mod.Replace != nil {
		mod = mod.Replace
	}
	if mod.Version == "(devel)" {
		return ""
	}
	return mod.Version
}

// joinRecord is what a rank publishes beside its data address: the
// digest of its job-wide settings and its build ("" when unknown). A
// record of an older gorun holds the address alone (old).
type joinRecord struct {
	addr, digest, build string
	old                 bool
}

func (j joinRecord) encode() []byte {
	return []byte(j.addr + "\n" + j.digest + "\n" + j.build)
}

func decodeJoinRecord(b []byte) joinRecord {
	parts := strings.SplitN(string(b), "\n", 3)
	if len(parts) < 3 {
		return joinRecord{addr: parts[0], old: true}
	}
	return joinRecord{addr: parts[0], digest: parts[1], build: parts[2]}
}

// checkSameJob fails unless every rank's record shows this rank's build
// (where both are known) and its job-wide settings (mine, encoded). On a
// difference it reads the settings it needs from the store, to name them.
func checkSameJob(ctx context.Context, store store, recs []joinRecord, rank int, mine []byte) error {
	var old []int
	builds, digests := make([]string, len(recs)), make([]string, len(recs))
	for r, rec := range recs {
		if rec.old {
			old = append(old, r)
		}
		builds[r], digests[r] = rec.build, rec.digest
	}
	if len(old) > 0 {
		return fmt.Errorf("%s an older gorun build than rank %d, one that publishes no settings when joining: every rank must run the same build of the program", ranks(old, "runs", "run"), rank)
	}
	order, held := byFirstRank(builds)
	if order = slices.DeleteFunc(order, func(b string) bool { return b == "" }); len(order) > 1 { // (unknown: matches any)
		known := make([]valueHeld, len(order))
		for i, b := range order {
			known[i] = valueHeld{b, held[b]}
		}
		return fmt.Errorf("the ranks run different builds of gorun (%s): every rank must run the same build of the program (a binary left on one node's disk?)", describeHeld(known))
	}
	order, byDigest := byFirstRank(digests)
	if len(order) == 1 {
		return nil
	}
	// The settings of the first rank of each kind, rank 0's first.
	kinds := make([]settingsKind, len(order))
	for i, d := range order {
		first := byDigest[d][0]
		b := mine
		if d != recs[rank].digest {
			var err error
			if b, err = store.Get(ctx, jobKey(first)); err != nil {
				return fmt.Errorf("the ranks' settings differ (rank %d's and rank %d's), and reading rank %d's failed: %w", rank, first, first, err)
			}
		}
		kinds[i] = settingsKind{ranks: byDigest[d], settings: decodeSettings(b)}
	}
	return fmt.Errorf("the ranks' settings differ where every rank must share them: %s (give every rank the same: set them in gorun's or srun's environment, which every rank inherits, or pass them with mpirun -x NAME)", describeDifferences(kinds))
}
