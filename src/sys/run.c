/* The run context (rank, threads, seed, output directory) and small helpers
 * for paths and sizes. */
#include "sys.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <omp.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

double sys_wtime(void) { return MPI_Wtime(); }

PetscErrorCode sys_run_setup(MPI_Comm comm, RunCtx *run)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(run, sizeof *run));
  run->comm = comm;
  PetscCallMPI(MPI_Comm_rank(comm, &run->rank));
  PetscCallMPI(MPI_Comm_size(comm, &run->size));
  run->nthreads = omp_get_max_threads();
  run->seed     = 1234;
  PetscCall(PetscStrncpy(run->output_dir, "out", sizeof run->output_dir));
  PetscOptionsBegin(comm, NULL, "Run options", NULL);
  RfOptInt("-seed", "Random seed: every draw is keyed by (seed, iteration, sample, position)", 1234, &run->seed);
  RfOptString("-output_dir", "Directory for run.h5, checkpoints and other outputs", run->output_dir,
              sizeof run->output_dir);
  RfOptBool("-dry_run", "Check the deck and the memory it needs, then exit", PETSC_FALSE, &run->dry_run);
  PetscOptionsEnd();
  PetscCheck(run->output_dir[0], comm, PETSC_ERR_ARG_WRONG,
             "option -output_dir: the value is empty (give a directory, e.g. -output_dir out)");
  PetscCheck(run->seed >= 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "-seed %" PetscInt_FMT " must be non-negative", run->seed);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_mkdir_p(const char *dir)
{
  char path[PETSC_MAX_PATH_LEN];

  PetscFunctionBegin;
  PetscCall(PetscStrncpy(path, dir, sizeof path));
  for (char *p = path + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p     = '\0';
      if (mkdir(path, 0777) != 0)
        PetscCheck(errno == EEXIST, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "cannot create directory %s: %s", path,
                   strerror(errno));
      *p = c;
      if (c == '\0') break;
    }
  }
  {
    struct stat st;
    PetscCheck(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE,
               "output directory %s exists and is not a directory", dir);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_path_printf(char *path, size_t len, const char *fmt, ...)
{
  va_list ap;
  int     n;

  PetscFunctionBegin;
  va_start(ap, fmt);
  n = vsnprintf(path, len, fmt, ap);
  va_end(ap);
  PetscCheck(n >= 0 && (size_t)n < len, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "path %.60s... is %d characters, longer than the %zu allowed (shorten -output_dir or the file name)", path,
             n, len - 1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_output_path(const RunCtx *run, const char *name, char *path, size_t len)
{
  PetscFunctionBegin;
  PetscCall(sys_path_printf(path, len, "%s/%s", run->output_dir, name));
  PetscFunctionReturn(PETSC_SUCCESS);
}

const char *sys_bytes_str(double bytes, char *buf, size_t len)
{
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int         u      = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    u++;
  }
  snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
  return buf;
}

const char *sys_duration_str(double seconds, char *buf, size_t len)
{
  long s = (long)(seconds + 0.5);

  if (seconds < 60) snprintf(buf, len, "%.1f s", seconds);
  else if (s < 3600) snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
  else snprintf(buf, len, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  return buf;
}

const char *sys_progress_str(double t0, long done, long left, char *buf, size_t len)
{
  return sys_progress_more_str(t0, done, left, 0.0, 0.0, buf, len);
}

const char *sys_progress_more_str(double t0, long done, long left, double apart, double more, char *buf, size_t len)
{
  char   e[32], r[32];
  double el = sys_wtime() - t0, step = done > 0 ? (el - apart) / (double)done : 0;

  snprintf(buf, len, "elapsed %s | ETA %s", sys_duration_str(el, e, sizeof e),
           done > 0 ? sys_duration_str(step * (double)left + more, r, sizeof r) : "?");
  return buf;
}

double sys_memory_available(void)
{
  FILE  *f = fopen("/proc/meminfo", "r");
  char   line[256];
  double kib = -1;

  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
  if (f) fclose(f);
  if (kib >= 0) return kib * 1024.0;
  return (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}
