/* job.c: the lifecycle that SFT, RM and PPO share, written once: the
 * options read once even when -mode pipeline runs three stages (the
 * checkpoint options -checkpoint_every, -checkpoint_minutes and -restart,
 * and the execution plan with its fusion options -fuse_gen_inf,
 * -fuse_train, ...), each stage's own checkpoint interval, when a
 * checkpoint is due (steps, wall time, or a stop on SIGINT or SIGTERM),
 * the stop's line, and the stage's run record with its plan. */
#include "train.h"
#include <signal.h>

/* -restart latest names no file: the newest checkpoint is found later. The
 * restart file may be one the run writes (its final.h5, a checkpoint): it is
 * read before any is. */
const IoFileOption train_file_options[] = {
  {"-restart", IO_FILE_RESTART, "latest", NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

PetscErrorCode train_job_checkpoint_options(TrainJobOptions *j)
{
  PetscFunctionBegin;
  j->every      = 0;
  j->minutes    = 30;
  j->restart[0] = '\0';
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Checkpoints", NULL);
  RfOptInt("-checkpoint_every", "Checkpoint interval of every stage without its own -<stage>_checkpoint_every", 0,
           &j->every);
  RfOptReal("-checkpoint_minutes",
            "Also a checkpoint after the step or iteration that ends this many minutes of wall time after the stage's "
            "start or its last checkpoint, so that a long run stopped by a kill loses at most that (0: off)",
            j->minutes, &j->minutes);
  RfOptString("-restart",
              "Resume from this checkpoint of the mode's stage (its models with their optimizer state, step or "
              "iteration, data position, RNG key); latest: the newest in -output_dir, or a fresh start",
              j->restart, sizeof j->restart);
  PetscOptionsEnd();
  PetscCheck(j->minutes >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-checkpoint_minutes %g must be >= 0 (0: off)", (double)j->minutes);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode train_job_options(TrainJobOptions *j)
{
  int world;

  PetscFunctionBegin;
  PetscCall(train_job_checkpoint_options(j));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &world));
  PetscCall(plan_from_options(world, &j->plan));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode train_stage_checkpoint_every(const TrainJobOptions *j, const char *stage, const char *unit,
                                            PetscInt *every, PetscReal *minutes)
{
  char prefix[32], help[160];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(prefix, sizeof prefix, "%s_", stage));
  PetscCall(PetscSNPrintf(help, sizeof help,
                          "Write <output_dir>/ckpt_<%s>.h5 every N %ss (0: only final.h5; default: -checkpoint_every)",
                          unit, unit));
  *every   = j->every;
  *minutes = j->minutes;
  PetscOptionsBegin(PETSC_COMM_WORLD, prefix, "Checkpoints", NULL);
  RfOptInt("-checkpoint_every", help, j->every, every);
  PetscOptionsEnd();
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscBool train_checkpoint_due(PetscInt every, PetscInt n)
{
  return (PetscBool)(every > 0 && n % every == 0);
}

PetscErrorCode train_checkpoint_now(MPI_Comm comm, PetscInt every, PetscReal minutes, PetscInt n, double *last,
                                    PetscBool *due, int *stop)
{
  int mine[2] = {sys_stop_signal(), minutes > 0 && sys_wtime() - *last >= 60.0 * minutes}, all[2];

  PetscFunctionBegin;
  PetscCallMPI(sys_mpi_allreduce(mine, all, 2, MPI_INT, MPI_MAX, comm)); /* one clock's word is enough */
  *stop = all[0];
  *due  = (PetscBool)(train_checkpoint_due(every, n) || all[0] || all[1]);
  if (*due) *last = sys_wtime();
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode train_stopped(const RunCtx *run, int sig, const char *stage, const char *unit, PetscInt n,
                             const char *ckpt)
{
  PetscFunctionBegin;
  SETERRQ(run->comm, PETSC_ERR_SIG,
          "%s stopped by %s after %s %" PetscInt_FMT
          ": checkpoint %s/%s written; to go on, run the same command with -restart latest",
          stage,
          sig == SIGTERM  ? "SIGTERM"
          : sig == SIGINT ? "SIGINT"
                          : "a signal",
          unit, n, run->output_dir, ckpt);
}

PetscErrorCode train_said_written(const RunCtx *run, const char *stage, const char *files)
{
  PetscFunctionBegin;
  PetscCall(PetscPrintf(run->comm, "%s: wrote %s in %s\n", stage, files, run->output_dir));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode train_record_open(const RunCtx *run, const char *mode, PetscInt from_step, const Plan *plan,
                                 const PlanNeeds *needs, RunRecord **rec)
{
  PetscFunctionBegin;
  PetscCall(record_open(run, mode, from_step, rec));
  PetscCall(plan_record(*rec, plan, needs));
  PetscFunctionReturn(PETSC_SUCCESS);
}
