/* reward: rule functions of a response's text (RL with verifiable rewards).
 * The answer a response gives is the content of its last \boxed{...}, else
 * its last number; numbers compare by value, other answers as strings.
 *
 * How text is read, where the header leaves it open:
 *  - A sign is '-' or '+' directly before the digits (or before ".5") where
 *    it cannot be a binary operator: not after a letter, a digit or a
 *    closing bracket. "5-3" and "x-3" end in the number 3; "is -3", "(-3)"
 *    and "=-3" in -3.
 *  - A thousands separator is ',' (or LaTeX's "{,}") followed by exactly
 *    three digits and no fourth, after a first group of 1-3 digits:
 *    "1,234,567" is one number; "1, 2, 3", "1,23" and "1234,567" are several
 *    ("100,200" is one: the rule cannot tell it from a list).
 *  - A decimal part is '.' and at least one digit; a '.' with no digit after
 *    it ends a sentence: "The answer is 12." gives 12.
 *  - A fraction is an integer, '/' and digits, without blanks: "3/4". A
 *    denominator followed by '.' or '/' and a digit is not one ("1/2.5" ends
 *    in the number 2.5).
 *  - Normalised: separators, '+' and leading zeros removed ("007" -> "7",
 *    ".5" -> "0.5"), trailing zeros of the decimal part and a bare '.'
 *    dropped, and a zero has no sign ("-0.0" -> "0", "-0/4" -> "0/4").
 *  - A box's content is the answer: normalised as a number when the whole
 *    content is one (also \frac{a}{b}, \dfrac, \tfrac, written "a/b"), else
 *    kept as text trimmed of blanks. A box never closed (a cut-off response)
 *    or with only blanks inside does not count; nested boxes: the inner.
 *  - Integers compare exactly (as normalised strings): a relative tolerance
 *    would call 1234567890 and 1234567891 equal. Anything with a decimal
 *    part or a fraction compares within 1e-9 relative.
 * reward_extract_answer returns the answer's full length even when out is
 * too small (snprintf's rule): out then holds its first cap-1 bytes,
 * NUL-terminated, and a result >= cap tells the caller it was cut.
 * Every scan reads text[0..n) only (no NUL needed) and is linear in n, so a
 * degenerate response of many unclosed boxes costs no more than its length. */
#include "reward.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static size_t digits_end(const char *t, size_t n, size_t j)
{
  while (j < n && is_digit(t[j])) j++;
  return j;
}

/* [*a, *b) without blanks at either end. */
static void trim(const char *t, size_t *a, size_t *b)
{
  while (*a < *b && is_blank(t[*a])) (*a)++;
  while (*b > *a && is_blank(t[*b - 1])) (*b)--;
}

/* Output with snprintf's rule: every byte counted, those that fit written,
 * NUL-terminated by out_end when cap > 0. */
typedef struct {
  char  *p;
  size_t cap, len;
} Out;

static void out_c(Out *o, char c)
{
  if (o->len + 1 < o->cap) o->p[o->len] = c;
  o->len++;
}

static void out_end(Out *o)
{
  if (o->cap) o->p[o->len < o->cap ? o->len : o->cap - 1] = '\0';
}

/* ---- numbers ------------------------------------------------------------- */
/* A number's parts as spans [x0, x1) of the text it was read from. */
typedef struct {
  int    neg;
  size_t i0, i1; /* integer part, separators included (empty for ".5") */
  size_t f0, f1; /* digits after the '.'; none when f0 == f1 */
  size_t d0, d1; /* denominator; not a fraction when d0 == d1 */
  size_t end;    /* one past the number */
} Num;

/* Length of a thousands separator at t[j] (1 for ",", 3 for "{,}"), or 0. */
static size_t separator_len(const char *t, size_t n, size_t j)
{
  size_t s = 0;

  if (j < n && t[j] == ',') s = 1;
  else if (j + 2 < n && t[j] == '{' && t[j + 1] == ',' && t[j + 2] == '}') s = 3;
  if (!s || digits_end(t, n, j + s) != j + s + 3) return 0; /* exactly three digits */
  return s;
}

/* Reads the number starting at t[i] (its sign, if any, included); 0 if none. */
static int num_scan(const char *t, size_t n, size_t i, Num *m)
{
  size_t k, s;

  memset(m, 0, sizeof *m);
  if (i < n && (t[i] == '-' || t[i] == '+')) m->neg = t[i++] == '-';
  m->i0 = i;
  k     = digits_end(t, n, i);
  if (k > i && k - i <= 3)
    while ((s = separator_len(t, n, k))) k += s + 3;
  m->i1 = m->f0 = m->f1 = k;
  if (k + 1 < n && t[k] == '.' && is_digit(t[k + 1])) {
    m->f0 = k + 1;
    m->f1 = k = digits_end(t, n, k + 1);
  }
  if (m->i0 == m->i1 && m->f0 == m->f1) return 0;
  if (m->f0 == m->f1 && k + 1 < n && t[k] == '/' && is_digit(t[k + 1])) {
    size_t e = digits_end(t, n, k + 1);

    if (!(e + 1 < n && (t[e] == '.' || t[e] == '/') && is_digit(t[e + 1]))) {
      m->d0 = k + 1;
      m->d1 = k = e;
    }
  }
  m->end = k;
  return 1;
}

