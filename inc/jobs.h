/* jobs: the modes of the driver (-mode sft, rm, ppo, pipeline, score, data):
 * their options and entry points. PPO is a module of its own (inc/ppo.h). */
#ifndef RLFUSE_JOBS_H
#define RLFUSE_JOBS_H

#include "task.h"
#include "rl.h"
#include "plan.h"
#include "train.h"
#include "ppo.h"

/* ---- jobs --------------------------------------------------------------- */
/* Each job reads its options (X_options), which -help also uses, then runs
 * (X_execute); -mode pipeline reads all three before running any. The
 * checkpoint options all three share are read once (TrainJobOptions). */
typedef struct {
  PetscInt    steps, batch, seq_len, checkpoint_every, eval_every, eval_batches;
  PetscReal   checkpoint_minutes; /* -checkpoint_minutes (src/train/job.c) */
  char        data[PETSC_MAX_PATH_LEN], restart[PETSC_MAX_PATH_LEN], init[PETSC_MAX_PATH_LEN];
  ModelConfig cfg;
  AdamWConfig opt;
  BuiltinTask    task;
  Plan        plan; /* the sft_train call's mesh and micro-batches */
  TrainSched  sched; /* of the training passes (-train_schedule) */
} SFTOptions;
PetscErrorCode sft_options(const TrainJobOptions *job, SFTOptions *o);
PetscErrorCode sft_execute(const RunCtx *run, const Backend *be, SFTOptions *o);
/* Every check of the stage that needs no other stage's output, without
 * output: -mode pipeline runs the three before any work. */
PetscErrorCode sft_check_stage(const RunCtx *run, SFTOptions *o);
/* -mode plan: the sft_train call's model, batch and sequence length as
 * -mode sft reads and checks them (help: only register the options). */
PetscErrorCode sft_cost_stage(const RunCtx *run, PetscBool help, CostTrainStage *st);

typedef struct {
  PetscInt    steps, batch, pairs, eval_pairs, eval_every, checkpoint_every;
  PetscReal   checkpoint_minutes; /* -checkpoint_minutes (src/train/job.c) */
  PetscReal   bt_beta;
  char        sft[PETSC_MAX_PATH_LEN], data[PETSC_MAX_PATH_LEN], restart[PETSC_MAX_PATH_LEN];
  AdamWConfig opt;
  BuiltinTask    task;
  GenConfig   gen;
  Plan        plan; /* the rm_train call's mesh and micro-batches */
  TrainSched  sched; /* of the training passes (-train_schedule) */
} RMOptions;
PetscErrorCode rm_options(const TrainJobOptions *job, RMOptions *o);
PetscErrorCode rm_execute(const RunCtx *run, const Backend *be, RMOptions *o);
/* The RM stage's checks for an SFT model of architecture cfg (the -policy_
 * options in -mode pipeline, where its checkpoint does not exist yet); with
 * print, the plan and the dry-run summary are printed. */
PetscErrorCode rm_check_stage(const RunCtx *run, RMOptions *o, const ModelConfig *cfg, PetscBool print);
/* -mode plan: the rm_train call's model (the SFT model policy with a scalar
 * head; NULL: -rm_sft_checkpoint's), pairs per step and row length as
 * -mode rm reads and checks them (help: only register the options). */
PetscErrorCode rm_cost_stage(const RunCtx *run, PetscBool help, const ModelConfig *policy, CostTrainStage *st);

/* SFT, then RM from the SFT checkpoint, then PPO from both (-mode
 * pipeline): every stage's options are read before any stage runs. */
typedef struct {
  SFTOptions sft;
  RMOptions  rm;
  PPOOptions ppo;
} PipelineOptions;
PetscErrorCode pipeline_options(const TrainJobOptions *job, PipelineOptions *p);
PetscErrorCode pipeline_execute(const RunCtx *run, const Backend *be, PipelineOptions *p);
/* -mode plan: the job of the deck (the -mode it overrides, sys_decks_mode_under):
 * PPO's calls for ppo, eval, pipeline or none, and the training stages of
 * pipeline (sft_train, rm_train), sft or rm (CostJobFn). */
PetscErrorCode plan_cost_job(const RunCtx *run, PetscBool help, CostJob *job);

/* Modes that read their own options when they run (and stop there under -help). */
PetscErrorCode score_run(const RunCtx *run, const Backend *be);
/* -mode generate: responses to a prompt file on the actor_gen call's plan. */
PetscErrorCode generate_run(const RunCtx *run, const Backend *be);
PetscErrorCode data_run(const RunCtx *run);
/* The file options each job reads (IoFileOption), beside its reading of them. */
extern const IoFileOption sft_file_options[], rm_file_options[], score_file_options[], generate_file_options[],
  data_file_options[];

/* ---- the modes as a table (src/jobs/modes.c), which main.c loops over ----- */
/* A mode's options are read into a struct of `size` bytes (zeroed first),
 * with the lifecycle options read once before (train_job_options); -help
 * reads every mode's. A mode without options (size 0) reads its own when it
 * executes, and stops after reading them under -help. A mode checks its
 * options in execute, before it writes anything. device: the mode needs the
 * backend; outdir: the files it writes into its output directory (shell
 * patterns, NULL-terminated; besides used.deck), NULL when it writes none. */
typedef struct {
  const char        *name;
  PetscBool          device;
  const char *const *outdir;
  size_t      size;
  PetscErrorCode (*options)(const TrainJobOptions *job, void *o);
  PetscErrorCode (*execute)(RunCtx *run, const Backend *be, void *o);
} JobMode;
extern const JobMode job_modes[];
extern const int     job_nmodes;
/* Every module's file options, which main.c has io_files_check check. */
extern const IoFileOption *const job_file_options[];
extern const int                 job_nfile_options;

#endif
