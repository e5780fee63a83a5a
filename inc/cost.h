/* cost: what a model call costs under a layout, in seconds and bytes, and
 * the plan search built on it (docs/planning.md).
 *
 * Three layers, each replaceable under the one above:
 *  - primitives (CostPrims): the time of one part of a model (embedding, one
 *    transformer block, head) in one phase at a tensor-parallel size, the time
 *    of one optimizer step, and the time of a collective. They come from a
 *    measured profile (-mode profile, src/profile) or from a hardware
 *    description deck (input/hardware/NAME.deck, analytic FLOPs and bytes).
 *  - the cost model (src/cost): a call under a layout (micro-batches,
 *    pipeline bubbles, tp and dp communication, generation over a
 *    response-length distribution, reallocation, fusion, memory per rank).
 *  - the simulator and the search (src/cost, src/search): iterations of the
 *    PPO or GRPO graph on a plan; simulated annealing over plans.
 *
 * One unit throughout: seconds for time, bytes for memory and messages. */
#ifndef RLFUSE_COST_H
#define RLFUSE_COST_H

#include "plan.h"

/* A model's shape, enough to count FLOPs, bytes and memory. GPT-2: learned
 * positions, LayerNorm, a 4x GELU MLP (n_ffn = 4 n_embd), n_kv_head =
 * n_head, tied head. LLaMA-shaped (gated = true): rotary positions, RMSNorm,
 * a gated MLP of three n_embd x n_ffn matrices, grouped-query attention
 * (n_kv_head <= n_head), untied head. A critic or reward model replaces the
 * vocabulary head by a scalar head (value_head = true). */
typedef struct {
  int       n_layer, n_embd, n_head, n_kv_head, n_ffn, vocab_size, n_positions;
  PetscBool gated;      /* LLaMA-shaped */
  PetscBool value_head; /* scalar head (critic, reward) instead of the vocabulary head */
  int       head_dim;   /* width of an attention head (0: n_embd / n_head; Qwen3 sets its own) */
} CostShape;
/* The head width, and the query and key/value widths (n_head and n_kv_head heads). */
static inline int    cost_head_dim(const CostShape *m) { return m->head_dim > 0 ? m->head_dim : m->n_embd / m->n_head; }
static inline double cost_q_width(const CostShape *m) { return (double)m->n_head * cost_head_dim(m); }
static inline double cost_kv_width(const CostShape *m) { return (double)m->n_kv_head * cost_head_dim(m); }

typedef enum { COST_PART_EMBED = 0, COST_PART_BLOCK, COST_PART_HEAD, COST_NPART } CostPart;
/* fwd: a training or inference forward over rows x len tokens with
 * activations kept; bwd: its backward; prefill: the generation engine's
 * forward of rows prompts of len tokens filling the KV cache; decode: one
 * decode step of rows sequences whose context is len tokens. */
typedef enum { COST_FWD = 0, COST_BWD, COST_PREFILL, COST_DECODE, COST_NPHASE } CostPhase;
typedef enum { COST_ALLREDUCE = 0, COST_ALLGATHER, COST_BCAST, COST_P2P, COST_NCOLL } CostColl;

extern const char *const cost_part_names[];  /* "embed", "block", "head" */
extern const char *const cost_phase_names[]; /* "fwd", "bwd", "prefill", "decode" */
extern const char *const cost_coll_names[];  /* "allreduce", "allgather", "bcast", "p2p" */

/* The primitive costs of one machine. Every function returns seconds and
 * never fails: outside a measured grid it extrapolates (documented by the
 * implementation). */
typedef struct {
  char   source[PETSC_MAX_PATH_LEN + 32]; /* "profile out/p.h5", "hardware input/hardware/h100_sxm.deck" */
  void  *ctx;
  int    ranks_per_node;                  /* communication inside a node is cheaper */
  double mem_per_rank;                    /* bytes one rank (one device) may use */
  double bytes_per_param;                 /* 4 for fp32 weights, 2 for bf16 (master weights and moments stay fp32) */
  double
      host_bw; /* bytes/s between host and device memory of one rank (offload); 0: not known, offload costs nothing */
  /* Weight syncs (reallocation) through host memory over MPI, as -device
   * cuda moves them today (docs/design.md, "NCCL"), instead of device to
   * device (NCCL): -cost_sync_path host. Set by the search from the option;
   * off in primitives as made. */
  PetscBool sync_host;
  /* One part of the model in one phase, on one rank of a tp group of size
   * tp (the rank's share of the work, without the tp collectives, which the
   * cost model adds), for rows sequences of len tokens. */
  double (*compute)(void *ctx, const CostShape *m, CostPart part, CostPhase ph, int tp, double rows, double len);
  /* One AdamW step over nparams parameters held by one rank. */
  double (*optimizer)(void *ctx, double nparams);
  /* One collective of `bytes` bytes (per rank's buffer: the reduced vector,
   * the gathered result, the broadcast message, the point-to-point message)
   * over nranks ranks; internode: the group spans nodes. */
  double (*coll)(void *ctx, CostColl op, int nranks, PetscBool internode, double bytes);
  PetscErrorCode (*destroy)(void *ctx);
} CostPrims;

