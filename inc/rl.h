/* rl: the training jobs and their data. For now the built-in synthetic task
 * (sorting symbols, with long-tailed lengths and a programmatic judge), the
 * dataset source used by training, supervised fine-tuning (-mode sft), and
 * scoring of token files with a checkpoint (-mode score). */
#ifndef RLFUSE_RL_H
#define RLFUSE_RL_H

#include "io.h"

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
/* Prompt length L of sample `index` of a split. */
int  task_symbols_count(const SortTask *task, TaskSplit split, uint64_t index);
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

/* ---- jobs --------------------------------------------------------------- */
PetscErrorCode sft_run(const RunCtx *run, const Backend *be);
PetscErrorCode score_run(const RunCtx *run, const Backend *be);
PetscErrorCode data_run(const RunCtx *run);

#endif
