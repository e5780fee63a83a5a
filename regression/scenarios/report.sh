# tools/report.py on real run records made here (a micro SFT and a micro PPO
# run): the picture and the summary are written, the summary's numbers are
# the records', the response-length histogram's data is the last iteration's;
# a file that is not a run record fails with one line and writes nothing.
# A GRPO run with a rule reward on the arithmetic task: gold is the accuracy
# (labelled so), no critic columns, and each evaluation of its evals.h5.
# tools/plot_run.py on the same records: it leaves out exactly the metrics
# with no value or one value throughout, and fails the same way.
#
# The checks in detail: `tools/report.py` on the run records of a micro SFT and a micro PPO
# run made in the test, overlaid: a PNG and the text summary written, the summary's step
# counts, first/last values and response-length statistics equal to the records'; a micro GRPO
# run with the numeric rule on the arithmetic task: its summary labels `gold` and `eval_gold`
# "accuracy", has no critic columns, and lists each evaluation of its `evals.h5` (the
# reference, iterations 1 and 2) with the accuracy, mean reward and mean response length
# stored there; a checkpoint, a text file and a missing path each one line `report: error:
# FILE: ...`, exit 1, nothing written; an asynchronous run (K = 1, 2 ranks disaggregated): its
# staleness and busy fractions in the summary, its wall time per step, the stages' times added
# and the speed-up over a synchronous iteration equal to the record's; `tools/plot_run.py`
# leaves out `acts_grown_bytes` and a rule reward's `reward`, `reward_numeric` (equal to gold);
# `tools/tokenizer.py --help` (exit 0, samples listed), `CKPT samples RUN` equal to `samples
# RUN`, `samples CKPT RUN` and the older `samples RUN CKPT`, an answer's 1/0 as "correct", and
# an evals.h5 with bad `/answer_offsets` one line, exit 1. About 30 s
. regression/lib.sh
plan 14
d="$RLFUSE_TMP/report"; mkdir -p $d
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/sft -sft_steps 12 -task_len_max 8 >$d/sft.log 2>&1 || not_ok "SFT fixture: $(tail -1 $d/sft.log)"
rlfuse -mode rm -rm_sft_checkpoint $d/sft/final.h5 -output_dir $d/rm -rm_pairs 48 -rm_eval_pairs 16 -rm_steps 4 -rm_batch 8 \
  -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -seed 7 >$d/rm.log 2>&1 || not_ok "RM fixture: $(tail -1 $d/rm.log)"
rlfuse -options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rm/final.h5 \
  -output_dir $d/ppo -ppo_iterations 3 >$d/ppo.log 2>&1 || not_ok "PPO fixture: $(tail -1 $d/ppo.log)"
rlfuse -options_file input/arith_sft.deck -output_dir $d/asft -sft_steps 10 >$d/asft.log 2>&1 || not_ok "arithmetic SFT fixture: $(tail -1 $d/asft.log)"
rlfuse -options_file input/arith_grpo.deck -actor_checkpoint $d/asft/final.h5 -output_dir $d/grpo -rollout_batch 16 -rollout_group 4 -ppo_iterations 2 \
  -ppo_eval_prompts 16 -ppo_eval_samples 2 -ppo_eval_every 1 -ppo_checkpoint_every 0 >$d/grpo.log 2>&1 || not_ok "GRPO fixture: $(tail -1 $d/grpo.log)"
"$MPIEXEC" $MPIEXEC_FLAGS -n 2 env OMP_NUM_THREADS=1 "$BIN/rlfuse" -options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft/final.h5 \
  -reward_checkpoint $d/rm/final.h5 -output_dir $d/async -ppo_iterations 3 -async_staleness 1 -placement disaggregate >$d/async.log 2>&1 ||
  not_ok "asynchronous PPO fixture: $(tail -1 $d/async.log)"
report() { "$PYTHON" tools/report.py "$@"; }

report $d/ppo/run.h5 $d/sft/run.h5 -o $d/both.png >$d/both.out 2>&1 || not_ok "report on two runs: $(tail -1 $d/both.out)"
check "report writes a PNG picture and the text summary beside it" bash -c "head -c 8 $d/both.png | od -An -c | grep -q 'P   N   G' && test -s $d/both.txt"
"$PYTHON" - $d <<'PY' && ok "summary: steps, first/last metric values and the response lengths are the records'" || not_ok "summary against the run records"
import sys, h5py, numpy as np, re
d = sys.argv[1]
txt = open(f"{d}/both.txt").read()
with h5py.File(f"{d}/ppo/run.h5") as f:
    gold = f["metrics/gold"][()]; L = f["responses/lengths"][()]; it = int(f["responses"].attrs["iteration"])
    B = int(f["parameters"].attrs["rollout_batch"])
