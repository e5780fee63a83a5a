/* model: the decoder-only transformer of every family (GPT-2, the LLaMA
 * family; the differences are rows of the architecture table, src/model/arch.c).
 * Configuration per role from options, one flat
 * parameter buffer with named views in Hugging Face state-dict order, forward,
 * backward, the LM head (tied or its own) and the scalar head (critic/reward),
 * an incremental forward with a KV cache, and AdamW with global-norm clipping
 * and a warm-up + cosine learning-rate schedule.
 *
 * All tensor work goes through the Backend ops table (tensor.h). The public
 * functions take and return host arrays; device copies are internal. */
#ifndef RLFUSE_MODEL_H
#define RLFUSE_MODEL_H

#include "tensor.h"
#include "comm.h"

typedef enum { MODEL_HEAD_LM = 0, MODEL_HEAD_SCALAR = 1 } ModelHead;
extern const char *const ModelHeadNames[]; /* "lm", "scalar", then PETSc's enum trailer */

/* The architecture: GPT-2, or the LLaMA family (Llama 2/3, Mistral without
 * a sliding window, Qwen2/2.5, Qwen3, SmolLM2): RMSNorm, rotary position
 * embeddings, grouped-query attention, a SwiGLU MLP, no position table.
 * Each is a row of the architecture table (model_archs, src/model/arch.c)
 * saying what differs; the code asks the row, so a family that differs only
 * in these properties is one more row (docs/models.md). */
typedef enum { MODEL_ARCH_GPT2 = 0, MODEL_ARCH_LLAMA = 1, MODEL_ARCH_COUNT } ModelArch;
extern const char *const ModelArchNames[]; /* the rows' names ("gpt2", "llama"), then PETSc's enum trailer */
typedef enum {
  MODEL_NORM_LAYER = 0,
  MODEL_NORM_RMS   = 1
} ModelNorm; /* LayerNorm (gain and bias, eps 1e-5), RMSNorm (gain, -norm_eps) */
typedef enum {
  MODEL_POS_LEARNED = 0,
  MODEL_POS_ROTARY  = 1
} ModelPositions; /* a learned table of n_positions rows, or rotary embeddings (-rope_*) */
typedef enum {
  MODEL_MLP_GELU   = 0,
  MODEL_MLP_SWIGLU = 1
} ModelMlp; /* GELU over 4 n_embd, or SwiGLU over -n_ffn (gate|up, then down) */
/* Tensor names and shapes: GPT-2's Conv1D ones (transformer.h.N.*, weights
 * [in,out], q|k|v one c_attn of three equal blocks), or nn.Linear ones
 * (model.layers.N.*, weights [out,in], q, k and v apart, so k and v may have
 * fewer heads). */
typedef enum { MODEL_LAYOUT_CONV1D = 0, MODEL_LAYOUT_LINEAR = 1 } ModelLayout;
typedef enum {
  MODEL_TIE_ALWAYS = 0,
  MODEL_TIE_OPTION = 1
} ModelTie; /* the LM head is the token embedding, or is under -tie_embeddings */
typedef struct {
  const char    *name;        /* -<role>_arch's value and a checkpoint's arch attribute (ModelArchNames[row]) */
  ModelNorm      norm;
  ModelPositions pos;
  ModelMlp       mlp;
  ModelLayout    layout;
  PetscBool      linear_bias; /* every linear layer has a bias (else none, but q, k and v's under -qkv_bias) */
  PetscBool      qk_norm;     /* -qk_norm may add RMSNorms over each query and key head */
  ModelTie       tie;
  PetscBool settings; /* reads the shape settings (-n_kv_head, -n_ffn, -head_dim, -qkv_bias, -qk_norm, -tie_embeddings,
                         -rope_*, -norm_eps), which its checkpoints carry */
  const char    *members;     /* the models it covers, for -arch's help */
} ModelArchRow;
extern const ModelArchRow model_archs[MODEL_ARCH_COUNT];
/* Rotary frequency scaling: none, or Llama 3.1's "llama3" (long and short
 * wavelengths treated apart, a smooth blend between). */
