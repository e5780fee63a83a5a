/* mpi_report.h: the ok / not ok line of the MPI test programs, agreed over
 * all ranks (a check passes only if it passes on every rank) and printed by
 * rank 0. Included by one test program each (directly or through
 * dist_fixture.h), which sets world_rank and world_size in main. */
#ifndef RLFUSE_MPI_REPORT_H
#define RLFUSE_MPI_REPORT_H

#include <stdio.h>
#include "sys.h"

static int npass, nfail, world_rank, world_size;

static void report(const char *name, PetscBool ok, const char *detail)
{
  int all_ok = ok ? 1 : 0, mine = all_ok;

  MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_ok) npass++;
  else nfail++;
  if (world_rank == 0) printf("%s - %s%s%s\n", all_ok ? "ok" : "not ok", name, detail[0] ? ": " : "", detail);
}

#endif
