/* ppo_impl.h: the upper layer of src/ppo, private to it: the four models
 * on their meshes, the held-out evaluation, training, one iteration's graph,
 * set-up, records and the loop's batch makers. The lower layer (the
 * rollout and what computes on it) is base.h. */
#ifndef RLFUSE_PPO_IMPL_H
#define RLFUSE_PPO_IMPL_H

#include "base.h"
#include "train.h"
#include "actorcritic.h"
#include "genfuse.h"

/* The fused training stage's schedule (-fuse_train 1, src/ppo/fused_train.c):
 * the instance (both models' stages and micro-batches per mini-batch, the
 * forward times once measured) and the schedule, read at setup from
 * -fuse_train_schedule or searched after the first mini-batch. */
typedef struct {
  PetscBool on, ready, from_file, reported;
  ACInst  in;
  ACSched sched;
  double    predicted, sequential, lower; /* the search's makespan, the sequential 1F1B one, the bound (seconds) */
  uint64_t  seed;
  int       root;                         /* world rank of the actor mesh's first rank (which searched) */
} PPOFusedTrain;

/* What the fused rollouts (-fuse_gen_inf, src/ppo/rollout_genfuse.c) keep
 * between iterations; part of PPOModels, zeroed with it, freed by
 * rollout_genfuse_teardown. */
typedef struct {
  MPI_Comm  comm;     /* the samples' own tag space (a duplicate of the world) */
  PetscBool has_comm;
  /* -fuse_migrate_at auto: what the previous iteration measured (the same
   * on every rank: rollout_genfuse_observe gets values reduced over the
   * world). A run that restarts starts again from GENFUSE_RT_FIRST. */
  struct {
    PetscBool have;
    int       B, *len, *rlen;
    double    step_s, tok_s;
  } hist;
  /* Which rank runs which inference call on which row: with migrate every
   * replica head of a call's mesh its replica's rows, and after a
   * migration (genfuse_reroute) the rows of ranks that go on decoding go to
   * the freed ranks; with stream (dealt) the rows each head was dealt, set
   * as they arrive. done: what this rank computed in this iteration (the
   * shares take each (call, row) from the rank that computed it). */
  struct {
    PetscBool      dealt;
    int            B, world;
    unsigned char *need, *member, *done; /* [3][world][B], [3][world], [3][B] */
    int           *q_rep;                /* [world]: generation replica, or -1 */
    int           *head_of;              /* [world]: the head of its inference replica (itself if none) */
  } rows;
} RolloutGenFuse;

/* The four models on the plan's meshes. The actor and critic live in their
 * training placements (with AdamW state); actor_gen and critic_inf are
 * separate copies only when the plan gives those calls another layout
 * (gen_copy, critic_copy): they are refreshed from the trained weights by
 * reallocation at the start of every iteration and, when their mesh shares
 * ranks with the training mesh, dropped after their call. */
typedef struct {
  const Plan *plan;
  DModel      actor, actor_gen, critic, critic_inf, reference, reward;
  PetscBool   has_critic;             /* the algorithm's row has one (src/ppo/algos.c) */
  PetscBool   has_reward;             /* a reward model (rule rewards or a command may stand in) */
  PetscBool   gen_copy, critic_copy;  /* actor_gen / critic_inf are copies */
  PetscBool   gen_drop, critic_drop;  /* the copy is dropped after its call */
  PetscBool   offload_ref, offload_rew; /* frozen models kept in host memory between calls */
  const CkptSource *ref_source; /* the reference's input file, recorded in checkpoints instead of its weights (NULL:
                                   they are written) */
  size_t      bucket;                 /* reallocation and gradient bucket, bytes */
  PPOFusedTrain     fuse;                   /* the fused training stage (fuse.on: -fuse_train 1) */
  RolloutGenFuse    genfuse;                /* the fused rollouts' state (-fuse_gen_inf) */
  PPORewards        rew;                    /* rule rewards, the reward command, the judge */
  PPOEpisodes      *eps;                    /* the environment of multi-turn episodes (NULL: none) */
} PPOModels;

static inline DModel *ppo_gen_model(PPOModels *m) { return m->gen_copy ? &m->actor_gen : &m->actor; }
static inline DModel *ppo_critic_inf_model(PPOModels *m) { return m->critic_copy ? &m->critic_inf : &m->critic; }

/* Generation and inference fused (src/ppo/rollout_genfuse.c, -fuse_gen_inf
 * stream): on the generation ranks, generation whose replica heads stream
 * each finished sample to the inference ranks; on those, the inference calls
 * over micro-batches of arrived samples. Afterwards the usual shares of the
 * four calls hand the results to every rank. This rank's times and the
 * streaming costs come back in tm. rollout_genfuse_setup is collective on
 * MPI_COMM_WORLD (once). */
