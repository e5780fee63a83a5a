/* (Named schedule.h, not sched.h: -Iinc would hide the system <sched.h> that cblas.h includes.) */
/* sched: pipeline schedules as data, and one executor. A schedule is the
 * ordered list of forward and backward micro-batch tasks one pipeline stage
 * runs (1F1B, GPipe, or one a search produced, e.g. src/actorcritic); sched_run
 * plays such a list on a model shard through caller-supplied
 * forward/backward callbacks, giving every micro-batch in flight its own
 * activation slot. The stage-to-stage traffic is the model's own
 * (model_forward receives from stage p-1 and sends to p+1, the backward the
 * other way), tagged by model and micro-batch, so a schedule is correct when
 * the stages' lists together respect those dependencies (no stage waits
 * forever); the order of micro-batches may differ from stage to stage. */
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
 * later backward, in any order; *inflight (may be NULL) gets the most in
 * flight. (Whether the stages' lists together deadlock is not checked here:
 * src/actorcritic replays whole schedules.) */
PetscErrorCode sched_check(const SchedTask *tasks, int ntasks, int m, int *inflight);

/* A task's work on micro-batch mb. forward must call model_forward for mb and,
 * on the last stage, take the head's output (model_logprobs_dist or
 * model_values_get), compute the loss and keep d loss / d output for mb;
 * backward calls model_backward_logprob or model_backward_values for mb (on a
 * stage before the last their target/gradient arguments are unused and may
 * be NULL). Both run with mb's activation slot selected. */
typedef PetscErrorCode (*SchedFn)(void *ctx, Model *lm, int mb);

/* Runs the tasks in order on this rank's shard: makes sure the model has
 * nslots activation slots; a forward takes a free slot, its backward finds
 * it again (a slot map, so micro-batches may come in any order); errors if
 * a forward finds no free slot or its micro-batch already in flight, or a
 * backward's micro-batch is not in flight. Before each task the shard's
 * message ids are set to (its model id, the task's micro-batch)
 * (model_msg_ids), so every stage's messages pair with the right micro-batch
 * of the right model. Gradients accumulate as the callbacks leave them;
 * slot 0 and micro-batch 0 are selected at the end (also after an error).
 * Every rank of the shard's pipeline runs its own stage's list. */
PetscErrorCode sched_run(Model *lm, const SchedTask *tasks, int ntasks, int nslots, SchedFn forward, SchedFn backward,
                         void *ctx);

/* Several models' tasks on this rank, interleaved in one list (a fused
 * schedule, src/actorcritic): each model keeps its own shard, slots, callbacks and
 * message model id (lm->msg_model, so the models' messages never pair
 * across models); task.model indexes models. sched_run is this with one
 * model. A model whose lm is NULL has no tasks on this rank. */
typedef struct {
  Model  *lm;
  int     nslots;
  SchedFn forward, backward;
  void   *ctx;
} SchedModel;
typedef struct {
  int model, kind, mb;
} SchedMTask;
PetscErrorCode sched_run_models(const SchedModel *models, int nmodels, const SchedMTask *tasks, int ntasks);

#endif
