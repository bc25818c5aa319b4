package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

// perRank reports whether a configuration field (its JSON name) is one
// each rank may set alone: it changes no result nor any call between
// ranks.
func perRank(field string) bool {
	switch field {
	case "threads", "log_interval", "workers":
		return true
	}
	return false
}

// runSettings lists what every rank of a distributed run must share,
// for comm.Group.CheckSame: the configuration but for perRank, by flag
// name; the data's size, image shape, classes and normalisation; and
// where the run starts (resume: the checkpoint a whole model resumes
// from, "" for none; a pipeline's stages agree on it when they read it).
// A rank started with another flag, or reading another copy of the data
// or of the checkpoint, would otherwise run another number of steps or
// another model, and fail far into training on calls that do not match
// — or, with another learning rate or seed, train on without a word.
func runSettings(cfg Config, train, test *data.Dataset, resume string) ([]comm.Setting, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	var settings []comm.Setting
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if perRank(k) {
			continue
		}
		v := string(fields[k])
		var s string
		if json.Unmarshal(fields[k], &s) == nil {
			v = s
		}
		settings = append(settings, comm.Setting{Name: flagName(k), Value: v})
	}
	describe := func(d *data.Dataset) string {
		if d == nil {
			return "none"
		}
		return fmt.Sprintf("%d of %d×%d×%d", d.Len(), d.Shape[0], d.Shape[1], d.Shape[2])
	}
	settings = append(settings,
		comm.Setting{Name: "training images", Value: describe(train)},
		comm.Setting{Name: "test images", Value: describe(test)},
		comm.Setting{Name: "classes", Value: classList(train.Classes)},
		comm.Setting{Name: "normalisation", Value: fmt.Sprintf("mean %v, std %v", train.Mean, train.Std)})
	if cfg.Pipeline <= 1 {
		settings = append(settings, comm.Setting{Name: "start", Value: startPoint(resume)})
	}
	return settings, nil
}

// flagName is cmd/train's flag for a configuration field's JSON name.
func flagName(field string) string {
	if field == "sync_batch_norm" {
		return "--sync-bn"
	}
	return "--" + strings.ReplaceAll(field, "_", "-")
}

// classList names classes briefly; a long list also by a digest of all
// the names, so that lists differing past their first names differ.
func classList(names []string) string {
	s := fmt.Sprintf("%d (%s)", len(names), someNames(names))
	if len(names) > 5 {
		h := fnv.New64a()
		for _, n := range names {
			h.Write([]byte(n + "\n"))
		}
		s += fmt.Sprintf(" [names %016x]", h.Sum64())
	}
	return s
}

// startPoint says where a whole model's run starts: afresh, or the point
// the checkpoint at resume holds (not its path: ranks on different hosts
// may read copies of it at different paths).
func startPoint(resume string) string {
	if resume == "" {
		return "afresh"
	}
	m, err := checkpoint.ReadTrainMeta(resume)
	if err != nil {
		return fmt.Sprintf("a checkpoint unreadable there (%v)", err)
	}
	return "a checkpoint saved " + pointOf(m).String()
}

// runSchedule lists what every rank of a distributed run must share of
// the settings made after New, for comm.Group.CheckSame: whether and how
// often checkpoints are saved (every rank takes part in a save) and what
// a rank's failure does. The path may differ (each host's own disk).
func (t *Trainer) runSchedule() []comm.Setting {
	save := "unset"
	if t.SavePath != "" {
		save = "set"
	}
	onFailure := t.OnFailure
	if onFailure == "" {
		onFailure = OnFailureAbort
	}
	return []comm.Setting{{Name: "--save", Value: save}, {Name: "--save-every", Value: strconv.Itoa(t.SaveEvery)}, {Name: "--on-failure", Value: onFailure}}
}

// checkReplicas fails unless every data-parallel replica holds the same
// weights, bit for bit (when: "after epoch 3"). They start equal (rank
// 0's, broadcast) and every step applies the same averaged gradient, so
// weights that differ mean a replica computed wrongly — a memory or CPU
// fault on its host, or replicas on different kinds of device whose
// arithmetic rounds otherwise — and the run would go on averaging the
// gradients of different models, and save one of them. It costs a pass
// over the weights and an all-gather of eight bytes a rank; it runs at
// each epoch's end and before each checkpoint written mid-epoch.
func (t *Trainer) checkReplicas(ctx context.Context, when string) error {
	dp, ok := t.sync.(*dataParallel)
	if !ok || dp.g.Size() < 2 {
		return nil
	}
	digest := fmt.Sprintf("%016x", weightsDigest(nn.Params(t.compute.layer())))
	return checkSame(ctx, dp.g, []comm.Setting{{Name: "the weights' digest " + when, Value: digest}},
		"the replicas' weights start equal and take the same averaged gradients: a memory or CPU fault on a host, or replicas on different kinds of device?")
}

// checkSame is g.CheckSame with hint added to the error where the ranks
// differ; an error of the comparison itself (a rank gone) is left as it
// is.
func checkSame(ctx context.Context, g *comm.Group, settings []comm.Setting, hint string) error {
	err := g.CheckSame(ctx, settings)
	if errors.Is(err, comm.ErrDiffer) {
		return fmt.Errorf("%w (%s)", err, hint)
	}
	return err
}

// weightsDigest hashes the bits of every parameter's values (FNV-1a over
// 32-bit words), reading host tensors in place.
func weightsDigest(params []nn.Var) uint64 {
	h := uint64(14695981039346656037)
	for _, p := range params {
		values := p.Value.Data
		if p.Value.Mem != nil { // on a device: copied out
			values = p.Value.HostData()
		}
		for _, v := range values {
			h = (h ^ uint64(math.Float32bits(v))) * 1099511628211
		}
	}
	return h
}
