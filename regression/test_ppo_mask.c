/* test_ppo_mask: PPO's training on episodes (src/ppo/train.c): a rollout
 * whose responses hold an environment's tokens between the model's
 * (Rollout.episodes, gen.src) is trained on the model's tokens only. A tiny
 * model on one rank, the CPU backend, one epoch of one mini-batch of 4 rows:
 *   row 0: prompt 3, response M M E E M M E M   (answers between segments)
 *   row 1: prompt 2, response M M M E E M
 *   row 2: prompt 4, response E E E E           (no model token)
 *   row 3: prompt 2, response M M M M M         (no answer)
 *
 * The checks in detail: the actor's loss, clip fraction, entropy, KL loss,
 * gradient norm and every gradient element are bit for bit the same when
 * the environment's tokens hold garbage behaviour and reference
 * log-probabilities and advantages as when they hold 0, for each
 * -ppo_loss_agg (token mean, sequence mean, sequence sum over max_len); the
 * critic's loss, clip fraction and gradient the same with garbage old values
 * and returns there; the same garbage with the flag off (every response token
 * the model's) changes the actor's and the critic's results (the control:
 * the comparisons can fail); and with behaviour log-probabilities equal to
 * the model's own (ratio 1) and no KL term the actor's loss is minus the mean
 * advantage over the model's tokens (token mean: 14 tokens, not 23) and minus
 * the mean over rows of each row's mean over its model tokens (sequence
 * mean: row 2 weighs 0), within 1e-6. rollouts.h5 of the episodes holds
 * source (uint8, the sources) and turn (by hand), that of a rollout without
 * episodes neither.
 */
#include <math.h>
#include <string.h>

#include "../src/ppo/ppo_impl.h"
#include "comm.h"
#include "io.h"
#include "test_report.h"

static const char help[] = "PPO training on episodes: the model's tokens only.\n";

#define MB 4
#define MT 12
static const int         m_start[MB] = {3, 2, 4, 2};
static const char *const m_rows[MB]  = {"...MMEEMMEM.", "..MMMEEM....", "....EEEE....", "..MMMMM....."};
static const ModelConfig m_cfg = {
  .n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = 24, .n_positions = 16, .head = MODEL_HEAD_LM};

typedef struct {
  PPOTrainStats s;
  float        *grads; /* [nparams] after the step */
  size_t        n;
} Result;

static PetscBool model_tok(int b, int t)
{
  return m_rows[b][t] == 'M' ? PETSC_TRUE : PETSC_FALSE;
}

static PetscBool env_tok(int b, int t)
{
  return m_rows[b][t] == 'E' ? PETSC_TRUE : PETSC_FALSE;
}

static double uni(uint32_t b, uint32_t t, uint32_t c, double lo, double hi)
{
  return lo + (hi - lo) * rng_uniform(23, c, b, t, 0);
}

static PetscErrorCode plan_one_rank(MFCId call, Plan *plan)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(plan, sizeof *plan));
  plan->world = 1, plan->bucket_mb = 1;
  plan->call[call] = (PlanCall){.nranks = 1, .pp = 1, .dp = 1, .tp = 1};
  plan->call[call].ranks[0] = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The rollout's rows: tokens, lengths and sources (allocated here when the
 * generation's batch has none: *own). */
