/* Error reporting: one line per error, naming the rank (and, for a broken
 * internal rule, the place in the source), and a job exit that never
 * leaves other ranks hanging. */
#include "sys.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static PetscBool sys_error_collective = PETSC_TRUE;

/* An allocation failure is raised inside the allocator (PETSc's
 * PetscMallocAlign, the backend's alloc), which cannot say what the memory
 * was for; its report waits for the first frame of rlfuse's own code above
 * it (PETSc calls the handler again for every frame on the way out). */
static char sys_oom_mess[512];
static int  sys_oom_pending;

static int sys_error_ours(const char *file) { return file && !strncmp(file, "src/", 4); }

/* A broken internal rule (a bug to report) names where it broke; an error
 * about the input, a file, the machine or an unsupported combination is
 * the user's to fix and its line says all there is: no source location. */
static int sys_error_internal(PetscErrorCode n)
{
  return n == PETSC_ERR_PLIB || n == PETSC_ERR_ORDER || n == PETSC_ERR_ARG_NULL;
}

static PetscErrorCode sys_error_print(MPI_Comm comm, int line, const char *fun, const char *file, PetscErrorCode n,
                                      PetscErrorType p, const char *mess, void *ctx)
{
  int rank = 0, world = 1;

  if (p != PETSC_ERROR_INITIAL) {
    if (!sys_oom_pending || !sys_error_ours(file)) return n;
    sys_oom_pending = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1)
      fprintf(stderr, "rlfuse: error: out of memory in %s: %s [rank %d, %s:%d]\n", fun, sys_oom_mess, rank, file, line);
    else fprintf(stderr, "rlfuse: error: out of memory in %s: %s [%s:%d]\n", fun, sys_oom_mess, file, line);
    fflush(stderr);
    return n;
  }
  if (n == PETSC_ERR_MEM) {
    snprintf(sys_oom_mess, sizeof sys_oom_mess, "%s", mess ? mess : "allocation failed");
    sys_oom_pending       = 1;
    sys_error_collective  = PETSC_FALSE; /* one rank ran out: the job is aborted */
    return n;
  }
  /* Only the first report of an error: PETSc calls again for each frame. */
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (comm == MPI_COMM_SELF || comm == PETSC_COMM_SELF) sys_error_collective = PETSC_FALSE;
  else {
    int ncomm = 1;
    MPI_Comm_size(comm, &ncomm);
    sys_error_collective = ncomm == world ? PETSC_TRUE : PETSC_FALSE;
  }
  if (sys_error_collective && rank != 0) return n;
  /* raised inside PETSc, its build paths say nothing to a user; nor does
   * our own source location, unless an internal rule broke */
  if (!sys_error_ours(file) || !sys_error_internal(n)) {
    if (world > 1) fprintf(stderr, "rlfuse: error: %s [rank %d]\n", mess ? mess : "(no message)", rank);
    else fprintf(stderr, "rlfuse: error: %s\n", mess ? mess : "(no message)");
  } else if (world > 1)
    fprintf(stderr, "rlfuse: error: %s [rank %d, %s:%d %s]\n", mess ? mess : "(no message)", rank, file, line, fun);
  else fprintf(stderr, "rlfuse: error: %s [%s:%d %s]\n", mess ? mess : "(no message)", file, line, fun);
  fflush(stderr);
  return n;
}

PetscErrorCode sys_error_handler_install(void)
{
  PetscFunctionBegin;
  PetscCall(PetscPushErrorHandler(sys_error_print, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A collective error is printed by rank 0 alone, and the launcher kills
 * every rank as soon as one exits non-zero, so the other ranks wait (up to
 * 5 s, in case the error was not raised everywhere) until rank 0 has
 * printed before they exit. */
static void sys_error_wait_for_rank0(void)
{
  MPI_Request req;
  int         done = 0;
  double      t0   = MPI_Wtime();

  if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return;
  while (!done && MPI_Wtime() - t0 < 5.0) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
  }
}

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer asks this at exit. After an error the job leaves at once,
 * from deep inside some mode, with that mode's models and buffers still
 * allocated by the frames it unwound: reporting them would demand cleanup
 * code on every error path for memory the OS takes back anyway. Leaks of
 * runs that end normally, and of functions whose errors a caller survives
 * (the test programs check those), are still reported. */
static int sys_error_exiting;
int        __lsan_is_turned_off(void);
int        __lsan_is_turned_off(void) { return sys_error_exiting; }
  #define SYS_ERROR_EXITING() (sys_error_exiting = 1)
#else
  #define SYS_ERROR_EXITING() ((void)0)
#endif

static int (*sys_exit_hooks[4])(void);
static int sys_nexit_hooks;

void sys_error_exit_hook(int (*fn)(void))
{
  for (int i = 0; i < sys_nexit_hooks; i++)
    if (sys_exit_hooks[i] == fn) return;
  if (sys_nexit_hooks < (int)(sizeof sys_exit_hooks / sizeof sys_exit_hooks[0])) sys_exit_hooks[sys_nexit_hooks++] = fn;
}

void sys_error_exit(PetscErrorCode ierr)
{
  int world = 1, stuck = 0;

  SYS_ERROR_EXITING();
  for (int i = sys_nexit_hooks - 1; i >= 0; i--) stuck |= sys_exit_hooks[i]();
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world > 1 && !sys_error_collective) MPI_Abort(MPI_COMM_WORLD, (int)ierr);
  if (world > 1) sys_error_wait_for_rank0();
  if (stuck) {
    /* a library holds state it could not release (HDF5: a file whose close
     * failed on a full disk); its shutdown, run by MPI_Finalize or at exit,
     * would crash on it. The error is printed: leave without shutdowns. */
    fflush(NULL);
    _exit(1);
  }
  PetscFinalize();
  /* rlfuse's main called MPI_Init, so PetscFinalize leaves MPI up: finalize
   * it too, or MPICH's transport state is left for the leak checker (the
   * tools' mains let PetscInitialize start MPI, and PetscFinalize ends it) */
  {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
  }
  exit(sys_stop_signal() ? 128 + sys_stop_signal() : 1); /* a stop on a signal ends as the signal would */
}
