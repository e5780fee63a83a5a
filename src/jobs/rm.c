/* Reward modelling (-mode rm): a scalar-head Model, initialised from the SFT
 * checkpoint's trunk, trained on preference pairs with the Bradley-Terry loss
 * -log sigmoid(r_chosen - r_rejected), where r is the value at a sequence's
 * last token, on the rm_train call's mesh. Reports pairwise accuracy on
 * held-out pairs. */
#include "train.h"
#include "jobs.h"
#include "search.h"
#include <math.h>

#define RM_MAX_BATCH 4096

typedef struct {
  int    B, Tmax, T;    /* pairs per batch, longest row, row length of the micro-batch being packed */
  int   *tok, *last;    /* [2B*Tmax], [2B] index of each row's last token */
  float *values, *rc, *rr, *drc, *drr;
  float *dvalues; /* [2B*Tmax]: micro-batch k's d loss / d value at 2*(its first pair)*Tmax, kept until its backward */
} RMBatch;

/* One pass over nb pairs (pair[i] indexes p) on the mesh: the replica's
 * pairs in micro-batches; the last stage accumulates the loss (a sum, with
 * gradients of the mean over the nb pairs) and the correct orderings. */
typedef struct {
  const PrefPairs *p;
  const int       *pair;
  int              nb;
  RMBatch         *b;
  MicroSplit       split;
  double           acc[3];  /* loss sum, pairs ranked as labelled, pairs ranked as the judge */
  double           time[2]; /* seconds in forwards and backwards on this rank */
} RMPass;

