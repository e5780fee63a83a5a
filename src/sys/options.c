/* Options bookkeeping: every option a module reads is recorded with its
 * effective value (default or given), so the run record stores them all, and
 * options nobody read (misspellings) stop the run before any work. */
#include "sys.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static SysParam *sys_params   = NULL;
static int       sys_nparams  = 0, sys_capparams = 0;

PetscErrorCode sys_param_record(const char *prefix, const char *name, const char *value, PetscBool set)
{
  char full[128];

  PetscFunctionBegin;
  if (name[0] == '-') name++;
  PetscCall(PetscSNPrintf(full, sizeof full, "%s%s", prefix ? prefix : "", name));
  for (int i = 0; i < sys_nparams; i++) {
    PetscBool same;
    PetscCall(PetscStrcmp(sys_params[i].name, full, &same));
    if (same) { /* read again (e.g. by -help and then for real): keep the latest value */
      PetscCall(PetscStrncpy(sys_params[i].value, value, sizeof sys_params[i].value));
      sys_params[i].set = set;
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  }
  if (sys_nparams == sys_capparams) {
    sys_capparams = sys_capparams ? 2 * sys_capparams : 64;
    PetscCall(PetscRealloc(sizeof(SysParam) * (size_t)sys_capparams, &sys_params));
  }
  PetscCall(PetscMemzero(&sys_params[sys_nparams], sizeof(SysParam)));
  PetscCall(PetscStrncpy(sys_params[sys_nparams].name, full, sizeof sys_params[sys_nparams].name));
  PetscCall(PetscStrncpy(sys_params[sys_nparams].value, value, sizeof sys_params[sys_nparams].value));
  sys_params[sys_nparams].set = set;
  sys_nparams++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_params_get(const SysParam **params, int *n)
{
  PetscFunctionBegin;
  *params = sys_params;
  *n      = sys_nparams;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* PETSc's own run-time options, which PETSc consumes itself (some only at
 * PetscFinalize), are never "unused". */
static PetscBool sys_option_is_petsc(const char *name)
{
  static const char *const exact[]  = {"help", "v", "version", "info", "nox", "history", "display", "debugger", "start_in_debugger", "stop_for_debugger", "no_signal_handler", "fp_trap", "skip_petscrc", "saws", "objects_dump", "get_total_flops", NULL};
  static const char *const prefix[] = {"log_", "malloc", "options_", "on_error", "memory_view", "mpi_", "viewer_", "check_pointer_intensity", NULL};
  for (int i = 0; exact[i]; i++)
    if (!strcmp(name, exact[i])) return PETSC_TRUE;
  for (int i = 0; prefix[i]; i++)
    if (!strncmp(name, prefix[i], strlen(prefix[i]))) return PETSC_TRUE;
  return PETSC_FALSE;
}

PetscErrorCode sys_options_check_unused(void)
{
  PetscInt n;
  char   **names, **values;
  char     list[1024] = "";
  int      bad        = 0;

  PetscFunctionBegin;
  PetscCall(PetscOptionsLeftGet(NULL, &n, &names, &values));
  for (PetscInt i = 0; i < n; i++) {
    const char *nm = names[i][0] == '-' ? names[i] + 1 : names[i];
    if (sys_option_is_petsc(nm)) continue;
    if (bad++) PetscCall(PetscStrlcat(list, ", ", sizeof list));
    PetscCall(PetscStrlcat(list, "-", sizeof list));
    PetscCall(PetscStrlcat(list, nm, sizeof list));
  }
  PetscCall(PetscOptionsLeftRestore(NULL, &n, &names, &values));
  PetscCheck(!bad, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "unknown option%s %s (misspelled, or not used by this -mode; see -help)", bad > 1 ? "s" : "", list);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const char *sys_option_bare(const char *name) { return name[0] == '-' ? name + 1 : name; }

PetscErrorCode sys_option_check_number(const char *prefix, const char *name, SysOptKind kind, size_t bytes)
{
  char      value[256], *end;
  PetscBool set;
  long long i = 0;
  double    x = 0;

  PetscFunctionBegin;
  PetscCall(PetscOptionsGetString(NULL, prefix, name, value, sizeof value, &set));
  if (!set) PetscFunctionReturn(PETSC_SUCCESS);
  errno = 0;
  if (kind == SYS_OPT_INT) i = strtoll(value, &end, 10);
  else x = strtod(value, &end);
  PetscCheck(value[0] && *end == '\0' && (errno == 0 || errno == ERANGE), PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "option -%s%s: '%s' is not %s", prefix ? prefix : "", sys_option_bare(name), value, kind == SYS_OPT_INT ? "an integer" : "a number");
  if (kind == SYS_OPT_INT) {
    size_t    b  = PetscMin(bytes ? bytes : sizeof(PetscInt), sizeof(PetscInt));
    long long hi = b >= 8 ? LLONG_MAX : (long long)((1ULL << (8 * b - 1)) - 1), lo = -hi - 1;

    PetscCheck(errno != ERANGE && i >= lo && i <= hi, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "option -%s%s: %s is out of range (%lld to %lld)", prefix ? prefix : "", sys_option_bare(name), value, lo, hi);
  } else PetscCheck(isfinite(x), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "option -%s%s: '%s' is not a finite number", prefix ? prefix : "", sys_option_bare(name), value);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_option_check_length(const char *prefix, const char *name, size_t len)
{
  const char *value = NULL;
  PetscBool   set;

  PetscFunctionBegin;
  PetscCall(PetscOptionsFindPair(NULL, prefix, name, &value, &set));
  PetscCheck(!set || !value || strlen(value) < len, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "option -%s%s: value of %zu characters is longer than the %zu allowed", prefix ? prefix : "", sys_option_bare(name), strlen(value), len - 1);
  PetscFunctionReturn(PETSC_SUCCESS);
}
