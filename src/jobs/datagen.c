/* Dataset generation (-mode data): writes the built-in task's prompts with
 * demonstrations as an HDF5 dataset, the same format users supply their own
 * data in (docs/formats.md); -data_text also writes the arithmetic task's
 * questions and answers as JSONL text, for a real model's tokenizer
 * (tools/tokenizer.py CKPT prompts). */
#include "jobs.h"
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#define DATA_TEXT_MAX 256 /* a question's characters (the arithmetic task's are at most 192) */

/* One JSON line per question: {"prompt", "answer", "metadata"}. The task's
 * characters (digits, + - * = ? . , space and a-z) need no JSON escapes.
 * Returns 0, or 1 with err set. */
static int data_text_line(FILE *f, const BuiltinTask *task, TaskSplit split, int i, const char *split_name, char *err,
                          size_t len)
{
  char             q[DATA_TEXT_MAX], a[64];
  int              nq = task_question(task, split, (uint64_t)i, q, sizeof q),
      na              = task_answer(task, split, (uint64_t)i, a, sizeof a);
  const ArithTask *t  = &task->arith;

  if (nq < 0 || nq >= (int)sizeof q || na < 0 || na >= (int)sizeof a || strpbrk(q, "\"\\") || strpbrk(a, "\"\\"))
    return snprintf(err, len, "question %d is not plain text of at most %d characters", i, DATA_TEXT_MAX - 1), 1;
  if (fprintf(f,
              "{\"prompt\": \"%s\", \"answer\": \"%s\", \"metadata\": {\"task\": \"arith\", \"split\": \"%s\", "
              "\"index\": %d, \"arith_seed\": %" PetscInt_FMT ", \"ops\": \"%s\", \"max_operand\": %" PetscInt_FMT
              ", \"words\": %s}}\n",
              q, a, split_name, i, t->seed, t->ops, t->max_operand, t->words ? "true" : "false") < 0)
    return snprintf(err, len, "write failed: %s", strerror(errno)), 1;
  return 0;
}

/* The questions as JSONL, written by rank 0 to PATH.tmp, synced and renamed;
 * a failure is one collective error. */
