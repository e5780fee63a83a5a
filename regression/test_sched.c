/* test_sched: pipeline schedules and their executor. The 1F1B (and GPipe)
 * task lists are checked as data (every micro-batch once forward, once
 * backward after it; in-flight bound; the last stage alternates; a replay of
 * the stages' cross-stage dependencies finishes, i.e. no deadlock); the slot
 * guard of sched_run is checked to refuse a reused slot and to accept
 * micro-batches in any order; and one training step of m micro-batches run
 * through sched_run on pipeline meshes (1F1B, GPipe, and orders where the
 * stages run micro-batches in different orders, which rely on the stage
 * messages being tagged by micro-batch) must give the outputs, gradients and
 * post-AdamW parameters of one rank running the same micro-batches one
 * after another; and two models sharing two ranks, their stages running
 * them in different orders, must each match their one-rank run.
 * trainer_step must refuse a non-finite loss or gradient norm before
 * anything changes (weights, moments and step count bit-identical afterwards
 * on every rank), and apply a finite one. Run with mpiexec -n 4 (layouts
 * that need more ranks than the world print a skip line).
 *
 * The checks in detail: 1F1B and GPipe schedule tables (counts, order, in-flight bound, a
 * replay of the cross-stage dependencies finishes), the executor refusing a slot reused too
 * early, a second forward of a micro-batch in flight and a backward of one not in flight, and
 * playing micro-batches out of order; one training step through 1F1B on pp 2, pp 4 (4 and 7
 * micro-batches), pp2 x tp2, pp2 x dp2, and through orders that need the micro-batch in the
 * stage messages' tags (pp 4 GPipe with every stage its own forward and backward order, pp 4
 * 1F1B in reverse micro-batch order with slots reused out of order, pp2 x dp2 GPipe mixed), LM
 * and scalar heads, equal to one rank running the same micro-batches in turn (the mixed orders
 * fail with untagged messages); two models on the same two ranks and communicator whose stages
 * run them in different orders, each equal to its one-rank run (fails without the model id in
 * the tags); `trainer_step` on pp 2 x dp 2 applying a finite step (the shards change) and
 * refusing a NaN or infinite gradient element on one rank and a NaN loss with the quantity
 * named, the weights, AdamW moments and step count of every rank's shard bit-identical
 * afterwards
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dist_fixture.h"
#include "schedule.h"
#include "train.h"

static const char help[] = "Pipeline schedule regression tests.\n";

/* ---- the schedules as data --------------------------------------------------- */

typedef PetscErrorCode (*SchedBuild)(int, int, int, SchedTask *, int *);

/* Replays every stage's list against the model's pipeline traffic (sends
 * never block; a stage's forward of mb waits for stage p-1's, its backward
 * for stage p+1's): returns whether all stages finish. */
static PetscBool replay_finishes(SchedTask *const *lists, int pp, int m)
{
  int       pos[64] = {0}, fdone[64], bdone[64]; /* per stage: next task, forwards and backwards done (in order) */
  PetscBool progress = PETSC_TRUE;

  for (int p = 0; p < pp; p++) fdone[p] = bdone[p] = 0;
  while (progress) {
    progress = PETSC_FALSE;
    for (int p = 0; p < pp; p++) {
      while (pos[p] < 2 * m) {
        SchedTask t  = lists[p][pos[p]];
        PetscBool ok = t.kind == SCHED_F ? (p == 0 || fdone[p - 1] > t.mb) : (p == pp - 1 || bdone[p + 1] > t.mb);
        if (!ok) break;
        if (t.kind == SCHED_F) fdone[p]++;
        else bdone[p]++;
        pos[p]++;
        progress = PETSC_TRUE;
      }
    }
  }
  for (int p = 0; p < pp; p++)
    if (pos[p] < 2 * m) return PETSC_FALSE;
  return PETSC_TRUE;
}

