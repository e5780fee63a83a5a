# Checkpoints read and written by shard (parallel HDF5): an SFT checkpoint
# written on 4 ranks as pp 2 x tp 2, restarted at its last step (so it is
# only read and written again) on 1 rank and on 2 ranks as dp 2 with ZeRO-1,
# gives bit-identical tensors (h5diff, no tolerance) and a file with the same
# datasets, shapes, types and attributes as the one written on 1 rank (h5py);
# a 4-rank job killed inside a checkpoint write leaves every earlier
# checkpoint readable, and its resumption leaves no temporary. About 40 s.
#
# The checks in detail: an SFT checkpoint written on 4 ranks as pp 2 x tp 2, restarted at its
# last step (read and written again) on 1 rank and on 2 ranks dp 2 with ZeRO-1: `/policy`
# bit-identical (h5diff); h5py reads the 4-rank file with the same datasets, shapes, types,
# attributes and values as the 1-rank file; a 4-rank job killed (every rank) while a
# checkpoint temporary exists, retried until one is left behind, keeps every earlier
# checkpoint readable and its resumption removes the temporary. About 40 s
. regression/lib.sh
plan 4
d="$RLFUSE_TMP/ckpt_parallel"; mkdir -p $d
deck=regression/decks/tiny.deck
A="-sft_train_pp 2 -sft_train_tp 2 -sft_train_mbs 4"

mpirun 4 -options_file $deck -sft_steps 3 $A -output_dir $d/A >$d/A.log 2>&1 || { not_ok "SFT on 4 ranks, pp 2 x tp 2"; tail -3 $d/A.log; }
mpirun 1 -options_file $deck -sft_steps 3 -restart $d/A/final.h5 -output_dir $d/one >$d/one.log 2>&1 || { not_ok "read and rewrite on 1 rank"; tail -3 $d/one.log; }
mpirun 2 -options_file $deck -sft_steps 3 -restart $d/A/final.h5 -sft_train_dp 2 -plan_zero1 -output_dir $d/B >$d/B.log 2>&1 || { not_ok "read and rewrite on 2 ranks"; tail -3 $d/B.log; }
check "written on 4 ranks (pp 2 x tp 2), read and written on 1 rank: bit-identical" h5diff -q $d/A/final.h5 $d/one/final.h5 /policy /policy
check "read and written on 2 ranks (dp 2, ZeRO-1 moments): bit-identical" h5diff -q $d/A/final.h5 $d/B/final.h5 /policy /policy

py "h5py reads the parallel file" $d/A/final.h5 $d/one/final.h5 <<'PY'
import sys, h5py, numpy as np
def describe(f):
    out = {}
    def visit(name, obj):
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in obj.attrs.items() if k != "git_revision"}
        out[name] = (type(obj).__name__, getattr(obj, "shape", None), str(getattr(obj, "dtype", "")), sorted(attrs))
    f.visititems(visit)
    return out
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    da, db = describe(a), describe(b)
    same = da == db and all(np.array_equal(a[k][()], b[k][()]) for k, v in da.items() if v[0] == "Dataset")
    n = sum(1 for v in da.values() if v[0] == "Dataset")
print(("ok" if same and n > 0 else "not ok") + " - h5py reads the file written on 4 ranks: the same %d datasets, shapes, types, attributes and values as the 1-rank file" % n)
PY

# killed inside a write: every rank, as soon as a temporary exists (retried
# when the write ended first, so the kill really left one behind)
for try in 1 2 3 4 5; do
  rm -rf $d/kill
  mpirun 4 -options_file $deck -sft_steps 40 -checkpoint_every 1 $A -output_dir $d/kill >$d/kill.log 2>&1 &
  pid=$!
  "$PYTHON" - "$d/kill" "$BIN/rlfuse" <<'PY'
import os, signal, subprocess, sys, time
d, exe = sys.argv[1], sys.argv[2]
t0 = time.time()
while time.time() - t0 < 60:
    if os.path.isdir(d) and any(".tmp." in f and not f.endswith(".lock") for f in os.listdir(d)) and any(f.startswith("ckpt_") and ".tmp." not in f for f in os.listdir(d)):
        for p in subprocess.run(["pgrep", "-f", "^%s .*-output_dir %s( |$)" % (exe, d)], capture_output=True, text=True).stdout.split():
            os.kill(int(p), signal.SIGKILL)
        break
    time.sleep(0.002)
PY
  wait $pid 2>/dev/null
  ls $d/kill | grep -q '\.tmp\.' && break
done
tmp_after_kill=$(ls $d/kill | grep -c '\.tmp\.')
ok_all=1; n=0
for f in $d/kill/ckpt_*.h5; do n=$((n + 1)); h5dump -a /state/iteration "$f" >/dev/null 2>&1 || ok_all=0; done
last=$(ls $d/kill/ckpt_*.h5 2>/dev/null | sort | tail -1)
mpirun 2 -options_file $deck -sft_steps 40 -checkpoint_every 20 -restart $last -output_dir $d/kill >$d/resume.log 2>&1 || not_ok "resume after the kill"
left=$(ls $d/kill | grep -c '\.tmp\.')
check "killed inside a 4-rank write (temporaries left: $tmp_after_kill): the $n earlier checkpoints readable; the resumed run removes the temporary ($left left)" test "$ok_all" = 1 -a "$n" -gt 0 -a "$tmp_after_kill" -gt 0 -a "$left" = 0
finish
