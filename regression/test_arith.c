/* test_arith: the built-in arithmetic task of src/task/arith.c. Questions
 * are decoded with the task's own vocabulary and read back independently
 * here (a bare "a op b=" is evaluated; a word problem gives its two numbers
 * and its operation by the words "more", "left", "each"/"of"), so a wrong
 * answer, a question outside its split, a token outside the vocabulary or a
 * sample longer than its bound shows up. Options and the checks of
 * arith_check are exercised too.
 *
 * The checks in detail: the built-in arithmetic task (src/task/arith.c) in six configurations
 * (bare and word problems, `+-*`, operands to 1, 7, 20, 999 and 46340): every prompt's text
 * parsed back independently and its answer recomputed, held-out prompts never among 2000
 * training ones, lengths within the bounds (which are reached), determinism, seeds, operand
 * ranges, signs (bare subtraction goes negative, word problems never), demonstration noise
 * touching only digits, every option error naming its option
 */
#include "task.h"
#include "env.h"
#include "test_report.h"
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_DRAWS  2000
#define TEXT_MAX 256

/* A sample's text: tokens decoded with arith_vocab(). Returns 0 (detail
 * set) on a token outside [0, V) or a control token inside the text. */
static int decode(const int *tok, int n, char *text, char *detail, size_t dcap)
{
  const char *const *vocab = arith_vocab();
  int                V     = arith_vocab_size(), k = 0;

  for (int i = 0; i < n; i++) {
    if (tok[i] < 0 || tok[i] >= V) return snprintf(detail, dcap, "token %d at %d outside [0, %d)", tok[i], i, V), 0;
    if (!vocab[tok[i]]) return snprintf(detail, dcap, "control token %d at %d inside the text", tok[i], i), 0;
    if (k + 1 < TEXT_MAX) text[k++] = vocab[tok[i]][0];
  }
  text[k] = 0;
  return 1;
}

/* A prompt: BOS, text, SEP. */
static int decode_prompt(const int *tok, int n, char *text, char *detail, size_t dcap)
{
  if (n < 3 || tok[0] != TASK_BOS || tok[n - 1] != TASK_SEP) return snprintf(detail, dcap, "length %d, first %d, last %d: not BOS ... SEP", n, n ? tok[0] : -1, n ? tok[n - 1] : -1), 0;
  return decode(tok + 1, n - 2, text, detail, dcap);
}

/* The answer read back from a question: 1 and *answer set, or 0 with the
 * reason in detail. Bare: "a op b=" with a, b without leading zeros. Words:
 * exactly two numbers, the operation from its words; '-' never negative. */
static int read_question(const char *q, PetscBool words, int64_t *a, int64_t *b, char *op, int64_t *answer, char *detail, size_t dcap)
{
  int64_t num[3];
  int     nn = 0;

  for (const char *s = q; *s;) {
    if (!isdigit((unsigned char)*s)) {
      s++;
      continue;
    }
    if (*s == '0' && isdigit((unsigned char)s[1])) return snprintf(detail, dcap, "\"%s\": a number with a leading zero", q), 0;
    if (nn == 3) return snprintf(detail, dcap, "\"%s\": more than two numbers", q), 0;
    num[nn++] = strtoll(s, (char **)&s, 10);
  }
  if (nn != 2) return snprintf(detail, dcap, "\"%s\": %d numbers, expected 2", q, nn), 0;
  *a = num[0], *b = num[1];
  if (!words) {
    char text[TEXT_MAX];
    const char *ops = "+-*";
    *op = 0;
    for (int k = 0; k < 3 && !*op; k++) {
      snprintf(text, sizeof text, "%" PRId64 "%c%" PRId64 "=", *a, ops[k], *b);
      if (!strcmp(text, q)) *op = ops[k];
    }
    if (!*op) return snprintf(detail, dcap, "\"%s\" is not a bare \"a op b=\"", q), 0;
  } else {
    int plus = strstr(q, "more") != NULL, minus = strstr(q, "left") != NULL, times = strstr(q, "each") != NULL || strstr(q, " of ") != NULL;
    if (plus + minus + times != 1) return snprintf(detail, dcap, "\"%s\": cannot tell the operation (more %d, left %d, each/of %d)", q, plus, minus, times), 0;
    *op = plus ? '+' : minus ? '-' : '*';
    if (q[strlen(q) - 1] != '?') return snprintf(detail, dcap, "\"%s\" does not end with '?'", q), 0;
    if (*op == '-' && *a < *b) return snprintf(detail, dcap, "\"%s\": a word problem gives away more than there is", q), 0;
    for (const char *s = q; *s; s++) /* "1 apple", "1 box", never "1 apples" */
      if ((s == q || s[-1] == ' ') && !strncmp(s, "1 ", 2)) {
        const char *e = s + 2;
        while (islower((unsigned char)*e)) e++;
        if (e > s + 2 && e[-1] == 's') return snprintf(detail, dcap, "\"%s\": a plural after 1", q), 0;
      }
  }
  *answer = *op == '+' ? *a + *b : *op == '-' ? *a - *b : *a * *b;
  return 1;
}

