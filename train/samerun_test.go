package train

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/train/data"
)

// TestRunSettingsCoverConfig: every field of Config but the per-rank
// ones is compared, by its flag's name, so that a field added later is
// compared unless it is declared per-rank; the per-rank ones change
// nothing compared.
func TestRunSettingsCoverConfig(t *testing.T) {
	cfg, train, test := ddpSetup(2, 4, 2, 1)
	cfg.Split, cfg.Pipeline = []int{1}, 2 // every omitempty field present
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	settings, err := runSettings(cfg, train, test, "")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.Name
	}
	for k := range fields {
		if compared := slices.Contains(names, flagName(k)); compared == perRank(k) {
			t.Errorf("field %s: compared %v, per-rank %v", k, compared, perRank(k))
		}
	}
	alone := cfg
	alone.Threads, alone.LogInterval, alone.Workers = 7, 3, 5
	if got, _ := runSettings(alone, train, test, ""); !slices.Equal(got, settings) {
		t.Errorf("per-rank fields changed the settings compared:\n%v\n%v", got, settings)
	}
}

// TestRanksMustRunAlike: trainers of one job started with other flags,
// other data or from other checkpoints all fail before training, naming
// what differs; other thread counts do not. Run checks what is set after
// New (saving) the same way.
func TestRanksMustRunAlike(t *testing.T) {
	const n = 3
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "run.safetensors")
	cfg0, train0, test0 := ddpSetup(n, 4, 2, 1)
	saved := newTrainer(t, cfg0, train0, test0)
	if err := saved.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := saved.Save(ckpt); err != nil {
		t.Fatal(err)
	}
	shorter, _ := data.Synthetic(data.FormatMNIST, train0.Len()-8, 1)
	for _, tc := range []struct {
		name   string
		before func(r int, cfg *Config, train **data.Dataset, opts *[]Option)
		after  func(r int, tr *Trainer) // (nil: nothing)
		want   string                   // "": no error
	}{
		{"threads alone", func(r int, cfg *Config, _ **data.Dataset, _ *[]Option) { cfg.Threads = r + 1 }, nil, ""},
		{"learning rate", func(r int, cfg *Config, _ **data.Dataset, _ *[]Option) {
			if r == 2 {
				cfg.LR = 0.5
			}
		}, nil, "the ranks differ where they must agree: --lr is 0.05 on ranks 0, 1 but 0.5 on rank 2 (start every rank with the same flags, data and checkpoint)"},
		{"data", func(r int, _ *Config, train **data.Dataset, _ *[]Option) {
			if r == 0 {
				*train = shorter
			}
		}, nil, "training images is 16 of 1×28×28 on rank 0 but 24 of 1×28×28 on ranks 1, 2"},
		{"start", func(r int, _ *Config, _ **data.Dataset, opts *[]Option) {
			if r == 1 {
				*opts = append(*opts, ResumeFrom(ckpt))
			}
		}, nil, "start is afresh on ranks 0, 2 but a checkpoint saved after epoch 1 (step 2) on rank 1"},
		{"saving", func(int, *Config, **data.Dataset, *[]Option) {}, func(r int, tr *Trainer) {
			if r == 0 {
				tr.SavePath, tr.SaveEvery = filepath.Join(dir, "new.safetensors"), 1
			}
		}, "--save is set on rank 0 but unset on ranks 1, 2; --save-every is 1 on rank 0 but 0 on ranks 1, 2 (start every rank with the same flags)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := commtest.Groups(t, n)
			errs := make([]error, n)
			commtest.EachRank(t, gs, func(g *comm.Group) error {
				r := g.Rank()
				cfg, train, test := ddpSetup(n, 4, 2, 1)
				opts := []Option{WithGroup(g)}
				tc.before(r, &cfg, &train, &opts)
				be := cpu.New(cfg.Threads)
				defer be.Close()
				tr, err := New(context.Background(), cfg, be, train, test, opts...)
				if err == nil {
					defer tr.Close()
					if tc.after != nil {
						tc.after(r, tr)
					}
					err = tr.Run(context.Background())
				}
				errs[r] = err
				return nil
			})
			commtest.WantErrors(t, errs, tc.want)
		})
	}
}

// TestRankGoneBeforeTheCheck: a rank that leaves before the ranks compare
// their settings is named as gone, without the advice meant for ranks
// that differ.
func TestRankGoneBeforeTheCheck(t *testing.T) {
	gs := commtest.Groups(t, 2)
	closed := make(chan error, 1)
	go func() { closed <- gs[1].Close() }()
	defer func() {
		gs[0].Close() // rank 1's Close waits for it
		<-closed
	}()
	cfg, train, test := ddpSetup(2, 4, 2, 1)
	be := cpu.New(1)
	defer be.Close()
	_, err := New(context.Background(), cfg, be, train, test, WithGroup(gs[0]))
	if err == nil || !strings.Contains(err.Error(), "rank 1 closed its group") || strings.Contains(err.Error(), "start every rank") {
		t.Errorf("got %v, want rank 1 named as gone, without advice on settings", err)
	}
}

// TestReplicasComeApart: a replica whose weights change outside training
// (one bit of one weight flipped on rank 1, as a memory fault would) is
// found at the epoch's end, or before a checkpoint written mid-epoch, on
// every rank, naming the ranks on each side; untouched replicas pass the
// same check at every epoch's end in every other data-parallel test.
func TestReplicasComeApart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		saveEvery int
		want      string
	}{
		{"epoch end", 0, "the weights' digest after epoch 1 is "},
		{"checkpoint mid-epoch", 2, "epoch 1, step 2: the ranks differ where they must agree: the weights' digest at step 2 is "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := commtest.Groups(t, 2)
			dir := t.TempDir()
			errs := make([]error, 2)
			commtest.EachRank(t, gs, func(g *comm.Group) error {
				cfg, train, test := ddpSetup(2, 4, 4, 1)
				be := cpu.New(1)
				defer be.Close()
				tr, err := New(context.Background(), cfg, be, train, test, WithGroup(g))
				if err != nil {
					return err
				}
				defer tr.Close()
				if tc.saveEvery > 0 {
					tr.SavePath, tr.SaveEvery = filepath.Join(dir, "run.safetensors"), tc.saveEvery
				}
				if g.Rank() == 1 {
					tr.AfterStep = func(step int64) error {
						if step == 1 {
							w := nn.Params(tr.Model().Net)[0].Value.Data
							w[3] = math.Float32frombits(math.Float32bits(w[3]) ^ 1)
						}
						return nil
					}
				}
				errs[g.Rank()] = tr.Run(context.Background())
				return nil
			})
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), " on rank 0 but ") ||
					!strings.Contains(err.Error(), " on rank 1 (the replicas' weights start equal and take the same averaged gradients") {
					t.Errorf("rank %d: got %v, want an error saying %q and naming ranks 0 and 1", r, err, tc.want)
				}
			}
		})
	}
}

// BenchmarkWeightsDigest times the replica check's pass over ResNet-50's
// 25.6 M weights.
//
//	go test ./train -run '^$' -bench WeightsDigest
func BenchmarkWeightsDigest(b *testing.B) {
	w, err := tensor.FromData(make([]float32, 25_557_032), 25_557_032)
	if err != nil {
		b.Fatal(err)
	}
	params := []nn.Var{{Value: w}}
	b.SetBytes(int64(4 * w.Len()))
	for b.Loop() {
		weightsDigest(params)
	}
}
