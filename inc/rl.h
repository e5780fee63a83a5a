/* rl: the RL math of PPO, GRPO, RLOO and reward modelling as pure functions on
 * host arrays (src/rl/rlmath.c). The jobs that use it are in inc/jobs.h. */
#ifndef RLFUSE_RL_H
#define RLFUSE_RL_H

#include <stddef.h>

/* ---- RL math (src/rl/rlmath.c): pure functions on host arrays ----------- */
/* Sequences are rows of [B, T] arrays; row b's response occupies positions
 * start[b] .. start[b]+len[b]-1 (len may be 0). Per-position arrays are
 * aligned so that index t refers to the token at position t: logp[t] is the
 * log-probability of token t, values[t] the critic's value of the state
 * before token t. Entries outside the response are not read and are written
 * as 0 by the functions that produce [B,T] arrays.
 *
 * Episodes (multi-turn samples): a response may hold the model's segments
 * alternating with an environment's answers. The span functions (rewards,
 * GAE, returns, whitening, RLOO) take src, each token's producer ([B,T], as
 * GenBatch.src of inc/gen.h): a token is the model's where src is
 * RL_SRC_MODEL; src NULL: every token of the response is the model's. Only
 * the model's tokens are actions: each function computes as if row b were
 * compressed to its model tokens (in order), the function run on that with
 * src NULL, and the results scattered back to their positions; an
 * environment token gets 0 (rewards, advantages, returns) or is left alone
 * (rl_whiten), and its inputs are not read. A response without model tokens
 * is an empty one. */
#define RL_SRC_MODEL 1 /* GEN_SRC_MODEL (inc/gen.h): rl.h stands alone */
/* Whether token i (an index into a [B,T] array) is the model's. */
static inline int rl_is_model(const unsigned char *src, size_t i) { return !src || src[i] == RL_SRC_MODEL; }
/* The model's tokens of the response [start, start+len) of a row whose
 * sources are src_row ([T]; NULL: len). */
int rl_model_tokens(const unsigned char *src_row, int start, int len);

/* Per-token rewards: r_t = -kl_coef * (logp_t - ref_t) on every model
 * token of the response, plus score[b] on its last model token (a response
 * without one drops it). score is the already clipped reward-model score (or
 * the truncation penalty): see rl_final_score. */
void rl_kl_rewards(int B, int T, const int *start, const int *len, const unsigned char *src, const float *logp,
                   const float *ref, const float *score, double kl_coef, float *rewards);
/* The same with rewards given at positions: r_t gets at[b*T + t] too on
 * every model token (a multi-turn episode's step rewards at the turns they
 * answered); at NULL: none. */
void rl_kl_rewards_at(int B, int T, const int *start, const int *len, const unsigned char *src, const float *logp,
                      const float *ref, const float *score, const float *at, double kl_coef, float *rewards);
/* end[b] = score[b] less the rewards at[] on row b's model tokens (summed in
 * double, in position order): what is left of a score for the last model
 * token when part of it is given at the turns. */
void rl_end_scores(int B, int T, const int *start, const int *len, const unsigned char *src, const float *at,
                   const float *score, float *end);
/* The sequence-level score entering the rewards: clamp(rm_score, -clip,
 * clip) when the response ended with EOS (clip <= 0: no clipping), else
 * truncation_penalty. */
double rl_final_score(double rm_score, int eos, double clip, double truncation_penalty);
/* GAE: delta_t = r_t + gamma*V_{t+1} - V_t, A_t = delta_t + gamma*lambda*A_{t+1},
 * with V and A zero after the last response token; returns = A + V. With
 * src, t+1 is the next model token (the environment's tokens between two
 * model tokens are part of that transition): one step of gamma, whatever
 * lies between. */
void rl_gae(int B, int T, const int *start, const int *len, const unsigned char *src, const float *rewards,
            const float *values, double gamma, double lambda, float *adv, float *ret);
/* Reward-to-go: ret_t = sum_{t' >= t} gamma^(t'-t) r_t' over the response
 * (REINFORCE's return; GAE with V = 0 and lambda 1), 0 outside it; with
 * src over the model's tokens, counted as consecutive. */
void rl_returns(int B, int T, const int *start, const int *len, const unsigned char *src, const float *rewards,
                double gamma, float *ret);
