/* Deck pre-check: PETSc parses -options_file itself, inside PetscInitialize,
 * and answers a malformed deck with a 12-line traceback (or, for a deck that
 * includes itself, a stack overflow). This reads every deck named on the
 * command line, and every deck those include, with PETSc's rules, before
 * PETSc does, so a bad deck costs the user one line naming file and line.
 * On the way it notes where every option was set, in PETSc's order (command
 * line left to right, a deck's lines where its -options_file stands; the
 * last setting wins), so an option set twice with different values can be
 * reported before the run: a deck's -mode silently beating the command
 * line's is a run of the wrong job. */
#include "sys.h"
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define DECK_MAX_BYTES (1 << 20) /* decks are a few kB; anything near this is not a deck */
#define DECK_MAX_LINE  4096
#define DECK_MAX_DEPTH 16

/* One setting of an option: its name (lower case, one dash), value, and
 * where it was given ("command line" or "deck PATH line N"). */
typedef struct {
  char *name, *value, *where;
} DeckSetting;

typedef struct {
  char        *msg;
  size_t       len;
  DeckSetting *set;
  int          nset, capset;
  char   stack[DECK_MAX_DEPTH][PATH_MAX]; /* real paths of the decks being read, outermost first */
  int    depth;
} DeckCheck;

static int deck_file(DeckCheck *dc, const char *path);

static char *deck_strdup(const char *s)
{
  size_t n = strlen(s) + 1;
  char  *d = malloc(n);

  if (d) memcpy(d, s, n);
  return d;
}

/* Records that option name was set to value at where. */
static int deck_note(DeckCheck *dc, const char *name, const char *value, const char *where)
{
  DeckSetting *s;

  if (name[0] == '-' && name[1] == '-') name++; /* PETSc reads --name as -name */
  if (dc->nset == dc->capset) {
    int          cap = dc->capset ? 2 * dc->capset : 64;
    DeckSetting *grown = realloc(dc->set, sizeof *grown * (size_t)cap);

    if (!grown) goto oom;
    dc->set    = grown;
    dc->capset = cap;
  }
  s        = &dc->set[dc->nset];
  s->name  = deck_strdup(name);
  s->value = deck_strdup(value);
  s->where = deck_strdup(where);
  if (!s->name || !s->value || !s->where) {
    free(s->name), free(s->value), free(s->where);
    goto oom;
  }
  for (char *c = s->name; *c; c++) *c = (char)tolower((unsigned char)*c); /* PETSc's names ignore case */
  dc->nset++;
  return 0;
oom:
  snprintf(dc->msg, dc->len, "out of memory recording the options");
  return 1;
}

/* Splits a line the way PETSc's options-file reader does: blanks separate
 * tokens, double quotes group, '#' starts a comment. Returns the count. */
static int deck_tokens(char *line, char **tok, int max)
{
  int   n = 0;
  char *p = line, *hash = strchr(line, '#');

  if (hash) *hash = '\0';
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    if (*p == '"') {
      char *q = strchr(p + 1, '"');
      if (n < max) tok[n] = p + 1;
      n++;
      if (!q) break;
      *q = '\0';
      p  = q + 1;
      continue;
    }
    if (n < max) tok[n] = p;
    n++;
    while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
    if (*p) *p++ = '\0';
  }
  return n;
}

/* PETSc ends a line at its first '#', even inside a value: a '#' glued to
 * value characters (-sft_data data#1.h5) would cut the value and name
 * another file, so it is refused; a '#' after a blank is a comment. */
static int deck_hash_in_value(DeckCheck *dc, const char *path, int lineno, const char *line)
{
  const char *hash = strchr(line, '#');

  if (!hash || hash == line || strchr(" \t", hash[-1])) return 0;
  snprintf(dc->msg, dc->len,
           "deck %s line %d: '#' inside a value ('%.60s' would be cut there, as a comment); put a blank before a "
           "comment, and give such a value on the command line",
           path, lineno, line);
  return 1;
}

