// Command gorun starts a job's ranks on this machine, like mpirun or torchrun:
//
//	gorun -np 4 ./train --epochs 3
//
// Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT (a free port, reserved without races) and a fresh
// job token; comm.Init reads them. Output lines are labelled "[rank] ".
// When a rank fails, the others are stopped and gorun exits with the failed
// rank's status, naming it; -max-restarts starts them all again, and
// -on-failure shrink lets the others go on without it. Under Slurm no launcher is needed: srun starts
// the ranks and comm.Init reads Slurm's variables. Across machines without
// Slurm, run gorun on each with the same token, as torchrun's multi-node
// mode:
//
//	export GORUN_TOKEN=$(openssl rand -hex 16)    # the same on every node
//	gorun -nnodes 2 -node-rank 0 -master 10.0.0.1:29500 -np 4 ./train   # on 10.0.0.1
//	gorun -nnodes 2 -node-rank 1 -master 10.0.0.1:29500 -np 4 ./train   # on the other
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/cmd/internal/cli"
	"github.com/gorun/gorun/comm/launch"
	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 1, "number of ranks to start")
	noPrefix := fs.Bool("no-prefix", false, "do not label output lines with \"[rank] \"")
	timeout := durationFlag(fs, "timeout", 0, "stop the whole job after this long, e.g. 90s or 2h (0: no limit)")
	grace := durationFlag(fs, "grace", 3*time.Second, "after a rank fails, how long the others get to exit before SIGTERM (and again before SIGKILL)")
	nnodes := fs.Int("nnodes", 1, "machines in the job, each running gorun with the same -np, -nnodes, -master and GORUN_TOKEN (as torchrun --nnodes)")
	nodeRank := fs.Int("node-rank", 0, "with -nnodes: this machine's number, 0 … nnodes−1 (its ranks are node-rank·np … node-rank·np+np−1)")
	master := fs.String("master", "", "with -nnodes: HOST:PORT where node 0 serves the rendezvous store (an address of node 0 the others reach)")
	maxRestarts := fs.Int("max-restarts", 0, "when a rank fails, stop the job and start every rank again (fresh token and port; ranks see GORUN_RESTART=n), up to this many times (as torchrun --max-restarts; train --resume auto continues from the last checkpoint)")
	noStatus := fs.Bool("no-status", false, "do not keep rank 0's progress bar at the bottom of the terminal (shown only when gorun's output is a terminal: rank 0 writes it to GORUN_STATUS_FD, as train does with --progress auto)")
	onFailure := fs.String("on-failure", "", "what the job does when a rank fails: abort (stop every rank), restart (as -max-restarts, 3 unless given), or shrink (the others go on without it: train --on-failure shrink; gorun exits 0 when they finish well); the ranks see GORUN_ON_FAILURE (default abort, restart with -max-restarts)")
	cli.SetUsage(fs, "gorun [flags] PROGRAM [ARGS...]",
		"Starts PROGRAM as -np ranks on this machine (with -nnodes, one machine's share of a\njob across several), gives them the job's rendezvous in GORUN_* variables, labels\ntheir output, and stops the job when a rank fails, naming it.",
		"gorun -np 4 bin/train",
		"GORUN_TOKEN=$SECRET gorun -np 4 -nnodes 2 -node-rank 0 -master 10.0.0.1:29500 bin/train   # on 10.0.0.1; -node-rank 1 on the other",
		"gorun -np 4 -max-restarts 3 bin/train --save run.safetensors --resume auto")
	if err := cli.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "gorun:", err)
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	explicitRestarts := set["max-restarts"]
	if err := nodesFromLauncher(os.Getenv, set, nnodes, nodeRank, master); err != nil {
		fmt.Fprintln(stderr, "gorun:", err)
		return 2
	}
	switch *onFailure {
	case "":
		*onFailure = "abort"
		if *maxRestarts > 0 {
			*onFailure = "restart"
		}
	case "abort", "shrink":
		if *maxRestarts > 0 && *onFailure == "abort" {
			fmt.Fprintf(stderr, "gorun: -on-failure abort with -max-restarts %d: a restart is not an abort; give one of them\n", *maxRestarts)
			return 2
		}
	case "restart":
		if !explicitRestarts {
			*maxRestarts = 3
		}
	default:
		fmt.Fprintf(stderr, "gorun: -on-failure %q: want abort, restart or shrink\n", *onFailure)
		return 2
	}
	switch {
	case *nnodes < 1:
		fmt.Fprintf(stderr, "gorun: -nnodes %d: want 1 or more\n", *nnodes)
		return 2
	case *maxRestarts < 0:
		fmt.Fprintf(stderr, "gorun: -max-restarts %d: want 0 or more\n", *maxRestarts)
		return 2
	case *maxRestarts > 0 && *nnodes > 1:
		fmt.Fprintln(stderr, "gorun: -max-restarts works on one machine (-nnodes 1); across machines restart the job around srun (examples/slurm)")
		return 2
	}
	cfg := launch.Config{
		NP:             *np,
		Program:        fs.Arg(0),
		Args:           fs.Args()[1:],
		Stdin:          stdin,
		Stdout:         stdout,
		Stderr:         stderr,
		NoPrefix:       *noPrefix,
		Grace:          *grace,
		ForwardSignals: true,
		Nodes:          *nnodes,
		NodeRank:       *nodeRank,
		Master:         *master,
		Token:          os.Getenv("GORUN_TOKEN"),
		KeepGoing:      *onFailure == "shrink",
	}
	if term := statusTerminal(stdout, *noStatus); term != nil {
		// Rank 0's progress bar stays at the bottom; every line, the
		// ranks' and gorun's own, goes above it.
		defer term.Close()
		cfg.Stdout, cfg.Status = term, term.SetStatus
		if sameFile(stdout, stderr) {
			cfg.Stderr, stderr = term, term
		}
	}
	var deadline time.Time
	if *timeout > 0 {
		deadline = time.Now().Add(*timeout)
	}
	var failures []string
	for restart := 0; ; restart++ {
		cfg.Env = []string{"GORUN_RESTART=" + strconv.Itoa(restart), "GORUN_ON_FAILURE=" + *onFailure}
		cfg.Timeout = *timeout
		if restart > 0 && !deadline.IsZero() {
			// One limit for the whole run, restarts included.
			cfg.Timeout = max(time.Until(deadline), time.Millisecond)
		}
		res, err := launch.Run(context.Background(), cfg)
		if err != nil {
			fmt.Fprintf(stderr, "gorun: %v\n", err)
			return 2
		}
		switch {
		case res.Err != nil: // stopped from outside: no restart
			fmt.Fprintf(stderr, "gorun: %v\n", res.Err)
			return exitStatus(res.Err)
		case res.First == nil:
			if len(res.Lost) > 0 {
				lost := make([]string, len(res.Lost))
				for i, l := range res.Lost {
					lost[i] = l.Error()
				}
				fmt.Fprintf(stderr, "gorun: the job finished without %d of its %d ranks (-on-failure shrink): %s\n", len(res.Lost), cfg.NP*max(cfg.Nodes, 1), strings.Join(lost, "; "))
			}
			return 0
		}
		failures = append(failures, fmt.Sprintf("run %d: %v", restart+1, res.First))
		if restart == *maxRestarts {
			if restart == 0 {
				fmt.Fprintf(stderr, "gorun: job failed: %v\n", res.First)
			} else {
				fmt.Fprintf(stderr, "gorun: job failed %d times, %d restarts allowed (-max-restarts): %s\n", restart+1, *maxRestarts, strings.Join(failures, "; "))
			}
			return res.First.Status()
		}
		fmt.Fprintf(stderr, "gorun: %v; restarting every rank (restart %d of %d)\n", res.First, restart+1, *maxRestarts)
	}
}

