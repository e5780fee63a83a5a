/* The built-in arithmetic task: questions with exact answers, for RL with
 * verifiable rewards without a tokenizer or Python. Like the sort task, every
 * draw is keyed by (task seed, split, sample, purpose), so a question is the
 * same wherever and whenever it is generated, and held-out questions are kept
 * apart from training ones by a hash of their content.
 *
 * Vocabulary (ARITH_VOCAB = 48 tokens): 0 PAD, 1 BOS, 2 SEP, 3 EOS (no text),
 * then one token per character: 4-13 the digits '0'-'9', 14 '+', 15 '-',
 * 16 '*', 17 '=', 18 '?', 19 '.', 20 ',', 21 ' ', 22-47 the letters 'a'-'z'.
 *
 * A question: the operation is drawn uniformly from -arith_ops, the operands
 * a and b independently and uniformly from [0, max_operand].
 *  - Bare (the default): "a+b=", "a-b=", "a*b=" with both operands as drawn,
 *    so a-b may be negative; its answer then carries the sign ("3-7=" ->
 *    "-4"), which is part of the answer's text (the reward rules compare
 *    numbers, so a response "-4" is right).
 *  - Words (-arith_words): one of three templates per operation (below), with
 *    a name, an object and, for products, a container drawn. Nobody gives
 *    away more than they have: for '-' the operands are swapped when a < b,
 *    so word answers are never negative. An object or container after the
 *    number 1 is singular ("1 apple", "1 box"), after any other plural.
 * The ideal response is the answer's characters then EOS; -arith_demo_noise
 * replaces each answer digit (never the sign) of a demonstration with a
 * random digit with that probability, drawn on a stream apart from the
 * question's (as the sort task's demonstrations).
 *
 * Bounds: arith_max_prompt is the longest question the options allow plus
 * BOS and SEP: bare, two operands of max_operand's digits; words, every
 * template of the drawn operations rendered with max_operand twice, the
 * longest name and container and each object in the plural (all reachable,
 * so the bound is attained). arith_max_demo adds, per operation, the longest
 * answer (a+b: digits of 2 max; a-b: '-' and max's digits bare, max's digits
 * with words; a*b: digits of max^2), BOS, SEP and EOS, and takes the
 * largest: an upper bound, reached unless bare subtraction sets it with
 * max_operand 10-19, 100-199, ... (where "-max" needs a shorter a). With the
 * defaults (max_operand 20) and all three operations a word demonstration
 * takes at most 62 tokens, so it fits 64 positions.
 *
 * max_operand is at most 46340 when '*' is drawn (46340^2 < 2^31) and at
 * most 2^30 - 1 otherwise, so every answer fits an int32 (and the operand
 * draw's range a uint32). */
#include "task.h"
#include <inttypes.h>
#include <string.h>

/* Purposes, the third key component of every draw (+ ARITH_PURPOSES *
 * attempt). The noise has a stream of its own (another seed). */
enum {
  DRAW_OP        = 0,
  DRAW_A         = 1,
  DRAW_B         = 2,
  DRAW_TEMPLATE  = 3,
  DRAW_NAME      = 4,
  DRAW_OBJECT    = 5,
  DRAW_CONTAINER = 6,
  DRAW_NOISE     = 7,
  DRAW_TOOL      = 8 /* on the demonstrations' stream, as DRAW_NOISE */
};
#define ARITH_PURPOSES 8u

#define ARITH_VOCAB        48
#define ARITH_FIRST_CHAR   TASK_FIRST_SYMBOL
#define ARITH_TEXT_MAX     192 /* a question's characters: the longest template is 50 plus two 20-digit numbers */
#define ARITH_EVAL_SHARE   8   /* 1 question in 8 is held out */
#define ARITH_MAX_ATTEMPTS 100000
#define ARITH_MAX_MUL      46340      /* 46340^2 <= INT32_MAX */
#define ARITH_MAX_ADD      1073741823 /* 2 * (2^30 - 1) <= INT32_MAX */
#define ARITH_MIN_SPACE    64.0       /* distinct questions needed to hold some out, as the sort task */
#define ARITH_ENUMERATE    65536.0    /* bare spaces up to this size are enumerated to prove both splits exist */

static const char ARITH_OPS[] = "+-*";