static int deck_line(DeckCheck *dc, const char *path, int lineno, char *line)
{
  char *tok[4];
  int   n;

  if (deck_hash_in_value(dc, path, lineno, line)) return 1;
  n = deck_tokens(line, tok, 4);

  if (n == 0) return 0;
  if (!strcmp(tok[0], "alias")) {
    if (n == 3) return 0;
    snprintf(dc->msg, dc->len, "deck %s line %d: 'alias' takes two names, e.g. alias -new -old", path, lineno);
    return 1;
  }
  if (tok[0][0] != '-' || !tok[0][1]) {
    snprintf(dc->msg, dc->len,
             "deck %s line %d: '%.60s' is not an option (a line is '-name value'; comments start with #)", path, lineno,
             tok[0]);
    return 1;
  }
  if (n > 2) {
    snprintf(dc->msg, dc->len,
             "deck %s line %d: extra value '%.60s' after %.60s %.60s (one option and at most one value per line; quote "
             "a value with blanks)",
             path, lineno, tok[2], tok[0], tok[1]);
    return 1;
  }
  if (!strcmp(tok[0], "-options_file")) {
    if (n < 2) {
      snprintf(dc->msg, dc->len, "deck %s line %d: -options_file needs a file name", path, lineno);
      return 1;
    }
    return deck_file(dc, tok[1]);
  }
  {
    char where[PATH_MAX + 32];

    snprintf(where, sizeof where, "deck %s line %d", path, lineno);
    return deck_note(dc, tok[0], n == 2 ? tok[1] : "", where);
  }
}

