/* test_realloc: parameter reallocation (src/realloc) between layouts of a
 * small Model (both heads). Run as `mpiexec -n 4 bin/test_realloc`; with fewer
 * ranks only the layouts that fit are tried. Every parameter of the full
 * model has a distinct value, so a misplaced element cannot go unnoticed.
 * For each pair of layouts: every destination shard, first poisoned with
 * NaN, must equal model_shard_extract of the full model bit for bit, directly
 * and with 1000-byte buckets (250 floats: they cut rows, column spans and
 * atoms at odd places); a round trip back to the source layout must
 * restore the source shards exactly; bytes sent and received over all ranks
 * must both equal the plan's bytes, and ranks outside both meshes must do
 * nothing. Also: plan caching, the errors for incompatible tp sizes, local
 * copies when a receiver already holds a slice, and the balancing of the
 * sender choice between dp replicas. Only rank 0 prints; every check is
 * agreed over all ranks; the exit status is non-zero on any failure.
 *
 * The checks in detail: reallocation over 18 layout pairs (split, gather, pp changes, disjoint
 * and permuted meshes, the gather to one rank) and both heads: bit-exact against slicing the
 * full model, bucketed equal to unbucketed, round trip bit-exact, bytes sent = received = the
 * plan's, local copies where a receiver holds the slice, load spread over replicas, plan
 * cache, tp sizes that do not divide
 */
#include <math.h>
#include <string.h>

#include "realloc.h"
#include "test_report.h"

static const char help[] = "Parameter reallocation regression tests (run on 1, 2 or 4 ranks).\n";

static int rank, size;

/* Small enough that every stream takes several messages, not a multiple of
 * any row length; 256 bytes tests no more and is 3x slower on 4 ranks
 * sharing 2 cores (each round is a synchronisation). */
#define BUCKET 1000

static ModelConfig small_config(ModelHead head)
{
  ModelConfig c = {.n_layer = 4, .n_head = 4, .n_embd = 32, .vocab_size = 24, .n_positions = 16, .head = head};
  return c;
}

/* A LLaMA-family model with one key/value head (and q/k/v biases): every
 * tp > 1 layout replicates its k and v pieces. */
static ModelConfig mqa_config(void)
{
  ModelConfig c = {.n_layer = 4, .n_head = 4, .n_embd = 32, .vocab_size = 24, .n_positions = 16, .head = MODEL_HEAD_LM};
  c.arch = MODEL_ARCH_LLAMA, c.n_kv_head = 1, c.n_ffn = 48, c.qkv_bias = PETSC_TRUE, c.tie_embeddings = PETSC_TRUE, c.rope_theta = 1e4, c.norm_eps = 1e-5;
  return c;
}
static const char *model_name(const ModelConfig *c) { return c->arch == MODEL_ARCH_LLAMA ? "llama, 1 kv head" : c->head == MODEL_HEAD_LM ? "lm head" : "scalar head"; }

/* The full model with value k at flat index k: distinct and exact in float
 * (the model has about 52k parameters, far below 2^24). */
