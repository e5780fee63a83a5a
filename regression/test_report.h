/* test_report.h: how every C test program (regression/test_*.c) reports, and
 * its temporary directory. One line per check in the format
 * regression/run_tests.sh reads:
 *   ok - name[: detail]        not ok - name: detail        skip - name: why
 * then the closing tally "P passed, F failed, S skipped", against which
 * run_tests.sh counts the lines (a check that vanished is a failure).
 * A program on several ranks calls test_collective(comm) first: from then on
 * every result is agreed over comm (a check passes only if it passes on every
 * rank, so each check is a collective call) and printed once, by rank 0.
 * Included by one test program each: the state below is that program's. */
#ifndef RLFUSE_TEST_REPORT_H
#define RLFUSE_TEST_REPORT_H

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys.h"

#define TEST_DETAIL_MAX  1024
#define TEST_TMPDIRS     4
#define TEST_MESSAGE_MAX 512

static struct {
  int      pass, fail, skip;
  MPI_Comm comm; /* MPI_COMM_NULL: this process reports alone */
  int      rank, size;
  int      ntmp;
  char     tmp[TEST_TMPDIRS][PETSC_MAX_PATH_LEN];
} test_state = {.comm = MPI_COMM_NULL};

/* A PETSc error handler (PetscPushErrorHandler(test_capture_error, buf))
 * that keeps an error's first message in buf, a char[TEST_MESSAGE_MAX], for
 * the checks of what an error says. */
static inline PetscErrorCode test_capture_error(MPI_Comm comm, int line, const char *fun, const char *file, PetscErrorCode n, PetscErrorType p, const char *mess, void *ctx)
{
  (void)comm, (void)line, (void)fun, (void)file;
  if (p == PETSC_ERROR_INITIAL && mess) snprintf((char *)ctx, TEST_MESSAGE_MAX, "%s", mess);
  return n;
}

/* Results from now on agreed over comm and printed by its rank 0. */
static inline void test_collective(MPI_Comm comm)
{
  test_state.comm = comm;
  (void)MPI_Comm_rank(comm, &test_state.rank);
  (void)MPI_Comm_size(comm, &test_state.size);
}

/* Agrees ok over the ranks; on a failure, rank 0 gets in detail the first
 * failing rank's detail, marked "[rank r]" in a job of several ranks. */
static inline int test_agree(int ok, char *detail)
{
  int  all_ok, first, me = ok ? test_state.size : test_state.rank;
  char from[TEST_DETAIL_MAX];

  (void)MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, test_state.comm);
  if (all_ok) return 1;
  (void)MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, test_state.comm);
  if (first != 0 && test_state.rank == first) (void)MPI_Send(detail, TEST_DETAIL_MAX, MPI_CHAR, 0, 0, test_state.comm);
  if (test_state.rank == 0) {
    if (first != 0) (void)MPI_Recv(from, TEST_DETAIL_MAX, MPI_CHAR, first, 0, test_state.comm, MPI_STATUS_IGNORE);
    else memcpy(from, detail, TEST_DETAIL_MAX);
    if (test_state.size > 1) snprintf(detail, TEST_DETAIL_MAX, "[rank %d] %.*s", first, TEST_DETAIL_MAX - 16, from);
    else memcpy(detail, from, TEST_DETAIL_MAX);
  }
  return 0;
}

static inline PetscBool test_vreport(PetscBool ok, PetscBool show_on_pass, const char *name, const char *fmt, va_list ap)
{
  char detail[TEST_DETAIL_MAX] = "";
  int  good = ok ? 1 : 0;

  if (fmt) vsnprintf(detail, sizeof detail, fmt, ap);
  if (test_state.comm != MPI_COMM_NULL) good = test_agree(good, detail);
  if (good) test_state.pass++;
  else test_state.fail++;
  if (good && !show_on_pass) detail[0] = 0;
  if (test_state.rank == 0) {
    printf("%s - %s%s%s\n", good ? "ok" : "not ok", name, detail[0] ? ": " : "", detail);
    fflush(stdout);
  }
  return good ? PETSC_TRUE : PETSC_FALSE;
}

/* One check: "ok - name" or "not ok - name: detail", the detail a printf
 * format (NULL for none) shown on a failure only. Returns the verdict
 * (agreed over the ranks when collective). */