typedef enum { MODEL_ROPE_NONE = 0, MODEL_ROPE_LLAMA3 = 1 } ModelRopeScaling;
extern const char *const ModelRopeScalingNames[];

typedef struct {
  int     n_layer, n_head, n_embd, vocab_size, n_positions;
  ModelHead head;
  /* The LLaMA family's own settings (zero for GPT-2, whose values the
   * model_n_kv_head/model_n_ffn helpers supply). n_embd is the residual width
   * and n_head * head_dim (model_q_width) the query width. */
  ModelArch      arch;
  int            n_kv_head;      /* key/value heads, dividing n_head (n_head: multi-head, 1: multi-query) */
  int            n_ffn;          /* SwiGLU width (intermediate_size) */
  PetscBool      qkv_bias;       /* q/k/v projections have biases (Qwen2) */
  PetscBool      tie_embeddings; /* LM head tied to the token embedding */
  double         rope_theta, norm_eps;
  int            head_dim;       /* width of an attention head (0: n_embd / n_head; Qwen3 sets its own) */
  PetscBool      qk_norm;        /* RMSNorm over each query and key head before the rotation (Qwen3) */
  ModelRopeScaling rope_scaling;
  double         rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  int            rope_original_max_positions;
} ModelConfig;

/* The row of a configuration's architecture. */
static inline const ModelArchRow *model_arch(const ModelConfig *c) { return &model_archs[c->arch]; }
/* Linear weights stored [out,in] (nn.Linear): matmuls take them transposed. */
static inline PetscBool model_weights_out_in(const ModelConfig *c)
{
  return model_arch(c)->layout == MODEL_LAYOUT_LINEAR ? PETSC_TRUE : PETSC_FALSE;
}
/* Width of one attention head, and of all query heads together (n_embd
 * unless a LLaMA-family model sets head_dim). */
static inline int model_head_dim(const ModelConfig *c) { return c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head; }
static inline int model_q_width(const ModelConfig *c) { return c->n_head * model_head_dim(c); }
/* Key/value heads and MLP width of any architecture: a fused c_attn's three
 * equal blocks give n_head; a GELU MLP is 4 n_embd wide. */
static inline int model_n_kv_head(const ModelConfig *c)
{
  return model_arch(c)->layout == MODEL_LAYOUT_LINEAR ? c->n_kv_head : c->n_head;
}
static inline int model_n_ffn(const ModelConfig *c)
{
  return model_arch(c)->mlp == MODEL_MLP_SWIGLU ? c->n_ffn : 4 * c->n_embd;
}
/* The LM head has its own weight (-tie_embeddings false) rather than the embedding's. */
static inline PetscBool model_untied_head(const ModelConfig *c)
{
  return model_arch(c)->tie == MODEL_TIE_OPTION && !c->tie_embeddings && c->head == MODEL_HEAD_LM ? PETSC_TRUE
                                                                                                  : PETSC_FALSE;
}
/* Whether two configurations describe the same model (every field that
 * shapes or computes it). */
PetscBool model_config_equal(const ModelConfig *a, const ModelConfig *b);
/* Tensor-parallel ranks that hold one key/value head's copy: 1 when tp
 * divides n_kv_head; tp / n_kv_head when n_kv_head divides tp (Megatron's
 * replication: each block of that many consecutive tp ranks shares a head). */
static inline int model_kv_rep(const ModelConfig *c, int tp)
{
  return tp > model_n_kv_head(c) ? tp / model_n_kv_head(c) : 1;
}
/* Key/value heads one tp rank holds: n_kv_head / tp, or one replicated head. */
static inline int model_kv_heads_local(const ModelConfig *c, int tp)
{
  return model_n_kv_head(c) * model_kv_rep(c, tp) / tp;
}
/* tp can cut this model: it divides n_head, n_ffn and vocab_size, and
 * divides n_kv_head or is a multiple of it. */
