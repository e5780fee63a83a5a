/* The options of -mode ppo and its variants (-algo, -rollout_batch, -ppo_*,
 * -async_*, -grpo_*; -reward_* through src/reward, the generation's and the
 * task's through their modules) and their checks against each other. Every
 * value is read here once; the other files of src/ppo take PPOOptions. */
#include "base.h"
#include "search.h"
#include <limits.h>
#include <math.h>

static const char *const kl_in_names[]  = {"auto", "reward", "loss", "PPOKLIn", "KL_IN_", NULL};
static const char *const obj_names[]    = {"clip", "cispo", "gspo", "PPOObjective", "PPO_OBJ_", NULL};
static const char *const agg_names[]    = {"token_mean", "seq_mean", "seq_sum_norm", "RLLossAgg", "RL_AGG_", NULL};
static const char *const kl_est_names[] = {"k1", "k2", "k3", "RLKLEstimator", "RL_KL_", NULL};
static const char *const critic_names[] = {"reward", "actor", "CriticInit", "CRITIC_FROM_", NULL};
static const char *const async_corr_names[] = {"decoupled", "tis", "none", "PPOAsyncCorrection", "ASYNC_", NULL};

/* The rows that put the KL in the loss under -ppo_kl_in auto; that draw groups. */
static PetscBool algo_kl_in_loss(const PPOAlgoSpec *a) { return a->kl_in_loss; }
static PetscBool algo_groups(const PPOAlgoSpec *a) { return a->groups; }

