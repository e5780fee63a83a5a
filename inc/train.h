/* train: the training step of every trained model (-mode sft on the
 * sft_train call, -mode rm on rm_train, PPO's actor and critic on
 * actor_train and critic_train), and checkpoints of models placed on meshes.
 *
 * SFT, RM and PPO share one training step: trainer_split, trainer_pass,
 * trainer_step. A step over B sequences gives dp replica d the rows
 * [B*d/dp, B*(d+1)/dp) (exec_rows) and splits them into micro-batches that
 * run through a pipeline schedule (1F1B unless -train_schedule says gpipe)
 * on the pipeline stages. The caller's forward computes its loss on
 * the last stage with weights over the whole batch (1/ntokens of the batch,
 * not of the replica's share), so the dp all-reduce of the gradients gives
 * the gradient of the one-rank step. Values the last stages accumulate are
 * summed over the trainer's ranks after the pass. */
#ifndef RLFUSE_TRAIN_H
#define RLFUSE_TRAIN_H

#include "exec.h"
#include "io.h"
#include "plan.h"
#include "schedule.h"

/* The pipeline schedule of a training pass (-train_schedule): any schedule
 * gives the same gradients, since every micro-batch keeps its own state
 * between its forward and its backward; GPipe holds all micro-batches'
 * activations at once, 1F1B at most pp of them. */
typedef enum { TRAIN_SCHED_1F1B = 0, TRAIN_SCHED_GPIPE = 1 } TrainSched;

typedef struct {
  DModel    *dm;     /* the trained model on its call's mesh; dm->lm is NULL off the mesh */
  DModel     own;    /* dm's storage when trainer_create made the model */
  int        mbs;    /* micro-batches per replica from the plan (0: see trainer_split) */
  size_t     bucket; /* bytes per reallocation message when gathering */
  TrainSched sched;
  Comm red; /* the ranks that call the trainer together: the world (trainer_create) or the mesh (trainer_attach) */
} Trainer;

/* This replica's share of a pass over B sequences: rows [b0, b1) in
 * micro-batches of `size` rows, `count` of them (0 off the mesh or for an
 * empty share). */
typedef struct {
  int b0, b1, size, count;
} MicroSplit;

/* One model's work in a pass. The callbacks follow sched_run's contract
 * (schedule.h) and must keep whatever a backward needs (its loss gradient,
 * targets) per micro-batch, indexed by the micro-batch, never in a buffer
 * the next forward overwrites: forward(k) and backward(k) may then be
 * separated by any other tasks, of this model or of another, and a pass
 * runs under any schedule. The values the callbacks accumulate on the last
 * stage, acc[0..nacc), are summed over the trainer's ranks after the pass
 * (trainer_sum_heads). */
typedef struct {
  SchedFn forward, backward; /* backward NULL: an evaluation pass (forwards only) */
  void   *ctx;
  double *acc;
  int     nacc;
} TrainWork;

/* Reads -train_schedule (1f1b or gpipe) into *sched; every mode that
 * trains calls it from its option reading. */
PetscErrorCode trainer_options(TrainSched *sched);
/* The plan's needs when the only call is `call` (training cfg on batches of
 * `batch` sequences): checked before any work, and printed when print is
 * true. */
PetscErrorCode trainer_plan_check(const RunCtx *run, const Plan *plan, MFCId call, const ModelConfig *cfg, int batch,
                                  PetscBool print, PlanNeeds *needs);
/* Parameters of the whole model of cfg. */
PetscErrorCode trainer_count(const ModelConfig *cfg, size_t *nparams);
/* A trainer that owns its model (SFT, RM): every rank of the world calls
 * its passes and steps; ranks off the mesh contribute nothing and receive
 * the sums, so every rank prints and records the same numbers. */
PetscErrorCode trainer_create(const char *name, const ModelConfig *cfg, const Backend *be, const Plan *plan, MFCId call,
                              TrainSched sched, Trainer *tr);
/* A trainer on a model placed elsewhere (PPO's actor and critic): only the
 * members of dm's mesh call its passes and steps, and the sums run over
 * that mesh. */
void           trainer_attach(DModel *dm, const Plan *plan, MFCId call, TrainSched sched, Trainer *tr);
PetscErrorCode trainer_destroy(Trainer *tr);
/* This rank's share of B sequences in the plan's micro-batches
 * (-<call>_mbs); when the plan gives none, micro-batches of `size`
 * sequences (0: the whole share in one). */
void trainer_split(const Trainer *tr, int B, int size, MicroSplit *s);
/* Micro-batch k of the split: its first row and row count. */
static inline void trainer_micro(const MicroSplit *s, int k, int *r0, int *n)
{
  *r0 = s->b0 + k * s->size;
  *n  = PetscMin(s->size, s->b1 - *r0);
}
/* This rank's stage's task list for the split under the trainer's schedule
 * (2 * s->count tasks, PetscFree them) and the activation slots it needs.
 * Lists of several models can be merged by a caller that runs them. */
PetscErrorCode trainer_schedule(const Trainer *tr, const MicroSplit *s, SchedTask **tasks, int *nslots);
/* One pass of the split's micro-batches on this rank's shard. With a
 * backward, the gradients are zeroed first and accumulate over the
 * micro-batches in the trainer's schedule; without, the forwards run in
 * order (evaluation). Then w->acc is summed over the trainer's ranks
 * (trainer_sum_heads). The shard's part is a no-op off the mesh. */
