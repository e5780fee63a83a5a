/* One PPO iteration as a dataflow graph (docs/background.md, section 1): the
 * calls of the table plus the weight syncs, the rewards and the advantages,
 * with their data keys. One builder for every variant; asynchronous RL
 * (src/ppo/async/) generates another batch than it trains on and adds its
 * work through PPOGraphHooks.
 *
 *   actor_sync        actor_weights                         -> gen_weights
 *   critic_sync       critic_weights                        -> critic_inf_weights
 *   generation        prompts, gen_weights                  -> responses
 *                     (dynamic sampling: candidates; asynchronous: next_responses, shared late)
 *   dynamic_sampling  candidates                            -> responses, rule_scores
 *   ref_inference     responses                             -> ref_logprobs
 *   reward_inference  responses                             -> scores (with a reward model)
 *   critic_inference  responses, critic_inf_weights         -> values
 *   prox_inference    responses, actor_weights              -> prox_logprobs (asynchronous correction)
 *   rewards           responses                             -> rule_scores (rules, command, judge)
 *   advantages        ref_logprobs, rule_scores, scores, values, prox_logprobs -> advantages
 *   actor_train       responses, ref_logprobs, advantages   -> new_actor_weights
 *   critic_train      values, advantages                    -> new_critic_weights
 *
 * -fuse_gen_inf makes generation and the three inference calls one node;
 * -fuse_train 1 makes the two trainings one node, fused_train, whose time is
 * the actor's training time in the records (the critic's is then 0). The
 * syncs exist only when the plan places actor_gen or critic_inf apart from
 * the training layout; an algorithm without a critic has no critic nodes.
 * Rewards and advantages run on every rank (cheap; every rank holds the
 * rollout). */
#include "ppo_impl.h"

typedef struct {
  PPOModels          *m;
  const PPOOptions   *o;
  const GenRequest   *req;
  PromptSource       *ps;
  int                 max_prompt, nmicro;
  Rollout            *r;
  PackBuf            *pb;
  const CkptState    *st;
  PPOTrainStats      *ts;
  GenPart             part;
  double              more_gen_s;    /* dynamic sampling: this rank's generation seconds after the first round */
  ReallocStats        ra, rc;
  GenFuseTimes        genfuse_times; /* -fuse_gen_inf: the fused node's parts on this rank */
  uint32_t            draw;          /* the batch's index, which keys its draws and the reward command's iteration */
  const PPOGraphHooks *hooks;        /* asynchronous RL's work in the generation and before the advantages */
  PetscBool           frozen;        /* the reference's and reward model's calls with the generation */
  PetscBool           keep_gen;      /* the generation copy stays for later rounds (dynamic sampling) */
  double              frozen_s[2];   /* their seconds on this rank */
} IterCtx;

static PetscErrorCode iter_ctx(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro, IterCtx *c)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(c, sizeof *c));
  c->m = m, c->o = o, c->r = r, c->pb = pb, c->nmicro = nmicro;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PPOGenArgs gen_args(IterCtx *c)
{
  return (PPOGenArgs){ppo_gen_model(c->m), c->o, c->req, c->max_prompt, (uint64_t)c->st->seed, c->draw,
                      (int)c->st->iteration, &c->part, c->r};
}

/* Sequences per micro-batch of an inference call: the plan's count per
 * replica when given, else the mode's micro-batch size. */
static int call_micro(const IterCtx *c, MFCId call, int rows)
{
  int mbs = c->m->plan->call[call].mbs;
  return mbs > 0 ? PetscMax(1, (rows + mbs - 1) / mbs) : c->nmicro;
}

