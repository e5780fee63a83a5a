/* model: the GPT-2 transformer. Configuration per role from options, one flat
 * parameter buffer with named views in Hugging Face state-dict order, forward,
 * backward, the LM head (tied to wte) and the scalar head (critic/reward),
 * an incremental forward with a KV cache, and AdamW with global-norm clipping
 * and a warm-up + cosine learning-rate schedule.
 *
 * All tensor work goes through the Backend ops table (tensor.h). The public
 * functions take and return host arrays; device copies are internal. */
#ifndef RLFUSE_MODEL_H
#define RLFUSE_MODEL_H

#include "tensor.h"

typedef enum { GPT_HEAD_LM = 0, GPT_HEAD_SCALAR = 1 } GPTHead;
extern const char *const GPTHeadNames[]; /* "lm", "scalar", then PETSc's enum trailer */

typedef struct {
  int     n_layer, n_head, n_embd, vocab_size, n_positions;
  GPTHead head;
} GPTConfig;

/* One named parameter tensor inside the flat buffer. */
typedef struct {
  char      name[64];  /* Hugging Face key, e.g. "transformer.h.0.attn.c_attn.weight" */
  int       ndim;      /* 1 or 2 */
  int       shape[2];
  size_t    offset;    /* in floats, into params/grads/m/v */
  size_t    numel;
  PetscBool decay;     /* weight decay applies (2-D tensors) */
} GPTTensor;

typedef struct {
  PetscReal lr, min_lr_ratio, beta1, beta2, eps, weight_decay, grad_clip;
  PetscInt  warmup, decay_steps; /* cosine from lr to lr*min_lr_ratio over decay_steps (0: constant after warm-up) */
} AdamWConfig;

typedef struct GPTActs GPTActs; /* activation buffers, private to src/model */

typedef struct {
  GPTConfig      cfg;
  const Backend *be;
  int            ntensors;
  GPTTensor     *tensors;
  size_t         nparams;
  float         *params, *grads; /* device */
  float         *m, *v;          /* AdamW moments (device), allocated by gpt_optim_init */
  int            step;           /* optimizer steps taken */
  GPTActs       *acts;
} GPT;

/* Reads -<prefix>n_layer, n_head, n_embd, vocab_size, n_positions, head. */
PetscErrorCode gpt_config_set_from_options(const char *prefix, GPTConfig *cfg);
/* Checks the configuration; errors name the option, e.g. -policy_n_embd. */
PetscErrorCode gpt_config_check(const GPTConfig *cfg, const char *prefix);
/* Reads -<prefix>lr, min_lr_ratio, warmup, decay_steps, beta1, beta2, eps, weight_decay, grad_clip. */
PetscErrorCode adamw_set_from_options(const char *prefix, AdamWConfig *opt);

/* Tensor table for a configuration (no allocation of parameters). */
PetscErrorCode gpt_tensor_table(const GPTConfig *cfg, GPTTensor **tensors, int *ntensors, size_t *nparams);
PetscErrorCode gpt_create(const GPTConfig *cfg, const Backend *be, GPT **gpt);
PetscErrorCode gpt_destroy(GPT **gpt);
/* Index of a tensor by name, or -1. */
int gpt_find_tensor(const GPT *gpt, const char *name);

/* GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by
 * 1/sqrt(2*n_layer), zero biases, unit LayerNorm gains; draws keyed by
 * (seed, tensor, element) so the result is independent of layout. */
PetscErrorCode gpt_init_random(GPT *gpt, uint64_t seed);

/* Host <-> device copies of the flat buffers (params, m, v). */
PetscErrorCode gpt_params_get(const GPT *gpt, float *host);
PetscErrorCode gpt_params_set(GPT *gpt, const float *host);
PetscErrorCode gpt_optim_init(GPT *gpt); /* allocate zeroed m, v */
PetscErrorCode gpt_optim_get(const GPT *gpt, float *m_host, float *v_host);
PetscErrorCode gpt_optim_set(GPT *gpt, const float *m_host, const float *v_host, int step);