with h5py.File(f"{d}/sft/run.h5") as f:
    loss = f["metrics/loss"][()]
assert len(L) == B and it == 3, (len(L), B, it)
assert re.search(r"ppo/run.h5: mode ppo, 3 steps", txt), txt
assert re.search(r"sft/run.h5: mode sft, 12 steps", txt), txt
m = re.search(r"gold \(gold score\)\s+first\s+(\S+)\s+last\s+(\S+)", txt)  # the sort task's judge
assert abs(float(m.group(1)) - gold[0]) <= 1e-3 * abs(gold[0]) + 1e-12 and abs(float(m.group(2)) - gold[-1]) <= 1e-3 * abs(gold[-1]) + 1e-12, (m.groups(), gold)
m = re.search(r"\n  loss\s+first\s+(\S+)\s+last\s+(\S+)", txt.split("sft/run.h5")[1])
assert abs(float(m.group(2)) - loss[-1]) <= 1e-3 * abs(loss[-1]), (m.groups(), loss)
m = re.search(r"response lengths \(iteration 3\): mean (\S+), median \S+, max (\d+), (\d+) responses", txt)
assert abs(float(m.group(1).rstrip(",")) - L.mean()) < 0.006 and int(m.group(2)) == L.max() and int(m.group(3)) == B, m.groups()
PY

report $d/grpo/run.h5 -o $d/grpo.png >$d/grpo.out 2>&1 || not_ok "report on the GRPO run: $(tail -1 $d/grpo.out)"
"$PYTHON" - $d <<'PY' && ok "summary of a GRPO run with a rule reward: gold and eval_gold labelled accuracy, no critic columns" || not_ok "the GRPO run's summary: $(cat $d/grpo.txt)"
import sys, re
txt = open(sys.argv[1] + "/grpo.txt").read()
assert re.search(r"\n  gold \(accuracy\)\s+first", txt) and re.search(r"\n  eval_gold \(accuracy\)\s+first", txt) and "summary final_gold (accuracy) = " in txt, txt
assert not re.search(r"critic|value_clip|gold score", txt), txt
PY
"$PYTHON" - $d <<'PY' && ok "summary: each evaluation of evals.h5 (the reference, iterations 1 and 2) with its accuracy, mean reward and mean response length" || not_ok "evals.h5 in the summary: $(grep evals $d/grpo.txt)"
import sys, re, h5py, numpy as np
d = sys.argv[1]
got = re.findall(r"evals.h5 /(\w+) \((.*?)\): accuracy (\S+), reward (\S+), response length (\S+) \(mean, EOS included\), (\d+) responses", open(d + "/grpo.txt").read())
assert [(g[0], g[1]) for g in got] == [("reference", "before training"), ("iter_1", "iteration 1"), ("iter_2", "iteration 2")], got
with h5py.File(d + "/grpo/evals.h5", "r") as f:
    for name, _, acc, rew, length, n in got:
        g = f[name]; L = g["response_lengths"][()]
        assert abs(float(acc) - g.attrs["gold"]) < 6e-5 and abs(float(rew) - g.attrs["reward"]) < 6e-5 and abs(float(length) - L.mean()) < 6e-3 and int(n) == len(L) == 32, (name, acc, rew, length, n)
PY

report $d/async/run.h5 $d/ppo/run.h5 -o $d/async.png >$d/async.out 2>&1 || not_ok "report on the asynchronous run: $(tail -1 $d/async.out)"
"$PYTHON" - $d <<'PY' && ok "summary of an asynchronous run: staleness and busy fractions, wall time per step, the stages added and the speed-up over a synchronous iteration, all from the record" || not_ok "the asynchronous run's summary: $(grep -E 'async|wall|synchronous' $d/async.txt)"
import sys, re, h5py, numpy as np
d = sys.argv[1]
txt = open(d + "/async.txt").read()
a, p = txt.split("ppo/run.h5: mode")[0], txt.split("ppo/run.h5: mode")[1]
with h5py.File(d + "/async/run.h5") as f:
    t = f["timing"]
    n = len(f["timing/step"][()])
    wall = t["iteration_max"][()].sum() / n
    work = sum(t[k][()].sum() for k in t if k.endswith("_max") and k != "iteration_max") / n
    m = {k: f["metrics"][k][()] for k in ("async_staleness_mean", "async_gen_busy", "async_train_busy")}
