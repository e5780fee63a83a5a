/* test_rlmath: the RL formulas of src/rl/rlmath.c against values worked out
 * by hand (the arithmetic is in the comments; transcendental constants such
 * as exp(0.5) are written out to 16 digits), plus finite-difference checks of
 * every gradient on random inputs. Entries that a function must not read are
 * NaN, so reading them shows up as a NaN or a wrong value.
 *
 * The checks in detail: KL rewards, final score, GAE, whitening, policy loss (symmetric, and
 * DAPO's clip-higher 0.2/0.7 releasing a token the symmetric clip holds), value loss, the KL
 * loss with each estimator (k1, k2, k3), the loss weights of each `-ppo_loss_agg` and DAPO's
 * overlong penalty (at and around both ends of its ramp), GRPO advantages (with and without
 * the std: Dr. GRPO), REINFORCE's reward-to-go and the group-mean baseline, RLOO advantages (a
 * partial group, a lone sample, positions outside the response untouched by the sum and
 * written 0), the Bradley-Terry loss and the adaptive KL controller against hand-computed
 * values (arithmetic in the comments), gradients by finite differences (the policy loss with
 * clip 0.2/0.28, the KL loss with every estimator); episodes (a source mask, environment tokens
 * between the model's): the KL rewards, GAE, returns, whitening and RLOO of hand-made rows (answers
 * between segments, first, last, a row of answers only) bit for bit those of the rows compressed to
 * their model tokens and scattered back, GAE across an answer by hand, and a batch without model
 * tokens
 */
#include "rl.h"
#include "sys.h"
#include "test_report.h"
#include <math.h>
#include <stdio.h>

/* |got - want| <= tol, false for NaN. */
static int near(double got, double want, double tol)
{
  return fabs(got - want) <= tol;
}

/* Compares n values; the detail names the first mismatch. Inputs and outputs
 * are float, so 1e-6 absolute is a few float ulps at the magnitudes used. */
static void check_array(const char *what, size_t n, const float *got, const double *want, double tol)
{
  char detail[160] = "";
  int  ok = 1;
  for (size_t i = 0; i < n && ok; i++)
    if (!near(got[i], want[i], tol)) {
      ok = 0;
      snprintf(detail, sizeof detail, "entry %zu is %.9g, expected %.9g", i, (double)got[i], want[i]);
    }
  test_report(ok, what, "%s", detail);
}

static void check_value(const char *what, double got, double want, double tol)
{
  char detail[160];
  snprintf(detail, sizeof detail, "got %.17g, expected %.17g", got, want);
  test_report(near(got, want, tol), what, "%s", detail);
}

static void test_kl_rewards(void)
{
  /* B=3, T=4, kl_coef 0.1. Row 0: positions 1..3; row 1: positions 0..1;
   * row 2: empty (its score must not appear anywhere). */
  const float N = NAN;
  int   start[3] = {1, 0, 2}, len[3] = {3, 2, 0};
  float logp[12] = {N, -1.0f, -0.5f, -2.0f, /**/ -0.2f, -0.3f, N, N, /**/ N, N, N, N};
  float ref[12]  = {N, -1.5f, -0.5f, -1.0f, /**/ -0.1f, -0.6f, N, N, /**/ N, N, N, N};
  float score[3] = {2.0f, -0.5f, 7.0f}, r[12];
  for (int i = 0; i < 12; i++) r[i] = 99;
  /* row 0: logp-ref = 0.5, 0, -1   -> -0.1*(..) = -0.05, 0, 0.1 (+2 score) = 2.1
   * row 1: logp-ref = -0.1, 0.3   -> 0.01, -0.03 (-0.5 score) = -0.53 */
  const double want[12] = {0, -0.05, 0, 2.1, /**/ 0.01, -0.53, 0, 0, /**/ 0, 0, 0, 0};
  rl_kl_rewards(3, 4, start, len, NULL, logp, ref, score, 0.1, r);
  check_array("kl rewards: per-token -beta*(logp-ref), score on the last token, 0 outside and for an empty row", 12, r, want, 1e-6);
}

static void test_final_score(void)
{
  check_value("final score: EOS, clipped above (3 -> 2)", rl_final_score(3.0, 1, 2.0, -1.0), 2.0, 0);
  check_value("final score: EOS, clipped below (-5 -> -2)", rl_final_score(-5.0, 1, 2.0, -1.0), -2.0, 0);
  check_value("final score: EOS, inside the clip range", rl_final_score(0.7, 1, 2.0, -1.0), 0.7, 0);
  check_value("final score: EOS, clip 0 means no clipping", rl_final_score(3.0, 1, 0.0, -1.0), 3.0, 0);
  check_value("final score: truncated gets the penalty", rl_final_score(3.0, 0, 2.0, -1.0), -1.0, 0);
}

static void test_gae(void)
{
  /* B=3, T=5. Row 0: positions 2..4 (ends at the row end, so row 1's first
   * value follows it in memory: a leak would use V=0.1 as V after the last
   * token); row 1: positions 0..2; row 2 empty. */
  const float N = NAN;
  int   start[3] = {2, 0, 1}, len[3] = {3, 3, 0};
  float rew[15]  = {N, N, 0.1f, -0.2f, 1.0f, /**/ 0.0f, 0.0f, 0.5f, N, N, /**/ N, N, N, N, N};
  float val[15]  = {N, N, 0.5f, 0.4f, 0.8f, /**/ 0.1f, 0.2f, 0.3f, N, N, /**/ N, N, N, N, N};
  float adv[15], ret[15];

  /* gamma 1, lambda 0.95. Row 0 (r = .1 -.2 1, V = .5 .4 .8):
   *   d2 = 1 + 0 - .8 = .2              A2 = .2
   *   d1 = -.2 + .8 - .4 = .2           A1 = .2 + .95*.2 = .39
   *   d0 = .1 + .4 - .5 = 0             A0 = 0 + .95*.39 = .3705
   *   returns A+V = .3705+.5 .39+.4 .2+.8 = .8705 .79 1.0
   * Row 1 (r = 0 0 .5, V = .1 .2 .3):
   *   d2 = .5 - .3 = .2                 A2 = .2
   *   d1 = 0 + .3 - .2 = .1             A1 = .1 + .95*.2 = .29
   *   d0 = 0 + .2 - .1 = .1             A0 = .1 + .95*.29 = .3755
   *   returns .3755+.1 .29+.2 .2+.3 = .4755 .49 .5 */
  const double a1[15] = {0, 0, 0.3705, 0.39, 0.2, /**/ 0.3755, 0.29, 0.2, 0, 0, /**/ 0, 0, 0, 0, 0};
  const double r1[15] = {0, 0, 0.8705, 0.79, 1.0, /**/ 0.4755, 0.49, 0.5, 0, 0, /**/ 0, 0, 0, 0, 0};
  rl_gae(3, 5, start, len, NULL, rew, val, 1.0, 0.95, adv, ret);
  check_array("gae gamma=1 lambda=0.95: advantages by hand, V after the last token 0, rows independent", 15, adv, a1, 1e-6);
  check_array("gae gamma=1 lambda=0.95: returns = A + V", 15, ret, r1, 1e-6);

  /* gamma 0.9, lambda 1 (A_t = discounted return - V_t). Row 0:
   *   d2 = 1 - .8 = .2                  A2 = .2
   *   d1 = -.2 + .9*.8 - .4 = .12       A1 = .12 + .9*.2 = .30
   *   d0 = .1 + .9*.4 - .5 = -.04       A0 = -.04 + .9*.3 = .23
   *   (check: .1 - .9*.2 + .81*1 - .5 = .23); returns .73 .70 1.0
   * Row 1:
   *   d2 = .2                           A2 = .2
   *   d1 = .9*.3 - .2 = .07             A1 = .07 + .9*.2 = .25
   *   d0 = .9*.2 - .1 = .08             A0 = .08 + .9*.25 = .305
   *   (check: .81*.5 - .1 = .305); returns .405 .45 .5 */
  const double a2[15] = {0, 0, 0.23, 0.30, 0.2, /**/ 0.305, 0.25, 0.2, 0, 0, /**/ 0, 0, 0, 0, 0};
  const double r2[15] = {0, 0, 0.73, 0.70, 1.0, /**/ 0.405, 0.45, 0.5, 0, 0, /**/ 0, 0, 0, 0, 0};
  rl_gae(3, 5, start, len, NULL, rew, val, 0.9, 1.0, adv, ret);
  check_array("gae gamma=0.9 lambda=1: advantages by hand", 15, adv, a2, 1e-6);
  check_array("gae gamma=0.9 lambda=1: returns", 15, ret, r2, 1e-6);
}

