/* io: texts per row of a token dataset (a prompt file's reference answers
 * and metadata; docs/formats.md): <name>_bytes uint8 [total] and
 * <name>_offsets int64 [N+1]. Read on rank 0 with the rest of the file,
 * checked (N+1 offsets from 0, never falling, ending at the byte count),
 * then broadcast; in memory every row is NUL-terminated. */
#include "internal/h5util.h"
#include "internal/texts.h"

PetscErrorCode io_texts_read(hid_t file, const char *where, const char *name, int N, IOTexts *t)
{
  char     bn[64], on[64], full_b[80], full_o[80];
  hsize_t  nb[1] = {0}, no[1] = {0};
  hid_t    db = -1, dof = -1;
  int64_t *off;
  char    *raw;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(t, sizeof *t));
  PetscCall(PetscSNPrintf(bn, sizeof bn, "%s_bytes", name));
  PetscCall(PetscSNPrintf(on, sizeof on, "%s_offsets", name));
  PetscCall(PetscSNPrintf(full_b, sizeof full_b, "/%s", bn));
  PetscCall(PetscSNPrintf(full_o, sizeof full_o, "/%s", on));
  if (H5Lexists(file, bn, H5P_DEFAULT) <= 0 && H5Lexists(file, on, H5P_DEFAULT) <= 0)
    PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_dataset_open(file, where, full_o, on, IO_CLASS_INT, 0, 1, no, &dof));
  if (no[0] != (hsize_t)N + 1) {
    PetscCall(io_close(&dof));
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
            "%s: %s has %llu entries, expected %d (the rows of /tokens plus one)", where, full_o,
            (unsigned long long)no[0], N + 1);
  }
  PetscCall(io_dataset_open(file, where, full_b, bn, IO_CLASS_INT, 1, 1, nb, &db));
  PetscCall(PetscMalloc1(N + 1, &off));
  PetscCall(PetscMalloc1(nb[0] + 1, &raw));
  PetscCall(io_dataset_read(dof, where, full_o, IO_INT64, off));
  if (nb[0]) PetscCall(io_dataset_read(db, where, full_b, IO_UCHAR, raw));
  PetscCall(io_close(&dof));
  PetscCall(io_close(&db));
  PetscCheck(off[0] == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s[0] = %lld, expected 0", where, full_o,
             (long long)off[0]);
  for (int i = 0; i < N; i++)
    PetscCheck(off[i + 1] >= off[i] && off[i + 1] <= (int64_t)nb[0], PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: %s[%d] = %lld is outside [%s[%d] = %lld, %llu (the size of %s)]", where, full_o, i + 1,
               (long long)off[i + 1], on, i, (long long)off[i], (unsigned long long)nb[0], full_b);
  PetscCheck(off[N] == (int64_t)nb[0], PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: %s ends at %lld, but %s holds %llu bytes", where, full_o, (long long)off[N], full_b,
             (unsigned long long)nb[0]);
  /* every row NUL-terminated: row i moves up by i bytes */
  PetscCall(PetscMalloc1(N + 1, &t->off));
  PetscCall(PetscMalloc1(nb[0] + N + 1, &t->bytes));
  for (int i = 0; i < N; i++) {
    t->off[i] = off[i] + i;
    PetscCall(PetscArraycpy(t->bytes + t->off[i], raw + off[i], off[i + 1] - off[i]));
    t->bytes[t->off[i] + off[i + 1] - off[i]] = '\0';
  }
  t->off[N] = off[N] + N;
  PetscCall(PetscFree(off));
  PetscCall(PetscFree(raw));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_texts_bcast(MPI_Comm comm, int N, IOTexts *t)
{
  PetscMPIInt rank;
  int64_t     total = t->off ? t->off[N] : -1;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(sys_mpi_bcast(&total, 1, MPI_INT64_T, 0, comm));
  if (total < 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (rank) {
    PetscCall(PetscMalloc1(N + 1, &t->off));
    PetscCall(PetscMalloc1(total + 1, &t->bytes));
  }
  PetscCall(io_bcast(t->off, (size_t)N + 1, MPI_INT64_T, comm));
  PetscCall(io_bcast(t->bytes, (size_t)total, MPI_CHAR, comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_texts_free(IOTexts *t)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(t->off));
  PetscCall(PetscFree(t->bytes));
  PetscFunctionReturn(PETSC_SUCCESS);
}
