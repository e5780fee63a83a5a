/* realloc.c: parameter reallocation between two layouts of one model
 * (docs/background.md, section 3). The plan lists every slice to move as (tensor, atom,
 * sender, receiver); an atom is one of q = max(tp_src, tp_dst) equal pieces
 * of a split tensor (piece a of every group block), or the whole of a
 * replicated one. Atoms are the common refinement of both tp cuts, so a
 * coarse source slice is simply several atoms (split) and a coarse
 * destination slice is filled from several senders (gather) without any
 * special case. Execution packs each (sender, receiver) pair's atoms, in
 * (tensor, atom) order, into one stream and sends it point to point over
 * MPI_COMM_WORLD. */
#include <string.h>

#include "realloc.h"

/* Point-to-point traffic of realloc_execute on MPI_COMM_WORLD. Matching is by
 * (sender, tag) in posting order, so successive reallocations between the
 * same ranks cannot mix: each side walks the same sequence of messages. */
#define REALLOC_TAG 0x5245 /* "RE"; below 32767, the smallest MPI_TAG_UB MPI allows */

/* One atom from one rank to another (from == to: a local copy). */
typedef struct {
  int tensor, atom, from, to;
} ReallocMove;

/* The moves between one ordered pair of ranks: moves[first, first + n), in
 * (tensor, atom) order; count floats in all. */
typedef struct {
  int    from, to, first, n;
  size_t count;
} ReallocPair;

struct ReallocPlan {
  ModelConfig         cfg;
  const Mesh         *src, *dst;
  int                 q;        /* atoms per split tensor */
  int                 ntensors;
  ModelTensor        *full;     /* whole-model table, with each tensor's split dimension */
  int                 nmoves, npairs;
  ReallocMove        *moves;    /* sorted by (from, to, tensor, atom) */
  ReallocPair        *pairs;    /* runs of moves with one (from, to), same order */
  double              bytes;    /* moved between different ranks */
  struct ReallocPlan *next;
};

/* Plans are cached like meshes: a reallocation repeats every iteration. */
static ReallocPlan *cache = NULL;

/* ---- atoms ------------------------------------------------------------------ */

static PetscBool atom_split(const ReallocPlan *pl, const ModelTensor *f)
{
  return pl->q > 1 && f->split >= 0 ? PETSC_TRUE : PETSC_FALSE;
}
static int       atoms_of(const ReallocPlan *pl, const ModelTensor *f) { return atom_split(pl, f) ? pl->q : 1; }
static size_t    atom_numel(const ReallocPlan *pl, const ModelTensor *f) { return f->numel / (size_t)atoms_of(pl, f); }

/* Whether tp rank t of a layout with tensor-parallel size tp holds atom a:
 * its piece of the tensor's n = model_tensor_pieces pieces is q/n consecutive
 * atoms (q is a multiple of tp, hence of n; replicated k/v pieces are held
 * by every rank of their block). */
static PetscBool holds_atom(const ReallocPlan *pl, const ModelTensor *f, int tp, int t, int a)
{
  return !atom_split(pl, f) || a / (pl->q / model_tensor_pieces(f, tp)) == model_tensor_piece_of(f, tp, t)
             ? PETSC_TRUE
             : PETSC_FALSE;
}

/* One rank's view of a layout during execution: its shard table and tp coordinates. */
typedef struct {
  ModelTensor *tab; /* NULL when the rank is not in the layout */
  int        tp, t;
} ReallocSide;

/* Index along the split dimension, inside a shard of side sd, where group g of atom a starts. */
static size_t atom_local_lo(const ReallocPlan *pl, const ReallocSide *sd, const ModelTensor *f, int a, int g)
{
  int D = f->gshape[f->split], block = D / f->groups, n = block / pl->q, np = model_tensor_pieces(f, sd->tp);
  return (size_t)g * (size_t)(D / np / f->groups) +
         (size_t)(a - model_tensor_piece_of(f, sd->tp, sd->t) * (pl->q / np)) * (size_t)n;
}