static void test_whiten(void)
{
  /* Response values 1 3 | 2 4 5: mean 15/5 = 3; deviations -2 0 -1 1 2,
   * squares sum to 10, population variance 10/5 = 2, std sqrt(2) =
   * 1.4142135623730951; whitened = dev/sqrt(2): -1.41421356 0 -0.70710678
   * 0.70710678 1.41421356 (the 1e-8 is below float resolution here). */
  int    start[2] = {1, 0}, len[2] = {2, 3};
  float  x[8]     = {7.0f, 1.0f, 3.0f, -9.0f, /**/ 2.0f, 4.0f, 5.0f, 11.0f};
  double mean = -1, std = -1, s = 0, ss = 0;
  const double want[8] = {7.0, -1.4142135623730951, 0.0, -9.0, /**/ -0.7071067811865475, 0.7071067811865475, 1.4142135623730951, 11.0};
  char   detail[160];

  rl_whiten(2, 4, start, len, NULL, x, &mean, &std);
  check_value("whiten: mean before whitening (15/5 = 3)", mean, 3.0, 1e-12);
  check_value("whiten: population std before whitening (sqrt(10/5))", std, 1.4142135623730951, 1e-12);
  check_array("whiten: whitened values by hand, entries outside the responses untouched", 8, x, want, 1e-6);
  const int idx[5] = {1, 2, 4, 5, 6};
  for (int i = 0; i < 5; i++) s += x[idx[i]];
  for (int i = 0; i < 5; i++) ss += (x[idx[i]] - s / 5) * (x[idx[i]] - s / 5);
  snprintf(detail, sizeof detail, "mean %g, std %.9g", s / 5, sqrt(ss / 5));
  test_report(near(s / 5, 0, 1e-6) && near(sqrt(ss / 5), 1, 1e-6), "whiten: result has mean 0 and std 1", "%s", detail);

  int   z[2] = {0, 0};
  float y[2] = {5.0f, 6.0f};
  rl_whiten(2, 1, start, z, NULL, y, &mean, &std);
  test_report(y[0] == 5.0f && y[1] == 6.0f && mean == 0 && std == 0, "whiten: no response tokens leaves x alone, statistics 0", NULL);
  rl_whiten(2, 4, start, len, NULL, x, NULL, NULL); /* must accept NULL statistics */
}

static void test_policy_loss(void)
{
  /* eps = 0.2, old = 0, so rho = exp(logp):
   *   exp(0.1) = 1.1051709180756477 (inside), exp(0.5) = 1.6487212707001282
   *   (above 1.2), exp(-0.5) = 0.6065306597126334 (below 0.8).
   * i  A   rho     -A*rho    -A*clip   max       branch     w     w*dL/dlogp
   * 0  1   1.105   -1.10517  -1.10517  -1.10517  unclipped  .5    -.5526
   * 1  1   1.649   -1.64872  -1.2      -1.2      CLIPPED    .25    0
   * 2  1   0.607   -0.60653  -0.8      -0.60653  unclipped  1     -.60653
   * 3 -1   1.649    1.64872   1.2       1.64872  unclipped  1     1.64872
   * 4 -1   0.607    0.60653   0.8       0.8      CLIPPED    .5     0
   * 5 -2   1.105    2.21034   2.21034   2.21034  unclipped  .25   .55259
   * 6  0   1.649    0         0         0        tie        1      0
   * 7  (w = 0: not counted, logp NaN must not be read)
   * loss = .5*-1.1051709 + .25*-1.2 + -.6065307 + 1.6487213 + .5*.8
   *        + .25*2.2103418 = 1.1421906109874946; clipfrac = .25 + .5 = .75 */
  float  logp[8] = {0.1f, 0.5f, -0.5f, 0.5f, -0.5f, 0.1f, 0.5f, NAN};
  float  old[8] = {0}, A[8] = {1, 1, 1, -1, -1, -2, 0, 1}, w[8] = {0.5f, 0.25f, 1, 1, 0.5f, 0.25f, 1, 0}, g[8];
  double cf = -1;
  const double want[8] = {-0.5 * 1.1051709180756477, 0, -0.6065306597126334, 1.6487212707001282, 0, 0.25 * 2 * 1.1051709180756477, 0, 0};

  double loss = rl_policy_loss(8, logp, old, A, w, 0.2, 0.2, g, &cf);
  check_value("policy loss: A>0/A<0 with rho inside, above 1+eps, below 1-eps (hand value)", loss, 1.1421906109874946, 1e-6);
  check_array("policy loss: dlogp = -w*A*rho on the unclipped branch, 0 on the clipped one", 8, g, want, 1e-6);
  check_value("policy loss: clipfrac sums w of the strictly clipped tokens (.25 + .5)", cf, 0.75, 1e-12);

  /* clip-higher (DAPO): eps_low .2, eps_high .7, the same tokens. Only
   * token 1 changes: rho 1.649 is now inside [.8, 1.7], so -A*rho = -1.64872
   * is the larger term (unclipped, gradient -.25*1.64872 = -.41218); token 4
   * (A < 0, rho .607 below .8) stays clipped at the lower bound.
   * loss = 1.1421906109874946 - .25*(-1.2) + .25*(-1.6487212707001282)
   *      = 1.0300102933124626; clipfrac .5 */
  const double want_hi[8] = {-0.5 * 1.1051709180756477, -0.25 * 1.6487212707001282, -0.6065306597126334, 1.6487212707001282, 0, 0.25 * 2 * 1.1051709180756477, 0, 0};
  loss = rl_policy_loss(8, logp, old, A, w, 0.2, 0.7, g, &cf);
  check_value("policy loss, clip-higher 0.2/0.7: rho 1.65 with A>0 no longer clipped (hand value)", loss, 1.0300102933124626, 1e-6);
  check_array("policy loss, clip-higher: its gradient returns, the lower clip still holds", 8, g, want_hi, 1e-6);
  check_value("policy loss, clip-higher: clipfrac .5 (token 4 only)", cf, 0.5, 1e-12);
}

/* The off-policy correction of asynchronous runs (rl_behaviour_weights,
 * rl_policy_loss_is), by hand. */
