/* task: the built-in synthetic task (sorting symbols, with long-tailed
 * lengths and a programmatic judge that plays the human) and the data the
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

typedef struct {
  PetscInt  n_symbols, len_min, len_max;
  PetscReal len_median, len_sigma;
  PetscReal demo_noise; /* probability that a demonstration token is a random symbol */
  PetscInt  seed;       /* the task's own seed: prompts do not change with -seed */
} SortTask;

PetscErrorCode task_set_from_options(SortTask *task);
/* Checks the task fits a model: vocabulary and context (2*len_max+3 tokens). */
PetscErrorCode task_check(const SortTask *task, int vocab_size, int n_positions, const char *prefix);
/* Prompt `index` of a split, BOS s_1..s_L SEP, into tok (room for
 * len_max+2); returns its length L+2. The splits are disjoint by content: a
 * prompt's split is a hash of its symbols, so no training prompt is ever a
 * held-out one. */
int  task_prompt(const SortTask *task, TaskSplit split, uint64_t index, int *tok);
/* Writes prompt + demonstration into tok (room for 2*len_max+3), returns the
 * total length; *prompt_len gets L+2. */
int  task_demo(const SortTask *task, TaskSplit split, uint64_t index, int *tok, int *prompt_len);
/* Gold score in [0,1] of a response to a prompt: the fraction of positions of
 * the sorted answer that the response gets right, over max(L, response
 * length), and 0 unless the response ends with EOS. */
double task_judge(const int *prompt, int prompt_len, const int *response, int response_len);

/* ---- training data ------------------------------------------------------ */
/* Demonstrations for SFT: the built-in task or a file in the documented
 * dataset format; sample order is a pure function of (seed, position). */
typedef struct {
  PetscBool builtin;
  SortTask  task;
  TokenData file;
  char      path[PETSC_MAX_PATH_LEN];
  uint64_t  seed;
  int      *perm;       /* file order of the current epoch */
  int64_t   perm_epoch; /* epoch perm belongs to, -1 if none */
} DemoSource;
PetscErrorCode demo_source_setup(MPI_Comm comm, const char *path, const SortTask *task, uint64_t seed, DemoSource *src);
PetscErrorCode demo_source_destroy(DemoSource *src);
/* Sample number `pos` of the stream (pos counts samples consumed): tokens,
 * length and prompt length; tok has room for T+1 tokens (longer samples are
 * an error reported at setup). */
PetscErrorCode demo_source_get(DemoSource *src, uint64_t pos, int T1, int *tok, int *len, int *prompt_len);
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
PetscErrorCode prefs_generate(GenEngine *eng, const GenConfig *gen, const SortTask *task, TaskSplit split, int npairs, uint64_t seed, double bt_beta, PrefPairs *p);
PetscErrorCode prefs_read(MPI_Comm comm, const char *path, PrefPairs *p);
PetscErrorCode prefs_free(PrefPairs *p);

#endif
