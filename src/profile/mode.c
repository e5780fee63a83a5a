/* mode.c: -mode profile. Reads the deck's model shape (-policy_*: the actor,
 * and the critic, which shares its trunk with a scalar head) and the grid
 * options (-profile_*), times the model parts, the AdamW step and the
 * collectives on every rank of the job, and rank 0 writes the profile file.
 * The deck's other options (training, PPO) are not this mode's and are
 * ignored, so the deck of the run to be planned profiles as it is. */
#include "profile_impl.h"
#include "internal/h5util.h"
#include "plan.h"
#include <string.h>
#include <unistd.h>

/* 1, 4, 16, ... below max, then max itself: a log-spaced axis ending on the
 * largest size the deck needs */
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

static PetscErrorCode machine(const RunCtx *run, const Backend *be, PetscReal mem, Profile *pf)
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
  pf->ranks_per_node  = on0;
  pf->mem_per_rank    = mem > 0 ? mem : (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / on0;
  pf->bytes_per_param = 4;
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

PetscErrorCode profile_run(RunCtx *run, const Backend *be)
{
  WriteCtx  wctx;
  GPTConfig cfg;
  ProfGrid  gr = {0};
  ProfTimer tm = {be, 1, 5};
  Profile   pf;
  PetscInt  rows_max = 64, len_max = 256, repeats = 5, warmup = 1, extra = 2;
  PetscReal bytes_max = 64.0 * 1024 * 1024, opt_max = 4194304, mem = 0;
  char      output[PETSC_MAX_PATH_LEN] = "", file[PETSC_MAX_PATH_LEN] = "";
  PetscInt  world = run->size;
  PetscBool help;
  double    t0 = MPI_Wtime(), t1, t2;
  int       nb, nmesh = 0;
  double   *b, *opt;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&pf, sizeof pf));
  PetscOptionsBegin(PETSC_COMM_WORLD, "profile_", "Profiler (-mode profile)", NULL);
  RfOptString("-output", "Profile file to write, HDF5 (required)", output, sizeof output);
  RfOptInt("-rows_max", "Largest rows (sequences) of the model grid: rows 1, 4, 16, ... up to it", rows_max, &rows_max);
  RfOptInt("-len_max", "Largest length of the model grid: 4, 16, 64, ... up to it (capped at -policy_n_positions)", len_max, &len_max);
  RfOptInt("-extra_layers", "The block's time is measured on models of 1 and 1+K layers: K", extra, &extra);
  RfOptReal("-bytes_max", "Largest collective message: 1 KiB, 4 KiB, ... up to it", bytes_max, &bytes_max);
  RfOptReal("-opt_max", "Largest AdamW parameter count: 1024, 4096, ... up to it", opt_max, &opt_max);
  RfOptInt("-repeats", "Timed repetitions of each entry (the fastest is kept)", repeats, &repeats);
  RfOptInt("-warmup", "Untimed runs before the timed ones", warmup, &warmup);
  RfOptReal("-mem_per_rank", "Memory one rank may use, bytes, recorded for the cost model (0: the host's memory / ranks per node)", mem, &mem);
  RfOptString("-file", "Measure nothing: print the cost model's estimate of this deck's plan from this profile", file, sizeof file);
  RfOptInt("-ranks", "With -profile_file: the ranks the plan is for (default: this job's)", world, &world);
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  if (file[0]) {
    PetscCheck(world >= 1 && world <= PLAN_MAX_RANKS, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_ranks %" PetscInt_FMT " must be in 1..%d", world, PLAN_MAX_RANKS);
    PetscCall(profile_estimate(run, file, (int)world));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(gpt_config_set_from_options("policy_", &cfg)); /* after -help: SFT lists these options */
  PetscCall(gpt_config_check(&cfg, "policy_"));
  PetscCheck(output[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL, "-mode profile needs -profile_output FILE");
  PetscCheck(rows_max >= 1 && rows_max <= 65536, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_rows_max %" PetscInt_FMT " must be in 1..65536", rows_max);
  PetscCheck(len_max >= 2, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_len_max %" PetscInt_FMT " must be at least 2", len_max);
  PetscCheck(extra >= 1 && extra <= 64, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_extra_layers %" PetscInt_FMT " must be in 1..64", extra);
  PetscCheck(repeats >= 1 && repeats <= 1000 && warmup >= 0 && warmup <= 1000, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_repeats %" PetscInt_FMT " must be in 1..1000 and -profile_warmup %" PetscInt_FMT " in 0..1000", repeats, warmup);
  PetscCheck(bytes_max >= 1024 && bytes_max <= 1 << 30, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_bytes_max %g must be in 1024..2^30", (double)bytes_max);
  PetscCheck(opt_max >= 1024 && opt_max <= 1 << 30, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_opt_max %g must be in 1024..2^30", (double)opt_max);
  PetscCheck(mem >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-profile_mem_per_rank %g must be >= 0", (double)mem);
  PetscCheck(run->size >= 2 && run->size <= 1024, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-mode profile runs on 2 to 1024 ranks (got %d): it times the collectives between them", run->size);
  if (run->dry_run) {
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "profile: dry run, options are valid\n"));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(h5u_output_check("profile", output));
  tm.warmup = (int)warmup, tm.repeats = (int)repeats;
  gr.extra_layers = (int)extra;
  PetscCall(pow4_axis(1, (double)rows_max, &gr.nrows, &gr.rows));
  PetscCall(pow4_axis(4, (double)PetscMin(len_max, cfg.n_positions), &gr.nlen, &gr.len));
  PetscCall(PetscMalloc1(16, &gr.tp));
  for (int tp = 1; tp <= run->size && tp <= 64; tp *= 2) /* powers of two that shard the heads and the vocabulary */
    if (cfg.n_head % tp == 0 && cfg.vocab_size % tp == 0) gr.tp[gr.ntp++] = tp;
  PetscCall(machine(run, be, mem, &pf));
  PetscCall(pow4_axis(1024, bytes_max, &nb, &b));
  PetscCall(pow4_axis(1024, opt_max, &pf.nopt, &opt));
  for (int m = 2; m <= run->size; m++) nmesh++;
  PetscCall(profile_tables_alloc(&pf, pf.nopt, nmesh, nb));
  PetscCall(PetscArraycpy(pf.opt_n, opt, pf.nopt));
  PetscCall(PetscArraycpy(pf.bytes, b, nb));
  for (int m = 2, k = 0; m <= run->size; m++) pf.mesh[k++] = m;
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "profile: %d ranks, %d threads each, backend %s; model %d x %d, grid %d rows x %d lengths x %d tp sizes\n", run->size, run->nthreads, be->name,
                        cfg.n_layer, cfg.n_embd, gr.nrows, gr.nlen, gr.ntp));
  PetscCall(prof_models(&tm, &cfg, &gr, &pf));
  t1 = MPI_Wtime();
  PetscCall(prof_optimizer(&tm, &pf));
  t2 = MPI_Wtime();
  PetscCall(prof_collectives(&tm, &pf));
  pf.seconds = MPI_Wtime() - t0;
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "profile: measured in %.1f s (models %.1f s, AdamW %.1f s, collectives %.1f s)\n", pf.seconds, t1 - t0, t2 - t1, t0 + pf.seconds - t2));
  wctx.path = output, wctx.pf = &pf;
  PetscCall(h5u_rank0(PETSC_COMM_WORLD, write_task, &wctx));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "profile: wrote %s\n", output));
  PetscCall(PetscFree(gr.rows));
  PetscCall(PetscFree(gr.len));
  PetscCall(PetscFree(gr.tp));
  PetscCall(PetscFree(b));
  PetscCall(PetscFree(opt));
  PetscCall(profile_free(&pf));
  PetscFunctionReturn(PETSC_SUCCESS);
}
