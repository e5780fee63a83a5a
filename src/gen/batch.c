/* gen/batch.c: the result arrays of a generation. They are allocated once
 * for n requests and a sequence bound and reused by every gen_generate call
 * (the engine resets them), so an RL loop does not allocate per iteration;
 * only the allowed-set ids and the step timeline grow with the data. */
#include "gen.h"
#include "sys.h"

PetscErrorCode gen_batch_create(int n, int Tmax, PetscBool masked, GenBatch *b)
{
  size_t nt = (size_t)n * (size_t)Tmax;

  PetscFunctionBegin;
  PetscCheck(n >= 0 && Tmax >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "gen_batch_create: n %d must be >= 0 and Tmax %d >= 1", n, Tmax);
  PetscCall(PetscMemzero(b, sizeof *b));
  b->n    = n;
  b->Tmax = Tmax;
  PetscCall(PetscCalloc2(nt, &b->tokens, nt, &b->logprobs));
  PetscCall(PetscCalloc3(n, &b->prompt_len, n, &b->response_len, n, &b->eos));
  PetscCall(PetscCalloc3(nt, &b->src, n, &b->turns, n, &b->obs_cut));
  if (masked) {
    /* one id per position to start with; gen_generate grows it to fit */
    b->mask_cap = nt > 0 ? nt : 1;
    PetscCall(PetscCalloc1(nt + 1, &b->mask_off));
    PetscCall(PetscMalloc1(b->mask_cap, &b->mask_ids));
  }
  b->steps_cap = 64;
  PetscCall(PetscMalloc2(b->steps_cap, &b->step_seconds, b->steps_cap, &b->step_active));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int gen_segment_start(const GenBatch *b, int i)
{
  const unsigned char *src = b->src + (size_t)i * b->Tmax;
  int                  P = b->prompt_len[i], t = P + b->response_len[i];
  while (t > P && src[t - 1] == GEN_SRC_MODEL) t--;
  return t;
}

PetscErrorCode gen_batch_destroy(GenBatch *b)
{
  PetscFunctionBegin;
  PetscCall(PetscFree2(b->tokens, b->logprobs));
  PetscCall(PetscFree3(b->prompt_len, b->response_len, b->eos));
  PetscCall(PetscFree3(b->src, b->turns, b->obs_cut));
  PetscCall(PetscFree(b->mask_off));
  PetscCall(PetscFree(b->mask_ids));
  PetscCall(PetscFree2(b->step_seconds, b->step_active));
  PetscCall(PetscMemzero(b, sizeof *b));
  PetscFunctionReturn(PETSC_SUCCESS);
}
