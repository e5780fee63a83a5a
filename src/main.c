/* rlfuse: RLHF training for large language models, driven by input decks.
 *
 *   mpiexec -n N bin/rlfuse -options_file input/NAME.deck [-option value ...]
 *
 * The deck is a PETSc options file; the command line overrides it. -mode
 * selects the job; -help lists every option of every module. */
#include "actorcritic.h"
#include "ppo.h"
#include "jobs.h"
#include "profile.h"
#include "realloc.h"
#include "search.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char usage[] = "rlfuse: RLHF training for large language models (SFT, reward modelling, PPO) in C and MPI.\n"
                           "Decks are PETSc options files: bin/rlfuse -options_file input/quickstart.deck [-option value ...].\n"
                           "Misspelled or unused options are errors. -dry_run checks a deck and its memory needs, then exits.\n\n";

typedef enum { MODE_SFT, MODE_SCORE, MODE_DATA, MODE_RM, MODE_PPO, MODE_PIPELINE, MODE_PLAN, MODE_SCHEDULE, MODE_PROFILE } RunMode;
static const char *const mode_names[] = {"sft", "score", "data", "rm", "ppo", "pipeline", "plan", "schedule", "profile", "RunMode", "MODE_", NULL};
static const char *const device_names[] = {"cpu", "cuda", "Device", "DEVICE_", NULL};
static const char *const precision_names[] = {"fp32", "bf16", "Precision", "PRECISION_", NULL};

static PetscErrorCode rlfuse_main(void)
{
  RunCtx         run;
  PetscInt       mode = MODE_SFT, device = 0, precision = 0;
  PetscBool      help;
  const Backend *be;

  PetscFunctionBegin;
  PetscCall(sys_log_register());
  PetscCall(comm_setup());
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "rlfuse job", NULL);
  RfOptEnum("-mode", "Job to run: sft, rm, ppo, pipeline (SFT then RM then PPO), score, data, plan (execution-plan search: -plan_ranks, -plan_output), schedule (fused actor-critic schedule search), profile (measure this machine's costs for the cost model)", mode_names, 9, &mode);
  RfOptEnum("-device", "Device for tensor work", device_names, 2, &device);
  RfOptEnum("-precision", "Arithmetic of matmuls and activations on -device cuda (bf16: bf16 operands, fp32 master weights and optimizer state)", precision_names, 2,
            &precision);
  PetscOptionsEnd();
  PetscCall(sys_run_setup(PETSC_COMM_WORLD, &run));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) { /* every module prints its options, then stop */
    PetscCall(sft_run(&run, NULL));
    PetscCall(rm_run(&run, NULL));
    PetscCall(ppo_run(&run, NULL));
    PetscCall(score_run(&run, NULL));
    PetscCall(data_run(&run));
    PetscCall(ac_schedule_run(&run));
    PetscCall(search_mode_run(&run, PETSC_TRUE));
    PetscCall(profile_run(&run, NULL));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (mode == MODE_PLAN) { /* a search over estimates: no model, no device */
    PetscCall(search_mode_run(&run, PETSC_FALSE));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (mode == MODE_SCHEDULE) { /* no model, no device */
    PetscCall(ac_schedule_run(&run));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (!run.dry_run && mode != MODE_SCORE && mode != MODE_DATA && mode != MODE_PROFILE) PetscCall(sys_used_deck_at(&run)); /* score and data write named files, not an output directory */
  PetscCall(backend_setup(device_names[device], precision == 1 ? PETSC_TRUE : PETSC_FALSE, &be));
  PetscCall(comm_use_backend(be)); /* before any mesh: on cuda the meshes' communicators get NCCL */
  switch ((RunMode)mode) {
  case MODE_SFT: PetscCall(sft_run(&run, be)); break;
  case MODE_SCORE: PetscCall(score_run(&run, be)); break;
  case MODE_RM: PetscCall(rm_run(&run, be)); break;
  case MODE_PPO: PetscCall(ppo_run(&run, be)); break;
  case MODE_PIPELINE: PetscCall(pipeline_run(&run, be)); break;
  case MODE_PROFILE: PetscCall(profile_run(&run, be)); break;
  default: PetscCall(data_run(&run)); break;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscErrorCode ierr;

  MPI_Init(&argc, &argv);
  { /* PETSc answers a bad deck with a traceback: check decks first, one line */
    char msg[1024];
    int  rank;

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (sys_decks_check(argc, argv, msg, sizeof msg)) {
      if (rank == 0) fprintf(stderr, "rlfuse: error: %s\n", msg);
      MPI_Finalize();
      return 1;
    }
  }
  ierr = PetscInitialize(&argc, &argv, NULL, usage);
  if (ierr) return 1;
  ierr = sys_error_handler_install();
  if (!ierr) ierr = rlfuse_main();
  if (!ierr) ierr = realloc_cache_destroy();
  if (!ierr) ierr = comm_teardown();
  if (ierr) sys_error_exit(ierr);
  ierr = PetscFinalize();
  MPI_Finalize();
  return ierr ? 1 : 0;
}
