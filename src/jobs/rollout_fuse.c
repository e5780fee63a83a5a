/* Generation and inference fused into one call (-fuse_gen_inf stream,
 * docs/fusion.md): the generation replicas stream each finished sample to
 * the inference ranks (src/fuse), which run reference, reward and critic
 * inference on micro-batches of arrived samples while decoding goes on. The
 * plan check guarantees the inference meshes are apart from actor_gen's and
 * made of one-rank replicas, so every inference rank batches on its own.
 * Each rank still handles exactly the rows the unfused calls give it, and a
 * sample's outputs do not depend on its micro-batch, so the rollout equals
 * the unfused one (within float summation order). */
#include "ppo_impl.h"
#include "fuse.h"

static MPI_Comm fuse_world = MPI_COMM_NULL; /* the samples' own tag space */

PetscErrorCode rollout_fuse_setup(void)
{
  PetscFunctionBegin;
  if (fuse_world == MPI_COMM_NULL) PetscCallMPI(MPI_Comm_dup(MPI_COMM_WORLD, &fuse_world));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The inference calls of this rollout, with their models. */
static int fuse_calls(PPOModels *m, DModel *dm[3])
{
  dm[ROLLOUT_REF]    = &m->reference;
  dm[ROLLOUT_SCORE]  = &m->reward;
  dm[ROLLOUT_VALUES] = m->has_critic ? ppo_critic_inf_model(m) : NULL;
  return m->has_critic ? 3 : 2;
}

/* Every rank of an inference mesh needs its replica's rows of the batch. */
static PetscErrorCode fuse_route(PPOModels *m, int B, FuseRoute *route)
{
  DModel *dm[3];
  int     nc = fuse_calls(m, dm), n = 0, world;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
  PetscCall(fuse_route_create(B, world, route));
  for (int q = 0; q < world; q++) route->dest[q] = q;
  for (int k = 0; k < nc; k++) {
    const Mesh *mesh = dm[k]->mesh;
    for (int d = 0; d < mesh->dp; d++) {
      int b0, b1, q = exec_head(mesh, d);
      exec_rows(B, mesh->dp, d, &b0, &b1);
      for (int b = b0; b < b1; b++) route->need[(size_t)q * B + b] = 1;
    }
  }
  for (int q = 0; q < world; q++) /* drop ranks that need nothing */
    if (fuse_route_count(route, q)) {
      route->dest[n] = q;
      if (n != q) PetscCall(PetscArraycpy(route->need + (size_t)n * B, route->need + (size_t)q * B, B));
      n++;
    }
  route->ndest = n;
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  PPOModels        *m;
  const PPOOptions *o;
  Rollout          *r, arr; /* arr: the arrivals, in arrival order */
  PackBuf          *pb;
  DModel           *dm[3];
  int               ncalls, b0[3], b1[3], *sub;
  FuseTimes        *tm;
} FuseInf;

static const char *const fuse_call_names[3] = {"ref_inference", "reward_inference", "critic_inference"};

/* A micro-batch of arrivals through each call this rank serves, outputs
 * copied to the rollout's rows. */
static PetscErrorCode fuse_batch(void *ctx, const GenBatch *g, const int *rows, const int *idx, int n)
{
  FuseInf *f = (FuseInf *)ctx;
  Rollout *a = &f->arr, *r = f->r;
  size_t   T = (size_t)r->T;

  PetscFunctionBegin;
  (void)g;
  for (int i = 0; i < n; i++) a->start[idx[i]] = a->gen.prompt_len[idx[i]], a->len[idx[i]] = a->gen.response_len[idx[i]];
  for (int k = 0; k < f->ncalls; k++) {
    int    ns = 0;
    double t0 = sys_wtime();

    if (!f->dm[k] || !dmodel_member(f->dm[k])) continue;
    for (int i = 0; i < n; i++)
      if (rows[idx[i]] >= f->b0[k] && rows[idx[i]] < f->b1[k]) f->sub[ns++] = idx[i];
    if (!ns) continue;
    PetscCall(rollout_infer_rows(f->dm[k]->gpt, (RolloutInfer)k, a, f->o, f->pb, f->sub, ns));
    for (int i = 0; i < ns; i++) {
      int j = f->sub[i], b = rows[j];
      if (k == ROLLOUT_REF) PetscCall(PetscArraycpy(r->ref + b * T, a->ref + j * T, T));
      if (k == ROLLOUT_VALUES) PetscCall(PetscArraycpy(r->values + b * T, a->values + j * T, T));
      if (k == ROLLOUT_SCORE) r->score[b] = a->score[j], r->final[b] = a->final[j];
    }
    f->tm->inf[k] += sys_wtime() - t0;
    PetscCall(timeline_mark(fuse_call_names[k], t0, sys_wtime()));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode fuse_infer(PPOModels *m, const PPOOptions *o, Rollout *r, PackBuf *pb, const FuseRoute *route, FuseTimes *tm)
{
  FuseInf       f;
  FuseRecvStats st;
  int           me, *rows;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&f, sizeof f));
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  f.m = m, f.o = o, f.r = r, f.pb = pb, f.tm = tm;
  f.ncalls = fuse_calls(m, f.dm);
  for (int k = 0; k < f.ncalls; k++) {
    if (!dmodel_member(f.dm[k])) continue;
    exec_rows(r->B, f.dm[k]->mesh->dp, f.dm[k]->mesh->d, &f.b0[k], &f.b1[k]);
    PetscCall(dmodel_acquire(f.dm[k]));
  }
  PetscCall(rollout_create(r->B, r->T, r->gen.mask_off ? PETSC_TRUE : PETSC_FALSE, &f.arr));
  PetscCall(PetscMalloc2(r->B, &rows, r->B, &f.sub));
  PetscCall(fuse_receive(fuse_world, fuse_route_count(route, me), (int)o->plan.fuse_tokens, o->plan.fuse_hold, &f.arr.gen, rows, fuse_batch, &f, &st));
  tm->recv_wait = st.wait, tm->batches = st.batches;
  PetscCall(PetscFree2(rows, f.sub));
  PetscCall(rollout_destroy(&f.arr));
  if (m->offload_ref) PetscCall(dmodel_release(&m->reference, PETSC_TRUE));
  if (m->offload_rew) PetscCall(dmodel_release(&m->reward, PETSC_TRUE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_fused_call(PPOModels *m, const PPOOptions *o, const GenRequest *req, int max_prompt, uint64_t seed, uint32_t iteration, Rollout *r, PackBuf *pb, GenPart *part, FuseTimes *tm)
{
  DModel    *gen = ppo_gen_model(m);
  FuseRoute  route;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(tm, sizeof *tm));
  PetscCall(fuse_route(m, r->B, &route));
  if (dmodel_member(gen)) {
    FuseSender s;
    int        b0, b1;
    double     t0 = sys_wtime();
    PetscBool  head = exec_is_head(gen->mesh);

    exec_rows(r->B, gen->mesh->dp, gen->mesh->d, &b0, &b1);
    PetscCall(fuse_sender_begin(fuse_world, &route, b0, &s));
    PetscCall(PetscLogEventBegin(sys_log.generate, 0, 0, 0, 0));
    PetscCall(rollout_generate_part_cb(gen, &o->gen, max_prompt, seed, iteration, req, r, part, head ? fuse_send_finished : NULL, &s));
    PetscCall(PetscLogEventEnd(sys_log.generate, 0, 0, 0, 0));
    tm->gen = sys_wtime() - t0;
    PetscCall(timeline_mark("generation", t0, t0 + tm->gen));
    t0 = sys_wtime();
    PetscCall(fuse_sender_end(&s));
    if (s.n) PetscCall(timeline_mark("stream_drain", t0, sys_wtime()));
    tm->messages = (double)s.messages, tm->bytes = (double)s.bytes, tm->send = s.seconds;
  } else { /* the node runs on generation and inference ranks only */
    PetscCall(PetscLogEventBegin(sys_log.inference, 0, 0, 0, 0));
    PetscCall(fuse_infer(m, o, r, pb, &route, tm));
    PetscCall(PetscLogEventEnd(sys_log.inference, 0, 0, 0, 0));
  }
  PetscCall(fuse_route_destroy(&route));
  PetscFunctionReturn(PETSC_SUCCESS);
}
