/* plan: the execution plan as data. For every model function call (MFC) a
 * mesh (a list of world ranks) with its pp x dp x tp strategy and a
 * micro-batch count. A plan comes from a placement preset (-placement
 * colocate|interleave|disaggregate, docs/background.md section 4), from per-call
 * options with the call's prefix (-actor_gen_ranks 0-3 -actor_gen_tp 2 ...),
 * which override the preset, or from a plan file (the /plan group of an HDF5
 * file, e.g. an earlier run.h5). It is checked before any compute, printed at
 * start and stored in run.h5 under /plan. */
#ifndef RLFUSE_PLAN_H
#define RLFUSE_PLAN_H

#include "model.h"
#include "io.h"

typedef enum {
  MFC_ACTOR_GEN = 0,
  MFC_REF_INF,
  MFC_REW_INF,
  MFC_CRITIC_INF,
  MFC_ACTOR_TRAIN,
  MFC_CRITIC_TRAIN,
  MFC_SFT_TRAIN,
  MFC_RM_TRAIN,
  MFC_COUNT
} MFCId;
extern const char *const mfc_names[]; /* "actor_gen", ..., "rm_train" (option prefixes) */

/* Inter-stage fusion of generation and inference (docs/fusion.md): none;
 * stream (finished samples go to the inference ranks while generation
 * continues); migrate (stream, and the long tail moves onto fewer
 * generation replicas at R_t). */
typedef enum { FUSE_NONE = 0, FUSE_STREAM = 1, FUSE_MIGRATE = 2 } FuseMode;
extern const char *const FuseModeNames[]; /* PETSc enum list: none, stream, migrate */

/* auto: -mode ppo searches the plan at start (src/search) from the colocated
 * meshes; SFT and RM (alone or as pipeline stages) place their one training
 * call as -mode plan does (search_auto_stage). */
typedef enum {
  PLACEMENT_COLOCATE     = 0,
  PLACEMENT_INTERLEAVE   = 1,
  PLACEMENT_DISAGGREGATE = 2,
  PLACEMENT_AUTO         = 3
} Placement;
extern const char *const PlacementNames[]; /* PETSc enum list: colocate, interleave, disaggregate, auto */

#define PLAN_MAX_RANKS 1024

typedef struct {
  int nranks;
  int ranks[PLAN_MAX_RANKS]; /* world ranks in mesh order (tp fastest, then dp, then pp) */
  int dp, tp, pp;
  int mbs;                   /* micro-batches per dp replica (per mini-batch for training calls) */
} PlanCall;

typedef struct {
  Placement placement;
  int       world;          /* ranks the plan was made for */
  int       gen_replicas;   /* disaggregate: generation replicas (dp of actor_gen) */
  PetscBool offload;        /* frozen models offloaded to host between calls when meshes overlap */
  PetscBool zero1;          /* ZeRO-1 optimizer-state sharding in the training calls */
  double    bucket_mb;      /* gradient all-reduce and weight-sync bucket, MiB */
  PetscBool fuse_train; /* actor_train and critic_train fused on the same ranks (-fuse_train, src/plan/fuse_train.c) */
  char      source[PETSC_MAX_PATH_LEN + 32]; /* "preset colocate", "preset interleave + options", "file <path>" */
  PlanCall  call[MFC_COUNT];
  int       nconc;          /* pairs of calls that must run concurrently (disjoint meshes) */
  int       conc[8][2];
  FuseMode  fuse;           /* -fuse_gen_inf */
  double    migrate_at;     /* -fuse_migrate_at: R_t in [0,1], or -1 for auto */
  int       migrate_to;     /* -fuse_migrate_replicas: 0 = the fewest that hold the tail */
  int       fuse_tokens;    /* -fuse_tokens: token budget of a streamed inference micro-batch */
  PetscBool fuse_hold;      /* -fuse_hold: streamed samples wait until generation ends (benchmark aid) */
  /* -fuse_train_schedule: the fused schedule file the training runs ("": searched at the first mini-batch);
   * a file of the run's, not a setting of the plan's: plan files do not carry it */
  char      fuse_schedule[PETSC_MAX_PATH_LEN];
  /* The plan search's estimate of this plan (src/search; 0: none), kept
   * with it in plan files and run records so measured times can be set
   * beside it; options that change a plan read from a file drop it. */
  double    est_iter_s, est_call_s[MFC_COUNT], est_realloc_s, est_mem;
} Plan;

/* What the checks need to know about the run: the model each call runs
 * (NULL: the call is not part of this mode) and the number of sequences the
 * call splits over its dp replicas and micro-batches (generation and
 * inference: the rollout batch; training: one mini-batch). */
typedef struct {
  const ModelConfig *cfg[MFC_COUNT];
  int              batch[MFC_COUNT];
} PlanNeeds;

/* Builds the plan for `world` ranks from the options: -placement,
 * -gen_replicas, -plan_file, -plan_offload, -plan_zero1, -plan_bucket_mb,
 * -plan_concurrent a,b, the fusion options -fuse_gen_inf, -fuse_migrate_at,
 * -fuse_migrate_replicas, -fuse_tokens, -fuse_train, -fuse_train_schedule, and for every call
 * -<call>_ranks (e.g. 0-3 or 0,2,4),
 * -<call>_dp, -<call>_tp, -<call>_pp, -<call>_mbs. Options that are given
 * override the preset or the file. Malformed values are errors naming the
 * option. */
