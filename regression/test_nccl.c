/* test_nccl: the collectives of src/comm on NCCL (-device cuda) against MPI
 * on the same data. Run with mpiexec -n 2 or more, one GPU per rank on each
 * node (NCCL refuses two ranks on one GPU). Without NCCL, without a GPU on
 * every rank or without the CUDA backend it prints one "skip - nccl:
 * <reason>" line (a skip, not a pass, also with RLFUSE_REQUIRE_CUDA=1) and
 * exits 0.
 *  - the communicators of a mesh over every rank are COMM_NCCL (size 1: MPI);
 *    on ranks that share a GPU (more ranks than GPUs on a node) they stay
 *    MPI, device buffers going through the host, and the checks below run
 *    on that path instead (named "shared GPU"; the NCCL checks are skipped);
 *  - comm_allreduce_sum on COMM_NCCL gives the bits of the rank-order sum
 *    computed on the host, and of the same call on COMM_MPI (the CPU's code,
 *    on a host copy), for counts below, at and above the rank count, on
 *    data whose exponents spread so that any other order changes the bits;
 *  - comm_bcast from the last rank, comm_allgather and comm_allgather_ranges
 *    deliver every byte;
 *  - comm_isend then comm_recv on both sides of a pair (the order of a 1F1B
 *    stage boundary, which deadlocks with NCCL's blocking sends) completes
 *    with the partner's bytes.
 *
 * The checks in detail: the collectives of src/comm on NCCL (`-device cuda`) against MPI on
 * the same data: a mesh's communicators are NCCL (MPI on ranks that share a GPU, whose device
 * buffers go through the host: the same checks on that path, named "shared GPU");
 * `comm_allreduce_sum` gives the bits of the rank-order sum on the host and of the MPI path,
 * for counts below, at and above the rank count; `comm_bcast`, `comm_allgather` and
 * `comm_allgather_ranges` deliver every byte; `comm_isend` then `comm_recv` on both sides of a
 * pair (a 1F1B stage boundary) completes; skips without NCCL or a GPU
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "test_report.h"

static int         world_rank, world_size;
static const char *path = "nccl"; /* the path checked, in each check's name */
#ifdef RLFUSE_HAVE_NCCL
  #include "internal/rfcuda.h"
#endif

static const char help[] = "NCCL communication regression tests.\n";

/* Rank r's value i of data set `salt`: a mantissa in [-1, 1) times 2^e with
 * e in [-16, 15], so float sums depend on their order. */
static float value(int r, size_t i, int salt)
{
  uint64_t x = ((uint64_t)(r + 1) << 48) ^ ((uint64_t)salt << 40) ^ (uint64_t)i;

  x += 0x9e3779b97f4a7c15ull; /* splitmix64 */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return ldexpf((float)(x >> 40) / 8388608.0f - 1.0f, (int)(x & 31) - 16);
}

/* "" when a and b hold the same bytes, else where they first differ. */
static const char *diff(const void *a, const void *b, size_t bytes, char *det, size_t len)
{
  const unsigned char *x = a, *y = b;

  det[0] = 0;
  for (size_t k = 0; k < bytes; k++)
    if (x[k] != y[k]) {
      snprintf(det, len, "first difference at byte %zu of %zu", k, bytes);
      break;
    }
  return det;
}

#ifdef RLFUSE_HAVE_NCCL
/* why: empty when every rank has a GPU of its own, else why not (on every
 * rank); *shared: every rank has a GPU, but some share one. */
