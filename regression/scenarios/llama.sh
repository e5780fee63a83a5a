# The LLaMA family through the whole pipeline on micro models (4 query heads
# over 2 key/value heads, SwiGLU, RMSNorm, rotary positions): SFT on 1 rank
# and on tp 2 x dp 2, pp 2 and tp 4 (each kv head replicated on 2 ranks),
# with the same weights and moments within the train_layouts.sh tolerances,
# a checkpoint that carries the architecture (no -policy_* option needed
# after it), restarts from a tp 2 checkpoint on 1 rank and from a tp 4 one on
# tp 2, the reward model and a critic on a LLaMA trunk, PPO with the actor's
# reallocation (train tp 2, generation dp 2; train tp 4, generation tp 2 x
# dp 2) and with both fusions (streaming; migration of the long tail) as on
# 1 rank, an untied multi-query Qwen2-style policy with q/k/v biases on tp 2
# (its one kv head replicated), a Qwen3-style policy (head_dim 24 over
# n_embd 64, per-head q/k norms) on tp 2 and pp 2, -mode generate (the same tokens on 1 rank,
# dp 4, pp 2 x tp 2 and tp 4; greedy equal to the highest log-probability;
# its output scored by -mode score), and the refusals: tp neither dividing
# the kv heads nor a multiple of them, options the architecture does not
# use, a deck whose architecture differs from the checkpoint's.
#
# The checks in detail: the LLaMA family through the pipeline on micro models (4 query heads
# over 2 kv heads): SFT on 1 rank, on tp 2 x dp 2 and pp 2 (weights and moments within 1e-3 as
# in train_layouts.sh, metrics within 1e-4), a restart on 1 rank from the tp 2 x dp 2 run's
# step-6 checkpoint; the checkpoint's LLaMA names, shapes and attributes; a reward model on
# the LLaMA trunk; PPO from the checkpoints with no model option, on 2 ranks with the actor's
# reallocation (train tp 2, generate dp 2; train pp 2, generate tp 2) and with both fusions
# (finished samples streamed into inference; the long tail migrated at R_t 1, samples moved)
# as on 1 rank; SFT from `-init_checkpoint` with no model option, its used.deck repeating it
# bit for bit; an untied model with q/k/v biases on tp 2; `-mode generate` giving the same
# responses and log-probabilities on 1 rank, dp 4 and pp 2 x tp 2, every response ending at a
# stop token or the length limit, its output scored by `-mode score` back to the greedy
# responses' log-probabilities; refusals (tp not dividing the kv heads, a LLaMA option on a
# GPT-2 model, a deck whose arch differs from the checkpoint's, generate from a reward model,
# a malformed `-gen_stop`) one line each. About 15 s
. regression/lib.sh
plan 26
d="$RLFUSE_TMP/llama"; mkdir -p $d
Q="-policy_arch llama -policy_n_layer 2 -policy_n_head 4 -policy_n_kv_head 2 -policy_n_ffn 96 -policy_n_embd 64 -policy_vocab_size 20
   -policy_n_positions 48 -policy_rope_theta 10000 -policy_norm_eps 1e-6 -task_demo_noise 0.25 -task_len_max 8 -seed 5"
S="-mode sft $Q -sft_steps 12 -sft_batch 16 -policy_lr 2e-3 -sft_eval_every 6 -checkpoint_every 6"

