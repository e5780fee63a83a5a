/* realloc: parameter reallocation between two layouts of one model (ReaLHF,
 * docs/background.md section 3). A layout is a mesh (ranks, pp x dp x tp); each rank
 * of it holds the ModelShard of its coordinates (model.h) in a flat buffer
 * ordered by model_tensor_table_shard.
 *
 * The transfer plan: layers go to stages by parameter count in both layouts
 * (model_stage_layers); for every tensor, every destination rank needs the
 * pieces of its tp slice. Tensor-parallel sizes must divide each other: a
 * coarser source slice is cut (split) or several finer source slices are
 * joined (gather). Every dp replica of the source (and for a replicated
 * tensor every tp rank) holds a slice, so one sender is chosen per slice:
 * a rank that is itself a receiver copies locally; otherwise a sender on
 * the receivers' node is preferred, else the least-loaded candidate (bytes
 * already assigned). The sender sends the slice to all of its receivers
 * (a fan-out broadcast). All slices between one pair of ranks travel in one
 * message per bucket.
 *
 * Plans are computed once per (model shape, source mesh, destination mesh)
 * and cached. Every rank of the world computes the same plan (it is a pure
 * function of its inputs), so no negotiation messages are needed. */
#ifndef RLFUSE_REALLOC_H
#define RLFUSE_REALLOC_H

#include "model.h"

typedef struct ReallocPlan ReallocPlan;

typedef struct {
  double bytes_sent;     /* this rank's bytes sent to other ranks */
  double bytes_recv;     /* this rank's bytes received from other ranks */
  double bytes_local;    /* copied locally (rank in both layouts holding the slice) */
  double seconds;        /* wall time of realloc_execute on this rank */
  int    messages;       /* messages this rank sent */
} ReallocStats;

/* The cached plan from src to dst for a model of shape cfg. Errors (tp sizes
 * that do not divide each other) name `what` (e.g. "actor: actor_train -> actor_gen"). */
PetscErrorCode realloc_plan_get(const ModelConfig *cfg, const Mesh *src, const Mesh *dst, const char *what,
                                const ReallocPlan **plan);
/* Total bytes the plan moves between different ranks (same on every rank). */
double realloc_plan_bytes(const ReallocPlan *plan);
/* Moves the weights: src_flat is this rank's shard in the source layout
 * (ignored when the rank is not in src), dst_flat its shard in the
 * destination layout (ignored when not in dst). Both are host buffers.
 * Buckets of at most bucket_bytes per message (0: no limit). Collective
 * over the union of both meshes only. stats may be NULL. */
PetscErrorCode realloc_execute(const ReallocPlan *plan, const float *src_flat, float *dst_flat, size_t bucket_bytes,
                               ReallocStats *stats);
/* Frees every cached plan. */
PetscErrorCode realloc_cache_destroy(void);

#endif
