/* io: the /code group of a run record: how this run was made (code version,
 * compiler and flags, every library version, ranks and threads, host, time,
 * command line, seed), so any output can be traced back and reproduced. */
#include "internal/h5util.h"

#include <omp.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

char *openblas_get_config(void); /* OpenBLAS; not in every cblas.h */
char *openblas_get_corename(void);

/* Library banners come with tabs and trailing blanks; store them on one
 * tidy line. */
static void prov_tidy(char *s)
{
  size_t n;

  s[strcspn(s, "\r\n")] = 0;
  for (char *c = s; *c; c++)
    if (*c == '\t') *c = ' ';
  for (n = strlen(s); n && s[n - 1] == ' '; n--) s[n - 1] = 0;
}

/* MPI_Get_library_version gives a multi-line banner; the first line names it. */
static PetscErrorCode prov_mpi_version(char *buf, size_t len)
{
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int  n;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Get_library_version(v, &n));
  prov_tidy(v);
  PetscCall(PetscStrncpy(buf, v, len));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Local time with its UTC offset, e.g. 2024-05-01T12:34:56+0200. */
static PetscErrorCode prov_now(char *buf, size_t len)
{
  time_t    t = time(NULL);
  struct tm tm;

  PetscFunctionBegin;
  PetscCheck(localtime_r(&t, &tm) && strftime(buf, len, "%Y-%m-%dT%H:%M:%S%z", &tm) > 0, PETSC_COMM_SELF, PETSC_ERR_SYS, "cannot format the current time");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The command line as a shell would need it: arguments with anything but
 * plain characters are single-quoted. */
static PetscErrorCode prov_command_line(char **out)
{
  int     argc;
  char  **argv;
  size_t  len = 1, used = 0;
  char   *s;

  PetscFunctionBegin;
  PetscCall(PetscGetArgs(&argc, &argv));
  for (int i = 0; i < argc; i++) len += 4 * strlen(argv[i]) + 3;
  PetscCall(PetscCalloc1(len, &s));
  for (int i = 0; i < argc; i++) {
    const char *a     = argv[i];
    PetscBool   plain = (PetscBool)(a[0] && a[strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%")] == 0);

    if (i) s[used++] = ' ';
    if (plain) {
      memcpy(s + used, a, strlen(a));
      used += strlen(a);
      continue;
    }
    s[used++] = '\'';
    for (; *a; a++) {
      if (*a == '\'') { /* ' becomes '\'' */
        memcpy(s + used, "'\\''", 4);
        used += 4;
      } else s[used++] = *a;
    }
    s[used++] = '\'';
  }
  *out = s;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode prov_write_versions(hid_t g)
{
  char buf[512];

  PetscFunctionBegin;
  PetscCall(h5u_write_version(g));
  PetscCall(h5u_attr_write_string(g, "compiler", RLFUSE_CC));
  PetscCall(h5u_attr_write_string(g, "cflags", RLFUSE_CFLAGS));
  PetscCall(prov_mpi_version(buf, sizeof buf));
  PetscCall(h5u_attr_write_string(g, "mpi", buf));
  PetscCall(io_hdf5_version(buf, sizeof buf));
  PetscCall(h5u_attr_write_string(g, "hdf5", buf));
  PetscCall(PetscGetVersion(buf, sizeof buf));
  prov_tidy(buf);
  PetscCall(h5u_attr_write_string(g, "petsc", buf));
  PetscCall(h5u_attr_write_string(g, "blas", openblas_get_config()));
  PetscCall(h5u_attr_write_string(g, "blas_core", openblas_get_corename())); /* the kernels used (src/sys/blascore.c) */
  PetscCall(backend_cuda_version(buf, sizeof buf));
  PetscCall(h5u_attr_write_string(g, "cuda", buf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_provenance_write(hid_t g, const RunCtx *run, const char *mode)
{
  char  buf[256];
  char *cmd = NULL;

  PetscFunctionBegin;
  PetscCall(prov_write_versions(g));
  PetscCall(h5u_attr_write_string(g, "mode", mode));
  if (gethostname(buf, sizeof buf)) PetscCall(PetscStrncpy(buf, "unknown", sizeof buf));
  buf[sizeof buf - 1] = 0;
  PetscCall(h5u_attr_write_string(g, "hostname", buf));
  PetscCall(prov_now(buf, sizeof buf));
  PetscCall(h5u_attr_write_string(g, "start_time", buf));
  PetscCall(prov_command_line(&cmd));
  PetscCall(h5u_attr_write_string(g, "command_line", cmd));
  PetscCall(PetscFree(cmd));
  PetscCall(h5u_attr_write_int(g, "ranks", H5T_STD_I32LE, run->size));
  PetscCall(h5u_attr_write_int(g, "threads", H5T_STD_I32LE, omp_get_max_threads()));
  PetscCall(h5u_attr_write_int(g, "seed", H5T_STD_I64LE, run->seed));
  PetscFunctionReturn(PETSC_SUCCESS);
}
