/* reward: a weighted sum of rule functions, as -reward_fn gives it
 * ("numeric:1,format:0.1,length:0.5"), and its value for one sample. */
#include "reward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const RewardFnNames[REWARD_NFN] = {"numeric", "exact", "format", "length"};

static int spec_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* s[*a, *b) without blanks at either end. */
static void spec_trim(const char *s, size_t *a, size_t *b)
{
  while (*a < *b && spec_blank(s[*a])) (*a)++;
  while (*b > *a && spec_blank(s[*b - 1])) (*b)--;
}

/* The rule named s[a, b), or -1. */
static int spec_lookup(const char *s, size_t a, size_t b)
{
  for (int f = 0; f < REWARD_NFN; f++)
    if (strlen(RewardFnNames[f]) == b - a && !strncmp(s + a, RewardFnNames[f], b - a)) return f;
  return -1;
}

/* One item "NAME[:WEIGHT]" = s[a, b) into the spec. */
static PetscErrorCode spec_item(const char *opt, const char *s, size_t a, size_t b, RewardSpec *spec)
{
  const char *colon = memchr(s + a, ':', b - a);
  size_t      ne    = colon ? (size_t)(colon - s) : b, na = a, wa, wb = b;
  char        w[64], *end;
  double      weight = 1;
  int         f;

  PetscFunctionBegin;
  spec_trim(s, &na, &ne);
  f = spec_lookup(s, na, ne);
  PetscCheck(f >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "%s %s: unknown rule '%.*s' (valid: %s, %s, %s, %s)", opt,
             s, (int)(ne - na), s + na, RewardFnNames[0], RewardFnNames[1], RewardFnNames[2], RewardFnNames[3]);
  for (int k = 0; k < spec->n; k++)
    PetscCheck(spec->fn[k] != f, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "%s %s: %s is given twice", opt, s,
               RewardFnNames[f]);
  if (colon) {
    wa = (size_t)(colon - s) + 1;
    spec_trim(s, &wa, &wb);
    PetscCheck(wb > wa && wb - wa < sizeof w, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "%s %s: %s has a bad weight '%.*s' (expected NAME:NUMBER)", opt, s, RewardFnNames[f], (int)(wb - wa),
               s + wa);
    memcpy(w, s + wa, wb - wa);
    w[wb - wa] = '\0';
    weight     = strtod(w, &end);
    PetscCheck(*end == '\0' && isfinite(weight), PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "%s %s: %s has a bad weight '%s' (expected a finite number)", opt, s, RewardFnNames[f], w);
  }
  spec->fn[spec->n]     = f;
  spec->weight[spec->n] = weight;
  spec->n++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode reward_spec_parse(const char *opt, const char *s, RewardSpec *spec)
{
  size_t a = 0, b, len;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(spec, sizeof *spec));
  if (!s) s = "";
  b = len = strlen(s);
  spec_trim(s, &a, &b);
  if (a == b || (b - a == 4 && !strncmp(s + a, "none", 4))) PetscFunctionReturn(PETSC_SUCCESS);
  for (size_t i = 0; i <= len;) {
    const char *comma = memchr(s + i, ',', len - i);
    size_t      e = comma ? (size_t)(comma - s) : len, ia = i, ib = e;

    spec_trim(s, &ia, &ib);
    PetscCheck(ib > ia, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "%s %s: empty item (expected NAME[:WEIGHT],... of %s, %s, %s, %s)", opt, s, RewardFnNames[0],
               RewardFnNames[1], RewardFnNames[2], RewardFnNames[3]);
    PetscCall(spec_item(opt, s, ia, ib, spec));
    i = e + 1;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscBool reward_spec_needs_answer(const RewardSpec *spec)
{
  for (int k = 0; spec && k < spec->n; k++)
    if (spec->fn[k] == REWARD_NUMERIC || spec->fn[k] == REWARD_EXACT) return PETSC_TRUE;
  return PETSC_FALSE;
}

double reward_spec_eval(const RewardSpec *spec, const char *response, size_t n, int eos, int len, const char *reference,
                        int length_start, int max_len, double *part)
{
  double sum = 0;

  for (int k = 0; k < spec->n; k++) {
    double v = 0;

    switch ((RewardFn)spec->fn[k]) {
    case REWARD_NUMERIC: v = reward_numeric(response, n, reference); break;
    case REWARD_EXACT: v = reward_exact(response, n, reference); break;
    case REWARD_FORMAT: v = reward_format(response, n, eos); break;
    case REWARD_LENGTH: v = reward_length(len, length_start, max_len); break;
    case REWARD_NFN: break;
    }
    if (part) part[k] = v;
    sum += spec->weight[k] * v;
  }
  return sum;
}
