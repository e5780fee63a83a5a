/* fuse: stage fusion (RLHFuse, docs/fusion.md and docs/design.md).
 *
 * Intra-stage fusion, the fused actor-critic training pipeline: the actor's
 * pipeline runs stage s on rank s; the critic's runs the opposite way on the
 * same ranks (replicated when it has fewer stages), so each fills the other's
 * pipeline bubbles. This part holds the schedule model (tasks and their
 * dependencies), its replay (makespan, deadlock, peak activation memory), a
 * lower bound on the makespan, the search for a fast schedule, the
 * sequential baseline, and the schedule file (writer and validating reader).
 *
 * Inter-stage fusion of generation and inference: while a generation
 * replica decodes, its head sends each finished sample (tokens,
 * log-probabilities, allowed sets) to the inference ranks that need it, with
 * non-blocking MPI from the engine's finished-sample callback. An inference
 * rank appends the samples in arrival order to a batch of its own and hands
 * micro-batches of them, cut by a token budget, to the caller as soon as the
 * budget fills, and the rest when every sample it expects has arrived. This
 * part moves samples; what runs on them is the caller's. */
#ifndef RLFUSE_FUSE_H
#define RLFUSE_FUSE_H

#include "sys.h"
#include "gen.h"

/* ==== intra-stage: fused actor-critic schedules ========================== */
enum { FUSE_ACTOR = 0, FUSE_CRITIC = 1 };
enum { FUSE_F = 0, FUSE_B = 1 };

/* An instance: model 0 (actor) has pp[0] stages, stage s on rank s; model 1
 * (critic) has pp[1] stages, pp[1] divides pp[0], and pp[0]/pp[1] copies:
 * copy c puts stage t on rank c*pp[1] + pp[1]-1-t. The actor trains on m[0]
 * micro-batches, each critic copy on its own m[1]. A forward of one stage of
 * model x takes f[x], a backward 2 f[x]; each micro-batch of model x in
 * flight on a rank holds mem[x] of activations; mem_cap > 0 caps the sum per
 * rank (0: no cap). */
typedef struct {
  int    pp[2], m[2];
  double f[2], mem[2], mem_cap;
} FuseInst;

/* One task of a rank's list: model (FUSE_ACTOR/FUSE_CRITIC), kind
 * (FUSE_F/FUSE_B) and micro-batch (of the model; of the copy for the critic).
 * The same three ints are a row of a schedule file's /node_<i>/tasks. */
typedef struct {
  int model, kind, mb;
} FuseTask;

/* A schedule: every rank runs exactly fuse_ntasks() tasks (its actor stage's
 * and its critic stage's forwards and backwards); rank r's list is
 * order[r*n .. r*n+n-1], run in that order. */
typedef struct {
  FuseInst  inst;
  int       nranks, n;
  FuseTask *order;
} FuseSched;

/* Scores of a replay. */
typedef struct {
  double makespan;
  double peak_mem;    /* the largest over the ranks */
  double *rank_peak;  /* per rank (caller-owned, may be NULL) */
  int    deadlock;    /* 1: some rank waits forever (makespan is then +inf) */
} FuseScore;

/* Checks an instance; errors name the option given by `opt` + field, e.g.
 * "-sched_pp1 3 does not divide -sched_pp0 8" with opt "-sched_". */
PetscErrorCode fuse_inst_check(const FuseInst *in, const char *opt);
int            fuse_ntasks(const FuseInst *in);
/* The stage of model x on rank r, and the rank of stage s of model x in copy c. */
int            fuse_stage(const FuseInst *in, int x, int r);
int            fuse_rank(const FuseInst *in, int x, int copy, int s);

/* The lower bound on any schedule's makespan: each model's critical path
 * (m+pp-1)*3f, and for every rank its work (3 m0 f0 + 3 m1 f1) plus the
 * earliest a first forward can reach it plus the shortest chain of
 * backwards that must follow its last task. */
double fuse_lower_bound(const FuseInst *in);

/* Replays a schedule: each rank runs its list in order, a task starts when
 * its rank is free and its dependency is done. finish (may be NULL) gets each
 * task's finish time, indexed like order. */
PetscErrorCode fuse_replay(const FuseSched *s, FuseScore *score, double *finish);

/* The sequential baseline: the actor's 1F1B pipeline, then the critic's
 * (all copies at once); its makespan is the sum of the two, its peak memory
 * the larger of the two per rank. order: each rank's actor 1F1B list then
 * its critic 1F1B list. */
