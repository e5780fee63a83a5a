/* genfuse: generation fused with inference (RLHFuse's inter-stage fusion,
 * -fuse_gen_inf stream|migrate, docs/fusion.md).
 *
 * Streaming: while a generation replica decodes, its head sends each
 * finished sample (tokens, log-probabilities, allowed sets) to the inference
 * ranks that need it, with non-blocking MPI from the engine's finished-sample
 * callback: by a fixed route (each inference replica its block of rows), or
 * dealt, sample by sample, to the replica of each call with the least work
 * so far (src/genfuse/deal.c). An inference rank appends the samples in
 * arrival order to a batch of its own and hands micro-batches of them, cut
 * by a token budget, to the caller as soon as the budget fills, and the rest
 * when every sample it expects has arrived (by the route) or every sender
 * has said it is done (dealt). This module moves samples; what runs on them is
 * the caller's (src/ppo/rollout_genfuse.c).
 *
 * Migration: the long tail of unfinished samples moves, with its KV cache,
 * onto fewer generation replicas at R_t, whose choice -fuse_migrate_at auto
 * makes by simulation. */
#ifndef RLFUSE_GENFUSE_H
#define RLFUSE_GENFUSE_H

#include "sys.h"
#include "gen.h"

/* ==== streaming finished samples into inference (src/genfuse/stream.c) === */
/* Which ranks need which rows: dest[k] needs row b iff need[k*B + b]. */
typedef struct {
  int            B, ndest;
  int           *dest;  /* world ranks */
  unsigned char *need;  /* [ndest*B] */
} GenFuseRoute;
PetscErrorCode genfuse_route_create(int B, int ndest, GenFuseRoute *route);
PetscErrorCode genfuse_route_destroy(GenFuseRoute *route);
/* Rows this world rank needs (0 if it is no destination). */
int genfuse_route_count(const GenFuseRoute *route, int rank);

/* ==== dealing samples to replicas (src/genfuse/deal.c) ================== */
/* The estimated work of one sample of n tokens (prompt and response) for
 * a model of width `width`, in units of one token's matrix products. */
double genfuse_deal_cost(int n, int width);
/* The replica of nrep with the least load (ties: the first from
 * sender % nrep on), whose load then grows by cost; -1 if nrep is 0. */
int genfuse_deal(int nrep, double *load, int sender, double cost);
/* A sender's deal: call k has nrep[k] replicas with heads head[k][j]
 * (world ranks), models of width width[k], and load[k][j] the work this
 * sender dealt to replica j so far (zero at the start). */
typedef struct {
  int        ncall, sender;
  int        nrep[3], width[3];
  const int *head[3];
  double    *load[3];
} GenFuseDeal;

/* The sending side, on a generation replica's head. */
typedef struct {
  MPI_Comm     comm;
  const GenFuseRoute *route; /* with a deal: its destinations get the end messages */
  GenFuseDeal *deal;         /* NULL: by the route */
  PetscBool    closed;
  int          b0;           /* global row of the replica's request 0 */
  const unsigned char *defer; /* [ndest] or NULL: samples for these destinations wait for genfuse_sender_release */
  PetscBool    released;
  int         *held, nheld;  /* requests finished while deferred */
  const GenBatch *hb;
  MPI_Request *req;          /* n sends */
  MPI_Status  *st;
  int        **buf;          /* nbuf packed samples */
  int          n, nbuf, cap;
  long long    messages, bytes;
  double       seconds;      /* in packing and MPI calls */
} GenFuseSender;
PetscErrorCode genfuse_sender_begin(MPI_Comm comm, const GenFuseRoute *route, int b0, GenFuseSender *s);
/* A GenFinishFn: ctx is the GenFuseSender, index the replica's request index. */
PetscErrorCode genfuse_send_finished(void *ctx, const GenBatch *b, int index);
/* Sends the deferred samples to the deferred destinations that need them
 * by the route as it is now (it may have changed since), and every later
 * sample at once. */
PetscErrorCode genfuse_sender_release(GenFuseSender *s);
/* With a deal: tells every destination of the route that this sender is
 * done (after its last sample; the same tag, so it comes after them). */
PetscErrorCode genfuse_sender_close(GenFuseSender *s);
/* Closes, waits for every send and frees the buffers. */
PetscErrorCode genfuse_sender_end(GenFuseSender *s);

/* The receiving side. arr (gen_batch_create(B, T, masked)) gets the
 * arrivals in order: arrival k is row k, rows[k] its global row, calls[k]
 * (calls may be NULL) the calls it was dealt to here (bit k: call k; 0 by
 * the route). The stream ends after `expected` samples, or with senders > 0
 * when that many senders have closed. run is
 * called with arrival indices whenever the unprocessed arrivals hold at
 * least `tokens` tokens (prompt and response), and at the end with the rest
 * (at most arr->n indices per call). */
typedef PetscErrorCode (*GenFuseBatchFn)(void *ctx, const GenBatch *arr, const int *rows, const int *idx, int n);
typedef struct {
  long long messages, bytes;
  int       batches;
  double    wait;  /* seconds blocked waiting for a sample */
} GenFuseRecvStats;
/* hold: run nothing before every sample has arrived (the same micro-batches,
 * without the overlap). */
PetscErrorCode genfuse_receive(MPI_Comm comm, int expected, int senders, int tokens, PetscBool hold, GenBatch *arr,
                               int *rows, int *calls, GenFuseBatchFn run, void *ctx, GenFuseRecvStats *st);