for k, v in m.items():
    g = re.search(r"\n  " + k + r"\s+first\s+(\S+)\s+last\s+(\S+)", a)
    assert g and abs(float(g.group(2)) - v[-1]) <= 1e-3 * abs(v[-1]) + 1e-12, (k, g and g.groups(), v)
g = re.search(r"\n  asynchronous \(staleness 1\): a synchronous iteration would take (\S+) s \(the stages one after another\), measured (\S+) s per iteration: speed-up (\S+)x", a)
assert g, a
assert abs(float(g.group(1)) - work) <= 5e-3 * work and abs(float(g.group(2)) - wall) <= 5e-3 * wall and abs(float(g.group(3)) - work / wall) <= 0.006, (g.groups(), work, wall)
assert re.search(r"\n  wall time per step \S+ s, the stages' times added \S+ s", a), a
assert "asynchronous" not in p and "async_" not in p, p  # the synchronous run has none of it
PY

# tools/tokenizer.py on the GRPO run's evals.h5 (answers: "correct" as -ppo_eval_show says), its --help, both argument orders
tk() { "$PYTHON" tools/tokenizer.py "$@"; }
tk --help >$d/tk_help.out 2>&1; rc=$?
check "tokenizer.py --help: exit 0, the usage with samples in the checkpoint-first order" bash -c \
  "[ $rc -eq 0 ] && grep -q 'tokenizer.py CKPT samples RUN_FILE.h5' $d/tk_help.out && grep -q 'tokenizer.py CKPT encode TEXT' $d/tk_help.out"
"$PYTHON" - $d <<'PY'  # a checkpoint with a /tokenizer of the arithmetic task's characters, which decodes as the run's own
import sys, h5py, numpy as np
sys.path.insert(0, "tools")
from tokenizer import ARITH_CHARS
toks = [b""] * 4 + [c.encode() for c in ARITH_CHARS]
with h5py.File(sys.argv[1] + "/chars.h5", "w") as f:
    t = f.create_group("tokenizer")
    t["token_bytes"] = np.frombuffer(b"".join(toks), np.uint8); t["token_offsets"] = np.cumsum([0] + [len(x) for x in toks]).astype(np.int64)
    t["token_type"] = np.array([3] * 4 + [1] * len(ARITH_CHARS), np.int32); t["merges"] = np.array([], dtype=h5py.string_dtype())
PY
tk $d/chars.h5 samples $d/grpo/evals.h5 >$d/s_new.jsonl 2>$d/s_new.err; tk samples $d/grpo/evals.h5 >$d/s_run.jsonl 2>$d/s_run.err
tk samples $d/grpo/evals.h5 $d/chars.h5 >$d/s_old.jsonl 2>$d/s_old.err; tk samples $d/chars.h5 $d/grpo/evals.h5 >$d/s_first.jsonl 2>$d/s_first.err
"$PYTHON" - $d <<'PY' && ok "tokenizer.py CKPT samples RUN, samples CKPT RUN, samples RUN and the older samples RUN CKPT give the same lines; an answer's 1/0 is \"correct\"" || not_ok "tokenizer.py samples: $(cat $d/s_new.err $d/s_old.err $d/s_first.err | head -2)"
import sys, json, h5py, numpy as np
d = sys.argv[1]
new, run, old, first = ([json.loads(l) for l in open(f"{d}/s_{k}.jsonl")] for k in ("new", "run", "old", "first"))
assert new and new == old == run == first, (len(new), len(old), len(run), len(first))
with h5py.File(f"{d}/grpo/evals.h5") as f:
    gold = f["reference/gold"][()]
ref = [r for r in new if r["group"] == "reference"]
assert all("answer" in r and "gold" not in r for r in new) and [r["correct"] for r in ref] == [float(x) for x in gold], ref[:2]
PY
"$PYTHON" - $d <<'PY'
import sys, h5py, shutil
d = sys.argv[1]
shutil.copy(f"{d}/grpo/evals.h5", f"{d}/bad_offsets.h5")
with h5py.File(f"{d}/bad_offsets.h5", "a") as f:
    off = f["reference/answer_offsets"][()]
    del f["reference/answer_offsets"]
    f["reference/answer_offsets"] = (off[::-1]).astype("float64")  # falling, and not integers
