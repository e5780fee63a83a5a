/* test_dist: the model on meshes (tensor, pipeline and data parallelism)
 * against the same model on one rank. Run with mpiexec -n 4 (layouts that do
 * not fit the world print a skip line). Every rank builds the whole
 * model as the reference; the shard on each mesh must give the same
 * log-probabilities (masked, tempered) and entropies, values, gradients
 * (per shard, in the full layout), cached-decoding logits, and the same
 * parameters after one AdamW step where each dp replica takes its part of
 * the batch; ZeRO-1 must give the same bits as without it.
 *
 * The checks in detail: the model on meshes against the same model on one rank: dp 2, tp 2, pp
 * 2, tp2 x dp2, pp2 x tp2, pp2 x dp2, tp 4, pp 4, LM and scalar heads, and for the LLaMA
 * family (4 query heads over 2 kv heads, tied, untied with q/k/v biases, scalar head; tp 2
 * splits the kv heads) the first six layouts and ZeRO-1: masked, tempered log-probabilities
 * and entropies, values, gradients after the dp and tied-embedding sums, one AdamW step
 * (gradient norm and parameters), cached decoding logits on every rank of the mesh, a cached
 * prefill with the head on each prompt's last row only (pipeline chunks holding 0, 1 or 2 of
 * them), ZeRO-1, and the LM head in tiles of 5 of 24 rows on tp 2, tp 2 x dp 2 and pp 2 x tp 2
 * (GPT-2 and LLaMA; the tiles' statistics combined over the vocabulary shards,
 * `logprob_backward_shard` per tile) (all within 1e-5 relative)
 */
#include <math.h>
#include <string.h>

#include "dist_fixture.h"

static const char help[] = "Distributed model regression tests.\n";


/* Forward + head output + backward of rows [b0, b0+nb) of the batch; the
 * LM head's log-probabilities and entropies (or values) go to out[2*N]. */
static PetscErrorCode run_rows(Model *g, const Batch *b, int b0, int nb, float *out)
{
  int          T = b->T, n0 = b0 * T, n = nb * T, *off;
  ModelTokenDist d;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(n + 1, &off));
  for (int i = 0; i <= n; i++) off[i] = b->mask_off[n0 + i] - b->mask_off[n0];
  d = (ModelTokenDist){1.0f / 0.8f, off, b->mask_ids + b->mask_off[n0]};
  PetscCall(model_forward(g, b->tok + n0, nb, T));
  if (model_last_stage(g)) {
    if (g->cfg.head == MODEL_HEAD_LM) PetscCall(model_logprobs_dist(g, b->target + n0, &d, out + n0, out + b->N + n0));
    else PetscCall(model_values_get(g, out + n0));
  }
  if (g->cfg.head == MODEL_HEAD_LM) PetscCall(model_backward_logprob(g, b->target + n0, b->dlp + n0));
  else PetscCall(model_backward_values(g, b->dlp + n0));
  PetscCall(PetscFree(off));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char *name;
  int         pp, dp, tp;
} Layout;

/* One layout: outputs and gradients (dp replicas take equal parts of the
 * batch), one AdamW step, cached decoding. */
