/* Supervised fine-tuning (-mode sft): trains the policy on demonstrations
 * (loss on response tokens only), records every step, writes checkpoints and
 * resumes from them bit-exactly. */
#include "rl.h"
#include <math.h>

typedef struct {
  int    B, T;
  int   *tok, *target, *row; /* [B*T], [B*T], [T+1] */
  float *logprob, *dlogprob; /* [B*T] */
} SFTBatch;

PetscErrorCode sft_options(SFTOptions *o)
{
  PetscFunctionBegin;
  PetscCall(PetscStrncpy(o->data, "builtin", sizeof o->data));
  o->restart[0] = o->init[0] = '\0';
  PetscOptionsBegin(PETSC_COMM_WORLD, "sft_", "Supervised fine-tuning", NULL);
  RfOptInt("-steps", "Optimizer steps in total (a restart continues up to this count)", 200, &o->steps);
  RfOptInt("-batch", "Sequences per step", 16, &o->batch);
  RfOptInt("-seq_len", "Tokens per sequence (0: the longest sample, at most n_positions)", 0, &o->seq_len);
  RfOptString("-data", "Demonstrations: 'builtin' (the sort task) or an HDF5 dataset file", o->data, sizeof o->data);
  RfOptInt("-eval_every", "Held-out loss every N steps (0: never; built-in task only)", 0, &o->eval_every);
  RfOptInt("-eval_batches", "Batches in the held-out loss", 2, &o->eval_batches);
  PetscOptionsEnd();
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Checkpoints", NULL);
  RfOptInt("-checkpoint_every", "Write <output_dir>/ckpt_<step>.h5 every N steps (0: only final.h5)", 0, &o->checkpoint_every);
  RfOptString("-restart", "Resume from this checkpoint (weights, optimizer, step, data position, RNG key)", o->restart, sizeof o->restart);
  RfOptString("-init_checkpoint", "Initialise the weights (only) from this checkpoint", o->init, sizeof o->init);
  PetscOptionsEnd();
  PetscCall(gpt_config_set_from_options("policy_", &o->cfg));
  PetscCall(adamw_set_from_options("policy_", &o->opt));
  PetscCall(task_set_from_options(&o->task));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_check(SFTOptions *o, const DemoSource *src)
{
  int maxlen = demo_source_max_len(src);

  PetscFunctionBegin;
  PetscCall(gpt_config_check(&o->cfg, "policy_"));
  PetscCheck(o->cfg.head == GPT_HEAD_LM, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "-policy_head must be lm for -mode sft");
  PetscCheck(o->steps >= 0 && o->batch > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-sft_steps must be >= 0 and -sft_batch > 0");
  PetscCheck(o->checkpoint_every >= 0 && o->eval_every >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-checkpoint_every and -sft_eval_every must be >= 0");
  if (src->builtin) PetscCall(task_check(&o->task, o->cfg.vocab_size, o->cfg.n_positions, "policy_"));
  else {
    PetscCheck(src->file.vocab_size <= o->cfg.vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "data file %s has vocabulary %d, larger than -policy_vocab_size %d", src->path, src->file.vocab_size, o->cfg.vocab_size);
    PetscCheck(maxlen <= o->cfg.n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "data file %s has samples of %d tokens, more than -policy_n_positions %d", src->path, maxlen, o->cfg.n_positions);
  }
  if (o->seq_len == 0) o->seq_len = PetscMin(maxlen, o->cfg.n_positions);
  PetscCheck(o->seq_len >= 2 && o->seq_len <= o->cfg.n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-sft_seq_len %" PetscInt_FMT " must be in [2, -policy_n_positions %d]", o->seq_len, o->cfg.n_positions);
  /* inputs are tokens 0..T-1 and targets 1..T, so a sample of T+1 tokens fits */
  PetscCheck(o->seq_len + 1 >= maxlen, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-sft_seq_len %" PetscInt_FMT " is too short for the longest sample of -sft_data %s (%d tokens; needs at least %d)", o->seq_len, src->path, maxlen, maxlen - 1);
  PetscCheck(o->eval_every == 0 || src->builtin, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-sft_eval_every needs -sft_data builtin (held-out prompts come from the built-in task)");
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_batch_create(int B, int T, SFTBatch *b)
{
  PetscFunctionBegin;
  b->B = B;
  b->T = T;
  PetscCall(PetscMalloc5(B * T, &b->tok, B * T, &b->target, T + 1, &b->row, B * T, &b->logprob, B * T, &b->dlogprob));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_batch_destroy(SFTBatch *b)
{
  PetscFunctionBegin;
  PetscCall(PetscFree5(b->tok, b->target, b->row, b->logprob, b->dlogprob));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One row: the sample truncated to T inputs; targets are the next tokens of
 * the response only (-1 elsewhere, which the loss ignores). Returns the
 * number of trained positions. */
static int sft_fill_row(SFTBatch *b, int r, int len, int prompt_len)
{
  int n = 0, T = b->T, first = prompt_len > 1 ? prompt_len : 1;
  for (int t = 0; t < T; t++) {
    b->tok[r * T + t]    = t < len ? b->row[t] : TASK_PAD;
    b->target[r * T + t] = (t + 1 >= first && t + 1 < len) ? b->row[t + 1] : -1;
    n += b->target[r * T + t] >= 0;
  }
  return n;
}

static PetscErrorCode sft_fill_train(DemoSource *src, uint64_t pos, SFTBatch *b, int *ntrain)
{
  int len, pl;

  PetscFunctionBegin;
  *ntrain = 0;
  for (int r = 0; r < b->B; r++) {
    PetscCall(demo_source_get(src, pos + (uint64_t)r, b->T + 1, b->row, &len, &pl));
    *ntrain += sft_fill_row(b, r, len, pl);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_fill_eval(const SortTask *task, uint64_t pos, SFTBatch *b, int *ntrain)
{
  int pl;

  PetscFunctionBegin;
  *ntrain = 0;
  for (int r = 0; r < b->B; r++) {
    int len = task_demo(task, TASK_SPLIT_EVAL, pos + (uint64_t)r, b->row, &pl);
    *ntrain += sft_fill_row(b, r, PetscMin(len, b->T + 1), pl);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Mean negative log-likelihood over trained positions; fills dlogprob. */
static PetscErrorCode sft_loss(GPT *gpt, SFTBatch *b, int ntrain, double *loss)
{
  double sum = 0;

  PetscFunctionBegin;
  PetscCheck(ntrain > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "a batch has no response tokens to train on");
  PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
  PetscCall(gpt_forward(gpt, b->tok, b->B, b->T));
  PetscCall(gpt_logprobs(gpt, b->target, b->logprob));
  PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
  for (int n = 0; n < b->B * b->T; n++) {
    sum += b->logprob[n];
    b->dlogprob[n] = b->target[n] >= 0 ? -1.0f / (float)ntrain : 0.0f;
  }
  *loss = -sum / ntrain;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_eval(GPT *gpt, const SFTOptions *o, SFTBatch *b, double *loss)
{
  double total = 0;
  int    ntrain;

  PetscFunctionBegin;
  for (PetscInt k = 0; k < o->eval_batches; k++) {
    double l;
    PetscCall(sft_fill_eval(&o->task, (uint64_t)(k * b->B), b, &ntrain));
    PetscCall(sft_loss(gpt, b, ntrain, &l));
    total += l;
  }
  *loss = total / (double)o->eval_batches;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_checkpoint(const RunCtx *run, GPT *gpt, const char *name, const CkptState *st, RunRecord *rec)
{
  char      path[PETSC_MAX_PATH_LEN];
  CkptModel m  = {"policy", gpt, PETSC_TRUE, PETSC_FALSE};
  double    t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(sys_output_path(run, name, path, sizeof path));
  PetscCall(PetscLogEventBegin(sys_log.ckpt_write, 0, 0, 0, 0));
  PetscCall(ckpt_write(run->comm, path, &m, 1, st));
  PetscCall(PetscLogEventEnd(sys_log.ckpt_write, 0, 0, 0, 0));
  PetscCall(record_time(rec, "checkpoint", sys_wtime() - t0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Weights (and, for a restart, optimizer and state) from checkpoints. */
static PetscErrorCode sft_load(const RunCtx *run, const SFTOptions *o, GPT *gpt, CkptState *st)
{
  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.ckpt_read, 0, 0, 0, 0));
  if (o->restart[0]) {
    CkptModel m = {"policy", gpt, PETSC_TRUE, PETSC_FALSE};
    PetscCall(ckpt_read_model(run->comm, o->restart, &m));
    PetscCall(ckpt_read_state(run->comm, o->restart, st));
    PetscCheck(st->iteration <= o->steps, run->comm, PETSC_ERR_ARG_OUTOFRANGE, "-restart %s is at step %" PetscInt_FMT ", past -sft_steps %" PetscInt_FMT, o->restart, st->iteration, o->steps);
  } else if (o->init[0]) {
    CkptModel m = {"policy", gpt, PETSC_FALSE, PETSC_FALSE};
    PetscCall(ckpt_read_model(run->comm, o->init, &m));
  }
  PetscCall(PetscLogEventEnd(sys_log.ckpt_read, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_dry_run(const RunCtx *run, const SFTOptions *o, size_t nparams)
{
  char   a[32], b[32], c[32];
  double weights = 4.0 * (double)nparams * sizeof(float); /* params, grads, m, v */
  double acts    = (double)gpt_activation_bytes(&o->cfg, (int)o->batch, (int)o->seq_len);

  PetscFunctionBegin;
  PetscCall(PetscPrintf(run->comm, "dry run: policy %zu parameters; weights+grads+AdamW %s, activations (B=%" PetscInt_FMT ", T=%" PetscInt_FMT ") %s, total %s per rank\n", nparams, sys_bytes_str(weights, a, sizeof a), o->batch, o->seq_len, sys_bytes_str(acts, b, sizeof b), sys_bytes_str(weights + acts, c, sizeof c)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_step(GPT *gpt, const SFTOptions *o, DemoSource *src, SFTBatch *b, CkptState *st, RunRecord *rec, double *loss, PetscReal *lr, PetscReal *gnorm)
{
  int    ntrain;
  double t0 = sys_wtime(), t1, t2, t3;

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.data, 0, 0, 0, 0));
  PetscCall(sft_fill_train(src, (uint64_t)st->data_pos, b, &ntrain));
  PetscCall(PetscLogEventEnd(sys_log.data, 0, 0, 0, 0));
  st->data_pos += b->B;
  t1 = sys_wtime();
  PetscCall(sft_loss(gpt, b, ntrain, loss));
  PetscCheck(isfinite(*loss), PETSC_COMM_WORLD, PETSC_ERR_FP, "SFT loss is %g at step %" PetscInt_FMT, *loss, st->iteration);
  t2 = sys_wtime();
  PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
  PetscCall(gpt_zero_grad(gpt));
  PetscCall(gpt_backward_logprob(gpt, b->target, b->dlogprob));
  PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
  t3 = sys_wtime();
  PetscCall(PetscLogEventBegin(sys_log.optimizer, 0, 0, 0, 0));
  PetscCall(gpt_adamw_step(gpt, &o->opt, lr, gnorm));
  PetscCall(PetscLogEventEnd(sys_log.optimizer, 0, 0, 0, 0));
  PetscCheck(isfinite(*gnorm), PETSC_COMM_WORLD, PETSC_ERR_FP, "SFT gradient norm is %g at step %" PetscInt_FMT, (double)*gnorm, st->iteration);
  PetscCall(record_time(rec, "data", t1 - t0));
  PetscCall(record_time(rec, "forward", t2 - t1));
  PetscCall(record_time(rec, "backward", t3 - t2));
  PetscCall(record_time(rec, "optimizer", sys_wtime() - t3));
  st->iteration++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_train(const RunCtx *run, const SFTOptions *o, GPT *gpt, DemoSource *src, CkptState *st)
{
  RunRecord *rec;
  SFTBatch   b;
  char       name[64];

  PetscFunctionBegin;
  PetscCall(record_open(run, "sft", &rec));
  PetscCall(sft_batch_create((int)o->batch, (int)o->seq_len, &b));
  PetscCall(PetscPrintf(run->comm, "sft: %zu parameters, %" PetscInt_FMT " steps of %" PetscInt_FMT " x %" PetscInt_FMT " tokens, from step %" PetscInt_FMT "\n", gpt->nparams, o->steps, o->batch, o->seq_len, st->iteration));
  while (st->iteration < o->steps) {
    double    t0 = sys_wtime(), loss, eval = NAN, ms;
    PetscReal lr, gnorm;
    PetscCall(sft_step(gpt, o, src, &b, st, rec, &loss, &lr, &gnorm));
    if (o->eval_every && st->iteration % o->eval_every == 0) PetscCall(sft_eval(gpt, o, &b, &eval));
    ms = 1e3 * (sys_wtime() - t0);
    PetscCall(record_metric(rec, "loss", loss));
    PetscCall(record_metric(rec, "eval_loss", eval));
    PetscCall(record_metric(rec, "lr", lr));
    PetscCall(record_metric(rec, "grad_norm", gnorm));
    PetscCall(record_metric(rec, "tokens_per_s", b.B * b.T / (ms * 1e-3)));
    PetscCall(PetscPrintf(run->comm, "step %5" PetscInt_FMT "/%" PetscInt_FMT " | loss %.4f | lr %.3e | grad %.3f | %8.0f tok/s | %7.1f ms\n", st->iteration, o->steps, loss, lr, (double)gnorm, b.B * b.T / (ms * 1e-3), ms));
    if (!isnan(eval)) PetscCall(PetscPrintf(run->comm, "      held-out loss %.4f\n", eval));
    if (o->checkpoint_every && st->iteration % o->checkpoint_every == 0) {
      PetscCall(PetscSNPrintf(name, sizeof name, "ckpt_%06" PetscInt_FMT ".h5", st->iteration));
      PetscCall(sft_checkpoint(run, gpt, name, st, rec));
    }
    PetscCall(record_step(rec, st->iteration));
  }
  PetscCall(sft_checkpoint(run, gpt, "final.h5", st, rec));
  PetscCall(record_summary(rec, "steps", (double)st->iteration));
  PetscCall(sft_batch_destroy(&b));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sft_execute(const RunCtx *run, const Backend *be, SFTOptions *o)
{
  DemoSource src;
  GPT       *gpt;
  CkptState  st = {0, 0, run->seed, 0};

  PetscFunctionBegin;
  PetscCall(demo_source_setup(run->comm, o->data, &o->task, (uint64_t)run->seed, &src));
  PetscCall(sft_check(o, &src));
  PetscCall(gpt_create(&o->cfg, be, &gpt));
  if (run->dry_run) {
    PetscCall(sft_dry_run(run, o, gpt->nparams));
  } else {
    PetscCall(PetscLogStagePush(sys_log.sft));
    /* a checkpoint replaces every weight, so drawing them first would be wasted */
    if (!o->restart[0] && !o->init[0]) PetscCall(gpt_init_random(gpt, (uint64_t)run->seed));
    PetscCall(gpt_optim_init(gpt));
    PetscCall(sft_load(run, o, gpt, &st));
    src.seed = (uint64_t)st.seed;
    PetscCall(sys_mkdir_p(run->output_dir));
    PetscCall(sft_train(run, o, gpt, &src, &st));
    PetscCall(PetscLogStagePop());
  }
  PetscCall(gpt_destroy(&gpt));
  PetscCall(demo_source_destroy(&src));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sft_run(const RunCtx *run, const Backend *be)
{
  SFTOptions o;
  PetscBool  help;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&o, sizeof o));
  PetscCall(sft_options(&o));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(sys_options_check_unused());
  PetscCall(sft_execute(run, be, &o));
  PetscFunctionReturn(PETSC_SUCCESS);
}
