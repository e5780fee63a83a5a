/* What a PPO run writes into run.h5 and prints: each iteration's metrics,
 * times and progress line, the held-out evaluations and the summary. */
#include "ppo_impl.h"
#include <math.h>

static double mean_f(const float *x, int n)
{
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i];
  return n ? s / n : NAN;
}

/* One line of an evaluation: the accuracy (with answers: pass@k is computed
 * then) or the judge's gold score, KL, reward, pass@k. */
PetscErrorCode ppo_print_eval(const RunCtx *run, const char *what, const PPOEval *ev, const PPOOptions *o)
{
  char pk[96] = "";

  PetscFunctionBegin;
  if (o->eval_samples > 1 && !isnan(ev->pass_k))
    PetscCall(PetscSNPrintf(pk, sizeof pk, ", pass@%" PetscInt_FMT " %.3f", o->eval_samples, ev->pass_k));
  if (ev->calls >= 0) /* not NaN: episodes */
    PetscCall(PetscSNPrintf(pk + strlen(pk), sizeof pk - strlen(pk), ", tool calls in %.3f of them", ev->calls));
  PetscCall(PetscPrintf(run->comm, "%s %s %.3f, KL to the reference %.3f, reward %+.3f%s\n", what,
                        isnan(ev->pass_k) ? "gold" : "accuracy", ev->gold, ev->kl, ev->reward, pk));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The fusion costs of an iteration (-fuse_gen_inf): metrics stream_messages,
 * stream_bytes, times stream_send, stream_wait; with migrate, R_t and what moved. */
static PetscErrorCode ppo_record_fusion(RunRecord *rec, const StageTimes *tm)
{
  PetscFunctionBegin;
  PetscCall(record_metric(rec, "stream_messages", tm->stream_messages));
  PetscCall(record_metric(rec, "stream_bytes", tm->stream_bytes));
  PetscCall(record_time(rec, "stream_send", tm->stream_send));
  PetscCall(record_time(rec, "stream_wait", tm->stream_wait));
  if (tm->migrate_m > 0) { /* migrate */
    PetscCall(
        PetscPrintf(PETSC_COMM_WORLD,
                    "fusion: R_t %.2f%s, %.0f samples (%.1f KiB) migrated in %.1f ms onto %.0f generation replicas\n",
                    tm->migrate_at,
                    tm->migrate_pred > 0   ? " (auto)"
                    : tm->migrate_pred < 0 ? " (auto, first iteration)"
                                           : "",
                    tm->migrate_samples, tm->migrate_bytes / 1024, 1e3 * tm->migrate_s, tm->migrate_m));
    PetscCall(record_metric(rec, "migrate_at", tm->migrate_at));
    PetscCall(record_metric(rec, "migrate_predicted", tm->migrate_pred));
    PetscCall(record_metric(rec, "migrate_samples", tm->migrate_samples));
    PetscCall(record_metric(rec, "migrate_bytes", tm->migrate_bytes));
    PetscCall(record_metric(rec, "migrate_replicas", tm->migrate_m));
    PetscCall(record_time(rec, "migrate", tm->migrate_s));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The reward and its parts (the means over the batch of the unweighted
 * rule functions and the command, for those in use). */
static PetscErrorCode ppo_record_rewards(RunRecord *rec, const PPOOptions *o, const Rollout *r, char *line, size_t len)
{
  static const char *const part_names[PPO_REWARD_PARTS] = { "reward_numeric", "reward_exact", "reward_format",
                                                            "reward_length", "reward_command" };
  size_t                   at = 0;

  PetscFunctionBegin;
  line[0] = '\0';
  PetscCall(record_metric(rec, "reward", mean_f(r->final, r->B)));
  for (int k = 0; k < PPO_REWARD_PARTS; k++) {
    double sum = 0;
    int    used = 0;
    for (int b = 0; b < r->B; b++)
      if (!isnan(r->parts[(size_t)b * PPO_REWARD_PARTS + k])) sum += r->parts[(size_t)b * PPO_REWARD_PARTS + k], used++;
    if (!used) continue;
    PetscCall(record_metric(rec, part_names[k], sum / r->B));
    if (at < len)
      at += (size_t)snprintf(line + at, len - at, "%s%s %.3f", at ? ", " : "",
                             k == 0 && !isnan(r->gold[0]) ? "accuracy" : part_names[k] + 7,
                             sum / r->B); /* for the progress line: "accuracy 0.520, format 1.000"; the numeric rule
                                             against answers is the accuracy (rules need answers: no judge then) */
  }
  if (o->dynamic_sampling) {
    PetscCall(record_metric(rec, "dynamic_kept_groups", r->dyn.kept));
    PetscCall(record_metric(rec, "dynamic_filled_groups", r->dyn.filled));
    PetscCall(record_metric(rec, "dynamic_rounds", r->dyn.rounds));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The held-out evaluation's pass@k, reward and KL (its gold is eval_gold,
 * recorded with the iteration's metrics): NaN but at the iterations it ran
 * (every -ppo_eval_every and the last), and only with held-out prompts. */
PetscErrorCode ppo_record_eval(RunRecord *rec, const PPOOptions *o, const PPOEvalSet *e, const PPOEval *ev)
{
  PetscFunctionBegin;
  if (e->n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (o->eval_samples > 1) PetscCall(record_metric(rec, "eval_pass_k", ev->pass_k));
  if (ev->calls >= 0) PetscCall(record_metric(rec, "eval_env_call_frac", ev->calls));
  PetscCall(record_metric(rec, "eval_reward", ev->reward));
  PetscCall(record_metric(rec, "eval_kl", ev->kl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_record_iteration(RunRecord *rec, const RunCtx *run, const PPOOptions *o, const PPOModels *m,
                                    const Rollout *r, const PPOTrainStats *s, const StageTimes *tm,
                                    const PPOIterLine *l)
{
  double n = s->steps ? (double)s->steps : 1.0, len = 0, lmax = 0, eos = 0, toks = 0;
  char   parts[128], tools[32] = "";
  int   *mlen = r->len; /* the responses' lengths as the model's tokens (episodes: without the environment's) */

  PetscFunctionBegin;
  if (r->episodes) {
    PetscCall(PetscMalloc1(r->B, &mlen));
    for (int b = 0; b < r->B; b++) mlen[b] = rollout_model_len(r, b);
  }
  for (int b = 0; b < r->B; b++) {
    len += mlen[b];
    lmax = PetscMax(lmax, mlen[b]);
    eos += r->gen.eos[b];
    toks += r->start[b] + r->len[b]; /* throughput: every token the forwards ran */
  }
  len /= r->B;
  const char *names[] = { "gold",         "rm_score",          "kl",
                          "kl_coef",      "actor_loss",        "critic_loss",
                          "kl_loss",      "clip_frac",         "value_clip_frac",
                          "entropy",      "response_len_mean", "response_len_max",
                          "eos_frac",     "actor_grad_norm",   "critic_grad_norm",
                          "tokens_per_s", "eval_gold" };
  double      vals[]  = { mean_f(r->gold, r->B),
                          mean_f(r->score, r->B),
                          l->kl,
                          l->kl_coef,
                          s->actor_loss / n,
                          s->critic_loss / n,
                          s->kl_loss / n,
                          s->clipfrac / n,
                          s->vclipfrac / n,
                          s->entropy / n,
                          len,
                          lmax,
                          eos / r->B,
                          s->grad_actor / n,
                          s->grad_critic / n,
                          toks / l->iter_s,
                          l->ev->gold };
  for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
    if (k != 1 || m->has_reward) PetscCall(record_metric(rec, names[k], vals[k])); /* rm_score: with a reward model */
  { /* this iteration's response lengths, replacing the previous iteration's: the histogram of tools/report.py */
    const IODataset   dl   = {"lengths", 1, {r->B, 0}, mlen, PETSC_TRUE};
    const char *const an[] = {"iteration"};
    const double      av[] = {(double)l->it};
    PetscCall(record_group(rec, "responses", &dl, 1, an, av, 1));
  }
  if (mlen != r->len) PetscCall(PetscFree(mlen));
  PetscCall(record_time(rec, "iteration", l->iter_s));
  PetscCall(record_time(rec, "generation", tm->gen));
  PetscCall(record_time(rec, "ref_inference", tm->ref));
  PetscCall(record_time(rec, "reward_inference", tm->rew));
  PetscCall(record_time(rec, "critic_inference", tm->critic));
  PetscCall(record_time(rec, "rewards", tm->rules));
  PetscCall(record_time(rec, "advantages", tm->adv));
  PetscCall(ppo_record_rewards(rec, o, r, parts, sizeof parts));
  if (m->fuse.on) PetscCall(record_time(rec, "fused_train", s->t_actor)); /* both models in one node */
  else {
    PetscCall(record_time(rec, "actor_train", s->t_actor));
    PetscCall(record_time(rec, "critic_train", s->t_critic));
  }
  if (m->gen_copy) { /* reallocation of the trained weights to the generation layout */
    PetscCall(record_time(rec, "actor_sync", tm->sync_actor));
    PetscCall(record_metric(rec, "actor_sync_bytes", tm->sync_actor_bytes));
  }
  if (m->has_critic && m->critic_copy) {
    PetscCall(record_time(rec, "critic_sync", tm->sync_critic));
    PetscCall(record_metric(rec, "critic_sync_bytes", tm->sync_critic_bytes));
  }
  if (m->plan->fuse != FUSE_NONE) PetscCall(ppo_record_fusion(rec, tm));
  if (r->episodes) { /* episodes: turns, tool calls, the environment's tokens and time */
    PPOEpisodeStats es;
    ppo_episodes_stats(r, &es);
    PetscCall(record_metric(rec, "episode_turns_mean", es.turns));
    PetscCall(record_metric(rec, "env_calls_mean", es.calls));
    PetscCall(record_metric(rec, "env_call_frac", es.call_frac));
    PetscCall(record_metric(rec, "env_tokens_mean", es.env_tokens));
    PetscCall(record_metric(rec, "env_tokens_cut", es.cut));
    PetscCall(record_time(rec, "env_answers", es.seconds));
    PetscCall(PetscSNPrintf(tools, sizeof tools, " | calls %.2f/ep", es.calls));
  }
  { /* only what the run computes: the judge's gold score, or the accuracy unless the reward's parts hold it (the
       numeric rule), the critic's loss with a critic */
    char gold[32] = "", critic[32] = "", rparts[136] = "";
    if (m->rew.gold == PPO_GOLD_SORT || (m->rew.gold == PPO_GOLD_ANSWER && !strstr(parts, "accuracy")))
      PetscCall(PetscSNPrintf(gold, sizeof gold, " | %s %.3f", m->rew.gold == PPO_GOLD_ANSWER ? "accuracy" : "gold",
                              vals[0]));
    if (parts[0]) PetscCall(PetscSNPrintf(rparts, sizeof rparts, " (%s)", parts));
    if (m->has_critic) PetscCall(PetscSNPrintf(critic, sizeof critic, " | critic %.4f", vals[5]));
    PetscCall(PetscPrintf(run->comm,
                          "iter %4d/%d%s | reward %+.3f%s | kl %.3f | actor %+.4f%s | clip %.3f | ent %.3f | len "
                          "%4.1f/%2.0f%s | %6.0f tok/s | gen %.2f inf %.2f train %.2f of %.2f s%s | %s\n",
                          l->it, l->n_it, gold, mean_f(r->final, r->B), rparts, l->kl, vals[4], critic, vals[7],
                          vals[9], len, lmax, tools, vals[15], tm->gen, tm->ref + tm->rew + tm->critic,
                          s->t_actor + s->t_critic, l->iter_s, l->more, l->clock));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_record_summary(RunRecord *rec, const PPOOptions *o, const PPOSummary *sum, int64_t iterations)
{
  PetscFunctionBegin;
  PetscCall(record_summary(rec, "iterations", (double)iterations));
  PetscCall(record_summary(rec, "initial_gold", sum->initial.gold));
  PetscCall(record_summary(rec, "final_gold", sum->trained.gold));
  PetscCall(record_summary(rec, "final_kl", sum->trained.kl));
  PetscCall(record_summary(rec, "initial_reward", sum->initial.reward));
  PetscCall(record_summary(rec, "final_reward", sum->trained.reward));
  if (o->eval_samples > 1) {
    PetscCall(record_summary(rec, "initial_pass_k", sum->initial.pass_k));
    PetscCall(record_summary(rec, "final_pass_k", sum->trained.pass_k));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The closing lines: the held-out score of the initial and the trained
 * policy, the KL, the reward and pass@k. from_sft: the initial policy is
 * the SFT stage's (-mode pipeline). */
PetscErrorCode ppo_print_summary(const RunCtx *run, const PPOOptions *o, const PromptSource *ps, const PPOSummary *sum,
                                 int64_t iterations, PetscBool from_sft)
{
  const char *algo = ppo_algo(o)->name;

  PetscFunctionBegin;
  if (ps->eval.n == 0)
    PetscCall(
        PetscPrintf(run->comm,
                    "%s: no held-out evaluation ran (no held-out prompts: -ppo_eval_file, or the built-in task's)\n",
                    algo));
  else if (isnan(sum->initial.gold) && isnan(sum->trained.gold))
    PetscCall(PetscPrintf(run->comm,
                          "%s: held-out KL to the reference %.3f nats per response after %" PetscInt64_FMT
                          " iterations, on %d held-out prompts (no accuracy or gold score: no answers or judge)\n",
                          algo, sum->trained.kl, iterations, ps->eval.n));
  else
    PetscCall(PetscPrintf(run->comm,
                          "%s: held-out %s %.3f (%s policy) -> %.3f (after %" PetscInt64_FMT
                          " iterations), KL to the reference %.3f nats per response, on %d held-out prompts\n",
                          algo, ps->eval.gold == PPO_GOLD_ANSWER ? "accuracy" : "gold score", sum->initial.gold,
                          from_sft ? "SFT" : "initial", sum->trained.gold, iterations, sum->trained.kl, ps->eval.n));
  if (!isnan(sum->trained.reward))
    PetscCall(PetscPrintf(run->comm, "%s: held-out reward %+.3f -> %+.3f%s", algo, sum->initial.reward,
                          sum->trained.reward, o->eval_samples > 1 && !isnan(sum->trained.pass_k) ? "" : "\n"));
  if (!isnan(sum->trained.reward) && o->eval_samples > 1 && !isnan(sum->trained.pass_k))
    PetscCall(PetscPrintf(run->comm, ", pass@%" PetscInt_FMT " %.3f -> %.3f\n", o->eval_samples, sum->initial.pass_k,
                          sum->trained.pass_k));
  PetscFunctionReturn(PETSC_SUCCESS);
}