/* Whether a '-' or '+' at t[i] is a sign rather than an operator. */
static int sign_allowed(const char *t, size_t i)
{
  char p = i ? t[i - 1] : ' ';

  return !(is_digit(p) || is_alpha(p) || p == ')' || p == ']' || p == '}');
}

/* The last number of t[0..n). */
static int last_number(const char *t, size_t n, Num *last)
{
  int found = 0;
  Num m;

  for (size_t i = 0; i < n;) {
    char c     = t[i];
    int  start = is_digit(c) || (c == '.' && (i == 0 || !is_digit(t[i - 1]))) ||
                ((c == '-' || c == '+') && sign_allowed(t, i));

    if (start && num_scan(t, n, i, &m)) {
      *last = m;
      found = 1;
      i     = m.end;
    } else i++;
  }
  return found;
}

/* "\frac{a}{b}" (or \dfrac, \tfrac) at t[i], integers a and b. */
static int latex_frac(const char *t, size_t n, size_t i, Num *m)
{
  static const char *const cmd[] = {"\\frac{", "\\dfrac{", "\\tfrac{"};
  size_t                   k     = n;

  memset(m, 0, sizeof *m);
  for (int c = 0; c < 3 && k == n; c++)
    if (n - i >= strlen(cmd[c]) && !memcmp(t + i, cmd[c], strlen(cmd[c]))) k = i + strlen(cmd[c]);
  if (k == n) return 0;
  m->i0 = k;
  m->i1 = digits_end(t, n, k);
  if (m->i1 == k || m->i1 + 1 >= n || t[m->i1] != '}' || t[m->i1 + 1] != '{') return 0;
  m->d0 = m->i1 + 2;
  m->d1 = digits_end(t, n, m->d0);
  if (m->d1 == m->d0 || m->d1 >= n || t[m->d1] != '}') return 0;
  m->f0 = m->f1 = m->i1;
  m->end        = m->d1 + 1;
  return 1;
}

/* Whether all of t[0..n) is one number: blanks around it and one '.' after
 * it allowed. */
static int whole_number(const char *t, size_t n, Num *m)
{
  size_t a = 0, b = n, e;
  int    neg;

  trim(t, &a, &b);
  neg = a < b && t[a] == '-';
  if (a < b && (t[a] == '-' || t[a] == '+') && latex_frac(t, b, a + 1, m)) m->neg = neg;
  else if (!latex_frac(t, b, a, m) && !num_scan(t, b, a, m)) return 0;
  e = m->end;
  if (e < b && t[e] == '.') e++;
  return e == b;
}

/* A number in normal form (see the top of the file). */
static void num_write(const char *t, const Num *m, Out *o)
{
  size_t a = m->i0, fe = m->f1, d = m->d0;

  while (a < m->i1 && (t[a] == '0' || !is_digit(t[a]))) a++; /* leading zeros, separators */
  while (fe > m->f0 && t[fe - 1] == '0') fe--;
  if (m->neg && !(a == m->i1 && fe == m->f0)) out_c(o, '-');
  if (a == m->i1) out_c(o, '0');
  for (; a < m->i1; a++)
    if (is_digit(t[a])) out_c(o, t[a]);
  if (fe > m->f0) out_c(o, '.');
  for (size_t k = m->f0; k < fe; k++) out_c(o, t[k]);
  if (m->d1 == m->d0) return;
  while (d + 1 < m->d1 && t[d] == '0') d++;
  out_c(o, '/');
  for (; d < m->d1; d++) out_c(o, t[d]);
}

/* ---- answers ------------------------------------------------------------- */
/* The content [*ca, *cb) of the last \boxed{...} that is closed and not
 * blank. Scanning back, `unclosed` is the brace of the earliest box known
 * never to close: a box opened before it that has not closed by then never
 * closes either, so no stretch of text is scanned twice. */
static int last_box(const char *t, size_t n, size_t *ca, size_t *cb)
{
  size_t unclosed = n;

  for (size_t p = n; p-- > 0;) {
    size_t j = p + 6, k, depth = 1;

    if (t[p] != '\\' || n - p < 7 || memcmp(t + p, "\\boxed", 6) || is_alpha(t[j])) continue;
    while (j < n && is_blank(t[j])) j++;
    if (j >= unclosed || t[j] != '{') continue;
    for (k = j + 1; k < unclosed; k++) {
      if (t[k] == '{') depth++;
      else if (t[k] == '}' && --depth == 0) break;
    }
    if (k >= unclosed) {
      unclosed = j;
      continue;
    }
    *ca = j + 1;
    *cb = k;
    trim(t, ca, cb);
    if (*ca < *cb) return 1;
  }
  return 0;
}