static inline PetscBool model_tp_divides(const ModelConfig *c, int tp)
{
  int kv = model_n_kv_head(c);
  return tp >= 1 && c->n_head % tp == 0 && (kv % tp == 0 || tp % kv == 0) && model_n_ffn(c) % tp == 0 &&
                 c->vocab_size % tp == 0
             ? PETSC_TRUE
             : PETSC_FALSE;
}
/* Tensors of the transformer trunk (what a critic or reward model takes from
 * a policy checkpoint): everything but the LM and scalar heads. */
PetscBool model_tensor_is_trunk(const char *name);
/* The inverse frequencies of the rotary embedding [head_dim/2] (host),
 * with the configured scaling, as Hugging Face computes them. */
void model_rope_inv_freq(const ModelConfig *cfg, float *inv_freq);

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
  PetscBool norm; /* counted by this rank in the global gradient norm (replicated tensors by tp rank 0 only; the last
                     stage's tied wte copy never) */
  int kv_heads;   /* k and v projections (weights, biases): the model's n_kv_head, which caps their pieces (0: any other
                     tensor) */
} ModelTensor;

/* A tensor's pieces under tensor-parallel size tp: tp/rep of them, rank t
 * holding piece t/rep, where rep (model_tensor_rep) is the number of
 * consecutive tp ranks sharing a copy: above n_kv_head, k and v are
 * replicated (their gradients are summed over the block, model_grads_sync). */
static inline int model_tensor_rep(const ModelTensor *f, int tp)
{
  return f->kv_heads > 0 && tp > f->kv_heads ? tp / f->kv_heads : 1;
}
static inline int model_tensor_pieces(const ModelTensor *f, int tp) { return tp / model_tensor_rep(f, tp); }
static inline int model_tensor_piece_of(const ModelTensor *f, int tp, int t) { return t / model_tensor_rep(f, tp); }

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
} ModelShard;

/* Layers of stage p of pp, split so the stages' parameter counts (embeddings
 * with the first stage, ln_f and head with the last) are as even as possible;
 * every stage gets at least one layer. */
void model_stage_layers(const ModelConfig *cfg, int pp, int p, int *l0, int *l1);
/* The shard of mesh coordinates (p, t); NULL mesh: the whole model. */
void model_shard_of_mesh(const ModelConfig *cfg, const Mesh *mesh, ModelShard *sh);
/* Checks that a shard layout is possible: tp divides n_head and vocab_size,
 * pp <= n_layer. The message names the option prefix given (e.g. -actor_train_). */
PetscErrorCode model_shard_check(const ModelConfig *cfg, int tp, int pp, const char *what);
/* Tensor table of a shard (sh NULL: the whole model). */
PetscErrorCode model_tensor_table_shard(const ModelConfig *cfg, const ModelShard *sh, ModelTensor **tensors,
                                        int *ntensors, size_t *nparams);
/* Index range along a tensor's split dimension of piece a of q for group g:
 * [*lo, *hi). Rank t of tp holds pieces q/tp*t .. q/tp*(t+1)-1 when tp divides q. */
void model_tensor_piece(const ModelTensor *full, int q, int a, int g, int *lo, int *hi);
/* Copies n indices along a split dimension: from index src_lo of a buffer
 * whose split-dimension extent is src_D to index dst_lo of one with extent
 * dst_D (the other dimension is the full one). full describes the tensor. */
void model_copy_span(const ModelTensor *full, int split, const float *src, int src_D, int src_lo, float *dst, int dst_D,
                     int dst_lo, int n);
/* Copies between a full flat buffer (host, table of the whole model) and a
 * shard's flat buffer (host, table of sh): extract takes the shard's pieces,
 * insert puts them back. */
PetscErrorCode model_shard_extract(const ModelConfig *cfg, const ModelShard *sh, const float *full, float *shard);
PetscErrorCode model_shard_insert(const ModelConfig *cfg, const ModelShard *sh, const float *shard, float *full);

