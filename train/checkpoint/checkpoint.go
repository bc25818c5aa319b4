// Package checkpoint saves and restores training runs.
//
// A checkpoint at PATH is two files, each written atomically (temporary
// file, fsync, rename) and each complete on its own:
//
//   - PATH: the model's weights as safetensors under PyTorch's state_dict
//     names, so torch's load_state_dict(safetensors.torch.load_file(PATH))
//     accepts it, with the run's Meta in its metadata (what inference needs:
//     the model, the classes, the normalisation);
//   - PATH.train: everything --resume needs: the weights again (under
//     "model."), the optimizer's buffers (under "optimizer."), and Meta with
//     the epoch, step, schedule, dropout counters and configuration.
//
// Because the training state carries its own copy of the weights, an
// interrupted save can never pair new optimizer state with old weights.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/torchfile"
)

// FormatVersion identifies the metadata layout.
const FormatVersion = "gorun-checkpoint/1"

// metaKey is the safetensors metadata key holding Meta as JSON.
const metaKey = "gorun"

// Meta describes a checkpoint.
type Meta struct {
	Format string `json:"format"`
	// Model is the zoo name of the network.
	Model string `json:"model"`
	// Input is the per-sample [C, H, W].
	Input []int `json:"input"`
	// Dataset names the training data; Classes its label names.
	Dataset string   `json:"dataset"`
	Classes []string `json:"classes"`
	// Mean and Std are the input normalisation per channel.
	Mean []float32 `json:"mean"`
	Std  []float32 `json:"std"`
	// Epoch is the number of completed epochs; Step the optimizer steps.
	Epoch int   `json:"epoch"`
	Step  int64 `json:"step"`
	// Batch, in a checkpoint saved mid-epoch, is how many batches of epoch
	// Epoch+1 are done (0: none, a checkpoint at an epoch's end);
	// EpochLoss and EpochSeen are the sum of their losses and the samples
	// this rank trained on in them, for the epoch's report.
	Batch     int     `json:"batch,omitempty"`
	EpochLoss float64 `json:"epoch_loss,omitempty"`
	EpochSeen int     `json:"epoch_seen,omitempty"`
	// EpochBatches is how many batch losses EpochLoss sums (Batch when 0).
	EpochBatches int `json:"epoch_batches,omitempty"`
	// World is how many replicas trained the epoch's batches (0: as many
	// as resume it), and Skip how many positions of its order were done
	// before they were dealt out (after a shrink): a run of another size
	// resumes at position Skip + Batch·batch size·World.
	World int `json:"world,omitempty"`
	Skip  int `json:"skip,omitempty"`
	// Shrinks records the ranks the run lost and went on without.
	Shrinks []Shrink `json:"shrinks,omitempty"`
	// ScheduleEpoch is the learning-rate schedule's position; LR the rate
	// in effect.
	ScheduleEpoch int     `json:"schedule_epoch"`
	LR            float32 `json:"lr"`
	// DropoutCalls are the dropout layers' counters (their RNG state), in
	// layer order.
	DropoutCalls []uint64 `json:"dropout_calls,omitempty"`
	// LossScale and LossScaleGoodSteps are an fp16 run's GradScaler
	// state: its scale and the finite steps since the scale last changed.
	LossScale          float32 `json:"loss_scale,omitempty"`
	LossScaleGoodSteps int     `json:"loss_scale_good_steps,omitempty"`
	// Config is the trainer's configuration.
	Config json.RawMessage `json:"config,omitempty"`
	// TestAccuracy is the last evaluation's accuracy (0–1), if any.
	TestAccuracy float64 `json:"test_accuracy,omitempty"`
	// Stage and Stages identify one stage's file of a pipeline run.
	Stage  int `json:"stage,omitempty"`
	Stages int `json:"stages,omitempty"`
	// Chunks is, for an interleaved pipeline, how many chunks of the
	// model each stage held (stage s: chunks s, s+Stages, …); 0 for one.
	Chunks int `json:"chunks,omitempty"`
	// Split is where the pipeline cut the model into stages (or chunks):
	// the index of each later one's first piece (zoo.Spec's Pieces:
	// top-level layers, and a ResNet stage's residual blocks one by one).
	Split []int `json:"split,omitempty"`
}