static const char *const arith_vocab_table[ARITH_VOCAB] = {
  NULL, NULL, NULL, NULL,                                         /* PAD BOS SEP EOS */
  "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",              /* 4-13 */
  "+", "-", "*", "=", "?", ".", ",", " ",                         /* 14-21 */
  "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", /* 22-34 */
  "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", /* 35-47 */
};

/* Word templates, ARITH_TEMPLATES per operation in ARITH_OPS's order.
 * %n name, %a %b the operands, %A %B the object agreeing with a / b, %o the
 * object (plural), %C the container agreeing with a. Every '+' template says
 * "more", every '-' one "left", every '*' one "each" or "of" (and no other
 * of these words), so a reader can tell the operation. */
#define ARITH_TEMPLATES 3
static const char *const arith_templates[3][ARITH_TEMPLATES] = {
  { "%n has %a %A and gets %b more. how many?", "%n had %a %A, then found %b more. how many %o?",
    "the box has %a %A. %n adds %b more. how many?" },
  { "%n has %a %A and gives away %b. how many left?", "%n had %a %A and lost %b. how many are left?",
    "the box has %a %A. %n takes %b. how many left?" },
  { "%a %C of %b %B. how many %o?", "%n has %a %C with %b %B each. how many %o?",
    "%n buys %a %C, each with %b %B. how many?" },
};
static const char *const arith_names[]          = {"ann", "bob", "eve", "sam", "tom", "zoe", "kim", "raj"};
static const char *const arith_objects[][2]     = { { "apple", "apples" }, { "pen", "pens" },   { "egg", "eggs" },
                                                    { "book", "books" },   { "coin", "coins" }, { "cookie", "cookies" },
                                                    { "shell", "shells" }, { "card", "cards" } };
static const char *const arith_containers[][2]  = {
   { "box", "boxes" }, { "bag", "bags" }, { "jar", "jars" }, { "pack", "packs" }
};
#define ARITH_NAMES      ((int)(sizeof arith_names / sizeof arith_names[0]))
#define ARITH_OBJECTS    ((int)(sizeof arith_objects / sizeof arith_objects[0]))
#define ARITH_CONTAINERS ((int)(sizeof arith_containers / sizeof arith_containers[0]))

/* One drawn question. */
typedef struct {
  int64_t a, b;
  int     op;                              /* index into ARITH_OPS */
  int     tmpl, name, object, container;   /* words only */
} ArithProblem;

PetscErrorCode arith_set_from_options(ArithTask *t)
{
  PetscFunctionBegin;
  PetscCall(PetscStrncpy(t->ops, "+-", sizeof t->ops));
  PetscOptionsBegin(PETSC_COMM_WORLD, "arith_", "Built-in arithmetic task (-task arith)", NULL);
  RfOptInt("-max_operand",
           "Largest operand: operands are drawn uniformly from [0, max_operand] (at most 46340 with '*', answers fit "
           "int32)",
           20, &t->max_operand);
  RfOptString("-ops",
              "Operations drawn uniformly, a subset of +-* (e.g. +-*; a value starting with - is read as an option, so "
              "write +- not -+)",
              t->ops, sizeof t->ops);
  RfOptBool("-words",
            "Word problems (\"ann has 12 apples and gets 7 more. how many?\") instead of bare equations (\"12+7=\")",
            PETSC_FALSE, &t->words);
  RfOptReal("-demo_noise", "Probability that a demonstration's answer digit is replaced by a random digit", 0.0,
            &t->demo_noise);
  RfOptReal("-tool_demos",
            "Probability that a demonstration calls the built-in calculator (-env calc) before it answers: the call "
            "\"A op B=\", the calculator's \"V,\" (not trained on), then the answer",
            0.0, &t->tool_demos);
  RfOptInt("-seed", "Seed of the arithmetic questions (independent of -seed)", 2024, &t->seed);
  PetscOptionsEnd();
  PetscFunctionReturn(PETSC_SUCCESS);
}

int arith_vocab_size(void)
{
  return ARITH_VOCAB;
}

const char *const *arith_vocab(void)
{
  return arith_vocab_table;
}

/* The token of a question or answer character (every character the
 * templates and numbers use is in the vocabulary). */