/* Whitening over all response tokens (model tokens) of the batch: x = (x -
 * mean)/(std + 1e-8), std the population standard deviation (sums in
 * double, fixed order). *mean and *std (may be NULL) get the statistics
 * before whitening. */
void rl_whiten(int B, int T, const int *start, const int *len, const unsigned char *src, float *x, double *mean,
               double *std);

/* Clipped policy loss over n tokens with weights w (0 for tokens that do not
 * count; rl_token_weight gives the others):
 *   loss = sum_i w_i * max(-A_i*rho_i, -A_i*clip(rho_i, 1-eps_low, 1+eps_high)), rho = exp(logp - old)
 * (eps_low = eps_high: PPO's clip; eps_high > eps_low: DAPO's "clip-higher").
 * dlogp[i] = d loss / d logp_i. *clipfrac (may be NULL) gets the sum of w_i over
 * tokens where the clipped term is the larger one strictly (no gradient). */
double rl_policy_loss(size_t n, const float *logp, const float *old, const float *adv, const float *w, double eps_low,
                      double eps_high, float *dlogp, double *clipfrac);
/* The same with a behaviour importance weight per token (NULL: 1): each
 * token's term and gradient are multiplied by isw_i (the decoupled PPO
 * objective of asynchronous runs: old is then the proximal policy's
 * log-probabilities, isw the weights of rl_behaviour_weights); the clip
 * fraction still sums w_i alone. */
double rl_policy_loss_is(size_t n, const float *logp, const float *old, const float *adv, const float *w,
                         const float *isw, double eps_low, double eps_high, float *dlogp, double *clipfrac);
/* CISPO (MiniMax-M1, 2025): every token keeps its gradient, weighted by its
 * clipped importance ratio held constant:
 *   loss = sum_i w_i * isw_i * -A_i * sg(clip(rho_i, 1-eps_low, 1+eps_high)) * exp(logp_i - sg(logp_i)),
 * rho = exp(logp - old), sg() a constant: its value is sum_i w_i isw_i (-A_i)
 * clip(rho_i), dlogp[i] = w_i isw_i (-A_i) clip(rho_i) (isw NULL: 1). *clipfrac
 * (may be NULL) gets the sum of w_i over tokens whose ratio the clip changed. */
double rl_policy_loss_cispo(size_t n, const float *logp, const float *old, const float *adv, const float *w,
                            const float *isw, double eps_low, double eps_high, float *dlogp, double *clipfrac);
/* GSPO (Qwen, 2025) on one sequence: its tokens are those with w_i != 0 (m of
 * them, each with the same weight and advantage, as a sequence-level
 * estimator gives); the importance ratio is the sequence's, s =
 * exp((1/m) sum_i (logp_i - old_i)), clipped as a whole:
 *   loss = W * max(-A*s, -A*clip(s, 1-eps_low, 1+eps_high)), W = sum_i w_i, A = (1/W) sum_i w_i A_i,
 * dlogp[i] = W * (-A) * s / m on each of the m tokens while the unclipped term
 * is the larger (ties included), else 0. *clipfrac gets W when the clipped
 * term is the larger strictly, else 0. No token: loss 0. */
double rl_policy_loss_gspo(size_t n, const float *logp, const float *old, const float *adv, const float *w,
                           double eps_low, double eps_high, float *dlogp, double *clipfrac);
/* Off-policy correction of samples drawn by older weights (the behaviour
 * policy, log-probabilities behav) for the policy being trained (its
 * log-probabilities before the update: prox). Per token with w_i != 0 the
 * importance weight rho_i = exp(prox_i - behav_i), and with cap > 0:
 *   RL_IS_MASK      rho_i > cap -> 0 (the token leaves the loss; AReaL's
 *                   decoupled PPO with its behaviour-weight cap)
 *   RL_IS_TRUNCATE  min(rho_i, cap) (truncated importance sampling)
 * isw[i] gets the weight (0 where w_i == 0). The statistics are over the
 * tokens with w_i != 0: count, sum and largest rho (before the cap), and
 * how many the cap changed. */
