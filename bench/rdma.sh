#!/bin/bash
# The RDMA transport on a machine that has an RDMA device: checks that a
# job really uses it, runs the rdma package's tests and comm's collective
# matrix over it, then the all-reduce benchmark over RDMA and over TCP side
# by side (np 2 and 4, 8 B to 64 MiB). Nobody has run this on hardware yet:
# no machine this project was written on has an RDMA device.
#
#   bash bench/rdma.sh                          # first device with an active port
#   GORUN_RDMA_DEVICE=mlx5_0:1 bash bench/rdma.sh
#   GORUN_RDMA_GID_INDEX=3 bash bench/rdma.sh   # RoCE v2 usually needs 1 or 3 (see show_gids)
#
# Without an InfiniBand or RoCE NIC, soft-RoCE serves on any Linux kernel
# built with CONFIG_RDMA_RXE (rdma-core's ibverbs-providers has its
# user-space driver):
#   sudo modprobe rdma_rxe && sudo rdma link add rxe0 type rxe netdev eth0
# Registered memory counts against RLIMIT_MEMLOCK: raise it (ulimit -l
# unlimited, or LimitMEMLOCK / Slurm's PropagateResourceLimits).
#
# Across machines no variable is needed: ranks on different hosts use RDMA
# whenever both have an active port on the same fabric (GORUN_TRANSPORT=auto),
# e.g. under Slurm with examples/slurm/ddp-2nodes.sh, or gorun -nnodes 2.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
	echo "rdma.sh: no RDMA device under /sys/class/infiniband (see the comments at the top for soft-RoCE)" >&2
	exit 2
fi
ulimit -l unlimited 2>/dev/null || echo "rdma.sh: RLIMIT_MEMLOCK stays at $(ulimit -l) KiB"
export GORUN_TRANSPORT=rdma
go build -o bin/ ./cmd/gorun ./cmd/bench ./examples/allreduce

echo "== does a job use RDMA? (rank 0 names the paths)"
out=$(bin/gorun -np 2 bin/allreduce 2>&1)
echo "$out"
grep -q "over RDMA" <<<"$out" || { echo "rdma.sh: the job did not use RDMA (the line above says why)" >&2; exit 1; }

echo "== rdma package tests (the layout test reads this machine's verbs.h where libibverbs-dev is installed)"
go test -count=1 ./rdma/...

echo "== comm: the collective matrix over RDMA (np 1..8, every op and type), staged buffers, mismatched calls, a rank killed mid-all-reduce (its rdma case runs where a device exists)"
go test -count=1 -timeout 20m -run 'TestCollectivesMultiProcess/np=./(default|ring-only-small-chunks|latency-algorithms-only)$|TestStagedCollectives|TestMismatchedCalls|TestRankKilledMidAllReduce' ./comm

echo "== all-reduce bus bandwidth: RDMA and TCP side by side, with gloo and Open MPI where installed"
bin/bench collectives -np 2,4 -sizes 8B,4KB,64KB,1MB,16MB,64MB -ops all_reduce -variants rdma,tcp,default
