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
#include "comm.h"

typedef enum { GPT_HEAD_LM = 0, GPT_HEAD_SCALAR = 1 } GPTHead;
extern const char *const GPTHeadNames[]; /* "lm", "scalar", then PETSc's enum trailer */

/* The architecture: GPT-2, or the LLaMA family (Llama 2/3, Mistral without
 * a sliding window, Qwen2/2.5, Qwen3, SmolLM2): RMSNorm, rotary position
 * embeddings, grouped-query attention, a SwiGLU MLP, no position table. */
typedef enum { GPT_ARCH_GPT2 = 0, GPT_ARCH_LLAMA = 1 } GPTArch;
extern const char *const GPTArchNames[]; /* "gpt2", "llama", then PETSc's enum trailer */
/* Rotary frequency scaling: none, or Llama 3.1's "llama3" (long and short
 * wavelengths treated apart, a smooth blend between). */
typedef enum { GPT_ROPE_NONE = 0, GPT_ROPE_LLAMA3 = 1 } GPTRopeScaling;
extern const char *const GPTRopeScalingNames[];

typedef struct {
  int     n_layer, n_head, n_embd, vocab_size, n_positions;
  GPTHead head;
  /* The LLaMA family's own settings (zero for GPT-2, whose values the
   * gpt_n_kv_head/gpt_n_ffn helpers supply). n_embd is the residual width
   * and n_head * head_dim (gpt_q_width) the query width. */
  GPTArch        arch;
  int            n_kv_head;      /* key/value heads, dividing n_head (n_head: multi-head, 1: multi-query) */
  int            n_ffn;          /* SwiGLU width (intermediate_size) */
  PetscBool      qkv_bias;       /* q/k/v projections have biases (Qwen2) */
  PetscBool      tie_embeddings; /* LM head tied to the token embedding */
  double         rope_theta, norm_eps;
  int            head_dim;       /* width of an attention head (0: n_embd / n_head; Qwen3 sets its own) */
  PetscBool      qk_norm;        /* RMSNorm over each query and key head before the rotation (Qwen3) */
  GPTRopeScaling rope_scaling;
  double         rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  int            rope_original_max_positions;
} GPTConfig;

static inline PetscBool gpt_is_llama(const GPTConfig *c) { return c->arch == GPT_ARCH_LLAMA ? PETSC_TRUE : PETSC_FALSE; }
/* Width of one attention head, and of all query heads together (n_embd
 * unless a LLaMA-family model sets head_dim). */
static inline int gpt_head_dim(const GPTConfig *c) { return c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head; }
static inline int gpt_q_width(const GPTConfig *c) { return c->n_head * gpt_head_dim(c); }
/* Key/value heads and MLP width of any architecture (GPT-2: n_head, 4 n_embd). */
static inline int gpt_n_kv_head(const GPTConfig *c) { return gpt_is_llama(c) ? c->n_kv_head : c->n_head; }
static inline int gpt_n_ffn(const GPTConfig *c) { return gpt_is_llama(c) ? c->n_ffn : 4 * c->n_embd; }
/* The LM head has its own weight (untied LLaMA) rather than the embedding's. */
static inline PetscBool gpt_untied_head(const GPTConfig *c) { return gpt_is_llama(c) && !c->tie_embeddings && c->head == GPT_HEAD_LM ? PETSC_TRUE : PETSC_FALSE; }
/* Whether two configurations describe the same model (every field that
 * shapes or computes it). */
PetscBool gpt_config_equal(const GPTConfig *a, const GPTConfig *b);
/* Tensor-parallel ranks that hold one key/value head's copy: 1 when tp
 * divides n_kv_head; tp / n_kv_head when n_kv_head divides tp (Megatron's
 * replication: each block of that many consecutive tp ranks shares a head). */
static inline int gpt_kv_rep(const GPTConfig *c, int tp) { return tp > gpt_n_kv_head(c) ? tp / gpt_n_kv_head(c) : 1; }
/* Key/value heads one tp rank holds: n_kv_head / tp, or one replicated head. */
static inline int gpt_kv_heads_local(const GPTConfig *c, int tp) { return gpt_n_kv_head(c) * gpt_kv_rep(c, tp) / tp; }
/* tp can cut this model: it divides n_head, n_ffn and vocab_size, and
 * divides n_kv_head or is a multiple of it. */
static inline PetscBool gpt_tp_divides(const GPTConfig *c, int tp)
{
  int kv = gpt_n_kv_head(c);
  return tp >= 1 && c->n_head % tp == 0 && (kv % tp == 0 || tp % kv == 0) && gpt_n_ffn(c) % tp == 0 && c->vocab_size % tp == 0 ? PETSC_TRUE : PETSC_FALSE;
}
/* Tensors of the transformer trunk (what a critic or reward model takes from
 * a policy checkpoint): everything but the LM and scalar heads. */
