/* Stopping a run on SIGINT or SIGTERM (Ctrl-C, a batch system's time limit):
 * the handler only notes the signal; the stages look at it after each step
 * or iteration, all ranks agree on it, and the stage writes a checkpoint of
 * where it is and ends with one line and the status 128 + signal. A second
 * signal of the same kind ends the process at once (the default action). */
#include "sys.h"
#include <signal.h>
#include <string.h>

/* The one process-wide value a signal handler may write. */
static volatile sig_atomic_t sys_stop_sig;

static void sys_stop_handler(int sig)
{
  if (sys_stop_sig == sig) { /* asked twice: do what the signal does by default */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  sys_stop_sig = sig;
}

void sys_stop_install(void)
{
  struct sigaction a;

  memset(&a, 0, sizeof a);
  a.sa_handler = sys_stop_handler;
  sigemptyset(&a.sa_mask);
  a.sa_flags = SA_RESTART;
  sigaction(SIGINT, &a, NULL);
  sigaction(SIGTERM, &a, NULL);
}

int sys_stop_signal(void) { return (int)sys_stop_sig; }

PetscErrorCode sys_stop_agreed(MPI_Comm comm, int *sig)
{
  int mine = (int)sys_stop_sig;

  PetscFunctionBegin;
  PetscCallMPI(sys_mpi_allreduce(&mine, sig, 1, MPI_INT, MPI_MAX, comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}
