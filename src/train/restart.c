/* train: "-restart latest" (the -restart of train/job.c). A batch job that is preempted and requeued runs the
 * same command again; with -restart latest it resumes from the newest complete
 * checkpoint in its output directory, or starts fresh when there is none,
 * so one job script serves the first start and every resumption. */
#include "train.h"

#include <dirent.h>
#include <inttypes.h>
#include <string.h>

typedef struct {
  const char *dir;
  char        best[PETSC_MAX_PATH_LEN];
  int64_t     best_it;
  int         nskipped;
} RestartScan;

/* Checkpoint names a run writes: ckpt_<digits>.h5 and final.h5. A temporary
 * (PATH.tmp.PID, left by a job killed mid-write) never matches. */
static PetscBool restart_is_ckpt_name(const char *name)
{
  size_t n = strlen(name);

  if (!strcmp(name, "final.h5")) return PETSC_TRUE;
  if (n < 9 || strncmp(name, "ckpt_", 5) || strcmp(name + n - 3, ".h5")) return PETSC_FALSE;
  for (size_t i = 5; i < n - 3; i++)
    if (name[i] < '0' || name[i] > '9') return PETSC_FALSE;
  return PETSC_TRUE;
}

/* Rank 0: the readable checkpoint with the most iterations (final.h5 on a tie).
 * Files whose /state the checkpoint reader refuses (truncated, corrupt, not
 * a checkpoint) are skipped. */
static PetscErrorCode restart_scan(void *vctx)
{
  RestartScan   *s = (RestartScan *)vctx;
  DIR           *d = opendir(s->dir);
  struct dirent *e;

  PetscFunctionBegin;
  s->best[0] = '\0';
  s->best_it = -1;
  if (!d) PetscFunctionReturn(PETSC_SUCCESS); /* no output directory yet: a fresh start */
  while ((e = readdir(d))) {
    char      path[PETSC_MAX_PATH_LEN];
    int64_t   it = -1;
    CkptState st;

    if (!restart_is_ckpt_name(e->d_name)) continue;
    PetscCall(PetscSNPrintf(path, sizeof path, "%s/%s", s->dir, e->d_name));
    it = ckpt_read_state_local(path, &st) ? -1 : (int64_t)st.iteration;
    if (it < 0) {
      s->nskipped++;
      continue;
    }
    if (it > s->best_it || (it == s->best_it && !strcmp(e->d_name, "final.h5"))) {
      s->best_it = it;
      PetscCall(PetscStrncpy(s->best, path, sizeof s->best));
    }
  }
  closedir(d);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode train_restart_resolve(MPI_Comm comm, const char *dir, char *restart, size_t len)
{
  RestartScan s = {dir, "", -1, 0};
  PetscBool   latest;

  PetscFunctionBegin;
  PetscCall(PetscStrcmp(restart, "latest", &latest));
  if (!latest) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_on_root(comm, restart_scan, &s));
  PetscCallMPI(sys_mpi_bcast(s.best, (int)sizeof s.best, MPI_CHAR, 0, comm));
  PetscCallMPI(sys_mpi_bcast(&s.best_it, 1, MPI_INT64_T, 0, comm));
  PetscCallMPI(sys_mpi_bcast(&s.nskipped, 1, MPI_INT, 0, comm));
  if (s.best[0])
    PetscCall(PetscPrintf(comm, "restart latest: %s (step or iteration %" PRId64 ")%s\n", s.best, s.best_it,
                          s.nskipped ? ", unreadable checkpoints skipped" : ""));
  else PetscCall(PetscPrintf(comm, "restart latest: no complete checkpoint in %s, starting fresh\n", dir));
  PetscCall(PetscStrncpy(restart, s.best, len));
  PetscFunctionReturn(PETSC_SUCCESS);
}
