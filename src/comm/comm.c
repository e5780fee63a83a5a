/* comm.c: the collectives behind the Comm interface, over MPI. NCCL (the
 * CUDA issue) adds a branch on c->kind in each function; callers never see
 * which one runs. */
#include "comm.h"

static PetscBool member(const Comm *c) { return c->mpi != MPI_COMM_NULL && c->size > 1 ? PETSC_TRUE : PETSC_FALSE; }

/* Reduce-scatter by chunks in rank order, then all-gather: chunk k is summed
 * by rank k as x_0 + x_1 + ... in rank order, so the result does not depend
 * on MPI's algorithm and is the same on every member. */
PetscErrorCode comm_allreduce_sum(const Comm *c, float *buf, size_t n)
{
  int    P, *cnt, *dsp;
  float *recv;
  size_t chunk;

  PetscFunctionBegin;
  if (!member(c) || n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  P     = c->size;
  chunk = (n + P - 1) / P;
  PetscCheck(chunk <= (size_t)INT32_MAX / P, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_allreduce_sum: %zu floats is too large for one call; use buckets", n);
  PetscCall(PetscMalloc3((size_t)P * chunk, &recv, P, &cnt, P, &dsp));
  for (int r = 0; r < P; r++) {
    size_t lo = PetscMin((size_t)r * chunk, n), hi = PetscMin(lo + chunk, n);
    cnt[r] = (int)(hi - lo);
    dsp[r] = (int)lo;
  }
  {
    int *rcnt, *rdsp;
    PetscCall(PetscMalloc2(P, &rcnt, P, &rdsp));
    for (int r = 0; r < P; r++) {
      rcnt[r] = cnt[c->rank];
      rdsp[r] = (int)(r * chunk);
    }
    PetscCallMPI(MPI_Alltoallv(buf, cnt, dsp, MPI_FLOAT, recv, rcnt, rdsp, MPI_FLOAT, c->mpi));
    for (int i = 0; i < cnt[c->rank]; i++) {
      float s = recv[i];
      for (int r = 1; r < P; r++) s += recv[(size_t)r * chunk + i];
      recv[i] = s;
    }
    PetscCallMPI(MPI_Allgatherv(recv, cnt[c->rank], MPI_FLOAT, buf, cnt, dsp, MPI_FLOAT, c->mpi));
    PetscCall(PetscFree2(rcnt, rdsp));
  }
  PetscCall(PetscFree3(recv, cnt, dsp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Host scalars: gathered and summed in rank order on every member. */
PetscErrorCode comm_allreduce_sum_double(const Comm *c, double *buf, int n)
{
  double *all;

  PetscFunctionBegin;
  if (!member(c) || n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc1((size_t)n * c->size, &all));
  PetscCallMPI(MPI_Allgather(buf, n, MPI_DOUBLE, all, n, MPI_DOUBLE, c->mpi));
  for (int i = 0; i < n; i++) {
    double s = all[i];
    for (int r = 1; r < c->size; r++) s += all[(size_t)r * n + i];
    buf[i] = s;
  }
  PetscCall(PetscFree(all));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_allgather(const Comm *c, const void *in, void *out, size_t bytes)
{
  PetscFunctionBegin;
  if (c->mpi == MPI_COMM_NULL) PetscFunctionReturn(PETSC_SUCCESS);
  if (c->size == 1) {
    if (out != in) PetscCall(PetscMemcpy(out, in, bytes));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_allgather: %zu bytes is too large for one call", bytes);
  PetscCallMPI(MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, c->mpi));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_allgather_ranges(const Comm *c, float *buf, size_t n)
{
  int *cnt, *dsp;

  PetscFunctionBegin;
  if (!member(c) || n == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(n <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_allgather_ranges: %zu floats is too large for one call", n);
  PetscCall(PetscMalloc2(c->size, &cnt, c->size, &dsp));
  for (int r = 0; r < c->size; r++) {
    size_t lo, hi;
    comm_own_range(n, r, c->size, &lo, &hi);
    cnt[r] = (int)(hi - lo);
    dsp[r] = (int)lo;
  }
  PetscCallMPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_FLOAT, c->mpi));
  PetscCall(PetscFree2(cnt, dsp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_bcast(const Comm *c, void *buf, size_t bytes, int root)
{
  PetscFunctionBegin;
  if (!member(c) || bytes == 0) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_bcast: %zu bytes is too large for one call", bytes);
  PetscCallMPI(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->mpi));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_isend(const Comm *c, const void *buf, size_t bytes, int dest, int tag, MPI_Request *req)
{
  PetscFunctionBegin;
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_isend: %zu bytes is too large for one message", bytes);
  PetscCallMPI(MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, c->mpi, req));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_recv(const Comm *c, void *buf, size_t bytes, int src, int tag)
{
  MPI_Status st;
  int        got;

  PetscFunctionBegin;
  PetscCheck(bytes <= INT32_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "comm_recv: %zu bytes is too large for one message", bytes);
  PetscCallMPI(MPI_Recv(buf, (int)bytes, MPI_BYTE, src, tag, c->mpi, &st));
  PetscCallMPI(MPI_Get_count(&st, MPI_BYTE, &got));
  PetscCheck((size_t)got == bytes, PETSC_COMM_SELF, PETSC_ERR_PLIB, "comm_recv: expected %zu bytes from rank %d (tag %d), got %d", bytes, src, tag, got);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_wait(MPI_Request *req)
{
  PetscFunctionBegin;
  if (*req != MPI_REQUEST_NULL) PetscCallMPI(MPI_Wait(req, MPI_STATUS_IGNORE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_free(Comm *c)
{
  PetscFunctionBegin;
  if (c->mpi != MPI_COMM_NULL) PetscCallMPI(MPI_Comm_free(&c->mpi));
  c->mpi = MPI_COMM_NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Node of every world rank: the smallest world rank sharing memory with it. */
static int *node_of = NULL, nworld = 0;

PetscErrorCode comm_setup(void)
{
  MPI_Comm shm;
  int      me, leader;

  PetscFunctionBegin;
  if (node_of) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &nworld));
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  PetscCallMPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &shm));
  PetscCallMPI(MPI_Allreduce(&me, &leader, 1, MPI_INT, MPI_MIN, shm));
  PetscCallMPI(MPI_Comm_free(&shm));
  PetscCall(PetscMalloc1(nworld, &node_of));
  PetscCallMPI(MPI_Allgather(&leader, 1, MPI_INT, node_of, 1, MPI_INT, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_teardown(void)
{
  PetscFunctionBegin;
  PetscCall(mesh_cache_destroy());
  PetscCall(PetscFree(node_of));
  nworld = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode comm_node_of(int world_rank, int *node)
{
  PetscFunctionBegin;
  PetscCheck(node_of, PETSC_COMM_SELF, PETSC_ERR_ORDER, "comm_node_of: call comm_setup first");
  PetscCheck(world_rank >= 0 && world_rank < nworld, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "comm_node_of: rank %d outside the world of %d", world_rank, nworld);
  *node = node_of[world_rank];
  PetscFunctionReturn(PETSC_SUCCESS);
}
