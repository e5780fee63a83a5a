/* Generation and inference fused into one call (-fuse_gen_inf stream or
 * migrate, docs/fusion.md): the generation replicas stream each finished
 * sample to the inference ranks (src/genfuse), which run reference, reward and
 * critic inference on micro-batches of arrived samples while decoding goes
 * on. With migrate, the unfinished samples move at R_t onto the fewest
 * replicas that hold them; the ranks of the others stop generating and run
 * the inference calls they serve, on their own rows and on the finished
 * rows of the ranks still decoding (co-located plans fuse that way).
 * With stream, each generation head deals its samples to the replica of
 * each call with the least estimated work so far (genfuse_deal), and tells
 * every inference head when it is done; with migrate the rows stay with
 * their replicas (the reroute at the migration needs that).
 * Inference replicas may span ranks (tp, pp): the samples go to the
 * replica's head (its last stage's first tp rank), which cuts the
 * micro-batches and hands each to the replica's other ranks
 * (genfuse_replica_bcast). The plan check gives the calls that share such
 * a replica one layout, and with migrate puts each such replica wholly
 * inside or wholly outside generation: every generation rank reroutes the
 * rows at the migration alike, and a replica's ranks agree on its rows. A
 * sample's outputs depend neither on its micro-batch nor on the rank that
 * decoded or scored it, so the rollout equals the unfused one (within
 * float summation order). */
#include "ppo_impl.h"

/* The inference calls of this rollout, with their models (NULL: a call
 * this run does not make, the reward model's without one). */
static int fuse_calls(PPOModels *m, DModel *dm[3])
{
  dm[ROLLOUT_REF]    = &m->reference;
  dm[ROLLOUT_SCORE]  = m->has_reward ? &m->reward : NULL;
  dm[ROLLOUT_VALUES] = m->has_critic ? ppo_critic_inf_model(m) : NULL;
  return m->has_critic ? 3 : 2;
}


