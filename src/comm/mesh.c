/* mesh.c: meshes (a call's ranks with their pp x dp x tp grid) as MPI
 * sub-communicators, created once per distinct mesh and cached. Only the
 * mesh's members take part in creating it (MPI_Comm_create_group), so calls
 * on disjoint meshes never wait for each other. On cuda each communicator
 * also gets its NCCL communicator here, collective over the same members in
 * the same order (all, pp, dp, tp, embed), so it cannot deadlock where the
 * MPI creation does not. */
#include "comm.h"

typedef struct MeshNode {
  Mesh             m;
  struct MeshNode *next;
} MeshNode;

static MeshNode *cache = NULL;

static PetscBool same_mesh(const Mesh *m, const int *ranks, int n, int pp, int dp, int tp)
{
  if (m->nranks != n || m->pp != pp || m->dp != dp || m->tp != tp) return PETSC_FALSE;
  for (int i = 0; i < n; i++)
    if (m->ranks[i] != ranks[i]) return PETSC_FALSE;
  return PETSC_TRUE;
}

/* The sub-communicator of world ranks w[0..n) (all members call); ranked in
 * that order. tag separates concurrent creations. */
static PetscErrorCode group_comm(const int *w, int n, int tag, Comm *c)
{
  MPI_Group world, g;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  PetscCallMPI(MPI_Group_incl(world, n, w, &g));
  PetscCallMPI(MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &c->mpi));
  PetscCallMPI(MPI_Group_free(&g));
  PetscCallMPI(MPI_Group_free(&world));
  PetscCallMPI(MPI_Comm_rank(c->mpi, &c->rank));
  PetscCallMPI(MPI_Comm_size(c->mpi, &c->size));
  c->kind = COMM_MPI;
  PetscCall(comm_attach_nccl(c)); /* device buffers on cuda: kind COMM_NCCL */
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The line of the grid through my coordinates along one axis (0 pp, 1 dp, 2 tp). */
static PetscErrorCode axis_comm(const Mesh *m, int axis, int tag, Comm *c)
{
  int n = axis == 0 ? m->pp : axis == 1 ? m->dp : m->tp, *ranks;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(n, &ranks));
  for (int k = 0; k < n; k++) ranks[k] = mesh_rank(m, axis == 0 ? k : m->p, axis == 1 ? k : m->d, axis == 2 ? k : m->t);
  PetscCall(group_comm(ranks, n, tag, c));
  PetscCall(PetscFree(ranks));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode mesh_build(Mesh *m)
{
  int me;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  m->me = m->p = m->d = m->t = -1;
  for (int i = 0; i < m->nranks; i++)
    if (m->ranks[i] == me) m->me = i;
  m->all = m->tp_comm = m->dp_comm = m->pp_comm = m->embed_comm = (Comm){MPI_COMM_NULL, -1, 0, COMM_MPI, NULL};
  if (m->me < 0) PetscFunctionReturn(PETSC_SUCCESS);
  m->t = m->me % m->tp;
  m->d = (m->me / m->tp) % m->dp;
  m->p = m->me / (m->tp * m->dp);
  PetscCall(group_comm(m->ranks, m->nranks, 1, &m->all));
  PetscCall(axis_comm(m, 0, 2, &m->pp_comm));
  PetscCall(axis_comm(m, 1, 3, &m->dp_comm));
  PetscCall(axis_comm(m, 2, 4, &m->tp_comm));
  if (m->pp > 1 && (m->p == 0 || m->p == m->pp - 1)) {
    int ends[2] = {mesh_rank(m, 0, m->d, m->t), mesh_rank(m, m->pp - 1, m->d, m->t)};
    PetscCall(group_comm(ends, 2, 5, &m->embed_comm));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode mesh_get(const int *ranks, int n, int pp, int dp, int tp, const Mesh **mesh)
{
  MeshNode *node;

  PetscFunctionBegin;
  PetscCheck(n > 0 && pp > 0 && dp > 0 && tp > 0 && pp * dp * tp == n, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "mesh_get: pp %d x dp %d x tp %d does not match %d ranks", pp, dp, tp, n);
  for (node = cache; node; node = node->next)
    if (same_mesh(&node->m, ranks, n, pp, dp, tp)) {
      *mesh = &node->m;
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  PetscCall(PetscNew(&node));
  PetscCall(PetscMalloc1(n, &node->m.ranks));
  PetscCall(PetscArraycpy(node->m.ranks, ranks, n));
  node->m.nranks = n;
  node->m.pp     = pp;
  node->m.dp     = dp;
  node->m.tp     = tp;
  PetscCall(mesh_build(&node->m));
  node->next = cache;
  cache      = node;
  *mesh      = &node->m;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode mesh_tp_block(const Mesh *m, int r, const Comm **c)
{
  Mesh *w = (Mesh *)m; /* the cache owns every mesh; a block is added to it once */
  int   b, ranks[64];

  PetscFunctionBegin;
  PetscCheck(m->me >= 0 && r >= 1 && r <= 64 && m->tp % r == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "mesh_tp_block: blocks of %d do not cut tp %d", r, m->tp);
  for (b = 0; b < m->nblocks; b++)
    if (m->block_r[b] == r) break;
  if (b == m->nblocks) {
    PetscCheck(b < MESH_MAX_BLOCKS, PETSC_COMM_SELF, PETSC_ERR_SUP,
               "mesh_tp_block: more than %d block sizes on one mesh", MESH_MAX_BLOCKS);
    for (int k = 0; k < r; k++) ranks[k] = mesh_rank(m, m->p, m->d, m->t / r * r + k);
    PetscCall(group_comm(ranks, r, 6, &w->block_comm[b]));
    w->block_r[b] = r;
    w->nblocks++;
  }
  *c = &m->block_comm[b];
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode mesh_cache_destroy(void)
{
  PetscFunctionBegin;
  while (cache) {
    MeshNode *n = cache;
    cache       = n->next;
    PetscCall(comm_free(&n->m.all));
    PetscCall(comm_free(&n->m.tp_comm));
    PetscCall(comm_free(&n->m.dp_comm));
    PetscCall(comm_free(&n->m.pp_comm));
    PetscCall(comm_free(&n->m.embed_comm));
    for (int b = 0; b < n->m.nblocks; b++) PetscCall(comm_free(&n->m.block_comm[b]));
    PetscCall(PetscFree(n->m.ranks));
    PetscCall(PetscFree(n));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