static PetscErrorCode full_model(const ModelConfig *cfg, float **full, size_t *n)
{
  ModelTensor *tab;
  int        nt;

  PetscFunctionBegin;
  PetscCall(model_tensor_table_shard(cfg, NULL, &tab, &nt, n));
  PetscCall(PetscFree(tab));
  PetscCall(PetscMalloc1(*n, full));
  for (size_t k = 0; k < *n; k++) (*full)[k] = (float)k;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static size_t shard_size(const ModelConfig *cfg, const ModelShard *sh)
{
  ModelTensor *tab;
  int        nt;
  size_t     n = 0;

  if (model_tensor_table_shard(cfg, sh, &tab, &nt, &n)) return 0;
  PetscFree(tab);
  return n;
}

/* A NaN-filled buffer for this rank's shard on mesh m (NULL, size 0 when not a member). */
static PetscErrorCode poisoned_shard(const ModelConfig *cfg, const Mesh *m, float **buf, size_t *n)
{
  ModelShard sh;

  PetscFunctionBegin;
  *buf = NULL;
  *n   = 0;
  if (m->me < 0) PetscFunctionReturn(PETSC_SUCCESS);
  model_shard_of_mesh(cfg, m, &sh);
  *n = shard_size(cfg, &sh);
  PetscCall(PetscMalloc1(*n + 1, buf));
  for (size_t k = 0; k < *n; k++) (*buf)[k] = NAN;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This rank's shard on mesh m cut from the full model (the reference). */
static PetscErrorCode true_shard(const ModelConfig *cfg, const Mesh *m, const float *full, float **buf, size_t *n)
{
  ModelShard sh;

  PetscFunctionBegin;
  PetscCall(poisoned_shard(cfg, m, buf, n));
  if (m->me < 0) PetscFunctionReturn(PETSC_SUCCESS);
  model_shard_of_mesh(cfg, m, &sh);
  PetscCall(model_shard_extract(cfg, &sh, full, *buf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* 1 when buffers agree bit for bit; otherwise 0 and the first differing index. */
static int same_bits(const float *got, const float *want, size_t n, char *detail, size_t len)
{
  if (n == 0 || memcmp(got, want, n * sizeof(float)) == 0) return 1;
  for (size_t k = 0; k < n; k++)
    if (memcmp(&got[k], &want[k], sizeof(float))) {
      snprintf(detail, len, "element %zu of %zu is %g, expected %g", k, n, (double)got[k], (double)want[k]);
      break;
    }
  return 0;
}

/* ---- layouts ------------------------------------------------------------- */

typedef struct {
  const char *name;
  int         n, ranks[4], pp, dp, tp;
} Layout;

static const Layout L_tp1dp4 = {"tp1dp4", 4, {0, 1, 2, 3}, 1, 4, 1}, L_tp2dp2 = {"tp2dp2", 4, {0, 1, 2, 3}, 1, 2, 2}, L_tp4 = {"tp4", 4, {0, 1, 2, 3}, 1, 1, 4},
                    L_pp2dp2 = {"tp1dp2pp2", 4, {0, 1, 2, 3}, 2, 2, 1}, L_pp2tp2 = {"pp2tp2", 4, {0, 1, 2, 3}, 2, 1, 2}, L_pp4 = {"pp4", 4, {0, 1, 2, 3}, 4, 1, 1},
                    L_tp2dp2_rev = {"tp2dp2 on ranks 3,2,1,0", 4, {3, 2, 1, 0}, 1, 2, 2}, L_tp2_01 = {"tp2 on {0,1}", 2, {0, 1}, 1, 1, 2},
                    L_dp2_01 = {"dp2 on {0,1}", 2, {0, 1}, 1, 2, 1}, L_pp2_01 = {"pp2 on {0,1}", 2, {0, 1}, 2, 1, 1}, L_pp2_10 = {"pp2 on {1,0}", 2, {1, 0}, 2, 1, 1},
                    L_dp2_23 = {"dp2 on {2,3}", 2, {2, 3}, 1, 2, 1}, L_tp2_12 = {"tp2 on {1,2}", 2, {1, 2}, 1, 1, 2}, L_pp3_012 = {"pp3 on {0,1,2}", 3, {0, 1, 2}, 3, 1, 1},
                    L_tp2pp2_3012 = {"tp2pp2 on ranks 3,0,1,2", 4, {3, 0, 1, 2}, 2, 1, 2}, L_one0 = {"{0}", 1, {0}, 1, 1, 1}, L_one1 = {"{1}", 1, {1}, 1, 1, 1};

static PetscBool layout_fits(const Layout *l)
{
  for (int k = 0; k < l->n; k++)
    if (l->ranks[k] >= size) return PETSC_FALSE;
  return PETSC_TRUE;
}

static PetscErrorCode layout_mesh(const Layout *l, const Mesh **m)
{
  PetscFunctionBegin;
  PetscCall(mesh_get(l->ranks, l->n, l->pp, l->dp, l->tp, m));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- one pair of layouts ---------------------------------------------------- */

/* Realloc from a's shards (cut from full) into NaN-poisoned b shards with the
 * given bucket size; *out gets this rank's b shard, ok whether it matches. */
static PetscErrorCode realloc_once(const ModelConfig *cfg, const Mesh *a, const Mesh *b, const float *full, size_t bucket, float **out, ReallocStats *st, int *ok, char *detail, size_t len)
{
  const ReallocPlan *plan;
  float             *in, *want;
  size_t             nin, nout;

  PetscFunctionBegin;
  PetscCall(realloc_plan_get(cfg, a, b, "test", &plan));
  PetscCall(true_shard(cfg, a, full, &in, &nin));
  PetscCall(true_shard(cfg, b, full, &want, &nout));
  PetscCall(poisoned_shard(cfg, b, out, &nout));
  PetscCall(realloc_execute(plan, in, *out, bucket, st));
  *ok = same_bits(*out, want, nout, detail, len);
  PetscCall(PetscFree(in));
  PetscCall(PetscFree(want));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Bytes sent and received summed over all ranks equal the plan's bytes, and
 * ranks outside both meshes report nothing. */
static PetscErrorCode check_bytes(const char *tag, const ReallocPlan *plan, const Mesh *a, const Mesh *b, const ReallocStats *st)
{
  double mine[2] = {st->bytes_sent, st->bytes_recv}, sum[2];
  int    idle    = st->bytes_sent == 0 && st->bytes_recv == 0 && st->bytes_local == 0 && st->messages == 0, ok;
  char   what[400], detail[200];

  PetscFunctionBegin;
  PetscCallMPI(MPI_Allreduce(mine, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  ok = sum[0] == realloc_plan_bytes(plan) && sum[1] == realloc_plan_bytes(plan) && (a->me >= 0 || b->me >= 0 || idle);
  snprintf(detail, sizeof detail, "sent %.0f, received %.0f, plan %.0f bytes%s", sum[0], sum[1], realloc_plan_bytes(plan), a->me < 0 && b->me < 0 && !idle ? ", and a rank outside both meshes did work" : "");
  snprintf(what, sizeof what, "%s: bytes sent = bytes received = plan bytes (%.0f)", tag, realloc_plan_bytes(plan));
  test_report(ok, what, "%s", detail);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Direct, bucketed and round-trip reallocation from layout la to lb. */
static PetscErrorCode check_pair(const ModelConfig *cfg, const float *full, const Layout *la, const Layout *lb)
{
  const Mesh        *a, *b;
  const ReallocPlan *plan, *back;
  ReallocStats       st, st_bucket, st_back;
  float             *out, *out_bucket, *orig, *round;
  size_t             norig, nround;
  int                ok;
  char               tag[160], what[240], detail[200] = "";
  double             msgs, min_msgs;

  PetscFunctionBegin;
  if (!layout_fits(la) || !layout_fits(lb)) PetscFunctionReturn(PETSC_SUCCESS);
  snprintf(tag, sizeof tag, "%s, %s -> %s", model_name(cfg), la->name, lb->name);
  PetscCall(layout_mesh(la, &a));
  PetscCall(layout_mesh(lb, &b));
  PetscCall(realloc_plan_get(cfg, a, b, tag, &plan));

  PetscCall(realloc_once(cfg, a, b, full, 0, &out, &st, &ok, detail, sizeof detail));
  snprintf(what, sizeof what, "%s: destination shards bit-exact", tag);
  test_report(ok, what, "%s", detail);
  PetscCall(check_bytes(tag, plan, a, b, &st));

  PetscCall(realloc_once(cfg, a, b, full, BUCKET, &out_bucket, &st_bucket, &ok, detail, sizeof detail));
  msgs     = st_bucket.messages;
  min_msgs = ceil(realloc_plan_bytes(plan) / BUCKET);
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &msgs, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  if (ok && msgs < min_msgs) snprintf(detail, sizeof detail, "%.0f messages for %.0f bytes: buckets not used", msgs, realloc_plan_bytes(plan)), ok = 0;
  snprintf(what, sizeof what, "%s: %d-byte buckets give the same shards", tag, BUCKET);
  test_report(ok, what, "%s", detail);

  /* back to the source layout from the reallocated shards */
  PetscCall(realloc_plan_get(cfg, b, a, tag, &back));
  PetscCall(true_shard(cfg, a, full, &orig, &norig));
  PetscCall(poisoned_shard(cfg, a, &round, &nround));
  PetscCall(realloc_execute(back, out, round, 0, &st_back));
  ok = same_bits(round, orig, norig, detail, sizeof detail);
  snprintf(what, sizeof what, "%s: round trip back is bit-exact", tag);
  test_report(ok, what, "%s", detail);

  PetscCall(PetscFree(out));
  PetscCall(PetscFree(out_bucket));
  PetscCall(PetscFree(orig));
  PetscCall(PetscFree(round));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- properties ------------------------------------------------------------- */

/* The reference itself: inserting every shard of a pp x tp grid rebuilds the
 * full model exactly (otherwise the comparisons above prove nothing). */
static PetscErrorCode check_shards_cover(const ModelConfig *cfg, const float *full, size_t n)
{
  const int grids[][2] = {{1, 2}, {1, 4}, {2, 1}, {2, 2}, {4, 1}};
  float    *back;
  int       ok = 1;
  char      detail[200] = "", what[160];

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(n, &back));
  for (size_t g = 0; g < sizeof grids / sizeof grids[0] && ok; g++) {
    int pp = grids[g][0], tp = grids[g][1];
    for (size_t k = 0; k < n; k++) back[k] = NAN;
    for (int p = 0; p < pp; p++)
      for (int t = 0; t < tp; t++) {
        ModelShard sh = {tp, t, pp, p, 0, 0};
        float   *piece;
        model_stage_layers(cfg, pp, p, &sh.l0, &sh.l1);
        PetscCall(PetscMalloc1(shard_size(cfg, &sh) + 1, &piece));
        PetscCall(model_shard_extract(cfg, &sh, full, piece));
        PetscCall(model_shard_insert(cfg, &sh, piece, back));
        PetscCall(PetscFree(piece));
      }
    ok = same_bits(back, full, n, detail, sizeof detail);
    if (!ok) {
      size_t len = strlen(detail);
      snprintf(detail + len, sizeof detail - len, " (pp %d tp %d)", pp, tp);
    }
  }
  snprintf(what, sizeof what, "%s: the shards of every pp x tp grid rebuild the full model (the reference is sound)", model_name(cfg));
  test_report(ok, what, "%s", detail);
  PetscCall(PetscFree(back));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Same arguments, same plan; another model shape, another plan. */
static PetscErrorCode check_cache(void)
{
  ModelConfig        lm = small_config(MODEL_HEAD_LM), sc = small_config(MODEL_HEAD_SCALAR);
  const Mesh        *a, *b;
  const ReallocPlan *p1, *p2, *p3;

  PetscFunctionBegin;
  PetscCall(layout_mesh(&L_one0, &a));
  PetscCall(layout_mesh(size >= 2 ? &L_tp2_01 : &L_one0, &b));
  PetscCall(realloc_plan_get(&lm, a, b, "cache", &p1));
  PetscCall(realloc_plan_get(&lm, a, b, "cache", &p2));
  PetscCall(realloc_plan_get(&sc, a, b, "cache", &p3));
  test_report(p1 == p2 && p1 != p3, "plan cache: the same (model, meshes) give the same plan, another model shape another", "pointers differ or coincide");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Plans for hand-built meshes (the plan is a pure function of the grids, so
 * they need not exist in this world) that must fail with the message. */
static PetscErrorCode check_plan_error(const ModelConfig *cfg, int tp_src, int tp_dst, const char *want, const char *what)
{
  int                ranks[16];
  Mesh               a, b;
  const ReallocPlan *plan = NULL;
  const char        *text = NULL;
  char              *specific = NULL, detail[200];
  PetscErrorCode     ierr;

  PetscFunctionBegin;
  for (int k = 0; k < 16; k++) ranks[k] = k;
  memset(&a, 0, sizeof a);
  a.nranks = a.tp = tp_src;
  a.pp = a.dp = 1;
  a.ranks      = ranks;
  a.me         = -1;
  b            = a;
  b.nranks = b.tp = tp_dst;
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = realloc_plan_get(cfg, &a, &b, "actor: train -> gen", &plan);
  PetscCall(PetscPopErrorHandler());
  if (ierr) PetscCall(PetscErrorMessage(ierr, &text, &specific));
  snprintf(detail, sizeof detail, "error %d, message \"%s\"", (int)ierr, specific ? specific : "");
  test_report(ierr == PETSC_ERR_ARG_INCOMP && specific && strstr(specific, want) && strstr(specific, "actor: train -> gen"), what, "%s", detail);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A receiver that holds its slice in the source copies it locally. tp1dp4
 * -> tp2dp2 on the same ranks: everything is local. tp2 {0,1} -> {0}: rank 0
 * keeps its own half and receives only rank 1's half. */
static PetscErrorCode check_local(const ModelConfig *cfg, const float *full)
{
  const Mesh        *a, *b;
  const ReallocPlan *plan;
  ReallocStats       st;
  float             *out;
  int                ok;
  char               detail[200] = "";

  PetscFunctionBegin;
  if (size >= 4) {
    ModelShard sh;
    PetscCall(layout_mesh(&L_tp1dp4, &a));
    PetscCall(layout_mesh(&L_tp2dp2, &b));
    PetscCall(realloc_plan_get(cfg, a, b, "local", &plan));
    PetscCall(realloc_once(cfg, a, b, full, 0, &out, &st, &ok, detail, sizeof detail));
    model_shard_of_mesh(cfg, b, &sh);
    if (ok) {
      ok = realloc_plan_bytes(plan) == 0 && st.messages == 0 && st.bytes_local == (double)shard_size(cfg, &sh) * sizeof(float);
      snprintf(detail, sizeof detail, "plan %.0f bytes, %d messages, %.0f bytes local", realloc_plan_bytes(plan), st.messages, st.bytes_local);
    }
    test_report(ok, "senders: tp1dp4 -> tp2dp2 on the same ranks copies everything locally, sends nothing", "%s", detail);
    PetscCall(PetscFree(out));
  }
  if (size >= 2) {
    ModelShard own = {2, 0, 1, 0, 0, cfg->n_layer}, whole = {1, 0, 1, 0, 0, cfg->n_layer};
    double   local = (double)shard_size(cfg, &own) * sizeof(float), total = (double)shard_size(cfg, &whole) * sizeof(float);
    PetscCall(layout_mesh(&L_tp2_01, &a));
    PetscCall(layout_mesh(&L_one0, &b));
    PetscCall(realloc_plan_get(cfg, a, b, "local", &plan));
    PetscCall(realloc_once(cfg, a, b, full, 0, &out, &st, &ok, detail, sizeof detail));
    if (ok) {
      ok = realloc_plan_bytes(plan) == total - local && (rank != 0 || (st.bytes_local == local && st.bytes_recv == total - local && st.messages == 0)) && (rank != 1 || (st.bytes_sent == total - local && st.messages == 1 && st.bytes_local == 0));
      snprintf(detail, sizeof detail, "plan %.0f bytes (want %.0f), local %.0f, sent %.0f, received %.0f, %d messages", realloc_plan_bytes(plan), total - local, st.bytes_local, st.bytes_sent, st.bytes_recv, st.messages);
    }
    test_report(ok, "senders: tp2 {0,1} -> {0}: rank 0 keeps its half locally and receives only rank 1's half in one message", "%s", detail);
    PetscCall(PetscFree(out));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* dp2 on {0,1} -> dp2 on {2,3}: both replicas hold everything, so the
 * choice by load spreads the sending over both; greedy assignment keeps
 * them within one (largest) item of each other. */
static PetscErrorCode check_balance(const ModelConfig *cfg, const float *full)
{
  const Mesh  *a, *b;
  ReallocStats st;
  float       *out;
  ModelTensor *tab;
  int          ok, nt;
  size_t       np;
  double       sent[4] = {0, 0, 0, 0}, largest = 0;
  char         detail[200] = "";

  PetscFunctionBegin;
  if (size < 4) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(model_tensor_table_shard(cfg, NULL, &tab, &nt, &np));
  for (int i = 0; i < nt; i++) largest = PetscMax(largest, (double)tab[i].numel * sizeof(float));
  PetscCall(PetscFree(tab));
  PetscCall(layout_mesh(&L_dp2_01, &a));
  PetscCall(layout_mesh(&L_dp2_23, &b));
  PetscCall(realloc_once(cfg, a, b, full, 0, &out, &st, &ok, detail, sizeof detail));
  if (rank < 4) sent[rank] = st.bytes_sent;
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, sent, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  if (ok) {
    ok = sent[0] > 0 && sent[1] > 0 && fabs(sent[0] - sent[1]) <= 2 * largest;
    snprintf(detail, sizeof detail, "rank 0 sent %.0f, rank 1 %.0f bytes (largest item %.0f)", sent[0], sent[1], 2 * largest);
  }
  test_report(ok, "senders: dp2 {0,1} -> dp2 {2,3} spreads the sending over both replicas by load", "%s", detail);
  PetscCall(PetscFree(out));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_model(const ModelConfig *cfg)
{
  const Layout *pairs[][2] = {
    {&L_one0, &L_one0},        {&L_tp2_01, &L_one0},     {&L_one0, &L_tp2_01},      {&L_dp2_01, &L_tp2_01},  {&L_pp2_01, &L_tp2_01},       {&L_one1, &L_pp2_10},
    {&L_tp2_01, &L_pp2_10},    {&L_tp1dp4, &L_tp2dp2},   {&L_tp2dp2, &L_tp4},       {&L_tp4, &L_pp2dp2},     {&L_pp2tp2, &L_tp1dp4},       {&L_tp2_01, &L_dp2_23},
    {&L_tp2_12, &L_pp3_012},   {&L_pp2tp2, &L_one0},     {&L_tp4, &L_one0},         {&L_one0, &L_pp2tp2},    {&L_tp2dp2_rev, &L_pp4},      {&L_tp2pp2_3012, &L_tp4},
  };
  float *full;
  size_t n;

  PetscFunctionBegin;
  PetscCall(full_model(cfg, &full, &n));
  PetscCall(check_shards_cover(cfg, full, n));
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) PetscCall(check_pair(cfg, full, pairs[k][0], pairs[k][1]));
  PetscCall(check_local(cfg, full));
  PetscCall(check_balance(cfg, full));
  PetscCall(PetscFree(full));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  ModelConfig lm = small_config(MODEL_HEAD_LM), sc = small_config(MODEL_HEAD_SCALAR);

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCallMPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  test_collective(MPI_COMM_WORLD);
  PetscCall(comm_setup());
  PetscCall(run_model(&lm));
  PetscCall(run_model(&sc));
  {
    ModelConfig mqa = mqa_config();
    PetscCall(run_model(&mqa));
  }
  PetscCall(check_cache());
  PetscCall(check_plan_error(&lm, 2, 3, "tensor-parallel sizes 2 and 3 must divide each other", "plan error: tp 2 and tp 3 do not divide each other"));
  PetscCall(check_plan_error(&lm, 16, 1, "transformer.wte.weight", "plan error: 16 pieces cannot cut a vocabulary of 24 rows"));
  PetscCall(realloc_cache_destroy());
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return test_tally();
}