static int arith_token(char c)
{
  const char *p;
  if (c >= '0' && c <= '9') return ARITH_FIRST_CHAR + (c - '0');
  if (c >= 'a' && c <= 'z') return ARITH_FIRST_CHAR + 18 + (c - 'a');
  p = strchr("+-*=?., ", c);
  return p && c ? ARITH_FIRST_CHAR + 10 + (int)(p - "+-*=?., ") : TASK_PAD;
}

/* max_operand as the bounds and draws use it: a task that passed
 * arith_check is unchanged; others are clamped so nothing overflows. */
static int64_t arith_max(const ArithTask *t)
{
  if (t->max_operand < 0) return 0;
  return t->max_operand > ARITH_MAX_ADD ? ARITH_MAX_ADD : (int64_t)t->max_operand;
}

/* The operation index of ops[k], 0 ('+') for a character outside "+-*". */
static int arith_op_index(char c)
{
  const char *p = c ? strchr(ARITH_OPS, c) : NULL;
  return p ? (int)(p - ARITH_OPS) : 0;
}

static int arith_nops(const ArithTask *t)
{
  return (int)strnlen(t->ops, sizeof t->ops);
}

static int64_t arith_value(const ArithProblem *p)
{
  return p->op == 0 ? p->a + p->b : p->op == 1 ? p->a - p->b : p->a * p->b;
}

static int arith_put(char *out, int n, const char *s)
{
  size_t len = strlen(s);
  memcpy(out + n, s, len);
  return n + (int)len;
}

static int arith_put_number(char *out, int n, int64_t v)
{
  return n + snprintf(out + n, 24, "%" PRId64, v);
}

/* The question's text into out (ARITH_TEXT_MAX bytes, NUL-terminated);
 * returns its length. plural: every object and container in the plural
 * (the bounds, which must not depend on whether max_operand is 1). */
static int arith_render(const ArithTask *t, const ArithProblem *p, PetscBool plural, char *out)
{
  int n = 0;

  if (!t->words) {
    n = arith_put_number(out, n, p->a);
    out[n++] = ARITH_OPS[p->op];
    n = arith_put_number(out, n, p->b);
    out[n++] = '=';
    out[n]   = 0;
    return n;
  }
  /* a placeholder adds at most 20 characters (a number), so the room kept
   * below is never overrun; templates are far shorter than ARITH_TEXT_MAX */
  for (const char *s = arith_templates[p->op][p->tmpl]; *s && n < ARITH_TEXT_MAX - 24; s++) {
    if (*s != '%') {
      out[n++] = *s;
      continue;
    }
    switch (*++s) {
    case 'n': n = arith_put(out, n, arith_names[p->name]); break;
    case 'a': n = arith_put_number(out, n, p->a); break;
    case 'b': n = arith_put_number(out, n, p->b); break;
    case 'A': n = arith_put(out, n, arith_objects[p->object][plural || p->a != 1]); break;
    case 'B': n = arith_put(out, n, arith_objects[p->object][plural || p->b != 1]); break;
    case 'o': n = arith_put(out, n, arith_objects[p->object][1]); break;
    case 'C': n = arith_put(out, n, arith_containers[p->container][plural || p->a != 1]); break;
    default: s--; break; /* no template has another '%' */
    }
  }
  out[n] = 0;
  return n;
}

/* A uniform draw in [0, n) from 32 random bits (multiply-shift). */
static uint32_t arith_below(uint32_t r, uint64_t n)
{
  return (uint32_t)(((uint64_t)r * n) >> 32);
}

static void arith_draw(const ArithTask *t, TaskSplit split, uint64_t index, uint32_t attempt, ArithProblem *p)
{
  const uint64_t seed  = (uint64_t)t->seed;
  const uint32_t s     = (uint32_t)split, i = (uint32_t)index, c = ARITH_PURPOSES * attempt;
  const uint64_t range = (uint64_t)arith_max(t) + 1;
  const int      nops  = arith_nops(t);

  memset(p, 0, sizeof *p);
  p->op = nops ? arith_op_index(t->ops[arith_below(rng_u32(seed, s, i, DRAW_OP + c, 0), (uint64_t)nops)]) : 0;
  p->a  = arith_below(rng_u32(seed, s, i, DRAW_A + c, 0), range);
  p->b  = arith_below(rng_u32(seed, s, i, DRAW_B + c, 0), range);
  if (!t->words) return;
  p->tmpl      = (int)arith_below(rng_u32(seed, s, i, DRAW_TEMPLATE + c, 0), ARITH_TEMPLATES);
  p->name      = (int)arith_below(rng_u32(seed, s, i, DRAW_NAME + c, 0), ARITH_NAMES);
  p->object    = (int)arith_below(rng_u32(seed, s, i, DRAW_OBJECT + c, 0), ARITH_OBJECTS);
  p->container = (int)arith_below(rng_u32(seed, s, i, DRAW_CONTAINER + c, 0), ARITH_CONTAINERS);
  if (p->op == 1 && p->a < p->b) {
    int64_t x = p->a;
    p->a      = p->b;
    p->b      = x;
  }
}