PetscErrorCode plan_from_options(int world, Plan *plan);
/* The files the -plan_ and -fuse_ options name (-plan_file, -fuse_train_schedule,
 * -plan_output, -plan_timeline), for io_files_check. */
extern const IoFileOption plan_file_options[];
/* The placement's meshes for `world` ranks (docs/background.md, section 4), with the
 * default settings (no offload, no ZeRO-1, 16 MiB buckets). gen_replicas 0:
 * one generation replica per rank of the generation half. */
PetscErrorCode plan_preset(int world, Placement placement, int gen_replicas, Plan *plan);
/* With -fuse_gen_inf stream, the disaggregated preset runs inference on the
 * training half, which is idle during generation (a no-op otherwise). */
void           plan_preset_stream_apart(Plan *plan);
/* Every check before any compute; errors name the call and the option, e.g.
 * "-actor_gen_tp 3 does not divide -actor_n_head 4". Checks: ranks inside
 * the job and not repeated in a mesh; dp*tp*pp equal to the mesh size; tp
 * dividing n_head and vocab_size; pp <= n_layer; dp*mbs dividing the batch;
 * concurrent calls on disjoint meshes; reallocation pairs (the same model in
 * two calls) with tp sizes that divide each other; a fusion mode the plan
 * can run (plan_check_fusion).  Collective (same result
 * on every rank). */
PetscErrorCode plan_check(const Plan *plan, const PlanNeeds *needs);
/* Human-readable table of the calls in use (needs->cfg non-NULL). */
PetscErrorCode plan_print(MPI_Comm comm, const Plan *plan, const PlanNeeds *needs);
/* The call's ranks as -<call>_ranks takes them, ranges compacted: "0-3",
 * "0,2" ("none" for a call without ranks; ",..." where buf ends). */
const char *plan_ranks_str(const PlanCall *call, char *buf, size_t len);
/* Writes /plan into an open run record (groups /plan/<call> with dataset
 * ranks and attributes dp, tp, pp, mbs, and est_s when the plan has an
 * estimate; attributes of /plan: placement, world, gen_replicas, offload,
 * zero1, bucket_mb, the fusion settings, and est_iter_s, est_realloc_s,
 * est_mem when estimated). Collective. */
PetscErrorCode plan_record(RunRecord *rec, const Plan *plan, const PlanNeeds *needs);
/* Writes a new HDF5 file at path holding /plan as plan_record lays it out,
 * written to a temporary that is renamed, so an existing file is replaced
 * whole or not at all. Rank 0 writes; collective. */
PetscErrorCode plan_write_file(MPI_Comm comm, const char *path, const Plan *plan, const PlanNeeds *needs);
/* Reads /plan from an HDF5 file into plan (calls missing there keep their
 * values). Errors name the file. Collective. */
PetscErrorCode plan_read_file(MPI_Comm comm, const char *path, Plan *plan);
/* The first rank of a that b also uses, or -1. */
int plan_shared_rank(const PlanCall *a, const PlanCall *b);
/* Two calls' meshes share a rank. */
PetscBool plan_overlap(const Plan *plan, MFCId a, MFCId b);
/* Two calls on the same ranks in the same order and grid. */
PetscBool plan_same_layout(const PlanCall *a, const PlanCall *b);
/* The call's mesh (mesh_get over its ranks and grid). Collective over the
 * call's ranks. */
PetscErrorCode plan_mesh(const Plan *plan, MFCId c, const Mesh **mesh);
/* True when this world rank is in the call's mesh. */
PetscBool plan_has_rank(const Plan *plan, MFCId c, int rank);
/* "none", "stream, micro-batches of 512 tokens", "migrate at R_t 0.2 ..." */
const char *plan_fuse_str(const Plan *plan, char *buf, size_t len);
/* Streaming's rule for inference replicas of several ranks: two inference
 * calls in use that share a rank, one of them with tp x pp > 1, must have
 * the same layout. The first shared rank that breaks it (*a, *b the calls),
 * or -1. */
int plan_stream_conflict(const Plan *plan, const PlanNeeds *needs, MFCId *a, MFCId *b);
/* Migration's rule for them: each lies wholly inside actor_gen's ranks or
 * wholly outside. The first that does not: the rank outside (*call, its
 * replica and its first rank inside), or -1. */
int plan_migrate_split(const Plan *plan, const PlanNeeds *needs, MFCId *call, int *replica, int *in_rank);

/* ---- the -plan_ options of the plan search (src/plan/searchopts.c) ------- */
/* src/plan owns every -plan_ option; the search (src/search) receives these
 * values. Read and checked once (the messages name the options). */
typedef struct {
  double    time_s;      /* -plan_time: wall-clock budget, seconds (0: none) */
  int       iterations;  /* -plan_iterations: per chain (0: no cap) */
  int       chains;      /* -plan_chains */
  double    temperature; /* -plan_temperature */
  int       max_mbs;     /* -plan_max_mbs */
  PetscBool fusion;      /* -plan_search_fusion */
  PetscBool settings;    /* -plan_search_settings */
} PlanSearchOptions;
PetscErrorCode plan_search_options(PlanSearchOptions *o);
/* -mode plan's -plan_ranks (0: not given), -plan_output and -plan_timeline ("" when not given). */
typedef struct {
  PetscInt ranks;
  char     output[PETSC_MAX_PATH_LEN], timeline[PETSC_MAX_PATH_LEN];
} PlanModeOptions;
PetscErrorCode plan_mode_options(PlanModeOptions *o);

#endif
