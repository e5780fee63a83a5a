/* fuse: inter-stage fusion of generation and inference (docs/fusion.md).
 * While a generation replica decodes, its head sends each finished sample
 * (tokens, log-probabilities, allowed sets) to the inference ranks that need
 * it, with non-blocking MPI from the engine's finished-sample callback. An
 * inference rank appends the samples in arrival order to a batch of its own
 * and hands micro-batches of them, cut by a token budget, to the caller as
 * soon as the budget fills, and the rest when every sample it expects has
 * arrived. The module moves samples; what runs on them is the caller's. */
#ifndef RLFUSE_FUSE_H
#define RLFUSE_FUSE_H

#include "gen.h"

/* Which ranks need which rows: dest[k] needs row b iff need[k*B + b]. */
typedef struct {
  int            B, ndest;
  int           *dest;  /* world ranks */
  unsigned char *need;  /* [ndest*B] */
} FuseRoute;
PetscErrorCode fuse_route_create(int B, int ndest, FuseRoute *route);
PetscErrorCode fuse_route_destroy(FuseRoute *route);
/* Rows this world rank needs (0 if it is no destination). */
int fuse_route_count(const FuseRoute *route, int rank);

/* The sending side, on a generation replica's head. */
typedef struct {
  MPI_Comm     comm;
  const FuseRoute *route;
  int          b0;           /* global row of the replica's request 0 */
  MPI_Request *req;          /* n sends */
  MPI_Status  *st;
  int        **buf;          /* nbuf packed samples */
  int          n, nbuf, cap;
  long long    messages, bytes;
  double       seconds;      /* in packing and MPI calls */
} FuseSender;
PetscErrorCode fuse_sender_begin(MPI_Comm comm, const FuseRoute *route, int b0, FuseSender *s);
/* A GenFinishFn: ctx is the FuseSender, index the replica's request index. */
PetscErrorCode fuse_send_finished(void *ctx, const GenBatch *b, int index);
/* Waits for every send and frees the buffers. */
PetscErrorCode fuse_sender_end(FuseSender *s);

/* The receiving side. arr (gen_batch_create(B, T, masked)) gets the
 * arrivals in order: arrival k is row k, rows[k] its global row. run is
 * called with arrival indices whenever the unprocessed arrivals hold at
 * least `tokens` tokens (prompt and response), and at the end with the rest
 * (at most arr->n indices per call). */
typedef PetscErrorCode (*FuseBatchFn)(void *ctx, const GenBatch *arr, const int *rows, const int *idx, int n);
typedef struct {
  long long messages, bytes;
  int       batches;
  double    wait;  /* seconds blocked waiting for a sample */
} FuseRecvStats;
/* hold: run nothing before every sample has arrived (the same micro-batches,
 * without the overlap). */
PetscErrorCode fuse_receive(MPI_Comm comm, int expected, int tokens, PetscBool hold, GenBatch *arr, int *rows, FuseBatchFn run, void *ctx, FuseRecvStats *st);

#endif
