/* test_cost: the cost model and the simulator (src/cost). Formulas against
 * values worked by hand or published (FLOPs of a block, LLaMA-2 7B's
 * parameter count, the ring all-reduce, training-state bytes), the
 * simulator against hand-worked graphs on mock primitives whose costs are
 * simple (two calls on one rank add, on disjoint ranks overlap, a weight
 * sync between), generation under continuous batching, memory-infeasible
 * plans rejected with the reason, seconds as the unit, the reallocation
 * byte count against the reallocation planner itself (4 ranks), and the
 * timeline file. Prints "ok - name" / "not ok - name: detail" per check.
 *
 * The checks in detail: the cost model (src/cost, docs/costmodel.md): FLOPs of a GPT-2 block
 * forward, backward and decode step by hand; LLaMA-2 7B's published parameter count
 * (6,738,415,616) and GPT-2's against the model's own tensor table (both heads); the ring
 * all-reduce inside a node and across nodes, AdamW's bytes, units (a 7B forward of 2048 tokens
 * 0.03-0.1 s on the H100 deck, a decode step bound by the weights' bytes); on mock primitives
 * with simple costs, hand-worked graphs: calls on one rank add, on disjoint ranks overlap, a
 * weight sync between training and generation (its bytes and the iteration), generation's
 * batch shrinking as samples finish and continuous batching with 2 slots, inference
 * micro-batches padded to their longest, a 2-stage pipeline's fill and drain, per-sequence
 * prompts on a per-token mock (inference padded to the longest prompt plus response, training
 * to the longest sequence, generation's packed prefill and per-sample contexts, dp replicas
 * waiting for the one holding the longest sequence: 20, 84, 32 and 36 s by hand), streaming of
 * finished samples into inference (per sample and by token budget; into a tp-2 replica at half
 * the time, 11 s, and a pp-2 replica of two-layer models through both stages in turn, 20 s;
 * the head's broadcast of each micro-batch, 11.176 s; samples dealt to two replicas by their
 * work, 59 s against 66 s by blocks of rows; without a reward model the reference alone,
 * unfused and streamed), migration of the long tail worked by hand (R_t 0.5 and 0 on 2
 * co-located replicas; into one tp-2 inference replica, which starts when its last rank stops
 * generating, headed by either rank, 13 s; a long tail under memory-bound decoding at R_t 0,
 * 0.5 and 1 in that order, and auto's pick; the bytes moved against the state and KV-cache
 * formula with grouped-query attention and their point-to-point time), the fused training
 * stage at its schedule's bound, offload's bytes both ways and its memory saving; LLaMA-2
 * 7B+7B on one H100 infeasible with the call, rank and device memory named, ZeRO-1's saving
 * per parameter, the training activations linear in the length (no T x T arrays); a training stage alone
 * (`cost_train_stage`: SFT and RM steps and two replicas' halved micro-batches by hand, a 70B
 * SFT step on one H100 infeasible naming `sft_train`); the reallocation bytes equal to the
 * reallocation planner's on 5 layout pairs and both heads; the timeline's rows and file; the
 * workload from options (the deck's PPO settings, named shapes, keyed log-normal, uniform,
 * histogram and rollouts.h5 lengths, each drawn response keeping its own prompt's length,
 * `-cost_prompt_len` and `-cost_prompt_lengths` overriding that, malformed specs and a missing
 * file refused naming the option or file)
 */
#include "cost.h"
#include "jobs.h"
#include "realloc.h"
#include "actorcritic.h"
#include "test_report.h"

static int world_rank, world_size;

#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] = "Cost model and simulator tests.\n";

/* ---- mock primitives: a block costs `rows` seconds forward (2x backward),
 * the other parts nothing; a point-to-point message bytes * 1e-9 s, the
 * other collectives and the optimizer nothing ---- */
static PetscBool flat_decode; /* a decode step costs 1 s whatever its rows (memory-bound decoding) */
static PetscBool per_token;   /* a block costs rows x len s (decode: rows x context) */
static double mock_compute(void *ctx, const CostShape *m, CostPart part, CostPhase ph, int tp, double rows, double len)
{
  if (part == COST_PART_BLOCK && ph == COST_DECODE && flat_decode) return 1;
  if (part == COST_PART_BLOCK && per_token) return rows * len * (ph == COST_BWD ? 2 : 1) / tp;
  return part == COST_PART_BLOCK ? rows * (ph == COST_BWD ? 2 : 1) / tp : 0;
}
static double mock_opt(void *ctx, double n) { return 0; }
static double p2p_ns = 1; /* the mock's point-to-point cost per byte, in ns */
static double bcast_ns = 0; /* the same for a broadcast (only the streamed replicas' heads broadcast) */
static double mock_coll(void *ctx, CostColl op, int n, PetscBool inter, double bytes) { return op == COST_P2P ? bytes * p2p_ns * 1e-9 : op == COST_BCAST ? bytes * bcast_ns * 1e-9 : 0; }

static void mock_prims(CostPrims *p)
{
  memset(p, 0, sizeof *p);
  strcpy(p->source, "mock");
  p->ranks_per_node  = 8;
  p->mem_per_rank    = 1e12;
  p->bytes_per_param = 4;
  p->compute         = mock_compute;
  p->optimizer       = mock_opt;
  p->coll            = mock_coll;
}

/* GPT-2 of one layer, width 8, vocabulary 16, 8 positions: 1080 parameters
 * by hand (wte 128 + wpe 64; block: c_attn 192+24, c_proj 64+8, c_fc
 * 256+32, mlp c_proj 256+8, two LayerNorms 32; ln_f 16; the head is wte). */
static CostShape tiny(PetscBool value_head)
{
  return (CostShape){1, 8, 2, 2, 32, 16, 8, PETSC_FALSE, value_head, 0};
}

static void tiny_work(CostWork *w, int *len, int n)
{
  memset(w, 0, sizeof *w);
  w->actor = w->ref = tiny(PETSC_FALSE);
  w->critic = w->reward = tiny(PETSC_TRUE);
  w->critic_free = PETSC_TRUE;
  w->batch = n, w->prompt_len = 4, w->max_new = 8, w->nlen = n, w->len = len;
  w->minibatches = 1, w->epochs = 1, w->iterations = 3, w->gen_slots = 0;
}

/* A plan of `world` ranks with every call on rank lo..hi-1 as dp replicas. */
static void set_call(Plan *plan, MFCId c, int lo, int hi)
{
  PlanCall *pc = &plan->call[c];
  pc->nranks   = hi - lo;
  for (int i = 0; i < hi - lo; i++) pc->ranks[i] = lo + i;
  pc->dp = hi - lo, pc->tp = 1, pc->pp = 1, pc->mbs = 1;
}

static void base_plan(Plan *plan, int world)
{
  memset(plan, 0, sizeof *plan);
  plan->world = world, plan->bucket_mb = 16, plan->fuse_tokens = 2048;
  for (int c = 0; c < MFC_COUNT; c++) set_call(plan, (MFCId)c, 0, world);
}

