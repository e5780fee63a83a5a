/* test_reward: the rule rewards of src/reward against hand-made responses
 * (signs, thousands separators, decimals, fractions, \boxed{} forms,
 * malformed and empty text, a buffer too small for the answer), -reward_fn
 * parsing (good specs, and each kind of bad one with its one-line message),
 * the weighted sum, and token tables: built from strings, decoded up to EOS,
 * and read from /tokenizer of HDF5 files this program writes (a good one,
 * one without /tokenizer, and malformed ones, each with its message).
 * Runs on any number of ranks (the table is read on rank 0 and broadcast).
 * Reports through test_report.h; exits non-zero on any failure.
 *
 * The checks in detail: the rule rewards (src/reward) on hand-made responses: the answer a
 * response gives (45 cases: signs and minus operators, thousands separators and lists,
 * decimals, `.5`, leading zeros, a sentence's final period, fractions, a 30-digit number,
 * `\boxed{}` with separators, nested braces, `\frac`, empty, blank, unclosed and nested boxes,
 * no answer), output buffers too small never overrun, `numeric` (26 cases, 300-digit answers),
 * `exact`, `format`, `length` at and around both ends; `-reward_fn` parsing (good specs and
 * ten bad ones, each one line naming the option and the part); token tables from strings and
 * from HDF5 files written in the test (decoding stops at EOS, a file without `/tokenizer`,
 * nine malformed groups each one error naming the file and item); on 1, 2 and 3 ranks
 */
#include "reward.h"
#include "test_report.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PetscMPIInt rank;
static char        tmpdir[PETSC_MAX_PATH_LEN];

/* s with newlines and tabs written \n and \t, so a report stays one line. */
static const char *show(const char *s, char *buf, size_t len)
{
  size_t k = 0;

  for (; *s && k + 3 < len; s++) {
    if (*s == '\n' || *s == '\t') {
      buf[k++] = '\\';
      buf[k++] = *s == '\n' ? 'n' : 't';
    } else buf[k++] = *s;
  }
  buf[k] = '\0';
  return buf;
}

/* ---- answers -------------------------------------------------------------- */
static void check_extract(void)
{
  /* want NULL: no answer (-1) */
  static const struct {
    const char *text, *want, *why;
  } c[] = {
    {"The answer is 42", "42", "last number"},
    {"The answer is 12.", "12", "a sentence's period is not a decimal point"},
    {"So x = 3.50", "3.5", "trailing zeros of the decimal part dropped"},
    {"0.0500 of it", "0.05", "trailing zeros dropped, leading zero kept"},
    {"that is 3.0", "3", "a decimal part of zeros dropped with its point"},
    {"about .5 of it", "0.5", "a number starting with its point"},
    {"007", "7", "leading zeros dropped"},
    {"It is -3", "-3", "a sign after a blank"},
    {"(-3)", "-3", "a sign after a bracket"},
    {"x =-3", "-3", "a sign after '='"},
    {"It is +5", "5", "a leading '+' dropped"},
    {"-0", "0", "-0 written 0"},
    {"-0.00", "0", "-0.00 written 0"},
    {"5-3", "3", "a '-' after a digit is an operator"},
    {"x-3", "3", "a '-' after a letter is an operator"},
    {"5 - 3", "3", "a '-' followed by a blank is no sign"},
    {"total 1,234,567 apples", "1234567", "thousands separators removed"},
    {"$12,345.60", "12345.6", "separators and a decimal part"},
    {"values 1, 2, 3", "3", "a comma and blank separates a list"},
    {"1,23", "23", "a group of two digits is no thousands group"},
    {"1,2345", "2345", "a group of four digits is no thousands group"},
    {"1234,567", "567", "a first group of four digits takes no separator"},
    {"3/4 of the cake", "3/4", "a fraction"},
    {"it is -3/4", "-3/4", "a negative fraction"},
    {"1/2.5", "2.5", "a denominator with a decimal part makes no fraction"},
    {"Version 1.2.3", "3", "dotted version: the last part"},
    {"the 3rd", "3", "digits before letters"},
    {"123456789012345678901234567890", "123456789012345678901234567890", "a long digit string kept whole"},
    {"\\boxed{1,234}", "1234", "boxed number with a separator"},
    {"\\boxed{1{,}000}", "1000", "boxed number with LaTeX's {,} separator"},
    {"first \\boxed{7} then \\boxed{8}.", "8", "the last box"},
    {"\\boxed{x^{2}+1} and then 5", "x^{2}+1", "nested braces; a box beats a later number"},
    {"\\boxed{\\frac{3}{4}}", "3/4", "boxed \\frac"},
    {"\\boxed{-\\dfrac{1}{2}}", "-1/2", "boxed negative \\dfrac"},
    {"\\boxed{ 12. }", "12", "blanks and a final '.' in a box"},
    {"\\boxed{-0}", "0", "boxed -0"},
    {"\\boxed{ B }", "B", "boxed text, trimmed"},
    {"\\boxed{\\boxed{5}}", "5", "nested boxes: the inner"},
    {"answer 9 \\boxed{}", "9", "an empty box does not count"},
    {"answer 9 \\boxed{   }", "9", "a blank box does not count"},
    {"answer 9 \\boxed{12", "12", "a box never closed does not count (its number does)"},
    {"\\boxed{\\boxed{\\boxed{", NULL, "only unclosed boxes, no digits"},
    {"", NULL, "empty response"},
    {"no digits here.", NULL, "no number"},
    {"- . -- + .", NULL, "signs and points without digits"},
  };
  char out[256], name[256];

  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    int len = reward_extract_answer(c[i].text, strlen(c[i].text), out, sizeof out);
    int ok  = c[i].want ? len == (int)strlen(c[i].want) && !strcmp(out, c[i].want) : len == -1 && out[0] == '\0';

    snprintf(name, sizeof name, "extract: \"%s\" -> %s%s%s (%s)", c[i].text, c[i].want ? "\"" : "", c[i].want ? c[i].want : "none", c[i].want ? "\"" : "", c[i].why);
    test_report((PetscBool)ok, name, "returned %d, \"%s\"", len, len >= 0 ? out : "");
  }
}

