/* files.c: the run's file-valued options, checked together before any work:
 * an output that is an input of the run or another output would destroy it
 * (-plan_output equal to -cost_profile overwrote the measured profile, and
 * the run said it succeeded). Each module declares its own file options
 * (IoFileOption, inc/io.h); the driver hands their tables over, with the
 * files the mode writes into its output directory, which no input may be
 * (an -actor_checkpoint that was the run's own policy.h5 was overwritten)
 * and which must be regular files or absent (a policy.h5 that was a
 * directory was refused only after training, final.h5 replaced). Paths are
 * compared by what they resolve to, not as strings. */
#include "io.h"
#include "internal/h5util.h"

#include <errno.h>
#include <fnmatch.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct {
  const IoFileOption *opt;
  char                value[PETSC_MAX_PATH_LEN]; /* the file as given */
  char                real[2 * PETSC_MAX_PATH_LEN]; /* realpath of its directory + its name */
  struct stat         st;
  PetscBool           exists;
} IoFileGiven;

/* The file an option's value names, or "" for one that names none. */
static PetscErrorCode io_file_of(const IoFileOption *o, const char *value, char *file, size_t len)
{
  PetscFunctionBegin;
  file[0] = '\0';
  if (!value[0] || (o->skip && !strcmp(value, o->skip))) PetscFunctionReturn(PETSC_SUCCESS);
  if (o->file_of) PetscCall(o->file_of(value, file, len));
  else PetscCall(PetscStrncpy(file, value, len));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A directory that does not resolve (missing) keeps the name as given: the
 * writer refuses it later with its own message. */
static void io_file_resolve(IoFileGiven *f)
{
  char dir[PETSC_MAX_PATH_LEN], base[PETSC_MAX_PATH_LEN], rdir[PATH_MAX];

  f->exists = (PetscBool)(stat(f->value, &f->st) == 0);
  snprintf(dir, sizeof dir, "%s", f->value);
  snprintf(base, sizeof base, "%s", f->value);
  if (realpath(dirname(dir), rdir))
    snprintf(f->real, sizeof f->real, "%s/%s", strcmp(rdir, "/") ? rdir : "", basename(base));
  else snprintf(f->real, sizeof f->real, "%s", f->value);
}

static PetscBool io_file_same(const IoFileGiven *a, const IoFileGiven *b)
{
  if (a->exists && b->exists) return (PetscBool)(a->st.st_dev == b->st.st_dev && a->st.st_ino == b->st.st_ino);
  return (PetscBool)!strcmp(a->real, b->real);
}

/* The value of option name (with its dash) as the run gave it. An option no
 * module has read yet is taken from PETSc's list of unused options, which
 * does not mark it used: the unused-option check that follows in the modes
 * that read their own options must still see it. */
static PetscErrorCode io_file_value(const char *name, PetscInt nleft, char **names, char **values, char *value,
                                    size_t len, PetscBool *set)
{
  PetscFunctionBegin;
  *set = PETSC_FALSE;
  for (PetscInt i = 0; i < nleft; i++) {
    const char *nm = names[i][0] == '-' ? names[i] + 1 : names[i];
    if (strcasecmp(nm, name + 1)) continue;
    PetscCall(PetscStrncpy(value, values[i] ? values[i] : "", len));
    *set = PETSC_TRUE;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscOptionsGetString(NULL, NULL, name, value, len, set)); /* read already: marking it changes nothing */
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const IoFileOption *const *tables;
  int                        ntables;
  const char                *output_dir; /* NULL: the mode writes none */
  const char *const         *writes;     /* what it writes there (shell patterns) */
} IoFilesCtx;

/* Every option of role `role` the run gave, appended to given[*n..]: the
 * inputs first, so that an output equal to an input and to another output
 * is named with the input. */
static PetscErrorCode io_files_gather(const IoFilesCtx *ctx, IoFileRole role, PetscInt nleft, char **names,
                                      char **values, IoFileGiven *given, int *n)
{
  PetscFunctionBegin;
  for (int t = 0; t < ctx->ntables; t++)
    for (const IoFileOption *o = ctx->tables[t]; o->option; o++) {
      char      value[PETSC_MAX_PATH_LEN];
      PetscBool set;

      if (o->role != role && !(role == IO_FILE_IN && o->role == IO_FILE_RESTART)) continue;
      PetscCall(io_file_value(o->option, nleft, names, values, value, sizeof value, &set));
      if (set) PetscCall(io_file_of(o, value, given[*n].value, sizeof given[*n].value));
      if (!set || !given[*n].value[0]) continue;
      given[*n].opt = o;
      io_file_resolve(&given[*n]);
      (*n)++;
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode io_files_compare(const IoFileGiven *given, int n)
{
  PetscFunctionBegin;
  for (int i = 0; i < n; i++) {
    if (given[i].opt->role != IO_FILE_OUT) continue;
    PetscCall(io_output_ok(given[i].opt->option, given[i].value));
    for (int j = 0; j < n; j++) {
      if (j == i || !io_file_same(&given[i], &given[j])) continue;
      PetscCheck(given[j].opt->role == IO_FILE_OUT, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                 "%s %s is also an input of this run (%s %s); choose another output file", given[i].opt->option,
                 given[i].value, given[j].opt->option, given[j].value);
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
              "%s %s is also the output of %s (%s); choose another file for one of them", given[i].opt->option,
              given[i].value, given[j].opt->option, given[j].value);
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The output directory's files: each input that resolves to one of them is
 * refused (the restart file excepted, read before any is written), and each
 * named one (not a pattern) that exists must be a regular file. */
static PetscErrorCode io_files_outdir(const IoFilesCtx *ctx, const IoFileGiven *given, int n)
{
  char rdir[PATH_MAX], full[PATH_MAX], path[2 * PETSC_MAX_PATH_LEN];

  PetscFunctionBegin;
  if (!ctx->output_dir || !realpath(ctx->output_dir, rdir)) PetscFunctionReturn(PETSC_SUCCESS); /* made later */
  for (int i = 0; i < n; i++) {
    size_t      len = strlen(rdir);
    const char *rel;

    if (given[i].opt->role != IO_FILE_IN) continue;
    if (!realpath(given[i].value, full)) snprintf(full, sizeof full, "%s", given[i].real);
    if (strncmp(full, rdir, len) || full[len] != '/') continue;
    rel = full + len + 1;
    for (const char *const *w = ctx->writes; *w; w++)
      PetscCheck(fnmatch(*w, rel, FNM_PATHNAME), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                 "%s %s is the %s this run writes into -output_dir %s: copy the file elsewhere first, or choose "
                 "another -output_dir",
                 given[i].opt->option, given[i].value, rel, ctx->output_dir);
  }
  for (const char *const *w = ctx->writes; *w; w++) {
    struct stat st;

    if (strpbrk(*w, "*?[")) continue;
    snprintf(path, sizeof path, "%s/%s", ctx->output_dir, *w);
    PetscCheck(lstat(path, &st) || S_ISREG(st.st_mode), PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE,
               "-output_dir %s: %s exists and is not a regular file (%s); the run would replace it: remove it or "
               "choose another -output_dir",
               ctx->output_dir, *w,
               S_ISDIR(st.st_mode)   ? "a directory"
               : S_ISLNK(st.st_mode) ? "a symbolic link"
                                     : "a device, socket or pipe");
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode io_files_task(void *vctx)
{
  const IoFilesCtx *ctx = (const IoFilesCtx *)vctx;
  IoFileGiven      *given;
  PetscInt          nleft;
  char            **names, **values;
  int               n = 0, max = 0;
  PetscErrorCode    ierr;

  PetscFunctionBegin;
  for (int t = 0; t < ctx->ntables; t++)
    for (const IoFileOption *o = ctx->tables[t]; o->option; o++) max++;
  PetscCall(PetscCalloc1(max + 1, &given));
  PetscCall(PetscOptionsLeftGet(NULL, &nleft, &names, &values));
  ierr = io_files_gather(ctx, IO_FILE_IN, nleft, names, values, given, &n);
  if (!ierr) ierr = io_files_gather(ctx, IO_FILE_OUT, nleft, names, values, given, &n);
  PetscCall(PetscOptionsLeftRestore(NULL, &nleft, &names, &values));
  if (!ierr) ierr = io_files_compare(given, n);
  if (!ierr) ierr = io_files_outdir(ctx, given, n);
  PetscCall(PetscFree(given));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_files_check(MPI_Comm comm, const IoFileOption *const *tables, int n, const char *output_dir,
                              const char *const *writes)
{
  IoFilesCtx ctx = {tables, n, output_dir, writes};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, io_files_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}