PetscErrorCode cost_prims_destroy(CostPrims *p);

/* What one PPO/GRPO iteration does, independent of the plan. */
typedef struct {
  CostShape actor, critic, ref, reward;
  PetscBool critic_free;    /* an -algo without a critic: no critic calls */
  PetscBool reward_free;    /* rewards from rules or a command only: no reward model call */
  int       batch;          /* rollout sequences per iteration */
  int       prompt_len;     /* the longest prompt (memory); every prompt's length when plen is NULL */
  int       max_new;        /* generation limit */
  int nlen; /* response lengths of one rollout, one per sequence (sampled from a distribution, read from rollouts.h5, or
               a histogram) */
  int      *len;
  int       minibatches;    /* PPO mini-batches per epoch */
  int micro; /* -ppo_microbatches: micro-batches per mini-batch of a call whose plan gives mbs 0 (added by the cost
                model) */
  int       epochs;         /* PPO epochs per rollout */
  int       iterations;     /* iterations to simulate (the first one includes the initial weight placement) */
  int       gen_slots; /* samples one generation replica decodes together (continuous batching); 0: all of its rows */
  int      *plen;           /* NULL, or each sequence's prompt length, paired with len[] (nlen of them) */
  double   *seq_sorted;     /* NULL, or the nlen sequence lengths (prompt + response) in increasing order
                               (cost_work_from_options fills it) */
  int staleness; /* -async_staleness K: the generation of a later batch beside the training (0: one after the other) */
  PetscBool
      prox; /* K > 0 with a correction: the actor's forward over the batch on its training mesh (the proximal policy) */
  int partial; /* -async_partial S: a generation call draws at most S tokens per sample, the rest in later calls (0:
                  whole samples) */
  int       partial_extra;  /* its pool's samples beyond a batch */
  int       group; /* samples per prompt (GRPO's group): partial rollouts' pool ends and leaves by whole groups (1: each
                      sample alone) */
  /* multi-turn episodes (-env, docs/environments.md): the environment's answers per episode that the engine waits for
     (tool calls), the seconds each takes, and the engine steps between a turn's end and its answer's prefill */
  int       env_answers, env_lag, env_procs; /* env_procs: answers a replica's environment computes at once (0: all) */
  double    env_s;
  PetscBool episodes; /* the deck has -env: fusion of generation and inference is refused, as the run refuses it */
} CostWork;

/* The estimate of one plan. */
typedef struct {
  PetscBool feasible;
  char      why[256];           /* when infeasible: "actor_train on rank 0 needs 93.1 GB, the device has 80 GB" */
  double    iter_s;             /* time per iteration (steady state) */
  double    call_s[MFC_COUNT];  /* each call's time in one iteration (0: not in use) */
  double    realloc_s;          /* reallocation and weight sync in one iteration */
  double    mem_max;            /* the largest peak memory of any rank, bytes */
  /* added by the cost model (src/cost) */
  double    mem_call[MFC_COUNT]; /* the largest peak memory of any rank during the call, bytes */
  double    sync_s[2];          /* actor_sync, critic_sync: one iteration's reallocation time each */
  double    offload_s;          /* moving frozen models between host and device in one iteration */
  double    genfuse_s; /* -fuse_gen_inf stream or migrate: generation and inference as one node (0 otherwise) */
  /* -fuse_gen_inf migrate: the long tail's move in one iteration (as the run's metrics) */
  double    migrate_at;         /* R_t simulated (auto: the best of the executor's candidates) */
  double    migrate_t;          /* when it starts, from the stage's start (-1: nothing moved) */
  double    migrate_s;          /* its time (the busiest rank's point-to-point messages) */
  double    migrate_bytes;      /* bytes sent, all ranks: states and KV-cache shards */
  int       migrate_samples;    /* samples moved */
  int       migrate_replicas;   /* generation replicas that decode the tail (dp when nothing moved) */
} CostEstimate;

/* The estimate of a plan for a workload: every call under its layout, the
 * reallocations between them, and the dataflow graph simulated over
 * work->iterations iterations (calls on overlapping meshes one after another,
 * on disjoint meshes concurrently). A plan that does not fit in memory is
 * not an error: feasible is false and why says which call on which rank. */
