/* exec: outputs of a call's replica heads to every rank (inc/exec.h). One
 * MPI_Allgatherv on the world in which only the heads contribute, each its
 * own rows in place, so every rank ends with the same bytes. */
#include "exec.h"
#include <limits.h>

static PetscErrorCode share(const Mesh *m, const long long *lo, const long long *hi, MPI_Datatype type, void *buf)
{
  int  size, *count, *displ;
  long long total = hi[m->dp - 1];

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  PetscCheck(total <= INT_MAX, PETSC_COMM_SELF, PETSC_ERR_SUP, "exec_share: %lld elements exceed one MPI message",
             total);
  PetscCall(PetscCalloc2(size, &count, size, &displ));
  for (int d = 0; d < m->dp; d++) {
    int h    = exec_head(m, d);
    count[h] = (int)(hi[d] - lo[d]);
    displ[h] = (int)lo[d];
  }
  PetscCallMPI(sys_mpi_allgatherv(MPI_IN_PLACE, 0, type, buf, count, displ, type, MPI_COMM_WORLD));
  PetscCall(PetscFree2(count, displ));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode exec_share_rows(const Mesh *m, int B, size_t row, MPI_Datatype type, void *buf)
{
  long long *lo, *hi;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(m->dp, &lo, m->dp, &hi));
  for (int d = 0; d < m->dp; d++) {
    int b0, b1;
    exec_rows(B, m->dp, d, &b0, &b1);
    lo[d] = (long long)b0 * (long long)row;
    hi[d] = (long long)b1 * (long long)row;
  }
  PetscCall(share(m, lo, hi, type, buf));
  PetscCall(PetscFree2(lo, hi));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode exec_share_packed(const Mesh *m, int B, const int *count, MPI_Datatype type, void *buf)
{
  long long *lo, *hi, at = 0;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(m->dp, &lo, m->dp, &hi));
  for (int d = 0; d < m->dp; d++) {
    int b0, b1;
    exec_rows(B, m->dp, d, &b0, &b1);
    lo[d] = at;
    for (int b = b0; b < b1; b++) at += count[b];
    hi[d] = at;
  }
  PetscCall(share(m, lo, hi, type, buf));
  PetscCall(PetscFree2(lo, hi));
  PetscFunctionReturn(PETSC_SUCCESS);
}