typedef enum { RL_IS_MASK = 0, RL_IS_TRUNCATE = 1 } RLISMode;
typedef struct {
  double n, sum, max, capped;
} RLISStats;
void rl_behaviour_weights(size_t n, const float *prox, const float *behav, const float *w, double cap, RLISMode mode,
                          float *isw, RLISStats *st);
/* Clipped value loss: loss = sum_i w_i * 0.5*max((v-R)^2, (v_old + clip(v - v_old, -eps_v, eps_v) - R)^2);
 * dv[i] = d loss / d v_i; *clipfrac as above. eps_v <= 0: no clipping. */
double rl_value_loss(size_t n, const float *v, const float *v_old, const float *ret, const float *w, double eps_v,
                     float *dv, double *clipfrac);
/* Estimators of KL(pi||ref) from one sample of pi, with x = ref - logp
 * (Schulman, "Approximating KL divergence"): k1 = -x (unbiased, can be
 * negative), k2 = x^2/2 (low variance, biased), k3 = e^x - x - 1
 * (unbiased, non-negative). */
typedef enum { RL_KL_K1 = 0, RL_KL_K2 = 1, RL_KL_K3 = 2 } RLKLEstimator;
/* KL penalty as a loss term (GRPO): loss = sum_i w_i * coef * k(x_i) for the
 * estimator k; dlogp[i] += d loss / d logp_i. */
double rl_kl_loss(size_t n, const float *logp, const float *ref, const float *w, double coef, RLKLEstimator est,
                  float *dlogp);
/* GRPO advantages: sequences come in groups of k consecutive samples of one
 * prompt; adv[i] = (score[i] - mean of its group) / (std of its group + eps),
 * std the sample standard deviation (k-1 in the denominator); without
 * scale_std (Dr. GRPO) adv[i] = score[i] - mean of its group. k >= 2. */
void rl_grpo_advantages(int nseq, int k, const float *score, double eps, int scale_std, float *adv);
/* How the policy loss's tokens are weighed over a mini-batch of nseq
 * sequences holding ntok response tokens (the weight of each token of a
 * sequence of len tokens; with episodes both count the model's tokens):
 *   token mean          1/ntok: every token alike (DAPO's token-level loss)
 *   sequence mean       1/(nseq*len): each sequence's token mean, averaged
 *   sequence sum, norm  1/(nseq*max_len): each sequence's token sum over a
 *                       constant (Dr. GRPO: no length bias) */
typedef enum { RL_AGG_TOKEN_MEAN = 0, RL_AGG_SEQ_MEAN = 1, RL_AGG_SEQ_SUM_NORM = 2 } RLLossAgg;
double rl_token_weight(RLLossAgg agg, int ntok, int nseq, int len, int max_len);
/* DAPO's overlong reward shaping: 0 for len <= max_len - buffer, then
 * falling linearly to -factor at len = max_len, and -factor beyond;
 * 0 when buffer or factor is 0. */
double rl_overlong_penalty(int len, int max_len, int buffer, double factor);
/* RLOO advantages (REINFORCE leave-one-out): rows come in groups of k
 * consecutive samples of one prompt; a row's return R is the sum of its
 * per-token rewards over its model tokens (the score and the KL penalty of
 * rl_kl_rewards), and its advantage, written on each of its model tokens (0
 * elsewhere), is R_i - mean of the other k-1 returns of its group = k/(k-1)
 * (R_i - group mean). */
void rl_rloo_advantages(int B, int T, const int *start, const int *len, const unsigned char *src, const float *rewards,
                        int k, float *adv);
/* Bradley-Terry reward-model loss, mean over B pairs: -log sigmoid(rc - rr)
 * (computed stably); drc, drr get the gradients; *correct (may be NULL) the
 * number of pairs with rc > rr. */
double rl_rm_loss(int B, const float *rc, const float *rr, float *drc, float *drr, int *correct);
/* The same over n of a batch's B pairs (a replica's share): returns the SUM
 * of the n losses, and the gradients are those of the batch mean (1/B). */
double rl_rm_loss_part(int n, int B, const float *rc, const float *rr, float *drc, float *drr, int *correct);
/* Adaptive KL controller (Ziegler et al. 2019): err = clamp(kl/target - 1,
 * -0.2, 0.2); returns coef * (1 + err * nsteps / horizon). */
double rl_kl_adapt(double coef, double kl, double target, double horizon, double nsteps);

#endif