PetscErrorCode rollout_genfuse_setup(RolloutGenFuse *gs)
{
  PetscFunctionBegin;
  if (!gs->has_comm) PetscCallMPI(MPI_Comm_dup(MPI_COMM_WORLD, &gs->comm));
  gs->has_comm = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_genfuse_teardown(RolloutGenFuse *gs)
{
  PetscFunctionBegin;
  if (gs->has_comm) PetscCallMPI(MPI_Comm_free(&gs->comm));
  gs->has_comm = PETSC_FALSE;
  PetscCall(PetscFree2(gs->hist.len, gs->hist.rlen));
  PetscCall(PetscFree5(gs->rows.need, gs->rows.member, gs->rows.done, gs->rows.q_rep, gs->rows.head_of));
  gs->hist.have = PETSC_FALSE, gs->rows.B = gs->rows.world = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rows_setup(PPOModels *m, int B, PetscBool dealt)
{
  RolloutGenFuse *gs = &m->genfuse;
  DModel     *dm[3];
  const Mesh *gm = ppo_gen_model(m)->mesh;
  int         nc = fuse_calls(m, dm), world;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  if (gs->rows.B != B || gs->rows.world != world) {
    PetscCall(PetscFree5(gs->rows.need, gs->rows.member, gs->rows.done, gs->rows.q_rep, gs->rows.head_of));
    PetscCall(PetscMalloc5(3 * (size_t)world * B, &gs->rows.need, 3 * world, &gs->rows.member, 3 * (size_t)B,
                           &gs->rows.done, world, &gs->rows.q_rep, world, &gs->rows.head_of));
    gs->rows.B = B, gs->rows.world = world;
  }
  PetscCall(PetscArrayzero(gs->rows.need, 3 * (size_t)world * B));
  PetscCall(PetscArrayzero(gs->rows.member, 3 * world));
  PetscCall(PetscArrayzero(gs->rows.done, 3 * (size_t)B));
  gs->rows.dealt = dealt;
  for (int q = 0; q < world; q++) gs->rows.q_rep[q] = -1, gs->rows.head_of[q] = q;
  for (int i = 0; i < gm->nranks; i++)
    gs->rows.q_rep[gm->ranks[i]] = (i / gm->tp) % gm->dp; /* mesh index (p*dp + d)*tp + t */
  for (int k = 0; k < nc; k++) {
    const Mesh *mesh = dm[k] ? dm[k]->mesh : NULL;
    for (int d = 0; mesh && d < mesh->dp; d++) {
      int b0, b1, q = exec_head(mesh, d);
      exec_rows(B, mesh->dp, d, &b0, &b1);
      for (int p = 0; p < mesh->pp; p++) /* a replica of several ranks: one head */
        for (int t = 0; t < mesh->tp; t++) gs->rows.head_of[mesh_rank(mesh, p, d, t)] = q;
      gs->rows.member[k * world + q] = 1;
      for (int b = b0; b < b1 && !dealt; b++) gs->rows.need[((size_t)k * world + q) * B + b] = 1;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The route: a rank needs a row if it runs any call on it; dealt, every
 * replica head may get any row. */
static void route_fill(const RolloutGenFuse *gs, GenFuseRoute *route)
{
  int B = gs->rows.B, world = gs->rows.world;
  for (int q = 0; q < world; q++) {
    int head = gs->rows.member[q] | gs->rows.member[world + q] | gs->rows.member[2 * world + q];

    route->dest[q] = q;
    for (int b = 0; b < B; b++)
      route->need[(size_t)q * B + b] = gs->rows.dealt ? head
                                                      : gs->rows.need[(size_t)q * B + b] |
                                                            gs->rows.need[((size_t)world + q) * B + b] |
                                                            gs->rows.need[(2 * (size_t)world + q) * B + b];
  }
  route->ndest = world;
}

/* The route of this iteration. With migrate every rank of an inference
 * mesh needs its replica's rows, and every world rank stays a destination
 * (a freed rank may need rows later); with stream the rows are dealt, and
 * only the inference replicas' heads are destinations. */
static PetscErrorCode fuse_route(PPOModels *m, int B, PetscBool migrate, GenFuseRoute *route)
{
  int n = 0, world;

  PetscFunctionBegin;
  PetscCall(rows_setup(m, B, (PetscBool)!migrate));
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  PetscCall(genfuse_route_create(B, world, route));
  route_fill(&m->genfuse, route);
  if (migrate) PetscFunctionReturn(PETSC_SUCCESS);
  for (int q = 0; q < world; q++) /* drop ranks that need nothing */
    if (genfuse_route_count(route, q)) {
      route->dest[n] = q;
      if (n != q) PetscCall(PetscArraycpy(route->need + (size_t)n * B, route->need + (size_t)q * B, B));
      n++;
    }
  route->ndest = n;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* After the migration (every generation rank): the freed ranks take the
 * inference rows of the ranks that go on decoding, and the samples held
 * back for generation ranks go out by the new route. */
typedef struct {
  RolloutGenFuse *gs;
  GenFuseRoute  *route;
  GenFuseSender *s;
  PetscBool   head;
} AfterCtx;

static PetscErrorCode after_migration(void *ctx, const unsigned char *dest, int dp, const int *idx, int n)
{
  AfterCtx      *a = (AfterCtx *)ctx;
  RolloutGenFuse *gs = a->gs;
  unsigned char *freed, *keep;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(dp, &freed));
  PetscCall(PetscCalloc1(gs->rows.B, &keep));
  for (int d = 0; d < dp; d++) freed[d] = !dest[d];
  for (int i = 0; i < n; i++) keep[idx[i]] = 1;
  genfuse_reroute(3, gs->rows.world, gs->rows.B, gs->rows.q_rep, freed, gs->rows.member, keep, gs->rows.need);
  route_fill(a->gs, a->route);
  PetscCall(PetscFree(freed));
  PetscCall(PetscFree(keep));
  if (a->head) PetscCall(genfuse_sender_release(a->s));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_share_inf_owned(RolloutGenFuse *gs, Rollout *r)
{
  size_t T = (size_t)r->T;
  int    n = r->B * r->T;

  PetscFunctionBegin;
  for (int b = 0; b < r->B; b++) {
    PetscBool mine = (PetscBool)(gs->rows.done && gs->rows.B == r->B);
    if (!mine || !gs->rows.done[b]) PetscCall(PetscArrayzero(r->ref + b * T, T));
    if (!mine || !gs->rows.done[r->B + b]) r->score[b] = 0;
    if (!mine || !gs->rows.done[2 * r->B + b]) PetscCall(PetscArrayzero(r->values + b * T, T));
  }
  if (gs->rows.done) PetscCall(PetscArrayzero(gs->rows.done, 3 * (size_t)gs->rows.B));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, r->ref, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, r->values, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, r->score, r->B, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  PPOModels        *m;
  const PPOOptions *o;
  Rollout          *r, arr; /* arr: the arrivals, in arrival order */
  PackBuf          *pb;
  DModel           *dm[3];
  int               ncalls, me, *sub, *calls; /* calls[j]: what arrival j was dealt to here */
  int               head[3]; /* the head of this rank's replica of each call it serves (-1: none) */
  MPI_Comm          rep;     /* a replica of several ranks: its ranks (else MPI_COMM_NULL) */
  int               rep_root;
  GenFuseTimes     *tm;
} FuseInf;

static const char *const fuse_call_names[3] = {"ref_inference", "reward_inference", "critic_inference"};

/* A micro-batch of arrivals through each call this rank serves; the
 * replica's head copies the outputs to the rollout's rows (its last stage
 * has them, and one rank per replica owns them for the sharing). */
static PetscErrorCode fuse_batch_run(FuseInf *f, const int *rows, const int *idx, int n)
{
  RolloutGenFuse *gs = &f->m->genfuse;
  Rollout *a = &f->arr, *r = f->r;
  size_t   T = (size_t)r->T;

  PetscFunctionBegin;
  for (int i = 0; i < n; i++)
    a->start[idx[i]] = a->gen.prompt_len[idx[i]], a->len[idx[i]] = a->gen.response_len[idx[i]],
    f->tm->tokens += a->start[idx[i]] + a->len[idx[i]];
  for (int i = 0; i < n && gs->rows.dealt; i++) /* the rows as they were dealt */
    for (int k = 0; k < f->ncalls; k++)
      if (f->head[k] >= 0 && f->calls[idx[i]] >> k & 1)
        gs->rows.need[((size_t)k * gs->rows.world + f->head[k]) * r->B + rows[idx[i]]] = 1;
  for (int k = 0; k < f->ncalls; k++) {
    int    ns = 0;
    double t0 = sys_wtime();

    if (!f->dm[k] || !dmodel_member(f->dm[k])) continue;
    for (int i = 0; i < n; i++)
      if (gs->rows.need[((size_t)k * gs->rows.world + f->head[k]) * r->B + rows[idx[i]]]) f->sub[ns++] = idx[i];
    if (!ns) continue;
    PetscCall(rollout_infer_rows(f->dm[k]->lm, (RolloutInfer)k, a, f->o, f->pb, f->sub, ns));
    for (int i = 0; i < ns && f->head[k] == f->me; i++) {
      int j = f->sub[i], b = rows[j];
      gs->rows.done[(size_t)k * r->B + b] = 1;
      if (k == ROLLOUT_REF) PetscCall(PetscArraycpy(r->ref + b * T, a->ref + j * T, T));
      if (k == ROLLOUT_VALUES) PetscCall(PetscArraycpy(r->values + b * T, a->values + j * T, T));
      if (k == ROLLOUT_SCORE) r->score[b] = a->score[j];
    }
    f->tm->inf[k] += sys_wtime() - t0;
    PetscCall(timeline_mark(fuse_call_names[k], t0, sys_wtime()));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The head: a micro-batch goes to the replica's other ranks first. */
static PetscErrorCode fuse_batch(void *ctx, const GenBatch *g, const int *rows, const int *idx, int n)
{
  FuseInf *f = (FuseInf *)ctx;

  PetscFunctionBegin;
  (void)g;
  if (f->rep != MPI_COMM_NULL)
    PetscCall(
        genfuse_replica_bcast(f->rep, f->rep_root, &f->arr.gen, (int *)rows, f->calls, (int *)idx, &n, NULL, NULL));
  PetscCall(fuse_batch_run(f, rows, idx, n));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This rank's replica of each inference call it serves: its head, and for
 * a replica of several ranks their communicator (the replica as a mesh of
 * its own: created once, collective over its ranks). The plan check gives
 * every call on such a rank the same layout. */
static PetscErrorCode fuse_replica(PPOModels *m, FuseInf *f)
{
  DModel *dm[3];
  int     nc = fuse_calls(m, dm);

  PetscFunctionBegin;
  f->rep = MPI_COMM_NULL;
  for (int k = 0; k < 3; k++) {
    const Mesh *mesh = k < nc && dm[k] && dmodel_member(dm[k]) ? dm[k]->mesh : NULL;
    int         ranks[PLAN_MAX_RANKS], n = 0;

    f->head[k] = mesh ? exec_head(mesh, mesh->d) : -1;
    if (!mesh || mesh->tp * mesh->pp == 1 || f->rep != MPI_COMM_NULL) continue;
    for (int p = 0; p < mesh->pp; p++)
      for (int t = 0; t < mesh->tp; t++) ranks[n++] = mesh_rank(mesh, p, mesh->d, t);
    {
      const Mesh *rep;

      PetscCall(mesh_get(ranks, n, mesh->pp, 1, mesh->tp, &rep));
      f->rep      = rep->all.mpi;
      f->rep_root = (mesh->pp - 1) * mesh->tp; /* exec_head's place in the list */
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Whether this rank takes part in the streamed inference: it receives
 * samples, or it is in an inference replica of several ranks. */
static PetscBool fuse_serves(PPOModels *m, const GenFuseRoute *route, int me)
{
  DModel *dm[3];
  int     nc = fuse_calls(m, dm);

  if (genfuse_route_count(route, me)) return PETSC_TRUE;
  for (int k = 0; k < nc; k++)
    if (dm[k] && dmodel_member(dm[k]) && dm[k]->mesh->tp * dm[k]->mesh->pp > 1) return PETSC_TRUE;
  return PETSC_FALSE;
}

static PetscErrorCode fuse_infer(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, const GenFuseRoute *route,
                                 GenFuseTimes *tm)
{
  RolloutGenFuse *gs = &m->genfuse;
  FuseInf       f;
  GenFuseRecvStats st;
  int           me, *rows;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&f, sizeof f));
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  f.m = m, f.o = o, f.r = r, f.pb = pb, f.tm = tm, f.me = me;
  f.ncalls = fuse_calls(m, f.dm);
  for (int k = 0; k < f.ncalls; k++)
    if (f.dm[k] && dmodel_member(f.dm[k])) PetscCall(dmodel_acquire(f.dm[k]));
  PetscCall(rollout_create(r->B, r->T, r->gen.mask_off ? PETSC_TRUE : PETSC_FALSE, &f.arr));
  PetscCall(PetscMalloc3(r->B, &rows, r->B, &f.sub, r->B, &f.calls));
  PetscCall(fuse_replica(m, &f));
  if (f.rep == MPI_COMM_NULL || f.head[0] == me || f.head[1] == me || f.head[2] == me) {
    int senders = gs->rows.dealt ? ppo_gen_model(m)->mesh->dp : 0; /* dealt: until every generation head is done */

    PetscCall(genfuse_receive(gs->comm, senders ? 0 : genfuse_route_count(route, me), senders, (int)o->plan.fuse_tokens,
                              o->plan.fuse_hold, &f.arr.gen, rows, f.calls, fuse_batch, &f, &st));
    if (f.rep != MPI_COMM_NULL) { /* the end, to the replica's other ranks */
      int n = 0;
      PetscCall(genfuse_replica_bcast(f.rep, f.rep_root, &f.arr.gen, rows, f.calls, f.sub, &n, NULL, NULL));
    }
  } else { /* another rank of a replica: the head's micro-batches */
    int n, got = 0, *idx;

    PetscCall(PetscMemzero(&st, sizeof st));
    PetscCall(PetscMalloc1(r->B, &idx));
    do {
      double t0 = sys_wtime();

      n = 0;
      PetscCall(genfuse_replica_bcast(f.rep, f.rep_root, &f.arr.gen, rows, f.calls, idx, &n, &got, &st));
      st.wait += sys_wtime() - t0;
      if (!n) break;
      st.batches++;
      PetscCall(fuse_batch_run(&f, rows, idx, n));
    } while (n);
    PetscCall(PetscFree(idx));
  }
  tm->recv_wait = st.wait, tm->batches = st.batches;
  PetscCall(PetscFree3(rows, f.sub, f.calls));
  PetscCall(rollout_destroy(&f.arr));
  if (m->offload_ref) PetscCall(dmodel_release(&m->reference, PETSC_TRUE));
  if (m->offload_rew) PetscCall(dmodel_release(&m->reward, PETSC_TRUE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* R_t for this iteration: given, or auto from the previous iteration (the
 * route and gs->rows are this iteration's default layout). */
static double pick_rt(PPOModels *m, const PPOOptions *o, const GenFuseRoute *route, double *pred)
{
  RolloutGenFuse *gs = &m->genfuse;
  GenFuseSim sim;

  *pred = 0;
  if (o->plan.migrate_at >= 0) return o->plan.migrate_at;
  *pred = -1; /* auto without a measured iteration */
  if (!gs->hist.have || gs->hist.B != route->B) return GENFUSE_RT_FIRST;
  /* migrate keeps every world rank in the route, in rank order */
  sim = (GenFuseSim){ route->B,          ppo_gen_model(m)->mesh->dp,
                      (int)o->gen.slots, route->ndest,
                      gs->hist.len,      gs->hist.rlen,
                      gs->rows.q_rep,    route->need,
                      gs->hist.step_s,   gs->hist.tok_s,
                      gs->rows.head_of };
  return genfuse_sim_pick(&sim, pred);
}

PetscErrorCode rollout_genfuse_observe(RolloutGenFuse *gs, const Rollout *r, double step_s, double tok_s)
{
  PetscFunctionBegin;
  if (gs->hist.B != r->B) {
    PetscCall(PetscFree2(gs->hist.len, gs->hist.rlen));
    PetscCall(PetscMalloc2(r->B, &gs->hist.len, r->B, &gs->hist.rlen));
    gs->hist.B = r->B;
  }
  for (int b = 0; b < r->B; b++) gs->hist.len[b] = r->start[b] + r->len[b], gs->hist.rlen[b] = r->len[b];
  gs->hist.step_s = step_s, gs->hist.tok_s = tok_s;
  gs->hist.have   = (PetscBool)(step_s > 0);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The finished-sample callback of migrate: the row is now this rank's to
 * share, and it streams like any other. */
typedef struct {
  GenFuseSender *s;
  int        *owner, me;
} MigFinish;

static PetscErrorCode mig_finished(void *ctx, const GenBatch *b, int index)
{
  MigFinish *f = (MigFinish *)ctx;
  PetscFunctionBegin;
  f->owner[index] = f->me;
  PetscCall(genfuse_send_finished(f->s, b, index));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Generation of migrate: every rank of the mesh decodes into a batch of all
 * B rows (request ids stay the rows, so a sample that moves keeps its
 * draws), starting with its replica's rows; the hook counts and migrates. */
static PetscErrorCode generate_migrate(PPOModels *m, const PPOOptions *o, const GenRequest *req, int max_prompt,
                                       uint64_t seed, uint32_t iteration, Rollout *r, GenPart *part, GenFuseSender *s,
                                       GenFuseRoute *route, GenFuseTimes *tm)
{
  RolloutGenFuse *gs = &m->genfuse;
  DModel      *gen = ppo_gen_model(m);
  const Mesh  *gm  = gen->mesh;
  GenEngine   *eng;
  GenFuseMigrator mg;
  MigFinish    fin;
  GenRun       run;
  AfterCtx     after = {&m->genfuse, route, s, exec_is_head(gen->mesh)};
  int         *own;

  PetscFunctionBegin;
  exec_rows(r->B, gm->dp, gm->d, &part->b0, &part->b1);
  part->own = PETSC_TRUE;
  PetscCall(gen_batch_create(r->B, r->T, gen_masked(&o->gen), &part->b));
  PetscCall(PetscMalloc1(r->B, &part->owner));
  PetscCall(PetscMalloc1(r->B, &own));
  for (int b = 0; b < r->B; b++) part->owner[b] = -1;
  for (int b = part->b0; b < part->b1; b++) own[b - part->b0] = b;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &fin.me));
  fin.s = s, fin.owner = part->owner;
  PetscCall(genfuse_migrator_begin(gs->comm, gm, r->B, tm->rt, (int)o->plan.migrate_to, m->bucket, &mg));
  mg.after = after_migration, mg.after_ctx = &after;
  run = (GenRun){own, part->b1 - part->b0, exec_is_head(gm) ? mig_finished : NULL, &fin, NULL, NULL, NULL};
  if (tm->rt > 0 && gm->dp > 1) run.on_step = genfuse_migrate_step, run.step_ctx = &mg;
  PetscCall(gen_engine_create(gen->lm, &o->gen, max_prompt, &eng));
  PetscCall(gen_generate_run(eng, seed, iteration, r->B, req, &part->b, &run));
  PetscCall(gen_engine_destroy(&eng));
  if (!mg.t_end && run.finish_ctx)
    PetscCall(genfuse_sender_release(s)); /* no migration: the rows stay where they were */
  PetscCall(PetscFree(own));
  tm->moved = mg.moved, tm->mig_bytes = (double)mg.bytes, tm->mig_s = mg.t_end - mg.t_start, tm->mig_m = mg.m,
  tm->mig_dest = mg.dest;
  tm->mig_t0 = mg.t_start, tm->mig_t1 = mg.t_end;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A generation head's deal (stream): every replica of each inference call,
 * nothing dealt yet. head[0] and load[0] hold the storage. */
static PetscErrorCode deal_create(PPOModels *m, GenFuseDeal *d)
{
  DModel *dm[3];
  int     nc = fuse_calls(m, dm), total = 0, at = 0, *head;
  double *load;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(d, sizeof *d));
  for (int k = 0; k < nc; k++) total += dm[k] && dm[k]->mesh ? dm[k]->mesh->dp : 0;
  PetscCall(PetscMalloc1(total + 1, &head));
  PetscCall(PetscCalloc1(total + 1, &load));
  d->ncall  = nc;
  d->sender = ppo_gen_model(m)->mesh->d;
  for (int k = 0; k < nc; k++) {
    const Mesh *mesh = dm[k] ? dm[k]->mesh : NULL;

    d->head[k] = head + at, d->load[k] = load + at;
    if (!mesh) continue;
    d->nrep[k] = mesh->dp, d->width[k] = dm[k]->cfg.n_embd;
    for (int j = 0; j < mesh->dp; j++) head[at + j] = exec_head(mesh, j);
    at += mesh->dp;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode deal_destroy(GenFuseDeal *d)
{
  int *head = (int *)d->head[0];

  PetscFunctionBegin;
  PetscCall(PetscFree(head));
  PetscCall(PetscFree(d->load[0]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This rank's mean decode-step time (for R_t auto). */
static double mean_step(const GenBatch *b)
{
  double t = 0;
  for (int k = 0; k < b->nsteps; k++) t += b->step_seconds[k];
  return b->nsteps ? t / b->nsteps : 0;
}

PetscErrorCode rollout_genfuse_call(PPOModels *m, const PPOOptions *o, const GenRequest *req, int max_prompt,
                                    uint64_t seed, uint32_t iteration, Rollout *r, PackBuf *pb, GenPart *part,
                                    GenFuseTimes *tm)
{
  RolloutGenFuse *gs = &m->genfuse;
  DModel    *gen = ppo_gen_model(m);
  GenFuseRoute  route;
  GenFuseSender s;
  PetscBool  migrate = (PetscBool)(o->plan.fuse == FUSE_MIGRATE);
  int        me;
  unsigned char *defer = NULL;
  GenFuseDeal deal;
  PetscBool  dealing = PETSC_FALSE;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(tm, sizeof *tm));
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  PetscCall(fuse_route(m, r->B, migrate, &route));
  if (migrate) tm->rt = pick_rt(m, o, &route, &tm->rt_pred);
  if (dmodel_member(gen)) {
    int       b0, b1;
    double    t0 = sys_wtime(), t1;
    PetscBool head = exec_is_head(gen->mesh);

    exec_rows(r->B, gen->mesh->dp, gen->mesh->d, &b0, &b1);
    PetscCall(genfuse_sender_begin(gs->comm, &route, migrate ? 0 : b0, &s));
    if (gs->rows.dealt && head) {
      PetscCall(deal_create(m, &deal));
      s.deal = &deal, dealing = PETSC_TRUE;
    }
    /* migrate: a generation rank that also runs inference only starts it
     * when it stops generating, and which rows it then runs depends on
     * the migration: its samples wait in the sender until then */
    if (migrate) {
      PetscCall(PetscMalloc1(gs->rows.world, &defer));
      for (int q = 0; q < gs->rows.world; q++) defer[q] = gs->rows.q_rep[q] >= 0;
      s.defer = defer;
    }
    PetscCall(PetscLogEventBegin(sys_log.generate, 0, 0, 0, 0));
    if (migrate) PetscCall(generate_migrate(m, o, req, max_prompt, seed, iteration, r, part, &s, &route, tm));
    else
      PetscCall(rollout_generate_part_cb(gen, &o->gen, max_prompt, seed, iteration, req, r, part,
                                         head ? genfuse_send_finished : NULL, &s));
    PetscCall(PetscLogEventEnd(sys_log.generate, 0, 0, 0, 0));
    t1      = sys_wtime();
    tm->gen = t1 - t0;
    PetscCall(genfuse_sender_close(&s)); /* dealt: the inference heads learn the stream has ended */
    tm->step_s = mean_step(part->own ? &part->b : &r->gen);
    if (tm->mig_t1 > 0) { /* generation, the migration, and (on a destination) the tail */
      PetscCall(timeline_mark("generation", t0, tm->mig_t0));
      PetscCall(timeline_mark("migration", tm->mig_t0, tm->mig_t1));
      if (tm->mig_dest) PetscCall(timeline_mark("generation", tm->mig_t1, t1));
    } else PetscCall(timeline_mark("generation", t0, t1));
  }
  if (fuse_serves(m, &route, me)) { /* inference: on ranks apart from generation, or after it */
    PetscCall(PetscLogEventBegin(sys_log.inference, 0, 0, 0, 0));
    PetscCall(fuse_infer(m, o, r, pb, &route, tm));
    PetscCall(PetscLogEventEnd(sys_log.inference, 0, 0, 0, 0));
  }
  if (dmodel_member(gen)) {
    double t0 = sys_wtime();
    int    sent = s.n;
    PetscCall(genfuse_sender_end(&s));
    if (sent) PetscCall(timeline_mark("stream_drain", t0, sys_wtime()));
    tm->messages = (double)s.messages, tm->bytes = (double)s.bytes, tm->send = s.seconds;
  }
  if (dealing) PetscCall(deal_destroy(&deal));
  PetscCall(PetscFree(defer));
  PetscCall(genfuse_route_destroy(&route));
  PetscFunctionReturn(PETSC_SUCCESS);
}
