/* PPO's held-out evaluation: a policy's responses to the held-out set
 * (src/ppo/prompts.c), scored for accuracy (pass@1 over every response),
 * pass@k, the mean reward and the KL to the reference; and the KL of a
 * rollout, which the training iterations record too; -mode eval. */
#include "ppo_impl.h"
#include <math.h>

#define PPO_EVAL_ITERATION 0x45564100u /* "EVA": the same draws for every policy evaluated */

double rollout_kl(const Rollout *r)
{
  double kl = 0;
  for (int b = 0; b < r->B; b++)
    for (int t = r->start[b]; t < r->start[b] + r->len[b]; t++)
      if (rollout_is_model(r, b, t))
        kl += (double)r->gen.logprobs[(size_t)b * r->T + t] - (double)r->ref[(size_t)b * r->T + t];
  return kl / r->B;
}

/* The held-out KL to the reference: per token the k3 estimate e^x - x - 1
 * of x = ref - logp (unbiased like the rollouts' k1 = -x, which the KL
 * controller reads, but never negative: a policy close to its reference
 * reads as about 0, not as -0.006), summed per response, averaged. */
static double rollout_kl_k3(const Rollout *r)
{
  double kl = 0;
  for (int b = 0; b < r->B; b++)
    for (int t = r->start[b]; t < r->start[b] + r->len[b]; t++) {
      if (!rollout_is_model(r, b, t)) continue; /* an environment's tokens: no policy, no KL */
      double x = (double)r->ref[(size_t)b * r->T + t] - (double)r->gen.logprobs[(size_t)b * r->T + t];
      kl += expm1(x) - x;
    }
  return kl / r->B;
}

/* pass@k over prompts of k responses each: the share of prompts with at
 * least one right answer (gold 1); NaN without answers. */
static double pass_at_k(const Rollout *r, int n, int k)
{
  int hit = 0;
  for (int i = 0; i < n; i++) {
    int any = 0;
    for (int j = 0; j < k; j++) any |= r->gold[i * k + j] > 0.5f;
    hit += any;
  }
  return n ? (double)hit / n : NAN;
}

/* The evaluation's samples as group `group` of path: the layout of
 * rollouts.h5's groups (tokens, lengths, per-sample rewards) with the
 * reference answers as a prompt file holds them, and the metrics. */
