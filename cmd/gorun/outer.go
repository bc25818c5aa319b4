package main

import (
	"fmt"
	"net"
	"strconv"

	"github.com/gorun/gorun/comm"
)

// nodesFromLauncher fills, for a gorun that srun started as one of several
// tasks, the multi-node settings the flags left out (set: the flags
// given): with one task per node (srun --ntasks-per-node=1 gorun -np N
// PROG, as torchrun users start one agent per node), a job over the
// step's nodes — -nnodes the step's tasks, -node-rank this task's number,
// -master the step's first host and a port derived from the job and step
// ids. With more tasks than nodes each gorun would start a job of its own
// on its node, and it refuses, saying how to start either; so it does
// as one of several ranks mpirun (or another launcher) started. getenv
// reads the environment.
func nodesFromLauncher(getenv func(string) string, set map[string]bool, nnodes, nodeRank *int, master *string) error {
	if set["nnodes"] {
		return nil // the flags say
	}
	for _, l := range []struct{ size, rank, by string }{
		{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "mpirun"},
		{"WORLD_SIZE", "RANK", "a launcher (gorun, torchrun)"},
	} {
		if n, err := strconv.Atoi(getenv(l.size)); err == nil && n > 1 {
			return fmt.Errorf("started by %s as rank %s of %d (%s): it already starts a process per rank, and each gorun would start a job of its own. Start the program itself under it, without gorun, or one gorun per machine with -nnodes",
				l.by, getenv(l.rank), n, l.size)
		}
	}
	if !comm.InSlurmStep(getenv) {
		return nil // not a task srun started
	}
	tasks, err1 := strconv.Atoi(getenv("SLURM_NTASKS"))
	task, err2 := strconv.Atoi(getenv("SLURM_PROCID"))
	if err1 != nil || err2 != nil || tasks < 2 {
		return nil
	}
	nodes, err := strconv.Atoi(getenv("SLURM_STEP_NUM_NODES"))
	if err != nil {
		nodes, err = strconv.Atoi(getenv("SLURM_NNODES"))
	}
	if err != nil || nodes != tasks {
		return fmt.Errorf("started by srun as task %d of %d on %s: srun already starts a process per task, and each gorun would start a job of its own. Start one gorun per node (srun --ntasks-per-node=1 gorun -np N PROGRAM: the nodes make one job) or the program itself (srun PROGRAM, without gorun)",
			task, tasks, nodesText(getenv("SLURM_STEP_NUM_NODES"), getenv("SLURM_NNODES")))
	}
	*nnodes, *nodeRank = tasks, task
	if !set["master"] {
		host, port, err := comm.SlurmMaster(getenv)
		if err != nil {
			return fmt.Errorf("started by srun on %d nodes: %w (or give -master HOST:PORT)", nodes, err)
		}
		*master = net.JoinHostPort(host, strconv.Itoa(port))
	}
	if getenv("GORUN_TOKEN") == "" {
		return fmt.Errorf("started by srun on %d nodes, one job across them: its nodes prove a shared token to each other; export GORUN_TOKEN=$(openssl rand -hex 16) in the batch script before srun, which passes it to every task", nodes)
	}
	return nil
}

// nodesText says how many nodes the first of counts that is set gives:
// "1 node", "3 nodes", or "nodes" when none is.
func nodesText(counts ...string) string {
	for _, v := range counts {
		switch {
		case v == "1":
			return "1 node"
		case v != "":
			return v + " nodes"
		}
	}
	return "nodes"
}