/* Full forward of B sequences of length T (T <= n_positions); tok is host [B*T].
 * Afterwards gpt_logits/gpt_values point at the head's output (device). */
PetscErrorCode gpt_forward(GPT *gpt, const int *tok, int B, int T);
const float   *gpt_logits(const GPT *gpt); /* [B*T, V], LM head */
const float   *gpt_values(const GPT *gpt); /* [B*T], scalar head */
/* After gpt_forward (LM head): logprob[n] = log p(target[n] | ...) on host; target < 0 gives 0. */
PetscErrorCode gpt_logprobs(GPT *gpt, const int *target, float *logprob);
/* The distribution a token was sampled from: softmax(logits * inv_temp)
 * restricted to an allowed set per row (top-k, top-p, min_new_tokens). Row n
 * of the last forward allows mask_ids[mask_off[n] .. mask_off[n+1]-1] (host
 * arrays, mask_off has N+1 entries); an empty range, or mask_off NULL, allows
 * the whole vocabulary. Training and inference use the generation's
 * distribution so that ratios and KL compare like with like. */
typedef struct {
  float      inv_temp;
  const int *mask_off, *mask_ids;
} GPTTokenDist;
/* As gpt_logprobs under a sampling distribution (dist NULL: plain softmax);
 * entropy (host [B*T], may be NULL) gets each row's entropy of that
 * distribution (0 where target < 0). gpt_backward_logprob then uses the same
 * distribution. */
PetscErrorCode gpt_logprobs_dist(GPT *gpt, const int *target, const GPTTokenDist *dist, float *logprob, float *entropy);
/* Scalar head: copy the values to host [B*T]. */
PetscErrorCode gpt_values_get(GPT *gpt, float *values);

PetscErrorCode gpt_zero_grad(GPT *gpt);
/* Backward from d(loss)/d(logprob) [B*T] (host) for the last forward (LM head).
 * Needs gpt_logprobs or gpt_logprobs_dist to have run with the same targets
 * (the distribution given there is used). Accumulates into grads. */
PetscErrorCode gpt_backward_logprob(GPT *gpt, const int *target, const float *dlogprob);
/* Backward from d(loss)/d(value) [B*T] (host) for the last forward (scalar head). */
PetscErrorCode gpt_backward_values(GPT *gpt, const float *dvalues);

/* Learning rate at optimizer step `step` (0-based): linear warm-up over
 * `warmup` steps, then cosine to lr*min_lr_ratio over decay_steps. */
PetscReal adamw_lr(const AdamWConfig *opt, int step);
/* Global gradient norm, clip scale, AdamW update, step += 1. */
PetscErrorCode gpt_adamw_step(GPT *gpt, const AdamWConfig *opt, PetscReal *lr_used, PetscReal *grad_norm);

/* KV cache for incremental decoding: nslot independent sequences of up to Tmax tokens. */
typedef struct {
  int    nslot, Tmax, n_layer, n_embd;
  float *k, *v; /* device, [n_layer][nslot][Tmax][C] */
} GPTKVCache;
PetscErrorCode gpt_kv_create(const GPT *gpt, int nslot, int Tmax, GPTKVCache **kv);
PetscErrorCode gpt_kv_destroy(const GPT *gpt, GPTKVCache **kv);
/* Forward of N new tokens: row r is token tok[r] of slot slot[r] at position
 * pos[r]; their keys and values enter the cache, each row attends to its
 * slot's positions 0..pos[r]. A prefill passes a whole prompt of one slot; a
 * decode step passes one token for each of many slots. out (host) gets the
 * logits [N,V] (LM head) or values [N] (scalar head). */
PetscErrorCode gpt_forward_cached(GPT *gpt, GPTKVCache *kv, const int *tok, const int *slot, const int *pos, int N, float *out);

/* Sizes for -dry_run and benchmarks. */
size_t gpt_activation_bytes(const GPTConfig *cfg, int B, int T);
double gpt_flops_per_token(const GPTConfig *cfg, int T, PetscBool training);

#endif
