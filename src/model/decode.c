/* decode.c: the cached forward with its rows and logits in the backend's
 * memory (model_forward_cached_resident), for the generation engine's decode
 * steps on one rank, and its recorded forms (graphs) on backends that have
 * them.
 *
 * A decode step of a small model is hundreds of short kernels, and their
 * launches, not the GPU's memory, set its time: a graph replays them in one
 * launch. A record holds pointers, so one is kept per distinct call (N and
 * the row arrays) together with everything its pointers depend on: the
 * activations' slab, the cache, the weights and the backend's epoch (its
 * scratch and its weight copies). When any of them has changed the call
 * runs as it is and is recorded again on the next one: a record is made
 * only right after the same call ran, so every buffer the ops need has its
 * size already and recording allocates nothing. */
#include "model_impl.h"
#include <string.h>

#define MODEL_GRAPHS_MAX 24 /* distinct recorded calls per cache (gen: one per row bucket) */
#define MODEL_GRAPH_KEYS 8

typedef struct {
  int                N, recorded;
  const void        *key[MODEL_GRAPH_KEYS];
  unsigned long long epoch;
  void              *exec;
} ModelGraph;

struct ModelGraphs {
  ModelGraph g[MODEL_GRAPHS_MAX];
  int        n;
};

PetscBool model_cached_resident_ok(const Model *lm)
{
  return (PetscBool)(lm->sh.pp == 1 && lm->sh.tp == 1 && lm->cfg.head == MODEL_HEAD_LM);
}