// statusTerminal returns a StatusTerminal over stdout when it is a
// terminal and the status line is wanted; else nil.
func statusTerminal(stdout io.Writer, off bool) *launch.StatusTerminal {
	f, ok := stdout.(*os.File)
	if off || !ok {
		return nil
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return nil // not a terminal
	}
	return launch.NewStatusTerminal(f, int(ws.Col))
}

// sameFile reports whether a and b are the same open file (stdout and
// stderr both on one terminal).
func sameFile(a, b io.Writer) bool {
	fa, ok1 := a.(*os.File)
	fb, ok2 := b.(*os.File)
	if !ok1 || !ok2 {
		return false
	}
	sa, err1 := fa.Stat()
	sb, err2 := fb.Stat()
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// exitStatus is gorun's exit code for a job stopped from outside: 128 plus
// the signal's number for a signal (as shells and Slurm report it), 124
// for the timeout (as timeout(1)) and anything else.
func exitStatus(err error) int {
	var ie *launch.InterruptError
	if errors.As(err, &ie) {
		return ie.Status()
	}
	return 124
}

// durationFlag is fs.Duration with an error that says what a duration
// looks like: flag.Duration answers a bare number with "parse error".
func durationFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Func(name, fmt.Sprintf("%s (default %v)", usage, value), func(v string) error {
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("want a duration with a unit, such as 30s, 5m or 1h30m")
		}
		if parsed < 0 {
			return errors.New("want 0 or more")
		}
		d = parsed
		return nil
	})
	return &d
}
