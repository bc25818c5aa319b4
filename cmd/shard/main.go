// Command shard packs an image folder (torchvision's ImageFolder layout:
// DIR/train/CLASS/IMAGE, DIR/val/CLASS/IMAGE) into WebDataset-style tar
// shards for training on clusters, where many small files are slow and
// large sequential reads are fast:
//
//	shard --data photos --out photos-shards [--samples 1000] [--resize 256]
//
// Each shard holds --samples samples, KEY.jpg (or .png) and KEY.cls (the
// class index); the training samples are shuffled first. shards.json,
// written last, names the classes and lists the shards. train --data
// reads the output like the folder: each rank streams its own shards
// through a shuffle buffer. Packing again into the same directory
// replaces the earlier packing.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gorun/gorun/cmd/internal/cli"
	"github.com/gorun/gorun/train/data"
)

func main() {
	os.Exit(cli.Status(os.Stderr, "shard", run(os.Args[1:], os.Stdout)))
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("shard", flag.ContinueOnError)
	dir := fs.String("data", "", "the image folder to pack")
	out := fs.String("out", "", "the directory the shards and shards.json go to")
	samples := fs.Int("samples", 1000, "samples per shard (the last of each split may have fewer); a job needs at least as many training shards as ranks")
	resize := fs.Int("resize", 0, "scale images whose shorter side is longer down to this size and store them as JPEG (quality 90); 0 keeps the files as they are")
	seed := fs.Uint64("seed", 1, "the shuffle of the training samples")
	cli.SetUsage(fs, "shard --data DIR --out DIR [flags]",
		"Packs an image folder (DIR/train/CLASS/IMAGE, DIR/val/CLASS/IMAGE) into WebDataset-style\ntar shards, which train --data streams: each rank its own shards, in large sequential reads.",
		"shard --data photos --out photos-shards --samples 1000 --resize 256")
	if err := cli.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		return fmt.Errorf("--data DIR and --out DIR are required")
	}
	if err := data.WriteShards(*dir, *out, data.ShardOptions{Samples: *samples, Resize: *resize, Seed: *seed}); err != nil {
		return err
	}
	train, val, err := data.LoadShards(*out, 224)
	if err != nil {
		return fmt.Errorf("reading back the index: %w", err)
	}
	if _, err := fmt.Fprintf(stdout, "%d training samples in %s, %d validation samples in %s, %d classes: %s\n",
		train.Len(), shardCount(len(train.Shards.Files)), val.Len(), shardCount(len(val.Shards.Files)), len(train.Classes), *out); err != nil {
		return err
	}
	for _, d := range []struct {
		split string
		ds    *data.Dataset
	}{{"train", train}, {"val", val}} {
		if d.ds.LeftOut != "" {
			if _, err := fmt.Fprintf(stdout, "%s: %s\n", d.split, d.ds.LeftOut); err != nil {
				return err
			}
		}
	}
	return nil
}

// shardCount is "1 shard" or "N shards".
func shardCount(n int) string {
	if n == 1 {
		return "1 shard"
	}
	return fmt.Sprintf("%d shards", n)
}