// Shrink records one shrink of a data-parallel run: at optimizer step
// Step of epoch Epoch, ranks Lost (numbered as the job first was) were
// gone and the World ranks left went on.
type Shrink struct {
	Epoch int   `json:"epoch"`
	Step  int64 `json:"step"`
	Lost  []int `json:"lost"`
	World int   `json:"world"`
}

// TrainPath is where the training state of the checkpoint at path lives.
func TrainPath(path string) string { return path + ".train" }

// WeightsOf reports whether path is the training state of a checkpoint
// (TrainPath of a weights file that exists), and returns that weights
// file: for errors that tell a user who passed the one where the other
// belongs.
func WeightsOf(path string) (string, bool) {
	base, ok := strings.CutSuffix(path, TrainPath(""))
	if !ok {
		return "", false
	}
	st, err := os.Stat(base)
	return base, err == nil && st.Mode().IsRegular()
}

// RefuseState returns an error naming the weights file when path is the
// training state of a checkpoint (WeightsOf), for the readers of weights.
func RefuseState(path string) error {
	if base, ok := WeightsOf(path); ok {
		return fmt.Errorf("%s is a run's training state (optimizer and progress, for --resume); its weights are in %s", path, base)
	}
	return nil
}

// Probe checks, before any training, that a checkpoint can be saved at
// path: neither path nor TrainPath(path) is a directory, and a file can be
// created in path's directory (it exists, is a directory, is writable,
// and its file system has room for a probe). It leaves nothing behind.
func Probe(path string) error {
	if err := notDirectories(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("checkpoint: cannot save to %s: directory %s does not exist", path, dir)
	case err != nil:
		return fmt.Errorf("checkpoint: cannot save to %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("checkpoint: cannot save to %s: %s is not a directory", path, dir)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".probe*")
	if err != nil {
		return fmt.Errorf("checkpoint: cannot save to %s: %w", path, err)
	}
	_, werr := f.Write(make([]byte, 4096))
	if err := errors.Join(werr, f.Sync(), f.Close(), os.Remove(f.Name())); err != nil {
		return fmt.Errorf("checkpoint: cannot save to %s: %w", path, err)
	}
	return nil
}

// notDirectories refuses a checkpoint path where it or its training state
// would replace a directory.
func notDirectories(path string) error {
	for _, p := range []string{path, TrainPath(path)} {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return fmt.Errorf("checkpoint: cannot save to %s: it is a directory (give a file name, e.g. %s)", p, filepath.Join(path, "model.safetensors"))
		}
	}
	return nil
}

// SyncPrefix starts the names of the gradient sync's state in the
// training file (PowerSGD's: train's data-parallel code reads them).
const SyncPrefix = "sync."

// Save writes net's weights to path and the resumable training state
// (weights, opt's state, meta, and sync, the gradient sync's state, under
// SyncPrefix) to TrainPath(path). opt may be nil to save weights and
// metadata only.
func Save(path string, net nn.Layer, opt optim.Optimizer, meta Meta, sync ...nn.Var) error {
	// Also here, for callers that did not probe: before either file.
	if err := notDirectories(path); err != nil {
		return err
	}
	meta.Format = FormatVersion
	mj, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	md := map[string]string{metaKey: string(mj), "format": "pt"}
	if opt != nil {
		tensors := append(nn.VarTensors("model.", net.State()), nn.VarTensors("optimizer.", opt.State())...)
		tensors = append(tensors, nn.VarTensors(SyncPrefix, sync)...)
		if err := safetensors.WriteFile(TrainPath(path), tensors, md); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := safetensors.WriteFile(path, nn.StateTensors(net), md); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// ReadMeta returns the metadata of the weights file at path (safetensors,
// or a state dict torch.save wrote, which has none).
func ReadMeta(path string) (*Meta, *safetensors.File, error) {
	f, err := torchfile.ReadAny(path)
	if err != nil {
		return nil, nil, err
	}
	m, err := parseMeta(f)
	return m, f, err
}

func parseMeta(f *safetensors.File) (*Meta, error) {
	s, ok := f.Metadata[metaKey]
	if !ok {
		return nil, fmt.Errorf("checkpoint: %s has no gorun metadata (plain weights, as PyTorch saves them)", f.Path)
	}
	var m Meta
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: metadata: %w", f.Path, err)
	}
	if m.Format != FormatVersion {
		return nil, fmt.Errorf("checkpoint: %s: format %q, this build reads %q", f.Path, m.Format, FormatVersion)
	}
	return &m, nil
}

// LoadWeights reads the weights at path into net (strictly, as
// nn.LoadState) and returns the metadata when there is some (nil for
// plain weights, e.g. exported from PyTorch, or a torch.save file).
func LoadWeights(path string, net nn.Layer) (*Meta, error) {
	f, err := torchfile.ReadAny(path)
	if err != nil {
		return nil, err
	}
	if err := nn.LoadState(f, net); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := f.Metadata[metaKey]; !ok {
		return nil, nil
	}
	return parseMeta(f)
}

// ReadTrainMeta returns the metadata of the training state saved with the
// checkpoint at path, reading only the file's header.
func ReadTrainMeta(path string) (*Meta, error) {
	return ReadStateMeta(path, TrainPath(path))
}

// ReadStateMeta is ReadTrainMeta for the training state file file of the
// checkpoint at path (TrainPath(path), or PreviousTrainPath(path)).
func ReadStateMeta(path, file string) (*Meta, error) {
	md, err := safetensors.ReadMetadata(file)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: cannot resume from %s: %w", path, err)
	}
	return parseMeta(&safetensors.File{Path: file, Metadata: md})
}

// PreviousTrainPath is where KeepPrevious keeps the training state saved
// before the latest at path.
func PreviousTrainPath(path string) string { return TrainPath(path) + ".prev" }

// StateFiles are the training state files the checkpoint at path may
// hold, the latest first: TrainPath(path) and PreviousTrainPath(path).
func StateFiles(path string) []string { return []string{TrainPath(path), PreviousTrainPath(path)} }

// KeepPrevious moves the training state saved with the checkpoint at
// path, if there is one, to PreviousTrainPath(path), before a new one is
// saved there. A pipeline's stages save a file each: a job killed after
// some stages saved a step and before the others did resumes from the
// newest step that every stage holds, the latest file or the one before.
func KeepPrevious(path string) error {
	if err := os.Rename(TrainPath(path), PreviousTrainPath(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: keeping the previous training state of %s: %w", path, err)
	}
	return nil
}

// ReadTrainState reads the training state file of the checkpoint at path
// and its metadata, for Restore (and the gradient sync's state under
// SyncPrefix): one read of a file that holds the weights and the
// optimizer's state.
func ReadTrainState(path string) (*safetensors.File, *Meta, error) {
	return ReadStateFile(path, TrainPath(path))
}

// ReadStateFile is ReadTrainState for the training state file file of the
// checkpoint at path (TrainPath(path), or PreviousTrainPath(path)).
func ReadStateFile(path, file string) (*safetensors.File, *Meta, error) {
	f, err := safetensors.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: cannot resume from %s: %w", path, err)
	}
	m, err := parseMeta(f)
	if err != nil {
		return nil, nil, err
	}
	return f, m, nil
}

// Resume restores net and opt from the training state saved with the
// checkpoint at path and returns its metadata. Nothing is changed unless
// everything matches.
func Resume(path string, net nn.Layer, opt optim.Optimizer) (*Meta, error) {
	f, m, err := ReadTrainState(path)
	if err != nil {
		return nil, err
	}
	if err := Restore(f, net, opt); err != nil {
		return nil, err
	}
	return m, nil
}

// Restore loads net and opt from a training state file (ReadTrainState).
// Nothing is changed unless everything matches.
func Restore(f *safetensors.File, net nn.Layer, opt optim.Optimizer) error {
	// Each LoadVars changes nothing unless all of it matches; a trial load
	// of the optimizer state first makes the pair all or nothing.
	if err := nn.LoadVars(f, "optimizer.", cloneVars(opt.State())); err != nil {
		return fmt.Errorf("%s: optimizer (was it saved with another optimizer?): %w", f.Path, err)
	}
	if err := nn.LoadVars(f, "model.", net.State()); err != nil {
		return fmt.Errorf("%s: model: %w", f.Path, err)
	}
	if err := nn.LoadVars(f, "optimizer.", opt.State()); err != nil {
		return fmt.Errorf("%s: optimizer: %w", f.Path, err)
	}
	return nil
}

// cloneVars returns vars with their own storage, for trial loads.
func cloneVars(vars []nn.Var) []nn.Var {
	out := make([]nn.Var, len(vars))
	for i, v := range vars {
		out[i] = nn.Var{Name: v.Name}
		if v.Count != nil {
			out[i].Count = new(int64)
		} else {
			out[i].Value = v.Value.Clone()
		}
	}
	return out
}
