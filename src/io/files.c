/* files.c: every file-valued option of rlfuse in one table with its role
 * (read or written), checked together before any work: an output that is an
 * input of the run or another output would destroy it (-plan_output equal to
 * -cost_profile overwrote the measured profile, and the run said it
 * succeeded). Paths are compared by what they resolve to, not as strings. */
#include "io.h"
#include "internal/h5util.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef enum { IO_FILE_IN, IO_FILE_OUT } IoFileRole;

/* skip: values that name no file ('builtin' data, -restart latest); prefixed:
 * the file follows one of the value's kinds (-cost_lengths hist:FILE,
 * rollouts:FILE[:iter_K]). */
typedef struct {
  const char *option;
  IoFileRole  role;
  const char *skip;
  PetscBool   prefixed;
} IoFileOption;

static const IoFileOption io_file_options[] = {
  {"-init_checkpoint", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-restart", IO_FILE_IN, "latest", PETSC_FALSE},
  {"-sft_data", IO_FILE_IN, "builtin", PETSC_FALSE},
  {"-rm_sft_checkpoint", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-rm_data", IO_FILE_IN, "builtin", PETSC_FALSE},
  {"-actor_checkpoint", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-reference_checkpoint", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-reward_checkpoint", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-fuse_train_schedule", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-ppo_prompts", IO_FILE_IN, "builtin", PETSC_FALSE},
  {"-ppo_eval_file", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-score_checkpoint", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-score_input", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-generate_checkpoint", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-generate_input", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-plan_file", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-cost_hardware", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-cost_profile", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-cost_lengths", IO_FILE_IN, NULL, PETSC_TRUE},
  {"-cost_prompt_lengths", IO_FILE_IN, NULL, PETSC_TRUE},
  {"-sched_file", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-profile_file", IO_FILE_IN, NULL, PETSC_FALSE},
  {"-score_output", IO_FILE_OUT, NULL, PETSC_FALSE},
  {"-generate_output", IO_FILE_OUT, NULL, PETSC_FALSE},
  {"-data_output", IO_FILE_OUT, NULL, PETSC_FALSE},
  {"-data_text", IO_FILE_OUT, NULL, PETSC_FALSE},
  {"-plan_output", IO_FILE_OUT, NULL, PETSC_FALSE},
  {"-plan_timeline", IO_FILE_OUT, NULL, PETSC_FALSE},
  {"-sched_output", IO_FILE_OUT, NULL, PETSC_FALSE},
  {"-profile_output", IO_FILE_OUT, NULL, PETSC_FALSE},
};
#define IO_NFILE_OPTIONS ((int)(sizeof io_file_options / sizeof io_file_options[0]))

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
  if (!o->prefixed) {
    PetscCall(PetscStrncpy(file, value, len));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (!strncmp(value, "hist:", 5)) PetscCall(PetscStrncpy(file, value + 5, len));
  else if (!strncmp(value, "rollouts:", 9)) {
    char *iter;

    PetscCall(PetscStrncpy(file, value + 9, len));
    iter = strrchr(file, ':');
    if (iter && !strncmp(iter, ":iter_", 6) && iter[6] && strspn(iter + 6, "0123456789") == strlen(iter + 6)) *iter = '\0'; /* as src/cost/work.c reads it */
  }
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
  if (realpath(dirname(dir), rdir)) snprintf(f->real, sizeof f->real, "%s/%s", strcmp(rdir, "/") ? rdir : "", basename(base));
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
static PetscErrorCode io_file_value(const char *name, PetscInt nleft, char **names, char **values, char *value, size_t len, PetscBool *set)
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

static PetscErrorCode io_files_gather(IoFileGiven *given, int *n)
{
  PetscInt nleft;
  char   **names, **values;

  PetscFunctionBegin;
  *n = 0;
  PetscCall(PetscOptionsLeftGet(NULL, &nleft, &names, &values));
  for (int k = 0; k < IO_NFILE_OPTIONS; k++) {
    char           value[PETSC_MAX_PATH_LEN];
    PetscBool      set;
    PetscErrorCode ierr;

    ierr = io_file_value(io_file_options[k].option, nleft, names, values, value, sizeof value, &set);
    if (!ierr && set) ierr = io_file_of(&io_file_options[k], value, given[*n].value, sizeof given[*n].value);
    if (ierr) PetscCall(PetscOptionsLeftRestore(NULL, &nleft, &names, &values));
    PetscCall(ierr);
    if (!set || !given[*n].value[0]) continue;
    given[*n].opt = &io_file_options[k];
    io_file_resolve(&given[*n]);
    (*n)++;
  }
  PetscCall(PetscOptionsLeftRestore(NULL, &nleft, &names, &values));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode io_files_task(void *unused)
{
  IoFileGiven given[IO_NFILE_OPTIONS];
  int         n;

  PetscFunctionBegin;
  PetscCall(io_files_gather(given, &n));
  for (int i = 0; i < n; i++) {
    if (given[i].opt->role != IO_FILE_OUT) continue;
    PetscCall(h5u_output_check(given[i].opt->option, given[i].value));
    for (int j = 0; j < n; j++) {
      if (j == i || !io_file_same(&given[i], &given[j])) continue;
      PetscCheck(given[j].opt->role != IO_FILE_IN, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "%s %s is also an input of this run (%s %s); choose another output file", given[i].opt->option, given[i].value, given[j].opt->option, given[j].value);
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "%s %s is also the output of %s (%s); choose another file for one of them", given[i].opt->option, given[i].value, given[j].opt->option, given[j].value);
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_files_check(MPI_Comm comm)
{
  PetscFunctionBegin;
  PetscCall(h5u_rank0(comm, io_files_task, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}
