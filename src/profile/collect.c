/* collect.c: the optimizer and collective tables of a profile. The AdamW
 * step is the backend's: the gradient's sum of squares (global-norm
 * clipping) and the update, on every rank at once as dp replicas do. The
 * collectives are src/comm's, on backend memory, over the first m ranks of
 * the world for every mesh size m; point-to-point is a ping-pong between
 * ranks 0 and 1, halved (one message one way). A one-rank job models the
 * 2-rank entries (prof_collectives_self). */
#include "profile_impl.h"

typedef struct {
  const Backend *be;
  float         *p, *g, *m, *v;
  size_t         n;
} OptCase;

static PetscErrorCode w_adamw(void *vctx)
{
  OptCase *c = (OptCase *)vctx;
  double   ss;

  PetscFunctionBegin;
  PetscCall(c->be->sumsq(&ss, c->g, c->n));
  PetscCall(c->be->adamw(c->p, c->g, c->m, c->v, c->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prof_optimizer(const ProfTimer *tm, Profile *pf)
{
  OptCase c = {tm->be, NULL, NULL, NULL, NULL, 0};
  size_t  nmax = (size_t)pf->opt_n[pf->nopt - 1];

  PetscFunctionBegin;
  PetscCall(tm->be->alloc(nmax * sizeof(float), (void **)&c.p));
  PetscCall(tm->be->alloc(nmax * sizeof(float), (void **)&c.g));
  PetscCall(tm->be->alloc(nmax * sizeof(float), (void **)&c.m));
  PetscCall(tm->be->alloc(nmax * sizeof(float), (void **)&c.v));
  for (int k = 0; k < pf->nopt; k++) {
    c.n = (size_t)pf->opt_n[k];
    PetscCall(prof_time(tm, w_adamw, &c, &pf->opt_sec[k]));
  }
  PetscCall(tm->be->free(c.p));
  PetscCall(tm->be->free(c.g));
  PetscCall(tm->be->free(c.m));
  PetscCall(tm->be->free(c.v));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const Comm *c; /* NULL on a rank outside the mesh */
  CostColl    op;
  void       *a, *b;
  size_t      bytes;
} CollCase;

static PetscErrorCode w_coll(void *vctx)
{
  CollCase   *k = (CollCase *)vctx;
  const Comm *c = k->c;
  MPI_Request req;

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(PETSC_SUCCESS);
  switch (k->op) {
  case COST_ALLREDUCE: PetscCall(comm_allreduce_sum(c, (float *)k->a, k->bytes / sizeof(float))); break;
  case COST_ALLGATHER: PetscCall(comm_allgather(c, k->a, k->b, k->bytes / (size_t)c->size)); break;
  case COST_BCAST: PetscCall(comm_bcast(c, k->a, k->bytes, 0)); break;
  default: /* ping-pong between mesh ranks 0 and 1; the others wait */
    if (c->rank == 0) {
      PetscCall(comm_isend(c, k->a, k->bytes, 1, 7, &req));
      PetscCall(comm_wait(&req));
      PetscCall(comm_recv(c, k->b, k->bytes, 1, 8));
    } else if (c->rank == 1) {
      PetscCall(comm_recv(c, k->b, k->bytes, 0, 7));
      PetscCall(comm_isend(c, k->a, k->bytes, 0, 8, &req));
      PetscCall(comm_wait(&req));
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  char  *a, *b;
  size_t bytes;
} SelfCase;

static PetscErrorCode w_self(void *vctx)
{
  SelfCase *k = (SelfCase *)vctx;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Sendrecv(k->a, (int)k->bytes, MPI_BYTE, 0, 9, k->b, (int)k->bytes, MPI_BYTE, 0, 9, MPI_COMM_SELF,
                            MPI_STATUS_IGNORE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One rank: no group to time. The 2-rank entries become the time of a
 * message to itself through MPI (a copy through its shared-memory path) of
 * the bytes one rank sends in the ring: all-reduce and broadcast B,
 * all-gather B/2, point-to-point B. A model, not a measurement: the plan
 * search says so (coll_modeled). Host memory: MPICH here is not
 * CUDA-aware, and the backend's staging costs a copy more. */
static PetscErrorCode prof_collectives_self(const ProfTimer *tm, Profile *pf)
{
  SelfCase k;
  size_t   bmax = (size_t)pf->bytes[pf->nbytes - 1];

  PetscFunctionBegin;
  PetscCall(PetscCalloc2(bmax, &k.a, bmax, &k.b));
  for (int ib = 0; ib < pf->nbytes; ib++)
    for (int op = 0; op < COST_NCOLL; op++) {
      k.bytes = (size_t)pf->bytes[ib] / (op == COST_ALLGATHER ? 2 : 1);
      PetscCall(prof_time(tm, w_self, &k, profile_coll_entry(pf, op, 0, ib)));
    }
  pf->coll_modeled = 1;
  PetscCall(PetscFree2(k.a, k.b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prof_collectives(const ProfTimer *tm, Profile *pf)
{
  CollCase k = {NULL, COST_ALLREDUCE, NULL, NULL, 0};
  size_t   bmax = (size_t)pf->bytes[pf->nbytes - 1];
  int      rank;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &rank));
  if (rank == 1) {
    PetscCall(prof_collectives_self(tm, pf));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCall(tm->be->alloc(bmax, &k.a));
  PetscCall(tm->be->alloc(bmax, &k.b));
  for (int im = 0; im < pf->nmesh; im++) {
    int         ranks[1024], m = pf->mesh[im];
    const Mesh *mesh = NULL;

    for (int r = 0; r < m; r++) ranks[r] = r;
    if (rank < m) PetscCall(mesh_get(ranks, m, 1, 1, m, &mesh));
    k.c = mesh ? &mesh->all : NULL;
    for (int op = 0; op < COST_NCOLL; op++)
      for (int ib = 0; ib < pf->nbytes; ib++) {
        double *s = profile_coll_entry(pf, op, im, ib);
        if (op == COST_P2P && im > 0) { /* two ranks whatever the mesh */
          *s = *profile_coll_entry(pf, op, 0, ib);
          continue;
        }
        k.op    = (CostColl)op;
        k.bytes = (size_t)pf->bytes[ib] / (sizeof(float) * (size_t)m) *
                  (sizeof(float) * (size_t)m); /* whole floats, split evenly */
        PetscCall(prof_time(tm, w_coll, &k, s));
        if (op == COST_P2P) *s *= 0.5;
      }
  }
  PetscCall(tm->be->free(k.a));
  PetscCall(tm->be->free(k.b));
  PetscFunctionReturn(PETSC_SUCCESS);
}
