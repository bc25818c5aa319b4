// Command infer classifies images with a trained checkpoint, or evaluates
// it on a dataset's test split:
//
//	infer --weights net.safetensors shoe.png bag.jpg
//	infer --weights net.safetensors --data /usr/share/datasets/fashion-mnist
//	infer --weights run.safetensors --merge whole.safetensors   # a pipeline's stage files as one
//
// The model, class names and input normalisation are read from the
// checkpoint; plain weights (e.g. exported from PyTorch) need --model and
// optionally --labels.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/gorun/gorun/cmd/internal/cli"
	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/train"
	"github.com/gorun/gorun/train/checkpoint"
	"github.com/gorun/gorun/train/data"
)

func main() {
	os.Exit(cli.Status(os.Stderr, "infer", run(cli.SignalContext(), os.Args[1:], os.Stdout, os.Stderr)))
}

// run runs infer with args; results go to stdout, and an image file that
// does not decode is named on stderr (in --json, as an object on stdout)
// while the others are classified.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = errors.New("interrupted") // (Ctrl-C, or gorun stopping the job), not the calls' chain of errors
		}
	}()
	fs := flag.NewFlagSet("infer", flag.ContinueOnError)
	weights := fs.String("weights", "", "weights to load: a checkpoint or safetensors file, or a state dict PyTorch's torch.save wrote (.pt, .pth; pass --model)")
	model := fs.String("model", "", "model name (default: from the checkpoint)")
	labels := fs.String("labels", "", "class names: fashion-mnist, mnist or cifar10 (default: from the checkpoint)")
	dataDir := fs.String("data", "", "evaluate on this dataset's test split instead of classifying images")
	top := fs.Int("top", 3, "classes to print per image")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "compute threads (under gorun, the cores of this rank's share of the machine)")
	device := fs.String("device", "auto", "compute device: cuda, cpu, or auto (a GPU when the CUDA driver sees one)")
	batch := fs.Int("batch-size", 128, "images a forward pass takes, in --data's evaluation and from image files")
	merge := fs.String("merge", "", "write the loaded model (e.g. a pipeline run's stage files) as one weights file here and exit")
	skipBad := fs.Bool("skip-bad-images", false, "leave image files that cannot be decoded out (--data's evaluation, and the files given) and count them at the end, exit status 0 (default: the evaluation stops with an error naming the file; files given are each named and the exit status is 1)")
	asJSON := fs.Bool("json", false, `print one JSON object per image: {"file": ..., "top": [{"class": index, "name": ..., "prob": ...}, ...]}`)
	cli.SetUsage(fs, "infer --weights FILE [flags] [IMAGE...]",
		"Classifies images with trained weights, or evaluates them on a dataset's test split\n(--data). The model, class names and normalisation come from the checkpoint; plain\nweights (a safetensors file or torch.save's state dict) need --model.",
		"infer --weights net.safetensors shoe.png bag.jpg",
		"infer --weights net.safetensors --data /usr/share/datasets/fashion-mnist",
		"infer --weights run.safetensors --merge whole.safetensors   # a pipeline's stage files as one")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	for name, v := range map[string]int{"top": *top, "threads": *threads, "batch-size": *batch} {
		if v < 1 {
			return fmt.Errorf("--%s %d: want 1 or more", name, v)
		}
	}
	if *weights == "" {
		return fmt.Errorf("--weights is required")
	}
	if *dataDir == "" && len(files) == 0 && *merge == "" {
		return fmt.Errorf("give image files to classify, --data DIR to evaluate, or --merge OUT")
	}
	for _, f := range files { // before the weights are loaded
		if st, err := os.Stat(f); err != nil {
			return err
		} else if st.IsDir() {
			return fmt.Errorf("%s is a directory: infer classifies image files (%s), and evaluates a dataset with --data %s", f, filepath.Join(f, "*.jpg"), f)
		}
	}
	if *merge != "" {
		if err := checkpoint.Probe(*merge); err != nil { // before the weights are loaded
			return fmt.Errorf("--merge: %w", err)
		}
	}
	// Started as several ranks (gorun -np N infer, srun, torchrun's or
	// mpirun's variables), they share --data's evaluation and rank 0
	// prints; image files and --merge are rank 0's alone.
	g, err := comm.Init(ctx)
	if err != nil {
		return err
	}
	defer g.Close()
	if g.Rank() != 0 {
		if *dataDir == "" {
			return nil
		}
		stdout = io.Discard
	}
	dev, err := train.OpenBackend(*device, g.LocalRank(), *threads, "fp32")
	if err != nil {
		return err
	}
	defer dev.Close()
	be := dev.Backend
	c, err := train.LoadClassifier(*weights, *model, *labels, be)
	if err != nil {
		return err
	}
	if *merge != "" {
		if err := c.SaveWhole(*merge); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (model %s)\n", *merge, c.Model.Name)
		return nil
	}
	c.SkipBadImages = *skipBad
	if *dataDir != "" {
		return evaluate(ctx, g, c, *dataDir, *batch, stdout)
	}
	return classify(c, files, *batch, *top, *asJSON, *skipBad, stdout, stderr)
}

