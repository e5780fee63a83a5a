/* ppo: PPO, GRPO, RLOO and REINFORCE++ (-mode ppo, the third stage of -mode pipeline):
 * the options, the checks before any work and the run. The rollouts (the
 * generation and inference calls, fused or not), the iteration graph and
 * the training passes are internal to src/ppo (src/ppo/ppo_impl.h). */
#ifndef RLFUSE_PPO_H
#define RLFUSE_PPO_H

#include "task.h"
#include "rl.h"
#include "plan.h"
#include "train.h"
#include "gen.h"
#include "cost.h"
#include "reward.h"
#include "env.h"

typedef enum {
  KL_IN_AUTO   = 0,
  KL_IN_REWARD = 1,
  KL_IN_LOSS   = 2
} PPOKLIn; /* auto: the algorithm's own (src/ppo/algos.c) */
typedef enum { CRITIC_FROM_REWARD = 0, CRITIC_FROM_ACTOR = 1 } CriticInit;
/* -ppo_objective: the policy loss (inc/rl.h): PPO's clipped ratio per token,
 * CISPO's clipped and detached token weight, GSPO's clipped sequence ratio. */
typedef enum { PPO_OBJ_CLIP = 0, PPO_OBJ_CISPO = 1, PPO_OBJ_GSPO = 2 } PPOObjective;
/* -async_correction: how stale samples are weighed (docs/async.md). */
typedef enum { ASYNC_DECOUPLED = 0, ASYNC_TIS = 1, ASYNC_NONE = 2 } PPOAsyncCorrection;

typedef struct {
  PetscInt    algo;                          /* -algo: the row of the algorithms' table (src/ppo/algos.c) */
  PetscInt    critic_init;
  PetscInt    iterations, rollout_batch, minibatches, microbatches, epochs, group;
  PetscInt    eval_every, eval_prompts, checkpoint_every;
  PetscReal   checkpoint_minutes; /* -checkpoint_minutes (src/train/job.c) */
  PetscReal   kl_coef, kl_target, kl_horizon, gamma, lambda, clip, value_clip, reward_clip, truncation_penalty;
  PetscReal   clip_low, clip_high; /* the policy ratio's clip range [1 - low, 1 + high] (default -ppo_clip both) */
  PetscInt    objective;           /* PPOObjective */
  PetscInt    loss_agg, kl_estimator;        /* RLLossAgg, RLKLEstimator (inc/rl.h) */
  PetscInt    kl_in;                         /* PPOKLIn: where the KL to the reference enters */
  PetscInt dynamic_sampling; /* DAPO's dynamic sampling: candidate groups generated per round per group kept (0: off) */
  PetscInt    dynamic_rounds;                /* its most generation rounds per iteration */
  PetscInt    overlong_buffer; /* DAPO's overlong shaping: the last tokens before max_new_tokens that pay */
  PetscReal   overlong_penalty;              /* its penalty at max_new_tokens */
  PetscBool   whiten, dump_rollouts, scale_std; /* scale_std: GRPO divides by the group's std (false: Dr. GRPO) */
  PetscBool   write_policy;                     /* policy.h5: the trained actor's weights alone, beside final.h5 */
  char        actor_ckpt[PETSC_MAX_PATH_LEN], reference_ckpt[PETSC_MAX_PATH_LEN];
  char        prompts[PETSC_MAX_PATH_LEN], restart[PETSC_MAX_PATH_LEN];
  char eval_file[PETSC_MAX_PATH_LEN]; /* -ppo_eval_file: held-out prompts with answers ("": the built-in task's) */
  PetscInt    eval_samples;                  /* -ppo_eval_samples: responses per held-out prompt (pass@k) */
  PetscBool   eval_greedy;                   /* -ppo_eval_greedy: held-out responses greedy (training's are sampled) */
  PetscInt    eval_show;                     /* -ppo_eval_show: held-out samples printed at each evaluation */
  PetscInt async_staleness; /* -async_staleness K: iteration i trains on samples generated with the weights of iteration
                               i-K (0: synchronous) */
  PetscInt    async_correction;              /* PPOAsyncCorrection */
  PetscReal   async_is_cap;                  /* -async_is_cap: the behaviour importance weight's cap (0: none) */
  PetscInt async_partial; /* -async_partial S: new tokens a sample draws per iteration before it waits for newer weights
                             (0: to the end) */
  PetscInt async_partial_extra; /* -async_partial_extra: prompts in flight beyond a batch's (-1: a batch's) */
  /* rewards (-reward_*): the reward model's score times its weight, plus
   * rule functions of the response text, plus a user's command. src/reward
   * reads and checks them (reward_options_check). */
  RewardOptions reward;
  EnvOptions    env; /* -env_*: multi-turn episodes (src/env reads and checks them) */
  PetscBool   has_reward_model;              /* a reward model takes part (-reward_checkpoint, or the restart file's) */
  PetscBool   eval_only;                     /* -mode eval: the held-out evaluation of -actor_checkpoint, no training */
  PetscBool reference_made_here; /* -mode pipeline: the reference's file is this job's SFT output, so checkpoints carry
                                    its weights */
  PetscBool      reference_sourced; /* checkpoints record reference_source instead of the reference's weights */
  CkptSource  reference_source;              /* the input file the reference was read from (ppo_reference_source) */
  AdamWConfig actor_opt, critic_opt;
  GenConfig   gen;
  BuiltinTask    task;
  Plan        plan;
  TrainSched  sched; /* of the actor's and critic's training passes (-train_schedule) */
} PPOOptions;

/* The algorithm's name as the pipeline's lines write it ("PPO", "GRPO", ...). */
const char *ppo_algo_title(const PPOOptions *o);

/* Reads PPO's options; job: the lifecycle options read once (inc/train.h). */
PetscErrorCode ppo_options(const TrainJobOptions *job, PPOOptions *o);
/* The file options ppo reads (src/ppo/file_options.c), for io_files_check. */
extern const IoFileOption ppo_file_options[];
/* Runs the -algo's training; the held-out gold scores and KL of the summary are
 * returned when the pointers are not NULL (the pipeline prints them). */
PetscErrorCode ppo_execute(const RunCtx *run, const Backend *be, PPOOptions *o, double *initial_gold, double *ppo_gold,
                           double *ppo_kl);
/* The PPO stage's checks before any work; with policy (-mode pipeline) the
 * models' architecture is the SFT one, as the earlier stages will write it.
 * With print, the plan and the dry-run summary are printed. */
PetscErrorCode ppo_check_stage(const RunCtx *run, PPOOptions *o, const ModelConfig *policy, PetscBool print);
/* The deck's PPO job as the cost model needs it (-mode plan, -mode
 * profile): its settings as PPO reads them and its four models as the run
 * would have them, from the checkpoints the deck names (-actor_checkpoint,
 * -reward_checkpoint, -reference_checkpoint, -critic_init, -restart), or,
 * for a deck without them (a pipeline's), the -policy_ model SFT will
 * write. help: only register the options (no file is read). */
PetscErrorCode ppo_cost_deck(const RunCtx *run, PetscBool help, CostDeck *deck);


#endif
