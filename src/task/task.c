/* The built-in sort task: prompts drawn from a seed, long-tailed lengths,
 * demonstrations with optional noise, and the programmatic judge that plays
 * the human. Every draw is keyed by (task seed, split, sample, purpose), so a
 * sample is the same wherever and whenever it is generated. */
#include "task.h"
#include <math.h>

/* Purposes, the third key component of every draw. */
enum { DRAW_LENGTH = 0, DRAW_SYMBOL = 1, DRAW_NOISE = 2 };

const char *const TaskKindNames[] = {"sort", "arith", "TaskKind", "TASK_KIND_", NULL};

PetscErrorCode task_set_from_options(BuiltinTask *task)
{
  PetscFunctionBegin;
  task->kind = TASK_KIND_SORT;
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Built-in task", NULL);
  RfOptEnum("-task",
            "The built-in task of 'builtin' data and prompts: sort (sort symbols; a judge scores responses) or arith "
            "(arithmetic questions with exact answers, -arith_*)",
            TaskKindNames, 2, &task->kind);
  PetscOptionsEnd();
  PetscCall(arith_set_from_options(&task->arith));
  PetscOptionsBegin(PETSC_COMM_WORLD, "task_", "Built-in sort task", NULL);
  RfOptInt("-symbols", "Number of distinct symbols (vocabulary needs symbols + 4 tokens)", 16, &task->n_symbols);
  RfOptInt("-len_min", "Fewest symbols in a prompt", 2, &task->len_min);
  RfOptReal("-len_median", "Median number of symbols (log-normal lengths)", 6.0, &task->len_median);
  RfOptReal("-len_sigma", "Log-normal shape of the prompt length: larger gives a longer tail", 0.5, &task->len_sigma);
  RfOptInt("-len_max", "Most symbols in a prompt (a sample takes 2*len_max+3 positions)", 12, &task->len_max);
  RfOptReal("-demo_noise", "Probability that a demonstration token is replaced by a random symbol", 0.0,
            &task->demo_noise);
  RfOptInt("-seed", "Seed of the task's prompts (independent of -seed)", 2024, &task->seed);
  PetscOptionsEnd();
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Number of distinct prompts the length range allows. */
static double task_prompt_space(const BuiltinTask *task)
{
  double n = 0;
  for (PetscInt L = task->len_min; L <= task->len_max && n < 1e9; L++) n += pow((double)task->n_symbols, (double)L);
  return n;
}

static PetscErrorCode sort_check(const BuiltinTask *task, int vocab_size, int n_positions, const char *prefix)
{
  PetscFunctionBegin;
  PetscCheck(task->n_symbols >= 2, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-task_symbols %" PetscInt_FMT " must be at least 2", task->n_symbols);
  PetscCheck(task->len_min >= 1 && task->len_min <= task->len_max, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-task_len_min %" PetscInt_FMT " must be in [1, -task_len_max %" PetscInt_FMT "]", task->len_min,
             task->len_max);
  PetscCheck(task->len_median > 0 && task->len_sigma >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-task_len_median must be positive and -task_len_sigma non-negative");
  PetscCheck(task->demo_noise >= 0 && task->demo_noise <= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-task_demo_noise %g must be in [0,1]", (double)task->demo_noise);
  PetscCheck(TASK_FIRST_SYMBOL + task->n_symbols <= vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-task_symbols %" PetscInt_FMT " needs a vocabulary of %" PetscInt_FMT " tokens, but -%svocab_size is %d",
             task->n_symbols, task->n_symbols + TASK_FIRST_SYMBOL, prefix, vocab_size);
  PetscCheck(2 * task->len_max + 3 <= n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-task_len_max %" PetscInt_FMT " needs %" PetscInt_FMT " positions, but -%sn_positions is %d",
             task->len_max, 2 * task->len_max + 3, prefix, n_positions);
  PetscCheck(task_prompt_space(task) >= 64.0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-task_symbols %" PetscInt_FMT " with lengths %" PetscInt_FMT "..%" PetscInt_FMT
             " give %.0f distinct prompts, too few to keep held-out prompts apart (at least 64)",
             task->n_symbols, task->len_min, task->len_max, task_prompt_space(task));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Held-out prompts are kept apart from training prompts by content: a
 * prompt belongs to the eval split iff a hash of its symbols (keyed by the
 * task seed) is 0 mod TASK_EVAL_SHARE. Each split redraws (attempt 1, 2, ...)
 * until it gets one of its own prompts, so no training prompt is ever an
 * eval prompt, however short the prompts are. */
#define TASK_EVAL_SHARE    8
#define TASK_MAX_ATTEMPTS  100000

static int task_draw_length(const BuiltinTask *task, TaskSplit split, uint64_t index, uint32_t attempt)
{
  float  z = rng_normal((uint64_t)task->seed, (uint32_t)split, (uint32_t)index, DRAW_LENGTH + 8u * attempt, 0);
  double L = floor(exp(log((double)task->len_median) + (double)task->len_sigma * z) + 0.5);
  if (L < (double)task->len_min) L = (double)task->len_min;
  if (L > (double)task->len_max) L = (double)task->len_max;
  return (int)L;
}

static TaskSplit task_split_of(const BuiltinTask *task, const int *sym, int L)
{
  uint64_t h = (uint64_t)task->seed * 0x9e3779b97f4a7c15ull + (uint64_t)L;
  for (int i = 0; i < L; i++) {
    h ^= (uint64_t)sym[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h % TASK_EVAL_SHARE == 0 ? TASK_SPLIT_EVAL : TASK_SPLIT_TRAIN;
}

static int sort_prompt(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok)
{
  int L = 0;

  for (uint32_t a = 0; a < TASK_MAX_ATTEMPTS; a++) {
    L = task_draw_length(task, split, index, a);
    for (int i = 0; i < L; i++)
      tok[1 + i] = TASK_FIRST_SYMBOL + (int)(rng_u32((uint64_t)task->seed, (uint32_t)split, (uint32_t)index,
                                                     DRAW_SYMBOL + 8u * a, (uint32_t)i) %
                                             (uint32_t)task->n_symbols);
    if (task_split_of(task, tok + 1, L) == split) break; /* task_check makes sure both splits exist */
  }
  tok[0]     = TASK_BOS;
  tok[L + 1] = TASK_SEP;
  return L + 2;
}

/* Counting sort of the prompt's symbols into out (ascending). */
static void task_sorted(const int *sym, int L, int *out)
{
  int count[256] = {0}, n = 0, lo = sym[0], hi = sym[0];
  for (int i = 0; i < L; i++) {
    lo = sym[i] < lo ? sym[i] : lo;
    hi = sym[i] > hi ? sym[i] : hi;
  }
  if (hi - lo < 256) {
    for (int i = 0; i < L; i++) count[sym[i] - lo]++;
    for (int v = 0; v <= hi - lo; v++)
      for (int c = 0; c < count[v]; c++) out[n++] = v + lo;
    return;
  }
  for (int i = 0; i < L; i++) out[i] = sym[i]; /* wide vocabularies: insertion sort */
  for (int i = 1; i < L; i++)
    for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
      int t = out[j];
      out[j] = out[j - 1];
      out[j - 1] = t;
    }
}

static int sort_demo(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok, int *prompt_len)
{
  int n = sort_prompt(task, split, index, tok), L = n - 2;

  *prompt_len = n;
  task_sorted(tok + 1, L, tok + n);
  for (int j = 0; j < L; j++) {
    uint64_t seed = (uint64_t)task->seed ^ 0x9e3779b97f4a7c15ull; /* a stream apart from the prompt's */
    if (task->demo_noise > 0 &&
        rng_uniform(seed, (uint32_t)split, (uint32_t)index, DRAW_NOISE, 2u * (uint32_t)j) < task->demo_noise)
      tok[n + j] = TASK_FIRST_SYMBOL +
                   (int)(rng_u32(seed, (uint32_t)split, (uint32_t)index, DRAW_NOISE, 2u * (uint32_t)j + 1) %
                         (uint32_t)task->n_symbols);
  }
  n += L;
  tok[n++] = TASK_EOS;
  return n;
}

double task_judge(const int *prompt, int prompt_len, const int *response, int response_len)
{
  int L = prompt_len - 2, eos = -1, correct = 0, answer[1024];

  if (L <= 0 || L > 1024) return 0.0;
  for (int i = 0; i < response_len; i++)
    if (response[i] == TASK_EOS) {
      eos = i;
      break;
    }
  if (eos < 0) return 0.0;
  task_sorted(prompt + 1, L, answer);
  for (int i = 0; i < eos && i < L; i++) correct += response[i] == answer[i];
  return (double)correct / (double)(eos > L ? eos : L);
}

/* ---- the built-in task: dispatch on -task ---------------------------------- */
PetscErrorCode task_check(const BuiltinTask *task, int vocab_size, int n_positions, const char *prefix)
{
  PetscFunctionBegin;
  if (task->kind == TASK_KIND_ARITH) PetscCall(arith_check(&task->arith, vocab_size, n_positions, prefix));
  else PetscCall(sort_check(task, vocab_size, n_positions, prefix));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int task_prompt(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok)
{
  return task->kind == TASK_KIND_ARITH ? arith_prompt(&task->arith, split, index, tok)
                                       : sort_prompt(task, split, index, tok);
}

int task_demo(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok, int *prompt_len)
{
  return task_demo_src(task, split, index, tok, prompt_len, NULL);
}

int task_demo_src(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok, int *prompt_len,
                  unsigned char *src)
{
  if (task->kind == TASK_KIND_ARITH) return arith_demo_src(&task->arith, split, index, tok, prompt_len, src);
  {
    int n = sort_demo(task, split, index, tok, prompt_len);
    for (int t = 0; src && t < n; t++) src[t] = t < *prompt_len ? GEN_SRC_PROMPT : GEN_SRC_MODEL;
    return n;
  }
}


int task_max_prompt(const BuiltinTask *task)
{
  return task->kind == TASK_KIND_ARITH ? arith_max_prompt(&task->arith) : (int)task->len_max + 2;
}

int task_max_demo(const BuiltinTask *task)
{
  return task->kind == TASK_KIND_ARITH ? arith_max_demo(&task->arith) : 2 * (int)task->len_max + 3;
}

int task_vocab_size(const BuiltinTask *task)
{
  return task->kind == TASK_KIND_ARITH ? arith_vocab_size() : (int)task->n_symbols + TASK_FIRST_SYMBOL;
}

int task_answer(const BuiltinTask *task, TaskSplit split, uint64_t index, char *out, size_t cap)
{
  return task->kind == TASK_KIND_ARITH ? arith_answer(&task->arith, split, index, out, cap) : -1;
}

int task_question(const BuiltinTask *task, TaskSplit split, uint64_t index, char *out, size_t cap)
{
  return task->kind == TASK_KIND_ARITH ? arith_question_text(&task->arith, split, index, out, cap) : -1;
}

const char *task_name(const BuiltinTask *task)
{
  return TaskKindNames[task->kind];
}
