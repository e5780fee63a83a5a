/* comm: communication for distributed execution. A communicator handle with
 * the collectives the parallel layers need behind one interface, and meshes:
 * the set of ranks a model function call runs on, with its pp x dp x tp grid.
 *
 * Memory: the model's buffers (parameters, gradients, activations) are the
 * backend's memory, host memory on the CPU and device memory on cuda, where
 * MPI cannot touch them (MPICH here is not CUDA-aware). comm_use_backend
 * tells this module which backend it is. With cuda and NCCL, every mesh
 * communicator also gets an NCCL communicator (kind COMM_NCCL) and the
 * collectives on backend memory run on it; without NCCL they copy through
 * the host around the MPI call. The *_host calls and
 * comm_allreduce_sum_double are for host buffers and are always MPI.
 *
 * Determinism: comm_allreduce_sum adds the contributions of the ranks in rank
 * order on every rank (a reduce-scatter by chunks, each chunk summed in rank
 * order by its owner, then an all-gather; on NCCL an all-gather, then every
 * rank adds the copies in rank order), so every member gets the same bits
 * whatever MPI's or NCCL's internal algorithm is, the same bits on cuda as on
 * the CPU, and a run repeats exactly. */
#ifndef RLFUSE_COMM_H
#define RLFUSE_COMM_H

#include "sys.h"
#include "tensor.h"

typedef enum { COMM_MPI = 0, COMM_NCCL = 1 } CommKind;

typedef struct {
  MPI_Comm mpi;   /* MPI_COMM_NULL when this rank is not a member */
  int      rank, size;
  CommKind kind;
  void    *nccl;  /* the NCCL communicator over the same ranks (COMM_NCCL), else NULL */
} Comm;

/* Once, after the backend is chosen and before any mesh exists: whether the
 * buffers of the backend-memory calls below are host memory (cpu) or device
 * memory (cuda). Meshes created afterwards get NCCL on cuda when it is
 * built; earlier ones keep MPI and copy through the host (correct, slower). */
PetscErrorCode comm_use_backend(const Backend *be);
/* Gives c an NCCL communicator over its ranks when comm_use_backend chose
 * NCCL, c has two ranks or more and this rank is a member; else a no-op.
 * Members that drive the same GPU (more ranks than GPUs on a node), which
 * NCCL refuses, keep COMM_MPI: their device buffers go through the host,
 * with the same bits, and the first such communicator's rank 0 says so.
 * Collective over c (rank 0 makes the id and broadcasts it over c->mpi).
 * For code that creates communicators (mesh.c). */
PetscErrorCode comm_attach_nccl(Comm *c);

/* Collectives; every one is a no-op on a communicator of size 1 and on a
 * rank that is not a member. Buffers are backend (device) memory, except in
 * the *_host calls and comm_allreduce_sum_double. */
PetscErrorCode comm_allreduce_sum(const Comm *c, float *buf, size_t n);
PetscErrorCode comm_allreduce_sum_double(const Comm *c, double *buf, int n); /* host scalars */
/* Every member contributes `bytes`; out gets size*bytes, member r's at r*bytes. */
PetscErrorCode comm_allgather(const Comm *c, const void *in, void *out, size_t bytes);
PetscErrorCode comm_allgather_host(const Comm *c, const void *in, void *out, size_t bytes);
/* Member r owns floats [n*r/size, n*(r+1)/size) of buf (comm_own_range);
 * afterwards every member has every range. */
PetscErrorCode comm_allgather_ranges(const Comm *c, float *buf, size_t n);
PetscErrorCode comm_allgather_ranges_host(const Comm *c, float *buf, size_t n);
static inline void comm_own_range(size_t n, int r, int size, size_t *lo, size_t *hi)
{
  *lo = n * (size_t)r / (size_t)size;
  *hi = n * (size_t)(r + 1) / (size_t)size;
}
PetscErrorCode comm_bcast(const Comm *c, void *buf, size_t bytes, int root);
PetscErrorCode comm_bcast_host(const Comm *c, void *buf, size_t bytes, int root);
/* Point-to-point inside c, on backend memory. Sends never block (the request
 * completes later); comm_wait finishes one. Tags separate concurrent streams.
 * Always MPI: device buffers go through a host copy (the send's copy lives
 * until comm_wait), even on COMM_NCCL. An NCCL send holds the sender's
 * stream until the peer posts the receive, and a pipeline schedule is free
 * to send and then receive on both sides of a stage boundary (1F1B: stage 0
 * sends the forward of micro-batch 1 and then waits for the gradient of 0,
 * which stage 1 sends before it receives micro-batch 1), which would
 * deadlock; MPI's non-blocking sends keep the schedule's freedom. Finish
 * every comm_isend request with comm_wait (it frees the host copy). */
PetscErrorCode comm_isend(const Comm *c, const void *buf, size_t bytes, int dest, int tag, MPI_Request *req);
PetscErrorCode comm_recv(const Comm *c, void *buf, size_t bytes, int src, int tag);
PetscErrorCode comm_wait(MPI_Request *req);
/* A send of a private copy of buf (host memory), which nobody waits for:
 * the caller may overwrite buf at once and never blocks on the peer (above
 * MPI's eager size a plain send's buffer is busy until the receive is
 * posted, and waiting for it before reusing the buffer can close a cycle
 * between two stages each waiting for the other, as two models' pipelines
 * running opposite ways on the same ranks do). Each such send first frees
 * the copies of the earlier ones that completed; comm_teardown waits for
 * the rest. */
PetscErrorCode comm_isend_copy(const Comm *c, const void *buf, size_t bytes, int dest, int tag);
PetscErrorCode comm_free(Comm *c);

/* ---- meshes ---------------------------------------------------------------- */
#define MESH_MAX_BLOCKS 4
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
  /* Blocks of r consecutive ranks of my tp group (mesh_tp_block), made on
   * first use: the ranks sharing a replicated key/value head. */
  int  nblocks, block_r[MESH_MAX_BLOCKS];
  Comm block_comm[MESH_MAX_BLOCKS];
} Mesh;

/* The mesh over world ranks ranks[0..n) with that grid. Meshes are created
 * once and cached: the same arguments give the same pointer. Collective over
 * the mesh's ranks only (MPI_Comm_create_group), so every member must ask for
 * its meshes in the same order. */
PetscErrorCode mesh_get(const int *ranks, int n, int pp, int dp, int tp, const Mesh **mesh);
/* World rank of mesh coordinates. */
static inline int mesh_rank(const Mesh *m, int p, int d, int t) { return m->ranks[(p * m->dp + d) * m->tp + t]; }
/* The communicator of my block of r consecutive tp ranks (t / r the same),
 * r dividing tp. Made on the first call for that r and kept with the cached
 * mesh; that call is collective over the block's ranks. */
PetscErrorCode mesh_tp_block(const Mesh *m, int r, const Comm **c);
/* Frees every cached mesh (at finalize). */
PetscErrorCode mesh_cache_destroy(void);
/* Once at start, collective on MPI_COMM_WORLD: learns which ranks share a
 * node. comm_teardown frees the node table and every cached mesh. */
PetscErrorCode comm_setup(void);
PetscErrorCode comm_teardown(void);
/* Node index of a world rank (ranks sharing memory share a node). */
PetscErrorCode comm_node_of(int world_rank, int *node);

#endif
