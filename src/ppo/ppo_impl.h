/* ppo_impl.h: what the PPO module's files share (src/ppo/ppo*.c,
 * rollout*.c), private to it: the four models, one iteration's rollout and
 * the row packing between the rollout's aligned [B,T] arrays and a model's
 * forward rows. The options and entry points are in inc/ppo.h. */
#ifndef RLFUSE_PPO_IMPL_H
#define RLFUSE_PPO_IMPL_H

#include "ppo.h"
#include "exec.h"
#include "train.h"
#include "actorcritic.h"
#include "genfuse.h"

/* The fused training stage's schedule (-fuse_train 1, src/ppo/ppo_fused_train.c):
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

/* The rewards besides the reward model (src/ppo/rewards.c). */
typedef enum { PPO_GOLD_NONE = 0, PPO_GOLD_SORT = 1, PPO_GOLD_ANSWER = 2 } PPOGold; /* what gold means: nothing, the sort judge's score, a right answer */
typedef struct {
  PPOGold        gold;
  PetscBool      have_tt;
  TokenTable     tt;          /* the tokens' text */
  RewardCommand *cmd;         /* -reward_command, on world rank 0 */
  char          *text, *ptext; /* decoding buffers */
  size_t         cap, pcap;
} PPORewards;
/* The reward parts recorded per sample: the rule functions (RewardFn order), then the command. */
#define PPO_REWARD_PARTS (REWARD_NFN + 1)

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
  const CkptSource *ref_source;       /* the reference's input file, recorded in checkpoints instead of its weights (NULL: they are written) */
  size_t      bucket;                 /* reallocation and gradient bucket, bytes */
  PPOFusedTrain     fuse;                   /* the fused training stage (fuse.on: -fuse_train 1) */
  RolloutGenFuse    genfuse;                /* the fused rollouts' state (-fuse_gen_inf) */
  PPORewards        rew;                    /* rule rewards, the reward command, the judge */
} PPOModels;

static inline DModel *ppo_gen_model(PPOModels *m) { return m->gen_copy ? &m->actor_gen : &m->actor; }
static inline DModel *ppo_critic_inf_model(PPOModels *m) { return m->critic_copy ? &m->critic_inf : &m->critic; }

/* One iteration's experience. Per-position arrays are [B,T], T = the longest
 * prompt + max_new_tokens, aligned so index t is the token at position t
 * (rollouts.h5 stores them exactly so). */
typedef struct {
  int      B, T;
  GenBatch gen;                         /* tokens, lengths, eos, old logprobs, masks */
  float   *ref, *values, *rewards, *adv, *ret; /* [B,T] */
  float   *score, *final, *gold;        /* [B]: RM score, the score entering the rewards, judge */
  float   *rule, *parts;                /* [B]: rule and command rewards, weighted and summed; [B, PPO_REWARD_PARTS] each part unweighted (NaN: unused) */
  int     *start, *len;                 /* [B]: response start and length */
  /* the rows' prompts (set by the caller, not owned): reference answers,
   * metadata, the prompt's index in its source; NULL when there are none */
  const char **answer, **meta;
  int64_t     *pidx;
  int          Bcap;                    /* rows allocated (-ppo_dynamic_sampling: candidates generated; B after the selection) */
  int          kept_groups, filled_groups; /* -ppo_dynamic_sampling: candidate groups whose rewards differ; groups of equal rewards used to fill */
  int          dyn_rounds;                 /* -ppo_dynamic_sampling: generation rounds of the iteration */
  /* -async_staleness > 0 (src/ppo/async.c; NULL otherwise): the batch's
   * index (the iteration that trains on it, which keys its draws), the
   * weights version (iterations trained) that generated each row, the
   * proximal policy's log-probabilities (the actor's before this
   * iteration's update) and the behaviour importance weights */
  int64_t      batch;
  int         *version;                    /* [B] */
  float       *prox, *isw;                 /* [B,T] */
  PetscBool    off_policy;                 /* prox and isw hold this iteration's values */
  PetscBool    frozen_done;                /* ref and score computed with the generation (ppo_iteration_async) */
  /* -async_partial (NULL otherwise): the weights version of each response
   * token (a sample may span several) and each row's prompt position in
   * the stream (its answer on a restart) */
  int         *tver;                       /* [B,T] */
  int64_t     *ppos;                       /* [B] */
} Rollout;

