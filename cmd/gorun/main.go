// Command gorun starts a job's ranks on this machine, like mpirun or torchrun:
//
//	gorun -np 4 ./train --epochs 3
//
// Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT (a free port, reserved without races) and a fresh
// job token; comm.Init reads them. Output lines are labelled "[rank] ".
// When a rank fails, the others are stopped and gorun exits with the failed
// rank's status, naming it. Under Slurm no launcher is needed: srun starts
// the ranks and comm.Init reads Slurm's variables.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gorun/gorun/comm/launch"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 1, "number of ranks to start")
	noPrefix := fs.Bool("no-prefix", false, "do not label output lines with \"[rank] \"")
	timeout := fs.Duration("timeout", 0, "stop the whole job after this long (0: no limit)")
	grace := fs.Duration("grace", 3*time.Second, "after a rank fails, how long the others get to exit before SIGTERM (and again before SIGKILL)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: gorun [flags] PROGRAM [ARGS...]\n\nStarts PROGRAM as -np ranks on this machine.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	res, err := launch.Run(context.Background(), launch.Config{
		NP:             *np,
		Program:        fs.Arg(0),
		Args:           fs.Args()[1:],
		Stdin:          stdin,
		Stdout:         stdout,
		Stderr:         stderr,
		NoPrefix:       *noPrefix,
		Timeout:        *timeout,
		Grace:          *grace,
		ForwardSignals: true,
	})
	if err != nil {
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		return 2
	}
	switch {
	case res.First != nil:
		fmt.Fprintf(stderr, "gorun: job failed: %v\n", res.First)
		return res.First.Status()
	case res.Err != nil:
		fmt.Fprintf(stderr, "gorun: %v\n", res.Err)
		return 124
	}
	return 0
}