static void test_behaviour_weights(void)
{
  /* prox - behav = 0, .5, -.2, 2 on four response tokens, a fifth outside
   * (w = 0, behav NaN: not read). rho = 1, e^.5 = 1.6487212707001282,
   * e^-.2 = 0.8187307530779818, e^2 = 7.38905609893065; cap 5 catches the
   * last: masked to 0 (decoupled PPO) or truncated to 5 (TIS). Statistics
   * before the cap: n 4, sum 10.85650812270876, max 7.389, one capped. */
  float     prox[5] = {0, 0.5f, -0.2f, 2.0f, 0}, behav[5] = {0, 0, 0, 0, NAN}, w[5] = {1, 1, 1, 0.5f, 0}, isw[5];
  RLISStats st = {0, 0, 0, 0};
  const double mask[5] = {1, 1.6487212707001282, 0.8187307530779818, 0, 0}, trunc[5] = {1, 1.6487212707001282, 0.8187307530779818, 5, 0};

  rl_behaviour_weights(5, prox, behav, w, 5.0, RL_IS_MASK, isw, &st);
  check_array("behaviour weights, mask: exp(prox - behav), 0 above the cap and outside the response", 5, isw, mask, 1e-7);
  check_value("behaviour weights: tokens counted (w != 0)", st.n, 4, 0);
  check_value("behaviour weights: sum of rho before the cap", st.sum, 10.85650812270876, 1e-6);
  check_value("behaviour weights: largest rho before the cap (e^2)", st.max, 7.38905609893065, 1e-6);
  check_value("behaviour weights: one token over the cap", st.capped, 1, 0);
  rl_behaviour_weights(5, prox, behav, w, 5.0, RL_IS_TRUNCATE, isw, &st);
  check_array("behaviour weights, truncate: min(rho, cap)", 5, isw, trunc, 1e-7);
  check_value("behaviour weights: statistics add up over calls (two tokens capped)", st.capped, 2, 0);

  /* rl_policy_loss_is on test_policy_loss's eight tokens (eps .2) with
   * isw = 2, 3, .5, 1, 1, 0, 1, 1: each term and gradient times its weight,
   * loss = 2*(.5*-1.1051709) + 3*(.25*-1.2) + .5*(-.6065307) + 1.6487213 + .5*.8
   *      = -0.259714977231836; the clip fraction still sums w (.75). */
  float  logp[8] = {0.1f, 0.5f, -0.5f, 0.5f, -0.5f, 0.1f, 0.5f, NAN};
  float  old[8] = {0}, A[8] = {1, 1, 1, -1, -1, -2, 0, 1}, wt[8] = {0.5f, 0.25f, 1, 1, 0.5f, 0.25f, 1, 0}, iw[8] = {2, 3, 0.5f, 1, 1, 0, 1, 1}, g[8], g1[8];
  double cf = -1, cf1 = -1;
  const double want[8] = {2 * -0.5 * 1.1051709180756477, 0, 0.5 * -0.6065306597126334, 1.6487212707001282, 0, 0, 0, 0};

  check_value("policy loss with behaviour weights (hand value)", rl_policy_loss_is(8, logp, old, A, wt, iw, 0.2, 0.2, g, &cf), -0.259714977231836, 1e-6);
  check_array("policy loss with behaviour weights: gradient times the weight", 8, g, want, 1e-6);
  check_value("policy loss with behaviour weights: clipfrac sums w alone", cf, 0.75, 1e-12);
  check_value("policy loss with NULL weights is rl_policy_loss bit for bit", rl_policy_loss_is(8, logp, old, A, wt, NULL, 0.2, 0.2, g1, &cf1) - rl_policy_loss(8, logp, old, A, wt, 0.2, 0.2, g, &cf), 0, 0);
}

/* CISPO (rl_policy_loss_cispo) on test_policy_loss's eight tokens, eps .2:
 * every token with w != 0 keeps a gradient, -w*A*clip(rho) with the clipped
 * ratio a constant.
 * i  A   rho     clip(rho)  changed  w     term = dlogp
 * 0  1   1.105   1.105      no       .5    -.5*1.1051709
 * 1  1   1.649   1.2        yes      .25   -.3
 * 2  1   0.607   0.8        yes      1     -.8
 * 3 -1   1.649   1.2        yes      1     1.2
 * 4 -1   0.607   0.8        yes      .5    .4
 * 5 -2   1.105   1.105      no       .25   .25*2*1.1051709
 * 6  0   1.649   1.2        yes      1     0
 * loss = .5 (tokens 0 and 5 cancel); clipfrac .25 + 1 + 1 + .5 + 1 = 3.75.
 * With the behaviour weights 2, 3, .5, 1, 1, 0, 1: terms -1.1051709, -.9,
 * -.4, 1.2, .4, 0, 0, loss -0.8051709180756477. */
static void test_cispo(void)
{
  float  logp[8] = {0.1f, 0.5f, -0.5f, 0.5f, -0.5f, 0.1f, 0.5f, NAN};
  float  old[8] = {0}, A[8] = {1, 1, 1, -1, -1, -2, 0, 1}, w[8] = {0.5f, 0.25f, 1, 1, 0.5f, 0.25f, 1, 0};
  float  iw[8] = {2, 3, 0.5f, 1, 1, 0, 1, 1}, g[8];
  double cf = -1;
  const double want[8] = {-0.5 * 1.1051709180756477, -0.3, -0.8, 1.2, 0.4, 0.25 * 2 * 1.1051709180756477, 0, 0};
  const double want_is[8] = {-1.1051709180756477, -0.9, -0.4, 1.2, 0.4, 0, 0, 0};

  check_value("CISPO: loss = sum of -w*A*clip(rho) (hand value .5)", rl_policy_loss_cispo(8, logp, old, A, w, NULL, 0.2, 0.2, g, &cf), 0.5, 1e-6);
  check_array("CISPO: every token keeps its gradient, -w*A*clip(rho), clipped or not", 8, g, want, 1e-6);
  check_value("CISPO: clipfrac sums w of the tokens whose ratio the clip changed (3.75)", cf, 3.75, 1e-12);
  check_value("CISPO with behaviour weights (hand value)", rl_policy_loss_cispo(8, logp, old, A, w, iw, 0.2, 0.2, g, &cf), -0.8051709180756477, 1e-6);
  check_array("CISPO with behaviour weights: each term and gradient times its weight", 8, g, want_is, 1e-6);
}

/* GSPO (rl_policy_loss_gspo) on one sequence of four tokens (a fifth with
 * w = 0 and logp NaN is not read): log ratios .1, -.2, .4, .3, mean .15, so
 * the sequence ratio s = e^.15 = 1.161834242728283; w .25 each (W = 1).
 * A = 1, eps .2: s inside [.8, 1.2], loss -s, dlogp -s/4 on each token.
 * A = 1, eps .1: s above 1.1, the clipped term -1.1 is the larger: loss
 * -1.1, no gradient, clipfrac W = 1. A = -1, eps .1: the unclipped term
 * +s is the larger: loss s, dlogp +s/4. */
static void test_gspo(void)
{
  float        logp[5] = {0.1f, -0.2f, 0.4f, 0.3f, NAN}, old[5] = {0}, w[5] = {0.25f, 0.25f, 0.25f, 0.25f, 0}, g[5];
  float        Ap[5] = {1, 1, 1, 1, 7}, Am[5] = {-1, -1, -1, -1, 7}, zero[5] = {0};
  double       cf  = -1;
  const double s   = 1.161834242728283;
  const double d[5] = {-s / 4, -s / 4, -s / 4, -s / 4, 0}, dm[5] = {s / 4, s / 4, s / 4, s / 4, 0}, none[5] = {0};

  check_value("GSPO: the sequence's length-normalised ratio inside the clip: loss -W*A*s (hand value)", rl_policy_loss_gspo(5, logp, old, Ap, w, 0.2, 0.2, g, &cf), -s, 1e-6);
  check_array("GSPO: dlogp = -W*A*s/m on each token of the sequence", 5, g, d, 1e-6);
  check_value("GSPO: nothing clipped", cf, 0, 0);
  check_value("GSPO: s above 1+eps with A > 0: the clipped term (-1.1)", rl_policy_loss_gspo(5, logp, old, Ap, w, 0.1, 0.1, g, &cf), -1.1, 1e-6);
  check_array("GSPO: clipped as a whole: no token has a gradient", 5, g, none, 0);
  check_value("GSPO: clipfrac is the sequence's weight W", cf, 1, 1e-12);
  check_value("GSPO: A < 0 with s above 1+eps: the unclipped term (+s)", rl_policy_loss_gspo(5, logp, old, Am, w, 0.1, 0.1, g, &cf), s, 1e-6);
  check_array("GSPO: A < 0: dlogp = +s/4", 5, g, dm, 1e-6);
  check_value("GSPO: a row without tokens (every w 0): loss 0", rl_policy_loss_gspo(5, logp, old, Ap, zero, 0.2, 0.2, g, &cf), 0, 0);

  /* the gradient against central differences (unclipped: eps .2) */
  double worst = 0, h = 1e-3;
  rl_policy_loss_gspo(5, logp, old, Ap, w, 0.2, 0.2, g, NULL);
  for (int i = 0; i < 4; i++) {
    float  x0 = logp[i], xp = x0 + (float)h, xm = x0 - (float)h, gs[5];
    logp[i]   = xp;
    double lp = rl_policy_loss_gspo(5, logp, old, Ap, w, 0.2, 0.2, gs, NULL);
    logp[i]   = xm;
    double lm = rl_policy_loss_gspo(5, logp, old, Ap, w, 0.2, 0.2, gs, NULL);
    logp[i]   = x0;
    double fd = (lp - lm) / ((double)xp - xm), err = fabs(fd - g[i]);
    worst     = err > worst ? err : worst;
  }
  check_value("GSPO: dlogp matches central differences of the loss", worst, 0, 1e-5);
}

