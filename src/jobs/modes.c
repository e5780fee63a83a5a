/* modes.c: the driver's modes as a table (inc/jobs.h), in -mode's order:
 * the training jobs with their options read before they run, and the modes
 * that read their own options when they run. main.c loops over it. */
#include "jobs.h"
#include "ppo.h"
#include "actorcritic.h"
#include "profile.h"
#include "search.h"

static PetscErrorCode sft_opts(const TrainJobOptions *job, void *o) { return sft_options(job, (SFTOptions *)o); }
static PetscErrorCode sft_exec(RunCtx *run, const Backend *be, void *o)
{
  return sft_execute(run, be, (SFTOptions *)o);
}
static PetscErrorCode rm_opts(const TrainJobOptions *job, void *o) { return rm_options(job, (RMOptions *)o); }
static PetscErrorCode rm_exec(RunCtx *run, const Backend *be, void *o) { return rm_execute(run, be, (RMOptions *)o); }
static PetscErrorCode ppo_opts(const TrainJobOptions *job, void *o) { return ppo_options(job, (PPOOptions *)o); }
static PetscErrorCode ppo_exec(RunCtx *run, const Backend *be, void *o)
{
  return ppo_execute(run, be, (PPOOptions *)o, NULL, NULL, NULL);
}
static PetscErrorCode eval_opts(const TrainJobOptions *job, void *o)
{
  PetscFunctionBegin;
  PetscCall(ppo_options(job, (PPOOptions *)o));
  ((PPOOptions *)o)->eval_only = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}
static PetscErrorCode pipe_opts(const TrainJobOptions *job, void *o)
{
  return pipeline_options(job, (PipelineOptions *)o);
}
static PetscErrorCode pipe_exec(RunCtx *run, const Backend *be, void *o)
{
  return pipeline_execute(run, be, (PipelineOptions *)o);
}
static PetscErrorCode score_exec(RunCtx *run, const Backend *be, void *o) { return score_run(run, be); }
static PetscErrorCode data_exec(RunCtx *run, const Backend *be, void *o) { return data_run(run); }
static PetscErrorCode generate_exec(RunCtx *run, const Backend *be, void *o) { return generate_run(run, be); }
static PetscErrorCode plan_exec(RunCtx *run, const Backend *be, void *o)
{
  PetscBool help;

  PetscFunctionBegin;
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  PetscCall(search_mode_run(run, ppo_cost_deck, plan_cost_job, help));
  PetscFunctionReturn(PETSC_SUCCESS);
}
static PetscErrorCode schedule_exec(RunCtx *run, const Backend *be, void *o) { return ac_schedule_run(run); }
/* plan and profile describe the deck's PPO job by its settings and its
 * models as the run would read them (ppo_cost_deck) */
static PetscErrorCode profile_exec(RunCtx *run, const Backend *be, void *o) { return profile_run(run, ppo_cost_deck); }

/* What each mode writes into -output_dir (shell patterns), so that no input
 * of the run is one of them: an -actor_checkpoint that is the run's own
 * policy.h5 was overwritten, and it was the reference too. */
static const char *const trainer_files[] = {"final.h5", "ckpt_*.h5", "run.h5", NULL};
static const char *const ppo_files[]     = {"final.h5",  "policy.h5",   "ckpt_*.h5", "run.h5",
                                            "evals.h5",  "rollouts.h5", NULL};
static const char *const eval_files[]    = {"run.h5", "evals.h5", NULL};
static const char *const pipe_files[]    = {"*/final.h5", "*/policy.h5",   "*/ckpt_*.h5", "*/run.h5",
                                            "*/evals.h5", "*/rollouts.h5", NULL}; /* each stage in its folder */

/* name, device, outdir, size, options, execute */
const JobMode job_modes[] = {
  { "sft", PETSC_TRUE, trainer_files, sizeof(SFTOptions), sft_opts, sft_exec },
  { "score", PETSC_TRUE, NULL, 0, NULL, score_exec }, /* score and data write named files, not an output directory */
  { "data", PETSC_TRUE, NULL, 0, NULL, data_exec },
  { "generate", PETSC_TRUE, NULL, 0, NULL, generate_exec }, /* writes a named file */
  { "rm", PETSC_TRUE, trainer_files, sizeof(RMOptions), rm_opts, rm_exec },
  { "ppo", PETSC_TRUE, ppo_files, sizeof(PPOOptions), ppo_opts, ppo_exec },
  { "eval", PETSC_TRUE, eval_files, sizeof(PPOOptions), eval_opts,
    ppo_exec }, /* the held-out evaluation of -actor_checkpoint (src/ppo) */
  { "pipeline", PETSC_TRUE, pipe_files, sizeof(PipelineOptions), pipe_opts, pipe_exec },
  { "plan", PETSC_TRUE, NULL, 0, NULL,
    plan_exec }, /* a search over estimates; the device only to profile this machine when given no primitives */
  { "schedule", PETSC_FALSE, NULL, 0, NULL, schedule_exec }, /* no model, no device */
  { "profile", PETSC_TRUE, NULL, 0, NULL, profile_exec },
};
const int job_nmodes = (int)(sizeof job_modes / sizeof job_modes[0]);

/* Each table is its module's, declared where the module reads the options. */
const IoFileOption *const job_file_options[] = {
  sft_file_options, train_file_options, rm_file_options, ppo_file_options, reward_file_options, score_file_options,
  generate_file_options, data_file_options, plan_file_options, cost_file_options, ac_file_options, profile_file_options,
};
const int job_nfile_options = (int)(sizeof job_file_options / sizeof job_file_options[0]);
