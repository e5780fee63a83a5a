# -mode profile on 2 ranks: a tiny model on a small grid (a few seconds).
# The profile file is checked with h5py: the machine attributes, both
# models' shapes (the actor's LM head, the critic's scalar head), the grid
# axes, every time finite and >= 0, the trunk growing with the tokens, and
# the collectives growing with the bytes; bad options stop with one
# "rlfuse: error:" line and leave an existing profile as it was. A deck
# naming checkpoints of a non-default shape profiles, plans and estimates
# that shape, and a profile of another shape is refused for it.
#
# The checks in detail: `-mode profile` on 2 ranks for a 3-layer, 32-wide model on a small
# grid (under 20 s, checked): the file's machine attributes, both models' shapes and heads,
# the grid axes, every time finite and >= 0, the model parts growing with the tokens,
# all-reduce and AdamW growing with the size (h5py); no output, one rank and `-profile_repeats
# 0` each one `rlfuse: error:` line with an existing profile untouched
. regression/lib.sh
plan 18
d="$RLFUSE_TMP/profile"; mkdir -p $d
rl2() { "$MPIEXEC" $MPIEXEC_FLAGS -n 2 env OMP_NUM_THREADS=1 "$BIN/rlfuse" "$@"; }
model="-policy_n_layer 3 -policy_n_head 2 -policy_n_embd 32 -policy_vocab_size 16 -policy_n_positions 64"
grid="-profile_rows_max 16 -profile_len_max 64 -profile_bytes_max 1048576 -profile_opt_max 262144 -profile_repeats 3"
t0=$(date +%s.%N)
rl2 -mode profile $model $grid -profile_output $d/p.h5 >$d/run.log 2>&1 || not_ok "profile run: $(tail -3 $d/run.log)"
t1=$(date +%s.%N)
check "the run prints what it measured and wrote" grep -q "profile: wrote $d/p.h5" $d/run.log
py "profile file" $d/p.h5 <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
a = f.attrs
def res(ok, what):
    print(("ok - " if ok else "not ok - ") + what)
res(a["format"] == "rlfuse profile" and a["backend"] == "cpu" and a["nranks"] == 2 and a["threads"] == 1 and a["cores"] >= 1 and a["seconds"] > 0,
    "machine attributes: format, backend, ranks, threads, cores, seconds")
m0, m1 = f["model_0"], f["model_1"]
shape = lambda g: tuple(int(g.attrs[k]) for k in ("n_layer", "n_embd", "n_head", "n_kv_head", "n_ffn", "vocab_size", "n_positions"))
res(shape(m0) == shape(m1) == (3, 32, 2, 2, 128, 16, 64) and m0.attrs["value_head"] == 0 and m1.attrs["value_head"] == 1,
    "both models with the deck's shape: the actor with the LM head, the critic with the scalar head")
ok = list(m0["tp"][()]) == [1, 2] and list(m0["rows"][()]) == [1, 4, 16] and list(m0["len"][()]) == [4, 16, 64] and m0["seconds"].shape == (2, 3, 4, 3, 3)
res(ok, "grid axes: tp 1, 2; rows 1, 4, 16; len 4, 16, 64; seconds [tp][part][phase][rows][len]")
allt = np.concatenate([m0["seconds"][()].ravel(), m1["seconds"][()].ravel(), f["optimizer/seconds"][()], f["collectives/seconds"][()].ravel()])
res(np.all(np.isfinite(allt)) and np.all(allt >= 0), "every time finite and >= 0")
# the whole trunk of one layer at tp 1, forward and backward: 64x more tokens must cost more
s = m0["seconds"][()]
whole = s[0, :, :, :, :].sum(axis=0)  # [phase][rows][len]
res(whole[0, 2, 2] > 4 * whole[0, 0, 0] and whole[1, 2, 2] > 4 * whole[1, 0, 0],
    f"fwd and bwd grow with the tokens (fwd {whole[0,0,0]:.2e} -> {whole[0,2,2]:.2e} s, bwd {whole[1,0,0]:.2e} -> {whole[1,2,2]:.2e} s)")
# the head (what remains of a 1-layer model less a block and the
# embedding) is fitted to a line in the tokens (rows x len; decode: rows)
rows, lens = m0["rows"][()], m0["len"][()]
lin = True
for m in (m0, m1):
    h = m["seconds"][()][:, 2]  # [tp][phase][rows][len]
    for ph in range(4):
        x = np.outer(rows, np.ones_like(lens)) if ph == 3 else np.outer(rows, lens)
        for t in range(h.shape[0]):
            y = h[t, ph]
            A = np.stack([np.ones(x.size), x.ravel()], axis=1)
            coef = np.linalg.lstsq(A, y.ravel(), rcond=None)[0]
            lin &= bool(np.allclose(A @ coef, y.ravel(), rtol=1e-9, atol=1e-15) and coef[0] >= -1e-15 and coef[1] >= -1e-18)
res(lin, "the head's times lie on a line in the tokens, with intercept and slope >= 0 (Theil-Sen fit)")
c = f["collectives/seconds"][()]
# (p2p is left out: on a loaded machine a small ping-pong waits for the
# peer's time slice, milliseconds, and hides the bytes)
res(list(f["collectives/nranks"][()]) == [2] and c.shape == (4, 1, 6) and c[0, 0, -1] > c[0, 0, 0] and f["optimizer/seconds"][-1] > f["optimizer/seconds"][0],
    f"collectives over 1 KiB .. 1 MiB on 2 ranks; all-reduce ({c[0,0,0]:.1e} -> {c[0,0,-1]:.1e} s) and AdamW grow with the size")