/* ---- the algorithms as a table (src/ppo/algos.c) --------------------------- */
/* An algorithm's advantage estimator: from the final scores (r->final), the
 * log-probabilities, the reference's and (with a critic) the values, it
 * writes the per-token rewards, the advantages and the returns (0 where it
 * has none). kl_reward: the KL's coefficient in the rewards (0 when the KL
 * is a loss term). */
typedef PetscErrorCode (*PPOAdvantageFn)(Rollout *r, const PPOOptions *o, double kl_reward);
/* One row per algorithm: what every other file of src/ppo asks instead of
 * comparing -algo with a name. */
typedef struct {
  const char    *name;       /* as -algo takes it; the mode in run.h5 and the progress lines */
  const char    *title;      /* as the pipeline's lines write it */
  const char    *help;       /* its part of -algo's help */
  PetscBool      has_critic; /* a critic is built, trained and checkpointed (its values enter the advantages) */
  PetscBool      groups;     /* -grpo_group responses per prompt: -rollout_batch divides into groups of at least 2, -ppo_dynamic_sampling selects among them */
  PetscBool      kl_in_loss; /* -ppo_kl_in auto puts the KL in the loss (else a per-token penalty in the rewards) */
  RLLossAgg      loss_agg;   /* -ppo_loss_agg's default */
  PPOAdvantageFn advantages;
} PPOAlgoSpec;
extern const PPOAlgoSpec ppo_algos[];
extern const int         ppo_nalgos;
static inline const PPOAlgoSpec *ppo_algo(const PPOOptions *o) { return &ppo_algos[o->algo]; }
/* Samples per prompt: -grpo_group for an algorithm with groups, else 1. */
static inline int ppo_group_size(const PPOOptions *o) { return ppo_algo(o)->groups ? (int)o->group : 1; }
/* Whether the KL to the reference is a loss term (else a reward penalty). */
static inline PetscBool ppo_kl_as_loss(const PPOOptions *o) { return o->kl_in == KL_IN_LOSS || (o->kl_in == KL_IN_AUTO && ppo_algo(o)->kl_in_loss) ? PETSC_TRUE : PETSC_FALSE; }
/* -algo's choices (the rows' names, then NULL: cap at least ppo_nalgos + 1)
 * and its help, "name (help), ... or name (help)". */
PetscErrorCode ppo_algo_choices(const char *names[], int cap, char *help, size_t len);
/* The names (titles) of the rows that pick() takes, joined by ", ", for messages. */
PetscErrorCode ppo_algo_join(PetscBool (*pick)(const PPOAlgoSpec *), PetscBool titles, char *buf, size_t len);

/* Scratch for packing up to nmax sequences into forward rows. */
typedef struct {
  int    nmax, T;
  int   *tok, *target, *mask_off, *mask_ids;
  size_t mask_cap;
  float *lp, *ent, *val;                /* forward-row layout [nmax*T] */
  float *al, *dal, *w;                  /* one aligned row [T] */
} PackBuf;

PetscErrorCode rollout_create(int B, int T, PetscBool masked, Rollout *r);
PetscErrorCode rollout_destroy(Rollout *r);
PetscErrorCode packbuf_create(int nmax, int T, PackBuf *pb);
PetscErrorCode packbuf_destroy(PackBuf *pb);

/* Forward of sequences idx[0..nb) of r through an LM-head model: pb->lp and
 * pb->ent get, at forward row (i, s), the log-probability and entropy of the
 * token at position s+1 under the generation's distribution (0 outside
 * responses). Returns the forward row length in *Tf. */
PetscErrorCode rollout_forward_logprobs(Model *m, const Rollout *r, const int *idx, int nb, float inv_temp, PackBuf *pb, int *Tf);
/* Forward through a scalar-head model; pb->val gets the values by forward
 * row (the value of the state before position s+1 is at row s). With
 * full_length the rows cover whole sequences (for the score at the last
 * token), else up to the last response token's predecessor. */
PetscErrorCode rollout_forward_values(Model *m, const Rollout *r, const int *idx, int nb, PetscBool full_length, PackBuf *pb, int *Tf);

