/* test_ckpt: checkpoints read and written by shard (parallel HDF5). Run with
 * mpiexec -n 4.
 *  - A checkpoint written whole by rank 0 is loaded onto a placed model and
 *    written again by its members, hop after hop over layouts (pp2 x tp2;
 *    tp2 x dp2 with ZeRO-1; permuted ranks pp2 x dp2 with ZeRO-1; two of the
 *    four ranks, dp2, with an offloaded second model beside it), the first
 *    the first with collective MPI-IO (the default across nodes), the
 *    second in the default mode (here: one node, independent), the last two
 *    hops through a staging buffer of a few floats (and independent
 *    MPI-IO: that many collective calls are slow on oversubscribed cores),
 *    so transfers cross rows, q|k|v groups and the replicas' ranges. After every hop each rank reads
 *    the file whole and finds parameters, moments and step bit-identical to
 *    the original, and after every load each member's shard (parameters,
 *    moments, step) is its piece of the original.
 *  - A write that fails on one rank only (rank 3 holds the model and has no
 *    optimizer state) fails on every rank with that rank's message, leaves
 *    the previous file byte for byte and no temporary.
 *
 * The checks in detail: checkpoints by shard (parallel HDF5): a checkpoint written whole by
 * rank 0 is loaded onto a layout and written again by its members, hop after hop (pp2 x tp2
 * with collective MPI-IO; tp2 x dp2 with ZeRO-1 in the default mode, independent on one node;
 * permuted ranks pp2 x dp2 with ZeRO-1 and two ranks dp2 beside an offloaded model using
 * independent MPI-IO and staging buffers of 5 and 7 floats, so transfers cross rows, q/k/v
 * groups and replica ranges); after each load every member's shard (parameters, moments, step)
 * is its piece of the original, after each write the file read whole on every rank is
 * bit-identical to the original; a write failing on one rank only (rank 3) fails on all with
 * its message, keeps the previous file byte for byte and leaves no temporary. Breaking the tp
 * offset of the hyperslabs, or the replicas' exchange after a read, fails it. About 60 s on
 * the loaded 2-core machine
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "io.h"
#include "internal/ckpt_shard.h"
#include "test_report.h"

static int world_rank, world_size;

static const char help[] = "Checkpoints by shard regression tests.\n";

typedef struct {
  const char *name;
  int         n, ranks[4], pp, dp, tp;
  PetscBool   zero1;
  size_t      chunk;      /* staging buffer, floats */
  int         collective; /* MPI-IO mode (ckpt_collective) */
} Layout;