typedef struct {
  double gen, inf[3];              /* seconds: generation; ref, reward, critic inference */
  double messages, bytes, send;    /* sent samples, their bytes, seconds in the sends */
  double recv_wait;                /* seconds an inference rank waited for samples */
  int    batches;                  /* micro-batches formed */
  double tokens, step_s;           /* tokens this rank ran inference on; its mean decode-step seconds */
  double rt, rt_pred; /* migrate: R_t used; auto: the simulation's predicted stage seconds (0: R_t given, -1: auto's
                         first iteration) */
  double moved, mig_bytes, mig_s;  /* migrate: samples and bytes this rank sent, seconds it spent migrating */
  int    mig_m, mig_dest;          /* destination replicas; this rank's replica is one */
  double mig_t0, mig_t1;           /* the migration on this rank (0, 0: none) */
} GenFuseTimes;
PetscErrorCode rollout_genfuse_setup(RolloutGenFuse *gs);
/* Frees what the fused rollouts keep between iterations (the samples' communicator, the
 * previous lengths, the row maps); collective on MPI_COMM_WORLD, at the end of PPO. */
PetscErrorCode rollout_genfuse_teardown(RolloutGenFuse *gs);
/* After an iteration, on every rank with the same values: its lengths and
 * the measured decode-step and per-token inference seconds, for the next
 * iteration's -fuse_migrate_at auto. */
PetscErrorCode rollout_genfuse_observe(RolloutGenFuse *gs, const Rollout *r, double step_s, double tok_s);
/* -fuse_gen_inf migrate: reference log-probabilities, scores and values to
 * every rank, each (call, row) from the rank that computed it. Collective
 * on MPI_COMM_WORLD. */
PetscErrorCode rollout_share_inf_owned(RolloutGenFuse *gs, Rollout *r);
PetscErrorCode rollout_genfuse_call(PPOModels *m, const PPOOptions *o, const GenRequest *req, int max_prompt,
                                    uint64_t seed, uint32_t iteration, Rollout *r, PackBuf *pb, GenPart *part,
                                    GenFuseTimes *tm);

/* ---- the held-out evaluation (src/ppo/eval.c) --------------------------------- */
/* Mean over sequences of the summed per-token log-ratio to the reference
 * (over the model's tokens). */
double rollout_kl(const Rollout *r);
/* An evaluation's results (NaN where they do not apply): gold (the mean
 * judge score: accuracy, pass@1 over all responses, with answers), pass@k
 * (k = -ppo_eval_samples), the mean reward, the KL to the reference. */
typedef struct {
  double gold, pass_k, reward, kl;
  double calls; /* episodes: the share of responses that called the environment (NaN: no episodes) */
} PPOEval;
/* Evaluates `policy` on the held-out set: generation on the policy's
 * placement (the same draws for every policy), reference and reward
 * inference on theirs, the rule and command rewards. With path, the
 * prompts, responses, rewards and answers are saved as group `group` of that
 * file (evals.h5, docs/formats.md). Collective on MPI_COMM_WORLD. */
PetscErrorCode ppo_evaluate(DModel *policy, PPOModels *m, const PPOOptions *o, const PPOEvalSet *e, uint64_t seed,
                            int max_prompt, const char *path, const char *group, PPOEval *ev);
/* The same between a line saying it started and one with its time (an
 * evaluation of many prompts can take minutes with nothing else printed);
 * what names the policy evaluated. */
PetscErrorCode ppo_evaluate_said(const RunCtx *run, const char *what, DModel *policy, PPOModels *m, const PPOOptions *o,
                                 PromptSource *ps, const CkptState *st, const char *path, const char *group,
                                 PPOEval *ev);
/* -mode eval: the actor's held-out evaluation, its summary in run.h5. */
PetscErrorCode ppo_eval_only(const RunCtx *run, const PPOOptions *o, const PlanNeeds *needs, PPOModels *m,
                             PromptSource *ps, const CkptState *st);

/* Training over the rollout: epochs x minibatches optimizer steps for the
 * actor (and the critic for PPO). Sums of the metrics go into stats. */
typedef struct {
  double actor_loss, critic_loss, clipfrac, vclipfrac, entropy, kl_loss, grad_actor, grad_critic;
  int    steps;
  double t_actor, t_critic;
} PPOTrainStats;
/* On the members of the model's training mesh (a trainer attached to the
 * actor or critic): every replica takes its share of each mini-batch, in
 * micro-batches (the plan's mbs per replica when > 0, else
 * -ppo_microbatches' size) run through the trainer's schedule on the
 * pipeline stages; the losses are summed over the mesh before the step. */
PetscErrorCode ppo_train_actor(Trainer *actor, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed,
                               int iteration, double kl_coef, PPOTrainStats *s);
PetscErrorCode ppo_train_critic(Trainer *critic, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed,
                                int iteration, PPOTrainStats *s);

