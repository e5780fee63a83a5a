/* RL math: the per-token and per-sequence formulas of PPO, GRPO, reward
 * modelling and the adaptive KL controller, as pure functions on host arrays
 * (specification: inc/rl.h). Serial loops with double accumulators in a fixed
 * order, so results do not depend on the thread count or the backend.
 * Tokens with weight 0 are not read at all: padding may hold anything
 * (even -inf log-probabilities) without poisoning a loss or a gradient. */
#include "rl.h"
#include <math.h>

static double clampd(double x, double lo, double hi)
{
  return x < lo ? lo : (x > hi ? hi : x);
}

/* Zeros one row of a [B,T] output outside the response [s, s+l). */
static void zero_outside(int T, int s, int l, float *row)
{
  for (int t = 0; t < s; t++) row[t] = 0;
  for (int t = s + l; t < T; t++) row[t] = 0;
}

int rl_model_tokens(const unsigned char *src_row, int start, int len)
{
  int n = 0;

  if (!src_row) return len;
  for (int t = start; t < start + len; t++) n += src_row[t] == RL_SRC_MODEL;
  return n;
}

/* The position of row o's last model token in [s, s+l), or -1. */
static int last_model(const unsigned char *src, size_t o, int s, int l)
{
  for (int t = s + l - 1; t >= s; t--)
    if (rl_is_model(src, o + t)) return t;
  return -1;
}

void rl_kl_rewards(int B, int T, const int *start, const int *len, const unsigned char *src, const float *logp,
                   const float *ref, const float *score, double kl_coef, float *rewards)
{
  rl_kl_rewards_at(B, T, start, len, src, logp, ref, score, NULL, kl_coef, rewards);
}

void rl_end_scores(int B, int T, const int *start, const int *len, const unsigned char *src, const float *at,
                   const float *score, float *end)
{
  for (int b = 0; b < B; b++) {
    size_t o      = (size_t)b * (size_t)T;
    double placed = 0;
    for (int t = start[b]; t < start[b] + len[b]; t++)
      if (rl_is_model(src, o + t)) placed += (double)at[o + t];
    end[b] = (float)((double)score[b] - placed);
  }
}

void rl_kl_rewards_at(int B, int T, const int *start, const int *len, const unsigned char *src, const float *logp,
                      const float *ref, const float *score, const float *at, double kl_coef, float *rewards)
{
  for (int b = 0; b < B; b++) {
    size_t o = (size_t)b * (size_t)T;
    int    s = start[b], l = len[b], last = last_model(src, o, s, l);
    zero_outside(T, s, l, rewards + o);
    for (int t = s; t < s + l; t++) {
      if (!rl_is_model(src, o + t)) {
        rewards[o + t] = 0;
        continue;
      }
      double r = -kl_coef * ((double)logp[o + t] - (double)ref[o + t]);
      if (at) r += (double)at[o + t];
      if (t == last) r += (double)score[b];
      rewards[o + t] = (float)r;
    }
  }
}

double rl_final_score(double rm_score, int eos, double clip, double truncation_penalty)
{
  if (!eos) return truncation_penalty;
  return clip > 0 ? clampd(rm_score, -clip, clip) : rm_score;
}

/* Backwards over the model tokens: the environment's tokens in between are
 * skipped (written 0), so v_next and a_next are the next model token's. */
void rl_gae(int B, int T, const int *start, const int *len, const unsigned char *src, const float *rewards,
            const float *values, double gamma, double lambda, float *adv, float *ret)
{
  for (int b = 0; b < B; b++) {
    size_t o = (size_t)b * (size_t)T;
    int    s = start[b], l = len[b];
    double a_next = 0, v_next = 0; /* zero after the last response token */
    zero_outside(T, s, l, adv + o);
    zero_outside(T, s, l, ret + o);
    for (int t = s + l - 1; t >= s; t--) {
      if (!rl_is_model(src, o + t)) {
        adv[o + t] = ret[o + t] = 0;
        continue;
      }
      double v = values[o + t], delta = (double)rewards[o + t] + gamma * v_next - v;
      double a = delta + gamma * lambda * a_next;
      adv[o + t] = (float)a;
      ret[o + t] = (float)(a + v);
      a_next = a;
      v_next = v;
    }
  }
}

