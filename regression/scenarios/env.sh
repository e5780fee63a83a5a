# Multi-turn episodes with an environment (-env, docs/environments.md) on the
# arithmetic task's built-in calculator: a GRPO run from an SFT warm start
# with tool demonstrations calls the tool; rollouts.h5's sources, turns and
# every calculator answer recomputed in numpy (no log-probability, reward,
# advantage or return on the environment's tokens), evals.h5's too; the run repeats bit for
# bit; the same calculator as a program (-env command, 3 processes, each
# sleeping a random 0-20 ms before it answers) gives the same rollouts and
# weights bit for bit; 2 ranks (a generation replica each, each with its own
# environment) end with the 1-rank run's weights, and so does one replica
# split tp 2 or pp 2 (its head runs the environment); a restart from a
# checkpoint ends bit for bit as the unbroken run; asynchronous
# (-async_staleness 1): the calculator and the program give the same
# rollouts and weights bit for bit, a restart from a checkpoint whose queue
# holds a generated batch of episodes ends as the unbroken run, and so does
# one stopped by SIGTERM and resumed with -restart latest; the queued batch's
# episode fields checked on the way in; PPO with a program that gives step
# rewards: -env_reward_at turn puts each on the last model token of the turn
# it answered and -env_reward_at end all at the end (rewards, final scores
# and GAE returns recomputed in numpy), and an asynchronous restart with
# them queued ends bit for bit; -env none runs a deck's -env_command
# off; bad settings and a crashing environment refused with one line. About 50 s
. regression/lib.sh
plan 30
d="$RLFUSE_TMP/env"; mkdir -p $d
set -f # the task's '*'
A="-task arith -arith_max_operand 99 -arith_ops *"
rlfuse -options_file input/arith_sft.deck $A -arith_tool_demos 0.5 -policy_n_positions 32 -sft_steps 150 \
  -output_dir $d/sft >$d/sft.log 2>&1 || not_ok "SFT with tool demonstrations: $(tail -1 $d/sft.log)"
G="-options_file input/arith_grpo.deck $A -actor_checkpoint $d/sft/final.h5 -gen_max_new_tokens 16 -rollout_batch 32
   -rollout_group 4 -ppo_iterations 4 -ppo_eval_prompts 32 -ppo_eval_samples 1 -ppo_eval_every 0 -dump_rollouts
   -ppo_checkpoint_every 0"