static void test_value_loss(void)
{
  /* eps_v = 0.2.
   * i  v    v_old  R    v-v_old  vclip  (v-R)^2  (vclip-R)^2  branch           0.5*max  dv/w
   * 0  1.1  1.0    0.5  .1 in    1.1    .36      .36          tie: unclipped   .18      v-R = .6
   * 1  1.5  1.0    0.5  .5 out   1.2    1.0      .49          unclipped        .5       1.0
   * 2  1.5  1.0    2.0  .5 out   1.2    .25      .64          CLIPPED          .32      0 (outside band)
   * 3  0.5  1.0    0.0  -.5 out  0.8    .25      .64          CLIPPED          .32      0
   * w = 1, .5, .25, 1: loss = .18 + .25 + .08 + .32 = .83; clipfrac = 1.25 */
  float  v[4] = {1.1f, 1.5f, 1.5f, 0.5f}, vo[4] = {1.0f, 1.0f, 1.0f, 1.0f}, R[4] = {0.5f, 0.5f, 2.0f, 0.0f}, w[4] = {1, 0.5f, 0.25f, 1}, g[4];
  double cf = -1;
  const double want[4] = {0.6, 0.5, 0, 0};

  double loss = rl_value_loss(4, v, vo, R, w, 0.2, g, &cf);
  check_value("value loss: inside and outside the clip band, both branches (hand value .83)", loss, 0.83, 1e-6);
  check_array("value loss: dv = w*(v-R) unclipped, 0 when clipped outside the band", 4, g, want, 1e-6);
  check_value("value loss: clipfrac (.25 + 1)", cf, 1.25, 1e-12);

  /* eps_v = 0: plain 0.5*(v-R)^2: token 2 has (1.5-2)^2/2 = .125, dv = -.5 */
  float one = 1;
  loss = rl_value_loss(1, v + 2, vo + 2, R + 2, &one, 0, g, &cf);
  test_report(near(loss, 0.125, 1e-7) && near(g[0], -0.5, 1e-7) && cf == 0, "value loss: eps_v <= 0 means no clipping", NULL);
}

static void test_kl_loss(void)
{
  /* k3: x = ref - logp, term = e^x - x - 1, d/dlogp = 1 - e^x; coef 0.5.
   * 0: logp -1, ref -1.5: x = -.5, e^-.5 = .6065306597126334,
   *    term = .6065307 + .5 - 1 = .1065306597126334, w 1:
   *    loss .5*.1065307 = .0532653299; grad .5*(1-.6065307) = .1967346701, + 1 = 1.1967346701
   * 1: logp -2, ref -1: x = 1, term = e - 2 = .7182818284590451, w .5:
   *    loss .25*.7182818 = .1795704571; grad .25*(1-e) = -.4295704571, + (-.5) = -.9295704571
   * 2: w 0: dlogp stays 3
   * loss = .0532653299 + .1795704571 = .23283578697107798 */
  float  logp[3] = {-1.0f, -2.0f, NAN}, ref[3] = {-1.5f, -1.0f, 0.0f}, w[3] = {1, 0.5f, 0}, g[3] = {1.0f, -0.5f, 3.0f};
  const double want[3] = {1.1967346701436834, -0.9295704571147613, 3.0};
  double loss = rl_kl_loss(3, logp, ref, w, 0.5, RL_KL_K3, g);
  check_value("kl loss (k3): hand value (logp -1, ref -1.5 and logp -2, ref -1)", loss, 0.23283578697107798, 1e-7);
  check_array("kl loss (k3): gradient 1 - exp(ref - logp) added into dlogp", 3, g, want, 1e-6);

  /* k1 = -x, d/dlogp = 1; k2 = x^2/2, d/dlogp = -x; the same tokens (x = -.5 w 1; x = 1 w .5), coef .5:
   * k1: loss .5*.5 + .25*(-1) = 0; grads .5 and .25, + {1, -.5, 3} = {1.5, -.25, 3}
   * k2: loss .5*.125 + .25*.5 = .1875; grads .5*.5 = .25 and .25*(-1) = -.25 -> {1.25, -.75, 3} */
  float        g1[3] = {1.0f, -0.5f, 3.0f}, g2[3] = {1.0f, -0.5f, 3.0f};
  const double want1[3] = {1.5, -0.25, 3.0}, want2[3] = {1.25, -0.75, 3.0};
  loss = rl_kl_loss(3, logp, ref, w, 0.5, RL_KL_K1, g1);
  check_value("kl loss (k1 = log(pi/ref)): hand value 0 (the two tokens cancel)", loss, 0.0, 1e-7);
  check_array("kl loss (k1): gradient coef*w", 3, g1, want1, 1e-6);
  loss = rl_kl_loss(3, logp, ref, w, 0.5, RL_KL_K2, g2);
  check_value("kl loss (k2 = log(pi/ref)^2/2): hand value .1875", loss, 0.1875, 1e-7);
  check_array("kl loss (k2): gradient coef*w*log(pi/ref)", 3, g2, want2, 1e-6);
}

static void test_returns_baseline(void)
{
  /* B 2 rows of T 5. Row 0: start 1 len 3, rewards [.5 -1 2] (positions 1..3);
   * gamma .9: ret_3 = 2, ret_2 = -1 + .9*2 = .8, ret_1 = .5 + .9*.8 = 1.22.
   * Row 1: start 0 len 2, rewards [1 1]: ret_1 = 1, ret_0 = 1 + .9 = 1.9.
   * Positions outside the responses (rewards 7 there) are written 0. */
  const int    start[2] = {1, 0}, len[2] = {3, 2};
  const float  rw[10] = {7, 0.5f, -1, 2, 7, 1, 1, 7, 7, 7};
  float        ret[10];
  const double want[10] = {0, 1.22, 0.8, 2, 0, 1.9, 1, 0, 0, 0};
  for (int i = 0; i < 10; i++) ret[i] = NAN;
  rl_returns(2, 5, start, len, NULL, rw, 0.9, ret);
  check_array("returns: reward-to-go with gamma .9 by hand, 0 outside the responses", 10, ret, want, 1e-6);

  /* groups of 3 of [1 2 6 | 4 0]: means 3 and 2 -> [-2 -1 3 | 2 -2] */
  float        sc[5] = {1, 2, 6, 4, 0}, out[5];
  const double wb[5] = {-2, -1, 3, 2, -2};
  rl_grpo_advantages(5, 3, sc, 0.0, 0, out); /* REINFORCE++'s baseline: GRPO's advantages without the std */
  check_array("group baseline: score less its group's mean (a trailing group of 2 on its own)", 5, out, wb, 1e-7);
}