void rl_returns(int B, int T, const int *start, const int *len, const unsigned char *src, const float *rewards,
                double gamma, float *ret)
{
  for (int b = 0; b < B; b++) {
    size_t o = (size_t)b * (size_t)T;
    double g = 0;
    zero_outside(T, start[b], len[b], ret + o);
    for (int t = start[b] + len[b] - 1; t >= start[b]; t--) {
      if (!rl_is_model(src, o + t)) {
        ret[o + t] = 0;
        continue;
      }
      g          = (double)rewards[o + t] + gamma * g;
      ret[o + t] = (float)g;
    }
  }
}

void rl_whiten(int B, int T, const int *start, const int *len, const unsigned char *src, float *x, double *mean,
               double *std)
{
  double sum = 0, ss = 0, m = 0, sd = 0;
  size_t n = 0;

  for (int b = 0; b < B; b++)
    for (int t = start[b]; t < start[b] + len[b]; t++)
      if (rl_is_model(src, (size_t)b * T + t)) sum += x[(size_t)b * T + t], n++;
  if (n > 0) {
    m = sum / (double)n;
    /* two passes: the one-pass formula loses digits when |mean| >> std */
    for (int b = 0; b < B; b++)
      for (int t = start[b]; t < start[b] + len[b]; t++) {
        if (!rl_is_model(src, (size_t)b * T + t)) continue;
        double d = x[(size_t)b * T + t] - m;
        ss += d * d;
      }
    sd = sqrt(ss / (double)n);
    for (int b = 0; b < B; b++)
      for (int t = start[b]; t < start[b] + len[b]; t++) {
        size_t i = (size_t)b * T + t;
        if (rl_is_model(src, i)) x[i] = (float)(((double)x[i] - m) / (sd + 1e-8));
      }
  }
  if (mean) *mean = m;
  if (std) *std = sd;
}

double rl_policy_loss_is(size_t n, const float *logp, const float *old, const float *adv, const float *w,
                         const float *isw, double eps_low, double eps_high, float *dlogp, double *clipfrac)
{
  double loss = 0, cf = 0;

  for (size_t i = 0; i < n; i++) {
    double wi = w[i];
    dlogp[i] = 0;
    if (wi == 0) continue;
    double rho = exp((double)logp[i] - (double)old[i]), A = adv[i], wl = isw ? wi * isw[i] : wi;
    double unclipped = -A * rho, clipped = -A * clampd(rho, 1 - eps_low, 1 + eps_high);
    if (unclipped >= clipped) { /* ties take the unclipped branch's gradient */
      loss += wl * unclipped;
      dlogp[i] = (float)(wl * unclipped); /* d(-A*rho)/dlogp = -A*rho */
    } else {
      loss += wl * clipped; /* constant in logp */
      cf += wi;
    }
  }
  if (clipfrac) *clipfrac = cf;
  return loss;
}

double rl_policy_loss(size_t n, const float *logp, const float *old, const float *adv, const float *w, double eps_low,
                      double eps_high, float *dlogp, double *clipfrac)
{
  return rl_policy_loss_is(n, logp, old, adv, w, NULL, eps_low, eps_high, dlogp, clipfrac);
}

double rl_policy_loss_cispo(size_t n, const float *logp, const float *old, const float *adv, const float *w,
                            const float *isw, double eps_low, double eps_high, float *dlogp, double *clipfrac)
{
  double loss = 0, cf = 0;

  for (size_t i = 0; i < n; i++) {
    double wi = w[i];
    dlogp[i] = 0;
    if (wi == 0) continue;
    double rho = exp((double)logp[i] - (double)old[i]), r = clampd(rho, 1 - eps_low, 1 + eps_high);
    double wl = isw ? wi * isw[i] : wi, term = wl * -(double)adv[i] * r;
    loss += term;
    dlogp[i] = (float)term; /* d/dlogp of term * exp(logp - sg(logp)) at logp */
    if (r != rho) cf += wi;
  }
  if (clipfrac) *clipfrac = cf;
  return loss;
}

