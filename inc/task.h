/* task: the built-in synthetic tasks (sorting symbols, with long-tailed
 * lengths and a programmatic judge that plays the human; arithmetic
 * questions with exact answers, for verifiable rewards) and the data the
 * training jobs read: demonstrations for SFT (the task's stream or a dataset
 * file) and preference pairs for reward modelling. */
#ifndef RLFUSE_TASK_H
#define RLFUSE_TASK_H

#include "io.h"
#include "gen.h"

/* ---- the built-in sort task ------------------------------------------- */
/* Token ids: 0 PAD, 1 BOS, 2 SEP, 3 EOS, symbols 4 .. 4+n_symbols-1.
 * A prompt is BOS s_1..s_L SEP; the ideal response is the symbols sorted
 * ascending, then EOS. L is log-normal (median len_median, shape len_sigma)
 * truncated to [len_min, len_max], so response lengths are long-tailed. */
enum { TASK_PAD = 0, TASK_BOS = 1, TASK_SEP = 2, TASK_EOS = 3, TASK_FIRST_SYMBOL = 4 };
typedef enum { TASK_SPLIT_TRAIN = 0, TASK_SPLIT_EVAL = 1 } TaskSplit;

/* Gold score in [0,1] of a response to a sort prompt: the fraction of
 * positions of the sorted answer that the response gets right, over max(L,
 * response length), and 0 unless the response ends with EOS. */
double task_judge(const int *prompt, int prompt_len, const int *response, int response_len);

/* ---- the built-in arithmetic task (src/task/arith.c) -------------------- */
/* Questions with exact numeric answers, for RL with verifiable rewards
 * without Python or a tokenizer: character tokens (ids 0-3 as the sort
 * task's: PAD, BOS, SEP, EOS; then one token per character of
 * arith_vocab()). A prompt is BOS question SEP, e.g. "12+7=" or, with
 * words, "ann has 12 apples and gets 7 more. how many?"; the ideal
 * response is the answer's digits then EOS. Every draw is keyed by (task
 * seed, split, index, purpose); held-out prompts are kept apart from
 * training ones by a hash of their content, as in the sort task. */
typedef struct {
  PetscInt  max_operand; /* operands drawn uniformly from [0, max_operand] */
  char      ops[8];      /* the operations drawn from, a subset of "+-*" */
  PetscBool words;       /* word problems instead of bare equations */
  PetscReal demo_noise;  /* probability that a demonstration digit is replaced by a random digit */
  PetscReal tool_demos;  /* probability that a demonstration calls the calculator (-env calc) first */
  PetscInt  seed;        /* the task's own seed */
} ArithTask;
/* -arith_max_operand, -arith_ops, -arith_words, -arith_demo_noise,
 * -arith_tool_demos, -arith_seed. */
PetscErrorCode arith_set_from_options(ArithTask *t);
/* Checks options and that the task fits a model (vocabulary, context),
 * naming -<prefix>vocab_size / -<prefix>n_positions. */
PetscErrorCode arith_check(const ArithTask *t, int vocab_size, int n_positions, const char *prefix);
/* The vocabulary: arith_vocab_size() strings, NULL for ids 0-3 (no text). */
int                arith_vocab_size(void);
const char *const *arith_vocab(void);
/* Longest prompt (BOS..SEP) and longest demonstration (prompt + answer + EOS). */
int arith_max_prompt(const ArithTask *t);
int arith_max_demo(const ArithTask *t);
/* Prompt `index` of a split into tok (room for arith_max_prompt); returns its length. */
int arith_prompt(const ArithTask *t, TaskSplit split, uint64_t index, int *tok);
/* Prompt + demonstration into tok (room for arith_max_demo); returns the
 * total length, *prompt_len the prompt's. With -arith_tool_demos a
 * demonstration may be an episode with the built-in calculator (src/env/
 * calc.c): the call "A op B=", the calculator's answer "V," and the answer
 * "V" then EOS; src (may be NULL) gets each position's source (GEN_SRC_*:
 * the calculator's answer GEN_SRC_ENV, which SFT does not train on). */
int arith_demo_src(const ArithTask *t, TaskSplit split, uint64_t index, int *tok, int *prompt_len, unsigned char *src);
/* The question of prompt `index` as text, without BOS and SEP ("12+7=",
 * "ann has 12 apples and gets 7 more. how many?"), into out
 * (NUL-terminated, truncated to cap); returns its length. */
int arith_question_text(const ArithTask *t, TaskSplit split, uint64_t index, char *out, size_t cap);
/* The reference answer of prompt `index` as text ("-12", "391"), into out
 * (NUL-terminated); returns its length. */
int arith_answer(const ArithTask *t, TaskSplit split, uint64_t index, char *out, size_t cap);

