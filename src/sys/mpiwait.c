/* mpiwait.c: how a rank waits for MPI. MPICH (ch4, UCX) completes a blocking
 * call by polling without pause. When a node runs more threads than it has
 * cores (the tests' 4 ranks on 2 cores, a laptop), a waiting rank's polling
 * takes the core from the rank it waits for: 3 ranks of tensor-parallel decode
 * on 2 cores ran 4.7x slower than when waiters give their core away. So every
 * blocking call of rlfuse is made as its nonblocking form and completed here:
 * polled with a sched_yield between polls on an oversubscribed node, by
 * MPI_Wait otherwise. The calls move the same bytes, and the only float sums
 * rlfuse leaves to MPI have one nonzero contribution per element, so results
 * keep their bits whichever algorithm MPI picks. RLFUSE_WAIT_POLICY=yield
 * or poll in the environment overrides what the node's count decides: yield
 * where other jobs share the cores (the suite's parallel lanes), poll where a
 * rank owns its core whatever the count says. */
#include "sys.h"
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static PetscBool polite = PETSC_FALSE;

PetscErrorCode sys_mpi_wait_setup(MPI_Comm node)
{
  int  mine = omp_get_max_threads(), threads = 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);

  const char *policy = getenv("RLFUSE_WAIT_POLICY");

  PetscFunctionBegin;
  PetscCallMPI(MPI_Allreduce(&mine, &threads, 1, MPI_INT, MPI_SUM, node));
  polite = cores > 0 && threads > cores ? PETSC_TRUE : PETSC_FALSE;
  if (policy && policy[0]) {
    PetscCheck(!strcmp(policy, "yield") || !strcmp(policy, "poll") || !strcmp(policy, "auto"), PETSC_COMM_SELF,
               PETSC_ERR_ARG_WRONG, "environment variable RLFUSE_WAIT_POLICY=%s: give yield, poll or auto", policy);
    if (!strcmp(policy, "yield")) polite = PETSC_TRUE;
    if (!strcmp(policy, "poll")) polite = PETSC_FALSE;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Between two polls of a polite wait: the core to another thread, and after
 * a while of waiting a short sleep, so that a long wait (a rank idle while
 * others compute) costs its core almost nothing. */
static void pause_for(long polls)
{
  if (polls < 200) sched_yield();
  else nanosleep(&(struct timespec){0, 20000}, NULL);
}

int sys_mpi_finish(MPI_Request *req, MPI_Status *st)
{
  int  done = 0, rc;
  long polls = 0;

  if (!polite) return MPI_Wait(req, st);
  while ((rc = MPI_Test(req, &done, st)) == MPI_SUCCESS && !done) pause_for(polls++);
  return rc;
}

int sys_mpi_finish_all(int n, MPI_Request *req, MPI_Status *st)
{
  int  done = 0, rc;
  long polls = 0;

  if (!polite) return MPI_Waitall(n, req, st);
  while ((rc = MPI_Testall(n, req, &done, st)) == MPI_SUCCESS && !done) pause_for(polls++);
  return rc;
}

/* The blocking calls, each as its nonblocking form and a wait above. */
#define FINISH(call)                                                                                                   \
  do {                                                                                                                 \
    MPI_Request req_;                                                                                                  \
    int         rc_ = (call);                                                                                          \
    if (rc_ != MPI_SUCCESS) return rc_;                                                                                \
    return sys_mpi_finish(&req_, MPI_STATUS_IGNORE);                                                                   \
  } while (0)

int sys_mpi_barrier(MPI_Comm comm) { FINISH(MPI_Ibarrier(comm, &req_)); }

int sys_mpi_bcast(void *buf, int n, MPI_Datatype t, int root, MPI_Comm comm)
{
  FINISH(MPI_Ibcast(buf, n, t, root, comm, &req_));
}

int sys_mpi_allreduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm)
{
  FINISH(MPI_Iallreduce(in, out, n, t, op, comm, &req_));
}

int sys_mpi_reduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm comm)
{
  FINISH(MPI_Ireduce(in, out, n, t, op, root, comm, &req_));
}

int sys_mpi_allgather(const void *in, int nin, MPI_Datatype tin, void *out, int nout, MPI_Datatype tout, MPI_Comm comm)
{
  FINISH(MPI_Iallgather(in, nin, tin, out, nout, tout, comm, &req_));
}

int sys_mpi_allgatherv(const void *in, int nin, MPI_Datatype tin, void *out, const int *cnt, const int *dsp,
                       MPI_Datatype tout, MPI_Comm comm)
{
  FINISH(MPI_Iallgatherv(in, nin, tin, out, cnt, dsp, tout, comm, &req_));
}

int sys_mpi_gather(const void *in, int nin, MPI_Datatype tin, void *out, int nout, MPI_Datatype tout, int root,
                   MPI_Comm comm)
{
  FINISH(MPI_Igather(in, nin, tin, out, nout, tout, root, comm, &req_));
}

int sys_mpi_gatherv(const void *in, int nin, MPI_Datatype tin, void *out, const int *cnt, const int *dsp,
                    MPI_Datatype tout, int root, MPI_Comm comm)
{
  FINISH(MPI_Igatherv(in, nin, tin, out, cnt, dsp, tout, root, comm, &req_));
}

int sys_mpi_alltoallv(const void *in, const int *scnt, const int *sdsp, MPI_Datatype tin, void *out, const int *rcnt,
                      const int *rdsp, MPI_Datatype tout, MPI_Comm comm)
{
  FINISH(MPI_Ialltoallv(in, scnt, sdsp, tin, out, rcnt, rdsp, tout, comm, &req_));
}

int sys_mpi_recv(void *buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Status *st)
{
  MPI_Request req;
  int         rc = MPI_Irecv(buf, n, t, src, tag, comm, &req);

  return rc != MPI_SUCCESS ? rc : sys_mpi_finish(&req, st);
}

int sys_mpi_probe(int src, int tag, MPI_Comm comm, MPI_Status *st)
{
  int found = 0, rc;

  if (!polite) return MPI_Probe(src, tag, comm, st);
  while ((rc = MPI_Iprobe(src, tag, comm, &found, st)) == MPI_SUCCESS && !found) sched_yield();
  return rc;
}