double rl_policy_loss_gspo(size_t n, const float *logp, const float *old, const float *adv, const float *w,
                           double eps_low, double eps_high, float *dlogp, double *clipfrac)
{
  double W = 0, WA = 0, dlog = 0, m = 0;

  for (size_t i = 0; i < n; i++) {
    dlogp[i] = 0;
    if (w[i] == 0) continue;
    W += w[i];
    WA += (double)w[i] * adv[i];
    dlog += (double)logp[i] - (double)old[i];
    m += 1;
  }
  if (clipfrac) *clipfrac = 0;
  if (m == 0) return 0;
  double A = WA / W, s = exp(dlog / m);
  double unclipped = -A * s, clipped = -A * clampd(s, 1 - eps_low, 1 + eps_high);
  if (unclipped < clipped) { /* constant in logp */
    if (clipfrac) *clipfrac = W;
    return W * clipped;
  }
  for (size_t i = 0; i < n; i++)
    if (w[i] != 0) dlogp[i] = (float)(W * unclipped / m); /* d(-A*s)/dlogp_i = -A*s/m */
  return W * unclipped;
}

void rl_behaviour_weights(size_t n, const float *prox, const float *behav, const float *w, double cap, RLISMode mode,
                          float *isw, RLISStats *st)
{
  for (size_t i = 0; i < n; i++) {
    isw[i] = 0;
    if (w[i] == 0) continue;
    double rho = exp((double)prox[i] - (double)behav[i]), out = rho;
    if (cap > 0 && rho > cap) {
      out = mode == RL_IS_MASK ? 0.0 : cap;
      st->capped += 1;
    }
    isw[i] = (float)out;
    st->n += 1;
    st->sum += rho;
    if (rho > st->max) st->max = rho;
  }
}

double rl_value_loss(size_t n, const float *v, const float *v_old, const float *ret, const float *w, double eps_v,
                     float *dv, double *clipfrac)
{
  double loss = 0, cf = 0;

  for (size_t i = 0; i < n; i++) {
    double wi = w[i];
    dv[i] = 0;
    if (wi == 0) continue;
    double vi = v[i], vo = v_old[i], R = ret[i], du = vi - R;
    if (eps_v <= 0) {
      loss += wi * 0.5 * du * du;
      dv[i] = (float)(wi * du);
      continue;
    }
    double dc = vo + clampd(vi - vo, -eps_v, eps_v) - R;
    if (du * du >= dc * dc) {
      loss += wi * 0.5 * du * du;
      dv[i] = (float)(wi * du);
    } else { /* clip() has slope 1 strictly inside the band, 0 outside */
      loss += wi * 0.5 * dc * dc;
      dv[i] = (float)(fabs(vi - vo) < eps_v ? wi * dc : 0.0);
      cf += wi;
    }
  }
  if (clipfrac) *clipfrac = cf;
  return loss;
}

double rl_kl_loss(size_t n, const float *logp, const float *ref, const float *w, double coef, RLKLEstimator est,
                  float *dlogp)
{
  double loss = 0;

  for (size_t i = 0; i < n; i++) {
    double wi = w[i];
    if (wi == 0) continue;
    double x = (double)ref[i] - (double)logp[i], k, d; /* x = log(ref/pi); d = d k / d logp */
    switch (est) {
    case RL_KL_K1: k = -x, d = 1; break;
    case RL_KL_K2: k = 0.5 * x * x, d = -x; break;
    default: k = exp(x) - x - 1, d = 1 - exp(x); break; /* k3 */
    }
    loss += wi * coef * k;
    dlogp[i] = (float)((double)dlogp[i] + wi * coef * d);
  }
  return loss;
}

/* A trailing partial group (nseq not a multiple of k) is normalised on its
 * own; a group of one sample has no spread and gets advantage 0. */