PetscErrorCode cost_estimate(const CostPrims *p, const CostWork *work, const Plan *plan, CostEstimate *est);
/* Multi-turn episodes: what n samples decoded S at a time wait for the
 * environment beyond decoding (src/cost/gen.c), from the replica's decode
 * time over its steps: per wave of S and answer, ceil(S / env_procs)
 * answers one after another less env_lag steps. */
double cost_env_wait(const CostWork *w, int n, int S, double decode_s, long steps);

/* ==== the cost model's extensions (src/cost, docs/costmodel.md) ========== */

/* Analytic primitives from a hardware description deck (a PETSc options file
 * of -hw_* values, input/hardware/h100_sxm.deck): compute is
 * max(FLOPs / (peak * eff_compute), bytes / (mem_bw * eff_memory)) plus a
 * launch overhead per part; collectives follow the alpha-beta ring model
 * with the intra-node (NVLink) or inter-node (InfiniBand) link. Errors name
 * the file and the missing or bad value. */
PetscErrorCode cost_prims_hardware(const char *deck, CostPrims *p);

/* Shapes: from a model configuration of this code (GPT-2), or a named
 * LLaMA shape ("llama2-7b", "llama2-13b", "codellama-34b", "llama2-70b",
 * "llama-13b", "llama-33b", "llama-65b"); value_head makes it a critic or
 * reward model. An unknown name is an error naming `opt` and the value. */
void           cost_shape_from_model(const ModelConfig *cfg, CostShape *m);
/* The model a shape describes (gated: the LLaMA family, untied). */
void           cost_shape_to_model(const CostShape *m, ModelConfig *cfg);
PetscErrorCode cost_shape_named(const char *opt, const char *name, PetscBool value_head, CostShape *m);
/* Parameters of the whole model (a tied head counted once). */
double cost_shape_params(const CostShape *m);
/* Forward FLOPs of one part over rows x len tokens (DECODE: rows tokens
 * with len tokens of context), the whole part (not divided by tp); the
 * backward is twice the forward. */
double cost_flops(const CostShape *m, CostPart part, CostPhase ph, double rows, double len);

/* What a job's deck gives the workload before any -cost_ option, as the
 * modules that own those options parsed them (the PPO, generation and task
 * settings: -rollout_batch, -gen_max_new_tokens, ...), and the four
 * models as the run will have them: read from the checkpoints the deck
 * names, or, for a deck without them (a pipeline's), the -policy_ options
 * SFT will write (src/jobs, ppo_cost_deck). */
typedef struct {
  int       batch, max_new, minibatches, micro, epochs, gen_slots;
  int       prompt_len;     /* the longest prompt: the task's, or a prompts file's */
  PetscBool critic_free;    /* an -algo without a critic */
  PetscBool reward_free;    /* no reward model (-reward_fn or -reward_command only) */
  long long seed;           /* -seed: keys the drawn lengths */
  int       staleness;      /* -async_staleness */
  PetscBool prox;           /* -async_correction is not none */
  int       partial, partial_extra; /* -async_partial, and -async_partial_extra in samples */
  int       group;          /* samples per prompt: -rollout_group for an -algo with groups, else 1 */
  int       env_answers, env_lag, env_procs; /* -env: -env_max_turns - 1, -env_lag_steps, -env_procs (command) */
  PetscBool episodes;       /* -env is on */
  ModelConfig cfg[4]; /* actor, critic, reference, reward (critic unused when critic_free, reward when reward_free) */
  char      shapes_from[2 * PETSC_MAX_PATH_LEN + 64]; /* where cfg came from, for messages */
} CostDeck;

/* Where a mode gets its CostDeck (ppo_cost_deck, src/jobs): given by the
 * driver, called after the mode's own options are checked, so a missing
 * -plan_ranks is named before the deck's job is read. */
typedef PetscErrorCode (*CostDeckFn)(const RunCtx *run, PetscBool help, CostDeck *deck);

/* The training call of an SFT or reward-modelling stage (sft_train,
 * rm_train). Those stages run alone, one after another and never beside
 * PPO's calls, so each is placed on its own: the layout with the fastest
 * step that fits. */
typedef struct {
  PetscBool   used;   /* the deck's job runs this stage */
  ModelConfig cfg;    /* the model it trains (rm_train: the scalar-head reward model) */
  int         batch;  /* what dp x micro-batches divide: sequences (SFT) or pairs (RM) */
  int         rows;   /* sequences per unit of batch: 1, or 2 (a pair's chosen and rejected) */
  int         len;    /* tokens per sequence, padded */
  int         steps;  /* optimizer steps of the stage */
} CostTrainStage;

/* The job a deck runs, for -mode plan: PPO's calls (a PPO or pipeline deck,
 * or a deck that names no mode) and the training stages before them. */
