/* env/calc.c: the arithmetic task's built-in calculator, a tool a small
 * model can learn to call in seconds on a CPU (docs/environments.md, "The
 * built-in calculator"). It works in the task's character vocabulary
 * (src/task/arith.c: ids 4-13 the digits, 14 '+', 15 '-', 16 '*', 17 '=',
 * 18 '?', 20 ','): a model segment that ends with "A op B=" is a call, and
 * the answer is the value's characters and ',' ("12*34=" -> "408,"); any
 * other segment gets "?,". It never ends an episode (the model does, with
 * EOS) and gives no reward. Pure: the answer is a function of the segment,
 * computed at submission. */
#include "env.h"
#include "task.h"
#include <stdlib.h>

enum { CALC_DIGIT0 = TASK_FIRST_SYMBOL, CALC_PLUS = 14, CALC_MINUS = 15, CALC_TIMES = 16, CALC_EQ = 17,
       CALC_QUERY = 18, CALC_COMMA = 20 };
#define CALC_MAX_DIGITS 9 /* operands up to 999,999,999: a product fits int64 */
#define CALC_ANSWER_MAX 24

typedef struct {
  int       ids[CALC_ANSWER_MAX];
  int       n;
  PetscBool pending;
} CalcSlot;

/* The operand that ends just before position e of tok (exclusive): its
 * digits, an optional sign before them. Returns the start, -1 if none. */
static int operand_before(const int *tok, int e, int64_t *v)
{
  int s = e;
  while (s > 0 && e - s < CALC_MAX_DIGITS + 1 && tok[s - 1] >= CALC_DIGIT0 && tok[s - 1] <= CALC_DIGIT0 + 9) s--;
  if (s == e || e - s > CALC_MAX_DIGITS) return -1;
  *v = 0;
  for (int t = s; t < e; t++) *v = 10 * *v + (tok[t] - CALC_DIGIT0);
  return s;
}

/* The value of the call "A op B=" ending seg[0..n), into *v; false when
 * seg does not end with one. A leading '-' on A is its sign only where it
 * starts the segment or follows a non-operand. */
static PetscBool calc_value(const int *seg, int n, int64_t *v)
{
  int64_t a, b;
  int     sb, sa, op;

  if (n < 4 || seg[n - 1] != CALC_EQ) return PETSC_FALSE;
  if ((sb = operand_before(seg, n - 1, &b)) < 2) return PETSC_FALSE;
  op = seg[sb - 1];
  if (op != CALC_PLUS && op != CALC_MINUS && op != CALC_TIMES) return PETSC_FALSE;
  if ((sa = operand_before(seg, sb - 1, &a)) < 0) return PETSC_FALSE;
  if (sa > 0 && seg[sa - 1] == CALC_MINUS && (sa == 1 || seg[sa - 2] < CALC_DIGIT0 || seg[sa - 2] > CALC_DIGIT0 + 9))
    a = -a;
  *v = op == CALC_PLUS ? a + b : op == CALC_MINUS ? a - b : a * b;
  return PETSC_TRUE;
}

static void calc_answer(const int *seg, int n, CalcSlot *c)
{
  int64_t v;
  char    s[CALC_ANSWER_MAX];
  int     k;

  c->n = 0;
  if (!calc_value(seg, n, &v)) c->ids[c->n++] = CALC_QUERY;
  else {
    k = snprintf(s, sizeof s, "%lld", (long long)v);
    for (int i = 0; i < k; i++) c->ids[c->n++] = s[i] == '-' ? CALC_MINUS : CALC_DIGIT0 + (s[i] - '0');
  }
  c->ids[c->n++] = CALC_COMMA;
}

static PetscErrorCode calc_submit(Env *env, const EnvRequest *req)
{
  CalcSlot *c = (CalcSlot *)env->data + req->index;

  PetscFunctionBegin;
  PetscCheck(req->index >= 0 && req->index < env->nindex && !c->pending, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "environment calc: request index %d out of [0,%d) or already pending", req->index, env->nindex);
  if (req->turn == 0) c->n = 0; /* reset: nothing to say */
  else calc_answer(req->ids, req->n, c);
  c->pending = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode calc_collect(Env *env, int index, EnvAnswer *ans)
{
  CalcSlot *c = (CalcSlot *)env->data + index;

  PetscFunctionBegin;
  PetscCheck(index >= 0 && index < env->nindex && c->pending, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "environment calc: nothing was submitted for index %d", index);
  c->pending = PETSC_FALSE;
  *ans       = (EnvAnswer){c->ids, c->n, NULL, 0.0, PETSC_FALSE, 0.0};
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode calc_destroy(Env *env)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(env->data));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const EnvOps calc_ops = {calc_submit, calc_collect, calc_destroy};

PetscErrorCode env_calc_create(int nindex, Env **env)
{
  Env *e;

  PetscFunctionBegin;
  PetscCall(PetscNew(&e));
  e->ops    = &calc_ops;
  e->name   = "calc";
  e->vocab  = arith_vocab_size();
  e->nindex = nindex;
  PetscCall(PetscCalloc1(nindex > 0 ? nindex : 1, (CalcSlot **)&e->data));
  *env = e;
  PetscFunctionReturn(PETSC_SUCCESS);
}