/* Held-out questions are kept apart by content, as the sort task's: a
 * question belongs to the eval split iff a hash of its text (keyed by the
 * task seed) is 0 mod ARITH_EVAL_SHARE. */
static TaskSplit arith_split_of(const ArithTask *t, const char *text, int n)
{
  uint64_t h = (uint64_t)t->seed * 0x9e3779b97f4a7c15ull + (uint64_t)n;
  for (int i = 0; i < n; i++) {
    h ^= (uint64_t)(unsigned char)text[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h % ARITH_EVAL_SHARE == 0 ? TASK_SPLIT_EVAL : TASK_SPLIT_TRAIN;
}

/* Question `index` of a split: redrawn (attempt 1, 2, ...) until its text
 * belongs to the split (arith_check makes sure both splits exist). */
static int arith_question(const ArithTask *t, TaskSplit split, uint64_t index, ArithProblem *p, char *text)
{
  int n = 0;
  for (uint32_t a = 0; a < ARITH_MAX_ATTEMPTS; a++) {
    arith_draw(t, split, index, a, p);
    n = arith_render(t, p, PETSC_FALSE, text);
    if (arith_split_of(t, text, n) == split) break;
  }
  return n;
}

static int arith_prompt_from(const char *text, int n, int *tok)
{
  tok[0] = TASK_BOS;
  for (int i = 0; i < n; i++) tok[1 + i] = arith_token(text[i]);
  tok[n + 1] = TASK_SEP;
  return n + 2;
}

int arith_prompt(const ArithTask *t, TaskSplit split, uint64_t index, int *tok)
{
  ArithProblem p;
  char         text[ARITH_TEXT_MAX];
  int          n = arith_question(t, split, index, &p, text);
  return arith_prompt_from(text, n, tok);
}

/* Appends text's characters to tok at n, marked source s. */
static int arith_append(const char *text, int n, int *tok, unsigned char *src, unsigned char s)
{
  for (const char *c = text; *c; c++) {
    if (src) src[n] = s;
    tok[n++] = arith_token(*c);
  }
  return n;
}

int arith_demo_src(const ArithTask *t, TaskSplit split, uint64_t index, int *tok, int *prompt_len, unsigned char *src)
{
  ArithProblem   p;
  char           text[ARITH_TEXT_MAX], answer[24];
  const uint64_t seed = (uint64_t)t->seed ^ 0x9e3779b97f4a7c15ull; /* a stream apart from the question's */
  int            n    = arith_prompt_from(text, arith_question(t, split, index, &p, text), tok);
  int            m    = snprintf(answer, sizeof answer, "%" PRId64, arith_value(&p));

  *prompt_len = n;
  if (src) memset(src, GEN_SRC_PROMPT, (size_t)n);
  if (t->tool_demos > 0 && rng_uniform(seed, (uint32_t)split, (uint32_t)index, DRAW_TOOL, 0) < t->tool_demos) {
    char call[64], value[32];
    snprintf(call, sizeof call, "%" PRId64 "%c%" PRId64 "=", p.a, ARITH_OPS[p.op], p.b);
    snprintf(value, sizeof value, "%s,", answer);
    n = arith_append(call, n, tok, src, GEN_SRC_MODEL);
    n = arith_append(value, n, tok, src, GEN_SRC_ENV);
  }
  for (int j = 0; j < m; j++) {
    char ch = answer[j];
    if (ch >= '0' && ch <= '9' && t->demo_noise > 0 &&
        rng_uniform(seed, (uint32_t)split, (uint32_t)index, DRAW_NOISE, 2u * (uint32_t)j) < t->demo_noise)
      ch = (char)('0' +
                  arith_below(rng_u32(seed, (uint32_t)split, (uint32_t)index, DRAW_NOISE, 2u * (uint32_t)j + 1), 10));
    if (src) src[n] = GEN_SRC_MODEL;
    tok[n++] = arith_token(ch);
  }
  if (src) src[n] = GEN_SRC_MODEL;
  tok[n++] = TASK_EOS;
  return n;
}

int arith_question_text(const ArithTask *t, TaskSplit split, uint64_t index, char *out, size_t cap)
{
  ArithProblem p;
  char         text[ARITH_TEXT_MAX];
  int          n = arith_question(t, split, index, &p, text);

  return snprintf(out, cap, "%.*s", n, text);
}

int arith_answer(const ArithTask *t, TaskSplit split, uint64_t index, char *out, size_t cap)
{
  ArithProblem p;
  char         text[ARITH_TEXT_MAX];

  (void)arith_question(t, split, index, &p, text);
  return snprintf(out, cap, "%" PRId64, arith_value(&p));
}

/* ---- bounds ------------------------------------------------------------------- */
static int arith_digits(int64_t v)
{
  char s[24];
  return snprintf(s, sizeof s, "%" PRId64, v);
}

static int arith_longest(const char *const *s, int n, int stride)
{
  int best = 0;
  for (int i = 0; i < n; i++) {
    int len = (int)strlen(s[i * stride]);
    best    = len > best ? len : best;
  }
  return best;
}

/* Longest question text of operation op. */
static int arith_max_question(const ArithTask *t, int op)
{
  ArithProblem p = {.a = arith_max(t), .b = arith_max(t), .op = op};
  char         text[ARITH_TEXT_MAX];
  int          best = 0, lname = arith_longest(arith_names, ARITH_NAMES, 1),
      lcont = arith_longest(&arith_containers[0][1], ARITH_CONTAINERS, 2);

  if (!t->words) return arith_render(t, &p, PETSC_TRUE, text);
  for (int k = 0; k < ARITH_NAMES; k++)
    if ((int)strlen(arith_names[k]) == lname) p.name = k;
  for (int k = 0; k < ARITH_CONTAINERS; k++)
    if ((int)strlen(arith_containers[k][1]) == lcont) p.container = k;
  for (p.tmpl = 0; p.tmpl < ARITH_TEMPLATES; p.tmpl++)
    for (p.object = 0; p.object < ARITH_OBJECTS; p.object++) {
      int n = arith_render(t, &p, PETSC_TRUE, text);
      best  = n > best ? n : best;
    }
  return best;
}

/* Longest answer text of operation op. */
static int arith_max_answer(const ArithTask *t, int op)
{
  int64_t m = arith_max(t);
  if (op == 0) return arith_digits(2 * m);
  if (op == 1) return arith_digits(t->words ? m : -m);
  return arith_digits(m * m); /* m <= 2^30: no overflow */
}

int arith_max_prompt(const ArithTask *t)
{
  int best = 0, nops = arith_nops(t);
  for (int k = 0; k < nops || (k == 0 && nops == 0); k++) {
    int n = arith_max_question(t, arith_op_index(nops ? t->ops[k] : '+'));
    best  = n > best ? n : best;
  }
  return best + 2;
}

int arith_max_demo(const ArithTask *t)
{
  int best = 0, nops = arith_nops(t);
  for (int k = 0; k < nops || (k == 0 && nops == 0); k++) {
    int op = arith_op_index(nops ? t->ops[k] : '+'), n = arith_max_question(t, op) + arith_max_answer(t, op);
    if (t->tool_demos > 0) /* the call "A op B=" and the calculator's "V," before the answer */
      n += 2 * arith_digits(arith_max(t)) + 2 + arith_max_answer(t, op) + 1;
    best   = n > best ? n : best;
  }
  return best + 3; /* BOS, SEP, EOS */
}

/* ---- checks ------------------------------------------------------------------- */
/* Number of distinct questions the options allow (stops counting past 1e12). */
static double arith_space(const ArithTask *t)
{
  double m = (double)arith_max(t) + 1, total = 0;
  for (int k = 0; k < arith_nops(t); k++) {
    int    op    = arith_op_index(t->ops[k]);
    double pairs = t->words && op == 1 ? m * (m + 1) / 2 : m * m; /* words: a >= b */
    if (!t->words) {
      total += pairs;
      continue;
    }
    for (int j = 0; j < ARITH_TEMPLATES; j++) {
      const char *s = arith_templates[op][j];
      total += pairs * ARITH_OBJECTS * (strstr(s, "%n") ? ARITH_NAMES : 1) * (strstr(s, "%C") ? ARITH_CONTAINERS : 1);
    }
  }
  return total < 1e12 ? total : 1e12;
}

/* Bare questions of a small space, all of them: how many are held out. */
static void arith_count_splits(const ArithTask *t, int *train, int *eval)
{
  ArithProblem p = {0};
  char         text[ARITH_TEXT_MAX];
  int64_t      m = arith_max(t);

  *train = *eval = 0;
  for (int k = 0; k < arith_nops(t); k++)
    for (p.op = arith_op_index(t->ops[k]), p.a = 0; p.a <= m; p.a++)
      for (p.b = 0; p.b <= m; p.b++) {
        int n = arith_render(t, &p, PETSC_FALSE, text);
        if (arith_split_of(t, text, n) == TASK_SPLIT_EVAL) (*eval)++;
        else (*train)++;
      }
}

PetscErrorCode arith_check(const ArithTask *t, int vocab_size, int n_positions, const char *prefix)
{
  int    nops = arith_nops(t), mul = 0;
  double space;

  PetscFunctionBegin;
  PetscCheck(nops > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-arith_ops is empty: give a subset of +-* (not starting with -, which reads as an option: +- not -+)");
  for (int k = 0; k < nops; k++) {
    PetscCheck(strchr(ARITH_OPS, t->ops[k]), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-arith_ops %s: '%c' is not one of the operations +-*", t->ops, t->ops[k]);
    PetscCheck(!memchr(t->ops, t->ops[k], (size_t)k), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-arith_ops %s names '%c' twice (each operation at most once)", t->ops, t->ops[k]);
    mul |= t->ops[k] == '*';
  }
  PetscCheck(t->max_operand >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-arith_max_operand %" PetscInt_FMT " must be at least 1", t->max_operand);
  PetscCheck(t->max_operand <= (mul ? ARITH_MAX_MUL : ARITH_MAX_ADD), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-arith_max_operand %" PetscInt_FMT
             " is too large: answers must fit a 32-bit integer, so at most %d with -arith_ops %s",
             t->max_operand, mul ? ARITH_MAX_MUL : ARITH_MAX_ADD, t->ops);
  PetscCheck(t->demo_noise >= 0 && t->demo_noise <= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-arith_demo_noise %g must be in [0,1]", (double)t->demo_noise);
  PetscCheck(t->tool_demos >= 0 && t->tool_demos <= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-arith_tool_demos %g must be in [0,1]", (double)t->tool_demos);
  PetscCheck(ARITH_VOCAB <= vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "the arithmetic task (-task arith) needs a vocabulary of %d tokens, but -%svocab_size is %d", ARITH_VOCAB,
             prefix, vocab_size);
  PetscCheck(arith_max_demo(t) <= n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-arith_max_operand %" PetscInt_FMT
             " with -arith_ops %s%s needs %d positions (the longest demonstration), but -%sn_positions is %d",
             t->max_operand, t->ops, t->words ? " and -arith_words" : "", arith_max_demo(t), prefix, n_positions);
  space = arith_space(t);
  PetscCheck(space >= ARITH_MIN_SPACE, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-arith_max_operand %" PetscInt_FMT " with -arith_ops %s gives %.0f distinct questions, too few to keep "
                                                 "held-out questions apart (at least %.0f)",
             t->max_operand, t->ops, space, ARITH_MIN_SPACE);
  if (!t->words && space <= ARITH_ENUMERATE) { /* larger spaces hold questions of both splits beyond doubt */
    int train, eval;
    arith_count_splits(t, &train, &eval);
    PetscCheck(train > 0 && eval > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-arith_max_operand %" PetscInt_FMT " with -arith_ops %s and -arith_seed %" PetscInt_FMT
               ": of its %.0f questions %d are held out and %d for training; both splits need some (change -arith_seed "
               "or raise -arith_max_operand)",
               t->max_operand, t->ops, t->seed, space, eval, train);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
