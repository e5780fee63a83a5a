/* One PPO iteration's experience: the rollout arrays, packing sequences into
 * model forward rows, the three inference calls (reference log-probs,
 * reward-model scores, critic values) and the advantages.
 *
 * Alignment: per-position arrays are indexed by the position t of the token
 * they describe. A causal model's output at row s describes position s+1
 * (the log-probability of token s+1 given tokens 0..s; the value of the state
 * before token s+1), so forward row s maps to aligned index s+1. */
#include "base.h"
#include <math.h>
#include <string.h>

PetscErrorCode rollout_create(int B, int T, PetscBool masked, Rollout *r)
{
  size_t n = (size_t)B * T;

  PetscFunctionBegin;
  r->B = B;
  r->T = T;
  PetscCall(gen_batch_create(B, T, masked, &r->gen));
  PetscCall(PetscCalloc5(n, &r->ref, n, &r->values, n, &r->rewards, n, &r->adv, n, &r->ret));
  PetscCall(PetscCalloc5(B, &r->score, B, &r->final, B, &r->gold, B, &r->start, B, &r->len));
  PetscCall(PetscCalloc2(B, &r->rule, (size_t)B * PPO_REWARD_PARTS, &r->parts));
  PetscCall(PetscCalloc4(B, &r->env.reward, B, &r->env.seconds, B, &r->env.calls, n, &r->env.at));
  r->envs = NULL;
  r->answer = r->meta = NULL;
  r->pidx   = NULL;
  r->Bcap   = B;
  r->dyn.kept = r->dyn.filled = 0;
  r->async.batch   = -1;
  r->async.version = r->async.tver = NULL;
  r->async.ppos    = NULL;
  r->off.prox = r->off.isw = NULL;
  r->off.on = r->scored = r->episodes = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_destroy(Rollout *r)
{
  PetscFunctionBegin;
  PetscCall(PetscFree4(r->env.reward, r->env.seconds, r->env.calls, r->env.at));
  PetscCall(gen_batch_destroy(&r->gen));
  PetscCall(PetscFree5(r->ref, r->values, r->rewards, r->adv, r->ret));
  PetscCall(PetscFree5(r->score, r->final, r->gold, r->start, r->len));
  PetscCall(PetscFree2(r->rule, r->parts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode packbuf_create(int nmax, int T, PackBuf *pb)
{
  size_t n = (size_t)nmax * T;

  PetscFunctionBegin;
  pb->nmax     = nmax;
  pb->T        = T;
  pb->mask_cap = 0;
  pb->mask_ids = NULL;
  PetscCall(PetscMalloc3(n, &pb->tok, n, &pb->target, n + 1, &pb->mask_off));
  PetscCall(PetscMalloc3(n, &pb->lp, n, &pb->ent, n, &pb->val));
  PetscCall(PetscMalloc3(T, &pb->al, T, &pb->dal, T, &pb->w));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode packbuf_destroy(PackBuf *pb)
{
  PetscFunctionBegin;
  PetscCall(PetscFree3(pb->tok, pb->target, pb->mask_off));
  PetscCall(PetscFree3(pb->lp, pb->ent, pb->val));
  PetscCall(PetscFree3(pb->al, pb->dal, pb->w));
  PetscCall(PetscFree(pb->mask_ids));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Tokens of sequences idx[] into rows of length Tf, with LM targets (the
 * response tokens: of episodes the model's only, so that the environment's
 * get no log-probability, 0, from any forward) and the generation's allowed
 * sets per row. */
static PetscErrorCode pack_rows(const Rollout *r, const int *idx, int nb, int Tf, PackBuf *pb)
{
  const GenBatch *g = &r->gen;
  size_t          nid = 0;

  PetscFunctionBegin;
  PetscCheck(nb <= pb->nmax && Tf <= pb->T, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "pack_rows: %d x %d rows exceed the buffer's %d x %d", nb, Tf, pb->nmax, pb->T);
  for (int i = 0; i < nb; i++) {
    const int *tok = g->tokens + (size_t)idx[i] * r->T;
    int        P = r->start[idx[i]], end = P + r->len[idx[i]];

    for (int s = 0; s < Tf; s++) {
      int t = s + 1, row = i * Tf + s;
      pb->tok[row]      = s < end ? tok[s] : TASK_PAD;
      pb->target[row]   = (t >= P && t < end && rollout_is_model(r, idx[i], t)) ? tok[t] : -1;
      pb->mask_off[row] = (int)nid;
      if (g->mask_off && pb->target[row] >= 0) {
        size_t k0 = (size_t)g->mask_off[(size_t)idx[i] * r->T + t],
               k1 = (size_t)g->mask_off[(size_t)idx[i] * r->T + t + 1];
        if (nid + (k1 - k0) > pb->mask_cap) {
          pb->mask_cap = 2 * (nid + (k1 - k0)) + 1024;
          PetscCall(PetscRealloc(pb->mask_cap * sizeof(int), &pb->mask_ids));
        }
        PetscCall(PetscArraycpy(pb->mask_ids + nid, g->mask_ids + k0, k1 - k0));
        nid += k1 - k0;
      }
    }
  }
  pb->mask_off[nb * Tf] = (int)nid;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rows needed: up to the last response token's predecessor (log-probs,
 * values of states) or the whole sequence (the score at the last token). */
static int rows_needed(const Rollout *r, const int *idx, int nb, PetscBool full_length)
{
  int Tf = 1;
  for (int i = 0; i < nb; i++) Tf = PetscMax(Tf, r->start[idx[i]] + r->len[idx[i]] - (full_length ? 0 : 1));
  return Tf;
}

PetscErrorCode rollout_forward_logprobs(Model *m, const Rollout *r, const int *idx, int nb, float inv_temp, PackBuf *pb,
                                        int *Tf)
{
  ModelTokenDist dist;

  PetscFunctionBegin;
  *Tf = rows_needed(r, idx, nb, PETSC_FALSE);
  PetscCall(pack_rows(r, idx, nb, *Tf, pb));
  dist = (ModelTokenDist){inv_temp, r->gen.mask_off ? pb->mask_off : NULL, pb->mask_ids};
  PetscCall(model_forward(m, pb->tok, nb, *Tf));
  if (model_last_stage(m)) PetscCall(model_logprobs_dist(m, pb->target, &dist, pb->lp, pb->ent));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_forward_values(Model *m, const Rollout *r, const int *idx, int nb, PetscBool full_length,
                                      PackBuf *pb, int *Tf)
{
  PetscFunctionBegin;
  *Tf = rows_needed(r, idx, nb, full_length);
  PetscCall(pack_rows(r, idx, nb, *Tf, pb));
  PetscCall(model_forward(m, pb->tok, nb, *Tf));
  if (model_last_stage(m)) PetscCall(model_values_get(m, pb->val));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Scatters forward-row values (row s -> position s+1) of the response
 * positions of sequence idx into an aligned [B,T] array (of episodes the
 * model's positions only: the callers zeroed the rest). */
static void scatter_response(const Rollout *r, int idx, const float *rows, int i, int Tf, float *out)
{
  int P = r->start[idx], end = P + r->len[idx];
  for (int t = P; t < end; t++)
    if (rollout_is_model(r, idx, t)) out[(size_t)idx * r->T + t] = rows[i * Tf + t - 1];
}

static void micro_indices(int b0, int nb, int *idx)
{
  for (int i = 0; i < nb; i++) idx[i] = b0 + i;
}

/* Rows [b0, b1) in micro-batches of nmicro through the model's stages; the
 * last stage hands each micro-batch's outputs to take(). */
typedef PetscErrorCode (*TakeFn)(Rollout *r, const PPOOptions *o, const PackBuf *pb, const int *idx, int nb, int Tf);

static PetscErrorCode rows_inference(Model *m, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1, int nmicro,
                                     PetscBool logprobs, PetscBool full_length, TakeFn take)
{
  int *idx, Tf;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(nmicro, &idx));
  for (int a = b0; a < b1; a += nmicro) {
    int nb = PetscMin(nmicro, b1 - a);
    micro_indices(a, nb, idx);
    if (logprobs) PetscCall(rollout_forward_logprobs(m, r, idx, nb, (float)(1.0 / o->gen.temperature), pb, &Tf));
    else PetscCall(rollout_forward_values(m, r, idx, nb, full_length, pb, &Tf));
    if (model_last_stage(m)) PetscCall(take(r, o, pb, idx, nb, Tf));
  }
  PetscCall(PetscFree(idx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode take_ref(Rollout *r, const PPOOptions *o, const PackBuf *pb, const int *idx, int nb, int Tf)
{
  (void)o;
  for (int i = 0; i < nb; i++) scatter_response(r, idx[i], pb->lp, i, Tf, r->ref);
  return PETSC_SUCCESS;
}

static PetscErrorCode take_score(Rollout *r, const PPOOptions *o, const PackBuf *pb, const int *idx, int nb, int Tf)
{
  (void)o;
  for (int i = 0; i < nb; i++) {
    int b       = idx[i];
    r->score[b] = pb->val[i * Tf + r->start[b] + r->len[b] - 1];
  }
  return PETSC_SUCCESS;
}

static PetscErrorCode take_values(Rollout *r, const PPOOptions *o, const PackBuf *pb, const int *idx, int nb, int Tf)
{
  (void)o;
  for (int i = 0; i < nb; i++) scatter_response(r, idx[i], pb->val, i, Tf, r->values);
  return PETSC_SUCCESS;
}

/* Log-probabilities of rows [b0, b1) into out (zero outside responses). */
static PetscErrorCode logprob_rows(Model *m, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1, int nmicro,
                                   float *out, TakeFn take)
{
  PetscFunctionBegin;
  PetscCall(PetscArrayzero(out + (size_t)b0 * r->T, (size_t)(b1 - b0) * r->T));
  PetscCall(rows_inference(m, r, o, pb, b0, b1, nmicro, PETSC_TRUE, PETSC_FALSE, take));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_ref_inference(Model *ref, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                     int nmicro)
{
  PetscFunctionBegin;
  PetscCall(logprob_rows(ref, r, o, pb, b0, b1, nmicro, r->ref, take_ref));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode take_prox(Rollout *r, const PPOOptions *o, const PackBuf *pb, const int *idx, int nb, int Tf)
{
  (void)o;
  for (int i = 0; i < nb; i++) scatter_response(r, idx[i], pb->lp, i, Tf, r->off.prox);
  return PETSC_SUCCESS;
}

PetscErrorCode rollout_prox_inference(Model *actor, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                      int nmicro)
{
  PetscFunctionBegin;
  PetscCall(logprob_rows(actor, r, o, pb, b0, b1, nmicro, r->off.prox, take_prox));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_reward_inference(Model *reward, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                        int nmicro)
{
  PetscFunctionBegin;
  PetscCall(rows_inference(reward, r, o, pb, b0, b1, nmicro, PETSC_FALSE, PETSC_TRUE, take_score));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_critic_inference(Model *critic, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                        int nmicro)
{
  PetscFunctionBegin;
  PetscCall(PetscArrayzero(r->values + (size_t)b0 * r->T, (size_t)(b1 - b0) * r->T));
  PetscCall(rows_inference(critic, r, o, pb, b0, b1, nmicro, PETSC_FALSE, PETSC_FALSE, take_values));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_infer_rows(Model *m, RolloutInfer kind, Rollout *r, const PPOOptions *o, PackBuf *pb,
                                  const int *idx, int nb)
{
  static const TakeFn take[3] = {take_ref, take_score, take_values};
  int                 Tf;

  PetscFunctionBegin;
  if (!nb) PetscFunctionReturn(PETSC_SUCCESS);
  for (int i = 0; i < nb; i++) {
    if (kind == ROLLOUT_REF) PetscCall(PetscArrayzero(r->ref + (size_t)idx[i] * r->T, r->T));
    if (kind == ROLLOUT_VALUES) PetscCall(PetscArrayzero(r->values + (size_t)idx[i] * r->T, r->T));
  }
  if (kind == ROLLOUT_REF)
    PetscCall(rollout_forward_logprobs(m, r, idx, nb, (float)(1.0 / o->gen.temperature), pb, &Tf));
  else PetscCall(rollout_forward_values(m, r, idx, nb, kind == ROLLOUT_SCORE ? PETSC_TRUE : PETSC_FALSE, pb, &Tf));
  if (model_last_stage(m)) PetscCall(take[kind](r, o, pb, idx, nb, Tf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The first non-finite value of a [B,T] array over the model's response tokens (an environment's have no
 * log-probability), or of a [B] array: 1 with its row and response token set. One pass over rows already in
 * memory. */
static int first_bad(const Rollout *r, const float *x, PetscBool per_token, int *row, int *tok)
{
  for (int b = 0; b < r->B; b++) {
    int t0 = PetscMax(0, PetscMin(r->start[b], r->T)), t1 = PetscMax(t0, PetscMin(r->start[b] + r->len[b], r->T));
    if (!per_token) {
      if (!isfinite(x[b])) return *row = b, *tok = -1, 1;
      continue;
    }
    for (int t = t0; t < t1; t++)
      if (rollout_is_model(r, b, t) && !isfinite(x[(size_t)b * r->T + t])) return *row = b, *tok = t - t0, 1;
  }
  return 0;
}

static const char *fp_name(double x) { return isnan(x) ? "NaN" : x > 0 ? "+Inf" : "-Inf"; }

/* A NaN or Inf that enters the advantages surfaces only as a NaN loss in the
 * training that follows; refused here, at the batch, naming the array, the
 * sample and the input that gave it. */
static PetscErrorCode rollout_check_finite(const Rollout *r, const PPOOptions *o, long long iteration)
{
  char actor[PETSC_MAX_PATH_LEN + 96];
  int  b, t;

  PetscFunctionBegin;
  if (o->restart[0] && o->async_staleness)
    PetscCall(PetscSNPrintf(actor, sizeof actor, "read from -restart %s's /async batches, or generated by its actor",
                            o->restart));
  else
    PetscCall(PetscSNPrintf(actor, sizeof actor, "generated by the actor of %s %s",
                            o->restart[0] ? "-restart" : "-actor_checkpoint",
                            o->restart[0] ? o->restart : o->actor_ckpt));
  PetscCheck(!first_bad(r, r->gen.logprobs, PETSC_TRUE, &b, &t), PETSC_COMM_WORLD, PETSC_ERR_FP,
             "iteration %lld: the behaviour log-probability of sample %d, response token %d is %s (%s)", iteration, b,
             t, fp_name(r->gen.logprobs[(size_t)b * r->T + r->start[b] + t]), actor);
  PetscCheck(!first_bad(r, r->ref, PETSC_TRUE, &b, &t), PETSC_COMM_WORLD, PETSC_ERR_FP,
             "iteration %lld: the reference log-probability of sample %d, response token %d is %s (the reference of "
             "%s)",
             iteration, b, t, fp_name(r->ref[(size_t)b * r->T + r->start[b] + t]),
             o->reference_ckpt[0] ? o->reference_ckpt : o->restart[0] ? o->restart : o->actor_ckpt);
  PetscCheck(!first_bad(r, r->final, PETSC_FALSE, &b, &t), PETSC_COMM_WORLD, PETSC_ERR_FP,
             "iteration %lld: the score of sample %d is %s (reward model %s)", iteration, b, fp_name(r->final[b]),
             o->reward.checkpoint[0] ? o->reward.checkpoint : "none: the rule rewards'");
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_advantages(Rollout *r, const PPOOptions *o, double kl_coef, long long iteration)
{
  const double kr = ppo_kl_as_loss(o) ? 0.0 : kl_coef; /* the KL's coefficient in the rewards */

  PetscFunctionBegin;
  PetscCheck(!r->episodes || r->gen.src, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "rollout_advantages: iteration %lld's rollout holds episodes but no per-token sources (gen.src)",
             iteration);
  rollout_final_scores(r, o);
  PetscCall(rollout_check_finite(r, o, iteration));
  PetscCall(ppo_algo(o)->advantages(r, o, kr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Episodes: each token's turn, 0 on the prompt (and past the response), k
 * on the model's k-th segment and on the environment's answer to it. */
static void rollout_turns(const Rollout *r, int *turn)
{
  for (int b = 0; b < r->B; b++) {
    const unsigned char *src = r->gen.src + (size_t)b * r->T;
    int                 *row = turn + (size_t)b * r->T, k = 0, s = r->start[b], e = s + r->len[b];
    for (int t = 0; t < r->T; t++) {
      PetscBool in = (PetscBool)(t >= s && t < e);
      if (in && src[t] == GEN_SRC_MODEL && (t == s || src[t - 1] != GEN_SRC_MODEL)) k++; /* a segment begins */
      row[t] = in ? k : 0;
    }
  }
}

PetscErrorCode rollout_episode_datasets(const Rollout *r, IODataset *d, int *nd, int **turn)
{
  PetscFunctionBegin;
  *turn = NULL;
  if (!r->episodes) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1((size_t)r->B * r->T, turn));
  rollout_turns(r, *turn);
  d[(*nd)++] = (IODataset){"source", 2, {r->B, r->T}, r->gen.src, IO_DATASET_U8};
  d[(*nd)++] = (IODataset){"turn", 2, {r->B, r->T}, *turn, PETSC_TRUE};
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_dump(MPI_Comm comm, const char *path, const Rollout *r, int iteration, const PPOOptions *o,
                            double kl_coef)
{
  char            group[32];
  int             B = r->B, T = r->T, *turn = NULL;
  IODataset d[24] = {
    {"tokens",           2, {B, T}, r->gen.tokens,       PETSC_TRUE },
    {"prompt_lengths",   1, {B, 1}, r->start,            PETSC_TRUE },
    {"response_lengths", 1, {B, 1}, r->len,              PETSC_TRUE },
    {"logprobs",         2, {B, T}, r->gen.logprobs,     PETSC_FALSE},
    {"ref_logprobs",     2, {B, T}, r->ref,              PETSC_FALSE},
    {"values",           2, {B, T}, r->values,           PETSC_FALSE},
    {"rewards",          2, {B, T}, r->rewards,          PETSC_FALSE},
    {"advantages",       2, {B, T}, r->adv,              PETSC_FALSE},
    {"returns",          2, {B, T}, r->ret,              PETSC_FALSE},
    {"scores",           1, {B, 1}, r->score,            PETSC_FALSE},
    {"gold",             1, {B, 1}, r->gold,             PETSC_FALSE},
    {"final_scores",     1, {B, 1}, r->final,            PETSC_FALSE},
    {"rule_rewards",     1, {B, 1}, r->rule,             PETSC_FALSE},
    {"eos",              1, {B, 1}, r->gen.eos,          PETSC_TRUE },
    {"gen_step_seconds", 1, {r->gen.nsteps, 1}, NULL,    PETSC_FALSE},
    {"gen_step_active",  1, {r->gen.nsteps, 1}, r->gen.step_active, PETSC_TRUE},
  };
  const char *an[] = {"gamma", "lambda", "kl_coef"};
  double      av[] = {o->gamma, o->lambda, kl_coef};
  float      *steps;
  int         nd = 16;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(r->gen.nsteps + 1, &steps)); /* step times are stored as float32 like the rest */
  for (int k = 0; k < r->gen.nsteps; k++) steps[k] = (float)r->gen.step_seconds[k];
  d[14].data = steps;
  if (r->async.version) { /* -async_staleness: which weights drew each row, and the correction's inputs */
    d[nd++] = (IODataset){"versions", 1, {B, 1}, r->async.version, PETSC_TRUE};
    if (r->async.tver)
      d[nd++] = (IODataset){
        "token_versions", 2, { B, T }, r->async.tver, PETSC_TRUE
      }; /* -async_partial: a row may span versions */
    if (r->off.on) {
      d[nd++] = (IODataset){"prox_logprobs", 2, {B, T}, r->off.prox, PETSC_FALSE};
      d[nd++] = (IODataset){"behaviour_weights", 2, {B, T}, r->off.isw, PETSC_FALSE};
    }
  }
  PetscCall(rollout_episode_datasets(r, d, &nd, &turn)); /* who produced each token, and its turn */
  PetscCall(PetscSNPrintf(group, sizeof group, "iter_%d", iteration));
  PetscCall(io_group_append(comm, path, group, d, nd, an, av, 3));
  PetscCall(PetscFree(steps));
  PetscCall(PetscFree(turn));
  PetscFunctionReturn(PETSC_SUCCESS);
}