bits() { "$PYTHON" regression/ref/ckpt_diff.py $d/$1/final.h5 $d/$2/final.h5 >$d/bits_$2.txt 2>&1 && ! grep -v 'max relative difference 0 ' $d/bits_$2.txt | grep -q .; }
# same_tokens A B [TOL]: two runs' rollouts, the same tokens, sources and turns, and log-probabilities
# bit for bit (TOL 0, the default) or within TOL (another layout's float sums)
same_tokens() { "$PYTHON" -c "
import sys, h5py, numpy as np
a, b = (h5py.File(sys.argv[i] + '/rollouts.h5', 'r') for i in (1, 2))
tol = float(sys.argv[3])
assert sorted(a) == sorted(b)
for g in a:
    for k in ('tokens', 'source', 'turn'): assert np.array_equal(a[g][k][()], b[g][k][()]), (g, k)
    x, y = a[g]['logprobs'][()], b[g]['logprobs'][()]
    assert np.array_equal(x, y) if tol == 0 else np.abs(x - y).max() < tol, (g, 'logprobs')
" $d/$1 $d/$2 ${3:-0}; }

mpirun 1 $G -env calc -output_dir $d/a >$d/a.log 2>&1 || not_ok "GRPO with -env calc: $(tail -1 $d/a.log)"
check "GRPO with -env calc: the progress lines show tool calls, the held-out line their share" \
  bash -c "[ \$(grep -cE '^iter .* calls [0-9.]+/ep' $d/a.log) -eq 4 ] && grep -q 'tool calls in 0\.[0-9]* of them' $d/a.log"
py "rollouts.h5 recomputed" $d/a <<'PY'
import sys, h5py, numpy as np
sys.path.insert(0, "regression/ref")
from env_arith_calc import value, QUERY, COMMA, MINUS, D0, EQ
f = h5py.File(sys.argv[1] + "/rollouts.h5", "r")
bad, answers, rows_with, per_iter = [], 0, 0, []
for g in sorted(f, key=lambda g: int(g.split("_")[1])):
    it = f[g]
    tok, src, turn = it["tokens"][()], it["source"][()], it["turn"][()]
    P, L = it["prompt_lengths"][()].ravel(), it["response_lengths"][()].ravel()
    zero = {k: it[k][()] for k in ("logprobs", "rewards", "advantages", "returns")}
    for b in range(len(P)):
        s, e = P[b], P[b] + L[b]
        if (src[b, :s] != 0).any() or (src[b, e:] != 0).any() or not np.isin(src[b, s:e], (1, 2)).all():
            bad.append((g, b, "sources")); continue
        t, k, seg, had = s, 1, [], False
        while t < e:
            if src[b, t] == 1:
                if turn[b, t] != k: bad.append((g, b, t, "turn"))
                seg.append(int(tok[b, t])); t += 1; continue
            v = value(seg)   # an answer follows the model's segment k, which ends with '='
            want = ([QUERY] if v is None else [MINUS if c == "-" else D0 + int(c) for c in str(v)]) + [COMMA]
            n = 0
            while t + n < e and src[b, t + n] == 2: n += 1
            if seg[-1:] != [EQ] or list(tok[b, t:t + n]) != want[:n] or (n < len(want) and t + n < e):
                bad.append((g, b, t, "answer", seg, list(tok[b, t:t + n]), want))
            if (turn[b, t:t + n] != k).any(): bad.append((g, b, t, "answer's turn"))
            if any((zero[key][b, t:t + n] != 0).any() for key in zero): bad.append((g, b, t, "nonzero on env tokens"))
            answers += 1; had = True; t += n; k += 1; seg = []
        rows_with += had
    calls = sum(int(((src[b, 1:] == 2) & (src[b, :-1] == 1)).sum()) for b in range(len(P)))
    per_iter.append(calls / len(P))
m = h5py.File(sys.argv[1] + "/run.h5", "r")["metrics"]
if not np.allclose(m["env_calls_mean"][()], per_iter, rtol=0, atol=1e-9):
    bad.append(("run.h5 env_calls_mean", list(m["env_calls_mean"][()]), per_iter))
ok = not bad and answers > 0
print(("ok" if ok else "not ok") + f" - rollouts.h5: every token's source and turn, each of {answers} calculator answers "
      f"({rows_with} episodes) recomputed from the call before it; no log-probability, reward, advantage or return "
      f"on the calculator's tokens; run.h5's tool calls per episode, iteration by iteration" + ("" if ok else f": {bad[:2]}"))
PY
py "evals.h5's sources and turns" $d/a <<'PY'
import sys, re, h5py, numpy as np
d = sys.argv[1]
f, bad, share = h5py.File(d + "/evals.h5", "r"), [], {}
for g in ("reference", "iter_4"):
    e = f[g]
    src, turn, P, L = e["source"][()], e["turn"][()], e["prompt_lengths"][()].ravel(), e["response_lengths"][()].ravel()
    for b in range(len(P)):
        s, t = P[b], P[b] + L[b]
        inside = np.zeros(src.shape[1], bool); inside[s:t] = True
        if (src[b][~inside] != 0).any() or (turn[b][~inside] != 0).any() or not np.isin(src[b, s:t], (1, 2)).all() \
           or src[b, s] != 1 or (np.diff(turn[b, s:t]) < 0).any() or turn[b, s] != 1:
            bad.append((g, b))
    share[g] = np.mean([((src[b, 1:] == 2) & (src[b, :-1] == 1)).any() for b in range(len(P))])
said = re.search(r"initial policy: .*tool calls in ([0-9.]+) of them", open(d + "/../a.log").read()).group(1)
last = h5py.File(d + "/run.h5", "r")["metrics"]["eval_env_call_frac"][()][-1]
ok = not bad and f"{share['reference']:.3f}" == said and abs(share["iter_4"] - last) < 1e-9
print(("ok" if ok else "not ok") + f" - evals.h5: each held-out sample's source and turn in place (prompt 0, the model first, turns "
      f"rising from 1); the share that called the tool is the one said ({said}) and recorded ({last:.3f})"
      + ("" if ok else f": {bad[:3]} {share}"))
PY
mpirun 1 $G -env calc -output_dir $d/b >$d/b.log 2>&1
check "the run repeats bit for bit (weights, moments; rollouts' tokens, log-probabilities, sources, turns)" \
  bash -c "$(declare -f bits same_tokens); d=$d PYTHON=$PYTHON; bits a b && same_tokens a b"
mpirun 1 $G -env command -env_turn_stop 17 -env_command "$PYTHON regression/ref/env_arith_calc.py 20" -env_procs 3 -output_dir $d/cmd >$d/cmd.log 2>&1 ||
  not_ok "-env command: $(tail -1 $d/cmd.log)"
check "the calculator as a program (3 processes, each answer after a random 0-20 ms): the same rollouts and weights bit for bit" \
  bash -c "$(declare -f bits same_tokens); d=$d PYTHON=$PYTHON; bits a cmd && same_tokens a cmd"
mpirun 2 $G -env calc -output_dir $d/two >$d/two.log 2>&1 || not_ok "-env calc on 2 ranks: $(tail -1 $d/two.log)"
check "2 ranks, a generation replica and its environment each: the 1-rank run's weights" \
  "$PYTHON" regression/ref/ckpt_diff.py $d/a/final.h5 $d/two/final.h5
# streamed into inference (-fuse_gen_inf stream): each finished episode to the reference on rank 1 while rank 0 decodes
mpirun 2 $G -env calc -fuse_gen_inf stream -fuse_tokens 40 -actor_gen_ranks 0 -ref_inf_ranks 1 -output_dir $d/st >$d/st.log 2>&1 ||
  not_ok "-env calc with -fuse_gen_inf stream: $(tail -1 $d/st.log)"
check "-fuse_gen_inf stream, generation on rank 0 and the reference on rank 1: the unfused 1-rank run's episodes token for token, its weights" \
  bash -c "$(declare -f same_tokens); d=$d PYTHON=$PYTHON; grep -q 'fusion of generation and inference: stream' $d/st.log &&
    same_tokens a st 1e-4 && $PYTHON regression/ref/ckpt_diff.py $d/a/final.h5 $d/st/final.h5"
# a replica split over 2 ranks: its head runs the environment and hands each answer to the other rank
mpirun 2 $G -env calc -actor_gen_tp 2 -output_dir $d/gtp >$d/gtp.log 2>&1 || not_ok "-env calc, generation tp 2: $(tail -1 $d/gtp.log)"
mpirun 2 $G -env command -env_turn_stop 17 -env_command "$PYTHON regression/ref/env_arith_calc.py 20" -env_procs 2 -actor_gen_pp 2 \
  -output_dir $d/gpp >$d/gpp.log 2>&1 || not_ok "-env command, generation pp 2: $(tail -1 $d/gpp.log)"
check "one generation replica over 2 ranks, tp 2 (the calculator) and pp 2 (the program, random latency): the 1-rank run's episodes token for token, its weights" \
  bash -c "$(declare -f same_tokens); d=$d PYTHON=$PYTHON; same_tokens a gtp 1e-4 && same_tokens a gpp 1e-4 &&
    $PYTHON regression/ref/ckpt_diff.py $d/a/final.h5 $d/gtp/final.h5 && $PYTHON regression/ref/ckpt_diff.py $d/a/final.h5 $d/gpp/final.h5"
mpirun 1 $G -env calc -ppo_checkpoint_every 2 -output_dir $d/c >$d/c.log 2>&1
mpirun 1 $G -env calc -restart $d/c/ckpt_000002.h5 -output_dir $d/r >$d/r.log 2>&1 || not_ok "restart: $(tail -1 $d/r.log)"
check "restarted from iteration 2: the unbroken run's weights bit for bit" bash -c "$(declare -f bits); d=$d PYTHON=$PYTHON; bits a r"
# -mode plan on the multi-turn deck: the environment's time in the estimate, no migration (the run refuses it)
for s in 0 0.5; do
  rlfuse $G -env command -env_turn_stop 17 -env_command "sh x.sh" -mode plan -plan_ranks 4 -plan_iterations 200 \
    -cost_hardware input/hardware/h100_sxm.deck -cost_env_seconds $s -output_dir $d/plan$s >$d/plan$s.log 2>&1 ||
    not_ok "-mode plan on episodes: $(tail -1 $d/plan$s.log)"
done
check "-mode plan on episodes: the line on the environment (3 answers of 0.5 s, 4 at a time), each answer round's wait in the estimate, no migration" \
  bash -c "grep -q '^episodes: 3 environment answers per episode of 0.5 s each (-cost_env_seconds), 4 at a time' $d/plan0.5.log &&
    t0=\$(sed -n 's/^estimated \([0-9.e+-]*\) s per iteration.*/\1/p' $d/plan0.log) &&
    t1=\$(sed -n 's/^estimated \([0-9.e+-]*\) s per iteration.*/\1/p' $d/plan0.5.log) && [ -n \"\$t0\" ] && [ -n \"\$t1\" ] &&
    awk -v a=\$t0 -v b=\$t1 'BEGIN { exit !(b - a >= 3 * 0.5 && b - a <= 3 * 0.5 * 32 + 0.01) }' &&
    grep -q 'fusion of generation and inference: ' $d/plan0.5.log && ! grep -q 'fusion of generation and inference: migrate' $d/plan0.5.log"
expect_error "-env calc with the sort task" "needs -task arith" $G -env calc -task sort
expect_error "-env command without a program" "needs -env_command" $G -env command
expect_error "-env_command without -env (a forgotten -env command)" "-env_command is given but not -env" $G -env_command "sh x.sh"
expect_error "-env_command with -env calc" "-env_command is given with -env calc" $G -env calc -env_command "sh x.sh"
mpirun 1 $G -ppo_iterations 1 -env none -env_command "sh x.sh" -output_dir $d/off >$d/off.log 2>&1
check "-env none with a deck's -env_command: the run without its environment (single responses)" \
  bash -c "grep -q '^iter    1/1' $d/off.log && ! grep -q 'calls' $d/off.log"
# -env_reward_at: PPO with a critic, the program giving a step reward (+0.25 for a call it computes, -0.25 for a '?'),
# the KL off so that the rewards are the scores alone
T="$G -algo ppo -critic_init actor -ppo_kl_coef 0 -ppo_iterations 2 -env command -env_turn_stop 17 -env_procs 2"
STEP="$PYTHON regression/ref/env_arith_calc.py 0 0.25"
for at in turn end; do
  mpirun 1 $T -env_command "$STEP" -env_reward_at $at -output_dir $d/p$at >$d/p$at.log 2>&1 ||
    not_ok "PPO with -env_reward_at $at: $(tail -1 $d/p$at.log)"
done
py "-env_reward_at recomputed" $d <<'PY'
import sys, h5py, numpy as np
sys.path.insert(0, "regression/ref")
from env_arith_calc import QUERY
d, bad, steps, rows = sys.argv[1], [], 0, 0
f = {at: h5py.File(f"{d}/p{at}/rollouts.h5", "r") for at in ("turn", "end")}
lam = 0.95  # -ppo_lambda's default; -ppo_gamma's is 1
for at, h in f.items():
    for g in sorted(h, key=lambda g: int(g.split("_")[1])):
        it = h[g]
        tok, src, rew, V, R = (it[k][()] for k in ("tokens", "source", "rewards", "values", "returns"))
        P, L, F, rule = (it[k][()].ravel() for k in ("prompt_lengths", "response_lengths", "final_scores", "rule_rewards"))
        for b in range(len(P)):
            s, e = P[b], P[b] + L[b]
            model = [t for t in range(s, e) if src[b, t] == 1]
            want = np.zeros(src.shape[1])
            step = 0.0
            for t in model:   # a model token followed by the environment's answer ends a turn that earned a step reward
                if t + 1 < e and src[b, t + 1] == 2:
                    r = -0.25 if tok[b, t + 1] == QUERY else 0.25
                    step += r; steps += at == "turn"
                    if at == "turn": want[t] = r
            if abs(F[b] - (rule[b] + step)) > 1e-6: bad.append((at, g, b, "final", F[b], rule[b], step))
            if model: want[model[-1]] += np.float32(F[b] - (step if at == "turn" else 0))
            if np.abs(rew[b] - want).max() > 1e-6: bad.append((at, g, b, "rewards", list(rew[b, s:e]), list(want[s:e])))
            A, nxt = 0.0, None   # GAE over the model tokens: V after a model token is the next model token's
            for t in reversed(model):
                vn = V[b, nxt] if nxt is not None else 0.0
                A = rew[b, t] + vn - V[b, t] + lam * A
                if abs(R[b, t] - (A + V[b, t])) > 1e-4 * max(1, abs(A + V[b, t])): bad.append((at, g, b, t, "return")); break
                nxt = t
            rows += 1
same = np.array_equal(f["turn"]["iter_0"]["tokens"][()], f["end"]["iter_0"]["tokens"][()]) and \
    np.array_equal(f["turn"]["iter_0"]["final_scores"][()], f["end"]["iter_0"]["final_scores"][()])
ok = not bad and steps > 0 and same
print(("ok" if ok else "not ok") + f" - -env_reward_at turn: each of {steps} step rewards of the program on the last model token of "
      f"the turn it answered, the rest of the final score (rule reward plus steps) at the end; -env_reward_at end: all "
      f"of it at the end; returns are GAE over the model tokens of those rewards ({rows} rows); the same first batch"
      + ("" if ok else f": {bad[:2]} same first batch {same}"))
PY
# REINFORCE++: the score less its group's mean at the end, the step rewards at their turns, returns summed from the end
mpirun 1 $T -algo reinforce_pp -rollout_group 4 -env_command "$STEP" -env_reward_at turn -output_dir $d/rpp >$d/rpp.log 2>&1 ||
  not_ok "REINFORCE++ with -env_reward_at turn: $(tail -1 $d/rpp.log)"
py "REINFORCE++ with -env_reward_at turn recomputed" $d/rpp <<'PY'
import sys, h5py, numpy as np
sys.path.insert(0, "regression/ref")
from env_arith_calc import QUERY
f, bad, steps = h5py.File(sys.argv[1] + "/rollouts.h5", "r"), [], 0
for g in f:
    it = f[g]
    tok, src, rew, R = (it[k][()] for k in ("tokens", "source", "rewards", "returns"))
    P, L, F = (it[k][()].ravel() for k in ("prompt_lengths", "response_lengths", "final_scores"))
    base = F - np.repeat(F.reshape(-1, 4).mean(1), 4)   # the group's mean of the final scores
    for b in range(len(P)):
        s, e = P[b], P[b] + L[b]
        model = [t for t in range(s, e) if src[b, t] == 1]
        want, step = np.zeros(src.shape[1]), 0.0
        for t in model:
            if t + 1 < e and src[b, t + 1] == 2:
                want[t] = -0.25 if tok[b, t + 1] == QUERY else 0.25
                step += want[t]; steps += 1
        if model: want[model[-1]] += base[b] - step
        if np.abs(rew[b] - want).max() > 1e-5: bad.append((g, b, "rewards", list(rew[b, s:e]), list(want[s:e])))
        acc = 0.0
        for t in reversed(model):   # gamma 1: what follows each model token
            acc += rew[b, t]
            if abs(R[b, t] - acc) > 1e-5: bad.append((g, b, t, "return", R[b, t], acc)); break
ok = not bad and steps > 0
print(("ok" if ok else "not ok") + f" - REINFORCE++ with -env_reward_at turn: {steps} step rewards on their turns, the score less its "
      f"group's mean less them at the end; returns summed from the end over the model tokens" + ("" if ok else f": {bad[:2]}"))
PY
expect_error "-env_reward_at turn with GRPO" "-env_reward_at turn with -algo grpo: its advantage is one per sequence" \
  $G -env calc -env_reward_at turn
expect_error "-env_reward_at turn without -env" "-env_reward_at turn places an environment's step rewards at its turns: it needs -env" \
  $G -algo ppo -critic_init actor -env_reward_at turn
# asynchronous: batch i + 1's episodes generated during iteration i; the checkpoint after iteration 2 holds batch 2
Y="$G -async_staleness 1"
mpirun 1 $Y -env calc -ppo_checkpoint_every 2 -output_dir $d/ya >$d/ya.log 2>&1 || not_ok "-async_staleness 1 with -env calc: $(tail -1 $d/ya.log)"
mpirun 1 $Y -env command -env_turn_stop 17 -env_command "$PYTHON regression/ref/env_arith_calc.py 20" -env_procs 3 \
  -output_dir $d/ycmd >$d/ycmd.log 2>&1 || not_ok "-async_staleness 1 with -env command: $(tail -1 $d/ycmd.log)"
check "asynchronous (-async_staleness 1): the calculator and the program (random latency) give the same rollouts and weights bit for bit" \
  bash -c "$(declare -f bits same_tokens); d=$d PYTHON=$PYTHON; bits ya ycmd && same_tokens ya ycmd"
mpirun 1 $Y -env calc -restart $d/ya/ckpt_000002.h5 -output_dir $d/yr >$d/yr.log 2>&1 || not_ok "asynchronous restart: $(tail -1 $d/yr.log)"
check "asynchronous: a restart whose checkpoint holds batch 2's episodes (sources, turns, calls, rewards) ends as the unbroken run bit for bit" \
  bash -c "$(declare -f bits); d=$d PYTHON=$PYTHON; h5ls $d/ya/ckpt_000002.h5/async/batch_2/source >/dev/null && bits ya yr"
# stopped by SIGTERM while the next batch's episodes are queued, then -restart latest
"$MPIEXEC" $MPIEXEC_FLAGS -n 1 env OMP_NUM_THREADS=1 "$BIN/rlfuse" $Y -env calc -ppo_iterations 1000000 -ppo_eval_prompts 0 \
  -output_dir $d/ys >$d/ys.log 2>&1 &
pid=$! n=0
until grep -q "^iter    2/" $d/ys.log 2>/dev/null || [ $n -ge 3000 ] || ! kill -0 $pid 2>/dev/null; do sleep 0.02; n=$((n + 1)); done
for p in $(pgrep -f -- "-output_dir $d/ys\$"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = rlfuse ] && kill -TERM $p; done
n=0; while kill -0 $pid 2>/dev/null && [ $n -lt 3000 ]; do sleep 0.02; n=$((n + 1)); done
kill -0 $pid 2>/dev/null && { kill -9 $pid; pkill -9 -f -- "-output_dir $d/ys\$"; }
wait $pid
k=$(sed -n 's/.*stopped by SIGTERM after iteration \([0-9]*\):.*/\1/p' $d/ys.log); k=${k:-0}
mpirun 1 $Y -env calc -ppo_iterations $((k + 2)) -ppo_eval_prompts 0 -output_dir $d/ys -restart latest >$d/ysr.log 2>&1 ||
  not_ok "asynchronous resume after SIGTERM: $(tail -1 $d/ysr.log)"
mpirun 1 $Y -env calc -ppo_iterations $((k + 2)) -ppo_eval_prompts 0 -output_dir $d/yf >$d/yf.log 2>&1
check "asynchronous: stopped by SIGTERM after iteration $k with batch $k's episodes queued, -restart latest ends as the unbroken run bit for bit" \
  bash -c "$(declare -f bits); d=$d PYTHON=$PYTHON; [ $k -ge 2 ] && h5ls $d/ys/ckpt_$(printf %06d $k).h5/async/batch_$k/source >/dev/null && bits yf ys"
mpirun 1 $T -async_staleness 1 -ppo_iterations 4 -ppo_checkpoint_every 2 -env_command "$STEP" -env_reward_at turn \
  -output_dir $d/yt >$d/yt.log 2>&1 || not_ok "-async_staleness 1 with -env_reward_at turn: $(tail -1 $d/yt.log)"
mpirun 1 $T -async_staleness 1 -ppo_iterations 4 -env_command "$STEP" -env_reward_at turn -restart $d/yt/ckpt_000002.h5 \
  -output_dir $d/ytr >$d/ytr.log 2>&1 || not_ok "asynchronous restart with -env_reward_at turn: $(tail -1 $d/ytr.log)"
has_at() { "$PYTHON" -c "import sys, h5py; sys.exit(not (h5py.File(sys.argv[1], 'r')['async/batch_2/env_at'][()] != 0).any())" "$1"; }
check "asynchronous PPO with -env_reward_at turn: a restart whose queued batch holds step rewards at their turns (env_at) ends as the unbroken run bit for bit" \
  bash -c "$(declare -f bits has_at); d=$d PYTHON=$PYTHON; has_at $d/yt/ckpt_000002.h5 && bits yt ytr"
expect_error "asynchronous: a checkpoint with episodes restarted without -env" "batch_2 holds multi-turn episodes (written with -env)" \
  $Y -restart $d/ya/ckpt_000002.h5 -output_dir $d/yno
cp $d/ya/ckpt_000002.h5 $d/ybad.h5
"$PYTHON" -c "
import sys, h5py
with h5py.File(sys.argv[1], 'r+') as f:
    b = f['async/batch_2']; P = int(b['prompt_lengths'][0]); s = b['source'][()]; s[0, P] = 2; b['source'][...] = s
" $d/ybad.h5
expect_error "asynchronous: a batch whose first response token is the environment's, refused naming the field" \
  "ybad.h5: /async/batch_2/source\[0, [0-9]*\] = 2: a response's tokens are the model's" $Y -env calc -restart $d/ybad.h5 -output_dir $d/ybad
expect_error "-env calc with -fuse_gen_inf migrate" "-fuse_gen_inf migrate: a migrated sample would leave its episode's environment behind" \
  $G -env calc -fuse_gen_inf migrate
expect_error "-env calc with -async_partial 4" "partial rollouts do not carry episodes in flight" $Y -env calc -async_partial 4
expect_error "-env_lag_steps 0" "-env_lag_steps 0 must be in" $G -env calc -env_lag_steps 0
expect_error "-env_turn_stop outside the vocabulary" "token 99 is not a token of the actor's vocabulary of 48" $G -env calc -env_turn_stop 99
printf '%s\n' 'while read line; do case "$line" in *reset*) echo "{\"state\": \"\"}" ;; *) exit 3 ;; esac; done' >$d/crash.sh
expect_error "an environment that exits at its first step" "sample [0-9]*, turn 1: process 1 of 1 exited" \
  $G -env command -env_turn_stop 17 -env_command "sh $d/crash.sh" -env_procs 1 -output_dir $d/crash
finish