static PetscErrorCode test_layout(const ModelConfig *cfg, const Layout *L, PetscBool zero1)
{
  int          n = L->pp * L->dp * L->tp, ranks[64], B = 4, T = 6;
  const Mesh  *m;
  Model       *full, *g = NULL;
  Batch        b;
  float       *ref, *got, *pfull, *gfull, *pg;
  AdamWConfig  opt = {1e-2, 1, 0.9, 0.95, 1e-8, 0.1, 1.0, 0, 0};
  char         name[160], det[160];
  const char  *head = cfg->head == MODEL_HEAD_LM ? (cfg->arch == MODEL_ARCH_LLAMA ? (cfg->tie_embeddings ? "llama tied lm" : "llama untied biased lm") : "lm") : (cfg->arch == MODEL_ARCH_LLAMA ? "llama scalar" : "scalar");

  PetscFunctionBegin;
  if (n > world_size) {
    char why[64];
    PetscCall(PetscSNPrintf(why, sizeof why, "needs %d ranks, the job has %d", n, world_size));
    PetscCall(PetscSNPrintf(name, sizeof name, "%s%s, %s head", L->name, zero1 ? " ZeRO-1" : "", head));
    test_skip(name, why);
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  for (int i = 0; i < n; i++) ranks[i] = i;
  PetscCall(mesh_get(ranks, n, L->pp, L->dp, L->tp, &m));
  PetscCall(batch_create(cfg, B, T, 5, &b));
  PetscCall(model_create(cfg, backend_cpu(), &full));
  PetscCall(model_init_random(full, 77));
  PetscCall(PetscCalloc5(2 * b.N, &ref, 2 * b.N, &got, full->nparams, &pfull, full->nparams, &gfull, full->nparams, &pg));
  /* reference: the whole batch on one rank */
  PetscCall(model_zero_grad(full));
  PetscCall(run_rows(full, &b, 0, B, ref));
  if (m->me >= 0) {
    int nb = B / L->dp;
    PetscCall(model_create_on_mesh(cfg, backend_cpu(), m, &g));
    PetscCall(model_set_zero1(g, zero1));
    PetscCall(model_params_get(full, pfull));
    {
      float *mine;
      PetscCall(PetscMalloc1(g->nparams + 1, &mine));
      PetscCall(model_shard_extract(cfg, &g->sh, pfull, mine));
      PetscCall(model_params_set(g, mine));
      PetscCall(PetscFree(mine));
    }
    PetscCall(model_zero_grad(g));
    PetscCall(run_rows(g, &b, m->d * nb, nb, got));
  }
  /* outputs live on the last stage's ranks of each replica: sum them over the world once */
  if (!(m->me >= 0 && m->p == m->pp - 1 && m->t == 0)) PetscCall(PetscArrayzero(got, 2 * b.N));
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, got, 2 * b.N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  PetscCall(PetscSNPrintf(name, sizeof name, "%s, %s head: %s match one rank", L->name, head, cfg->head == MODEL_HEAD_LM ? "log-probabilities and entropies" : "values"));
  PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", rel_err(got, ref, cfg->head == MODEL_HEAD_LM ? 2 * b.N : b.N)));
  test_measure(rel_err(got, ref, cfg->head == MODEL_HEAD_LM ? 2 * b.N : b.N) < 1e-5 ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);

  /* gradients: after the step's sync the replicas hold the whole batch's; compare via one AdamW step's gradient sync */
  if (g) PetscCall(model_grads_sync(g));
  PetscCall(gather_full(full, g ? g : full, m, g ? g->grads : full->grads, gfull));
  PetscCall(PetscSNPrintf(name, sizeof name, "%s, %s head: gradients (after the dp and tied-embedding sums) match one rank", L->name, head));
  PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", rel_err(gfull, full->grads, full->nparams)));
  test_measure(rel_err(gfull, full->grads, full->nparams) < 1e-5 ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);

  /* one AdamW step from the already summed gradients */
  {
    PetscReal lr, gn_full, gn = 0;
    PetscCall(model_adamw_step(full, &opt, &lr, &gn_full));
    if (g) PetscCall(model_adamw_step(g, &opt, &lr, &gn));
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &gn, 1, MPIU_REAL, MPI_MAX, MPI_COMM_WORLD));
    PetscCall(gather_full(full, g ? g : full, m, g ? g->params : full->params, pg));
    PetscCall(PetscSNPrintf(name, sizeof name, "%s%s, %s head: AdamW step (gradient norm %.4f vs %.4f) gives the one-rank parameters", L->name, zero1 ? " ZeRO-1" : "", head, (double)gn, (double)gn_full));
    PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", rel_err(pg, full->params, full->nparams)));
    test_measure(rel_err(pg, full->params, full->nparams) < 1e-5 && fabs(gn - gn_full) < 1e-5 * gn_full ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);
  }

  /* cached decoding: a prefill of 3 slots' prompts, then one step */
  if (cfg->head == MODEL_HEAD_LM) {
    int         NR = 9, tok[9], slot[9], pos[9], V = cfg->vocab_size;
    float      *lf, *lg;
    ModelKVCache *kf, *kg = NULL;
    PetscCall(PetscCalloc2((size_t)NR * V, &lf, (size_t)NR * V, &lg));
    for (int r = 0; r < NR; r++) tok[r] = b.tok[r], slot[r] = r / 3, pos[r] = r % 3;
    PetscCall(model_kv_create(full, 3, 8, &kf));
    PetscCall(model_forward_cached(full, kf, tok, slot, pos, NR, NULL, NR, lf));
    if (g) {
      PetscCall(model_kv_create(g, 3, 8, &kg));
      PetscCall(model_forward_cached(g, kg, tok, slot, pos, NR, NULL, NR, lg));
    } else PetscCall(PetscArraycpy(lg, lf, (size_t)NR * V));
    PetscCall(PetscSNPrintf(name, sizeof name, "%s: cached decoding logits (every rank of the mesh) match one rank", L->name));
    PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", rel_err(lg, lf, (size_t)NR * V)));
    test_measure(rel_err(lg, lf, (size_t)NR * V) < 1e-5 ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);
    PetscCall(model_kv_destroy(full, &kf));
    if (g) PetscCall(model_kv_destroy(g, &kg));
    /* the head on each prompt's last row only (rows 2, 5, 8): in a pipeline
     * the chunks hold 0, 1 or several of them */
    {
      int   last[3] = {2, 5, 8};
      float want[3 * 64];
      PetscCheck(V <= 64, PETSC_COMM_SELF, PETSC_ERR_SUP, "test_dist: vocabulary %d above the test's 64", V);
      for (int k = 0; k < 3; k++) PetscCall(PetscArraycpy(want + (size_t)k * V, lf + (size_t)last[k] * V, V));
      PetscCall(PetscArrayzero(lg, (size_t)NR * V));
      PetscCall(model_kv_create(g ? g : full, 3, 8, &kg));
      PetscCall(model_forward_cached(g ? g : full, kg, tok, slot, pos, NR, last, 3, lg));
      PetscCall(model_kv_destroy(g ? g : full, &kg));
      PetscCall(PetscSNPrintf(name, sizeof name, "%s: cached prefill with the head on each prompt's last row gives those rows' logits (every rank)", L->name));
      PetscCall(PetscSNPrintf(det, sizeof det, "max rel err %.2e", rel_err(lg, want, (size_t)3 * V)));
      test_measure(rel_err(lg, want, (size_t)3 * V) < 1e-5 ? PETSC_TRUE : PETSC_FALSE, name, "%s", det);
    }
    PetscCall(PetscFree2(lf, lg));
  }
  PetscCall(PetscFree5(ref, got, pfull, gfull, pg));
  PetscCall(model_destroy(&full));
  PetscCall(model_destroy(&g));
  PetscCall(batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  ModelConfig lm = {.n_layer = 4, .n_head = 4, .n_embd = 16, .vocab_size = 24, .n_positions = 12, .head = MODEL_HEAD_LM};
  ModelConfig sc = lm;
  Layout    layouts[] = {
    {"dp 2",              1, 2, 1},
    {"tp 2",              1, 1, 2},
    {"pp 2",              2, 1, 1},
    {"tp 2 x dp 2",       1, 2, 2},
    {"pp 2 x tp 2",       2, 1, 2},
    {"pp 2 x dp 2",       2, 2, 1},
    {"tp 4",              1, 1, 4},
    {"pp 4",              4, 1, 1},
  };

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(comm_setup());
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  test_collective(MPI_COMM_WORLD);
  sc.head = MODEL_HEAD_SCALAR;
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
    PetscCall(test_layout(&lm, &layouts[k], PETSC_FALSE));
    PetscCall(test_layout(&sc, &layouts[k], PETSC_FALSE));
  }
  PetscCall(test_layout(&lm, &layouts[3], PETSC_TRUE));
  PetscCall(test_layout(&lm, &layouts[5], PETSC_TRUE));
  { /* the LLaMA family: tied with 4 query heads over 2 kv heads (tp 2 splits
     * the kv heads), and untied with q/k/v biases */
    ModelConfig ll = lm, lu;
    ll.arch = MODEL_ARCH_LLAMA, ll.n_kv_head = 2, ll.n_ffn = 24, ll.tie_embeddings = PETSC_TRUE, ll.rope_theta = 10000, ll.norm_eps = 1e-5;
    lu = ll, lu.tie_embeddings = PETSC_FALSE, lu.qkv_bias = PETSC_TRUE;
    for (size_t k = 0; k < 6; k++) {
      ModelConfig ls = ll;
      ls.head = MODEL_HEAD_SCALAR;
      PetscCall(test_layout(&ll, &layouts[k], PETSC_FALSE));
      PetscCall(test_layout(&ls, &layouts[k], PETSC_FALSE));
      PetscCall(test_layout(&lu, &layouts[k], PETSC_FALSE));
    }
    PetscCall(test_layout(&ll, &layouts[3], PETSC_TRUE));
    /* the LM head in tiles of 5 of the 24 rows (-logits_tile_mb), on the
     * vocabulary-parallel layouts and against one rank run the same way */
    for (int k = 0; k < 3; k++) {
      Layout tl = layouts[k == 0 ? 1 : k == 1 ? 3 : 4];
      char   tname[64];
      PetscCall(PetscSNPrintf(tname, sizeof tname, "%s, head in tiles of 5 rows", tl.name));
      tl.name = tname;
      PetscCall(model_set_logits_tile_mb(4.0 * 5 * lm.vocab_size / 1048576.0));
      PetscCall(test_layout(&lm, &tl, PETSC_FALSE));
      PetscCall(test_layout(&ll, &tl, PETSC_FALSE));
      PetscCall(model_set_logits_tile_mb(MODEL_LOGITS_TILE_MB));
    }
  }
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return test_tally();
}
