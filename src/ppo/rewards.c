/* The rewards of a rollout besides the reward model: rule functions of the
 * response text against the prompt's reference answer (-reward_fn), a
 * user's reward command (-reward_command), the judge of each response
 * (gold: the sort task's score, or whether the answer is right) and the
 * final score that enters the advantages:
 *
 *   final = reward_model_weight * rl_final_score(RM score)   (with a reward model)
 *         + sum_i weight_i * rule_i(response, answer)        (-reward_fn)
 *         + reward_command_weight * command(sample)           (-reward_command)
 *         + overlong shaping                                  (-ppo_overlong_buffer)
 *
 * Rules and the judge run on every rank (each holds the whole rollout; the
 * same inputs give the same numbers everywhere, so the result does not
 * depend on the layout); the command runs on world rank 0, whose values and
 * outcome every rank then gets. */
#include "base.h"
#include <math.h>

PetscErrorCode ppo_rewards_setup(const RunCtx *run, const PPOOptions *o, const char *const *tables, int ntables,
                                 PetscBool builtin, PetscBool answers, PPORewards *rw)
{
  PetscBool found = PETSC_FALSE,
            need  = (PetscBool)(o->reward.spec.n > 0 || o->reward.command[0] || answers || env_on(&o->env));
  PetscMPIInt rank;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(rw, sizeof *rw));
  rw->gold = answers ? PPO_GOLD_ANSWER : builtin && o->task.kind == TASK_KIND_SORT ? PPO_GOLD_SORT : PPO_GOLD_NONE;
  if (!need) PetscFunctionReturn(PETSC_SUCCESS);
  /* the text of the tokens: the first checkpoint with /tokenizer, else the built-in task's characters */
  for (int k = 0; k < ntables && !found; k++)
    if (tables[k] && tables[k][0]) PetscCall(token_table_read(run->comm, tables[k], &rw->tt, &found));
  if (!found &&
      o->task.kind ==
          TASK_KIND_ARITH) { /* a model of the arithmetic task (-task arith), on its prompts or a file of them */
    PetscCall(token_table_from_strings(arith_vocab_size(), arith_vocab(), TASK_EOS, &rw->tt));
    found = PETSC_TRUE;
  }
  if (!found && !o->reward.spec.n && !o->reward.command[0]) { /* only the judge or an environment wanted the text:
                                                                 no accuracy then, ids alone */
    if (rw->gold == PPO_GOLD_ANSWER) rw->gold = PPO_GOLD_NONE;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCheck(found, run->comm, PETSC_ERR_ARG_INCOMP,
             "%s reads responses as text, but %s has no /tokenizer (docs/formats.md; tools/gguf_import.py writes one) "
             "and the task is not the built-in arithmetic one (-task arith)",
             o->reward.spec.n ? "-reward_fn" : "-reward_command",
             ntables && tables[0] && tables[0][0] ? tables[0] : "the actor's checkpoint");
  rw->have_tt = PETSC_TRUE;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (o->reward.command[0] && rank == 0 && !run->dry_run)
    PetscCall(reward_command_start(o->reward.command, o->reward.command_timeout, &rw->cmd));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_rewards_destroy(PPORewards *rw)
{
  PetscFunctionBegin;
  if (rw->cmd) PetscCall(reward_command_stop(&rw->cmd));
  PetscCall(token_table_destroy(&rw->tt));
  PetscCall(PetscFree(rw->text));
  PetscCall(PetscFree(rw->ptext));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The response of row b as text (without its final stop token); in an
 * episode its final answer: the model's tokens after the environment's
 * last answer. */
static const char *response_text(PPORewards *rw, const Rollout *r, int b, size_t *n)
{
  const int           *row = r->gen.tokens + (size_t)b * r->T;
  const unsigned char *src = r->gen.src + (size_t)b * r->T;
  int                  s = r->start[b], end = s + r->len[b];
  PetscBool            stop = (PetscBool)(r->gen.eos[b] != 0); /* the response ended with its stop token */
  if (r->episodes) { /* the model's last segment, whatever answer followed it (then it ended at a turn stop) */
    while (end > s && src[end - 1] != GEN_SRC_MODEL) end--, stop = PETSC_TRUE;
    for (int t = end; t > s; t--)
      if (src[t - 1] != GEN_SRC_MODEL) {
        s = t;
        break;
      }
  }
  if (stop && end > s) end--; /* without its final stop token */
  *n = token_table_decode(&rw->tt, row + s, end - s, &rw->text, &rw->cap);
  return rw->text;
}

/* World rank 0 asks the command for every row's reward; every rank gets
 * the values, or the command's one-line error, raised on all ranks. */
static PetscErrorCode rewards_command(PPORewards *rw, const PPOOptions *o, Rollout *r, int iteration)
{
  PetscMPIInt   rank;
  int           bad = 0;
  char          err[512] = "";
  double       *v;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  PetscCall(PetscMalloc1(r->B, &v));
  if (rank == 0) {
    RewardSample *s;
    char        **resp, **prom;

    PetscCall(PetscCalloc3(r->B, &s, r->B, &resp, r->B, &prom));
    for (int b = 0; b < r->B; b++) {
      size_t n;
      PetscCall(PetscStrallocpy(response_text(rw, r, b, &n), &resp[b]));
      TokenTable all = rw->tt;
      all.eos_id     = -1; /* a chat prompt holds end-of-turn tokens: all of it */
      token_table_decode(&all, r->gen.tokens + (size_t)b * r->T, r->start[b], &rw->ptext, &rw->pcap);
      PetscCall(PetscStrallocpy(rw->ptext, &prom[b]));
      s[b] = (RewardSample){ r->pidx ? r->pidx[b] : b, prom[b], resp[b], r->answer && r->answer[b] ? r->answer[b] : "",
                             r->meta && r->meta[b] ? r->meta[b] : "" };
    }
    bad = reward_command_score(rw->cmd, iteration, r->B, s, v, err, sizeof err);
    for (int b = 0; b < r->B; b++) {
      PetscCall(PetscFree(resp[b]));
      PetscCall(PetscFree(prom[b]));
    }
    PetscCall(PetscFree3(s, resp, prom));
  }
  PetscCallMPI(sys_mpi_bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
  PetscCallMPI(sys_mpi_bcast(err, sizeof err, MPI_CHAR, 0, MPI_COMM_WORLD));
  PetscCheck(!bad, PETSC_COMM_WORLD, PETSC_ERR_LIB, "%s", err);
  PetscCallMPI(sys_mpi_bcast(v, r->B, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  for (int b = 0; b < r->B; b++) {
    r->parts[(size_t)b * PPO_REWARD_PARTS + REWARD_NFN] = (float)v[b];
    r->rule[b] += (float)(o->reward.command_weight * v[b]);
  }
  PetscCall(PetscFree(v));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_rule_rewards(PPORewards *rw, const PPOOptions *o, Rollout *r, PPOGold gold)
{
  double part[REWARD_NFN];

  PetscFunctionBegin;
  for (size_t i = 0; i < (size_t)r->B * PPO_REWARD_PARTS; i++) r->parts[i] = NAN;
  for (int b = 0; b < r->B; b++) {
    const char *ans = r->answer && r->answer[b] ? r->answer[b] : "";
    const int  *row = r->gen.tokens + (size_t)b * r->T;
    size_t      n   = 0;
    const char *txt = rw->have_tt ? response_text(rw, r, b, &n) : "";

    r->rule[b] = 0;
    if (o->reward.spec.n) {
      r->rule[b] = (float)reward_spec_eval(&o->reward.spec, txt, n, r->gen.eos[b], rollout_model_len(r, b), ans,
                                           (int)o->reward.length_start, (int)o->gen.max_new_tokens, part);
      for (int k = 0; k < o->reward.spec.n; k++)
        r->parts[(size_t)b * PPO_REWARD_PARTS + o->reward.spec.fn[k]] = (float)part[k];
    }
    switch (gold) {
    case PPO_GOLD_SORT: r->gold[b] = (float)task_judge(row, r->start[b], row + r->start[b], r->len[b]); break;
    case PPO_GOLD_ANSWER: r->gold[b] = (float)reward_numeric(txt, n, ans); break;
    default: r->gold[b] = NAN;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rollout_command_rewards(PPORewards *rw, const PPOOptions *o, Rollout *r, int iteration)
{
  PetscFunctionBegin;
  if (o->reward.command[0]) PetscCall(rewards_command(rw, o, r, iteration));
  PetscFunctionReturn(PETSC_SUCCESS);
}

void rollout_final_scores(Rollout *r, const PPOOptions *o)
{
  for (int b = 0; b < r->B; b++) {
    double f = r->rule[b] + r->env.reward[b] +
               rl_overlong_penalty(rollout_model_len(r, b), (int)o->gen.max_new_tokens, (int)o->overlong_buffer,
                                   o->overlong_penalty);
    if (o->has_reward_model)
      f += o->reward.model_weight * rl_final_score(r->score[b], r->gen.eos[b], o->reward_clip, o->truncation_penalty);
    r->final[b] = (float)f;
  }
}

/* s as a C-like quoted string: quotes, backslashes and control bytes
 * escaped, so a sample is one line of the log. */
static PetscErrorCode show_quoted(const char *s, size_t n, char **out)
{
  char  *q;
  size_t k = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(4 * n + 3, &q));
  q[k++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') q[k++] = '\\', q[k++] = (char)c;
    else if (c == '\n') q[k++] = '\\', q[k++] = 'n';
    else if (c < 0x20 || c == 0x7f) k += (size_t)snprintf(q + k, 5, "\\x%02x", c);
    else q[k++] = (char)c;
  }
  q[k++] = '"';
  q[k]   = '\0';
  *out   = q;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Tokens as text through the table (all of them: a chat prompt holds
 * end-of-turn tokens), or as their ids without one. */
static PetscErrorCode show_tokens(PPORewards *rw, const int *tok, int n, char **out)
{
  PetscFunctionBegin;
  if (rw->have_tt) {
    TokenTable all = rw->tt;
    all.eos_id     = -1;
    size_t len     = token_table_decode(&all, tok, n, &rw->ptext, &rw->pcap);
    PetscCall(show_quoted(rw->ptext, len, out));
  } else {
    char  *q;
    size_t k = 0;
    PetscCall(PetscMalloc1(12 * (size_t)n + 3, &q));
    q[k++] = '[';
    for (int i = 0; i < n; i++) k += (size_t)snprintf(q + k, 13, i ? " %d" : "%d", tok[i]);
    q[k++] = ']';
    q[k]   = '\0';
    *out   = q;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_show_samples(PPORewards *rw, const Rollout *r, int n, const char *what)
{
  PetscMPIInt rank;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (rank) PetscFunctionReturn(PETSC_SUCCESS);
  for (int b = 0; b < n; b++) {
    const int *row = r->gen.tokens + (size_t)b * r->T;
    int        len = r->len[b] - (r->gen.eos[b] && r->len[b] > 0 ? 1 : 0); /* without the final stop token */
    char      *p, *s, *a = NULL, gold[32] = "";

    PetscCall(show_tokens(rw, row, r->start[b], &p));
    PetscCall(show_tokens(rw, row + r->start[b], len, &s));
    if (r->answer && r->answer[b]) PetscCall(show_quoted(r->answer[b], strlen(r->answer[b]), &a));
    if (!isnan(r->gold[b]))
      PetscCall(PetscSNPrintf(gold, sizeof gold, " | %s %.3f", a ? "correct" : "gold",
                              (double)r->gold[b])); /* with an answer: whether it is right */
    PetscCall(PetscPrintf(PETSC_COMM_SELF,
                          "      held-out %s sample %d: prompt %s | response %s%s | reward %+.3f%s%s%s\n", what, b, p,
                          s, r->gen.eos[b] ? "" : " (no stop token)", (double)r->final[b], gold, a ? " | answer " : "",
                          a ? a : ""));
    PetscCall(PetscFree(p));
    PetscCall(PetscFree(s));
    PetscCall(PetscFree(a));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