mpirun 1 $S -output_dir $d/sft1 >$d/sft1.log 2>&1 || { not_ok "LLaMA SFT on 1 rank"; tail -3 $d/sft1.log; }
check "the checkpoint holds Hugging Face LLaMA names and the architecture" "$PYTHON" -c "
import h5py; g = h5py.File('$d/sft1/final.h5', 'r')['policy']
a = g.attrs
assert a['arch'] == 'llama' and a['n_kv_head'] == 2 and a['n_ffn'] == 96 and a['tie_embeddings'] == 1 and a['norm_eps'] == 1e-6, dict(a)
p = g['params']
assert p['model.layers.1.self_attn.k_proj.weight'].shape == (32, 64) and p['model.layers.0.mlp.gate_proj.weight'].shape == (96, 64)
assert 'lm_head.weight' not in p and 'model.norm.weight' in p and len(p) == 1 + 2 * 9 + 1, sorted(p)"
run_layout "SFT on 4 ranks, tp 2 x dp 2" "$S" sft1 4 sft_tp -sft_train_tp 2
run_layout "SFT on 2 ranks, pp 2 (1F1B over 4 micro-batches)" "$S" sft1 2 sft_pp -sft_train_pp 2 -sft_train_mbs 4
# restart the tp 2 run's step-6 checkpoint on 1 rank: the same end as 1 rank
run_layout "SFT restarted on 1 rank from the tp 2 x dp 2 run's step-6 checkpoint" "$S" sft1 1 sft_restart -restart $d/sft_tp/ckpt_000006.h5
# tp 4 over 2 kv heads: ranks {0,1} and {2,3} each hold one kv head and add its gradient
run_layout "SFT on 4 ranks, tp 4 (each kv head replicated on 2 ranks)" "$S" sft1 4 sft_tp4 -sft_train_tp 4
run_layout "SFT restarted on tp 2 from the tp 4 run's step-6 checkpoint (replicated kv heads written once)" "$S" sft1 2 sft_restart_tp4 -restart $d/sft_tp4/ckpt_000006.h5 -sft_train_tp 2

# SFT from the checkpoint with no model option: the architecture is the file's (and used.deck names it)
mpirun 1 -mode sft -init_checkpoint $d/sft1/final.h5 -sft_steps 2 -sft_batch 8 -task_len_max 8 -output_dir $d/init >$d/init.log 2>&1 &&
  grep -q -- "-policy_arch llama" $d/init/used.deck && grep -q -- "-policy_n_kv_head 2" $d/init/used.deck &&
  mpirun 1 -options_file $d/init/used.deck -output_dir $d/init_again >$d/init_again.log 2>&1 && h5diff $d/init/final.h5 $d/init_again/final.h5 >/dev/null &&
  ok "SFT from a LLaMA checkpoint needs no model option; its used.deck names the architecture and repeats the run bit for bit" ||
  { not_ok "SFT from a LLaMA checkpoint without model options"; tail -3 $d/init.log $d/init_again.log | sed 's/^/# /'; }

R="-mode rm -rm_sft_checkpoint $d/sft1/final.h5 -task_demo_noise 0.25 -task_len_max 8 -seed 5 -rm_pairs 64 -rm_eval_pairs 20 -rm_steps 8
   -rm_batch 16 -reward_lr 1e-3 -gen_max_new_tokens 12"
mpirun 1 $R -output_dir $d/rm >$d/rm.log 2>&1 || { not_ok "reward model on the LLaMA SFT policy"; tail -3 $d/rm.log; }
check "the reward model is a LLaMA trunk with a scalar head" "$PYTHON" -c "
import h5py; g = h5py.File('$d/rm/final.h5', 'r')['reward']
assert g.attrs['arch'] == 'llama' and g.attrs['head'] == 'scalar' and g['params/score.weight'].shape == (1, 64)"
P="-mode ppo -actor_checkpoint $d/sft1/final.h5 -reward_checkpoint $d/rm/final.h5 -ppo_iterations 4 -rollout_batch 16 -ppo_minibatches 2
   -ppo_microbatches 2 -ppo_kl_coef 0.05 -ppo_eval_every 2 -ppo_eval_prompts 16 -actor_lr 1e-3 -critic_lr 1e-3 -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -seed 13"