static int cmp_text(const void *x, const void *y)
{
  return strcmp((const char *)x, (const char *)y);
}

/* One configuration of the task, with what its draws must show. */
typedef struct {
  const char *name;
  ArithTask   t;
  int         min_distinct; /* distinct questions among N_DRAWS training ones, at least */
} Config;

/* Everything about one configuration's prompts, demonstrations and answers. */
static void check_config(const Config *c)
{
  const ArithTask *t      = &c->t;
  const int        maxp   = arith_max_prompt(t), maxd = arith_max_demo(t);
  char (*texts[2])[TEXT_MAX];
  int             *tok    = malloc(sizeof(int) * (size_t)(maxd + 64)), *tok2 = malloc(sizeof(int) * (size_t)(maxd + 64));
  char             name[256], detail[512] = "", q[TEXT_MAX], ans[32];
  int              ok_det = 1, ok_read = 1, ok_len = 1, ok_demo = 1, ok_range = 1, ok_ops = 1;
  int              longest_p = 0, longest_d = 0, negative = 0, seen_min = 0, seen_max = 0, seen_op[3] = {0, 0, 0};

  texts[0] = malloc(sizeof *texts[0] * N_DRAWS);
  texts[1] = malloc(sizeof *texts[1] * N_DRAWS);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < N_DRAWS; i++) {
      TaskSplit split = (TaskSplit)s;
      int       n = arith_prompt(t, split, (uint64_t)i, tok), n2, m, plen = -1, alen;
      int64_t   a, b, want;
      char      op;

      if (n > maxp && ok_len) ok_len = 0, snprintf(detail, sizeof detail, "prompt %d of split %d has %d tokens, arith_max_prompt %d", i, s, n, maxp);
      longest_p = n > longest_p ? n : longest_p;
      if (!decode_prompt(tok, n, q, detail, sizeof detail)) {
        ok_read = 0;
        break;
      }
      memcpy(texts[s][i], q, TEXT_MAX);
      n2 = arith_prompt(t, split, (uint64_t)i, tok2);
      if (ok_det && (n2 != n || memcmp(tok, tok2, sizeof(int) * (size_t)n))) ok_det = 0, snprintf(detail, sizeof detail, "prompt %d of split %d differs on a second call", i, s);
      /* the answer, read back independently */
      if (!read_question(q, t->words, &a, &b, &op, &want, detail, sizeof detail)) {
        ok_read = 0;
        break;
      }
      alen = arith_answer(t, split, (uint64_t)i, ans, sizeof ans);
      if (alen != (int)strlen(ans) || strtoll(ans, NULL, 10) != want || snprintf(q, sizeof q, "%" PRId64, want) != alen || strcmp(q, ans)) {
        ok_read = 0;
        snprintf(detail, sizeof detail, "\"%s\": arith_answer \"%s\" (length %d), read back %" PRId64, texts[s][i], ans, alen, want);
        break;
      }
      negative += want < 0;
      if (a < 0 || b < 0 || a > t->max_operand || b > t->max_operand) ok_range = 0;
      seen_min |= (a == 0) | (b == 0) << 1; /* each operand takes both ends */
      seen_max |= (a == t->max_operand) | (b == t->max_operand) << 1;
      if (!strchr(t->ops, op)) ok_ops = 0;
      else seen_op[strchr("+-*", op) - "+-*"] = 1;
      /* the demonstration without noise: the prompt, the answer, EOS */
      m = arith_demo_src(t, split, (uint64_t)i, tok2, &plen, NULL);
      if (m > maxd && ok_len) ok_len = 0, snprintf(detail, sizeof detail, "demonstration %d of split %d has %d tokens, arith_max_demo %d", i, s, m, maxd);
      longest_d = m > longest_d ? m : longest_d;
      if (ok_demo && t->demo_noise == 0) {
        char d[TEXT_MAX];
        if (plen != n || memcmp(tok, tok2, sizeof(int) * (size_t)n) || m != n + alen + 1 || tok2[m - 1] != TASK_EOS || !decode(tok2 + n, m - n - 1, d, detail, sizeof detail) || strcmp(d, ans))
          ok_demo = 0, snprintf(detail, sizeof detail, "demonstration %d of split %d (length %d, prompt %d) is not prompt + \"%s\" + EOS", i, s, m, plen, ans);
      }
    }
  snprintf(name, sizeof name, "%s: prompts are BOS text SEP with tokens in [0, %d), answers read back from the text agree with arith_answer", c->name, arith_vocab_size());
  test_report(ok_read, name, "%s", detail);
  if (!ok_read) goto done;
  snprintf(name, sizeof name, "%s: the same index gives the same prompt twice", c->name);
  test_report(ok_det, name, "%s", detail);
  snprintf(name, sizeof name, "%s: lengths never exceed arith_max_prompt %d / arith_max_demo %d, and the prompt bound is attained", c->name, maxp, maxd);
  test_measure(ok_len && longest_p == maxp, name, "longest prompt %d, demonstration %d of %d draws", longest_p, longest_d, 2 * N_DRAWS);
  if (t->demo_noise == 0) {
    snprintf(name, sizeof name, "%s: a demonstration without noise is the prompt, the answer and EOS", c->name);
    test_report(ok_demo, name, "%s", detail);
  }
  snprintf(name, sizeof name, "%s: operands in [0, %" PetscInt_FMT "]%s; operations only and all of \"%s\"", c->name, t->max_operand, t->max_operand <= 100 ? ", both ends drawn" : "", t->ops);
  if (t->max_operand > 100) seen_min = seen_max = 3; /* too rare to be sure of in 4000 draws */
  test_report(ok_range && ok_ops && seen_min == 3 && seen_max == 3 && seen_op[0] == (strchr(t->ops, '+') != NULL) && seen_op[1] == (strchr(t->ops, '-') != NULL) && seen_op[2] == (strchr(t->ops, '*') != NULL), name,
              "range %d, ops %d, 0 seen (bits a b) %d, max seen %d, + - * seen %d %d %d", ok_range, ok_ops, seen_min, seen_max, seen_op[0], seen_op[1], seen_op[2]);
  if (strchr(t->ops, '-')) {
    snprintf(name, sizeof name, "%s: subtraction %s", c->name, t->words ? "never gives a negative answer" : "gives negative answers too, with their sign");
    test_measure(t->words ? negative == 0 : negative > 0, name, "%d negative answers in %d", negative, 2 * N_DRAWS);
  }
  {
    int distinct = 0, shared = 0;
    qsort(texts[0], N_DRAWS, TEXT_MAX, cmp_text);
    qsort(texts[1], N_DRAWS, TEXT_MAX, cmp_text);
    for (int i = 0; i < N_DRAWS; i++) distinct += i == 0 || strcmp(texts[0][i], texts[0][i - 1]);
    for (int i = 0; i < N_DRAWS; i++) shared += bsearch(texts[1][i], texts[0], N_DRAWS, TEXT_MAX, cmp_text) != NULL;
    snprintf(name, sizeof name, "%s: prompts differ across indices", c->name);
    test_measure(distinct >= c->min_distinct, name, "%d distinct of %d (want at least %d)", distinct, N_DRAWS, c->min_distinct);
    snprintf(name, sizeof name, "%s: no held-out prompt is a training prompt (%d of each)", c->name, N_DRAWS);
    test_report(shared == 0, name, "%d held-out prompts are also training prompts", shared);
  }