typedef struct {
  PetscReal lr, min_lr_ratio, beta1, beta2, eps, weight_decay, grad_clip;
  PetscInt  warmup, decay_steps; /* cosine from lr to lr*min_lr_ratio over decay_steps (0: constant after warm-up) */
} AdamWConfig;

typedef struct ModelActs ModelActs; /* activation buffers, private to src/model */

/* Distributed training options of a model on a mesh. */
typedef struct {
  PetscBool zero1;        /* ZeRO-1: AdamW moments sharded over the dp replicas */
  size_t    bucket_bytes; /* gradient all-reduce bucket size */
} ModelDistConfig;

typedef struct {
  ModelConfig    cfg;
  const Backend *be;
  ModelShard     sh;             /* whole model when mesh is NULL */
  const Mesh    *mesh;           /* the mesh the shard lives on, or NULL (one rank) */
  ModelDistConfig  dist;
  int            Cl, NHl, Vl, v0; /* local query width n_head*head_dim/tp, heads, vocabulary rows and first row */
  int NKVl, Ckvl, Fl; /* local key/value heads and width (one replicated head when tp > n_kv_head), MLP width */
  float         *inv_freq;        /* device [hd/2], the rotary frequencies (LLaMA) */
  int            ntensors;
  ModelTensor   *tensors;
  size_t         nparams;
  float         *params, *grads; /* device */
  float         *m, *v;          /* AdamW moments (device), allocated by model_optim_init */
  int            step;           /* optimizer steps taken */
  ModelActs     *acts;           /* the selected activation slot */
  ModelActs    **slots;          /* every slot (slots[0] is the first) */
  int            nslots;
  double        *stats_host;     /* vocabulary-parallel log-prob statistics, host [4*N*tp] */
  size_t         stats_cap;
  size_t         own0, own1;     /* ZeRO-1: the flat range whose AdamW moments this rank keeps (m, v hold own1-own0) */
  PetscBool      grads_synced;   /* model_grads_sync ran since the last zero_grad or step */
  int            msg_model, msg_mb; /* what the stage messages' tags carry (model_msg_ids) */
  PetscBool
      cached_rows; /* the cached forward's matmuls through Backend.matmul_forward_rows (model_cached_batch_invariant) */
  PetscBool      in_cached;      /* a cached forward is running */
} Model;

/* Reads -<prefix>arch, n_layer, n_head, n_embd, vocab_size, n_positions,
 * head, and for a row with settings (llama) n_kv_head, n_ffn, qkv_bias, tie_embeddings,
 * rope_theta, norm_eps, head_dim, qk_norm and the rope scaling options. */
PetscErrorCode model_config_set_from_options(const char *prefix, ModelConfig *cfg);
/* Whether any of the architecture options -<prefix>arch, n_layer, ... was
 * given (deck or command line). */
PetscErrorCode model_config_options_given(const char *prefix, PetscBool *any);
/* Records cfg's values as those of the -<prefix> architecture options (run
 * record, used.deck), for a model whose architecture came from a file. */
PetscErrorCode model_config_record(const char *prefix, const ModelConfig *cfg);
/* Checks the configuration; errors name the option, e.g. -policy_n_embd. */
PetscErrorCode model_config_check(const ModelConfig *cfg, const char *prefix);
/* The same checks for a configuration read from a file (a checkpoint's
 * attributes); messages name the attribute, the caller adds the file. */
PetscErrorCode model_config_check_file(const ModelConfig *cfg);
/* Reads -<prefix>lr, min_lr_ratio, warmup, decay_steps, beta1, beta2, eps, weight_decay, grad_clip. */
PetscErrorCode adamw_set_from_options(const char *prefix, AdamWConfig *opt);

/* Tensor table for a configuration (no allocation of parameters). */
PetscErrorCode model_tensor_table(const ModelConfig *cfg, ModelTensor **tensors, int *ntensors, size_t *nparams);
PetscErrorCode model_create(const ModelConfig *cfg, const Backend *be, Model **lm);
/* The shard of cfg for this rank's coordinates on mesh (which must contain
 * this rank); tp and pp collectives go over the mesh's communicators. */
