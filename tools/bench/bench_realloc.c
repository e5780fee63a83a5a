/* bench_realloc: parameter reallocation time against bytes moved, for
 * layout pairs that fit the world (run under mpiexec; 2 ranks covers the
 * pairs of a 2-core machine, 4 or more adds the rest). Each pair is planned
 * once (the plan is cached, as in a run) and executed -iters times; the
 * median wall time over ranks' maximum is reported with the bytes that
 * crossed between ranks. One line per pair:
 *   realloc <model> <src> -> <dst>: <MiB> MiB moved, <ms> ms, <GB/s> GB/s */
#include <string.h>

#include "realloc.h"
#include "sys.h"

static const char help[] = "Parameter reallocation benchmark.\n";

typedef struct {
  const char *name;
  int         n0, pp0, dp0, tp0, first0; /* source mesh: n ranks from world rank first */
  int         n1, pp1, dp1, tp1, first1;
} Pair;

static int cmp_double(const void *a, const void *b) { return *(const double *)a < *(const double *)b ? -1 : *(const double *)a > *(const double *)b; }

static PetscErrorCode mesh_of(int n, int pp, int dp, int tp, int first, const Mesh **m)
{
  int r[64];

  PetscFunctionBegin;
  for (int i = 0; i < n; i++) r[i] = first + i;
  PetscCall(mesh_get(r, n, pp, dp, tp, m));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode shard_size(const ModelConfig *cfg, const Mesh *m, size_t *n)
{
  ModelShard sh;
  ModelTensor *t;
  int        nt;

  PetscFunctionBegin;
  *n = 0;
  if (m->me < 0) PetscFunctionReturn(PETSC_SUCCESS);
  model_shard_of_mesh(cfg, m, &sh);
  PetscCall(model_tensor_table_shard(cfg, &sh, &t, &nt, n));
  PetscCall(PetscFree(t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode bench_pair(const char *model, const ModelConfig *cfg, const Pair *p, int iters, int world)
{
  const Mesh        *src, *dst;
  const ReallocPlan *plan;
  size_t             ns, nd;
  float             *a, *b;
  double            *t;
  ReallocStats       st;

  PetscFunctionBegin;
  if (p->first0 + p->n0 > world || p->first1 + p->n1 > world) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(mesh_of(p->n0, p->pp0, p->dp0, p->tp0, p->first0, &src));
  PetscCall(mesh_of(p->n1, p->pp1, p->dp1, p->tp1, p->first1, &dst));
  PetscCall(realloc_plan_get(cfg, src, dst, p->name, &plan));
  PetscCall(shard_size(cfg, src, &ns));
  PetscCall(shard_size(cfg, dst, &nd));
  PetscCall(PetscMalloc3(ns + 1, &a, nd + 1, &b, iters, &t));
  for (size_t i = 0; i < ns; i++) a[i] = (float)i;
  PetscCall(realloc_execute(plan, a, b, 16u << 20, &st)); /* warm-up: first touch of the buffers */
  for (int k = 0; k < iters; k++) {
    PetscCallMPI(MPI_Barrier(MPI_COMM_WORLD));
    PetscCall(realloc_execute(plan, a, b, 16u << 20, &st));
    PetscCallMPI(MPI_Allreduce(&st.seconds, &t[k], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  }
  qsort(t, iters, sizeof *t, cmp_double);
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "realloc %s %s: %.1f MiB moved, %.2f ms, %.2f GB/s\n", model, p->name, realloc_plan_bytes(plan) / 1048576.0, 1e3 * t[iters / 2],
                        t[iters / 2] > 0 ? realloc_plan_bytes(plan) / t[iters / 2] / 1e9 : 0.0));
  PetscCall(PetscFree3(a, b, t));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  /* the quickstart policy and a 4-layer, 512-wide model with a 16k vocabulary (~21M parameters, 84 MB) */
  ModelConfig small = {.n_layer = 2, .n_head = 4, .n_embd = 128, .vocab_size = 20, .n_positions = 32, .head = MODEL_HEAD_LM};
  ModelConfig large = {.n_layer = 4, .n_head = 8, .n_embd = 512, .vocab_size = 16384, .n_positions = 1024, .head = MODEL_HEAD_LM};
  Pair      pairs[] = {
    {"dp2 -> tp2 (same ranks)",           2, 1, 2, 1, 0, 2, 1, 1, 2, 0},
    {"tp2 -> dp2 (same ranks)",           2, 1, 1, 2, 0, 2, 1, 2, 1, 0},
    {"tp2 -> pp2 (same ranks)",           2, 1, 1, 2, 0, 2, 2, 1, 1, 0},
    {"{0} -> {1} (shadow sync)",          1, 1, 1, 1, 0, 1, 1, 1, 1, 1},
    {"tp2 -> {0} (checkpoint gather)",    2, 1, 1, 2, 0, 1, 1, 1, 1, 0},
    {"dp2 {0,1} -> tp2 {2,3} (disaggregated)", 2, 1, 2, 1, 0, 2, 1, 1, 2, 2},
    {"tp2dp2 -> tp4",                     4, 1, 2, 2, 0, 4, 1, 1, 4, 0},
    {"pp2tp2 -> dp4",                     4, 2, 1, 2, 0, 4, 1, 4, 1, 0},
  };
  PetscInt iters = 5;
  int      world;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(comm_setup());
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-iters", &iters, NULL));
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "# bench_realloc on %d ranks, median of %d\n", world, (int)iters));
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    PetscCall(bench_pair("quickstart", &small, &pairs[k], (int)iters, world));
    PetscCall(bench_pair("21M", &large, &pairs[k], (int)iters, world));
  }
  PetscCall(realloc_cache_destroy());
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return 0;
}