static PetscErrorCode test_tables(const char *what, SchedBuild build, int pp, int m, PetscBool is_1f1b)
{
  SchedTask *lists[64];
  PetscBool  ok = PETSC_TRUE, alt = PETSC_TRUE, bound = PETSC_TRUE, slots = PETSC_TRUE, warm = PETSC_TRUE;
  char       name[320];

  PetscFunctionBegin;
  for (int p = 0; p < pp; p++) {
    int nslots, inflight, nwarm = 0;
    PetscCall(PetscMalloc1(2 * m, &lists[p]));
    PetscCall(build(pp, p, m, lists[p], &nslots));
    PetscCall(sched_check(lists[p], 2 * m, m, &inflight)); /* m F and m B, each B after its F */
    while (nwarm < 2 * m && lists[p][nwarm].kind == SCHED_F) nwarm++;
    if (is_1f1b) {
      if (inflight > pp - p) bound = PETSC_FALSE;
      if (nwarm != PetscMin(pp - p, m)) warm = PETSC_FALSE; /* the warm-up forwards and the first steady one */
    }
    if (inflight != nslots) slots = PETSC_FALSE;
    if (is_1f1b && p == pp - 1)
      for (int i = 0; i < m; i++)
        if (lists[p][2 * i].kind != SCHED_F || lists[p][2 * i].mb != i || lists[p][2 * i + 1].kind != SCHED_B || lists[p][2 * i + 1].mb != i) alt = PETSC_FALSE;
  }
  ok = alt && bound && slots && warm && replay_finishes(lists, pp, m);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s pp %d, m %d: every stage has m F and m B, B after F, %s; the pipeline replay finishes", what, pp, m,
                          is_1f1b ? "min(pp-p-1,m) warm-up forwards, at most pp-p in flight (= nslots), last stage alternates F,B" : "nslots = most in flight"));
  test_report(ok, name, "%s", (!alt ? "last stage does not alternate" : !bound ? "too many in flight" : !slots ? "nslots differs from the in-flight count" : !warm ? "wrong warm-up" : "deadlock"));
  for (int p = 0; p < pp; p++) PetscCall(PetscFree(lists[p]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the executor's slot guard ------------------------------------------------ */

static PetscErrorCode count_task(void *ctx, Model *lm, int mb)
{
  PetscFunctionBegin;
  (*(int *)ctx)++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_guard(const ModelConfig *cfg)
{
  Model         *g;
  SchedTask      bad[4] = {{SCHED_F, 0}, {SCHED_F, 1}, {SCHED_B, 0}, {SCHED_B, 1}}, good[8];
  int            calls = 0, nslots;
  PetscErrorCode ierr;
  PetscBool      ok;
  char           det[160];

  PetscFunctionBegin;
  PetscCall(model_create(cfg, backend_cpu(), &g));
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = sched_run(g, bad, 4, 1, count_task, count_task, &calls);
  PetscCall(PetscPopErrorHandler());
  ok = ierr == PETSC_ERR_ORDER && calls == 1 && g->acts == g->slots[0] ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscSNPrintf(det, sizeof det, "error %d after %d tasks", (int)ierr, calls));
  test_report(ok, "sched_run refuses a forward into a slot whose micro-batch awaits its backward", "%s", det);
  calls = 0;
  PetscCall(sched_1f1b(4, 0, 4, good, &nslots));
  PetscCall(sched_run(g, good, 8, nslots, count_task, count_task, &calls));
  ok = calls == 8 && g->nslots >= nslots && g->acts == g->slots[0] ? PETSC_TRUE : PETSC_FALSE;
  test_report(ok, "sched_run plays a 1F1B list (4 slots), every task once, slot 0 selected at the end", NULL);
  {
    /* micro-batches in any order: the slot map finds each backward's slot */
    SchedTask swapped[6] = {{SCHED_F, 2}, {SCHED_F, 0}, {SCHED_B, 0}, {SCHED_F, 1}, {SCHED_B, 2}, {SCHED_B, 1}};
    calls = 0;
    PetscCall(sched_run(g, swapped, 6, 2, count_task, count_task, &calls));
    test_report(calls == 6 ? PETSC_TRUE : PETSC_FALSE, "sched_run plays micro-batches out of order (2, 0, 1 forward; 0, 2, 1 backward) on 2 slots", NULL);
  }
  {
    SchedTask nofwd[2] = {{SCHED_F, 0}, {SCHED_B, 1}}, twice[2] = {{SCHED_F, 1}, {SCHED_F, 1}};
    calls = 0;
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = sched_run(g, nofwd, 2, 2, count_task, count_task, &calls);
    ok   = ierr == PETSC_ERR_ORDER && calls == 1 ? PETSC_TRUE : PETSC_FALSE;
    calls = 0;
    ierr = sched_run(g, twice, 2, 2, count_task, count_task, &calls);
    ok   = ok && ierr == PETSC_ERR_ORDER && calls == 1 && g->acts == g->slots[0] && g->msg_mb == 0 ? PETSC_TRUE : PETSC_FALSE;
    PetscCall(PetscPopErrorHandler());
    test_report(ok, "sched_run refuses a backward of a micro-batch not in flight, and a second forward of one in flight", NULL);
  }
  PetscCall(model_destroy(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- one training step through the executor ----------------------------------- */

/* Valid orders other than 0, 1, 2, ...: GPipe with every stage running its
 * forwards rotated by its stage index and its backwards in yet another
 * order (a stage's forwards wait only for the stage before, its backwards
 * for the stage after: no cycle); and 1F1B with the micro-batches relabelled
 * m-1, ..., 0 on every stage (with m > pp the slots are reused out of order).
 * Without the micro-batch in the stage messages' tags the stages would pair
 * activations and gradients of different micro-batches. */
static PetscErrorCode sched_gpipe_mixed(int pp, int p, int m, SchedTask *tasks, int *nslots)
{
  PetscFunctionBegin;
  PetscCall(sched_gpipe(pp, p, m, tasks, nslots));
  for (int i = 0; i < m; i++) tasks[i].mb = (i + p) % m;
  for (int i = 0; i < m; i++) tasks[m + i].mb = (2 * m - 1 - i + 2 * p) % m;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sched_1f1b_reversed(int pp, int p, int m, SchedTask *tasks, int *nslots)
{
  PetscFunctionBegin;
  PetscCall(sched_1f1b(pp, p, m, tasks, nslots));
  for (int i = 0; i < 2 * m; i++) tasks[i].mb = m - 1 - tasks[i].mb;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Micro-batch mb is sequences [row0 + mb*nb, +nb) of the batch. The loss is
 * sum_n dlp[n] * logprob[n] (LM head) or sum_n dlp[n] * value[n], so
 * d loss / d output is dlp; the outputs go to out[2N] (log-probabilities, then
 * entropies) on the last stage. */
typedef struct {
  const Batch *b;
  int          row0, nb;
  float       *out;
} StepCtx;

static PetscErrorCode step_forward(void *ctx_, Model *g, int mb)
{
  StepCtx     *ctx = ctx_;
  const Batch *b   = ctx->b;
  int          T = b->T, n0 = (ctx->row0 + mb * ctx->nb) * T, n = ctx->nb * T, *off;
  ModelTokenDist d;

  PetscFunctionBegin;
  PetscCall(model_forward(g, b->tok + n0, ctx->nb, T));
  if (!model_last_stage(g)) PetscFunctionReturn(PETSC_SUCCESS);
  if (g->cfg.head == MODEL_HEAD_SCALAR) {
    PetscCall(model_values_get(g, ctx->out + n0));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscMalloc1(n + 1, &off));
  for (int i = 0; i <= n; i++) off[i] = b->mask_off[n0 + i] - b->mask_off[n0];
  d = (ModelTokenDist){1.0f / 0.8f, off, b->mask_ids + b->mask_off[n0]};
  PetscCall(model_logprobs_dist(g, b->target + n0, &d, ctx->out + n0, ctx->out + b->N + n0)); /* the model keeps the distribution in mb's slot */
  PetscCall(PetscFree(off));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode step_backward(void *ctx_, Model *g, int mb)
{
  StepCtx     *ctx  = ctx_;
  const Batch *b    = ctx->b;
  int          n0   = (ctx->row0 + mb * ctx->nb) * b->T;
  PetscBool    last = model_last_stage(g);

  PetscFunctionBegin;
  if (g->cfg.head == MODEL_HEAD_LM) PetscCall(model_backward_logprob(g, last ? b->target + n0 : NULL, last ? b->dlp + n0 : NULL));
  else PetscCall(model_backward_values(g, last ? b->dlp + n0 : NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char *name;
  int         pp, dp, tp;
  SchedBuild  build;
  int         m; /* micro-batches per dp replica */
} Layout;

/* One layout: m micro-batches per dp replica through sched_run, against the
 * one-rank model running all of them in turn; then one AdamW step. */
static PetscErrorCode test_step(const ModelConfig *cfg, const Layout *L)
{
  int          n = L->pp * L->dp * L->tp, ranks[64], m = L->m, nb = 1, B, T = 6, nslots = 1;
  const Mesh  *mesh;
  Model       *full, *g = NULL;
  Batch        b;
  StepCtx      rc, gc;
  SchedTask   *tasks;
  float       *ref, *got, *pfull, *gfull, *pg;
  AdamWConfig  opt = {1e-2, 1, 0.9, 0.95, 1e-8, 0.1, 1.0, 0, 0};
  char         name[200], det[160];
  const char  *head = cfg->head == MODEL_HEAD_LM ? "lm" : "scalar";
  double       e;

  PetscFunctionBegin;
  if (n > world_size) {
    char what[160], why[64];
    PetscCall(PetscSNPrintf(what, sizeof what, "%s, %s head", L->name, head));
    PetscCall(PetscSNPrintf(why, sizeof why, "needs %d ranks, the job has %d", n, world_size));
    test_skip(what, why);
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  B = m * nb * L->dp;
  for (int i = 0; i < n; i++) ranks[i] = i;
  PetscCall(mesh_get(ranks, n, L->pp, L->dp, L->tp, &mesh));
  PetscCall(batch_create(cfg, B, T, 6, &b));
  PetscCall(model_create(cfg, backend_cpu(), &full));
  PetscCall(model_init_random(full, 78));
  PetscCall(PetscCalloc5(2 * b.N, &ref, 2 * b.N, &got, full->nparams, &pfull, full->nparams, &gfull, full->nparams, &pg));
  PetscCall(PetscMalloc1(2 * m, &tasks));
  /* reference: every micro-batch forward then backward, one after another, on one rank */
  rc = (StepCtx){&b, 0, nb, ref};
  PetscCall(model_zero_grad(full));
  for (int k = 0; k < m * L->dp; k++) {
    PetscCall(step_forward(&rc, full, k));
    PetscCall(step_backward(&rc, full, k));
  }
  if (mesh->me >= 0) {
    float *mine;
    PetscCall(model_create_on_mesh(cfg, backend_cpu(), mesh, &g));
    PetscCall(model_params_get(full, pfull));
    PetscCall(PetscMalloc1(g->nparams + 1, &mine));
    PetscCall(model_shard_extract(cfg, &g->sh, pfull, mine));
    PetscCall(model_params_set(g, mine));
    PetscCall(PetscFree(mine));
    PetscCall(model_zero_grad(g));
    PetscCall(L->build(mesh->pp, mesh->p, m, tasks, &nslots));
    gc = (StepCtx){&b, mesh->d * m * nb, nb, got};
    PetscCall(sched_run(g, tasks, 2 * m, nslots, step_forward, step_backward, &gc));
  }
  /* outputs live on the last stage's ranks of each replica: sum them over the world once */
  if (!(mesh->me >= 0 && mesh->p == mesh->pp - 1 && mesh->t == 0)) PetscCall(PetscArrayzero(got, 2 * b.N));
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, got, 2 * b.N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  e = rel_err(got, ref, cfg->head == MODEL_HEAD_LM ? 2 * b.N : b.N);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s, %s head, %d micro-batches (%d slots on stage 0): %s match one rank", L->name, head, m, nslots,
                          cfg->head == MODEL_HEAD_LM ? "masked, tempered log-probabilities and entropies" : "values"));
  PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", e));
  PetscCallMPI(MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD)); /* nslots as rank 0 (stage 0) sees it */
  test_measure(e < 1e-5 ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);

  if (g) PetscCall(model_grads_sync(g));
  PetscCall(gather_full(full, g ? g : full, mesh, g ? g->grads : full->grads, gfull));
  e = rel_err(gfull, full->grads, full->nparams);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s, %s head: gradients accumulated over the micro-batches match one rank", L->name, head));
  PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", e));
  test_measure(e < 1e-5 ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);

  {
    PetscReal lr, gn_full, gn = 0;
    PetscCall(model_adamw_step(full, &opt, &lr, &gn_full));
    if (g) PetscCall(model_adamw_step(g, &opt, &lr, &gn));
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &gn, 1, MPIU_REAL, MPI_MAX, MPI_COMM_WORLD));
    PetscCall(gather_full(full, g ? g : full, mesh, g ? g->params : full->params, pg));
    e = rel_err(pg, full->params, full->nparams);
    PetscCall(PetscSNPrintf(name, sizeof name, "%s, %s head: AdamW step after the schedule (gradient norm %.4f vs %.4f) gives the one-rank parameters", L->name, head, (double)gn,
                            (double)gn_full));
    PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", e));
    test_measure(e < 1e-5 && fabs(gn - gn_full) < 1e-5 * gn_full ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);
  }
  PetscCall(PetscFree(tasks));
  PetscCall(PetscFree5(ref, got, pfull, gfull, pg));
  PetscCall(model_destroy(&full));
  PetscCall(model_destroy(&g));
  PetscCall(batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the trainer's optimizer step refuses before it changes anything ---------- */

typedef struct {
  float *p, *m, *v;
  int    step;
} ShardCopy;

/* This rank's shard state (parameters, its AdamW moments, step count). */
static PetscErrorCode shard_copy(const Model *g, ShardCopy *c)
{
  size_t nm = g->own1 - g->own0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc3(g->nparams, &c->p, nm + 1, &c->m, nm + 1, &c->v));
  PetscCall(PetscArraycpy(c->p, g->params, g->nparams)); /* CPU backend: host buffers */
  PetscCall(PetscArraycpy(c->m, g->m, nm));
  PetscCall(PetscArraycpy(c->v, g->v, nm));
  c->step = g->step;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Whether the shard still holds c, bit for bit, on every rank. */
static PetscErrorCode shard_same(const Model *g, const ShardCopy *c, PetscBool *same)
{
  int ok = 1;

  PetscFunctionBegin;
  if (g) {
    size_t nm = g->own1 - g->own0;
    ok = !memcmp(c->p, g->params, g->nparams * sizeof(float)) && !memcmp(c->m, g->m, nm * sizeof(float)) && !memcmp(c->v, g->v, nm * sizeof(float)) && c->step == g->step;
  }
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
  *same = ok ? PETSC_TRUE : PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const char *fmt_name(char *buf, size_t len, const char *f, ...)
{
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, len, f, ap);
  va_end(ap);
  return buf;
}

static void fill_grads(Model *g, float bad)
{
  for (size_t i = 0; i < g->nparams; i++) g->grads[i] = 1e-3f * (float)(i % 13) - 5e-3f;
  if (g->mesh->me == 0) g->grads[g->nparams / 2] = bad; /* one element on one rank */
  g->grads_synced = PETSC_FALSE;
}

static PetscErrorCode test_refused_step(const ModelConfig *cfg)
{
  Plan           plan;
  Trainer        tr;
  Model         *g;
  ShardCopy      c = {NULL, NULL, NULL, 0};
  AdamWConfig    opt = {1e-2, 1, 0.9, 0.95, 1e-8, 0.1, 1.0, 0, 0};
  PetscReal      lr = 0, gn = 0;
  PetscErrorCode ierr;
  PetscBool      same;
  const char    *msg = "";
  int            pp = world_size >= 2 ? 2 : 1;
  char           name[160];
  const struct {
    const char *what, *want;
    double      loss;
    float       grad;
  } bad[] = {
    {"a NaN gradient element", "gradient norm is nan", 1.0, NAN},
    {"an infinite gradient element", "gradient norm is inf", 1.0, INFINITY},
    {"a NaN loss", "loss is nan", NAN, 0.0f},
  };

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&plan, sizeof plan));
  plan.world = world_size, plan.bucket_mb = 1;
  plan.call[MFC_SFT_TRAIN] = (PlanCall){.nranks = world_size, .pp = pp, .dp = world_size / pp, .tp = 1};
  for (int i = 0; i < world_size; i++) plan.call[MFC_SFT_TRAIN].ranks[i] = i;
  PetscCall(trainer_create("policy", cfg, backend_cpu(), &plan, MFC_SFT_TRAIN, TRAIN_SCHED_1F1B, &tr));
  g = tr.dm->lm;
  if (g) {
    PetscCall(model_init_random(g, 5));
    PetscCall(model_optim_init(g));
    fill_grads(g, 0.0f);
  }
  /* the positive control: a finite step changes the shard (so the comparisons below can fail) */
  if (g) PetscCall(shard_copy(g, &c));
  PetscCall(trainer_step(&tr, &opt, "test", "step 0", 1.0, &lr, &gn));
  PetscCall(shard_same(g, &c, &same));
  test_report(!same && isfinite(gn) && gn > 0 ? PETSC_TRUE : PETSC_FALSE, fmt_name(name, sizeof name, "trainer_step on pp %d x dp %d: a finite step changes the weights and moments (gradient norm %.3g)", pp, world_size / pp, (double)gn), NULL);
  if (g) PetscCall(PetscFree3(c.p, c.m, c.v));
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    if (g) {
      fill_grads(g, bad[k].grad);
      PetscCall(shard_copy(g, &c));
    }
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = trainer_step(&tr, &opt, "test", "step 1", bad[k].loss, &lr, &gn);
    PetscCall(PetscPopErrorHandler());
    if (ierr) PetscCall(PetscErrorMessage(ierr, NULL, (char **)&msg));
    PetscCall(shard_same(g, &c, &same));
    test_measure(ierr == PETSC_ERR_FP && strstr(msg, bad[k].want) && strstr(msg, "at step 1;") && same ? PETSC_TRUE : PETSC_FALSE, fmt_name(name, sizeof name, "trainer_step refuses %s before the optimizer step: weights, moments and step count unchanged on every rank", bad[k].what), "%s", ierr ? msg : "no error");
    if (g) PetscCall(PetscFree3(c.p, c.m, c.v));
  }
  PetscCall(trainer_destroy(&tr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Two models (different weights, same shapes) on the same two ranks and
 * communicator, one micro-batch each, whose stages run their tasks in
 * different orders: stage 0 runs A's forward then B's, stage 1 B's then A's.
 * Only the model id in the stage messages' tags sends each its own
 * activations and gradients; both must match their one-rank runs. */
static PetscErrorCode test_two_models(const ModelConfig *cfg)
{
  const Mesh *mesh;
  Model      *full[2], *g[2] = {NULL, NULL};
  Batch       b;
  float      *ref[2], *got[2], *pfull, *gfull;
  int         ranks[2] = {0, 1};
  PetscBool   ok = PETSC_TRUE;
  double      worst = 0;
  char        det[160];

  PetscFunctionBegin;
  if (world_size < 2) {
    test_skip("two models on shared ranks", "needs 2 ranks");
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(mesh_get(ranks, 2, 2, 1, 1, &mesh));
  PetscCall(batch_create(cfg, 2, 6, 6, &b));
  for (int x = 0; x < 2; x++) {
    StepCtx rc;
    PetscCall(model_create(cfg, backend_cpu(), &full[x]));
    PetscCall(model_init_random(full[x], 90 + x));
    PetscCall(PetscCalloc2(2 * b.N, &ref[x], 2 * b.N, &got[x]));
    rc = (StepCtx){&b, x, 1, ref[x]}; /* model x trains on row x */
    PetscCall(model_zero_grad(full[x]));
    PetscCall(step_forward(&rc, full[x], 0));
    PetscCall(step_backward(&rc, full[x], 0));
  }
  PetscCall(PetscMalloc2(full[0]->nparams, &pfull, full[0]->nparams, &gfull));
  if (mesh->me >= 0) {
    /* (model, kind) in each stage's order */
    static const int order[2][4][2] = {{{0, 0}, {1, 0}, {0, 1}, {1, 1}}, {{1, 0}, {0, 0}, {0, 1}, {1, 1}}};
    StepCtx          gc[2];
    for (int x = 0; x < 2; x++) {
      float *mine;
      PetscCall(model_create_on_mesh(cfg, backend_cpu(), mesh, &g[x]));
      PetscCall(model_params_get(full[x], pfull));
      PetscCall(PetscMalloc1(g[x]->nparams + 1, &mine));
      PetscCall(model_shard_extract(cfg, &g[x]->sh, pfull, mine));
      PetscCall(model_params_set(g[x], mine));
      PetscCall(PetscFree(mine));
      PetscCall(model_zero_grad(g[x]));
      PetscCall(model_msg_ids(g[x], x, 0));
      gc[x] = (StepCtx){&b, x, 1, got[x]};
    }
    for (int i = 0; i < 4; i++) {
      int x = order[mesh->p][i][0];
      PetscCall(order[mesh->p][i][1] ? step_backward(&gc[x], g[x], 0) : step_forward(&gc[x], g[x], 0));
    }
  }
  for (int x = 0; x < 2; x++) {
    double e;
    if (!(mesh->me >= 0 && mesh->p == 1)) PetscCall(PetscArrayzero(got[x], 2 * b.N));
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, got[x], 2 * b.N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    e = rel_err(got[x] + x * b.T, ref[x] + x * b.T, b.T); /* model x's row */
    worst = PetscMax(worst, e);
    if (g[x]) PetscCall(model_grads_sync(g[x]));
    PetscCall(gather_full(full[x], g[x] ? g[x] : full[x], mesh, g[x] ? g[x]->grads : full[x]->grads, gfull));
    worst = PetscMax(worst, rel_err(gfull, full[x]->grads, full[x]->nparams));
  }
  ok = worst < 1e-5 ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", worst));
  test_measure(ok, "two models on the same 2 ranks, stages running them in different orders: outputs and gradients match each model's one-rank run (model id in the tags)", "%s", det);
  for (int x = 0; x < 2; x++) {
    PetscCall(PetscFree2(ref[x], got[x]));
    PetscCall(model_destroy(&full[x]));
    PetscCall(model_destroy(&g[x]));
  }
  PetscCall(PetscFree2(pfull, gfull));
  PetscCall(batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  ModelConfig lm_cfg = {.n_layer = 4, .n_head = 4, .n_embd = 16, .vocab_size = 24, .n_positions = 12, .head = MODEL_HEAD_LM};
  ModelConfig sc = lm_cfg;
  Layout    layouts[] = {
    {"one rank, GPipe (all micro-batches in flight)", 1, 1, 1, sched_gpipe, 4},
    {"pp 2, 1F1B",                                    2, 1, 1, sched_1f1b,  4},
    {"pp 2, GPipe",                                   2, 1, 1, sched_gpipe, 4},
    {"pp 4, 1F1B",                                    4, 1, 1, sched_1f1b,  4},
    {"pp 4, 1F1B (m > pp: slots reused)",             4, 1, 1, sched_1f1b,  7},
    {"pp 4, GPipe",                                   4, 1, 1, sched_gpipe, 4},
    {"pp 2 x tp 2, 1F1B",                             2, 1, 2, sched_1f1b,  4},
    {"pp 2 x dp 2, 1F1B",                             2, 2, 1, sched_1f1b,  4},
    {"pp 4, GPipe, each stage its own micro-batch order", 4, 1, 1, sched_gpipe_mixed, 4},
    {"pp 4, 1F1B in reverse micro-batch order (m > pp)", 4, 1, 1, sched_1f1b_reversed, 7},
    {"pp 2 x dp 2, GPipe, each stage its own order",  2, 2, 1, sched_gpipe_mixed, 3},
  };
  int tables[][2] = {{4, 8}, {4, 4}, {4, 2}, {4, 1}, {2, 3}, {1, 3}, {8, 5}};

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(comm_setup());
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  test_collective(MPI_COMM_WORLD);
  sc.head = MODEL_HEAD_SCALAR;
  for (size_t k = 0; k < sizeof tables / sizeof tables[0]; k++) PetscCall(test_tables("1F1B", sched_1f1b, tables[k][0], tables[k][1], PETSC_TRUE));
  PetscCall(test_tables("GPipe", sched_gpipe, 4, 3, PETSC_FALSE));
  PetscCall(test_guard(&lm_cfg));
  PetscCall(test_refused_step(&lm_cfg));
  PetscCall(test_two_models(&lm_cfg));
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
    PetscCall(test_step(&lm_cfg, &layouts[k]));
    PetscCall(test_step(&sc, &layouts[k]));
  }
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return test_tally();
}
