package comm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/shm"
)

func TestResolveSettings(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		opts    []Option
		want    Settings // only the fields checked below
		wantErr string
	}{
		{name: "no launcher: one process", env: nil,
			want: Settings{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, MasterPort: DefaultMasterPort, Source: "single"}},
		{name: "gorun/torchrun", env: map[string]string{"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "1234"},
			want: Settings{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, MasterAddr: "node1", MasterPort: 1234, Source: "gorun/torchrun"}},
		{name: "torchrun's agent store", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "29400", "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "3"},
			want: Settings{Rank: 1, Size: 2, LocalRank: 0, LocalSize: 1, MasterAddr: "a", MasterPort: 29400, Source: "gorun/torchrun", AgentStore: true, Attempt: 3}},
		{name: "torchrun without the agent store", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "TORCHELASTIC_USE_AGENT_STORE": "False"},
			want: Settings{Rank: 1, Size: 2, LocalRank: 0, LocalSize: 1, MasterAddr: "a", MasterPort: DefaultMasterPort, Source: "gorun/torchrun"}},
		{name: "torchrun wins over slurm", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "SLURM_PROCID": "0", "SLURM_NTASKS": "8"},
			want: Settings{Rank: 1, Size: 2, LocalRank: 0, LocalSize: 1, MasterAddr: "a", MasterPort: DefaultMasterPort, Source: "gorun/torchrun"}},
		{name: "slurm with compressed nodelist", env: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
			"SLURM_TASKS_PER_NODE": "2(x4)", "SLURM_JOB_NODELIST": "gpu[01-04,07],login2", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"},
			want: Settings{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 2, MasterAddr: "gpu01", MasterPort: derivePort("77.0"), Source: "slurm"}},
		{name: "slurm: a step on some of the job's nodes", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "4",
			"SLURM_JOB_NODELIST": "n[1-4]", "SLURM_STEP_NODELIST": "n[3-4]", "SLURM_JOB_ID": "9"},
			want: Settings{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 1, MasterAddr: "n3", MasterPort: derivePort("9.4"), Source: "slurm"}},
		{name: "slurm: older releases' SLURM_STEPID", env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEPID": "3",
			"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "9"},
			want: Settings{Rank: 1, Size: 2, LocalRank: 0, LocalSize: 1, MasterAddr: "n1", MasterPort: derivePort("9.3"), Source: "slurm"}},
		{name: "slurm: MASTER_ADDR overrides the nodelist", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "1", "SLURM_JOB_NODELIST": "n[1-2]", "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "4000"},
			want: Settings{Rank: 0, Size: 2, LocalRank: 0, LocalSize: 1, MasterAddr: "10.0.0.9", MasterPort: 4000, Source: "slurm"}},
		{name: "open mpi on one node", env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "prterun-x-1@1"},
			want: Settings{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: derivePort("prterun-x-1@1"), Source: "openmpi"}},
		{name: "options override the environment", env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a"},
			opts: []Option{WithRank(0, 3), WithMaster("b", 99)},
			want: Settings{Rank: 0, Size: 3, LocalRank: 0, LocalSize: 1, MasterAddr: "b", MasterPort: 99, Source: "options"}},
		{name: "RANK without WORLD_SIZE", env: map[string]string{"RANK": "1"}, wantErr: "RANK is set but WORLD_SIZE is not"},
		{name: "rank outside the world", env: map[string]string{"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "a"}, wantErr: "rank 4 from gorun/torchrun is outside the world of size 4"},
		{name: "not a number", env: map[string]string{"RANK": "one", "WORLD_SIZE": "4"}, wantErr: `RANK="one" is not an integer`},
		{name: "no master", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, wantErr: "MASTER_ADDR is not set"},
		{name: "bad port", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "70000"}, wantErr: "MASTER_PORT=70000"},
		{name: "slurm without ntasks", env: map[string]string{"SLURM_PROCID": "0"}, wantErr: "SLURM_NTASKS is not"},
		{name: "slurm bad nodelist", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEPID": "0", "SLURM_JOB_NODELIST": "n[1-"}, wantErr: "SLURM_JOB_NODELIST"},
		// sbatch's script, not a task srun started (no step): one process
		// of a job of 2 tasks would wait for the other until the join's
		// deadline.
		{name: "slurm batch script", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "7"},
			wantErr: "SLURM_PROCID is set but not SLURM_STEP_ID: this is Slurm's batch script itself, one process, where the job asks for 2 tasks (SLURM_NTASKS): start them with srun (srun PROGRAM ...)"},
		{name: "slurm batch script of one task", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_ID": "7"},
			want: Settings{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, MasterPort: DefaultMasterPort, Source: "slurm"}},
		{name: "open mpi across nodes needs MASTER_ADDR", env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, wantErr: "Open MPI spans several nodes"},
		{name: "bad timeout", env: map[string]string{"GORUN_TIMEOUT": "soon"}, wantErr: `GORUN_TIMEOUT="soon"`},
		{name: "socket buffer too small", env: map[string]string{"GORUN_SOCKET_BUFFER": "4096"}, wantErr: "GORUN_SOCKET_BUFFER=4096: 4096 bytes is below the 65536-byte minimum"},
		{name: "direct frames too small", env: map[string]string{"GORUN_DIRECT_BYTES": "4096"}, wantErr: fmt.Sprintf("GORUN_DIRECT_BYTES=4096: want at least %d bytes, or -1 for none", shm.MinDirectBytes)},
		{name: "bad linear reduce size", env: map[string]string{"GORUN_LINEAR_REDUCE_BYTES": "small"}, wantErr: `GORUN_LINEAR_REDUCE_BYTES="small" is not an integer`},
		{name: "bad tree scatter size", env: map[string]string{"GORUN_TREE_SCATTER_BYTES": "64K"}, wantErr: `GORUN_TREE_SCATTER_BYTES="64K" is not an integer`},
		{name: "bad compression", env: map[string]string{"GORUN_COMPRESS": "zip"}, wantErr: `GORUN_COMPRESS="zip"`},
		{name: "zero join timeout", env: map[string]string{"GORUN_JOIN_TIMEOUT": "0"}, wantErr: "GORUN_JOIN_TIMEOUT=0s (the join's timeout): want a positive duration"},
		{name: "negative timeout", env: map[string]string{"GORUN_TIMEOUT": "-1s"}, wantErr: "GORUN_TIMEOUT=-1s (each wait's timeout): want a positive duration"},
		{name: "chunk below a page", env: map[string]string{"GORUN_CHUNK_BYTES": "7"}, wantErr: "GORUN_CHUNK_BYTES=7: want at least 4096 bytes, or 0 for the default"},
		{name: "negative chunk", env: map[string]string{"GORUN_CHUNK_BYTES": "-1"}, wantErr: "GORUN_CHUNK_BYTES=-1: want at least 4096 bytes"},
		{name: "small size below -1", env: map[string]string{"GORUN_SMALL_BYTES": "-5"}, wantErr: "GORUN_SMALL_BYTES=-5: want a size in bytes, 0 for the default or -1 for never"},
		{name: "one-shot size below -1", env: map[string]string{"GORUN_ONESHOT_BYTES": "-2"}, wantErr: "GORUN_ONESHOT_BYTES=-2"},
		{name: "halving size below -1", env: map[string]string{"GORUN_HALVING_BYTES": "-2"}, wantErr: "GORUN_HALVING_BYTES=-2"},
		{name: "Bruck size below -1", env: map[string]string{"GORUN_BRUCK_BYTES": "-2"}, wantErr: "GORUN_BRUCK_BYTES=-2"},
		{name: "linear reduce size below -1", env: map[string]string{"GORUN_LINEAR_REDUCE_BYTES": "-2"}, wantErr: "GORUN_LINEAR_REDUCE_BYTES=-2"},
		{name: "tree scatter size below -1", env: map[string]string{"GORUN_TREE_SCATTER_BYTES": "-2"}, wantErr: "GORUN_TREE_SCATTER_BYTES=-2"},
		{name: "direct size below -1", env: map[string]string{"GORUN_DIRECT_BYTES": "-3"}, wantErr: "GORUN_DIRECT_BYTES=-3"},
		{name: "negative stall", env: map[string]string{"GORUN_STALL": "-5s"}, wantErr: "GORUN_STALL=-5s: want 0 (off) or a positive duration"},
		{name: "bad stall", env: map[string]string{"GORUN_STALL": "later"}, wantErr: `GORUN_STALL="later"`},
		{name: "bad all-reduce choice", env: map[string]string{"GORUN_ALGO": "tree"}, wantErr: `GORUN_ALGO="tree": want auto, flat or hierarchical`},
		{name: "bad link between hosts", env: map[string]string{"GORUN_NET": "fast"}, wantErr: `GORUN_NET="fast": want auto, none, or STEP,RATE like 50us,10gbit`},
		{name: "bad connection choice", env: map[string]string{"GORUN_CONNECT": "mesh"}, wantErr: `GORUN_CONNECT="mesh": want auto, eager or lazy`},
		{name: "bad agent store flag", env: map[string]string{"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_USE_AGENT_STORE": "yes"}, wantErr: `TORCHELASTIC_USE_AGENT_STORE="yes": want True or False`},
		{name: "bad launcher pid", env: map[string]string{"GORUN_LAUNCHER_PID": "gorun"}, wantErr: `GORUN_LAUNCHER_PID="gorun"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveSettings(func(k string) string { return tc.env[k] }, tc.opts...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if got.Rank != w.Rank || got.Size != w.Size || got.LocalRank != w.LocalRank || got.LocalSize != w.LocalSize ||
				got.MasterAddr != w.MasterAddr || got.MasterPort != w.MasterPort || got.Source != w.Source ||
				got.AgentStore != w.AgentStore || got.Attempt != w.Attempt {
				t.Errorf("got %+v\nwant %+v", got, w)
			}
		})
	}
}

func TestResolveSettingsTuning(t *testing.T) {
	env := map[string]string{"GORUN_TIMEOUT": "90", "GORUN_JOIN_TIMEOUT": "2m", "GORUN_SMALL_BYTES": "-1", "GORUN_CHUNK_BYTES": "8192", "GORUN_COMPRESS": "s2", "GORUN_TOKEN": "abc",
		"GORUN_STALL": "0", "GORUN_LAUNCHER_PID": "4242", "GORUN_DIRECT_BYTES": "-1"}
	s, err := ResolveSettings(func(k string) string { return env[k] }, WithChunkBytes(4096))
	if err != nil {
		t.Fatal(err)
	}
	if o, err := ResolveSettings(func(k string) string { return env[k] }, WithDirectBytes(1<<20)); err != nil || o.DirectBytes != 1<<20 {
		t.Errorf("WithDirectBytes(1 MiB) over GORUN_DIRECT_BYTES=-1: %d, %v", o.DirectBytes, err)
	}
	if _, err := ResolveSettings(func(k string) string { return env[k] }, WithDirectBytes(100)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("want at least %d bytes", shm.MinDirectBytes)) {
		t.Errorf("WithDirectBytes(100): %v, want the minimum named", err)
	}
	if s.Timeout != 90*time.Second || s.JoinTimeout != 2*time.Minute || s.SmallBytes != -1 || s.ChunkBytes != 4096 || !s.Compress || string(s.Token) != "abc" ||
		s.StallAfter != 0 || s.LauncherPID != 4242 || s.DirectBytes != -1 {
		t.Errorf("got %+v", s)
	}
}

// TestDerivePortAvoidsEphemeralRange checks that derived rendezvous ports stay
// below Linux's default ephemeral range (32768-60999), where an outgoing
// connection of any process on the node could already hold them, and that
// consecutive Slurm jobs spread over the range.
func TestDerivePortAvoidsEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for job := range 2000 {
		id := strconv.Itoa(100000+job) + ".0"
		p := derivePort(id)
		if p < 1024 || p >= 32768 {
			t.Fatalf("derivePort(%q) = %d, outside [1024, 32768)", id, p)
		}
		seen[p] = true
	}
	if len(seen) < 1800 { // a uniform hash gives about 1880
		t.Errorf("2000 job ids map to only %d distinct ports", len(seen))
	}
	t.Logf("2000 job ids, %d distinct ports", len(seen))
}

// TestInterfaceVariables: the interface is named by GORUN_SOCKET_IFNAME,
// else NCCL_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME, as a job script
// written for PyTorch sets them.
func TestInterfaceVariables(t *testing.T) {
	for _, c := range []struct {
		env            map[string]string
		spec, variable string
	}{
		{map[string]string{}, "", ""},
		{map[string]string{"GLOO_SOCKET_IFNAME": "eth1"}, "eth1", "GLOO_SOCKET_IFNAME"},
		{map[string]string{"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "^docker,lo"}, "^docker,lo", "NCCL_SOCKET_IFNAME"},
		{map[string]string{"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "ib", "GORUN_SOCKET_IFNAME": "=eth0"}, "=eth0", "GORUN_SOCKET_IFNAME"},
	} {
		s, err := ResolveSettings(func(k string) string { return c.env[k] })
		if err != nil || s.IfName != c.spec || s.IfNameVar != c.variable {
			t.Errorf("%v: %q from %q (%v); want %q from %q", c.env, s.IfName, s.IfNameVar, err, c.spec, c.variable)
		}
	}
}
