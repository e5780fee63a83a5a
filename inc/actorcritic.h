/* actorcritic: fused actor-critic training schedules (RLHFuse's intra-stage
 * fusion, docs/fusion.md and docs/design.md). The actor's pipeline runs
 * stage s on rank s; the critic's runs the opposite way on the same ranks
 * (replicated when it has fewer stages), so each fills the other's pipeline
 * bubbles. This module holds the schedule model (tasks and their
 * dependencies), its replay (makespan, deadlock, peak activation memory), a
 * lower bound on the makespan, the optimizer that finds a fast schedule
 * (ac_optimize; "search" in rlfuse means the plan search of src/search), the
 * sequential baseline, the schedule file (writer and validating reader) and
 * -mode schedule. PPO runs a schedule with -fuse_train 1 (src/ppo). */
#ifndef RLFUSE_ACTORCRITIC_H
#define RLFUSE_ACTORCRITIC_H

#include "sys.h"
#include "io.h"
enum { AC_ACTOR = 0, AC_CRITIC = 1 };
enum { AC_F = 0, AC_B = 1 };

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
} ACInst;

/* One task of a rank's list: model (AC_ACTOR/AC_CRITIC), kind
 * (AC_F/AC_B) and micro-batch (of the model; of the copy for the critic).
 * The same three ints are a row of a schedule file's /node_<i>/tasks. */
typedef struct {
  int model, kind, mb;
} ACTask;

/* A schedule: every rank runs exactly ac_ntasks() tasks (its actor stage's
 * and its critic stage's forwards and backwards); rank r's list is
 * order[r*n .. r*n+n-1], run in that order. */
typedef struct {
  ACInst  inst;
  int       nranks, n;
  ACTask *order;
} ACSched;

/* Scores of a replay. */
typedef struct {
  double makespan;
  double peak_mem;    /* the largest over the ranks */
  double *rank_peak;  /* per rank (caller-owned, may be NULL) */
  int    deadlock;    /* 1: some rank waits forever (makespan is then +inf) */
} ACScore;

/* Checks an instance; errors name the option given by `opt` + field, e.g.
 * "-sched_pp1 3 does not divide -sched_pp0 8" with opt "-sched_". */
PetscErrorCode ac_inst_check(const ACInst *in, const char *opt);
int            ac_ntasks(const ACInst *in);
/* The stage of model x on rank r, and the rank of stage s of model x in copy c. */
int            ac_stage(const ACInst *in, int x, int r);
int            ac_rank(const ACInst *in, int x, int copy, int s);

/* The lower bound on any schedule's makespan: each model's critical path
 * (m+pp-1)*3f, and for every rank its work (3 m0 f0 + 3 m1 f1) plus the
 * earliest a first forward can reach it plus the shortest chain of
 * backwards that must follow its last task. */
double ac_lower_bound(const ACInst *in);

/* Replays a schedule: each rank runs its list in order, a task starts when
 * its rank is free and its dependency is done. finish (may be NULL) gets each
 * task's finish time, indexed like order. */
PetscErrorCode ac_replay(const ACSched *s, ACScore *score, double *finish);

/* The sequential baseline: the actor's 1F1B pipeline, then the critic's
 * (all copies at once); its makespan is the sum of the two, its peak memory
 * the larger of the two per rank. order: each rank's actor 1F1B list then
 * its critic 1F1B list. */
PetscErrorCode ac_sequential(const ACInst *in, ACSched *s, ACScore *score);

/* Options of ac_optimize. */
typedef struct {
  uint64_t seed;
  int      chains;     /* independent annealing chains (OpenMP threads share them) */
  int      iters;      /* proposals per chain */
  int      mem_steps;  /* bisection steps on a memory cap at the best makespan (0: none) */
} ACOptimizeOpts;

/* Result of ac_optimize: the best schedule by (makespan, peak memory, chain)
 * and the greedy start's score. Deterministic for a seed and chain count,
 * whatever the thread count. */
typedef struct {
  ACScore greedy, calib, best; /* the plain list schedule, the calibrated one, the optimizer's */
  double    lower_bound, seconds, cpu_seconds; /* wall-clock, and CPU time of all threads */
  int       chain, iters_used;
} ACOptimizeInfo;
PetscErrorCode ac_optimize(const ACInst *in, const ACOptimizeOpts *opt, ACSched *s, ACOptimizeInfo *info);

PetscErrorCode ac_sched_alloc(const ACInst *in, ACSched *s);
PetscErrorCode ac_sched_free(ACSched *s);

/* Checks that a schedule lists every task of every rank once, with valid
 * fields, and that its replay ends (no deadlock) within the memory cap.
 * where names the source in messages ("schedule file x.h5"). */
PetscErrorCode ac_sched_validate(const ACSched *s, const char *where);

/* Schedule files (docs/formats.md): rank 0 writes atomically; the reader
 * checks the file against the instance it is given (stages, micro-batches)
 * and validates the schedule. */
PetscErrorCode ac_sched_write(const char *path, const ACSched *s, const ACOptimizeInfo *info, const ACScore *seq);
PetscErrorCode ac_sched_read(const char *path, const ACInst *in, ACSched *s);

/* -mode schedule: options -sched_*, ac_optimize, print, write. */
PetscErrorCode ac_schedule_run(RunCtx *run);
/* Its file options (-sched_file, -sched_output), for io_files_check. */
extern const IoFileOption ac_file_options[];

#endif
