/* PPO and its critic-free variants (-mode ppo; the algorithms are the rows
 * of src/ppo/algos.c): the actor generates, the reference, reward model
 * and critic score the rollout, the advantages follow from the rewards, and
 * the actor and critic train on it (docs/background.md, sections 1-2).
 * Checkpoints hold the actor, critic and reward model (the reference too, or
 * only its input file's name and checksum when it is that file unchanged),
 * both optimizers, the iteration, the data position, the RNG key and the KL
 * coefficient, so a restart continues bit-identically. */
#include "ppo_impl.h"
#include <limits.h>
#include "search.h"
#include <math.h>

static const char *const kl_in_names[]  = {"auto", "reward", "loss", "PPOKLIn", "KL_IN_", NULL};
static const char *const agg_names[]    = {"token_mean", "seq_mean", "seq_sum_norm", "RLLossAgg", "RL_AGG_", NULL};
static const char *const kl_est_names[] = {"k1", "k2", "k3", "RLKLEstimator", "RL_KL_", NULL};
static const char *const critic_names[] = {"reward", "actor", "CriticInit", "CRITIC_FROM_", NULL};
static const char *const async_corr_names[] = {"decoupled", "tis", "none", "PPOAsyncCorrection", "ASYNC_", NULL};

/* The rows that put the KL in the loss under -ppo_kl_in auto; that draw groups. */
static PetscBool algo_kl_in_loss(const PPOAlgoSpec *a) { return a->kl_in_loss; }
static PetscBool algo_groups(const PPOAlgoSpec *a) { return a->groups; }

/* Every PPO option but the plan's and the trainer's: what describes the
 * job to the cost model (ppo_cost_deck) whatever ranks it is planned for. */
