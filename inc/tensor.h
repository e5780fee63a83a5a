/* tensor: the backend ops table. Everything numerical above this layer
 * (model, rl, gen) calls these ops and never touches a loop or a kernel, so a
 * CUDA backend implements the same table and nothing above it changes.
 *
 * Conventions
 * - Row-major float32. N is a count of token rows (N = B*T in training).
 * - Pointers are device pointers of the backend (host memory for "cpu").
 * - Backward ops ACCUMULATE (+=) into parameter gradients (dweight, dbias,
 *   dwte, dwpe) and into dinp where noted; callers zero gradients once per step.
 * - Every reduction is deterministic and independent of the thread count:
 *   sums run over fixed-size blocks in a fixed order.
 * - Matmul weights use the Conv1D layout of GPT-2 checkpoints, [C_in, C_out],
 *   unless the op says "transposed" ([C_out, C_in], e.g. the tied LM head
 *   wte [V,C] and the scalar head score.weight [1,C]). */
#ifndef RLFUSE_TENSOR_H
#define RLFUSE_TENSOR_H

#include <petscsys.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Backend Backend;

/* The settings of Backend.sample (gen's GenConfig as plain values). */
typedef struct {
  double    temperature; /* > 0: the distribution is softmax(logits / temperature) */
  double    top_p;       /* 1: no top-p */
  long long top_k;       /* 0: no top-k */
  int       greedy;      /* take the most probable allowed token instead of drawing */
  int       eos;         /* the id a row with ban_eos set may not draw (-1: none) */
  uint64_t  key;         /* the Philox key of the draws (gen: seed ^ GEN_RNG_DOMAIN) */
  uint32_t  iteration;
} BackendSampleCfg;

/* The one-entry allowed set "every id but e" of the logprob ops (see
 * logprob_forward), and back: is a row's range that set, and which e. */
static inline int tensor_set_but(int e) { return -e - 1; }
static inline int tensor_set_excluded(const int *ids, int n) { return n == 1 && ids[0] < 0 ? -(ids[0] + 1) : -1; }

/* Floats of the array attention_forward saves for the backward (its att):
 * the log-sum-exp of each query row, B*NH*T. */
static inline size_t tensor_attention_saved(size_t B, size_t NH, size_t T) { return B * NH * T; }

/* What Backend.matmul_fused folds into a matmul (at most one of gated and
 * norm_w):
 *   gated   inp holds N rows of 2C (gate | up); the input is
 *           swiglu_forward(inp, N, C)'s
 *   norm_w  the input is rmsnorm_forward(inp, N, C, norm_eps)'s with these
 *           weights (NULL: none)
 *   add     out += the product, as axpy(out, 1, product) adds it (out's old
 *           values are read); else out = the product */
typedef struct {
  PetscBool    gated, add;
  const float *norm_w;
  float        norm_eps;
} MatmulFusion;

struct Backend {
  const char *name; /* "cpu" or "cuda" */

  /* memory */
  PetscErrorCode (*alloc)(size_t bytes, void **ptr);      /* zero-filled */
  PetscErrorCode (*free)(void *ptr);
  /* Optional (NULL: free, then alloc): *ptr (from alloc, or NULL) to at
   * least `bytes`, contents not kept, the pages already touched kept. */
  PetscErrorCode (*grow)(void **ptr, size_t bytes);
  PetscErrorCode (*to_host)(void *dst, const void *src, size_t bytes);
  PetscErrorCode (*from_host)(void *dst, const void *src, size_t bytes);
  PetscErrorCode (*copy)(void *dst, const void *src, size_t bytes); /* device to device */
  PetscErrorCode (*zero)(void *ptr, size_t bytes);
  PetscErrorCode (*sync)(void);

