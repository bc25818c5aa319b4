package main

import (
	"strings"
	"testing"
)

// TestNodesFromLauncher: a gorun srun started as one task per node makes one
// job across the step's nodes; started as several tasks on a node, or as
// one of several ranks of mpirun or another launcher, it refuses, saying
// how to start the job; a gorun nothing started, or one told -nnodes, is
// left as it is.
func TestNodesFromLauncher(t *testing.T) {
	step := map[string]string{"SLURM_STEP_ID": "3", "SLURM_JOB_ID": "41", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
		"SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "n[7-8]", "SLURM_JOB_NODELIST": "n[1-8]", "GORUN_TOKEN": "t"}
	with := func(changes map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range step {
			env[k] = v
		}
		for k, v := range changes {
			env[k] = v
		}
		return env
	}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		set    map[string]bool
		nnodes int
		rank   int
		master string // "" where it is left as it was
		err    string
	}{
		{name: "one task per node", env: step, nnodes: 2, rank: 1, master: "n7:"},
		{name: "the master given", env: step, set: map[string]bool{"master": true}, nnodes: 2, rank: 1},
		{name: "-nnodes given", env: step, set: map[string]bool{"nnodes": true}, nnodes: 1},
		{name: "not under srun", env: with(map[string]string{"SLURM_STEP_ID": ""}), nnodes: 1},
		{name: "one task", env: with(map[string]string{"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}), nnodes: 1},
		{name: "two tasks on a node", env: with(map[string]string{"SLURM_STEP_NUM_NODES": "1"}), nnodes: 1,
			err: "started by srun as task 1 of 2 on 1 node: srun already starts a process per task, and each gorun would start a job of its own. Start one gorun per node (srun --ntasks-per-node=1"},
		{name: "no token", env: with(map[string]string{"GORUN_TOKEN": ""}), nnodes: 2, rank: 1, master: "n7:",
			err: "export GORUN_TOKEN=$(openssl rand -hex 16) in the batch script before srun"},
		{name: "under mpirun", env: map[string]string{"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}, nnodes: 1,
			err: "started by mpirun as rank 1 of 2 (OMPI_COMM_WORLD_SIZE): it already starts a process per rank, and each gorun would start a job of its own"},
		{name: "under mpirun, one rank", env: map[string]string{"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}, nnodes: 1},
		{name: "under another launcher", env: map[string]string{"WORLD_SIZE": "4", "RANK": "3"}, nnodes: 1,
			err: "started by a launcher (gorun, torchrun) as rank 3 of 4 (WORLD_SIZE)"},
		{name: "under mpirun with -nnodes", env: map[string]string{"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}, set: map[string]bool{"nnodes": true}, nnodes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nnodes, rank, master := 1, 0, ""
			err := nodesFromLauncher(func(k string) string { return tc.env[k] }, tc.set, &nnodes, &rank, &master)
			if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			if nnodes != tc.nnodes || rank != tc.rank || !strings.HasPrefix(master, tc.master) || (tc.master == "") != (master == "") {
				t.Errorf("-nnodes %d -node-rank %d -master %q, want %d, %d, %q…", nnodes, rank, master, tc.nnodes, tc.rank, tc.master)
			}
		})
	}
}
