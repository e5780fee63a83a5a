/* fuse private helpers: task ids and the dependency graph shared by the
 * replay, the list scheduler and the reader. A task's id is
 * rank*n + local, local = kind*m0 + mb for the actor and
 * 2*m0 + kind*m1 + mb for the critic (n = 2*m0 + 2*m1 tasks per rank). */
#ifndef RLFUSE_FUSE_IMPL_H
#define RLFUSE_FUSE_IMPL_H

#include "fuse.h"

static inline int fuse_local(const FuseInst *in, int model, int kind, int mb)
{
  return model == FUSE_ACTOR ? kind * in->m[0] + mb : 2 * in->m[0] + kind * in->m[1] + mb;
}

static inline FuseTask fuse_task_of(const FuseInst *in, int local)
{
  FuseTask t;
  if (local < 2 * in->m[0]) t = (FuseTask){FUSE_ACTOR, local / in->m[0], local % in->m[0]};
  else t = (FuseTask){FUSE_CRITIC, (local - 2 * in->m[0]) / in->m[1], (local - 2 * in->m[0]) % in->m[1]};
  return t;
}

/* The graph: for task id i, dep[2i], dep[2i+1] are the tasks it waits for
 * (-1: none): a backward waits for its own forward (same rank) and the next
 * stage's backward; a forward for the previous stage's forward. succ[2i],
 * succ[2i+1] are the tasks waiting for i. dur[i] is its time. */
typedef struct {
  int     nranks, n, N;
  int    *dep, *succ;
  double *dur;
} FuseGraph;

PetscErrorCode fuse_graph_build(const FuseInst *in, FuseGraph *g);
PetscErrorCode fuse_graph_free(FuseGraph *g);
/* Replay of an order given as task ids (ids[r*n + j]: rank r's j-th task);
 * returns makespan or +inf on deadlock; peak (may be NULL, size nranks)
 * gets each rank's peak memory, *peak_max the largest. Scratch: finish (N)
 * and ptr (nranks) are caller-provided. No allocation: used in the search's
 * inner loop. */
double fuse_replay_ids(const FuseInst *in, const FuseGraph *g, const int *ids, double *finish, int *ptr, double *peak, double *peak_max);
/* Peak memory of one rank's list of count task ids (in list order; it does
 * not depend on timing). */
double fuse_rank_peak(const FuseInst *in, const int *ids_rank, int count);
/* Start time of every task of model x when the model runs alone in 1F1B,
 * written to start[id] for model x's ids (the others are left alone). */
PetscErrorCode fuse_1f1b_start(const FuseInst *in, int x, double *start);

typedef struct FuseDecoder {
  const FuseInst  *in;
  const FuseGraph *g;
  int             *ndep, *ready, *cnt, *ids, *pos;
  double          *rt, *fin, *free_at, *mem, *est, *ess;
  double           alpha; /* 0: non-delay, 1: active (see decoder_run) */
  int              rev;   /* schedules the time-reversed graph (see decoder_justify) */
  struct FuseDecoder *bw;    /* a forward decoder's reversed twin */
  double          *kb;    /* scratch keys for decoder_justify */
} FuseDecoder;
PetscErrorCode fuse_dec_create(const FuseInst *in, const FuseGraph *g, FuseDecoder *d);
PetscErrorCode fuse_dec_destroy(FuseDecoder *d);
/* Decodes keys into d->ids (rank r's list at r*n); returns the makespan or
 * +inf when no rank can go on (only with a memory cap). */
double         fuse_dec_run(FuseDecoder *d, const double *key);
/* Justification from the schedule d holds (makespan mk, decoded from key):
 * leaves d holding the best schedule found and key the keys that decode to
 * it; returns its makespan. */
double         fuse_dec_justify(FuseDecoder *d, double *key, double mk);
/* Peak activation memory (the largest over the ranks) of d's schedule. */
double         fuse_dec_peak(const FuseDecoder *d);

#endif