PetscErrorCode ppo_job_options(const TrainJobOptions *job, PPOOptions *o)
{
  const char *algo_names[16];
  char        algo_help[512], kl_auto[128], kl_help[320];

  PetscFunctionBegin;
  PetscCall(ppo_algo_choices(algo_names, (int)(sizeof algo_names / sizeof algo_names[0]), algo_help, sizeof algo_help));
  PetscCall(PetscStrncpy(o->prompts, "builtin", sizeof o->prompts));
  /* (o->reward: reward_options_from_options) */
  o->actor_ckpt[0] = o->reference_ckpt[0] = o->restart[0] = o->eval_file[0] = '\0';
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "PPO / GRPO", NULL);
  RfOptEnum("-algo", algo_help, algo_names, ppo_nalgos, &o->algo);
  RfOptInt("-rollout_batch", "Responses generated per iteration", 64, &o->rollout_batch);
  RfOptInt("-rollout_group",
           "Samples per prompt of an -algo with groups (grpo, the k of rloo, the baseline's group of reinforce_pp); "
           "must divide -rollout_batch",
           4, &o->group);
  RfOptString("-actor_checkpoint", "SFT checkpoint (role policy) that starts the actor", o->actor_ckpt,
              sizeof o->actor_ckpt);
  RfOptString("-reference_checkpoint", "Checkpoint (role policy) of the frozen reference (default: -actor_checkpoint)",
              o->reference_ckpt, sizeof o->reference_ckpt);
  RfOptEnum("-critic_init", "Critic starts from the reward model (whole) or the actor's trunk with a fresh scalar head",
            critic_names, 2, &o->critic_init);
  RfOptBool("-dump_rollouts", "Write every iteration's rollout to <output_dir>/rollouts.h5", PETSC_FALSE,
            &o->dump_rollouts);
  RfOptBool("-write_policy",
            "At the end also write <output_dir>/policy.h5: the trained actor's weights alone under the role policy "
            "(for -actor_checkpoint, -mode eval and generate, tools/hf_export.py; final.h5 is the restartable "
            "checkpoint)",
            PETSC_TRUE, &o->write_policy);
  PetscOptionsEnd();
  PetscCall(PetscStrncpy(o->restart, job->restart, sizeof o->restart));
  PetscCall(train_stage_checkpoint_every(job, "ppo", "iteration", &o->checkpoint_every, &o->checkpoint_minutes));
  PetscOptionsBegin(PETSC_COMM_WORLD, "ppo_", "PPO / GRPO", NULL);
  RfOptInt("-iterations", "Iterations (generate, score, train) in total (a restart continues up to this count)", 100,
           &o->iterations);
  RfOptString("-prompts", "Prompts: 'builtin' (the sort task) or an HDF5 token file (prompt_lengths, or whole rows)",
              o->prompts, sizeof o->prompts);
  RfOptInt("-minibatches", "Mini-batches per epoch (one optimizer step each); must divide -rollout_batch", 4,
           &o->minibatches);
  RfOptInt("-microbatches", "Micro-batches per mini-batch (gradient accumulation); must divide the mini-batch", 1,
           &o->microbatches);
  RfOptInt("-epochs", "Passes over each rollout", 1, &o->epochs);
  RfOptReal("-kl_coef", "beta: the KL's coefficient, in the rewards or in the loss (-ppo_kl_in)", 0.05, &o->kl_coef);
  RfOptReal("-kl_target", "Adaptive KL controller's target KL per sequence (0: fixed -ppo_kl_coef)", 0.0,
            &o->kl_target);
  RfOptReal("-kl_horizon", "Adaptive KL controller's horizon, in samples", 10000.0, &o->kl_horizon);
  RfOptReal("-gamma", "Discount of GAE", 1.0, &o->gamma);
  RfOptReal("-lambda", "lambda of GAE", 0.95, &o->lambda);
  o->objective = PPO_OBJ_CLIP;
  RfOptEnum("-objective",
            "The policy loss: clip (PPO's clipped ratio per token), cispo (MiniMax-M1: every token's gradient, "
            "weighted by its clipped ratio held constant), gspo (Qwen: the sequence's length-normalised ratio, "
            "clipped per sequence; -algo grpo or rloo; default clip range 3e-4 / 4e-4)",
            obj_names, 3, &o->objective);
  RfOptReal("-clip", "epsilon: policy ratio clip (default 0.2; with -ppo_objective gspo 3e-4)",
            o->objective == PPO_OBJ_GSPO ? 3e-4 : 0.2, &o->clip);
  RfOptReal("-clip_low", "The ratio's lower clip, 1 - clip_low (default -ppo_clip)", o->clip, &o->clip_low);
  RfOptReal("-clip_high",
            "The ratio's upper clip, 1 + clip_high (default -ppo_clip; with -ppo_objective gspo and its -ppo_clip "
            "3e-4: 4e-4, the GSPO paper's pair; DAPO's clip-higher: 0.28 with clip_low 0.2)",
            o->objective == PPO_OBJ_GSPO && o->clip == 3e-4 ? 4e-4 : o->clip, &o->clip_high);
  o->loss_agg     = ppo_algo(o)->loss_agg;
  o->kl_estimator = RL_KL_K3;
  RfOptEnum("-loss_agg",
            "How the policy loss weighs tokens in a mini-batch: token_mean (every token alike), seq_mean (each "
            "sequence's token mean, averaged), seq_sum_norm (each sequence's token sum over -gen_max_new_tokens: Dr. "
            "GRPO)",
            agg_names, 3, &o->loss_agg);
  o->kl_in = KL_IN_AUTO;
  PetscCall(ppo_algo_join(algo_kl_in_loss, PETSC_TRUE, kl_auto, sizeof kl_auto));
  PetscCall(PetscSNPrintf(kl_help, sizeof kl_help,
                          "Where the KL to the reference enters: reward (a per-token penalty in the rewards, k1), loss "
                          "(a loss term with -ppo_kl_estimator), auto (loss for %s, reward otherwise)",
                          kl_auto));
  RfOptEnum("-kl_in", kl_help, kl_in_names, 3, &o->kl_in);
  RfOptEnum("-kl_estimator",
            "Estimator of KL(policy||reference) in the KL loss (-ppo_kl_in loss): k1 (log ratio), k2 (half its "
            "square), k3 (exp(-r) + r - 1)",
            kl_est_names, 3, &o->kl_estimator);
  RfOptInt("-dynamic_sampling",
           "DAPO's dynamic sampling: each round generates this many times -rollout_batch, and the groups whose rewards "
           "are not all equal are kept until the batch is full (0: off; critic-free -algo, rewards from -reward_fn or "
           "-reward_command)",
           0, &o->dynamic_sampling);
  RfOptInt("-dynamic_rounds",
           "Most generation rounds of -ppo_dynamic_sampling per iteration, each on new prompts; when the last leaves "
           "the batch short, its first groups of equal rewards fill it",
           1, &o->dynamic_rounds);
  RfOptInt("-overlong_buffer",
           "DAPO's overlong reward shaping: a response longer than -gen_max_new_tokens minus this pays a penalty "
           "rising linearly to -ppo_overlong_penalty (0: off)",
           0, &o->overlong_buffer);
  RfOptReal("-overlong_penalty", "The overlong shaping's penalty at -gen_max_new_tokens", 1.0, &o->overlong_penalty);
  RfOptReal("-value_clip", "Value clip around the old values (0: none)", 0.2, &o->value_clip);
  RfOptReal("-reward_clip", "Clip the reward-model score to [-c, c] (0: none)", 5.0, &o->reward_clip);
  RfOptReal("-truncation_penalty", "Score of a response that hit max_new_tokens without EOS", -1.0,
            &o->truncation_penalty);
  RfOptBool("-whiten", "Whiten advantages over the batch's response tokens (PPO)", PETSC_TRUE, &o->whiten);
  RfOptInt("-eval_every", "Held-out gold score every N iterations (0: only at the start and end)", 0, &o->eval_every);
  RfOptInt("-eval_prompts",
           "Held-out prompts in each evaluation (the built-in task's held-out split, or the first of -ppo_eval_file)",
           256, &o->eval_prompts);
  RfOptString("-eval_file",
              "Held-out prompts with reference answers (a prompt file, docs/formats.md) for the evaluations instead of "
              "the built-in task's",
              o->eval_file, sizeof o->eval_file);
  RfOptInt("-eval_samples", "Responses per held-out prompt: accuracy is over all of them, pass@k for k this count", 1,
           &o->eval_samples);
  RfOptBool("-eval_greedy",
            "Held-out responses greedy (the most probable token) while training samples (-gen_greedy: both greedy)",
            PETSC_FALSE, &o->eval_greedy);
  RfOptInt("-eval_show",
           "Held-out samples printed at each evaluation (prompt, response, reward, answer; text through the token "
           "table, else token ids)",
           0, &o->eval_show);
  PetscOptionsEnd();
  PetscOptionsBegin(PETSC_COMM_WORLD, "async_", "Asynchronous RL", NULL);
  RfOptInt("-staleness",
           "K: iteration i trains on samples generated with the weights of iteration i-K, so that generating the next "
           "batches overlaps training when the plan puts generation on ranks of its own (0: synchronous; "
           "docs/async.md)",
           0, &o->async_staleness);
  RfOptEnum("-correction",
            "How samples from older weights are weighed: decoupled (PPO's ratio against the current weights times the "
            "behaviour importance weight, tokens over -async_is_cap left out), tis (that weight truncated at the cap) "
            "or none (PPO's ratio against the generating weights)",
            async_corr_names, 3, &o->async_correction);
  RfOptReal("-is_cap",
            "The behaviour importance weight's cap (-async_correction decoupled: tokens above it leave the loss; tis: "
            "truncated to it; 0: no cap)",
            5.0, &o->async_is_cap);
  RfOptInt("-partial",
           "Partial rollouts: the new tokens a sample may draw per iteration; one still running then goes on in the "
           "next iteration with newer weights, each token keeping the version that drew it (0: every sample runs to "
           "its end; docs/async.md)",
           0, &o->async_partial);
  RfOptInt("-partial_extra",
           "Partial rollouts: prompts kept in flight beyond a batch's, so that a batch fills from the samples that end "
           "without running the oldest to their end; more cut the long tail better and keep samples that end early "
           "waiting longer (-1: a batch's prompts)",
           -1, &o->async_partial_extra);
  PetscOptionsEnd();
  PetscCall(reward_options_from_options(&o->reward)); /* src/reward owns the -reward_ options */
  PetscCall(env_options_from_options(&o->env));       /* src/env owns the -env_ options */
  PetscOptionsBegin(PETSC_COMM_WORLD, "grpo_", "GRPO", NULL);
  RfOptBool("-scale_std",
            "Divide a GRPO advantage by its group's standard deviation (false: Dr. GRPO, only the mean subtracted)",
            PETSC_TRUE, &o->scale_std);
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

