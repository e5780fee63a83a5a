# Fault tests: a run killed with SIGKILL at random moments, and inside a
# checkpoint write, on 1 and 2 ranks, resumes from its newest checkpoint and
# ends bit-identical to an uninterrupted run, with every checkpoint readable
# and no temporary file left; a temporary whose PID is alive but not its
# writer is removed, one whose writer holds its lock kept; a job that loses one rank ends within a bound,
# with the launcher's message; a full disk (a 256 KiB tmpfs) gives one
# "no space left on device" line and exit status 1, not a crash. About 30 s.
#
# The checks in detail: SIGKILL at a random moment and inside a checkpoint write (as soon as a
# temporary exists), on 1 and 2 ranks: the run resumed from its newest checkpoint ends
# bit-identical (`h5diff`) to an uninterrupted one, every checkpoint is readable, and the
# temporary the kill left is gone; a temporary named with the PID of a live process that is
# not its writer (`sleep 60`) is removed at the start of a run, one whose lock a live process
# holds (`flock`) is kept; one rank of two killed: the job ends within 10 s (measured 0.2-0.3
# s) with MPICH's message; a full disk (a 256 KiB tmpfs, needs root: skipped, saying why,
# otherwise) on 1 and 2 ranks: one `no space left on device` line and exit status 1, no crash,
# no temporary. About 40 s on 2 cores
. regression/lib.sh
plan 9
d="$RLFUSE_TMP/fault"; mkdir -p $d
deck=regression/decks/tiny.deck
steps=40
sft() { local n=$1; shift; mpirun $n -options_file $deck -sft_steps $steps -checkpoint_every 1 "$@"; }

# The rank processes of the job writing into directory $1.
ranks_of() { pgrep -f "^$BIN/rlfuse .*-output_dir $1( |\$)"; }