static void test_weights_overlong(void)
{
  /* a mini-batch of 2 sequences of 3 and 7 tokens (10 in all), max_len 8:
   * token mean 1/10 each; sequence mean 1/(2*3) and 1/(2*7), so each
   * sequence's tokens sum to 1/2; sequence sum over the constant 1/(2*8) */
  const double w[6] = {rl_token_weight(RL_AGG_TOKEN_MEAN, 10, 2, 3, 8), rl_token_weight(RL_AGG_TOKEN_MEAN, 10, 2, 7, 8), rl_token_weight(RL_AGG_SEQ_MEAN, 10, 2, 3, 8),
                       rl_token_weight(RL_AGG_SEQ_MEAN, 10, 2, 7, 8), rl_token_weight(RL_AGG_SEQ_SUM_NORM, 10, 2, 3, 8), rl_token_weight(RL_AGG_SEQ_SUM_NORM, 10, 2, 7, 8)};
  const double want[6] = {0.1, 0.1, 1.0 / 6, 1.0 / 14, 1.0 / 16, 1.0 / 16};
  int          ok = 1;
  for (int i = 0; i < 6; i++) ok &= near(w[i], want[i], 1e-15);
  test_report(ok ? PETSC_TRUE : PETSC_FALSE, "loss weights: token mean 1/10, sequence mean 1/6 and 1/14, sequence sum over max_len 8: 1/16 (hand values)", "%g %g %g %g %g %g", w[0], w[1], w[2], w[3], w[4], w[5]);
  test_report(rl_token_weight(RL_AGG_TOKEN_MEAN, 0, 0, 0, 8) == 0 && rl_token_weight(RL_AGG_SEQ_MEAN, 10, 2, 0, 8) == 0, "loss weights: an empty mini-batch or an empty sequence weighs 0", NULL);

  /* DAPO's overlong shaping, max_len 20, buffer 4, factor 1: free up to 16,
   * then (16 - len)/4: 17 -> -.25, 18 -> -.5, 20 -> -1; past max_len -1 */
  const int    len[6] = {10, 16, 17, 18, 20, 21};
  const double pen[6] = {0, 0, -0.25, -0.5, -1, -1};
  ok = 1;
  for (int i = 0; i < 6; i++) ok &= near(rl_overlong_penalty(len[i], 20, 4, 1.0), pen[i], 1e-15);
  test_report(ok ? PETSC_TRUE : PETSC_FALSE, "overlong penalty: 0 up to max_len - buffer, then linear to -factor (hand values at 10, 16, 17, 18, 20, 21 of 20, buffer 4)", NULL);
  test_report(rl_overlong_penalty(20, 20, 0, 1.0) == 0 && near(rl_overlong_penalty(19, 20, 2, 0.5), -0.25, 1e-15), "overlong penalty: buffer 0 is off; the factor scales it (19 of 20, buffer 2, factor .5: -.25)", NULL);
}

static void test_grpo(void)
{
  /* group [1 0 .5 .5]: mean .5, deviations .5 -.5 0 0, sum of squares .5,
   * sample variance .5/3, std .408248290463863; eps 1e-6:
   * .5/(.408248290463863 + 1e-6) = 1.2247418713989375.
   * group [2 2 2 2]: deviations 0 -> advantages 0. */
  float score[8] = {1, 0, 0.5f, 0.5f, 2, 2, 2, 2}, adv[8];
  const double want[8] = {1.2247418713989375, -1.2247418713989375, 0, 0, 0, 0, 0, 0};
  rl_grpo_advantages(8, 4, score, 1e-6, 1, adv);
  check_array("grpo advantages: sample std by hand, two groups, equal scores give 0", 8, adv, want, 1e-6);
  /* Dr. GRPO: the mean subtracted, no std: .5 -.5 0 0 and 0 0 0 0 */
  const double want_dr[8] = {0.5, -0.5, 0, 0, 0, 0, 0, 0};
  rl_grpo_advantages(8, 4, score, 1e-6, 0, adv);
  check_array("grpo advantages without the std (Dr. GRPO): score - group mean", 8, adv, want_dr, 1e-7);

  /* k = 2: [3 1] mean 2, sample std sqrt(2): +-1/(1.4142135623730951+1e-6) = .7071062811869011;
   * [0 4] mean 2, std sqrt(8): +-2/(2.8284271247461903+1e-6) = .7071065311866358 */
  float s2[4] = {3, 1, 0, 4}, a2[4];
  const double w2[4] = {0.7071062811869011, -0.7071062811869011, -0.7071065311866358, 0.7071065311866358};
  rl_grpo_advantages(4, 2, s2, 1e-6, 1, a2);
  check_array("grpo advantages: groups of 2", 4, a2, w2, 1e-6);
}

static void test_rloo(void)
{
  /* B = 5 rows of T = 4, k = 3: groups {0,1,2} and the partial group {3,4}.
   * Rewards (response positions in brackets, the rest must be ignored):
   *   row 0: start 1 len 2: [-.1 1.1]  -> R0 = 1.0
   *   row 1: start 0 len 3: [.5 -.25 .25] -> R1 = .5
   *   row 2: start 2 len 2: [-.5 -1]   -> R2 = -1.5
   *   row 3: start 0 len 1: [2]        -> R3 = 2
   *   row 4: start 1 len 3: [1 1 -1]   -> R4 = 1
   * group 1: A0 = 1 - (.5 - 1.5)/2 = 1.5, A1 = .5 - (1 - 1.5)/2 = .75, A2 = -1.5 - (1 + .5)/2 = -2.25
   *          (= 3/2 (R - mean), mean 0: 1.5, .75, -2.25; they sum to 0)
   * group 2 (k-1 = 1 other): A3 = 2 - 1 = 1, A4 = 1 - 2 = -1 */
  const int   start[5] = {1, 0, 2, 0, 1}, len[5] = {2, 3, 2, 1, 3};
  const float rw[20]   = {9, -0.1f, 1.1f, 9, 0.5f, -0.25f, 0.25f, 9, 9, 9, -0.5f, -1, 2, 9, 9, 9, 9, 1, 1, -1};
  float       adv[20];
  double      want[20] = {0, 1.5, 1.5, 0, 0.75, 0.75, 0.75, 0, 0, 0, -2.25, -2.25, 1, 0, 0, 0, 0, -1, -1, -1};
  for (int i = 0; i < 20; i++) adv[i] = NAN;
  rl_rloo_advantages(5, 4, start, len, NULL, rw, 3, adv);
  check_array("rloo advantages: return minus the mean of the other k-1 on each response token, 0 elsewhere, a partial last group", 20, adv, want, 1e-6);
  /* a group of one has no others: advantage 0 */
  const int   s1[1] = {0}, l1[1] = {2};
  const float r1[2] = {3, 4};
  float       a1[2] = {NAN, NAN};
  const double w1[2] = {0, 0};
  rl_rloo_advantages(1, 2, s1, l1, NULL, r1, 4, a1);
  check_array("rloo advantages: a lone sample gets 0", 2, a1, w1, 0);
}

/* ---- episodes: the span functions with a per-token source mask ---------
 * The definition (inc/rl.h): a masked row acts as the row compressed to its
 * model tokens, the unmasked function run on that, the results scattered
 * back. The rows: B 4 of T 10, sources M (model) and E (environment):
 *   row 0: start 2, len 7: M M E E M E M   (two answers between three segments)
 *   row 1: start 1, len 5: E M M E E       (an answer first and two at the end)
 *   row 2: start 3, len 4: E E E E         (no model token at all)
 *   row 3: start 0, len 3: M M M           (no answer: the unmasked row)
 * Outside the responses src says M and the inputs are NaN, as they are on
 * the environment's tokens: a function that reads either gives NaN. */
#define EP_B 4
#define EP_T 10
static const int ep_start[EP_B] = {2, 1, 3, 0}, ep_len[EP_B] = {7, 5, 4, 3};
static const char *const ep_rows[EP_B] = {"..MMEEMEM.", ".EMMEE....", "...EEEE...", "MMM......."};

static void ep_src(unsigned char *src)
{
  for (int b = 0; b < EP_B; b++)
    for (int t = 0; t < EP_T; t++) src[b * EP_T + t] = ep_rows[b][t] == 'E' ? 2 : RL_SRC_MODEL;
}

static int ep_in(int b, int t)
{
  return t >= ep_start[b] && t < ep_start[b] + ep_len[b];
}

