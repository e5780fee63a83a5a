/* Options bookkeeping: every option a module reads is recorded with its
 * effective value (default or given), so the run record stores them all,
 * options nobody read (misspellings) stop the run before any work, and
 * <output_dir>/used.deck repeats the run. */
#include "sys.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static SysParam *sys_params   = NULL;
static int       sys_nparams  = 0, sys_capparams = 0;
/* Options whose presence, not only their value, changes what a module does
 * (e.g. -placement next to -plan_file): used.deck gives them only if the run
 * was given them. */
static char    (*sys_presence)[128] = NULL;
static int       sys_npresence      = 0, sys_cappresence = 0;

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
  static const char *const exact[]  = { "help",
                                        "v",
                                        "version",
                                        "info",
                                        "nox",
                                        "history",
                                        "display",
                                        "debugger",
                                        "start_in_debugger",
                                        "stop_for_debugger",
                                        "no_signal_handler",
                                        "fp_trap",
                                        "skip_petscrc",
                                        "saws",
                                        "objects_dump",
                                        "get_total_flops",
                                        NULL };
  static const char *const prefix[] = { "log_",        "malloc", "options_", "on_error",
                                        "memory_view", "mpi_",   "viewer_",  "check_pointer_intensity",
                                        NULL };
  for (int i = 0; exact[i]; i++)
    if (!strcmp(name, exact[i])) return PETSC_TRUE;
  for (int i = 0; prefix[i]; i++)
    if (!strncmp(name, prefix[i], strlen(prefix[i]))) return PETSC_TRUE;
  return PETSC_FALSE;
}

/* Optimal string alignment distance: insertions, deletions, substitutions
 * and swaps of neighbours, each 1 (-ppo_itreations is 1 from -ppo_iterations). */
static int sys_edit_distance(const char *a, const char *b)
{
  int la = (int)strlen(a), lb = (int)strlen(b), d[128][128];

  if (la > 127 || lb > 127) return INT_MAX;
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      c     = PetscMin(c, PetscMin(d[i - 1][j], d[i][j - 1]) + 1);
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) c = PetscMin(c, d[i - 2][j - 2] + 1);
      d[i][j] = c;
    }
  return d[la][lb];
}

/* The recorded option nearest to name (the options this run's modules read:
 * other modes' options are not known here), or NULL when none is within
 * 1 + len/8 edits (at most 3), so unrelated names get no suggestion. */
