/* sys: the timeline. Every rank notes the start and end of each call it runs
 * (generation, an inference micro-batch, a weight sync, training, ...) in a
 * small buffer; record_step gathers the buffers to rank 0, which appends them
 * to /timeline of the run record (docs/formats.md), so a plot can draw one
 * row per rank and show where ranks wait. Idle time is not noted: it is what
 * lies between a rank's calls. Times are seconds since the record was opened:
 * on one node from rank 0's zero on the shared clock, across nodes from a
 * barrier on each rank's own clock. */
#include "sys.h"
#include <string.h>

#define TL_MAX_NAMES TIMELINE_MAX_NAMES
#define TL_NAME_LEN  TIMELINE_NAME_LEN

typedef struct {
  int    call;
  double t0, t1;
} TlEvent;

static struct {
  double   epoch;
  char     names[TL_MAX_NAMES][TL_NAME_LEN];
  int      nnames;
  TlEvent *ev;
  int      n, cap;
} tl;

PetscErrorCode timeline_start(MPI_Comm comm)
{
  MPI_Comm    node;
  PetscMPIInt nn, n;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_size(comm, &n));
  PetscCallMPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  PetscCallMPI(MPI_Comm_size(node, &nn));
  PetscCallMPI(MPI_Comm_free(&node));
  PetscCallMPI(sys_mpi_barrier(comm));
  tl.epoch = sys_wtime();
  /* on one node every rank reads the same monotonic clock: rank 0's zero
   * then makes the ranks' times exactly comparable (a barrier's exit times
   * differ by scheduling delays) */
  if (nn == n) PetscCallMPI(sys_mpi_bcast(&tl.epoch, 1, MPI_DOUBLE, 0, comm));
  tl.n = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode timeline_mark(const char *call, double t0, double t1)
{
  int k;

  PetscFunctionBegin;
  for (k = 0; k < tl.nnames; k++)
    if (!strcmp(tl.names[k], call)) break;
  if (k == tl.nnames) {
    PetscCheck(tl.nnames < TL_MAX_NAMES && strlen(call) > 0 && strlen(call) < TL_NAME_LEN && !strchr(call, ' '),
               PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "timeline: call name '%s' must be 1..%d characters without spaces (at most %d names)", call,
               TL_NAME_LEN - 1, TL_MAX_NAMES);
    PetscCall(PetscStrncpy(tl.names[tl.nnames++], call, TL_NAME_LEN));
  }
  if (tl.n == tl.cap) {
    tl.cap = tl.cap ? 2 * tl.cap : 256;
    PetscCall(PetscRealloc(tl.cap * sizeof(TlEvent), &tl.ev));
  }
  tl.ev[tl.n++] = (TlEvent){k, t0 - tl.epoch, t1 - tl.epoch};
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rank 0 gets every rank's events with call names as indices into one
 * space-separated list (the names in order of first appearance, rank by
 * rank, so the indices of earlier steps stay valid when the list grows). */
PetscErrorCode timeline_gather(MPI_Comm comm, TimelineRows *out)
{
  PetscMPIInt rank, size;
  int         n = tl.n, *counts = NULL, *displs = NULL, total = 0, *call;
  double     *t;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCall(PetscMalloc2(n + 1, &call, 2 * n + 1, &t));
  {
    /* names: every rank's local table, gathered as one string each */
    char  mine[TL_MAX_NAMES * TL_NAME_LEN], *all = NULL;
    int   len = 0, *lens = NULL, *loff = NULL, ntot = 0;

    mine[0] = 0;
    for (int k = 0; k < tl.nnames; k++) {
      PetscCall(PetscStrlcat(mine, tl.names[k], sizeof mine));
      PetscCall(PetscStrlcat(mine, " ", sizeof mine));
    }
    len = (int)strlen(mine);
    if (!rank) PetscCall(PetscMalloc2(size, &lens, size, &loff));
    PetscCallMPI(sys_mpi_gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, comm));
    if (!rank) {
      for (int r = 0; r < size; r++) loff[r] = ntot, ntot += lens[r];
      PetscCall(PetscMalloc1(ntot + 1, &all));
    }
    PetscCallMPI(sys_mpi_gatherv(mine, len, MPI_CHAR, all, lens, loff, MPI_CHAR, 0, comm));
    for (int i = 0; i < n; i++) call[i] = tl.ev[i].call, t[2 * i] = tl.ev[i].t0, t[2 * i + 1] = tl.ev[i].t1;
    if (!rank) {
      PetscCall(PetscMalloc2(size, &counts, size, &displs));
    }
    PetscCallMPI(sys_mpi_gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, comm));
    if (!rank) {
      for (int r = 0; r < size; r++) displs[r] = total, total += counts[r];
      out->n = total;
      PetscCall(
          PetscMalloc4(total + 1, &out->rank, total + 1, &out->call, total + 1, &out->start, total + 1, &out->end));
    }
    PetscCallMPI(sys_mpi_gatherv(call, n, MPI_INT, rank ? NULL : out->call, counts, displs, MPI_INT, 0, comm));
    if (!rank) {
      int    *map;
      double *tt;

      /* the global name list: out->names holds earlier steps' names; append new ones */
      PetscCall(PetscMalloc2(TL_MAX_NAMES * size + 1, &map, 2 * total + 1, &tt));
      for (int r = 0; r < size; r++) {
        char *s = all + loff[r], *end = s + lens[r];
        int   k = 0;
        while (s < end) {
          char *sp = memchr(s, ' ', (size_t)(end - s));
          char  name[TL_NAME_LEN];
          int   g;

          PetscCall(PetscStrncpy(name, s, PetscMin((size_t)(sp - s) + 1, sizeof name)));
          for (g = 0; g < out->nnames; g++)
            if (!strcmp(out->names[g], name)) break;
          if (g == out->nnames) {
            PetscCheck(g < TIMELINE_MAX_NAMES, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                       "timeline: more than %d call names", TIMELINE_MAX_NAMES);
            PetscCall(PetscStrncpy(out->names[out->nnames++], name, TIMELINE_NAME_LEN));
          }
          map[r * TL_MAX_NAMES + k++] = g;
          s = sp + 1;
        }
      }
      for (int r = 0; r < size; r++) {
        for (int i = displs[r]; i < displs[r] + counts[r]; i++)
          out->rank[i] = r, out->call[i] = map[r * TL_MAX_NAMES + out->call[i]];
        counts[r] *= 2, displs[r] *= 2;
      }
      PetscCallMPI(sys_mpi_gatherv(t, 2 * n, MPI_DOUBLE, tt, counts, displs, MPI_DOUBLE, 0, comm));
      for (int i = 0; i < total; i++) out->start[i] = tt[2 * i], out->end[i] = tt[2 * i + 1];
      PetscCall(PetscFree2(map, tt));
      PetscCall(PetscFree2(counts, displs));
      PetscCall(PetscFree2(lens, loff));
      PetscCall(PetscFree(all));
    } else PetscCallMPI(sys_mpi_gatherv(t, 2 * n, MPI_DOUBLE, NULL, NULL, NULL, MPI_DOUBLE, 0, comm));
  }
  PetscCall(PetscFree2(call, t));
  tl.n = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode timeline_rows_free(TimelineRows *rows)
{
  PetscFunctionBegin;
  if (rows->n || rows->rank) PetscCall(PetscFree4(rows->rank, rows->call, rows->start, rows->end));
  rows->n = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}
