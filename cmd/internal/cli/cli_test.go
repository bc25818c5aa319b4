package cli

import (
	"bytes"
	"errors"
	"flag"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func trainFlags(out *bytes.Buffer) *flag.FlagSet {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(out)
	for _, name := range []string{"batch-size", "test-batch-size", "epochs", "lr", "model", "data", "save", "save-every", "np"} {
		fs.String(name, "", "usage of "+name)
	}
	return fs
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		err       string // "" for none; else the error's text
		usage     bool   // the usage was printed
		errIsHelp bool
	}{
		{args: []string{"--epochs", "3"}},
		{args: []string{"--batch", "32"}, err: `unknown flag --batch (did you mean --batch-size or --test-batch-size?); "train -h" lists the flags`},
		{args: []string{"-epoch=2"}, err: `unknown flag -epoch (did you mean -epochs?); "train -h" lists the flags`},
		{args: []string{"--modle", "x"}, err: `unknown flag --modle (did you mean --model?); "train -h" lists the flags`},
		{args: []string{"--learning-rate", "0.1"}, err: `unknown flag --learning-rate; "train -h" lists the flags`},
		{args: []string{"-n", "4"}, err: `unknown flag -n (did you mean -np?); "train -h" lists the flags`},
		{args: []string{"-h"}, usage: true, errIsHelp: true},
		{args: []string{"--epochs"}, err: "flag needs an argument: -epochs"},
		// A value its flag's type does not parse: the flag as typed, the
		// value, and what it wants.
		{args: []string{"--threads", "two"}, err: `--threads "two": want a whole number`},
		{args: []string{"-seed=-1"}, err: `-seed "-1": want a whole number, 0 or more`},
		{args: []string{"--momentum", "1e-x"}, err: `--momentum "1e-x": want a number`},
		{args: []string{"--augment=maybe"}, err: `--augment "maybe": want true or false (or the flag alone for true)`},
		{args: []string{"-wait", "5"}, err: `-wait "5": want a duration with a unit, such as 250us, 30s or 2m`},
		{args: []string{"--threads", "99999999999999999999"}, err: `--threads "99999999999999999999": value out of range`},
		{args: []string{"--size", "x"}, err: `--size "x": want WxH`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			fs := trainFlags(&out)
			fs.Int("threads", 0, "")
			fs.Uint64("seed", 1, "")
			fs.Float64("momentum", 0, "")
			fs.Bool("augment", false, "")
			fs.Duration("wait", 0, "")
			fs.Func("size", "", func(string) error { return errors.New("want WxH") })
			err := Parse(fs, tc.args)
			switch {
			case tc.errIsHelp:
				if !errors.Is(err, flag.ErrHelp) {
					t.Fatalf("error %v, want flag.ErrHelp", err)
				}
			case tc.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.err != "" && (err == nil || err.Error() != tc.err):
				t.Fatalf("error %v\nwant %s", err, tc.err)
			}
			if printed := strings.Contains(out.String(), "usage of batch-size"); printed != tc.usage {
				t.Fatalf("usage printed: %v, want %v:\n%s", printed, tc.usage, out.String())
			}
		})
	}
}

func TestParseFlagsOnly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--epochs", "3"}, ""},
		{[]string{"extra", "--epochs", "3"}, `unexpected arguments ["extra" "--epochs" "3"]: train takes flags only ("train -h" lists them)`},
		{[]string{"--batch", "1"}, `unknown flag --batch (did you mean --batch-size or --test-batch-size?); "train -h" lists the flags`},
	} {
		err := ParseFlagsOnly(trainFlags(&bytes.Buffer{}), tc.args)
		if (tc.err == "" && err != nil) || (tc.err != "" && (err == nil || err.Error() != tc.err)) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
		}
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		out    string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{errors.New("--epochs -1: want at least 1"), 1, "train: --epochs -1: want at least 1\n"},
	} {
		var out bytes.Buffer
		if got := Status(&out, "train", tc.err); got != tc.status || out.String() != tc.out {
			t.Errorf("Status(%v) = %d, wrote %q; want %d, %q", tc.err, got, out.String(), tc.status, tc.out)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"np", "", 2}, {"modle", "model", 1}, {"ab", "ba", 1}, {"kitten", "sitting", 3}, {"lr", "lr", 0}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestVersion: -version prints the command's name, the gorun build (none
// in a test binary), the Go release and the platform, and stops the
// command as -h does; a flag set parsed again (infer's files among its
// flags) keeps the flag.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	fs := trainFlags(&out)
	if err := Parse(fs, []string{"--epochs", "3"}); err != nil {
		t.Fatal(err)
	}
	if err := Parse(fs, []string{"-version"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("error %v, want flag.ErrHelp", err)
	}
	want := "train (a build without version information: go build in gorun's git checkout, without -buildvcs=false, stamps one) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

// TestSetUsage: -h prints the usage line, what the command does, its
// examples and then its flags, in that order.
func TestSetUsage(t *testing.T) {
	var out bytes.Buffer
	fs := trainFlags(&out)
	SetUsage(fs, "train [flags]", "Trains a model.", "train --epochs 3", "gorun -np 2 train")
	if err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("error %v, want flag.ErrHelp", err)
	}
	text := out.String()
	last := -1
	for _, want := range []string{"usage: train [flags]\n\nTrains a model.\n", "\nexamples:\n  train --epochs 3\n  gorun -np 2 train\n", "\nflags:\n", "-batch-size", "-version"} {
		at := strings.Index(text, want)
		if at <= last {
			t.Fatalf("usage lacks %q after what came before it (at %d, after %d):\n%s", want, at, last, text)
		}
		last = at
	}
	if !strings.HasPrefix(text, "usage: ") {
		t.Errorf("usage does not begin with its usage line:\n%s", text)
	}
}

func TestNearest(t *testing.T) {
	words := []string{"collectives", "train", "data", "cluster", "model"}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"colectives", []string{"collectives"}},
		{"tran", []string{"train"}},
		{"collective", []string{"collectives"}},
		{"modle", []string{"model"}},
		{"foo", nil},
	} {
		if got := Nearest(words, tc.name); !slices.Equal(got, tc.want) {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
