/* mode.c: -mode profile. Takes the deck's models as its PPO job would read
 * them (CostDeck: the checkpoints the deck names, else the -policy_ model),
 * reads the grid options (-profile_*), times the model parts of every
 * distinct trunk (each with the LM head and the scalar head), the AdamW
 * step and the collectives on every rank of the job (profile_measure), and
 * rank 0 writes the profile file. So the deck of the run to be planned
 * profiles as it is. */
#include "profile_impl.h"
#include "io.h"
#include "plan.h"
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* 1, 4, 16, ... below max, then max itself: a log-spaced axis ending on the
 * largest size the deck needs */
/* The files -mode profile reads and writes, for io_files_check. */
const IoFileOption profile_file_options[] = {
  {"-profile_file", IO_FILE_IN, NULL, NULL},
  {"-profile_output", IO_FILE_OUT, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

static PetscErrorCode pow4_axis(double first, double max, int *n, double **x)
{
  double v;
  int    k = 0;

  PetscFunctionBegin;
  for (v = first; v < max; v *= 4) k++;
  PetscCall(PetscMalloc1(k + 1, x));
  k = 0;
  for (v = first; v < max; v *= 4) (*x)[k++] = v;
  (*x)[k++] = max;
  *n        = k;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode machine(const RunCtx *run, const Backend *be, double mem, Profile *pf)
{
  int node, on0 = 0;

  PetscFunctionBegin;
  if (gethostname(pf->host, sizeof pf->host - 1)) PetscCall(PetscStrncpy(pf->host, "unknown", sizeof pf->host));
  PetscCall(PetscStrncpy(pf->backend, be->name, sizeof pf->backend));
  pf->cores   = (int)sysconf(_SC_NPROCESSORS_ONLN);
  pf->threads = run->nthreads;
  pf->nranks  = run->size;
  for (int r = 0; r < run->size; r++) {
    PetscCall(comm_node_of(r, &node));
    on0 += node == 0;
  }
  /* the ranks one node holds: the job's on node 0, or, for a job on one
   * node of the CPU backend, as many as its cores take at this thread
   * count (a 1-rank profile must not make every rank a node of its own) */
  pf->ranks_per_node = on0;
  if (on0 == run->size && !strcmp(be->name, "cpu"))
    pf->ranks_per_node = PetscMax(on0, pf->cores / PetscMax(1, pf->threads));
  pf->mem_per_rank    = mem > 0 ? mem : (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / on0;
  pf->bytes_per_param = 4;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The deck's distinct trunks (all but n_layer and the head, which the
 * tables do not depend on): the actor's first, then the critic's, the
 * reference's and the reward model's when they differ from those before. */
int prof_deck_trunks(const CostDeck *d, ModelConfig t[4])
{
  int n = 0;

  for (int k = 0; k < 4; k++) {
    const ModelConfig *c   = &d->cfg[k];
    PetscBool        dup = PETSC_FALSE;
    if ((k == 1 && d->critic_free) || (k == 3 && d->reward_free)) continue;
    for (int i = 0; i < n; i++)
      dup = dup || (t[i].n_embd == c->n_embd && t[i].n_head == c->n_head && t[i].vocab_size == c->vocab_size &&
                    t[i].n_positions == c->n_positions);
    if (!dup) t[n++] = *c;
  }
  return n;
}

/* The grid of one trunk: the tp sizes are the powers of two up to the
 * job's ranks that shard its heads and vocabulary. */
static PetscErrorCode trunk_grid(const ProfSpec *sp, const ModelConfig *cfg, int size, ProfGrid *gr)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(gr, sizeof *gr));
  gr->extra_layers = sp->extra;
  PetscCall(pow4_axis(1, (double)sp->rows_max, &gr->nrows, &gr->rows));
  PetscCall(pow4_axis(4, (double)PetscMin(sp->len_max, cfg->n_positions), &gr->nlen, &gr->len));
  PetscCall(PetscMalloc1(16, &gr->tp));
  for (int tp = 1; tp <= size && tp <= 64; tp *= 2)
    if (model_tp_divides(cfg, tp)) gr->tp[gr->ntp++] = tp;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode grid_free(ProfGrid *gr)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(gr->rows));
  PetscCall(PetscFree(gr->len));
  PetscCall(PetscFree(gr->tp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The optimizer and collective axes: groups of 2 .. size ranks (on one
 * rank, the 2-rank group prof_collectives models). */
static PetscErrorCode tables_setup(const ProfSpec *sp, int size, Profile *pf)
{
  int     nb, nopt;
  double *b, *opt;

  PetscFunctionBegin;
  PetscCall(pow4_axis(1024, sp->bytes_max, &nb, &b));
  PetscCall(pow4_axis(1024, sp->opt_max, &nopt, &opt));
  PetscCall(profile_tables_alloc(pf, nopt, PetscMax(size - 1, 1), nb));
  PetscCall(PetscArraycpy(pf->opt_n, opt, nopt));
  PetscCall(PetscArraycpy(pf->bytes, b, nb));
  for (int k = 0; k < pf->nmesh; k++) pf->mesh[k] = k + 2;
  PetscCall(PetscFree(b));
  PetscCall(PetscFree(opt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_measure(const RunCtx *run, const ProfSpec *sp, const CostDeck *deck, Profile *pf)
{
  ProfTimer tm = {run->be, sp->warmup, sp->repeats};
  ModelConfig trunk[4];
  int       ntrunk = prof_deck_trunks(deck, trunk);
  double    t0 = MPI_Wtime(), t1, t2;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(pf, sizeof *pf));
  PetscCall(machine(run, run->be, sp->mem, pf));
  PetscCall(tables_setup(sp, run->size, pf));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                        "profile: %d ranks, %d threads each, backend %s; %d model trunk%s (%s), the first %d x %d\n",
                        run->size, run->nthreads, run->be->name, ntrunk, ntrunk > 1 ? "s" : "", deck->shapes_from,
                        trunk[0].n_layer, trunk[0].n_embd));
  for (int i = 0; i < ntrunk; i++) {
    ProfGrid gr;
    PetscCall(trunk_grid(sp, &trunk[i], run->size, &gr));
    PetscCall(prof_models(&tm, &trunk[i], &gr, pf));
    PetscCall(grid_free(&gr));
  }
  t1 = MPI_Wtime();
  PetscCall(prof_optimizer(&tm, pf));
  t2 = MPI_Wtime();
  PetscCall(prof_collectives(&tm, pf));
  pf->seconds = MPI_Wtime() - t0;
  PetscCall(PetscPrintf(PETSC_COMM_WORLD,
                        "profile: measured in %.1f s (models %.1f s, AdamW %.1f s, collectives %.1f s)\n", pf->seconds,
                        t1 - t0, t2 - t1, t0 + pf->seconds - t2));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char    *path;
  const Profile *pf;
} WriteCtx;

static PetscErrorCode write_task(void *vctx)
{
  WriteCtx *w = (WriteCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(profile_write(w->path, w->pf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_write_rank0(const char *path, const Profile *pf)
{
  WriteCtx w = {path, pf};

  PetscFunctionBegin;
  PetscCall(io_on_root(PETSC_COMM_WORLD, write_task, &w));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode spec_check(const ProfSpec *sp)
{
  PetscFunctionBegin;
  PetscCheck(sp->rows_max >= 1 && sp->rows_max <= 65536, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-profile_rows_max %d must be in 1..65536", sp->rows_max);
  PetscCheck(sp->len_max >= 2, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_len_max %d must be at least 2",
             sp->len_max);
  PetscCheck(sp->extra >= 1 && sp->extra <= 64, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-profile_extra_layers %d must be in 1..64", sp->extra);
  PetscCheck(sp->repeats >= 1 && sp->repeats <= 1000 && sp->warmup >= 0 && sp->warmup <= 1000, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE, "-profile_repeats %d must be in 1..1000 and -profile_warmup %d in 0..1000",
             sp->repeats, sp->warmup);
  PetscCheck(sp->bytes_max >= 1024 && sp->bytes_max <= 1 << 30, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-profile_bytes_max %g must be in 1024..2^30", sp->bytes_max);
  PetscCheck(sp->opt_max >= 1024 && sp->opt_max <= 1 << 30, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-profile_opt_max %g must be in 1024..2^30", sp->opt_max);
  PetscCheck(sp->mem >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_mem_per_rank %g must be >= 0",
             sp->mem);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_run(RunCtx *run, CostDeckFn deck_of)
{
  CostDeck  deck;
  Profile   pf;
  ProfSpec  sp = {64, 256, 5, 1, 2, 64.0 * 1024 * 1024, 4194304, 0};
  PetscInt  rows_max = sp.rows_max, len_max = sp.len_max, repeats = sp.repeats, warmup = sp.warmup, extra = sp.extra;
  PetscReal bytes_max = sp.bytes_max, opt_max = sp.opt_max, mem = sp.mem;
  char      output[PETSC_MAX_PATH_LEN] = "", file[PETSC_MAX_PATH_LEN] = "";
  PetscInt  world = run->size;
  PetscBool help;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, "profile_", "Profiler (-mode profile)", NULL);
  RfOptString("-output", "Profile file to write, HDF5 (required)", output, sizeof output);
  RfOptInt("-rows_max", "Largest rows (sequences) of the model grid: rows 1, 4, 16, ... up to it", rows_max, &rows_max);
  RfOptInt("-len_max", "Largest length of the model grid: 4, 16, 64, ... up to it (capped at each model's n_positions)",
           len_max, &len_max);
  RfOptInt("-extra_layers", "The block's time is measured on models of 1 and 1+K layers: K", extra, &extra);
  RfOptReal("-bytes_max", "Largest collective message: 1 KiB, 4 KiB, ... up to it", bytes_max, &bytes_max);
  RfOptReal("-opt_max", "Largest AdamW parameter count: 1024, 4096, ... up to it", opt_max, &opt_max);
  RfOptInt("-repeats", "Timed repetitions of each entry (the fastest is kept)", repeats, &repeats);
  RfOptInt("-warmup", "Untimed runs before the timed ones", warmup, &warmup);
  RfOptReal("-mem_per_rank",
            "Memory one rank may use, bytes, recorded for the cost model (0: the host's memory / ranks per node)", mem,
            &mem);
  RfOptString("-file", "Measure nothing: print the cost model's estimate of this deck's plan from this profile", file,
              sizeof file);
  RfOptInt("-ranks", "With -profile_file: the ranks the plan is for (default: this job's)", world, &world);
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  if (file[0]) {
    PetscCall(deck_of(run, PETSC_FALSE, &deck));
    PetscCheck(world >= 1 && world <= PLAN_MAX_RANKS, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-profile_ranks %" PetscInt_FMT " must be in 1..%d", world, PLAN_MAX_RANKS);
    PetscCall(profile_estimate(run, file, (int)world, &deck));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCheck(output[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode profile needs -profile_output FILE");
  sp = (ProfSpec){ (int)PetscMin(rows_max, INT32_MAX),
                   (int)PetscMin(len_max, INT32_MAX),
                   (int)PetscMin(repeats, INT32_MAX),
                   (int)PetscMin(warmup, INT32_MAX),
                   (int)PetscMin(extra, INT32_MAX),
                   bytes_max,
                   opt_max,
                   mem };
  PetscCall(spec_check(&sp));
  PetscCheck(run->size >= 2 && run->size <= 1024, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-mode profile runs on 2 to 1024 ranks (got %d): it times the collectives between them", run->size);
  PetscCall(deck_of(run, PETSC_FALSE, &deck));
  if (run->dry_run) {
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "profile: dry run, options are valid\n"));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(io_output_ok("profile", output));
  PetscCall(profile_measure(run, &sp, &deck, &pf));
  PetscCall(profile_write_rank0(output, &pf));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "profile: wrote %s\n", output));
  PetscCall(profile_free(&pf));
  PetscFunctionReturn(PETSC_SUCCESS);
}