PetscBool gpt_tensor_is_trunk(const char *name);
/* The inverse frequencies of the rotary embedding [head_dim/2] (host),
 * with the configured scaling, as Hugging Face computes them. */
void gpt_rope_inv_freq(const GPTConfig *cfg, float *inv_freq);

/* One named parameter tensor inside the flat buffer. In a shard (below)
 * shape and numel are the local piece's, numel is 0 for a tensor the shard
 * does not hold, and gshape is always the full (logical) shape. */
typedef struct {
  char      name[64];  /* Hugging Face key, e.g. "transformer.h.0.attn.c_attn.weight" */
  int       ndim;      /* 1 or 2 */
  int       shape[2];
  size_t    offset;    /* in floats, into params/grads/m/v */
  size_t    numel;
  PetscBool decay;     /* weight decay applies (2-D tensors) */
  int       gshape[2]; /* full shape (gshape[1] 0 for 1-D) */
  int       split;     /* the dimension tensor parallelism cuts (-1: replicated), also in the whole model's table */
  int       groups;    /* the split dimension is `groups` equal blocks (3: q|k|v), each cut into tp pieces */
  PetscBool norm;      /* counted by this rank in the global gradient norm (replicated tensors by tp rank 0 only; the last stage's tied wte copy never) */
  int       kv_heads;  /* k and v projections (weights, biases): the model's n_kv_head, which caps their pieces (0: any other tensor) */
} GPTTensor;

/* A tensor's pieces under tensor-parallel size tp: tp/rep of them, rank t
 * holding piece t/rep, where rep (gpt_tensor_rep) is the number of
 * consecutive tp ranks sharing a copy: above n_kv_head, k and v are
 * replicated (their gradients are summed over the block, gpt_grads_sync). */
static inline int gpt_tensor_rep(const GPTTensor *f, int tp) { return f->kv_heads > 0 && tp > f->kv_heads ? tp / f->kv_heads : 1; }
static inline int gpt_tensor_pieces(const GPTTensor *f, int tp) { return tp / gpt_tensor_rep(f, tp); }
static inline int gpt_tensor_piece_of(const GPTTensor *f, int tp, int t) { return t / gpt_tensor_rep(f, tp); }

/* A model shard: the piece of a model one rank holds under tensor and
 * pipeline parallelism (Megatron style).
 *   c_attn (weight [C,3C], bias [3C]): q, k and v blocks each cut by columns,
 *     so rank t holds heads [t*NH/tp, (t+1)*NH/tp) of all three;
 *   mlp.c_fc (weight [C,4C], bias [4C]): columns;
 *   attn.c_proj and mlp.c_proj weights: rows (their biases are replicated);
 *   wte [V,C]: rows (vocabulary-parallel embedding and LM head);
 *   wpe, LayerNorms, score.weight: replicated.
 * Stage p holds layers [l0, l1); the first stage wte and wpe, the last ln_f
 * and the head (for the LM head its own copy of wte, whose gradient is summed
 * with the first stage's over embed_comm). With tp = pp = 1 a shard is the
 * whole model. */
typedef struct {
  int tp, t;  /* tensor-parallel size and this rank's index */
  int pp, p;  /* pipeline stages and this rank's stage */
  int l0, l1; /* layers of this stage */
} GPTShard;

/* Layers of stage p of pp, split so the stages' parameter counts (embeddings
 * with the first stage, ln_f and head with the last) are as even as possible;
 * every stage gets at least one layer. */
void gpt_stage_layers(const GPTConfig *cfg, int pp, int p, int *l0, int *l1);
/* The shard of mesh coordinates (p, t); NULL mesh: the whole model. */
void gpt_shard_of_mesh(const GPTConfig *cfg, const Mesh *mesh, GPTShard *sh);
/* Checks that a shard layout is possible: tp divides n_head and vocab_size,
 * pp <= n_layer. The message names the option prefix given (e.g. -actor_train_). */
PetscErrorCode gpt_shard_check(const GPTConfig *cfg, int tp, int pp, const char *what);
/* Tensor table of a shard (sh NULL: the whole model). */
PetscErrorCode gpt_tensor_table_shard(const GPTConfig *cfg, const GPTShard *sh, GPTTensor **tensors, int *ntensors, size_t *nparams);
/* Index range along a tensor's split dimension of piece a of q for group g:
 * [*lo, *hi). Rank t of tp holds pieces q/tp*t .. q/tp*(t+1)-1 when tp divides q. */