static PetscErrorCode rollout_fill(Rollout *r, PetscBool *own)
{
  PetscFunctionBegin;
  PetscCall(rollout_create(MB, MT, PETSC_FALSE, r));
  *own = (PetscBool)(r->gen.src == NULL);
  if (*own) PetscCall(PetscCalloc1((size_t)MB * MT, &r->gen.src));
  for (int b = 0; b < MB; b++) {
    int len = (int)strspn(m_rows[b] + m_start[b], "ME");
    r->start[b] = r->gen.prompt_len[b] = m_start[b];
    r->len[b] = r->gen.response_len[b] = len;
    r->gen.eos[b]                      = 1;
    for (int t = 0; t < MT; t++) {
      size_t i        = (size_t)b * MT + t;
      r->gen.tokens[i] = t < m_start[b] + len ? 1 + (int)(uni(b, t, 0, 0, 1) * (m_cfg.vocab_size - 1)) % (m_cfg.vocab_size - 1) : 0;
      r->gen.src[i]    = model_tok(b, t) ? GEN_SRC_MODEL : env_tok(b, t) ? GEN_SRC_ENV : GEN_SRC_PROMPT;
    }
  }
  r->episodes = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rollout_free(Rollout *r, PetscBool own)
{
  PetscFunctionBegin;
  if (own) PetscCall(PetscFree(r->gen.src));
  PetscCall(rollout_destroy(r));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A fresh model (the same weights every time) and its trainer. */
static PetscErrorCode trainer_fresh(ModelHead head, MFCId call, Trainer *tr)
{
  Plan        plan;
  ModelConfig cfg = m_cfg;

  PetscFunctionBegin;
  cfg.head = head;
  PetscCall(plan_one_rank(call, &plan));
  PetscCall(trainer_create(head == MODEL_HEAD_LM ? "actor" : "critic", &cfg, backend_cpu(), &plan, call,
                           TRAIN_SCHED_1F1B, tr));
  PetscCall(model_init_random(tr->dm->lm, 5));
  PetscCall(model_optim_init(tr->dm->lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The fresh model's log-probabilities of the response tokens, aligned. */
static PetscErrorCode model_logprobs_of(Rollout *r, const PPOOptions *o, PackBuf *pb, float *lp)
{
  Trainer tr;
  int     idx[MB] = {0, 1, 2, 3}, Tf;

  PetscFunctionBegin;
  PetscCall(trainer_fresh(MODEL_HEAD_LM, MFC_ACTOR_TRAIN, &tr));
  PetscCall(rollout_forward_logprobs(tr.dm->lm, r, idx, MB, (float)(1.0 / o->gen.temperature), pb, &Tf));
  PetscCall(PetscArrayzero(lp, (size_t)MB * MT));
  for (int b = 0; b < MB; b++)
    for (int t = r->start[b]; t < r->start[b] + r->len[b]; t++) lp[b * MT + t] = pb->lp[b * Tf + t - 1];
  PetscCall(trainer_destroy(&tr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One ppo_train_actor or ppo_train_critic call on a fresh model. */
static PetscErrorCode train_once(ModelHead head, const PPOOptions *o, Rollout *r, PackBuf *pb, Result *res)
{
  Trainer tr;
  Model  *g;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&res->s, sizeof res->s));
  PetscCall(trainer_fresh(head, head == MODEL_HEAD_LM ? MFC_ACTOR_TRAIN : MFC_CRITIC_TRAIN, &tr));
  if (head == MODEL_HEAD_LM) PetscCall(ppo_train_actor(&tr, o, r, pb, 17, 0, 0.1, &res->s));
  else PetscCall(ppo_train_critic(&tr, o, r, pb, 17, 0, &res->s));
  g      = tr.dm->lm;
  res->n = g->nparams;
  PetscCall(PetscMalloc1(res->n, &res->grads));
  PetscCall(PetscArraycpy(res->grads, g->grads, res->n)); /* CPU backend: host buffers */
  PetscCall(trainer_destroy(&tr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscBool same_result(const Result *a, const Result *b)
{
  return (PetscBool)(a->n == b->n && !memcmp(a->grads, b->grads, a->n * sizeof(float)) &&
                     !memcmp(&a->s, &b->s, offsetof(PPOTrainStats, steps)));
}

/* The environment's tokens of the per-token inputs: garbage, or 0. */
static void env_inputs(Rollout *r, PetscBool garbage)
{
  for (int b = 0; b < MB; b++)
    for (int t = 0; t < MT; t++)
      if (env_tok(b, t)) {
        size_t i         = (size_t)b * MT + t;
        r->gen.logprobs[i] = garbage ? 3.5f : 0;
        r->ref[i]          = garbage ? -9.0f : 0;
        r->adv[i]          = garbage ? 5.0f : 0;
        r->values[i]       = garbage ? 4.0f : 0;
        r->ret[i]          = garbage ? -6.0f : 0;
      }
}

static PetscErrorCode test_actor(PPOOptions *o, Rollout *r, PackBuf *pb, const float *lp)
{
  static const char *const agg[3] = {"token mean", "sequence mean", "sequence sum over max_len"};
  Result                   z, g, c;
  char                     name[160];

  PetscFunctionBegin;
  /* the behaviour policy off the model's own by up to +-.4: some tokens clipped */
  for (int b = 0; b < MB; b++)
    for (int t = 0; t < MT; t++) {
      size_t i = (size_t)b * MT + t;
      if (!model_tok(b, t)) continue;
      r->gen.logprobs[i] = lp[i] + (float)uni(b, t, 1, -0.4, 0.4);
      r->ref[i]          = lp[i] + (float)uni(b, t, 2, -0.5, 0.5);
      r->adv[i]          = (float)uni(b, t, 3, -2, 2);
    }
  o->kl_in = KL_IN_LOSS;
  for (int k = 0; k < 3; k++) {
    o->loss_agg = k;
    env_inputs(r, PETSC_FALSE);
    PetscCall(train_once(MODEL_HEAD_LM, o, r, pb, &z));
    env_inputs(r, PETSC_TRUE);
    PetscCall(train_once(MODEL_HEAD_LM, o, r, pb, &g));
    PetscCall(PetscSNPrintf(name, sizeof name,
                            "actor (%s): garbage on the environment's tokens gives the loss, clip fraction, entropy, KL "
                            "loss and gradient of zeros, bit for bit",
                            agg[k]));
    test_report(same_result(&z, &g) && z.s.clipfrac > 0 && z.s.kl_loss != 0, name,
                "loss %.17g/%.17g clipfrac %g/%g entropy %g/%g kl %g/%g grad norm %g/%g", z.s.actor_loss,
                g.s.actor_loss, z.s.clipfrac, g.s.clipfrac, z.s.entropy, g.s.entropy, z.s.kl_loss, g.s.kl_loss,
                z.s.grad_actor, g.s.grad_actor);
    if (k == 0) { /* the control: without the flag the garbage counts */
      r->episodes = PETSC_FALSE;
      PetscCall(train_once(MODEL_HEAD_LM, o, r, pb, &c));
      r->episodes = PETSC_TRUE;
      test_report(!same_result(&z, &c) && z.s.actor_loss != c.s.actor_loss && z.s.entropy != c.s.entropy,
                  "actor, control: the same garbage with Rollout.episodes off changes the loss, entropy and gradient",
                  "loss %.17g vs %.17g", z.s.actor_loss, c.s.actor_loss);
      PetscCall(PetscFree(c.grads));
    }
    PetscCall(PetscFree(z.grads));
    PetscCall(PetscFree(g.grads));
  }

  /* ratio 1 (the model's own log-probabilities), no KL term: the loss is
   * -sum w A, w = 1/(model tokens) or 1/(rows * the row's model tokens) */
  double sum = 0, seq = 0;
  int    n = 0, all = 0;
  for (int b = 0; b < MB; b++) {
    all += r->len[b];
    double rs = 0;
    int    rn = 0;
    for (int t = 0; t < MT; t++)
      if (model_tok(b, t)) rs += r->adv[b * MT + t], rn++, r->gen.logprobs[b * MT + t] = lp[b * MT + t];
    sum += rs, n += rn;
    seq += rn ? rs / rn : 0;
  }
  env_inputs(r, PETSC_TRUE);
  o->kl_in = KL_IN_REWARD;
  for (int k = 0; k < 2; k++) {
    double want = k == 0 ? -sum / n : -seq / MB;
    o->loss_agg = k;
    PetscCall(train_once(MODEL_HEAD_LM, o, r, pb, &z));
    PetscCall(PetscSNPrintf(name, sizeof name,
                            "actor (%s), ratio 1: the loss is minus the advantages' %s over the model's tokens (%d of "
                            "%d response tokens)",
                            agg[k], k == 0 ? "mean" : "per-row mean averaged over rows", n, all));
    test_report(fabs(z.s.actor_loss - want) <= 1e-6 * (1 + fabs(want)) && z.s.kl_loss == 0, name,
                "loss %.17g, expected %.17g", z.s.actor_loss, want);
    PetscCall(PetscFree(z.grads));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_critic(PPOOptions *o, Rollout *r, PackBuf *pb)
{
  Result z, g, c;

  PetscFunctionBegin;
  for (int b = 0; b < MB; b++)
    for (int t = 0; t < MT; t++)
      if (model_tok(b, t)) {
        r->values[b * MT + t] = (float)uni(b, t, 4, -1, 1);
        r->ret[b * MT + t]    = (float)uni(b, t, 5, -1.5, 1.5);
      }
  env_inputs(r, PETSC_FALSE);
  PetscCall(train_once(MODEL_HEAD_SCALAR, o, r, pb, &z));
  env_inputs(r, PETSC_TRUE);
  PetscCall(train_once(MODEL_HEAD_SCALAR, o, r, pb, &g));
  test_report(same_result(&z, &g) && z.s.critic_loss > 0 && z.s.vclipfrac > 0,
              "critic: garbage old values and returns on the environment's tokens give the loss, clip fraction and "
              "gradient of zeros, bit for bit",
              "loss %.17g/%.17g vclipfrac %g/%g", z.s.critic_loss, g.s.critic_loss, z.s.vclipfrac, g.s.vclipfrac);
  r->episodes = PETSC_FALSE;
  PetscCall(train_once(MODEL_HEAD_SCALAR, o, r, pb, &c));
  r->episodes = PETSC_TRUE;
  test_report(!same_result(&z, &c) && z.s.critic_loss != c.s.critic_loss,
              "critic, control: the same garbage with Rollout.episodes off changes the loss and gradient",
              "loss %.17g vs %.17g", z.s.critic_loss, c.s.critic_loss);
  PetscCall(PetscFree(z.grads));
  PetscCall(PetscFree(g.grads));
  PetscCall(PetscFree(c.grads));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* rollouts.h5 of episodes: source (uint8) and turn as the rows say; a
 * rollout without episodes writes neither. */
static PetscErrorCode test_dump(const PPOOptions *o, Rollout *r)
{
  static const int want_turn[MB][MT] = {{0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 0},
                                        {0, 0, 1, 1, 1, 1, 1, 2, 0, 0, 0, 0},
                                        {0},
                                        {0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}};
  char               dir[PETSC_MAX_PATH_LEN], path[PETSC_MAX_PATH_LEN + 16];
  IoId               f = IO_NONE, d = IO_NONE;
  IoSize             dims[2] = {MB, MT};
  unsigned char      src[MB * MT];
  int                turn[MB * MT], ok_src = 1, ok_turn = 1;
  PetscBool          plain;

  PetscFunctionBegin;
  PetscCall(test_tmpdir(dir, sizeof dir, "ppo_mask"));
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/rollouts.h5", dir));
  PetscCall(rollout_dump(MPI_COMM_WORLD, path, r, 0, o, 0.1));
  r->episodes = PETSC_FALSE;
  PetscCall(rollout_dump(MPI_COMM_WORLD, path, r, 1, o, 0.1));
  r->episodes = PETSC_TRUE;
  PetscCall(io_open_read("rollouts file", path, &f));
  PetscCall(io_dataset_open(f, "rollouts file", "/iter_0/source", "iter_0/source", IO_CLASS_INT, 1, 2, dims, &d));
  PetscCall(io_dataset_read(d, "rollouts file", "/iter_0/source", IO_UCHAR, src));
  PetscCall(io_close(&d));
  PetscCall(io_dataset_open(f, "rollouts file", "/iter_0/turn", "iter_0/turn", IO_CLASS_INT, 4, 2, dims, &d));
  PetscCall(io_dataset_read(d, "rollouts file", "/iter_0/turn", IO_INT, turn));
  PetscCall(io_close(&d));
  plain = (PetscBool)(!io_exists(f, "iter_1/source") && !io_exists(f, "iter_1/turn") && io_exists(f, "iter_1/tokens"));
  PetscCall(io_close(&f));
  for (int i = 0; i < MB * MT; i++) ok_src &= src[i] == r->gen.src[i], ok_turn &= turn[i] == want_turn[i / MT][i % MT];
  test_report(ok_src, "rollouts.h5 of episodes: source, uint8 [B,T], the generation's sources", NULL);
  test_report(ok_turn, "rollouts.h5 of episodes: turn, 0 on the prompt, k on the model's k-th segment and its answer", NULL);
  test_report(plain, "rollouts.h5 without episodes: no source, no turn", NULL);
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PPOOptions o;
  Rollout    r;
  PackBuf    pb;
  PetscBool  own;
  float     *lp;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(sys_log_register());
  PetscCall(comm_setup());
  PetscCall(PetscMemzero(&o, sizeof o));
  o.algo = 0, o.minibatches = o.microbatches = o.epochs = 1;
  o.clip_low = o.clip_high = 0.2, o.value_clip = 0.2, o.kl_estimator = RL_KL_K3;
  o.gen.temperature = 1, o.gen.max_new_tokens = 8;
  o.actor_opt = o.critic_opt = (AdamWConfig){1e-3, 1, 0.9, 0.95, 1e-8, 0, 0, 0, 0};
  PetscCall(rollout_fill(&r, &own));
  PetscCall(packbuf_create(MB, MT, &pb));
  PetscCall(PetscMalloc1((size_t)MB * MT, &lp));
  PetscCall(model_logprobs_of(&r, &o, &pb, lp));
  PetscCall(test_actor(&o, &r, &pb, lp));
  PetscCall(test_critic(&o, &r, &pb));
  PetscCall(test_dump(&o, &r));
  PetscCall(PetscFree(lp));
  PetscCall(packbuf_destroy(&pb));
  PetscCall(rollout_free(&r, own));
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return test_tally();
}
