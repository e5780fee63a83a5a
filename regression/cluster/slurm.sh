# input/slurm.sbatch on a real Slurm (`make test-slurm`): a private
# single-node cluster (regression/cluster/slurm_local.sh) runs the template
# twice with a micro pipeline deck; job B is requeued (scontrol requeue)
# mid-run and must resume by itself from its newest checkpoint and end
# bit-identical to job A, which ran through. Daemons are stopped on any exit.
set -u
cd "$(dirname "$0")/../.."
export BIN="${BIN:-bin}" PYTHON="${PYTHON:-/usr/bin/python3}" OMP_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE
. regression/lib.sh
. regression/cluster/slurm_local.sh
passes=0; ok() { echo "ok - $*"; passes=$((passes + 1)); }
d=$(mktemp -d "${TMPDIR:-/tmp}/rlfuse-slurm.XXXXXX")
trap 'slurm_stop; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM
t0=$(date +%s)

slurm_install || { not_ok "install slurm-wlm and munge"; echo "0 passed, 1 failed"; finish; }
slurm_start $d/cluster && ok "private Slurm cluster up (slurmctld + slurmd on $(hostname -s), 2 CPUs, munge on its own key)" || { not_ok "start the cluster"; echo "0 passed, 1 failed"; finish; }

export RLFUSE_OUT=$d/out
submit() { sbatch --parsable --cpus-per-task=1 --time=15 --output="$d/job-%j.log" input/slurm.sbatch regression/decks/slurm.deck; }
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
A=$(submit) && B=$(submit) || { not_ok "sbatch: $A $B"; finish; }
# preempt B once its SFT stage has written its second checkpoint
for i in $(seq 1200); do [ -e $d/out/$B/sft/ckpt_000040.h5 ] && break; [ "$(job_field $B JobState)" = COMPLETED ] && break; sleep 0.1; done
if [ -e $d/out/$B/sft/ckpt_000040.h5 ]; then scontrol requeue $B && ok "job $B requeued mid-run (after sft/ckpt_000040.h5)" || not_ok "scontrol requeue $B"
else not_ok "job $B never wrote sft/ckpt_000040.h5 (state $(job_field $B JobState)): $(tail -3 $d/job-$B.log)"; fi
# both jobs to their end (6 minutes at most on a loaded machine)
for i in $(seq 720); do
  sa=$(job_field $A JobState); sb=$(job_field $B JobState)
  case "$sa $sb" in *PENDING*|*RUNNING*|*REQUEUE*|*COMPLETING*|*CONFIGURING*) sleep 0.5 ;; *) break ;; esac
done
for j in $A $B; do
  check "job $j: COMPLETED, exit code 0:0 ($(job_field $j JobState) $(job_field $j ExitCode))" test "$(job_field $j JobState) $(job_field $j ExitCode)" = "COMPLETED 0:0"
done
check "job $A ran once, job $B twice (Restarts $(job_field $A Restarts), $(job_field $B Restarts))" test "$(job_field $A Restarts) $(job_field $B Restarts)" = "0 1"
check "job $A's output: run.h5 and final.h5 of each stage, periodic SFT checkpoints" bash -c \
  "for s in sft rm ppo; do test -s $d/out/$A/\$s/run.h5 && test -s $d/out/$A/\$s/final.h5 || exit 1; done; test -s $d/out/$A/sft/ckpt_000120.h5 && grep -q 'pipeline summary' $d/job-$A.log"
check "job $B's log (appended across the requeue) shows both runs" bash -c "grep -q 'rlfuse: job $B run 1 ' $d/job-$B.log && grep -q 'rlfuse: job $B run 2 ' $d/job-$B.log"
resumed=$(grep -o "restart latest: $d/out/$B/sft/ckpt_[0-9]*.h5 (step or iteration [0-9]*)" $d/job-$B.log | head -1)
check "the second run resumed SFT by itself from its newest checkpoint (${resumed:-no such line})" test -n "$resumed"
first=$("$PYTHON" -c "import h5py; print(int(h5py.File('$d/out/$B/sft/run.h5', 'r')['metrics/step'][0]))" 2>&1 | tail -1)
check "the resumed SFT continued its run record (sft/run.h5 from step ${first:-?}, want 1; no run.1.h5)" \
  test ! -e $d/out/$B/sft/run.1.h5 -a "$first" = 1
for r in sft/final.h5:policy ppo/final.h5:actor ppo/final.h5:critic ppo/final.h5:reference ppo/final.h5:reward; do
  f=${r%%:*} g=${r#*:}
  check "preempted job ends bit-identical to the uninterrupted one: $f /$g (h5diff, no tolerance)" h5diff -q $d/out/$A/$f $d/out/$B/$f /$g /$g
done
pids=("${slurm_pids[@]}")
slurm_stop
left=$(for p in "${pids[@]}"; do kill -0 $p 2>/dev/null && echo $p; done)
check "the daemons are stopped (${#pids[@]} started, none left)" test -z "$left"
echo "# slurm test $(( $(date +%s) - t0 )) s"
echo "$passes passed, $fails failed"
finish