PetscErrorCode model_create_on_mesh(const ModelConfig *cfg, const Backend *be, const Mesh *mesh, Model **lm);
/* Micro-batches a pipeline stage keeps in flight: forward and backward use
 * activation slot k (0..nslots-1) selected here. Default 1 slot. */
PetscErrorCode model_acts_slots(Model *lm, int nslots);
/* ZeRO-1: AdamW moments sharded over the mesh's dp replicas (each keeps
 * the moments of one contiguous range of the flat buffer, updates those
 * parameters, and the replicas then share them). Before model_optim_init. */
PetscErrorCode model_set_zero1(Model *lm, PetscBool on);
PetscErrorCode model_acts_select(Model *lm, int k);
/* The model id (0..MODEL_MSG_MODELS-1) and micro-batch that this shard's
 * pipeline messages carry in their MPI tags from now on (default 0, 0).
 * Stages of one pipeline must agree on both for each micro-batch; then the
 * stages may run micro-batches in different orders, and two models' stages
 * may share ranks and a communicator. Errors if the tag would pass the MPI
 * implementation's MPI_TAG_UB. */
#define MODEL_MSG_MODELS 4
PetscErrorCode model_msg_ids(Model *lm, int model, int mb);
/* Stage roles of a shard. */
static inline PetscBool model_first_stage(const Model *g) { return g->sh.p == 0 ? PETSC_TRUE : PETSC_FALSE; }
static inline PetscBool model_last_stage(const Model *g) { return g->sh.p == g->sh.pp - 1 ? PETSC_TRUE : PETSC_FALSE; }
PetscErrorCode model_destroy(Model **lm);
/* Tensor 0 of every table is the token embedding (GPT-2 wte, LLaMA embed_tokens). */
#define MODEL_T_WTE 0
/* Index of a tensor by name, or -1. */
int model_find_tensor(const Model *lm, const char *name);

/* GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by
 * 1/sqrt(2*n_layer), zero biases, unit LayerNorm gains; draws keyed by
 * (seed, tensor, element) so the result is independent of layout. */
PetscErrorCode model_init_random(Model *lm, uint64_t seed);

/* Host <-> device copies of the flat buffers (params, m, v). */
PetscErrorCode model_params_get(const Model *lm, float *host);
PetscErrorCode model_params_set(Model *lm, const float *host);
PetscErrorCode model_optim_init(Model *lm); /* allocate zeroed m, v */
PetscErrorCode model_optim_get(const Model *lm, float *m_host, float *v_host);
PetscErrorCode model_optim_set(Model *lm, const float *m_host, const float *v_host, int step);

/* Bytes by which this process's activation buffers (every model's) have
 * grown so far: each growth is a first touch of new pages, which a run
 * pays in the iterations that bring a longer batch than any before. */
double model_acts_grown_bytes(void);

/* Full forward of B sequences of length T (T <= n_positions); tok is host [B*T].
 * Afterwards model_logits/model_values point at the head's output (device).
 * The LM head's logits of more rows than model_logits_tile_rows are never
 * held at once: model_logprobs(_dist) and model_backward_logprob run the
 * head tile by tile (the backward computes each tile again), and
 * model_logits is NULL after such a forward. */
PetscErrorCode model_forward(Model *lm, const int *tok, int B, int T);
const float   *model_logits(const Model *lm); /* [B*T, V], LM head; NULL when tiled */
/* -logits_tile_mb: the LM head's logits (and their gradient) of a forward
 * are held for at most this many MiB of rows of the whole vocabulary at a
 * time (0: all rows at once). The tile's rows follow from the vocabulary
 * alone, so a deck's results do not depend on the layout through it; a
 * batch of more rows is run in tiles, which changes the order of the head
 * weight gradient's sum, and costs one more head matmul in the backward. */
