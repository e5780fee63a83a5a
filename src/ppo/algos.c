/* The RL algorithms as a table (-algo): one row each, with what the rest of
 * src/ppo asks of an algorithm: whether it has a critic, whether it draws
 * groups of -rollout_group responses per prompt, where -ppo_kl_in auto puts
 * the KL, the default of -ppo_loss_agg, and its advantage estimator. As verl
 * registers estimators by name, a new algorithm is one estimator and one
 * row; nothing else in the module names an algorithm. */
#include "base.h"

/* Per-token rewards from the scores at each row's last model token and the
 * KL penalty; on episodes with -env_reward_at turn the environment's step
 * rewards stay at the turns they answered and the end keeps the rest of the
 * score (rl_end_scores), so a row's rewards add up to the same total. */
static PetscErrorCode token_rewards(Rollout *r, const PPOOptions *o, const float *score, double kl_reward)
{
  const unsigned char *src = rollout_src(r);
  float               *end;

  PetscFunctionBegin;
  if (!r->episodes || o->env.reward_at != ENV_REWARD_TURN) {
    rl_kl_rewards(r->B, r->T, r->start, r->len, src, r->gen.logprobs, r->ref, score, kl_reward, r->rewards);
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscMalloc1(r->B, &end));
  rl_end_scores(r->B, r->T, r->start, r->len, src, r->env.at, score, end);
  rl_kl_rewards_at(r->B, r->T, r->start, r->len, src, r->gen.logprobs, r->ref, end, r->env.at, kl_reward, r->rewards);
  PetscCall(PetscFree(end));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* PPO: GAE over the critic's values, whitened over the batch (-ppo_whiten). */
static PetscErrorCode adv_gae(Rollout *r, const PPOOptions *o, double kl_reward)
{
  const unsigned char *src = rollout_src(r);

  PetscFunctionBegin;
  PetscCall(token_rewards(r, o, r->final, kl_reward));
  rl_gae(r->B, r->T, r->start, r->len, src, r->rewards, r->values, o->gamma, o->lambda, r->adv, r->ret);
  if (o->whiten) rl_whiten(r->B, r->T, r->start, r->len, src, r->adv, NULL, NULL);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* GRPO (Dr. GRPO without -grpo_scale_std): one advantage per sequence, on
 * each of its model tokens, from its score, or with the KL in the
 * rewards from the sum of its rewards (score and KL penalty). */
static PetscErrorCode adv_grpo(Rollout *r, const PPOOptions *o, double kl_reward)
{
  const unsigned char *src = rollout_src(r);
  float               *seq, *sum;

  PetscFunctionBegin;
  rl_kl_rewards(r->B, r->T, r->start, r->len, src, r->gen.logprobs, r->ref, r->final, kl_reward, r->rewards);
  PetscCall(PetscMalloc2(r->B, &seq, r->B, &sum));
  for (int b = 0; b < r->B; b++) {
    double s = 0;
    for (int t = r->start[b]; t < r->start[b] + r->len[b]; t++)
      if (rl_is_model(src, (size_t)b * r->T + t)) s += r->rewards[(size_t)b * r->T + t];
    sum[b] = kl_reward > 0 ? (float)s : r->final[b];
  }
  rl_grpo_advantages(r->B, (int)o->group, sum, 1e-6, o->scale_std, seq);
  PetscCall(PetscArrayzero(r->adv, (size_t)r->B * r->T));
  PetscCall(PetscArrayzero(r->ret, (size_t)r->B * r->T));
  for (int b = 0; b < r->B; b++)
    for (int t = r->start[b]; t < r->start[b] + r->len[b]; t++)
      if (rl_is_model(src, (size_t)b * r->T + t)) r->adv[(size_t)b * r->T + t] = seq[b]; /* the model's tokens only */
  PetscCall(PetscFree2(seq, sum));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* RLOO: a sample's baseline is the mean return of the other k-1 of its group. */
static PetscErrorCode adv_rloo(Rollout *r, const PPOOptions *o, double kl_reward)
{
  const unsigned char *src = rollout_src(r);

  PetscFunctionBegin;
  rl_kl_rewards(r->B, r->T, r->start, r->len, src, r->gen.logprobs, r->ref, r->final, kl_reward, r->rewards);
  rl_rloo_advantages(r->B, r->T, r->start, r->len, src, r->rewards, (int)o->group, r->adv);
  PetscCall(PetscArrayzero(r->ret, (size_t)r->B * r->T));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* REINFORCE++: the score less its group's mean, the KL per token, returns
 * whitened over the batch. */
static PetscErrorCode adv_reinforce_pp(Rollout *r, const PPOOptions *o, double kl_reward)
{
  const unsigned char *src = rollout_src(r);
  float               *base;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(r->B, &base));
  rl_grpo_advantages(r->B, (int)o->group, r->final, 0.0, 0, base); /* without the std: score less its group's mean */
  PetscCall(token_rewards(r, o, base, kl_reward));
  PetscCall(PetscFree(base));
  rl_returns(r->B, r->T, r->start, r->len, src, r->rewards, o->gamma, r->ret);
  PetscCall(PetscArraycpy(r->adv, r->ret, (size_t)r->B * r->T));
  rl_whiten(r->B, r->T, r->start, r->len, src, r->adv, NULL, NULL);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* In -algo's order: the first row is the default. */
const PPOAlgoSpec ppo_algos[] = {
  /* name, title, help, critic, groups, KL in the loss, loss aggregation, one advantage a sequence, advantages */
  { "ppo", "PPO", "actor + critic, GAE", PETSC_TRUE, PETSC_FALSE, PETSC_FALSE, RL_AGG_TOKEN_MEAN, PETSC_FALSE,
    adv_gae },
  { "grpo", "GRPO", "critic-free, group-normalised scores", PETSC_FALSE, PETSC_TRUE, PETSC_TRUE, RL_AGG_TOKEN_MEAN,
    PETSC_TRUE, adv_grpo },
  { "rloo", "RLOO", "critic-free, leave-one-out baseline", PETSC_FALSE, PETSC_TRUE, PETSC_FALSE, RL_AGG_TOKEN_MEAN,
    PETSC_TRUE, adv_rloo },
  { "reinforce_pp", "REINFORCE++",
    "REINFORCE++ with a group-mean baseline: critic-free, returns whitened over the batch", PETSC_FALSE, PETSC_TRUE,
    PETSC_FALSE, RL_AGG_TOKEN_MEAN, PETSC_FALSE, adv_reinforce_pp },
};
const int ppo_nalgos = (int)(sizeof ppo_algos / sizeof ppo_algos[0]);

const char *ppo_algo_title(const PPOOptions *o)
{
  return ppo_algo(o)->title;
}

PetscErrorCode ppo_algo_choices(const char *names[], int cap, char *help, size_t len)
{
  size_t at = 0;

  PetscFunctionBegin;
  PetscCheck(ppo_nalgos < cap, PETSC_COMM_SELF, PETSC_ERR_PLIB, "ppo_algo_choices: %d algorithms exceed %d names",
             ppo_nalgos, cap - 1);
  help[0] = '\0';
  for (int k = 0; k < ppo_nalgos; k++) {
    const char *sep = k == 0 ? "" : k == ppo_nalgos - 1 ? " or " : ", ";
    names[k]        = ppo_algos[k].name;
    if (at < len) at += (size_t)snprintf(help + at, len - at, "%s%s (%s)", sep, ppo_algos[k].name, ppo_algos[k].help);
  }
  PetscCheck(at < len, PETSC_COMM_SELF, PETSC_ERR_PLIB, "ppo_algo_choices: -algo's help exceeds %zu bytes", len);
  names[ppo_nalgos] = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_algo_join(PetscBool (*pick)(const PPOAlgoSpec *), PetscBool titles, char *buf, size_t len)
{
  size_t at = 0;

  PetscFunctionBegin;
  buf[0] = '\0';
  for (int k = 0; k < ppo_nalgos; k++)
    if (pick(&ppo_algos[k]) && at < len)
      at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
                             titles ? ppo_algos[k].title : ppo_algos[k].name);
  PetscCheck(at < len, PETSC_COMM_SELF, PETSC_ERR_PLIB, "ppo_algo_join: the list exceeds %zu bytes", len);
  PetscFunctionReturn(PETSC_SUCCESS);
}