static PetscErrorCode gpus_per_rank(char *why, size_t len, PetscBool *shared)
{
  MPI_Comm node;
  int      ndev = 0, local, ok, all, any, every;

  PetscFunctionBegin;
  *shared = PETSC_FALSE;
  if (world_size < 2) {
    PetscCall(PetscSNPrintf(why, len, "needs 2 or more ranks, not %d", world_size));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (rfcuda_device_count(&ndev)) ndev = 0;
  PetscCallMPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  PetscCallMPI(MPI_Comm_size(node, &local));
  PetscCallMPI(MPI_Comm_free(&node));
  ok = ndev >= local;
  PetscCallMPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (all) PetscFunctionReturn(PETSC_SUCCESS);
  any = ndev > 0;
  PetscCallMPI(MPI_Allreduce(&any, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  *shared = every ? PETSC_TRUE : PETSC_FALSE;
  PetscCall(PetscSNPrintf(why, len, "%s (rank 0 sees %d GPU%s for %d ranks on its node; NCCL needs one GPU per rank)", ndev ? "too few GPUs" : "no GPU", ndev, ndev == 1 ? "" : "s", local));
  PetscCallMPI(MPI_Bcast(why, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The CUDA backend, or NULL and why not (on every rank). */
static PetscErrorCode cuda_backend(const Backend **be, char *why, size_t len)
{
  PetscErrorCode ierr;
  const char    *msg = "";
  int            ok, all;

  PetscFunctionBegin;
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = backend_get("cuda", be);
  PetscCall(PetscPopErrorHandler());
  if (ierr) PetscCall(PetscErrorMessage(ierr, NULL, (char **)&msg));
  ok = ierr == 0;
  PetscCallMPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (all) PetscFunctionReturn(PETSC_SUCCESS);
  *be = NULL;
  PetscCall(PetscSNPrintf(why, len, "no CUDA backend (%s)", ok ? "it failed on another rank" : msg));
  PetscCallMPI(MPI_Bcast(why, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}
#endif

/* The CUDA backend when every rank can run NCCL, or when every rank has a GPU
 * but some share one (*shared: the host path is checked; why says why not
 * NCCL); else NULL and why not (the same on every rank). */
static PetscErrorCode nccl_usable(const Backend **be, PetscBool *shared, char *why, size_t len)
{
  PetscFunctionBegin;
  *be     = NULL;
  *shared = PETSC_FALSE;
  why[0]  = 0;
#ifndef RLFUSE_HAVE_NCCL
  PetscCall(PetscStrncpy(why, "built without NCCL", len));
#else
  PetscCall(gpus_per_rank(why, len, shared));
  if (!why[0] || *shared) {
    char no[256] = "";

    PetscCall(cuda_backend(be, no, sizeof no));
    if (!*be) PetscCall(PetscStrncpy(why, no, len));
  }
#endif
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the checks -------------------------------------------------------------------- */

static PetscErrorCode test_kinds(const Mesh *m)
{
  char det[96];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(det, sizeof det, "all: kind %d, tp (size %d): kind %d", (int)m->all.kind, m->tp_comm.size, (int)m->tp_comm.kind));
  test_measure(m->all.kind == COMM_NCCL && m->all.nccl && m->dp_comm.kind == COMM_NCCL && m->tp_comm.kind == COMM_MPI && !m->tp_comm.nccl ? PETSC_TRUE : PETSC_FALSE, "nccl: a mesh's communicators of 2+ ranks are COMM_NCCL, those of one rank stay MPI", "%s", det);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* NCCL, the MPI path on the same device data, and the host's rank-order sum. */
static PetscErrorCode test_allreduce(const Backend *be, const Mesh *m, size_t n)
{
  Comm      mpi = m->all;
  float    *host, *want, *got_nccl, *got_mpi, *dev;
  size_t    bytes = n * sizeof(float);
  char      det[128], name[160];
  PetscBool ok;

  PetscFunctionBegin;
  mpi.kind = COMM_MPI; /* the same ranks without NCCL: a host copy through the CPU's code */
  mpi.nccl = NULL;
  PetscCall(PetscMalloc4(n, &host, n, &want, n, &got_nccl, n, &got_mpi));
  for (size_t i = 0; i < n; i++) {
    host[i] = value(world_rank, i, 1);
    want[i] = value(0, i, 1);
    for (int r = 1; r < world_size; r++) want[i] += value(r, i, 1);
  }
  PetscCall(be->alloc(bytes, (void **)&dev));
  PetscCall(be->from_host(dev, host, bytes));
  PetscCall(comm_allreduce_sum(&m->all, dev, n));
  PetscCall(be->to_host(got_nccl, dev, bytes));
  PetscCall(be->from_host(dev, host, bytes));
  PetscCall(comm_allreduce_sum(&mpi, dev, n));
  PetscCall(be->to_host(got_mpi, dev, bytes));
  PetscCall(be->free(dev));
  diff(got_nccl, want, bytes, det, sizeof det);
  if (!det[0]) diff(got_nccl, got_mpi, bytes, det, sizeof det);
  ok = det[0] ? PETSC_FALSE : PETSC_TRUE;
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: comm_allreduce_sum of %zu floats has the bits of the rank-order sum and of the MPI path", path, n));
  test_measure(ok, name, "%s", det);
  PetscCall(PetscFree4(host, want, got_nccl, got_mpi));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_bcast(const Backend *be, const Mesh *m)
{
  char         name[200];
  const size_t   bytes = 12345; /* not a multiple of 4 */
  const int      root  = world_size - 1;
  unsigned char *host, *want, *dev;
  char           det[128];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: comm_bcast of 12345 bytes from the last rank", path));
  PetscCall(PetscMalloc2(bytes, &host, bytes, &want));
  for (size_t k = 0; k < bytes; k++) {
    host[k] = (unsigned char)(world_rank * 31 + k * 7);
    want[k] = (unsigned char)(root * 31 + k * 7);
  }
  PetscCall(be->alloc(bytes, (void **)&dev));
  PetscCall(be->from_host(dev, host, bytes));
  PetscCall(comm_bcast(&m->all, dev, bytes, root));
  PetscCall(be->to_host(host, dev, bytes));
  PetscCall(be->free(dev));
  test_measure(*diff(host, want, bytes, det, sizeof det) ? PETSC_FALSE : PETSC_TRUE, name, "%s", det);
  PetscCall(PetscFree2(host, want));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_allgather(const Backend *be, const Mesh *m)
{
  char         name[200];
  const size_t n = 1001, bytes = n * sizeof(float), all = (size_t)world_size * n;
  float       *mine, *want, *got, *din, *dout;
  char         det[128];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: comm_allgather of 1001 floats per rank", path));
  PetscCall(PetscMalloc3(n, &mine, all, &want, all, &got));
  for (size_t i = 0; i < all; i++) want[i] = value((int)(i / n), i % n, 2);
  for (size_t i = 0; i < n; i++) mine[i] = value(world_rank, i, 2);
  PetscCall(be->alloc(bytes, (void **)&din));
  PetscCall(be->alloc(all * sizeof(float), (void **)&dout));
  PetscCall(be->from_host(din, mine, bytes));
  PetscCall(comm_allgather(&m->all, din, dout, bytes));
  PetscCall(be->to_host(got, dout, all * sizeof(float)));
  PetscCall(be->free(din));
  PetscCall(be->free(dout));
  test_measure(*diff(got, want, all * sizeof(float), det, sizeof det) ? PETSC_FALSE : PETSC_TRUE, name, "%s", det);
  PetscCall(PetscFree3(mine, want, got));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_allgather_ranges(const Backend *be, const Mesh *m)
{
  char         name[200];
  const size_t n = 10007;
  float       *buf, *want, *dev;
  size_t       lo, hi;
  char         det[128];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: comm_allgather_ranges of 10007 floats", path));
  PetscCall(PetscMalloc2(n, &buf, n, &want));
  for (int r = 0; r < world_size; r++) {
    comm_own_range(n, r, world_size, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
      want[i] = value(r, i, 3);
      buf[i]  = r == world_rank ? want[i] : NAN; /* only the owner's range is meaningful */
    }
  }
  PetscCall(be->alloc(n * sizeof(float), (void **)&dev));
  PetscCall(be->from_host(dev, buf, n * sizeof(float)));
  PetscCall(comm_allgather_ranges(&m->all, dev, n));
  PetscCall(be->to_host(buf, dev, n * sizeof(float)));
  PetscCall(be->free(dev));
  test_measure(*diff(buf, want, n * sizeof(float), det, sizeof det) ? PETSC_FALSE : PETSC_TRUE, name, "%s", det);
  PetscCall(PetscFree2(buf, want));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Pairs (0,1), (2,3), ...: both send first, then receive. 1 MiB, beyond any eager limit. */
static PetscErrorCode test_sendrecv(const Backend *be, const Mesh *m)
{
  char         name[200];
  const size_t n = 262144, bytes = n * sizeof(float);
  int          peer = world_rank ^ 1;
  float       *mine, *want, *got, *dsend, *drecv;
  MPI_Request  req = MPI_REQUEST_NULL;
  char         det[128] = "";

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: comm_isend then comm_recv on both ranks of a pair (a 1F1B stage boundary's order) completes with the partner's bytes", path));
  PetscCall(PetscMalloc3(n, &mine, n, &want, n, &got));
  if (peer < world_size) {
    for (size_t i = 0; i < n; i++) {
      mine[i] = value(world_rank, i, 4);
      want[i] = value(peer, i, 4);
    }
    PetscCall(be->alloc(bytes, (void **)&dsend));
    PetscCall(be->alloc(bytes, (void **)&drecv));
    PetscCall(be->from_host(dsend, mine, bytes));
    PetscCall(comm_isend(&m->all, dsend, bytes, peer, 7, &req));
    PetscCall(comm_recv(&m->all, drecv, bytes, peer, 7));
    PetscCall(comm_wait(&req));
    PetscCall(be->to_host(got, drecv, bytes));
    PetscCall(be->free(dsend));
    PetscCall(be->free(drecv));
    diff(got, want, bytes, det, sizeof det);
  }
  test_measure(det[0] ? PETSC_FALSE : PETSC_TRUE, name, "%s", det);
  PetscCall(PetscFree3(mine, want, got));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  const Backend *be;
  const Mesh    *m;
  int           *ranks;
  char           why[256];
  PetscBool      shared;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(comm_setup());
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  test_collective(MPI_COMM_WORLD);
  PetscCall(nccl_usable(&be, &shared, why, sizeof why));
  if (!be) {
    test_skip("nccl", why);
  } else {
    const size_t counts[] = {1, (size_t)world_size - 1, (size_t)world_size, 1000, 100003};

    PetscCall(comm_use_backend(be)); /* before the mesh, so that it gets NCCL */
    PetscCall(PetscMalloc1(world_size, &ranks));
    for (int r = 0; r < world_size; r++) ranks[r] = r;
    PetscCall(mesh_get(ranks, world_size, 1, world_size, 1, &m)); /* all = dp over every rank; tp of one rank */
    PetscCall(PetscFree(ranks));
    if (shared) { /* NCCL itself cannot run here; the path that serves such ranks can */
      path = "shared GPU";
      test_skip("nccl: NCCL communicators and collectives", why);
      test_report(m->all.kind == COMM_MPI && !m->all.nccl ? PETSC_TRUE : PETSC_FALSE, "shared GPU: a mesh over ranks that share a GPU stays COMM_MPI (device buffers through the host)", "kind %d", (int)m->all.kind);
    } else PetscCall(test_kinds(m));
    if (m->all.kind == COMM_NCCL || shared) {
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) PetscCall(test_allreduce(be, m, counts[k]));
      PetscCall(test_bcast(be, m));
      PetscCall(test_allgather(be, m));
      PetscCall(test_allgather_ranges(be, m));
      PetscCall(test_sendrecv(be, m));
    }
  }
  PetscCall(comm_teardown()); /* the NCCL communicators go with the meshes */
  PetscCall(PetscFinalize());
  return test_tally();
}