  /* out[n,:] = wte[tok[n]-v0,:] + wpe[pos[n],:]. wte holds the rows of token
   * ids v0 .. v0+Vl-1 (all of them: v0 0, Vl V; a vocabulary-parallel shard
   * otherwise): a token outside contributes 0. wpe may be NULL (adds 0). */
  PetscErrorCode (*encoder_forward)(float *out, const int *tok, const int *pos, const float *wte, const float *wpe,
                                    int N, int C, int v0, int Vl);
  /* dwte[tok[n]-v0,:] += dout[n,:] for tokens in the shard; dwpe[pos[n],:] += dout[n,:] (either may be NULL) */
  PetscErrorCode (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *tok, const int *pos, int N,
                                     int C, int v0, int Vl);

  /* RMSNorm (the LLaMA family): out = inp * rstd * w, rstd[n] =
   * 1/sqrt(mean_c inp[n,c]^2 + eps), saved for backward. */
  PetscErrorCode (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
  /* dinp += ...; dw += ... */
  PetscErrorCode (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                     const float *rstd, int N, int C);

  /* Rotary position embedding, in place on the query and key heads of qkv
   * rows [N, (NH + 2*NKV)*hd] (q heads, then k heads, then v heads, which
   * are left alone). Hugging Face's rotate-half pairing: within a head,
   * element i < hd/2 pairs with i + hd/2 and the pair turns by the angle
   * pos[n] * inv_freq[i] (float product; inv_freq [hd/2] is a device array):
   *   x_i' = x_i cos - x_{i+hd/2} sin,  x_{i+hd/2}' = x_{i+hd/2} cos + x_i sin.
   * inverse 1 turns by minus the angle: the transform of the gradient. */
  PetscErrorCode (*rope)(float *qkv, const int *pos, const float *inv_freq, int N, int NH, int NKV, int hd,
                         int inverse);

  /* Qwen3's per-head RMSNorm, in place on the NH query and NKV key heads
   * of qkv rows [N, (NH + 2*NKV)*hd] (v is left alone): each head x becomes
   * x * r * w, r = 1/sqrt(mean x^2 + eps), w = wq for q heads and wk for k
   * heads [hd]. With in not NULL the heads' inputs go to in [N, (NH+NKV)*hd]
   * and r to rstd [N, NH+NKV], for the backward. */
  PetscErrorCode (*qk_norm_forward)(float *qkv, float *in, float *rstd, const float *wq, const float *wk, int N, int NH,
                                    int NKV, int hd, float eps);
  /* In place on the q and k heads of dqkv: d out becomes d in; dwq += ..., dwk += ... */
  PetscErrorCode (*qk_norm_backward)(float *dqkv, float *dwq, float *dwk, const float *in, const float *rstd,
                                     const float *wq, const float *wk, int N, int NH, int NKV, int hd);

  /* SwiGLU: out[n,j] = silu(gu[n,j]) * gu[n,F+j], gu [N,2F] (gate | up). */
  PetscErrorCode (*swiglu_forward)(float *out, const float *gu, int N, int F);
  /* dgu += d out / d gu . dout */
  PetscErrorCode (*swiglu_backward)(float *dgu, const float *gu, const float *dout, int N, int F);

  /* GPT-2 LayerNorm, eps 1e-5. mean and rstd [N] are saved for backward. */
  PetscErrorCode (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                      const float *b, int N, int C);
  /* dinp += ...; dw += ...; db += ... */
  PetscErrorCode (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                       const float *w, const float *mean, const float *rstd, int N, int C);

  /* out[N,OC] = inp[N,C] . W + bias. W is [C,OC], or [OC,C] if transposed. bias may be NULL. */
  PetscErrorCode (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                                   int OC, PetscBool transposed);
  /* Optional (NULL: the backend has none): matmul_forward with every output
   * row summed in an order fixed by C alone, whatever N, the row's place in
   * the call and the thread count, for generation's -gen_batch_invariant
   * (the cpu backend's row-wise kernels; larger calls run slower than
   * matmul_forward's). */
  PetscErrorCode (*matmul_forward_rows)(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                                        int OC, PetscBool transposed);
  /* Optional (NULL: the backend has none): a decode step's matmul of 1 to
   * fused_rows rows with its neighbours folded in (MatmulFusion), with the
   * bits of the ops it replaces. */
  PetscErrorCode (*matmul_fused)(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                                 PetscBool transposed, const MatmulFusion *f);
  int fused_rows;
  /* dinp += dout . W^T (dinp may be NULL); dw += inp^T . dout (in w's layout); dbias += colsum(dout) (may be NULL) */
  PetscErrorCode (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                    const float *w, int N, int C, int OC, PetscBool transposed);

  /* Causal self-attention over B sequences of length T (training and full
   * forward), with grouped-query attention: NH query heads and NKV key/value
   * heads (NKV divides NH; query head h reads kv head h / (NH/NKV); NKV = NH
   * is plain multi-head attention). Head size hd = C/NH, C the query width.
   * qkv [B,T,C + 2*Ckv] (q | k | v, Ckv = NKV*hd, heads contiguous inside
   * each), out [B,T,C]; scale 1/sqrt(hd). att is what the backward needs
   * (NULL: a forward that no backward follows): the log-sum-exp [B,NH,T]
   * of each query row's scaled scores s_tj = scale * q_t.k_j (natural log,
   * over j <= t), so that the probabilities are exp(s_tj - lse_t): no T x T
   * array anywhere (both backends: tiled); size it with
   * tensor_attention_saved. */
  PetscErrorCode (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV);
  /* dqkv += ...; out and att are the forward's */
  PetscErrorCode (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *out,
                                       const float *att, int B, int T, int C, int NH, int NKV);
  /* Attention with a KV cache. Row r (of N) is the token of cache slot slot[r]
   * at position pos[r]. All rows' k and v are first written into
   * kcache/vcache [nslot, Tmax, Ckv] at (slot[r], pos[r]); then each row's
   * query attends to positions 0..pos[r] of its slot. out [N,C]. */
  PetscErrorCode (*attention_cached)(float *out, float *kcache, float *vcache, const float *qkv, const int *slot,
                                     const int *pos, int N, int Tmax, int C, int NH, int NKV);

  /* GELU, tanh approximation (GPT-2's gelu_new). */
  PetscErrorCode (*gelu_forward)(float *out, const float *inp, size_t n);
  /* dinp += dout * gelu'(inp) */
  PetscErrorCode (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

  /* out = a + b */
  PetscErrorCode (*residual_forward)(float *out, const float *a, const float *b, size_t n);
  /* y += alpha * x */
  PetscErrorCode (*axpy)(float *y, float alpha, const float *x, size_t n);
  /* x *= alpha */
  PetscErrorCode (*scale)(float *x, float alpha, size_t n);

  /* Log-probabilities of sampled tokens under the sampling distribution
   * q = softmax(logits[n,:] * inv_temp) restricted to row n's allowed set.
   * The allowed set of row n is mask_ids[mask_off[n] .. mask_off[n+1]-1]; a
   * row with an empty range, or every row when mask_off is NULL, allows the
   * whole vocabulary (inv_temp 1 and no mask is the plain log-softmax). A
   * range of exactly one negative id, -(e+1) (tensor_set_but(e)), is the
   * compact form of "every id but e" (EOS banned and nothing else cut: one
   * int instead of V-1); it gives exactly the bits of the explicit list of
   * those V-1 ascending ids, in every op below. A negative id anywhere else,
   * or an e outside [0,V), is an error.
   *   logprob[n] = inv_temp*logits[n,target[n]] - lse[n], lse[n] = logsumexp over the set of inv_temp*logits
   *   entropy[n] = -sum_{v in set} q_v log q_v            (entropy may be NULL)
   * lse is saved for backward (may be NULL). Rows with target < 0 get
   * logprob 0 and entropy 0. A target outside its row's set is an error
   * (the cuda backend checks masked rows in the kernel and gives NaN for an
   * unmasked target >= V without a host sync; model_logprobs checks targets on
   * the host before they reach any backend). */
  PetscErrorCode (*logprob_forward)(float *logprob, float *lse, float *entropy, const float *logits, const int *target,
                                    float inv_temp, const int *mask_off, const int *mask_ids, int N, int V);
  /* dlogits[n,v] = dlogprob[n] * inv_temp * (onehot(target[n])_v - q_v), q_v = 0 outside the set
   * (overwrites; rows with target < 0 are zeroed) */
  PetscErrorCode (*logprob_backward)(float *dlogits, const float *logits, const float *lse, const int *target,
                                     const float *dlogprob, float inv_temp, const int *mask_off, const int *mask_ids,
                                     int N, int V);

  /* Vocabulary-parallel log-probabilities: logits [N,Vl] are the columns of
   * token ids v0 .. v0+Vl-1; targets and allowed ids are global ids and
   * those outside the shard are skipped. Per row, over the allowed ids in
   * the shard, with y = inv_temp*logits:
   *   stats[4n+0] = m = max y (-inf when none), stats[4n+1] = s = sum exp(y-m),
   *   stats[4n+2] = sum exp(y-m)*(y-m), stats[4n+3] = y of the target if in the shard, else 0.
   * Combining the shards' stats gives lse, logprob and entropy (model layer). */
  PetscErrorCode (*logprob_stats)(double *stats, const float *logits, const int *target, float inv_temp,
                                  const int *mask_off, const int *mask_ids, int N, int Vl, int v0);
  /* logprob_backward on a shard: dlogits[n,j] for id v0+j, with the global lse [N] (required) */
  PetscErrorCode (*logprob_backward_shard)(float *dlogits, const float *logits, const float *lse, const int *target,
                                           const float *dlogprob, float inv_temp, const int *mask_off,
                                           const int *mask_ids, int N, int Vl, int v0);

  /* Draws one token for each of N rows (gen's sampler, docs/design.md
   * "Generation"): row n reads logits[row[n], 0..V) (row NULL: row n), is
   * tempered, loses cfg->eos when ban_eos[n] (ban_eos NULL: never), is cut
   * by top-k then top-p (rank order: larger weight first, lower id first
   * among equals), and draws with the uniform
   * rng_uniform(cfg->key, cfg->iteration, sample_id[n], position[n], 0)
   * through an inverse CDF in token-id order (or takes the most probable
   * with cfg->greedy). Per row: token[n] (-1 when a logit that could be
   * drawn is NaN or +inf, or none is finite), logprob[n] (its
   * log-probability under the cut, tempered distribution, in double,
   * rounded to float), nallowed[n] (the set's size; 0 when nothing
   * restricts it) and boundary[n], the compact form of the set: the
   * last-ranked token kept (-1: top-k and top-p cut nothing); the set is
   * the tokens not banned that rank no later than boundary[n] on this
   * row's logits (inc/internal/sample_core.h, sample_kept). With allowed not
   * NULL, allowed[n*V ..] gets the set's ids in ascending order (nallowed[n]
   * of them). work: sample_work(N, V) bytes of this backend's memory.
   * Every array is this backend's memory. The cpu op gives exactly the
   * bits of the tests' host sampler (regression/ref_sample.c); the cuda op runs the same operations in the same
   * order and differs only where the libraries' exp and log do. */
  PetscErrorCode (*sample)(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, void *work,
                           const float *logits, const int *row, const int *sample_id, const int *position,
                           const int *ban_eos, const BackendSampleCfg *cfg, int N, int V);
  size_t (*sample_work)(int N, int V);

  /* *out = sum of x[i]^2 over n elements (host scalar result) */
  PetscErrorCode (*sumsq)(double *out, const float *x, size_t n);

  /* PyTorch AdamW (decoupled weight decay) on n elements at step t (1-based):
   *   p -= lr*wd*p; m = b1*m + (1-b1)*g*gs; v = b2*v + (1-b2)*(g*gs)^2;
   *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
   * gs is the gradient scale from global-norm clipping. */
  PetscErrorCode (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                          float eps, float wd, int t, float gs);

  /* Optional (NULL: nothing to do). ptr .. ptr+bytes (from alloc) holds
   * weights: a backend may keep converted copies of them between calls
   * (cuda under -precision bf16: the bf16 operands of the matmuls), which
   * it refreshes itself after any op of this table writes there. */
  PetscErrorCode (*weights_hint)(void *ptr, size_t bytes);

  /* Optional graphs (NULL on the cpu): the ops queued between graph_begin
   * and graph_end are recorded, not run, into *graph; graph_launch runs the
   * record again with the same pointers and sizes (and the weights' current
   * values, see weights_hint). epoch() changes whenever memory that a
   * recorded op may point to has moved (the backend's scratch grew, a
   * weight copy was freed): a graph recorded before is then stale. An op
   * that would need to grow scratch while recording fails, so a caller
   * runs the same ops once before recording them. */
  PetscErrorCode (*graph_begin)(void);
  PetscErrorCode (*graph_end)(void **graph);
  PetscErrorCode (*graph_launch)(void *graph);
  PetscErrorCode (*graph_destroy)(void *graph);
  unsigned long long (*epoch)(void);
};

/* The backend with this name ("cpu", or "cuda" when built with CUDA). */
PetscErrorCode backend_get(const char *name, const Backend **be);
/* Per-backend registration; the cuda one lives in cuda/. */
const Backend *backend_cpu(void);
/* The CUDA backend (src/tensor/cuda_backend.c over cuda/). The first call
 * picks this rank's GPU (its rank on the node modulo the node's device
 * count) and sets up the streams and cuBLAS; it fails, saying why, when no
 * device is found or rlfuse was built without CUDA. */
PetscErrorCode backend_cuda(const Backend **be);
/* -precision: PETSC_FALSE fp32 everywhere (the default); PETSC_TRUE bf16
 * operands with fp32 accumulation for the matmuls and the training
 * attention's products (q, k, v, P, dS), and the outputs of matmuls,
 * LayerNorm, RMSNorm, attention, GELU and SwiGLU rounded to bf16 values (the arrays stay
 * float, so memory is not halved); the residual stream, log-probabilities,
 * fp32 master weights, gradients and optimizer state are not rounded.
 * Applies to the ops called after it; CUDA only (bf16 fails without CUDA). */
PetscErrorCode backend_cuda_set_precision(PetscBool bf16);
/* The cuda backend's tiled attention makes its score panels for as many
 * (sequence, kv head) units at a time as fit bytes (0: the default,
 * 256 MiB); was (may be NULL) gets the former value. Tests set it small so
 * that a call runs several chunks. */
PetscErrorCode backend_cuda_set_attention_panel_bytes(size_t bytes, size_t *was);
/* The device memory in use on this rank's GPU (every process's, the CUDA
 * context included): benchmarks take the growth over a run. */
PetscErrorCode backend_cuda_mem_used(size_t *bytes);
/* The memory backend be's arrays come from that is free now: the host's
 * available memory for the cpu backend (/proc/meminfo), the GPU's free
 * memory for cuda. */
PetscErrorCode backend_mem_free(const Backend *be, double *bytes);
/* Bytes a parameter's kept low-precision copies take beside its fp32
 * master weight on be: 2 under cuda's -precision bf16 (the bf16 copy the
 * matmuls read, cuda_wcache.cu), else 0. */
double backend_weight_copy_bytes(const Backend *be);
/* Whether this process can use a CUDA device (never an error); why gets the
 * device count or the reason (no device, the runtime's answer, or a build
 * without CUDA). Tests use it to skip. */
PetscErrorCode backend_cuda_available(char *why, size_t len, PetscBool *yes);
/* -device and -precision: the backend named (cpu or cuda), with bf16 set on
 * cuda; bf16 on the cpu is an error naming -precision. */
PetscErrorCode backend_setup(const char *device, PetscBool bf16, const Backend **be);

/* CUDA runtime/driver versions and device count, or "none (built without CUDA)". */
PetscErrorCode backend_cuda_version(char *buf, size_t len);

#endif