void gpt_tensor_piece(const GPTTensor *full, int q, int a, int g, int *lo, int *hi);
/* Copies n indices along a split dimension: from index src_lo of a buffer
 * whose split-dimension extent is src_D to index dst_lo of one with extent
 * dst_D (the other dimension is the full one). full describes the tensor. */
void gpt_copy_span(const GPTTensor *full, int split, const float *src, int src_D, int src_lo, float *dst, int dst_D, int dst_lo, int n);
/* Copies between a full flat buffer (host, table of the whole model) and a
 * shard's flat buffer (host, table of sh): extract takes the shard's pieces,
 * insert puts them back. */
PetscErrorCode gpt_shard_extract(const GPTConfig *cfg, const GPTShard *sh, const float *full, float *shard);
PetscErrorCode gpt_shard_insert(const GPTConfig *cfg, const GPTShard *sh, const float *shard, float *full);

typedef struct {
  PetscReal lr, min_lr_ratio, beta1, beta2, eps, weight_decay, grad_clip;
  PetscInt  warmup, decay_steps; /* cosine from lr to lr*min_lr_ratio over decay_steps (0: constant after warm-up) */
} AdamWConfig;

typedef struct GPTActs GPTActs; /* activation buffers, private to src/model */

/* Distributed training options of a model on a mesh. */
typedef struct {
  PetscBool zero1;        /* ZeRO-1: AdamW moments sharded over the dp replicas */
  size_t    bucket_bytes; /* gradient all-reduce bucket size */
} GPTDistConfig;

typedef struct {
  GPTConfig      cfg;
  const Backend *be;
  GPTShard       sh;             /* whole model when mesh is NULL */
  const Mesh    *mesh;           /* the mesh the shard lives on, or NULL (one rank) */
  GPTDistConfig  dist;
  int            Cl, NHl, Vl, v0; /* local query width n_head*head_dim/tp, heads, vocabulary rows and first row */
  int            NKVl, Ckvl, Fl;  /* local key/value heads and width (one replicated head when tp > n_kv_head), MLP width */
  float         *inv_freq;        /* device [hd/2], the rotary frequencies (LLaMA) */
  int            ntensors;
  GPTTensor     *tensors;
  size_t         nparams;
  float         *params, *grads; /* device */
  float         *m, *v;          /* AdamW moments (device), allocated by gpt_optim_init */
  int            step;           /* optimizer steps taken */
  GPTActs       *acts;           /* the selected activation slot */
  GPTActs      **slots;          /* every slot (slots[0] is the first) */
  int            nslots;
  double        *stats_host;     /* vocabulary-parallel log-prob statistics, host [4*N*tp] */
  size_t         stats_cap;
  size_t         own0, own1;     /* ZeRO-1: the flat range whose AdamW moments this rank keeps (m, v hold own1-own0) */
  PetscBool      grads_synced;   /* gpt_grads_sync ran since the last zero_grad or step */
  int            msg_model, msg_mb; /* what the stage messages' tags carry (gpt_msg_ids) */
} GPT;

/* Reads -<prefix>arch, n_layer, n_head, n_embd, vocab_size, n_positions,
 * head, and for arch llama n_kv_head, n_ffn, qkv_bias, tie_embeddings,
 * rope_theta, norm_eps, head_dim, qk_norm and the rope scaling options. */
PetscErrorCode gpt_config_set_from_options(const char *prefix, GPTConfig *cfg);
/* Whether any of the architecture options -<prefix>arch, n_layer, ... was
 * given (deck or command line). */
PetscErrorCode gpt_config_options_given(const char *prefix, PetscBool *any);
/* Records cfg's values as those of the -<prefix> architecture options (run
 * record, used.deck), for a model whose architecture came from a file. */
PetscErrorCode gpt_config_record(const char *prefix, const GPTConfig *cfg);
/* Checks the configuration; errors name the option, e.g. -policy_n_embd. */
PetscErrorCode gpt_config_check(const GPTConfig *cfg, const char *prefix);
/* The same checks for a configuration read from a file (a checkpoint's
 * attributes); messages name the attribute, the caller adds the file. */
PetscErrorCode gpt_config_check_file(const GPTConfig *cfg);
/* Reads -<prefix>lr, min_lr_ratio, warmup, decay_steps, beta1, beta2, eps, weight_decay, grad_clip. */
PetscErrorCode adamw_set_from_options(const char *prefix, AdamWConfig *opt);

