/* mpi_report.h: the ok / not ok / skip line of the MPI test programs, agreed
 * over all ranks (a check passes only if it passes on every rank) and printed
 * by rank 0, and their closing tally (regression/run_tests.sh checks the
 * lines against it). Included by one test program each (directly or through
 * dist_fixture.h), which sets world_rank and world_size in main. */
#ifndef RLFUSE_MPI_REPORT_H
#define RLFUSE_MPI_REPORT_H

#include <stdio.h>
#include "sys.h"

static int npass, nfail, nskip, world_rank, world_size;

static void report(const char *name, PetscBool ok, const char *detail)
{
  int all_ok = ok ? 1 : 0, mine = all_ok;

  MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_ok) npass++;
  else nfail++;
  if (world_rank == 0) printf("%s - %s%s%s\n", all_ok ? "ok" : "not ok", name, detail[0] ? ": " : "", detail);
}

/* A check that cannot run in this job (too few ranks, no GPU): counted apart,
 * never as a pass. Called on every rank with the same arguments. */
static inline void report_skip(const char *name, const char *why)
{
  nskip++;
  if (world_rank == 0) printf("skip - %s: %s\n", name, why);
}

/* the closing line run_tests.sh counts against */
static inline void report_tally(void)
{
  if (world_rank == 0) printf("%d passed, %d failed, %d skipped\n", npass, nfail, nskip);
}

#endif