#define MODEL_LOGITS_TILE_MB 1024.0
PetscErrorCode model_set_logits_tile_mb(double mb);
int            model_logits_tile_rows(int vocab_size); /* rows of a tile at this vocabulary; INT_MAX: no tiles */
const float   *model_values(const Model *lm); /* [B*T], scalar head */
/* After model_forward (LM head): logprob[n] = log p(target[n] | ...) on host; target < 0 gives 0. */
PetscErrorCode model_logprobs(Model *lm, const int *target, float *logprob);
/* The distribution a token was sampled from: softmax(logits * inv_temp)
 * restricted to an allowed set per row (top-k, top-p, min_new_tokens). Row n
 * of the last forward allows mask_ids[mask_off[n] .. mask_off[n+1]-1] (host
 * arrays, mask_off has N+1 entries); an empty range, or mask_off NULL, allows
 * the whole vocabulary, and a range of one negative id -(e+1) every id but e
 * (tensor.h's compact set, gen's record of a banned EOS). Training and inference use the generation's
 * distribution so that ratios and KL compare like with like. */
typedef struct {
  float      inv_temp;
  const int *mask_off, *mask_ids;
} ModelTokenDist;
/* As model_logprobs under a sampling distribution (dist NULL: plain softmax);
 * entropy (host [B*T], may be NULL) gets each row's entropy of that
 * distribution (0 where target < 0). model_backward_logprob then uses the same
 * distribution. */
PetscErrorCode model_logprobs_dist(Model *lm, const int *target, const ModelTokenDist *dist, float *logprob,
                                   float *entropy);
/* Scalar head: copy the values to host [B*T]. */
PetscErrorCode model_values_get(Model *lm, float *values);

PetscErrorCode model_zero_grad(Model *lm);
/* Backward from d(loss)/d(logprob) [B*T] (host) for the last forward (LM head).
 * Needs model_logprobs or model_logprobs_dist to have run with the same targets
 * (the distribution given there is used). Accumulates into grads. */
PetscErrorCode model_backward_logprob(Model *lm, const int *target, const float *dlogprob);
/* Backward from d(loss)/d(value) [B*T] (host) for the last forward (scalar head). */
PetscErrorCode model_backward_values(Model *lm, const float *dvalues);

/* Learning rate at optimizer step `step` (0-based): linear warm-up over
 * `warmup` steps, then cosine to lr*min_lr_ratio over decay_steps. */
PetscReal adamw_lr(const AdamWConfig *opt, int step);
/* On a mesh: adds the dp replicas' gradients (in buckets) and the tied
 * embedding's two copies; once per step (model_adamw_step calls it if the
 * caller did not). */
PetscErrorCode model_grads_sync(Model *lm);
/* Global gradient norm, clip scale, AdamW update, step += 1: model_grad_norm
 * then model_adamw_update. */
PetscErrorCode model_adamw_step(Model *lm, const AdamWConfig *opt, PetscReal *lr_used, PetscReal *grad_norm);
/* The two halves of a step, so a caller can refuse a step before anything
 * changes: model_grad_norm synchronises the gradients (model_grads_sync) and
 * returns their global norm (the same on every rank of the mesh), touching
 * no weight or moment; model_adamw_update then clips against that norm and
 * applies AdamW (step += 1). */
PetscErrorCode model_grad_norm(Model *lm, PetscReal *grad_norm);
PetscErrorCode model_adamw_update(Model *lm, const AdamWConfig *opt, PetscReal norm, PetscReal *lr_used);

/* KV cache for incremental decoding: nslot independent sequences of up to
 * Tmax tokens. n_embd is this shard's key (and value) width per position,
 * n_kv_head/tp heads. */
typedef struct {
  int    nslot, Tmax, n_layer, n_embd;
  float *k, *v; /* device, [n_layer][nslot][Tmax][n_embd] */
  struct ModelGraphs *graphs; /* model_forward_cached_resident's recorded forwards */
} ModelKVCache;
PetscErrorCode model_kv_create(const Model *lm, int nslot, int Tmax, ModelKVCache **kv);
PetscErrorCode model_kv_destroy(const Model *lm, ModelKVCache **kv);
/* A slot's keys and values of positions [0, npos) of this rank's shard (its
 * stage's layers, its heads), to or from host memory: buf holds
 * model_kv_floats(kv, npos) floats, keys then values, layer by layer. For
 * moving a running sample to another engine of the same layout. */