/* Copies floats [e0, e1) of atom a of tensor f between a shard buffer and a
 * packed stream (to_stream: shard -> buf, else buf -> shard). The packed atom
 * is its contiguous runs back to back: the whole tensor (unsplit), the rows
 * of each group (split 0), or each row's column range, group by group
 * (split 1). Buckets may cut an atom anywhere, hence the element range. */
static void atom_copy_range(const ReallocPlan *pl, const ReallocSide *sd, const ModelTensor *f, int a, size_t e0,
                            size_t e1, float *shard, float *buf, PetscBool to_stream)
{
  const ModelTensor *s    = &sd->tab[f - pl->full];
  size_t           cols = f->ndim == 2 ? (size_t)f->gshape[1] : 1, rows = (size_t)f->gshape[0], run, n = 0, Dl = 0;

  if (!atom_split(pl, f)) run = f->numel;
  else {
    n   = (size_t)(f->gshape[f->split] / f->groups / pl->q);
    Dl  = (size_t)(f->gshape[f->split] / model_tensor_pieces(f, sd->tp));
    run = f->split == 0 ? n * cols : n;
  }
  for (size_t e = e0; e < e1;) {
    size_t k = e / run, o = e % run, len = PetscMin(run - o, e1 - e), at;
    if (!atom_split(pl, f)) at = 0;
    else if (f->split == 0) at = atom_local_lo(pl, sd, f, a, (int)k) * cols;
    else at = (k % rows) * Dl + atom_local_lo(pl, sd, f, a, (int)(k / rows));
    at += s->offset + o;
    if (to_stream) memcpy(buf + (e - e0), shard + at, len * sizeof(float));
    else memcpy(shard + at, buf + (e - e0), len * sizeof(float));
    e += len;
  }
}

/* ---- the plan --------------------------------------------------------------- */