static inline PetscBool test_report(PetscBool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline PetscBool test_report(PetscBool ok, const char *name, const char *fmt, ...)
{
  va_list   ap;
  PetscBool good;

  va_start(ap, fmt);
  good = test_vreport(ok, PETSC_FALSE, name, fmt, ap);
  va_end(ap);
  return good;
}

/* test_report for a check whose detail is a measurement worth seeing on a
 * pass too (a measured error): "ok - name: detail". */
static inline PetscBool test_measure(PetscBool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline PetscBool test_measure(PetscBool ok, const char *name, const char *fmt, ...)
{
  va_list   ap;
  PetscBool good;

  va_start(ap, fmt);
  good = test_vreport(ok, PETSC_TRUE, name, fmt, ap);
  va_end(ap);
  return good;
}

/* A check that cannot run here (too few ranks, no GPU): counted apart, never
 * as a pass. When collective, called on every rank with the same arguments. */
static inline void test_skip(const char *name, const char *why)
{
  test_state.skip++;
  if (test_state.rank == 0) printf("skip - %s: %s\n", name, why);
}

/* |got - want| <= rel |want| (false for NaN) */
static inline PetscBool test_close(double got, double want, double rel) { return fabs(got - want) <= rel * fabs(want) + 1e-300 ? PETSC_TRUE : PETSC_FALSE; }

/* A number against its expected value within a relative tolerance. */
static inline PetscBool test_report_close(const char *name, double got, double want, double rel)
{
  return test_report(test_close(got, want, rel), name, "got %.9g, want %.9g", got, want);
}

/* Runs a PETSc call with its errors returned silently (no traceback) into ierr. */
#define TEST_TRY(ierr, call)                                         \
  do {                                                               \
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL)); \
    ierr = (call);                                                   \
    PetscCall(PetscPopErrorHandler());                               \
  } while (0)

/* Passes if ierr is an error whose message is one line containing want;
 * world rank 0 shows the message ("#   ..."). */
static inline void test_expect_error(PetscErrorCode ierr, const char *name, const char *want)
{
  char *msg = NULL;
  int   world_rank = 0;

  if (!ierr) {
    test_report(PETSC_FALSE, name, "succeeded; expected an error containing \"%s\"", want);
    return;
  }
  PetscErrorMessage(ierr, NULL, &msg);
  test_report((PetscBool)(msg && strstr(msg, want) && !strchr(msg, '\n')), name, "message \"%s\" lacks \"%s\" or is not one line", msg ? msg : "(none)", want);
  (void)MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank == 0) printf("#   %s\n", msg ? msg : "(none)");
}

/* The closing tally; returns the exit status (1 on any failure). */
static inline int test_tally(void)
{
  if (test_state.rank == 0) {
    printf("%d passed, %d failed, %d skipped\n", test_state.pass, test_state.fail, test_state.skip);
    fflush(stdout);
  }
  return test_state.fail ? 1 : 0;
}

/* rm -r path (no links followed: lstat) */
static inline void test_remove_tree(const char *path)
{
  struct stat    st;
  DIR           *d;
  struct dirent *e;
  char           sub[PETSC_MAX_PATH_LEN];

  if (lstat(path, &st)) return;
  if (S_ISDIR(st.st_mode) && (d = opendir(path))) {
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        test_remove_tree(sub);
      }
    closedir(d);
  }
  if (remove(path)) printf("# could not remove %s\n", path);
}

static inline void test_tmpdir_cleanup(void)
{
  const char *keep = getenv("RLFUSE_KEEP");

  for (int i = 0; i < test_state.ntmp; i++) {
    if (test_state.fail && keep && !strcmp(keep, "1")) printf("# files kept in %s\n", test_state.tmp[i]);
    else test_remove_tree(test_state.tmp[i]);
  }
}

/* A fresh directory $RLFUSE_TMP/name.XXXXXX (run_tests.sh sets RLFUSE_TMP;
 * else $TMPDIR, else /tmp), removed with its contents at exit, unless the
 * program failed and RLFUSE_KEEP=1. When collective, called on every rank:
 * rank 0 makes it and every rank gets its path. */
static inline PetscErrorCode test_tmpdir(char *dir, size_t len, const char *name)
{
  const char *base = getenv("RLFUSE_TMP");
  MPI_Comm    comm = test_state.comm != MPI_COMM_NULL ? test_state.comm : PETSC_COMM_SELF;
  int         made = 1;

  PetscFunctionBegin;
  if (!base || !base[0]) base = getenv("TMPDIR");
  if (!base || !base[0]) base = "/tmp";
  PetscCheck(test_state.ntmp < TEST_TMPDIRS, comm, PETSC_ERR_ARG_OUTOFRANGE, "more than %d temporary directories in one test program", TEST_TMPDIRS);
  PetscCall(PetscSNPrintf(dir, len, "%s/%s.XXXXXX", base, name));
  if (test_state.rank == 0) made = mkdtemp(dir) != NULL;
  PetscCallMPI(MPI_Bcast(&made, 1, MPI_INT, 0, comm));
  PetscCheck(made, comm, PETSC_ERR_FILE_OPEN, "cannot create a temporary directory %s", dir);
  PetscCallMPI(MPI_Bcast(dir, (int)len, MPI_CHAR, 0, comm));
  if (test_state.rank == 0) {
    PetscCall(PetscStrncpy(test_state.tmp[test_state.ntmp], dir, sizeof test_state.tmp[0]));
    if (test_state.ntmp == 0) atexit(test_tmpdir_cleanup);
  }
  test_state.ntmp++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

#endif