PetscErrorCode fuse_sequential(const FuseInst *in, FuseSched *s, FuseScore *score);

/* Search options. */
typedef struct {
  uint64_t seed;
  int      chains;     /* independent annealing chains (OpenMP threads share them) */
  int      iters;      /* proposals per chain */
  int      mem_steps;  /* bisection steps on a memory cap at the best makespan (0: none) */
} FuseSearchOpts;

/* Result of a search: the best schedule by (makespan, peak memory, chain)
 * and the greedy start's score. Deterministic for a seed and chain count,
 * whatever the thread count. */
typedef struct {
  FuseScore greedy, calib, best; /* the plain list schedule, the calibrated one, the search's */
  double    lower_bound, seconds, cpu_seconds; /* wall-clock, and CPU time of all threads */
  int       chain, iters_used;
} FuseSearchInfo;
PetscErrorCode fuse_search(const FuseInst *in, const FuseSearchOpts *opt, FuseSched *s, FuseSearchInfo *info);

PetscErrorCode fuse_sched_alloc(const FuseInst *in, FuseSched *s);
PetscErrorCode fuse_sched_free(FuseSched *s);

/* Checks that a schedule lists every task of every rank once, with valid
 * fields, and that its replay ends (no deadlock) within the memory cap.
 * where names the source in messages ("schedule file x.h5"). */
PetscErrorCode fuse_sched_validate(const FuseSched *s, const char *where);

/* Schedule files (docs/formats.md): rank 0 writes atomically; the reader
 * checks the file against the instance it is given (stages, micro-batches)
 * and validates the schedule. */
PetscErrorCode fuse_sched_write(const char *path, const FuseSched *s, const FuseSearchInfo *info, const FuseScore *seq);
PetscErrorCode fuse_sched_read(const char *path, const FuseInst *in, FuseSched *s);

/* -mode schedule: options -sched_*, search, print, write. */
PetscErrorCode fuse_schedule_run(RunCtx *run);

/* ==== inter-stage: streaming finished samples into inference ============= */
/* Which ranks need which rows: dest[k] needs row b iff need[k*B + b]. */
typedef struct {
  int            B, ndest;
  int           *dest;  /* world ranks */
  unsigned char *need;  /* [ndest*B] */
} FuseRoute;
PetscErrorCode fuse_route_create(int B, int ndest, FuseRoute *route);
PetscErrorCode fuse_route_destroy(FuseRoute *route);
/* Rows this world rank needs (0 if it is no destination). */
int fuse_route_count(const FuseRoute *route, int rank);

/* The sending side, on a generation replica's head. */
typedef struct {
  MPI_Comm     comm;
  const FuseRoute *route;
  int          b0;           /* global row of the replica's request 0 */
  const unsigned char *defer; /* [ndest] or NULL: samples for these destinations wait for fuse_sender_release */
  PetscBool    released;
  int         *held, nheld;  /* requests finished while deferred */
  const GenBatch *hb;
  MPI_Request *req;          /* n sends */
  MPI_Status  *st;
  int        **buf;          /* nbuf packed samples */
  int          n, nbuf, cap;
  long long    messages, bytes;
  double       seconds;      /* in packing and MPI calls */
} FuseSender;
PetscErrorCode fuse_sender_begin(MPI_Comm comm, const FuseRoute *route, int b0, FuseSender *s);
/* A GenFinishFn: ctx is the FuseSender, index the replica's request index. */
PetscErrorCode fuse_send_finished(void *ctx, const GenBatch *b, int index);
/* Sends the deferred samples to the deferred destinations that need them
 * by the route as it is now (it may have changed since), and every later
 * sample at once. */
PetscErrorCode fuse_sender_release(FuseSender *s);
/* Waits for every send and frees the buffers. */
PetscErrorCode fuse_sender_end(FuseSender *s);

/* The receiving side. arr (gen_batch_create(B, T, masked)) gets the
 * arrivals in order: arrival k is row k, rows[k] its global row. run is
 * called with arrival indices whenever the unprocessed arrivals hold at
 * least `tokens` tokens (prompt and response), and at the end with the rest
 * (at most arr->n indices per call). */
typedef PetscErrorCode (*FuseBatchFn)(void *ctx, const GenBatch *arr, const int *rows, const int *idx, int n);
typedef struct {
  long long messages, bytes;
  int       batches;
  double    wait;  /* seconds blocked waiting for a sample */
} FuseRecvStats;
/* hold: run nothing before every sample has arrived (the same micro-batches,
 * without the overlap). */
