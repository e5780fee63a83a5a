/* Supervised fine-tuning (-mode sft): trains the policy on demonstrations
 * (loss on response tokens only) on the sft_train call's mesh, records every
 * step, writes checkpoints and resumes from them bit-exactly. */
#include "train.h"
#include "jobs.h"
#include "search.h"
#include <limits.h>
#include <math.h>

typedef struct {
  int    B, T;
  int   *tok, *target, *row; /* [B*T], [B*T], [T+1] */
  unsigned char *src;        /* [T+1]: row's sources (GEN_SRC_*) */
  float *logprob, *dlogprob; /* [B*T] */
  int    ntrain;             /* trained positions in the whole batch */
} SFTBatch;

/* One pass over a batch on the mesh: the replica's rows in micro-batches. */
typedef struct {
  SFTBatch  *b;
  MicroSplit split;
  double     sum;     /* log-probabilities of trained positions (last stage) */
  double     time[2]; /* seconds in forwards and backwards on this rank */
} SFTPass;

/* The files it reads, for io_files_check. */
const IoFileOption sft_file_options[] = {
  {"-init_checkpoint", IO_FILE_IN, NULL, NULL},
  {"-sft_data", IO_FILE_IN, "builtin", NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

PetscErrorCode sft_options(const TrainJobOptions *job, SFTOptions *o)
{
  PetscFunctionBegin;
  PetscCall(PetscStrncpy(o->data, "builtin", sizeof o->data));
  o->restart[0] = o->init[0] = '\0';
  PetscOptionsBegin(PETSC_COMM_WORLD, "sft_", "Supervised fine-tuning", NULL);
  RfOptInt("-steps", "Optimizer steps in total (a restart continues up to this count)", 200, &o->steps);
  RfOptInt("-batch", "Sequences per step", 16, &o->batch);
  RfOptInt("-seq_len", "Tokens per sequence (0: the longest sample, at most n_positions)", 0, &o->seq_len);
  RfOptString("-data", "Demonstrations: 'builtin' (the task -task chooses) or an HDF5 dataset file", o->data,
              sizeof o->data);
  RfOptInt("-eval_every", "Held-out loss every N steps (0: never; built-in task only)", 0, &o->eval_every);
  RfOptInt("-eval_batches", "Batches in the held-out loss", 2, &o->eval_batches);
  PetscOptionsEnd();
  /* a title of its own: -help prints a (prefix, title) section only once, and
   * "Checkpoints" (-checkpoint_every, -restart) came first, hiding this one */
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Supervised fine-tuning: initial weights", NULL);
  RfOptString("-init_checkpoint", "Initialise the weights (only) from this checkpoint", o->init, sizeof o->init);
  PetscOptionsEnd();
  PetscCall(PetscStrncpy(o->restart, job->restart, sizeof o->restart));
  PetscCall(train_stage_checkpoint_every(job, "sft", "step", &o->checkpoint_every, &o->checkpoint_minutes));
  PetscCall(model_config_set_from_options("policy_", &o->cfg));
  { /* starting from a checkpoint with no architecture option given: the file's */
    const char *from = o->restart[0] ? o->restart : o->init;
    PetscBool   given, help;
    PetscCall(model_config_options_given("policy_", &given));
    PetscCall(PetscOptionsHasHelp(NULL, &help));
    if (from[0] && !given && !help && strcmp(from, "latest")) {
      PetscCall(ckpt_read_config(PETSC_COMM_WORLD, from, "policy", &o->cfg));
      PetscCall(model_config_record("policy_", &o->cfg));
    }
  }
  PetscCall(adamw_set_from_options("policy_", &o->opt));
  PetscCall(task_set_from_options(&o->task));
  o->plan = job->plan; /* read once for every stage (-fuse_* included) */
  if (o->plan.placement == PLACEMENT_AUTO) PetscCall(search_auto_options());
  PetscCall(trainer_options(&o->sched));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A row trains the tokens after its prompt (sft_fill_row); a file without
 * one such token anywhere would stop at its first batch with a message that
 * could not name the file. */
static PetscErrorCode sft_check_responses(const DemoSource *src)
{
  const TokenData *d = &src->file;

  PetscFunctionBegin;
  for (int b = 0; b < d->N; b++)
    if (d->lengths[b] > PetscMax(d->prompt_lengths ? d->prompt_lengths[b] : 0, 1)) PetscFunctionReturn(PETSC_SUCCESS);
  SETERRQ(PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
          "-sft_data %s: none of its %d rows has response tokens (each row's /prompt_lengths covers its /lengths): "
          "nothing to train on",
          src->path, d->N);
}

static PetscErrorCode sft_check(SFTOptions *o, const DemoSource *src)
{
  int maxlen = demo_source_max_len(src);

  PetscFunctionBegin;
  PetscCall(model_config_check(&o->cfg, "policy_"));
  PetscCheck(o->cfg.head == MODEL_HEAD_LM, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-policy_head must be lm for -mode sft");
  PetscCheck(o->steps >= 0 && o->batch > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-sft_steps must be >= 0 and -sft_batch > 0");
  PetscCheck(o->checkpoint_every >= 0 && o->eval_every >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-sft_checkpoint_every (or -checkpoint_every) and -sft_eval_every must be >= 0");
  if (src->builtin) PetscCall(task_check(&o->task, o->cfg.vocab_size, o->cfg.n_positions, "policy_"));
  else {
    PetscCheck(src->file.vocab_size <= o->cfg.vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "data file %s has vocabulary %d, larger than -policy_vocab_size %d", src->path, src->file.vocab_size,
               o->cfg.vocab_size);
    PetscCheck(maxlen <= o->cfg.n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "data file %s has samples of %d tokens, more than -policy_n_positions %d", src->path, maxlen,
               o->cfg.n_positions);
    PetscCall(sft_check_responses(src));
  }
  if (o->seq_len == 0) o->seq_len = PetscMin(maxlen, o->cfg.n_positions);
  PetscCheck(o->seq_len >= 2 && o->seq_len <= o->cfg.n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-sft_seq_len %" PetscInt_FMT " must be in [2, -policy_n_positions %d]", o->seq_len, o->cfg.n_positions);
  /* inputs are tokens 0..T-1 and targets 1..T, so a sample of T+1 tokens fits */
  PetscCheck(o->seq_len + 1 >= maxlen, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-sft_seq_len %" PetscInt_FMT
             " is too short for the longest sample of -sft_data %s (%d tokens; needs at least %d)",
             o->seq_len, src->path, maxlen, maxlen - 1);
  PetscCheck(o->eval_every == 0 || src->builtin, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-sft_eval_every needs -sft_data builtin (held-out prompts come from the built-in task)");
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_batch_create(int B, int T, SFTBatch *b)
{
  PetscFunctionBegin;
  b->B = B;
  b->T = T;
  PetscCall(PetscMalloc5(B * T, &b->tok, B * T, &b->target, T + 1, &b->row, B * T, &b->logprob, B * T, &b->dlogprob));
  PetscCall(PetscMalloc1(T + 1, &b->src));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_batch_destroy(SFTBatch *b)
{
  PetscFunctionBegin;
  PetscCall(PetscFree5(b->tok, b->target, b->row, b->logprob, b->dlogprob));
  PetscCall(PetscFree(b->src));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One row: the sample truncated to T inputs; targets are the next tokens of
 * the response only, and of an episode the model's tokens only (-1
 * elsewhere, which the loss ignores: an environment's answer in a
 * demonstration is context, not something to learn to say). Returns the
 * number of trained positions. */
static int sft_fill_row(SFTBatch *b, int r, int len, int prompt_len)
{
  int n = 0, T = b->T, first = prompt_len > 1 ? prompt_len : 1;
  for (int t = 0; t < T; t++) {
    b->tok[r * T + t]    = t < len ? b->row[t] : TASK_PAD;
    b->target[r * T + t] = (t + 1 >= first && t + 1 < len && b->src[t + 1] != GEN_SRC_ENV) ? b->row[t + 1] : -1;
    n += b->target[r * T + t] >= 0;
  }
  return n;
}

static PetscErrorCode sft_fill_train(DemoSource *src, uint64_t pos, SFTBatch *b)
{
  int len, pl;

  PetscFunctionBegin;
  b->ntrain = 0;
  for (int r = 0; r < b->B; r++) {
    PetscCall(demo_source_get_src(src, pos + (uint64_t)r, b->T + 1, b->row, &len, &pl, b->src));
    b->ntrain += sft_fill_row(b, r, len, pl);
  }
  PetscCheck(b->ntrain > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-sft_data %s: the batch of samples %llu to %llu has no response tokens to train on (too many rows whose "
             "/prompt_lengths covers its /lengths; a larger -sft_batch mixes in more rows)",
             src->path, (unsigned long long)pos, (unsigned long long)(pos + (uint64_t)b->B - 1));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_fill_eval(const BuiltinTask *task, uint64_t pos, SFTBatch *b)
{
  int pl;

  PetscFunctionBegin;
  b->ntrain = 0;
  for (int r = 0; r < b->B; r++) {
    int len = task_demo_src(task, TASK_SPLIT_EVAL, pos + (uint64_t)r, b->row, &pl, b->src);
    b->ntrain += sft_fill_row(b, r, PetscMin(len, b->T + 1), pl);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Forward of micro-batch k; the last stage adds its log-probabilities and
 * sets d loss / d logprob of the batch mean over trained positions. */
static PetscErrorCode sft_forward(void *ctx, Model *lm, int k)
{
  SFTPass  *p = (SFTPass *)ctx;
  SFTBatch *b = p->b;
  double    t0 = sys_wtime();
  int       r0, nb;
  size_t    off;

  PetscFunctionBegin;
  trainer_micro(&p->split, k, &r0, &nb);
  off = (size_t)r0 * b->T;
  PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
  PetscCall(model_forward(lm, b->tok + off, nb, b->T));
  if (model_last_stage(lm)) {
    PetscCall(model_logprobs(lm, b->target + off, b->logprob + off));
    for (size_t n = off; n < off + (size_t)nb * b->T; n++) {
      p->sum += b->logprob[n];
      b->dlogprob[n] = b->target[n] >= 0 ? -1.0f / (float)b->ntrain : 0.0f;
    }
  }
  PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
  p->time[0] += sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_backward(void *ctx, Model *lm, int k)
{
  SFTPass  *p    = (SFTPass *)ctx;
  PetscBool last = model_last_stage(lm);
  double    t0   = sys_wtime();
  int       r0, nb;
  size_t    off;

  PetscFunctionBegin;
  trainer_micro(&p->split, k, &r0, &nb);
  off = (size_t)r0 * p->b->T;
  PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
  PetscCall(model_backward_logprob(lm, last ? p->b->target + off : NULL, last ? p->b->dlogprob + off : NULL));
  PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
  p->time[1] += sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Mean negative log-likelihood of the batch over its trained positions; with
 * train, the gradients accumulate (zeroed first) for the step. time gets the
 * forward and backward seconds, the longest over the ranks. */
static PetscErrorCode sft_pass(Trainer *tr, SFTBatch *b, PetscBool train, double *loss, double time[2])
{
  SFTPass   p = {b, {0, 0, 1, 0}, 0, {0, 0}};
  TrainWork w = {sft_forward, train ? sft_backward : NULL, &p, &p.sum, 1};

  PetscFunctionBegin;
  PetscCheck(b->ntrain > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "a batch has no response tokens to train on");
  trainer_split(tr, b->B, 0, &p.split);
  PetscCall(trainer_pass(tr, &p.split, &w));
  *loss = -p.sum / b->ntrain;
  if (time) {
    PetscCallMPI(sys_mpi_allreduce(p.time, time, 2, MPI_DOUBLE, MPI_MAX, PETSC_COMM_WORLD));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_eval(Trainer *tr, const SFTOptions *o, SFTBatch *b, double *loss)
{
  double total = 0;

  PetscFunctionBegin;
  for (PetscInt k = 0; k < o->eval_batches; k++) {
    double l;
    PetscCall(sft_fill_eval(&o->task, (uint64_t)(k * b->B), b));
    PetscCall(sft_pass(tr, b, PETSC_FALSE, &l, NULL));
    total += l;
  }
  *loss = total / (double)o->eval_batches;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Weights (and, for a restart, optimizer and state) from checkpoints, read
 * whole and cut into this rank's shard; otherwise the random draw, which is
 * the same on every layout. */
static PetscErrorCode sft_load(const RunCtx *run, const SFTOptions *o, Trainer *tr, CkptState *st)
{
  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.ckpt_read, 0, 0, 0, 0));
  if (o->restart[0]) {
    PetscCall(trainer_restart(tr, run, o->restart, o->steps, "-sft_steps", st));
  } else if (o->init[0]) {
    PetscCall(dmodel_load(tr->dm, o->init, "policy", PETSC_FALSE, PETSC_FALSE, 0));
  } else if (tr->dm->lm) PetscCall(model_init_random(tr->dm->lm, (uint64_t)run->seed));
  PetscCall(PetscLogEventEnd(sys_log.ckpt_read, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_dry_run(const RunCtx *run, const SFTOptions *o, size_t nparams)
{
  char   a[32], b[32], c[32];
  double weights, acts; /* params, grads, m, v (and kept bf16 copies); activations */

  PetscFunctionBegin;
  PetscCall(model_training_bytes(&o->cfg, run->be, (int)o->batch, (int)o->seq_len, &weights, &acts));
  PetscCall(PetscPrintf(run->comm,
                        "dry run: policy %zu parameters; weights+grads+AdamW%s %s, activations (B=%" PetscInt_FMT
                        ", T=%" PetscInt_FMT ") %s, total %s on one rank (the plan divides them)\n",
                        nparams, backend_weight_copy_bytes(run->be) > 0 ? "+bf16 copies" : "",
                        sys_bytes_str(weights, a, sizeof a), o->batch, o->seq_len, sys_bytes_str(acts, b, sizeof b),
                        sys_bytes_str(weights + acts, c, sizeof c)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A batch too large for memory would fail deep in an allocation naming
 * neither the option nor the size. Every rank holds the whole batch's
 * buffers in host memory; weights and activations at least their 1/world
 * share (the dry run's numbers) in the memory of the backend's arrays: the
 * host's on the cpu, the GPU's on cuda (its free memory now; ranks that
 * share a GPU each see the same), so this lower bound never refuses a run
 * that fits. */
static PetscErrorCode sft_check_memory(const RunCtx *run, const SFTOptions *o)
{
  double weights, acts, model, need,
      avail = sys_memory_available(),
      batch = 16.0 * (double)o->batch * (double)o->seq_len; /* tokens, targets, log-probabilities and their gradients */
  double    dev_avail;
  PetscBool host = (PetscBool)(run->be == backend_cpu());
  char      a[32], b[32];

  PetscFunctionBegin;
  PetscCall(model_training_bytes(&o->cfg, run->be, (int)o->batch, (int)o->seq_len, &weights, &acts));
  model = (weights + acts) / run->size;
  need  = batch + (host ? model : 0.0);
  PetscCheck(need <= avail && (double)o->batch * (double)o->seq_len <= INT_MAX, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
             "-sft_batch %" PetscInt_FMT " needs at least %s per rank (%" PetscInt_FMT " x %" PetscInt_FMT
             " tokens; see -dry_run), more than the %s this node has available",
             o->batch, sys_bytes_str(need, a, sizeof a), o->batch, o->seq_len, sys_bytes_str(avail, b, sizeof b));
  if (host) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(backend_mem_free(run->be, &dev_avail));
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, &dev_avail, 1, MPI_DOUBLE, MPI_MIN, run->comm));
  PetscCheck(model <= dev_avail, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
             "-sft_batch %" PetscInt_FMT " needs at least %s of device memory per rank (%" PetscInt_FMT
             " x %" PetscInt_FMT " tokens; see -dry_run), more than the %s free on the fullest rank's GPU",
             o->batch, sys_bytes_str(model, a, sizeof a), o->batch, o->seq_len, sys_bytes_str(dev_avail, b, sizeof b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_step(Trainer *tr, const SFTOptions *o, DemoSource *src, SFTBatch *b, CkptState *st,
                               RunRecord *rec, double *loss, PetscReal *lr, PetscReal *gnorm)
{
  double t0 = sys_wtime(), t1, t2, time[2];
  char   at[64];

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.data, 0, 0, 0, 0));
  PetscCall(sft_fill_train(src, (uint64_t)st->data_pos, b));
  PetscCall(PetscLogEventEnd(sys_log.data, 0, 0, 0, 0));
  st->data_pos += b->B;
  t1 = sys_wtime();
  PetscCall(sft_pass(tr, b, PETSC_TRUE, loss, time));
  t2 = sys_wtime();
  PetscCall(PetscSNPrintf(at, sizeof at, "step %" PetscInt_FMT, st->iteration));
  PetscCall(trainer_step(tr, &o->opt, "SFT", at, *loss, lr, gnorm));
  PetscCall(record_time(rec, "data", t1 - t0));
  PetscCall(record_time(rec, "forward", time[0]));
  PetscCall(record_time(rec, "backward", time[1]));
  PetscCall(record_time(rec, "optimizer", sys_wtime() - t2));
  st->iteration++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sft_train(const RunCtx *run, const SFTOptions *o, const PlanNeeds *needs, Trainer *tr,
                                DemoSource *src, CkptState *st)
{
  RunRecord *rec;
  SFTBatch   b;
  char       name[64], clock[64];
  size_t     nparams;
  double     t_loop, t_ckpt;
  PetscBool  ckpt_due;
  PetscInt   it0;
  int        stop = 0;

  PetscFunctionBegin;
  PetscCall(trainer_count(&o->cfg, &nparams));
  PetscCall(train_record_open(run, "sft", st->iteration, &o->plan, needs, &rec));
  PetscCall(sft_batch_create((int)o->batch, (int)o->seq_len, &b));
  t_loop = t_ckpt = sys_wtime(), it0 = st->iteration;
  PetscCall(PetscPrintf(run->comm,
                        "sft: %zu parameters, %" PetscInt_FMT " steps of %" PetscInt_FMT " x %" PetscInt_FMT
                        " tokens, from step %" PetscInt_FMT "\n",
                        nparams, o->steps, o->batch, o->seq_len, st->iteration));
  while (st->iteration < o->steps) {
    double    t0 = sys_wtime(), loss, eval = NAN, ms;
    PetscReal lr, gnorm;
    PetscCall(sft_step(tr, o, src, &b, st, rec, &loss, &lr, &gnorm));
    if (o->eval_every && st->iteration % o->eval_every == 0) PetscCall(sft_eval(tr, o, &b, &eval));
    ms = 1e3 * (sys_wtime() - t0);
    PetscCall(record_metric(rec, "loss", loss));
    PetscCall(record_metric(rec, "eval_loss", eval));
    PetscCall(record_metric(rec, "lr", lr));
    PetscCall(record_metric(rec, "grad_norm", gnorm));
    PetscCall(record_metric(rec, "tokens_per_s", b.B * b.T / (ms * 1e-3)));
    PetscCall(PetscPrintf(run->comm,
                          "step %5" PetscInt_FMT "/%" PetscInt_FMT
                          " | loss %.4f | lr %.3e | grad %.3f | %8.0f tok/s | %7.1f ms | %s\n",
                          st->iteration, o->steps, loss, lr, (double)gnorm, b.B * b.T / (ms * 1e-3), ms,
                          sys_progress_str(t_loop, (long)(st->iteration - it0), (long)(o->steps - st->iteration), clock,
                                           sizeof clock)));
    if (!isnan(eval)) PetscCall(PetscPrintf(run->comm, "      held-out loss %.4f\n", eval));
    PetscCall(train_checkpoint_now(run->comm, o->checkpoint_every, o->checkpoint_minutes, st->iteration, &t_ckpt,
                                   &ckpt_due, &stop));
    /* the row, then the checkpoint that commits it first (the checkpoint's time: the next row's) */
    PetscCall(record_step(rec, st->iteration));
    if (ckpt_due) {
      PetscCall(PetscSNPrintf(name, sizeof name, "ckpt_%06" PetscInt_FMT ".h5", st->iteration));
      PetscCall(trainer_checkpoint(tr, run, name, st, rec));
    }
    if (stop) { /* SIGINT or SIGTERM: what is done is in that checkpoint */
      PetscCall(sft_batch_destroy(&b));
      PetscCall(record_close(&rec));
      PetscCall(train_stopped(run, stop, "sft", "step", st->iteration, name));
    }
  }
  PetscCall(trainer_checkpoint(tr, run, "final.h5", st, rec));
  PetscCall(record_summary(rec, "steps", (double)st->iteration));
  PetscCall(sft_batch_destroy(&b));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The checks that need only the deck (and the data file): options, the
 * data against the model, the plan; the plan is printed when print is true.
 * src is set up for the run. */
static PetscErrorCode sft_prepare(const RunCtx *run, SFTOptions *o, PetscBool print, DemoSource *src, PlanNeeds *needs)
{
  PetscFunctionBegin;
  PetscCall(demo_source_setup(run->comm, o->data, &o->task, (uint64_t)run->seed, src));
  PetscCall(sft_check(o, src));
  if (o->plan.placement == PLACEMENT_AUTO) { /* the searched layout replaces the colocated one */
    CostTrainStage st = {PETSC_TRUE, o->cfg, (int)o->batch, 1, (int)o->seq_len, (int)o->steps};

    PetscCall(search_auto_stage(run, &st, MFC_SFT_TRAIN, &o->plan));
  }
  PetscCall(trainer_plan_check(run, &o->plan, MFC_SFT_TRAIN, &o->cfg, (int)o->batch, print, needs));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sft_check_stage(const RunCtx *run, SFTOptions *o)
{
  DemoSource src;
  PlanNeeds  needs;

  PetscFunctionBegin;
  PetscCall(sft_prepare(run, o, PETSC_FALSE, &src, &needs));
  PetscCall(demo_source_destroy(&src));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sft_execute(const RunCtx *run, const Backend *be, SFTOptions *o)
{
  DemoSource src;
  Trainer    tr;
  PlanNeeds  needs;
  size_t     nparams;
  CkptState  st = {0, 0, run->seed, 0};

  PetscFunctionBegin;
  PetscCall(train_restart_resolve(run->comm, run->output_dir, o->restart, sizeof o->restart));
  PetscCall(sft_prepare(run, o, PETSC_TRUE, &src, &needs));
  if (run->dry_run) {
    PetscCall(trainer_count(&o->cfg, &nparams));
    PetscCall(sft_dry_run(run, o, nparams));
  } else {
    PetscCall(sft_check_memory(run, o));
    PetscCall(ckpt_tokenizer_from(run->comm, o->restart[0] ? o->restart : o->init,
                                  NULL)); /* the checkpoints carry the source model's tokens' text */
    PetscCall(PetscLogStagePush(sys_log.sft));
    PetscCall(trainer_create("policy", &o->cfg, be, &o->plan, MFC_SFT_TRAIN, o->sched, &tr));
    PetscCall(sft_load(run, o, &tr, &st));
    src.seed = (uint64_t)st.seed;
    PetscCall(sys_mkdir_p(run->output_dir));
    PetscCall(sft_train(run, o, &needs, &tr, &src, &st));
    PetscCall(train_said_written(run, "sft", "final.h5 (the policy with its optimizer state) and run.h5"));
    PetscCall(trainer_destroy(&tr));
    PetscCall(PetscLogStagePop());
  }
  PetscCall(demo_source_destroy(&src));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sft_cost_stage(const RunCtx *run, PetscBool help, CostTrainStage *st)
{
  TrainJobOptions job;
  SFTOptions     *o;
  DemoSource      src;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&job, sizeof job));
  PetscCall(train_job_checkpoint_options(&job)); /* not the plan: the search makes it */
  PetscCall(PetscCalloc1(1, &o));
  PetscCall(sft_options(&job, o));
  if (!help) {
    PetscCall(demo_source_setup(run->comm, o->data, &o->task, (uint64_t)run->seed, &src));
    PetscCall(sft_check(o, &src));
    PetscCall(demo_source_destroy(&src));
    st->used  = PETSC_TRUE;
    st->cfg   = o->cfg;
    st->batch = (int)o->batch;
    st->rows  = 1;
    st->len   = (int)o->seq_len;
    st->steps = (int)o->steps;
  }
  PetscCall(PetscFree(o));
  PetscFunctionReturn(PETSC_SUCCESS);
}