/* The inference calls over rows [b0, b1) (a replica's share), in
 * micro-batches of nmicro sequences through the model's pipeline stages:
 * reference log-probabilities, reward-model scores (and the final scores),
 * critic values. Only the last stage writes the outputs. */
PetscErrorCode rollout_ref_inference(Model *ref, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1, int nmicro);
PetscErrorCode rollout_reward_inference(Model *reward, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1, int nmicro);
PetscErrorCode rollout_critic_inference(Model *critic, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1, int nmicro);
/* Asynchronous runs: the actor's log-probabilities of the rows before
 * this iteration's update (the proximal policy) into r->prox. */
PetscErrorCode rollout_prox_inference(Model *actor, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1, int nmicro);
/* One inference call over the sequences idx[0..nb) of r in one forward
 * (nb <= pb->nmax): reference log-probabilities, reward-model scores (and
 * final scores) or critic values, as the calls above compute them. */
typedef enum { ROLLOUT_REF = 0, ROLLOUT_SCORE = 1, ROLLOUT_VALUES = 2 } RolloutInfer;
PetscErrorCode rollout_infer_rows(Model *m, RolloutInfer kind, Rollout *r, const PPOOptions *o, PackBuf *pb, const int *idx, int nb);
/* The rewards besides the reward model (src/ppo/rewards.c). Setup: the
 * token table from the first of tables[] holding /tokenizer (else the
 * built-in arithmetic task's characters), the command started on world
 * rank 0; builtin: the prompts are the built-in task's; answers: the rows
 * have reference answers (gold is then whether the answer is right).
 * Collective on MPI_COMM_WORLD. */
PetscErrorCode ppo_rewards_setup(const RunCtx *run, const PPOOptions *o, const char *const *tables, int ntables, PetscBool builtin, PetscBool answers, PPORewards *rw);
/* Prints rows [0, n) of r on world rank 0 (-ppo_eval_show): prompt and
 * response as text through the token table, or as token ids without one,
 * the final reward and the reference answer; what names the evaluation. */
PetscErrorCode ppo_show_samples(PPORewards *rw, const Rollout *r, int n, const char *what);
PetscErrorCode ppo_rewards_destroy(PPORewards *rw);
/* Rule rewards and the judge of every row into r->rule, r->parts and
 * r->gold, the judge being gold's (the training prompts' rw->gold, or the
 * held-out set's); on this rank, no communication. */
PetscErrorCode rollout_rule_rewards(PPORewards *rw, const PPOOptions *o, Rollout *r, PPOGold gold);
/* Then the command's rewards added (none without -reward_command).
 * Collective on MPI_COMM_WORLD: the values come from world rank 0, and its
 * failure is raised on every rank. */
PetscErrorCode rollout_command_rewards(PPORewards *rw, const PPOOptions *o, Rollout *r, int iteration);
/* r->final from the reward model's score (when there is one), the rule
 * rewards and the overlong shaping. */
void rollout_final_scores(Rollout *r, const PPOOptions *o);
/* DAPO's dynamic sampling (src/ppo/dynamic.c): the groups kept over an
 * iteration's generation rounds. dynamic_begin makes the store for a batch
 * of B rows; dynamic_take looks at one round's candidate rows (groups of k
 * consecutive rows, rewards computed) and keeps, in their order, those
 * whose final scores are not all equal until the store holds B/k groups,
 * filling up with the round's first equal ones when last; dynamic_finish
 * moves the store to rows 0..B-1 of r (r->B becomes B, with the counts) and
 * frees it. Every rank does the same on its copy of the rollout. */
typedef struct {
  Rollout      r;                     /* the kept groups, in order (with answer, meta, pidx arrays of its own) */
  int          k, groups, nid;        /* group size, groups kept, allowed-set ids used */
  int          kept, filled, rounds;  /* candidate groups whose rewards differ, groups that filled, rounds */
  long long    new_tokens;            /* tokens generated over the rounds */
} DynamicStore;
PetscErrorCode dynamic_begin(const Rollout *r, int B, DynamicStore *ds);
PetscErrorCode dynamic_take(DynamicStore *ds, Rollout *cand, int G, int k, PetscBool last);
PetscErrorCode dynamic_finish(DynamicStore *ds, Rollout *r, int B);
/* The final scores, then the algorithm's advantages (its row's estimator) with
 * the KL in the rewards unless it is a loss term. */