static int deck_text(DeckCheck *dc, const char *path, char *text, size_t size)
{
  int    lineno = 1;
  size_t start  = 0;

  if (size >= 3 && (unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB && (unsigned char)text[2] == 0xBF) {
    snprintf(dc->msg, dc->len, "deck %s starts with a UTF-8 byte-order mark (save it as plain text without BOM)", path);
    return 1;
  }
  for (size_t i = 0; i <= size; i++) {
    unsigned char c = i < size ? (unsigned char)text[i] : '\n';

    if (c == '\n') {
      if (i - start > DECK_MAX_LINE) {
        snprintf(dc->msg, dc->len, "deck %s line %d: %zu characters, more than the %d a line may have", path, lineno,
                 i - start, DECK_MAX_LINE);
        return 1;
      }
      text[i] = '\0';
      if (deck_line(dc, path, lineno, text + start)) return 1;
      start = i + 1;
      lineno++;
    } else if (c < 0x20 && c != '\t' && c != '\r') {
      snprintf(dc->msg, dc->len, "deck %s line %d: binary byte 0x%02x (not a text file?)", path, lineno, c);
      return 1;
    }
  }
  return 0;
}

static int deck_file(DeckCheck *dc, const char *path)
{
  struct stat st;
  FILE       *f;
  char       *text;
  size_t      got;
  int         bad;

  if (strlen(path) >= PATH_MAX) {
    snprintf(dc->msg, dc->len, "-options_file %.80s...: the path is longer than %d characters", path, PATH_MAX - 1);
    return 1;
  }
  if (stat(path, &st) != 0) {
    snprintf(dc->msg, dc->len, "-options_file %s: cannot read the deck (%s)", path, strerror(errno));
    return 1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(dc->msg, dc->len, "-options_file %s: %s, not a deck file", path,
             S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
    return 1;
  }
  if (st.st_size > DECK_MAX_BYTES) {
    snprintf(dc->msg, dc->len, "-options_file %s: %lld bytes, more than the %d a deck may have (not a deck?)", path,
             (long long)st.st_size, DECK_MAX_BYTES);
    return 1;
  }
  if (dc->depth == DECK_MAX_DEPTH) {
    snprintf(dc->msg, dc->len, "-options_file %s: decks included more than %d deep", path, DECK_MAX_DEPTH);
    return 1;
  }
  if (!realpath(path, dc->stack[dc->depth])) {
    snprintf(dc->msg, dc->len, "-options_file %s: cannot read the deck (%s)", path, strerror(errno));
    return 1;
  }
  for (int i = 0; i < dc->depth; i++) {
    if (strcmp(dc->stack[i], dc->stack[dc->depth])) continue;
    if (i == dc->depth - 1) snprintf(dc->msg, dc->len, "deck %s includes itself (-options_file)", dc->stack[i]);
    else
      snprintf(dc->msg, dc->len, "deck %s includes itself through %s (-options_file)", dc->stack[i],
               dc->stack[dc->depth - 1]);
    return 1;
  }
  f = fopen(path, "rb");
  if (!f) {
    snprintf(dc->msg, dc->len, "-options_file %s: cannot read the deck (%s)", path, strerror(errno));
    return 1;
  }
  text = malloc((size_t)st.st_size + 1);
  if (!text) {
    fclose(f);
    snprintf(dc->msg, dc->len, "-options_file %s: out of memory reading %lld bytes", path, (long long)st.st_size);
    return 1;
  }
  got = fread(text, 1, (size_t)st.st_size, f);
  fclose(f);
  text[got] = '\0';
  dc->depth++;
  bad = deck_text(dc, path, text, got);
  dc->depth--;
  free(text);
  return bad;
}

/* PETSc's test for an option name on the command line (PetscOptionsValidKey):
 * a dash, optionally a second, then a letter; "-1" is a value. */
static int deck_is_key(const char *a)
{
  if (a[0] != '-') return 0;
  if (a[1] == '-') a++;
  return isalpha((unsigned char)a[1]) != 0;
}

/* An argument that is no option and no option's value, which PETSc would
 * drop without a word: an option written with a typographic dash (an editor
 * or a web page made '-' into U+2013, U+2014 or U+2212), or a stray word;
 * and GNU's two dashes, which PETSc reads as one (so --help would run). */
static int deck_stray(DeckCheck *dc, const char *a)
{
  static const char *const dash[] = {"\xe2\x80\x93", "\xe2\x80\x94", "\xe2\x88\x92"};

  for (int k = 0; k < 3; k++)
    if (!strncmp(a, dash[k], 3)) {
      snprintf(dc->msg, dc->len,
               "command line: '%.60s' starts with a typographic dash, not '-' (an editor or a web page changed it): "
               "retype the dash",
               a);
      return 1;
    }
  if (a[0] == '-' && a[1] == '-')
    snprintf(dc->msg, dc->len, "command line: %.60s: rlfuse's options take one dash (%.60s)", a, a + 1);
  else
    snprintf(dc->msg, dc->len,
             "command line: '%.60s' is no option and follows none (options start with '-', a value follows its option)",
             a);
  return 1;
}

/* The command line in PETSc's order: each key takes the next argument as its
 * value unless that is a key too; -options_file reads the deck right there. */
static int deck_args(DeckCheck *dc, int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    if (!deck_is_key(argv[i]) || argv[i][1] == '-') return deck_stray(dc, argv[i]);
    if (!strcmp(argv[i], "-options_file")) {
      if (i + 1 == argc) {
        snprintf(dc->msg, dc->len, "-options_file needs a file name");
        return 1;
      }
      if (deck_file(dc, argv[++i])) return 1;
      continue;
    }
    if (i + 1 < argc && !deck_is_key(argv[i + 1])) {
      if (deck_note(dc, argv[i], argv[i + 1], "command line")) return 1;
      i++;
    } else if (deck_note(dc, argv[i], "", "command line")) return 1;
  }
  return 0;
}

/* One line for every option set more than once with different values: the
 * value used (the last) and where each came from. */
static void deck_report_overrides(const DeckCheck *dc, FILE *out)
{
  for (int i = 0; i < dc->nset; i++) {
    const DeckSetting *last = &dc->set[i];
    int                differ = 0, first = 1;

    for (int j = 0; j < i && first; j++) first = strcmp(dc->set[j].name, last->name) != 0;
    if (!first) continue; /* reported with the option's first setting */
    for (int j = i + 1; j < dc->nset; j++)
      if (!strcmp(dc->set[j].name, dc->set[i].name)) {
        differ |= strcmp(dc->set[j].value, dc->set[i].value) != 0;
        last = &dc->set[j];
      }
    if (!differ) continue;
    fprintf(out, "rlfuse: note: %s is given more than once: '%s' (%s) is used, the last; overridden:", last->name,
            last->value, last->where);
    for (int j = i, k = 0; j < dc->nset; j++)
      if (&dc->set[j] != last && !strcmp(dc->set[j].name, last->name))
        fprintf(out, "%s '%s' (%s)", k++ ? "," : "", dc->set[j].value, dc->set[j].where);
    fputc('\n', out);
  }
  fflush(out);
}

/* The settings the walk recorded (what deck_args allocated). */
static void deck_settings_free(DeckCheck *dc)
{
  for (int i = 0; i < dc->nset; i++) free(dc->set[i].name), free(dc->set[i].value), free(dc->set[i].where);
  free(dc->set);
}

int sys_decks_check(int argc, char **argv, char *msg, size_t len, FILE *notes)
{
  DeckCheck *dc = calloc(1, sizeof *dc);
  int        bad;

  if (!dc) {
    snprintf(msg, len, "out of memory checking the decks (%zu bytes)", sizeof *dc);
    return 1;
  }
  dc->msg = msg;
  dc->len = len;
  bad     = deck_args(dc, argc, argv);
  if (!bad && notes) deck_report_overrides(dc, notes);
  deck_settings_free(dc);
  free(dc);
  return bad;
}

/* The last setting of option name in PETSc's order (the command line and its
 * decks walked again, after PetscInitialize: they passed sys_decks_check)
 * whose value is not skip (NULL: any): its value and where it was given,
 * each "" when there is none. */
static PetscErrorCode deck_last(const char *name, const char *skip, char *value, size_t vlen, char *where,
                                size_t wlen)
{
  DeckCheck *dc;
  char       msg[1024] = "";
  int        argc, bad;
  char     **argv;

  PetscFunctionBegin;
  if (vlen) value[0] = '\0';
  if (wlen) where[0] = '\0';
  PetscCall(PetscGetArgs(&argc, &argv));
  PetscCall(PetscCalloc1(1, &dc));
  dc->msg = msg;
  dc->len = sizeof msg;
  bad     = deck_args(dc, argc, argv);
  for (int i = 0; !bad && i < dc->nset; i++)
    if (!strcasecmp(dc->set[i].name, name) && (!skip || strcmp(dc->set[i].value, skip))) {
      if (vlen) snprintf(value, vlen, "%s", dc->set[i].value);
      if (wlen) snprintf(where, wlen, "%s", dc->set[i].where);
    }
  deck_settings_free(dc);
  PetscCall(PetscFree(dc));
  PetscCheck(!bad, PETSC_COMM_SELF, PETSC_ERR_FILE_READ, "%s", msg);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -mode plan plans the job its deck names, whose -mode it overrides: the
 * same walk in PETSc's order, after PetscInitialize (the decks passed
 * sys_decks_check before it). */
PetscErrorCode sys_decks_mode_under(const char *skip, char *mode, size_t len)
{
  PetscFunctionBegin;
  PetscCall(deck_last("-mode", skip, mode, len, NULL, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode sys_decks_where(const char *name, char *where, size_t len)
{
  PetscFunctionBegin;
  PetscCall(deck_last(name, NULL, NULL, 0, where, len));
  PetscFunctionReturn(PETSC_SUCCESS);
}
