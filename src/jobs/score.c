/* Scoring (-mode score): log-probabilities (LM head) or values (scalar head)
 * of every sequence in a token file under a checkpoint's model. Users use it
 * for evaluation, and the tests use it to compare implementations. */
#include "jobs.h"

typedef struct {
  char     checkpoint[PETSC_MAX_PATH_LEN], role[32], input[PETSC_MAX_PATH_LEN], output[PETSC_MAX_PATH_LEN];
  PetscInt batch;
} ScoreOptions;

/* The files it reads and writes, for io_files_check. */
const IoFileOption score_file_options[] = {
  {"-score_checkpoint", IO_FILE_IN, NULL, NULL},
  {"-score_input", IO_FILE_IN, NULL, NULL},
  {"-score_output", IO_FILE_OUT, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

static PetscErrorCode score_set_from_options(ScoreOptions *o)
{
  PetscFunctionBegin;
  o->checkpoint[0] = o->input[0] = o->output[0] = '\0';
  PetscCall(PetscStrncpy(o->role, "policy", sizeof o->role));
  PetscOptionsBegin(PETSC_COMM_WORLD, "score_", "Scoring token files", NULL);
  RfOptString("-checkpoint", "Checkpoint holding the model", o->checkpoint, sizeof o->checkpoint);
  RfOptString("-role", "Model role inside the checkpoint (policy, actor, critic, reference, reward)", o->role,
              sizeof o->role);
  RfOptString("-input",
              "HDF5 file with /tokens int32 [B,T] and /lengths int32 [B] (a vocab_size attribute is optional)",
              o->input, sizeof o->input);
  RfOptString("-output", "HDF5 file to write: /logprobs [B,T-1] (LM head) or /values [B,T] (scalar head)", o->output,
              sizeof o->output);
  RfOptInt("-batch", "Sequences per forward pass", 16, &o->batch);
  PetscOptionsEnd();
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode score_check(const ScoreOptions *o)
{
  PetscFunctionBegin;
  PetscCheck(o->checkpoint[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode score needs -score_checkpoint FILE");
  PetscCheck(o->input[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode score needs -score_input FILE");
  PetscCheck(o->output[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode score needs -score_output FILE");
  PetscCheck(o->batch > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-score_batch %" PetscInt_FMT " must be positive", o->batch);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode score_check_data(const ScoreOptions *o, const ModelConfig *cfg, const TokenData *d)
{
  PetscFunctionBegin;
  PetscCheck(d->T <= cfg->n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-score_input %s has sequences of %d tokens, longer than the model's n_positions %d", o->input, d->T,
             cfg->n_positions);
  PetscCheck(d->vocab_size <= cfg->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-score_input %s has vocabulary %d, larger than the model's %d", o->input, d->vocab_size, cfg->vocab_size);
  PetscCheck(cfg->head == MODEL_HEAD_SCALAR || d->T >= 2, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-score_input %s: log-probabilities need sequences of at least 2 tokens", o->input);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Scores rows [r0, r0+nb) into out (row stride `cols`). */
static PetscErrorCode score_rows(Model *lm, const TokenData *d, int r0, int nb, int *target, float *buf, float *out,
                                 int cols)
{
  int T = d->T;

  PetscFunctionBegin;
  PetscCall(model_forward(lm, d->tokens + (size_t)r0 * T, nb, T));
  if (lm->cfg.head == MODEL_HEAD_LM) {
    for (int r = 0; r < nb; r++)
      for (int t = 0; t < T; t++)
        target[r * T + t] = t + 1 < d->lengths[r0 + r] ? d->tokens[(size_t)(r0 + r) * T + t + 1] : -1;
    PetscCall(model_logprobs(lm, target, buf));
  } else PetscCall(model_values_get(lm, buf));
  for (int r = 0; r < nb; r++) {
    int keep = lm->cfg.head == MODEL_HEAD_LM ? d->lengths[r0 + r] - 1 : d->lengths[r0 + r];
    for (int t = 0; t < cols; t++) out[(size_t)(r0 + r) * cols + t] = t < keep ? buf[r * T + t] : 0.0f;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode score_run(const RunCtx *run, const Backend *be)
{
  ScoreOptions o;
  ModelConfig  cfg;
  Model       *lm;
  TokenData    d;
  CkptModel    m;
  PetscBool    help;
  int         *target;
  float       *buf, *out;
  int          cols;

  PetscFunctionBegin;
  PetscCall(score_set_from_options(&o));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(sys_options_check_unused());
  PetscCall(score_check(&o));
  PetscCall(PetscLogStagePush(sys_log.score));
  PetscCall(ckpt_read_config(run->comm, o.checkpoint, o.role, &cfg));
  /* vocab_size is optional in the input: the checkpoint knows the vocabulary (checked against it when present) */
  PetscCall(data_read_vocab(run->comm, o.input, cfg.vocab_size, "the checkpoint's vocab_size", &d));
  PetscCall(score_check_data(&o, &cfg, &d));
  if (run->dry_run) {
    char   a[32];
    double bytes = (double)model_activation_bytes(&cfg, (int)PetscMin(o.batch, d.N), d.T);
    PetscCall(PetscPrintf(run->comm, "dry run: scoring %d x %d tokens needs %s of activations\n", d.N, d.T,
                          sys_bytes_str(bytes, a, sizeof a)));
    PetscCall(data_free(&d));
    PetscCall(PetscLogStagePop());
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(model_create(&cfg, be, &lm));
  m = (CkptModel){o.role, lm, PETSC_FALSE, PETSC_FALSE};
  PetscCall(ckpt_read_model(run->comm, o.checkpoint, &m));
  cols = cfg.head == MODEL_HEAD_LM ? d.T - 1 : d.T;
  PetscCall(PetscMalloc3((size_t)o.batch * d.T, &target, (size_t)o.batch * d.T, &buf, (size_t)d.N * cols, &out));
  for (int r0 = 0; r0 < d.N; r0 += (int)o.batch)
    PetscCall(score_rows(lm, &d, r0, PetscMin((int)o.batch, d.N - r0), target, buf, out, cols));
  PetscCall(io_write_matrix(run->comm, o.output, cfg.head == MODEL_HEAD_LM ? "logprobs" : "values", out, d.N, cols));
  PetscCall(PetscPrintf(run->comm, "score: %d sequences of %d tokens -> %s (%s)\n", d.N, d.T, o.output,
                        cfg.head == MODEL_HEAD_LM ? "/logprobs" : "/values"));
  PetscCall(PetscFree3(target, buf, out));
  PetscCall(model_destroy(&lm));
  PetscCall(data_free(&d));
  PetscCall(PetscLogStagePop());
  PetscFunctionReturn(PETSC_SUCCESS);
}
