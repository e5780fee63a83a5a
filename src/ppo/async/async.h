/* Asynchronous RL (-async_staleness K > 0, docs/async.md), private to
 * src/ppo/async/: the queue of generated batches (queue.c), partial
 * rollouts' pool (pool.c), both in checkpoints (ckpt.c), and what the loop
 * and the iteration graph see of them (batches.c). Which weights generate
 * which batch is fixed by the deck (batch b by the weights after iteration
 * b - K), never by timing, so a run repeats bit for bit. */
#ifndef RLFUSE_PPO_ASYNC_H
#define RLFUSE_PPO_ASYNC_H

#include "../ppo_impl.h"
#include <string.h>

/* -async_staleness K > 0: batch b (the samples iteration b trains on) is
 * generated with the weights of iteration max(b - K, first), during
 * iteration b - K, beside that iteration's training when the generation
 * mesh is apart. The queue's K + 1 slots hold batch b in slot b mod (K+1),
 * each with its own copy of its prompts' answers, metadata and indices. */
/* -async_partial S (pool.c): the samples in flight, whole
 * groups in the order their prompts came (oldest first). Each generation
 * call draws at most S new tokens for every sample not yet ended, with the
 * weights of its iteration; the batch it makes is the oldest groups whose
 * samples have all ended, and if fewer than a batch's have, the oldest
 * unfinished ones run to their end in the same call. Every rank holds the
 * pool (the generation's results are shared), and what a sample draws is
 * keyed by its number in the run (prompt position x group + member), so the
 * batches do not depend on the layout or the timing. */
typedef struct {
  int          S, G, T, cap, n;          /* tokens per call, group size, positions, rows allocated, rows held */
  int         *tokens, *tver;            /* [cap,T]: prompt and response so far; each response token's version */
  float       *logprobs;                 /* [cap,T]: behaviour log-probabilities */
  int         *prompt_len, *len, *eos, *done; /* [cap] */
  int64_t     *ppos, *pidx;              /* [cap]: prompt position in the stream; index in its source */
  const char **answer, **meta;           /* [cap]: answer (the built-in task's in abuf), metadata */
  char        *abuf;                     /* [cap * PPO_ANSWER_LEN] */
  /* allowed sets (gen_masked: top-k, top-p or min_new_tokens cut), kept
   * with the row across iterations: per position its count (0: every id;
   * NULL when not masked), per row its ids in position order */
  int         *mcnt;                     /* [cap,T] */
  int        **mids;                     /* [cap] */
  size_t      *mlen, *mroom;             /* [cap]: ids held, room */
  /* one call: its requests (the rows not ended), their results */
  GenRequest  *req;
  int         *row, nreq;                /* [cap]: the pool row of each request */
  GenBatch     res;                      /* n = nreq */
  int64_t      made;                     /* new tokens of the last call */
  PetscBool    taken;                    /* this rank took the batch with the generation (async_pool_take_early) */
} AsyncPool;
typedef struct AsyncQueue AsyncQueue;
/* What a checkpoint written now carries: the queue's batches from `from` on. */
typedef struct {
  AsyncQueue *q;
  int64_t     from; /* the first batch not yet trained on */
} AsyncSave;
struct AsyncQueue {
  int          K, n;           /* staleness, slots (K + 1) */
  Rollout     *slot;           /* [n] */
  PetscBool   *ready;          /* [n]: the slot holds a generated batch */
  int64_t     *data_pos;       /* [n]: where the slot's prompts start (prompts_next) */
  const char **answer, **meta; /* [n * Bcap] */
  int64_t     *pidx;           /* [n * Bcap] */
  char        *abuf;           /* [n * Bcap * PPO_ANSWER_LEN]: the built-in task's answers */
  RLISStats    is;             /* this iteration's behaviour weights */
  PetscBool    partial;        /* -async_partial: batches come from the pool */
  AsyncPool    pool;
  AsyncSave    save;           /* what the checkpoints' carry writes */
};
PetscErrorCode async_create(const PPOOptions *o, int B, int T, PetscBool masked, AsyncQueue *q);
PetscErrorCode async_destroy(AsyncQueue *q);
static inline Rollout *async_slot(AsyncQueue *q, int64_t batch) { return &q->slot[batch % q->n]; }
/* After prompts_next for batch b at data position pos: the rows' answers,
 * metadata and indices copied into b's slot (rows[] point there). */
PetscErrorCode async_keep_prompts(AsyncQueue *q, const PromptSource *ps, int64_t batch, int64_t pos);
/* The behaviour weights of the slot's batch from its prox and behaviour
 * log-probabilities (-async_correction), statistics into q->is. */