PetscErrorCode rollout_advantages(Rollout *r, const PPOOptions *o, double kl_coef);
/* Appends group /iter_<k> to <output_dir>/rollouts.h5 (created at iteration 0 or on first use). */
PetscErrorCode rollout_dump(MPI_Comm comm, const char *path, const Rollout *r, int iteration, const PPOOptions *o, double kl_coef);

/* Generation as a call (src/ppo/rollout_gen.c): a replica's rows of the batch
 * (its own GenBatch unless the replica holds every row). */
typedef struct {
  GenBatch  b;
  int       b0, b1;
  PetscBool own;
  int      *owner; /* -fuse_gen_inf migrate: b holds all rows; owner[row] the world rank that finished it here, else -1 (NULL otherwise) */
} GenPart;
/* Members of policy's mesh decode their replica's rows of req into part. */
PetscErrorCode rollout_generate_part(DModel *policy, const GenConfig *gen, int max_prompt, uint64_t seed, uint32_t iteration, const GenRequest *req, Rollout *r, GenPart *part);
/* The same, with a callback for each finished sample (index: the replica's
 * request index; its global row is part->b0 + index). */
PetscErrorCode rollout_generate_part_cb(DModel *policy, const GenConfig *gen, int max_prompt, uint64_t seed, uint32_t iteration, const GenRequest *req, Rollout *r, GenPart *part, GenFinishFn fn, void *ctx);
/* Every rank gets every replica's rows (tokens, log-probabilities, lengths,
 * EOS, allowed sets; replica 0's step timeline), then the response starts,
 * lengths (the judge runs with the rule rewards, rollout_rule_rewards). Collective on MPI_COMM_WORLD. */
PetscErrorCode rollout_share_gen(const Mesh *m, GenPart *part, Rollout *r);
/* The same for a batch alone (its n rows; the rollout's start and len are
 * not set). */
PetscErrorCode rollout_share_genbatch(const Mesh *m, GenPart *part, GenBatch *g);
/* On a replica's head, before the share: its own rows of part in r (tokens,
 * log-probabilities, lengths, EOS; not the allowed sets) with their
 * response starts and lengths, so that an inference call on the same rows
 * can run at once. */
void rollout_part_local(const GenPart *part, Rollout *r);
PetscErrorCode rollout_finish_gen(Rollout *r);
/* The same after -fuse_gen_inf migrate: each row from the head that
 * finished it (part->owner). Collective on MPI_COMM_WORLD. */
PetscErrorCode rollout_share_gen_owned(const Mesh *m, GenPart *part, Rollout *r);

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
  double rt, rt_pred;              /* migrate: R_t used; auto: the simulation's predicted stage seconds (0: R_t given, -1: auto's first iteration) */
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
PetscErrorCode rollout_genfuse_call(PPOModels *m, const PPOOptions *o, const GenRequest *req, int max_prompt, uint64_t seed, uint32_t iteration, Rollout *r, PackBuf *pb, GenPart *part, GenFuseTimes *tm);

#define PPO_ANSWER_LEN 32 /* a built-in task's answer text, NUL included */

/* ---- prompts and the held-out set (src/ppo/prompts.c) ------------------------ */
/* The held-out set: n prompts asked k times each (request i*k+j), from
 * -ppo_eval_file or the built-in task's held-out split. */
typedef struct {
  int          n, k, room;
  PetscBool    from_file, answers;
  PPOGold      gold;
  TokenData    file;
  int         *buf;    /* [n * room] */
  char        *abuf;   /* the built-in task's answers */
  GenRequest  *req;    /* [n*k] */
  const char **answer, **meta;
  int64_t     *pidx;
} PPOEvalSet;
/* The training prompts of each iteration and the held-out set. */
typedef struct {
  DemoSource   src;
  int          max_prompt, room; /* max_prompt: of training and held-out prompts (held-out only when eval_alone) */
  PetscBool    answers;          /* the training prompts have reference answers */
  PetscBool    eval_alone;       /* -mode eval of -ppo_eval_file: the training prompts are not used */
  int         *buf;              /* [B * room] */
  GenRequest  *req;              /* [B] */
  const char **answer, **meta;   /* [B]: each row's (NULL: none) */
  int64_t     *pidx;             /* [B]: each row's prompt index in its source */
  char        *abuf;             /* the built-in task's answers, [rounds * B] slots */
  PPOEvalSet   eval;
} PromptSource;
/* Reads the prompt file (or sets up the built-in task's prompts) and the
 * held-out set; refuses -reward_fn terms that need answers the prompts
 * lack; checks the rollout fits memory. */