# kill_run N DIR WHEN: starts the job, kills one rank with SIGKILL: WHEN is
# "random" (after a random delay) or "write" (as soon as a checkpoint
# temporary exists, i.e. inside h5u_write_atomic). Prints what it hit.
kill_run() {
  local n=$1 dir=$2 when=$3 pid
  sft $n -output_dir $dir >$dir.log 2>&1 &
  pid=$!
  "$PYTHON" - "$dir" "$when" "$BIN/rlfuse" <<'PY'
import os, random, signal, sys, time, glob, subprocess
d, when, exe = sys.argv[1], sys.argv[2], sys.argv[3]
def ranks():
    out = subprocess.run(["pgrep", "-f", "^%s .*-output_dir %s( |$)" % (exe, d)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]
t0 = time.time()
while not ranks() and time.time() - t0 < 30: time.sleep(0.01)
if when == "random":
    time.sleep(random.uniform(0.2, 1.2))
    hit = "random"
else:
    hit = "none"
    while time.time() - t0 < 30:
        # the temporary itself, not the writer's lock file (NAME.lock) made just before it
        if os.path.isdir(d) and any(".tmp." in f and not f.endswith(".lock") for f in os.listdir(d)):
            hit = "write"; break
ps = sorted(ranks())
# inside a write: the lowest pid, normally rank 0, the one writing
if ps: os.kill(ps[0] if when == "write" else ps[-1], signal.SIGKILL)
print(hit if ps else "ended")
PY
  wait $pid 2>/dev/null
}

# resume DIR N: restart from the newest checkpoint (or from scratch) into DIR
resume() {
  local dir=$1 n=$2 last
  last=$(ls $dir/ckpt_*.h5 2>/dev/null | sort | tail -1)
  if [ -n "$last" ]; then sft $n -output_dir $dir -restart $last >$dir.resume.log 2>&1
  else sft $n -output_dir $dir >$dir.resume.log 2>&1; fi
}

all_readable() { local f; for f in "$1"/ckpt_*.h5 "$1"/final.h5; do h5dump -a /state/iteration "$f" >/dev/null 2>&1 || return 1; done; }

for n in 1 2; do
  sft $n -output_dir $d/ref$n >$d/ref$n.log 2>&1 || not_ok "uninterrupted run on $n rank(s)"
  k=0
  for when in random write; do
    k=$((k + 1)); dir=$d/kill${n}_$k
    hit=$(kill_run $n $dir $when)
    ntmp_killed=$(ls $dir 2>/dev/null | grep '\.tmp\.' | grep -vc '\.lock$')
    resume $dir $n
    if h5diff -q $d/ref$n/final.h5 $dir/final.h5 /policy /policy && all_readable $dir && [ "$(ls $dir | grep -c '\.tmp\.')" -eq 0 ]; then
      ok "SIGKILL on $n rank(s) ($hit, $ntmp_killed temporary left by the kill): resumed bit-identical, every checkpoint readable, no temporary left"
    else not_ok "SIGKILL on $n rank(s) ($hit): resume differs, a checkpoint is unreadable or a temporary is left ($(ls $dir | tr '\n' ' '))"; tail -3 $dir.resume.log | sed 's/^/# /'; fi
  done
done

# A temporary named with the PID of a live process that is not its writer
# (a killed writer's PID reused) is stale and removed at start; one whose
# writer holds its lock (flock on NAME.lock, as rlfuse's writers do) stays.
dir=$d/reused; mkdir -p $dir
host=$(hostname | cut -c1-63 | tr -c 'a-zA-Z0-9-\n' '-')
sleep 60 & alive=$!
: >$dir/ckpt_000003.h5.tmp.$host.$alive
: >$dir/ckpt_000004.h5.tmp.$host.$alive; : >$dir/ckpt_000004.h5.tmp.$host.$alive.lock
flock $dir/ckpt_000004.h5.tmp.$host.$alive.lock sleep 60 & writer=$!
sleep 0.3
mpirun 1 -options_file $deck -sft_steps 2 -output_dir $dir >$dir.log 2>&1 || not_ok "run over the temporaries: $(tail -1 $dir.log)"
check "a temporary of a live PID that is not its writer is removed at start" test ! -e $dir/ckpt_000003.h5.tmp.$host.$alive
check "a temporary whose writer holds its lock is left alone" test -e $dir/ckpt_000004.h5.tmp.$host.$alive
kill $alive $writer 2>/dev/null; wait $alive $writer 2>/dev/null

# one rank of two dies: the job must end promptly. MPICH's launcher then
# kills the other ranks with SIGKILL, so rlfuse itself cannot print; the
# launcher names the process (docs/testing.md).
dir=$d/lost
mpirun 2 -options_file $deck -sft_steps 1000000 -output_dir $dir >$dir.log 2>&1 &
pid=$!
for i in $(seq 300); do [ -n "$(ranks_of $dir)" ] && break; sleep 0.05; done
sleep 1
victim=$(ranks_of $dir | tail -1)
t0=$(date +%s.%N)
kill -9 $victim 2>/dev/null
for i in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
t1=$(date +%s.%N)
if kill -0 $pid 2>/dev/null; then
  not_ok "a lost rank: the job still runs 10 s later"; kill -9 $(ranks_of $dir) $pid 2>/dev/null
else
  secs=$("$PYTHON" -c "print(round($t1 - $t0, 2))")
  check "a lost rank ends the job within 10 s ($secs s) with the launcher's message naming the process" grep -q "BAD TERMINATION\|KILLED BY SIGNAL\|Killed (signal 9)" $dir.log
fi
wait $pid 2>/dev/null

# a full disk: a small tmpfs (needs root and mount)
mnt=$d/full; mkdir -p $mnt
if why=$(mount -t tmpfs -o size=256k tmpfs $mnt 2>&1); then
  mpirun 1 -options_file $deck -sft_steps 2 -output_dir $mnt/o >$d/full.log 2>$d/full.err; rc=$?
  if [ $rc -eq 1 ] && [ "$(grep -c . $d/full.err)" -eq 1 ] && grep -q "^rlfuse: error: .*no space left on device" $d/full.err && [ "$(ls $mnt/o | grep -c '\.tmp\.')" -eq 0 ]; then
    ok "disk full: one line ($(cut -c1-100 $d/full.err)), exit status 1, no temporary left"
  else not_ok "disk full: exit status $rc, $(head -3 $d/full.err)"; fi
  mpirun 2 -options_file $deck -sft_steps 2 -output_dir $mnt/o2 >$d/full2.log 2>$d/full2.err; rc=$?
  check "disk full on 2 ranks: exit status 1 and the message" bash -c "[ $rc -eq 1 ] && grep -q 'no space left on device' $d/full2.err"
  umount $mnt
else
  skip "disk full: cannot mount a 256 KiB tmpfs: $(echo "$why" | head -1)"
fi
finish
