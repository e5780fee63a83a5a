/* train: one model trained on its call's mesh (-mode sft on the
 * sft_train call, -mode rm on rm_train), and checkpoints of models placed on
 * meshes (also PPO's).
 *
 * A step over B sequences gives dp replica d the rows [B*d/dp, B*(d+1)/dp)
 * (exec_rows) and splits them into micro-batches that run through the 1F1B
 * schedule on the pipeline stages. The caller's forward computes its loss on
 * the last stage with weights over the whole batch (1/ntokens of the batch,
 * not of the replica's share), so the dp all-reduce of the gradients gives
 * the gradient of the one-rank step. Values the last stages accumulate are
 * summed over the world after the step, so every rank (on the mesh or not)
 * prints and records the same numbers. */
#ifndef RLFUSE_TRAIN_H
#define RLFUSE_TRAIN_H

#include "exec.h"
#include "io.h"
#include "plan.h"
#include "schedule.h"

typedef struct {
  DModel dm;       /* the model on the call's mesh; dm.gpt is NULL off the mesh */
  int    mbs;      /* micro-batches per replica from the plan (0: one) */
  size_t bucket;   /* bytes per reallocation message when gathering */
} Trainer;

/* This replica's share of a pass over B sequences: rows [b0, b1) in
 * micro-batches of `size` rows, `count` of them (0 off the mesh or for an
 * empty share). */
typedef struct {
  int b0, b1, size, count;
} MicroSplit;

/* The plan's needs when the only call is `call` (training cfg on batches of
 * `batch` sequences): checked before any work and printed. */
PetscErrorCode trainer_plan_check(const RunCtx *run, const Plan *plan, MFCId call, const GPTConfig *cfg, int batch, PlanNeeds *needs);
/* Parameters of the whole model of cfg. */
PetscErrorCode trainer_count(const GPTConfig *cfg, size_t *nparams);
PetscErrorCode trainer_create(const char *name, const GPTConfig *cfg, const Backend *be, const Plan *plan, MFCId call, Trainer *tr);
PetscErrorCode trainer_destroy(Trainer *tr);
/* This rank's share of B sequences in the plan's micro-batches (-<call>_mbs;
 * one when 0). */
void trainer_split(const Trainer *tr, int B, MicroSplit *s);
/* Micro-batch k of the split: its first row and row count. */
static inline void trainer_micro(const MicroSplit *s, int k, int *r0, int *n)
{
  *r0 = s->b0 + k * s->size;
  *n  = PetscMin(s->size, s->b1 - *r0);
}
/* Runs the split's micro-batches on this rank's shard: 1F1B with backward,
 * or forwards in order when backward is NULL (evaluation). A no-op off the
 * mesh. The forward and backward contract is sched_run's (schedule.h). */
PetscErrorCode trainer_pass(Trainer *tr, const MicroSplit *s, SchedFn forward, SchedFn backward, void *ctx);
/* v[0..n) summed over the world, counting only replica heads (last stage,
 * tp rank 0): the values a pass accumulated on its last stages. */
PetscErrorCode trainer_sum_heads(const Trainer *tr, double *v, int n);
/* The optimizer step after a pass: refused (the last checkpoint intact) when
 * loss or the gradient norm is not finite. lr and the gradient norm come
 * back on every rank of the world. what/step name the failure. */
PetscErrorCode trainer_step(Trainer *tr, const AdamWConfig *opt, const char *what, PetscInt step, double loss, PetscReal *lr, PetscReal *gnorm);

/* A restart: the model with its AdamW state from the checkpoint's /<name>
 * group (the trainer's name is its role), and the run state, which must not
 * be past `steps` (opt names that option in the error). */
PetscErrorCode trainer_restart(Trainer *tr, const RunCtx *run, const char *path, PetscInt steps, const char *opt, CkptState *st);
/* The model with its AdamW state written to <output_dir>/name under its role. */
PetscErrorCode trainer_checkpoint(Trainer *tr, const RunCtx *run, const char *name, const CkptState *st, RunRecord *rec);

/* Models on meshes written to <output_dir>/name: each is gathered whole to
 * rank 0 (reallocation to the one-rank layout) and written there, so the
 * file does not depend on the layout. cm[k] gives the role and whether the
 * AdamW state is written; its gpt field is ignored. Collective on the world;
 * rec (may be NULL) gets the time. */
PetscErrorCode train_checkpoint_models(const RunCtx *run, DModel *const *dm, const CkptModel *cm, int n, const char *name, const CkptState *st, size_t bucket, RunRecord *rec);

#endif