/* The files it reads, for io_files_check. */
const IoFileOption rm_file_options[] = {
  {"-rm_sft_checkpoint", IO_FILE_IN, NULL, NULL},
  {"-rm_data", IO_FILE_IN, "builtin", NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

PetscErrorCode rm_options(const TrainJobOptions *job, RMOptions *o)
{
  PetscFunctionBegin;
  PetscCall(PetscStrncpy(o->data, "builtin", sizeof o->data));
  o->sft[0] = o->restart[0] = '\0';
  PetscOptionsBegin(PETSC_COMM_WORLD, "rm_", "Reward modelling", NULL);
  RfOptString("-sft_checkpoint",
              "SFT checkpoint (role policy): its trunk initialises the reward model, and its policy writes the "
              "built-in pairs' responses",
              o->sft, sizeof o->sft);
  RfOptString("-data",
              "Preference pairs: 'builtin' (sampled from the SFT policy, labelled by the judge) or an HDF5 pair file",
              o->data, sizeof o->data);
  RfOptInt("-pairs", "Training pairs to generate (built-in data)", 2048, &o->pairs);
  RfOptInt("-eval_pairs", "Held-out pairs: from held-out prompts (built-in) or the last pairs of the file", 256,
           &o->eval_pairs);
  RfOptInt("-steps", "Optimizer steps in total (a restart continues up to this count)", 300, &o->steps);
  RfOptInt("-batch", "Pairs per step", 32, &o->batch);
  RfOptInt("-eval_every", "Held-out accuracy every N steps (0: only at the end)", 50, &o->eval_every);
  RfOptReal("-bt_beta",
            "Labeller noise: the first response is preferred with probability sigmoid(bt_beta*(gold_a - gold_b)); "
            "larger is less noisy",
            20.0, &o->bt_beta);
  PetscOptionsEnd();
  PetscCall(PetscStrncpy(o->restart, job->restart, sizeof o->restart));
  PetscCall(train_stage_checkpoint_every(job, "rm", "step", &o->checkpoint_every, &o->checkpoint_minutes));
  PetscCall(adamw_set_from_options("reward_", &o->opt));
  PetscCall(task_set_from_options(&o->task));
  PetscCall(gen_config_set_from_options(&o->gen));
  o->plan = job->plan; /* read once for every stage (-fuse_* included) */
  if (o->plan.placement == PLACEMENT_AUTO) PetscCall(search_auto_options());
  PetscCall(trainer_options(&o->sched));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The SFT model's architecture setting in errors: the checkpoint's value in
 * -mode rm (ckpt), the -policy_ option in -mode pipeline (ckpt NULL: SFT
 * has not written it yet and takes it from that option). */
static const char *sft_arch(const char *ckpt, const char *field, int value, char *buf, size_t len)
{
  if (ckpt) PetscSNPrintf(buf, len, "%s %d of the SFT checkpoint %s", field, value, ckpt);
  else PetscSNPrintf(buf, len, "-policy_%s %d", field, value);
  return buf;
}

static PetscErrorCode rm_check(const RMOptions *o, PetscBool builtin, const ModelConfig *cfg, const char *ckpt)
{
  char a[PETSC_MAX_PATH_LEN + 64];

  PetscFunctionBegin;
  PetscCheck(o->steps >= 0 && o->batch > 0 && o->batch <= RM_MAX_BATCH, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-rm_steps must be >= 0 and -rm_batch in [1, %d]", RM_MAX_BATCH);
  PetscCheck(o->pairs > 0 && o->eval_pairs >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-rm_pairs must be positive and -rm_eval_pairs non-negative");
  PetscCheck(o->bt_beta > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-rm_bt_beta %g must be positive",
             (double)o->bt_beta);
  PetscCheck(o->checkpoint_every >= 0 && o->eval_every >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-rm_checkpoint_every (or -checkpoint_every) and -rm_eval_every must be >= 0");
  if (builtin) {
    int prompt = (int)o->task.len_max + 2;
    PetscCheck(o->task.kind == TASK_KIND_SORT, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-task %s: built-in preference pairs are labelled by the sort task's judge (-task sort); give a pair "
               "file (-rm_data FILE), or use rewards computed from answers (-reward_fn) in -mode ppo",
               task_name(&o->task));
    /* the bounds the SFT model's architecture sets, named where that architecture comes from */
    PetscCheck(TASK_FIRST_SYMBOL + o->task.n_symbols <= cfg->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-task_symbols %" PetscInt_FMT " needs a vocabulary of %" PetscInt_FMT " tokens, more than %s",
               o->task.n_symbols, o->task.n_symbols + TASK_FIRST_SYMBOL,
               sft_arch(ckpt, "vocab_size", cfg->vocab_size, a, sizeof a));
    PetscCheck(2 * o->task.len_max + 3 <= cfg->n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-task_len_max %" PetscInt_FMT " needs %" PetscInt_FMT " positions, more than %s", o->task.len_max,
               2 * o->task.len_max + 3, sft_arch(ckpt, "n_positions", cfg->n_positions, a, sizeof a));
    PetscCheck(prompt + o->gen.max_new_tokens <= cfg->n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-gen_max_new_tokens %" PetscInt_FMT " plus the longest prompt (%d tokens) exceeds %s",
               o->gen.max_new_tokens, prompt, sft_arch(ckpt, "n_positions", cfg->n_positions, a, sizeof a));
    PetscCheck(o->gen.top_k >= 0 && o->gen.top_k <= cfg->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-gen_top_k %" PetscInt_FMT " must be in [0, %s]", o->gen.top_k,
               sft_arch(ckpt, "vocab_size", cfg->vocab_size, a, sizeof a));
    PetscCheck(o->gen.eos >= 0 && o->gen.eos < cfg->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-gen_eos %" PetscInt_FMT " is not a token of %s", o->gen.eos,
               sft_arch(ckpt, "vocab_size", cfg->vocab_size, a, sizeof a));
    /* the checks below name -policy_ options, but only for bounds the checks above have passed */
    PetscCall(task_check(&o->task, cfg->vocab_size, cfg->n_positions, "policy_"));
    PetscCall(gen_config_check(&o->gen, cfg, "policy_", prompt));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A user's pair file: the last eval_pairs pairs are held out. */
static PetscErrorCode rm_split_file(const RMOptions *o, const ModelConfig *cfg, PrefPairs *all, PrefPairs *train,
                                    PrefPairs *eval)
{
  int n = all->d.N / 2, ne = (int)o->eval_pairs, T = all->d.T;

  PetscFunctionBegin;
  PetscCheck(all->d.vocab_size <= cfg->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-rm_data %s has vocabulary %d, larger than the SFT model's %d", o->data, all->d.vocab_size,
             cfg->vocab_size);
  PetscCheck(T <= cfg->n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-rm_data %s has sequences of %d tokens, more than the SFT model's n_positions %d", o->data, T,
             cfg->n_positions);
  PetscCheck(ne < n, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-rm_eval_pairs %d leaves no training pairs in -rm_data %s (%d pairs)", ne, o->data, n);
  *train     = *all;
  train->d.N = 2 * (n - ne);
  *eval      = *all; /* views into all: the last 2*ne rows */
  eval->d.N  = 2 * ne;
  eval->d.tokens += (size_t)train->d.N * T;
  eval->d.lengths += train->d.N;
  eval->d.prompt_lengths += train->d.N;
  eval->gold += train->d.N;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Built-in pairs: two samples per prompt from the SFT policy. */
static PetscErrorCode rm_make_pairs(const RunCtx *run, const Backend *be, const RMOptions *o, const ModelConfig *cfg,
                                    PrefPairs *train, PrefPairs *eval)
{
  Model     *policy;
  GenEngine *eng;
  CkptModel  m = {"policy", NULL, PETSC_FALSE, PETSC_FALSE};
  double     t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(model_create(cfg, be, &policy));
  m.lm = policy;
  PetscCall(ckpt_read_model(run->comm, o->sft, &m));
  PetscCall(gen_engine_create(policy, &o->gen, (int)o->task.len_max + 2, &eng));
  PetscCall(PetscLogEventBegin(sys_log.generate, 0, 0, 0, 0));
  PetscCall(
      prefs_generate(eng, &o->gen, &o->task, TASK_SPLIT_TRAIN, (int)o->pairs, (uint64_t)run->seed, o->bt_beta, train));
  PetscCall(prefs_generate(eng, &o->gen, &o->task, TASK_SPLIT_EVAL, (int)o->eval_pairs, (uint64_t)run->seed, o->bt_beta,
                           eval));
  PetscCall(PetscLogEventEnd(sys_log.generate, 0, 0, 0, 0));
  PetscCall(gen_engine_destroy(&eng));
  PetscCall(model_destroy(&policy));
  PetscCall(PetscPrintf(run->comm,
                        "rm: sampled %" PetscInt_FMT " training and %" PetscInt_FMT
                        " held-out pairs from the SFT policy in %.1f s\n",
                        o->pairs, o->eval_pairs, sys_wtime() - t0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rm_batch_create(int B, int T, RMBatch *b)
{
  PetscFunctionBegin;
  b->B = B;
  b->T = b->Tmax = T;
  PetscCall(PetscMalloc4((size_t)2 * B * T, &b->tok, 2 * B, &b->last, (size_t)2 * B * T, &b->values, (size_t)2 * B * T,
                         &b->dvalues));
  PetscCall(PetscMalloc4(B, &b->rc, B, &b->rr, B, &b->drc, B, &b->drr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rm_batch_destroy(RMBatch *b)
{
  PetscFunctionBegin;
  PetscCall(PetscFree4(b->tok, b->last, b->values, b->dvalues));
  PetscCall(PetscFree4(b->rc, b->rr, b->drc, b->drr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Micro-batch k's loss gradient: its own part of dvalues, so its backward
 * finds it whatever ran in between (any schedule). */
static float *rm_dvalues(const RMPass *q, int k)
{
  int r0, nb;
  trainer_micro(&q->split, k, &r0, &nb);
  return q->b->dvalues + (size_t)2 * (r0 - q->split.b0) * q->b->Tmax;
}

/* Forward of micro-batch k: its pairs packed into rows 2i (chosen) and
 * 2i+1 (rejected) of length T = the longest sequence among them (padding
 * after a sequence's last token changes nothing before it). The last stage
 * takes the rewards, the loss and d loss / d value. */
static PetscErrorCode rm_forward(void *ctx, Model *lm, int k)
{
  RMPass          *q = (RMPass *)ctx;
  RMBatch         *b = q->b;
  const PrefPairs *p = q->p;
  const int       *pair;
  int              T = 1, r0, nb, correct;
  double           t0 = sys_wtime();

  PetscFunctionBegin;
  trainer_micro(&q->split, k, &r0, &nb);
  pair = q->pair + r0;
  for (int i = 0; i < 2 * nb; i++) T = PetscMax(T, p->d.lengths[2 * pair[i / 2] + i % 2]);
  b->T = T;
  for (int i = 0; i < 2 * nb; i++) {
    int row = 2 * pair[i / 2] + i % 2, len = p->d.lengths[row];
    for (int t = 0; t < T; t++) b->tok[i * T + t] = t < len ? p->d.tokens[(size_t)row * p->d.T + t] : TASK_PAD;
    b->last[i] = i * T + len - 1;
  }
  PetscCall(PetscLogEventBegin(sys_log.forward, 0, 0, 0, 0));
  PetscCall(model_forward(lm, b->tok, 2 * nb, T));
  if (model_last_stage(lm)) {
    float *dv = rm_dvalues(q, k);
    PetscCall(model_values_get(lm, b->values));
    for (int i = 0; i < nb; i++) {
      b->rc[i] = b->values[b->last[2 * i]];
      b->rr[i] = b->values[b->last[2 * i + 1]];
    }
    q->acc[0] += rl_rm_loss_part(nb, q->nb, b->rc, b->rr, b->drc, b->drr, &correct);
    q->acc[1] += correct;
    for (int i = 0; i < nb; i++)
      q->acc[2] += (b->rc[i] > b->rr[i]) == (p->gold[2 * pair[i]] > p->gold[2 * pair[i] + 1]);
    PetscCall(PetscArrayzero(dv, (size_t)2 * nb * T));
    for (int i = 0; i < nb; i++) {
      dv[b->last[2 * i]]     = b->drc[i];
      dv[b->last[2 * i + 1]] = b->drr[i];
    }
  }
  PetscCall(PetscLogEventEnd(sys_log.forward, 0, 0, 0, 0));
  q->time[0] += sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rm_backward(void *ctx, Model *lm, int k)
{
  RMPass   *q    = (RMPass *)ctx;
  PetscBool last = model_last_stage(lm);
  double    t0   = sys_wtime();

  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.backward, 0, 0, 0, 0));
  PetscCall(model_backward_values(lm, last ? rm_dvalues(q, k) : NULL));
  PetscCall(PetscLogEventEnd(sys_log.backward, 0, 0, 0, 0));
  q->time[1] += sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* nb pairs through the model on its mesh (with train, their gradients
 * accumulate for a step); acc gets the loss sum and the two correct counts
 * over all replicas, on every rank. */
static PetscErrorCode rm_pass(Trainer *tr, const PrefPairs *p, const int *pair, int nb, RMBatch *b, PetscBool train,
                              double acc[3], double time[2])
{
  RMPass    q = {p, pair, nb, b, {0, 0, 1, 0}, {0, 0, 0}, {0, 0}};
  TrainWork w = {rm_forward, train ? rm_backward : NULL, &q, q.acc, 3};

  PetscFunctionBegin;
  trainer_split(tr, nb, 0, &q.split);
  PetscCall(trainer_pass(tr, &q.split, &w));
  for (int j = 0; j < 3; j++) acc[j] = q.acc[j];
  if (time) PetscCallMPI(sys_mpi_allreduce(q.time, time, 2, MPI_DOUBLE, MPI_MAX, PETSC_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Held-out accuracy: against the labels, and against the judge's ordering
 * (built-in pairs only; NaN otherwise). */
static PetscErrorCode rm_eval(Trainer *tr, const PrefPairs *eval, RMBatch *b, double *acc, double *gacc, double *loss)
{
  int    n = eval->d.N / 2, idx[RM_MAX_BATCH];
  double sum[3] = {0, 0, 0};

  PetscFunctionBegin;
  *acc = *gacc = *loss = NAN;
  if (n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  for (int i0 = 0; i0 < n; i0 += b->B) {
    int    nb = PetscMin(b->B, n - i0);
    double a[3];
    for (int i = 0; i < nb; i++) idx[i] = i0 + i;
    PetscCall(rm_pass(tr, eval, idx, nb, b, PETSC_FALSE, a, NULL));
    for (int j = 0; j < 3; j++) sum[j] += a[j];
  }
  *loss = sum[0] / n;
  *acc  = sum[1] / n;
  if (!isnan(eval->gold[0])) *gacc = sum[2] / n;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rm_step(Trainer *tr, const RMOptions *o, const PrefPairs *train, int *perm, int64_t *perm_epoch,
                              RMBatch *b, CkptState *st, RunRecord *rec, double *loss, double *acc, PetscReal *lr,
                              PetscReal *gnorm)
{
  int    n = train->d.N / 2, idx[RM_MAX_BATCH];
  double t0 = sys_wtime(), sum[3], time[2];
  char   at[64];

  PetscFunctionBegin;
  for (int i = 0; i < b->B; i++) { /* pairs data_pos .. data_pos+B-1 of the epoch-shuffled stream */
    int64_t pos = st->data_pos + i, epoch = pos / n;
    if (epoch != *perm_epoch) { /* a pure function of (seed, epoch): a restart rebuilds the same order */
      rng_shuffle(perm, n, (uint64_t)st->seed, 0x524Du, epoch);
      *perm_epoch = epoch;
    }
    idx[i] = perm[pos % n];
  }
  st->data_pos += b->B;
  PetscCall(rm_pass(tr, train, idx, b->B, b, PETSC_TRUE, sum, time));
  *loss = sum[0] / b->B;
  *acc  = sum[1] / b->B;
  t0    = sys_wtime();
  PetscCall(PetscSNPrintf(at, sizeof at, "step %" PetscInt_FMT, st->iteration));
  PetscCall(trainer_step(tr, &o->opt, "reward-model", at, *loss, lr, gnorm));
  PetscCall(record_time(rec, "forward", time[0]));
  PetscCall(record_time(rec, "backward", time[1]));
  PetscCall(record_time(rec, "optimizer", sys_wtime() - t0));
  st->iteration++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode rm_train(const RunCtx *run, const RMOptions *o, const PlanNeeds *needs, Trainer *tr,
                               const PrefPairs *train, const PrefPairs *eval, CkptState *st)
{
  RunRecord *rec;
  RMBatch    b;
  int       *perm, stop = 0;
  int64_t    perm_epoch = -1;
  double     acc = NAN, gacc = NAN, eloss = NAN, t_loop, t_ckpt;
  PetscBool  ckpt_due;
  char       name[64], clock[64];
  size_t     nparams;
  PetscInt   it0;

  PetscFunctionBegin;
  PetscCall(trainer_count(&tr->dm->cfg, &nparams));
  PetscCall(train_record_open(run, "rm", st->iteration, &o->plan, needs, &rec));
  PetscCall(rm_batch_create((int)o->batch, train->d.T > eval->d.T ? train->d.T : eval->d.T, &b));
  PetscCall(PetscMalloc1(train->d.N / 2, &perm));
  t_loop = t_ckpt = sys_wtime(), it0 = st->iteration;
  PetscCall(PetscPrintf(run->comm,
                        "rm: %zu parameters, %d training pairs, %d held-out pairs, %" PetscInt_FMT
                        " steps of %" PetscInt_FMT " pairs, from step %" PetscInt_FMT "\n",
                        nparams, train->d.N / 2, eval->d.N / 2, o->steps, o->batch, st->iteration));
  while (st->iteration < o->steps) {
    double    t0 = sys_wtime(), loss, bacc, ms;
    PetscReal lr, gnorm;
    PetscBool last = (PetscBool)(st->iteration + 1 == o->steps);

    PetscCall(rm_step(tr, o, train, perm, &perm_epoch, &b, st, rec, &loss, &bacc, &lr, &gnorm));
    acc = gacc = eloss = NAN;
    if ((o->eval_every && st->iteration % o->eval_every == 0) || last)
      PetscCall(rm_eval(tr, eval, &b, &acc, &gacc, &eloss));
    ms = 1e3 * (sys_wtime() - t0);
    PetscCall(record_metric(rec, "loss", loss));
    PetscCall(record_metric(rec, "accuracy", bacc));
    PetscCall(record_metric(rec, "eval_loss", eloss));
    PetscCall(record_metric(rec, "eval_accuracy", acc));
    PetscCall(record_metric(rec, "eval_gold_accuracy", gacc));
    PetscCall(record_metric(rec, "lr", lr));
    PetscCall(record_metric(rec, "grad_norm", gnorm));
    PetscCall(PetscPrintf(run->comm,
                          "step %5" PetscInt_FMT "/%" PetscInt_FMT
                          " | loss %.4f | acc %.3f | lr %.3e | grad %.3f | %7.1f ms | %s\n",
                          st->iteration, o->steps, loss, bacc, lr, (double)gnorm, ms,
                          sys_progress_str(t_loop, (long)(st->iteration - it0), (long)(o->steps - st->iteration), clock,
                                           sizeof clock)));
    if (!isnan(acc))
      PetscCall(PetscPrintf(run->comm, "      held-out loss %.4f, pairwise accuracy %.3f (against the judge: %.3f)\n",
                            eloss, acc, gacc));
    PetscCall(train_checkpoint_now(run->comm, o->checkpoint_every, o->checkpoint_minutes, st->iteration, &t_ckpt,
                                   &ckpt_due, &stop));
    PetscCall(record_step(rec, st->iteration)); /* the row, then the checkpoint that commits it */
    if (ckpt_due) {
      PetscCall(PetscSNPrintf(name, sizeof name, "ckpt_%06" PetscInt_FMT ".h5", st->iteration));
      PetscCall(record_commit(rec));
      PetscCall(trainer_checkpoint(tr, run, name, st, NULL));
    }
    if (stop) { /* SIGINT or SIGTERM: what is done is in that checkpoint */
    PetscCall(PetscFree(perm));
      PetscCall(rm_batch_destroy(&b));
      PetscCall(record_close(&rec));
      PetscCall(train_stopped(run, stop, "rm", "step", st->iteration, name));
    }
  }
  if (isnan(acc)) PetscCall(rm_eval(tr, eval, &b, &acc, &gacc, &eloss)); /* a restart at the last step */
  PetscCall(record_commit(rec));
  PetscCall(trainer_checkpoint(tr, run, "final.h5", st, NULL));
  PetscCall(record_summary(rec, "steps", (double)st->iteration));
  PetscCall(record_summary(rec, "eval_accuracy", acc));
  PetscCall(record_summary(rec, "eval_gold_accuracy", gacc));
  PetscCall(
      PetscPrintf(run->comm,
                  "rm: held-out pairwise accuracy %.3f (against the judge's order: %.3f) on %d pairs\n", acc, gacc,
                  eval->d.N / 2));
  PetscCall(train_said_written(run, "rm", "final.h5 (the reward model with its optimizer state) and run.h5"));
  PetscCall(PetscFree(perm));
  PetscCall(rm_batch_destroy(&b));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The reward model: the SFT trunk and a fresh scalar head (drawn from the
 * seed, the same on every layout), or a restart. */
static PetscErrorCode rm_load(const RunCtx *run, const RMOptions *o, Trainer *tr, CkptState *st)
{
  PetscFunctionBegin;
  PetscCall(PetscLogEventBegin(sys_log.ckpt_read, 0, 0, 0, 0));
  if (o->restart[0]) {
    PetscCall(trainer_restart(tr, run, o->restart, o->steps, "-rm_steps", st));
  } else PetscCall(dmodel_load(tr->dm, o->sft, "policy", PETSC_FALSE, PETSC_TRUE, (uint64_t)run->seed));
  PetscCall(PetscLogEventEnd(sys_log.ckpt_read, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The checks that need only the deck, a pair file and the SFT model's
 * architecture cfg (named as sft_arch says): options, the plan (printed
 * when print is true), the pair file split into all/train/eval. */
static PetscErrorCode rm_prepare(const RunCtx *run, RMOptions *o, const ModelConfig *cfg, const char *ckpt,
                                 PetscBool print, ModelConfig *rcfg, PlanNeeds *needs, PrefPairs *all, PrefPairs *train,
                                 PrefPairs *eval)
{
  PetscBool builtin;

  PetscFunctionBegin;
  PetscCall(PetscStrcmp(o->data, "builtin", &builtin));
  PetscCall(rm_check(o, builtin, cfg, ckpt));
  *rcfg      = *cfg; /* the SFT trunk with a scalar head */
  rcfg->head = MODEL_HEAD_SCALAR;
  if (!builtin) PetscCall(prefs_read(run->comm, o->data, all));
  if (o->plan.placement == PLACEMENT_AUTO) { /* the searched layout replaces the colocated one, for the rows' length as
                                                -mode plan takes it (rm_cost_stage) */
    CostTrainStage st = {
      PETSC_TRUE,   *rcfg, (int)o->batch, 2, builtin ? (int)(o->task.len_max + 2 + o->gen.max_new_tokens) : all->d.T,
      (int)o->steps
    };

    PetscCall(search_auto_stage(run, &st, MFC_RM_TRAIN, &o->plan));
  }
  PetscCall(trainer_plan_check(run, &o->plan, MFC_RM_TRAIN, rcfg, (int)o->batch, print, needs));
  if (!builtin) PetscCall(rm_split_file(o, cfg, all, train, eval));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* cfg: the SFT model's (the activations as counted so far), rcfg: the reward model's (its weights) */
static PetscErrorCode rm_dry_run(const RunCtx *run, const RMOptions *o, const ModelConfig *cfg, const ModelConfig *rcfg)
{
  char   a[32], b[32], c[32];
  double bytes = (double)model_activation_bytes(cfg, 2 * (int)o->batch, cfg->n_positions), weights, acts;

  PetscFunctionBegin;
  PetscCall(model_training_bytes(rcfg, run->be, 1, 1, &weights, &acts));
  PetscCall(PetscPrintf(run->comm,
                        "dry run: reward model activations for %" PetscInt_FMT " pairs of up to %d tokens: %s, "
                        "weights+grads+AdamW %s, estimated host memory per rank %s with the model whole on it\n",
                        o->batch, cfg->n_positions, sys_bytes_str(bytes, a, sizeof a),
                        sys_bytes_str(weights, b, sizeof b), sys_bytes_str(weights + bytes, c, sizeof c)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rm_check_stage(const RunCtx *run, RMOptions *o, const ModelConfig *cfg, PetscBool print)
{
  ModelConfig rcfg;
  PlanNeeds needs;
  PrefPairs all = {{0}, NULL}, train = {{0}, NULL}, eval = {{0}, NULL};

  PetscFunctionBegin;
  PetscCall(rm_prepare(run, o, cfg, NULL, print, &rcfg, &needs, &all, &train, &eval));
  if (print) PetscCall(rm_dry_run(run, o, cfg, &rcfg));
  PetscCall(prefs_free(&all)); /* nothing to free for built-in pairs */
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rm_execute(const RunCtx *run, const Backend *be, RMOptions *o)
{
  ModelConfig cfg, rcfg;
  PrefPairs all = {{0}, NULL}, train = {{0}, NULL}, eval = {{0}, NULL};
  PetscBool builtin;
  Trainer   tr;
  PlanNeeds needs;
  CkptState st = {0, 0, run->seed, 0};

  PetscFunctionBegin;
  PetscCall(train_restart_resolve(run->comm, run->output_dir, o->restart, sizeof o->restart));
  PetscCheck(o->sft[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
             "-mode rm needs -rm_sft_checkpoint FILE (the SFT model whose trunk starts the reward model)");
  PetscCall(PetscStrcmp(o->data, "builtin", &builtin));
  PetscCall(ckpt_read_config(run->comm, o->sft, "policy", &cfg));
  /* built-in pairs are the SFT policy's samples: they stop where its tokenizer says unless the deck gives
   * -gen_eos/-gen_stop, as in -mode ppo and generate */
  if (builtin) PetscCall(gen_config_stops_from(run->comm, &o->gen, o->sft));
  PetscCall(rm_prepare(run, o, &cfg, o->sft, PETSC_TRUE, &rcfg, &needs, &all, &train, &eval));
  if (!run->dry_run)
    PetscCall(ckpt_tokenizer_from(run->comm, o->sft, NULL)); /* the checkpoints carry the SFT model's tokens' text */
  if (run->dry_run) {
    PetscCall(rm_dry_run(run, o, &cfg, &rcfg));
    if (!builtin) PetscCall(prefs_free(&all));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscLogStagePush(sys_log.rm));
  PetscCall(sys_mkdir_p(run->output_dir));
  if (builtin) PetscCall(rm_make_pairs(run, be, o, &cfg, &train, &eval));
  PetscCall(trainer_create("reward", &rcfg, be, &o->plan, MFC_RM_TRAIN, o->sched, &tr));
  PetscCall(rm_load(run, o, &tr, &st));
  PetscCall(rm_train(run, o, &needs, &tr, &train, &eval, &st));
  PetscCall(trainer_destroy(&tr));
  if (builtin) {
    PetscCall(prefs_free(&train));
    PetscCall(prefs_free(&eval));
  } else PetscCall(prefs_free(&all));
  PetscCall(PetscLogStagePop());
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode rm_cost_stage(const RunCtx *run, PetscBool help, const ModelConfig *policy, CostTrainStage *st)
{
  TrainJobOptions job;
  RMOptions      *o;
  ModelConfig     cfg;
  PetscBool       builtin;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&job, sizeof job));
  PetscCall(train_job_checkpoint_options(&job)); /* not the plan: the search makes it */
  PetscCall(PetscCalloc1(1, &o));
  PetscCall(rm_options(&job, o));
  if (!help) {
    PetscCall(PetscStrcmp(o->data, "builtin", &builtin));
    if (policy) cfg = *policy;
    else {
      PetscCheck(o->sft[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
                 "-mode rm needs -rm_sft_checkpoint FILE (the SFT model whose trunk starts the reward model)");
      PetscCall(ckpt_read_config(run->comm, o->sft, "policy", &cfg));
    }
    PetscCall(rm_check(o, builtin, &cfg, policy ? NULL : o->sft));
    st->used  = PETSC_TRUE;
    st->cfg   = cfg;
    st->cfg.head = MODEL_HEAD_SCALAR; /* the SFT trunk with a scalar head */
    st->batch = (int)o->batch;
    st->rows  = 2; /* a pair's chosen and rejected responses */
    /* built-in pairs: the longest prompt and the generated response; a
     * pair file: its row length */
    st->len   = builtin ? (int)(o->task.len_max + 2 + o->gen.max_new_tokens) : cfg.n_positions;
    if (!builtin) {
      PrefPairs all = {{0}, NULL};

      PetscCall(prefs_read(run->comm, o->data, &all));
      st->len = all.d.T;
      PetscCall(prefs_free(&all));
    }
    st->steps = (int)o->steps;
  }
  PetscCall(PetscFree(o));
  PetscFunctionReturn(PETSC_SUCCESS);
}