/* Only text[0..n) is read; a small buffer is cut safely and the full length returned. */
static void check_extract_limits(void)
{
  const char *t = "total 1,234,567";
  char        out[16];
  int         len;

  len = reward_extract_answer("12345", 3, out, sizeof out);
  test_report((PetscBool)(len == 3 && !strcmp(out, "123")), "extract: reads only the first n bytes (\"12345\", n 3 -> \"123\")", "returned %d, \"%s\"", len, out);
  memset(out, '#', sizeof out);
  len = reward_extract_answer(t, strlen(t), out, 4);
  test_report((PetscBool)(len == 7 && !strcmp(out, "123") && out[4] == '#'), "extract: a 4-byte buffer gets \"123\", NUL-terminated and not overrun, and the full length 7", "returned %d, \"%.4s\", out[4] '%c'", len, out, out[4]);
  len = reward_extract_answer(t, strlen(t), NULL, 0);
  test_report((PetscBool)(len == 7), "extract: no buffer (cap 0) gives the length", "returned %d", len);
  memset(out, '#', sizeof out);
  len = reward_extract_answer(t, strlen(t), out, 1);
  test_report((PetscBool)(len == 7 && out[0] == '\0' && out[1] == '#'), "extract: a 1-byte buffer gets \"\"", "returned %d", len);
  len = reward_extract_answer(NULL, 5, out, sizeof out);
  test_report((PetscBool)(len == -1 && out[0] == '\0'), "extract: a NULL text has no answer", "returned %d", len);
}