PY
tk samples $d/bad_offsets.h5 >$d/bad_off.out 2>&1; rc=$?
check "tokenizer.py samples on an evals.h5 with bad /answer_offsets: one line naming the group and dataset, exit 1 ($(head -c 160 $d/bad_off.out))" bash -c \
  "[ $rc -eq 1 ] && [ \$(wc -l <$d/bad_off.out) -eq 1 ] && grep -q '^tokenizer: error: $d/bad_offsets.h5/reference: /answer_offsets is not' $d/bad_off.out"

# not a run record: a checkpoint (HDF5) and a text file; nothing written
for bad in $d/sft/final.h5 regression/decks/tiny.deck $d/missing.h5; do
  report $d/ppo/run.h5 $bad -o $d/bad.png >$d/bad.out 2>&1; rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <$d/bad.out)" -eq 1 ] && grep -q "^report: error: $bad: " $d/bad.out && [ ! -e $d/bad.png ] && [ ! -e $d/bad.txt ]; then
    ok "report on $(basename $bad): one line naming it, exit 1, nothing written ($(cat $d/bad.out))"
  else not_ok "report on $(basename $bad): rc $rc, $(wc -l <$d/bad.out) lines: $(head -3 $d/bad.out)"; fi
done

"$PYTHON" tools/plot_run.py $d/ppo/run.h5 $d/plot.png >$d/plot.out 2>&1 || not_ok "plot_run on the PPO run: $(tail -1 $d/plot.out)"
"$PYTHON" - $d <<'PY' && ok "plot_run: a PNG; left out exactly the metrics with no value or the same value at every step ($(tail -1 $d/plot.out))" || not_ok "plot_run's panels: $(cat $d/plot.out)"
import sys, h5py, numpy as np, re
d = sys.argv[1]
out = open(f"{d}/plot.out").read()
assert open(f"{d}/plot.png", "rb").read(8)[1:4] == b"PNG", "no PNG"
with h5py.File(f"{d}/ppo/run.h5") as f:
    m = {k: f["metrics"][k][()].astype(float) for k in f["metrics"] if k != "step"}
diag = ["acts_grown_bytes"]
flat = sorted(k for k, v in m.items() if not k.startswith("eval_") and k not in diag and (not np.isfinite(v).any() or np.ptp(v[np.isfinite(v)]) == 0))
said = re.search(r"left out \(no value, or the same at every step\): (.*)", out)
got = sorted(said.group(1).split(", ")) if said else []
assert got == flat, (got, flat)
assert re.search(r"left out \(the engine's diagnostics\): acts_grown_bytes$", out, re.M), out
n = int(re.search(r"\((\d+) metrics", out).group(1))
assert n == sum(1 for k in m if not k.startswith("eval_")) - len(flat) - len(diag), (n, flat)
PY
"$PYTHON" tools/plot_run.py $d/grpo/run.h5 $d/gplot.png >$d/gplot.out 2>&1 || not_ok "plot_run on the GRPO run: $(tail -1 $d/gplot.out)"
"$PYTHON" - $d <<'PY' && ok "plot_run of a rule reward's run: reward and reward_numeric, equal to gold (the accuracy) at every step, drawn once as gold ($(grep equal $d/gplot.out))" || not_ok "plot_run's duplicates: $(cat $d/gplot.out)"
import sys, h5py, numpy as np, re
d = sys.argv[1]
out = open(f"{d}/gplot.out").read()
with h5py.File(f"{d}/grpo/run.h5") as f:
    g, r, rn = (f["metrics"][k][()] for k in ("gold", "reward", "reward_numeric"))
assert np.array_equal(g, r) and np.array_equal(g, rn), "the fixture's reward is not its accuracy"
assert re.search(r"left out \(equal at every step to one drawn\): reward \(= gold\), reward_numeric \(= gold\)$", out, re.M), out
PY
"$PYTHON" tools/plot_run.py $d/sft/final.h5 $d/badplot.png >$d/badplot.out 2>&1; rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <$d/badplot.out)" -eq 1 ] && grep -q "^plot_run: error: $d/sft/final.h5: " $d/badplot.out && [ ! -e $d/badplot.png ]; then
  ok "plot_run on a checkpoint: one line naming it, exit 1, nothing written"
else not_ok "plot_run on a checkpoint: rc $rc: $(head -3 $d/badplot.out)"; fi
finish