/* x's values on the model tokens, at the response positions of the
 * compressed rows (start kept, length the model tokens: mlen), NaN elsewhere. */
static void ep_compress(const unsigned char *src, const float *x, float *y, int *mlen)
{
  for (int i = 0; i < EP_B * EP_T; i++) y[i] = NAN;
  for (int b = 0; b < EP_B; b++) {
    int k = ep_start[b];
    for (int t = ep_start[b]; t < ep_start[b] + ep_len[b]; t++)
      if (src[b * EP_T + t] == RL_SRC_MODEL) y[b * EP_T + k++] = x[b * EP_T + t];
    mlen[b] = k - ep_start[b];
  }
}

/* The compressed result y back to the model tokens' positions: want = base
 * everywhere else. */
static void ep_scatter(const unsigned char *src, const float *y, const double *base, double *want)
{
  for (int i = 0; i < EP_B * EP_T; i++) want[i] = base[i];
  for (int b = 0; b < EP_B; b++) {
    int k = ep_start[b];
    for (int t = ep_start[b]; t < ep_start[b] + ep_len[b]; t++)
      if (src[b * EP_T + t] == RL_SRC_MODEL) want[b * EP_T + t] = y[b * EP_T + k++];
  }
}

/* Inputs: distinct values on the model tokens, NaN on the environment's and outside. */
static void ep_input(const unsigned char *src, uint32_t c, double lo, double hi, float *x)
{
  for (int b = 0; b < EP_B; b++)
    for (int t = 0; t < EP_T; t++)
      x[b * EP_T + t] = ep_in(b, t) && src[b * EP_T + t] == RL_SRC_MODEL ? (float)(lo + (hi - lo) * rng_uniform(11, c, (uint32_t)b, (uint32_t)t, 0)) : NAN;
}

static void test_episodes(void)
{
  enum { N = EP_B * EP_T };
  unsigned char src[N];
  float         logp[N], ref[N], rew[N], val[N], x[N], cl[N], cr[N], cv[N], out[N], out2[N], rc[N], rc2[N];
  float         score[EP_B] = {1.5f, -0.75f, 4.0f, 0.25f};
  double        zero[N] = {0}, want[N], want2[N], keep[N];
  int           mlen[EP_B], counted = 1;

  ep_src(src);
  for (int b = 0; b < EP_B; b++) counted &= rl_model_tokens(src + b * EP_T, ep_start[b], ep_len[b]) == (int[]){4, 2, 0, 3}[b];
  test_report(counted && rl_model_tokens(NULL, 2, 7) == 7, "episodes: rl_model_tokens counts the model's tokens of a response (4, 2, 0, 3; NULL: the length)", NULL);

  ep_input(src, 0, -3, -0.5, logp);
  ep_input(src, 1, -3, -0.5, ref);
  ep_input(src, 2, -1, 1, rew);
  ep_input(src, 3, -1, 1, val);

  /* KL rewards: the score on the last model token (row 1: position 3, not
   * the answer after it), 0 on the answers, row 2 all 0 (its score dropped) */
  ep_compress(src, logp, cl, mlen);
  ep_compress(src, ref, cr, mlen);
  rl_kl_rewards(EP_B, EP_T, ep_start, mlen, NULL, cl, cr, score, 0.1, rc);
  ep_scatter(src, rc, zero, want);
  rl_kl_rewards(EP_B, EP_T, ep_start, ep_len, src, logp, ref, score, 0.1, out);
  check_array("episodes: kl rewards are the compressed row's, scattered back (0 on the environment's tokens, the score on the last model token)", N, out, want, 0);
  check_value("episodes: kl rewards: row 1's score is on position 3, its last model token", out[1 * EP_T + 3] - (-0.1 * ((double)logp[13] - ref[13])), 0.0 - 0.75, 1e-6);

  /* GAE and returns: the recursion over the model tokens */
  ep_compress(src, rew, cr, mlen);
  ep_compress(src, val, cv, mlen);
  rl_gae(EP_B, EP_T, ep_start, mlen, NULL, cr, cv, 0.9, 0.8, rc, rc2);
  ep_scatter(src, rc, zero, want);
  ep_scatter(src, rc2, zero, want2);
  rl_gae(EP_B, EP_T, ep_start, ep_len, src, rew, val, 0.9, 0.8, out, out2);
  check_array("episodes: gae advantages are the compressed row's, scattered back (0 on the environment's tokens)", N, out, want, 0);
  check_array("episodes: gae returns are the compressed row's, scattered back", N, out2, want2, 0);
  rl_returns(EP_B, EP_T, ep_start, mlen, NULL, cr, 0.9, rc);
  ep_scatter(src, rc, zero, want);
  rl_returns(EP_B, EP_T, ep_start, ep_len, src, rew, 0.9, out);
  check_array("episodes: returns are the compressed row's, scattered back", N, out, want, 0);

  /* By hand, one row M E M: r = 1 . 2, V = .5 . .25, gamma .9, lambda .8:
   *   t 2: delta = 2 - .25 = 1.75, A = 1.75, R = 2
   *   t 0: delta = 1 + .9*.25 - .5 = .725 (V next: the next MODEL token's), A = .725 + .72*1.75 = 1.985, R = 2.485 */
  {
    const int           s1[1] = {0}, l1[1] = {3};
    const unsigned char m1[3] = {1, 2, 1};
    const float         r1[3] = {1, NAN, 2}, v1[3] = {0.5f, NAN, 0.25f};
    float               a1[3], R1[3];
    const double        wa[3] = {1.985, 0, 1.75}, wr[3] = {2.485, 0, 2};
    rl_gae(1, 3, s1, l1, m1, r1, v1, 0.9, 0.8, a1, R1);
    check_array("episodes: gae by hand: V after a model token is the next model token's, across the answer", 3, a1, wa, 1e-6);
    check_array("episodes: gae by hand: returns A + V, 0 on the answer", 3, R1, wr, 1e-6);
  }

  /* whitening: statistics over the model tokens; the environment's and the
   * outside entries (finite here, 100 + index: reading them moves the mean) left alone */
  double wm1, ws1, wm2, ws2;
  for (int i = 0; i < N; i++) x[i] = rew[i];
  for (int b = 0; b < EP_B; b++)
    for (int t = 0; t < EP_T; t++)
      if (!(ep_in(b, t) && src[b * EP_T + t] == RL_SRC_MODEL)) x[b * EP_T + t] = (float)(100 + b * EP_T + t);
  for (int i = 0; i < N; i++) keep[i] = x[i];
  ep_compress(src, x, rc, mlen);
  rl_whiten(EP_B, EP_T, ep_start, mlen, NULL, rc, &wm1, &ws1);
  ep_scatter(src, rc, keep, want);
  rl_whiten(EP_B, EP_T, ep_start, ep_len, src, x, &wm2, &ws2);
  check_array("episodes: whitening over the model tokens, the environment's tokens left alone", N, x, want, 0);
  test_report(wm1 == wm2 && ws1 == ws2 && ws2 > 0, "episodes: whitening's statistics are the model tokens'", "mean %g/%g std %g/%g", wm1, wm2, ws1, ws2);

  /* RLOO, groups of 2: {0, 1}, {2, 3}; row 2 has no model token: return 0 */
  ep_compress(src, rew, cr, mlen);
  rl_rloo_advantages(EP_B, EP_T, ep_start, mlen, NULL, cr, 2, rc);
  ep_scatter(src, rc, zero, want);
  for (int i = 0; i < N; i++) out[i] = NAN;
  rl_rloo_advantages(EP_B, EP_T, ep_start, ep_len, src, rew, 2, out);
  check_array("episodes: rloo returns sum the model tokens, advantages on the model tokens only", N, out, want, 0);
  double R3 = 0;
  for (int t = 0; t < 3; t++) R3 += rew[3 * EP_T + t];
  check_value("episodes: rloo: the row without model tokens returns 0 (row 3's advantage is its own return)", out[3 * EP_T], (float)R3, 0);

  /* a batch whose only row has no model token: everything 0, whitening's statistics 0 */
  {
    const int           s1[1] = {1}, l1[1] = {3};
    const unsigned char e1[5] = {1, 2, 2, 2, 1};
    const float         n1[5] = {NAN, NAN, NAN, NAN, NAN}, sc[1] = {3};
    float               o1[5], o2[5], y1[5] = {7, 8, 9, 10, 11};
    double              mm = -1, ss = -1;
    const double        z5[5] = {0, 0, 0, 0, 0}, y5[5] = {7, 8, 9, 10, 11};
    rl_kl_rewards(1, 5, s1, l1, e1, n1, n1, sc, 0.1, o1);
    check_array("episodes, no model token: kl rewards 0 (the score has no token)", 5, o1, z5, 0);
    rl_gae(1, 5, s1, l1, e1, n1, n1, 1.0, 1.0, o1, o2);
    check_array("episodes, no model token: gae advantages 0", 5, o1, z5, 0);
    check_array("episodes, no model token: gae returns 0", 5, o2, z5, 0);
    rl_returns(1, 5, s1, l1, e1, n1, 1.0, o1);
    check_array("episodes, no model token: returns 0", 5, o1, z5, 0);
    rl_rloo_advantages(1, 5, s1, l1, e1, n1, 2, o1);
    check_array("episodes, no model token: rloo advantages 0", 5, o1, z5, 0);
    rl_whiten(1, 5, s1, l1, e1, y1, &mm, &ss);
    check_array("episodes, no model token: whitening leaves x alone", 5, y1, y5, 0);
    test_report(mm == 0 && ss == 0, "episodes, no model token: whitening's statistics 0", NULL);
  }
}

