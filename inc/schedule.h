/* (Named schedule.h, not sched.h: -Iinc would hide the system <sched.h> that cblas.h includes.) */
/* sched: pipeline schedules as data, and one executor. A schedule is the
 * ordered list of forward and backward micro-batch tasks one pipeline stage
 * runs (1F1B, GPipe, or one a search produced); sched_run plays such a list
 * on a model shard through caller-supplied forward/backward callbacks, giving
 * every micro-batch in flight its own activation slot. The stage-to-stage
 * traffic is the model's own (gpt_forward receives from stage p-1 and sends
 * to p+1, the backward the other way), so a schedule is correct when each
 * stage's list respects those dependencies; the executor only checks that a
 * slot is never reused before its micro-batch's backward. */
#ifndef RLFUSE_SCHED_H
#define RLFUSE_SCHED_H

#include "model.h"

enum { SCHED_F = 0, SCHED_B = 1 };

typedef struct {
  int kind; /* SCHED_F or SCHED_B */
  int mb;   /* micro-batch index, 0..m-1 */
} SchedTask;

/* 1F1B order of stage p of pp for m micro-batches: min(pp-p-1, m) warm-up
 * forwards, then one forward / one backward alternately, then the remaining
 * backwards. tasks has room for 2m; *nslots gets the most micro-batches in
 * flight on the stage (min(pp-p, m)): the activation slots it needs. */
PetscErrorCode sched_1f1b(int pp, int p, int m, SchedTask *tasks, int *nslots);
/* GPipe: all m forwards, then all m backwards (in forward order, so the
 * pipeline drains like 1F1B's); needs m slots on every stage. */
PetscErrorCode sched_gpipe(int pp, int p, int m, SchedTask *tasks, int *nslots);
/* Checks one stage's list: every micro-batch 0..m-1 has one forward and one
 * later backward, forwards in micro-batch order 0, 1, 2, ... and backwards
 * too (see sched_run); *inflight (may be NULL) gets the most in flight. */
PetscErrorCode sched_check(const SchedTask *tasks, int ntasks, int m, int *inflight);

/* A task's work on micro-batch mb. forward must call gpt_forward for mb and,
 * on the last stage, take the head's output (gpt_logprobs_dist or
 * gpt_values_get), compute the loss and keep d loss / d output for mb;
 * backward calls gpt_backward_logprob or gpt_backward_values for mb (on a
 * stage before the last their target/gradient arguments are unused and may
 * be NULL). Both run with mb's activation slot selected. */
typedef PetscErrorCode (*SchedFn)(void *ctx, GPT *gpt, int mb);

/* Runs the tasks in order on this rank's shard: makes sure the model has
 * nslots activation slots, selects slot mb % nslots for each task, and
 * errors if a forward would reuse a slot whose micro-batch has not had its
 * backward yet (or a backward finds its slot holding another micro-batch).
 * Gradients accumulate as the callbacks leave them; slot 0 is selected at
 * the end (also after an error). Every rank of the shard's pipeline runs its
 * own stage's list. The model's stage-to-stage messages carry one tag per
 * direction and no micro-batch index, so they match by MPI's in-order
 * delivery: every stage must run its forwards in the same micro-batch order
 * and its backwards too. sched_run enforces the order 0, 1, 2, ... for each
 * kind (an error otherwise); the interleaving of F and B is free. */
PetscErrorCode sched_run(GPT *gpt, const SchedTask *tasks, int ntasks, int nslots, SchedFn forward, SchedFn backward, void *ctx);

#endif