/* The whole model /role of path on this rank (every rank reads all). */
static PetscErrorCode read_whole(const ModelConfig *cfg, const char *path, const char *role, PetscBool optim, float **p, float **m, float **v, int *step)
{
  Model *g;

  PetscFunctionBegin;
  PetscCall(model_create(cfg, backend_cpu(), &g));
  if (optim) PetscCall(model_optim_init(g));
  PetscCall(ckpt_read_model(MPI_COMM_WORLD, path, &(CkptModel){role, g, optim, PETSC_FALSE}));
  PetscCall(PetscMalloc3(g->nparams, p, g->nparams, m, g->nparams, v));
  PetscCall(model_params_get(g, *p));
  if (optim) PetscCall(model_optim_get(g, *m, *v));
  *step = g->step;
  PetscCall(model_destroy(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode same_as(const ModelConfig *cfg, const char *path, const char *role, PetscBool optim, const float *p0, const float *m0, const float *v0, int step0, size_t n, PetscBool *ok)
{
  float *p, *m, *v;
  int    step;

  PetscFunctionBegin;
  PetscCall(read_whole(cfg, path, role, optim, &p, &m, &v, &step));
  *ok = memcmp(p, p0, n * sizeof(float)) ? PETSC_FALSE : PETSC_TRUE;
  if (optim && (memcmp(m, m0, n * sizeof(float)) || memcmp(v, v0, n * sizeof(float)) || step != step0)) *ok = PETSC_FALSE;
  PetscCall(PetscFree3(p, m, v));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The original: random parameters, moments from the index, step 7, written
 * whole by rank 0 (the only rank with a model). */
static PetscErrorCode write_original(const ModelConfig *cfg, const char *path)
{
  Model  *g = NULL;
  float *m, *v;

  PetscFunctionBegin;
  if (world_rank == 0) {
    PetscCall(model_create(cfg, backend_cpu(), &g));
    PetscCall(model_init_random(g, 99));
    PetscCall(model_optim_init(g));
    PetscCall(PetscMalloc2(g->nparams, &m, g->nparams, &v));
    for (size_t i = 0; i < g->nparams; i++) m[i] = 1e-3f * (float)((int)(i * 37 % 101) - 50), v[i] = 1e-4f * (float)(i * 13 % 97 + 1);
    PetscCall(model_optim_set(g, m, v, 7));
    PetscCall(PetscFree2(m, v));
  }
  PetscCall(ckpt_write_placed(MPI_COMM_WORLD, path, &(CkptModel){"actor", g, PETSC_TRUE, PETSC_FALSE}, &(CkptWhere){cfg, NULL, NULL}, 1, NULL));
  PetscCall(model_destroy(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every member's shard (parameters, and the moments gathered over the
 * replicas) equals its piece of the original p0, m0, v0. */
static PetscErrorCode shard_same(const DModel *dm, const float *p0, const float *m0, const float *v0, PetscBool *ok)
{
  float *want, *have, *mh, *vh;
  size_t n;

  PetscFunctionBegin;
  *ok = PETSC_TRUE;
  if (!dmodel_member(dm)) PetscFunctionReturn(PETSC_SUCCESS);
  n = dm->lm->nparams;
  PetscCall(PetscMalloc4(n, &want, n, &have, n, &mh, n, &vh));
  PetscCall(model_params_get(dm->lm, have));
  PetscCall(model_shard_extract(&dm->cfg, &dm->lm->sh, p0, want));
  if (memcmp(have, want, n * sizeof(float))) *ok = PETSC_FALSE;
  if (dm->optim) {
    PetscCall(model_optim_get(dm->lm, mh, vh)); /* collective over the replicas */
    PetscCall(model_shard_extract(&dm->cfg, &dm->lm->sh, m0, want));
    if (memcmp(mh, want, n * sizeof(float))) *ok = PETSC_FALSE;
    PetscCall(model_shard_extract(&dm->cfg, &dm->lm->sh, v0, want));
    if (memcmp(vh, want, n * sizeof(float)) || dm->lm->step != 7) *ok = PETSC_FALSE;
  }
  PetscCall(PetscFree4(want, have, mh, vh));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Loads src onto layout L (checking the loaded shards against the
 * original), writes it (with an offloaded copy as /reference when frozen)
 * to dst. */
static PetscErrorCode hop(const ModelConfig *cfg, const Layout *L, const char *src, const char *dst, PetscBool frozen, const float *p0, const float *m0, const float *v0)
{
  PetscBool ok;
  char      det[200];
  Plan      plan;
  DModel    dm, ref;
  CkptModel cm[2];
  CkptWhere w[2];
  PlanCall *c = &plan.call[MFC_ACTOR_TRAIN];

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&plan, sizeof plan));
  plan.world = world_size, plan.bucket_mb = 1, plan.zero1 = L->zero1;
  c->nranks = L->n, c->pp = L->pp, c->dp = L->dp, c->tp = L->tp, c->mbs = 1;
  for (int i = 0; i < L->n; i++) c->ranks[i] = L->ranks[i];
  ckpt_chunk      = L->chunk;
  ckpt_collective = L->collective;
  PetscCall(dmodel_create("actor", cfg, backend_cpu(), &plan, MFC_ACTOR_TRAIN, PETSC_TRUE, &dm));
  PetscCall(dmodel_load(&dm, src, "actor", PETSC_TRUE, PETSC_FALSE, 0));
  PetscCall(shard_same(&dm, p0, m0, v0, &ok));
  PetscCall(PetscSNPrintf(det, sizeof det, "loaded onto %s: every member's shard (parameters, moments, step) is its piece of the original", L->name));
  test_report(ok, det, NULL);
  PetscCall(dmodel_ckpt_model(&dm, "actor", PETSC_TRUE, &cm[0], &w[0]));
  if (frozen) {
    PetscCall(dmodel_create("reference", cfg, backend_cpu(), &plan, MFC_ACTOR_TRAIN, PETSC_FALSE, &ref));
    PetscCall(dmodel_load(&ref, src, "actor", PETSC_FALSE, PETSC_FALSE, 0));
    PetscCall(dmodel_release(&ref, PETSC_TRUE)); /* offloaded: written from host memory */
    PetscCall(dmodel_ckpt_model(&ref, "reference", PETSC_FALSE, &cm[1], &w[1]));
  }
  PetscCall(ckpt_write_placed(MPI_COMM_WORLD, dst, cm, w, frozen ? 2 : 1, &(CkptState){5, 40, 7, 0.25}));
  if (frozen) PetscCall(dmodel_destroy(&ref));
  PetscCall(dmodel_destroy(&dm));
  ckpt_chunk      = (size_t)1 << 22;
  ckpt_collective = -1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static int count_tmp(const char *dir)
{
  DIR           *d = opendir(dir);
  struct dirent *e;
  int            n = 0;

  if (!d) return -1;
  while ((e = readdir(d)))
    if (strstr(e->d_name, "test_ckpt") && strstr(e->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

static long file_bytes(const char *path, unsigned long *sum)
{
  FILE *f = fopen(path, "rb");
  long  n = 0;
  int   ch;

  *sum = 0;
  if (!f) return -1;
  while ((ch = fgetc(f)) != EOF) *sum = *sum * 131 + (unsigned long)ch, n++;
  fclose(f);
  return n;
}

/* Rank 3 alone holds a model that claims AdamW state it does not have. */
static PetscErrorCode test_failure(const ModelConfig *cfg, const char *dir, const char *path)
{
  Model         *g = NULL;
  PetscErrorCode ierr;
  char          *msg = NULL;
  long           before, after;
  unsigned long  s0, s1;
  char           det[320];

  PetscFunctionBegin;
  before = file_bytes(path, &s0);
  if (world_rank == 3) PetscCall(model_create(cfg, backend_cpu(), &g));
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = ckpt_write_placed(MPI_COMM_WORLD, path, &(CkptModel){"actor", g, PETSC_TRUE, PETSC_FALSE}, &(CkptWhere){cfg, NULL, NULL}, 1, NULL);
  PetscCall(PetscPopErrorHandler());
  if (ierr) PetscCall(PetscErrorMessage(ierr, NULL, &msg));
  after = file_bytes(path, &s1);
  PetscCall(PetscSNPrintf(det, sizeof det, "%s; %ld -> %ld bytes, %d temporaries", msg ? msg : "no error", before, after, count_tmp(dir)));
  test_measure(ierr && msg && strstr(msg, "no optimizer state") && strstr(msg, path) && before > 0 && before == after && s0 == s1 && count_tmp(dir) == 0 ? PETSC_TRUE : PETSC_FALSE, "a write failing on rank 3 only fails on every rank with its message, keeps the previous file byte for byte, leaves no temporary", "%s", world_rank == 0 ? det : "");
  PetscCall(model_destroy(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  ModelConfig  cfg = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 24, .n_positions = 16, .head = MODEL_HEAD_LM};
  const Layout hops[] = {
    {"ranks 0-3 pp2 x tp2, collective I/O",                        4, {0, 1, 2, 3}, 2, 1, 2, PETSC_FALSE, (size_t)1 << 22, 1},
    {"ranks 0-3 tp2 x dp2, ZeRO-1",                4, {0, 1, 2, 3}, 1, 2, 2, PETSC_TRUE,  (size_t)1 << 22, -1},
    {"ranks 3,1,2,0 pp2 x dp2, ZeRO-1, 5-float buffer, independent I/O", 4, {3, 1, 2, 0}, 2, 2, 1, PETSC_TRUE, 5, 0},
    {"ranks 1,2 dp2 (0, 3 off the mesh), offloaded /reference, 7-float buffer, independent I/O", 2, {1, 2}, 1, 2, 1, PETSC_FALSE, 7, 0},
  };
  char        dir[PETSC_MAX_PATH_LEN], path[5][PETSC_MAX_PATH_LEN], det[160];
  float      *p0, *m0, *v0;
  int         step0;
  size_t      n;
  ModelTensor  *t;
  int         nt;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(comm_setup());
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  test_collective(MPI_COMM_WORLD);
  PetscCheck(world_size == 4, PETSC_COMM_WORLD, PETSC_ERR_ARG_SIZ, "test_ckpt needs 4 ranks (mpiexec -n 4), not %d", world_size);
  PetscCall(test_tmpdir(dir, sizeof dir, "test_ckpt"));
  for (int k = 0; k < 5; k++) PetscCall(PetscSNPrintf(path[k], sizeof path[k], "%s/%d.h5", dir, k));
  PetscCall(model_tensor_table(&cfg, &t, &nt, &n));
  PetscCall(PetscFree(t));
  PetscCall(write_original(&cfg, path[0]));
  PetscCall(read_whole(&cfg, path[0], "actor", PETSC_TRUE, &p0, &m0, &v0, &step0));
  test_report(step0 == 7 ? PETSC_TRUE : PETSC_FALSE, "the original, written whole by rank 0, reads back on every rank", NULL);
  for (int k = 0; k < 4; k++) {
    PetscBool ok, frozen = k == 3 ? PETSC_TRUE : PETSC_FALSE;

    PetscCall(hop(&cfg, &hops[k], path[k], path[k + 1], frozen, p0, m0, v0));
    PetscCall(same_as(&cfg, path[k + 1], "actor", PETSC_TRUE, p0, m0, v0, step0, n, &ok));
    PetscCall(PetscSNPrintf(det, sizeof det, "loaded and written by %s", hops[k].name));
    test_report(ok, det, "parameters, moments or step differ from the original");
    if (frozen) {
      PetscCall(same_as(&cfg, path[k + 1], "reference", PETSC_FALSE, p0, m0, v0, step0, n, &ok));
      test_report(ok, "an offloaded model (no shard on the device, parameters in host memory) is written from host memory, bit-identical", NULL);
    }
  }
  PetscCall(test_failure(&cfg, dir, path[1]));
  PetscCall(PetscFree3(p0, m0, v0));
  PetscCall(realloc_cache_destroy());
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return test_tally();
}
