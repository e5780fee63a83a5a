/* test_exec: the dataflow executor (inc/exec.h). Run with mpiexec -n 4.
 *  - exec_graph_levels: the PPO graph of src/ppo/graph.c gets levels
 *    0,0,1,2,2,2,3,4,4; a missing input, a cycle, a key produced twice or
 *    produced and given are errors naming the culprit.
 *  - exec_graph_run: each node runs on exactly the ranks of its `here` set,
 *    level by level (two nodes on disjoint ranks both run, and share, before
 *    the next level, and the second does not wait for the first), every share
 *    runs on every rank, seconds[] are the max over ranks, equal everywhere.
 *  - exec_rows tiles [0,B); exec_share_rows and exec_share_packed hand each
 *    replica head's rows to every rank, on several meshes (permuted too).
 *  - DModel: a checkpoint loaded (by shard) onto a tp2 x dp2 training mesh (with and
 *    without ZeRO-1) and gathered to rank 0 is bit-identical (parameters,
 *    moments, step); copies to generation placements are bit-identical and
 *    move the plan's bytes; release with keep then gather or acquire keeps
 *    the bits; releasing a model with AdamW state is refused.
 *
 * The checks in detail: the dataflow executor: the PPO graph's levels, a missing input, a
 * cycle, a key produced twice or produced and given each an error naming the culprit; nodes
 * run only on their ranks, level by level (two nodes on disjoint ranks both run and share
 * before the next level, neither waiting for the other), shares on every rank, per-node
 * seconds max-reduced; replica rows tile the batch, `exec_share_rows`/`exec_share_packed` give
 * every rank every replica head's rows on four meshes; a checkpoint loaded onto tp2 x dp2
 * (with and without ZeRO-1) and gathered to rank 0 bit-identical (parameters, moments, step),
 * copies to two generation placements bit-identical and moving the plan's bytes, release (kept
 * on host) and acquire keep the bits, release of a model with AdamW state refused
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "io.h"
#include "test_report.h"

static int world_rank, world_size;

static const char help[] = "Dataflow executor regression tests.\n";

/* A check's name from a format (one static buffer: use it at once). */
static const char *fmt(const char *f, ...)
{
  static char buf[256];
  va_list     ap;

  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

/* A graph node by its name and keys; KEYS(...) lists them. */
#define KEYS(...)       {__VA_ARGS__}
#define NODE(n, i, o)   {.name = n, .in = i, .out = o}

/* ierr = call with errors returned instead of aborting; msg: the error's message or "". */
#define CAPTURE(ierr, msg, call) \
  do { \
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL)); \
    ierr = (call), msg = ""; \
    PetscCall(PetscPopErrorHandler()); \
    if (ierr) PetscCall(PetscErrorMessage(ierr, NULL, (char **)&msg)); \
  } while (0)