static PetscErrorCode run_actor_sync(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(dmodel_copy(&c->m->actor, &c->m->actor_gen, c->m->bucket, &c->ra));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_critic_sync(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(dmodel_copy(&c->m->critic, &c->m->critic_inf, c->m->bucket, &c->rc));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* An inference call on one model: the replica's rows, the frozen model
 * brought back from host memory for the call when offloaded. */
typedef PetscErrorCode (*InferFn)(Model *, Rollout *, const PPOOptions *, PackBuf *, int, int, int);

static PetscErrorCode infer(IterCtx *c, DModel *dm, MFCId call, PetscBool offload, InferFn fn)
{
  int b0, b1;

  PetscFunctionBegin;
  exec_rows(c->r->B, dm->mesh->dp, dm->mesh->d, &b0, &b1);
  PetscCall(dmodel_acquire(dm));
  PetscCall(PetscLogEventBegin(sys_log.inference, 0, 0, 0, 0));
  PetscCall(fn(dm->lm, c->r, c->o, c->pb, b0, b1, call_micro(c, call, b1 - b0)));
  PetscCall(PetscLogEventEnd(sys_log.inference, 0, 0, 0, 0));
  if (offload) PetscCall(dmodel_release(dm, PETSC_TRUE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_ref(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(infer(c, &c->m->reference, MFC_REF_INF, c->m->offload_ref, rollout_ref_inference));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_reward(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(infer(c, &c->m->reward, MFC_REW_INF, c->m->offload_rew, rollout_reward_inference));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_critic_inf(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(infer(c, ppo_critic_inf_model(c->m), MFC_CRITIC_INF, PETSC_FALSE, rollout_critic_inference));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The actor's log-probabilities before this iteration's update (the
 * proximal policy of the asynchronous correction), on its training mesh. */
static PetscErrorCode run_prox(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(infer(c, &c->m->actor, MFC_ACTOR_TRAIN, PETSC_FALSE, rollout_prox_inference));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_ref(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(exec_share_rows(c->m->reference.mesh, c->r->B, (size_t)c->r->T, MPI_FLOAT, c->r->ref));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_reward(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(exec_share_rows(c->m->reward.mesh, c->r->B, 1, MPI_FLOAT, c->r->score));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_critic_inf(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(exec_share_rows(ppo_critic_inf_model(c->m)->mesh, c->r->B, (size_t)c->r->T, MPI_FLOAT, c->r->values));
  if (c->m->critic_drop) PetscCall(dmodel_release(&c->m->critic_inf, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_prox(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(exec_share_rows(c->m->actor.mesh, c->r->B, (size_t)c->r->T, MPI_FLOAT, c->r->off.prox));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- generation ----------------------------------------------------------------- */
/* The reference's and the reward model's calls on the rows of a batch just
 * generated, on the generation mesh (their time noted apart), their results
 * shared after the level. Frozen models: the result does not depend on when
 * they run, and the same rows in the same micro-batches give the same bits
 * as at the batch's own iteration. */
static PetscErrorCode frozen_calls(IterCtx *c)
{
  double t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(run_ref(c));
  c->frozen_s[0] = sys_wtime() - t0;
  PetscCall(timeline_mark("ref_inference", t0, t0 + c->frozen_s[0]));
  if (c->o->has_reward_model) {
    t0 = sys_wtime();
    PetscCall(run_reward(c));
    c->frozen_s[1] = sys_wtime() - t0;
    PetscCall(timeline_mark("reward_inference", t0, t0 + c->frozen_s[1]));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode generate(IterCtx *c)
{
  PPOGenArgs a = gen_args(c);

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.generate, 0, 0, 0, 0));
  a.r->envs = c->m->eps;
  if (c->hooks && c->hooks->generate) PetscCall(c->hooks->generate(c->hooks->ctx, &a));
  else PetscCall(rollout_generate_part(a.policy, &c->o->gen, a.max_prompt, a.seed, a.draw, a.req, a.r, a.part));
  PetscCall(PetscLogEventEnd(sys_log.generate, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The generation node; with frozen calls, the batch's rows made local on
 * each replica and the reference and reward model run on them. */
static PetscErrorCode run_generation(void *ctx)
{
  IterCtx   *c  = (IterCtx *)ctx;
  double     t0 = sys_wtime();
  PPOGenArgs a  = gen_args(c);

  PetscFunctionBegin;
  PetscCall(generate(c));
  if (!c->frozen) PetscFunctionReturn(PETSC_SUCCESS);
  if (c->hooks && c->hooks->local) PetscCall(c->hooks->local(c->hooks->ctx, &a));
  else rollout_part_local(&c->part, c->r);
  PetscCall(timeline_mark("generation", t0, sys_wtime())); /* the node notes its parts (marks) */
  PetscCall(frozen_calls(c));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_generation(void *ctx)
{
  IterCtx   *c = (IterCtx *)ctx;
  PPOGenArgs a = gen_args(c);

  PetscFunctionBegin;
  if (c->hooks && c->hooks->share) PetscCall(c->hooks->share(c->hooks->ctx, &a));
  else if (c->o->plan.fuse == FUSE_MIGRATE) PetscCall(rollout_share_gen_owned(a.policy->mesh, &c->part, c->r));
  else PetscCall(rollout_share_gen(a.policy->mesh, &c->part, c->r));
  if (c->m->gen_drop && !c->keep_gen) PetscCall(dmodel_release(&c->m->actor_gen, PETSC_FALSE));
  if (c->frozen) {
    PetscCall(share_ref(c));
    if (c->o->has_reward_model) PetscCall(share_reward(c));
    c->r->scored = PETSC_TRUE;
  }
  if (c->hooks && c->hooks->shared) PetscCall(c->hooks->shared(c->hooks->ctx, &a));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Generation and inference as one node (-fuse_gen_inf stream or migrate). */
static PetscErrorCode run_fused(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  c->r->envs = c->m->eps; /* episodes (stream only: migrate is refused with them) */
  PetscCall(rollout_genfuse_call(c->m, c->o, c->req, c->max_prompt, (uint64_t)c->st->seed, (uint32_t)c->st->iteration,
                                 c->r, c->pb, &c->part, &c->genfuse_times));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_fused(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(share_generation(ctx));
  /* rows ran where they were dealt (stream) or where the migration put them */
  PetscCall(rollout_share_inf_owned(&c->m->genfuse, c->r));
  if (c->m->has_critic && c->m->critic_drop) PetscCall(dmodel_release(&c->m->critic_inf, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- rewards ------------------------------------------------------------------ */
/* DAPO's dynamic sampling (src/ppo/dynamic.c), on every rank once the first
 * round's candidates are shared: their rewards, the groups whose rewards
 * differ kept, further rounds on new prompts (generated by the generation
 * mesh, shared to every rank) until the batch is full or
 * -ppo_dynamic_rounds are done. Its time is the rewards'; the later
 * rounds' generation counts as generation. */
static PetscErrorCode run_dynamic(void *ctx)
{
  IterCtx          *c = (IterCtx *)ctx;
  const PPOOptions *o = c->o;
  int               B = (int)o->rollout_batch, k = (int)o->group, R = (int)o->dynamic_rounds;
  DynamicStore      ds;

  PetscFunctionBegin;
  PetscCall(dynamic_begin(c->r, B, &ds));
  for (int round = 0;; round++) {
    if (round > 0) {
      int    used;
      double t0;
      PetscCall(prompts_next(c->ps, o, c->st->data_pos + (int64_t)round * (c->r->Bcap / k), round, &used));
      t0      = sys_wtime();
      c->r->B = c->r->gen.n = c->r->Bcap;
      PetscCall(generate(c));
      if (dmodel_member(ppo_gen_model(c->m))) {
        c->more_gen_s += sys_wtime() - t0;
        PetscCall(timeline_mark("generation", t0, sys_wtime()));
      }
      PetscCall(rollout_share_gen(ppo_gen_model(c->m)->mesh, &c->part, c->r));
    }
    PetscCall(rollout_rule_rewards(&c->m->rew, o, c->r, c->m->rew.gold));
    PetscCall(rollout_command_rewards(&c->m->rew, o, c->r, (int)c->draw));
    rollout_final_scores(c->r, o);
    PetscCall(dynamic_take(&ds, c->r, B / k, k, (PetscBool)(round == R - 1)));
    if (ds.groups == B / k || round == R - 1) break;
  }
  PetscCall(dynamic_finish(&ds, c->r, B));
  if (c->m->gen_drop) PetscCall(dmodel_release(&c->m->actor_gen, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The rewards besides the reward model: rules and the judge on every rank,
 * then (share, on every rank) the command's values from world rank 0. */
static PetscErrorCode run_rewards(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(rollout_rule_rewards(&c->m->rew, c->o, c->r, c->m->rew.gold));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_rewards(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(rollout_command_rewards(&c->m->rew, c->o, c->r, (int)c->draw));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_advantages(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  if (c->hooks && c->hooks->advantages) PetscCall(c->hooks->advantages(c->hooks->ctx, c->r));
  PetscCall(PetscLogEventBegin(sys_log.advantages, 0, 0, 0, 0));
  PetscCall(rollout_advantages(c->r, c->o, c->st->kl_coef, (long long)c->st->iteration + 1));
  PetscCall(PetscLogEventEnd(sys_log.advantages, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- training --------------------------------------------------------------------- */
static PetscErrorCode run_actor_train(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  Trainer  tr;

  PetscFunctionBegin;
  trainer_attach(&c->m->actor, c->m->plan, MFC_ACTOR_TRAIN, c->o->sched, &tr);
  PetscCall(
      ppo_train_actor(&tr, c->o, c->r, c->pb, (uint64_t)c->st->seed, (int)c->st->iteration, c->st->kl_coef, c->ts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_critic_train(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  Trainer  tr;

  PetscFunctionBegin;
  trainer_attach(&c->m->critic, c->m->plan, MFC_CRITIC_TRAIN, c->o->sched, &tr);
  PetscCall(ppo_train_critic(&tr, c->o, c->r, c->pb, (uint64_t)c->st->seed, (int)c->st->iteration, c->ts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -fuse_train 1: both models' training as one node on the shared ranks. */
static PetscErrorCode run_fused_train(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  Trainer  ta, tc;

  PetscFunctionBegin;
  trainer_attach(&c->m->actor, c->m->plan, MFC_ACTOR_TRAIN, c->o->sched, &ta);
  trainer_attach(&c->m->critic, c->m->plan, MFC_CRITIC_TRAIN, c->o->sched, &tc);
  PetscCall(ppo_train_fused(&c->m->fuse, &ta, &tc, c->o, c->r, c->pb, (uint64_t)c->st->seed, (int)c->st->iteration,
                            c->st->kl_coef, c->ts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The training metrics from the first rank of each training mesh. */
static PetscErrorCode share_actor_train(void *ctx)
{
  IterCtx *c    = (IterCtx *)ctx;
  double   v[5] = {c->ts->actor_loss, c->ts->clipfrac, c->ts->entropy, c->ts->kl_loss, c->ts->grad_actor};
  PetscFunctionBegin;
  PetscCallMPI(sys_mpi_bcast(v, 5, MPI_DOUBLE, c->m->actor.mesh->ranks[0], MPI_COMM_WORLD));
  c->ts->actor_loss = v[0], c->ts->clipfrac = v[1], c->ts->entropy = v[2], c->ts->kl_loss = v[3],
  c->ts->grad_actor = v[4];
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_critic_train(void *ctx)
{
  IterCtx *c    = (IterCtx *)ctx;
  double   v[3] = {c->ts->critic_loss, c->ts->vclipfrac, c->ts->grad_critic};
  PetscFunctionBegin;
  PetscCallMPI(sys_mpi_bcast(v, 3, MPI_DOUBLE, c->m->critic.mesh->ranks[0], MPI_COMM_WORLD));
  c->ts->critic_loss = v[0], c->ts->vclipfrac = v[1], c->ts->grad_critic = v[2];
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_fused_train(void *ctx)
{
  PetscFunctionBegin;
  PetscCall(share_actor_train(ctx));
  PetscCall(share_critic_train(ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the graph -------------------------------------------------------------------- */
/* Whether the frozen models' calls can run with the generation of a later
 * batch: their meshes are the generation's, each replica one rank (its rows
 * are there once generated), without allowed sets (kept in the batch's
 * packed form only after the share). */
static PetscBool frozen_with_generation(PPOModels *m, const PPOOptions *o)
{
  const Mesh *g = ppo_gen_model(m)->mesh;
  if (gen_masked(&o->gen) || g->tp != 1 || g->pp != 1 || m->reference.mesh != g) return PETSC_FALSE;
  return !o->has_reward_model || m->reward.mesh == g ? PETSC_TRUE : PETSC_FALSE;
}

/* The nodes being built and where each one's time goes. */
typedef struct {
  ExecNode nodes[PPO_GRAPH_MAX];
  int      n;
  int      sync_a, sync_c, gen, dyn, ref, rew, crit, prox, rules, adv, actor, critic; /* node index, -1: none */
} Graph;

static int add(Graph *g, int *slot, ExecNode node)
{
  if (slot) *slot = g->n;
  g->nodes[g->n] = node;
  return g->n++;
}

static ExecNode node(const char *name, PetscBool here, ExecFn run, ExecFn share, IterCtx *c)
{
  ExecNode e;
  PetscMemzero(&e, sizeof e);
  e.name = name, e.here = here, e.run = run, e.share = share, e.ctx = c;
  return e;
}

static void keys(const char **dst, const char *a, const char *b, const char *c, const char *d)
{
  const char *k[4] = {a, b, c, d};
  int         n    = 0;
  for (int i = 0; i < 4; i++)
    if (k[i]) dst[n++] = k[i];
}

/* The generation node (or the fused generation and inference) for batch g->r. */
static void add_generation(Graph *G, PPOModels *m, const PPOOptions *o, const PPOIterSpec *sp, IterCtx *g)
{
  PetscBool   crit = m->has_critic, rm = o->has_reward_model;
  const char *w    = m->gen_copy ? "gen_weights" : "actor_weights";
  const char *cw   = crit ? (m->critic_copy ? "critic_inf_weights" : "critic_weights") : NULL;
  const char *out  = sp->late ? "next_responses" : o->dynamic_sampling ? "candidates" : "responses";
  ExecNode    e;

  if (o->plan.fuse != FUSE_NONE) {
    PetscBool here = (PetscBool)(dmodel_member(ppo_gen_model(m)) || dmodel_member(&m->reference) ||
                                 dmodel_member(&m->reward) || (crit && dmodel_member(ppo_critic_inf_model(m))));
    e = node("generation+inference", here, run_fused, share_fused, g);
    keys(e.in, "prompts", w, cw, NULL);
    keys(e.out, "responses", "ref_logprobs", "scores", crit ? "values" : NULL);
    e.marks = PETSC_TRUE;
    G->gen = G->ref = add(G, NULL, e);
    G->rew  = rm ? G->gen : -1;
    G->crit = crit ? G->gen : -1;
    return;
  }
  e = node("generation", dmodel_member(ppo_gen_model(m)), run_generation, share_generation, g);
  keys(e.in, "prompts", w, NULL, NULL);
  keys(e.out, out, NULL, NULL, NULL);
  e.marks = g->frozen, e.late = sp->late;
  add(G, &G->gen, e);
}

/* The nodes that score and train batch c->r. */
static void add_training(Graph *G, PPOModels *m, const PPOOptions *o, const PPOIterSpec *sp, IterCtx *c)
{
  PetscBool crit = m->has_critic, rm = o->has_reward_model, fused = (PetscBool)(o->plan.fuse != FUSE_NONE);
  PetscBool scored = (PetscBool)(c->r->scored || fused); /* reference and reward model already ran */
  ExecNode  e;

  if (o->dynamic_sampling) {
    e = node("dynamic_sampling", PETSC_TRUE, run_dynamic, NULL, c);
    keys(e.in, "candidates", NULL, NULL, NULL);
    keys(e.out, "responses", "rule_scores", NULL, NULL);
    add(G, &G->dyn, e);
  }
  if (!scored) {
    e = node("ref_inference", dmodel_member(&m->reference), run_ref, share_ref, c);
    keys(e.in, "responses", NULL, NULL, NULL);
    keys(e.out, "ref_logprobs", NULL, NULL, NULL);
    add(G, &G->ref, e);
    if (rm) {
      e = node("reward_inference", dmodel_member(&m->reward), run_reward, share_reward, c);
      keys(e.in, "responses", NULL, NULL, NULL);
      keys(e.out, "scores", NULL, NULL, NULL);
      add(G, &G->rew, e);
    }
  }
  if (crit && !fused) {
    e = node("critic_inference", dmodel_member(ppo_critic_inf_model(m)), run_critic_inf, share_critic_inf, c);
    keys(e.in, "responses", m->critic_copy ? "critic_inf_weights" : "critic_weights", NULL, NULL);
    keys(e.out, "values", NULL, NULL, NULL);
    add(G, &G->crit, e);
  }
  if (sp->prox) { /* in the critic inference's level (after its weights' sync), so the two run at once where apart */
    e = node("prox_inference", dmodel_member(&m->actor), run_prox, share_prox, c);
    keys(e.in, "responses", "actor_weights", crit && m->critic_copy ? "critic_inf_weights" : NULL, NULL);
    keys(e.out, "prox_logprobs", NULL, NULL, NULL);
    add(G, &G->prox, e);
  }
  if (!o->dynamic_sampling) {
    e = node("rewards", PETSC_TRUE, run_rewards, share_rewards, c);
    keys(e.in, "responses", NULL, NULL, NULL);
    keys(e.out, "rule_scores", NULL, NULL, NULL);
    add(G, &G->rules, e);
  }
  e = node("advantages", PETSC_TRUE, run_advantages, NULL, c);
  keys(e.in, "ref_logprobs", "rule_scores", rm ? "scores" : NULL, crit ? "values" : NULL);
  if (sp->prox) e.in[2 + rm + crit] = "prox_logprobs";
  keys(e.out, "advantages", NULL, NULL, NULL);
  add(G, &G->adv, e);
  if (crit && m->fuse.on) { /* the critic's mesh is the actor's ranks */
    e = node("fused_train", dmodel_member(&m->actor), run_fused_train, share_fused_train, c);
    keys(e.in, "responses", "ref_logprobs", "advantages", "values");
    keys(e.out, "new_actor_weights", "new_critic_weights", NULL, NULL);
    add(G, &G->actor, e);
    return;
  }
  e = node("actor_train", dmodel_member(&m->actor), run_actor_train, share_actor_train, c);
  keys(e.in, "responses", "ref_logprobs", "advantages", NULL);
  keys(e.out, "new_actor_weights", NULL, NULL, NULL);
  add(G, &G->actor, e);
  if (crit) {
    e = node("critic_train", dmodel_member(&m->critic), run_critic_train, share_critic_train, c);
    keys(e.in, "values", "advantages", NULL, NULL);
    keys(e.out, "new_critic_weights", NULL, NULL, NULL);
    add(G, &G->critic, e);
  }
}

static void add_sync(Graph *G, PPOModels *m, PetscBool actor, IterCtx *c)
{
  ExecNode e;
  if (actor) {
    e = node("actor_sync", (PetscBool)(dmodel_member(&m->actor) || dmodel_member(&m->actor_gen)), run_actor_sync, NULL,
             c);
    keys(e.in, "actor_weights", NULL, NULL, NULL);
    keys(e.out, "gen_weights", NULL, NULL, NULL);
    add(G, &G->sync_a, e);
  } else {
    e = node("critic_sync", (PetscBool)(dmodel_member(&m->critic) || dmodel_member(&m->critic_inf)), run_critic_sync,
             NULL, c);
    keys(e.in, "critic_weights", NULL, NULL, NULL);
    keys(e.out, "critic_inf_weights", NULL, NULL, NULL);
    add(G, &G->sync_c, e);
  }
}

static double sec_of(const double *sec, int k) { return k >= 0 ? sec[k] : 0; }

/* Stage times from the nodes' seconds (longest over ranks): the frozen
 * models' calls with the generation count as inference, the proximal
 * forward as the reference's (an inference call of the actor), dynamic
 * sampling's later rounds as generation. */
static PetscErrorCode stage_times(PPOModels *m, const PPOOptions *o, const Graph *G, const double *sec, IterCtx *c,
                                  IterCtx *g, StageTimes *tm)
{
  PetscFunctionBegin;
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, g->frozen_s, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, &c->more_gen_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  tm->gen          = sec_of(sec, G->gen) - g->frozen_s[0] - g->frozen_s[1] + c->more_gen_s;
  tm->ref          = sec_of(sec, G->ref) + g->frozen_s[0] + sec_of(sec, G->prox);
  tm->rew          = sec_of(sec, G->rew) + g->frozen_s[1];
  tm->critic       = sec_of(sec, G->crit);
  tm->rules        = G->dyn >= 0 ? PetscMax(0, sec[G->dyn] - c->more_gen_s) : sec_of(sec, G->rules);
  tm->adv          = sec_of(sec, G->adv);
  tm->actor        = sec_of(sec, G->actor);
  tm->critic_train = sec_of(sec, G->critic);
  if (o->plan.fuse != FUSE_NONE) { /* the fused node's parts, longest over ranks */
    const GenFuseTimes *f = &g->genfuse_times;
    double              tok_s = f->tokens > 0 ? (f->inf[0] + f->inf[1] + f->inf[2]) / f->tokens : 0;
    double v[10] = {f->gen, f->inf[0], f->inf[1], f->inf[2], f->step_s, tok_s, f->rt, f->rt_pred, f->mig_s, f->mig_m};
    double w[6] = {f->messages, f->bytes, f->moved, f->mig_bytes, f->send, f->recv_wait};
    PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, v, 10, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, w, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, w + 4, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    tm->gen = v[0], tm->ref = v[1], tm->rew = v[2], tm->critic = v[3];
    tm->stream_messages = w[0], tm->stream_bytes = w[1], tm->stream_send = w[4], tm->stream_wait = w[5];
    /* samples moved are counted by each rank of a source replica: per shard */
    tm->migrate_at = v[6], tm->migrate_pred = v[7], tm->migrate_s = v[8], tm->migrate_m = v[9];
    tm->migrate_samples = w[2] / (ppo_gen_model(m)->mesh->tp * ppo_gen_model(m)->mesh->pp), tm->migrate_bytes = w[3];
    if (o->plan.fuse == FUSE_MIGRATE) PetscCall(rollout_genfuse_observe(&m->genfuse, g->r, v[4], v[5]));
  }
  if (G->sync_a >= 0) {
    const ReallocPlan *p;
    tm->sync_actor = sec[G->sync_a];
    PetscCall(realloc_plan_get(&m->actor.cfg, m->actor.mesh, m->actor_gen.mesh, "actor -> actor_gen", &p));
    tm->sync_actor_bytes = realloc_plan_bytes(p);
  }
  if (G->sync_c >= 0) {
    const ReallocPlan *p;
    tm->sync_critic = sec[G->sync_c];
    PetscCall(realloc_plan_get(&m->critic.cfg, m->critic.mesh, m->critic_inf.mesh, "critic -> critic_inf", &p));
    tm->sync_critic_bytes = realloc_plan_bytes(p);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_iteration(PPOModels *m, const PPOOptions *o, PromptSource *ps, const PPOIterSpec *sp, PackBuf *pb,
                             const CkptState *st, PPOTrainStats *ts, StageTimes *tm)
{
  IterCtx     c, g;
  Graph       G;
  double      sec[PPO_GRAPH_MAX];
  const char *given[7] = {"prompts", "actor_weights", "critic_weights", NULL, NULL, NULL, NULL};
  Rollout    *cur = sp->train, *next = sp->gen;
  int         nmicro = (int)(o->rollout_batch / o->minibatches / o->microbatches), ng = 3;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&G, sizeof G));
  G.sync_a = G.sync_c = G.gen = G.dyn = G.ref = G.rew = G.crit = G.prox = G.rules = G.adv = G.actor = G.critic = -1;
  PetscCall(iter_ctx(m, o, cur, pb, nmicro, &c));
  PetscCall(iter_ctx(m, o, next, pb, nmicro, &g));
  c.ps = g.ps = ps, c.max_prompt = g.max_prompt = ps->max_prompt, c.st = g.st = st, c.ts = g.ts = ts;
  c.hooks = g.hooks = sp->hooks;
  c.req = g.req = ps->req;
  if (cur) c.draw = (uint32_t)sp->train_draw;
  if (next) {
    g.draw  = (uint32_t)sp->gen_draw,
    next->B = next->gen.n = next->Bcap; /* dynamic sampling: every candidate row generates */
    g.frozen   = (PetscBool)(sp->late && frozen_with_generation(m, o));
    g.keep_gen = (PetscBool)(o->dynamic_sampling > 0);
  }
  if (next && next == cur) c = g, c.frozen = PETSC_FALSE; /* synchronous: one batch, one context */
  if (cur && next != cur) given[ng++] = "responses"; /* generated by an earlier iteration */
  if (cur && cur->scored) { /* scored with its generation */
    given[ng++] = "ref_logprobs";
    if (o->has_reward_model) given[ng++] = "scores";
  }
  PetscCall(PetscMemzero(ts, sizeof *ts));
  PetscCall(PetscMemzero(tm, sizeof *tm));
  if (next && m->gen_copy) add_sync(&G, m, PETSC_TRUE, &g);
  if (cur && m->has_critic && m->critic_copy && !sp->late) add_sync(&G, m, PETSC_FALSE, &c);
  if (next) {
    if (o->plan.fuse != FUSE_NONE) PetscCall(rollout_genfuse_setup(&m->genfuse));
    add_generation(&G, m, o, sp, next == cur ? &c : &g);
  }
  if (cur && m->has_critic && m->critic_copy && sp->late) add_sync(&G, m, PETSC_FALSE, &c);
  if (cur) add_training(&G, m, o, sp, &c);
  PetscCall(exec_graph_run(G.nodes, G.n, given, sec));
  ts->steps = cur ? (int)(o->epochs * o->minibatches) : 0;
  PetscCall(stage_times(m, o, &G, sec, &c, next == cur ? &c : &g, tm));
  ts->t_actor  = tm->actor;
  ts->t_critic = tm->critic_train;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_ref_call(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro)
{
  IterCtx c;

  PetscFunctionBegin;
  PetscCall(iter_ctx(m, o, r, pb, nmicro, &c));
  if (dmodel_member(&m->reference)) PetscCall(run_ref(&c));
  PetscCall(share_ref(&c));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_reward_call(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro)
{
  IterCtx c;

  PetscFunctionBegin;
  if (!o->has_reward_model) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(iter_ctx(m, o, r, pb, nmicro, &c));
  if (dmodel_member(&m->reward)) PetscCall(run_reward(&c));
  PetscCall(share_reward(&c));
  PetscFunctionReturn(PETSC_SUCCESS);
}
