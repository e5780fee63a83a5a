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
 * (gpt_stage_layers: stages even by parameters, embeddings counted), for
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
/* Parameters one rank of a (tp, pp) layout holds on its stage s. */
double cost_stage_params(const CostShape *m, int tp, int pp, int s);

/* The time of one stage pass (all its parts, one micro-batch of rows x len)
 * on one rank, with the tp all-reduces (two per layer each way) and the
 * activations sent to the next stage; the largest over the stages. */
double cost_stage_time(const CostPrims *p, const CostShape *m, CostPhase ph, const CostLayout *L, double rows, double len);

/* A pipelined pass of micro-batches with (largest-stage) times t[0..n):
 * sum of the times plus (pp - 1) times the largest (fill and drain). */
double cost_pipeline(const double *t, int n, int pp);

/* Whether ranks[0..n) span nodes. */
PetscBool cost_ranks_internode(const CostPrims *p, const int *ranks, int n);

/* The expected longest response among r rows drawn without replacement
 * from the workload's lengths (training micro-batches are shuffled rows). */
double cost_expected_max(const CostWork *w, double r);

/* Per-call times (call.c): inference and training; generation (gen.c) also
 * gives each sample's finish time (fin may be NULL; indexed by row). */
double cost_inference(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostShape *m);
double cost_training(const CostPrims *p, const CostWork *w, const Plan *plan, MFCId id, PetscBool zero1);
double cost_fused_training(const CostPrims *p, const CostWork *w, const Plan *plan);
PetscErrorCode cost_generation(const CostPrims *p, const CostWork *w, const PlanCall *c, const CostShape *m, double *t, double *fin);
/* -fuse_gen_inf stream: each inference rank's end given the samples'
 * finish times (end[rank] for ranks of the inference meshes; -1 elsewhere). */
PetscErrorCode cost_stream(const CostPrims *p, const CostWork *w, const Plan *plan, const double *fin, double *end, int world);

/* Memory (memory.c): every rank's peak over the iteration; sets
 * est->feasible, why, mem_max and mem_call. */
PetscErrorCode cost_memory(const CostPrims *p, const CostWork *w, const Plan *plan, CostEstimate *est);
/* Which calls in use share ranks (ov[a][b]), and which share ranks with
 * any other call (shared[a]). */
PetscErrorCode cost_overlaps(const CostWork *w, const Plan *plan, PetscBool ov[MFC_COUNT][MFC_COUNT], PetscBool shared[MFC_COUNT]);
/* Bytes of one model's weights on one rank of a call's layout (the largest stage). */
double cost_weight_bytes(const CostPrims *p, const CostShape *m, const PlanCall *c);

#endif