static void test_rm_loss(void)
{
  /* loss = softplus(-d), d = rc - rr; d loss/d rc = -sigmoid(-d)/B.
   *   d = 0:   log 2 = .6931471805599453, sigmoid(0) = .5
   *   d = 2:   log1p(e^-2) = .1269280110429725, sigmoid(-2) = .11920292202211755
   *   d = -30: 30 + log1p(e^-30) = 30.000000000000092, sigmoid(30) = .9999999999999065
   *   d = 30:  log1p(e^-30) = 9.357622968839737e-14, sigmoid(-30) = 9.357622968839299e-14
   *   d = -2000: 2000 + log1p(e^-2000) = 2000 exactly in double, sigmoid(2000) = 1
   *   mean of the first four: 7.705018797900776 */
  const float  rc[5] = {1, 2.5f, -15, 15, -1000}, rr[5] = {1, 0.5f, 15, -15, 1000};
  const double lw[5] = {0.6931471805599453, 0.1269280110429725, 30.000000000000092, 9.357622968839737e-14, 2000.0};
  const double sg[5] = {0.5, 0.11920292202211755, 0.9999999999999065, 9.357622968839299e-14, 1.0};
  const char  *name[5] = {"rm loss: d = 0 gives log 2", "rm loss: d = 2", "rm loss: d = -30", "rm loss: d = +30 is tiny, positive and finite", "rm loss: d = -2000 is finite (2000; a naive -log(sigmoid) gives inf)"};
  float        drc[4], drr[4];
  int          nc = -1;
  char         detail[200];

  for (int i = 0; i < 5; i++) {
    float  a, b;
    int    c;
    double l = rl_rm_loss(1, rc + i, rr + i, &a, &b, &c);
    snprintf(detail, sizeof detail, "loss %.17g (want %.17g), drc %.9g drr %.9g (want -+%.9g), correct %d", l, lw[i], (double)a, (double)b, sg[i], c);
    test_report(isfinite(l) && l > 0 && near(l, lw[i], 1e-12 * (1 + lw[i])) && near(a, -sg[i], 1e-7 * sg[i] + 1e-20) && near(b, sg[i], 1e-7 * sg[i] + 1e-20) && c == (rc[i] > rr[i]), name[i], "%s", detail);
  }
  double l = rl_rm_loss(4, rc, rr, drc, drr, &nc);
  const double gw[4] = {-0.125, -0.029800730505529387, -0.24999999999997663, -2.3394057422098247e-14};
  snprintf(detail, sizeof detail, "loss %.17g, correct %d", l, nc);
  test_report(near(l, 7.705018797900776, 1e-12) && nc == 2, "rm loss: mean over 4 pairs, 2 correct (d = 2 and 30; d = 0 is not)", "%s", detail);
  int ok = 1;
  for (int i = 0; i < 4; i++) ok = ok && near(drc[i], gw[i], 1e-7 * fabs(gw[i])) && drr[i] == -drc[i];
  test_report(ok, "rm loss: gradients -sigmoid(-d)/B for chosen, +sigmoid(-d)/B for rejected", NULL);
  /* a replica's share: pairs 1..2 of the 4 give the sum of their losses
   * (.1269280110429725 + 30.000000000000092) and the batch mean's gradients */
  float pc[2], pr[2];
  int   pn = -1;
  double ls = rl_rm_loss_part(2, 4, rc + 1, rr + 1, pc, pr, &pn);
  snprintf(detail, sizeof detail, "sum %.17g, correct %d, drc %.9g %.9g", ls, pn, (double)pc[0], (double)pc[1]);
  test_report(near(ls, 30.126928011043065, 1e-12) && pn == 1 && pc[0] == drc[1] && pc[1] == drc[2] && pr[0] == drr[1] && pr[1] == drr[2], "rm loss of a share: sum of its losses, gradients of the batch mean (1/B)", "%s", detail);
}

static void test_kl_adapt(void)
{
  /* coef .1, target 6, horizon 10000, nsteps 256:
   *   kl 12:  12/6-1 = 1 -> .2:    .1*(1 + .2*256/10000) = .1*1.00512 = .100512
   *   kl 0:   -1 -> -.2:           .1*(1 - .00512) = .099488
   *   kl 6.6: 6.6/6-1 = .1:        .1*(1 + .1*.0256) = .100256 */
  check_value("adaptive kl: error clamped at +0.2", rl_kl_adapt(0.1, 12, 6, 10000, 256), 0.100512, 1e-15);
  check_value("adaptive kl: error clamped at -0.2", rl_kl_adapt(0.1, 0, 6, 10000, 256), 0.099488, 1e-15);
  check_value("adaptive kl: error inside the clamp", rl_kl_adapt(0.1, 6.6, 6, 10000, 256), 0.100256, 1e-15);
}

/* Finite differences: perturb one float input by +-h, divide the loss change
 * by the perturbation actually representable in float. Points within `kink`
 * of a non-differentiable point are skipped. Tolerance: central differences
 * with h = 1e-3 have O(h^2) truncation error on O(1) curvature, so 1e-5
 * absolute plus 1e-4 relative. */
#define FD_N 256
static double uni(uint32_t i, uint32_t c, double lo, double hi)
{
  return lo + (hi - lo) * rng_uniform(7, 99, i, c, 0);
}

