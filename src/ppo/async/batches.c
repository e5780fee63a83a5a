/* What the loop and the iteration graph see of asynchronous RL: the batch
 * maker (PPOBatches) that trains iteration i on batch i, generated K
 * iterations before, while it generates batch i + K; and the hooks that put
 * the queue's and the pool's work into the graph's generation node and the
 * correction's weights before the advantages. */
#include "async.h"

typedef struct {
  AsyncQueue        q;
  const PPOOptions *o;
  PPOGraphHooks     hooks;
} AsyncBatches;

/* ---- the graph's hooks ---------------------------------------------------------- */
/* Partial rollouts: the pool's samples not yet ended, drawn with the
 * weights the iteration started with. */
static PetscErrorCode pool_generate(void *ctx, PPOGenArgs *a)
{
  AsyncBatches *ab = (AsyncBatches *)ctx;
  PetscFunctionBegin;
  PetscCall(async_pool_generate(&ab->q.pool, a->policy, a->o, a->max_prompt, a->seed, a->draw, a->part));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The batch known on the generating replicas (every replica's samples
 * gathered), so the frozen models' calls can run on it there. */
static PetscErrorCode pool_local(void *ctx, PPOGenArgs *a)
{
  AsyncBatches *ab = (AsyncBatches *)ctx;
  PetscFunctionBegin;
  PetscCall(async_pool_take_early(&ab->q, a->policy->mesh, a->o, a->part, a->version, a->r));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* On every rank: the results merged into the pool, the batch taken out
 * into its slot (which the pool marks ready). */
static PetscErrorCode pool_share(void *ctx, PPOGenArgs *a)
{
  AsyncBatches *ab = (AsyncBatches *)ctx;
  PetscFunctionBegin;
  PetscCall(async_pool_share(&ab->q, a->policy->mesh, a->o, a->part, a->version, a->r));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Whole samples: every row drawn by the weights the iteration started
 * with; the slot holds its batch now. */
static PetscErrorCode batch_shared(void *ctx, PPOGenArgs *a)
{
  AsyncBatches *ab = (AsyncBatches *)ctx;
  PetscFunctionBegin;
  for (int b = 0; b < a->r->B; b++) a->r->async.version[b] = a->version;
  ab->q.ready[a->r->async.batch % ab->q.n] = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The behaviour weights of the correction, before the advantages. */
static PetscErrorCode correction_weights(void *ctx, Rollout *r)
{
  AsyncBatches *ab = (AsyncBatches *)ctx;
  PetscFunctionBegin;
  PetscCall(async_weights(&ab->q, ab->o, r));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the batch maker ------------------------------------------------------------- */
/* Batch b's prompts into its slot: whole groups admitted to the pool
 * (partial rollouts, which advance data_pos by the prompts they start), or
 * the next prompts (*used of them). */
static PetscErrorCode admit(AsyncBatches *ab, PPOLoopEnv *e, int64_t b, int *used)
{
  PetscFunctionBegin;
  *used = 0;
  if (ab->q.partial) PetscCall(async_pool_admit(&ab->q, e->ps, e->o, b, &e->st->data_pos));
  else {
    PetscCall(prompts_next(e->ps, e->o, e->st->data_pos, 0, used));
    PetscCall(async_keep_prompts(&ab->q, e->ps, b, e->st->data_pos));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Trains on `cur` and generates `next` (either may be NULL). */
static PetscErrorCode iterate_on(AsyncBatches *ab, PPOLoopEnv *e, Rollout *cur, Rollout *next, PPOTrainStats *ts,
                                 StageTimes *tm)
{
  PPOIterSpec sp = { cur,         next,      cur ? cur->async.batch : 0, next ? next->async.batch : 0, PETSC_TRUE,
                     PETSC_FALSE, &ab->hooks };

  PetscFunctionBegin;
  sp.prox = (PetscBool)(cur && e->o->async_correction != ASYNC_NONE);
  PetscCall(ppo_iteration(e->m, e->o, e->ps, &sp, e->pb, e->st, ts, tm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The batches the first K iterations train on, generated with the weights
 * the loop starts from (those a restart read from its checkpoint are there
 * already). */
static PetscErrorCode start(PPOBatches *bt, PPOLoopEnv *e)
{
  AsyncBatches *ab   = (AsyncBatches *)bt->data;
  AsyncQueue   *q    = &ab->q;
  const char   *algo = ppo_algo(e->o)->name;
  double        t0   = sys_wtime();
  int           made = 0;
  char          d[32];

  PetscFunctionBegin;
  if (e->o->restart[0]) {
    int found;
    PetscCall(async_restore(e->run->comm, e->o->restart, e->o, e->ps, q, e->st->iteration, &found));
    if (found)
      PetscCall(PetscPrintf(e->run->comm, "%s: asynchronous, staleness %d: %d generated batches from %s\n", algo, q->K,
                            found, e->o->restart));
  }
  for (int64_t b = e->st->iteration; b < e->st->iteration + q->K && b < e->o->iterations; b++) {
    StageTimes    tm;
    PPOTrainStats ts;
    int           used;

    if (q->ready[b % q->n] && async_slot(q, b)->async.batch == b) continue;
    PetscCall(admit(ab, e, b, &used));
    PetscCall(iterate_on(ab, e, NULL, async_slot(q, b), &ts, &tm));
    e->st->data_pos += used;
    made++;
  }
  if (made)
    PetscCall(PetscPrintf(e->run->comm, "%s: asynchronous, staleness %d: the first %d batches generated in %s\n", algo,
                          q->K, made, sys_duration_str(sys_wtime() - t0, d, sizeof d)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Trains on batch it (generated earlier) and generates batch it + K. */
static PetscErrorCode iterate(PPOBatches *bt, PPOLoopEnv *e, Rollout **r, PPOTrainStats *ts, StageTimes *tm)
{
  AsyncBatches *ab   = (AsyncBatches *)bt->data;
  AsyncQueue   *q    = &ab->q;
  int64_t       it   = e->st->iteration;
  Rollout      *next = NULL;
  int           used = 0;

  PetscFunctionBegin;
  *r = async_slot(q, it);
  PetscCheck(q->ready[it % q->n] && (*r)->async.batch == it, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "asynchronous queue: batch %" PetscInt64_FMT " is not there", it);
  if (it + q->K < e->o->iterations) {
    PetscCall(admit(ab, e, it + q->K, &used));
    next = async_slot(q, it + q->K);
  }
  PetscCall(iterate_on(ab, e, *r, next, ts, tm));
  e->st->data_pos += used;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode record(PPOBatches *bt, RunRecord *rec, const Rollout *r, int64_t it, const StageTimes *tm,
                             const PPOTrainStats *ts, double iter_s, char *more, size_t len)
{
  AsyncBatches *ab = (AsyncBatches *)bt->data;
  PetscFunctionBegin;
  PetscCall(async_record(rec, &ab->q, r, it, tm->gen, ts->t_actor + ts->t_critic, iter_s, more, len));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The generated batches not yet trained on (at the end: none, but the
 * staleness, for a restart with more iterations). */
static void carry(PPOBatches *bt, int64_t from, CkptCarry *c)
{
  AsyncBatches *ab = (AsyncBatches *)bt->data;
  async_checkpoint_carry(&ab->q, from, c);
}

static PetscErrorCode destroy(PPOBatches *bt)
{
  AsyncBatches *ab = (AsyncBatches *)bt->data;
  PetscFunctionBegin;
  PetscCall(async_destroy(&ab->q));
  PetscCall(PetscFree(bt->data));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const PPOBatchOps async_ops = {start, iterate, record, carry, destroy};

PetscErrorCode async_batches_create(const PPOOptions *o, int T, PPOBatches *bt)
{
  AsyncBatches *ab;

  PetscFunctionBegin;
  PetscCall(PetscNew(&ab));
  PetscCall(async_create(o, (int)o->rollout_batch, T, gen_masked(&o->gen), &ab->q));
  ab->o           = o;
  ab->hooks.ctx   = ab;
  ab->hooks.advantages = correction_weights;
  if (ab->q.partial) ab->hooks.generate = pool_generate, ab->hooks.local = pool_local, ab->hooks.share = pool_share;
  else ab->hooks.shared = batch_shared;
  bt->ops  = &async_ops;
  bt->data = ab;
  PetscFunctionReturn(PETSC_SUCCESS);
}