PetscErrorCode fuse_receive(MPI_Comm comm, int expected, int tokens, PetscBool hold, GenBatch *arr, int *rows, FuseBatchFn run, void *ctx, FuseRecvStats *st);


/* ==== inter-stage: migration of the long tail (src/fuse/migrate.c) ======= */
/* The plan: n unfinished samples, sample i on replica rep[i] with kvlen[i]
 * cache positions (0: waiting, never started). m destination replicas:
 * forced (when > 0) or the fewest whose slots hold all n, never fewer than
 * the running samples need slots, at most dp; they are the replicas holding
 * the most cache (then the most samples, then the lower index): the least
 * data moves. Samples on a destination stay (to[i] = rep[i]); the others go,
 * running ones to the destination with the most free slots, waiting ones to
 * the least loaded. dest[dp] gets 1 for the destinations. */
typedef struct {
  int        dp, slots, forced, n;
  const int *rep, *idx, *kvlen;
} FuseMigIn;
PetscErrorCode fuse_migrate_plan(const FuseMigIn *in, int *m, unsigned char *dest, int *to);

/* After the migration, on every rank of the mesh: dest[d] 1 for the
 * replicas that decode the tail; idx[0..n) the samples unfinished then. */
typedef PetscErrorCode (*FuseAfterFn)(void *ctx, const unsigned char *dest, int dp, const int *idx, int n);
/* The engine hook (a GenStepFn with ctx a FuseMigrator) on every rank of the
 * generation mesh; collective over the mesh at every step until the
 * migration. comm: point-to-point messages between world ranks. */
typedef struct {
  MPI_Comm    comm;
  const Mesh *mesh;
  int         B, forced;
  double      at;                 /* R_t */
  size_t      bucket;             /* words per message at most */
  PetscBool   decided;            /* migrated, or everything finished first */
  PetscBool   dest;               /* this rank's replica received the tail */
  int         m, moved, left;     /* destination replicas, samples this rank sent, unfinished at the migration */
  long long   bytes;              /* this rank sent */
  double      t_start, t_end;     /* the migration on this rank (0, 0: none) */
  FuseAfterFn after;              /* may be NULL */
  void       *after_ctx;
} FuseMigrator;
/* The inference rows after a migration: need[(k*nq + q)*B + b] when rank q
 * runs call k on row b; q_rep[q] its generation replica (-1: none);
 * member[k*nq + q] when q can run call k. In each call, the rows of ranks
 * on replicas that go on decoding are dealt, in row order, round-robin to
 * the members on freed replicas (none: they stay), except the rows with
 * keep[b] (the samples still unfinished: they end with the tail, when
 * their ranks are free again, so spreading them keeps the last inference
 * short). Ranks apart from generation keep their rows. */
void fuse_reroute(int ncall, int nq, int B, const int *q_rep, const unsigned char *freed, const unsigned char *member, const unsigned char *keep, unsigned char *need);
PetscErrorCode fuse_migrator_begin(MPI_Comm comm, const Mesh *mesh, int B, double at, int forced, size_t bucket_bytes, FuseMigrator *mg);
PetscErrorCode fuse_migrate_step(void *ctx, GenEngine *e, GenBatch *b, PetscBool *go);

/* ==== R_t by simulation (src/fuse/rtauto.c) ============================== */
/* A model of the fused stage from the previous iteration: B samples of
 * len[b] tokens (prompt and response) and rlen[b] response tokens; dp
 * generation replicas of `slots` slots (replica d starts with rows
 * exec_rows(B, dp, d)), decoding in lockstep at step_s seconds a step; nq
 * inference ranks, rank q a member of generation replica q_rep[q] (-1:
 * none; it starts at once) and needing row b when need[q*B+b]; each row
 * costs tok_s seconds per token on each rank that needs it, in finish
 * order, from when that rank stops generating. */
typedef struct {
  int                  B, dp, slots, nq;
  const int           *len, *rlen, *q_rep;
  const unsigned char *need;
  double               step_s, tok_s;
} FuseSim;
/* Predicted seconds of the generation+inference stage when the tail
 * migrates at rt (0: never). */
double fuse_sim_stage(const FuseSim *s, double rt);
/* The best of the candidates 0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5 (the
 * smaller on ties); *pred (may be NULL) its predicted seconds. */
double fuse_sim_pick(const FuseSim *s, double *pred);
#define FUSE_RT_FIRST 0.2 /* -fuse_migrate_at auto before any iteration was measured */

#endif