PetscErrorCode ppo_check_options(PPOOptions *o)
{
  PetscInt mb;

  PetscFunctionBegin;
  PetscCall(reward_options_check(&o->reward, o->gen.max_new_tokens)); /* -reward_fn parsed, the length reward's start */
  PetscCheck(o->iterations >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_iterations %" PetscInt_FMT " must be >= 0", o->iterations);
  PetscCheck(o->rollout_batch > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-rollout_batch %" PetscInt_FMT " must be positive", o->rollout_batch);
  PetscCheck(o->minibatches > 0 && o->rollout_batch % o->minibatches == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-rollout_batch %" PetscInt_FMT " is not divisible into -ppo_minibatches %" PetscInt_FMT, o->rollout_batch,
             o->minibatches);
  mb = o->rollout_batch / o->minibatches;
  PetscCheck(o->microbatches > 0 && mb % o->microbatches == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "a mini-batch of %" PetscInt_FMT
             " (-rollout_batch / -ppo_minibatches) is not divisible into -ppo_microbatches %" PetscInt_FMT,
             mb, o->microbatches);
  PetscCheck(o->epochs >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_epochs %" PetscInt_FMT " must be >= 1",
             o->epochs);
  PetscCheck(o->kl_coef >= 0 && o->kl_target >= 0 && o->kl_horizon > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_kl_coef and -ppo_kl_target must be >= 0 and -ppo_kl_horizon > 0");
  PetscCheck(o->gamma >= 0 && o->gamma <= 1 && o->lambda >= 0 && o->lambda <= 1, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE, "-ppo_gamma and -ppo_lambda must be in [0,1]");
  PetscCheck(o->clip > 0 && o->value_clip >= 0 && o->reward_clip >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_clip must be positive, -ppo_value_clip and -ppo_reward_clip non-negative");
  PetscCheck(o->clip_low > 0 && o->clip_low < 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_clip_low %g must be in (0,1) (the ratio's lower bound 1 - clip_low must be positive)",
             (double)o->clip_low);
  PetscCheck(o->clip_high > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_clip_high %g must be positive",
             (double)o->clip_high);
  PetscCheck(o->overlong_buffer >= 0 && o->overlong_buffer <= o->gen.max_new_tokens, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_overlong_buffer %" PetscInt_FMT " must be in [0, -gen_max_new_tokens %" PetscInt_FMT "]",
             o->overlong_buffer, o->gen.max_new_tokens);
  PetscCheck(o->overlong_penalty >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_overlong_penalty %g must be >= 0", (double)o->overlong_penalty);
  PetscCheck(o->eval_every >= 0 && o->eval_prompts >= 0 && o->checkpoint_every >= 0, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_eval_every, -ppo_eval_prompts and -ppo_checkpoint_every (or -checkpoint_every) must be >= 0");
  if (ppo_algo(o)->groups)
    PetscCheck(o->group >= 2 && o->rollout_batch % o->group == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-rollout_batch %" PetscInt_FMT " is not divisible into groups of -rollout_group %" PetscInt_FMT
               " (at least 2)",
               o->rollout_batch, o->group);
  PetscCheck(o->restart[0] || o->actor_ckpt[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
             "-mode ppo needs -actor_checkpoint (SFT), or -restart");
  PetscCheck(o->restart[0] || o->reward.checkpoint[0] || o->reward.spec.n || o->reward.command[0], PETSC_COMM_WORLD,
             PETSC_ERR_ARG_NULL,
             "-mode ppo needs a reward: -reward_checkpoint (a reward model), -reward_fn (rule rewards) or "
             "-reward_command (a reward program)");
  PetscCheck(o->dynamic_rounds >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_dynamic_rounds %" PetscInt_FMT " must be at least 1", o->dynamic_rounds);
  PetscCheck(o->dynamic_rounds == 1 || o->dynamic_sampling, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-ppo_dynamic_rounds %" PetscInt_FMT " is the most rounds of -ppo_dynamic_sampling, which is off",
             o->dynamic_rounds);
  PetscCheck(o->dynamic_sampling == 0 || o->dynamic_sampling >= 2 ||
                 (o->dynamic_sampling == 1 && o->dynamic_rounds >= 2),
             PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_dynamic_sampling %" PetscInt_FMT
             " must be 0 (off), at least 2 (candidates per group kept), or 1 with -ppo_dynamic_rounds >= 2",
             o->dynamic_sampling);
  if (o->dynamic_sampling && !ppo_algo(o)->groups) {
    char grouped[128];
    PetscCall(ppo_algo_join(algo_groups, PETSC_FALSE, grouped, sizeof grouped));
    SETERRQ(PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
            "-ppo_dynamic_sampling filters groups of -rollout_group responses: -algo %s draws none (an -algo that "
            "does: "
            "%s)",
            ppo_algo(o)->name, grouped);
  }
  PetscCheck(o->async_staleness >= 0 && o->async_staleness <= PPO_ASYNC_MAX, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-async_staleness %" PetscInt_FMT " must be in [0, %d] (0: synchronous)", o->async_staleness,
             PPO_ASYNC_MAX);
  PetscCheck(o->async_is_cap == 0 || o->async_is_cap >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-async_is_cap %g must be 0 (no cap) or at least 1", (double)o->async_is_cap);
  PetscCheck(o->objective != PPO_OBJ_GSPO || ppo_algo(o)->seq_adv, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-ppo_objective gspo needs one advantage per sequence (-algo grpo or rloo); -algo %s gives one per token",
             ppo_algo(o)->name);
  PetscCheck(o->objective != PPO_OBJ_GSPO || !o->async_staleness, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-ppo_objective gspo with -async_staleness %" PetscInt_FMT
             ": the sequence ratio is not defined for the decoupled objective of asynchronous runs here; use "
             "-ppo_objective clip or cispo",
             o->async_staleness);
  PetscCheck(!o->async_staleness || !o->dynamic_sampling, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-async_staleness %" PetscInt_FMT " with -ppo_dynamic_sampling: the selection's later rounds would "
                                               "generate inside the training iteration; use one of them",
             o->async_staleness);
  /* episodes in this version: whole batches (synchronous or -async_staleness K), none left in flight */
  PetscCheck(!env_on(&o->env) || !o->async_partial, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-env %s with -async_partial %" PetscInt_FMT
             ": partial rollouts do not carry episodes in flight yet; use -async_partial 0 (whole episodes, "
             "-async_staleness may stay)",
             o->env.kind, o->async_partial);
  PetscCheck(!env_on(&o->env) || o->plan.fuse != FUSE_MIGRATE, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-env %s with -fuse_gen_inf migrate: a migrated sample would leave its episode's environment behind; use "
             "-fuse_gen_inf stream or none",
             o->env.kind);
  PetscCheck(o->env.reward_at != ENV_REWARD_TURN || env_on(&o->env), PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-env_reward_at turn places an environment's step rewards at its turns: it needs -env");
  PetscCheck(o->env.reward_at != ENV_REWARD_TURN || !ppo_algo(o)->seq_adv, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-env_reward_at turn with -algo %s: its advantage is one per sequence, wherever the rewards sit; use "
             "-algo ppo or reinforce_pp (returns token by token), or -env_reward_at end",
             ppo_algo(o)->name);
  PetscCheck(strcmp(o->env.kind, "calc") || o->task.kind == TASK_KIND_ARITH, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-env calc is the arithmetic task's calculator, in its characters: it needs -task arith (the task is %s)",
             TaskKindNames[o->task.kind]);
  PetscCheck(!o->async_staleness || o->plan.fuse == FUSE_NONE, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-async_staleness %" PetscInt_FMT
             " with -fuse_gen_inf %s: the fused rollouts stream one batch into inference; use -fuse_gen_inf none",
             o->async_staleness, FuseModeNames[o->plan.fuse]);
  if (o->async_partial) {
    PetscCheck(o->async_partial > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-async_partial %" PetscInt_FMT " must be >= 0 (0: off)", o->async_partial);
    PetscCheck(o->async_staleness >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-async_partial %" PetscInt_FMT " needs -async_staleness >= 1: a sample that goes on with newer weights "
                                               "is trained on by a later iteration",
               o->async_partial);
    PetscCheck(o->async_partial < o->gen.max_new_tokens, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-async_partial %" PetscInt_FMT " must be below -gen_max_new_tokens %" PetscInt_FMT
               " (at or above it every sample ends in its first iteration)",
               o->async_partial, o->gen.max_new_tokens);
    /* the pool's rows, -rollout_batch plus the extra prompts' samples, are an int: divided, never multiplied */
    PetscInt extra_max = (INT_MAX - o->rollout_batch) / ppo_group_size(o);
    PetscCheck((o->async_partial_extra >= 1 && o->async_partial_extra <= extra_max) || o->async_partial_extra == -1,
               PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-async_partial_extra %" PetscInt_FMT " must be in [1, %" PetscInt_FMT
               "] (prompts in flight beyond a batch's; the pool's rows must fit an int) or -1 (a batch's)",
               o->async_partial_extra, extra_max);
    o->async_partial_extra = ppo_partial_extra(o);
  } else
    PetscCheck(o->async_partial_extra == -1, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-async_partial_extra %" PetscInt_FMT " sizes partial rollouts, which are off (-async_partial 0)",
               o->async_partial_extra);
  PetscCheck(o->eval_show >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_eval_show %" PetscInt_FMT " must be >= 0", o->eval_show);
  PetscCheck(o->eval_samples >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_eval_samples %" PetscInt_FMT " must be >= 1", o->eval_samples);
  PetscCheck(o->eval_samples == 1 || !(o->gen.greedy || o->eval_greedy), PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-ppo_eval_samples %" PetscInt_FMT " with %s: greedy responses to one prompt are all the same",
             o->eval_samples, o->gen.greedy ? "-gen_greedy" : "-ppo_eval_greedy");
  PetscFunctionReturn(PETSC_SUCCESS);
}