size_t         model_kv_floats(const ModelKVCache *kv, int npos);
PetscErrorCode model_kv_get(const Model *lm, const ModelKVCache *kv, int slot, int npos, float *buf);
PetscErrorCode model_kv_put(const Model *lm, ModelKVCache *kv, int slot, int npos, const float *buf);
/* Slot to's keys and values of positions [0, npos) become slot from's (the
 * prompt a group of samples shares), in the backend's memory. */
PetscErrorCode model_kv_copy_slot(const Model *lm, ModelKVCache *kv, int from, int to, int npos);
/* Forward of N new tokens: row r is token tok[r] of slot slot[r] at position
 * pos[r]; their keys and values enter the cache, each row attends to its
 * slot's positions 0..pos[r]. A prefill passes a whole prompt of one slot; a
 * decode step passes one token for each of many slots. The head runs on the
 * M rows head_rows (host, ascending; NULL: all N rows, M is ignored): a
 * prefill needs the logits of each prompt's last row only, and the others'
 * would cost a head matmul and N x V floats for nothing. out (host) gets the
 * logits [M,V] (LM head) or values [M] (scalar head), row m of head_rows[m]. */
PetscErrorCode model_forward_cached(Model *lm, ModelKVCache *kv, const int *tok, const int *slot, const int *pos, int N,
                                    const int *head_rows, int M, float *out);
/* The same forward with everything in the backend's memory, for a model on
 * one rank (model_cached_resident_ok: no tensor or pipeline parallelism,
 * the LM head): tok, slot and pos are N rows in lm->be's memory (gen's
 * decode arena), head_rows as above (host), and *logits [M,V] stays there,
 * valid until the next forward of this model. With graph set, on a backend
 * with graphs (Backend.graph_begin), the forward of each distinct (N, tok,
 * slot, pos) without head_rows is run once, recorded on its second call and
 * replayed after that, so a decode step is one launch; the record is made
 * again whenever memory it points to has moved (a call with head_rows runs
 * as it is). Rows are not checked here (the ops index the tables and the
 * cache with them): check them on the host first with
 * model_cached_check_rows. */
PetscBool      model_cached_resident_ok(const Model *lm);
/* The cached forwards' matmuls (generation's) in an order fixed per row
 * (Backend.matmul_forward_rows), so that a sequence's logits do not depend
 * on the rows sharing its call: gen's -gen_batch_invariant. Training's
 * forward is not affected. An error naming the option on a backend without
 * such matmuls. */
PetscErrorCode model_cached_batch_invariant(Model *lm, PetscBool on);
PetscErrorCode model_forward_cached_resident(Model *lm, ModelKVCache *kv, const int *tok, const int *slot,
                                             const int *pos, int N, const int *head_rows, int M, PetscBool graph,
                                             const float **logits);
PetscErrorCode model_cached_check_rows(const Model *lm, const ModelKVCache *kv, const int *tok, const int *slot,
                                       const int *pos, int N);

/* Sizes for -dry_run and benchmarks. */
size_t model_activation_bytes(const ModelConfig *cfg, int B, int T);
/* What training the whole model on one rank takes on backend be: per
 * parameter its weight, gradient and two AdamW moments (16 bytes) and any
 * kept low-precision copy (backend_weight_copy_bytes), plus the
 * activations of B x T tokens (model_activation_bytes). SFT's memory check
 * and -dry_run, and bench_model's estimate, use it. */
PetscErrorCode model_training_bytes(const ModelConfig *cfg, const Backend *be, int B, int T, double *weights,
                                    double *acts);
double model_flops_per_token(const ModelConfig *cfg, int T, PetscBool training);

#endif
