/* PPO's prompts: the training prompts of each iteration (the built-in
 * task's or a prompt file's, with their reference answers) and the held-out
 * set (the built-in task's held-out split or -ppo_eval_file), which
 * src/ppo/eval.c evaluates a policy on. */
#include "base.h"
#include <limits.h>
#include <math.h>
#include <string.h>


/* What every rank holds for the rollouts. Every rank holds the whole
 * rollout: tokens and at least seven float arrays over [B, T] (log-probs,
 * reference, values, rewards, advantages, returns, masks), 32 bytes per
 * position; -async_staleness K keeps K + 1 rollouts, each with two more float
 * arrays (the proximal log-probabilities, the behaviour weights);
 * -async_partial its pool, 20 bytes per position (tokens, versions,
 * log-probabilities, and each call's results); the candidates' reference
 * answers are kept for each of -ppo_dynamic_rounds. */
typedef struct {
  double T, rows, pos, need, pool, answers; /* pos and pool in positions, need and answers in bytes */
} RolloutMem;

static RolloutMem rollout_mem(const PPOOptions *o, int max_prompt)
{
  RolloutMem m;

  m.T       = (double)max_prompt + (double)o->gen.max_new_tokens;
  m.rows    = (double)o->rollout_batch * PetscMax(1, o->dynamic_sampling);
  m.pos     = m.rows * m.T;
  m.need    = (o->async_staleness ? 40.0 * (double)(o->async_staleness + 1) : 32.0) * m.pos;
  m.pool    = o->async_partial ? (double)ppo_partial_rows(o) * m.T : 0.0;
  m.answers = (double)PetscMax(1, o->dynamic_rounds) * m.rows * PPO_ANSWER_LEN;
  return m;
}

double ppo_rollout_bytes(const PPOOptions *o, int max_prompt)
{
  RolloutMem m = rollout_mem(o, max_prompt);
  return m.need + 20.0 * m.pool + m.answers;
}

/* A rollout batch (with -ppo_dynamic_sampling F, F times it) too large for memory would fail deep in an allocation
 * naming neither the option nor the size. The bytes above are a lower bound that never refuses a run that fits; the
 * positions must also fit the int the arrays are indexed with. */