static void check_numeric(void)
{
  static const struct {
    const char *response, *reference;
    double      want;
    const char *why;
  } c[] = {
    {"The answer is \\boxed{1,234}", "1234", 1, "boxed with a separator = plain"},
    {"So it is 1234.", "1,234", 1, "a reference with a separator"},
    {"It is 42", "  42  ", 1, "a reference with blanks"},
    {"3.50", "3.5", 1, "3.50 = 3.5"},
    {"12", "12.0", 1, "12 = 12.0"},
    {"-0", "0", 1, "-0 = 0"},
    {"+5", "5", 1, "+5 = 5"},
    {"It is 0.75", "3/4", 1, "decimal = fraction"},
    {"\\boxed{3/4}", "0.75", 1, "boxed fraction = decimal"},
    {"\\boxed{\\frac{6}{8}}", "3/4", 1, "\\frac{6}{8} = 3/4 by value"},
    {"0.3333333333", "1/3", 1, "within 1e-9 relative"},
    {"2/3", "0.6667", 0, "beyond 1e-9 relative"},
    {"It is -3", "-3", 1, "negative after a word"},
    {"It is -3", "3", 0, "the sign counts"},
    {"5-3", "3", 1, "5-3 ends in 3"},
    {"5-3", "-3", 0, "5-3 does not end in -3"},
    {"1234567890", "1234567891", 0, "integers compare exactly"},
    {"values 1, 2, 3", "123", 0, "a list is not one number"},
    {"\\boxed{x = 5}", "5", 0, "boxed text is not a number"},
    {"no number here", "5", 0, "no answer"},
    {"", "5", 0, "empty response"},
    {"\\boxed{B}", "B", 1, "text reference, boxed answer"},
    {"The answer is \\boxed{ B }", " B ", 1, "text reference, trimmed"},
    {"\\boxed{C}", "B", 0, "text reference, wrong answer"},
    {"The answer is B", "B", 0, "a text answer must be boxed"},
    {"It is 5", "", 0, "empty reference"},
  };
  char name[256];

  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    double v = reward_numeric(c[i].response, strlen(c[i].response), c[i].reference);

    snprintf(name, sizeof name, "numeric: \"%s\" vs \"%s\" -> %g (%s)", c[i].response, c[i].reference, c[i].want, c[i].why);
    test_report((PetscBool)(v == c[i].want), name, "got %g", v);
  }
}

/* Answers compare whole: longer than any fixed buffer, or holding a NUL. */
static void check_numeric_long(void)
{
  char   resp[420], ref[301];
  double same, diff;

  memset(ref, '7', 300);
  ref[300] = '\0';
  snprintf(resp, sizeof resp, "the answer is %s.", ref);
  same   = reward_numeric(resp, strlen(resp), ref);
  ref[299] = '8';
  diff   = reward_numeric(resp, strlen(resp), ref);
  test_report((PetscBool)(same == 1 && diff == 0), "numeric: 300-digit answers compare whole (equal, then differing in the last digit)", "got %g and %g", same, diff);
  {
    static const char nul[] = "\\boxed{B\0x}"; /* a NUL byte inside the box */

    same = reward_numeric(nul, sizeof nul - 1, "B");
    test_report((PetscBool)(same == 0), "numeric: a text answer holding a NUL byte is not cut at it", "got %g", same);
  }
}

static void check_exact_format_length(void)
{
  static const struct {
    const char *response, *reference;
    double      want;
  } ex[] = {
    {"  hello world \n", "hello world", 1},
    {"hello world", "\thello world  ", 1},
    {"hello", "Hello", 0},
    {"hello world", "hello  world", 0},
    {"", "", 1},
    {"   ", "", 1},
    {"", "x", 0},
  };
  static const struct {
    const char *response;
    int         eos;
    double      want;
  } fm[] = {
    {"so \\boxed{4}", 1, 1}, {"so \\boxed{4}", 0, 0}, {"the answer is 12.", 1, 1}, {"no answer", 1, 0}, {"", 1, 0}, {"answer \\boxed{12", 1, 1}, {"\\boxed{}", 1, 0},
  };
  static const struct {
    int    len, start, max;
    double want;
  } ln[] = {
    {0, 5, 10, 0}, {5, 5, 10, 0}, {6, 5, 10, -0.2}, {8, 5, 10, -0.6}, {10, 5, 10, -1}, {12, 5, 10, -1}, {9, 10, 10, 0}, {10, 10, 10, -1}, {11, 12, 10, -1}, {9, 12, 10, 0},
  };
  char   name[256], s1[64], s2[64];
  double v;

  for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
    v = reward_exact(ex[i].response, strlen(ex[i].response), ex[i].reference);
    snprintf(name, sizeof name, "exact: \"%s\" vs \"%s\" -> %g", show(ex[i].response, s1, sizeof s1), show(ex[i].reference, s2, sizeof s2), ex[i].want);
    test_report((PetscBool)(v == ex[i].want), name, "got %g", v);
  }
  v = reward_exact("abcdef", 3, "abc");
  test_report((PetscBool)(v == 1), "exact: reads only the first n bytes (\"abcdef\", n 3 = \"abc\")", "got %g", v);
  for (size_t i = 0; i < sizeof fm / sizeof fm[0]; i++) {
    v = reward_format(fm[i].response, strlen(fm[i].response), fm[i].eos);
    snprintf(name, sizeof name, "format: \"%s\", eos %d -> %g", fm[i].response, fm[i].eos, fm[i].want);
    test_report((PetscBool)(v == fm[i].want), name, "got %g", v);
  }
  for (size_t i = 0; i < sizeof ln / sizeof ln[0]; i++) {
    v = reward_length(ln[i].len, ln[i].start, ln[i].max);
    snprintf(name, sizeof name, "length: len %d, start %d, max %d -> %g", ln[i].len, ln[i].start, ln[i].max, ln[i].want);
    test_report((PetscBool)(fabs(v - ln[i].want) < 1e-12), name, "got %.17g", v);
  }
}

