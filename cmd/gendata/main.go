// Command gendata writes generated datasets in the real datasets' file
// formats, for demos and tests where the real data cannot be downloaded
// (CIFAR-10 here):
//
//	gendata --format cifar10 --out data/cifar-10-batches-bin
//	gendata --format cifar10 --archive --out data/cifar-10-binary.tar.gz
//	gendata --format mnist --out /tmp/digits
//	gendata --format imagefolder --size 96x72 --out /tmp/photos   (train/CLASS/*.jpg, val/CLASS/*.jpg)
//
// The format may also come first as a word, as a subcommand:
// `gendata imagefolder --out /tmp/photos` is the last line's short form.
//
// The images are learnable class patterns (see data.Synthetic); train
// reads the output with --data like the real thing. An image folder is
// written again only over the same images: other counts, seeds or files
// already there would mix in, and are refused.
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
	os.Exit(cli.Status(os.Stderr, "gendata", run(os.Args[1:], os.Stdout)))
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gendata", flag.ContinueOnError)
	format := fs.String("format", "cifar10", "file format: cifar10 (binary batches), mnist (IDX, gzipped) or imagefolder (torchvision's ImageFolder: train/CLASS/*.jpg and val/CLASS/*.jpg)")
	size := fs.String("size", "96x72", "imagefolder: each image's WIDTHxHEIGHT")
	ext := fs.String("image-format", "jpg", "imagefolder: jpg or png")
	out := fs.String("out", "", "output directory (or .tar.gz file with --archive)")
	archive := fs.Bool("archive", false, "cifar10 only: write one cifar-10-binary.tar.gz archive instead of the extracted files")
	nTrain := fs.Int("train", 10000, "training images")
	nTest := fs.Int("test", 2000, "test images")
	seed := fs.Uint64("seed", 1, "random seed (the test split uses seed+1)")
	cli.SetUsage(fs, "gendata --out DIR [flags]",
		"Writes a dataset of learnable class patterns in a real dataset's file format, for\ndemos and tests where the real one cannot be downloaded; train reads it with --data.",
		"gendata --format cifar10 --out data/cifar-10-batches-bin",
		"gendata --format mnist --out /tmp/digits",
		"gendata --format imagefolder --size 96x72 --out /tmp/photos   # train/CLASS/*.jpg, val/CLASS/*.jpg",
		"gendata imagefolder --out /tmp/photos   # the format first, as a subcommand: the same as --format imagefolder")
	// A format named first, as a subcommand, stands for --format: the
	// flags after it are parsed as usual.
	var word string
	if len(args) > 0 && isFormat(args[0]) {
		word, args = args[0], args[1:]
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// Flags after a later argument go unread: say so, not "--out is
		// required".
		if a := fs.Arg(0); isFormat(a) {
			return fmt.Errorf("unexpected argument %q: name the format first (gendata %s --out DIR) or with --format %s", a, a, a)
		}
		return cli.NoArguments(fs)
	}
	if word != "" {
		formatSet := false
		fs.Visit(func(f *flag.Flag) { formatSet = formatSet || f.Name == "format" })
		if formatSet && *format != word {
			return fmt.Errorf("gendata %s --format %s: two formats; name one", word, *format)
		}
		*format = word
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	if *nTrain < 1 || *nTest < 1 {
		return fmt.Errorf("--train %d --test %d: want at least 1 image each", *nTrain, *nTest)
	}
	f := data.Format(*format)
	switch f {
	case data.FormatCIFAR10, data.FormatMNIST, data.FormatImageFolder:
	default:
		return fmt.Errorf("--format %q: want cifar10, mnist or imagefolder", *format)
	}
	var w, h int
	if f == data.FormatImageFolder {
		if _, err := fmt.Sscanf(*size, "%dx%d", &w, &h); err != nil || w < 1 || h < 1 {
			return fmt.Errorf("--size %q: want WIDTHxHEIGHT, such as 96x72", *size)
		}
		if int64(w)*int64(h) > data.MaxImagePixels {
			return fmt.Errorf("--size %s: %d pixels, more than the %d an image may have for the loaders (Pillow's decompression-bomb limit)", *size, int64(w)*int64(h), data.MaxImagePixels)
		}
		if *ext != "jpg" && *ext != "png" {
			return fmt.Errorf("--image-format %q: want jpg or png", *ext)
		}
		f = data.FormatCIFAR10 // its class patterns, scaled
	} else if *archive && f == data.FormatMNIST {
		return fmt.Errorf("--archive is for the cifar10 format")
	}
	train, err := data.Synthetic(f, *nTrain, *seed)
	if err != nil {
		return err
	}
	test, err := data.Synthetic(f, *nTest, *seed+1)
	if err != nil {
		return err
	}
	switch {
	case w > 0:
		f = data.FormatImageFolder
		err = data.WriteImageFolder(*out, train, test, w, h, "."+*ext)
	case f == data.FormatMNIST:
		err = data.WriteMNIST(*out, train, test)
	case *archive:
		err = data.WriteCIFAR10Archive(*out, train, test)
	default:
		err = data.WriteCIFAR10(*out, train, test)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d training and %d test images (%s format) to %s\n", *nTrain, *nTest, f, *out)
	return nil
}

// isFormat reports whether a names a format gendata writes.
func isFormat(a string) bool {
	switch data.Format(a) {
	case data.FormatCIFAR10, data.FormatMNIST, data.FormatImageFolder:
		return true
	}
	return false
}