PetscErrorCode trainer_pass(Trainer *tr, const MicroSplit *s, const TrainWork *w);
/* v[0..n) summed over the trainer's ranks, counting only replica heads
 * (last stage, tp rank 0): the values a pass accumulated on its last stages. */
PetscErrorCode trainer_sum_heads(const Trainer *tr, double *v, int n);
/* The optimizer step after a pass. The loss and then the gradient norm are
 * checked before anything changes: when either is not finite the run stops
 * with "<what> loss|gradient norm is <value> at <at>", the weights, moments
 * and step count untouched (so the last checkpoint is intact). lr and the
 * gradient norm come back on every rank of the trainer. */
PetscErrorCode trainer_step(Trainer *tr, const AdamWConfig *opt, const char *what, const char *at, double loss,
                            PetscReal *lr, PetscReal *gnorm);

/* A restart: the model with its AdamW state from the checkpoint's /<name>
 * group (the trainer's name is its role), and the run state, which must not
 * be past `steps` (opt names that option in the error). */
PetscErrorCode trainer_restart(Trainer *tr, const RunCtx *run, const char *path, PetscInt steps, const char *opt,
                               CkptState *st);
/* The model with its AdamW state written to <output_dir>/name under its role. */
PetscErrorCode trainer_checkpoint(Trainer *tr, const RunCtx *run, const char *name, const CkptState *st,
                                  RunRecord *rec);

/* Models on meshes written to <output_dir>/name: each member writes its
 * shard of the full tensors (ckpt_write), so the file does not depend on
 * the layout. cm[k] gives the role and whether the AdamW state is written;
 * its other fields are ignored, and so is bucket (kept for callers).
 * Collective on the world; rec (may be NULL) gets the time. */
PetscErrorCode train_checkpoint_models(const RunCtx *run, DModel *const *dm, const CkptModel *cm, int n,
                                       const char *name, const CkptState *st, size_t bucket, RunRecord *rec);
/* The same, plus src (may be NULL): a frozen model recorded by its input
 * file instead of written, and carry (may be NULL): what the file holds
 * beyond the models (ckpt_write_sourced). */
PetscErrorCode train_checkpoint_sourced(const RunCtx *run, DModel *const *dm, const CkptModel *cm, int n,
                                        const char *name, const CkptState *st, const CkptSource *src,
                                        const CkptCarry *carry, RunRecord *rec);

/* ---- the job lifecycle of SFT, RM and PPO (src/train/job.c) ------------ */
/* What the training jobs read once (in -mode pipeline once for all three
 * stages): -checkpoint_every, the interval of every stage without its own,
 * -restart (a file, or latest), and the execution plan (plan_from_options:
 * -placement, -<call>_*, the fusion options -fuse_*), which each stage
 * copies. */
typedef struct {
  PetscInt  every;
  PetscReal minutes; /* -checkpoint_minutes: a checkpoint after the step that ends that much wall time after the last */
  char      restart[PETSC_MAX_PATH_LEN];
  Plan     plan;
} TrainJobOptions;
PetscErrorCode train_job_options(TrainJobOptions *j);
/* "-restart latest" (src/train/restart.c): when restart is "latest", replaces
 * it with the newest readable checkpoint (ckpt_<n>.h5 or final.h5, by
 * /state@iteration) in dir, or with "" (a fresh start) when there is none;
 * any other value is kept. Collective; says on stdout what it picked. */
PetscErrorCode train_restart_resolve(MPI_Comm comm, const char *dir, char *restart, size_t len);
/* The file options it reads (-restart), for io_files_check. */
extern const IoFileOption train_file_options[];
/* Only -checkpoint_every and -restart (j->plan untouched): for describing
 * the job to the cost model, which plans it for other ranks. */
PetscErrorCode train_job_checkpoint_options(TrainJobOptions *j);
/* The stage's own interval -<stage>_checkpoint_every (default j->every)
 * and the wall-time one (j->minutes); unit names what it counts ("step",
 * "iteration"). */
PetscErrorCode train_stage_checkpoint_every(const TrainJobOptions *j, const char *stage, const char *unit,
                                            PetscInt *every, PetscReal *minutes);
/* A checkpoint is due after step (or iteration) n of a stage with interval every. */
PetscBool      train_checkpoint_due(PetscInt every, PetscInt n);
/* After step or iteration n of a stage: whether a checkpoint is due (every
 * n steps, `minutes` of wall time after *last, which it then resets, or a
 * stop) and the stop signal any rank got (0: none). Collective on comm. A
 * stage that gets a stop writes that checkpoint (its record's row after
 * it), cleans up and returns train_stopped: one line naming the signal,
 * the checkpoint and how to go on, and the run's status 128 + signal. */
PetscErrorCode train_checkpoint_now(MPI_Comm comm, PetscInt every, PetscReal minutes, PetscInt n, double *last,
                                    PetscBool *due, int *stop);
PetscErrorCode train_stopped(const RunCtx *run, int sig, const char *stage, const char *unit, PetscInt n,
                             const char *ckpt);
/* One line at a stage's end: where its files went (files: "final.h5 (the
 * checkpoint) and run.h5"), so that a user need not look for them. */
PetscErrorCode train_said_written(const RunCtx *run, const char *stage, const char *files);
/* The stage's run record (record_open; from_step: the restart's step, 0 for
 * a fresh start) with its plan (plan_record). */
PetscErrorCode train_record_open(const RunCtx *run, const char *mode, PetscInt from_step, const Plan *plan,
                                 const PlanNeeds *needs, RunRecord **rec);

#endif
