/* exec: running model function calls on their meshes (ReaLHF's dataflow
 * executor, docs/background.md section 3).
 *
 *  - DModel: one model placed on one call's mesh. Every rank of the world
 *    holds the DModel (the mesh's grid is known everywhere); the members hold
 *    their shard. Each member reads and writes only its shard of a
 *    checkpoint (parallel HDF5), and the file holds the full tensors, so a
 *    file written on any layout restarts on any other. Weights move
 *    between two placements of one model by reallocation (src/realloc); a
 *    copy can be released (dropped, or offloaded to host memory) between its
 *    calls and acquired again.
 *  - Rows: a call over B sequences gives dp replica d the contiguous rows
 *    [B*d/dp, B*(d+1)/dp). Its head (last stage, tp rank 0) holds the
 *    replica's outputs; exec_share_rows hands them to every rank.
 *  - The graph: calls are nodes with named inputs and outputs. A node runs
 *    once its inputs exist; nodes whose inputs exist together form a level.
 *    In a level every rank runs the nodes whose mesh holds it, so nodes on
 *    disjoint meshes run at the same time, then every node's outputs are
 *    shared with all ranks. */
#ifndef RLFUSE_EXEC_H
#define RLFUSE_EXEC_H

#include "plan.h"
#include "realloc.h"

/* ---- a model on a mesh ------------------------------------------------------- */
typedef struct {
  char           name[32]; /* e.g. "actor", "actor_gen": in messages */
  ModelConfig    cfg;
  const Backend *be;
  const Mesh    *mesh;     /* on every rank; mesh->me < 0 off the mesh; NULL: never placed (no such model) */
  PetscBool      optim;    /* carries AdamW state (training placements) */
  ModelDistConfig  dist;     /* ZeRO-1 and bucket size of the training calls */
  Model         *lm;      /* this rank's shard; NULL off the mesh or while released */
  float         *host;     /* offloaded parameters of this rank's shard, or NULL */
} DModel;

static inline PetscBool dmodel_member(const DModel *dm)
{
  return dm->mesh && dm->mesh->me >= 0 ? PETSC_TRUE : PETSC_FALSE;
}
/* Places cfg on the mesh of `call` in the plan (collective over that mesh;
 * every rank must place its models in the same order) and allocates the
 * members' shards (zeroed AdamW state when optim). */
PetscErrorCode dmodel_create(const char *name, const ModelConfig *cfg, const Backend *be, const Plan *plan, MFCId call,
                             PetscBool optim, DModel *dm);
PetscErrorCode dmodel_destroy(DModel *dm);
/* Reads /<role> of a checkpoint (with the AdamW state when with_optim);
 * trunk_only keeps the head as initialised from seed (model_init_random, so
 * the same on every layout). Collective on MPI_COMM_WORLD. */
PetscErrorCode dmodel_load(DModel *dm, const char *path, const char *role, PetscBool with_optim, PetscBool trunk_only,
                           uint64_t seed);
/* What ckpt_write_placed needs to write dm as /<role> (each member its
 * shard, the other ranks nothing). */
PetscErrorCode dmodel_ckpt_model(const DModel *dm, const char *role, PetscBool with_optim, CkptModel *cm,
                                 CkptWhere *where);
/* The whole model on rank 0: full (rank 0 only; a one-rank model of the
 * same configuration, with AdamW state allocated when dm carries it) gets
 * the parameters, moments and step. Collective on MPI_COMM_WORLD. */
PetscErrorCode dmodel_gather(DModel *dm, Model *full, size_t bucket_bytes);
/* dst's parameters from src's (two placements of one model) by
 * reallocation; dst is acquired first. Collective over the union of the two
 * meshes; the other ranks return at once. stats may be NULL. */
PetscErrorCode dmodel_copy(DModel *src, DModel *dst, size_t bucket_bytes, ReallocStats *stats);
/* Frees the members' shards; keep: the parameters stay in host memory
 * (offload), otherwise they are dropped. */
PetscErrorCode dmodel_release(DModel *dm, PetscBool keep);
/* Allocates the shards again (after a release), restoring kept parameters. */
PetscErrorCode dmodel_acquire(DModel *dm);

/* ---- rows of a call ------------------------------------------------------------ */
static inline void exec_rows(int B, int dp, int d, int *b0, int *b1)
{
  *b0 = (int)((long long)B * d / dp);
  *b1 = (int)((long long)B * (d + 1) / dp);
}
/* World rank of replica d's head: last stage, tp rank 0. */
static inline int exec_head(const Mesh *m, int d) { return mesh_rank(m, m->pp - 1, d, 0); }
static inline PetscBool exec_is_head(const Mesh *m)
{
  return (m->me >= 0 && m->p == m->pp - 1 && m->t == 0) ? PETSC_TRUE : PETSC_FALSE;
}
/* buf holds B rows of `row` elements of `type`; each replica head's rows
 * are copied to every rank of the world. Collective on MPI_COMM_WORLD. */
PetscErrorCode exec_share_rows(const Mesh *m, int B, size_t row, MPI_Datatype type, void *buf);
/* Rows of variable length: rows b of buf hold count[b] elements (count
 * already shared), packed in row order from index 0. Collective on
 * MPI_COMM_WORLD; buf must have room for the sum of count. */
PetscErrorCode exec_share_packed(const Mesh *m, int B, const int *count, MPI_Datatype type, void *buf);

/* ---- the dataflow graph ----------------------------------------------------------- */
#define EXEC_MAX_KEYS 6
typedef PetscErrorCode (*ExecFn)(void *ctx);
typedef struct {
  const char *name;                 /* also the timing key */
  const char *in[EXEC_MAX_KEYS];    /* data keys it needs (NULL-terminated) */
  const char *out[EXEC_MAX_KEYS];   /* data keys it produces */
  PetscBool   here;                 /* this rank is on the node's mesh */
  ExecFn      run;                  /* runs on the node's ranks */
  ExecFn      share;                /* on every rank after the node's level (may be NULL) */
  void       *ctx;
  PetscBool   marks;                /* run notes its own timeline entries (finer than the node) */
  PetscBool   late;                 /* it runs in the last level and shares after it, beside the nodes
                                     * that end the graph on other meshes (asynchronous RL's generation
                                     * of a later batch beside training); no node may take its outputs */
} ExecNode;

/* Level of every node: 0 for nodes fed by the given keys only, else one
 * more than the latest producer of an input. Errors name a node whose input
 * nobody produces (or only a later node: a cycle) and a key produced twice. */
PetscErrorCode exec_graph_levels(const ExecNode *nodes, int n, const char *const *given, int *level, int *nlevels);
/* Runs the graph level by level; seconds[k] (may be NULL) gets node k's wall
 * time, the longest over its ranks (0 for a node with no work anywhere).
 * Each rank notes each node it runs on the timeline (io.h) under the
 * node's name, unless the node notes finer entries itself. Collective on MPI_COMM_WORLD. */
PetscErrorCode exec_graph_run(const ExecNode *nodes, int n, const char *const *given, double *seconds);

#endif