/* Tensor table for a configuration (no allocation of parameters). */
PetscErrorCode gpt_tensor_table(const GPTConfig *cfg, GPTTensor **tensors, int *ntensors, size_t *nparams);
PetscErrorCode gpt_create(const GPTConfig *cfg, const Backend *be, GPT **gpt);
/* The shard of cfg for this rank's coordinates on mesh (which must contain
 * this rank); tp and pp collectives go over the mesh's communicators. */
PetscErrorCode gpt_create_on_mesh(const GPTConfig *cfg, const Backend *be, const Mesh *mesh, GPT **gpt);
/* Micro-batches a pipeline stage keeps in flight: forward and backward use
 * activation slot k (0..nslots-1) selected here. Default 1 slot. */
PetscErrorCode gpt_acts_slots(GPT *gpt, int nslots);
/* ZeRO-1: AdamW moments sharded over the mesh's dp replicas (each keeps
 * the moments of one contiguous range of the flat buffer, updates those
 * parameters, and the replicas then share them). Before gpt_optim_init. */
PetscErrorCode gpt_set_zero1(GPT *gpt, PetscBool on);
PetscErrorCode gpt_acts_select(GPT *gpt, int k);
/* The model id (0..GPT_MSG_MODELS-1) and micro-batch that this shard's
 * pipeline messages carry in their MPI tags from now on (default 0, 0).
 * Stages of one pipeline must agree on both for each micro-batch; then the
 * stages may run micro-batches in different orders, and two models' stages
 * may share ranks and a communicator. Errors if the tag would pass the MPI
 * implementation's MPI_TAG_UB. */
#define GPT_MSG_MODELS 4
PetscErrorCode gpt_msg_ids(GPT *gpt, int model, int mb);
/* Stage roles of a shard. */
static inline PetscBool gpt_first_stage(const GPT *g) { return g->sh.p == 0 ? PETSC_TRUE : PETSC_FALSE; }
static inline PetscBool gpt_last_stage(const GPT *g) { return g->sh.p == g->sh.pp - 1 ? PETSC_TRUE : PETSC_FALSE; }
PetscErrorCode gpt_destroy(GPT **gpt);
/* Tensor 0 of every table is the token embedding (GPT-2 wte, LLaMA embed_tokens). */
#define GPT_T_WTE 0
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

/* Bytes by which this process's activation buffers (every model's) have
 * grown so far: each growth is a first touch of new pages, which a run
 * pays in the iterations that bring a longer batch than any before. */
double gpt_acts_grown_bytes(void);

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
/* On a mesh: adds the dp replicas' gradients (in buckets) and the tied
 * embedding's two copies; once per step (gpt_adamw_step calls it if the
 * caller did not). */
PetscErrorCode gpt_grads_sync(GPT *gpt);
/* Global gradient norm, clip scale, AdamW update, step += 1: gpt_grad_norm
 * then gpt_adamw_update. */
PetscErrorCode gpt_adamw_step(GPT *gpt, const AdamWConfig *opt, PetscReal *lr_used, PetscReal *grad_norm);
/* The two halves of a step, so a caller can refuse a step before anything
 * changes: gpt_grad_norm synchronises the gradients (gpt_grads_sync) and
 * returns their global norm (the same on every rank of the mesh), touching
 * no weight or moment; gpt_adamw_update then clips against that norm and
 * applies AdamW (step += 1). */
PetscErrorCode gpt_grad_norm(GPT *gpt, PetscReal *grad_norm);
PetscErrorCode gpt_adamw_update(GPT *gpt, const AdamWConfig *opt, PetscReal norm, PetscReal *lr_used);

/* KV cache for incremental decoding: nslot independent sequences of up to
 * Tmax tokens. n_embd is this shard's key (and value) width per position,
 * n_kv_head/tp heads. */
typedef struct {
  int    nslot, Tmax, n_layer, n_embd;
  float *k, *v; /* device, [n_layer][nslot][Tmax][n_embd] */
} GPTKVCache;
PetscErrorCode gpt_kv_create(const GPT *gpt, int nslot, int Tmax, GPTKVCache **kv);
PetscErrorCode gpt_kv_destroy(const GPT *gpt, GPTKVCache **kv);
/* A slot's keys and values of positions [0, npos) of this rank's shard (its
 * stage's layers, its heads), to or from host memory: buf holds
 * gpt_kv_floats(kv, npos) floats, keys then values, layer by layer. For
 * moving a running sample to another engine of the same layout. */
size_t         gpt_kv_floats(const GPTKVCache *kv, int npos);
PetscErrorCode gpt_kv_get(const GPT *gpt, const GPTKVCache *kv, int slot, int npos, float *buf);
PetscErrorCode gpt_kv_put(const GPT *gpt, GPTKVCache *kv, int slot, int npos, const float *buf);
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
