/* rlfuse: RLHF training for large language models, driven by input decks.
 *
 *   mpiexec -n N bin/rlfuse -options_file input/NAME.deck [-option value ...]
 *
 * The deck is a PETSc options file; the command line overrides it. -mode
 * selects the job; -help lists every option of every module. */
#include "jobs.h"
#include "io.h"
#include "realloc.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "rlfuse: RL post-training for large language models (SFT, reward models, PPO, GRPO, RLOO, REINFORCE++,\n"
    "synchronous or asynchronous) in C and MPI.\n"
    "Decks are PETSc options files: bin/rlfuse -options_file input/quickstart.deck [-option value ...].\n"
    "Misspelled or unused options are errors. -dry_run checks a deck and its memory needs, then exits.\n\n";

static const char *const device_names[] = {"cpu", "cuda", "Device", "DEVICE_", NULL};
static const char *const precision_names[] = {"fp32", "bf16", "Precision", "PRECISION_", NULL};

/* -help: every mode prints its options (-mode pipeline's are its stages', -mode eval's ppo's). */
static PetscErrorCode rlfuse_help(RunCtx *run)
{
  TrainJobOptions job;

  PetscFunctionBegin;
  PetscCall(train_job_options(&job));
  for (int k = 0; k < job_nmodes; k++) {
    const JobMode *m = &job_modes[k];
    void          *o;
    PetscBool      stages;

    PetscCall(PetscStrcmp(m->name, "pipeline", &stages));
    if (!stages) PetscCall(PetscStrcmp(m->name, "eval", &stages)); /* eval's options are ppo's */
    if (stages) continue;
    if (!m->options) {
      PetscCall(m->execute(run, NULL, NULL));
      continue;
    }
    PetscCall(PetscCalloc(m->size, &o));
    PetscCall(m->options(&job, o));
    PetscCall(PetscFree(o));
  }
  PetscCall(sys_help_print(run->comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One mode's lifecycle: its options (the lifecycle's read once), no unused
 * option, the file options' roles, the output directory, the backend, the
 * run (which checks first). */
static PetscErrorCode rlfuse_mode(RunCtx *run, const JobMode *m, const char *device, PetscBool bf16)
{
  TrainJobOptions job;
  const Backend  *be = NULL;
  void           *o  = NULL;

  PetscFunctionBegin;
  if (m->options) {
    PetscCall(train_job_options(&job));
    PetscCall(PetscCalloc(m->size, &o));
    PetscCall(m->options(&job, o));
    PetscCall(sys_options_check_unused());
  }
  /* the modes without options here read theirs in execute: checked before it all the same */
  PetscCall(io_files_check(run->comm, job_file_options, job_nfile_options, m->outdir ? run->output_dir : NULL,
                           m->outdir));
  if (!run->dry_run && m->outdir) PetscCall(sys_used_deck_at(run));
  if (m->device) {
    PetscCall(backend_setup(device, bf16, &be));
    PetscCall(comm_use_backend(be)); /* before any mesh: on cuda the meshes' communicators get NCCL */
    run->be = be;
  }
  PetscCall(m->execute(run, be, o));
  PetscCall(PetscFree(o));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rlfuse_main(void)
{
  RunCtx      run;
  PetscInt    mode = 0, device = 0, precision = 0;
  PetscReal   tile_mb = MODEL_LOGITS_TILE_MB;
  PetscBool   help;
  const char *names[32]; /* the table's names, then PETSc's enum suffix */

  PetscFunctionBegin;
  PetscCheck(job_nmodes + 3 <= 32, PETSC_COMM_WORLD, PETSC_ERR_PLIB, "%d modes: raise names[] in rlfuse_main",
             job_nmodes);
  for (int k = 0; k < job_nmodes; k++) names[k] = job_modes[k].name;
  names[job_nmodes] = "RunMode", names[job_nmodes + 1] = "MODE_", names[job_nmodes + 2] = NULL;
  PetscCall(sys_log_register());
  PetscCall(comm_setup());
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscCall(sys_help_begin());
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "rlfuse job", NULL);
  RfOptEnum("-mode",
            "Job to run: sft, rm, ppo, pipeline (SFT then RM then PPO), score, data, generate (responses to a prompt "
            "file), eval (accuracy, pass@k and reward of -actor_checkpoint on held-out prompts), plan (execution-plan "
            "search: -plan_ranks, -plan_output), schedule (fused actor-critic schedule optimizer), profile (measure "
            "this machine's costs for the cost model)",
            names, job_nmodes, &mode);
  RfOptEnum("-device", "Device for tensor work", device_names, 2, &device);
  RfOptEnum("-precision",
            "Arithmetic of matmuls and activations on -device cuda (bf16: bf16 operands, fp32 master weights and "
            "optimizer state)",
            precision_names, 2, &precision);
  RfOptReal("-logits_tile_mb",
            "MiB of LM-head logits (rows of the whole vocabulary) a training or scoring forward holds at once; a batch "
            "of more rows runs the head tile by tile, computing each tile again in the backward (0: all rows at once)",
            MODEL_LOGITS_TILE_MB, &tile_mb);
  PetscOptionsEnd();
  PetscCall(model_set_logits_tile_mb((double)tile_mb));
  PetscCall(sys_run_setup(PETSC_COMM_WORLD, &run));
  if (help) PetscCall(rlfuse_help(&run));
  else PetscCall(rlfuse_mode(&run, &job_modes[mode], device_names[device], precision == 1 ? PETSC_TRUE : PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscErrorCode ierr;

  sys_blas_core_select(argv); /* may execute rlfuse again, before MPI starts */
  MPI_Init(&argc, &argv);
  { /* PETSc answers a bad deck with a traceback: check decks first, one line */
    char msg[1024];
    int  rank;

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (sys_decks_check(argc, argv, msg, sizeof msg, rank == 0 ? stdout : NULL)) {
      if (rank == 0) fprintf(stderr, "rlfuse: error: %s\n", msg);
      MPI_Finalize();
      return 1;
    }
  }
  sys_help_capture(argc, argv);
  ierr = PetscInitialize(&argc, &argv, NULL, usage);
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  sys_stop_install(); /* after PETSc's handlers: SIGINT and SIGTERM checkpoint and stop */
  if (!ierr) ierr = rlfuse_main();
  if (!ierr) ierr = realloc_cache_destroy();
  if (!ierr) ierr = comm_teardown();
  if (ierr) sys_error_exit(ierr);
  ierr = PetscFinalize();
  MPI_Finalize();
  return ierr ? 1 : 0;
}