/* The fused stage's instance from the plan, and the schedule file when
 * given (validated for the instance); collective on the world. */
PetscErrorCode ppo_fused_train_setup(const RunCtx *run, const PPOOptions *o, PPOFusedTrain *fz);
PetscErrorCode ppo_fused_train_destroy(PPOFusedTrain *fz);
/* After the first fused training stage: the forward times and the
 * schedule's predicted makespan per mini-batch against the sequential one,
 * printed and recorded (summaries fuse_f0, fuse_f1, fuse_predicted,
 * fuse_sequential, fuse_lower_bound, in seconds). Collective on the world
 * (the values come from the actor mesh's first rank). */
PetscErrorCode ppo_fused_train_report(const RunCtx *run, RunRecord *rec, PPOFusedTrain *fz);
/* One mini-batch of both models on this rank (a member of both training
 * meshes): gradients zeroed, the fused schedule's tasks of this rank run
 * (the first time without a schedule: the sequential order, timed, then the
 * search), the accumulated values summed over each trainer's ranks. Index 0
 * is the actor, 1 the critic. */
PetscErrorCode ppo_fused_train_pass(PPOFusedTrain *fz, Trainer *tr[2], const MicroSplit *s[2], const TrainWork *w[2]);
/* Both models' epochs x mini-batches with each mini-batch fused; the
 * metrics as ppo_train_actor and ppo_train_critic give them. */
PetscErrorCode ppo_train_fused(PPOFusedTrain *fz, Trainer *actor, Trainer *critic, const PPOOptions *o, Rollout *r,
                               PackBuf *pb, uint64_t seed, int iteration, double kl_coef, PPOTrainStats *s);

/* ---- one iteration (src/ppo/graph.c) ------------------------------------------- */
/* Stage times (longest over ranks) and the reallocation traffic of an
 * iteration. */
typedef struct {
  double gen, ref, rew, rules, critic, adv, actor, critic_train, sync_actor, sync_critic;
  double sync_actor_bytes, sync_critic_bytes;
  double stream_messages, stream_bytes, stream_send,
      stream_wait; /* fused: samples sent, their bytes, longest send and wait seconds */
  double migrate_at, migrate_pred, migrate_samples, migrate_bytes, migrate_s,
      migrate_m; /* migrate: R_t, its predicted stage
                  * seconds (auto), samples and bytes
                  * moved, longest migration, destinations */
} StageTimes;
/* What the generation node works with, handed to the hooks. */
typedef struct {
  DModel           *policy; /* the generating placement */
  const PPOOptions *o;
  const GenRequest *req;
  int               max_prompt;
  uint64_t          seed;
  uint32_t          draw;    /* the batch's index: keys its draws */
  int               version; /* the weights' version: iterations trained so far */
  GenPart          *part;
  Rollout          *r;       /* the batch generated */
} PPOGenArgs;
/* A variant's work inside the graph (asynchronous RL, src/ppo/async/); a
 * NULL hook does the synchronous run's. generate: the generation on the
 * generating mesh; local: after it, the batch's rows on each replica (when
 * the frozen models' calls run with the generation); share: on every rank,
 * the results into a->r; shared: on every rank after the share;
 * advantages: on every rank before the advantages. */
typedef struct {
  void          *ctx;
  PetscErrorCode (*generate)(void *ctx, PPOGenArgs *a);
  PetscErrorCode (*local)(void *ctx, PPOGenArgs *a);
  PetscErrorCode (*share)(void *ctx, PPOGenArgs *a);
  PetscErrorCode (*shared)(void *ctx, PPOGenArgs *a);
  PetscErrorCode (*advantages)(void *ctx, Rollout *r);
} PPOGraphHooks;
/* An iteration: batch `train` scored and trained on, batch `gen` generated
 * (the same rollout in a synchronous run; either may be NULL in an
 * asynchronous one), each with the index that keys its draws. late: gen's
 * share comes after the training (a generation on ranks of its own runs
 * beside it); prox: the proximal forward on `train` (the asynchronous
 * correction). */
typedef struct {
  Rollout             *train, *gen;
  int64_t              train_draw, gen_draw;
  PetscBool            late, prox;
  const PPOGraphHooks *hooks;
} PPOIterSpec;
#define PPO_GRAPH_MAX 16 /* nodes of an iteration's graph, at most */
/* One iteration as a dataflow graph: weight syncs, generation, dynamic
 * sampling, the inference calls, rewards, advantages, training. Collective
 * on MPI_COMM_WORLD. */
PetscErrorCode ppo_iteration(PPOModels *m, const PPOOptions *o, PromptSource *ps, const PPOIterSpec *sp, PackBuf *pb,
                             const CkptState *st, PPOTrainStats *ts, StageTimes *tm);
