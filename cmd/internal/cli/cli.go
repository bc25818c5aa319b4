// Package cli holds what the commands share on their command lines:
// flag parsing that answers a mistyped flag in one line, with the flags
// it may have meant, instead of the whole usage — which, under gorun,
// every rank of the job would print.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/comm"
)

// Parse parses args into fs. -h and -help print fs's usage (to its
// output) and return flag.ErrHelp; so does -version (which Parse adds to
// fs), printing the gorun build the command was made from (VersionLine)
// instead. A flag fs does not define is an error that names it as typed,
// with up to three defined flags close to it and a pointer to -h; other
// errors are the flag package's own. The usage is printed only for -h.
func Parse(fs *flag.FlagSet, args []string) error {
	if fs.Lookup("version") == nil { // (a second Parse of fs finds it)
		fs.Bool("version", false, "print the gorun build this command was made from (every rank of a job must run the same), and exit")
	}
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil && fs.Lookup("version").Value.String() == "true":
		fmt.Fprintln(out, VersionLine(fs.Name()))
		return flag.ErrHelp
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	}
	if msg, ok := badValue(fs, args, err); ok {
		return errors.New(msg)
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return err
	}
	dashes := typedDashes(args, name)
	msg := fmt.Sprintf("unknown flag %s%s", dashes, name)
	if near := Suggest(fs, name); len(near) > 0 {
		for i := range near {
			near[i] = dashes + near[i]
		}
		msg += " (did you mean " + OrList(near) + "?)"
	}
	return fmt.Errorf("%s; %q lists the flags", msg, fs.Name()+" -h")
}

// SetUsage makes fs's -h print a usage line (the command's name and what
// it takes, e.g. "gorun [flags] PROGRAM [ARGS...]"), a sentence or two on
// what the command does, optional examples, one a line, and then the flags:
// what a user of torchrun or mpirun sees for -h, where the flag package
// alone prints "Usage of NAME:" and the flags.
func SetUsage(fs *flag.FlagSet, synopsis, about string, examples ...string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\n%s\n", synopsis, about)
		if len(examples) > 0 {
			fmt.Fprintf(w, "\nexamples:\n")
			for _, e := range examples {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
		fmt.Fprintf(w, "\nflags:\n")
		fs.PrintDefaults()
	}
}

// badValue rewrites the flag package's error for a value its flag
// refused ("invalid value "x" for flag -lr: parse error") as the flag, as
// typed, the value, and why: what the flag's type wants where the
// package says only "parse error" (`--lr "x": want a number`), else the
// reason given (a flag.Func's, "value out of range").
func badValue(fs *flag.FlagSet, args []string, err error) (string, bool) {
	var value, name, reason string
	// The package's two wordings: `invalid value "x" for flag -lr: ...`
	// and `invalid boolean value "x" for -augment: ...`.
	for _, form := range [][2]string{{"invalid value ", " for flag -"}, {"invalid boolean value ", " for -"}} {
		rest, ok := strings.CutPrefix(err.Error(), form[0])
		if !ok {
			continue
		}
		q, after, ok1 := strings.Cut(rest, form[1])
		n, r, ok2 := strings.Cut(after, ": ")
		if ok1 && ok2 {
			value, name, reason = q, n, r
		}
		break
	}
	f := fs.Lookup(name)
	if f == nil {
		return "", false
	}
	if getter, ok := f.Value.(flag.Getter); ok && reason == "parse error" {
		switch getter.Get().(type) {
		case bool:
			reason = "want true or false (or the flag alone for true)"
		case int, int64:
			reason = "want a whole number"
		case uint, uint64:
			reason = "want a whole number, 0 or more"
		case float64:
			reason = "want a number"
		case time.Duration:
			reason = "want a duration with a unit, such as 250us, 30s or 2m"
		}
	}
	return fmt.Sprintf("%s%s %s: %s", typedDashes(args, name), name, value, reason), true
}

// VersionLine is what -version prints for the command name: the gorun
// build (comm.Build), the Go release and the platform.
func VersionLine(name string) string {
	b := comm.Build()
	if b == "" {
		b = "(a build without version information: go build in gorun's git checkout, without -buildvcs=false, stamps one)"
	}
	return fmt.Sprintf("%s %s %s %s/%s", name, b, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// ParseFlagsOnly is Parse for a command that takes flags and no other
// arguments: one left over (a stray word, after which the flag package
// leaves the rest unread) is an error naming what was left.
func ParseFlagsOnly(fs *flag.FlagSet, args []string) error {
	if err := Parse(fs, args); err != nil {
		return err
	}
	return NoArguments(fs)
}

// NoArguments is the error for the arguments fs left after its flags,
// nil when there are none.
func NoArguments(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: %s takes flags only (%q lists them)", fs.Args(), fs.Name(), fs.Name()+" -h")
	}
	return nil
}

// SignalContext returns a context that ends at the first SIGINT or
// SIGTERM, for a command's main. The signals stay caught until the
// process exits: restored to their default action when run returned
// (signal.NotifyContext's stop), a second one would kill the process
// before it said why it stopped — and under gorun a rank gets two at
// once, Ctrl-C reaching every process of the terminal's group and gorun
// forwarding it too.
func SignalContext() context.Context {
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctx
}

// Status is a command's exit status for the error its run returned,
// which it writes to w after the command's name: 0 for none and for -h
// (whose usage Parse printed), 1 for any other.
func Status(w io.Writer, name string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
	return 1
}

// typedDashes returns the dashes the user put before the flag name: "--"
// where an argument reads --name or --name=…, else "-".
func typedDashes(args []string, name string) string {
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return "--"
		}
	}
	return "-"
}

// OrList joins words as "a", "a or b", "a, b or c".
func OrList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// Suggest returns up to three of fs's flags close to name, closest
// first (Nearest).
func Suggest(fs *flag.FlagSet, name string) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return Nearest(names, name)
}

// Nearest returns up to three of words close to name, closest first:
// those it begins or that begin with it, those that contain it, then
// those a few edits away (editDistance up to a third of name's length,
// at least one). A name of one or two letters matches only by edits.
func Nearest(words []string, name string) []string {
	type candidate struct {
		word  string
		score int
	}
	var found []candidate
	limit := max(1, len(name)/3)
	for _, w := range words {
		score := -1
		switch {
		case len(name) >= 3 && (strings.HasPrefix(w, name) || strings.HasPrefix(name, w)):
			score = 0
		case len(name) >= 3 && strings.Contains(w, name):
			score = 1
		default:
			if d := editDistance(name, w); d <= limit {
				score = 1 + d
			}
		}
		if score >= 0 {
			found = append(found, candidate{w, score})
		}
	}
	slices.SortStableFunc(found, func(a, b candidate) int { return a.score - b.score })
	var near []string
	for _, c := range found[:min(3, len(found))] {
		near = append(near, c.word)
	}
	return near
}

// editDistance is the number of single-letter insertions, deletions,
// substitutions and swaps of neighbours that turn a into b (the optimal
// string alignment distance: "modle" is one from "model").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
