/* PPO's prompts and its held-out evaluation: the training prompts of each
 * iteration (the built-in task's or a prompt file's, with their reference
 * answers), the held-out set (the built-in task's held-out split or
 * -ppo_eval_file), and the evaluation of a policy on it: accuracy (pass@1
 * over every response), pass@k, the mean reward and the KL to the
 * reference. */
#include "ppo_impl.h"
#include <limits.h>
#include <math.h>
#include <string.h>

#define PPO_ANSWER_LEN     32         /* a built-in task's answer text, NUL included */
#define PPO_EVAL_ITERATION 0x45564100u /* "EVA": the same draws for every policy evaluated */

/* A rollout batch (with -ppo_dynamic_sampling F, F times it) too large for memory would fail deep in an allocation
 * naming neither the option nor the size. Every rank holds the whole
 * rollout: tokens and at least seven float arrays over [B, T] (log-probs,
 * reference, values, rewards, advantages, returns, masks), so 32 bytes per
 * position is a lower bound that never refuses a run that fits; its
 * positions must also fit the int the arrays are indexed with. The
 * candidates' reference answers are kept for each of -ppo_dynamic_rounds. */
static PetscErrorCode ppo_check_memory(const RunCtx *run, const PPOOptions *o, int max_prompt)
{
  double T = (double)max_prompt + (double)o->gen.max_new_tokens, rows = (double)o->rollout_batch * PetscMax(1, o->dynamic_sampling), pos = rows * T, need = 32.0 * pos, avail = sys_memory_available();
  double answers = (double)PetscMax(1, o->dynamic_rounds) * rows * PPO_ANSWER_LEN;
  char   a[32], b[32], batch[96];

  PetscFunctionBegin;
  if (o->dynamic_sampling) PetscCall(PetscSNPrintf(batch, sizeof batch, "-rollout_batch %" PetscInt_FMT " x -ppo_dynamic_sampling %" PetscInt_FMT, o->rollout_batch, o->dynamic_sampling));
  else PetscCall(PetscSNPrintf(batch, sizeof batch, "-rollout_batch %" PetscInt_FMT, o->rollout_batch));
  PetscCheck(pos <= INT_MAX, run->comm, PETSC_ERR_ARG_OUTOFRANGE, "%s x %.0f positions (the longest prompt plus -gen_max_new_tokens) is %.0f positions, more than the %d a rollout can index", batch, T, pos, INT_MAX);
  PetscCheck(need <= avail, run->comm, PETSC_ERR_ARG_OUTOFRANGE, "%s needs at least %s per rank for its rollout (%.0f x %.0f positions), more than the %s this node has available", batch, sys_bytes_str(need, a, sizeof a), rows, T, sys_bytes_str(avail, b, sizeof b));
  PetscCheck(need + answers <= avail, run->comm, PETSC_ERR_ARG_OUTOFRANGE, "-ppo_dynamic_rounds %" PetscInt_FMT " keeps %s of reference answers per rank (%" PetscInt_FMT " rounds x %.0f prompts x %d bytes), more than the %s this node has available beside the rollout", o->dynamic_rounds, sys_bytes_str(answers, a, sizeof a), o->dynamic_rounds, rows, PPO_ANSWER_LEN, sys_bytes_str(avail - need, b, sizeof b));
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
    PetscCheck(e->room >= 1, PETSC_COMM_WORLD, PETSC_ERR_FILE_UNEXPECTED, "-ppo_eval_file %s: every prompt is empty", o->eval_file);
  } else {
    e->n    = (int)o->eval_prompts;
    e->room = task_max_prompt(&o->task);
  }
  PetscCall(PetscMalloc2((size_t)e->n * e->room + 1, &e->buf, (size_t)e->n * PPO_ANSWER_LEN + 1, &e->abuf));
  PetscCall(PetscMalloc4((size_t)e->n * e->k + 1, &e->req, (size_t)e->n * e->k + 1, &e->answer, (size_t)e->n * e->k + 1, &e->meta, (size_t)e->n * e->k + 1, &e->pidx));
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
      e->req[q]    = (GenRequest){q, row, len};
      e->answer[q] = ans;
      e->meta[q]   = meta;
      e->pidx[q]   = i;
    }
  }
  e->answers = (PetscBool)(e->n > 0 && e->answer[0] != NULL);
  e->gold    = e->answers ? PPO_GOLD_ANSWER : !e->from_file && o->task.kind == TASK_KIND_SORT ? PPO_GOLD_SORT : PPO_GOLD_NONE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prompts_setup(const RunCtx *run, const PPOOptions *o, PromptSource *ps)
{
  int B; /* the candidates' prompts: set once ppo_check_memory has seen that they fit */

  PetscFunctionBegin;
  PetscCall(PetscMemzero(ps, sizeof *ps));
  if (!strcmp(o->prompts, "builtin")) PetscCall(task_check(&o->task, INT_MAX, INT_MAX, "actor_")); /* the task's own options, before any prompt is drawn */
  PetscCall(demo_source_setup(run->comm, o->prompts, &o->task, (uint64_t)run->seed, &ps->src));
  ps->room = demo_source_max_len(&ps->src);
  if (ps->src.builtin) {
    char a[PPO_ANSWER_LEN];
    ps->max_prompt = task_max_prompt(&o->task);
    ps->answers    = (PetscBool)(task_answer(&o->task, TASK_SPLIT_TRAIN, 0, a, sizeof a) >= 0);
  } else {
    ps->max_prompt = file_max_prompt(&ps->src.file);
    ps->answers    = (PetscBool)(ps->src.file.answer.off != NULL);
    PetscCheck(ps->max_prompt >= 1, PETSC_COMM_WORLD, PETSC_ERR_FILE_UNEXPECTED, "-ppo_prompts %s: every prompt is empty", o->prompts);
  }
  /* -mode eval of a held-out file generates from its prompts alone: the training prompts need no answers and set no length */
  ps->eval_alone = o->eval_only && o->eval_file[0] ? PETSC_TRUE : PETSC_FALSE;
  PetscCheck(!reward_spec_needs_answer(&o->reward_spec) || ps->answers || ps->eval_alone, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-reward_fn %s compares responses with reference answers, but -ppo_prompts %s has none (a prompt file needs answer_bytes and answer_offsets, docs/formats.md; the built-in task: -task arith)", o->reward_fn, o->prompts);
  /* held-out prompts: a file's when given; the built-in task's when training on it */
  if (o->eval_file[0] || ps->src.builtin) PetscCall(evalset_setup(run, o, &ps->eval));
  PetscCheck(!reward_spec_needs_answer(&o->reward_spec) || !o->eval_file[0] || ps->eval.n == 0 || ps->eval.answers, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-reward_fn %s compares responses with reference answers, but -ppo_eval_file %s has none (answer_bytes and answer_offsets, docs/formats.md)", o->reward_fn, o->eval_file);
  ps->max_prompt = ps->eval_alone ? ps->eval.room : PetscMax(ps->max_prompt, ps->eval.room);
  PetscCall(ppo_check_memory(run, o, ps->max_prompt));
  B = (int)(o->rollout_batch * PetscMax(1, o->dynamic_sampling));
  PetscCall(PetscMalloc2((size_t)B * ps->room, &ps->buf, B, &ps->req));
  PetscCall(PetscMalloc4(B, &ps->answer, B, &ps->meta, B, &ps->pidx, (size_t)PetscMax(1, o->dynamic_rounds) * B * PPO_ANSWER_LEN, &ps->abuf));
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

PetscErrorCode prompts_next(PromptSource *ps, const PPOOptions *o, int64_t data_pos, int round, int *used)
{
  int B = (int)(o->rollout_batch * PetscMax(1, o->dynamic_sampling)), k = o->algo != ALGO_PPO ? (int)o->group : 1;

  PetscFunctionBegin;
  for (int p = 0; p < B / k; p++) {
    int        *row = ps->buf + (size_t)p * ps->room, len, pl;
    uint64_t    pos = (uint64_t)(data_pos + p);
    int64_t     idx;
    const char *ans = NULL, *meta = NULL;

    PetscCall(demo_source_get(&ps->src, pos, ps->room, row, &len, &pl));
    idx = demo_source_index(&ps->src, pos); /* after the get: the epoch's order */
    if (pl <= 0) pl = len; /* a prompts file without prompt_lengths: the whole row */
    if (ps->src.builtin) {
      char *a = ps->abuf + ((size_t)round * B + (size_t)p) * PPO_ANSWER_LEN;
      if (task_answer(&o->task, TASK_SPLIT_TRAIN, pos, a, PPO_ANSWER_LEN) >= 0) ans = a;
    } else {
      if (ps->src.file.answer.off) ans = io_text(&ps->src.file.answer, (int)idx);
      if (ps->src.file.metadata.off) meta = io_text(&ps->src.file.metadata, (int)idx);
    }
    for (int j = 0; j < k; j++) {
      ps->req[p * k + j]    = (GenRequest){round * B + p * k + j, row, pl};
      ps->answer[p * k + j] = ans;
      ps->meta[p * k + j]   = meta;
      ps->pidx[p * k + j]   = idx;
    }
  }
  *used = B / k;
  PetscFunctionReturn(PETSC_SUCCESS);
}

double rollout_kl(const Rollout *r)
{
  double kl = 0;
  for (int b = 0; b < r->B; b++)
    for (int t = r->start[b]; t < r->start[b] + r->len[b]; t++) kl += (double)r->gen.logprobs[(size_t)b * r->T + t] - (double)r->ref[(size_t)b * r->T + t];
  return kl / r->B;
}

/* pass@k over prompts of k responses each: the share of prompts with at
 * least one right answer (gold 1); NaN without answers. */
static double pass_at_k(const Rollout *r, int n, int k)
{
  int hit = 0;
  for (int i = 0; i < n; i++) {
    int any = 0;
    for (int j = 0; j < k; j++) any |= r->gold[i * k + j] > 0.5f;
    hit += any;
  }
  return n ? (double)hit / n : NAN;
}

PetscErrorCode ppo_evaluate(DModel *policy, PPOModels *m, const PPOOptions *o, const PPOEvalSet *e, uint64_t seed, int max_prompt, PPOEval *ev)
{
  int       N = e->n * e->k;
  GenPart   part = {{0}, 0, 0, PETSC_FALSE, NULL};
  Rollout   r;
  PackBuf   pb;
  PetscBool offloaded = (PetscBool)(policy->host != NULL);
  double    s = 0;
  PPOGold   gold = e->gold == PPO_GOLD_ANSWER && !m->rew.have_tt ? PPO_GOLD_NONE : e->gold; /* answers need the text */

  PetscFunctionBegin;
  ev->gold = ev->kl = ev->pass_k = ev->reward = NAN;
  if (N == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(rollout_create(N, max_prompt + (int)o->gen.max_new_tokens, gen_masked(&o->gen), &r));
  r.answer = e->answer, r.meta = e->meta, r.pidx = e->pidx;
  PetscCall(packbuf_create(N, r.T, &pb));
  PetscCall(dmodel_acquire(policy));
  {
    GenConfig gen = o->gen; /* -ppo_eval_greedy: the most probable token, whatever training samples with */
    if (o->eval_greedy) gen.greedy = PETSC_TRUE;
    PetscCall(rollout_generate_part(policy, &gen, max_prompt, seed, PPO_EVAL_ITERATION, e->req, &r, &part));
  }
  if (offloaded) PetscCall(dmodel_release(policy, PETSC_TRUE));
  PetscCall(rollout_share_gen(policy->mesh, &part, &r));
  PetscCall(ppo_ref_call(m, o, &r, &pb, PetscMin(N, 64)));
  PetscCall(ppo_reward_call(m, o, &r, &pb, PetscMin(N, 64)));
  PetscCall(rollout_rule_rewards(&m->rew, o, &r, gold));
  PetscCall(rollout_command_rewards(&m->rew, o, &r, -1));
  rollout_final_scores(&r, o);
  for (int b = 0; b < N; b++) s += r.final[b];
  ev->reward = s / N;
  if (gold != PPO_GOLD_NONE) {
    double g = 0;
    for (int b = 0; b < N; b++) g += r.gold[b];
    ev->gold = g / N;
  }
  if (gold == PPO_GOLD_ANSWER) ev->pass_k = pass_at_k(&r, e->n, e->k);
  ev->kl = rollout_kl(&r);
  PetscCall(packbuf_destroy(&pb));
  PetscCall(rollout_destroy(&r));
  PetscFunctionReturn(PETSC_SUCCESS);
}
