/* One PPO iteration as a dataflow graph (docs/background.md, section 1): the calls of
 * the table plus the weight syncs and the advantages, with their data keys.
 *
 *   actor_sync     actor_weights                      -> gen_weights
 *   critic_sync    critic_weights                     -> critic_inf_weights
 *   generation     prompts, gen_weights               -> responses
 *   ref_inference  responses                          -> ref_logprobs
 *   reward_inference responses                        -> scores   (with a reward model)
 *   rewards        responses                          -> rule_scores (rule functions, command, judge)
 *   critic_inference responses, critic_inf_weights    -> values
 *   advantages     ref_logprobs, scores, rule_scores, values -> advantages
 *   actor_train    responses, ref_logprobs, advantages -> new_actor_weights
 *   critic_train   values, advantages                 -> new_critic_weights
 *
 * With -fuse_train 1 the two training nodes are one, fused_train (inputs
 * and outputs of both), whose time is the actor's training time in the
 * records (the critic's is then 0).
 * The syncs exist only when the plan places actor_gen or critic_inf apart
 * from the training layout (otherwise those calls read actor_weights or
 * critic_weights directly); GRPO has no critic nodes. The advantages run on
 * every rank (cheap, and every rank holds the rollout). */
#include "ppo_impl.h"

typedef struct {
  PPOModels        *m;
  const PPOOptions *o;
  const GenRequest *req;
  int               max_prompt, nmicro;
  Rollout          *r;
  PackBuf          *pb;
  const CkptState  *st;
  PPOTrainStats    *ts;
  GenPart           part;
  ReallocStats      ra, rc;
  GenFuseTimes         fuse;
} IterCtx;

static PetscErrorCode iter_ctx(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, int nmicro, IterCtx *c)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(c, sizeof *c));
  c->m = m, c->o = o, c->r = r, c->pb = pb, c->nmicro = nmicro;
  PetscFunctionReturn(PETSC_SUCCESS);
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