/* ---- the built-in task: sort or arithmetic (-task) ----------------------- */
typedef enum { TASK_KIND_SORT = 0, TASK_KIND_ARITH = 1 } TaskKind;
extern const char *const TaskKindNames[];
typedef struct {
  PetscInt  kind;       /* TaskKind (-task) */
  PetscInt  n_symbols, len_min, len_max;   /* the sort task's options (-task_*) */
  PetscReal len_median, len_sigma;
  PetscReal demo_noise; /* probability that a demonstration token is a random symbol */
  PetscInt  seed;       /* the task's own seed: prompts do not change with -seed */
  ArithTask arith;      /* the arithmetic task's options (-arith_*) */
} BuiltinTask;

PetscErrorCode task_set_from_options(BuiltinTask *task);
/* Checks the task fits a model: vocabulary and context (task_max_demo tokens). */
PetscErrorCode task_check(const BuiltinTask *task, int vocab_size, int n_positions, const char *prefix);
/* Prompt `index` of a split, BOS ... SEP, into tok (room for
 * task_max_prompt); returns its length. The splits are disjoint by content:
 * a prompt's split is a hash of its content, so no training prompt is ever
 * a held-out one. */
int  task_prompt(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok);
/* Writes prompt + demonstration into tok (room for task_max_demo), returns
 * the total length; *prompt_len gets the prompt's. */
int  task_demo(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok, int *prompt_len);
/* The same with each position's source (GEN_SRC_*) into src (may be NULL). */
int  task_demo_src(const BuiltinTask *task, TaskSplit split, uint64_t index, int *tok, int *prompt_len,
                   unsigned char *src);
int  task_max_prompt(const BuiltinTask *task);
int  task_max_demo(const BuiltinTask *task);
/* The vocabulary the task needs. */
int  task_vocab_size(const BuiltinTask *task);
/* The reference answer of prompt `index` (the arithmetic task's), into out;
 * returns its length, or -1 for a task without answers (sort: its judge
 * reads the prompt). */
int  task_answer(const BuiltinTask *task, TaskSplit split, uint64_t index, char *out, size_t cap);
/* The question of prompt `index` as text (the arithmetic task's), into
 * out; returns its length, or -1 for a task whose prompts are not text (sort). */
int  task_question(const BuiltinTask *task, TaskSplit split, uint64_t index, char *out, size_t cap);
/* The task's name as -mode data records it ("sort", "arith"). */
const char *task_name(const BuiltinTask *task);

/* ---- training data ------------------------------------------------------ */
/* Demonstrations for SFT: the built-in task or a file in the documented
 * dataset format; sample order is a pure function of (seed, position). */
typedef struct {
  PetscBool builtin;
  BuiltinTask  task;
  TokenData file;
  char      path[PETSC_MAX_PATH_LEN];
  uint64_t  seed;
  int      *perm;       /* file order of the current epoch */
  int64_t   perm_epoch; /* epoch perm belongs to, -1 if none */
} DemoSource;
PetscErrorCode demo_source_setup(MPI_Comm comm, const char *path, const BuiltinTask *task, uint64_t seed,
                                 DemoSource *src);
PetscErrorCode demo_source_destroy(DemoSource *src);
/* Sample number `pos` of the stream (pos counts samples consumed): tokens,
 * length and prompt length; tok has room for T+1 tokens (longer samples are
 * an error reported at setup). */
PetscErrorCode demo_source_get(DemoSource *src, uint64_t pos, int T1, int *tok, int *len, int *prompt_len);
/* The same with each position's source (GEN_SRC_*) into srcs (room for T1):
 * the built-in task's episodes mark the environment's tokens; a file's
 * rows are prompt then model. */
PetscErrorCode demo_source_get_src(DemoSource *src, uint64_t pos, int T1, int *tok, int *len, int *prompt_len,
                                   unsigned char *srcs);
/* The index of sample `pos` in its source: the built-in task's sample
 * number, or the file's row (after demo_source_get of that pos). */
int64_t demo_source_index(const DemoSource *src, uint64_t pos);
/* Longest sample the source can produce. */
int demo_source_max_len(const DemoSource *src);

/* ---- preference pairs ---------------------------------------------------- */
/* A pair file is a token dataset (docs/formats.md) whose rows come in pairs:
 * row 2i is the chosen response, row 2i+1 the rejected one, both to the same
 * prompt (prompt_lengths required). gold holds the judge's score of each row
 * for built-in pairs (NaN for a user's file); training never reads it. */
typedef struct {
  TokenData d;
  float    *gold; /* [d.N] */
} PrefPairs;
/* Samples two responses per prompt of `split` from the engine's policy and
 * labels them like a human would: the first is preferred with probability
 * sigmoid(bt_beta * (gold_a - gold_b)) (Bradley-Terry noise), drawn from a
 * stream keyed by (seed, split, prompt). Pairs the judge scores equal are
 * dropped (the labeller has no preference); prompts are taken in order until
 * npairs pairs are kept. */
PetscErrorCode prefs_generate(GenEngine *eng, const GenConfig *gen, const BuiltinTask *task, TaskSplit split,
                              int npairs, uint64_t seed, double bt_beta, PrefPairs *p);
PetscErrorCode prefs_read(MPI_Comm comm, const char *path, PrefPairs *p);
PetscErrorCode prefs_free(PrefPairs *p);

#endif