/* The rollout's inference calls outside an iteration (held-out evaluation). */
PetscErrorCode ppo_ref_call(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro);
/* The same for the reward model's scores (nothing without one). */
PetscErrorCode ppo_reward_call(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro);

/* ---- set-up (src/ppo/setup.c) --------------------------------------------------- */
/* What the run reads before its first iteration: the models' sources and
 * configurations, the prompts and the plan's needs. */
typedef struct {
  const char *file, *role;
  PetscBool   trunk_only;
} ModelSource;
typedef struct {
  ModelSource  src[4]; /* actor, critic, reference, reward */
  ModelConfig  cfg[4];
  PromptSource ps;
  PlanNeeds    needs;
} PPOSetup;
/* Everything that can be checked before a model is read: options, prompts,
 * configurations, the task and the plan (printed when print); with policy
 * (-mode pipeline, before its checkpoints exist) every model has that shape. */
PetscErrorCode ppo_prepare(const RunCtx *run, PPOOptions *o, const ModelConfig *policy, PetscBool print, PPOSetup *s);
/* The models on their meshes, read (a restart: its state into st too). */
PetscErrorCode ppo_load(const RunCtx *run, const Backend *be, const PPOOptions *o, const PPOSetup *s, PPOModels *m,
                        CkptState *st);
PetscErrorCode ppo_models_destroy(PPOModels *m);
/* -dry_run's line: the models and the KV cache. */
PetscErrorCode ppo_dry_run(const RunCtx *run, const PPOOptions *o, const PPOSetup *s);

/* ---- records (src/ppo/record.c) -------------------------------------------------- */
typedef struct {
  PPOEval initial, trained; /* the held-out evaluation of the reference (the initial policy) and of the trained actor */
} PPOSummary;
/* One evaluation's line. */
PetscErrorCode ppo_print_eval(const RunCtx *run, const char *what, const PPOEval *ev, const PPOOptions *o);
/* An iteration's metrics and times in run.h5 and its progress line (more:
 * a variant's part of the line, clock: the elapsed time and ETA). */
typedef struct {
  int            it, n_it;     /* the iteration (from 1) and the run's count */
  double         kl, kl_coef, iter_s;
  const PPOEval *ev;           /* the held-out evaluation after it (NaN: none) */
  const char    *more, *clock;
} PPOIterLine;
PetscErrorCode ppo_record_iteration(RunRecord *rec, const RunCtx *run, const PPOOptions *o, const PPOModels *m,
                                    const Rollout *r, const PPOTrainStats *s, const StageTimes *tm,
                                    const PPOIterLine *l);
/* The held-out evaluation's pass@k, reward and KL (NaN but at the iterations it ran). */
PetscErrorCode ppo_record_eval(RunRecord *rec, const PPOOptions *o, const PPOEvalSet *e, const PPOEval *ev);
/* The run's summary in run.h5 and its closing lines. */
PetscErrorCode ppo_record_summary(RunRecord *rec, const PPOOptions *o, const PPOSummary *sum, int64_t iterations);
PetscErrorCode ppo_print_summary(const RunCtx *run, const PPOOptions *o, const PromptSource *ps, const PPOSummary *sum,
                                 int64_t iterations, PetscBool from_sft);

/* ---- where the batches come from (src/ppo/loop.c; asynchronous: src/ppo/async/) -- */
/* What an iteration works on, for the batch makers below. */
typedef struct {
  const RunCtx     *run;
  const PPOOptions *o;
  PPOModels        *m;
  PromptSource     *ps;
  PackBuf          *pb;
  CkptState        *st;
} PPOLoopEnv;
/* The loop's one interface to how batches are made: the synchronous run
 * generates the batch it trains on in the same iteration; an asynchronous
 * one trains on a batch generated K iterations before (src/ppo/async/).
 * start: before the first iteration; iterate: one iteration's graph, *r the
 * batch trained on; record: the variant's metrics and progress-line part;
 * carry: what checkpoints written now hold beyond the models (fn NULL:
 * nothing). */
typedef struct PPOBatches PPOBatches;
typedef struct {
  PetscErrorCode (*start)(PPOBatches *b, PPOLoopEnv *e);
  PetscErrorCode (*iterate)(PPOBatches *b, PPOLoopEnv *e, Rollout **r, PPOTrainStats *ts, StageTimes *tm);
  PetscErrorCode (*record)(PPOBatches *b, RunRecord *rec, const Rollout *r, int64_t it, const StageTimes *tm,
                           const PPOTrainStats *ts, double iter_s, char *more, size_t len);
  void (*carry)(PPOBatches *b, int64_t from, CkptCarry *c);
  PetscErrorCode (*destroy)(PPOBatches *b);
} PPOBatchOps;
struct PPOBatches {
  const PPOBatchOps *ops;
  void              *data;
};

#endif
