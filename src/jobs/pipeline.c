/* The full pipeline (-mode pipeline): SFT, then reward modelling from the SFT
 * checkpoint, then PPO (or GRPO) from both, in one job. Each stage writes into
 * its own directory under -output_dir (sft/, rm/, ppo/) with its own run.h5
 * and checkpoints; every stage's options are read, the deck checked for
 * unused options (src/jobs/modes.c), and every stage's options, plan and memory checked
 * against the architecture SFT will write, before the first stage starts. */
#include "jobs.h"
#include "ppo.h"

static PetscErrorCode stage_ctx(const RunCtx *run, const char *name, RunCtx *sub)
{
  PetscFunctionBegin;
  *sub = *run;
  PetscCall(sys_path_printf(sub->output_dir, sizeof sub->output_dir, "%s/%s", run->output_dir, name));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode pipeline_options(const TrainJobOptions *job, PipelineOptions *p)
{
  PetscFunctionBegin;
  PetscCall(sft_options(job, &p->sft));
  PetscCall(rm_options(job, &p->rm));
  PetscCall(ppo_options(job, &p->ppo));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode pipeline_execute(const RunCtx *run, const Backend *be, PipelineOptions *p)
{
  SFTOptions  sft = p->sft;
  RMOptions   rm  = p->rm;
  PPOOptions  ppo = p->ppo;
  RunCtx      c_sft, c_rm, c_ppo;
  PetscBool   latest;
  const char *alg;
  double      t0 = sys_wtime(), t1, t2, gold0, gold1, kl;

  PetscFunctionBegin;
  PetscCall(PetscStrcmp(sft.restart, "latest",
                        &latest)); /* each stage then resumes from the newest checkpoint in its own directory */
  PetscCheck(!sft.restart[0] || latest, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-restart %s is for one stage: rerun that stage with -mode sft, rm or ppo and its -restart (or -restart "
             "latest)",
             sft.restart);
  PetscCheck(!rm.sft[0] && !ppo.actor_ckpt[0] && !ppo.reward.checkpoint[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-mode pipeline makes its own checkpoints: drop -rm_sft_checkpoint, -actor_checkpoint and "
             "-reward_checkpoint");
  PetscCall(stage_ctx(run, "sft", &c_sft));
  PetscCall(stage_ctx(run, "rm", &c_rm));
  PetscCall(stage_ctx(run, "ppo", &c_ppo));
  PetscCall(sys_path_printf(rm.sft, sizeof rm.sft, "%s/final.h5", c_sft.output_dir));
  PetscCall(PetscStrncpy(ppo.actor_ckpt, rm.sft, sizeof ppo.actor_ckpt));
  ppo.reference_made_here = PETSC_TRUE; /* the SFT stage's output, not an input: PPO's checkpoints keep the reference */
  PetscCall(sys_path_printf(ppo.reward.checkpoint, sizeof ppo.reward.checkpoint, "%s/final.h5", c_rm.output_dir));
  /* Every stage is checked before any work: the later stages read the SFT
   * model's architecture from the -policy_ options, which SFT writes into
   * its checkpoint; only what needs the stages' outputs waits. */
  PetscCall(sft_check_stage(&c_sft, &sft));
  PetscCall(rm_check_stage(&c_rm, &rm, &sft.cfg, PETSC_FALSE));
  PetscCall(ppo_check_stage(&c_ppo, &ppo, &sft.cfg, PETSC_FALSE));
  if (run->dry_run) {
    PetscCall(sft_execute(&c_sft, be, &sft));
    PetscCall(rm_check_stage(&c_rm, &rm, &sft.cfg, PETSC_TRUE));
    PetscCall(ppo_check_stage(&c_ppo, &ppo, &sft.cfg, PETSC_TRUE));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscPrintf(run->comm, "pipeline: stage 1/3, supervised fine-tuning -> %s\n", c_sft.output_dir));
  PetscCall(sft_execute(&c_sft, be, &sft));
  t1 = sys_wtime();
  PetscCall(PetscPrintf(run->comm, "pipeline: stage 2/3, reward modelling -> %s\n", c_rm.output_dir));
  PetscCall(rm_execute(&c_rm, be, &rm));
  t2 = sys_wtime();
  alg = ppo_algo_title(&ppo);
  PetscCall(PetscPrintf(run->comm, "pipeline: stage 3/3, %s -> %s\n", alg, c_ppo.output_dir));
  PetscCall(ppo_execute(&c_ppo, be, &ppo, &gold0, &gold1, &kl));
  PetscCall(PetscPrintf(run->comm, "pipeline summary (held-out prompts, -ppo_eval_prompts %" PetscInt_FMT "):\n",
                        ppo.eval_prompts));
  PetscCall(PetscPrintf(run->comm, "  gold score  SFT policy %.3f | %s policy %.3f | gain %+.3f\n", gold0, alg, gold1,
                        gold1 - gold0));
  PetscCall(PetscPrintf(run->comm, "  KL(policy || reference) %.3f nats per response\n", kl));
  PetscCall(PetscPrintf(run->comm, "  wall time   SFT %.1f s | RM %.1f s | %s %.1f s | total %.1f s\n", t1 - t0,
                        t2 - t1, alg, sys_wtime() - t2, sys_wtime() - t0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_cost_job(const RunCtx *run, PetscBool help, CostJob *job)
{
  PetscBool pipe, sft, rm;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(job, sizeof *job));
  if (help) { /* every stage's options, as -help lists them */
    PetscCall(sft_cost_stage(run, help, &job->stage[0]));
    PetscCall(rm_cost_stage(run, help, NULL, &job->stage[1]));
    job->ppo = PETSC_TRUE;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(sys_decks_mode_under("plan", job->mode, sizeof job->mode));
  PetscCall(PetscStrcmp(job->mode, "pipeline", &pipe));
  PetscCall(PetscStrcmp(job->mode, "sft", &sft));
  PetscCall(PetscStrcmp(job->mode, "rm", &rm));
  job->ppo = !sft && !rm ? PETSC_TRUE : PETSC_FALSE;
  if (pipe || sft) PetscCall(sft_cost_stage(run, help, &job->stage[0]));
  if (pipe) PetscCall(rm_cost_stage(run, help, &job->stage[0].cfg, &job->stage[1])); /* the model SFT will write */
  if (rm) PetscCall(rm_cost_stage(run, help, NULL, &job->stage[1]));
  PetscFunctionReturn(PETSC_SUCCESS);
}
