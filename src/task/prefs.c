/* Preference pairs for reward modelling: sampled from the SFT policy on the
 * built-in task and labelled by the judge with Bradley-Terry noise (the
 * simulated human), or read from a user's pair file. */
#include "task.h"
#include <math.h>
#include <string.h>

#define PREF_RNG_DOMAIN 0x50524546ull /* "PREF": labels */
#define PREF_ITERATION  0x50520000u   /* generation key: apart from PPO's iterations */

static PetscErrorCode prefs_alloc(int npairs, int T, PrefPairs *p)
{
  PetscFunctionBegin;
  p->d.N          = 2 * npairs;
  p->d.T          = T;
  p->d.vocab_size = 0;
  PetscCall(PetscCalloc1((size_t)p->d.N * T, &p->d.tokens));
  PetscCall(PetscCalloc1(p->d.N, &p->d.lengths));
  PetscCall(PetscCalloc1(p->d.N, &p->d.prompt_lengths));
  PetscCall(PetscCalloc1(p->d.N, &p->gold));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prefs_free(PrefPairs *p)
{
  PetscFunctionBegin;
  PetscCall(data_free(&p->d));
  PetscCall(PetscFree(p->gold));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Copies generated sample s of batch b into row r of the pairs. */
static void prefs_put(PrefPairs *p, int r, const GenBatch *b, int s, float gold)
{
  int len = b->prompt_len[s] + b->response_len[s];

  memcpy(p->d.tokens + (size_t)r * p->d.T, b->tokens + (size_t)s * b->Tmax, (size_t)len * sizeof(int));
  p->d.lengths[r]        = len;
  p->d.prompt_lengths[r] = b->prompt_len[s];
  p->gold[r]             = gold;
}

static float prefs_gold(const GenBatch *b, int s)
{
  const int *row = b->tokens + (size_t)s * b->Tmax;
  return (float)task_judge(row, b->prompt_len[s], row + b->prompt_len[s], b->response_len[s]);
}

PetscErrorCode prefs_generate(GenEngine *eng, const GenConfig *gen, const BuiltinTask *task, TaskSplit split,
                              int npairs, uint64_t seed, double bt_beta, PrefPairs *p)
{
  int round = PetscMax(16, PetscMin(npairs, 256)), kept = 0, Tp = (int)task->len_max + 2,
      T            = Tp + (int)gen->max_new_tokens;
  uint64_t    next = 0;
  int        *prompts;
  GenRequest *req;
  GenBatch    b;

  PetscFunctionBegin;
  PetscCall(prefs_alloc(npairs, T, p));
  p->d.vocab_size = (int)task->n_symbols + TASK_FIRST_SYMBOL;
  PetscCall(PetscMalloc2((size_t)round * Tp, &prompts, 2 * round, &req));
  PetscCall(gen_batch_create(2 * round, T, gen_masked(gen), &b));
  while (kept < npairs) {
    for (int i = 0; i < round; i++) { /* prompt next+i, two samples with ids 2(next+i) and 2(next+i)+1 */
      int len = task_prompt(task, split, next + (uint64_t)i, prompts + (size_t)i * Tp);
      for (int k = 0; k < 2; k++)
        req[2 * i + k] = (GenRequest){ (int)(2 * (next + (uint64_t)i) + (uint64_t)k), prompts + (size_t)i * Tp, len, 0,
                                       0 };
    }
    PetscCall(gen_generate(eng, seed, PREF_ITERATION + (uint32_t)split, 2 * round, req, &b, NULL, NULL));
    for (int i = 0; i < round && kept < npairs; i++) {
      float  ga = prefs_gold(&b, 2 * i), gb = prefs_gold(&b, 2 * i + 1);
      double pa = 1.0 / (1.0 + exp(-bt_beta * ((double)ga - (double)gb)));
      int    a_wins;

      if (ga == gb) continue; /* no preference to label */
      a_wins = rng_uniform(seed ^ PREF_RNG_DOMAIN, (uint32_t)split, (uint32_t)(next + (uint64_t)i), 0, 0) < pa;
      prefs_put(p, 2 * kept, &b, a_wins ? 2 * i : 2 * i + 1, a_wins ? ga : gb);
      prefs_put(p, 2 * kept + 1, &b, a_wins ? 2 * i + 1 : 2 * i, a_wins ? gb : ga);
      kept++;
    }
    next += (uint64_t)round;
    PetscCheck(next < 1000ull * (uint64_t)npairs + 100000ull, PETSC_COMM_WORLD, PETSC_ERR_NOT_CONVERGED,
               "preference pairs: after %llu prompts only %d of %d pairs differ in gold score (the policy's two "
               "samples are almost always equally good; raise -gen_temperature)",
               (unsigned long long)next, kept, npairs);
  }
  PetscCall(gen_batch_destroy(&b));
  PetscCall(PetscFree2(prompts, req));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode prefs_read(MPI_Comm comm, const char *path, PrefPairs *p)
{
  PetscFunctionBegin;
  PetscCall(data_read(comm, path, &p->d));
  PetscCheck(p->d.N >= 2 && p->d.N % 2 == 0, comm, PETSC_ERR_FILE_UNEXPECTED,
             "pair file %s has %d rows; it needs an even number (chosen, rejected, chosen, ...)", path, p->d.N);
  PetscCheck(p->d.prompt_lengths, comm, PETSC_ERR_FILE_UNEXPECTED, "pair file %s has no /prompt_lengths", path);
  for (int i = 0; i < p->d.N; i += 2)
    PetscCheck(p->d.prompt_lengths[i] == p->d.prompt_lengths[i + 1] &&
                   !memcmp(p->d.tokens + (size_t)i * p->d.T, p->d.tokens + (size_t)(i + 1) * p->d.T,
                           (size_t)p->d.prompt_lengths[i] * sizeof(int)),
               comm, PETSC_ERR_FILE_UNEXPECTED, "pair file %s: rows %d and %d do not share a prompt", path, i, i + 1);
  PetscCall(PetscMalloc1(p->d.N, &p->gold));
  for (int i = 0; i < p->d.N; i++) p->gold[i] = NAN;
  PetscFunctionReturn(PETSC_SUCCESS);
}
