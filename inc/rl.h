/* rl: the training jobs and their data. For now the built-in synthetic task
 * (sorting symbols, with long-tailed lengths and a programmatic judge), the
 * dataset source used by training, supervised fine-tuning (-mode sft), and
 * scoring of token files with a checkpoint (-mode score). */
#ifndef RLFUSE_RL_H
#define RLFUSE_RL_H

#include "io.h"
#include "gen.h"
#include "plan.h"

/* ---- the built-in sort task ------------------------------------------- */
/* Token ids: 0 PAD, 1 BOS, 2 SEP, 3 EOS, symbols 4 .. 4+n_symbols-1.
 * A prompt is BOS s_1..s_L SEP; the ideal response is the symbols sorted
 * ascending, then EOS. L is log-normal (median len_median, shape len_sigma)
 * truncated to [len_min, len_max], so response lengths are long-tailed. */
enum { TASK_PAD = 0, TASK_BOS = 1, TASK_SEP = 2, TASK_EOS = 3, TASK_FIRST_SYMBOL = 4 };
typedef enum { TASK_SPLIT_TRAIN = 0, TASK_SPLIT_EVAL = 1 } TaskSplit;

typedef struct {
  PetscInt  n_symbols, len_min, len_max;
  PetscReal len_median, len_sigma;
  PetscReal demo_noise; /* probability that a demonstration token is a random symbol */
  PetscInt  seed;       /* the task's own seed: prompts do not change with -seed */
} SortTask;

PetscErrorCode task_set_from_options(SortTask *task);
/* Checks the task fits a model: vocabulary and context (2*len_max+3 tokens). */
PetscErrorCode task_check(const SortTask *task, int vocab_size, int n_positions, const char *prefix);
/* Prompt `index` of a split, BOS s_1..s_L SEP, into tok (room for
 * len_max+2); returns its length L+2. The splits are disjoint by content: a
 * prompt's split is a hash of its symbols, so no training prompt is ever a
 * held-out one. */
int  task_prompt(const SortTask *task, TaskSplit split, uint64_t index, int *tok);
/* Writes prompt + demonstration into tok (room for 2*len_max+3), returns the
 * total length; *prompt_len gets L+2. */
int  task_demo(const SortTask *task, TaskSplit split, uint64_t index, int *tok, int *prompt_len);
/* Gold score in [0,1] of a response to a prompt: the fraction of positions of
 * the sorted answer that the response gets right, over max(L, response
 * length), and 0 unless the response ends with EOS. */
double task_judge(const int *prompt, int prompt_len, const int *response, int response_len);

/* ---- training data ------------------------------------------------------ */
/* Demonstrations for SFT: the built-in task or a file in the documented
 * dataset format; sample order is a pure function of (seed, position). */
typedef struct {
  PetscBool builtin;
  SortTask  task;
  TokenData file;
  char      path[PETSC_MAX_PATH_LEN];
  uint64_t  seed;
  int      *perm;       /* file order of the current epoch */
  int64_t   perm_epoch; /* epoch perm belongs to, -1 if none */
} DemoSource;
PetscErrorCode demo_source_setup(MPI_Comm comm, const char *path, const SortTask *task, uint64_t seed, DemoSource *src);
PetscErrorCode demo_source_destroy(DemoSource *src);
/* Sample number `pos` of the stream (pos counts samples consumed): tokens,
 * length and prompt length; tok has room for T+1 tokens (longer samples are
 * an error reported at setup). */
PetscErrorCode demo_source_get(DemoSource *src, uint64_t pos, int T1, int *tok, int *len, int *prompt_len);
/* Longest sample the source can produce. */
int demo_source_max_len(const DemoSource *src);

/* ---- RL math (src/rl/rlmath.c): pure functions on host arrays ----------- */
/* Sequences are rows of [B, T] arrays; row b's response occupies positions
 * start[b] .. start[b]+len[b]-1 (len may be 0). Per-position arrays are
 * aligned so that index t refers to the token at position t: logp[t] is the
 * log-probability of token t, values[t] the critic's value of the state
 * before token t. Entries outside the response are not read and are written
 * as 0 by the functions that produce [B,T] arrays. */

/* Per-token rewards: r_t = -kl_coef * (logp_t - ref_t) on every response
 * token, plus score[b] on the last response token. score is the already
 * clipped reward-model score (or the truncation penalty): see rl_final_score. */
void rl_kl_rewards(int B, int T, const int *start, const int *len, const float *logp, const float *ref, const float *score, double kl_coef, float *rewards);
/* The sequence-level score entering the rewards: clamp(rm_score, -clip,
 * clip) when the response ended with EOS (clip <= 0: no clipping), else
 * truncation_penalty. */
double rl_final_score(double rm_score, int eos, double clip, double truncation_penalty);
/* GAE: delta_t = r_t + gamma*V_{t+1} - V_t, A_t = delta_t + gamma*lambda*A_{t+1},
 * with V and A zero after the last response token; returns = A + V. */
void rl_gae(int B, int T, const int *start, const int *len, const float *rewards, const float *values, double gamma, double lambda, float *adv, float *ret);
/* Whitening over all response tokens of the batch: x = (x - mean)/(std + 1e-8),
 * std the population standard deviation (sums in double, fixed order).
 * *mean and *std (may be NULL) get the statistics before whitening. */
void rl_whiten(int B, int T, const int *start, const int *len, float *x, double *mean, double *std);

/* Clipped policy loss over n tokens with weights w (0 for tokens that do not
 * count; 1/ntokens of the mini-batch for a token mean):
 *   loss = sum_i w_i * max(-A_i*rho_i, -A_i*clip(rho_i, 1-eps, 1+eps)), rho = exp(logp - old)
 * dlogp[i] = d loss / d logp_i. *clipfrac (may be NULL) gets the sum of w_i over
 * tokens where the clipped term is the larger one strictly (no gradient). */