/* Which tensors each pipeline stage of a layout holds: held[p*ntensors + i]. */
static PetscErrorCode stage_holdings(const ModelConfig *cfg, const Mesh *m, int ntensors, PetscBool **held)
{
  PetscFunctionBegin;
  PetscCall(PetscMalloc1((size_t)m->pp * ntensors, held));
  for (int p = 0; p < m->pp; p++) {
    ModelShard sh = {m->tp, 0, m->pp, p, 0, 0};
    ModelTensor *tab;
    int        nt;
    size_t     np;
    model_stage_layers(cfg, m->pp, p, &sh.l0, &sh.l1);
    PetscCall(model_tensor_table_shard(cfg, &sh, &tab, &nt, &np));
    for (int i = 0; i < ntensors; i++) (*held)[p * ntensors + i] = tab[i].numel > 0 ? PETSC_TRUE : PETSC_FALSE;
    PetscCall(PetscFree(tab));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Whether mesh index idx of m (its stage and tp coordinate come from the grid) holds atom a of the tensor. */
static PetscBool index_holds(const ReallocPlan *pl, const Mesh *m, const PetscBool *held, int idx, int tensor, int a)
{
  int p = idx / (m->tp * m->dp), t = idx % m->tp;
  return held[p * pl->ntensors + tensor] && holds_atom(pl, &pl->full[tensor], m->tp, t, a) ? PETSC_TRUE : PETSC_FALSE;
}

/* The whole-model table, with each tensor's split dimension read from a
 * tp > 1 shard's table: that one names it whatever the tp = 1 (whole-model)
 * table chooses to record. */
static PetscErrorCode plan_tensors(ReallocPlan *pl)
{
  ModelShard sh = {2, 0, 1, 0, 0, pl->cfg.n_layer};
  ModelTensor *split;
  int        ns;
  size_t     np;

  PetscFunctionBegin;
  PetscCall(model_tensor_table_shard(&pl->cfg, NULL, &pl->full, &pl->ntensors, &np));
  PetscCall(model_tensor_table_shard(&pl->cfg, &sh, &split, &ns, &np));
  for (int i = 0; i < pl->ntensors; i++) pl->full[i].split = split[i].split;
  PetscCall(PetscFree(split));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The layouts must be compatible: tp sizes dividing each other, and q atoms
 * cutting every group block of every split tensor evenly (checked before
 * anything is built, so a caught error leaves nothing behind). */
static PetscErrorCode plan_check(const ModelConfig *cfg, int tp_src, int tp_dst, const char *what)
{
  ModelShard sh = {2, 0, 1, 0, 0, cfg->n_layer};
  ModelTensor *tab;
  int        nt, q = PetscMax(tp_src, tp_dst), bad = -1;
  size_t     np;

  PetscFunctionBegin;
  PetscCheck(tp_src % tp_dst == 0 || tp_dst % tp_src == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "%s: tensor-parallel sizes %d and %d must divide each other", what, tp_src, tp_dst);
  PetscCall(model_tensor_table_shard(cfg, &sh, &tab, &nt, &np));
  for (int i = 0; i < nt && bad < 0; i++)
    if (tab[i].split >= 0 && (tab[i].gshape[tab[i].split] / tab[i].groups) % q != 0) bad = i;
  if (bad >= 0) {
    char name[64];
    int  extent = tab[bad].gshape[tab[bad].split], groups = tab[bad].groups;
    PetscCall(PetscStrncpy(name, tab[bad].name, sizeof name));
    PetscCall(PetscFree(tab));
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
            "%s: tensor %s (extent %d in %d blocks) cannot be cut into %d tensor-parallel pieces", what, name, extent,
            groups, q);
  }
  PetscCall(PetscFree(tab));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Moves collected while planning (grown by doubling). */
typedef struct {
  ReallocMove *m;
  int          n, cap;
} MoveList;

static PetscErrorCode move_add(MoveList *ml, int tensor, int atom, int from, int to)
{
  PetscFunctionBegin;
  if (ml->n == ml->cap) {
    ml->cap = ml->cap ? 2 * ml->cap : 1024;
    PetscCall(PetscRealloc((size_t)ml->cap * sizeof(ReallocMove), &ml->m));
  }
  ml->m[ml->n++] = (ReallocMove){tensor, atom, from, to};
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Candidate order: most receivers on its node (intra-node links are the
 * fast ones; with one node all candidates tie), then the fewest bytes
 * assigned so far (spreads the sending over the dp replicas), then the
 * lowest rank (so every rank's plan picks the same one). */
static PetscBool sender_better(int near, double load, int rank, int best_near, double best_load, int best)
{
  if (near != best_near) return near > best_near ? PETSC_TRUE : PETSC_FALSE;
  if (load != best_load) return load < best_load ? PETSC_TRUE : PETSC_FALSE;
  return rank < best ? PETSC_TRUE : PETSC_FALSE;
}

/* The sender for receivers recv[0, nrecv) among candidates cand[0, ncand). */
static PetscErrorCode choose_sender(const int *cand, int ncand, const int *recv, int nrecv, const double *load,
                                    int *sender)
{
  int best = -1, best_near = -1;

  PetscFunctionBegin;
  for (int c = 0; c < ncand; c++) {
    int node, near = 0;
    PetscCall(comm_node_of(cand[c], &node));
    for (int r = 0; r < nrecv; r++) {
      int rn;
      PetscCall(comm_node_of(recv[r], &rn));
      near += rn == node;
    }
    if (best < 0 || sender_better(near, load[cand[c]], cand[c], best_near, load[best], best)) {
      best      = cand[c];
      best_near = near;
    }
  }
  *sender = best;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Scratch for planning: per-layout holdings, the receivers and candidates of
 * one atom, and each world rank's assigned bytes. */
typedef struct {
  PetscBool *src_held, *dst_held;
  int       *recv, *remote, *cand;
  double    *load;
} PlanScratch;

/* Moves of atom a of tensor i: receivers that hold it in the source copy it
 * locally, the others get it from one chosen sender. */
static PetscErrorCode plan_atom(ReallocPlan *pl, PlanScratch *ps, int i, int a, MoveList *ml)
{
  const Mesh *src = pl->src, *dst = pl->dst;
  int         nrecv = 0, nremote = 0, ncand = 0, sender = -1;
  double      bytes = (double)atom_numel(pl, &pl->full[i]) * sizeof(float);

  PetscFunctionBegin;
  for (int k = 0; k < dst->nranks; k++)
    if (index_holds(pl, dst, ps->dst_held, k, i, a)) ps->recv[nrecv++] = dst->ranks[k];
  if (nrecv == 0) PetscFunctionReturn(PETSC_SUCCESS);
  for (int k = 0; k < src->nranks; k++)
    if (index_holds(pl, src, ps->src_held, k, i, a)) ps->cand[ncand++] = src->ranks[k];
  PetscCheck(ncand > 0, PETSC_COMM_SELF, PETSC_ERR_PLIB, "realloc: no source rank holds piece %d of %s", a,
             pl->full[i].name);
  for (int r = 0; r < nrecv; r++) {
    PetscBool local = PETSC_FALSE;
    for (int c = 0; c < ncand && !local; c++) local = ps->cand[c] == ps->recv[r] ? PETSC_TRUE : PETSC_FALSE;
    if (local) PetscCall(move_add(ml, i, a, ps->recv[r], ps->recv[r]));
    else ps->remote[nremote++] = ps->recv[r];
  }
  if (nremote == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(choose_sender(ps->cand, ncand, ps->remote, nremote, ps->load, &sender));
  for (int r = 0; r < nremote; r++) PetscCall(move_add(ml, i, a, sender, ps->remote[r]));
  ps->load[sender] += bytes * nremote;
  pl->bytes += bytes * nremote;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static int move_cmp(const void *x, const void *y)
{
  const ReallocMove *a = x, *b = y;
  if (a->from != b->from) return a->from < b->from ? -1 : 1;
  if (a->to != b->to) return a->to < b->to ? -1 : 1;
  if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
  return a->atom < b->atom ? -1 : a->atom > b->atom;
}

/* Sorts the moves into (from, to) runs, each in (tensor, atom) order: the
 * order both ends of a pair pack and unpack the stream in. */
static PetscErrorCode plan_pairs(ReallocPlan *pl)
{
  PetscFunctionBegin;
  if (pl->nmoves > 0) qsort(pl->moves, (size_t)pl->nmoves, sizeof *pl->moves, move_cmp);
  PetscCall(PetscMalloc1(pl->nmoves + 1, &pl->pairs));
  pl->npairs = 0;
  for (int k = 0; k < pl->nmoves; k++) {
    ReallocMove *m = &pl->moves[k];
    ReallocPair *p = pl->npairs ? &pl->pairs[pl->npairs - 1] : NULL;
    if (!p || p->from != m->from || p->to != m->to) {
      p  = &pl->pairs[pl->npairs++];
      *p = (ReallocPair){m->from, m->to, k, 0, 0};
    }
    p->n++;
    p->count += atom_numel(pl, &pl->full[m->tensor]);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_build(ReallocPlan *pl)
{
  PlanScratch ps;
  MoveList    ml     = {NULL, 0, 0};
  int         nworld = 0;

  PetscFunctionBegin;
  PetscCall(plan_tensors(pl));
  for (int k = 0; k < pl->src->nranks; k++) nworld = PetscMax(nworld, pl->src->ranks[k] + 1);
  for (int k = 0; k < pl->dst->nranks; k++) nworld = PetscMax(nworld, pl->dst->ranks[k] + 1);
  PetscCall(stage_holdings(&pl->cfg, pl->src, pl->ntensors, &ps.src_held));
  PetscCall(stage_holdings(&pl->cfg, pl->dst, pl->ntensors, &ps.dst_held));
  PetscCall(PetscMalloc3(pl->dst->nranks, &ps.recv, pl->dst->nranks, &ps.remote, pl->src->nranks, &ps.cand));
  PetscCall(PetscCalloc1(nworld, &ps.load));
  for (int i = 0; i < pl->ntensors; i++)
    for (int a = 0; a < atoms_of(pl, &pl->full[i]); a++) PetscCall(plan_atom(pl, &ps, i, a, &ml));
  pl->moves  = ml.m;
  pl->nmoves = ml.n;
  PetscCall(plan_pairs(pl));
  PetscCall(PetscFree(ps.src_held));
  PetscCall(PetscFree(ps.dst_held));
  PetscCall(PetscFree3(ps.recv, ps.remote, ps.cand));
  PetscCall(PetscFree(ps.load));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscBool same_cfg(const ModelConfig *a, const ModelConfig *b)
{
  return model_config_equal(a, b);
}

static PetscErrorCode plan_free(ReallocPlan *pl)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(pl->full));
  PetscCall(PetscFree(pl->moves));
  PetscCall(PetscFree(pl->pairs));
  PetscCall(PetscFree(pl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode realloc_plan_get(const ModelConfig *cfg, const Mesh *src, const Mesh *dst, const char *what,
                                const ReallocPlan **plan)
{
  ReallocPlan *pl;

  PetscFunctionBegin;
  for (pl = cache; pl; pl = pl->next)
    if (pl->src == src && pl->dst == dst && same_cfg(&pl->cfg, cfg)) {
      *plan = pl;
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  PetscCall(plan_check(cfg, src->tp, dst->tp, what));
  PetscCall(PetscNew(&pl));
  pl->cfg = *cfg;
  pl->src = src;
  pl->dst = dst;
  pl->q   = PetscMax(src->tp, dst->tp);
  PetscCall(plan_build(pl));
  pl->next = cache;
  cache    = pl;
  *plan    = pl;
  PetscFunctionReturn(PETSC_SUCCESS);
}

double realloc_plan_bytes(const ReallocPlan *plan) { return plan->bytes; }

PetscErrorCode realloc_cache_destroy(void)
{
  PetscFunctionBegin;
  while (cache) {
    ReallocPlan *pl = cache;
    cache           = pl->next;
    PetscCall(plan_free(pl));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- execution -------------------------------------------------------------- */

static PetscErrorCode side_init(const ReallocPlan *pl, const Mesh *m, ReallocSide *sd)
{
  ModelShard sh;
  int      nt;
  size_t   np;

  PetscFunctionBegin;
  sd->tab = NULL;
  sd->tp  = m->tp;
  sd->t   = m->t;
  if (m->me < 0) PetscFunctionReturn(PETSC_SUCCESS);
  model_shard_of_mesh(&pl->cfg, m, &sh);
  PetscCall(model_tensor_table_shard(&pl->cfg, &sh, &sd->tab, &nt, &np));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A move whose sender is its receiver: straight from the source shard to
 * the destination shard, one span per group. */
static void copy_local(const ReallocPlan *pl, const ReallocMove *mv, const ReallocSide *in, const float *src_flat,
                       const ReallocSide *out, float *dst_flat)
{
  const ModelTensor *f = &pl->full[mv->tensor];
  const float     *s = src_flat + in->tab[mv->tensor].offset;
  float           *d = dst_flat + out->tab[mv->tensor].offset;

  if (!atom_split(pl, f)) {
    memcpy(d, s, f->numel * sizeof(float));
    return;
  }
  for (int g = 0; g < f->groups; g++) {
    int D = f->gshape[f->split];
    model_copy_span(f, f->split, s, D / model_tensor_pieces(f, in->tp), (int)atom_local_lo(pl, in, f, mv->atom, g), d,
                    D / model_tensor_pieces(f, out->tp), (int)atom_local_lo(pl, out, f, mv->atom, g),
                    D / f->groups / pl->q);
  }
}

/* Copies floats [s0, s1) of a pair's stream between the stream chunk buf
 * and a shard (to_stream: packing on the sender). */
static void stream_copy(const ReallocPlan *pl, const ReallocPair *pr, const ReallocSide *sd, size_t s0, size_t s1,
                        float *shard, float *buf, PetscBool to_stream)
{
  size_t start = 0;

  for (int k = pr->first; k < pr->first + pr->n && start < s1; k++) {
    const ReallocMove *mv  = &pl->moves[k];
    size_t len = atom_numel(pl, &pl->full[mv->tensor]), lo = PetscMax(start, s0), hi = PetscMin(start + len, s1);
    if (lo < hi)
      atom_copy_range(pl, sd, &pl->full[mv->tensor], mv->atom, lo - start, hi - start, shard, buf + (lo - s0),
                      to_stream);
    start += len;
  }
}

/* This rank's pairs with other ranks: out[] where it sends, in[] where it receives. */
typedef struct {
  int     nout, nin, *out, *in;
  float **sbuf, **rbuf;
  size_t  chunk; /* floats per message */
  int     rounds;
} Exchange;

static PetscErrorCode exchange_setup(const ReallocPlan *pl, int me, size_t bucket_bytes, Exchange *ex)
{
  PetscFunctionBegin;
  ex->nout = ex->nin = ex->rounds = 0;
  /* 0 means one message per pair, but MPI counts are int: cap at 2^30 floats */
  ex->chunk = bucket_bytes ? PetscMax(bucket_bytes / sizeof(float), (size_t)1) : (size_t)1 << 30;
  ex->chunk = PetscMin(ex->chunk, (size_t)1 << 30);
  PetscCall(PetscMalloc2(pl->npairs, &ex->out, pl->npairs, &ex->in));
  for (int k = 0; k < pl->npairs; k++) {
    const ReallocPair *pr = &pl->pairs[k];
    if (pr->from == pr->to || (pr->from != me && pr->to != me)) continue;
    if (pr->from == me) ex->out[ex->nout++] = k;
    else ex->in[ex->nin++] = k;
    ex->rounds = PetscMax(ex->rounds, (int)((pr->count + ex->chunk - 1) / ex->chunk));
  }
  PetscCall(PetscCalloc2(ex->nout, &ex->sbuf, ex->nin, &ex->rbuf));
  for (int j = 0; j < ex->nout; j++)
    PetscCall(PetscMalloc1(PetscMin(ex->chunk, pl->pairs[ex->out[j]].count), &ex->sbuf[j]));
  for (int j = 0; j < ex->nin; j++)
    PetscCall(PetscMalloc1(PetscMin(ex->chunk, pl->pairs[ex->in[j]].count), &ex->rbuf[j]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode exchange_free(Exchange *ex)
{
  PetscFunctionBegin;
  for (int j = 0; j < ex->nout; j++) PetscCall(PetscFree(ex->sbuf[j]));
  for (int j = 0; j < ex->nin; j++) PetscCall(PetscFree(ex->rbuf[j]));
  PetscCall(PetscFree2(ex->sbuf, ex->rbuf));
  PetscCall(PetscFree2(ex->out, ex->in));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Chunk k of a pair's stream: [*s0, *s1), empty once the stream is done. */
static void chunk_range(const Exchange *ex, const ReallocPair *pr, int k, size_t *s0, size_t *s1)
{
  *s0 = PetscMin((size_t)k * ex->chunk, pr->count);
  *s1 = PetscMin(*s0 + ex->chunk, pr->count);
}

/* Round k: every pair moves its chunk k. Both ends of a pair derive the
 * same chunks from the plan, and a round waits only on its own messages, so
 * all ranks go through the rounds without deadlock whatever their counts. */
static PetscErrorCode exchange_round(const ReallocPlan *pl, Exchange *ex, int k, const ReallocSide *in,
                                     const float *src_flat, const ReallocSide *out, float *dst_flat, ReallocStats *st)
{
  MPI_Request *req;
  MPI_Status  *sts;
  int          nreq = 0;
  size_t       s0, s1;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(ex->nout + ex->nin, &req, ex->nout + ex->nin, &sts));
  for (int j = 0; j < ex->nin; j++) {
    const ReallocPair *pr = &pl->pairs[ex->in[j]];
    chunk_range(ex, pr, k, &s0, &s1);
    if (s0 < s1)
      PetscCallMPI(
          MPI_Irecv(ex->rbuf[j], (int)(s1 - s0), MPI_FLOAT, pr->from, REALLOC_TAG, MPI_COMM_WORLD, &req[nreq++]));
  }
  for (int j = 0; j < ex->nout; j++) {
    const ReallocPair *pr = &pl->pairs[ex->out[j]];
    chunk_range(ex, pr, k, &s0, &s1);
    if (s0 == s1) continue;
    stream_copy(pl, pr, in, s0, s1, (float *)src_flat, ex->sbuf[j], PETSC_TRUE);
    PetscCallMPI(MPI_Isend(ex->sbuf[j], (int)(s1 - s0), MPI_FLOAT, pr->to, REALLOC_TAG, MPI_COMM_WORLD, &req[nreq++]));
    st->bytes_sent += (double)(s1 - s0) * sizeof(float);
    st->messages++;
  }
  PetscCallMPI(sys_mpi_finish_all(nreq, req, sts));
  for (int j = 0; j < ex->nin; j++) {
    const ReallocPair *pr = &pl->pairs[ex->in[j]];
    chunk_range(ex, pr, k, &s0, &s1);
    if (s0 == s1) continue;
    stream_copy(pl, pr, out, s0, s1, dst_flat, ex->rbuf[j], PETSC_FALSE);
    st->bytes_recv += (double)(s1 - s0) * sizeof(float);
  }
  PetscCall(PetscFree2(req, sts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode realloc_execute(const ReallocPlan *pl, const float *src_flat, float *dst_flat, size_t bucket_bytes,
                               ReallocStats *stats)
{
  ReallocStats st = {0, 0, 0, 0, 0};
  ReallocSide  in, out;
  Exchange     ex;
  double       t0 = MPI_Wtime();
  int          me;

  PetscFunctionBegin;
  if (stats) *stats = st;
  if (pl->src->me < 0 && pl->dst->me < 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  PetscCall(side_init(pl, pl->src, &in));
  PetscCall(side_init(pl, pl->dst, &out));
  PetscCall(exchange_setup(pl, me, bucket_bytes, &ex));
  /* local copies first: they need no partner, and overlap nothing */
  for (int k = 0; k < pl->npairs; k++) {
    const ReallocPair *pr = &pl->pairs[k];
    if (pr->from != me || pr->to != me) continue;
    for (int j = pr->first; j < pr->first + pr->n; j++) copy_local(pl, &pl->moves[j], &in, src_flat, &out, dst_flat);
    st.bytes_local += (double)pr->count * sizeof(float);
  }
  for (int k = 0; k < ex.rounds; k++) PetscCall(exchange_round(pl, &ex, k, &in, src_flat, &out, dst_flat, &st));
  PetscCall(exchange_free(&ex));
  PetscCall(PetscFree(in.tab));
  PetscCall(PetscFree(out.tab));
  st.seconds = MPI_Wtime() - t0;
  if (stats) *stats = st;
  PetscFunctionReturn(PETSC_SUCCESS);
}
