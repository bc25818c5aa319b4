#!/bin/bash
# All-reduce bus bandwidth across "nodes" on one machine, beside one node:
# under the two-node Slurm cluster of examples/slurm/cluster.sh (2 tasks on
# n1 and n2: same host, so shared memory unless GORUN_TRANSPORT=tcp), and
# across two network namespaces joined by a veth pair with gorun's
# multi-node mode (TCP over the veth). Needs root, Slurm and munge
# (apt-get install -y slurmctld slurmd slurm-client munge), iproute2.
#
#   bash bench/multinode.sh
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/ ./cmd/gorun ./cmd/bench
SIZES=${SIZES:-8B,64KB,1MB,16MB,64MB}
B="bin/bench collectives -in-job -ops all_reduce -sizes $SIZES -iters 20"
tmp=$(mktemp -d)
trap 'bash examples/slurm/cluster.sh stop $tmp/cluster; ip netns del gorun-bench-a 2>/dev/null; ip netns del gorun-bench-b 2>/dev/null; rm -rf $tmp' EXIT

bash examples/slurm/cluster.sh start "$tmp/cluster" >/dev/null
export SLURM_CONF=$tmp/cluster/slurm.conf
echo "== Slurm: 2 tasks, one on each node (n1, n2), transport chosen by gorun (same host: shared memory)"
timeout 300 srun -N 2 -n 2 $B
echo "== Slurm: 2 tasks, one on each node, GORUN_TRANSPORT=tcp"
GORUN_TRANSPORT=tcp timeout 300 srun -N 2 -n 2 $B
echo "== Slurm: 2 tasks on one node (n1)"
timeout 300 srun -N 1 -n 2 -w n1 $B
unset SLURM_CONF

ip netns add gorun-bench-a
ip netns add gorun-bench-b
ip link add grba type veth peer name grbb
ip link set grba netns gorun-bench-a
ip link set grbb netns gorun-bench-b
ip -n gorun-bench-a addr add 10.78.0.1/24 dev grba
ip -n gorun-bench-b addr add 10.78.0.2/24 dev grbb
for n in a b; do
	ip -n gorun-bench-$n link set lo up
	ip -n gorun-bench-$n link set grb$n up
done
export GORUN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "== two network namespaces (veth), gorun -nnodes 2 -np 1 on each"
ip netns exec gorun-bench-b bin/gorun -nnodes 2 -node-rank 1 -master 10.78.0.1:29531 -np 1 $B >/dev/null &
ip netns exec gorun-bench-a bin/gorun -nnodes 2 -node-rank 0 -master 10.78.0.1:29531 -np 1 $B
wait
echo "== one namespace, gorun -np 2 over loopback TCP"
GORUN_TRANSPORT=tcp bin/gorun -np 2 $B