static PetscErrorCode ppo_eval_save(const char *path, const char *group, const Rollout *r, const PPOEvalSet *e,
                                    const PPOEval *ev)
{
  int               B = r->B, T = r->T, nd = 8, *turn;
  IODataset         d[10] = {
    {"tokens",           2, {B, T}, r->gen.tokens, PETSC_TRUE },
    {"prompt_lengths",   1, {B, 1}, r->start,      PETSC_TRUE },
    {"response_lengths", 1, {B, 1}, r->len,        PETSC_TRUE },
    {"eos",              1, {B, 1}, r->gen.eos,    PETSC_TRUE },
    {"scores",           1, {B, 1}, r->score,      PETSC_FALSE},
    {"gold",             1, {B, 1}, r->gold,       PETSC_FALSE},
    {"rule_rewards",     1, {B, 1}, r->rule,       PETSC_FALSE},
    {"final_scores",     1, {B, 1}, r->final,      PETSC_FALSE},
  };
  const char *const an[] = {"prompts", "samples", "gold", "pass_k", "reward", "kl"};
  const double      av[] = {(double)e->n, (double)e->k, ev->gold, ev->pass_k, ev->reward, ev->kl};

  PetscFunctionBegin;
  PetscCall(rollout_episode_datasets(r, d, &nd, &turn)); /* episodes: each token's source and turn */
  PetscCall(io_group_replace(MPI_COMM_WORLD, "evaluations file", path, group, d, nd, "answer",
                             e->answers ? r->answer : NULL, B, an, av, (int)(sizeof av / sizeof av[0])));
  PetscCall(PetscFree(turn));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_evaluate(DModel *policy, PPOModels *m, const PPOOptions *o, const PPOEvalSet *e, uint64_t seed,
                            int max_prompt, const char *path, const char *group, PPOEval *ev)
{
  int       N = e->n * e->k;
  GenPart   part = {{0}, 0, 0, PETSC_FALSE, NULL};
  Rollout   r;
  PackBuf   pb;
  PetscBool offloaded = (PetscBool)(policy->host != NULL);
  double    s = 0;
  PPOGold   gold = e->gold == PPO_GOLD_ANSWER && !m->rew.have_tt ? PPO_GOLD_NONE : e->gold; /* answers need the text */

  PetscFunctionBegin;
  ev->gold = ev->kl = ev->pass_k = ev->reward = ev->calls = NAN;
  if (N == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(rollout_create(N, max_prompt + (int)o->gen.max_new_tokens, gen_masked(&o->gen), &r));
  r.answer = e->answer, r.meta = e->meta, r.pidx = e->pidx;
  r.envs   = m->eps;
  PetscCall(packbuf_create(N, r.T, &pb));
  PetscCall(dmodel_acquire(policy));
  {
    GenConfig gen = o->gen; /* -ppo_eval_greedy: the most probable token, whatever training samples with */
    if (o->eval_greedy) gen.greedy = PETSC_TRUE;
    PetscCall(rollout_generate_part(policy, &gen, max_prompt, seed, PPO_EVAL_ITERATION, e->req, &r, &part));
  }
  if (offloaded) PetscCall(dmodel_release(policy, PETSC_TRUE));
  PetscCall(rollout_share_gen(policy->mesh, &part, &r));
  PetscCall(ppo_ref_call(m, o, &r, &pb, PetscMin(N, 64)));
  PetscCall(ppo_reward_call(m, o, &r, &pb, PetscMin(N, 64)));
  PetscCall(rollout_rule_rewards(&m->rew, o, &r, gold));
  PetscCall(rollout_command_rewards(&m->rew, o, &r, -1));
  rollout_final_scores(&r, o);
  for (int b = 0; b < N; b++) s += r.final[b];
  ev->reward = s / N;
  if (gold != PPO_GOLD_NONE) {
    double g = 0;
    for (int b = 0; b < N; b++) g += r.gold[b];
    ev->gold = g / N;
  }
  if (gold == PPO_GOLD_ANSWER) ev->pass_k = pass_at_k(&r, e->n, e->k);
  ev->kl = rollout_kl_k3(&r);
  if (r.envs) {
    PPOEpisodeStats es;
    ppo_episodes_stats(&r, &es);
    ev->calls = es.call_frac;
  }
  if (path) PetscCall(ppo_eval_save(path, group, &r, e, ev));
  if (o->eval_show > 0) PetscCall(ppo_show_samples(&m->rew, &r, (int)PetscMin(o->eval_show, N), group));
  PetscCall(packbuf_destroy(&pb));
  PetscCall(rollout_destroy(&r));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_evaluate_said(const RunCtx *run, const char *what, DModel *policy, PPOModels *m, const PPOOptions *o,
                                 PromptSource *ps, const CkptState *st, const char *path, const char *group,
                                 PPOEval *ev)
{
  double t0  = sys_wtime();
  int    say = ps->eval.n > 0 && ps->eval.k > 0;
  char   d[32];

  PetscFunctionBegin;
  if (say)
    PetscCall(PetscPrintf(run->comm, "held-out evaluation of %s: %d prompts x %d responses ...\n", what, ps->eval.n,
                          ps->eval.k));
  PetscCall(ppo_evaluate(policy, m, o, &ps->eval, (uint64_t)st->seed, ps->max_prompt, path, group, ev));
  if (say)
    PetscCall(PetscPrintf(run->comm, "held-out evaluation of %s done in %s\n", what,
                          sys_duration_str(sys_wtime() - t0, d, sizeof d)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -mode eval: the held-out evaluation of the actor, recorded in run.h5's
 * /summary (eval_gold, eval_pass_k, eval_reward, eval_kl, eval_prompts,
 * eval_samples), its samples in evals.h5's /eval. */
PetscErrorCode ppo_eval_only(const RunCtx *run, const PPOOptions *o, const PlanNeeds *needs, PPOModels *m,
                             PromptSource *ps, const CkptState *st)
{
  RunRecord *rec;
  PPOEval    ev;
  char       path[PETSC_MAX_PATH_LEN];

  PetscFunctionBegin;
  PetscCall(train_record_open(run, "eval", 0, &o->plan, needs, &rec));
  PetscCall(sys_output_path(run, "evals.h5", path, sizeof path));
  PetscCall(io_keep_previous(run->comm, run->output_dir, "evals"));
  PetscCall(ppo_evaluate_said(run, "the actor", &m->actor, m, o, ps, st, path, "eval", &ev));
  PetscCall(PetscPrintf(run->comm, "eval: %d held-out prompts x %d responses\n", ps->eval.n, ps->eval.k));
  PetscCall(ppo_print_eval(run, "eval:", &ev, o));
  PetscCall(record_summary(rec, "eval_prompts", (double)ps->eval.n));
  PetscCall(record_summary(rec, "eval_samples", (double)ps->eval.k));
  PetscCall(record_summary(rec, "eval_gold", ev.gold));
  PetscCall(record_summary(rec, "eval_pass_k", ev.pass_k));
  PetscCall(record_summary(rec, "eval_reward", ev.reward));
  PetscCall(record_summary(rec, "eval_kl", ev.kl));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}