/* ---- levels ------------------------------------------------------------------------ */
static PetscErrorCode test_levels(void)
{
  const ExecNode ppo[] = {
    NODE("actor_sync", KEYS("actor_weights"), KEYS("gen_weights")),
    NODE("critic_sync", KEYS("critic_weights"), KEYS("critic_inf_weights")),
    NODE("generation", KEYS("prompts", "gen_weights"), KEYS("responses")),
    NODE("ref_inference", KEYS("responses"), KEYS("ref_logprobs")),
    NODE("reward_inference", KEYS("responses"), KEYS("scores")),
    NODE("critic_inference", KEYS("responses", "critic_inf_weights"), KEYS("values")),
    NODE("advantages", KEYS("ref_logprobs", "scores", "values"), KEYS("advantages")),
    NODE("actor_train", KEYS("responses", "ref_logprobs", "advantages"), KEYS("new_actor_weights")),
    NODE("critic_train", KEYS("values", "advantages"), KEYS("new_critic_weights")),
  };
  const char *const given[] = {"prompts", "actor_weights", "critic_weights", NULL};
  const int         want[]  = {0, 0, 1, 2, 2, 2, 3, 4, 4};
  /* bad graphs; the error must name n1 and n2 (in a cycle: one of the nodes that wait, cyc_*) */
  struct { const char *what, *n1, *n2; int n; ExecNode g[3]; } bad[] = {
    {"an input nobody produces", "needs_b", "'nowhere'", 2, {NODE("feed", KEYS("prompts"), KEYS("x")), NODE("needs_b", KEYS("x", "nowhere"), KEYS("y"))}},
    {"a cycle", "cycle", "cyc_", 3, {NODE("feed", KEYS("prompts"), KEYS("x")), NODE("cyc_q", KEYS("x", "z"), KEYS("y")), NODE("cyc_r", KEYS("y"), KEYS("z"))}},
    {"a key produced by two nodes", "'x'", "prod_", 2, {NODE("prod_a", KEYS("prompts"), KEYS("x")), NODE("prod_b", KEYS("prompts"), KEYS("y", "x"))}},
    {"a key produced and given", "'actor_weights'", "makes_aw", 1, {NODE("makes_aw", KEYS("prompts"), KEYS("actor_weights"))}},
  };
  int       level[9], nlevels = -1;
  PetscBool ok = PETSC_TRUE;
  char      det[64];

  PetscFunctionBegin;
  PetscCall(exec_graph_levels(ppo, 9, given, level, &nlevels));
  for (int i = 0; i < 9; i++)
    if (level[i] != want[i]) ok = PETSC_FALSE;
  PetscCall(PetscSNPrintf(det, sizeof det, "levels %d,%d,%d,%d,%d,%d,%d,%d,%d", level[0], level[1], level[2], level[3], level[4], level[5], level[6], level[7], level[8]));
  test_measure(ok && nlevels == 5 ? PETSC_TRUE : PETSC_FALSE, "exec_graph_levels: the PPO graph gets levels 0,0,1,2,2,2,3,4,4 (5 levels)", "%s", det);
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    PetscErrorCode ierr;
    const char    *msg;

    CAPTURE(ierr, msg, exec_graph_levels(bad[k].g, bad[k].n, given, level, &nlevels));
    test_measure(ierr == PETSC_ERR_ARG_WRONG && strstr(msg, bad[k].n1) && strstr(msg, bad[k].n2) ? PETSC_TRUE : PETSC_FALSE, fmt("exec_graph_levels: %s is an error naming %s and %s", bad[k].what, bad[k].n1, bad[k].n2), "%s", msg);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- running a graph ----------------------------------------------------------------- */
#define NNODE 5
static int    ev_node[64], ev_share[64], nev;   /* this rank's callbacks in the order they ran */
static double val[NNODE], t_begin, t_right = -1; /* each node's output (-1 until run or shared) */
static int    join_saw_inputs = -1;              /* join found left's and right's outputs here */
/* "B ran while A was working" without a clock: B's rank tells A's rank on a
 * communicator of the test's own, and A works until it hears (at least
 * min_s, at most 10 s). Whether A heard is the check; a time bound would
 * fail on a loaded machine (4 ranks on 2 cores under a sanitizer). */
static MPI_Comm side = MPI_COMM_NULL;
static int      heard[2];
static void     tell(int to, int tag) { (void)MPI_Send(&tag, 1, MPI_INT, to, tag, side); }
static int      work_until_told(int from, int tag, double min_s)
{
  int got = 0, v;
  for (double t0 = sys_wtime(); (!got || sys_wtime() - t0 < min_s) && sys_wtime() - t0 < 10;)
    if (!got) (void)MPI_Iprobe(from, tag, side, &got, MPI_STATUS_IGNORE);
  if (got) (void)MPI_Recv(&v, 1, MPI_INT, from, tag, side, MPI_STATUS_IGNORE);
  return got;
}

typedef struct { int k, root; } NodeCtx; /* node index; world rank whose output the share broadcasts */

/* left outputs 3, right 4, join left + right, tail 10 * join (idle never runs) */
static PetscErrorCode node_run(void *ctx)
{
  const NodeCtx *c = (const NodeCtx *)ctx;

  PetscFunctionBegin;
  ev_node[nev] = c->k, ev_share[nev++] = 0;
  if (c->k == 1 && world_rank == 1) heard[0] = work_until_told(3, 1, 0.2); /* left works on rank 1 until right starts */
  if (c->k == 2 && world_rank == 3) t_right = sys_wtime() - t_begin, tell(1, 1);
  if (c->k == 0) join_saw_inputs = val[1] == 3 && val[2] == 4;
  val[c->k] = c->k == 0 ? val[1] + val[2] : c->k == 1 ? 3 : c->k == 2 ? 4 : 10 * val[0];
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode node_share(void *ctx)
{
  const NodeCtx *c = (const NodeCtx *)ctx;

  PetscFunctionBegin;
  ev_node[nev] = c->k, ev_share[nev++] = 1;
  PetscCallMPI(MPI_Bcast(&val[c->k], 1, MPI_DOUBLE, c->root, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_graph_run(void)
{
  /* listed out of level order; here sets as world-rank bit masks */
  const int         want_level[NNODE] = {1, 0, 0, 2, 3}, here_mask[NNODE] = {0x6, 0x3, 0xC, 0x0, 0x8};
  NodeCtx           ctx[NNODE] = {{0, 1}, {1, 0}, {2, 3}, {3, 0}, {4, 0}};
  const char *const given[] = {"x", NULL};
  ExecNode          g[NNODE]  = {NODE("join", KEYS("a", "b"), KEYS("c")), NODE("left", KEYS("x"), KEYS("a")), NODE("right", KEYS("x"), KEYS("b")),
                                 NODE("idle", KEYS("c"), KEYS("d")), NODE("tail", KEYS("c", "d"), KEYS("e"))};
  int       runs[NNODE] = {0}, shares[NNODE] = {0}, joined;
  double    sec[NNODE], sec0[NNODE];
  PetscBool ok_here = PETSC_TRUE, ok_share = PETSC_TRUE, ok_order = PETSC_TRUE, ok_sec = PETSC_TRUE;
  char      det[128];

  PetscFunctionBegin;
  for (int k = 0; k < NNODE; k++) {
    g[k].here = (here_mask[k] >> world_rank) & 1 ? PETSC_TRUE : PETSC_FALSE;
    g[k].run = node_run, g[k].share = k < 3 ? node_share : NULL, g[k].ctx = &ctx[k];
    val[k] = -1;
  }
  PetscCallMPI(MPI_Barrier(MPI_COMM_WORLD));
  t_begin = sys_wtime();
  PetscCall(exec_graph_run(g, NNODE, given, sec));
  for (int e = 0; e < nev; e++) { /* count; (level, run before share) never goes back */
    if (ev_share[e]) shares[ev_node[e]]++;
    else runs[ev_node[e]]++;
    if (e > 0 && 2 * want_level[ev_node[e]] + ev_share[e] < 2 * want_level[ev_node[e - 1]] + ev_share[e - 1]) ok_order = PETSC_FALSE;
  }
  for (int k = 0; k < NNODE; k++) {
    if (runs[k] != (int)g[k].here) ok_here = PETSC_FALSE;
    if (shares[k] != (g[k].share ? 1 : 0)) ok_share = PETSC_FALSE;
  }
  test_report(ok_here, "exec_graph_run: each node ran once on each rank of its here set and nowhere else", NULL);
  test_report(ok_share && val[0] == 7 && val[1] == 3 && val[2] == 4 ? PETSC_TRUE : PETSC_FALSE, "exec_graph_run: every share callback ran once on every rank, the outputs reach all ranks", NULL);
  joined = join_saw_inputs == 1;
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &joined, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(MPI_Bcast(&t_right, 1, MPI_DOUBLE, 3, MPI_COMM_WORLD));
  PetscCallMPI(MPI_Bcast(&heard[0], 1, MPI_INT, 1, MPI_COMM_WORLD));
  PetscCall(PetscSNPrintf(det, sizeof det,
                          "join saw both inputs on %d of 2 ranks; right started %.3f s after the start, %s left ended",
                          joined, t_right, heard[0] ? "before" : "not before"));
  test_measure(ok_order && joined == 2 && t_right >= 0 && heard[0] && (world_rank != 3 || val[4] == 70) ? PETSC_TRUE
                                                                                                        : PETSC_FALSE,
               "exec_graph_run: a rank runs and shares level by level; left (ranks 0,1) and right (ranks 2,3) both ran "
               "and shared before join, right without waiting for left",
               "%s", det);
  PetscCall(PetscArraycpy(sec0, sec, NNODE));
  PetscCallMPI(MPI_Bcast(sec0, NNODE, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  for (int k = 0; k < NNODE; k++)
    if (sec[k] != sec0[k] || sec[k] < 0) ok_sec = PETSC_FALSE;
  PetscCall(PetscSNPrintf(det, sizeof det, "seconds join %.3g left %.3g right %.3g idle %.3g tail %.3g", sec[0], sec[1], sec[2], sec[3], sec[4]));
  test_measure(ok_sec && sec[1] >= 0.2 && sec[3] == 0 ? PETSC_TRUE : PETSC_FALSE, "exec_graph_run: seconds equal on all ranks, >= 0, the max over ranks (left >= 0.2 s), 0 for a node run nowhere", "%s", det);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A late node (asynchronous RL's generation): it runs in the last level and
 * shares after it, so the other ranks' later levels go on meanwhile. */
static double late_val[4], late_t[4];  /* outputs of a, b, slow, c; c's start */
static int    late_order[8], nlate;    /* this rank's runs and shares: 1 a, 2 b, 3 slow run, 4 slow share, 5 c */

static PetscErrorCode late_run(void *ctx)
{
  int k = *(const int *)ctx;

  PetscFunctionBegin;
  late_order[nlate++] = k == 2 ? 3 : k == 3 ? 5 : k + 1;
  if (k == 2) heard[1] = work_until_told(0, 2, 0.3); /* slow works on rank 3 until c starts on rank 0 */
  if (k == 3) late_t[3] = sys_wtime() - t_begin, tell(3, 2);
  late_val[k] = k + 1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode late_share(void *ctx)
{
  int k = *(const int *)ctx;

  PetscFunctionBegin;
  if (k == 2) late_order[nlate++] = 4;
  PetscCallMPI(MPI_Bcast(&late_val[k], 1, MPI_DOUBLE, k == 2 ? 3 : 0, MPI_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_graph_late(void)
{
  static const int  idx[4] = {0, 1, 2, 3};
  const char *const given[] = {"x", NULL};
  ExecNode          g[4]    = {NODE("a", KEYS("x"), KEYS("a")), NODE("slow", KEYS("x"), KEYS("s")), NODE("b", KEYS("a"), KEYS("b")), NODE("c", KEYS("b"), KEYS("c"))};
  const int         k_of[4] = {0, 2, 1, 3};
  int               want0[] = {1, 2, 5, 4}, want3[] = {3, 4}, ok_order;
  PetscErrorCode    ierr;
  const char       *msg;
  char              det[128];

  PetscFunctionBegin;
  for (int i = 0; i < 4; i++) {
    g[i].here  = (k_of[i] == 2 ? world_rank == 3 : world_rank == 0) ? PETSC_TRUE : PETSC_FALSE;
    g[i].run   = late_run;
    g[i].share = k_of[i] == 3 ? NULL : late_share;
    g[i].ctx   = (void *)&idx[k_of[i]];
    g[i].late  = k_of[i] == 2 ? PETSC_TRUE : PETSC_FALSE;
  }
  PetscCallMPI(MPI_Barrier(MPI_COMM_WORLD));
  t_begin = sys_wtime();
  PetscCall(exec_graph_run(g, 4, given, NULL));
  ok_order = world_rank == 0 ? nlate == 4 && !memcmp(late_order, want0, sizeof want0) : world_rank == 3 ? nlate == 2 && !memcmp(late_order, want3, sizeof want3) : nlate == 1 && late_order[0] == 4;
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &ok_order, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
  PetscCallMPI(MPI_Bcast(&late_t[3], 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  PetscCallMPI(MPI_Bcast(&heard[1], 1, MPI_INT, 3, MPI_COMM_WORLD));
  PetscCall(PetscSNPrintf(det, sizeof det, "c started %.3f s after the start, %s slow ended", late_t[3],
                          heard[1] ? "before" : "not before"));
  test_measure(ok_order && heard[1] && late_val[2] == 3 ? PETSC_TRUE : PETSC_FALSE,
               "exec_graph_run: a late node runs in the last level and shares after it; the other ranks run the later "
               "levels meanwhile (c before slow ends), its output reaches every rank",
               "%s", det);
  g[3] = (ExecNode)NODE("d", KEYS("s"), KEYS("d"));
  CAPTURE(ierr, msg, exec_graph_run(g, 4, given, NULL));
  test_measure(ierr == PETSC_ERR_ARG_WRONG && strstr(msg, "d needs 's' of slow") ? PETSC_TRUE : PETSC_FALSE, "exec_graph_run: a node that takes a late node's output is an error naming both", "%s", msg);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- rows ------------------------------------------------------------------------------ */
static void test_rows(void)
{
  PetscBool ok = PETSC_TRUE;
  for (int B = 0; B <= 17; B++)
    for (int dp = 1; dp <= 5; dp++) {
      int prev = 0, b0, b1;
      for (int d = 0; d < dp; d++) {
        exec_rows(B, dp, d, &b0, &b1);
        if (b0 != prev || b1 < b0 || b1 - b0 > B / dp + 1 || b1 - b0 < B / dp) ok = PETSC_FALSE;
        prev = b1;
      }
      if (prev != B) ok = PETSC_FALSE;
    }
  test_report(ok, "exec_rows: for B = 0..17, dp = 1..5 the replicas' rows tile [0,B) in order, sizes B/dp or B/dp+1", NULL);
}

typedef struct { const char *name; int n, ranks[4], pp, dp, tp; } MeshSpec;

static float fval(int b, int c) { return (float)(100 * b + c) + 0.25f; }
static int   ival(int b, int c) { return 1000 * b + c + 1; }

static PetscErrorCode test_share(const MeshSpec *s)
{
  const Mesh *m;
  int         head = 0, d = -1, col = 3, count[7], at[8], b0 = 0, b1 = 0;
  float       fb[21], pb[64];
  int         ib[21];
  PetscBool   ok = PETSC_TRUE, okp = PETSC_TRUE;

  PetscFunctionBegin;
  PetscCall(mesh_get(s->ranks, s->n, s->pp, s->dp, s->tp, &m));
  for (int i = 0; i < s->n; i++) /* my coordinates from the rank list: tp fastest, then dp, then pp */
    if (s->ranks[i] == world_rank) head = i / (s->dp * s->tp) == s->pp - 1 && i % s->tp == 0, d = (i / s->tp) % s->dp;
  for (int B = 7; B >= 1; B -= 6) {
    if (head) exec_rows(B, s->dp, d, &b0, &b1);
    for (int i = 0, b; i < B * col; i++) {
      b     = i / col;
      fb[i] = head && b >= b0 && b < b1 ? fval(b, i % col) : -1;
      ib[i] = head && b >= b0 && b < b1 ? ival(b, i % col) : -1;
    }
    PetscCall(exec_share_rows(m, B, (size_t)col, MPI_FLOAT, fb));
    PetscCall(exec_share_rows(m, B, (size_t)col, MPI_INT, ib));
    for (int i = 0; i < B * col; i++)
      if (fb[i] != fval(i / col, i % col) || ib[i] != ival(i / col, i % col)) ok = PETSC_FALSE;
  }
  test_report(ok, fmt("exec_share_rows, %s: every rank gets every head's rows (float and int, B = 7 and 1)", s->name), NULL);
  at[0] = 0;
  for (int b = 0; b < 7; b++) count[b] = 1 + (5 * b) % 4, at[b + 1] = at[b] + count[b];
  if (head) exec_rows(7, s->dp, d, &b0, &b1);
  for (int b = 0; b < 7; b++)
    for (int j = 0; j < count[b]; j++) pb[at[b] + j] = head && b >= b0 && b < b1 ? fval(b, j) : -1;
  PetscCall(exec_share_packed(m, 7, count, MPI_FLOAT, pb));
  for (int b = 0; b < 7; b++)
    for (int j = 0; j < count[b]; j++)
      if (pb[at[b] + j] != fval(b, j)) okp = PETSC_FALSE;
  test_report(okp, fmt("exec_share_packed, %s: rows of 1..4 elements reach every rank", s->name), NULL);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- models on meshes --------------------------------------------------------------------- */
static void set_call(PlanCall *c, const MeshSpec *s)
{
  c->nranks = s->n, c->pp = s->pp, c->dp = s->dp, c->tp = s->tp, c->mbs = 1;
  for (int i = 0; i < s->n; i++) c->ranks[i] = s->ranks[i];
}

/* Rank 0: poisons `out` (params, moments, step), gathers dm into it and
 * compares bit for bit with ref. ok on the other ranks. */
static PetscErrorCode gather_same(DModel *dm, Model *out, const Model *ref, PetscBool *ok)
{
  float *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  size_t n = ref ? ref->nparams : 0;

  PetscFunctionBegin;
  *ok = PETSC_TRUE;
  if (world_rank == 0) {
    PetscCall(PetscMalloc4(n, &a, n, &b, n, &c, n, &d));
    for (size_t i = 0; i < n; i++) a[i] = -1;
    PetscCall(model_params_set(out, a));
    if (dm->optim) PetscCall(model_optim_set(out, a, a, -1));
  }
  PetscCall(dmodel_gather(dm, out, 4096));
  if (world_rank == 0) {
    PetscCall(model_params_get(out, a));
    PetscCall(model_params_get(ref, b));
    *ok = memcmp(a, b, n * sizeof(float)) ? PETSC_FALSE : PETSC_TRUE;
    if (dm->optim) {
      PetscCall(model_optim_get(out, a, c));
      PetscCall(model_optim_get(ref, b, d));
      if (memcmp(a, b, n * sizeof(float)) || memcmp(c, d, n * sizeof(float)) || out->step != ref->step) *ok = PETSC_FALSE;
    }
    PetscCall(PetscFree4(a, b, c, d));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_dmodel(const ModelConfig *cfg, const Model *full, const char *path, PetscBool zero1)
{
  const Backend *be;
  Plan           plan;
  DModel         train, gen;
  Model         *out = NULL;
  PetscBool      ok;
  PetscErrorCode ierr;
  const char    *msg;
  const MeshSpec train_on = {"tp2 x dp2", 4, {0, 1, 2, 3}, 1, 2, 2};
  const MeshSpec gen_on[] = {{"ranks 2,3 dp2", 2, {2, 3}, 1, 2, 1}, {"ranks 3,2,1,0 pp2 tp2", 4, {3, 2, 1, 0}, 2, 1, 2}};
  const char    *z = zero1 ? " ZeRO-1" : "";
  char           det[160];

  PetscFunctionBegin;
  PetscCall(backend_get("cpu", &be));
  PetscCall(PetscMemzero(&plan, sizeof plan));
  plan.world = world_size, plan.bucket_mb = 1, plan.zero1 = zero1;
  set_call(&plan.call[MFC_ACTOR_TRAIN], &train_on);
  if (world_rank == 0) {
    PetscCall(model_create(cfg, be, &out));
    PetscCall(model_optim_init(out));
  }
  PetscCall(dmodel_create("actor", cfg, be, &plan, MFC_ACTOR_TRAIN, PETSC_TRUE, &train));
  PetscCall(dmodel_load(&train, path, "actor", PETSC_TRUE, PETSC_FALSE, 0));
  PetscCall(gather_same(&train, out, full, &ok));
  test_report(ok, fmt("dmodel_load on %s%s, dmodel_gather to rank 0: parameters, moments and step bit-identical to the checkpointed model", train_on.name, z), NULL);
  CAPTURE(ierr, msg, dmodel_release(&train, PETSC_TRUE));
  test_measure(ierr == PETSC_ERR_ARG_WRONG && train.lm && strstr(msg, "actor") ? PETSC_TRUE : PETSC_FALSE, fmt("dmodel_release of a model with AdamW state%s is an error and keeps its shard", z), "%s", msg);

  for (int k = 0; k < 2; k++) {
    const ReallocPlan *rp;
    ReallocStats       st;
    double             moved[2];

    set_call(&plan.call[MFC_ACTOR_GEN], &gen_on[k]);
    PetscCall(dmodel_create("actor_gen", cfg, be, &plan, MFC_ACTOR_GEN, PETSC_FALSE, &gen));
    PetscCall(PetscMemzero(&st, sizeof st));
    PetscCall(dmodel_copy(&train, &gen, 2048, &st));
    PetscCall(gather_same(&gen, out, full, &ok));
    PetscCall(realloc_plan_get(cfg, train.mesh, gen.mesh, "check", &rp));
    moved[0] = st.bytes_sent, moved[1] = st.bytes_recv;
    PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, moved, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    PetscCall(PetscSNPrintf(det, sizeof det, "sent %.0f, received %.0f, plan %.0f bytes", moved[0], moved[1], realloc_plan_bytes(rp)));
    test_measure(ok && moved[0] == moved[1] && moved[0] == realloc_plan_bytes(rp) ? PETSC_TRUE : PETSC_FALSE, fmt("dmodel_copy %s%s -> %s: gathered parameters bit-identical; bytes sent = received = the plan's", train_on.name, z, gen_on[k].name), "%s", det);

    PetscCall(dmodel_release(&gen, PETSC_TRUE));
    PetscCall(gather_same(&gen, out, full, &ok));
    test_report(ok && !gen.lm && (dmodel_member(&gen) ? gen.host != NULL : gen.host == NULL) ? PETSC_TRUE : PETSC_FALSE, fmt("dmodel_release(keep)%s on %s: no shard, host copy held, gather from it bit-identical", z, gen_on[k].name), NULL);

    PetscCall(dmodel_acquire(&gen));
    PetscCall(gather_same(&gen, out, full, &ok));
    test_report(ok && !gen.host && (dmodel_member(&gen) ? gen.lm != NULL : gen.lm == NULL) ? PETSC_TRUE : PETSC_FALSE, fmt("dmodel_acquire%s on %s: shard restored, host copy freed, gather bit-identical", z, gen_on[k].name), NULL);
    PetscCall(dmodel_destroy(&gen));
  }
  PetscCall(dmodel_destroy(&train));
  PetscCall(model_destroy(&out));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The checkpoint (rank 0): random parameters, moments from the index, step 7. */
static PetscErrorCode write_checkpoint(const ModelConfig *cfg, const char *path, Model **full)
{
  float *m, *v;

  PetscFunctionBegin;
  *full = NULL;
  if (world_rank == 0) {
    PetscCall(model_create(cfg, backend_cpu(), full));
    PetscCall(model_init_random(*full, 4242));
    PetscCall(model_optim_init(*full));
    PetscCall(PetscMalloc2((*full)->nparams, &m, (*full)->nparams, &v));
    for (size_t i = 0; i < (*full)->nparams; i++) m[i] = 1e-3f * (float)((int)(i * 37 % 101) - 50), v[i] = 1e-4f * (float)(i * 13 % 97 + 1);
    PetscCall(model_optim_set(*full, m, v, 7));
    PetscCall(PetscFree2(m, v));
  }
  PetscCall(ckpt_write(MPI_COMM_WORLD, path, &(CkptModel){"actor", *full, PETSC_TRUE, PETSC_FALSE}, 1, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  ModelConfig    cfg = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 24, .n_positions = 16, .head = MODEL_HEAD_LM};
  const MeshSpec meshes[] = {
    {"ranks 0-3 pp1 dp2 tp2", 4, {0, 1, 2, 3}, 1, 2, 2},
    {"ranks 0-3 pp2 dp2 tp1", 4, {0, 1, 2, 3}, 2, 2, 1},
    {"ranks 3,1,2,0 pp2 dp1 tp2", 4, {3, 1, 2, 0}, 2, 1, 2},
    {"ranks 2,3 dp2", 2, {2, 3}, 1, 2, 1},
  };
  char        dir[PETSC_MAX_PATH_LEN], path[PETSC_MAX_PATH_LEN + 16];
  Model      *full;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(comm_setup());
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  test_collective(MPI_COMM_WORLD);
  PetscCheck(world_size >= 4, PETSC_COMM_WORLD, PETSC_ERR_ARG_SIZ, "test_exec needs 4 ranks (mpiexec -n 4), not %d", world_size);
  PetscCall(test_levels());
  PetscCallMPI(MPI_Comm_dup(MPI_COMM_WORLD, &side));
  PetscCall(test_graph_run());
  PetscCall(test_graph_late());
  PetscCallMPI(MPI_Comm_free(&side));
  test_rows();
  for (size_t k = 0; k < sizeof meshes / sizeof meshes[0]; k++) PetscCall(test_share(&meshes[k]));

  PetscCall(test_tmpdir(dir, sizeof dir, "test_exec"));
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/model.h5", dir));
  PetscCall(write_checkpoint(&cfg, path, &full));
  PetscCall(test_dmodel(&cfg, full, path, PETSC_FALSE));
  PetscCall(test_dmodel(&cfg, full, path, PETSC_TRUE));
  PetscCall(model_destroy(&full));

  PetscCall(realloc_cache_destroy());
  PetscCall(comm_teardown());
  PetscCall(PetscFinalize());
  return test_tally();
}