PetscErrorCode prompts_setup(const RunCtx *run, const PPOOptions *o, PromptSource *ps);
PetscErrorCode prompts_destroy(PromptSource *ps);
/* The requests of an iteration's generation round (0 without dynamic
 * sampling, whose rounds draw further prompts): prompts data_pos,
 * data_pos+1, ... (an algorithm with groups: each repeated -grpo_group times);
 * sample ids are round * rows + row, unique within the iteration; the
 * built-in task's answers of each round have their own slots, so rows kept
 * from an earlier round keep theirs. *used: prompts consumed. */
PetscErrorCode prompts_next(PromptSource *ps, const PPOOptions *o, int64_t data_pos, int round, int *used);
/* One prompt, the one at stream position pos (partial rollouts' pool,
 * src/ppo/async_pool.c): its tokens into row (room ps->room) and *len; the
 * built-in task's answer written to abuf (PPO_ANSWER_LEN bytes), *answer
 * pointing there or into the prompt file; *meta, *pidx as prompts_next's. */
PetscErrorCode prompts_at(PromptSource *ps, const PPOOptions *o, int64_t pos, int *row, int *len, char *abuf, const char **answer, const char **meta, int64_t *pidx);

/* ---- the held-out evaluation (src/ppo/eval.c) --------------------------------- */
/* Mean over sequences of the summed per-token log-ratio to the reference. */
double rollout_kl(const Rollout *r);
/* An evaluation's results (NaN where they do not apply): gold (the mean
 * judge score: accuracy, pass@1 over all responses, with answers), pass@k
 * (k = -ppo_eval_samples), the mean reward, the KL to the reference. */
typedef struct {
  double gold, pass_k, reward, kl;
} PPOEval;
/* Evaluates `policy` on the held-out set: generation on the policy's
 * placement (the same draws for every policy), reference and reward
 * inference on theirs, the rule and command rewards. With path, the
 * prompts, responses, rewards and answers are saved as group `group` of that
 * file (evals.h5, docs/formats.md). Collective on MPI_COMM_WORLD. */
PetscErrorCode ppo_evaluate(DModel *policy, PPOModels *m, const PPOOptions *o, const PPOEvalSet *e, uint64_t seed, int max_prompt, const char *path, const char *group, PPOEval *ev);

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
PetscErrorCode ppo_train_actor(Trainer *actor, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, double kl_coef, PPOTrainStats *s);
PetscErrorCode ppo_train_critic(Trainer *critic, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, PPOTrainStats *s);

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
PetscErrorCode ppo_train_fused(PPOFusedTrain *fz, Trainer *actor, Trainer *critic, const PPOOptions *o, Rollout *r, PackBuf *pb, uint64_t seed, int iteration, double kl_coef, PPOTrainStats *s);

/* One iteration as a dataflow graph (src/ppo/ppo_graph.c): weight sync,
 * generation, the inference calls, advantages, training. Collective on
 * MPI_COMM_WORLD; stage times (longest over ranks) and the reallocation
 * traffic come back in it. */
typedef struct {
  double gen, ref, rew, rules, critic, adv, actor, critic_train, sync_actor, sync_critic;
  double sync_actor_bytes, sync_critic_bytes;
  double stream_messages, stream_bytes, stream_send, stream_wait; /* fused: samples sent, their bytes, longest send and wait seconds */
  double migrate_at, migrate_pred, migrate_samples, migrate_bytes, migrate_s, migrate_m; /* migrate: R_t, its predicted stage seconds (auto), samples and bytes moved, longest migration, destinations */
} StageTimes;
PetscErrorCode ppo_iteration(PPOModels *m, const PPOOptions *o, PromptSource *ps, Rollout *r, PackBuf *pb, const CkptState *st, PPOTrainStats *ts, StageTimes *tm);
/* The rollout's inference calls outside an iteration (held-out evaluation). */
PetscErrorCode ppo_ref_call(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro);
/* The same for the reward model's scores (nothing without one). */
PetscErrorCode ppo_reward_call(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro);

