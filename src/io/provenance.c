/* io: the /code group of a run record: how this run was made (code version,
 * compiler and flags, every library version, ranks and threads, host, time,
 * command line, seed), so any output can be traced back and reproduced; and
 * the checksum that ties a record to the contents of an input file. */
#include "internal/h5util.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
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
  PetscCheck(localtime_r(&t, &tm) && strftime(buf, len, "%Y-%m-%dT%H:%M:%S%z", &tm) > 0, PETSC_COMM_SELF, PETSC_ERR_SYS,
             "cannot format the current time");
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
    PetscBool plain = (PetscBool)(a[0] && a[strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
                                                      "+=.,/:@%")] == 0);

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
  PetscCall(io_write_version(g));
  PetscCall(io_attr_write_string(g, "compiler", RLFUSE_CC));
  PetscCall(io_attr_write_string(g, "cflags", RLFUSE_CFLAGS));
  PetscCall(prov_mpi_version(buf, sizeof buf));
  PetscCall(io_attr_write_string(g, "mpi", buf));
  PetscCall(io_hdf5_version(buf, sizeof buf));
  PetscCall(io_attr_write_string(g, "hdf5", buf));
  PetscCall(PetscGetVersion(buf, sizeof buf));
  prov_tidy(buf);
  PetscCall(io_attr_write_string(g, "petsc", buf));
  PetscCall(io_attr_write_string(g, "blas", openblas_get_config()));
  PetscCall(io_attr_write_string(g, "blas_core", openblas_get_corename())); /* the kernels used (src/sys/blascore.c) */
  PetscCall(backend_cuda_version(buf, sizeof buf));
  PetscCall(io_attr_write_string(g, "cuda", buf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_provenance_write(hid_t g, const RunCtx *run, const char *mode)
{
  char  buf[256];
  char *cmd = NULL;

  PetscFunctionBegin;
  PetscCall(prov_write_versions(g));
  PetscCall(io_attr_write_string(g, "mode", mode));
  if (gethostname(buf, sizeof buf)) PetscCall(PetscStrncpy(buf, "unknown", sizeof buf));
  buf[sizeof buf - 1] = 0;
  PetscCall(io_attr_write_string(g, "hostname", buf));
  PetscCall(prov_now(buf, sizeof buf));
  PetscCall(io_attr_write_string(g, "start_time", buf));
  PetscCall(prov_command_line(&cmd));
  PetscCall(io_attr_write_string(g, "command_line", cmd));
  PetscCall(PetscFree(cmd));
  PetscCall(io_attr_write_int(g, "ranks", IO_I32LE, run->size));
  PetscCall(io_attr_write_int(g, "threads", IO_I32LE, omp_get_max_threads()));
  PetscCall(io_attr_write_int(g, "seed", IO_I64LE, run->seed));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- an input file's checksum ------------------------------------------- */
typedef struct {
  const char *path;
  char        sum[32];
  int64_t     size;
} ProvChecksum;

/* 64-bit FNV-1a over 8-byte little-endian words (the last zero-padded),
 * each step followed by h ^= h >> 32 so a change in a word's high bits
 * reaches the low ones; then the size. Not cryptographic: it tells a file
 * that changed from the one a run read, at about 1 GB/s from the page cache
 * on the 2-core test machine (SmolLM2-135M's 1.6 GB SFT checkpoint in under
 * 2 s, once per run start), where SHA-256 would need a library rlfuse lacks. */
static uint64_t prov_mix(uint64_t h, uint64_t w)
{
  h = (h ^ w) * 0x100000001b3ULL;
  return h ^ (h >> 32);
}

static PetscErrorCode prov_checksum_file(void *vctx)
{
  ProvChecksum *c   = (ProvChecksum *)vctx;
  const size_t  cap = (size_t)4 << 20;
  uint64_t      h   = 0xcbf29ce484222325ULL;
  unsigned char *buf;
  size_t        n;
  FILE         *f;

  PetscFunctionBegin;
  f = fopen(c->path, "rb");
  PetscCheck(f, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "cannot read %s: %s", c->path, strerror(errno));
  buf = malloc(cap); /* not PetscMalloc: f would stay open if it failed */
  if (!buf) fclose(f);
  PetscCheck(buf, PETSC_COMM_SELF, PETSC_ERR_MEM, "cannot allocate %zu bytes to read %s", cap, c->path);
  c->size = 0;
  while ((n = fread(buf, 1, cap, f)) > 0) { /* every read but the last fills the buffer, a multiple of 8 */
    for (size_t i = 0; i < n; i += 8) {
      uint64_t w = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      if (i + 8 <= n) memcpy(&w, buf + i, 8);
      else
#endif
        for (size_t b = 0; b < 8 && i + b < n; b++) w |= (uint64_t)buf[i + b] << (8 * b);
      h = prov_mix(h, w);
    }
    c->size += (int64_t)n;
  }
  n = (size_t)ferror(f);
  fclose(f);
  free(buf);
  PetscCheck(!n, PETSC_COMM_SELF, PETSC_ERR_FILE_READ, "reading %s failed", c->path);
  h = prov_mix(h, (uint64_t)c->size);
  PetscCall(PetscSNPrintf(c->sum, sizeof c->sum, "fnv1a64w:%016llx", (unsigned long long)h));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_file_checksum_local(const char *path, char *sum, size_t len, int64_t *size)
{
  ProvChecksum c = {path, "", 0};

  PetscFunctionBegin;
  PetscCall(prov_checksum_file(&c));
  PetscCall(PetscStrncpy(sum, c.sum, len));
  if (size) *size = c.size;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_file_checksum(MPI_Comm comm, const char *path, char *sum, size_t len, int64_t *size)
{
  ProvChecksum c = {path, "", 0};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, prov_checksum_file, &c));
  PetscCallMPI(sys_mpi_bcast(c.sum, (int)sizeof c.sum, MPI_CHAR, 0, comm));
  PetscCallMPI(sys_mpi_bcast(&c.size, 1, MPI_INT64_T, 0, comm));
  PetscCall(PetscStrncpy(sum, c.sum, len));
  if (size) *size = c.size;
  PetscFunctionReturn(PETSC_SUCCESS);
}