void rl_grpo_advantages(int nseq, int k, const float *score, double eps, int scale_std, float *adv)
{
  for (int g = 0; g < nseq; g += k) {
    int    m   = nseq - g < k ? nseq - g : k;
    double sum = 0, ss = 0, mean, sd;
    for (int j = 0; j < m; j++) sum += score[g + j];
    mean = sum / m;
    for (int j = 0; j < m; j++) ss += ((double)score[g + j] - mean) * ((double)score[g + j] - mean);
    sd = m > 1 ? sqrt(ss / (m - 1)) : 0;
    for (int j = 0; j < m; j++) {
      double a = (double)score[g + j] - mean;
      adv[g + j] = m > 1 ? (float)(scale_std ? a / (sd + eps) : a) : 0.0f;
    }
  }
}

double rl_token_weight(RLLossAgg agg, int ntok, int nseq, int len, int max_len)
{
  switch (agg) {
  case RL_AGG_SEQ_MEAN: return nseq > 0 && len > 0 ? 1.0 / ((double)nseq * len) : 0.0;
  case RL_AGG_SEQ_SUM_NORM: return nseq > 0 && max_len > 0 ? 1.0 / ((double)nseq * max_len) : 0.0;
  default: return ntok > 0 ? 1.0 / ntok : 0.0; /* token mean */
  }
}

double rl_overlong_penalty(int len, int max_len, int buffer, double factor)
{
  int soft = max_len - buffer; /* responses longer than this pay */

  if (buffer <= 0 || factor <= 0 || len <= soft) return 0.0;
  if (len > max_len) return -factor;
  return factor * (double)(soft - len) / buffer;
}

/* The returns are summed in double in position order. A trailing partial
 * group is its own group; a group of one has no others and gets 0. */
void rl_rloo_advantages(int B, int T, const int *start, const int *len, const unsigned char *src, const float *rewards,
                        int k, float *adv)
{
  for (int g = 0; g < B; g += k) {
    int    m = B - g < k ? B - g : k;
    double ret[m > 0 ? m : 1], sum = 0;
    for (int j = 0; j < m; j++) {
      size_t       o = (size_t)(g + j) * T;
      const float *r = rewards + o;
      ret[j]         = 0;
      for (int t = start[g + j]; t < start[g + j] + len[g + j]; t++)
        if (rl_is_model(src, o + t)) ret[j] += r[t];
      sum += ret[j];
    }
    for (int j = 0; j < m; j++) {
      size_t o = (size_t)(g + j) * T;
      float *a = adv + o;
      float  v = m > 1 ? (float)(ret[j] - (sum - ret[j]) / (m - 1)) : 0.0f;
      for (int t = 0; t < T; t++)
        a[t] = (t >= start[g + j] && t < start[g + j] + len[g + j] && rl_is_model(src, o + t)) ? v : 0.0f;
    }
  }
}

double rl_rm_loss_part(int n, int B, const float *rc, const float *rr, float *drc, float *drr, int *correct)
{
  double loss = 0;
  int    nc   = 0;

  for (int i = 0; i < n; i++) {
    double d = (double)rc[i] - (double)rr[i], sp, s; /* sp = softplus(-d) = -log sigmoid(d), s = sigmoid(-d) */
    if (d > 0) {
      double e = exp(-d);
      sp = log1p(e);
      s  = e / (1 + e);
    } else {
      double e = exp(d);
      sp = -d + log1p(e);
      s  = 1 / (1 + e);
    }
    loss += sp;
    drc[i] = (float)(-s / B); /* d softplus(-d)/dd = -sigmoid(-d) */
    drr[i] = (float)(s / B);
    nc += rc[i] > rr[i];
  }
  if (correct) *correct = nc;
  return loss;
}

double rl_rm_loss(int B, const float *rc, const float *rr, float *drc, float *drr, int *correct)
{
  return B > 0 ? rl_rm_loss_part(B, B, rc, rr, drc, drr, correct) / B : 0;
}

double rl_kl_adapt(double coef, double kl, double target, double horizon, double nsteps)
{
  double err = clampd(kl / target - 1, -0.2, 0.2);
  return coef * (1 + err * nsteps / horizon);
}
