/* Demonstrations for supervised training: the built-in task's stream or a
 * dataset file, read in an order that is a pure function of (seed, epoch), so
 * a restarted run sees exactly the samples an uninterrupted run would. */
#include "task.h"
#include <inttypes.h>

PetscErrorCode demo_source_setup(MPI_Comm comm, const char *path, const BuiltinTask *task, uint64_t seed,
                                 DemoSource *src)
{
  PetscBool builtin;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(src, sizeof *src));
  PetscCall(PetscStrcmp(path, "builtin", &builtin));
  src->builtin    = builtin;
  src->task       = *task;
  src->seed       = seed;
  src->perm_epoch = -1;
  PetscCall(PetscStrncpy(src->path, path, sizeof src->path));
  if (!builtin) {
    PetscCall(data_read(comm, path, &src->file));
    PetscCheck(src->file.N > 0, comm, PETSC_ERR_FILE_UNEXPECTED, "data file %s holds no samples", path);
    PetscCall(PetscMalloc1(src->file.N, &src->perm));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode demo_source_destroy(DemoSource *src)
{
  PetscFunctionBegin;
  if (!src->builtin) PetscCall(data_free(&src->file));
  PetscCall(PetscFree(src->perm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int demo_source_max_len(const DemoSource *src)
{
  int m = 0;
  if (src->builtin) return task_max_demo(&src->task);
  for (int i = 0; i < src->file.N; i++) m = src->file.lengths[i] > m ? src->file.lengths[i] : m;
  return m;
}

/* The file's row order in an epoch. */
static void demo_shuffle(DemoSource *src, int64_t epoch)
{
  rng_shuffle(src->perm, src->file.N, src->seed, 0xDA7Au, epoch);
  src->perm_epoch = epoch;
}

PetscErrorCode demo_source_get(DemoSource *src, uint64_t pos, int T1, int *tok, int *len, int *prompt_len)
{
  PetscFunctionBegin;
  PetscCall(demo_source_get_src(src, pos, T1, tok, len, prompt_len, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode demo_source_get_src(DemoSource *src, uint64_t pos, int T1, int *tok, int *len, int *prompt_len,
                                   unsigned char *srcs)
{
  PetscFunctionBegin;
  if (src->builtin) {
    int           room = task_max_demo(&src->task), buf[2 * 1024 + 3];
    unsigned char sbuf[2 * 1024 + 3];
    PetscCheck(room <= (int)(sizeof buf / sizeof buf[0]), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "the built-in task's samples of up to %d tokens are too long (at most %d; -task_len_max at most 1024)",
               room, (int)(sizeof buf / sizeof buf[0]));
    *len = task_demo_src(&src->task, TASK_SPLIT_TRAIN, pos, buf, prompt_len, sbuf);
    PetscCheck(*len <= T1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "built-in sample %" PRIu64 " has %d tokens, more than the %d the sequence length allows", pos, *len, T1);
    PetscCall(PetscArraycpy(tok, buf, *len));
    if (srcs) PetscCall(PetscArraycpy(srcs, sbuf, *len));
  } else {
    int64_t epoch = (int64_t)(pos / (uint64_t)src->file.N);
    int     row, T = src->file.T;
    if (epoch != src->perm_epoch) demo_shuffle(src, epoch);
    row         = src->perm[pos % (uint64_t)src->file.N];
    *len        = src->file.lengths[row];
    *prompt_len = src->file.prompt_lengths ? src->file.prompt_lengths[row] : 0;
    PetscCheck(*len <= T1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "data file %s: row %d has %d tokens, more than the model's context allows (%d)", src->path, row, *len,
               T1);
    PetscCall(PetscArraycpy(tok, src->file.tokens + (size_t)row * T, *len));
    /* a file's /loss_mask 0 after the prompt is a conversation's other turns (a user's, a tool's): context, as an
     * environment's answer is in an episode, so SFT gives it no target */
    for (int t = 0; srcs && t < *len; t++) {
      const unsigned char *m = src->file.loss_mask;
      srcs[t] = t < *prompt_len ? GEN_SRC_PROMPT : !m || m[(size_t)row * T + t] ? GEN_SRC_MODEL : GEN_SRC_ENV;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

int64_t demo_source_index(const DemoSource *src, uint64_t pos)
{
  if (src->builtin) return (int64_t)pos;
  return src->perm[pos % (uint64_t)src->file.N];
}