static PetscErrorCode ppo_check_memory(const RunCtx *run, const PPOOptions *o, int max_prompt)
{
  RolloutMem m = rollout_mem(o, max_prompt);
  double     T = m.T, rows = m.rows, pos = m.pos, need = m.need, pool = m.pool, answers = m.answers;
  double     avail = sys_memory_available();
  char       a[32], b[32], batch[96];

  PetscFunctionBegin;
  if (o->dynamic_sampling)
    PetscCall(PetscSNPrintf(batch, sizeof batch,
                            "-rollout_batch %" PetscInt_FMT " x -ppo_dynamic_sampling %" PetscInt_FMT, o->rollout_batch,
                            o->dynamic_sampling));
  else if (o->async_staleness)
    PetscCall(PetscSNPrintf(batch, sizeof batch,
                            "-rollout_batch %" PetscInt_FMT " (x %" PetscInt_FMT
                            " rollouts for -async_staleness %" PetscInt_FMT ")",
                            o->rollout_batch, o->async_staleness + 1, o->async_staleness));
  else PetscCall(PetscSNPrintf(batch, sizeof batch, "-rollout_batch %" PetscInt_FMT, o->rollout_batch));
  PetscCheck(pos <= INT_MAX, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s x %.0f positions (the longest prompt plus -gen_max_new_tokens) is %.0f positions, more than the %d a "
             "rollout can index",
             batch, T, pos, INT_MAX);
  PetscCheck(need <= avail, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
             "%s needs at least %s per rank for its rollout (%.0f x %.0f positions), more than the %s this node has "
             "available",
             batch, sys_bytes_str(need, a, sizeof a), rows, T, sys_bytes_str(avail, b, sizeof b));
  PetscCheck(pool <= INT_MAX && need + 20.0 * pool <= avail, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
             "-async_partial_extra %" PetscInt_FMT " keeps a pool of %d rows x %.0f positions (%s per rank), more than "
             "%s",
             o->async_partial_extra, ppo_partial_rows(o), T, sys_bytes_str(20.0 * pool, a, sizeof a),
             pool > INT_MAX ? "the int positions a pool can index" : "this node has available beside the rollout");
  need += 20.0 * pool;
  PetscCheck(need + answers <= avail, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
             "-ppo_dynamic_rounds %" PetscInt_FMT " keeps %s of reference answers per rank (%" PetscInt_FMT
             " rounds x %.0f prompts x %d bytes), more than the %s this node has available beside the rollout",
             o->dynamic_rounds, sys_bytes_str(answers, a, sizeof a), o->dynamic_rounds, rows, PPO_ANSWER_LEN,
             sys_bytes_str(avail - need, b, sizeof b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The longest prompt of a prompt file (a row without prompt_lengths is all prompt). */
static int file_max_prompt(const TokenData *d)
{
  int m = 0;
  for (int i = 0; i < d->N; i++) m = PetscMax(m, d->prompt_lengths ? d->prompt_lengths[i] : d->lengths[i]);
  return m;
}

/* The held-out set: n prompts, each asked k times (request i*k+j). */
static PetscErrorCode evalset_setup(const RunCtx *run, const PPOOptions *o, PPOEvalSet *e)
{
  PetscFunctionBegin;
  e->k = (int)o->eval_samples;
  if (o->eval_file[0]) {
    PetscCall(data_read(run->comm, o->eval_file, &e->file));
    e->from_file = PETSC_TRUE;
    e->n         = PetscMin((int)o->eval_prompts, e->file.N);
    e->room      = file_max_prompt(&e->file);
    PetscCheck(e->room >= 1, PETSC_COMM_WORLD, PETSC_ERR_FILE_UNEXPECTED, "-ppo_eval_file %s: every prompt is empty",
               o->eval_file);
  } else {
    e->n    = (int)o->eval_prompts;
    e->room = task_max_prompt(&o->task);
  }
  PetscCall(PetscMalloc2((size_t)e->n * e->room + 1, &e->buf, (size_t)e->n * PPO_ANSWER_LEN + 1, &e->abuf));
  PetscCall(PetscMalloc4((size_t)e->n * e->k + 1, &e->req, (size_t)e->n * e->k + 1, &e->answer, (size_t)e->n * e->k + 1,
                         &e->meta, (size_t)e->n * e->k + 1, &e->pidx));
  for (int i = 0; i < e->n; i++) {
    int        *row = e->buf + (size_t)i * e->room, len;
    const char *ans = NULL, *meta = NULL;
    if (e->from_file) {
      len = e->file.prompt_lengths ? e->file.prompt_lengths[i] : e->file.lengths[i];
      PetscCall(PetscArraycpy(row, e->file.tokens + (size_t)i * e->file.T, len));
      if (e->file.answer.off) ans = io_text(&e->file.answer, i);
      if (e->file.metadata.off) meta = io_text(&e->file.metadata, i);
    } else {
      char *a = e->abuf + (size_t)i * PPO_ANSWER_LEN;
      len     = task_prompt(&o->task, TASK_SPLIT_EVAL, (uint64_t)i, row);
      if (task_answer(&o->task, TASK_SPLIT_EVAL, (uint64_t)i, a, PPO_ANSWER_LEN) >= 0) ans = a;
    }
    for (int j = 0; j < e->k; j++) {
      int q       = i * e->k + j;
      e->req[q]    = (GenRequest){q, row, len, 0, 0};
      e->answer[q] = ans;
      e->meta[q]   = meta;
      e->pidx[q]   = i;
    }
  }
  e->answers = (PetscBool)(e->n > 0 && e->answer[0] != NULL);
  e->gold    = e->answers                                        ? PPO_GOLD_ANSWER
               : !e->from_file && o->task.kind == TASK_KIND_SORT ? PPO_GOLD_SORT
                                                                 : PPO_GOLD_NONE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prompts_setup(const RunCtx *run, const PPOOptions *o, PromptSource *ps)
{
  int B; /* the candidates' prompts: set once ppo_check_memory has seen that they fit */

  PetscFunctionBegin;
  PetscCall(PetscMemzero(ps, sizeof *ps));
  if (!strcmp(o->prompts, "builtin"))
    PetscCall(
        task_check(&o->task, INT_MAX, INT_MAX, "actor_")); /* the task's own options, before any prompt is drawn */
  PetscCall(demo_source_setup(run->comm, o->prompts, &o->task, (uint64_t)run->seed, &ps->src));
  ps->room = demo_source_max_len(&ps->src);
  if (ps->src.builtin) {
    char a[PPO_ANSWER_LEN];
    ps->max_prompt = task_max_prompt(&o->task);
    ps->answers    = (PetscBool)(task_answer(&o->task, TASK_SPLIT_TRAIN, 0, a, sizeof a) >= 0);
  } else {
    ps->max_prompt = file_max_prompt(&ps->src.file);
    ps->answers    = (PetscBool)(ps->src.file.answer.off != NULL);
    PetscCheck(ps->max_prompt >= 1, PETSC_COMM_WORLD, PETSC_ERR_FILE_UNEXPECTED,
               "-ppo_prompts %s: every prompt is empty", o->prompts);
  }
  /* -mode eval of a held-out file generates from its prompts alone: the training prompts need no answers and set no
   * length */
  ps->eval_alone = o->eval_only && o->eval_file[0] ? PETSC_TRUE : PETSC_FALSE;
  PetscCheck(!reward_spec_needs_answer(&o->reward.spec) || ps->answers || ps->eval_alone, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_INCOMP,
             "-reward_fn %s compares responses with reference answers, but -ppo_prompts %s has none (a prompt file "
             "needs answer_bytes and answer_offsets, docs/formats.md; the built-in task: -task arith)",
             o->reward.fn, o->prompts);
  /* held-out prompts: a file's when given; the built-in task's when training on it */
  if (o->eval_file[0] || ps->src.builtin) PetscCall(evalset_setup(run, o, &ps->eval));
  PetscCheck(!reward_spec_needs_answer(&o->reward.spec) || !o->eval_file[0] || ps->eval.n == 0 || ps->eval.answers,
             PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-reward_fn %s compares responses with reference answers, but -ppo_eval_file %s has none (answer_bytes "
             "and answer_offsets, docs/formats.md)",
             o->reward.fn, o->eval_file);
  ps->max_prompt = ps->eval_alone ? ps->eval.room : PetscMax(ps->max_prompt, ps->eval.room);
  PetscCall(ppo_check_memory(run, o, ps->max_prompt));
  B = (int)(o->rollout_batch * PetscMax(1, o->dynamic_sampling));
  PetscCall(PetscMalloc2((size_t)B * ps->room, &ps->buf, B, &ps->req));
  PetscCall(PetscMalloc4(B, &ps->answer, B, &ps->meta, B, &ps->pidx,
                         (size_t)PetscMax(1, o->dynamic_rounds) * B * PPO_ANSWER_LEN, &ps->abuf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prompts_destroy(PromptSource *ps)
{
  PPOEvalSet *e = &ps->eval;

  PetscFunctionBegin;
  PetscCall(PetscFree2(ps->buf, ps->req));
  PetscCall(PetscFree4(ps->answer, ps->meta, ps->pidx, ps->abuf));
  PetscCall(demo_source_destroy(&ps->src));
  PetscCall(PetscFree2(e->buf, e->abuf));
  PetscCall(PetscFree4(e->req, e->answer, e->meta, e->pidx));
  if (e->from_file) PetscCall(data_free(&e->file));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prompts_at(PromptSource *ps, const PPOOptions *o, int64_t pos, int *row, int *len, char *abuf,
                          const char **answer, const char **meta, int64_t *pidx)
{
  int pl, n;

  PetscFunctionBegin;
  PetscCall(demo_source_get(&ps->src, (uint64_t)pos, ps->room, row, &n, &pl));
  *pidx   = demo_source_index(&ps->src, (uint64_t)pos); /* after the get: the epoch's order */
  *len    = pl <= 0 ? n : pl; /* a prompts file without prompt_lengths: the whole row */
  *answer = *meta = NULL;
  if (ps->src.builtin) {
    if (task_answer(&o->task, TASK_SPLIT_TRAIN, (uint64_t)pos, abuf, PPO_ANSWER_LEN) >= 0) *answer = abuf;
  } else {
    if (ps->src.file.answer.off) *answer = io_text(&ps->src.file.answer, (int)*pidx);
    if (ps->src.file.metadata.off) *meta = io_text(&ps->src.file.metadata, (int)*pidx);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prompts_next(PromptSource *ps, const PPOOptions *o, int64_t data_pos, int round, int *used)
{
  int B = (int)(o->rollout_batch * PetscMax(1, o->dynamic_sampling)), k = ppo_group_size(o);

  PetscFunctionBegin;
  for (int p = 0; p < B / k; p++) {
    int        *row = ps->buf + (size_t)p * ps->room, pl = 0;
    int64_t     idx = 0;
    const char *ans = NULL, *meta = NULL;

    PetscCall(prompts_at(ps, o, data_pos + p, row, &pl, ps->abuf + ((size_t)round * B + (size_t)p) * PPO_ANSWER_LEN,
                         &ans, &meta, &idx));
    for (int j = 0; j < k; j++) {
      ps->req[p * k + j]    = (GenRequest){round * B + p * k + j, row, pl, 0, 0};
      ps->answer[p * k + j] = ans;
      ps->meta[p * k + j]   = meta;
      ps->pidx[p * k + j]   = idx;
    }
  }
  *used = B / k;
  PetscFunctionReturn(PETSC_SUCCESS);
}