static PetscErrorCode run_generation(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.generate, 0, 0, 0, 0));
  PetscCall(rollout_generate_part(ppo_gen_model(c->m), &c->o->gen, c->max_prompt, (uint64_t)c->st->seed, (uint32_t)c->st->iteration, c->req, c->r, &c->part));
  PetscCall(PetscLogEventEnd(sys_log.generate, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_generation(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  if (c->o->plan.fuse == FUSE_MIGRATE) PetscCall(rollout_share_gen_owned(ppo_gen_model(c->m)->mesh, &c->part, c->r));
  else PetscCall(rollout_share_gen(ppo_gen_model(c->m)->mesh, &c->part, c->r));
  if (c->o->dynamic_sampling) { /* the rewards now, to keep the groups whose rewards differ (DAPO) */
    PetscCall(rollout_rule_rewards(&c->m->rew, c->o, c->r, c->m->rew.gold));
    PetscCall(rollout_command_rewards(&c->m->rew, c->o, c->r, (int)c->st->iteration));
    rollout_final_scores(c->r, c->o);
    rollout_dynamic_select(c->r, (int)c->o->rollout_batch, (int)c->o->group);
  }
  if (c->m->gen_drop) PetscCall(dmodel_release(&c->m->actor_gen, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* An inference call on one model: the replica's rows, the frozen model
 * brought back from host memory for the call when offloaded. */
typedef PetscErrorCode (*InferFn)(GPT *, Rollout *, const PPOOptions *, PackBuf *, int, int, int);

static PetscErrorCode infer(IterCtx *c, DModel *dm, MFCId call, PetscBool offload, InferFn fn)
{
  int b0, b1;

  PetscFunctionBegin;
  exec_rows(c->r->B, dm->mesh->dp, dm->mesh->d, &b0, &b1);
  PetscCall(dmodel_acquire(dm));
  PetscCall(PetscLogEventBegin(sys_log.inference, 0, 0, 0, 0));
  PetscCall(fn(dm->gpt, c->r, c->o, c->pb, b0, b1, call_micro(c, call, b1 - b0)));
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

/* The rewards besides the reward model: rules and the judge on every rank,
 * then (share, on every rank) the command's values from world rank 0. */
static PetscErrorCode run_rewards(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  if (c->o->dynamic_sampling) PetscFunctionReturn(PETSC_SUCCESS); /* computed with the selection (share_generation) */
  PetscCall(rollout_rule_rewards(&c->m->rew, c->o, c->r, c->m->rew.gold));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_rewards(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  if (c->o->dynamic_sampling) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(rollout_command_rewards(&c->m->rew, c->o, c->r, (int)c->st->iteration));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Generation and inference as one node (-fuse_gen_inf stream or migrate). */
static PetscErrorCode run_fused(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(rollout_genfuse_call(c->m, c->o, c->req, c->max_prompt, (uint64_t)c->st->seed, (uint32_t)c->st->iteration, c->r, c->pb, &c->part, &c->fuse));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_fused(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(share_generation(ctx));
  if (c->o->plan.fuse == FUSE_MIGRATE) { /* rows ran where the migration put them */
    PetscCall(rollout_share_inf_owned(&c->m->genfuse, c->r));
    if (c->m->has_critic && c->m->critic_drop) PetscCall(dmodel_release(&c->m->critic_inf, PETSC_FALSE));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(share_ref(ctx));
  if (c->o->has_reward_model) PetscCall(share_reward(ctx));
  if (c->m->has_critic) PetscCall(share_critic_inf(ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_advantages(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.advantages, 0, 0, 0, 0));
  PetscCall(rollout_advantages(c->r, c->o, c->st->kl_coef));
  PetscCall(PetscLogEventEnd(sys_log.advantages, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_actor_train(void *ctx)
{
  IterCtx *c = (IterCtx *)ctx;
  Trainer  tr;

  PetscFunctionBegin;
  trainer_attach(&c->m->actor, c->m->plan, MFC_ACTOR_TRAIN, c->o->sched, &tr);
  PetscCall(ppo_train_actor(&tr, c->o, c->r, c->pb, (uint64_t)c->st->seed, (int)c->st->iteration, c->st->kl_coef, c->ts));
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
  PetscCall(ppo_train_fused(&c->m->fuse, &ta, &tc, c->o, c->r, c->pb, (uint64_t)c->st->seed, (int)c->st->iteration, c->st->kl_coef, c->ts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The training metrics from the first rank of each training mesh. */
static PetscErrorCode share_actor_train(void *ctx)
{
  IterCtx *c    = (IterCtx *)ctx;
  double   v[5] = {c->ts->actor_loss, c->ts->clipfrac, c->ts->entropy, c->ts->kl_loss, c->ts->grad_actor};
  PetscFunctionBegin;
  PetscCallMPI(MPI_Bcast(v, 5, MPI_DOUBLE, c->m->actor.mesh->ranks[0], MPI_COMM_WORLD));
  c->ts->actor_loss = v[0], c->ts->clipfrac = v[1], c->ts->entropy = v[2], c->ts->kl_loss = v[3], c->ts->grad_actor = v[4];
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode share_critic_train(void *ctx)
{
  IterCtx *c    = (IterCtx *)ctx;
  double   v[3] = {c->ts->critic_loss, c->ts->vclipfrac, c->ts->grad_critic};
  PetscFunctionBegin;
  PetscCallMPI(MPI_Bcast(v, 3, MPI_DOUBLE, c->m->critic.mesh->ranks[0], MPI_COMM_WORLD));
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

PetscErrorCode ppo_iteration(PPOModels *m, const PPOOptions *o, const GenRequest *req, int max_prompt, Rollout *r, PackBuf *pb, const CkptState *st, PPOTrainStats *ts, StageTimes *tm)
{
  IterCtx     c;
  ExecNode    nodes[10];
  double      sec[10];
  int         n = 0, k_sync_a = -1, k_sync_c = -1, k_gen, k_ref, k_rew = -1, k_rules, k_crit = -1, k_adv, k_at, k_ct = -1;
  const char *given[] = {"prompts", "actor_weights", "critic_weights", NULL};
  PetscBool   crit = m->has_critic, rm = o->has_reward_model;
  DModel     *gen = ppo_gen_model(m), *cinf = ppo_critic_inf_model(m);

  PetscFunctionBegin;
  PetscCall(iter_ctx(m, o, r, pb, (int)(o->rollout_batch / o->minibatches / o->microbatches), &c));
  r->B = r->gen.n = r->Bcap; /* -ppo_dynamic_sampling: every candidate row generates; the selection brings it back to -rollout_batch */
  c.req = req, c.max_prompt = max_prompt, c.st = st, c.ts = ts;
  PetscCall(PetscMemzero(ts, sizeof *ts));
  PetscCall(PetscMemzero(tm, sizeof *tm));
  if (m->gen_copy) {
    k_sync_a   = n;
    nodes[n++] = (ExecNode){"actor_sync", {"actor_weights"}, {"gen_weights"}, (PetscBool)(dmodel_member(&m->actor) || dmodel_member(&m->actor_gen)), run_actor_sync, NULL, &c, PETSC_FALSE};
  }
  if (crit && m->critic_copy) {
    k_sync_c   = n;
    nodes[n++] = (ExecNode){"critic_sync", {"critic_weights"}, {"critic_inf_weights"}, (PetscBool)(dmodel_member(&m->critic) || dmodel_member(&m->critic_inf)), run_critic_sync, NULL, &c, PETSC_FALSE};
  }
  if (o->plan.fuse != FUSE_NONE) {
    PetscBool here = (PetscBool)(dmodel_member(gen) || dmodel_member(&m->reference) || dmodel_member(&m->reward) || (crit && dmodel_member(cinf)));
    PetscCall(rollout_genfuse_setup(&m->genfuse));
    k_gen = k_ref = n;
    k_rew      = rm ? n : -1;
    k_crit     = crit ? n : -1;
    nodes[n++] = (ExecNode){"generation+inference", {"prompts", m->gen_copy ? "gen_weights" : "actor_weights", crit ? (m->critic_copy ? "critic_inf_weights" : "critic_weights") : NULL}, {"responses", "ref_logprobs", "scores", crit ? "values" : NULL}, here, run_fused, share_fused, &c, PETSC_TRUE};
  } else {
    k_gen      = n;
    nodes[n++] = (ExecNode){"generation", {"prompts", m->gen_copy ? "gen_weights" : "actor_weights"}, {"responses"}, dmodel_member(gen), run_generation, share_generation, &c, PETSC_FALSE};
    k_ref      = n;
    nodes[n++] = (ExecNode){"ref_inference", {"responses"}, {"ref_logprobs"}, dmodel_member(&m->reference), run_ref, share_ref, &c, PETSC_FALSE};
    if (rm) {
      k_rew      = n;
      nodes[n++] = (ExecNode){"reward_inference", {"responses"}, {"scores"}, dmodel_member(&m->reward), run_reward, share_reward, &c, PETSC_FALSE};
    }
    if (crit) {
      k_crit     = n;
      nodes[n++] = (ExecNode){"critic_inference", {"responses", m->critic_copy ? "critic_inf_weights" : "critic_weights"}, {"values"}, dmodel_member(cinf), run_critic_inf, share_critic_inf, &c, PETSC_FALSE};
    }
  }
  k_rules    = n;
  nodes[n++] = (ExecNode){"rewards", {"responses"}, {"rule_scores"}, PETSC_TRUE, run_rewards, share_rewards, &c, PETSC_FALSE};
  k_adv      = n;
  nodes[n]   = (ExecNode){"advantages", {"ref_logprobs", "rule_scores"}, {"advantages"}, PETSC_TRUE, run_advantages, NULL, &c, PETSC_FALSE};
  {
    int ni = 2;
    if (rm) nodes[n].in[ni++] = "scores";
    if (crit) nodes[n].in[ni++] = "values";
  }
  n++;
  k_at = n;
  if (crit && m->fuse.on) /* the critic's mesh is the actor's ranks */
    nodes[n++] = (ExecNode){"fused_train", {"responses", "ref_logprobs", "advantages", "values"}, {"new_actor_weights", "new_critic_weights"}, dmodel_member(&m->actor), run_fused_train, share_fused_train, &c, PETSC_FALSE};
  else nodes[n++] = (ExecNode){"actor_train", {"responses", "ref_logprobs", "advantages"}, {"new_actor_weights"}, dmodel_member(&m->actor), run_actor_train, share_actor_train, &c, PETSC_FALSE};
  if (crit && !m->fuse.on) {
    k_ct       = n;
    nodes[n++] = (ExecNode){"critic_train", {"values", "advantages"}, {"new_critic_weights"}, dmodel_member(&m->critic), run_critic_train, share_critic_train, &c, PETSC_FALSE};
  }
  PetscCall(exec_graph_run(nodes, n, given, sec));
  ts->steps   = (int)(o->epochs * o->minibatches);
  tm->gen     = sec[k_gen];
  tm->ref     = sec[k_ref];
  tm->rew     = k_rew >= 0 ? sec[k_rew] : 0;
  tm->rules   = sec[k_rules];
  tm->critic  = k_crit >= 0 ? sec[k_crit] : 0;
  if (o->plan.fuse != FUSE_NONE) { /* the fused node's parts, longest over ranks */
    const GenFuseTimes *f = &c.fuse;
    double v[10] = {f->gen, f->inf[0], f->inf[1], f->inf[2], f->step_s, f->tokens > 0 ? (f->inf[0] + f->inf[1] + f->inf[2]) / f->tokens : 0, f->rt, f->rt_pred, f->mig_s, f->mig_m};
    double w[6] = {f->messages, f->bytes, f->moved, f->mig_bytes, f->send, f->recv_wait};
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, v, 10, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, w, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, w + 4, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    tm->gen = v[0], tm->ref = v[1], tm->rew = v[2], tm->critic = v[3];
    tm->stream_messages = w[0], tm->stream_bytes = w[1], tm->stream_send = w[4], tm->stream_wait = w[5];
    /* samples moved are counted by each rank of a source replica: per shard */
    tm->migrate_at = v[6], tm->migrate_pred = v[7], tm->migrate_s = v[8], tm->migrate_m = v[9];
    tm->migrate_samples = w[2] / (gen->mesh->tp * gen->mesh->pp), tm->migrate_bytes = w[3];
    if (o->plan.fuse == FUSE_MIGRATE) PetscCall(rollout_genfuse_observe(&m->genfuse, r, v[4], v[5]));
  }
  tm->adv     = sec[k_adv];
  tm->actor   = sec[k_at];
  tm->critic_train = k_ct >= 0 ? sec[k_ct] : 0;
  if (k_sync_a >= 0) {
    const ReallocPlan *p;
    tm->sync_actor = sec[k_sync_a];
    PetscCall(realloc_plan_get(&m->actor.cfg, m->actor.mesh, m->actor_gen.mesh, "actor -> actor_gen", &p));
    tm->sync_actor_bytes = realloc_plan_bytes(p);
  }
  if (k_sync_c >= 0) {
    const ReallocPlan *p;
    tm->sync_critic = sec[k_sync_c];
    PetscCall(realloc_plan_get(&m->critic.cfg, m->critic.mesh, m->critic_inf.mesh, "critic -> critic_inf", &p));
    tm->sync_critic_bytes = realloc_plan_bytes(p);
  }
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