static PetscErrorCode ppo_job_options(const TrainJobOptions *job, PPOOptions *o)
{
  const char *algo_names[16];
  char        algo_help[512], kl_auto[128], kl_help[320];

  PetscFunctionBegin;
  PetscCall(ppo_algo_choices(algo_names, (int)(sizeof algo_names / sizeof algo_names[0]), algo_help, sizeof algo_help));
  PetscCall(PetscStrncpy(o->prompts, "builtin", sizeof o->prompts));
  o->actor_ckpt[0] = o->reference_ckpt[0] = o->restart[0] = o->eval_file[0] = '\0'; /* o->reward: reward_options_from_options */
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "PPO / GRPO", NULL);
  RfOptEnum("-algo", algo_help, algo_names, ppo_nalgos, &o->algo);
  RfOptInt("-rollout_batch", "Responses generated per iteration", 64, &o->rollout_batch);
  RfOptString("-actor_checkpoint", "SFT checkpoint (role policy) that starts the actor", o->actor_ckpt, sizeof o->actor_ckpt);
  RfOptString("-reference_checkpoint", "Checkpoint (role policy) of the frozen reference (default: -actor_checkpoint)", o->reference_ckpt, sizeof o->reference_ckpt);
  RfOptEnum("-critic_init", "Critic starts from the reward model (whole) or the actor's trunk with a fresh scalar head", critic_names, 2, &o->critic_init);
  RfOptBool("-dump_rollouts", "Write every iteration's rollout to <output_dir>/rollouts.h5", PETSC_FALSE, &o->dump_rollouts);
  RfOptBool("-write_policy", "At the end also write <output_dir>/policy.h5: the trained actor's weights alone under the role policy (for -actor_checkpoint, -mode eval and generate, tools/hf_export.py; final.h5 is the restartable checkpoint)",
            PETSC_TRUE, &o->write_policy);
  PetscOptionsEnd();
  PetscCall(PetscStrncpy(o->restart, job->restart, sizeof o->restart));
  PetscCall(train_stage_checkpoint_every(job, "ppo", "iteration", &o->checkpoint_every));
  PetscOptionsBegin(PETSC_COMM_WORLD, "ppo_", "PPO / GRPO", NULL);
  RfOptInt("-iterations", "Iterations (generate, score, train) in total (a restart continues up to this count)", 100, &o->iterations);
  RfOptString("-prompts", "Prompts: 'builtin' (the sort task) or an HDF5 token file (prompt_lengths, or whole rows)", o->prompts, sizeof o->prompts);
  RfOptInt("-minibatches", "Mini-batches per epoch (one optimizer step each); must divide -rollout_batch", 4, &o->minibatches);
  RfOptInt("-microbatches", "Micro-batches per mini-batch (gradient accumulation); must divide the mini-batch", 1, &o->microbatches);
  RfOptInt("-epochs", "Passes over each rollout", 1, &o->epochs);
  RfOptReal("-kl_coef", "beta: the KL's coefficient, in the rewards or in the loss (-ppo_kl_in)", 0.05, &o->kl_coef);
  RfOptReal("-kl_target", "Adaptive KL controller's target KL per sequence (0: fixed -ppo_kl_coef)", 0.0, &o->kl_target);
  RfOptReal("-kl_horizon", "Adaptive KL controller's horizon, in samples", 10000.0, &o->kl_horizon);
  RfOptReal("-gamma", "Discount of GAE", 1.0, &o->gamma);
  RfOptReal("-lambda", "lambda of GAE", 0.95, &o->lambda);
  RfOptReal("-clip", "epsilon: policy ratio clip", 0.2, &o->clip);
  RfOptReal("-clip_low", "The ratio's lower clip, 1 - clip_low (default -ppo_clip)", o->clip, &o->clip_low);
  RfOptReal("-clip_high", "The ratio's upper clip, 1 + clip_high (default -ppo_clip; DAPO's clip-higher: 0.28 with clip_low 0.2)", o->clip, &o->clip_high);
  o->loss_agg     = ppo_algo(o)->loss_agg;
  o->kl_estimator = RL_KL_K3;
  RfOptEnum("-loss_agg", "How the policy loss weighs tokens in a mini-batch: token_mean (every token alike), seq_mean (each sequence's token mean, averaged), seq_sum_norm (each sequence's token sum over -gen_max_new_tokens: Dr. GRPO)", agg_names, 3, &o->loss_agg);
  o->kl_in = KL_IN_AUTO;
  PetscCall(ppo_algo_join(algo_kl_in_loss, PETSC_TRUE, kl_auto, sizeof kl_auto));
  PetscCall(PetscSNPrintf(kl_help, sizeof kl_help, "Where the KL to the reference enters: reward (a per-token penalty in the rewards, k1), loss (a loss term with -ppo_kl_estimator), auto (loss for %s, reward otherwise)", kl_auto));
  RfOptEnum("-kl_in", kl_help, kl_in_names, 3, &o->kl_in);
  RfOptEnum("-kl_estimator", "Estimator of KL(policy||reference) in the KL loss (-ppo_kl_in loss): k1 (log ratio), k2 (half its square), k3 (exp(-r) + r - 1)", kl_est_names, 3, &o->kl_estimator);
  RfOptInt("-dynamic_sampling", "DAPO's dynamic sampling: each round generates this many times -rollout_batch, and the groups whose rewards are not all equal are kept until the batch is full (0: off; critic-free -algo, rewards from -reward_fn or -reward_command)", 0, &o->dynamic_sampling);
  RfOptInt("-dynamic_rounds", "Most generation rounds of -ppo_dynamic_sampling per iteration, each on new prompts; when the last leaves the batch short, its first groups of equal rewards fill it", 1, &o->dynamic_rounds);
  RfOptInt("-overlong_buffer", "DAPO's overlong reward shaping: a response longer than -gen_max_new_tokens minus this pays a penalty rising linearly to -ppo_overlong_penalty (0: off)", 0, &o->overlong_buffer);
  RfOptReal("-overlong_penalty", "The overlong shaping's penalty at -gen_max_new_tokens", 1.0, &o->overlong_penalty);
  RfOptReal("-value_clip", "Value clip around the old values (0: none)", 0.2, &o->value_clip);
  RfOptReal("-reward_clip", "Clip the reward-model score to [-c, c] (0: none)", 5.0, &o->reward_clip);
  RfOptReal("-truncation_penalty", "Score of a response that hit max_new_tokens without EOS", -1.0, &o->truncation_penalty);
  RfOptBool("-whiten", "Whiten advantages over the batch's response tokens (PPO)", PETSC_TRUE, &o->whiten);
  RfOptInt("-eval_every", "Held-out gold score every N iterations (0: only at the start and end)", 0, &o->eval_every);
  RfOptInt("-eval_prompts", "Held-out prompts in each evaluation (the built-in task's held-out split, or the first of -ppo_eval_file)", 256, &o->eval_prompts);
  RfOptString("-eval_file", "Held-out prompts with reference answers (a prompt file, docs/formats.md) for the evaluations instead of the built-in task's", o->eval_file, sizeof o->eval_file);
  RfOptInt("-eval_samples", "Responses per held-out prompt: accuracy is over all of them, pass@k for k this count", 1, &o->eval_samples);
  RfOptBool("-eval_greedy", "Held-out responses greedy (the most probable token) while training samples (-gen_greedy: both greedy)", PETSC_FALSE, &o->eval_greedy);
  RfOptInt("-eval_show", "Held-out samples printed at each evaluation (prompt, response, reward, answer; text through the token table, else token ids)", 0, &o->eval_show);
  PetscOptionsEnd();
  PetscOptionsBegin(PETSC_COMM_WORLD, "async_", "Asynchronous RL", NULL);
  RfOptInt("-staleness", "K: iteration i trains on samples generated with the weights of iteration i-K, so that generating the next batches overlaps training when the plan puts generation on ranks of its own (0: synchronous; docs/async.md)", 0, &o->async_staleness);
  RfOptEnum("-correction", "How samples from older weights are weighed: decoupled (PPO's ratio against the current weights times the behaviour importance weight, tokens over -async_is_cap left out), tis (that weight truncated at the cap) or none (PPO's ratio against the generating weights)", async_corr_names, 3, &o->async_correction);
  RfOptReal("-is_cap", "The behaviour importance weight's cap (-async_correction decoupled: tokens above it leave the loss; tis: truncated to it; 0: no cap)", 5.0, &o->async_is_cap);
  RfOptInt("-partial", "Partial rollouts: the new tokens a sample may draw per iteration; one still running then goes on in the next iteration with newer weights, each token keeping the version that drew it (0: every sample runs to its end; docs/async.md)", 0, &o->async_partial);
  RfOptInt("-partial_extra", "Partial rollouts: prompts kept in flight beyond a batch's, so that a batch fills from the samples that end without running the oldest to their end; more cut the long tail better and keep samples that end early waiting longer (-1: a batch's prompts)", -1, &o->async_partial_extra);
  PetscOptionsEnd();
  PetscCall(reward_options_from_options(&o->reward)); /* src/reward owns the -reward_ options */
  PetscOptionsBegin(PETSC_COMM_WORLD, "grpo_", "GRPO", NULL);
  RfOptInt("-group", "Samples per prompt (-algo grpo, the k of rloo, the baseline's group of reinforce_pp); must divide -rollout_batch", 4, &o->group);
  RfOptBool("-scale_std", "Divide a GRPO advantage by its group's standard deviation (false: Dr. GRPO, only the mean subtracted)", PETSC_TRUE, &o->scale_std);
  PetscOptionsEnd();
  PetscCall(adamw_set_from_options("actor_", &o->actor_opt));
  PetscCall(adamw_set_from_options("critic_", &o->critic_opt));
  PetscCall(gen_config_set_from_options(&o->gen));
  PetscCall(task_set_from_options(&o->task));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_options(const TrainJobOptions *job, PPOOptions *o)
{
  PetscFunctionBegin;
  PetscCall(ppo_job_options(job, o));
  o->plan = job->plan; /* read once for every stage (-fuse_* included) */
  if (o->plan.placement == PLACEMENT_AUTO) PetscCall(search_auto_options());
  PetscCall(trainer_options(&o->sched));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscInt ppo_partial_extra(const PPOOptions *o)
{
  return o->async_partial_extra >= 0 ? o->async_partial_extra : o->rollout_batch / ppo_group_size(o);
}

int ppo_partial_rows(const PPOOptions *o) { return (int)(o->rollout_batch + ppo_partial_extra(o) * ppo_group_size(o)); }

static PetscErrorCode ppo_check_options(PPOOptions *o)
{
  PetscInt mb;

  PetscFunctionBegin;
  PetscCall(reward_options_check(&o->reward, o->gen.max_new_tokens)); /* -reward_fn parsed, the length reward's start */
  PetscCheck(o->iterations >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_iterations %" PetscInt_FMT " must be >= 0", o->iterations);
  PetscCheck(o->rollout_batch > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-rollout_batch %" PetscInt_FMT " must be positive", o->rollout_batch);
  PetscCheck(o->minibatches > 0 && o->rollout_batch % o->minibatches == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-rollout_batch %" PetscInt_FMT " is not divisible into -ppo_minibatches %" PetscInt_FMT, o->rollout_batch, o->minibatches);
  mb = o->rollout_batch / o->minibatches;
  PetscCheck(o->microbatches > 0 && mb % o->microbatches == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "a mini-batch of %" PetscInt_FMT " (-rollout_batch / -ppo_minibatches) is not divisible into -ppo_microbatches %" PetscInt_FMT, mb, o->microbatches);
  PetscCheck(o->epochs >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_epochs %" PetscInt_FMT " must be >= 1", o->epochs);
  PetscCheck(o->kl_coef >= 0 && o->kl_target >= 0 && o->kl_horizon > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_kl_coef and -ppo_kl_target must be >= 0 and -ppo_kl_horizon > 0");
  PetscCheck(o->gamma >= 0 && o->gamma <= 1 && o->lambda >= 0 && o->lambda <= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_gamma and -ppo_lambda must be in [0,1]");
  PetscCheck(o->clip > 0 && o->value_clip >= 0 && o->reward_clip >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_clip must be positive, -ppo_value_clip and -ppo_reward_clip non-negative");
  PetscCheck(o->clip_low > 0 && o->clip_low < 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_clip_low %g must be in (0,1) (the ratio's lower bound 1 - clip_low must be positive)", (double)o->clip_low);
  PetscCheck(o->clip_high > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_clip_high %g must be positive", (double)o->clip_high);
  PetscCheck(o->overlong_buffer >= 0 && o->overlong_buffer <= o->gen.max_new_tokens, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_overlong_buffer %" PetscInt_FMT " must be in [0, -gen_max_new_tokens %" PetscInt_FMT "]", o->overlong_buffer, o->gen.max_new_tokens);
  PetscCheck(o->overlong_penalty >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_overlong_penalty %g must be >= 0", (double)o->overlong_penalty);
  PetscCheck(o->eval_every >= 0 && o->eval_prompts >= 0 && o->checkpoint_every >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_eval_every, -ppo_eval_prompts and -ppo_checkpoint_every (or -checkpoint_every) must be >= 0");
  if (ppo_algo(o)->groups) PetscCheck(o->group >= 2 && o->rollout_batch % o->group == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-rollout_batch %" PetscInt_FMT " is not divisible into groups of -grpo_group %" PetscInt_FMT " (at least 2)", o->rollout_batch, o->group);
  PetscCheck(o->restart[0] || o->actor_ckpt[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode ppo needs -actor_checkpoint (SFT), or -restart");
  PetscCheck(o->restart[0] || o->reward.checkpoint[0] || o->reward.spec.n || o->reward.command[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode ppo needs a reward: -reward_checkpoint (a reward model), -reward_fn (rule rewards) or -reward_command (a reward program)");
  PetscCheck(o->dynamic_rounds >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_dynamic_rounds %" PetscInt_FMT " must be at least 1", o->dynamic_rounds);
  PetscCheck(o->dynamic_rounds == 1 || o->dynamic_sampling, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-ppo_dynamic_rounds %" PetscInt_FMT " is the most rounds of -ppo_dynamic_sampling, which is off", o->dynamic_rounds);
  PetscCheck(o->dynamic_sampling == 0 || o->dynamic_sampling >= 2 || (o->dynamic_sampling == 1 && o->dynamic_rounds >= 2), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_dynamic_sampling %" PetscInt_FMT " must be 0 (off), at least 2 (candidates per group kept), or 1 with -ppo_dynamic_rounds >= 2", o->dynamic_sampling);
  if (o->dynamic_sampling && !ppo_algo(o)->groups) {
    char grouped[128];
    PetscCall(ppo_algo_join(algo_groups, PETSC_FALSE, grouped, sizeof grouped));
    SETERRQ(PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-ppo_dynamic_sampling filters groups of -grpo_group responses: -algo %s draws none (an -algo that does: %s)", ppo_algo(o)->name, grouped);
  }
  PetscCheck(o->async_staleness >= 0 && o->async_staleness <= PPO_ASYNC_MAX, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-async_staleness %" PetscInt_FMT " must be in [0, %d] (0: synchronous)", o->async_staleness, PPO_ASYNC_MAX);
  PetscCheck(o->async_is_cap == 0 || o->async_is_cap >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-async_is_cap %g must be 0 (no cap) or at least 1", (double)o->async_is_cap);
  PetscCheck(!o->async_staleness || !o->dynamic_sampling, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-async_staleness %" PetscInt_FMT " with -ppo_dynamic_sampling: the selection's later rounds would generate inside the training iteration; use one of them", o->async_staleness);
  PetscCheck(!o->async_staleness || o->plan.fuse == FUSE_NONE, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-async_staleness %" PetscInt_FMT " with -fuse_gen_inf %s: the fused rollouts stream one batch into inference; use -fuse_gen_inf none", o->async_staleness, FuseModeNames[o->plan.fuse]);
  if (o->async_partial) {
    PetscCheck(o->async_partial > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-async_partial %" PetscInt_FMT " must be >= 0 (0: off)", o->async_partial);
    PetscCheck(o->async_staleness >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-async_partial %" PetscInt_FMT " needs -async_staleness >= 1: a sample that goes on with newer weights is trained on by a later iteration", o->async_partial);
    PetscCheck(o->async_partial < o->gen.max_new_tokens, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-async_partial %" PetscInt_FMT " must be below -gen_max_new_tokens %" PetscInt_FMT " (at or above it every sample ends in its first iteration)", o->async_partial, o->gen.max_new_tokens);
    PetscCheck(o->async_partial_extra >= 1 || o->async_partial_extra == -1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-async_partial_extra %" PetscInt_FMT " must be >= 1 (prompts in flight beyond a batch's) or -1 (a batch's)", o->async_partial_extra);
    o->async_partial_extra = ppo_partial_extra(o);
  } else PetscCheck(o->async_partial_extra == -1, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-async_partial_extra %" PetscInt_FMT " sizes partial rollouts, which are off (-async_partial 0)", o->async_partial_extra);
  PetscCheck(o->eval_show >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_eval_show %" PetscInt_FMT " must be >= 0", o->eval_show);
  PetscCheck(o->eval_samples >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_eval_samples %" PetscInt_FMT " must be >= 1", o->eval_samples);
  PetscCheck(o->eval_samples == 1 || !(o->gen.greedy || o->eval_greedy), PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-ppo_eval_samples %" PetscInt_FMT " with %s: greedy responses to one prompt are all the same", o->eval_samples, o->gen.greedy ? "-gen_greedy" : "-ppo_eval_greedy");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Where each model comes from: the SFT and RM checkpoints, or the restart file. */
typedef struct {
  const char *file, *role;
  PetscBool   trunk_only;
} ModelSource;

/* Whether a critic is loaded and trained: PPO's, and not in -mode eval. */
static PetscBool ppo_trains_critic(const PPOOptions *o)
{
  return ppo_algo(o)->has_critic && !o->eval_only ? PETSC_TRUE : PETSC_FALSE;
}

static void ppo_sources(const PPOOptions *o, ModelSource src[4])
{
  const char *ref = o->reference_ckpt[0] ? o->reference_ckpt : o->actor_ckpt;
  if (o->restart[0]) {
    src[0] = (ModelSource){o->restart, "actor", PETSC_FALSE};
    src[1] = (ModelSource){o->restart, "critic", PETSC_FALSE};
    src[2] = o->reference_sourced ? (ModelSource){o->reference_source.abspath, o->reference_source.role, PETSC_FALSE} : (ModelSource){o->restart, "reference", PETSC_FALSE};
    src[3] = (ModelSource){o->restart, "reward", PETSC_FALSE};
    return;
  }
  src[0] = (ModelSource){o->actor_ckpt, "policy", PETSC_FALSE};
  src[1] = o->critic_init == CRITIC_FROM_REWARD ? (ModelSource){o->reward.checkpoint, "reward", PETSC_FALSE} : (ModelSource){o->actor_ckpt, "policy", PETSC_TRUE};
  src[2] = (ModelSource){ref, "policy", PETSC_FALSE};
  src[3] = (ModelSource){o->reward.checkpoint, "reward", PETSC_FALSE};
}

static const char *const model_names[4] = {"actor", "critic", "reference", "reward"};

/* The frozen reference is the weights of an input file: checkpoints record
 * that file (/reference_source: its paths, role and checksum) instead of a
 * copy, and a restart reads it again after checking it is unchanged. Not
 * when -mode pipeline made the file (its SFT stage's output, which a rerun
 * may replace) or a restart's checkpoint carries the weights itself (then
 * its checkpoints do too). record: a fresh run's file is hashed (not for a
 * dry run or -mode eval, which write no checkpoint). */
static PetscErrorCode ppo_reference_source(const RunCtx *run, PPOOptions *o, PetscBool record)
{
  PetscFunctionBegin;
  o->reference_sourced = PETSC_FALSE;
  if (o->restart[0]) PetscCall(ckpt_read_source(run->comm, o->restart, "reference", &o->reference_source, &o->reference_sourced));
  else if (record && !o->reference_made_here && !o->eval_only) {
    PetscCall(ckpt_source_make(run->comm, o->reference_ckpt[0] ? o->reference_ckpt : o->actor_ckpt, "policy", "reference", &o->reference_source));
    o->reference_sourced = PETSC_TRUE;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Configurations from the files, checked against each other and the task
 * before anything is allocated; with policy (-mode pipeline, before the SFT
 * and RM checkpoints exist) every model has the SFT architecture, as those
 * stages will write it, with its own head. */
static PetscErrorCode ppo_configs(const RunCtx *run, const PPOOptions *o, const ModelSource src[4], const ModelConfig *policy, int max_prompt, ModelConfig cfg[4])
{
  const ModelHead head[4] = {MODEL_HEAD_LM, MODEL_HEAD_SCALAR, MODEL_HEAD_LM, MODEL_HEAD_SCALAR};
  int           T       = max_prompt + (int)o->gen.max_new_tokens;

  PetscFunctionBegin;
  for (int k = 0; k < 4; k++) {
    const char *from = policy ? "the -policy_ options" : src[k].file;
    if (k == 1 && !ppo_trains_critic(o)) continue;
    if (k == 3 && !o->has_reward_model) {
      cfg[3] = cfg[0]; /* unused: no reward model */
      continue;
    }
    if (policy) cfg[k] = *policy;
    else PetscCall(ckpt_read_config(run->comm, src[k].file, src[k].role, &cfg[k]));
    if (src[k].trunk_only || policy) cfg[k].head = head[k];
    PetscCheck(cfg[k].head == head[k], PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "checkpoint %s /%s has the %s head; the %s needs the %s head", src[k].file, src[k].role, ModelHeadNames[cfg[k].head], model_names[k], ModelHeadNames[head[k]]);
    PetscCheck(cfg[k].vocab_size == cfg[0].vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "vocabulary mismatch: the %s (%s) has %d tokens, the actor (%s) %d", model_names[k], src[k].file, cfg[k].vocab_size, src[0].file, cfg[0].vocab_size);
    PetscCheck(T <= cfg[k].n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "the %s (%s) has n_positions %d, fewer than the longest prompt (%d tokens) plus -gen_max_new_tokens %" PetscInt_FMT, model_names[k], from, cfg[k].n_positions, max_prompt, o->gen.max_new_tokens);
  }
  PetscCall(gen_config_check(&o->gen, &cfg[0], policy ? "policy_" : "actor_", max_prompt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The plan's needs: the model of each call and the sequences it splits. */
static void ppo_needs(const PPOOptions *o, const ModelConfig cfg[4], PlanNeeds *needs)
{
  int mini = (int)(o->rollout_batch / o->minibatches), B = (int)o->rollout_batch;

  PetscMemzero(needs, sizeof *needs);
  needs->cfg[MFC_ACTOR_GEN] = needs->cfg[MFC_ACTOR_TRAIN] = &cfg[0];
  needs->cfg[MFC_REF_INF]   = &cfg[2];
  needs->cfg[MFC_REW_INF]   = &cfg[3];
  if (ppo_trains_critic(o)) needs->cfg[MFC_CRITIC_INF] = needs->cfg[MFC_CRITIC_TRAIN] = &cfg[1];
  if (!o->has_reward_model) needs->cfg[MFC_REW_INF] = NULL;
  needs->batch[MFC_ACTOR_GEN] = needs->batch[MFC_REF_INF] = needs->batch[MFC_REW_INF] = needs->batch[MFC_CRITIC_INF] = B;
  needs->batch[MFC_ACTOR_TRAIN] = needs->batch[MFC_CRITIC_TRAIN] = mini;
}

/* A frozen model goes to host memory between its calls when -plan_offload
 * is on and another call in use shares a rank with it. */
static PetscBool ppo_offloads(const PPOOptions *o, const PlanNeeds *needs, MFCId c)
{
  if (!o->plan.offload) return PETSC_FALSE;
  for (int k = 0; k < MFC_COUNT; k++)
    if (k != (int)c && needs->cfg[k] && plan_overlap(&o->plan, c, (MFCId)k)) return PETSC_TRUE;
  return PETSC_FALSE;
}

/* Places the models on their meshes (every rank in the same order) and
 * reads them; each member keeps its shard. */
static PetscErrorCode ppo_load(const RunCtx *run, const Backend *be, const PPOOptions *o, const PlanNeeds *needs, const ModelSource src[4], const ModelConfig cfg[4], PPOModels *m, CkptState *st)
{
  const Plan *plan    = &o->plan;
  PetscBool   restart = (PetscBool)(o->restart[0] != 0);

  PetscFunctionBegin;
  PetscCall(PetscMemzero(m, sizeof *m));
  m->plan       = plan;
  m->has_critic = ppo_trains_critic(o);
  m->has_reward = o->has_reward_model;
  m->bucket     = (size_t)(plan->bucket_mb * 1048576.0);
  PetscCall(PetscLogEventBegin(sys_log.ckpt_read, 0, 0, 0, 0));
  PetscCall(dmodel_create("actor", &cfg[0], be, plan, MFC_ACTOR_TRAIN, PETSC_TRUE, &m->actor));
  PetscCall(dmodel_create("actor_gen", &cfg[0], be, plan, MFC_ACTOR_GEN, PETSC_FALSE, &m->actor_gen));
  m->gen_copy = (PetscBool)(m->actor_gen.mesh != m->actor.mesh);
  m->gen_drop = (PetscBool)(m->gen_copy && plan_overlap(plan, MFC_ACTOR_GEN, MFC_ACTOR_TRAIN));
  if (!m->gen_copy || m->gen_drop) PetscCall(dmodel_release(&m->actor_gen, PETSC_FALSE));
  PetscCall(dmodel_load(&m->actor, src[0].file, src[0].role, restart, PETSC_FALSE, (uint64_t)run->seed));
  if (m->has_critic) {
    PetscCall(dmodel_create("critic", &cfg[1], be, plan, MFC_CRITIC_TRAIN, PETSC_TRUE, &m->critic));
    PetscCall(dmodel_create("critic_inf", &cfg[1], be, plan, MFC_CRITIC_INF, PETSC_FALSE, &m->critic_inf));
    m->critic_copy = (PetscBool)(m->critic_inf.mesh != m->critic.mesh);
    m->critic_drop = (PetscBool)(m->critic_copy && plan_overlap(plan, MFC_CRITIC_INF, MFC_CRITIC_TRAIN));
    if (!m->critic_copy || m->critic_drop) PetscCall(dmodel_release(&m->critic_inf, PETSC_FALSE));
    PetscCall(dmodel_load(&m->critic, src[1].file, src[1].role, restart, src[1].trunk_only, (uint64_t)run->seed));
  }
  PetscCall(dmodel_create("reference", &cfg[2], be, plan, MFC_REF_INF, PETSC_FALSE, &m->reference));
  PetscCall(dmodel_load(&m->reference, src[2].file, src[2].role, PETSC_FALSE, PETSC_FALSE, 0));
  if (o->has_reward_model) {
    PetscCall(dmodel_create("reward", &cfg[3], be, plan, MFC_REW_INF, PETSC_FALSE, &m->reward));
    PetscCall(dmodel_load(&m->reward, src[3].file, src[3].role, PETSC_FALSE, PETSC_FALSE, 0));
  }
  m->ref_source  = o->reference_sourced ? &o->reference_source : NULL;
  m->offload_ref = ppo_offloads(o, needs, MFC_REF_INF);
  m->offload_rew = o->has_reward_model && ppo_offloads(o, needs, MFC_REW_INF);
  if (m->offload_ref) PetscCall(dmodel_release(&m->reference, PETSC_TRUE));
  if (m->offload_rew) PetscCall(dmodel_release(&m->reward, PETSC_TRUE));
  if (restart) {
    PetscCall(ckpt_read_state(run->comm, o->restart, st));
    PetscCheck(st->iteration <= o->iterations, run->comm, PETSC_ERR_ARG_OUTOFRANGE, "-restart %s is at iteration %" PetscInt_FMT ", past -ppo_iterations %" PetscInt_FMT, o->restart, st->iteration, o->iterations);
  }
  PetscCall(PetscLogEventEnd(sys_log.ckpt_read, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ppo_models_destroy(PPOModels *m)
{
  DModel *all[6] = {&m->actor, &m->actor_gen, &m->critic, &m->critic_inf, &m->reference, &m->reward};

  PetscFunctionBegin;
  for (int k = 0; k < 6; k++) PetscCall(dmodel_destroy(all[k]));
  PetscCall(ppo_fused_train_destroy(&m->fuse));
  PetscCall(rollout_genfuse_teardown(&m->genfuse));
  PetscCall(ppo_rewards_destroy(&m->rew));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Each member writes its shard of the full tensors (inc/train.h);
 * the file does not depend on the layout. */
/* policy.h5: the trained actor's weights alone, under the role an SFT
 * checkpoint's policy has, so that every reader of a policy takes it (a
 * third of final.h5's actor, which adds its moments). */
static PetscErrorCode ppo_write_policy(const RunCtx *run, PPOModels *m, const CkptState *st)
{
  DModel   *dm[1] = {&m->actor};
  CkptModel cm[1] = {{"policy", NULL, PETSC_FALSE, PETSC_FALSE}};

  PetscFunctionBegin;
  PetscCall(train_checkpoint_models(run, dm, cm, 1, "policy.h5", st, m->bucket, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ppo_checkpoint(const RunCtx *run, PPOModels *m, const char *name, const CkptState *st, RunRecord *rec)
{
  DModel   *dm[4] = {&m->actor};
  CkptModel cm[4] = {{"actor", NULL, PETSC_TRUE, PETSC_FALSE}};
  int       n     = 1;

  PetscFunctionBegin;
  if (!m->ref_source) dm[n] = &m->reference, cm[n++] = (CkptModel){"reference", NULL, PETSC_FALSE, PETSC_FALSE};
  if (m->has_reward) dm[n] = &m->reward, cm[n++] = (CkptModel){"reward", NULL, PETSC_FALSE, PETSC_FALSE};
  if (m->has_critic) dm[n] = &m->critic, cm[n++] = (CkptModel){"critic", NULL, PETSC_TRUE, PETSC_FALSE};
  PetscCall(train_checkpoint_sourced(run, dm, cm, n, name, st, m->ref_source, rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static double mean_f(const float *x, int n)
{
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i];
  return n ? s / n : NAN;
}

/* ---- the loop ---------------------------------------------------------------- */
/* One line of an evaluation: the accuracy (with answers: pass@k is computed then) or the judge's gold score, KL, reward, pass@k. */
static PetscErrorCode ppo_print_eval(const RunCtx *run, const char *what, const PPOEval *ev, const PPOOptions *o)
{
  char pk[48] = "";

  PetscFunctionBegin;
  if (o->eval_samples > 1 && !isnan(ev->pass_k)) PetscCall(PetscSNPrintf(pk, sizeof pk, ", pass@%" PetscInt_FMT " %.3f", o->eval_samples, ev->pass_k));
  PetscCall(PetscPrintf(run->comm, "%s %s %.3f, KL to the reference %.3f, reward %+.3f%s\n", what, isnan(ev->pass_k) ? "gold" : "accuracy", ev->gold, ev->kl, ev->reward, pk));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  PPOEval sft, ppo; /* the held-out evaluation of the reference (the SFT policy) and of the trained actor */
} PPOSummary;

/* The fusion costs of an iteration (-fuse_gen_inf): metrics stream_messages,
 * stream_bytes, times stream_send, stream_wait; with migrate, R_t and what moved. */
static PetscErrorCode ppo_record_fusion(RunRecord *rec, const StageTimes *tm)
{
  PetscFunctionBegin;
  PetscCall(record_metric(rec, "stream_messages", tm->stream_messages));
  PetscCall(record_metric(rec, "stream_bytes", tm->stream_bytes));
  PetscCall(record_time(rec, "stream_send", tm->stream_send));
  PetscCall(record_time(rec, "stream_wait", tm->stream_wait));
  if (tm->migrate_m > 0) { /* migrate */
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "fusion: R_t %.2f%s, %.0f samples (%.1f KiB) migrated in %.1f ms onto %.0f generation replicas\n", tm->migrate_at, tm->migrate_pred > 0 ? " (auto)" : tm->migrate_pred < 0 ? " (auto, first iteration)" : "", tm->migrate_samples,
                          tm->migrate_bytes / 1024, 1e3 * tm->migrate_s, tm->migrate_m));
    PetscCall(record_metric(rec, "migrate_at", tm->migrate_at));
    PetscCall(record_metric(rec, "migrate_predicted", tm->migrate_pred));
    PetscCall(record_metric(rec, "migrate_samples", tm->migrate_samples));
    PetscCall(record_metric(rec, "migrate_bytes", tm->migrate_bytes));
    PetscCall(record_metric(rec, "migrate_replicas", tm->migrate_m));
    PetscCall(record_time(rec, "migrate", tm->migrate_s));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The reward and its parts (the means over the batch of the unweighted
 * rule functions and the command, for those in use). */
static PetscErrorCode ppo_record_rewards(RunRecord *rec, const PPOOptions *o, const Rollout *r, char *line, size_t len)
{
  static const char *const part_names[PPO_REWARD_PARTS] = {"reward_numeric", "reward_exact", "reward_format", "reward_length", "reward_command"};
  size_t                   at = 0;

  PetscFunctionBegin;
  line[0] = '\0';
  PetscCall(record_metric(rec, "reward", mean_f(r->final, r->B)));
  for (int k = 0; k < PPO_REWARD_PARTS; k++) {
    double sum = 0;
    int    used = 0;
    for (int b = 0; b < r->B; b++)
      if (!isnan(r->parts[(size_t)b * PPO_REWARD_PARTS + k])) sum += r->parts[(size_t)b * PPO_REWARD_PARTS + k], used++;
    if (!used) continue;
    PetscCall(record_metric(rec, part_names[k], sum / r->B));
    if (at < len) at += (size_t)snprintf(line + at, len - at, "%s%s %.3f", at ? ", " : "", k == 0 && !isnan(r->gold[0]) ? "accuracy" : part_names[k] + 7, sum / r->B); /* for the progress line: "accuracy 0.520, format 1.000"; the numeric rule against answers is the accuracy (rules need answers: no judge then) */
  }
  if (o->dynamic_sampling) {
    PetscCall(record_metric(rec, "dynamic_kept_groups", r->kept_groups));
    PetscCall(record_metric(rec, "dynamic_filled_groups", r->filled_groups));
    PetscCall(record_metric(rec, "dynamic_rounds", r->dyn_rounds));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The held-out evaluation's pass@k, reward and KL (its gold is eval_gold,
 * recorded with the iteration's metrics): NaN but at the iterations it ran
 * (every -ppo_eval_every and the last), and only with held-out prompts. */
static PetscErrorCode ppo_record_eval(RunRecord *rec, const PPOOptions *o, const PPOEvalSet *e, const PPOEval *ev)
{
  PetscFunctionBegin;
  if (e->n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (o->eval_samples > 1) PetscCall(record_metric(rec, "eval_pass_k", ev->pass_k));
  PetscCall(record_metric(rec, "eval_reward", ev->reward));
  PetscCall(record_metric(rec, "eval_kl", ev->kl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ppo_record_iteration(RunRecord *rec, const RunCtx *run, const PPOOptions *o, const PPOModels *m, const Rollout *r, const PPOTrainStats *s, const StageTimes *tm, double kl, double kl_coef, const PPOEval *ev, double iter_s, int it, int n_it, const char *more, const char *clock)
{
  double n = s->steps ? (double)s->steps : 1.0, len = 0, lmax = 0, eos = 0, toks = 0;
  char   parts[128];

  PetscFunctionBegin;
  for (int b = 0; b < r->B; b++) {
    len += r->len[b];
    lmax = PetscMax(lmax, r->len[b]);
    eos += r->gen.eos[b];
    toks += r->start[b] + r->len[b];
  }
  len /= r->B;
  const char *names[] = {"gold", "rm_score", "kl", "kl_coef", "actor_loss", "critic_loss", "kl_loss", "clip_frac", "value_clip_frac", "entropy", "response_len_mean", "response_len_max", "eos_frac", "actor_grad_norm", "critic_grad_norm", "tokens_per_s", "eval_gold"};
  double      vals[]  = {mean_f(r->gold, r->B), mean_f(r->score, r->B), kl, kl_coef, s->actor_loss / n, s->critic_loss / n, s->kl_loss / n, s->clipfrac / n, s->vclipfrac / n, s->entropy / n, len, lmax, eos / r->B, s->grad_actor / n, s->grad_critic / n, toks / iter_s, ev->gold};
  for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
    if (k != 1 || m->has_reward) PetscCall(record_metric(rec, names[k], vals[k])); /* rm_score: with a reward model */
  { /* this iteration's response lengths, replacing the previous iteration's: the histogram of tools/report.py */
    const IODataset   dl   = {"lengths", 1, {r->B, 0}, r->len, PETSC_TRUE};
    const char *const an[] = {"iteration"};
    const double      av[] = {(double)it};
    PetscCall(record_group(rec, "responses", &dl, 1, an, av, 1));
  }
  PetscCall(record_time(rec, "iteration", iter_s));
  PetscCall(record_time(rec, "generation", tm->gen));
  PetscCall(record_time(rec, "ref_inference", tm->ref));
  PetscCall(record_time(rec, "reward_inference", tm->rew));
  PetscCall(record_time(rec, "critic_inference", tm->critic));
  PetscCall(record_time(rec, "rewards", tm->rules));
  PetscCall(record_time(rec, "advantages", tm->adv));
  PetscCall(ppo_record_rewards(rec, o, r, parts, sizeof parts));
  if (m->fuse.on) PetscCall(record_time(rec, "fused_train", s->t_actor)); /* both models in one node */
  else {
    PetscCall(record_time(rec, "actor_train", s->t_actor));
    PetscCall(record_time(rec, "critic_train", s->t_critic));
  }
  if (m->gen_copy) { /* reallocation of the trained weights to the generation layout */
    PetscCall(record_time(rec, "actor_sync", tm->sync_actor));
    PetscCall(record_metric(rec, "actor_sync_bytes", tm->sync_actor_bytes));
  }
  if (m->has_critic && m->critic_copy) {
    PetscCall(record_time(rec, "critic_sync", tm->sync_critic));
    PetscCall(record_metric(rec, "critic_sync_bytes", tm->sync_critic_bytes));
  }
  if (m->plan->fuse != FUSE_NONE) PetscCall(ppo_record_fusion(rec, tm));
  { /* only what the run computes: the judge's gold score, or the accuracy unless the reward's parts hold it (the numeric rule), the critic's loss with a critic */
    char gold[32] = "", critic[32] = "", rparts[136] = "";
    if (m->rew.gold == PPO_GOLD_SORT || (m->rew.gold == PPO_GOLD_ANSWER && !strstr(parts, "accuracy"))) PetscCall(PetscSNPrintf(gold, sizeof gold, " | %s %.3f", m->rew.gold == PPO_GOLD_ANSWER ? "accuracy" : "gold", vals[0]));
    if (parts[0]) PetscCall(PetscSNPrintf(rparts, sizeof rparts, " (%s)", parts));
    if (m->has_critic) PetscCall(PetscSNPrintf(critic, sizeof critic, " | critic %.4f", vals[5]));
    PetscCall(PetscPrintf(run->comm, "iter %4d/%d%s | reward %+.3f%s | kl %.3f | actor %+.4f%s | clip %.3f | ent %.3f | len %4.1f/%2.0f | %6.0f tok/s | gen %.2f inf %.2f train %.2f of %.2f s%s | %s\n", it, n_it, gold, mean_f(r->final, r->B), rparts, kl, vals[4], critic, vals[7], vals[9], len, lmax, vals[15], tm->gen, tm->ref + tm->rew + tm->critic, s->t_actor + s->t_critic, iter_s, more, clock));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A held-out evaluation between a line saying it started and one with its
 * time: an evaluation of many prompts can take minutes with nothing else
 * printed. what names the policy evaluated. */
static PetscErrorCode ppo_evaluate_said(const RunCtx *run, const char *what, DModel *policy, PPOModels *m, const PPOOptions *o, PromptSource *ps, const CkptState *st,
                                        const char *path, const char *group, PPOEval *ev)
{
  double t0  = sys_wtime();
  int    say = ps->eval.n > 0 && ps->eval.k > 0;
  char   d[32];

  PetscFunctionBegin;
  if (say) PetscCall(PetscPrintf(run->comm, "held-out evaluation of %s: %d prompts x %d responses ...\n", what, ps->eval.n, ps->eval.k));
  PetscCall(ppo_evaluate(policy, m, o, &ps->eval, (uint64_t)st->seed, ps->max_prompt, path, group, ev));
  if (say) PetscCall(PetscPrintf(run->comm, "held-out evaluation of %s done in %s\n", what, sys_duration_str(sys_wtime() - t0, d, sizeof d)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -async_staleness K: the batches the first K iterations train on,
 * generated before the loop with the weights it starts from (those a
 * restart read from its checkpoint are there already). */
static PetscErrorCode ppo_async_fill(const RunCtx *run, const PPOOptions *o, PPOModels *m, PromptSource *ps, AsyncQueue *q, PackBuf *pb, CkptState *st)
{
  double t0 = sys_wtime();
  int    made = 0;
  char   d[32];

  PetscFunctionBegin;
  if (o->restart[0]) { /* the batches the checkpoint's run had generated */
    int found;
    PetscCall(async_restore(run->comm, o->restart, o, ps, q, st->iteration, &found));
    if (found) PetscCall(PetscPrintf(run->comm, "%s: asynchronous, staleness %d: %d generated batches from %s\n", ppo_algo(o)->name, q->K, found, o->restart));
  }
  for (int64_t b = st->iteration; b < st->iteration + q->K && b < o->iterations; b++) {
    StageTimes    tm;
    PPOTrainStats ts;
    int           used;

    if (q->ready[b % q->n] && async_slot(q, b)->batch == b) continue;
    used = 0;
    if (q->partial) PetscCall(async_pool_admit(q, ps, o, b, &st->data_pos));
    else {
      PetscCall(prompts_next(ps, o, st->data_pos, 0, &used));
      PetscCall(async_keep_prompts(q, ps, b, st->data_pos));
    }
    PetscCall(ppo_iteration_async(m, o, ps, q, NULL, async_slot(q, b), pb, st, &ts, &tm));
    st->data_pos += used;
    made++;
  }
  if (made) PetscCall(PetscPrintf(run->comm, "%s: asynchronous, staleness %d: the first %d batches generated in %s\n", ppo_algo(o)->name, q->K, made, sys_duration_str(sys_wtime() - t0, d, sizeof d)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ppo_loop(const RunCtx *run, const PPOOptions *o, const PlanNeeds *needs, PPOModels *m, PromptSource *ps, CkptState *st, PPOSummary *sum)
{
  RunRecord *rec;
  Rollout    r, *rp = &r; /* rp: the iteration's rollout (with -async_staleness, a slot of q) */
  AsyncQueue q;
  PackBuf    pb;
  const int  K = (int)o->async_staleness, T = ps->max_prompt + (int)o->gen.max_new_tokens;
  char       name[64], path[PETSC_MAX_PATH_LEN], evals[PETSC_MAX_PATH_LEN], what[64], clock[64];
  size_t     nparams;
  double     t_loop = sys_wtime();
  PetscInt   it0    = st->iteration;
  PetscBool  final_evaluated = PETSC_FALSE; /* the last iteration's evaluation is the summary's */

  PetscFunctionBegin;
  PetscCall(train_record_open(run, ppo_algo(o)->name, &o->plan, needs, &rec));
  if (K == 0) PetscCall(rollout_create((int)(o->rollout_batch * PetscMax(1, o->dynamic_sampling)), T, gen_masked(&o->gen), &r));
  else PetscCall(async_create(o, (int)o->rollout_batch, T, gen_masked(&o->gen), &q));
  PetscCall(packbuf_create((int)o->rollout_batch, T, &pb));
  PetscCall(sys_output_path(run, "rollouts.h5", path, sizeof path));
  PetscCall(sys_output_path(run, "evals.h5", evals, sizeof evals));
  PetscCall(io_keep_previous(run->comm, run->output_dir, "evals")); /* a new run's evaluations, as its run.h5 */
  {
    ModelTensor *t;
    int        nt;
    PetscCall(model_tensor_table(&m->actor.cfg, &t, &nt, &nparams));
    PetscCall(PetscFree(t));
  }
  PetscCall(PetscPrintf(run->comm, "%s: actor %zu parameters, %" PetscInt_FMT " iterations of %" PetscInt_FMT " responses, from iteration %" PetscInt_FMT "\n", ppo_algo(o)->name, nparams, o->iterations, o->rollout_batch, st->iteration));
  if (K) PetscCall(ppo_async_fill(run, o, m, ps, &q, &pb, st));
  while (st->iteration < o->iterations) {
    double        t0 = sys_wtime(), g0 = model_acts_grown_bytes(), grown, kl, iter_s, coef;
    PPOEval       ev = {NAN, NAN, NAN, NAN};
    StageTimes    tm;
    PPOTrainStats ts;
    int           it = (int)st->iteration, used = 0;

    char          more[64] = "";

    if (K == 0) {
      PetscCall(prompts_next(ps, o, st->data_pos, 0, &used));
      r.answer = ps->answer, r.meta = ps->meta, r.pidx = ps->pidx, r.dyn_rounds = 1;
      PetscCall(ppo_iteration(m, o, ps, &r, &pb, st, &ts, &tm));
      st->data_pos += (int64_t)used * r.dyn_rounds; /* dynamic sampling's rounds drew further prompts */
    } else { /* train on batch it (generated earlier), generate batch it + K meanwhile */
      Rollout *next = NULL;
      rp = async_slot(&q, it);
      PetscCheck(q.ready[it % q.n] && rp->batch == it, PETSC_COMM_SELF, PETSC_ERR_PLIB, "asynchronous queue: batch %d is not there", it);
      if (it + K < o->iterations) {
        if (q.partial) PetscCall(async_pool_admit(&q, ps, o, it + K, &st->data_pos)); /* advances data_pos by the prompts it starts */
        else {
          PetscCall(prompts_next(ps, o, st->data_pos, 0, &used));
          PetscCall(async_keep_prompts(&q, ps, it + K, st->data_pos));
        }
        next = async_slot(&q, it + K);
      }
      PetscCall(ppo_iteration_async(m, o, ps, &q, rp, next, &pb, st, &ts, &tm));
      st->data_pos += used;
    }
    kl = rollout_kl(rp);
    if (o->dump_rollouts) PetscCall(rollout_dump(run->comm, path, rp, it, o, st->kl_coef));
    iter_s = sys_wtime() - t0;
    grown  = model_acts_grown_bytes() - g0;
    coef   = st->kl_coef; /* the coefficient this iteration's rewards used */
    if (o->kl_target > 0) st->kl_coef = rl_kl_adapt(st->kl_coef, kl, o->kl_target, o->kl_horizon, (double)rp->B);
    st->iteration++;
    /* the evaluations of the trained actor (every -ppo_eval_every iterations
     * and after the last, the summary's) run before the iteration's record,
     * which holds their result */
    if ((o->eval_every && st->iteration % o->eval_every == 0) || st->iteration == o->iterations) {
      PetscCall(PetscSNPrintf(name, sizeof name, "iter_%" PetscInt_FMT, st->iteration));
      PetscCall(PetscSNPrintf(what, sizeof what, "the actor after iteration %" PetscInt_FMT, st->iteration));
      PetscCall(ppo_evaluate_said(run, what, &m->actor, m, o, ps, st, evals, name, &ev));
      if (st->iteration == o->iterations) sum->ppo = ev, final_evaluated = PETSC_TRUE;
    }
    if (K) PetscCall(async_record(rec, &q, rp, it, tm.gen, ts.t_actor + ts.t_critic, iter_s, more, sizeof more));
    PetscCall(ppo_record_iteration(rec, run, o, m, rp, &ts, &tm, kl, coef, &ev, iter_s, it + 1, (int)o->iterations, more,
                                   sys_progress_str(t_loop, (long)(st->iteration - it0), (long)(o->iterations - st->iteration), clock, sizeof clock)));
    PetscCall(ppo_record_eval(rec, o, &ps->eval, &ev));
    /* the rank whose activation buffers grew most (first touches: the time
     * a steady state does not pay; layout-dependent like the timings) */
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &grown, 1, MPI_DOUBLE, MPI_MAX, run->comm));
    PetscCall(record_metric(rec, "acts_grown_bytes", grown));
    if (m->fuse.on && !m->fuse.reported) PetscCall(ppo_fused_train_report(run, rec, &m->fuse));
    if ((!isnan(ev.gold) || !isnan(ev.reward)) && !final_evaluated) PetscCall(ppo_print_eval(run, "      held-out", &ev, o)); /* the last: in the summary */
    if (train_checkpoint_due(o->checkpoint_every, st->iteration)) {
      PetscCall(PetscSNPrintf(name, sizeof name, "ckpt_%06" PetscInt_FMT ".h5", st->iteration));
      if (K) PetscCall(async_checkpoint_carry(&q, st->iteration)); /* the generated batches not yet trained on */
      PetscCall(ppo_checkpoint(run, m, name, st, rec));
      if (K) PetscCall(async_checkpoint_carry(NULL, 0));
    }
    PetscCall(record_step(rec, st->iteration));
  }
  if (K) PetscCall(async_checkpoint_carry(&q, st->iteration)); /* none left at the end; the staleness, for a restart with more iterations */
  PetscCall(ppo_checkpoint(run, m, "final.h5", st, NULL));
  if (K) PetscCall(async_checkpoint_carry(NULL, 0));
  if (o->write_policy) PetscCall(ppo_write_policy(run, m, st));
  PetscCall(ppo_evaluate_said(run, "the reference (the initial policy)", &m->reference, m, o, ps, st, evals, "reference", &sum->sft));
  if (!final_evaluated) { /* a run restarted at its end */
    PetscCall(PetscSNPrintf(name, sizeof name, "iter_%" PetscInt_FMT, st->iteration));
    PetscCall(ppo_evaluate_said(run, "the trained actor", &m->actor, m, o, ps, st, evals, name, &sum->ppo));
  }
  PetscCall(record_summary(rec, "iterations", (double)st->iteration));
  PetscCall(record_summary(rec, "sft_gold", sum->sft.gold));
  PetscCall(record_summary(rec, "final_gold", sum->ppo.gold));
  PetscCall(record_summary(rec, "final_kl", sum->ppo.kl));
  PetscCall(record_summary(rec, "sft_reward", sum->sft.reward));
  PetscCall(record_summary(rec, "final_reward", sum->ppo.reward));
  if (o->eval_samples > 1) {
    PetscCall(record_summary(rec, "sft_pass_k", sum->sft.pass_k));
    PetscCall(record_summary(rec, "final_pass_k", sum->ppo.pass_k));
  }
  PetscCall(packbuf_destroy(&pb));
  if (K == 0) PetscCall(rollout_destroy(&r));
  else PetscCall(async_destroy(&q));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -mode eval: the held-out evaluation of the actor, recorded in run.h5's
 * /summary (eval_gold, eval_pass_k, eval_reward, eval_kl, eval_prompts,
 * eval_samples), its samples in evals.h5's /eval. */
static PetscErrorCode ppo_eval_only(const RunCtx *run, const PPOOptions *o, const PlanNeeds *needs, PPOModels *m, PromptSource *ps, const CkptState *st)
{
  RunRecord *rec;
  PPOEval    ev;
  char       path[PETSC_MAX_PATH_LEN];

  PetscFunctionBegin;
  PetscCall(train_record_open(run, "eval", &o->plan, needs, &rec));
  PetscCall(sys_output_path(run, "evals.h5", path, sizeof path));
  PetscCall(io_keep_previous(run->comm, run->output_dir, "evals"));
  PetscCall(ppo_evaluate_said(run, "the actor", &m->actor, m, o, ps, st, path, "eval", &ev));
  PetscCall(PetscPrintf(run->comm, "eval: %d held-out prompts x %d responses\n", ps->eval.n, ps->eval.k));
  PetscCall(ppo_print_eval(run, "eval:", &ev, o));
  PetscCall(record_summary(rec, "eval_prompts", (double)ps->eval.n));
  PetscCall(record_summary(rec, "eval_samples", (double)ps->eval.k));
  PetscCall(record_summary(rec, "eval_gold", ev.gold));
  PetscCall(record_summary(rec, "eval_pass_k", ev.pass_k));
  PetscCall(record_summary(rec, "eval_reward", ev.reward));
  PetscCall(record_summary(rec, "eval_kl", ev.kl));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The cost model's description of the job: the settings as parsed here
 * and the models as read (critic-free: the critic slot gets the reward's). */
static void ppo_cost_deck_fill(const PPOOptions *o, const ModelConfig cfg[4], int max_prompt, PetscInt seed, CostDeck *d)
{
  PetscMemzero(d, sizeof *d);
  d->batch       = (int)o->rollout_batch;
  d->max_new     = (int)o->gen.max_new_tokens;
  d->minibatches = (int)o->minibatches;
  d->micro       = (int)o->microbatches;
  d->epochs      = (int)o->epochs;
  d->gen_slots   = (int)o->gen.slots;
  d->prompt_len  = max_prompt;
  d->critic_free = ppo_algo(o)->has_critic ? PETSC_FALSE : PETSC_TRUE;
  d->seed        = (long long)seed;
  d->staleness   = (int)o->async_staleness;
  d->prox        = o->async_staleness > 0 && o->async_correction != ASYNC_NONE ? PETSC_TRUE : PETSC_FALSE;
  d->partial       = (int)o->async_partial;
  d->partial_extra = o->async_partial ? ppo_partial_rows(o) - (int)o->rollout_batch : 0;
  d->group         = ppo_group_size(o);
  for (int k = 0; k < 4; k++) d->cfg[k] = cfg[k];
  d->reward_free = o->has_reward_model ? PETSC_FALSE : PETSC_TRUE; /* cfg[3] is then the actor's (ppo_configs), unused */
  if (d->critic_free) d->cfg[1] = cfg[3];
}

/* Everything that can be checked before a model is read: options, prompts,
 * the models' configurations (ppo_configs), the task and the plan (printed
 * when print is true). ps is set up for the run. */
static PetscErrorCode ppo_prepare(const RunCtx *run, PPOOptions *o, const ModelConfig *policy, PetscBool print, ModelSource src[4], PromptSource *ps, ModelConfig cfg[4], PlanNeeds *needs)
{
  PetscFunctionBegin;
  PetscCall(ppo_check_options(o));
  if (!policy) PetscCall(ppo_reference_source(run, o, (PetscBool)!run->dry_run)); /* a restart's reference file checked before anything is written */
  ppo_sources(o, src);
  if (o->eval_only && !o->restart[0]) { /* -mode eval: an SFT checkpoint's policy, or a PPO checkpoint's actor */
    PetscBool policy_role;
    PetscCall(ckpt_has_role(run->comm, o->actor_ckpt, "policy", &policy_role));
    if (!policy_role) src[0].role = src[2].role = "actor";
    if (o->reference_ckpt[0]) src[2].role = "policy";
  }
  /* with policy (-mode pipeline's checks before any stage ran) the restart file may not exist yet: the pipeline has its reward model */
  if (o->restart[0] && !policy) PetscCall(ckpt_has_role(run->comm, o->restart, "reward", &o->has_reward_model));
  else o->has_reward_model = (PetscBool)(o->reward.checkpoint[0] != 0);
  PetscCheck(o->has_reward_model || o->reward.spec.n || o->reward.command[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-restart %s holds no reward model: give the run's reward, -reward_fn or -reward_command", o->restart);
  PetscCheck(!o->dynamic_sampling || !o->has_reward_model, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-ppo_dynamic_sampling selects groups by their rewards right after generation, before the reward model's call: use rewards from -reward_fn or -reward_command only");
  PetscCheck(!o->dynamic_sampling || o->plan.fuse == FUSE_NONE, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-ppo_dynamic_sampling with -fuse_gen_inf %s: fused samples go to inference before the selection; use -fuse_gen_inf none", FuseModeNames[o->plan.fuse]);
  if (!o->has_reward_model) {
    PetscCheck(!ppo_trains_critic(o) || o->critic_init == CRITIC_FROM_ACTOR || o->restart[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-critic_init reward starts the critic from the reward model, and there is none (no -reward_checkpoint): use -critic_init actor");
  }
  PetscCall(prompts_setup(run, o, ps));
  if (o->restart[0] && !policy && !o->eval_only) { /* before anything is written: a queue of generated batches the staleness would drop */
    int found;
    PetscCall(async_restore(run->comm, o->restart, o, ps, NULL, 0, &found));
  }
  if (!policy) PetscCall(gen_config_stops_from(run->comm, &o->gen, src[0].file)); /* the actor's tokenizer's EOS unless the deck gives one */
  PetscCheck(!o->eval_only || ps->eval.n > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-mode eval needs held-out prompts: -ppo_eval_file FILE, or the built-in task's (-ppo_prompts builtin) with -ppo_eval_prompts > 0");
  PetscCall(ppo_configs(run, o, src, policy, ps->max_prompt, cfg));
  if (ps->eval_alone) { /* the training prompts are not used */
  } else if (ps->src.builtin) PetscCall(task_check(&o->task, cfg[0].vocab_size, cfg[0].n_positions, policy ? "policy_" : "actor_"));
  else {
    PetscCheck(ps->src.file.vocab_size <= cfg[0].vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-ppo_prompts %s has vocabulary %d, larger than the actor's %d", o->prompts, ps->src.file.vocab_size, cfg[0].vocab_size);
  }
  PetscCheck(!ps->eval.from_file || ps->eval.file.vocab_size <= cfg[0].vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-ppo_eval_file %s has vocabulary %d, larger than the actor's %d", o->eval_file, ps->eval.file.vocab_size, cfg[0].vocab_size);
  ppo_needs(o, cfg, needs);
  if (o->plan.placement == PLACEMENT_AUTO) { /* -placement auto: the searched plan replaces the colocated one */
    CostDeck deck;

    ppo_cost_deck_fill(o, cfg, ps->max_prompt, run->seed, &deck);
    PetscCall(PetscSNPrintf(deck.shapes_from, sizeof deck.shapes_from, "the models this run read"));
    PetscCall(search_auto(run, &deck, needs, &o->plan));
  }
  PetscCall(plan_check(&o->plan, needs));
  if (print) PetscCall(plan_print(run->comm, &o->plan, needs));
  if (print && o->async_staleness > 0 && !o->eval_only) {
    const PlanCall *g = &o->plan.call[MFC_ACTOR_GEN], *t = &o->plan.call[MFC_ACTOR_TRAIN];
    if (plan_overlap(&o->plan, MFC_ACTOR_GEN, MFC_ACTOR_TRAIN))
      PetscCall(PetscPrintf(run->comm, "asynchronous: iteration i trains on samples generated with the weights of iteration i-%" PetscInt_FMT "; generation and training share ranks in this plan, so this changes the algorithm, not the time (generation on ranks of its own overlaps: -placement disaggregate)\n", o->async_staleness));
    else PetscCall(PetscPrintf(run->comm, "asynchronous: iteration i trains on samples generated with the weights of iteration i-%" PetscInt_FMT "; generating the next batches (ranks %d-%d) overlaps training (ranks %d-%d)\n", o->async_staleness, g->ranks[0], g->ranks[g->nranks - 1], t->ranks[0], t->ranks[t->nranks - 1]));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ppo_dry_run(const RunCtx *run, const PPOOptions *o, const ModelConfig cfg[4], const PromptSource *ps)
{
  char a[32];

  PetscFunctionBegin;
  PetscCall(PetscPrintf(run->comm, "dry run: %s with 4 models of %d layers x %d; KV cache %s\n", ppo_algo(o)->name, cfg[0].n_layer, cfg[0].n_embd, sys_bytes_str((double)gen_kv_bytes(&o->gen, &cfg[0], ps->max_prompt + (int)o->gen.max_new_tokens), a, sizeof a)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_check_stage(const RunCtx *run, PPOOptions *o, const ModelConfig *policy, PetscBool print)
{
  ModelSource  src[4];
  ModelConfig  cfg[4];
  PromptSource ps;
  PlanNeeds    needs;

  PetscFunctionBegin;
  PetscCall(ppo_prepare(run, o, policy, print, src, &ps, cfg, &needs));
  if (print) PetscCall(ppo_dry_run(run, o, cfg, &ps));
  PetscCall(prompts_destroy(&ps));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_execute(const RunCtx *run, const Backend *be, PPOOptions *o, double *sft_gold, double *ppo_gold, double *ppo_kl)
{
  ModelSource  src[4];
  ModelConfig  cfg[4];
  PromptSource ps;
  PPOModels    m;
  CkptState    st  = {0, 0, run->seed, o->kl_coef};
  PPOSummary   sum = {{NAN, NAN, NAN, NAN}, {NAN, NAN, NAN, NAN}};
  PlanNeeds    needs;
  PPOFusedTrain      fz;
  PPORewards   rw;
  const char  *tables[2] = {o->restart, o->actor_ckpt}; /* where the tokens' text comes from */

  PetscFunctionBegin;
  PetscCall(train_restart_resolve(run->comm, run->output_dir, o->restart, sizeof o->restart));
  PetscCall(ppo_prepare(run, o, NULL, PETSC_TRUE, src, &ps, cfg, &needs));
  PetscCall(ppo_fused_train_setup(run, o, &fz)); /* a schedule file is checked before any work */
  PetscCall(ppo_rewards_setup(run, o, tables, 2, ps.src.builtin, (PetscBool)(ps.answers || ps.eval.answers), &rw));
  if (run->dry_run) {
    PetscCall(ppo_rewards_destroy(&rw));
    PetscCall(ppo_fused_train_destroy(&fz));
    PetscCall(ppo_dry_run(run, o, cfg, &ps));
    PetscCall(prompts_destroy(&ps));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  { /* the checkpoints carry the tokens' text: the restart file's, else the actor's source */
    PetscBool found = PETSC_FALSE;
    if (o->restart[0]) PetscCall(ckpt_tokenizer_from(run->comm, o->restart, &found));
    if (!found) PetscCall(ckpt_tokenizer_from(run->comm, o->actor_ckpt, NULL));
  }
  PetscCall(PetscLogStagePush(sys_log.ppo));
  PetscCall(ppo_load(run, be, o, &needs, src, cfg, &m, &st));
  m.fuse = fz;
  m.rew  = rw;
  ps.src.seed = (uint64_t)st.seed;
  PetscCall(sys_mkdir_p(run->output_dir));
  if (o->eval_only) {
    PetscCall(ppo_eval_only(run, o, &needs, &m, &ps, &st));
    PetscCall(ppo_models_destroy(&m));
    PetscCall(prompts_destroy(&ps));
    PetscCall(PetscLogStagePop());
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(ppo_loop(run, o, &needs, &m, &ps, &st, &sum));
  if (ps.eval.n == 0) PetscCall(PetscPrintf(run->comm, "%s: no held-out evaluation ran (no held-out prompts: -ppo_eval_file, or the built-in task's)\n", ppo_algo(o)->name));
  else if (isnan(sum.sft.gold) && isnan(sum.ppo.gold)) PetscCall(PetscPrintf(run->comm, "%s: held-out KL to the reference %.3f nats per response after %" PetscInt_FMT " iterations, on %d held-out prompts (no accuracy or gold score: no answers or judge)\n", ppo_algo(o)->name, sum.ppo.kl, st.iteration, ps.eval.n));
  else PetscCall(PetscPrintf(run->comm, "%s: held-out %s %.3f (%s policy) -> %.3f (after %" PetscInt_FMT " iterations), KL to the reference %.3f nats per response, on %d held-out prompts\n", ppo_algo(o)->name, ps.eval.gold == PPO_GOLD_ANSWER ? "accuracy" : "gold score", sum.sft.gold, sft_gold ? "SFT" : "initial", sum.ppo.gold, st.iteration, sum.ppo.kl, ps.eval.n));
  if (!isnan(sum.ppo.reward)) PetscCall(PetscPrintf(run->comm, "%s: held-out reward %+.3f -> %+.3f%s", ppo_algo(o)->name, sum.sft.reward, sum.ppo.reward, o->eval_samples > 1 && !isnan(sum.ppo.pass_k) ? "" : "\n"));
  if (!isnan(sum.ppo.reward) && o->eval_samples > 1 && !isnan(sum.ppo.pass_k)) PetscCall(PetscPrintf(run->comm, ", pass@%" PetscInt_FMT " %.3f -> %.3f\n", o->eval_samples, sum.sft.pass_k, sum.ppo.pass_k));
  if (sft_gold) *sft_gold = sum.sft.gold;
  if (ppo_gold) *ppo_gold = sum.ppo.gold;
  if (ppo_kl) *ppo_kl = sum.ppo.kl;
  PetscCall(ppo_models_destroy(&m));
  PetscCall(prompts_destroy(&ps));
  PetscCall(PetscLogStagePop());
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_cost_deck(const RunCtx *run, PetscBool help, CostDeck *d)
{
  TrainJobOptions job;
  PPOOptions   o;
  ModelSource  src[4];
  PromptSource ps;
  ModelConfig  policy, cfg[4];
  PetscBool    files;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&o, sizeof o));
  PetscCall(train_job_checkpoint_options(&job)); /* not the plan: the search makes one for other ranks */
  PetscCall(ppo_job_options(&job, &o));
  PetscCall(model_config_set_from_options("policy_", &policy)); /* a deck without checkpoints: SFT's model */
  if (!help) PetscCall(train_restart_resolve(run->comm, run->output_dir, o.restart, sizeof o.restart)); /* latest, with none there: a fresh start */
  if (!help) PetscCall(reward_spec_parse("-reward_fn", o.reward.fn, &o.reward.spec));
  files = !help && (o.restart[0] || o.actor_ckpt[0] || o.reward.checkpoint[0]) ? PETSC_TRUE : PETSC_FALSE;
  o.has_reward_model = PETSC_TRUE; /* a deck without checkpoints: the pipeline's, with its reward model */
  if (files) { /* the checkpoints' models; without a reward model the rewards come from -reward_fn or -reward_command */
    PetscCheck(o.restart[0] || o.actor_ckpt[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "the deck names -reward_checkpoint but not -actor_checkpoint: the models' shapes come from the checkpoints (or from -restart)");
    if (o.restart[0]) PetscCall(ckpt_has_role(run->comm, o.restart, "reward", &o.has_reward_model));
    else o.has_reward_model = o.reward.checkpoint[0] ? PETSC_TRUE : PETSC_FALSE;
    PetscCheck(o.has_reward_model || o.reward.spec.n || o.reward.command[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "the deck has no reward: -reward_checkpoint, -reward_fn or -reward_command");
  } else {
    policy.head = MODEL_HEAD_LM;
    PetscCall(model_config_check(&policy, "policy_"));
  }
  if (!help && o.restart[0]) PetscCall(ppo_reference_source(run, &o, PETSC_FALSE)); /* the reference's shape from its recorded file */
  ppo_sources(&o, src);
  PetscCall(prompts_setup(run, &o, &ps));
  PetscCall(ppo_configs(run, &o, src, files ? NULL : &policy, ps.max_prompt, cfg));
  ppo_cost_deck_fill(&o, cfg, ps.max_prompt, run->seed, d);
  if (!files) PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "the -policy_ options"));
  else if (o.restart[0]) PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "checkpoint %s", o.restart));
  else if (o.has_reward_model) PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "checkpoints %s and %s", src[0].file, src[3].file));
  else PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "checkpoint %s (no reward model)", src[0].file));
  PetscCall(prompts_destroy(&ps));
  PetscFunctionReturn(PETSC_SUCCESS);
}