/* ---- -reward_fn ----------------------------------------------------------- */
static PetscErrorCode check_spec(void)
{
  static const struct {
    const char *s, *want, *why;
  } bad[] = {
    {"numerc", "-reward_fn numerc: unknown rule 'numerc' (valid: numeric, exact, format, length)", "unknown name, listing the valid ones"},
    {"none,numeric", "unknown rule 'none'", "none among other items"},
    {"numeric:abc", "-reward_fn numeric:abc: numeric has a bad weight 'abc'", "weight not a number"},
    {"numeric:", "numeric has a bad weight ''", "empty weight"},
    {"numeric:nan", "numeric has a bad weight 'nan'", "weight not finite"},
    {"numeric:1:2", "numeric has a bad weight '1:2'", "two colons"},
    {"numeric,format:2,numeric:2", "-reward_fn numeric,format:2,numeric:2: numeric is given twice", "duplicate name"},
    {"numeric,,format", "-reward_fn numeric,,format: empty item", "empty item in the middle"},
    {"numeric,", "empty item", "trailing comma"},
    {",numeric", "empty item", "leading comma"},
  };
  RewardSpec     sp;
  PetscErrorCode ierr;
  char           name[256];
  double         part[REWARD_NFN], v;
  const char    *resp = "so \\boxed{7}";

  PetscFunctionBegin;
  PetscCall(reward_spec_parse("-reward_fn", "numeric:1,format:0.1,length:0.5", &sp));
  test_report((PetscBool)(sp.n == 3 && sp.fn[0] == REWARD_NUMERIC && sp.fn[1] == REWARD_FORMAT && sp.fn[2] == REWARD_LENGTH && sp.weight[0] == 1 && sp.weight[1] == 0.1 && sp.weight[2] == 0.5), "spec: numeric:1,format:0.1,length:0.5", "n %d, fn %d %d %d, weights %g %g %g", sp.n, sp.fn[0], sp.fn[1], sp.fn[2], sp.weight[0], sp.weight[1], sp.weight[2]);
  test_report(reward_spec_needs_answer(&sp), "spec: numeric needs a reference answer", NULL);
  PetscCall(reward_spec_parse("-reward_fn", " exact , length : -2 ", &sp));
  test_report((PetscBool)(sp.n == 2 && sp.fn[0] == REWARD_EXACT && sp.fn[1] == REWARD_LENGTH && sp.weight[0] == 1 && sp.weight[1] == -2), "spec: blanks around items, default weight 1, a negative weight", "n %d, fn %d %d, weights %g %g", sp.n, sp.fn[0], sp.fn[1], sp.weight[0], sp.weight[1]);
  PetscCall(reward_spec_parse("-reward_fn", "format,length", &sp));
  test_report((PetscBool)(sp.n == 2 && !reward_spec_needs_answer(&sp)), "spec: format and length need no reference answer", "n %d", sp.n);
  PetscCall(reward_spec_parse("-reward_fn", "", &sp));
  test_report((PetscBool)(sp.n == 0), "spec: \"\" has no terms", "n %d", sp.n);
  sp.n = 7;
  PetscCall(reward_spec_parse("-reward_fn", "none", &sp));
  test_report((PetscBool)(sp.n == 0 && !reward_spec_needs_answer(&sp)), "spec: \"none\" has no terms", "n %d", sp.n);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    TEST_TRY(ierr, reward_spec_parse("-reward_fn", bad[i].s, &sp));
    snprintf(name, sizeof name, "spec: \"%s\" is refused (%s)", bad[i].s, bad[i].why);
    test_expect_error(ierr, name, bad[i].want);
  }

  /* numeric 2*1 + format 0.5*1 + length 1*(-(8-5)/(10-5)) = 1.9 */
  PetscCall(reward_spec_parse("-reward_fn", "numeric:2,format:0.5,length:1", &sp));
  v = reward_spec_eval(&sp, resp, strlen(resp), 1, 8, "7", 5, 10, part);
  test_report((PetscBool)(fabs(v - 1.9) < 1e-12 && part[0] == 1 && part[1] == 1 && fabs(part[2] + 0.6) < 1e-12), "eval: 2*numeric + 0.5*format + length = 2 + 0.5 - 0.6", "sum %.17g, parts %g %g %g", v, part[0], part[1], part[2]);
  v = reward_spec_eval(&sp, resp, strlen(resp), 0, 3, "8", 5, 10, part);
  test_report((PetscBool)(v == 0 && part[0] == 0 && part[1] == 0 && part[2] == 0), "eval: wrong answer, no EOS, short: every part 0", "sum %g, parts %g %g %g", v, part[0], part[1], part[2]);
  PetscCall(reward_spec_parse("-reward_fn", "exact:3", &sp));
  v = reward_spec_eval(&sp, " 7\n", 3, 1, 2, "7", 5, 10, part);
  test_report((PetscBool)(v == 3 && part[0] == 1), "eval: 3*exact", "sum %g", v);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- token tables ----------------------------------------------------------- */
