/* Deck pre-check: PETSc parses -options_file itself, inside PetscInitialize,
 * and answers a malformed deck with a 12-line traceback (or, for a deck that
 * includes itself, a stack overflow). This reads every deck named on the
 * command line, and every deck those include, with PETSc's rules, before
 * PETSc does, so a bad deck costs the user one line naming file and line. */
#include "sys.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DECK_MAX_BYTES (1 << 20) /* decks are a few kB; anything near this is not a deck */
#define DECK_MAX_LINE  4096
#define DECK_MAX_DEPTH 16

typedef struct {
  char  *msg;
  size_t len;
  char   stack[DECK_MAX_DEPTH][PATH_MAX]; /* real paths of the decks being read, outermost first */
  int    depth;
} DeckCheck;

static int deck_file(DeckCheck *dc, const char *path);

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
  snprintf(dc->msg, dc->len, "deck %s line %d: '#' inside a value ('%.60s' would be cut there, as a comment); put a blank before a comment, and give such a value on the command line", path, lineno, line);
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
    snprintf(dc->msg, dc->len, "deck %s line %d: '%.60s' is not an option (a line is '-name value'; comments start with #)", path, lineno, tok[0]);
    return 1;
  }
  if (n > 2) {
    snprintf(dc->msg, dc->len, "deck %s line %d: extra value '%.60s' after %.60s %.60s (one option and at most one value per line; quote a value with blanks)", path, lineno, tok[2], tok[0], tok[1]);
    return 1;
  }
  if (!strcmp(tok[0], "-options_file")) {
    if (n < 2) {
      snprintf(dc->msg, dc->len, "deck %s line %d: -options_file needs a file name", path, lineno);
      return 1;
    }
    return deck_file(dc, tok[1]);
  }
  return 0;
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
        snprintf(dc->msg, dc->len, "deck %s line %d: %zu characters, more than the %d a line may have", path, lineno, i - start, DECK_MAX_LINE);
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
    snprintf(dc->msg, dc->len, "-options_file %s: %s, not a deck file", path, S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
    return 1;
  }
  if (st.st_size > DECK_MAX_BYTES) {
    snprintf(dc->msg, dc->len, "-options_file %s: %lld bytes, more than the %d a deck may have (not a deck?)", path, (long long)st.st_size, DECK_MAX_BYTES);
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
    else snprintf(dc->msg, dc->len, "deck %s includes itself through %s (-options_file)", dc->stack[i], dc->stack[dc->depth - 1]);
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

int sys_decks_check(int argc, char **argv, char *msg, size_t len)
{
  DeckCheck *dc = calloc(1, sizeof *dc);
  int        bad = 0;

  if (!dc) {
    snprintf(msg, len, "out of memory checking the decks (%zu bytes)", sizeof *dc);
    return 1;
  }
  dc->msg = msg;
  dc->len = len;
  for (int i = 1; i < argc && !bad; i++) {
    if (strcmp(argv[i], "-options_file")) continue;
    if (i + 1 == argc) {
      snprintf(msg, len, "-options_file needs a file name");
      bad = 1;
    } else bad = deck_file(dc, argv[++i]);
  }
  free(dc);
  return bad;
}