PetscErrorCode model_graphs_destroy(const Model *lm, ModelKVCache *kv)
{
  PetscFunctionBegin;
  if (!kv->graphs) PetscFunctionReturn(PETSC_SUCCESS);
  for (int i = 0; i < kv->graphs->n; i++)
    if (kv->graphs->g[i].exec) PetscCall(lm->be->graph_destroy(kv->graphs->g[i].exec));
  PetscCall(PetscFree(kv->graphs));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The head runs on the M rows head_rows (host; NULL: all N). */
static PetscErrorCode resident_body(Model *lm, ModelKVCache *kv, const int *tok, const int *slot, const int *pos, int N,
                                    const int *head_rows, int M)
{
  ModelActs *a = lm->acts;
  float     *x = a->c_x;

  PetscFunctionBegin;
  lm->in_cached = PETSC_TRUE; /* model_matmul: generation's matmuls */
  PetscCall(model_embed(lm, a->c_x, tok, pos, N));
  for (int l = lm->sh.l0; l < lm->sh.l1; l++) PetscCall(model_cached_block(lm, kv, l, 0, N, slot, pos));
  if (head_rows) {
    PetscCall(model_gather_rows(lm, a->c_sel, a->c_x, head_rows, M));
    x = a->c_sel;
  }
  if (model_cached_fused(lm, M) &&
      model_arch(&lm->cfg)->norm == MODEL_NORM_RMS) { /* the final RMSNorm folded into the head */
    MatmulFusion f = { .norm_w   = model_view(lm, lm->params, model_tidx_lnf_w(&lm->cfg)),
                       .norm_eps = (float)lm->cfg.norm_eps };
    PetscCall(lm->be->matmul_fused(a->c_out, x, model_view(lm, lm->params, model_tidx_lm_head(&lm->cfg)), NULL, M,
                                   lm->cfg.n_embd, lm->Vl, PETSC_TRUE, &f));
  } else {
    PetscCall(model_final_norm(lm, a->c_ln, a->c_mean, a->c_rstd, x, M));
    PetscCall(model_head_forward(lm, a->c_out, a->c_ln, M));
  }
  lm->in_cached = PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_cached_batch_invariant(Model *lm, PetscBool on)
{
  PetscFunctionBegin;
  PetscCheck(!on || lm->be->matmul_forward_rows, PETSC_COMM_SELF, PETSC_ERR_SUP,
             "-gen_batch_invariant: the %s backend has no batch-invariant matmul for every row count (use -device cpu, "
             "or leave the option false)",
             lm->be->name);
  lm->cached_rows = on;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* What a record of this call points to, besides what N sizes. */
static void graph_key(const Model *lm, const ModelKVCache *kv, const int *tok, const int *slot, const int *pos,
                      const void **key)
{
  const void *k[MODEL_GRAPH_KEYS] = { tok,        slot, pos, lm->acts, lm->acts->cached.slab_f, lm->acts->cached.slab_i,
                                      lm->params, kv->k };

  for (int i = 0; i < MODEL_GRAPH_KEYS; i++) key[i] = k[i];
}

/* The record slot of call N (a new one, or the least useful to reuse: all
 * slots hold the buckets of one engine, so running out means many engines
 * share a cache, and the first slot is as good as any). */
static PetscErrorCode graph_slot(const Model *lm, ModelKVCache *kv, int N, ModelGraph **out)
{
  struct ModelGraphs *gs;

  PetscFunctionBegin;
  if (!kv->graphs) PetscCall(PetscNew(&kv->graphs));
  gs = kv->graphs;
  for (int i = 0; i < gs->n; i++)
    if (gs->g[i].N == N) {
      *out = &gs->g[i];
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  if (gs->n < MODEL_GRAPHS_MAX) *out = &gs->g[gs->n++];
  else {
    *out = &gs->g[0];
    if ((*out)->exec) PetscCall(lm->be->graph_destroy((*out)->exec));
  }
  **out = (ModelGraph){.N = N};
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_forward_cached_resident(Model *lm, ModelKVCache *kv, const int *tok, const int *slot,
                                             const int *pos, int N, const int *head_rows, int M, PetscBool graph,
                                             const float **logits)
{
  const Backend *be = lm->be;
  const void    *key[MODEL_GRAPH_KEYS];
  ModelGraph    *g = NULL;

  PetscFunctionBegin;
  PetscCheck(model_cached_resident_ok(lm), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "model_forward_cached_resident: the model is split over %d pipeline stages and %d tensor ranks, or has no "
             "LM head (use model_forward_cached)",
             lm->sh.pp, lm->sh.tp);
  PetscCheck(N > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "model_forward_cached_resident: N %d must be positive",
             N);
  PetscCheck(kv->n_layer == lm->sh.l1 - lm->sh.l0 && kv->n_embd == lm->Ckvl, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "model_forward_cached_resident: the KV cache was made for another model shape");
  PetscCall(model_cached_check_head_rows(head_rows, M, N));
  if (!head_rows || M == N) head_rows = NULL, M = N; /* M ascending rows of N: every row */
  /* the cached activations' layout depends on N and M: this call's, in the slab as it is */
  PetscCall(model_acts_cached_resize(lm, N, M));
  *logits = lm->acts->c_out;
  if (!graph || !be->graph_begin ||
      head_rows) { /* a record would hold the rows' copies: a call with head rows runs as it is */
    PetscCall(resident_body(lm, kv, tok, slot, pos, N, head_rows, M));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  graph_key(lm, kv, tok, slot, pos, key);
  PetscCall(graph_slot(lm, kv, N, &g));
  if (memcmp(key, g->key, sizeof key) || g->epoch != be->epoch()) {
    /* new, or stale: run it as it is, and record it next time */
    if (g->exec) PetscCall(be->graph_destroy(g->exec));
    g->exec     = NULL;
    g->recorded = 0;
    PetscCall(resident_body(lm, kv, tok, slot, pos, N, NULL, N));
    memcpy(g->key, key, sizeof key);
    g->epoch = be->epoch();
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (!g->recorded) {
    PetscCall(be->graph_begin());
    PetscCall(resident_body(lm, kv, tok, slot, pos, N, NULL, N));
    PetscCall(be->graph_end(&g->exec));
    g->recorded = 1;
  }
  PetscCall(be->graph_launch(g->exec));
  PetscFunctionReturn(PETSC_SUCCESS);
}
