/* cost_impl.h: what the files of src/cost share and nobody else sees: the
 * per-call cost model (call.c, gen.c), memory per rank (memory.c), the
 * shapes' parameter tables (shape.c) and the rank/node helpers. */
#ifndef RLFUSE_COST_IMPL_H
#define RLFUSE_COST_IMPL_H

#include "cost.h"

/* Which model each call runs, in the workload. */
const CostShape *cost_call_shape(const CostWork *w, MFCId c);
/* Calls of one PPO/GRPO iteration that the workload uses. */
PetscBool cost_call_used(const CostWork *w, MFCId c);

/* Layers of pipeline stage s of pp: for GPT-2 the model's own split
 * (model_stage_layers: stages even by parameters, embeddings counted), for
 * LLaMA shapes n_layer/pp with the first n_layer%pp stages one more. */
int cost_stage_layers(const CostShape *m, int pp, int s);

/* A call's layout with what the collectives need to know, computed once
 * per call: whether its tp groups, its dp groups, the whole mesh span nodes. */
typedef struct {
  int       dp, tp, pp, mbs;
  PetscBool tp_inter, dp_inter, mesh_inter;
} CostLayout;
void cost_layout(const CostPrims *p, const PlanCall *c, CostLayout *L);

/* Parameters of one part (a block: one layer), for the memory and the
 * optimizer; the head of a tied GPT-2 LM counts its own copy (a pipelined
 * model holds it on the last stage). */
double cost_part_params(const CostShape *m, CostPart part);
/* Ranks among which the keys and values (weights and cache) are cut: tp,
 * or n_kv_head when tp exceeds it (each rank then holds one head's copy). */
static inline double cost_kv_ranks(const CostShape *m, int tp) { return (double)PetscMin(tp, m->n_kv_head); }
/* Parameters one rank of a (tp, pp) layout holds on its stage s. */
double cost_stage_params(const CostShape *m, int tp, int pp, int s);

/* The time of one stage pass (all its parts, one micro-batch of rows x len)
 * on one rank, with the tp all-reduces (two per layer each way) and the
 * activations sent to the next stage; the largest over the stages. */
double cost_stage_time(const CostPrims *p, const CostShape *m, CostPhase ph, const CostLayout *L, double rows,
                       double len);

/* A pipelined pass of micro-batches with (largest-stage) times t[0..n):
 * sum of the times plus (pp - 1) times the largest (fill and drain). */
double cost_pipeline(const double *t, int n, int pp);

/* Whether ranks[0..n) span nodes. */
PetscBool cost_ranks_internode(const CostPrims *p, const int *ranks, int n);

/* The micro-batches of a call as the executor cuts them: a replica's rows
 * (train: its share of one mini-batch) in micro-batches of *size rows, *count
 * of them (the last may be short): the plan's mbs per replica, or with mbs
 * 0 the mode's own size, batch / minibatches / micro rows. */
void cost_micro(const CostWork *w, int mbs, int rows, int *size, int *count);

/* The expected longest sequence (prompt and response) among r rows drawn
 * without replacement from the workload's (training micro-batches are
 * shuffled rows, padded to their longest). */
double cost_expected_max(const CostWork *w, double r);

/* Per-call times (call.c): inference and training; generation (gen.c) also
 * gives each sample's finish time (fin may be NULL; indexed by row). */
double cost_inference(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostShape *m);
double cost_training(const CostPrims *p, const CostWork *w, const Plan *plan, MFCId id, PetscBool zero1);
double cost_fused_training(const CostPrims *p, const CostWork *w, const Plan *plan);
PetscErrorCode cost_generation(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostShape *m, double *t,
                               double *fin);
/* -fuse_gen_inf stream: each inference rank's end given the samples'
 * finish times (end[rank] for ranks of the inference meshes; -1 elsewhere). */
PetscErrorCode cost_stream(const CostPrims *p, const CostWork *w, const Plan *plan, const double *fin, double *end,
                           int world);