double rl_policy_loss(size_t n, const float *logp, const float *old, const float *adv, const float *w, double eps, float *dlogp, double *clipfrac);
/* Clipped value loss: loss = sum_i w_i * 0.5*max((v-R)^2, (v_old + clip(v - v_old, -eps_v, eps_v) - R)^2);
 * dv[i] = d loss / d v_i; *clipfrac as above. eps_v <= 0: no clipping. */
double rl_value_loss(size_t n, const float *v, const float *v_old, const float *ret, const float *w, double eps_v, float *dv, double *clipfrac);
/* KL penalty as a loss term (GRPO; the k3 estimator of KL(pi||ref)):
 * loss = sum_i w_i * coef * (exp(ref_i - logp_i) - (ref_i - logp_i) - 1); dlogp[i] += d loss / d logp_i. */
double rl_kl_loss(size_t n, const float *logp, const float *ref, const float *w, double coef, float *dlogp);
/* GRPO advantages: sequences come in groups of k consecutive samples of one
 * prompt; adv[i] = (score[i] - mean of its group) / (std of its group + eps),
 * std the sample standard deviation (k-1 in the denominator). k >= 2. */
void rl_grpo_advantages(int nseq, int k, const float *score, double eps, float *adv);
/* Bradley-Terry reward-model loss, mean over B pairs: -log sigmoid(rc - rr)
 * (computed stably); drc, drr get the gradients; *correct (may be NULL) the
 * number of pairs with rc > rr. */
double rl_rm_loss(int B, const float *rc, const float *rr, float *drc, float *drr, int *correct);
/* The same over n of a batch's B pairs (a replica's share): returns the SUM
 * of the n losses, and the gradients are those of the batch mean (1/B). */
double rl_rm_loss_part(int n, int B, const float *rc, const float *rr, float *drc, float *drr, int *correct);
/* Adaptive KL controller (Ziegler et al. 2019): err = clamp(kl/target - 1,
 * -0.2, 0.2); returns coef * (1 + err * nsteps / horizon). */
double rl_kl_adapt(double coef, double kl, double target, double horizon, double nsteps);

/* ---- preference pairs ---------------------------------------------------- */
/* A pair file is a token dataset (docs/formats.md) whose rows come in pairs:
 * row 2i is the chosen response, row 2i+1 the rejected one, both to the same
 * prompt (prompt_lengths required). gold holds the judge's score of each row
 * for built-in pairs (NaN for a user's file); training never reads it. */
typedef struct {
  TokenData d;
  float    *gold; /* [d.N] */
} PrefPairs;
/* Samples two responses per prompt of `split` from the engine's policy and
 * labels them like a human would: the first is preferred with probability
 * sigmoid(bt_beta * (gold_a - gold_b)) (Bradley-Terry noise), drawn from a
 * stream keyed by (seed, split, prompt). Pairs the judge scores equal are
 * dropped (the labeller has no preference); prompts are taken in order until
 * npairs pairs are kept. */
PetscErrorCode prefs_generate(GenEngine *eng, const GenConfig *gen, const SortTask *task, TaskSplit split, int npairs, uint64_t seed, double bt_beta, PrefPairs *p);
PetscErrorCode prefs_read(MPI_Comm comm, const char *path, PrefPairs *p);
PetscErrorCode prefs_free(PrefPairs *p);

/* Fisher-Yates permutation of 0..N-1 keyed by (seed, stream, epoch). */
void rl_shuffle(int *perm, int N, uint64_t seed, uint32_t stream, int64_t epoch);

/* ---- jobs --------------------------------------------------------------- */
/* Each job reads its options (X_options), which -help also uses, then runs
 * (X_execute); -mode pipeline reads all three before running any. */
typedef struct {
  PetscInt    steps, batch, seq_len, checkpoint_every, eval_every, eval_batches;
  char        data[PETSC_MAX_PATH_LEN], restart[PETSC_MAX_PATH_LEN], init[PETSC_MAX_PATH_LEN];
  GPTConfig   cfg;
  AdamWConfig opt;
  SortTask    task;
  Plan        plan; /* the sft_train call's mesh and micro-batches */
} SFTOptions;
PetscErrorCode sft_options(SFTOptions *o);
PetscErrorCode sft_execute(const RunCtx *run, const Backend *be, SFTOptions *o);
PetscErrorCode sft_run(const RunCtx *run, const Backend *be);

typedef struct {
  PetscInt    steps, batch, pairs, eval_pairs, eval_every, checkpoint_every;
  PetscReal   bt_beta;
  char        sft[PETSC_MAX_PATH_LEN], data[PETSC_MAX_PATH_LEN], restart[PETSC_MAX_PATH_LEN];
  AdamWConfig opt;
  SortTask    task;
  GenConfig   gen;
  Plan        plan; /* the rm_train call's mesh and micro-batches */
} RMOptions;
PetscErrorCode rm_options(RMOptions *o);
PetscErrorCode rm_execute(const RunCtx *run, const Backend *be, RMOptions *o);
PetscErrorCode rm_run(const RunCtx *run, const Backend *be);

/* PPO and GRPO (-mode ppo); options and internals in src/rl/ppo_impl.h. */
PetscErrorCode ppo_run(const RunCtx *run, const Backend *be);
/* SFT, then RM from the SFT checkpoint, then PPO from both (-mode pipeline). */
PetscErrorCode pipeline_run(const RunCtx *run, const Backend *be);

PetscErrorCode score_run(const RunCtx *run, const Backend *be);
PetscErrorCode data_run(const RunCtx *run);

#endif
