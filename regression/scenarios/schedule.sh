# -mode schedule: the fused actor-critic schedule optimizer from the command
# line. A search writes a schedule file whose attributes and task lists are
# checked here with h5py (every task once per rank, the bound and makespan
# agreeing with an independent Python replay); the file reads back through
# -sched_file; a search is deterministic for a seed; tools/plot_schedule.py
# draws it; and bad options and bad files (a duplicated task, a deadlock, a
# micro-batch out of range, the wrong instance, a missing group) each stop
# with one "rlfuse: error:" line, leaving an existing output file untouched.
#
# The checks in detail: `-mode schedule` on (4,2,8,4,2,2): the printed makespan, bound (78,
# worked out in the script), greedy start and sequential baseline (96); the file's attributes
# and every task once per rank (h5py); `tools/plot_schedule.py` draws it, its own replay
# agreeing with the file's makespan; `-sched_file` reads it back; one seed gives one schedule;
# bad files (a duplicated task, a deadlock, a micro-batch out of range, a missing rank group,
# another instance, a missing file) and bad options (pp1 not dividing pp0, m or f not
# positive, a memory cap below one micro-batch, no output) each one `rlfuse: error:` line with
# an existing file untouched
. regression/lib.sh
plan 19
d="$RLFUSE_TMP/schedule"; mkdir -p $d
inst="-mode schedule -sched_pp0 4 -sched_pp1 2 -sched_m0 8 -sched_m1 4 -sched_f0 2 -sched_f1 2"
rlfuse $inst -sched_output $d/s.h5 >$d/run.log 2>&1 || not_ok "search: $(tail -3 $d/run.log)"
check "search prints makespan, bound, greedy start, sequential baseline and memory" \
  grep -q "makespan 78  lower bound 78 .*greedy start .*sequential 1F1B 96 .*" $d/run.log
# (4,2,8,4,2,2): work per rank 8*6 + 4*6 = 72, plus the best head + tail:
# rank 1 (actor stage 1: 2, 4; critic stage 0: 0, 0) 72, rank 2 (actor 2:
# 4, 8; critic 1: 2, 4) 78. 1F1B: actor (8+3)*6 = 66, critic (4+1)*6 = 30.
"$PYTHON" - $d/s.h5 >$d/py.log 2>&1 <<'PY' && ok "schedule file: attributes, every task once per rank, makespan confirmed by a Python replay" || not_ok "schedule file: $(tail -3 $d/py.log)"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
a = f.attrs
assert (a["pp0"], a["pp1"], a["m0"], a["m1"]) == (4, 2, 8, 4), dict(a)
assert a["lower_bound"] == 78 and a["sequential_makespan"] == 96 and a["makespan"] >= 78, dict(a)
assert len(a["peak_memory"]) == 4 and a["greedy_makespan"] >= a["makespan"]
for r in range(4):
    t = f[f"node_{r}/tasks"][()]
    assert t.shape == (24, 3) and t.dtype.itemsize == 4
    want = sorted((m, k, b) for m, n in ((0, 8), (1, 4)) for k in (0, 1) for b in range(n))
    assert sorted(map(tuple, t.tolist())) == want, r
PY
"$PYTHON" tools/plot_schedule.py $d/s.h5 $d/s.png >$d/plot.log 2>&1 && [ -s $d/s.png ] && ok "plot_schedule draws it and its replay agrees with the file's makespan" || not_ok "plot_schedule: $(tail -3 $d/plot.log)"
rlfuse $inst -sched_file $d/s.h5 >$d/check.log 2>&1 && grep -q "is a valid schedule" $d/check.log && ok "-sched_file reads and validates it" || not_ok "-sched_file: $(tail -3 $d/check.log)"
rlfuse $inst -sched_output $d/s2.h5 >/dev/null 2>&1
"$PYTHON" -c "
import sys, h5py, numpy as np
a, b = h5py.File('$d/s.h5'), h5py.File('$d/s2.h5')
sys.exit(0 if all(np.array_equal(a[f'node_{r}/tasks'][()], b[f'node_{r}/tasks'][()]) for r in range(4)) else 1)" && ok "the same seed gives the same schedule" || not_ok "two searches with one seed differ"

# bad files, made from the good one
"$PYTHON" - $d <<'PY'
import sys, h5py, shutil
d = sys.argv[1]
def edit(name, fn):
    shutil.copy(f"{d}/s.h5", f"{d}/{name}.h5")
    with h5py.File(f"{d}/{name}.h5", "r+") as f:
        fn(f)
def dup(f):
    t = f["node_1/tasks"][()]; t[1] = t[0]; f["node_1/tasks"][...] = t
def dead(f):  # rank 0 runs a backward before its forward
    t = f["node_0/tasks"][()]
    i = next(j for j in range(len(t)) if t[j][1] == 1); fw = next(j for j in range(len(t)) if tuple(t[j]) == (t[i][0], 0, t[i][2]))
    t[[i, fw]] = t[[fw, i]]; f["node_0/tasks"][...] = t
def mb(f):
    t = f["node_2/tasks"][()]; t[3][2] = 99; f["node_2/tasks"][...] = t
def nogroup(f):
    del f["node_3"]
edit("dup", dup); edit("dead", dead); edit("mb", mb); edit("nogroup", nogroup)
PY
echo "keep" >$d/keep.h5; keep=$(md5sum <$d/keep.h5)
expect() {
  local what=$1 pat=$2; shift 2
  local err=$d/err.txt rc
  rlfuse "$@" >/dev/null 2>$err; rc=$?
  if [ $rc -eq 0 ]; then not_ok "$what: exit status 0"; return; fi
  if [ "$(grep -c . $err)" -ne 1 ] || ! grep -q "^rlfuse: error: .*$pat" $err; then not_ok "$what: expected one line matching '$pat', got: $(head -3 $err)"; return; fi
  [ "$(md5sum <$d/keep.h5)" = "$keep" ] || { not_ok "$what: the existing output file changed"; return; }
  ok "$what ($(cut -c1-120 $err))"
}
expect "duplicated task"        "lists the .* twice"            $inst -sched_file $d/dup.h5
expect "deadlocking schedule"   "deadlocks"                     $inst -sched_file $d/dead.h5
expect "micro-batch out of range" "micro-batch 99.*is not a task" $inst -sched_file $d/mb.h5
expect "missing rank group"     "no node_3"                     $inst -sched_file $d/nogroup.h5
expect "wrong instance"         "m0 is 8, this run needs 6"     $inst -sched_m0 6 -sched_file $d/s.h5
expect "missing file"           "nope.h5: no such file"         $inst -sched_file $d/nope.h5
expect "pp1 not dividing pp0"   "-sched_pp1 3 does not divide"  $inst -sched_pp1 3 -sched_output $d/keep.h5
expect "no micro-batches"       "-sched_m1 -1"                  $inst -sched_m1 -1 -sched_output $d/keep.h5
expect "zero forward time"      "-sched_f0"                     $inst -sched_f0 0 -sched_output $d/keep.h5
expect "negative forward time"  "-sched_f1 -2: the forward time must be positive" $inst -sched_f1 -2 -sched_output $d/keep.h5
expect "memory cap too small"   "-sched_mem_cap 1 is below"     $inst -sched_mem0 2 -sched_mem_cap 1 -sched_output $d/keep.h5
expect "no output"              "-sched_output"                 $inst
mkdir -p $d/adir
expect "output not a regular file" "-sched_output $d/adir: exists and is not a regular file" $inst -sched_output $d/adir
[ -d $d/adir ] && ok "the directory given as output is still a directory" || not_ok "the directory given as output was replaced"
finish