mpirun 1 $P -output_dir $d/ppo1 >$d/ppo1.log 2>&1 || { not_ok "PPO on LLaMA models"; tail -3 $d/ppo1.log; }
check "PPO from LLaMA checkpoints needs no model option (four iterations)" test "$(grep -c '^iter ' $d/ppo1.log)" -eq 4
run_layout "PPO on 2 ranks: actor trains with tp 2, generates with dp 2 (reallocated every iteration)" "$P" ppo1 2 ppo_tp -actor_train_tp 2 -actor_train_dp 1 -actor_gen_dp 2
run_layout "PPO on 2 ranks: actor trains with pp 2, generates with tp 2" "$P" ppo1 2 ppo_pp -actor_train_pp 2 -actor_train_dp 1 -actor_gen_tp 2 -actor_gen_dp 1
run_layout "PPO on 4 ranks: actor and critic train with tp 4 (kv heads replicated), actor generates with tp 2 x dp 2" "$P" ppo1 4 ppo_tp4 \
  -actor_train_tp 4 -actor_train_dp 1 -critic_train_tp 4 -critic_train_dp 1 -actor_gen_tp 2 -actor_gen_dp 2

# both fusions of generation with inference on LLaMA models (the KV caches hold n_kv_head heads)
run_layout "PPO with finished samples streamed into inference (-fuse_gen_inf stream), 2 ranks" "$P" ppo1 2 ppo_stream -fuse_gen_inf stream -fuse_tokens 40 \
  -actor_gen_ranks 0 -ref_inf_ranks 1 -rew_inf_ranks 1 -critic_inf_ranks 1
run_layout "PPO with the long tail migrated at R_t 1 onto one replica, 2 ranks" "$P" ppo1 2 ppo_migrate -fuse_gen_inf migrate -fuse_tokens 40 -fuse_migrate_at 1 -fuse_migrate_replicas 1
check "the migration moved samples with their caches" "$PYTHON" -c "
import h5py; m = h5py.File('$d/ppo_migrate/run.h5', 'r')['metrics']; assert m['migrate_samples'][()].sum() > 0"

U="-mode sft ${Q/-policy_n_kv_head 2/-policy_n_kv_head 1 -policy_qkv_bias -policy_tie_embeddings false} -sft_steps 6 -sft_batch 16 -policy_lr 2e-3 -sft_eval_every 3"
mpirun 1 $U -output_dir $d/untied1 >$d/untied1.log 2>&1 || { not_ok "untied multi-query LLaMA with q/k/v biases"; tail -3 $d/untied1.log; }
run_layout "untied multi-query LLaMA with q/k/v biases, tp 2 (the kv head and its biases replicated)" "$U" untied1 2 untied_tp -sft_train_tp 2

Q3="-mode sft ${Q/-policy_n_kv_head 2/-policy_n_kv_head 2 -policy_head_dim 24 -policy_qk_norm} -sft_steps 6 -sft_batch 16 -policy_lr 2e-3 -sft_eval_every 3"
mpirun 1 $Q3 -output_dir $d/qwen3_1 >$d/qwen3_1.log 2>&1 || { not_ok "Qwen3-style policy"; tail -3 $d/qwen3_1.log; }
run_layout "Qwen3-style policy (head_dim 24, q/k norms), tp 2" "$Q3" qwen3_1 2 qwen3_tp -sft_train_tp 2
run_layout "Qwen3-style policy (head_dim 24, q/k norms), pp 2" "$Q3" qwen3_1 2 qwen3_pp -sft_train_pp 2 -sft_train_mbs 2

rlfuse() { "$MPIEXEC" $MPIEXEC_FLAGS -n 4 "$BIN/rlfuse" "$@"; }
# -mode generate: 10 prompts of 3..9 task tokens
"$PYTHON" -c "
import h5py, numpy as np
r = np.random.default_rng(0); B, T = 10, 9
tok = np.zeros((B, T), np.int32); L = r.integers(3, T + 1, B).astype(np.int32)
for b in range(B): tok[b, :L[b]] = r.integers(4, 20, L[b])
with h5py.File('$d/prompts.h5', 'w') as f: f['tokens'] = tok; f['lengths'] = L"
G="-mode generate -generate_checkpoint $d/sft1/final.h5 -generate_input $d/prompts.h5 -gen_max_new_tokens 12 -gen_stop 5 -seed 3"
mpirun 1 $G -generate_output $d/gen1.h5 >$d/gen1.log 2>&1 || { not_ok "generate on 1 rank"; tail -3 $d/gen1.log; }
mpirun 4 $G -generate_output $d/gen4.h5 >$d/gen4.log 2>&1 && mpirun 4 $G -generate_output $d/genpt.h5 -actor_gen_pp 2 -actor_gen_tp 2 >$d/genpt.log 2>&1 &&
  mpirun 4 $G -generate_output $d/gentp4.h5 -actor_gen_tp 4 >$d/gentp4.log 2>&1 &&
  h5diff -d 1e-5 $d/gen1.h5 $d/gen4.h5 >/dev/null && h5diff -d 1e-5 $d/gen1.h5 $d/genpt.h5 >/dev/null && h5diff -d 1e-5 $d/gen1.h5 $d/gentp4.h5 >/dev/null &&
  ok "generate: the same responses and log-probabilities on 1 rank, dp 4, pp 2 x tp 2 and tp 4 (kv caches of replicated heads)" || not_ok "generate differs across layouts"
