/* Asynchronous RL's queue in checkpoints (group /async, docs/formats.md):
 * the generated batches not yet trained on and the partial rollouts' pool,
 * written into each checkpoint through the writer's carry and read back on
 * -restart. */
#include "async.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the queue in checkpoints ------------------------------------------------ */
/* Group /async of a checkpoint (docs/formats.md): attribute staleness, and
 * a group batch_<b> for each generated batch not yet trained on, with its
 * rows as generation left them (tokens, logprobs, prompt_lengths,
 * response_lengths, eos, versions, the allowed sets mask_off/mask_ids when
 * generation masks, and of episodes each token's source, each row's turns,
 * cut observation tokens and environment calls, rewards and seconds) and
 * attributes batch and data_pos. */

/* Prompt positions as the file's int32 (a run of 2^31 prompts is refused). */
static PetscErrorCode int32_positions(const int64_t *pos, int n, int *out)
{
  PetscFunctionBegin;
  for (int i = 0; i < n; i++) {
    PetscCheck(pos[i] >= 0 && pos[i] <= PETSC_MAX_INT, PETSC_COMM_SELF, PETSC_ERR_SUP,
               "checkpoint: prompt position %" PetscInt64_FMT " does not fit the file's int32", pos[i]);
    out[i] = (int)pos[i];
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Partial rollouts: group /async/pool, the samples in flight (whole
 * groups, oldest first) with attributes partial (S), group, capacity and
 * rows. */
static PetscErrorCode pool_write(IoId g, const AsyncPool *p)
{
  IoId        h = IO_NONE;
  int         n = p->n, T = p->T, *pos, *ids = NULL;
  size_t      nid = 0;
  const char *an[] = {"partial", "group", "capacity", "rows"};
  double      av[] = {(double)p->S, (double)p->G, (double)p->cap, (double)n};

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(n + 1, &pos));
  PetscCall(int32_positions(p->ppos, n, pos));
  PetscCall(io_group_create(g, "checkpoint", "pool", &h));
  if (n > 0) {
    IODataset d[] = {
      {"tokens",           2, {n, T}, p->tokens,     PETSC_TRUE },
      {"logprobs",         2, {n, T}, p->logprobs,   PETSC_FALSE},
      {"token_versions",   2, {n, T}, p->tver,       PETSC_TRUE },
      {"prompt_lengths",   1, {n, 1}, p->prompt_len, PETSC_TRUE },
      {"response_lengths", 1, {n, 1}, p->len,        PETSC_TRUE },
      {"eos",              1, {n, 1}, p->eos,        PETSC_TRUE },
      {"ended",            1, {n, 1}, p->done,       PETSC_TRUE },
      {"prompt_positions", 1, {n, 1}, pos,           PETSC_TRUE },
      {"mask_counts",      2, {n, T}, p->mcnt,       PETSC_TRUE },
      {"mask_ids",         1, {1, 1}, NULL,          PETSC_TRUE },
    };
    if (p->mcnt) { /* the allowed sets kept across iterations: counts per position, ids in row order */
      PetscCall(async_pool_masks_pack(p, &ids, &nid));
      d[9].dims[0] = (long long)PetscMax((size_t)1, nid), d[9].data = ids;
    }
    PetscCall(io_group_fill(h, d, p->mcnt ? 10 : 8, an, av, 4));
  } else PetscCall(io_group_fill(h, NULL, 0, an, av, 4));
  PetscCall(io_close(&h));
  PetscCall(PetscFree(ids));
  PetscCall(PetscFree(pos));
  PetscFunctionReturn(PETSC_SUCCESS);
}
static PetscErrorCode async_write(IoId file, void *ctx)
{
  AsyncSave *a = (AsyncSave *)ctx;
  AsyncQueue *q = a->q;
  IoId        g = IO_NONE;

  PetscFunctionBegin;
  PetscCall(io_group_create(file, "checkpoint", "async", &g));
  PetscCall(io_attr_write_double(g, "staleness", (double)q->K));
  if (q->partial) PetscCall(pool_write(g, &q->pool));
  for (int s = 0; s < q->n; s++) {
    Rollout       *r = &q->slot[s];
    const GenBatch *gb = &r->gen;
    int            B = r->B, T = r->T, nd = 6;
    char           name[32];
    IoId           h = IO_NONE;
    IODataset      d[14] = {
      {"tokens",           2, {B, T}, gb->tokens,       PETSC_TRUE },
      {"logprobs",         2, {B, T}, gb->logprobs,     PETSC_FALSE},
      {"prompt_lengths",   1, {B, 1}, gb->prompt_len,   PETSC_TRUE },
      {"response_lengths", 1, {B, 1}, gb->response_len, PETSC_TRUE },
      {"eos",              1, {B, 1}, gb->eos,          PETSC_TRUE },
      {"versions",         1, {B, 1}, r->async.version,       PETSC_TRUE },
    };
    const char *an[] = {"batch", "data_pos"};
    double      av[] = {(double)r->async.batch, (double)q->data_pos[s]};
    int         pos[q->partial ? B : 1];

    if (!q->ready[s] || r->async.batch < a->from) continue;
    if (r->async.tver) { /* partial rollouts: each token's version, each row's prompt (rows come from several batches'
                            prompts) */
      PetscCall(int32_positions(r->async.ppos, B, pos));
      d[nd++] = (IODataset){"token_versions", 2, {B, T}, r->async.tver, PETSC_TRUE};
      d[nd++] = (IODataset){"prompt_positions", 1, {B, 1}, pos, PETSC_TRUE};
    }
    if (gb->mask_off) {
      d[nd++] = (IODataset){"mask_off", 1, {B * T + 1, 1}, gb->mask_off, PETSC_TRUE};
      d[nd++] = (IODataset){"mask_ids", 1, {PetscMax(1, gb->mask_off[(size_t)B * T]), 1}, gb->mask_ids, PETSC_TRUE};
    }
    if (r->episodes) { /* multi-turn episodes: whose each token is, and what the environment said of each row */
      d[nd++] = (IODataset){"source", 2, {B, T}, gb->src, IO_DATASET_U8};
      d[nd++] = (IODataset){"turns", 1, {B, 1}, gb->turns, PETSC_TRUE};
      d[nd++] = (IODataset){"obs_cut", 1, {B, 1}, gb->obs_cut, PETSC_TRUE};
      d[nd++] = (IODataset){"env_calls", 1, {B, 1}, r->env.calls, PETSC_TRUE};
      d[nd++] = (IODataset){"env_at", 2, {B, T}, r->env.at, PETSC_FALSE};
    }
    PetscCall(PetscSNPrintf(name, sizeof name, "batch_%" PetscInt64_FMT, r->async.batch));
    PetscCall(io_group_create(g, "checkpoint", name, &h));
    PetscCall(io_group_fill(h, d, nd, an, av, 2));
    if (r->episodes) { /* doubles, so that the rewards a restart trains on are the bits the environment gave */
      IoSize n = (IoSize)B;
      PetscCall(io_dataset_write(h, "env_rewards", IO_F64LE, IO_DOUBLE, 1, &n, r->env.reward));
      PetscCall(io_dataset_write(h, "env_seconds", IO_F64LE, IO_DOUBLE, 1, &n, r->env.seconds));
    }
    PetscCall(io_close(&h));
  }
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

void async_checkpoint_carry(AsyncQueue *q, int64_t from, CkptCarry *c)
{
  q->save = (AsyncSave){q, from};
  *c      = (CkptCarry){async_write, &q->save};
}

/* What a restart reads: the staleness the file was written with and, for
 * each batch it holds among [from, from + K), where its prompts start. */
typedef struct {
  AsyncQueue *q;
  int64_t     from;
  double      staleness;
  double      have[PPO_ASYNC_MAX], pos[PPO_ASYNC_MAX]; /* per batch from + j */
  double      rows[PPO_ASYNC_MAX];                     /* per batch: its rows (tokens' first extent) */
  double      pool[4];           /* partial rollouts: /async/pool's partial, group, capacity, rows (all 0 without) */
  int        *ppos;              /* room for a batch's or the pool's prompt positions */
  int        *pool_ids;          /* the pool's allowed-set ids (masked pools), pool_nid of them */
  long long   pool_nid;
  int         phase;             /* 0: headers; 1: the rows of the batches found */
  const char *path;              /* the checkpoint, for messages */
} AsyncLoad;

static PetscErrorCode async_read_rows(IoId h, const char *path, const char *name, IoType mem, void *buf, long long n)
{
  PetscFunctionBegin;
  PetscCheck(io_dataset_npoints(h, name) == n && io_dataset_read_all(h, name, mem, buf) == 0, PETSC_COMM_SELF,
             PETSC_ERR_FILE_UNEXPECTED, "checkpoint %s: /async batch dataset %s is missing or has not %lld elements",
             path, name, n);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* /async/pool: its attributes (phase 0), its rows into the queue's pool
 * when this run has one of the same shape (phase 1). */
static PetscErrorCode pool_read(IoId g, AsyncLoad *a)
{
  const char *an[] = {"partial", "group", "capacity", "rows"};
  AsyncPool  *p    = &a->q->pool;
  IoId        h    = IO_NONE;
  int         n;

  PetscFunctionBegin;
  PetscCall(io_group_open(g, "checkpoint /async", "pool", &h));
  if (a->phase == 0)
    for (int k = 0; k < 4; k++) PetscCall(io_attr_read_double(h, "checkpoint /async/pool", an[k], &a->pool[k]));
  n = (int)a->pool[3];
  if (a->phase == 1 && a->q->partial && n > 0) {
    long long nT = (long long)n * p->T;
    PetscCall(async_read_rows(h, a->path, "tokens", IO_INT, p->tokens, nT));
    PetscCall(async_read_rows(h, a->path, "logprobs", IO_FLOAT, p->logprobs, nT));
    PetscCall(async_read_rows(h, a->path, "token_versions", IO_INT, p->tver, nT));
    PetscCall(async_read_rows(h, a->path, "prompt_lengths", IO_INT, p->prompt_len, n));
    PetscCall(async_read_rows(h, a->path, "response_lengths", IO_INT, p->len, n));
    PetscCall(async_read_rows(h, a->path, "eos", IO_INT, p->eos, n));
    PetscCall(async_read_rows(h, a->path, "ended", IO_INT, p->done, n));
    PetscCall(async_read_rows(h, a->path, "prompt_positions", IO_INT, a->ppos, n));
    for (int i = 0; i < n; i++) p->ppos[i] = a->ppos[i];
    if (p->mcnt) { /* the counts and ids here, unpacked into the rows after the broadcast (async_restore) */
      PetscCheck(io_dataset_npoints(h, "mask_counts") >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                 "checkpoint %s: /async/pool holds no allowed sets (mask_counts), which -gen_top_k, -gen_top_p or "
                 "-gen_min_new_tokens need: restart it with the sampling options it was written with",
                 a->path);
      PetscCall(async_read_rows(h, a->path, "mask_counts", IO_INT, p->mcnt, nT));
      a->pool_nid = 0;
      for (long long k = 0; k < nT; k++) a->pool_nid += p->mcnt[k];
      PetscCall(PetscMalloc1(a->pool_nid + 1, &a->pool_ids));
      PetscCall(async_read_rows(h, a->path, "mask_ids", IO_INT, a->pool_ids,
                                PetscMax(1, a->pool_nid))); /* one id stored for none */
    } else
      PetscCheck(io_dataset_npoints(h, "mask_counts") < 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                 "checkpoint %s: /async/pool holds allowed sets (written with -gen_top_k, -gen_top_p or "
                 "-gen_min_new_tokens): restart it with the sampling options it was written with",
                 a->path);
  }
  PetscCall(io_close(&h));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode async_read(IoId file, void *ctx)
{
  AsyncLoad *a = (AsyncLoad *)ctx;
  IoId       g = IO_NONE;

  PetscFunctionBegin;
  if (!io_is_group(file, "async")) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_group_open(file, "checkpoint", "async", &g));
  if (a->phase == 0) PetscCall(io_attr_read_double(g, "checkpoint /async", "staleness", &a->staleness));
  if (io_is_group(g, "pool")) PetscCall(pool_read(g, a));
  for (int j = 0; j < a->q->K; j++) {
    char    name[32];
    IoId    h = IO_NONE;
    int64_t b = a->from + j;

    PetscCall(PetscSNPrintf(name, sizeof name, "batch_%" PetscInt64_FMT, b));
    if (!io_is_group(g, name)) continue;
    PetscCall(io_group_open(g, "checkpoint /async", name, &h));
    if (a->phase == 0) {
      IoSize dims[2] = {0, 0};
      IoId   t       = IO_NONE;
      char   where[PETSC_MAX_PATH_LEN + 64];

      a->have[j] = 1;
      PetscCall(io_attr_read_double(h, "checkpoint /async batch", "data_pos", &a->pos[j]));
      PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s /async/%s", a->path, name));
      PetscCall(io_dataset_open(h, where, "tokens", "tokens", IO_CLASS_INT, 0, 2, dims, &t));
      PetscCall(io_close(&t));
      a->rows[j] = (double)dims[0];
    } else {
      Rollout  *r  = async_slot(a->q, b);
      GenBatch *gb = &r->gen;
      long long BT = (long long)r->B * r->T;

      PetscCall(async_read_rows(h, a->path, "tokens", IO_INT, gb->tokens, BT));
      PetscCall(async_read_rows(h, a->path, "logprobs", IO_FLOAT, gb->logprobs, BT));
      PetscCall(async_read_rows(h, a->path, "prompt_lengths", IO_INT, gb->prompt_len, r->B));
      PetscCall(async_read_rows(h, a->path, "response_lengths", IO_INT, gb->response_len, r->B));
      PetscCall(async_read_rows(h, a->path, "eos", IO_INT, gb->eos, r->B));
      PetscCall(async_read_rows(h, a->path, "versions", IO_INT, r->async.version, r->B));
      if (r->async.tver) {
        PetscCall(async_read_rows(h, a->path, "token_versions", IO_INT, r->async.tver, BT));
        PetscCall(async_read_rows(h, a->path, "prompt_positions", IO_INT, a->ppos, r->B));
        for (int k = 0; k < r->B; k++) r->async.ppos[k] = a->ppos[k];
      }
      r->episodes = (PetscBool)(io_dataset_npoints(h, "source") >= 0); /* async_check: iff this run has -env */
      if (r->episodes) {
        PetscCall(async_read_rows(h, a->path, "source", IO_UCHAR, gb->src, BT));
        PetscCall(async_read_rows(h, a->path, "turns", IO_INT, gb->turns, r->B));
        PetscCall(async_read_rows(h, a->path, "obs_cut", IO_INT, gb->obs_cut, r->B));
        PetscCall(async_read_rows(h, a->path, "env_calls", IO_INT, r->env.calls, r->B));
        PetscCall(async_read_rows(h, a->path, "env_rewards", IO_DOUBLE, r->env.reward, r->B));
        PetscCall(async_read_rows(h, a->path, "env_seconds", IO_DOUBLE, r->env.seconds, r->B));
        if (io_dataset_npoints(h, "env_at") >= 0) /* absent before -env_reward_at: async_check refused it with turn */
          PetscCall(async_read_rows(h, a->path, "env_at", IO_FLOAT, r->env.at, BT));
        else PetscCall(PetscArrayzero(r->env.at, BT));
      }
      if (gb->mask_off) {
        long long nid;
        PetscCall(async_read_rows(h, a->path, "mask_off", IO_INT, gb->mask_off, BT + 1));
        nid = PetscMax(1, gb->mask_off[BT]);
        if ((size_t)nid > gb->mask_cap) {
          PetscCall(PetscFree(gb->mask_ids));
          PetscCall(PetscMalloc1(nid, &gb->mask_ids));
          gb->mask_cap = (size_t)nid;
        }
        PetscCall(async_read_rows(h, a->path, "mask_ids", IO_INT, gb->mask_ids, nid));
      }
    }
    PetscCall(io_close(&h));
  }
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The queue's shape against the options, each refusal naming the option
 * that differs: the batches' rows (-rollout_batch), then the pool's group,
 * budget and rows (-rollout_group, -async_partial, -async_partial_extra). */
static PetscErrorCode async_restore_shape(MPI_Comm comm, const char *path, const PPOOptions *o, const AsyncLoad *a)
{
  int G = ppo_group_size(o), cap = ppo_partial_rows(o), B = (int)o->rollout_batch, rows = 0;

  PetscFunctionBegin;
  for (int j = 0; j < PPO_ASYNC_MAX; j++)
    if (a->have[j]) {
      rows = (int)a->rows[j];
      PetscCheck(rows == B, comm, PETSC_ERR_ARG_INCOMP,
                 "-restart %s holds generated batches of %d rows (/async/batch_%" PetscInt64_FMT
                 "): restart it with -rollout_batch %d (not %d)",
                 path, rows, a->from + j, rows, B);
    }
  if (!(a->pool[0] > 0)) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck((int)a->pool[1] == G, comm, PETSC_ERR_ARG_INCOMP,
             "-restart %s holds partial rollouts in groups of %.0f: restart it with an -algo that has groups and "
             "-rollout_group %.0f (now groups of %d, -algo %s)",
             path, a->pool[1], a->pool[1], G, ppo_algo(o)->name);
  PetscCheck((int)a->pool[0] == (int)o->async_partial, comm, PETSC_ERR_ARG_INCOMP,
             "-restart %s holds partial rollouts of -async_partial %.0f: restart it with the same -async_partial "
             "(%.0f, not %" PetscInt_FMT ")",
             path, a->pool[0], a->pool[0], o->async_partial);
  PetscCheck((int)a->pool[2] == cap || !rows, comm, PETSC_ERR_ARG_INCOMP,
             "-restart %s holds partial rollouts in a pool of %.0f rows: restart it with -async_partial_extra %.0f "
             "(now %d rows)",
             path, a->pool[2], (a->pool[2] - B) / G, cap);
  PetscCheck((int)a->pool[2] == cap, comm, PETSC_ERR_ARG_INCOMP,
             "-restart %s holds partial rollouts in a pool of %.0f rows, -rollout_batch plus -async_partial_extra "
             "groups of %d (now %d rows): restart it with the -rollout_batch and -async_partial_extra it was "
             "written with",
             path, a->pool[2], G, cap);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_restore(MPI_Comm comm, const char *path, const PPOOptions *o, PromptSource *ps, AsyncQueue *q,
                             int64_t from, int *found)
{
  AsyncQueue none = {0}; /* without a queue: the batches' headers only, over the staleness's window */
  AsyncLoad  a    = {q ? q : &none, from, 0, {0}, {0}, {0}, {0}, NULL, NULL, 0, 0, path};
  int        room = q ? PetscMax(q->slot[0].Bcap, q->pool.cap) : 1;

  PetscFunctionBegin;
  *found = 0;
  none.K = (int)PetscMin(o->async_staleness, PPO_ASYNC_MAX);
  PetscCall(PetscMalloc1(room + 1, &a.ppos));
  PetscCall(io_read_on_root(comm, "checkpoint", path, async_read, &a));
  PetscCallMPI(sys_mpi_bcast(&a.staleness, 1, MPI_DOUBLE, 0, comm));
  PetscCallMPI(sys_mpi_bcast(a.pool, 4, MPI_DOUBLE, 0, comm));
  /* a synchronous run's checkpoint may go on asynchronously (the first batches are generated at the restart) */
  PetscCheck(a.staleness == 0 || (PetscInt)a.staleness == o->async_staleness, comm, PETSC_ERR_ARG_INCOMP,
             "-restart %s was written with -async_staleness %.0f and holds its queue of generated batches: restart it "
             "with -async_staleness %.0f (not %" PetscInt_FMT ")",
             path, a.staleness, a.staleness, o->async_staleness);
  /* partial rollouts in flight go on only into a pool of the same shape; batches without prompt positions only without
   * one */
  PetscCheck(a.staleness == 0 || (a.pool[0] > 0) == (o->async_partial > 0), comm, PETSC_ERR_ARG_INCOMP,
             "-restart %s was written %s -async_partial: restart it %s", path, a.pool[0] > 0 ? "with" : "without",
             a.pool[0] > 0 ? "with the same -async_partial and -async_partial_extra" : "with -async_partial 0");
  PetscCallMPI(sys_mpi_bcast(a.have, PPO_ASYNC_MAX, MPI_DOUBLE, 0, comm));
  PetscCallMPI(sys_mpi_bcast(a.pos, PPO_ASYNC_MAX, MPI_DOUBLE, 0, comm));
  PetscCallMPI(sys_mpi_bcast(a.rows, PPO_ASYNC_MAX, MPI_DOUBLE, 0, comm));
  PetscCall(async_restore_shape(comm, path, o, &a));
  if (!q) {
    PetscCall(PetscFree(a.ppos));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  for (int j = 0; j < q->K; j++) /* the prompts' answers and indices, as when the batch was generated */
    if (a.have[j]) {
      int used;
      if (q->partial) { /* each row's own prompt, once its position is read */
        Rollout *r    = async_slot(q, from + j);
        r->async.batch      = from + j;
        r->dyn.rounds = 1;
        r->off.on = r->scored = PETSC_FALSE;
        continue;
      }
      PetscCall(prompts_next(ps, o, (int64_t)a.pos[j], 0, &used));
      PetscCall(async_keep_prompts(q, ps, from + j, (int64_t)a.pos[j]));
    }
  a.phase = 1;
  PetscCall(io_read_on_root(comm, "checkpoint", path, async_read, &a));
  if (q->partial && a.pool[0] > 0) {
    AsyncPool *p  = &q->pool;
    size_t     nT = (size_t)a.pool[3] * p->T;
    p->n          = (int)a.pool[3];
    PetscCall(io_bcast(p->tokens, nT, MPI_INT, comm));
    PetscCall(io_bcast(p->logprobs, nT, MPI_FLOAT, comm));
    PetscCall(io_bcast(p->tver, nT, MPI_INT, comm));
    PetscCall(io_bcast(p->prompt_len, (size_t)p->n, MPI_INT, comm));
    PetscCall(io_bcast(p->len, (size_t)p->n, MPI_INT, comm));
    PetscCall(io_bcast(p->eos, (size_t)p->n, MPI_INT, comm));
    PetscCall(io_bcast(p->done, (size_t)p->n, MPI_INT, comm));
    PetscCall(io_bcast(p->ppos, (size_t)p->n, MPI_INT64_T, comm));
    if (p->mcnt && p->n > 0) {
      long long nid = a.pool_nid;
      PetscCall(io_bcast(p->mcnt, nT, MPI_INT, comm));
      PetscCallMPI(sys_mpi_bcast(&nid, 1, MPI_LONG_LONG, 0, comm));
      if (!a.pool_ids) PetscCall(PetscMalloc1(nid + 1, &a.pool_ids));
      PetscCall(io_bcast(a.pool_ids, (size_t)nid, MPI_INT, comm));
      PetscCall(async_pool_masks_unpack(p, a.pool_ids, (size_t)nid));
    }
    PetscCall(async_pool_prompts(q, ps, o, NULL));
  }
  for (int j = 0; j < q->K; j++) {
    Rollout  *r  = async_slot(q, from + j);
    GenBatch *gb = &r->gen;
    size_t    BT = (size_t)r->B * r->T;

    if (!a.have[j]) continue;
    PetscCall(io_bcast(gb->tokens, BT, MPI_INT, comm));
    PetscCall(io_bcast(gb->logprobs, BT, MPI_FLOAT, comm));
    PetscCall(io_bcast(gb->prompt_len, (size_t)r->B, MPI_INT, comm));
    PetscCall(io_bcast(gb->response_len, (size_t)r->B, MPI_INT, comm));
    PetscCall(io_bcast(gb->eos, (size_t)r->B, MPI_INT, comm));
    PetscCall(io_bcast(r->async.version, (size_t)r->B, MPI_INT, comm));
    PetscCallMPI(sys_mpi_bcast(&r->episodes, 1, MPIU_BOOL, 0, comm));
    if (r->episodes) {
      PetscCall(io_bcast(gb->src, BT, MPI_UNSIGNED_CHAR, comm));
      PetscCall(io_bcast(gb->turns, (size_t)r->B, MPI_INT, comm));
      PetscCall(io_bcast(gb->obs_cut, (size_t)r->B, MPI_INT, comm));
      PetscCall(io_bcast(r->env.calls, (size_t)r->B, MPI_INT, comm));
      PetscCall(io_bcast(r->env.reward, (size_t)r->B, MPI_DOUBLE, comm));
      PetscCall(io_bcast(r->env.seconds, (size_t)r->B, MPI_DOUBLE, comm));
      PetscCall(io_bcast(r->env.at, BT, MPI_FLOAT, comm));
    }
    if (q->partial) {
      PetscCall(io_bcast(r->async.tver, BT, MPI_INT, comm));
      PetscCall(io_bcast(r->async.ppos, (size_t)r->B, MPI_INT64_T, comm));
      PetscCall(async_pool_prompts(q, ps, o, r));
    }
    if (gb->mask_off) {
      size_t nid;
      PetscCall(io_bcast(gb->mask_off, BT + 1, MPI_INT, comm));
      nid = (size_t)PetscMax(1, gb->mask_off[BT]);
      if (nid > gb->mask_cap) {
        PetscCall(PetscFree(gb->mask_ids));
        PetscCall(PetscMalloc1(nid, &gb->mask_ids));
        gb->mask_cap = nid;
      }
      PetscCall(io_bcast(gb->mask_ids, nid, MPI_INT, comm));
    }
    r->B = gb->n = r->Bcap;
    PetscCall(rollout_finish_gen(r));
    q->ready[(from + j) % q->n] = PETSC_TRUE;
    (*found)++;
  }
  PetscCall(PetscFree(a.ppos));
  PetscCall(PetscFree(a.pool_ids));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- every field checked before anything is written ------------------------------ */
/* A restart trusts what it reads back: a batch version of 99 gave staleness
 * -96, a pool's token version of 1000 and response length of 10000 went into
 * every later checkpoint, a missing batch was generated anew. So every
 * field of /async is checked against what this run can hold, on rank 0,
 * before the run writes anything; each refusal names the file and the field. */
typedef struct {
  const char *path;
  int64_t     from, data_pos; /* the checkpoint's iteration and prompt position */
  int         K, B, T, max_prompt, max_new, vocab, G, cap, used;
  PetscBool   partial, masked; /* -async_partial; the sampling options keep allowed sets */
  int        *ib;   /* room for ib_room ints (grown for allowed sets) */
  size_t      ib_room;
  float      *fb;   /* [cap or B, T] floats */
  PetscBool   episodes; /* -env: batches are multi-turn episodes */
  int         max_turns;
  PetscBool   reward_turn; /* -env_reward_at turn: the step rewards' positions (env_at) are needed */
} AsyncCheck;

/* Dataset name of group grp (n elements, rows of `cols`) into c->ib, each
 * within [lo, hi] (why: where the bounds come from). */
static PetscErrorCode check_ints(IoId h, AsyncCheck *c, const char *grp, const char *name, long long n, int cols,
                                 int64_t lo, int64_t hi, const char *why)
{
  PetscFunctionBegin;
  if ((size_t)n + 1 > c->ib_room) {
    PetscCall(PetscFree(c->ib));
    PetscCall(PetscMalloc1((size_t)n + 1, &c->ib));
    c->ib_room = (size_t)n + 1;
  }
  PetscCall(async_read_rows(h, c->path, name, IO_INT, c->ib, n));
  for (long long k = 0; k < n; k++) {
    if (c->ib[k] >= lo && c->ib[k] <= hi) continue;
    if (cols > 1)
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
              "-restart %s: /async/%s/%s[%lld, %lld] = %d is outside [%" PetscInt64_FMT ", %" PetscInt64_FMT "] (%s)",
              c->path, grp, name, k / cols, k % cols, c->ib[k], lo, hi, why);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
            "-restart %s: /async/%s/%s[%lld] = %d is outside [%" PetscInt64_FMT ", %" PetscInt64_FMT "] (%s)", c->path,
            grp, name, k, c->ib[k], lo, hi, why);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The rows of a batch or of the pool (n of them): tokens, log-probabilities,
 * lengths, flags, versions and prompt positions, and the allowed sets. */
static PetscErrorCode check_rows(IoId h, AsyncCheck *c, const char *grp, int n, int64_t vlo, PetscBool pool)
{
  long long nT = (long long)n * c->T;
  IoSize    dims[2] = {0, 0};
  IoId      t       = IO_NONE;
  char      where[PETSC_MAX_PATH_LEN + 64], why[160];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(where, sizeof where, "-restart %s: /async/%s", c->path, grp));
  PetscCall(io_dataset_open(h, where, "tokens", "tokens", IO_CLASS_INT, 0, 2, dims, &t));
  PetscCall(io_close(&t));
  PetscCheck((int)dims[1] == c->T, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "-restart %s: /async/%s/tokens has %llu positions per row, this run %d (its longest prompt, %d, plus "
             "-gen_max_new_tokens %d): restart it with the prompts and -gen_max_new_tokens it was written with",
             c->path, grp, (unsigned long long)dims[1], c->T, c->max_prompt, c->max_new);
  PetscCall(check_ints(h, c, grp, "tokens", nT, c->T, 0, c->vocab - 1, "the model's vocabulary"));
  PetscCall(async_read_rows(h, c->path, "logprobs", IO_FLOAT, c->fb, nT));
  for (long long k = 0; k < nT; k++) {
    char v[32];
    if (isfinite(c->fb[k]) && c->fb[k] <= 0) continue;
    snprintf(v, sizeof v, "%g", (double)c->fb[k]); /* PETSc's %g writes "nan." */
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
            "-restart %s: /async/%s/logprobs[%lld, %lld] = %s is not a log-probability", c->path, grp, k / c->T,
            k % c->T, v);
  }
  PetscCall(check_ints(h, c, grp, "prompt_lengths", n, 1, 1, c->max_prompt, "this run's prompts"));
  PetscCall(check_ints(h, c, grp, "response_lengths", n, 1, 0, c->max_new, "-gen_max_new_tokens"));
  PetscCall(check_ints(h, c, grp, "eos", n, 1, 0, 1, "a flag"));
  PetscCall(PetscSNPrintf(why, sizeof why,
                          "the weights of iterations up to the checkpoint's %" PetscInt64_FMT
                          " and at most -async_staleness %d before the batch",
                          c->from, c->K));
  if (pool) PetscCall(check_ints(h, c, grp, "ended", n, 1, 0, 1, "a flag"));
  else PetscCall(check_ints(h, c, grp, "versions", n, 1, vlo, c->from, why));
  if (c->partial) {
    PetscCall(check_ints(h, c, grp, "token_versions", nT, c->T, 0, c->from, "the checkpoint's iterations"));
    PetscCall(check_ints(h, c, grp, "prompt_positions", n, 1, 0, c->data_pos - 1,
                         "the prompts drawn before the checkpoint's data_pos"));
  }
  PetscCheck((io_dataset_npoints(h, pool ? "mask_counts" : "mask_off") >= 0) == c->masked, PETSC_COMM_SELF,
             PETSC_ERR_ARG_INCOMP,
             "-restart %s: /async/%s holds %s: restart it with the sampling options it was written with "
             "(-gen_top_k, -gen_top_p, -gen_min_new_tokens)",
             c->path, grp, c->masked ? "no allowed sets, which this run's sampling options keep" : "allowed sets");
  if (pool && io_dataset_npoints(h, "mask_counts") >= 0) {
    long long nid = 0;
    PetscCall(check_ints(h, c, grp, "mask_counts", nT, c->T, 0, c->vocab, "the model's vocabulary"));
    for (long long k = 0; k < nT; k++) nid += c->ib[k];
    PetscCall(check_ints(h, c, grp, "mask_ids", PetscMax(1, nid), 1, -c->vocab, c->vocab - 1,
                         "token ids, or -(EOS + 1)"));
  }
  if (!pool && io_dataset_npoints(h, "mask_off") >= 0) {
    long long nid;
    PetscCall(check_ints(h, c, grp, "mask_off", nT + 1, 1, 0, (long long)nT * c->vocab, "offsets"));
    for (long long k = 0; k < nT; k++)
      PetscCheck(c->ib[k] <= c->ib[k + 1] && c->ib[0] == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                 "-restart %s: /async/%s/mask_off[%lld] = %d does not follow %d (offsets rise from 0)", c->path, grp,
                 k + 1, c->ib[k + 1], c->ib[k]);
    nid = PetscMax(1, c->ib[nT]);
    PetscCall(check_ints(h, c, grp, "mask_ids", nid, 1, -c->vocab, c->vocab - 1, "token ids, or -(EOS + 1)"));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* check_episodes' rows, with room for n prompt and response lengths and values. */
static PetscErrorCode check_episode_rows(IoId h, AsyncCheck *c, const char *grp, int n, int *pl, int *rl, double *v)
{
  long long nT = (long long)n * c->T;

  PetscFunctionBegin;
  PetscCall(async_read_rows(h, c->path, "prompt_lengths", IO_INT, pl, n));
  PetscCall(async_read_rows(h, c->path, "response_lengths", IO_INT, rl, n));
  PetscCall(check_ints(h, c, grp, "source", nT, c->T, 0, 2, "0 prompt, 1 model, 2 environment"));
  for (long long k = 0; k < nT; k++) {
    int b = (int)(k / c->T), t = (int)(k % c->T), in = t >= pl[b] && t < pl[b] + rl[b];
    PetscCheck(in ? c->ib[k] != 0 && (t > pl[b] || c->ib[k] == 1) : c->ib[k] == 0, PETSC_COMM_SELF,
               PETSC_ERR_FILE_UNEXPECTED,
               "-restart %s: /async/%s/source[%d, %d] = %d: a response's tokens are the model's (1) or the "
               "environment's (2), the model's first; the prompt and what follows the response are 0",
               c->path, grp, b, t, c->ib[k]);
  }
  if (io_dataset_npoints(h, "env_at") >= 0) { /* step rewards: finite, on the model's tokens only */
    PetscCall(async_read_rows(h, c->path, "env_at", IO_FLOAT, c->fb, nT));
    for (long long k = 0; k < nT; k++)
      PetscCheck(isfinite(c->fb[k]) && (c->fb[k] == 0 || c->ib[k] == 1), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                 "-restart %s: /async/%s/env_at[%lld, %lld] = %g: a step reward is finite and sits on a model token",
                 c->path, grp, k / c->T, k % c->T, (double)c->fb[k]);
  } else
    PetscCheck(!c->reward_turn, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "-restart %s: /async/%s has no env_at (written before -env_reward_at): restart it with -env_reward_at "
               "end",
               c->path, grp);
  PetscCall(check_ints(h, c, grp, "turns", n, 1, 0, c->max_turns, "-env_max_turns"));
  PetscCall(check_ints(h, c, grp, "env_calls", n, 1, 0, c->max_turns, "-env_max_turns"));
  PetscCall(check_ints(h, c, grp, "obs_cut", n, 1, 0, INT32_MAX, "a count"));
  for (int f = 0; f < 2; f++) {
    const char *name = f ? "env_seconds" : "env_rewards";
    PetscCall(async_read_rows(h, c->path, name, IO_DOUBLE, v, n));
    for (int b = 0; b < n; b++) {
      char s[32];
      if (isfinite(v[b]) && (!f || v[b] >= 0)) continue;
      snprintf(s, sizeof s, "%g", v[b]);
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "-restart %s: /async/%s/%s[%d] = %s is not %s", c->path, grp,
              name, b, s, f ? "a time" : "a reward");
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A batch's episode fields (this run has -env; else there must be none):
 * each token's source (0 in the prompt and past the response, the model's
 * first, 1 or 2 within), turns, cut and calls within the limits, rewards
 * and seconds finite. */
static PetscErrorCode check_episodes(IoId h, AsyncCheck *c, const char *grp, int n)
{
  int           *pl, *rl;
  double        *v;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCheck((io_dataset_npoints(h, "source") >= 0) == c->episodes, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "-restart %s: /async/%s %s: restart it with the -env it was written with", c->path, grp,
             c->episodes ? "holds single responses (written without -env), this run makes episodes"
                         : "holds multi-turn episodes (written with -env)");
  if (!c->episodes) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc3(n, &pl, n, &rl, n, &v));
  ierr = check_episode_rows(h, c, grp, n, pl, rl, v); /* the buffers freed whatever it finds */
  PetscCall(PetscFree3(pl, rl, v));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_read(IoId file, void *ctx)
{
  AsyncCheck *c = (AsyncCheck *)ctx;
  IoId        g = IO_NONE;
  int         m = 0;

  PetscFunctionBegin;
  if (!io_is_group(file, "async")) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_group_open(file, "checkpoint", "async", &g));
  /* the batches a checkpoint holds are the first of its window: none missing before one that is there */
  for (int j = 0; j < c->K; j++) {
    char name[32];
    PetscCall(PetscSNPrintf(name, sizeof name, "batch_%" PetscInt64_FMT, c->from + j));
    if (!io_is_group(g, name)) continue;
    PetscCheck(m == j, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "-restart %s: /async holds %s but not batch_%" PetscInt64_FMT
               " before it: a generated batch is missing (restart from another checkpoint)",
               c->path, name, c->from + m);
    m++;
  }
  for (int j = 0; j < m; j++) {
    char    name[32];
    IoId    h = IO_NONE;
    int64_t b = c->from + j;
    double  pos;

    PetscCall(PetscSNPrintf(name, sizeof name, "batch_%" PetscInt64_FMT, b));
    PetscCall(io_group_open(g, "checkpoint /async", name, &h));
    PetscCall(check_rows(h, c, name, c->B, c->partial ? 0 : PetscMax(0, b - c->K), PETSC_FALSE));
    PetscCall(check_episodes(h, c, name, c->B));
    if (!c->partial) { /* its prompts, and those of the batches after it, end at the checkpoint's data_pos */
      PetscCall(io_attr_read_double(h, "checkpoint /async batch", "data_pos", &pos));
      PetscCheck(pos == (double)(c->data_pos - (int64_t)(m - j) * c->used), PETSC_COMM_SELF,
                 PETSC_ERR_FILE_UNEXPECTED,
                 "-restart %s: /async/%s data_pos = %.0f, expected %" PetscInt64_FMT " (%d batches of %d prompts "
                 "before /state data_pos %" PetscInt64_FMT "): a batch is missing or was changed",
                 c->path, name, pos, c->data_pos - (int64_t)(m - j) * c->used, m, c->used, c->data_pos);
    }
    PetscCall(io_close(&h));
  }
  if (c->partial && io_is_group(g, "pool")) {
    IoId   h = IO_NONE;
    double n;
    PetscCall(io_group_open(g, "checkpoint /async", "pool", &h));
    PetscCall(io_attr_read_double(h, "checkpoint /async/pool", "rows", &n));
    PetscCheck(n >= 0 && n <= c->cap && n == (double)((int)n) && (int)n % c->G == 0, PETSC_COMM_SELF,
               PETSC_ERR_FILE_UNEXPECTED,
               "-restart %s: /async/pool rows = %g is not a count of whole groups of %d up to the pool's %d rows",
               c->path, n, c->G, c->cap);
    if (n > 0) PetscCall(check_rows(h, c, "pool", (int)n, 0, PETSC_TRUE));
    PetscCall(io_close(&h));
  }
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode async_check(MPI_Comm comm, const char *path, const PPOOptions *o, int max_prompt, int vocab)
{
  CkptState  st;
  AsyncCheck c;
  int        found, rows;

  PetscFunctionBegin;
  PetscCall(ckpt_read_state(comm, path, &st));
  PetscCall(async_restore(comm, path, o, NULL, NULL, st.iteration, &found)); /* the staleness and the queue's shape */
  if (o->async_staleness <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  c = (AsyncCheck){path,
                   st.iteration,
                   st.data_pos,
                   (int)o->async_staleness,
                   (int)o->rollout_batch,
                   max_prompt + (int)o->gen.max_new_tokens,
                   max_prompt,
                   (int)o->gen.max_new_tokens,
                   vocab,
                   ppo_group_size(o),
                   ppo_partial_rows(o),
                   (int)(o->rollout_batch * PetscMax(1, o->dynamic_sampling) / ppo_group_size(o)),
                   (PetscBool)(o->async_partial > 0),
                   gen_masked(&o->gen),
                   NULL,
                   0,
                   NULL,
                   env_on(&o->env),
                   (int)o->env.max_turns,
                   (PetscBool)(o->env.reward_at == ENV_REWARD_TURN)};
  rows = PetscMax(c.B, c.cap);
  PetscCall(PetscMalloc1((size_t)rows * c.T + 1, &c.fb));
  {
    PetscErrorCode ierr = io_read_on_root(comm, "checkpoint", path, check_read, &c);
    PetscCall(PetscFree(c.ib));
    PetscCall(PetscFree(c.fb));
    PetscCall(ierr);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
