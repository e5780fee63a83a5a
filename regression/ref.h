/* References that only the tests (and a benchmark) use: the library keeps
 * production code only (scenarios/modules.sh checks it). Linked into every
 * program under regression/ and the benchmarks (GNUmakefile, REF_OBJ). */
#ifndef RLFUSE_REGRESSION_REF_H
#define RLFUSE_REGRESSION_REF_H

#include "gen.h"
#include "tensor.h"
#include <stdint.h>

/* The T x T training attention (regression/ref_attention.c): the softmax
 * probabilities [B,NH,T,T] saved in att (zeros above the diagonal; NULL: a
 * forward that no backward follows), arguments as Backend.attention_*; the
 * backward accumulates into dqkv and does not read out. */
PetscErrorCode ref_attention_probs_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV);
PetscErrorCode ref_attention_probs_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *att, int B, int T, int C, int NH, int NKV);

/* The host sampler (regression/ref_sample.c), the reference of
 * Backend.sample (the cpu op gives exactly these bits: test_gen).
 * Picks the next token from one row of logits [V]. n_new tokens have been
 * generated so far (EOS is not allowed while n_new < min_new_tokens). The
 * uniform draw is rng_uniform(key, iteration, sample, position, 0) with
 * key = seed ^ GEN_RNG_DOMAIN. Returns the token; *logprob gets its
 * log-probability under the restricted, tempered distribution (computed in
 * double); allowed (room for V) and *nallowed get the allowed set in
 * ascending id order, or *nallowed = 0 when nothing restricts it. work needs
 * room for 2*V doubles. Returns -1, drawing nothing, when a logit that could
 * be drawn is NaN or +inf, or none is finite (a diverged model). */
int ref_sample_row(const GenConfig *cfg, const float *logits, int V, int n_new, uint64_t seed, uint32_t iteration, uint32_t sample, uint32_t position,
                   float *logprob, int *allowed, int *nallowed, double *work);

#endif