done:
  free(texts[0]);
  free(texts[1]);
  free(tok);
  free(tok2);
}

/* Demonstrations with noise: only answer digits change, the prompt, the
 * sign, the length and EOS stay; the share of digits changed is about
 * noise * 9/10 (a replacement may draw the same digit). */
static void check_noise(ArithTask t, double noise, double lo, double hi)
{
  ArithTask clean = t;
  int      *a = malloc(sizeof(int) * (size_t)arith_max_demo(&t)), *b = malloc(sizeof(int) * (size_t)arith_max_demo(&t));
  int       ok = 1, digits = 0, changed = 0;
  char      name[256], detail[256] = "";

  t.demo_noise     = noise;
  clean.demo_noise = 0;
  for (int i = 0; i < N_DRAWS && ok; i++) {
    int pa, pb, na = arith_demo_src(&clean, TASK_SPLIT_TRAIN, (uint64_t)i, a, &pa, NULL), nb = arith_demo_src(&t, TASK_SPLIT_TRAIN, (uint64_t)i, b, &pb, NULL);
    if (na != nb || pa != pb || memcmp(a, b, sizeof(int) * (size_t)pa) || b[nb - 1] != TASK_EOS) {
      ok = 0;
      snprintf(detail, sizeof detail, "sample %d: lengths %d/%d, prompts %d/%d, last token %d", i, na, nb, pa, pb, b[nb - 1]);
      break;
    }
    for (int j = pa; j < na - 1; j++) {
      const char *ca = arith_vocab()[a[j]], *cb = arith_vocab()[b[j]];
      if (!cb || (isdigit((unsigned char)ca[0]) != isdigit((unsigned char)cb[0])) || (!isdigit((unsigned char)ca[0]) && ca[0] != cb[0])) {
        ok = 0;
        snprintf(detail, sizeof detail, "sample %d: answer character '%s' became '%s'", i, ca, cb ? cb : "(control)");
        break;
      }
      digits += isdigit((unsigned char)ca[0]) != 0;
      changed += ca[0] != cb[0];
    }
  }
  snprintf(name, sizeof name, "demo noise %g: only answer digits change (length, prompt, sign, EOS kept), about %g of them", noise, 0.9 * noise);
  if (!ok) test_report(PETSC_FALSE, name, "%s", detail);
  else test_measure(digits > 0 && changed >= lo * digits && changed <= hi * digits, name, "%d of %d digits changed", changed, digits);
  free(a);
  free(b);
}

