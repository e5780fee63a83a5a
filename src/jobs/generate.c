/* Generation (-mode generate): responses to every prompt of a token file
 * under a checkpoint's model, on the plan's actor_gen call (any dp, tp and
 * pp; -actor_gen_* options), with the -gen_* sampling settings. Prompt i is
 * sample i of iteration 0, so a response is the same on any layout and
 * thread count. The output is a token dataset (so -mode score and SFT read
 * it) with the generation's own datasets beside: docs/formats.md. */
#include "jobs.h"
#include "exec.h"
#include "io.h"

typedef struct {
  char      checkpoint[PETSC_MAX_PATH_LEN], role[32], input[PETSC_MAX_PATH_LEN], output[PETSC_MAX_PATH_LEN];
  GenConfig gen;
} GenerateOptions;

/* The files it reads and writes, for io_files_check. */
const IoFileOption generate_file_options[] = {
  {"-generate_checkpoint", IO_FILE_IN, NULL, NULL},
  {"-generate_input", IO_FILE_IN, NULL, NULL},
  {"-generate_output", IO_FILE_OUT, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

static PetscErrorCode generate_set_from_options(GenerateOptions *o)
{
  PetscFunctionBegin;
  o->checkpoint[0] = o->input[0] = o->output[0] = '\0';
  PetscCall(PetscStrncpy(o->role, "policy", sizeof o->role));
  PetscOptionsBegin(PETSC_COMM_WORLD, "generate_", "Generating responses to a prompt file", NULL);
  RfOptString("-checkpoint", "Checkpoint holding the model (its LM head)", o->checkpoint, sizeof o->checkpoint);
  RfOptString("-role", "Model role inside the checkpoint (policy, actor or reference)", o->role, sizeof o->role);
  RfOptString("-input",
              "HDF5 prompt file: /tokens int32 [B,T], /lengths int32 [B] (each row's prompt is its first lengths[b] "
              "tokens)",
              o->input, sizeof o->input);
  RfOptString("-output",
              "HDF5 file to write: /tokens (prompt then response), /lengths, /prompt_lengths, /response_lengths, "
              "/logprobs, /stopped",
              o->output, sizeof o->output);
  PetscOptionsEnd();
  PetscCall(gen_config_set_from_options(&o->gen));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode generate_check(const GenerateOptions *o)
{
  PetscFunctionBegin;
  PetscCheck(o->checkpoint[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode generate needs -generate_checkpoint FILE");
  PetscCheck(o->input[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode generate needs -generate_input FILE");
  PetscCheck(o->output[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode generate needs -generate_output FILE");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This rank's replica generates its rows (exec_rows), then every replica
 * head's rows reach rank 0: each world rank adds its rows into zeroed
 * arrays (a row has exactly one contributor, so the sums are exact). */
static PetscErrorCode generate_rows(const RunCtx *run, DModel *dm, const GenerateOptions *o, const TokenData *p,
                                    int max_prompt, GenBatch *all)
{
  const Mesh *m = dm->mesh;
  GenRequest *req;
  GenBatch    mine;
  int         b0 = 0, b1 = 0, T = all->Tmax, B = p->N;
  int        *ibuf;
  float      *fbuf;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(B, &req));
  for (int b = 0; b < B; b++) req[b] = (GenRequest){b, p->tokens + (size_t)b * p->T, p->lengths[b], 0, 0};
  PetscCall(PetscCalloc2((size_t)B * (T + 3), &ibuf, (size_t)B * T, &fbuf));
  if (dmodel_member(dm)) {
    GenEngine *eng;

    exec_rows(B, m->dp, m->d, &b0, &b1);
    PetscCall(gen_batch_create(b1 - b0, T, gen_masked(&o->gen), &mine));
    PetscCall(gen_engine_create(dm->lm, &o->gen, max_prompt, &eng));
    PetscCall(PetscLogEventBegin(sys_log.generate, 0, 0, 0, 0));
    PetscCall(gen_generate(eng, (uint64_t)run->seed, 0, b1 - b0, req + b0, &mine, NULL, NULL));
    PetscCall(PetscLogEventEnd(sys_log.generate, 0, 0, 0, 0));
    PetscCall(gen_engine_destroy(&eng));
    if (run->rank == exec_head(m, m->d)) {
      for (int i = 0; i < b1 - b0; i++) {
        int b = b0 + i;
        PetscCall(PetscArraycpy(ibuf + (size_t)b * T, mine.tokens + (size_t)i * T, T));
        PetscCall(PetscArraycpy(fbuf + (size_t)b * T, mine.logprobs + (size_t)i * T, T));
        ibuf[(size_t)B * T + b]         = mine.prompt_len[i];
        ibuf[(size_t)B * (T + 1) + b]   = mine.response_len[i];
        ibuf[(size_t)B * (T + 2) + b]   = mine.eos[i];
      }
    }
    PetscCall(gen_batch_destroy(&mine));
  }
  PetscCallMPI(sys_mpi_reduce(run->rank ? ibuf : MPI_IN_PLACE, ibuf, B * (T + 3), MPI_INT, MPI_SUM, 0, run->comm));
  PetscCallMPI(sys_mpi_reduce(run->rank ? fbuf : MPI_IN_PLACE, fbuf, B * T, MPI_FLOAT, MPI_SUM, 0, run->comm));
  if (!run->rank) {
    PetscCall(PetscArraycpy(all->tokens, ibuf, (size_t)B * T));
    PetscCall(PetscArraycpy(all->logprobs, fbuf, (size_t)B * T));
    PetscCall(PetscArraycpy(all->prompt_len, ibuf + (size_t)B * T, B));
    PetscCall(PetscArraycpy(all->response_len, ibuf + (size_t)B * (T + 1), B));
    PetscCall(PetscArraycpy(all->eos, ibuf + (size_t)B * (T + 2), B));
  }
  PetscCall(PetscFree2(ibuf, fbuf));
  PetscCall(PetscFree(req));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The output: a token dataset of the whole sequences plus the generation's
 * datasets, written atomically by rank 0. */
static PetscErrorCode generate_write(const RunCtx *run, const GenerateOptions *o, const ModelConfig *cfg,
                                     const GenBatch *g)
{
  TokenData d = { .N              = g->n,
                  .T              = g->Tmax,
                  .vocab_size     = cfg->vocab_size,
                  .tokens         = g->tokens,
                  .lengths        = NULL,
                  .prompt_lengths = g->prompt_len };
  IODataset x[3];
  long long ntok = 0;
  int       nstop = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(g->n, &d.lengths));
  for (int b = 0; b < g->n; b++) {
    d.lengths[b] = g->prompt_len[b] + g->response_len[b];
    ntok += g->response_len[b];
    nstop += g->eos[b];
  }
  x[0] = (IODataset){"response_lengths", 1, {g->n, 0}, g->response_len, PETSC_TRUE};
  x[1] = (IODataset){"logprobs", 2, {g->n, g->Tmax}, g->logprobs, PETSC_FALSE};
  x[2] = (IODataset){"stopped", 1, {g->n, 0}, g->eos, PETSC_TRUE};
  PetscCall(data_write_extra(run->comm, o->output, &d, "generate", x, 3));
  PetscCall(PetscPrintf(run->comm,
                        "generate: %d prompts -> %s: %lld response tokens, %d of %d responses stopped at a stop token, "
                        "%.2f s\n",
                        g->n, o->output, ntok, nstop, g->n, g->seconds));
  PetscCall(PetscFree(d.lengths));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode generate_run(const RunCtx *run, const Backend *be)
{
  GenerateOptions o;
  ModelConfig     cfg;
  TokenData       p;
  Plan            plan;
  PlanNeeds       needs;
  DModel          dm;
  GenBatch        all;
  PetscBool       help;
  int             max_prompt = 1;
  double          t0;

  PetscFunctionBegin;
  PetscCall(generate_set_from_options(&o));
  PetscCall(plan_from_options(run->size, &plan));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(sys_options_check_unused());
  PetscCall(generate_check(&o));
  PetscCall(gen_config_stops_from(run->comm, &o.gen, o.checkpoint));
  PetscCall(ckpt_read_config(run->comm, o.checkpoint, o.role, &cfg));
  PetscCheck(cfg.head == MODEL_HEAD_LM, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-generate_checkpoint %s: -generate_role %s has a scalar head (a reward model or critic); generating "
             "needs an LM head (role policy, actor or reference)",
             o.checkpoint, o.role);
  PetscCall(data_read_vocab(run->comm, o.input, cfg.vocab_size, "the checkpoint's vocab_size", &p));
  PetscCheck(p.vocab_size <= cfg.vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-generate_input %s has vocabulary %d, larger than the model's %d (-generate_checkpoint %s)", o.input,
             p.vocab_size, cfg.vocab_size, o.checkpoint);
  PetscCheck(p.N > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "-generate_input %s holds no prompts", o.input);
  for (int b = 0; b < p.N; b++) max_prompt = PetscMax(max_prompt, p.lengths[b]);
  {
    char prefix[40];
    PetscCall(PetscSNPrintf(prefix, sizeof prefix, "%s_", o.role));
    PetscCall(gen_config_check(&o.gen, &cfg, prefix, max_prompt));
  }
  PetscCall(PetscMemzero(&needs, sizeof needs));
  needs.cfg[MFC_ACTOR_GEN]   = &cfg;
  needs.batch[MFC_ACTOR_GEN] = 0; /* any number of prompts: the replicas take near-equal row ranges */
  PetscCall(plan_check(&plan, &needs));
  if (run->dry_run) {
    PetscCall(plan_print(run->comm, &plan, &needs));
    PetscCall(PetscPrintf(run->comm,
                          "dry run: %d prompts (longest %d tokens), up to %" PetscInt_FMT " new tokens each\n", p.N,
                          max_prompt, o.gen.max_new_tokens));
    PetscCall(data_free(&p));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  t0 = sys_wtime();
  PetscCall(dmodel_create("actor_gen", &cfg, be, &plan, MFC_ACTOR_GEN, PETSC_FALSE, &dm));
  PetscCall(dmodel_load(&dm, o.checkpoint, o.role, PETSC_FALSE, PETSC_FALSE, 0));
  PetscCall(gen_batch_create(p.N, max_prompt + (int)o.gen.max_new_tokens, PETSC_FALSE, &all));
  PetscCall(generate_rows(run, &dm, &o, &p, max_prompt, &all));
  all.seconds = sys_wtime() - t0;
  PetscCall(generate_write(run, &o, &cfg, &all));
  PetscCall(gen_batch_destroy(&all));
  PetscCall(dmodel_destroy(&dm));
  PetscCall(data_free(&p));
  PetscFunctionReturn(PETSC_SUCCESS);
}