PY
within "profiling this grid on 2 ranks takes under 20 s" "$(awk -v a=$t0 -v b=$t1 'BEGIN { printf "%.1f", b - a }')" 0 20
# the plan search on the measured primitives; a deck whose model the profile
# does not hold is refused with one line
P="-mode plan $model -rollout_batch 8 -ppo_minibatches 2 -gen_max_new_tokens 16 -plan_ranks 2 -cost_profile $d/p.h5 -plan_iterations 100"
check "-mode plan -cost_profile: the search runs on the measured primitives and writes its plan" bash -c \
  "'$BIN/rlfuse' $P -plan_output $d/plan.h5 >$d/plan.log 2>&1 && grep -q 'primitives: profile $d/p.h5' $d/plan.log && grep -q '^  searched ' $d/plan.log && test -s $d/plan.h5"
check "-mode plan -cost_profile with another model: one line naming the value" bash -c \
  "! '$BIN/rlfuse' $P -policy_n_embd 64 -plan_output $d/plan2.h5 >$d/plan2.log 2>&1 && [ \$(grep -vc '^rlfuse: note:' $d/plan2.log) = 1 ] && grep -q 'n_embd is 32 there, 64 here' $d/plan2.log && test ! -e $d/plan2.h5"
# a PPO deck naming checkpoints (2 layers, n_embd 64, vocabulary 20): its
# models are the checkpoints', not the -policy_ defaults (128, 64)
q="-policy_n_layer 2 -policy_n_head 4 -policy_n_embd 64 -policy_vocab_size 20 -policy_n_positions 48 -seed 5"
"$BIN/rlfuse" -mode sft $q -sft_steps 2 -sft_batch 8 -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT fixture: $(tail -2 $d/sft.log)"
"$BIN/rlfuse" -mode rm -seed 5 -rm_sft_checkpoint $d/sft/final.h5 -rm_pairs 16 -rm_eval_pairs 8 -rm_steps 1 -rm_batch 8 -gen_max_new_tokens 16 -output_dir $d/rm >$d/rm.log 2>&1 || not_ok "RM fixture: $(tail -2 $d/rm.log)"
printf '%s\n' "-mode ppo" "-actor_checkpoint $d/sft/final.h5" "-reward_checkpoint $d/rm/final.h5" "-rollout_batch 8" "-ppo_minibatches 2" "-gen_max_new_tokens 16" >$d/ck.deck
rl2 -options_file $d/ck.deck -mode profile $grid -profile_len_max 16 -profile_bytes_max 4096 -profile_output $d/ck.h5 >$d/ck.log 2>&1 || not_ok "profile of the checkpoint deck: $(tail -3 $d/ck.log)"
check "-mode profile on a deck naming checkpoints measures the checkpoints' shape (n_embd 64, vocabulary 20, n_positions 48)" "$PYTHON" -c "
import h5py; f = h5py.File('$d/ck.h5', 'r')
assert [int(f['model_0'].attrs[k]) for k in ('n_embd', 'vocab_size', 'n_positions')] == [64, 20, 48] and f['model_1'].attrs['value_head'] == 1"
check "-mode plan on the checkpoint deck with its profile: the search runs on the checkpoints' models" bash -c \
  "'$BIN/rlfuse' -options_file $d/ck.deck -mode plan -plan_ranks 2 -cost_profile $d/ck.h5 -plan_iterations 50 >$d/ckplan.log 2>&1 && grep -q 'for checkpoints $d/sft/final.h5 and $d/rm/final.h5' $d/ckplan.log"
check "a profile of another shape is refused for the checkpoint deck: one line naming the value" bash -c \
  "! '$BIN/rlfuse' -options_file $d/ck.deck -mode plan -plan_ranks 2 -cost_profile $d/p.h5 >$d/ckbad.log 2>&1 && [ \$(grep -vc '^rlfuse: note:' $d/ckbad.log) = 1 ] && grep -q 'n_embd is 32 there, 64 here' $d/ckbad.log"
# the issue's command, one rank and no primitives: this machine's profile
# of the checkpoints' models, its 2-rank collectives modeled, and said so
one_rank() { grep -q "^plan primitives: profile $d/cache/[0-9a-f]*\.h5, measured now on this job's 1 rank.*for checkpoints $d/sft/final.h5 .*one rank: its collectives are modeled.*the plan is for 2 ranks" $d/ck1.log; }
OMP_NUM_THREADS=1 "$BIN/rlfuse" -options_file $d/ck.deck -mode plan -plan_ranks 2 -plan_iterations 50 -cost_profile_cache $d/cache >$d/ck1.log 2>&1 || not_ok "-mode plan on one rank without primitives: $(tail -3 $d/ck1.log)"
check "-mode plan on one rank without -cost_*: profiles the checkpoints' models on that rank and says the collectives are modeled" one_rank
# bad options: one line, and the profile already there stays as it was
before=$(md5sum <$d/p.h5)
err() {
  local what=$1 pat=$2 n=$3; shift 3
  "$MPIEXEC" $MPIEXEC_FLAGS -n $n env OMP_NUM_THREADS=1 "$BIN/rlfuse" -mode profile $model "$@" >/dev/null 2>$d/err.log
  local rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c . $d/err.log)" -eq 1 ] && grep -q -- "^rlfuse: error: .*$pat" $d/err.log && [ "$(md5sum <$d/p.h5)" = "$before" ]; then ok "$what ($(cut -c1-100 $d/err.log))"
  else not_ok "$what: exit $rc, $(head -3 $d/err.log | cut -c1-200)"; fi
}
err "no -profile_output: one line naming it" "-profile_output" 2
err "one rank: refused (collectives need two)" "2 to 1024 ranks (got 1)" 1 -profile_output $d/p.h5
err "-profile_repeats 0: one line naming it" "-profile_repeats 0" 2 -profile_output $d/p.h5 -profile_repeats 0
finish
