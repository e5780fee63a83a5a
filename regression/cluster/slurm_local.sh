# A private single-node Slurm cluster on this machine, for the Slurm test
# (sourced). slurm_start DIR writes a configuration for localhost (2 CPUs,
# free ports, every file under DIR), starts munged on its own key and socket,
# slurmctld and slurmd, and waits until the node is idle; slurm_stop kills
# exactly the daemons it started (by pid) and waits for them. The caller sets
# a trap that calls slurm_stop, so nothing is left running on any exit.
# Installs Debian's slurm-wlm and munge first when they are missing.

slurm_pids=()

slurm_install() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null && return 0
  echo "# installing slurm-wlm and munge (Debian)"
  local s=""; [ "$(id -u)" = 0 ] || s=sudo
  DEBIAN_FRONTEND=noninteractive $s apt-get update -qq && DEBIAN_FRONTEND=noninteractive $s apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

slurm_start() {
  local d=$1 host; host=$(hostname -s)
  mkdir -p $d/state $d/spool $d/munge $d/log
  chmod 711 $d/munge
  dd if=/dev/urandom of=$d/munge/munge.key bs=1024 count=1 status=none; chmod 400 $d/munge/munge.key
  munged --key-file=$d/munge/munge.key --socket=$d/munge/socket --pid-file=$d/munge/pid --log-file=$d/log/munged.log \
    --seed-file=$d/munge/seed --force --foreground >$d/log/munged.out 2>&1 &
  slurm_pids+=($!)
  local ctl_port dport; ctl_port=$(free_port); dport=$(free_port)
  cat >$d/slurm.conf <<CONF
ClusterName=rlfusetest
SlurmctldHost=$host
SlurmctldPort=$ctl_port
SlurmdPort=$dport
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/socket
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$d/slurm.conf
  slurmctld -D -i -f $d/slurm.conf >$d/log/slurmctld.out 2>&1 &
  slurm_pids+=($!)
  slurmd -D -f $d/slurm.conf >$d/log/slurmd.out 2>&1 &
  slurm_pids+=($!)
  local i
  for i in $(seq 60); do
    sinfo -h -N -o %t 2>/dev/null | grep -qx idle && return 0
    sleep 0.5
  done
  echo "# the node did not become idle in 30 s:"; sinfo 2>&1 | sed 's/^/#   /'; tail -5 $d/log/slurmctld.log $d/log/slurmd.log 2>&1 | sed 's/^/#   /'
  return 1
}

slurm_stop() {
  local p i
  [ ${#slurm_pids[@]} -eq 0 ] && return 0
  # jobs first (their steps belong to slurmd), then the daemons, newest first
  scancel --full -u "$(id -un)" 2>/dev/null
  for ((i = ${#slurm_pids[@]} - 1; i >= 0; i--)); do kill -TERM "${slurm_pids[i]}" 2>/dev/null; done
  for p in "${slurm_pids[@]}"; do
    for i in $(seq 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  slurm_pids=()
}