static PetscErrorCode data_write_text(MPI_Comm comm, const char *path, const BuiltinTask *task, TaskSplit split, int n,
                                      const char *split_name)
{
  char        tmp[PETSC_MAX_PATH_LEN + 8], err[PETSC_MAX_PATH_LEN + 64] = "";
  PetscMPIInt rank;
  int         bad = 0;
  FILE       *f;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  if (rank == 0) {
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    f   = fopen(tmp, "w");
    bad = !f;
    if (bad) snprintf(err, sizeof err, "cannot write %s: %s", tmp, strerror(errno));
    for (int i = 0; i < n && !bad; i++) bad = data_text_line(f, task, split, i, split_name, err, sizeof err);
    if (!bad && (fflush(f) != 0 || fsync(fileno(f)) != 0))
      bad = 1, snprintf(err, sizeof err, "writing %s failed: %s", tmp, strerror(errno));
    if (f && fclose(f) != 0 && !bad) bad = 1, snprintf(err, sizeof err, "closing %s failed: %s", tmp, strerror(errno));
    if (!bad && rename(tmp, path) != 0)
      bad = 1, snprintf(err, sizeof err, "cannot rename %s to it: %s", tmp, strerror(errno));
    if (bad && f) (void)remove(tmp);
  }
  PetscCallMPI(sys_mpi_bcast(&bad, 1, MPI_INT, 0, comm));
  PetscCallMPI(sys_mpi_bcast(err, (int)sizeof err, MPI_CHAR, 0, comm));
  PetscCheck(!bad, comm, PETSC_ERR_FILE_WRITE, "-data_text %s: %s", path, err);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The files it writes, for io_files_check. */
const IoFileOption data_file_options[] = {
  {"-data_output", IO_FILE_OUT, NULL, NULL},
  {"-data_text", IO_FILE_OUT, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

PetscErrorCode data_run(const RunCtx *run)
{
  BuiltinTask  task;
  TokenData d = {0};
  PetscInt  count = 1000, split = TASK_SPLIT_TRAIN;
  char      output[PETSC_MAX_PATH_LEN] = "", text[PETSC_MAX_PATH_LEN] = "";
  PetscBool help;
  const char *const splits[] = {"train", "eval", "TaskSplit", "TASK_SPLIT_", NULL};

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, "data_", "Dataset generation (-mode data)", NULL);
  RfOptString("-output",
              "HDF5 file of the samples in the task's own token ids (for -mode sft -sft_data); optional with "
              "-data_text",
              output, sizeof output);
  RfOptInt("-count", "Number of samples", 1000, &count);
  RfOptString("-text",
              "Also write the questions and answers as JSONL text (-task arith), for tools/tokenizer.py CKPT prompts",
              text, sizeof text);
  RfOptEnum("-split", "Which prompts: train or the held-out eval set", splits, 2, &split);
  PetscOptionsEnd();
  PetscCall(task_set_from_options(&task));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  if (help) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(sys_options_check_unused());
  PetscCheck(output[0] || text[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
             "-mode data needs -data_output FILE (the task's token ids) or -data_text FILE (the questions and answers "
             "as text), or both");
  PetscCheck(count > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-data_count %" PetscInt_FMT " must be positive",
             count);
  PetscCall(task_check(&task, task_vocab_size(&task), task_max_demo(&task), ""));
  PetscCheck(!text[0] || task_question(&task, TASK_SPLIT_TRAIN, 0, NULL, 0) >= 0, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_INCOMP, "-data_text %s: the %s task's prompts are not text (-task arith)", text,
             task_name(&task));
  if (run->dry_run) PetscFunctionReturn(PETSC_SUCCESS);
  d.N          = (int)count;
  d.T          = task_max_demo(&task);
  d.vocab_size = task_vocab_size(&task);
  PetscCall(PetscCalloc3((size_t)d.N * d.T, &d.tokens, d.N, &d.lengths, d.N, &d.prompt_lengths));
  PetscCall(PetscCalloc1((size_t)d.N * d.T, &d.loss_mask));
  {
    PetscBool env = PETSC_FALSE; /* a tool demonstration (-arith_tool_demos): its calculator answers are no targets */
    for (int i = 0; i < d.N; i++) {
      unsigned char *m = d.loss_mask + (size_t)i * d.T;
      d.lengths[i]     = task_demo_src(&task, (TaskSplit)split, (uint64_t)i, d.tokens + (size_t)i * d.T,
                                       &d.prompt_lengths[i], m);
      for (int t = 0; t < d.T; t++) {
        if (m[t] == GEN_SRC_ENV) env = PETSC_TRUE;
        m[t] = (unsigned char)(t < d.lengths[i] && t >= PetscMax(d.prompt_lengths[i], 1) && m[t] != GEN_SRC_ENV);
      }
    }
    if (!env) PetscCall(PetscFree(d.loss_mask)); /* every response token a target: the file needs no mask */
  }
  if (output[0]) {
    PetscCall(data_write(run->comm, output, &d, task_name(&task)));
    PetscCall(PetscPrintf(run->comm, "data: %d %s samples of the %s task -> %s%s\n", d.N, splits[split],
                          task_name(&task), output,
                          d.loss_mask ? " (with /loss_mask: the calculator's answers are context, not targets)" : ""));
  }
  if (text[0]) {
    PetscCall(data_write_text(run->comm, text, &task, (TaskSplit)split, d.N, splits[split]));
    PetscCall(PetscPrintf(run->comm, "data: %s the questions and answers of %d %s samples as text -> %s\n",
                          output[0] ? "also" : "only", d.N, splits[split], text));
  }
  PetscCall(PetscFree3(d.tokens, d.lengths, d.prompt_lengths));
  PetscCall(PetscFree(d.loss_mask));
  PetscFunctionReturn(PETSC_SUCCESS);
}
