#!/bin/bash
# A real two-node Slurm cluster on this one machine: slurmctld and one
# slurmd per node (n1, n2), both nodes on 127.0.0.1 with their own ports.
# The tests in this folder start one; it is also a way to try the batch
# scripts without a cluster.
#
#   sudo bash examples/slurm/cluster.sh start DIR   # then: export SLURM_CONF=DIR/slurm.conf
#   sudo bash examples/slurm/cluster.sh stop DIR
#
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge (Slurm
# 22.05): apt-get install -y slurmctld slurmd slurm-client munge. There is no
# systemd here, so the daemons are started by hand. PORT (default 16817) is
# slurmctld's port; the nodes take the next two.
set -euo pipefail
cmd=${1:?start or stop}
dir=$(realpath -m "${2:?directory for the cluster state}")
port=${PORT:-16817}
conf=$dir/slurm.conf

stop() {
	for f in "$dir"/run/slurmd.*.pid "$dir"/run/slurmctld.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
	done
	for _ in $(seq 50); do
		pgrep -f "slurm(ctld|d) .*-f $conf" >/dev/null || return 0
		sleep 0.1
	done
	pkill -9 -f "slurm(ctld|d) .*-f $conf" || true
}

case $cmd in
stop)
	stop
	exit 0
	;;
start) ;;
*)
	echo "usage: $0 start|stop DIR" >&2
	exit 2
	;;
esac

[ "$(id -u)" = 0 ] || { echo "cluster.sh: needs root (it starts munged and the Slurm daemons)" >&2; exit 1; }
for b in munged slurmctld slurmd srun sinfo; do
	command -v $b >/dev/null || { echo "cluster.sh: $b not found (apt-get install -y slurmctld slurmd slurm-client munge)" >&2; exit 1; }
done
mkdir -p "$dir"/{state,run,log} "$dir"/spool/n{1,2} "$dir"/tmp/n{1,2}
host=$(hostname)
cpus=$(nproc)
# Several slurmd on one host: each node has its own Port, NodeHostname is
# the real host, NodeAddr 127.0.0.1; every per-node path has %n.
cat >"$conf" <<CONF
ClusterName=gorun-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=$cpus State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
# The node names must resolve (MASTER_ADDR is the first of them).
for n in n1 n2; do
	grep -qE "^127\.0\.0\.1[[:space:]]+$n\$" /etc/hosts || echo "127.0.0.1 $n" >>/etc/hosts
done
# munged: the package made its key; it needs its socket directory.
if ! pgrep -x munged >/dev/null; then
	mkdir -p /run/munge /var/log/munge /var/lib/munge
	chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
	runuser -u munge -- munged 2>/dev/null || munged --force
fi
stop
slurmctld -f "$conf"
slurmd -f "$conf" -N n1
slurmd -f "$conf" -N n2
export SLURM_CONF=$conf
for _ in $(seq 100); do
	if [ "$(sinfo -h -t idle -o %D 2>/dev/null)" = 2 ]; then
		echo "export SLURM_CONF=$conf"
		exit 0
	fi
	sleep 0.2
done
echo "cluster.sh: the nodes did not come up; see $dir/log" >&2
sinfo >&2 || true
exit 1
