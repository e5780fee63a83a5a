/* ac_impl.h: private to src/actorcritic: task ids and the dependency graph shared by the
 * replay, the list scheduler and the reader. A task's id is
 * rank*n + local, local = kind*m0 + mb for the actor and
 * 2*m0 + kind*m1 + mb for the critic (n = 2*m0 + 2*m1 tasks per rank). */
#ifndef RLFUSE_FUSE_IMPL_H
#define RLFUSE_FUSE_IMPL_H

#include "actorcritic.h"

static inline int ac_local(const ACInst *in, int model, int kind, int mb)
{
  return model == AC_ACTOR ? kind * in->m[0] + mb : 2 * in->m[0] + kind * in->m[1] + mb;
}

static inline ACTask ac_task_of(const ACInst *in, int local)
{
  ACTask t;
  if (local < 2 * in->m[0]) t = (ACTask){AC_ACTOR, local / in->m[0], local % in->m[0]};
  else t = (ACTask){AC_CRITIC, (local - 2 * in->m[0]) / in->m[1], (local - 2 * in->m[0]) % in->m[1]};
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
} ACGraph;

PetscErrorCode ac_graph_build(const ACInst *in, ACGraph *g);
PetscErrorCode ac_graph_free(ACGraph *g);
/* Replay of an order given as task ids (ids[r*n + j]: rank r's j-th task);
 * returns makespan or +inf on deadlock; peak (may be NULL, size nranks)
 * gets each rank's peak memory, *peak_max the largest. Scratch: finish (N)
 * and ptr (nranks) are caller-provided. No allocation: used in the optimizer's
 * inner loop. */
double ac_replay_ids(const ACInst *in, const ACGraph *g, const int *ids, double *finish, int *ptr, double *peak,
                     double *peak_max);
/* Peak memory of one rank's list of count task ids (in list order; it does
 * not depend on timing). */
double ac_rank_peak(const ACInst *in, const int *ids_rank, int count);
/* Start time of every task of model x when the model runs alone in 1F1B,
 * written to start[id] for model x's ids (the others are left alone). */
PetscErrorCode ac_1f1b_start(const ACInst *in, int x, double *start);

typedef struct ACDecoder {
  const ACInst  *in;
  const ACGraph *g;
  int             *ndep, *ready, *cnt, *ids, *pos;
  double          *rt, *fin, *free_at, *mem, *est, *ess;
  double           alpha; /* 0: non-delay, 1: active (see decoder_run) */
  int              rev;   /* schedules the time-reversed graph (see decoder_justify) */
  struct ACDecoder *bw;    /* a forward decoder's reversed twin */
  double          *kb;    /* scratch keys for decoder_justify */
} ACDecoder;
PetscErrorCode ac_dec_create(const ACInst *in, const ACGraph *g, ACDecoder *d);
PetscErrorCode ac_dec_destroy(ACDecoder *d);
/* Decodes keys into d->ids (rank r's list at r*n); returns the makespan or
 * +inf when no rank can go on (only with a memory cap). */
double         ac_dec_run(ACDecoder *d, const double *key);
/* Justification from the schedule d holds (makespan mk, decoded from key):
 * leaves d holding the best schedule found and key the keys that decode to
 * it; returns its makespan. */
double         ac_dec_justify(ACDecoder *d, double *key, double mk);
/* Peak activation memory (the largest over the ranks) of d's schedule. */
double         ac_dec_peak(const ACDecoder *d);

#endif