PetscErrorCode async_weights(AsyncQueue *q, const PPOOptions *o, Rollout *r);
/* The iteration's staleness metrics in run.h5 (docs/async.md) and the
 * progress line's part. */
PetscErrorCode async_record(RunRecord *rec, const AsyncQueue *q, const Rollout *r, int64_t iteration, double gen_s,
                            double train_s, double iter_s, char *line, size_t len);
/* What checkpoints written now carry (ckpt.c): the queue's generated
 * batches from batch `from` on, and the pool. */
void async_checkpoint_carry(AsyncQueue *q, int64_t from, CkptCarry *c);
/* On -restart: refuses a file written with another -async_staleness > 0 (one
 * without /async, a synchronous run's, may go on with any); with q, the
 * batches [from, from + K) the file holds go into their slots, ready, with
 * their prompts' answers (*found: how many). Collective on comm. */
PetscErrorCode async_restore(MPI_Comm comm, const char *path, const PPOOptions *o, PromptSource *ps, AsyncQueue *q,
                             int64_t from, int *found);
/* Before anything is written, on -restart path: async_restore's checks of the
 * staleness and the queue's shape, then every field of /async against what
 * this run can hold (prompts up to max_prompt tokens, a vocabulary of vocab):
 * token ids, log-probabilities, lengths, flags, versions within the
 * staleness, prompt positions before the checkpoint's data_pos, no batch
 * missing. One error naming the file and the field. Collective on comm. */
PetscErrorCode async_check(MPI_Comm comm, const char *path, const PPOOptions *o, int max_prompt, int vocab);
/* The built-in task's answer a (in buf, nbuf bytes: its owner's, which the
 * next prompts overwrite) copied to dst, which is returned; an answer
 * elsewhere (a prompt file's) returned as it is. */
static inline const char *async_keep_answer(const char *a, const char *buf, size_t nbuf, char *dst)
{
  if (!a || a < buf || a >= buf + nbuf) return a;
  memmove(dst, a, PPO_ANSWER_LEN);
  dst[PPO_ANSWER_LEN - 1] = 0;
  return dst;
}
/* Partial rollouts (pool.c): the pool of rollout_batch +
 * -async_partial_extra groups' rows (async_create makes it). */
PetscErrorCode async_pool_create(const PPOOptions *o, int T, AsyncPool *p);
PetscErrorCode async_pool_destroy(AsyncPool *p);
/* Partial rollouts (pool.c). Before batch b's generation,
 * on every rank: whole groups of new prompts from *data_pos (advanced) until
 * the pool is full, and slot b marked as b's. */
PetscErrorCode async_pool_admit(AsyncQueue *q, PromptSource *ps, const PPOOptions *o, int64_t batch,
                                PetscInt *data_pos);
/* On the members of the generating mesh: the call's draws (keyed by the
 * batch index) for the rows not ended, then the oldest unfinished groups to
 * their end if fewer than a batch's groups have ended. */
PetscErrorCode async_pool_generate(AsyncPool *p, DModel *policy, const PPOOptions *o, int max_prompt, uint64_t seed,
                                   uint32_t key, GenPart *part);
/* On every rank after it: the results shared and merged into the pool
 * (version: the weights' iterations), and the batch taken out into its slot. */
PetscErrorCode async_pool_share(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version,
                                Rollout *slot);
/* After a restart read the rows' prompt positions: the answers, metadata
 * and source indices of slot r's rows (r NULL: the pool's) drawn again. */
PetscErrorCode async_pool_prompts(AsyncQueue *q, PromptSource *ps, const PPOOptions *o, Rollout *r);
/* On the members of a generating mesh of one rank a replica, right after
 * async_pool_generate: every replica's results gathered, merged and the
 * batch taken into its slot there (so that the frozen models' calls on it
 * run with the generation); async_pool_share then only shares them with the
 * other ranks. */
/* The allowed sets of the pool's n rows (masked pools only): the ids in
 * row order (allocated, *total of them), and back into the rows from the
 * counts (mcnt, set before) and those ids, checking that they agree. */
PetscErrorCode async_pool_masks_pack(const AsyncPool *p, int **ids, size_t *total);
PetscErrorCode async_pool_masks_unpack(AsyncPool *p, const int *ids, size_t total);
PetscErrorCode async_pool_take_early(AsyncQueue *q, const Mesh *m, const PPOOptions *o, GenPart *part, int version,
                                     Rollout *slot);

/* ---- the loop's interface (batches.c) ----------------------------------------- */
/* The batch maker of an asynchronous run (-async_staleness > 0): the queue,
 * the first K batches generated at the start (or read from the restart
 * file), each iteration training on batch i while batch i + K is generated. */
PetscErrorCode async_batches_create(const PPOOptions *o, int T, PPOBatches *b);

#endif