typedef struct {
  char           mode[32];  /* the deck's -mode ("" when none: PPO) */
  PetscBool      ppo;       /* PPO's calls (then CostDeckFn gives their workload) */
  CostTrainStage stage[2];  /* [0] sft_train, [1] rm_train */
} CostJob;

/* Where -mode plan learns the deck's job (plan_cost_job, src/jobs): the
 * -mode the deck gives, which -mode plan overrides, and the stages' options
 * as those modes read and check them; help: only register the options. */
typedef PetscErrorCode (*CostJobFn)(const RunCtx *run, PetscBool help, CostJob *job);

/* One optimizer step of a training stage under layout c (in est->iter_s
 * and call_s[id]) and the peak memory of its ranks: the training cost and
 * memory model of actor_train applied to the stage's model, batch and
 * sequence length (one mini-batch, one epoch). zero1 as the plan has it.
 * A layout that does not fit gives feasible false, with why. */
PetscErrorCode cost_train_stage(const CostPrims *p, const CostTrainStage *st, MFCId id, const PlanCall *c, int world,
                                PetscBool zero1, CostEstimate *est);

/* The workload from the deck and the options (docs/costmodel.md): -cost_batch,
 * -cost_prompt_len, -cost_prompt_lengths SPEC, -cost_max_new, -cost_minibatches, -cost_epochs,
 * -cost_iterations, -cost_critic_free, -cost_reward_free, the shapes (-cost_actor_shape NAME,
 * -cost_critic_shape NAME, else the deck's models) and the response lengths
 * (-cost_lengths lognormal:MEDIAN:P99 | uniform:LO:HI | fixed:N | hist:FILE |
 * rollouts:FILE.h5; from a rollouts file each response comes with its own
 * prompt's length unless -cost_prompt_len or -cost_prompt_lengths is given).
 * Defaults come from deck (its PPO settings and models); each -cost_
 * option overrides one. work->len and plen are drawn keyed by deck->seed.
 * cost_work_free frees them. */
PetscErrorCode cost_work_from_options(const CostDeck *deck, CostWork *work);
/* The files the -cost_ options read (-cost_hardware, -cost_profile, the
 * files of -cost_lengths and -cost_prompt_lengths), for io_files_check. */
extern const IoFileOption cost_file_options[];
/* n lengths by spec (the syntax of -cost_lengths; opt names the option in
 * errors), each clipped to [1, max]. With plen not NULL and a rollouts:
 * file that records prompt lengths, each drawn response's own prompt length
 * goes to plen and *paired is true; otherwise plen is untouched and *paired
 * false. */
PetscErrorCode cost_work_lengths(const char *opt, const char *spec, int n, int max, unsigned long long seed, int *len,
                                 int *plen, PetscBool *paired);
PetscErrorCode cost_work_free(CostWork *work);
/* The plan search's primitives: -cost_hardware DECK, -cost_profile FILE
 * (at most one of them) and -cost_profile_cache DIR, "" when not given.
 * src/cost owns every -cost_ option; the search receives these paths. */
typedef struct {
  char      hw[PETSC_MAX_PATH_LEN], prof[PETSC_MAX_PATH_LEN], cache[PETSC_MAX_PATH_LEN];
  PetscBool sync_host; /* -cost_sync_path host (default device) */
} CostPrimsPaths;
PetscErrorCode cost_prims_paths_from_options(CostPrimsPaths *pp);

/* The per-rank timeline of a simulated run: the same rows as a run's
 * /timeline (docs/formats.md), one per call per rank, steps = iterations. */
typedef struct {
  int     n, cap, *rank, *call;
  long long *step;
  double *start, *end;
  char    names[16][32];
  int     nnames;
} CostTimeline;
/* cost_estimate, and the timeline of every simulated iteration when tl is
 * not NULL (cost_timeline_free frees it). */
PetscErrorCode cost_simulate(const CostPrims *p, const CostWork *work, const Plan *plan, CostEstimate *est,
                             CostTimeline *tl);
/* Writes /timeline (and @source) to a new HDF5 file at path (temp then
 * rename), readable by tools/plot_timeline.py. Serial: call on one rank. */
PetscErrorCode cost_timeline_write(const char *path, const CostTimeline *tl, const char *source);
PetscErrorCode cost_timeline_free(CostTimeline *tl);

/* Every rank's peak memory over an iteration of the plan (peak[plan->world]), bytes. */
PetscErrorCode cost_memory_ranks(const CostPrims *p, const CostWork *work, const Plan *plan, double *peak);

/* Bytes the reallocation planner (src/realloc) moves between different
 * ranks from layout a to layout b of one model (the same count as
 * realloc_plan_bytes), and the largest any one rank receives. */
PetscErrorCode cost_realloc_bytes(const CostShape *m, double bytes_per_param, const PlanCall *a, const PlanCall *b,
                                  double *total, double *max_recv);

#endif