// classify classifies the image files batch by batch, printing each
// batch's results as it goes (so memory holds one batch, whatever the
// number of files). A file that does not decode is named — on stderr, or
// in --json as {"file": ..., "error": ...} in its place — and the rest
// are classified; the error returned then counts them (with skipBad, a
// count on stderr instead, and no error). A single file's error is the
// error returned.
func classify(c *train.Classifier, files []string, batch, top int, asJSON, skipBad bool, stdout, stderr io.Writer) error {
	enc := json.NewEncoder(stdout)
	var firstBad error
	bad := 0
	for start := 0; start < len(files); start += batch {
		chunk := files[start:min(start+batch, len(files))]
		var images [][]byte
		failed := make([]error, len(chunk))
		for i, p := range chunk {
			b, err := readImage(c, p)
			if err != nil {
				failed[i] = err
				bad++
				if firstBad == nil {
					firstBad = err
				}
				continue
			}
			images = append(images, b)
		}
		var preds [][]train.Prediction
		if len(images) > 0 {
			var err error
			if preds, err = c.Classify(images, top); err != nil {
				return err
			}
		}
		// In the files' order: each result or error where its file stands.
		for i, p := range chunk {
			if err := failed[i]; err != nil {
				if asJSON {
					if err := enc.Encode(struct {
						File  string `json:"file"`
						Error string `json:"error"`
					}{p, err.Error()}); err != nil {
						return err
					}
				} else if len(files) > 1 || skipBad {
					// (One file alone: its error is infer's.)
					fmt.Fprintf(stderr, "infer: %v\n", err)
				}
				continue
			}
			ps := preds[0]
			preds = preds[1:]
			if err := printPredictions(enc, stdout, asJSON, p, ps); err != nil {
				return err
			}
		}
	}
	switch {
	case bad == 0:
		return nil
	case skipBad:
		fmt.Fprintf(stderr, "infer: %d of %d images could not be read and were left out (--skip-bad-images)\n", bad, len(files))
		return nil
	case len(files) == 1:
		return firstBad
	}
	return fmt.Errorf("%d of %d images could not be read, each named where it stands; the others are classified", bad, len(files))
}

// readImage reads the image at p as c's model takes it: a model trained
// on an image folder as its evaluation did (data.ReadEvalImage), others
// scaled to their input.
func readImage(c *train.Classifier, p string) ([]byte, error) {
	in := [3]int(c.Model.Input)
	if data.FromImageFolder(c.Dataset) && in[0] == 3 && in[1] == in[2] {
		return data.ReadEvalImage(p, in[1])
	}
	img, err := data.DecodeImageFile(p)
	if err != nil {
		return nil, err
	}
	b, err := data.ImageBytes(img, in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return b, nil
}

// evaluate evaluates c on the test split of the dataset in dir, shared
// among g's ranks, and writes the loss, accuracy and confusion matrix.
func evaluate(ctx context.Context, g *comm.Group, c *train.Classifier, dir string, batch int, w io.Writer) error {
	_, test, err := data.LoadSized(dir, c.Model.Input[len(c.Model.Input)-1])
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	ev, err := c.EvaluateOn(ctx, g, test, batch)
	if err != nil {
		return err
	}
	shared := ""
	if len(ev.Shares) > 1 {
		counts := make([]string, len(ev.Shares))
		for r, n := range ev.Shares {
			counts[r] = strconv.Itoa(n)
		}
		shared = fmt.Sprintf(", shared by %d ranks: %s images", len(counts), strings.Join(counts, ", "))
	}
	switch {
	case ev.Skipped == 1:
		shared += ", 1 image file that could not be read left out (--skip-bad-images)"
	case ev.Skipped > 1:
		shared += fmt.Sprintf(", %d image files that could not be read left out (--skip-bad-images)", ev.Skipped)
	}
	fmt.Fprintf(w, "Test set (%s%s): Average loss: %.4f, Accuracy: %d/%d (%.2f%%)\n\n", test.Name, shared, ev.Loss, ev.Correct, ev.Total, 100*ev.Accuracy())
	fmt.Fprintln(w, "Confusion matrix (rows: true class, columns: predicted):")
	width := 6
	for _, name := range c.Classes {
		width = max(width, len(name))
	}
	fmt.Fprintf(w, "%*s", width+2, "")
	for j := range c.Classes {
		fmt.Fprintf(w, " %5d", j)
	}
	fmt.Fprintf(w, "  %s\n", "recall")
	for i, row := range ev.Confusion {
		total := 0
		for _, n := range row {
			total += n
		}
		fmt.Fprintf(w, "%-*s %d", width, c.Classes[i], i)
		for _, n := range row {
			fmt.Fprintf(w, " %5d", n)
		}
		fmt.Fprintf(w, "  %5.1f%%\n", 100*float64(row[i])/float64(max(total, 1)))
	}
	return nil
}

// printPredictions prints one image's classes: a JSON object on a line
// of its own, {"file": ..., "top": [{"class": ..., "name": ..., "prob":
// ...}, ...]}, or "file: name p%, ...".
func printPredictions(enc *json.Encoder, w io.Writer, asJSON bool, file string, ps []train.Prediction) error {
	if !asJSON {
		parts := make([]string, len(ps))
		for i, p := range ps {
			parts[i] = fmt.Sprintf("%s %.2f%%", p.Name, 100*p.Probability)
		}
		_, err := fmt.Fprintf(w, "%s: %s\n", file, strings.Join(parts, ", "))
		return err
	}
	type class struct {
		Class int     `json:"class"`
		Name  string  `json:"name"`
		Prob  float64 `json:"prob"`
	}
	top := make([]class, len(ps))
	for j, p := range ps {
		top[j] = class{p.Class, p.Name, p.Probability}
	}
	return enc.Encode(struct {
		File string  `json:"file"`
		Top  []class `json:"top"`
	}{file, top})
}

// parseInterspersed parses flags wherever they stand among the arguments
// (infer photo.jpg --weights w.safetensors, as Python's argparse allows;
// the flag package alone stops at the first file and would take the
// flags after it for files) and returns the other arguments in order.
// Everything after "--" is an argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := cli.Parse(fs, args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), nil
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}