check "generate: every response ends at -gen_stop 5, -gen_eos 3 or after 12 tokens" "$PYTHON" -c "
import h5py, numpy as np; f = h5py.File('$d/gen1.h5', 'r')
tok, P, R, L, S, lp = (f[k][()] for k in ('tokens', 'prompt_lengths', 'response_lengths', 'lengths', 'stopped', 'logprobs'))
assert (L == P + R).all() and (R >= 1).all() and f.attrs['task'] in (b'generate', 'generate')
for b in range(len(P)):
    last = tok[b, L[b] - 1]
    assert (S[b] == 1) == (last in (3, 5)) and (S[b] == 1 or R[b] == 12), (b, S[b], last, R[b])
    assert (lp[b, P[b]:L[b]] < 0).all() and (lp[b, :P[b]] == 0).all() and (tok[b, L[b]:] == 0).all()"
mpirun 1 $G -generate_output $d/greedy.h5 -gen_greedy >$d/greedy.log 2>&1 &&
  mpirun 1 -mode score -score_checkpoint $d/sft1/final.h5 -score_input $d/greedy.h5 -score_output $d/greedy_score.h5 >$d/score.log 2>&1 &&
  "$PYTHON" -c "
import h5py, numpy as np
g = h5py.File('$d/greedy.h5', 'r'); s = h5py.File('$d/greedy_score.h5', 'r')['logprobs'][()]
P, L, lp = g['prompt_lengths'][()], g['lengths'][()], g['logprobs'][()]
for b in range(len(P)):  # score's row t is log p(token t+1): the generation's log-probabilities again
    assert np.allclose(s[b, P[b] - 1:L[b] - 1], lp[b, P[b]:L[b]], atol=2e-5), b" &&
  ok "generate's output is a token file: -mode score gives back the greedy responses' log-probabilities" || not_ok "generate output scored"
expect_error "generate refuses a reward model" "-generate_role reward has a scalar head (a reward model or critic); generating needs an LM head" -mode generate -generate_checkpoint $d/rm/final.h5 -generate_role reward \
  -generate_input $d/prompts.h5 -generate_output $d/bad.h5
expect_error "generate refuses a malformed -gen_stop" "gen_stop '5,x'" $G -generate_output $d/bad.h5 -gen_stop 5,x
expect_error "tp neither dividing the kv heads nor a multiple of them is refused" "sft_train_tp 2 neither divides the model's n_kv_head 3" \
  ${S/-policy_n_head 4 -policy_n_kv_head 2/-policy_n_head 6 -policy_n_kv_head 3} -policy_n_embd 60 -output_dir $d/bad1 -sft_train_tp 2
rlfuse() { "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" "$@"; }
expect_error "a LLaMA option on a GPT-2 model is refused" "policy_n_kv_head" -mode sft -policy_n_kv_head 2 -sft_steps 1 -output_dir $d/bad2
expect_error "a deck whose architecture differs from the checkpoint's is refused" "arch llama in the file, gpt2 in the deck" -mode sft -sft_steps 14 \
  -policy_n_layer 2 -policy_n_head 4 -policy_n_embd 64 -policy_vocab_size 20 -policy_n_positions 48 -restart $d/sft1/ckpt_000006.h5 -output_dir $d/bad3
finish