static PetscErrorCode check_table_strings(void)
{
  const char *const vocab[] = {NULL, NULL, NULL, NULL, "1", "2", "+", "=", " "}; /* 3: EOS */
  const int         toks[]  = {4, 5, 6, 99, -1, 8, 4, 3, 5, 5};
  int               many[100];
  TokenTable        tt, noeos;
  char             *buf = NULL;
  size_t            cap = 0, n;
  PetscErrorCode    ierr;

  PetscFunctionBegin;
  PetscCall(token_table_from_strings(9, vocab, 3, &tt));
  test_report((PetscBool)(tt.V == 9 && tt.eos_id == 3 && tt.off[4] == 0 && tt.off[9] == 5), "table from strings: V, eos_id and offsets (control tokens have no bytes)", "V %d, eos %d, off[4] %lld, off[9] %lld", tt.V, tt.eos_id, (long long)tt.off[4], (long long)tt.off[9]);
  n = token_table_decode(&tt, toks, 10, &buf, &cap);
  test_report((PetscBool)(n == 5 && !strcmp(buf, "12+ 1") && cap >= 6), "decode: stops at EOS, skips ids outside [0, V)", "length %zu, \"%s\"", n, buf);
  n = token_table_decode(&tt, toks, 0, &buf, &cap);
  test_report((PetscBool)(n == 0 && buf[0] == '\0'), "decode: no tokens give \"\"", "length %zu", n);
  for (int i = 0; i < 100; i++) many[i] = 4 + i % 2;
  n = token_table_decode(&tt, many, 100, &buf, &cap);
  test_report((PetscBool)(n == 100 && cap >= 101 && strlen(buf) == 100 && buf[0] == '1' && buf[99] == '2'), "decode: the buffer grows to a longer text", "length %zu, cap %zu", n, cap);
  PetscCall(token_table_from_strings(9, vocab, -1, &noeos));
  n = token_table_decode(&noeos, toks, 10, &buf, &cap);
  test_report((PetscBool)(n == 7 && !strcmp(buf, "12+ 122")), "decode: without eos_id, id 3 is a control token with no bytes and the text goes on", "length %zu, \"%s\"", n, buf);
  n = token_table_decode(&noeos, toks + 7, 3, &buf, &cap);
  test_report((PetscBool)(n == 2 && !strcmp(buf, "22")), "decode: without eos_id nothing stops the text", "length %zu, \"%s\"", n, buf);
  PetscCall(PetscFree(buf));
  PetscCall(token_table_destroy(&tt));
  PetscCall(token_table_destroy(&noeos));
  test_report((PetscBool)(tt.V == 0 && !tt.off && !tt.bytes), "destroy zeroes the table", NULL);
  TEST_TRY(ierr, token_table_from_strings(9, vocab, 9, &tt));
  test_expect_error(ierr, "table from strings: eos_id outside the vocabulary is refused", "eos_id 9 is outside [-1, 9)");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A /tokenizer as a file may hold it; each field can be broken. */
typedef struct {
  const int64_t *off;
  int            noff, ntype, eos; /* ntype < 0: no token_type */
  PetscBool      group, bytes, eos_attr;
} TokFile;

static const char    tok_bytes[] = "The answer is 42.";
static const int64_t good_off[]  = {0, 0, 3, 10, 13, 16, 17}; /* <eos> "The" " answer" " is" " 42" "." */

static void write_1d(hid_t loc, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *buf)
{
  hid_t space = H5Screate_simple(1, &n, NULL), d = H5Dcreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);

  if (n) H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  H5Dclose(d);
  H5Sclose(space);
}