static PetscErrorCode check_formulas(void)
{
  CostShape s7, g = tiny(PETSC_FALSE), cs = tiny(PETSC_TRUE);
  CostPrims hw;
  ModelConfig cfg = {.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 16, .n_positions = 8, .head = MODEL_HEAD_LM};
  ModelTensor *tab;
  int        nt;
  size_t     np;

  PetscFunctionBegin;
  /* forward FLOPs of a GPT-2 block, width 128, 2 rows of 8 tokens: the
   * weights 3*128^2 + 128^2 + 2*128*512 = 196608, 2 FLOPs each per token
   * (16 tokens), plus q.k and p.v: 4*128 per pair, 2 rows * 36 pairs */
  {
    CostShape b = {1, 128, 4, 4, 512, 64, 64, PETSC_FALSE, PETSC_FALSE, 0};
    test_report_close("FLOPs of a GPT-2 block forward (by hand)", cost_flops(&b, COST_PART_BLOCK, COST_FWD, 2, 8), 2.0 * 196608 * 16 + 4.0 * 128 * 2 * 36, 1e-12);
    test_report_close("backward FLOPs are twice the forward", cost_flops(&b, COST_PART_BLOCK, COST_BWD, 2, 8), 2 * cost_flops(&b, COST_PART_BLOCK, COST_FWD, 2, 8), 1e-12);
    test_report_close("FLOPs of one decode step (context 10, by hand)", cost_flops(&b, COST_PART_BLOCK, COST_DECODE, 3, 10), 2.0 * 196608 * 3 + 4.0 * 128 * 3 * 10, 1e-12);
  }
  /* a Qwen3-shaped block: width 16, 4 heads of 6 (query width 24) over 2 kv
   * heads (kv width 12), SwiGLU 32: q, k, v 16*(24+24), o 24*16, MLP
   * 3*16*32, 2688 weights; q.k and p.v over the query width, 4*24 per pair */
  {
    CostShape q3 = {1, 16, 4, 2, 32, 64, 64, PETSC_TRUE, PETSC_FALSE, 6};
    test_report_close("FLOPs of a block with its own head_dim (Qwen3, by hand)", cost_flops(&q3, COST_PART_BLOCK, COST_FWD, 2, 8), 2.0 * 2688 * 16 + 4.0 * 24 * 2 * 36, 1e-12);
  }
  PetscCall(cost_shape_named("-cost_actor_shape", "llama2-7b", PETSC_FALSE, &s7));
  test_report_close("LLaMA-2 7B parameters (6,738,415,616 published)", cost_shape_params(&s7), 6738415616.0, 1e-12);
  test_report_close("tiny GPT-2 parameters (1080 by hand)", cost_shape_params(&g), 1080, 1e-12);
  PetscCall(model_tensor_table_shard(&cfg, NULL, &tab, &nt, &np));
  PetscCall(PetscFree(tab));
  test_report_close("GPT-2 parameters equal the model's own table", cost_shape_params(&g), (double)np, 1e-12);
  cfg.head = MODEL_HEAD_SCALAR;
  PetscCall(model_tensor_table_shard(&cfg, NULL, &tab, &nt, &np));
  PetscCall(PetscFree(tab));
  test_report_close("GPT-2 scalar-head parameters equal the model's own table", cost_shape_params(&cs), (double)np, 1e-12);
  {
    PetscErrorCode ierr;
    CostShape      x;
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = cost_shape_named("-cost_actor_shape", "llama9-1b", PETSC_FALSE, &x);
    PetscCall(PetscPopErrorHandler());
    test_report(ierr ? PETSC_TRUE : PETSC_FALSE, "an unknown shape name is refused", "accepted llama9-1b");
  }

  PetscCall(cost_prims_hardware("input/hardware/h100_sxm.deck", &hw));
  /* 1 GB over 8 ranks in a node: 2*7 latencies of 3 us and 2*7/8 GB at
   * 0.8 * 450 GB/s */
  test_report_close("ring all-reduce, 8 ranks, 1 GB, NVLink (by hand)", hw.coll(hw.ctx, COST_ALLREDUCE, 8, PETSC_FALSE, 1e9), 14 * 3e-6 + 1.75e9 / 360e9, 1e-12);
  test_report_close("ring all-reduce, 16 ranks across nodes (by hand)", hw.coll(hw.ctx, COST_ALLREDUCE, 16, PETSC_TRUE, 1e9), 30 * 8e-6 + 30.0 / 16 * 1e9 / 42.5e9, 1e-12);
  test_report_close("one rank's all-reduce costs nothing", hw.coll(hw.ctx, COST_ALLREDUCE, 1, PETSC_TRUE, 1e9), 0, 0);
  test_report_close("AdamW step of 1e9 parameters: 28 bytes each at 0.8 * 3.35 TB/s", hw.optimizer(hw.ctx, 1e9), 28e9 / (0.8 * 3.35e12), 1e-12);
  {
    /* units: a LLaMA-2 7B forward over one 2048-token row on one H100 is
     * compute bound: about 2 * 6.5e9 * 2048 FLOPs at half of 989 TFLOP/s,
     * some 60 ms (seconds, not milliseconds or microseconds) */
    double t = 0;
    t += hw.compute(hw.ctx, &s7, COST_PART_EMBED, COST_FWD, 1, 1, 2048);
    t += s7.n_layer * hw.compute(hw.ctx, &s7, COST_PART_BLOCK, COST_FWD, 1, 1, 2048);
    t += hw.compute(hw.ctx, &s7, COST_PART_HEAD, COST_FWD, 1, 1, 2048);
    test_report(t > 0.03 && t < 0.1 ? PETSC_TRUE : PETSC_FALSE, "units: a 7B forward of 2048 tokens takes 0.03-0.1 s", "out of range");
    /* a decode step of one row is memory bound: the weights, 13.5 GB, at
     * 0.8 * 3.35 TB/s, about 5 ms, plus launches */
    t = s7.n_layer * hw.compute(hw.ctx, &s7, COST_PART_BLOCK, COST_DECODE, 1, 1, 100);
    test_report(t > 6.4e9 * 2 / 2.68e12 && t < 6.4e9 * 2 / 2.68e12 + 32 * 25e-6 + 1e-3 ? PETSC_TRUE : PETSC_FALSE, "a 7B decode step of one row is bound by the weights' bytes", "not memory bound");
  }
  PetscCall(cost_prims_destroy(&hw));
  {
    PetscErrorCode ierr;
    CostPrims      x;
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = cost_prims_hardware("input/hardware/no_such.deck", &x);
    PetscCall(PetscPopErrorHandler());
    test_report(ierr ? PETSC_TRUE : PETSC_FALSE, "a missing hardware description is refused", "accepted");
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_simulator(void)
{
  CostPrims    p;
  CostWork     w;
  Plan         plan;
  CostEstimate e;
  int          len4[4] = {1, 1, 1, 1};

  PetscFunctionBegin;
  mock_prims(&p);
  tiny_work(&w, len4, 4);
  /* one rank, GRPO: generation is the prefill of 4 rows (4 s), reference
   * and reward inference 4 s each, training forward 4 + backward 8 */
  base_plan(&plan, 1);
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("one rank: calls on one mesh add (4+4+4+12 s)", e.iter_s, 24, 1e-12);
  test_report_close("one rank: generation 4 s", e.call_s[MFC_ACTOR_GEN], 4, 1e-12);
  test_report_close("one rank: actor_train 12 s", e.call_s[MFC_ACTOR_TRAIN], 12, 1e-12);
  test_report(e.realloc_s == 0 ? PETSC_TRUE : PETSC_FALSE, "one rank: no weight sync", NULL);
  /* two ranks: the reference on rank 0, the reward model on rank 1 (4 rows
   * each, concurrently), the rest on both as dp 2 (2 rows per rank) */
  base_plan(&plan, 2);
  set_call(&plan, MFC_REF_INF, 0, 1);
  set_call(&plan, MFC_REW_INF, 1, 2);
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("disjoint meshes overlap (2 + max(4,4) + 6 s)", e.iter_s, 12, 1e-12);
  set_call(&plan, MFC_REW_INF, 0, 1);
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("the same calls on one rank add (2 + 4 + 4 + 6 s)", e.iter_s, 16, 1e-12);
  /* training on rank 0, generation and inference on rank 1: the actor's
   * 1080 fp32 parameters (4320 bytes, 4.32 us) move every iteration, and
   * the next generation waits for the training */
  base_plan(&plan, 2);
  set_call(&plan, MFC_ACTOR_TRAIN, 0, 1);
  set_call(&plan, MFC_ACTOR_GEN, 1, 2);
  set_call(&plan, MFC_REF_INF, 1, 2);
  set_call(&plan, MFC_REW_INF, 1, 2);
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("a reallocation between: 4320 bytes at 1 ns each", e.realloc_s, 4320e-9, 1e-9);
  test_report_close("a reallocation between: sync + 4+4+4+12 s per iteration", e.iter_s, 24 + 4320e-9, 1e-12);
  /* through the host (-cost_sync_path host) at 2 GB/s: device to host and
   * host to device 2.16 us each, and the MPI copy inside the node another
   * 2.16 us; across nodes (a node per rank) the network's 4.32 us instead */
  p.sync_host = PETSC_TRUE, p.host_bw = 2e9;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("a reallocation through the host inside a node: 3 x 2.16 us", e.realloc_s, 3 * 2.16e-6, 1e-9);
  p.ranks_per_node = 1;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("a reallocation through the host across nodes: 2 x 2.16 us + 4.32 us over the network", e.realloc_s, 2 * 2.16e-6 + 4.32e-6, 1e-9);
  p.sync_host = PETSC_FALSE, p.host_bw = 0, p.ranks_per_node = 8;
  /* asynchronous (staleness 1): the proximal forward on rank 0 (4 s), then
   * the training (12 s) beside the next batch's generation on rank 1 with
   * the reference's and reward model's calls on its rows (4 + 4 + 4 s),
   * which share its mesh */
  w.staleness = 1, w.prox = PETSC_TRUE;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("asynchronous, apart: sync + 4 s (proximal forward) + 12 s of training, the generation and the frozen models' calls beside them", e.iter_s, 16 + 4320e-9, 1e-12);
  /* the reference on rank 0 instead: its call waits for the batch's own
   * iteration (4 s beside the reward call on rank 1, then the proximal 4 s)
   * before the training */
  set_call(&plan, MFC_REF_INF, 0, 1);
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("asynchronous, the reference apart from the generation: sync + 4 + 4 s of inference on rank 0 + 12 s of training", e.iter_s, 20 + 4320e-9, 1e-12);
  base_plan(&plan, 1);
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("asynchronous on one rank: nothing overlaps, the proximal forward adds 4 s (28 s)", e.iter_s, 28, 1e-12);
  plan.fuse = FUSE_STREAM;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report(!e.feasible && strstr(e.why, "-async_staleness 1") ? PETSC_TRUE : PETSC_FALSE, "asynchronous with streamed fusion: infeasible, as the run refuses it", e.why);
  plan.fuse = FUSE_NONE;
  w.staleness = 0, w.prox = PETSC_FALSE;

  /* partial rollouts (-async_partial 2, a pool of batch 2 + 2 samples,
   * lengths 1, 5, 1, 5, ...; prefill and decode of k rows k s): call 0
   * draws 1, 2, 1, 2 tokens (prefill 4 s, one step of 2 rows 2 s), the two
   * of 1 token end and leave; call 1 finds too few ending (only the new 1)
   * and runs the oldest to its end (4 + 3 + 1 s); from call 2 on each call
   * holds a sample with 4 tokens drawn (1 left), one with 2 and two new:
   * prefill 4 s, then the two that go on one step (2 s): 6 s a call */
  {
    int len[2] = {1, 5}, len5[2] = {5, 5};
    tiny_work(&w, len, 2);
    base_plan(&plan, 1);
    w.staleness = 1, w.partial = 2, w.partial_extra = 2;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("partial rollouts: the steady call of the pool (4 s prefill + 2 s), the warm-up's forced call left out", e.call_s[MFC_ACTOR_GEN], 6, 1e-12);
    /* lengths 5, 5: no sample ends within 2 tokens, so every call runs the
     * two oldest to their end; in the steady state they have 2 tokens
     * drawn: prefill of 4 (4 s), a step of 4 rows (4 s; the two new pause
     * after their 2), a step of the two old (2 s) */
    w.len = len5;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("partial rollouts: too few end, so the oldest run to their end each call (4 + 4 + 2 s)", e.call_s[MFC_ACTOR_GEN], 10, 1e-12);
    /* memory-bound decoding (a step 1 s whatever its rows): the pool's
     * call 4 + 1 s against the whole samples' 2 + 4 s. Other costs are
     * other primitives: a copy (the generation keeps its last answers by
     * the primitives' address) */
    CostPrims pf = p;
    w.len = len, flat_decode = PETSC_TRUE;
    PetscCall(cost_estimate(&pf, &w, &plan, &e));
    test_report_close("partial rollouts, memory-bound decoding: 5 s a call", e.call_s[MFC_ACTOR_GEN], 5, 1e-12);
    w.partial = 0;
    PetscCall(cost_estimate(&pf, &w, &plan, &e));
    test_report_close("whole samples, memory-bound decoding: the longest's 4 steps after the prefill (6 s)", e.call_s[MFC_ACTOR_GEN], 6, 1e-12);
    /* groups (GRPO): lengths 1, 6, 1, 6, ..., memory-bound decoding. One
     * sample at a time: from call 2 on the pool holds samples with 4 and 2
     * tokens drawn and two new; the 4 and the new 1 end, no sample is run
     * to its end: prefill of 4 (4 s), one step (1 s). In groups of two (the
     * 1 and the 6 of a prompt together) no group ends within 2 tokens, so
     * every call runs the oldest to its end: the group with 2 drawn (4
     * left) and a new one: prefill of 3 (3 s), a step (1 s; the new 6
     * pauses), two more (2 s) */
    {
      int len6[2] = {1, 6};
      w.len = len6, w.partial = 2, w.group = 1;
      PetscCall(cost_estimate(&pf, &w, &plan, &e));
      test_report_close("partial rollouts, one sample at a time: 4 + 1 s a call", e.call_s[MFC_ACTOR_GEN], 5, 1e-12);
      w.group = 2;
      PetscCall(cost_estimate(&pf, &w, &plan, &e));
      test_report_close("partial rollouts in groups of two: a group ends and leaves whole (3 + 1 + 2 s a call)", e.call_s[MFC_ACTOR_GEN], 6, 1e-12);
      w.group = 1, w.partial = 0, w.len = len;
    }
    flat_decode = PETSC_FALSE, w.staleness = 0, w.partial_extra = 0;
  }

  /* generation under continuous batching: lengths 1..4, all at once: the
   * prefill of 4 rows, then 3, 2 and 1 rows decoding (10 s) */
  {
    int len[4] = {1, 2, 3, 4};
    tiny_work(&w, len, 4);
    base_plan(&plan, 1);
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("generation shrinks the batch as samples finish (4+3+2+1 s)", e.call_s[MFC_ACTOR_GEN], 10, 1e-12);
    /* two slots: prefill rows 0,1 (2); row 0 done, prefill row 2 (1);
     * decode {1,2} (2); row 1 done, prefill row 3 (1); decode {2,3} (2);
     * decode {3} twice (2): 10 s */
    w.gen_slots = 2;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("two slots: a finished sample's slot takes the next prompt (10 s)", e.call_s[MFC_ACTOR_GEN], 10, 1e-12);
    /* episodes: all at once, the decode steps are 3 + 2 + 1 s over 3 steps (2 s a step); 2 answers per episode of
     * 5 s each, prefilled 1 step after the turn: one wave waits 2 x (5 - 1 x 2) = 6 s more; answers of 1.5 s come
     * within the step and cost nothing */
    w.gen_slots = 0, w.env_answers = 2, w.env_lag = 1, w.env_s = 5;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("episodes: 2 answers of 5 s, 1 step of 2 s before their prefill: 10 + 2 x (5 - 2) s",
                      e.call_s[MFC_ACTOR_GEN], 16, 1e-12);
    w.env_s = 1.5;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("episodes: answers of 1.5 s within the lag's 2 s step: no wait (10 s)", e.call_s[MFC_ACTOR_GEN],
                      10, 1e-12);
    w.env_s = 5;
    test_report_close("episodes: 10 samples 4 at a time are 3 waves: 3 x 2 x (5 - 1 x 0.5) s",
                      cost_env_wait(&w, 10, 4, 6.0, 12), 27, 1e-12);
    w.env_procs = 3; /* a wave's 4 answers to a turn on 3 processes: 2 x 5 s one after another */
    test_report_close("episodes: 3 environment processes for 4 samples: 3 x 2 x (2 x 5 - 1 x 0.5) s",
                      cost_env_wait(&w, 10, 4, 6.0, 12), 57, 1e-12);
    w.env_answers = 0, w.env_lag = 0, w.env_s = 0, w.env_procs = 0;
    /* inference pads each micro-batch to its longest: 2 micro-batches of
     * 2 rows (lengths {1,2}, {3,4}) cost 2 + 2 = 4 s on the mock */
    w.gen_slots = 0;
    plan.call[MFC_REF_INF].mbs = 2;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("inference: micro-batches of 2 rows (2 + 2 s)", e.call_s[MFC_REF_INF], 4, 1e-12);
    /* mbs 0: the mode's own size, batch / minibatches / micro = 4 / 2 / 1
     * rows: inference in 2 micro-batches, training 2 mini-batches of one
     * micro-batch each (2 + 4 s each) */
    w.minibatches = 2;
    plan.call[MFC_REF_INF].mbs = plan.call[MFC_ACTOR_TRAIN].mbs = 0;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("mbs 0: inference in the mode's micro-batches (2 + 2 s)", e.call_s[MFC_REF_INF], 4, 1e-12);
    test_report_close("mbs 0: training, 2 mini-batches of 2 rows (2 x 6 s)", e.call_s[MFC_ACTOR_TRAIN], 12, 1e-12);
    w.micro = 2;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("mbs 0, -ppo_microbatches 2: 4 micro-batches of one row (4 x 1 s)", e.call_s[MFC_REF_INF], 4, 1e-12);
    w.minibatches = 1, w.micro = 0;
    plan.call[MFC_REF_INF].mbs = 2, plan.call[MFC_ACTOR_TRAIN].mbs = 1;
    /* pipelined over 2 stages: 2 micro-batches of a stage with one layer
     * of... the tiny model has 1 layer, so take 2 layers: 1 per stage */
    w.actor.n_layer = w.ref.n_layer = 2;
    plan.call[MFC_REF_INF].pp = 1;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    {
      double one = e.call_s[MFC_REF_INF]; /* 2 layers, 2 micro-batches of 2 rows: 2*2 + 2*2 = 8 */
      plan.call[MFC_REF_INF].pp = 2, plan.call[MFC_REF_INF].dp = 1, plan.call[MFC_REF_INF].nranks = 2;
      plan.world = 2;
      plan.call[MFC_REF_INF].ranks[1] = 1;
      PetscCall(cost_estimate(&p, &w, &plan, &e));
      /* plus the activations stage 0 sends on (rows x len x width x 4
       * bytes at 1 ns each: 2x6x8x4 and 2x8x8x4), the larger once more
       * in the drain */
      test_report_close("pipelined inference: per-stage 2 s x (2 micro-batches + 2 stages - 1)", e.call_s[MFC_REF_INF], 6 + (384 + 512 + 512) * 1e-9, 1e-12);
      test_report_close("unpipelined reference of the same: 8 s", one, 8, 1e-12);
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Prompts of different lengths, paired with their responses, on a mock
 * whose block costs rows x len: every call pads to (or attends over) the
 * prompt and the response of each sequence. */
static PetscErrorCode check_prompts(void)
{
  CostPrims    p;
  CostWork     w;
  Plan         plan;
  CostEstimate e;
  int          len[4] = {5, 1, 2, 2}, plen[4] = {2, 6, 1, 1}; /* sequences of 7, 7, 3, 3 tokens */

  PetscFunctionBegin;
  mock_prims(&p);
  per_token = PETSC_TRUE;
  tiny_work(&w, len, 4);
  w.plen = plen;
  base_plan(&plan, 1);
  plan.call[MFC_REF_INF].mbs = 2;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  /* rows {0,1} padded to 7, rows {2,3} to 3 (one prompt length of 4 for
   * all would give 9 and 6: 30 s) */
  test_report_close("prompts: inference pads to the longest prompt + response (2x7 + 2x3 s)", e.call_s[MFC_REF_INF], 20, 1e-12);
  /* one micro-batch of the 4 rows, padded to 7: forward 28, backward 56 */
  test_report_close("prompts: training pads to the longest sequence (4x7 + 2x4x7 s)", e.call_s[MFC_ACTOR_TRAIN], 84, 1e-12);
  /* the prefill packs the 4 prompts (10 tokens: 4 rows of 2.5); row 1
   * ends there; one step of rows 0, 2, 3 at contexts 3, 2, 2 (7); row 0
   * alone at 4, 5, 6 (15) */
  test_report_close("prompts: generation's prefill and contexts follow each prompt (10 + 7 + 15 s)", e.call_s[MFC_ACTOR_GEN], 32, 1e-12);
  /* sequences of 2, 2, 2 and 6 tokens trained as dp 2 (2 rows a replica,
   * one micro-batch): a replica's expected longest is 4 (the 6 is among
   * 2 rows of 4 with probability 1/2), but both wait for the one holding
   * the 6: 2 rows x 6 forward (12) and backward (24) */
  {
    int one[4] = {1, 1, 1, 1}, p4[4] = {1, 1, 1, 5};
    tiny_work(&w, one, 4);
    w.plen = p4;
    base_plan(&plan, 2);
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("prompts: dp replicas wait for the one with the longest sequence (2x6 + 2x2x6 s)", e.call_s[MFC_ACTOR_TRAIN], 36, 1e-12);
  }
  per_token = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Fusion and offload on the mock. */
static PetscErrorCode check_fusion(void)
{
  CostPrims    p;
  CostWork     w;
  Plan         plan;
  CostEstimate e, f;
  int          len[4] = {1, 2, 3, 4};

  PetscFunctionBegin;
  mock_prims(&p);
  tiny_work(&w, len, 4);
  /* generation on rank 0, reference and reward on rank 1, training on
   * both. Samples finish at 4 (prefill), 7, 9 and 10 s; unfused, rank 1
   * then runs 4 + 4 s: 18 s, plus 6 s of training */
  base_plan(&plan, 2);
  set_call(&plan, MFC_ACTOR_GEN, 0, 1);
  set_call(&plan, MFC_REF_INF, 1, 2);
  set_call(&plan, MFC_REW_INF, 1, 2);
  p2p_ns = 0;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("unfused: generation, then both inferences (10 + 4 + 4 + 6 s)", e.iter_s, 24, 1e-12);
  /* streamed with a budget of one sample: each arrival runs its reference
   * and reward (1 + 1 s) as it comes: 4-6, 7-9, 9-11, 11-13 */
  plan.fuse        = FUSE_STREAM;
  plan.fuse_tokens = 1;
  PetscCall(cost_estimate(&p, &w, &plan, &f));
  test_report_close("streamed: inference follows the samples as they finish (13 + 6 s)", f.iter_s, 19, 1e-12);
  test_report_close("streamed: the fused node takes 13 s", f.genfuse_s, 13, 1e-12);
  /* a budget of 11 tokens (prompt 4 + response): samples {1,2} (11 tokens,
   * at 7 s: 2 + 2 s padded to the longer), then {3,4} at 10 s: 2 + 2 */
  plan.fuse_tokens = 11;
  PetscCall(cost_estimate(&p, &w, &plan, &f));
  test_report_close("streamed: micro-batches cut by the token budget (7+4, 11+4 s)", f.genfuse_s, 15, 1e-12);
  { /* the reference and reward as one tp-2 replica on ranks 1-2: each
     * arrival's 1 + 1 s halved: 4-5, 7-8, 9-10, 10-11 */
    Plan q = plan;

    q.world = 3, q.fuse_tokens = 1;
    for (int c = MFC_REF_INF; c <= MFC_REW_INF; c++) {
      set_call(&q, (MFCId)c, 1, 3);
      q.call[c].dp = 1, q.call[c].tp = 2;
    }
    PetscCall(cost_estimate(&p, &w, &q, &f));
    test_report_close("streamed into a tp-2 replica: each arrival's calls at half the time (11 s)", f.genfuse_s, 11, 1e-12);
    /* the head broadcasts each arrival (7 + 2 x 5..8 tokens words: 68, 76,
     * 84, 92 bytes) at 1 ms a byte: 4.068-5.068, 7.076-8.076,
     * 9.084-10.084, 10.176-11.176 */
    bcast_ns = 1e6;
    PetscCall(cost_estimate(&p, &w, &q, &f));
    bcast_ns = 0;
    test_report_close("streamed into a tp-2 replica: the head's broadcast of each micro-batch costed (11.176 s)", f.genfuse_s, 11.176, 1e-12);
    /* as a pp-2 replica of two-layer models: a micro-batch passes the two
     * stages in turn, 1 + 1 s a call: 4-8, 8-12, 12-16, 16-20 */
    w.ref.n_layer = w.reward.n_layer = 2;
    for (int c = MFC_REF_INF; c <= MFC_REW_INF; c++) q.call[c].tp = 1, q.call[c].pp = 2;
    PetscCall(cost_estimate(&p, &w, &q, &f));
    test_report_close("streamed into a pp-2 replica: each micro-batch through both stages in turn (20 s)", f.genfuse_s, 20, 1e-12);
    w.ref.n_layer = w.reward.n_layer = 1;
  }
  { /* dealt to two replicas (src/genfuse/deal.c): the reference on ranks 1
     * and 2; a block costs rows x tokens, a decode step 1 s. 8 rows of
     * 4 prompt tokens: rows 0-5 respond 1 token, rows 6-7 8. Generation on
     * rank 0: the prefill (8 x 4 = 32 s) finishes rows 0-5, 7 steps more
     * rows 6-7 at 39. Each arrival its own micro-batch, 5 or 12 s.
     * By blocks, rank 2 gets rows 4-7: 32-37, 37-42, then rows 6 and 7,
     * 42-54-66. Dealt, rows 0-5 alternate (3 each, 32-47) and rows 6 and
     * 7 split: both ranks end at 47 + 12 = 59. */
    Plan q;
    int  l8[8] = {1, 1, 1, 1, 1, 1, 8, 8};

    tiny_work(&w, l8, 8);
    w.reward_free = PETSC_TRUE;
    base_plan(&q, 3);
    set_call(&q, MFC_ACTOR_GEN, 0, 1);
    set_call(&q, MFC_REF_INF, 1, 3);
    q.fuse = FUSE_STREAM, q.fuse_tokens = 1;
    per_token = flat_decode = PETSC_TRUE;
    PetscCall(cost_estimate(&p, &w, &q, &f));
    per_token = flat_decode = PETSC_FALSE;
    test_report_close("streamed into two replicas: samples dealt by their work, not by blocks of rows (59 s, 66 by blocks)", f.genfuse_s, 59, 1e-12);
    tiny_work(&w, len, 4);
  }
  /* without a reward model (rule rewards): rank 1 runs the reference alone,
   * 4 s after generation; streamed, 1 s per arrival: 4-5, 7-8, 9-10, 10-11 */
  w.reward_free = PETSC_TRUE;
  plan.fuse     = FUSE_NONE;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report_close("reward-free, unfused: generation, the reference, training (10 + 4 + 6 s)", e.iter_s, 20, 1e-12);
  test_report(e.call_s[MFC_REW_INF] == 0 && e.mem_call[MFC_REW_INF] == 0 ? PETSC_TRUE : PETSC_FALSE, "reward-free: no reward call, no memory for it", "%g s, %g bytes", e.call_s[MFC_REW_INF], e.mem_call[MFC_REW_INF]);
  plan.fuse        = FUSE_STREAM;
  plan.fuse_tokens = 1;
  PetscCall(cost_estimate(&p, &w, &plan, &f));
  test_report_close("reward-free, streamed: the reference follows the samples (11 + 6 s)", f.iter_s, 17, 1e-12);
  w.reward_free = PETSC_FALSE;

  /* -fuse_train: actor and critic, 2 stages of one layer each on ranks 0
   * and 1, 2 micro-batches of 2 rows: a stage's forward 2 s, backward 4;
   * apart each takes (2 + 2 - 1) * 6 = 18 s; fused, the fused schedule's
   * bound for that instance */
  {
    ACInst in = {{2, 2}, {2, 2}, {2, 2}, {0, 0}, 0};
    w.critic_free = PETSC_FALSE;
    w.actor.n_layer = w.critic.n_layer = w.ref.n_layer = w.reward.n_layer = 2;
    base_plan(&plan, 2);
    for (int c = MFC_ACTOR_TRAIN; c <= MFC_CRITIC_TRAIN; c++) plan.call[c].dp = 1, plan.call[c].pp = 2, plan.call[c].mbs = 2;
    PetscCall(cost_estimate(&p, &w, &plan, &e));
    test_report_close("apart: actor_train 18 s", e.call_s[MFC_ACTOR_TRAIN], 18, 1e-12);
    test_report_close("apart: critic_train 18 s", e.call_s[MFC_CRITIC_TRAIN], 18, 1e-12);
    plan.fuse_train = PETSC_TRUE;
    plan.call[MFC_CRITIC_TRAIN].ranks[0] = 1, plan.call[MFC_CRITIC_TRAIN].ranks[1] = 0; /* opposite direction */
    PetscCall(cost_estimate(&p, &w, &plan, &f));
    test_report_close("fused: the fused schedule's makespan (its lower bound)", f.call_s[MFC_ACTOR_TRAIN], ac_lower_bound(&in), 1e-12);
    test_report(f.call_s[MFC_ACTOR_TRAIN] < 36 ? PETSC_TRUE : PETSC_FALSE, "fused: faster than the two apart", "not faster");
    test_report_close("fused: the iteration saves what training saves", e.iter_s - f.iter_s, 36 - f.call_s[MFC_ACTOR_TRAIN], 1e-12);
  }

  /* offload: on one rank the reference (1080 fp32 parameters) and the
   * reward model (1088) go to the device and back, 2 x 8672 bytes at 1 GB/s */
  tiny_work(&w, len, 4);
  base_plan(&plan, 1);
  p.host_bw = 1e9;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  plan.offload = PETSC_TRUE;
  PetscCall(cost_estimate(&p, &w, &plan, &f));
  test_report_close("offload: the frozen models move both ways (2 x 8672 bytes at 1 GB/s)", f.offload_s, 2 * 8672e-9, 1e-12);
  test_report_close("offload: the iteration pays for it", f.iter_s - e.iter_s, 2 * 8672e-9, 1e-6);
  test_report_close("offload: the frozen weights leave the training call's peak", e.mem_call[MFC_ACTOR_TRAIN] - f.mem_call[MFC_ACTOR_TRAIN], 8672, 1e-12);
  p2p_ns = 1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -fuse_gen_inf migrate on the mock, worked by hand. */
static PetscErrorCode check_migrate(void)
{
  CostPrims    p;
  CostWork     w;
  Plan         plan;
  CostEstimate e, z, one, au;
  int          len[4] = {2, 5, 3, 4}, tail[4] = {2, 2, 2, 8};

  PetscFunctionBegin;
  mock_prims(&p);
  p2p_ns = 0;
  tiny_work(&w, len, 4);
  /* 2 ranks: generation, reference and reward as 2 one-rank replicas on
   * both (the co-located plan); each sample its own inference micro-batch */
  base_plan(&plan, 2);
  plan.fuse = FUSE_MIGRATE, plan.fuse_tokens = 1, plan.migrate_at = 0.5;
  /* Lockstep: both replicas prefill 2 rows (2 s) and decode a step (2 s):
   * row 0 ends at 4. Next step: replica 0 decodes 1 row (1 s), replica 1
   * two (2 s), row 2 ends at 6. Now 2 <= 0.5 * 4 samples are left: they
   * fit one replica's 2 slots, equal caches (6 positions) and counts: onto
   * replica 0; row 3 moves. Replica 0 decodes rows 1 and 3 (2 s, row 3
   * ends at 8) then row 1 (1 s, ends at 9). Rank 1, freed at 6, takes
   * finished row 0 from rank 0 and keeps rows 2 and 3: reference + reward
   * 2 s each from 6: 6-8, 8-10, 10-12. Rank 0: row 1 at 9: 9-11. */
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  test_report(e.feasible, "migrate: a feasible estimate", "%s", e.why);
  test_report_close("migrate R_t 0.5: the fused stage ends at 12 s (by hand)", e.genfuse_s, 12, 1e-12);
  test_report_close("migrate R_t 0.5: the last sample finishes at 9 s", e.call_s[MFC_ACTOR_GEN], 9, 1e-12);
  test_report_close("migrate R_t 0.5: it starts at 6 s", e.migrate_t, 6, 1e-12);
  test_report(e.migrate_samples == 1 && e.migrate_replicas == 1 ? PETSC_TRUE : PETSC_FALSE, "migrate R_t 0.5: one sample onto one replica", "not 1 onto 1");
  /* row 3's state: L = 3 tokens so far, 4 + 3L words, and the keys and
   * values of positions 0 .. P+L-2 (6) of every layer */
  {
    double words = 4 + 3 * 3, kv = 2.0 * w.actor.n_layer * w.actor.n_embd * w.actor.n_kv_head / w.actor.n_head * p.bytes_per_param * (4 + 3 - 1);
    test_report_close("migrate: bytes = the state and its KV cache (436)", e.migrate_bytes, 4 * words + kv, 1e-12);
    /* the KV-cache formula with grouped-query attention, two layers and
     * 2-byte values: 2 x 2 layers x 8 x (1/2 heads) x 2 bytes a position */
    w.actor.n_layer = 2, w.actor.n_kv_head = 1, p.bytes_per_param = 2, p2p_ns = 1;
    PetscCall(cost_estimate(&p, &w, &plan, &z));
    test_report_close("migrate: bytes with GQA and 2-byte values (52 + 6 x 32)", z.migrate_bytes, 4 * words + 6 * 32, 1e-12);
    test_report_close("migrate: its time is one point-to-point message of them", z.migrate_s, (4 * words + 6 * 32) * 1e-9, 1e-12);
    w.actor = tiny(PETSC_FALSE), p.bytes_per_param = 4, p2p_ns = 0;
  }
  /* the same with the reference and reward as one tp-2 replica on both
   * ranks (head rank 0): no freed head to deal rows to; the replica starts
   * when its last rank stops generating (rank 0 at 9) and runs the four
   * rows at 1 s each (reference + reward, halved by tp): 9-13 */
  {
    Plan q = plan;

    for (int c = MFC_REF_INF; c <= MFC_REW_INF; c++) q.call[c].dp = 1, q.call[c].tp = 2;
    PetscCall(cost_estimate(&p, &w, &q, &z));
    test_report_close("migrate R_t 0.5 into one tp-2 replica: it starts when its last rank stops generating, 13 s (by hand)", z.genfuse_s, 13, 1e-12);
    /* headed by the freed rank 1 (ranks 1, 0): it still waits for rank 0
     * until 9, 13 s (starting at its own 6 would end at 10) */
    for (int c = MFC_REF_INF; c <= MFC_REW_INF; c++) q.call[c].ranks[0] = 1, q.call[c].ranks[1] = 0;
    PetscCall(cost_estimate(&p, &w, &q, &z));
    test_report_close("migrate R_t 0.5 into a tp-2 replica headed by the freed rank: it waits for the other, 13 s (by hand)", z.genfuse_s, 13, 1e-12);
  }
  /* R_t 0: no count, no migration: replica 0 ends rows 0 and 1 at 4 and
   * 7, replica 1 rows 2 and 3 at 6 and 7; each rank then runs its 2 rows
   * (4 s) from 7 */
  plan.migrate_at = 0;
  PetscCall(cost_estimate(&p, &w, &plan, &z));
  test_report_close("migrate R_t 0: co-located streaming, 11 s (by hand)", z.genfuse_s, 11, 1e-12);
  test_report(z.migrate_samples == 0 && z.migrate_t < 0 && z.migrate_replicas == 2 ? PETSC_TRUE : PETSC_FALSE, "migrate R_t 0: nothing moves", "moved");

  /* memory-bound decoding (a step 1 s for any rows), 4 slots, a long tail
   * (row 3: 8 tokens, the limit). R_t 0: replica 0 ends at 3, its rank
   * scores rows 0 and 1 by 7; replica 1 ends row 3 at 9, rank 1 then
   * scores rows 2 and 3: 13. R_t 0.5: after a step (3 s) replica 0 is
   * idle: the tail stays on replica 1 (it holds the cache), rank 0 takes
   * finished row 2 and scores rows 0-2 from 3 to 9; rank 1 scores row 3 at
   * 9: 11. R_t 1: at once, all 4 fit replica 0's slots: prefill 4 s, a
   * step, row 3 at 11; no row was finished then, so none is dealt out:
   * rank 1 scores rows 2 and 3 (5-7, 11-13), rank 0 rows 0 and 1 from 11:
   * 15. */
  flat_decode = PETSC_TRUE;
  tiny_work(&w, tail, 4);
  w.gen_slots = 4;
  PetscCall(cost_estimate(&p, &w, &plan, &z));
  plan.migrate_at = 0.5;
  PetscCall(cost_estimate(&p, &w, &plan, &e));
  plan.migrate_at = 1;
  PetscCall(cost_estimate(&p, &w, &plan, &one));
  plan.migrate_at = -1;
  PetscCall(cost_estimate(&p, &w, &plan, &au));
  test_report_close("long tail, R_t 0: 13 s (by hand)", z.genfuse_s, 13, 1e-12);
  test_report_close("long tail, R_t 0.5: 11 s (by hand)", e.genfuse_s, 11, 1e-12);
  test_report_close("long tail, R_t 1: 15 s (by hand)", one.genfuse_s, 15, 1e-12);
  test_report(e.genfuse_s < z.genfuse_s && z.genfuse_s < one.genfuse_s ? PETSC_TRUE : PETSC_FALSE, "long tail: R_t 0.5 < R_t 0 < R_t 1", "wrong order");
  test_report(one.migrate_samples == 2 && one.migrate_replicas == 1 && one.migrate_t == 0 ? PETSC_TRUE : PETSC_FALSE, "long tail, R_t 1: everything onto one replica", "not 2 onto 1 at 0");
  test_report(au.migrate_at == 0.05 && au.genfuse_s == 11 ? PETSC_TRUE : PETSC_FALSE, "long tail, auto: the smallest best candidate (0.05, 11 s)", "not 0.05");
  flat_decode = PETSC_FALSE;
  p2p_ns      = 1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode check_memory(void)
{
  CostPrims    hw;
  CostWork     w;
  Plan         plan;
  CostEstimate e, z;
  int         *len;

  PetscFunctionBegin;
  PetscCall(cost_prims_hardware("input/hardware/h100_sxm.deck", &hw));
  PetscCall(PetscMalloc1(64, &len));
  for (int i = 0; i < 64; i++) len[i] = 128;
  tiny_work(&w, len, 64);
  PetscCall(cost_shape_named("x", "llama2-7b", PETSC_FALSE, &w.actor));
  PetscCall(cost_shape_named("x", "llama2-7b", PETSC_TRUE, &w.critic));
  w.ref = w.actor, w.reward = w.critic, w.critic_free = PETSC_FALSE;
  w.max_new = 128, w.prompt_len = 128, w.minibatches = 4;
  base_plan(&plan, 1);
  PetscCall(cost_estimate(&hw, &w, &plan, &e));
  test_report(e.feasible ? PETSC_FALSE : PETSC_TRUE, "LLaMA-2 7B+7B on one H100 is infeasible", "feasible");
  test_report(strstr(e.why, "on rank 0 needs") && strstr(e.why, "the device has 72.0 GB") ? PETSC_TRUE : PETSC_FALSE, "the reason names the call, the rank and the device's memory", "%s", e.why);
  if (world_rank == 0) printf("#   %s\n", e.why);
  /* ZeRO-1 on 8 ranks: the fp32 master and moments (12 bytes a parameter)
   * split 8 ways; the actor's and the critic's training state shrink by
   * 12 * 7/8 bytes per parameter, nothing else changes */
  base_plan(&plan, 8);
  PetscCall(cost_estimate(&hw, &w, &plan, &e));
  plan.zero1 = PETSC_TRUE;
  PetscCall(cost_estimate(&hw, &w, &plan, &z));
  {
    double peak[8], top = 0;
    PetscCall(cost_memory_ranks(&hw, &w, &plan, peak));
    for (int r = 0; r < 8; r++) top = PetscMax(top, peak[r]);
    test_report_close("per-rank peaks: the largest is the estimate's", top, z.mem_max, 1e-12);
  }
  test_report_close("ZeRO-1 saves 10.5 bytes per parameter of both trained models", e.mem_call[MFC_ACTOR_TRAIN] - z.mem_call[MFC_ACTOR_TRAIN], 10.5 * (cost_shape_params(&w.actor) + cost_shape_params(&w.critic)), 1e-9);
  /* the training activations at responses of 128, 256, 384 tokens: the
   * attention keeps one log-sum-exp per row, no T x T array, so they grow
   * linearly in the length (second difference 0; Megatron's T x T count
   * would make it positive) */
  {
    double m[3], d2;
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < 64; i++) len[i] = 128 * (k + 1);
      w.max_new = 128 * (k + 1);
      PetscCall(cost_estimate(&hw, &w, &plan, &e));
      m[k] = e.mem_call[MFC_ACTOR_TRAIN];
    }
    d2 = m[2] - 2 * m[1] + m[0];
    test_report(fabs(d2) <= 1e-9 * m[2] && m[1] > m[0] && m[2] > m[1] ? PETSC_TRUE : PETSC_FALSE, "training activations linear in the length (no T x T array)",
                "second difference %g; at 128, 256, 384 tokens %g, %g, %g bytes", d2, m[0], m[1], m[2]);
  }
  PetscCall(PetscFree(len));
  PetscCall(cost_prims_destroy(&hw));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A training stage alone (sft_train, rm_train: cost_train_stage) on the
 * mock primitives: one layer whose forward costs its rows in seconds (the
 * backward twice), nothing else, so one step of m micro-batches of r rows
 * is m x 3r s (no pipeline, no collectives) worked by hand; a pair is two
 * rows; a 70B model on one H100 does not fit, and the reason names the
 * stage's call. */
static PetscErrorCode check_train_stage(void)
{
  CostPrims      p, hw;
  CostTrainStage st;
  CostEstimate   e;
  PlanCall       c;
  ModelConfig    cfg = {.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 16, .n_positions = 8, .head = MODEL_HEAD_LM};
  CostShape      s70;

  PetscFunctionBegin;
  mock_prims(&p);
  flat_decode = per_token = PETSC_FALSE;
  memset(&st, 0, sizeof st);
  st.used = PETSC_TRUE, st.cfg = cfg, st.batch = 4, st.rows = 1, st.len = 8, st.steps = 10;
  memset(&c, 0, sizeof c);
  c.nranks = 1, c.ranks[0] = 0, c.dp = c.tp = c.pp = 1, c.mbs = 2;
  PetscCall(cost_train_stage(&p, &st, MFC_SFT_TRAIN, &c, 1, PETSC_FALSE, &e));
  test_report_close("an SFT step of 4 sequences in 2 micro-batches on one rank: 2 x 3 x 2 s (by hand)", e.iter_s, 12, 1e-12);
  test_report_close("the stage's call carries the step's time", e.call_s[MFC_SFT_TRAIN], 12, 1e-12);
  st.rows = 2;
  PetscCall(cost_train_stage(&p, &st, MFC_RM_TRAIN, &c, 1, PETSC_FALSE, &e));
  test_report_close("an RM step of 4 pairs (8 sequences) in 2 micro-batches: 2 x 3 x 4 s (by hand)", e.iter_s, 24, 1e-12);
  st.rows = 1;
  c.nranks = 2, c.ranks[1] = 1, c.dp = 2;
  PetscCall(cost_train_stage(&p, &st, MFC_SFT_TRAIN, &c, 2, PETSC_FALSE, &e));
  test_report_close("two replicas halve the rows of each micro-batch: 2 x 3 x 1 s", e.iter_s, 6, 1e-12);
  PetscCall(cost_prims_hardware("input/hardware/h100_sxm.deck", &hw));
  PetscCall(cost_shape_named("x", "llama2-70b", PETSC_FALSE, &s70));
  cost_shape_to_model(&s70, &st.cfg);
  c.nranks = 1, c.dp = 1;
  PetscCall(cost_train_stage(&hw, &st, MFC_SFT_TRAIN, &c, 1, PETSC_FALSE, &e));
  test_report(!e.feasible && !strncmp(e.why, "sft_train on rank 0 needs", 25) ? PETSC_TRUE : PETSC_FALSE, "a 70B SFT step on one H100 does not fit, and the reason names sft_train", "%s", e.why);
  PetscCall(cost_prims_destroy(&hw));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The reallocation bytes against the planner itself, for GPT-2 layouts of 4 ranks. */
static PetscErrorCode check_realloc(void)
{
  static const struct {
    int a_lo, a_n, a_pp, a_dp, a_tp, b_lo, b_n, b_pp, b_dp, b_tp;
  } cases[] = {
    {0, 4, 1, 4, 1, 0, 4, 1, 2, 2}, {0, 4, 2, 1, 2, 0, 4, 1, 1, 4}, {0, 2, 1, 2, 1, 2, 2, 1, 1, 2}, {0, 4, 4, 1, 1, 0, 4, 1, 4, 1}, {0, 2, 2, 1, 1, 1, 3, 1, 3, 1},
  };
  ModelConfig cfg = {.n_layer = 4, .n_head = 4, .n_embd = 16, .vocab_size = 24, .n_positions = 16, .head = MODEL_HEAD_LM};
  CostShape m;

  PetscFunctionBegin;
  if (world_size < 4) {
    test_skip("reallocation bytes equal the planner's", "needs 4 ranks");
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  /* GPT-2 with either head; LLaMA with one key/value head (replicated at
   * every tp > 1), with two, and with two of a head_dim of their own (6:
   * query width 24 over n_embd 16) */
  for (int model = 0; model < 5; model++) {
    cfg.head = model == 1 ? MODEL_HEAD_SCALAR : MODEL_HEAD_LM;
    if (model >= 2) cfg.arch = MODEL_ARCH_LLAMA, cfg.n_kv_head = model == 2 ? 1 : 2, cfg.n_ffn = 32, cfg.tie_embeddings = PETSC_FALSE, cfg.rope_theta = 1e4, cfg.norm_eps = 1e-5;
    cfg.head_dim = model == 4 ? 6 : 0;
    cost_shape_from_model(&cfg, &m);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      PlanCall           a = {0}, b = {0};
      const Mesh        *ma, *mb;
      const ReallocPlan *rp;
      double             total, max_recv;
      char               name[128];
      a.nranks = cases[k].a_n, a.pp = cases[k].a_pp, a.dp = cases[k].a_dp, a.tp = cases[k].a_tp;
      b.nranks = cases[k].b_n, b.pp = cases[k].b_pp, b.dp = cases[k].b_dp, b.tp = cases[k].b_tp;
      for (int i = 0; i < a.nranks; i++) a.ranks[i] = cases[k].a_lo + i;
      for (int i = 0; i < b.nranks; i++) b.ranks[i] = cases[k].b_lo + i;
      PetscCall(mesh_get(a.ranks, a.nranks, a.pp, a.dp, a.tp, &ma));
      PetscCall(mesh_get(b.ranks, b.nranks, b.pp, b.dp, b.tp, &mb));
      PetscCall(realloc_plan_get(&cfg, ma, mb, "test", &rp));
      PetscCall(cost_realloc_bytes(&m, 4, &a, &b, &total, &max_recv));
      snprintf(name, sizeof name, "reallocation bytes equal the planner's (%s, %dx%dx%d -> %dx%dx%d)", model == 1 ? "scalar head" : model == 0 ? "lm head" : model == 2 ? "llama, 1 kv head" : model == 3 ? "llama, 2 kv heads" : "llama, head_dim 6", a.pp, a.dp, a.tp, b.pp,
               b.dp, b.tp);
      test_report_close(name, total, realloc_plan_bytes(rp), 0);
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode work_try(const char *opts, CostWork *w, PetscErrorCode *ierr)
{
  PetscFunctionBegin;
  PetscCall(PetscOptionsClear(NULL));
  PetscCall(PetscOptionsInsertString(NULL, opts));
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  { /* the deck's job as -mode plan reads it (PPO's own options), then the -cost_ ones */
    RunCtx   run;
    CostDeck deck;
    *ierr = sys_run_setup(PETSC_COMM_WORLD, &run);
    if (!*ierr) *ierr = ppo_cost_deck(&run, PETSC_FALSE, &deck);
    if (!*ierr) *ierr = cost_work_from_options(&deck, w);
  }
  PetscCall(PetscPopErrorHandler());
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const char *err_text(PetscErrorCode ierr)
{
  char *msg = NULL;
  PetscErrorMessage(ierr, NULL, &msg);
  return msg ? msg : "";
}

/* The workload from options: the deck's PPO settings, the shapes, the lengths. */
static PetscErrorCode check_work(void)
{
  CostWork       w, v;
  PetscErrorCode ierr;
  int            lo = 1 << 30, hi = 0, below = 0, same = 1;
  char           dir[PETSC_MAX_PATH_LEN], path[PETSC_MAX_PATH_LEN], opts[2 * PETSC_MAX_PATH_LEN];

  PetscFunctionBegin;
  PetscCall(work_try("-rollout_batch 32 -gen_max_new_tokens 16 -ppo_minibatches 2 -policy_n_layer 3 -policy_n_embd 64 -cost_lengths uniform:2:5", &w, &ierr));
  test_report(!ierr && w.batch == 32 && w.max_new == 16 && w.minibatches == 2 && w.nlen == 32 && w.actor.n_layer == 3 && w.actor.n_embd == 64 && w.critic.value_head && !w.actor.value_head ? PETSC_TRUE : PETSC_FALSE, "workload: the deck's PPO settings", "%s", err_text(ierr));
  for (int i = 0; !ierr && i < w.nlen; i++) lo = PetscMin(lo, w.len[i]), hi = PetscMax(hi, w.len[i]);
  test_report(lo == 2 && hi == 5 ? PETSC_TRUE : PETSC_FALSE, "workload: uniform:2:5 lengths lie in [2, 5] and reach both ends", "out of range");
  PetscCall(cost_work_free(&w));
  PetscCall(work_try("-cost_batch 2001 -cost_max_new 1000 -cost_minibatches 1 -cost_lengths lognormal:50:400 -cost_actor_shape llama2-13b -seed 7", &w, &ierr));
  for (int i = 0; !ierr && i < w.nlen; i++) below += w.len[i] <= 50;
  test_report(!ierr && below > 900 && below < 1100 ? PETSC_TRUE : PETSC_FALSE, "workload: lognormal median 50: about half the draws at most 50", "%s", err_text(ierr));
  test_report(!ierr && w.actor.n_layer == 40 && w.critic.n_layer == 40 && w.critic.value_head ? PETSC_TRUE : PETSC_FALSE, "workload: a named shape for the actor, the critic the same with a scalar head", "wrong shape");
  PetscCall(work_try("-cost_batch 2001 -cost_max_new 1000 -cost_minibatches 1 -cost_lengths lognormal:50:400 -cost_actor_shape llama2-13b -seed 7", &v, &ierr));
  for (int i = 0; !ierr && i < w.nlen; i++) same &= w.len[i] == v.len[i];
  test_report(same ? PETSC_TRUE : PETSC_FALSE, "workload: the draws are keyed by -seed (the same twice)", "differ");
  PetscCall(cost_work_free(&w));
  PetscCall(cost_work_free(&v));
  /* the PPO settings as PPO parses them, not as a second reader guesses */
  PetscCall(work_try("-algo PPO -rollout_batch 8", &w, &ierr));
  test_report(!ierr && !w.critic_free ? PETSC_TRUE : PETSC_FALSE, "workload: -algo PPO (an enum, any case) has the critic calls", "%s", err_text(ierr));
  if (!ierr) PetscCall(cost_work_free(&w));
  PetscCall(work_try("-algo rloo -rollout_batch 8 -task_len_max 20 -policy_n_positions 128", &w, &ierr));
  test_report(!ierr && w.critic_free && w.prompt_len == 22 ? PETSC_TRUE : PETSC_FALSE, "workload: -algo rloo is critic-free; the prompt is -task_len_max + 2", "%s", err_text(ierr));
  if (!ierr) PetscCall(cost_work_free(&w));
  PetscCall(work_try("-rollout_batch 8 -ppo_minibatches 3", &w, &ierr));
  test_report(ierr && strstr(err_text(ierr), "-ppo_minibatches 3 must be positive and divide -rollout_batch 8") ? PETSC_TRUE : PETSC_FALSE, "workload: PPO's own checks on its options apply (-ppo_minibatches 3 does not divide 8), the message naming -ppo_minibatches, not -cost_minibatches", "%s", err_text(ierr));
  PetscCall(work_try("-cost_lengths lognormal:50", &w, &ierr));
  test_report(ierr && strstr(err_text(ierr), "-cost_lengths 'lognormal:50'") ? PETSC_TRUE : PETSC_FALSE, "workload: a malformed -cost_lengths is refused, naming the option", "%s", err_text(ierr));
  PetscCall(work_try("-cost_minibatches 3 -rollout_batch 64", &w, &ierr));
  test_report(ierr && strstr(err_text(ierr), "-cost_minibatches 3") ? PETSC_TRUE : PETSC_FALSE, "workload: mini-batches that do not divide the batch are refused", "%s", err_text(ierr));
  /* a histogram file and a rollouts file (one per rank: the test runs on several) */
  PetscCall(test_tmpdir(dir, sizeof dir, "test_cost_work"));
  {
    FILE *f;
    int   lens[6] = {3, 3, 3, 9, 9, 9}, plens[6] = {10, 10, 10, 20, 20, 20};
    hsize_t n = 6;
    hid_t h, g, sp, d;
    PetscCall(PetscSNPrintf(path, sizeof path, "%s/h.%d.txt", dir, world_rank));
    f = fopen(path, "w");
    fprintf(f, "# length count\n4 0\n7 10\n");
    fclose(f);
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_batch 8 -cost_minibatches 1 -cost_lengths hist:%s", path));
    PetscCall(work_try(opts, &w, &ierr));
    same = !ierr;
    for (int i = 0; !ierr && i < w.nlen; i++) same &= w.len[i] == 7;
    test_report(same ? PETSC_TRUE : PETSC_FALSE, "workload: a histogram file's lengths", "%s", err_text(ierr));
    if (!ierr) PetscCall(cost_work_free(&w));
    unlink(path);
    PetscCall(PetscSNPrintf(path, sizeof path, "%s/rollouts.%d.h5", dir, world_rank));
    h  = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    g  = H5Gcreate2(h, "iter_0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    sp = H5Screate_simple(1, &n, NULL);
    d  = H5Dcreate2(g, "response_lengths", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, lens);
    H5Dclose(d);
    d = H5Dcreate2(g, "prompt_lengths", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, plens);
    H5Dclose(d), H5Sclose(sp), H5Gclose(g), H5Fclose(h);
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_batch 64 -cost_minibatches 1 -cost_lengths rollouts:%s", path));
    PetscCall(work_try(opts, &w, &ierr));
    lo = 0, hi = 0, same = !ierr && w.plen;
    for (int i = 0; !ierr && i < w.nlen; i++) lo += w.len[i] == 3, hi += w.len[i] == 9;
    for (int i = 0; same && i < w.nlen; i++) same &= w.plen[i] == (w.len[i] == 3 ? 10 : 20);
    test_report(!ierr && lo + hi == 64 && lo > 16 && hi > 16 ? PETSC_TRUE : PETSC_FALSE, "workload: a rollouts.h5's response lengths, drawn for the batch", "%s", err_text(ierr));
    test_report(same && w.prompt_len == 20 ? PETSC_TRUE : PETSC_FALSE, "workload: each drawn response keeps its own prompt's length", "not paired");
    if (!ierr) PetscCall(cost_work_free(&w));
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_batch 64 -cost_minibatches 1 -cost_prompt_len 12 -cost_lengths rollouts:%s", path));
    PetscCall(work_try(opts, &w, &ierr));
    test_report(!ierr && !w.plen && w.prompt_len == 12 ? PETSC_TRUE : PETSC_FALSE, "workload: -cost_prompt_len sets every prompt, even with a rollouts file", "%s", err_text(ierr));
    if (!ierr) PetscCall(cost_work_free(&w));
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_batch 64 -cost_minibatches 1 -cost_prompt_len 30 -cost_prompt_lengths uniform:2:40 -cost_lengths rollouts:%s", path));
    PetscCall(work_try(opts, &w, &ierr));
    lo = 1 << 30, hi = 0;
    for (int i = 0; !ierr && w.plen && i < w.nlen; i++) lo = PetscMin(lo, w.plen[i]), hi = PetscMax(hi, w.plen[i]);
    test_report(!ierr && w.plen && lo == 2 && hi == 30 ? PETSC_TRUE : PETSC_FALSE, "workload: -cost_prompt_lengths draws prompts apart, clipped to -cost_prompt_len", "%s", err_text(ierr));
    if (!ierr) PetscCall(cost_work_free(&w));
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_batch 8 -cost_minibatches 1 -cost_lengths rollouts:%s:iter_0", path));
    PetscCall(work_try(opts, &w, &ierr));
    same = !ierr && w.plen;
    for (int i = 0; same && i < w.nlen; i++) same &= w.len[i] == lens[i % 6] && w.plen[i] == plens[i % 6];
    test_report(same ? PETSC_TRUE : PETSC_FALSE, "workload: rollouts:FILE:iter_0 is that rollout row by row (then again from its first row)", "%s", err_text(ierr));
    if (!ierr) PetscCall(cost_work_free(&w));
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_lengths rollouts:%s:iter_7", path));
    PetscCall(work_try(opts, &w, &ierr));
    test_report(ierr && strstr(err_text(ierr), "/iter_7/response_lengths") ? PETSC_TRUE : PETSC_FALSE, "workload: a missing iteration is refused, naming it", "%s", err_text(ierr));
    { /* a negative length: refused, not clamped to 1 (which halved the estimate) */
      int neg = -5;
      hsize_t one = 1, at = 4;
      h  = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
      d  = H5Dopen2(h, "iter_0/response_lengths", H5P_DEFAULT);
      sp = H5Dget_space(d);
      H5Sselect_elements(sp, H5S_SELECT_SET, 1, &at);
      g = H5Screate_simple(1, &one, NULL);
      H5Dwrite(d, H5T_NATIVE_INT, g, sp, H5P_DEFAULT, &neg);
      H5Sclose(g), H5Sclose(sp), H5Dclose(d), H5Fclose(h);
      PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_batch 8 -cost_minibatches 1 -cost_lengths rollouts:%s", path));
      PetscCall(work_try(opts, &w, &ierr));
      test_report(ierr && strstr(err_text(ierr), "/iter_0/response_lengths[4] is -5") && strstr(err_text(ierr), path) ? PETSC_TRUE : PETSC_FALSE, "workload: a negative response length in a rollouts file is refused, naming file and element", "%s", ierr ? err_text(ierr) : "accepted");
      if (!ierr) PetscCall(cost_work_free(&w));
    }
    PetscCall(work_try("-cost_prompt_lengths fixed:0", &w, &ierr));
    test_report(ierr && strstr(err_text(ierr), "-cost_prompt_lengths fixed:0") ? PETSC_TRUE : PETSC_FALSE, "workload: a bad -cost_prompt_lengths is refused, naming the option", "%s", err_text(ierr));
    unlink(path);
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-cost_lengths rollouts:%s", path));
    PetscCall(work_try(opts, &w, &ierr));
    test_report(ierr && strstr(err_text(ierr), path) ? PETSC_TRUE : PETSC_FALSE, "workload: a missing rollouts file is refused, naming it", "%s", err_text(ierr));
  }
  PetscCall(PetscOptionsClear(NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The timeline file: the rows tools/plot_timeline.py reads. */
static PetscErrorCode check_timeline(void)
{
  CostPrims    p;
  CostWork     w;
  Plan         plan;
  CostEstimate e;
  CostTimeline tl = {0};
  int          len[4] = {1, 1, 1, 1}, n = 0;
  char         dir[PETSC_MAX_PATH_LEN], path[PETSC_MAX_PATH_LEN];
  hid_t        f, d, s;

  PetscFunctionBegin;
  mock_prims(&p);
  tiny_work(&w, len, 4);
  base_plan(&plan, 2);
  set_call(&plan, MFC_REF_INF, 0, 1);
  set_call(&plan, MFC_REW_INF, 1, 2);
  PetscCall(cost_simulate(&p, &w, &plan, &e, &tl));
  /* 3 iterations: generation, training on 2 ranks, the two inferences on 1 each */
  test_report(tl.n == 18 ? PETSC_TRUE : PETSC_FALSE, "timeline: one row per call per rank per iteration (3 x 6)", "wrong row count");
  PetscCall(test_tmpdir(dir, sizeof dir, "test_cost_timeline"));
  if (world_rank == 0) {
    PetscCall(PetscSNPrintf(path, sizeof path, "%s/sim.h5", dir));
    PetscCall(cost_timeline_write(path, &tl, "test"));
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    d = H5Dopen2(f, "timeline/end", H5P_DEFAULT);
    s = H5Dget_space(d);
    n = (int)H5Sget_simple_extent_npoints(s);
    H5Sclose(s), H5Dclose(d), H5Fclose(f);
  }
  PetscCallMPI(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
  test_report(n == 18 ? PETSC_TRUE : PETSC_FALSE, "timeline file: /timeline/end holds every row", "wrong row count in the file");
  PetscCall(cost_timeline_free(&tl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  test_collective(MPI_COMM_WORLD);
  PetscCall(comm_setup());
  PetscCall(check_formulas());
  PetscCall(check_simulator());
  PetscCall(check_prompts());
  PetscCall(check_fusion());
  PetscCall(check_migrate());
  PetscCall(check_memory());
  PetscCall(check_train_stage());
  PetscCall(check_realloc());
  PetscCall(check_timeline());
  PetscCall(check_work());
  PetscCall(realloc_cache_destroy());
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return test_tally();
}
