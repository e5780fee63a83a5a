/* fuse: the fused actor-critic training pipeline (intra-stage fusion). The
 * actor's pipeline runs stage s on rank s; the critic's runs the opposite way
 * on the same ranks (replicated when it has fewer stages), so each fills the
 * other's pipeline bubbles. This module holds the schedule model (tasks and
 * their dependencies), its replay (makespan, deadlock, peak activation
 * memory), a lower bound on the makespan, the search for a fast schedule, the
 * sequential baseline, and the schedule file (writer and validating reader).
 * docs/design.md, "Fused actor-critic schedules", describes the model. */
#ifndef RLFUSE_FUSE_H
#define RLFUSE_FUSE_H

#include "sys.h"

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

#endif