/* ---- asynchronous RL (src/ppo/async.c, docs/async.md) -------------------------- */
/* -async_staleness K > 0: batch b (the samples iteration b trains on) is
 * generated with the weights of iteration max(b - K, first), during
 * iteration b - K, beside that iteration's training when the generation
 * mesh is apart. The queue's K + 1 slots hold batch b in slot b mod (K+1),
 * each with its own copy of its prompts' answers, metadata and indices. */
#define PPO_ASYNC_MAX 64 /* the largest -async_staleness */
/* -async_partial S (src/ppo/async_pool.c): the samples in flight, whole
 * groups in the order their prompts came (oldest first). Each generation
 * call draws at most S new tokens for every sample not yet ended, with the
 * weights of its iteration; the batch it makes is the oldest groups whose
 * samples have all ended, and if fewer than a batch's have, the oldest
 * unfinished ones run to their end in the same call. Every rank holds the
 * pool (the generation's results are shared), and what a sample draws is
 * keyed by its number in the run (prompt position x group + member), so the
 * batches do not depend on the layout or the timing. */
typedef struct {
  int          S, G, T, cap, n;          /* tokens per call, group size, positions, rows allocated, rows held */
  int         *tokens, *tver;            /* [cap,T]: prompt and response so far; each response token's version */
  float       *logprobs;                 /* [cap,T]: behaviour log-probabilities */
  int         *prompt_len, *len, *eos, *done; /* [cap] */
  int64_t     *ppos, *pidx;              /* [cap]: prompt position in the stream; index in its source */
  const char **answer, **meta;           /* [cap]: answer (the built-in task's in abuf), metadata */
  char        *abuf;                     /* [cap * PPO_ANSWER_LEN] */
  /* allowed sets (gen_masked: top-k, top-p or min_new_tokens cut), kept
   * with the row across iterations: per position its count (0: every id;
   * NULL when not masked), per row its ids in position order */
  int         *mcnt;                     /* [cap,T] */
  int        **mids;                     /* [cap] */
  size_t      *mlen, *mroom;             /* [cap]: ids held, room */
  /* one call: its requests (the rows not ended), their results */
  GenRequest  *req;
  int         *row, nreq;                /* [cap]: the pool row of each request */
  GenBatch     res;                      /* n = nreq */
  int64_t      made;                     /* new tokens of the last call */
  PetscBool    taken;                    /* this rank took the batch with the generation (async_pool_take_early) */
} AsyncPool;
typedef struct {
  int          K, n;           /* staleness, slots (K + 1) */
  Rollout     *slot;           /* [n] */
  PetscBool   *ready;          /* [n]: the slot holds a generated batch */
  int64_t     *data_pos;       /* [n]: where the slot's prompts start (prompts_next) */
  const char **answer, **meta; /* [n * Bcap] */
  int64_t     *pidx;           /* [n * Bcap] */
  char        *abuf;           /* [n * Bcap * PPO_ANSWER_LEN]: the built-in task's answers */
  RLISStats    is;             /* this iteration's behaviour weights */
  PetscBool    partial;        /* -async_partial: batches come from the pool */
  AsyncPool    pool;
} AsyncQueue;
PetscErrorCode async_create(const PPOOptions *o, int B, int T, PetscBool masked, AsyncQueue *q);
PetscErrorCode async_destroy(AsyncQueue *q);
static inline Rollout *async_slot(AsyncQueue *q, int64_t batch) { return &q->slot[batch % q->n]; }
/* After prompts_next for batch b at data position pos: the rows' answers,
 * metadata and indices copied into b's slot (rows[] point there). */
PetscErrorCode async_keep_prompts(AsyncQueue *q, const PromptSource *ps, int64_t batch, int64_t pos);
/* The behaviour weights of the slot's batch from its prox and behaviour
 * log-probabilities (-async_correction), statistics into q->is. */
PetscErrorCode async_weights(AsyncQueue *q, const PPOOptions *o, Rollout *r);
/* The iteration's staleness metrics in run.h5 (docs/async.md) and the
 * progress line's part. */