/* A streamed inference replica of several ranks (tp, pp): its head (root
 * of comm, the replica's ranks) receives the samples and hands each
 * micro-batch to the others, so that every rank of the replica runs the
 * same micro-batches in the same order. On the root, arrivals idx[0..*n)
 * of arr and their rows (and calls, when not NULL) go out (*n = 0: the
 * stream has ended). Elsewhere they are appended to arr from arrival *got
 * on, rows (and calls) filled, idx set to their arrival indices, *n to
 * their count (0: the end); collective over comm. */
PetscErrorCode genfuse_replica_bcast(MPI_Comm comm, int root, GenBatch *arr, int *rows, int *calls, int *idx, int *n,
                                     int *got, GenFuseRecvStats *st);


/* ==== migration of the long tail (src/genfuse/migrate.c) ============== */
/* The plan: n unfinished samples, sample i on replica rep[i] with kvlen[i]
 * cache positions (0: waiting, never started). m destination replicas:
 * forced (when > 0) or the fewest whose slots hold all n, never fewer than
 * the running samples need slots, at most dp; they are the replicas holding
 * the most cache (then the most samples, then the lower index): the least
 * data moves. Samples on a destination stay (to[i] = rep[i]); the others go,
 * running ones to the destination with the most free slots, waiting ones to
 * the least loaded. dest[dp] gets 1 for the destinations. */
typedef struct {
  int        dp, slots, forced, n;
  const int *rep, *idx, *kvlen;
} GenFuseMigIn;
PetscErrorCode genfuse_migrate_plan(const GenFuseMigIn *in, int *m, unsigned char *dest, int *to);

/* After the migration, on every rank of the mesh: dest[d] 1 for the
 * replicas that decode the tail; idx[0..n) the samples unfinished then. */
typedef PetscErrorCode (*GenFuseAfterFn)(void *ctx, const unsigned char *dest, int dp, const int *idx, int n);
/* The engine hook (a GenStepFn with ctx a GenFuseMigrator) on every rank of the
 * generation mesh; collective over the mesh at every step until the
 * migration. comm: point-to-point messages between world ranks. */
typedef struct {
  MPI_Comm    comm;
  const Mesh *mesh;
  int         B, forced;
  double      at;                 /* R_t */
  size_t      bucket;             /* words per message at most */
  PetscBool   decided;            /* migrated, or everything finished first */
  PetscBool   dest;               /* this rank's replica received the tail */
  int         m, moved, left;     /* destination replicas, samples this rank sent, unfinished at the migration */
  long long   bytes;              /* this rank sent */
  double      t_start, t_end;     /* the migration on this rank (0, 0: none) */
  GenFuseAfterFn after;              /* may be NULL */
  void       *after_ctx;
} GenFuseMigrator;
/* The inference rows after a migration: need[(k*nq + q)*B + b] when rank q
 * runs call k on row b; q_rep[q] its generation replica (-1: none);
 * member[k*nq + q] when q can run call k. In each call, the rows of ranks
 * on replicas that go on decoding are dealt, in row order, round-robin to
 * the members on freed replicas (none: they stay), except the rows with
 * keep[b] (the samples still unfinished: they end with the tail, when
 * their ranks are free again, so spreading them keeps the last inference
 * short). Ranks apart from generation keep their rows. */
void           genfuse_reroute(int ncall, int nq, int B, const int *q_rep, const unsigned char *freed,
                               const unsigned char *member, const unsigned char *keep, unsigned char *need);
PetscErrorCode genfuse_migrator_begin(MPI_Comm comm, const Mesh *mesh, int B, double at, int forced,
                                      size_t bucket_bytes, GenFuseMigrator *mg);
PetscErrorCode genfuse_migrate_step(void *ctx, GenEngine *e, GenBatch *b, PetscBool *go);

/* ==== R_t by simulation (src/genfuse/rtauto.c) =========================== */
/* A model of the fused stage from the previous iteration: B samples of
 * len[b] tokens (prompt and response) and rlen[b] response tokens; dp
 * generation replicas of `slots` slots (replica d starts with rows
 * exec_rows(B, dp, d)), decoding in lockstep at step_s seconds a step; nq
 * inference ranks, rank q a member of generation replica q_rep[q] (-1:
 * none; it starts at once) and needing row b when need[q*B+b]; each row
 * costs tok_s seconds per token on each rank that needs it, in finish
 * order, from when that rank stops generating; with head_of (may be NULL:
 * every rank its own), a rank q with head_of[q] = h belongs to the
 * inference replica headed by h, which starts when all its ranks have
 * stopped generating. */
typedef struct {
  int                  B, dp, slots, nq;
  const int           *len, *rlen, *q_rep;
  const unsigned char *need;
  double               step_s, tok_s;
  const int           *head_of;
} GenFuseSim;
/* Predicted seconds of the generation+inference stage when the tail
 * migrates at rt (0: never). */
double genfuse_sim_stage(const GenFuseSim *s, double rt);
/* -fuse_migrate_at auto's choice, the one candidate table: the R_t among
 * 0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5 whose stage(ctx, rt, &seconds) is
 * the least (the smaller on ties, within 1e-9 relative); *pred (may be
 * NULL) its seconds. The run passes genfuse_sim_stage on the previous
 * iteration's measurements (genfuse_sim_pick), the cost model its own
 * model of the stage (src/cost/migrate.c). */
typedef PetscErrorCode (*GenFuseStageFn)(void *ctx, double rt, double *seconds);
PetscErrorCode genfuse_rt_pick(GenFuseStageFn stage, void *ctx, double *rt, double *pred);
/* genfuse_rt_pick over genfuse_sim_stage: the R_t; *pred (may be NULL) its
 * predicted seconds. */
double genfuse_sim_pick(const GenFuseSim *s, double *pred);
#define GENFUSE_RT_FIRST 0.2 /* -fuse_migrate_at auto before any iteration was measured */

#endif
