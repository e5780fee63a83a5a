/* bench_ckpt: time and peak memory of writing and reading a checkpoint of
 * a model with AdamW state placed on all ranks (GPT-2 124M by default).
 *   mpiexec -n N bin/bench_ckpt [-tp T] [-pp P] [-n_layer 12 -n_embd 768
 *       -n_head 12 -vocab_size 50257 -n_positions 1024] [-dir D]
 * The layout is pp x dp x tp over the N ranks (dp = N / (tp pp)). Before
 * each step the peak resident size is reset (/proc/self/clear_refs, 5), so
 * "peak +MiB" is how far the step raised the rank's memory above what it
 * held before (the model itself not counted). Uses only interfaces that
 * predate parallel checkpoints, so it builds against either version. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "io.h"
#include "train.h"

static const char help[] = "Checkpoint write/read time and peak memory.\n";

static long status_kib(const char *key)
{
  FILE *f = fopen("/proc/self/status", "r");
  char  line[256];
  long  v = -1;

  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) sscanf(line + strlen(key), "%ld", &v);
  fclose(f);
  return v;
}

static void reset_peak(void)
{
  FILE *f = fopen("/proc/self/clear_refs", "w");

  if (f) {
    fputs("5", f);
    fclose(f);
  }
}

/* Seconds of the slowest rank and each rank's peak increase (MiB). */
static PetscErrorCode report(const char *what, double t, long base, int size)
{
  double tmax, mib = (status_kib("VmHWM:") - base) / 1024.0, *all = NULL;
  int    rank;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  if (!rank) PetscCall(PetscMalloc1(size, &all));
  PetscCallMPI(MPI_Gather(&mib, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  if (!rank) {
    printf("%-6s %8.2f s   peak +MiB per rank:", what, tmax);
    for (int r = 0; r < size; r++) printf(" %7.0f", all[r]);
    printf("\n");
    PetscCall(PetscFree(all));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode opt_int(const char *name, int *value)
{
  PetscInt v = *value;

  PetscFunctionBegin;
  PetscCall(PetscOptionsGetInt(NULL, NULL, name, &v, NULL));
  *value = (int)v;
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  ModelConfig    cfg = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .n_positions = 1024, .head = MODEL_HEAD_LM};
  PetscInt       tp = 1, pp = 1;
  int            size;
  Plan           plan;
  DModel         dm;
  RunCtx         run;
  const Backend *be;
  CkptState      st = {1, 0, 1, 0};
  CkptModel      cm = {"actor", NULL, PETSC_TRUE, PETSC_FALSE};
  DModel *const  dms[1] = {&dm};
  char           path[PETSC_MAX_PATH_LEN];
  double         t0;
  long           base;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(comm_setup());
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-tp", &tp, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-pp", &pp, NULL));
  PetscCall(opt_int("-n_layer", &cfg.n_layer));
  PetscCall(opt_int("-n_embd", &cfg.n_embd));
  PetscCall(opt_int("-n_head", &cfg.n_head));
  PetscCall(opt_int("-vocab_size", &cfg.vocab_size));
  PetscCall(opt_int("-n_positions", &cfg.n_positions));
  PetscCheck(size % (tp * pp) == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "bench_ckpt: tp %d x pp %d does not divide %d ranks", (int)tp, (int)pp, size);
  PetscCall(PetscMemzero(&run, sizeof run));
  run.comm = MPI_COMM_WORLD, run.size = size;
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &run.rank));
  PetscCall(PetscStrncpy(run.output_dir, "/tmp", sizeof run.output_dir));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-dir", run.output_dir, sizeof run.output_dir, NULL));
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/bench_ckpt.h5", run.output_dir));

  PetscCall(backend_get("cpu", &be));
  PetscCall(PetscMemzero(&plan, sizeof plan));
  plan.world = size, plan.bucket_mb = 25;
  plan.call[MFC_ACTOR_TRAIN] = (PlanCall){.nranks = size, .pp = (int)pp, .dp = size / (int)(tp * pp), .tp = (int)tp, .mbs = 1};
  for (int r = 0; r < size; r++) plan.call[MFC_ACTOR_TRAIN].ranks[r] = r;
  PetscCall(dmodel_create("actor", &cfg, be, &plan, MFC_ACTOR_TRAIN, PETSC_TRUE, &dm));
  { /* non-zero values in the shard and its moments, so every page is real */
    float *h;
    size_t n = dm.lm->nparams;
    PetscCall(PetscMalloc1(n, &h));
    for (size_t i = 0; i < n; i++) h[i] = 1e-3f * (float)(i % 1000);
    PetscCall(model_params_set(dm.lm, h));
    PetscCall(model_optim_set(dm.lm, h, h, 1));
    PetscCall(PetscFree(h));
  }
  if (run.rank == 0) {
    size_t n;
    ModelTensor *t;
    int nt;
    PetscCall(model_tensor_table(&cfg, &t, &nt, &n));
    PetscCall(PetscFree(t));
    printf("bench_ckpt: %zu parameters (%.0f MiB with AdamW moments), %d ranks: pp %d x dp %d x tp %d, file %s\n", n, 3.0 * n * 4 / 1048576, size, (int)pp, size / (int)(tp * pp), (int)tp, path);
  }
  PetscCallMPI(MPI_Barrier(MPI_COMM_WORLD));
  base = status_kib("VmRSS:");
  reset_peak();
  t0 = sys_wtime();
  PetscCall(train_checkpoint_models(&run, dms, &cm, 1, "bench_ckpt.h5", &st, (size_t)(25 * 1048576), NULL));
  PetscCallMPI(MPI_Barrier(MPI_COMM_WORLD));
  PetscCall(report("write", sys_wtime() - t0, base, size));

  base = status_kib("VmRSS:");
  reset_peak();
  t0 = sys_wtime();
  PetscCall(dmodel_load(&dm, path, "actor", PETSC_TRUE, PETSC_FALSE, 0));
  PetscCallMPI(MPI_Barrier(MPI_COMM_WORLD));
  PetscCall(report("read", sys_wtime() - t0, base, size));

  if (run.rank == 0) (void)remove(path);
  PetscCall(dmodel_destroy(&dm));
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return 0;
}