static void check_vocab(void)
{
  const char *const *v = arith_vocab();
  const char        *want = "0123456789+-*=?., abcdefghijklmnopqrstuvwxyz";
  int                V = arith_vocab_size(), ok = V == 4 + (int)strlen(want) && !v[TASK_PAD] && !v[TASK_BOS] && !v[TASK_SEP] && !v[TASK_EOS];

  for (int i = 4; i < V && ok; i++) ok = v[i] && strlen(v[i]) == 1 && v[i][0] == want[i - 4];
  test_report(ok, "vocabulary: PAD BOS SEP EOS without text, then one character each: digits, + - * = ? . , space, a-z", "size %d", V);
}

/* Another seed gives other prompts; the same seed through task_prompt (the
 * -task dispatch) gives the same. */
static void check_seed(ArithTask t)
{
  ArithTask   u  = t;
  BuiltinTask bt = {.kind = TASK_KIND_ARITH, .arith = t};
  int        *a = malloc(sizeof(int) * (size_t)arith_max_prompt(&t)), *b = malloc(sizeof(int) * (size_t)arith_max_prompt(&t));
  int         differ = 0, same = 1;
  char        ans[32], ans2[32];

  u.seed = t.seed + 1;
  for (int i = 0; i < 200; i++) {
    int na = arith_prompt(&t, TASK_SPLIT_TRAIN, (uint64_t)i, a), nb = arith_prompt(&u, TASK_SPLIT_TRAIN, (uint64_t)i, b);
    differ += na != nb || memcmp(a, b, sizeof(int) * (size_t)na);
    nb = task_prompt(&bt, TASK_SPLIT_EVAL, (uint64_t)i, b);
    na = arith_prompt(&t, TASK_SPLIT_EVAL, (uint64_t)i, a);
    same &= na == nb && !memcmp(a, b, sizeof(int) * (size_t)na) && task_answer(&bt, TASK_SPLIT_EVAL, (uint64_t)i, ans, sizeof ans) == arith_answer(&t, TASK_SPLIT_EVAL, (uint64_t)i, ans2, sizeof ans2) && !strcmp(ans, ans2);
  }
  test_measure(differ >= 180, "-arith_seed changes the prompts", "%d of 200 differ", differ);
  test_report(same && task_max_prompt(&bt) == arith_max_prompt(&t) && task_max_demo(&bt) == arith_max_demo(&t) && task_vocab_size(&bt) == arith_vocab_size() && !strcmp(task_name(&bt), "arith"),
              "-task arith: task_prompt, task_answer and the bounds are the arithmetic task's", NULL);
  free(a);
  free(b);
}