PetscErrorCode async_record(RunRecord *rec, const AsyncQueue *q, const Rollout *r, int64_t iteration, double gen_s, double train_s, double iter_s, char *line, size_t len);
/* Checkpoints written from now on carry the queue's generated batches from
 * batch `from` on (q NULL: no more). */
PetscErrorCode async_checkpoint_carry(AsyncQueue *q, int64_t from);
/* On -restart: refuses a file written with another -async_staleness > 0 (one
 * without /async, a synchronous run's, may go on with any); with q, the
 * batches [from, from + K) the file holds go into their slots, ready, with
 * their prompts' answers (*found: how many). Collective on comm. */
PetscErrorCode async_restore(MPI_Comm comm, const char *path, const PPOOptions *o, PromptSource *ps, AsyncQueue *q, int64_t from, int *found);
/* -async_partial_extra, or its default (-1: a batch's prompts); the pool's
 * rows: the batch's and the extra prompts' samples. */
PetscInt ppo_partial_extra(const PPOOptions *o);
int      ppo_partial_rows(const PPOOptions *o);
/* The built-in task's answer a (in buf, nbuf bytes: its owner's, which the
 * next prompts overwrite) copied to dst, which is returned; an answer
 * elsewhere (a prompt file's) returned as it is. */
const char *async_keep_answer(const char *a, const char *buf, size_t nbuf, char *dst);
/* Partial rollouts (src/ppo/async_pool.c): the pool of rollout_batch +
 * -async_partial_extra groups' rows (async_create makes it). */
PetscErrorCode async_pool_create(const PPOOptions *o, int T, AsyncPool *p);
PetscErrorCode async_pool_destroy(AsyncPool *p);
/* Partial rollouts (src/ppo/async_pool.c). Before batch b's generation,
 * on every rank: whole groups of new prompts from *data_pos (advanced) until
 * the pool is full, and slot b marked as b's. */
PetscErrorCode async_pool_admit(AsyncQueue *q, PromptSource *ps, const PPOOptions *o, int64_t batch, PetscInt *data_pos);
/* On the members of the generating mesh: the call's draws (keyed by the
 * batch index) for the rows not ended, then the oldest unfinished groups to
 * their end if fewer than a batch's groups have ended. */
PetscErrorCode async_pool_generate(AsyncPool *p, DModel *policy, const PPOOptions *o, int max_prompt, uint64_t seed, uint32_t key, GenPart *part);
/* On every rank after it: the results shared and merged into the pool
 * (version: the weights' iterations), and the batch taken out into its slot. */
PetscErrorCode async_pool_share(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version, Rollout *slot);
/* After a restart read the rows' prompt positions: the answers, metadata
 * and source indices of slot r's rows (r NULL: the pool's) drawn again. */
PetscErrorCode async_pool_prompts(AsyncQueue *q, PromptSource *ps, const PPOOptions *o, Rollout *r);
/* On the members of a generating mesh of one rank a replica, right after
 * async_pool_generate: every replica's results gathered, merged and the
 * batch taken into its slot there (so that the frozen models' calls on it
 * run with the generation); async_pool_share then only shares them with the
 * other ranks. */
/* The allowed sets of the pool's n rows (masked pools only): the ids in
 * row order (allocated, *total of them), and back into the rows from the
 * counts (mcnt, set before) and those ids, checking that they agree. */
PetscErrorCode async_pool_masks_pack(const AsyncPool *p, int **ids, size_t *total);
PetscErrorCode async_pool_masks_unpack(AsyncPool *p, const int *ids, size_t total);
PetscErrorCode async_pool_take_early(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version, Rollout *slot);
/* One asynchronous iteration (src/ppo/ppo_graph.c): with cur, the
 * inference calls, the proximal log-probabilities, the advantages and
 * training on batch cur->batch; with next, the generation of batch
 * next->batch with the weights as they are at the start (on the generation
 * mesh, beside the training when apart). Either may be NULL. */
PetscErrorCode ppo_iteration_async(PPOModels *m, const PPOOptions *o, PromptSource *ps, AsyncQueue *q, Rollout *cur, Rollout *next, PackBuf *pb, const CkptState *st, PPOTrainStats *ts, StageTimes *tm);

#endif
