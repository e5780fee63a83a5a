/* cost: what a model call costs under a layout, in seconds and bytes, and
 * the plan search built on it (docs/planning.md).
 *
 * Three layers, each replaceable under the one above:
 *  - primitives (CostPrims): the time of one part of a model (embedding, one
 *    transformer block, head) in one phase at a tensor-parallel size, the time
 *    of one optimizer step, and the time of a collective. They come from a
 *    measured profile (-mode profile, src/profile) or from a hardware
 *    description deck (input/hardware/*.deck, analytic FLOPs and bytes).
 *  - the cost model (src/cost): a call under a layout (micro-batches,
 *    pipeline bubbles, tp and dp communication, generation over a
 *    response-length distribution, reallocation, fusion, memory per rank).
 *  - the simulator and the search (src/cost, src/search): iterations of the
 *    PPO or GRPO graph on a plan; simulated annealing over plans.
 *
 * One unit throughout: seconds for time, bytes for memory and messages. */
#ifndef RLFUSE_COST_H
#define RLFUSE_COST_H

#include "plan.h"

/* A model's shape, enough to count FLOPs, bytes and memory. GPT-2: learned
 * positions, LayerNorm, a 4x GELU MLP (n_ffn = 4 n_embd), n_kv_head =
 * n_head, tied head. LLaMA-shaped (gated = true): rotary positions, RMSNorm,
 * a gated MLP of three n_embd x n_ffn matrices, grouped-query attention
 * (n_kv_head <= n_head), untied head. A critic or reward model replaces the
 * vocabulary head by a scalar head (value_head = true). */
typedef struct {
  int       n_layer, n_embd, n_head, n_kv_head, n_ffn, vocab_size, n_positions;
  PetscBool gated;      /* LLaMA-shaped */
  PetscBool value_head; /* scalar head (critic, reward) instead of the vocabulary head */
} CostShape;

typedef enum { COST_PART_EMBED = 0, COST_PART_BLOCK, COST_PART_HEAD, COST_NPART } CostPart;
/* fwd: a training or inference forward over rows x len tokens with
 * activations kept; bwd: its backward; prefill: the generation engine's
 * forward of rows prompts of len tokens filling the KV cache; decode: one
 * decode step of rows sequences whose context is len tokens. */
typedef enum { COST_FWD = 0, COST_BWD, COST_PREFILL, COST_DECODE, COST_NPHASE } CostPhase;
typedef enum { COST_ALLREDUCE = 0, COST_ALLGATHER, COST_BCAST, COST_P2P, COST_NCOLL } CostColl;

extern const char *const cost_part_names[];  /* "embed", "block", "head" */
extern const char *const cost_phase_names[]; /* "fwd", "bwd", "prefill", "decode" */
extern const char *const cost_coll_names[];  /* "allreduce", "allgather", "bcast", "p2p" */

/* The primitive costs of one machine. Every function returns seconds and
 * never fails: outside a measured grid it extrapolates (documented by the
 * implementation). */
typedef struct {
  char   source[PETSC_MAX_PATH_LEN + 32]; /* "profile out/p.h5", "hardware input/hardware/h100_sxm.deck" */
  void  *ctx;
  int    ranks_per_node;                  /* communication inside a node is cheaper */
  double mem_per_rank;                    /* bytes one rank (one device) may use */
  double bytes_per_param;                 /* 4 for fp32 weights, 2 for bf16 (master weights and moments stay fp32) */
  /* One part of the model in one phase, on one rank of a tp group of size
   * tp (the rank's share of the work, without the tp collectives, which the
   * cost model adds), for rows sequences of len tokens. */
  double (*compute)(void *ctx, const CostShape *m, CostPart part, CostPhase ph, int tp, double rows, double len);
  /* One AdamW step over nparams parameters held by one rank. */
  double (*optimizer)(void *ctx, double nparams);
  /* One collective of `bytes` bytes (per rank's buffer: the reduced vector,
   * the gathered result, the broadcast message, the point-to-point message)
   * over nranks ranks; internode: the group spans nodes. */
  double (*coll)(void *ctx, CostColl op, int nranks, PetscBool internode, double bytes);
  PetscErrorCode (*destroy)(void *ctx);
} CostPrims;

PetscErrorCode cost_prims_destroy(CostPrims *p);

/* What one PPO/GRPO iteration does, independent of the plan. */
typedef struct {
  CostShape actor, critic, ref, reward;
  PetscBool critic_free;    /* GRPO and RLOO: no critic calls */
  int       batch;          /* rollout sequences per iteration */
  int       prompt_len;
  int       max_new;        /* generation limit */
  int       nlen;           /* response lengths of one rollout, one per sequence (sampled from a distribution, read from rollouts.h5, or a histogram) */
  int      *len;
  int       minibatches;    /* PPO mini-batches per epoch */
  int       epochs;         /* PPO epochs per rollout */
  int       iterations;     /* iterations to simulate (the first one includes the initial weight placement) */
} CostWork;

/* The estimate of one plan. */
typedef struct {
  PetscBool feasible;
  char      why[256];           /* when infeasible: "actor_train on rank 0 needs 93.1 GB, the device has 80 GB" */
  double    iter_s;             /* time per iteration (steady state) */
  double    call_s[MFC_COUNT];  /* each call's time in one iteration (0: not in use) */
  double    realloc_s;          /* reallocation and weight sync in one iteration */
  double    mem_max;            /* the largest peak memory of any rank, bytes */
} CostEstimate;

/* The estimate of a plan for a workload: every call under its layout, the
 * reallocations between them, and the dataflow graph simulated over
 * work->iterations iterations (calls on overlapping meshes one after another,
 * on disjoint meshes concurrently). A plan that does not fit in memory is
 * not an error: feasible is false and why says which call on which rank. */
PetscErrorCode cost_estimate(const CostPrims *p, const CostWork *work, const Plan *plan, CostEstimate *est);

#endif