static void test_fd(void)
{
  const float h = 1e-3f;
  float       logp[FD_N], old[FD_N], A[FD_N], w[FD_N], g[FD_N], v[FD_N], vo[FD_N], R[FD_N], ref[FD_N], gk[FD_N], scratch[FD_N];
  double      worst;
  int         checked, nclip, ok;
  char        detail[200];

  for (int i = 0; i < FD_N; i++) {
    logp[i] = (float)uni(i, 0, -3, -0.5);
    old[i]  = (float)(logp[i] + uni(i, 1, -0.45, 0.45)); /* rho in [0.64, 1.57] */
    A[i]    = (float)uni(i, 2, -2, 2);
    w[i]    = i % 17 == 5 ? 0.0f : 1.0f / 64;
    v[i]    = (float)uni(i, 3, -1, 1);
    vo[i]   = (float)(v[i] + uni(i, 4, -0.5, 0.5));
    R[i]    = (float)uni(i, 5, -1.5, 1.5);
    ref[i]  = (float)(logp[i] + uni(i, 6, -1, 1));
  }

  /* policy loss */
  rl_policy_loss(FD_N, logp, old, A, w, 0.2, 0.28, g, NULL);
  worst = 0, checked = 0, nclip = 0, ok = 1;
  for (int i = 0; i < FD_N; i++) {
    double rho = exp((double)logp[i] - old[i]);
    if (fabs(rho - 0.8) < 0.01 || fabs(rho - 1.28) < 0.01) continue;
    float  x0 = logp[i], xp = x0 + h, xm = x0 - h;
    logp[i] = xp;
    double lp = rl_policy_loss(FD_N, logp, old, A, w, 0.2, 0.28, scratch, NULL);
    logp[i] = xm;
    double lm = rl_policy_loss(FD_N, logp, old, A, w, 0.2, 0.28, scratch, NULL);
    logp[i] = x0;
    double fd = (lp - lm) / ((double)xp - xm), err = fabs(fd - g[i]);
    checked++, nclip += g[i] == 0 && w[i] != 0;
    if (err > 1e-5 + 1e-4 * fabs(fd)) ok = 0;
    worst = err > worst ? err : worst;
  }
  snprintf(detail, sizeof detail, "%d tokens (%d clipped), worst |fd - dlogp| %.3g", checked, nclip, worst);
  test_report(ok && checked > 200 && nclip > 10, "policy loss (clip 0.2 below, 0.28 above): dlogp matches central differences on random inputs", "%s", detail);

  /* value loss: kinks at |v - v_old| = eps_v and, outside the band, where the
   * two squares are equal (inside the band they are equal everywhere) */
  rl_value_loss(FD_N, v, vo, R, w, 0.2, g, NULL);
  worst = 0, checked = 0, nclip = 0, ok = 1;
  for (int i = 0; i < FD_N; i++) {
    double dvo = (double)v[i] - vo[i], dc = vo[i] + fmax(-0.2, fmin(0.2, dvo)) - R[i], du = (double)v[i] - R[i];
    if (fabs(fabs(dvo) - 0.2) < 0.01 || (fabs(dvo) > 0.2 && fabs(du * du - dc * dc) < 0.01)) continue;
    float  x0 = v[i], xp = x0 + h, xm = x0 - h;
    v[i] = xp;
    double lp = rl_value_loss(FD_N, v, vo, R, w, 0.2, scratch, NULL);
    v[i] = xm;
    double lm = rl_value_loss(FD_N, v, vo, R, w, 0.2, scratch, NULL);
    v[i] = x0;
    double fd = (lp - lm) / ((double)xp - xm), err = fabs(fd - g[i]);
    checked++, nclip += g[i] == 0 && w[i] != 0;
    if (err > 1e-5 + 1e-4 * fabs(fd)) ok = 0;
    worst = err > worst ? err : worst;
  }
  snprintf(detail, sizeof detail, "%d tokens (%d clipped), worst |fd - dv| %.3g", checked, nclip, worst);
  test_report(ok && checked > 150 && nclip > 10, "value loss: dv matches central differences on random inputs", "%s", detail);

  /* kl loss, each estimator: smooth everywhere; gradient added into zeros */
  for (int e = RL_KL_K1; e <= RL_KL_K3; e++) {
    for (int i = 0; i < FD_N; i++) gk[i] = 0;
    rl_kl_loss(FD_N, logp, ref, w, 0.3, (RLKLEstimator)e, gk);
    worst = 0, ok = 1;
    for (int i = 0; i < FD_N; i++) {
      float  x0 = logp[i], xp = x0 + h, xm = x0 - h;
      logp[i] = xp;
      double lp = rl_kl_loss(FD_N, logp, ref, w, 0.3, (RLKLEstimator)e, scratch);
      logp[i] = xm;
      double lm = rl_kl_loss(FD_N, logp, ref, w, 0.3, (RLKLEstimator)e, scratch);
      logp[i] = x0;
      double fd = (lp - lm) / ((double)xp - xm), err = fabs(fd - gk[i]);
      if (err > 1e-5 + 1e-4 * fabs(fd)) ok = 0;
      worst = err > worst ? err : worst;
    }
    snprintf(detail, sizeof detail, "worst |fd - dlogp| %.3g", worst);
    char name[96];
    snprintf(name, sizeof name, "kl loss (k%d): dlogp matches central differences on random inputs", e + 1);
    test_report(ok, name, "%s", detail);
  }
}

/* -env_reward_at turn by hand: one episode M M E M M E M (1 model, 2 the
 * environment's), step rewards .25 and .5 answering turns 1 and 2 (on
 * positions 1 and 4, their last model tokens) and a final score of 1 that
 * includes them: the end keeps 1 - .75 = .25. With the KL off the rewards
 * are 0 .25 0 0 .5 0 .25; GAE with gamma = lambda = 1 and V = 0 gives each
 * model token what follows it: 1 1 0 .75 .75 0 .25 (the first turn's
 * tokens are credited with its step reward, the last turn's only with the
 * end). With kl 0.1 each model token also gets -0.1 (logp - ref). */
static void test_turn_rewards(void)
{
  const int           s[1] = {0}, l[1] = {7};
  const unsigned char src[7] = {1, 1, 2, 1, 1, 2, 1};
  const float         at[7] = {0, 0.25f, 0, 0, 0.5f, 0, 0}, score[1] = {1.0f}, zero[7] = {0};
  const float         logp[7] = {-1, -2, NAN, -0.5f, -1.5f, NAN, -3}, ref[7] = {-1.5f, -1, NAN, -0.5f, -2, NAN, -2};
  const double        wr[7] = {0, 0.25, 0, 0, 0.5, 0, 0.25}, wa[7] = {1, 1, 0, 0.75, 0.75, 0, 0.25};
  double              wk[7];
  float               end[1], r[7], a[7], R[7];

  rl_end_scores(1, 7, s, l, src, at, score, end);
  check_value("turn rewards: the end keeps the score less the step rewards (1 - .75)", end[0], 0.25, 0);
  rl_kl_rewards_at(1, 7, s, l, src, zero, zero, end, at, 0.1, r);
  check_array("turn rewards: step rewards on their turns' last model tokens, the rest of the score at the end", 7, r, wr, 0);
  rl_gae(1, 7, s, l, src, r, zero, 1.0, 1.0, a, R);
  check_array("turn rewards: GAE (gamma = lambda = 1, V = 0) credits each turn with what follows it", 7, a, wa, 1e-7);
  rl_kl_rewards_at(1, 7, s, l, src, logp, ref, end, at, 0.1, r);
  for (int t = 0; t < 7; t++) wk[t] = src[t] == 1 ? wr[t] - 0.1 * ((double)logp[t] - (double)ref[t]) : 0;
  check_array("turn rewards: with kl 0.1 each model token also gets -0.1 (logp - ref), the environment's none", 7, r, wk,
              1e-7);
  rl_kl_rewards_at(1, 7, s, l, src, logp, ref, score, NULL, 0.1, a);
  rl_kl_rewards(1, 7, s, l, src, logp, ref, score, 0.1, R);
  check_array("turn rewards: no positions (NULL) is rl_kl_rewards", 7, a, (double[]){R[0], R[1], R[2], R[3], R[4], R[5], R[6]}, 0);
}

int main(int argc, char **argv)
{
  if (PetscInitialize(&argc, &argv, NULL, "Tests of the RL math (src/rl/rlmath.c).\n")) return 1;
  test_kl_rewards();
  test_final_score();
  test_gae();
  test_whiten();
  test_policy_loss();
  test_behaviour_weights();
  test_cispo();
  test_gspo();
  test_value_loss();
  test_kl_loss();
  test_weights_overlong();
  test_returns_baseline();
  test_grpo();
  test_rloo();
  test_episodes();
  test_turn_rewards();
  test_rm_loss();
  test_kl_adapt();
  test_fd();
  PetscFinalize();
  return test_tally();
}