/* Writes the normalised answer of t[0..n); 0 if there is none. *isnum: it
 * is a number. */
static int answer_write(const char *t, size_t n, Out *o, int *isnum)
{
  size_t a, b;
  Num    m;

  *isnum = 0;
  if (last_box(t, n, &a, &b)) {
    if ((*isnum = whole_number(t + a, b - a, &m))) num_write(t + a, &m, o);
    else
      for (size_t k = a; k < b; k++) out_c(o, t[k]);
    return 1;
  }
  if (!last_number(t, n, &m)) return 0;
  num_write(t, &m, o);
  *isnum = 1;
  return 1;
}

/* A reference answer: normalised as a number when all of it is one, else
 * trimmed of blanks. */
static int reference_write(const char *t, size_t n, Out *o, int *isnum)
{
  size_t a = 0, b = n;
  Num    m;

  if ((*isnum = whole_number(t, n, &m))) num_write(t, &m, o);
  else {
    trim(t, &a, &b);
    for (size_t k = a; k < b; k++) out_c(o, t[k]);
  }
  return 1;
}

/* The text a writer makes of t[0..n) and its length (a response may hold
 * NUL bytes): in buf when it fits, else in *heap (the caller frees it).
 * NULL when there is no answer (or no memory). */
typedef int (*AnswerWriter)(const char *t, size_t n, Out *o, int *isnum);
static const char *normalised(AnswerWriter w, const char *t, size_t n, char *buf, size_t cap, char **heap, size_t *len,
                              int *isnum)
{
  Out o = {buf, cap, 0};

  *heap = NULL;
  if (!w(t, n, &o, isnum)) return NULL;
  if (o.len >= cap) {
    if (!(*heap = malloc(o.len + 1))) return NULL;
    o = (Out){*heap, o.len + 1, 0};
    (void)w(t, n, &o, isnum);
  }
  out_end(&o);
  *len = o.len;
  return o.p;
}

/* A normal-form number's value ("a", "a.b" or "a/b"); false if not finite. */
static int num_value(const char *s, double *v)
{
  char  *e;
  double x = strtod(s, &e);

  if (*e == '/') x /= strtod(e + 1, NULL);
  *v = x;
  return isfinite(x);
}

static int numbers_equal(const char *a, const char *b)
{
  double x, y;

  if (!strcmp(a, b)) return 1;
  if (!strpbrk(a, "./") && !strpbrk(b, "./")) return 0; /* integers: exactly */
  if (!num_value(a, &x) || !num_value(b, &y)) return 0;
  return fabs(x - y) <= 1e-9 * fmax(fabs(x), fabs(y));
}

/* ---- the rule functions -------------------------------------------------- */
/* A NULL text reads as "". */
static const char *or_empty(const char *t, size_t *n)
{
  if (t) return t;
  *n = 0;
  return "";
}

int reward_extract_answer(const char *text, size_t n, char *out, size_t cap)
{
  Out o = {out, out ? cap : 0, 0};
  int isnum;

  text = or_empty(text, &n);
  if (!answer_write(text, n, &o, &isnum)) {
    if (o.cap) out[0] = '\0';
    return -1;
  }
  out_end(&o);
  return o.len > INT_MAX ? INT_MAX : (int)o.len;
}

double reward_numeric(const char *response, size_t n, const char *reference)
{
  char        abuf[256], rbuf[256], *aheap = NULL, *rheap = NULL;
  int         anum, rnum, ok = 0;
  size_t      alen = 0, rlen = 0;
  const char *ans, *ref;

  response = or_empty(response, &n);
  if (!reference) reference = "";
  ans = normalised(answer_write, response, n, abuf, sizeof abuf, &aheap, &alen, &anum);
  ref = normalised(reference_write, reference, strlen(reference), rbuf, sizeof rbuf, &rheap, &rlen, &rnum);
  if (ans && ref) ok = rnum ? anum && numbers_equal(ans, ref) : alen == rlen && !memcmp(ans, ref, alen);
  free(aheap);
  free(rheap);
  return ok ? 1.0 : 0.0;
}

double reward_exact(const char *response, size_t n, const char *reference)
{
  size_t a = 0, b, ra = 0, rb;

  response = or_empty(response, &n);
  if (!reference) reference = "";
  b  = n;
  rb = strlen(reference);
  trim(response, &a, &b);
  trim(reference, &ra, &rb);
  return b - a == rb - ra && !memcmp(response + a, reference + ra, b - a) ? 1.0 : 0.0;
}

double reward_format(const char *response, size_t n, int eos)
{
  Out o = {NULL, 0, 0};
  int isnum;

  response = or_empty(response, &n);
  return eos && answer_write(response, n, &o, &isnum) ? 1.0 : 0.0;
}

double reward_length(int len, int start, int max_len)
{
  if (start >= max_len) return len < max_len ? 0.0 : -1.0;
  if (len <= start) return 0.0;
  if (len >= max_len) return -1.0;
  return -((double)len - start) / ((double)max_len - start);
}