/* One inference rank of a fused stage: it runs call k (reference, reward,
 * critic; layouts L[3]) on the rows with need[k][row], which arrive at
 * arrive[row], in -fuse_tokens micro-batches in arrival order, from t0 on.
 * Returns when it ends (-1: it has no row). arr: scratch of batch entries. */
typedef struct {
  double t;
  int    row;
} CostArrival;
double cost_stream_rank(const CostPrims *p, const CostWork *w, const Plan *plan, const CostLayout *L,
                        const unsigned char *const need[3], const double *arrive, double t0, CostArrival *arr);
/* World rank of call c's replica d's head (exec_head's: last stage, tp
 * rank 0). Over each replica of several ranks of c (when used): with
 * to_head, its head gets the largest x of its ranks; else every rank gets
 * at least its head's x. */
int  cost_replica_head(const PlanCall *c, int d);
void cost_replica_spread(const PlanCall *c, PetscBool used, double *x, PetscBool to_head);
/* -fuse_gen_inf migrate (migrate.c): generation with the long tail moved
 * at R_t as the executor moves it, and each rank's end of the fused stage
 * (end[rank]: its inference's end, or its generation's; -1 off the stage);
 * *gen_t when the last sample finishes. Fills est's migrate_* fields. */
PetscErrorCode cost_migrate(const CostPrims *p, const CostWork *w, const Plan *plan, double *end, double *gen_t,
                            CostEstimate *est);
/* Generation helpers (gen.c) shared with migrate.c. A response's length
 * (the workload's, clipped to [1, max_new]), its prompt's, the two
 * together; the replica of call c world rank r is in (-1: none). */
double cost_response_len(const CostWork *w, int row);
double cost_prompt_len(const CostWork *w, int row);
double cost_seq_len(const CostWork *w, int row);
int    cost_replica_of(const PlanCall *c, int r);
/* One generation replica under continuous batching: S slots, mb
 * micro-batches, the active samples (row, tokens left, tokens decoded) and
 * the queue of prompts not yet admitted (queue[qh..qn)). fill admits and
 * prefills (returns its time; samples of one token finish at t + that),
 * seg is the steps until the next finish (at most GEN_SEGMENT; 0: none
 * active), decode their time, advance takes them ending at t; run goes on
 * alone from t until the replica has nothing left and returns the end,
 * adding its decode steps and their seconds to steps and decode_s. */
typedef struct {
  int    S, mb, na, qh, qn;
  int   *row, *rem, *done, *queue;
  long   steps;    /* decode steps cost_rep_run took (episodes' waits are per step) */
  double decode_s; /* their seconds */
  /* partial rollouts' calls (NULL otherwise): row b draws draw[b] tokens
   * after a prompt of plen[b] (its own and the tokens drawn before) */
  const int    *draw;
  const double *plen;
} CostRep;
PetscErrorCode cost_rep_init(CostRep *r, int S, int mb, int cap, int qcap);
PetscErrorCode cost_rep_free(CostRep *r);
double         cost_rep_fill(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m, CostRep *r,
                             double t, double *fin);
int            cost_rep_seg(const CostRep *r);
double cost_rep_decode(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m, const CostRep *r,
                       int seg);
void           cost_rep_advance(CostRep *r, int seg, double t, double *fin);
double         cost_rep_run(const CostPrims *p, const CostWork *w, const CostLayout *c, const CostShape *m, CostRep *r,
                            double t, double *fin);

/* Memory (memory.c): every rank's peak over the iteration; sets
 * est->feasible, why, mem_max and mem_call, and peak[rank] when peak is
 * not NULL. */
PetscErrorCode cost_memory(const CostPrims *p, const CostWork *w, const Plan *plan, CostEstimate *est, double *peak);
/* Which calls in use share ranks (ov[a][b]), and which share ranks with
 * any other call (shared[a]). */
PetscErrorCode cost_overlaps(const CostWork *w, const Plan *plan, PetscBool ov[MFC_COUNT][MFC_COUNT],
                             PetscBool shared[MFC_COUNT]);
/* Bytes of one model's weights on one rank of a call's layout (the largest stage). */
double cost_weight_bytes(const CostPrims *p, const CostShape *m, const PlanCall *c);

#endif