/* Rank 0 writes tmpdir/name; every rank gets its path. */
static PetscErrorCode write_tok_file(const char *name, const TokFile *f, char *path)
{
  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(path, PETSC_MAX_PATH_LEN, "%s/%s", tmpdir, name));
  if (rank == 0) {
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), g;
    int   types[16];

    PetscCheck(file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "cannot create %s", path);
    g = H5Gcreate2(file, f->group ? "tokenizer" : "other", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    write_1d(g, "token_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)f->noff, f->off);
    if (f->bytes) write_1d(g, "token_bytes", H5T_STD_U8LE, H5T_NATIVE_UCHAR, sizeof tok_bytes - 1, tok_bytes);
    for (int i = 0; i < 16; i++) types[i] = i ? 1 : 3;
    if (f->ntype >= 0) write_1d(g, "token_type", H5T_STD_I32LE, H5T_NATIVE_INT, (hsize_t)f->ntype, types);
    if (f->eos_attr) {
      hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(g, "eos_id", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);

      H5Awrite(a, H5T_NATIVE_INT, &f->eos);
      H5Aclose(a);
      H5Sclose(s);
    }
    H5Gclose(g);
    PetscCheck(H5Fclose(file) >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "cannot write %s", path);
  }
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_table_file(void)
{
  static const int64_t falling[] = {0, 0, 3, 2, 13, 16, 17}, beyond[] = {0, 0, 3, 10, 13, 16, 20}, short_end[] = {0, 0, 3, 10, 13, 16, 16}, from1[] = {1, 1, 3, 10, 13, 16, 17};
  const int     toks[]    = {1, 2, 3, 4, 5, 0, 1, 2};
  static const struct {
    const char *file, *why, *want;
    TokFile     f;
  } bad[] = {
    {"falling.h5", "offsets falling", "falling.h5: /tokenizer/token_offsets[3] = 2 is outside [token_offsets[2] = 3, 17", {falling, 7, 6, 0, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}},
    {"beyond.h5", "offsets beyond the bytes", "beyond.h5: /tokenizer/token_offsets[6] = 20 is outside", {beyond, 7, 6, 0, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}},
    {"short.h5", "offsets ending before the bytes do", "short.h5: /tokenizer/token_offsets ends at 16, but /tokenizer/token_bytes holds 17 bytes", {short_end, 7, 6, 0, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}},
    {"from1.h5", "offsets not starting at 0", "from1.h5: /tokenizer/token_offsets[0] = 1, expected 0", {from1, 7, 6, 0, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}},
    {"count.h5", "not V+1 offsets for token_type's V", "count.h5: /tokenizer/token_offsets has 7 entries, expected 6", {good_off, 7, 5, 0, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}},
    {"one.h5", "a single offset (no tokens)", "one.h5: /tokenizer/token_offsets has 1 entries", {good_off, 1, -1, 0, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}},
    {"nobytes.h5", "token_bytes missing", "nobytes.h5 has no dataset /tokenizer/token_bytes", {good_off, 7, 6, 0, PETSC_TRUE, PETSC_FALSE, PETSC_TRUE}},
    {"noeos.h5", "eos_id missing", "noeos.h5 /tokenizer has no attribute eos_id", {good_off, 7, 6, 0, PETSC_TRUE, PETSC_TRUE, PETSC_FALSE}},
    {"bigeos.h5", "eos_id outside the vocabulary", "bigeos.h5 /tokenizer: attribute eos_id = 6 is out of range [-1, 5]", {good_off, 7, 6, 6, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}},
  };
  TokFile        good = {good_off, 7, 6, 0, PETSC_TRUE, PETSC_TRUE, PETSC_TRUE}, none = good;
  char           path[PETSC_MAX_PATH_LEN], name[256], *buf = NULL;
  size_t         cap = 0, n;
  TokenTable     tt;
  PetscBool      found = PETSC_FALSE, same;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(write_tok_file("good.h5", &good, path));
  PetscCall(token_table_read(PETSC_COMM_WORLD, path, &tt, &found));
  same = (PetscBool)(found && tt.V == 6 && tt.eos_id == 0 && !memcmp(tt.off, good_off, sizeof good_off) && !memcmp(tt.bytes, tok_bytes, 17));
  test_report(same, "read /tokenizer: V, eos_id, offsets and bytes as written (on every rank)", "found %d, V %d, eos %d", (int)found, tt.V, tt.eos_id);
  n = token_table_decode(&tt, toks, 8, &buf, &cap);
  test_report((PetscBool)(n == 17 && !strcmp(buf, tok_bytes)), "read /tokenizer: decoding stops at EOS", "length %zu, \"%s\"", n, buf);
  test_report((PetscBool)(reward_numeric(buf, n, "42") == 1), "read /tokenizer: the decoded response's answer is 42", NULL);
  PetscCall(PetscFree(buf));
  PetscCall(token_table_destroy(&tt));

  none.group = PETSC_FALSE;
  PetscCall(write_tok_file("none.h5", &none, path));
  found = PETSC_TRUE;
  PetscCall(token_table_read(PETSC_COMM_WORLD, path, &tt, &found));
  test_report((PetscBool)(!found && tt.V == 0 && !tt.off && !tt.bytes), "read: a file without /tokenizer gives found false and an empty table", "found %d, V %d", (int)found, tt.V);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    PetscCall(write_tok_file(bad[i].file, &bad[i].f, path));
    TEST_TRY(ierr, token_table_read(PETSC_COMM_WORLD, path, &tt, &found));
    snprintf(name, sizeof name, "read: %s is one error naming the file and item", bad[i].why);
    test_expect_error(ierr, name, bad[i].want);
    snprintf(name, sizeof name, "read: after %s the table is empty and no HDF5 object is left open", bad[i].why);
    test_report((PetscBool)(tt.V == 0 && !tt.off && !tt.bytes && H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0), name, "V %d, open objects %zd", tt.V, (ssize_t)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
  }
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/missing.h5", tmpdir));
  TEST_TRY(ierr, token_table_read(PETSC_COMM_WORLD, path, &tt, &found));
  test_expect_error(ierr, "read: a missing file is one error naming it", "missing.h5: no such file");
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscCall(PetscInitialize(&argc, &argv, NULL, "Tests of the rule rewards and token tables (src/reward).\n"));
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  test_collective(PETSC_COMM_WORLD);
  PetscCall(test_tmpdir(tmpdir, sizeof tmpdir, "test_reward"));
  check_extract();
  check_extract_limits();
  check_numeric();
  check_numeric_long();
  check_exact_format_length();
  PetscCall(check_spec());
  PetscCall(check_table_strings());
  PetscCall(check_table_file());
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  PetscCall(PetscFinalize());
  return test_tally();
}