static const char *sys_option_nearest(const char *name)
{
  /* options given new names: an old deck is told the new one */
  static const char *const renamed[][2] = {
    {"grpo_group", "rollout_group"},
  };
  int         best = INT_MAX, most = PetscMin(3, 1 + (int)strlen(name) / 8);
  const char *near = NULL;

  for (size_t k = 0; k < sizeof renamed / sizeof renamed[0]; k++)
    if (!strcmp(name, renamed[k][0])) return renamed[k][1];
  for (int i = 0; i < sys_nparams; i++) {
    int d = sys_edit_distance(name, sys_params[i].name);
    if (d < best) best = d, near = sys_params[i].name;
  }
  return best <= most ? near : NULL;
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
    const char *nm = names[i][0] == '-' ? names[i] + 1 : names[i], *near;
    char        dashed[160], where[PETSC_MAX_PATH_LEN + 32];
    if (sys_option_is_petsc(nm)) continue;
    if (bad++) PetscCall(PetscStrlcat(list, ", ", sizeof list));
    PetscCall(PetscStrlcat(list, "-", sizeof list));
    PetscCall(PetscStrlcat(list, nm, sizeof list));
    /* a deck's option: its file and line, as the deck check names them (the command line's need no pointer) */
    PetscCall(PetscSNPrintf(dashed, sizeof dashed, "-%s", nm));
    PetscCall(sys_decks_where(dashed, where, sizeof where));
    if (!strncmp(where, "deck ", 5)) {
      PetscCall(PetscStrlcat(list, " at ", sizeof list));
      PetscCall(PetscStrlcat(list, where, sizeof list));
    }
    if ((near = sys_option_nearest(nm))) {
      PetscCall(PetscStrlcat(list, " (did you mean -", sizeof list));
      PetscCall(PetscStrlcat(list, near, sizeof list));
      PetscCall(PetscStrlcat(list, "?)", sizeof list));
    }
  }
  PetscCall(PetscOptionsLeftRestore(NULL, &n, &names, &values));
  PetscCheck(!bad, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "unknown option%s %s (misspelled, or not used by this -mode; see -help)", bad > 1 ? "s" : "", list);
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
  PetscCheck(value[0] && *end == '\0' && (errno == 0 || errno == ERANGE), PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "option -%s%s: '%s' is not %s", prefix ? prefix : "", sys_option_bare(name), value,
             kind == SYS_OPT_INT ? "an integer" : "a number");
  if (kind == SYS_OPT_INT) {
    size_t    b  = PetscMin(bytes ? bytes : sizeof(PetscInt), sizeof(PetscInt));
    long long hi = b >= 8 ? LLONG_MAX : (long long)((1ULL << (8 * b - 1)) - 1), lo = -hi - 1;

    PetscCheck(errno != ERANGE && i >= lo && i <= hi, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "option -%s%s: %s is out of range (%lld to %lld)", prefix ? prefix : "", sys_option_bare(name), value,
               lo, hi);
  } else
    PetscCheck(isfinite(x), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "option -%s%s: '%s' is not a finite number",
               prefix ? prefix : "", sys_option_bare(name), value);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_option_check_length(const char *prefix, const char *name, size_t len)
{
  const char *value = NULL;
  PetscBool   set;

  PetscFunctionBegin;
  PetscCall(PetscOptionsFindPair(NULL, prefix, name, &value, &set));
  PetscCheck(!set || !value || strlen(value) < len, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "option -%s%s: value of %zu characters is longer than the %zu allowed", prefix ? prefix : "",
             sys_option_bare(name), strlen(value), len - 1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_option_check_nonempty(const char *prefix, const char *name, const char *const *list, PetscInt n)
{
  const char *value = NULL;
  PetscBool   set;
  char        choices[256] = "";

  PetscFunctionBegin;
  PetscCall(PetscOptionsFindPair(NULL, prefix, name, &value, &set));
  if (!set || (value && value[0])) PetscFunctionReturn(PETSC_SUCCESS);
  for (PetscInt i = 0; i < n; i++) {
    if (i) PetscCall(PetscStrlcat(choices, ", ", sizeof choices));
    PetscCall(PetscStrlcat(choices, list[i], sizeof choices));
  }
  SETERRQ(PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "option -%s%s: the value is empty (choose one of %s)",
          prefix ? prefix : "", sys_option_bare(name), choices);
}

PetscErrorCode sys_option_check_bool(const char *prefix, const char *name)
{
  static const char *const words[] = {
    "", "true", "false", "yes", "no", "on", "off", "1", "0"
  }; /* PetscOptionsStringToBool's, any case; empty is true */
  const char *value = NULL;
  PetscBool   set;

  PetscFunctionBegin;
  PetscCall(PetscOptionsFindPair(NULL, prefix, name, &value, &set));
  if (!set || !value) PetscFunctionReturn(PETSC_SUCCESS);
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (!strcasecmp(value, words[i])) PetscFunctionReturn(PETSC_SUCCESS);
  SETERRQ(PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
          "option -%s%s: '%s' is not a boolean (true, false, yes, no, on, off, 1 or 0)", prefix ? prefix : "",
          sys_option_bare(name), value);
}

PetscErrorCode sys_option_given(const char *prefix, const char *name, PetscBool *given)
{
  char full[128];

  PetscFunctionBegin;
  PetscCall(PetscOptionsHasName(NULL, prefix, name, given));
  PetscCall(PetscSNPrintf(full, sizeof full, "%s%s", prefix ? prefix : "", sys_option_bare(name)));
  for (int i = 0; i < sys_npresence; i++)
    if (!strcmp(sys_presence[i], full)) PetscFunctionReturn(PETSC_SUCCESS);
  if (sys_npresence == sys_cappresence) {
    sys_cappresence = sys_cappresence ? 2 * sys_cappresence : 32;
    PetscCall(PetscRealloc(sizeof *sys_presence * (size_t)sys_cappresence, &sys_presence));
  }
  PetscCall(PetscStrncpy(sys_presence[sys_npresence++], full, sizeof *sys_presence));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- -help ----------------------------------------------------------------- */
static const char *used_deck_value(const char *v, char *buf, size_t len);

typedef struct {
  char *name, *title, *def, *help, *choices; /* name: full, without the dash */
} SysOptHelp;

static SysOptHelp *sys_helps     = NULL;
static int         sys_nhelps    = 0, sys_caphelps = 0;
static PetscBool   sys_help_on   = PETSC_FALSE;
static char       *sys_help_text = NULL; /* what PETSc printed in PetscInitialize: its generic options */
static size_t      sys_help_len = 0, sys_help_cap = 0;
static int         sys_help_keep = 0;

/* PetscHelpPrintf while -help is on: keeps PETSc's text until sys_help_begin
 * (plain C: it runs inside PetscInitialize), then drops PETSc's own lines
 * for rlfuse's options, which sys_help_print prints its way. */
static PetscErrorCode sys_help_printf(MPI_Comm comm, const char fmt[], ...)
{
  va_list ap;
  int     rank = 0, n;

  (void)comm;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!sys_help_keep || rank != 0) return PETSC_SUCCESS;
  va_start(ap, fmt);
  n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n <= 0) return PETSC_SUCCESS;
  if (sys_help_len + (size_t)n + 1 > sys_help_cap) {
    size_t cap = 2 * (sys_help_len + (size_t)n + 1) + 4096;
    char  *t   = realloc(sys_help_text, cap);
    if (!t) return PETSC_SUCCESS; /* help text only: PETSc's part is then shorter */
    sys_help_text = t, sys_help_cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(sys_help_text + sys_help_len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sys_help_len += (size_t)n;
  return PETSC_SUCCESS;
}

void sys_help_capture(int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-help") &&
        !(i + 1 < argc && !strcmp(argv[i + 1], "intro"))) { /* -help intro: PETSc prints and exits */
      PetscHelpPrintf = sys_help_printf;
      sys_help_keep   = 1;
    }
}

PetscErrorCode sys_help_begin(void)
{
  PetscFunctionBegin;
  PetscHelpPrintf = sys_help_printf; /* also when -help came from a deck: PETSc's part is then printed already */
  sys_help_keep   = 0;
  sys_help_on     = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_option_help(PetscOptionItems *items, const char *name, const char *help, const char *def,
                               const char *const *list, PetscInt n)
{
  char        full[128], choices[1024] = "";
  SysOptHelp *h;

  PetscFunctionBegin;
  if (!sys_help_on) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscSNPrintf(full, sizeof full, "%s%s", items->prefix ? items->prefix : "", sys_option_bare(name)));
  for (int i = 0; i < sys_nhelps; i++)
    if (!strcmp(sys_helps[i].name, full)) PetscFunctionReturn(PETSC_SUCCESS); /* read by several modes: once */
  for (PetscInt i = 0; i < n; i++) {
    if (i) PetscCall(PetscStrlcat(choices, " ", sizeof choices));
    PetscCall(PetscStrlcat(choices, list[i], sizeof choices));
  }
  if (sys_nhelps == sys_caphelps) {
    sys_caphelps = sys_caphelps ? 2 * sys_caphelps : 256;
    PetscCall(PetscRealloc(sizeof(SysOptHelp) * (size_t)sys_caphelps, &sys_helps));
  }
  h = &sys_helps[sys_nhelps++];
  PetscCall(PetscStrallocpy(full, &h->name));
  PetscCall(PetscStrallocpy(items->title ? items->title : "", &h->title));
  PetscCall(PetscStrallocpy(def, &h->def));
  PetscCall(PetscStrallocpy(help, &h->help));
  PetscCall(PetscStrallocpy(choices, &h->choices));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_option_help_number(PetscOptionItems *items, const char *name, const char *help, SysOptKind kind,
                                      double def)
{
  char d[64];

  PetscFunctionBegin;
  if (!sys_help_on) PetscFunctionReturn(PETSC_SUCCESS);
  snprintf(d, sizeof d, kind == SYS_OPT_INT ? "%.0f" : "%g", def); /* not PetscSNPrintf, whose %g writes 1 as "1." */
  PetscCall(sys_option_help(items, name, help, d, NULL, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* An option's group: the word before its first '_' when another option
 * shares it (-ppo_, -gen_, -actor_ ...); "" (general) otherwise; "*" for
 * a developer option (SYS_HELP_DEVELOPER), whatever its prefix. */
static void sys_help_group(int k, char *group, size_t len)
{
  const char *u = strchr(sys_helps[k].name, '_');
  size_t      n = u ? (size_t)(u - sys_helps[k].name) : 0;

  group[0] = '\0';
  if (!strncmp(sys_helps[k].title, SYS_HELP_DEVELOPER, strlen(SYS_HELP_DEVELOPER))) {
    group[0] = '*', group[1] = '\0'; /* len is at least 2 */
    return;
  }
  if (!n || n + 1 >= len) return;
  for (int i = 0; i < sys_nhelps; i++)
    if (i != k && !strncmp(sys_helps[i].name, sys_helps[k].name, n + 1)) {
      memcpy(group, sys_helps[k].name, n + 1), group[n + 1] = '\0';
      return;
    }
}

/* The value given for option k, where it differs from the default ("" if not given or the same). */
static const char *sys_help_now(int k, char *buf, size_t len)
{
  const char *def = sys_helps[k].def;

  for (int i = 0; i < sys_nparams; i++) {
    char       *e1, *e2;
    double      a, b;
    const char *v = sys_params[i].value;

    if (strcmp(sys_params[i].name, sys_helps[k].name) || !sys_params[i].set) continue;
    a = strtod(v, &e1), b = strtod(def, &e2);
    if (v[0] && def[0] && !*e1 && !*e2 ? a == b : !strcmp(v, def)) return "";
    return used_deck_value(v, buf, len);
  }
  return "";
}

static PetscErrorCode sys_help_print_group(MPI_Comm comm, const char *group, char (*groups)[64])
{
  char titles[512] = "";

  PetscFunctionBegin;
  for (int k = 0; k < sys_nhelps; k++) { /* the group's titles, each once */
    if (strcmp(groups[k], group) || !sys_helps[k].title[0] || strstr(titles, sys_helps[k].title)) continue;
    if (titles[0]) PetscCall(PetscStrlcat(titles, "; ", sizeof titles));
    PetscCall(PetscStrlcat(titles, sys_helps[k].title, sizeof titles));
  }
  if (!strcmp(group, "*"))
    PetscCall(PetscPrintf(comm, "\n%s (switches for the tests' comparisons, the results the same; not for runs):\n",
                          SYS_HELP_DEVELOPER));
  else if (group[0]) PetscCall(PetscPrintf(comm, "\n-%s options (%s):\n", group, titles));
  else PetscCall(PetscPrintf(comm, "\nGeneral options (%s):\n", titles));
  for (int k = 0; k < sys_nhelps; k++) {
    const SysOptHelp *h = &sys_helps[k];
    char              buf[64];
    const char       *now;

    if (strcmp(groups[k], group)) continue;
    now = sys_help_now(k, buf, sizeof buf);
    PetscCall(PetscPrintf(comm, "  -%s <%s>%s%s%s: %s%s%s%s\n", h->name, h->def, now[0] ? " (now " : "", now,
                          now[0] ? ")" : "", h->help, h->choices[0] ? " (one of: " : "", h->choices,
                          h->choices[0] ? ")" : ""));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_help_print(MPI_Comm comm)
{
  char (*groups)[64];

  PetscFunctionBegin;
  PetscHelpPrintf = PetscHelpPrintfDefault;
  PetscCall(PetscCalloc1(sys_nhelps + 1, &groups));
  for (int k = 0; k < sys_nhelps; k++) sys_help_group(k, groups[k], sizeof groups[k]);
  PetscCall(PetscPrintf(comm, "rlfuse options, grouped by prefix: -name <default> (now the value given, where it "
                              "differs): meaning\n"));
  PetscCall(sys_help_print_group(comm, "", groups));
  for (int k = 0; k < sys_nhelps; k++) {
    int first = groups[k][0] != '\0' && strcmp(groups[k], "*");
    for (int i = 0; i < k && first; i++) first = strcmp(groups[i], groups[k]) != 0;
    if (first) PetscCall(sys_help_print_group(comm, groups[k], groups));
  }
  for (int k = 0; k < sys_nhelps; k++) /* the developer options last */
    if (!strcmp(groups[k], "*")) {
      PetscCall(sys_help_print_group(comm, "*", groups));
      break;
    }
  PetscCall(PetscFree(groups));
  PetscCall(PetscPrintf(comm, "\nPETSc's own options (every PETSc program reads them: -log_view, -malloc_debug, "
                              "-options_left ...):\n"));
  if (sys_help_text) PetscCall(PetscPrintf(comm, "%s", sys_help_text));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- used.deck ------------------------------------------------------------ */
static char     used_deck_dir[PETSC_MAX_PATH_LEN] = "";
static MPI_Comm used_deck_comm                    = MPI_COMM_NULL;
static int      used_deck_ranks, used_deck_threads;

PetscErrorCode sys_used_deck_at(const RunCtx *run)
{
  PetscFunctionBegin;
  PetscCall(PetscStrncpy(used_deck_dir, run->output_dir, sizeof used_deck_dir));
  used_deck_comm    = run->comm;
  used_deck_ranks   = run->size;
  used_deck_threads = run->nthreads;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static int used_deck_presence_matters(const char *name)
{
  for (int i = 0; i < sys_npresence; i++)
    if (!strcmp(sys_presence[i], name)) return 1;
  return 0;
}

/* The shortest decimal that reads back as the same double (values are
 * recorded with 17 digits), so that 3e-3 stays 3e-3; other values as given. */
static const char *used_deck_value(const char *v, char *buf, size_t len)
{
  char  *end;
  double x;

  if (!strpbrk(v, ".eE") || !v[0]) return v;
  x = strtod(v, &end);
  if (*end) return v;
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, len, "%.*g", digits, x);
    if (strtod(buf, NULL) == x) return buf;
  }
  return v;
}

/* One option as a deck line. An options file ends a value at '#' (a comment)
 * and at a space unless quoted, and cannot hold '"': such a value is written
 * as a comment. Returns 0 for that case, so the caller can warn. */
static int used_deck_line(FILE *f, const SysParam *p)
{
  char        buf[64];
  const char *v = used_deck_value(p->value, buf, sizeof buf);

  if (strpbrk(v, "#\""))
    fprintf(f, "# -%s %s   (an options file cannot hold this value: give it on the command line)\n", p->name, v);
  else if (!p->set && !v[0]) fprintf(f, "# -%s   (empty)\n", p->name);
  else if (!p->set && used_deck_presence_matters(p->name))
    fprintf(f, "# -%s %s   (giving it, even with this value, would change the run)\n", p->name, v);
  else if (strpbrk(v, " \t")) fprintf(f, "-%s \"%s\"\n", p->name, v);
  else fprintf(f, "-%s%s%s\n", p->name, v[0] ? " " : "", v);
  return !strpbrk(v, "#\"");
}

/* An earlier run's used.deck is kept as used.<k>.deck (the first free k),
 * as record.c keeps run.h5 as run.<k>.h5: a later run, even one that
 * fails, must not lose how the earlier one was made. */
static int used_deck_keep_previous(const char *path, char *err, size_t len)
{
  char        old[PETSC_MAX_PATH_LEN + 32];
  size_t      dir = strlen(path) - strlen("used.deck");

  struct stat st;

  if (lstat(path, &st) || !S_ISREG(st.st_mode)) return 0; /* none, or not a deck: the rename refuses it */
  for (int k = 1; k < 100000; k++) {
    snprintf(old, sizeof old, "%.*sused.%d.deck", (int)dir, path, k);
    if (access(old, F_OK)) {
      if (rename(path, old) == 0) return 0;
      snprintf(err, len, "cannot keep the earlier %s as %s: %s", path, old, strerror(errno));
      return 1;
    }
  }
  snprintf(err, len, "%s: used.1.deck to used.99999.deck all exist; clean up the output directory", path);
  return 1;
}

/* Rank 0's part: write to a temporary file, then rename, so a crash never
 * leaves half a deck. err receives a message on failure; *bad the first option
 * that could not be written. */
static void used_deck_file(const char *path, char *err, size_t len, const char **bad)
{
  char  tmp[PETSC_MAX_PATH_LEN + 32];
  FILE *f;

  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  f = fopen(tmp, "w");
  if (!f) {
    snprintf(err, len, "cannot write %s: %s", tmp, strerror(errno));
    return;
  }
  fprintf(f, "# Every option of this run with the value it used, written by rlfuse %s when\n", RLFUSE_VERSION);
  fprintf(f, "# the run started, on %d MPI rank%s x %d OpenMP thread%s. To repeat the run:\n", used_deck_ranks,
          used_deck_ranks > 1 ? "s" : "", used_deck_threads, used_deck_threads > 1 ? "s" : "");
  fprintf(f, "#   mpiexec -n %d bin/rlfuse -options_file %s -output_dir NEW_DIR\n", used_deck_ranks, path);
  fprintf(f, "# (options after the deck override it; relative paths are from where it ran).\n");
  for (int pass = 0; pass < 2; pass++) {
    fprintf(f, pass ? "\n# defaults\n" : "\n# given in the deck or on the command line\n");
    for (int i = 0; i < sys_nparams; i++)
      if (sys_params[i].set == !pass && !used_deck_line(f, &sys_params[i]) && !*bad) *bad = sys_params[i].name;
  }
  if (ferror(f) | fclose(f)) snprintf(err, len, "cannot write %s: %s (disk full?)", tmp, strerror(errno));
  else if (used_deck_keep_previous(path, err, len)) { /* err says why */
  } else if (rename(tmp, path) != 0) snprintf(err, len, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (err[0]) remove(tmp); /* an earlier used.deck, if any, stays as it was */
}

PetscErrorCode sys_used_deck_write(void)
{
  char        path[PETSC_MAX_PATH_LEN + 16], err[3 * PETSC_MAX_PATH_LEN] = "";
  const char *bad = NULL;
  PetscMPIInt rank;

  PetscFunctionBegin;
  if (used_deck_comm == MPI_COMM_NULL) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCallMPI(MPI_Comm_rank(used_deck_comm, &rank));
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/used.deck", used_deck_dir));
  if (rank == 0) {
    PetscCall(sys_mkdir_p(used_deck_dir));
    used_deck_file(path, err, sizeof err, &bad);
    if (bad)
      PetscCall(PetscPrintf(PETSC_COMM_SELF,
                            "warning: %s cannot repeat -%s (its value holds '#' or '\"'); it is a comment there\n",
                            path, bad));
  }
  PetscCallMPI(sys_mpi_bcast(err, (PetscMPIInt)sizeof err, MPI_CHAR, 0, used_deck_comm));
  PetscCheck(!err[0], used_deck_comm, PETSC_ERR_FILE_WRITE, "used.deck: %s", err);
  used_deck_comm = MPI_COMM_NULL; /* once per job: a pipeline's later stages keep the first */
  PetscFunctionReturn(PETSC_SUCCESS);
}
