/* comm: communication for distributed execution. A communicator handle with
 * the collectives the parallel layers need behind one interface (MPI on the
 * CPU; the CUDA issue adds NCCL under the same calls), and meshes: the set of
 * ranks a model function call runs on, with its pp x dp x tp grid.
 *
 * Determinism: comm_allreduce_sum adds the contributions of the ranks in rank
 * order on every rank (a reduce-scatter by chunks, each chunk summed in rank
 * order by its owner, then an all-gather), so every member gets the same bits
 * whatever MPI's internal algorithm is, and a run repeats exactly. */
#ifndef RLFUSE_COMM_H
#define RLFUSE_COMM_H

#include "sys.h"

typedef enum { COMM_MPI = 0, COMM_NCCL = 1 } CommKind;

typedef struct {
  MPI_Comm mpi;   /* MPI_COMM_NULL when this rank is not a member */
  int      rank, size;
  CommKind kind;
} Comm;

/* Collectives; every one is a no-op on a communicator of size 1 and on a
 * rank that is not a member. Buffers are backend (device) memory. */
PetscErrorCode comm_allreduce_sum(const Comm *c, float *buf, size_t n);
PetscErrorCode comm_allreduce_sum_double(const Comm *c, double *buf, int n); /* host scalars */
/* Every member contributes `bytes`; out gets size*bytes, member r's at r*bytes. */
PetscErrorCode comm_allgather(const Comm *c, const void *in, void *out, size_t bytes);
/* Member r owns floats [n*r/size, n*(r+1)/size) of buf (comm_own_range);
 * afterwards every member has every range. */
PetscErrorCode comm_allgather_ranges(const Comm *c, float *buf, size_t n);
static inline void comm_own_range(size_t n, int r, int size, size_t *lo, size_t *hi)
{
  *lo = n * (size_t)r / (size_t)size;
  *hi = n * (size_t)(r + 1) / (size_t)size;
}
PetscErrorCode comm_bcast(const Comm *c, void *buf, size_t bytes, int root);
/* Point-to-point inside c. Sends never block (the request completes later);
 * comm_wait finishes one. Tags separate concurrent streams. */
PetscErrorCode comm_isend(const Comm *c, const void *buf, size_t bytes, int dest, int tag, MPI_Request *req);
PetscErrorCode comm_recv(const Comm *c, void *buf, size_t bytes, int src, int tag);
PetscErrorCode comm_wait(MPI_Request *req);
PetscErrorCode comm_free(Comm *c);

/* ---- meshes ---------------------------------------------------------------- */
/* A mesh: nranks world ranks laid out as pp x dp x tp, tp fastest: mesh
 * index i = (p*dp + d)*tp + t. A rank outside the mesh has me = -1 and null
 * communicators. */
typedef struct {
  int  nranks, *ranks;  /* world ranks in mesh order */
  int  pp, dp, tp;
  int  me, p, d, t;     /* my mesh index and coordinates (-1 when not a member) */
  Comm all;             /* the whole mesh */
  Comm tp_comm;         /* same (p, d): tensor-parallel group, ranked by t */
  Comm dp_comm;         /* same (p, t): data-parallel replicas, ranked by d */
  Comm pp_comm;         /* same (d, t): the pipeline, ranked by p */
  Comm embed_comm;      /* first and last stage of my pipeline (tied embedding), size 2 when pp > 1 */
} Mesh;

/* The mesh over world ranks ranks[0..n) with that grid. Meshes are created
 * once and cached: the same arguments give the same pointer. Collective over
 * the mesh's ranks only (MPI_Comm_create_group), so every member must ask for
 * its meshes in the same order. */
PetscErrorCode mesh_get(const int *ranks, int n, int pp, int dp, int tp, const Mesh **mesh);
/* World rank of mesh coordinates. */
static inline int mesh_rank(const Mesh *m, int p, int d, int t) { return m->ranks[(p * m->dp + d) * m->tp + t]; }
/* Frees every cached mesh (at finalize). */
PetscErrorCode mesh_cache_destroy(void);
/* Once at start, collective on MPI_COMM_WORLD: learns which ranks share a
 * node. comm_teardown frees the node table and every cached mesh. */
PetscErrorCode comm_setup(void);
PetscErrorCode comm_teardown(void);
/* Node index of a world rank (ranks sharing memory share a node). */
PetscErrorCode comm_node_of(int world_rank, int *node);

#endif