/* arith_answer into a short buffer: cut, NUL-terminated, the full length returned. */
static void check_answer_cap(ArithTask t)
{
  char full[32], cut[3] = {'x', 'x', 'x'};
  int  i = 0, n = 0;
  for (; i < 1000 && (n = arith_answer(&t, TASK_SPLIT_TRAIN, (uint64_t)i, full, sizeof full)) < 4; i++) {}
  test_report(n >= 4 && arith_answer(&t, TASK_SPLIT_TRAIN, (uint64_t)i, cut, sizeof cut) == n && cut[2] == 0 && !strncmp(cut, full, 2), "arith_answer into a short buffer: cut and NUL-terminated, full length returned", "answer \"%s\"", full);
}

/* ---- options and checks ----------------------------------------------------- */
static PetscErrorCode expect_check(ArithTask t, int vocab, int npos, const char *want, const char *name)
{
  PetscErrorCode ierr;
  char           msg[TEST_MESSAGE_MAX] = "";

  PetscFunctionBegin;
  PetscCall(PetscPushErrorHandler(test_capture_error, msg));
  ierr = arith_check(&t, vocab, npos, "actor_");
  PetscCall(PetscPopErrorHandler());
  if (want) test_measure(ierr != 0 && strstr(msg, want), name, "error %d, message \"%s\"", (int)ierr, msg);
  else test_report(ierr == 0, name, "error %d, message \"%s\"", (int)ierr, msg);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_options(void)
{
  ArithTask t, base = {.max_operand = 20, .ops = "+-", .words = PETSC_FALSE, .demo_noise = 0, .seed = 2024}, x;

  PetscFunctionBegin;
  PetscCall(arith_set_from_options(&t));
  test_report(t.max_operand == 20 && !strcmp(t.ops, "+-") && !t.words && t.demo_noise == 0 && t.seed == 2024, "options: defaults max_operand 20, ops +-, bare, no noise, seed 2024", "max %" PetscInt_FMT " ops %s words %d noise %g seed %" PetscInt_FMT, t.max_operand, t.ops, (int)t.words, (double)t.demo_noise, t.seed);
  PetscCall(PetscOptionsSetValue(NULL, "-arith_max_operand", "99"));
  PetscCall(PetscOptionsSetValue(NULL, "-arith_ops", "*+"));
  PetscCall(PetscOptionsSetValue(NULL, "-arith_words", "true"));
  PetscCall(PetscOptionsSetValue(NULL, "-arith_demo_noise", "0.25"));
  PetscCall(PetscOptionsSetValue(NULL, "-arith_seed", "7"));
  PetscCall(arith_set_from_options(&t));
  for (const char *const *o = (const char *const[]){"-arith_max_operand", "-arith_ops", "-arith_words", "-arith_demo_noise", "-arith_seed", NULL}; *o; o++) PetscCall(PetscOptionsClearValue(NULL, *o));
  test_report(t.max_operand == 99 && !strcmp(t.ops, "*+") && t.words && t.demo_noise == 0.25 && t.seed == 7, "options: -arith_max_operand, -arith_ops, -arith_words, -arith_demo_noise, -arith_seed are read", "max %" PetscInt_FMT " ops %s words %d noise %g seed %" PetscInt_FMT, t.max_operand, t.ops, (int)t.words, (double)t.demo_noise, t.seed);

  PetscCall(expect_check(base, 48, 64, NULL, "check: the defaults fit a 48-token, 64-position model"));
  x       = base, x.words = PETSC_TRUE;
  PetscCall(PetscStrncpy(x.ops, "+-*", sizeof x.ops));
  PetscCall(expect_check(x, 48, 64, NULL, "check: word problems of all three operations fit 64 positions"));
  x = base, x.max_operand = 0;
  PetscCall(expect_check(x, 48, 64, "-arith_max_operand 0 must be at least 1", "check: max_operand 0 refused"));
  x = base, x.max_operand = 46341;
  PetscCall(PetscStrncpy(x.ops, "*", sizeof x.ops));
  PetscCall(expect_check(x, 48, 64, "-arith_max_operand 46341 is too large", "check: a product beyond int32 refused"));
  x = base, x.max_operand = 46341;
  PetscCall(expect_check(x, 48, 64, NULL, "check: the same operand without '*' accepted"));
  x = base, x.max_operand = 1073741824;
  PetscCall(expect_check(x, 48, 64, "-arith_max_operand 1073741824 is too large", "check: a sum beyond int32 refused"));
  x = base, x.ops[0] = 0;
  PetscCall(expect_check(x, 48, 64, "-arith_ops is empty", "check: empty ops refused"));
  x = base;
  PetscCall(PetscStrncpy(x.ops, "+/", sizeof x.ops));
  PetscCall(expect_check(x, 48, 64, "-arith_ops +/: '/' is not one of", "check: an unknown operation refused"));
  x = base;
  PetscCall(PetscStrncpy(x.ops, "+-+", sizeof x.ops));
  PetscCall(expect_check(x, 48, 64, "-arith_ops +-+ names '+' twice", "check: an operation named twice refused"));
  x = base, x.demo_noise = 1.5;
  PetscCall(expect_check(x, 48, 64, "-arith_demo_noise 1.5 must be in [0,1]", "check: noise outside [0,1] refused"));
  PetscCall(expect_check(base, 47, 64, "needs a vocabulary of 48 tokens, but -actor_vocab_size is 47", "check: a vocabulary too small refused, naming -<prefix>vocab_size"));
  PetscCall(expect_check(base, 48, arith_max_demo(&base) - 1, "-actor_n_positions", "check: a context one short of arith_max_demo refused, naming -<prefix>n_positions"));
  PetscCall(expect_check(base, 48, arith_max_demo(&base), NULL, "check: a context of exactly arith_max_demo accepted"));
  x = base, x.max_operand = 1;
  PetscCall(PetscStrncpy(x.ops, "+-*", sizeof x.ops));
  PetscCall(expect_check(x, 48, 64, "gives 12 distinct questions, too few", "check: too few distinct questions for a held-out split refused"));
  x = base, x.max_operand = 1, x.words = PETSC_TRUE;
  PetscCall(expect_check(x, 48, 64, NULL, "check: word problems with operands 0-1 have questions enough"));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -arith_tool_demos: a share `p` of the demonstrations are episodes with
 * the built-in calculator: the prompt, the model's call "A op B=" (A, B and
 * op the question's), the calculator's answer to that call as env_calc
 * gives it (source environment), the answer and EOS (source model); the
 * others are as without the option; every length within arith_max_demo. */
static void check_tool_demos(ArithTask t, double p, double lo, double hi)
{
  ArithTask      none = t;
  int            maxd, ok = 1, tools = 0, *tok, *plain;
  unsigned char *src;
  char           name[768], detail[384] = "";
  Env           *calc;

  t.tool_demos = p, none.tool_demos = 0;
  maxd  = arith_max_demo(&t);
  tok   = malloc(sizeof(int) * (size_t)maxd), plain = malloc(sizeof(int) * (size_t)maxd);
  src   = malloc((size_t)maxd);
  if (arith_max_demo(&t) < arith_max_demo(&none)) ok = 0, snprintf(detail, sizeof detail, "arith_max_demo shrank");
  (void)env_calc_create(1, &calc);
  for (int i = 0; i < N_DRAWS && ok; i++) {
    int        P, Q, n = arith_demo_src(&t, TASK_SPLIT_TRAIN, (uint64_t)i, tok, &P, src), m = arith_demo_src(&none, TASK_SPLIT_TRAIN, (uint64_t)i, plain, &Q, NULL);
    int        e0 = P, e1, call;
    char       text[TEXT_MAX], want[TEXT_MAX];
    EnvAnswer  ans;
    EnvRequest req = {0};

    if (n > maxd) { ok = 0, snprintf(detail, sizeof detail, "demonstration %d has %d tokens, arith_max_demo %d", i, n, maxd); break; }
    while (e0 < n && src[e0] == GEN_SRC_MODEL) e0++;
    if (e0 == n) { /* no call: the demonstration without the option, all the model's after the prompt */
      if (n != m || memcmp(tok, plain, sizeof(int) * (size_t)n)) ok = 0, snprintf(detail, sizeof detail, "demonstration %d without a call differs from the option's absence", i);
      continue;
    }
    tools++;
    for (e1 = e0; e1 < n && src[e1] == GEN_SRC_ENV; e1++);
    call = e0 - P;
    req = (EnvRequest){.index = 0, .turn = 1, .ids = tok + P, .n = call};
    (void)calc->ops->submit(calc, &req);
    (void)calc->ops->collect(calc, 0, &ans);
    /* the call is the question's expression: the prompt's text without BOS and SEP, words aside */
    if (!decode(tok + P, call, text, detail, sizeof detail)) { ok = 0; break; }
    if (!t.words && (!decode_prompt(tok, P, want, detail, sizeof detail) || strcmp(text, want))) {
      ok = 0, snprintf(detail, sizeof detail, "demonstration %d calls \"%.60s\" for the question \"%.60s\"", i, text, want);
      break;
    }
    for (int k = 0; k < P; k++) ok &= src[k] == GEN_SRC_PROMPT;
    for (int k = e1; k < n; k++) ok &= src[k] == GEN_SRC_MODEL;
    ok &= ans.n == e1 - e0 && !memcmp(ans.ids, tok + e0, sizeof(int) * (size_t)ans.n);
    /* then the plain demonstration's answer and EOS */
    ok &= n - e1 == m - Q && !memcmp(tok + e1, plain + Q, sizeof(int) * (size_t)(m - Q));
    if (!ok) snprintf(detail, sizeof detail, "demonstration %d: sources, the calculator's answer (%d tokens here, %d from env_calc) or the answer after it wrong", i, e1 - e0, ans.n);
  }
  (void)env_destroy(&calc);
  snprintf(name, sizeof name, "-arith_tool_demos %.1f (%s%s): each call is the question's, answered as env_calc answers it (source environment), then the answer; the rest unchanged",
           p, t.words ? "words " : "", t.ops);
  test_measure((PetscBool)(ok && tools >= lo * N_DRAWS && tools <= hi * N_DRAWS), name, "%s%s%d of %d demonstrations call it", detail, detail[0] ? "; " : "", tools, N_DRAWS);
  free(tok), free(plain), free(src);
}

int main(int argc, char **argv)
{
  const Config configs[] = {
    {"bare +- to 20 (defaults)", {.max_operand = 20, .ops = "+-", .seed = 2024}, 400},
    {"bare +-* to 999", {.max_operand = 999, .ops = "+-*", .seed = 2024}, 1990},
    {"bare + to 7 (64 questions)", {.max_operand = 7, .ops = "+", .seed = 2024}, 40},
    {"words +-* to 20", {.max_operand = 20, .ops = "+-*", .words = PETSC_TRUE, .seed = 2024}, 1900},
    {"words -* to 1", {.max_operand = 1, .ops = "*-", .words = PETSC_TRUE, .seed = 11}, 300},
    {"words + to 46340", {.max_operand = 46340, .ops = "+", .words = PETSC_TRUE, .seed = 5}, 1990},
  };

  if (PetscInitialize(&argc, &argv, NULL, "Tests of the built-in arithmetic task (src/task/arith.c).\n")) return 1;
  check_vocab();
  if (check_options()) return 1;
  for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) check_config(&configs[k]);
  check_noise(configs[1].t, 1.0, 0.85, 0.95);
  check_noise(configs[3].t, 0.3, 0.22, 0.32);
  check_noise(configs[3].t, 1.0, 0.85, 0.95);
  check_seed(configs[0].t);
  check_seed(configs[3].t);
  check_answer_cap(configs[1].t);
  check_tool_demos(configs[1].t, 1.0, 1.0, 1.0);
  check_tool_demos(configs[1].t, 0.3, 0.25, 0.35);
  check_tool_demos(configs[3].t, 0.5, 0.45, 0.55);
  PetscFinalize();
  return test_tally();
}
