/* test_fuse: the fused actor-critic schedule model (src/actorcritic). The lower
 * bound on cases worked out by hand and on the 12 instances whose bounds the
 * RLHFuse solver published; the replay on small schedules whose timings are
 * worked out by hand (including deadlocks and peak memory); the sequential
 * 1F1B baseline against the 1F1B makespan formula; the search against an
 * exhaustive search over all task orders on tiny instances (the makespan,
 * then the least peak memory at it; with and without a memory cap); the search's determinism across thread counts; and the
 * validity checks of a schedule. Inter-stage fusion: the migration's plan
 * and the rerouting of inference rows on cases worked out by hand, and the
 * R_t simulation on a long tail it must see.
 *
 * The checks in detail: the fused actor-critic schedules (src/actorcritic) and the migration
 * plan, rerouting and R_t simulation of src/genfuse: the lower bound on the 12 published
 * instances and on cases worked out by hand (per-rank head + work + tail, each model's
 * critical path); the replay of small schedules against timings worked out by hand, cross-rank
 * wait cycles and a backward before its forward as deadlocks, peak memory; the sequential 1F1B
 * baseline against the 1F1B formula; the search against an exhaustive search over all task
 * orders on eight tiny instances, the makespan and then the least peak memory at it (one with
 * a memory cap); the search reaching the bound on (8,4,8,4,5,4) and (16,16,16,16,2,1); the
 * same schedule with 1 thread as with several; the validation refusing a duplicated task, a
 * micro-batch out of range, a deadlock and a schedule above the memory cap; the R_t simulation
 * by hand (unfused 45.1 s, migrated 44.2 s and picked; an inference replica of two ranks
 * headed by the freed one waits for the other, 50.2 s); the deal of streamed samples to
 * replicas (least work so far, ties from the sender's own turn) and a sample's work estimate
 * by hand
 */
#include "actorcritic.h"
#include "genfuse.h"
#include "test_report.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static ACInst inst(int pp0, int pp1, int m0, int m1, double f0, double f1)
{
  ACInst in = {{pp0, pp1}, {m0, m1}, {f0, f1}, {1, 1}, 0};
  return in;
}

/* ---- lower bound ------------------------------------------------------- */
static void test_lower_bound(void)
{
  /* (pp0, pp1, m0, m1, f0, f1) and the bounds the RLHFuse solver printed */
  static const int IN[12][7] = {{8, 4, 32, 16, 5, 4, 708},  {8, 4, 16, 8, 5, 4, 372},    {8, 4, 8, 4, 5, 4, 225},    {8, 8, 32, 32, 5, 2, 702},
                               {8, 8, 16, 16, 5, 2, 366},  {8, 8, 8, 8, 5, 2, 225},     {16, 8, 64, 32, 2, 2, 618}, {16, 8, 32, 16, 2, 2, 330},
                               {16, 8, 16, 8, 2, 2, 186},  {16, 16, 64, 64, 2, 1, 606}, {16, 16, 32, 32, 2, 1, 318}, {16, 16, 16, 16, 2, 1, 186}};
  char detail[256] = "";
  int  ok = 1;
  for (int k = 0; k < 12; k++) {
    ACInst in = inst(IN[k][0], IN[k][1], IN[k][2], IN[k][3], IN[k][4], IN[k][5]);
    double   lb = ac_lower_bound(&in);
    if (lb != IN[k][6] && ok) {
      ok = 0;
      snprintf(detail, sizeof detail, "instance %d (%d,%d,%d,%d,%d,%d): %g, published %d", k, IN[k][0], IN[k][1], IN[k][2], IN[k][3], IN[k][4], IN[k][5], lb, IN[k][6]);
    }
  }
  test_report(ok, "lower bound: the 12 published instances", "%s", detail);
  {
    /* (8,4,32,16,5,4) by hand: work per rank 32*15 + 16*12 = 672; rank 4
     * holds actor stage 4 (first forward at 4*5 = 20) and critic copy 1's
     * stage 3 (3*4 = 12): head 12; tails: actor 4 backwards of 10 = 40,
     * critic 3 of 8 = 24: tail 24. 12 + 672 + 24 = 708, above the actor's
     * critical path (32+7)*15 = 585 and every other rank. Here: f1 = 6 makes
     * rank 4's critic head 18, tail 36: 18 + 32*15 + 16*18 + 36 = 822; rank
     * 5 (actor 5: 25, 50; critic 2: 12, 24): 12 + 768 + 24 = 804. */
    ACInst in = inst(8, 4, 32, 16, 5, 6);
    snprintf(detail, sizeof detail, "%g", ac_lower_bound(&in));
    test_report(ac_lower_bound(&in) == 822, "lower bound: (8,4,32,16,5,6) = 822 by hand", "%s", detail);
  }
  {
    /* the critic's critical path binds: (4,4,1,8,1,3): (8+3)*9 = 99 against
     * the actor's 12 and work 3 + 72 plus at most head 3 + tail 6 */
    ACInst in = inst(4, 4, 1, 8, 1, 3);
    snprintf(detail, sizeof detail, "%g", ac_lower_bound(&in));
    test_report(ac_lower_bound(&in) == 99, "lower bound: (4,4,1,8,1,3) = 99, the critic's critical path", "%s", detail);
  }
  {
    /* critical path binds: (4,4,8,1,1,1): (8+3)*3 = 33 against work 27 +
     * heads/tails at most 1+2 */
    ACInst in = inst(4, 4, 8, 1, 1, 1);
    snprintf(detail, sizeof detail, "%g", ac_lower_bound(&in));
    test_report(ac_lower_bound(&in) == 33, "lower bound: (4,4,8,1,1,1) = 33, the actor's critical path", "%s", detail);
  }
}

/* ---- replay ------------------------------------------------------------- */
#define T(x, k, mb) ((ACTask){x, k, mb})
static PetscErrorCode replay_lists(const ACInst *in, const ACTask *r0, const ACTask *r1, ACScore *sc, double *fin)
{
  ACSched s;
  PetscFunctionBegin;
  PetscCall(ac_sched_alloc(in, &s));
  memcpy(s.order, r0, s.n * sizeof *r0);
  memcpy(s.order + s.n, r1, s.n * sizeof *r1);
  PetscCall(ac_replay(&s, sc, fin));
  PetscCall(ac_sched_free(&s));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_replay(void)
{
  /* pp 2 each way, one micro-batch each, f = 1: rank 0 holds actor stage 0
   * and critic stage 1, rank 1 actor stage 1 and critic stage 0. */
  ACInst  in = inst(2, 2, 1, 1, 1, 1);
  ACScore sc = {0};
  double    fin[8], peak[2];
  char      detail[256];
  int       ok;

  PetscFunctionBegin;
  in.mem[1] = 10;
  sc.rank_peak = peak;
  {
    /* both start at once: r0 A.F 0-1 | r1 C.F 0-1; r0 C.F 1-2 | r1 A.F 1-2;
     * r0 C.B 2-4 | r1 A.B 2-4; r0 A.B 4-6 | r1 C.B 4-6. Memory: r0 holds
     * A (1) then A+C (11); r1 C (10) then C+A (11). */
    const ACTask r0[4] = {T(0, 0, 0), T(1, 0, 0), T(1, 1, 0), T(0, 1, 0)}, r1[4] = {T(1, 0, 0), T(0, 0, 0), T(0, 1, 0), T(1, 1, 0)};
    const double   want[8] = {1, 2, 4, 6, 1, 2, 4, 6};
    PetscCall(replay_lists(&in, r0, r1, &sc, fin));
    ok = sc.makespan == 6 && !sc.deadlock && peak[0] == 11 && peak[1] == 11 && sc.peak_mem == 11;
    for (int i = 0; i < 8; i++) ok = ok && fin[i] == want[i];
    snprintf(detail, sizeof detail, "makespan %g, finishes %g %g %g %g | %g %g %g %g, peaks %g %g", sc.makespan, fin[0], fin[1], fin[2], fin[3], fin[4], fin[5], fin[6], fin[7], peak[0], peak[1]);
    test_report(ok, "replay: fused 2+2 stages, one micro-batch each, by hand (makespan 6 = the bound)", "%s", detail);
  }
  {
    /* r0 starts with the critic's forward, which waits for r1's (ends 1):
     * r0 C.F 1-2, A.F 2-3, C.B 3-5; r1 C.F 0-1, A.F waits for r0's: 3-4,
     * A.B 4-6, C.B waits r0's C.B (5) and its rank (6): 6-8; r0 A.B waits
     * r1's A.B (6): 6-8. */
    const ACTask r0[4] = {T(1, 0, 0), T(0, 0, 0), T(1, 1, 0), T(0, 1, 0)}, r1[4] = {T(1, 0, 0), T(0, 0, 0), T(0, 1, 0), T(1, 1, 0)};
    const double   want[8] = {2, 3, 5, 8, 1, 4, 6, 8};
    PetscCall(replay_lists(&in, r0, r1, &sc, fin));
    ok = sc.makespan == 8 && !sc.deadlock;
    for (int i = 0; i < 8; i++) ok = ok && fin[i] == want[i];
    snprintf(detail, sizeof detail, "makespan %g, finishes %g %g %g %g | %g %g %g %g", sc.makespan, fin[0], fin[1], fin[2], fin[3], fin[4], fin[5], fin[6], fin[7]);
    test_report(ok, "replay: a worse order, by hand (makespan 8)", "%s", detail);
  }
  {
    /* r0 waits on r1's critic forward, which r1 runs after its actor
     * forward, which waits on r0's actor forward, after r0's critic one */
    const ACTask r0[4] = {T(1, 0, 0), T(0, 0, 0), T(1, 1, 0), T(0, 1, 0)}, r1[4] = {T(0, 0, 0), T(1, 0, 0), T(0, 1, 0), T(1, 1, 0)};
    PetscCall(replay_lists(&in, r0, r1, &sc, NULL));
    snprintf(detail, sizeof detail, "makespan %g, deadlock %d", sc.makespan, sc.deadlock);
    test_report(sc.deadlock && isinf(sc.makespan), "replay: a cross-rank wait cycle is a deadlock", "%s", detail);
  }
  {
    const ACTask r0[4] = {T(0, 1, 0), T(0, 0, 0), T(1, 0, 0), T(1, 1, 0)}, r1[4] = {T(1, 0, 0), T(0, 0, 0), T(0, 1, 0), T(1, 1, 0)};
    PetscCall(replay_lists(&in, r0, r1, &sc, NULL));
    snprintf(detail, sizeof detail, "makespan %g, deadlock %d", sc.makespan, sc.deadlock);
    test_report(sc.deadlock, "replay: a backward listed before its forward is a deadlock", "%s", detail);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- sequential baseline ------------------------------------------------- */
static PetscErrorCode test_sequential(void)
{
  /* 1F1B alone takes (m + pp - 1) * 3f: actor (3+3)*3 = 18, critic (copies
   * in parallel) (2+1)*6 = 18; 1F1B holds min(pp - s, m) micro-batches on
   * stage s: at most 3 of the actor's (m0 = 3) */
  ACInst  in = inst(4, 2, 3, 2, 1, 2);
  ACScore sc = {0};
  char      detail[128];

  PetscFunctionBegin;
  PetscCall(ac_sequential(&in, NULL, &sc));
  snprintf(detail, sizeof detail, "makespan %g, peak %g", sc.makespan, sc.peak_mem);
  test_report(sc.makespan == 36 && sc.peak_mem == 3, "sequential: actor 1F1B then critic 1F1B, (4,2,3,2,1,2): 18 + 18, peak 3", "%s", detail);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- exhaustive search on tiny instances --------------------------------- */
/* every order of one rank's n tasks with each forward before its backward */
static void orders_rec(const ACInst *in, int n, int depth, int *used, ACTask *cur, ACTask *all, int *count, int cap)
{
  if (depth == n) {
    if (*count < cap) memcpy(all + (size_t)(*count) * n, cur, n * sizeof *cur);
    (*count)++;
    return;
  }
  for (int x = 0; x < 2; x++)
    for (int k = 0; k < 2; k++)
      for (int mb = 0; mb < in->m[x]; mb++) {
        int id = x * 2 * in->m[0] + k * in->m[x] + mb;
        if (used[id] || (k == 1 && !used[x * 2 * in->m[0] + mb])) continue;
        used[id]   = 1;
        cur[depth] = T(x, k, mb);
        orders_rec(in, n, depth + 1, used, cur, all, count, cap);
        used[id] = 0;
      }
}

static PetscErrorCode exhaustive(const ACInst *in, double *best_mk, double *best_pk)
{
  int       n = ac_ntasks(in), P = in->pp[0], no = 0, cap = 4096, used[64] = {0}, idx[16] = {0};
  ACTask *all, cur[64];
  ACSched s;
  ACScore sc = {0};

  PetscFunctionBegin;
  PetscCall(PetscMalloc1((size_t)cap * n, &all));
  orders_rec(in, n, 0, used, cur, all, &no, cap);
  PetscCheck(no <= cap, PETSC_COMM_SELF, PETSC_ERR_PLIB, "too many orders");
  PetscCall(ac_sched_alloc(in, &s));
  *best_mk = *best_pk = INFINITY;
  for (;;) { /* odometer over the ranks' orders */
    for (int r = 0; r < P; r++) memcpy(s.order + r * n, all + (size_t)idx[r] * n, n * sizeof *all);
    PetscCall(ac_replay(&s, &sc, NULL));
    if (!sc.deadlock && (in->mem_cap == 0 || sc.peak_mem <= in->mem_cap) && (sc.makespan < *best_mk || (sc.makespan == *best_mk && sc.peak_mem < *best_pk))) *best_mk = sc.makespan, *best_pk = sc.peak_mem;
    int r = 0;
    while (r < P && ++idx[r] == no) idx[r++] = 0;
    if (r == P) break;
  }
  PetscCall(ac_sched_free(&s));
  PetscCall(PetscFree(all));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_exhaustive(void)
{
  static const double IN[][7] = {
    {2, 2, 1, 1, 1, 1, 0}, {2, 2, 2, 1, 2, 1, 0}, {2, 1, 2, 1, 1, 3, 0}, {2, 1, 1, 2, 2, 1, 0}, {3, 3, 1, 1, 1, 2, 0}, {3, 1, 1, 1, 2, 1, 0}, {4, 2, 1, 1, 1, 1, 0}, {2, 2, 2, 1, 1, 1, 2},
  };
  ACOptimizeOpts opt = {7, 2, 400, 4};

  PetscFunctionBegin;
  for (size_t k = 0; k < sizeof IN / sizeof IN[0]; k++) {
    ACInst       in = inst((int)IN[k][0], (int)IN[k][1], (int)IN[k][2], (int)IN[k][3], IN[k][4], IN[k][5]);
    ACSched      s;
    ACOptimizeInfo info;
    ACScore      rp = {0};
    double         mk = 0, pk = 0;
    char           what[240], detail[200];

    in.mem_cap = IN[k][6];
    PetscCall(exhaustive(&in, &mk, &pk));
    PetscCall(ac_optimize(&in, &opt, &s, &info));
    PetscCall(ac_replay(&s, &rp, NULL));
    snprintf(what, sizeof what, "search = exhaustive optimum (makespan, then least peak memory) on (%g,%g,%g,%g,%g,%g)%s", IN[k][0], IN[k][1], IN[k][2], IN[k][3], IN[k][4], IN[k][5], in.mem_cap > 0 ? " with memory cap 2" : "");
    snprintf(detail, sizeof detail, "search %g (replay %g, peak %g), exhaustive %g (peak %g), bound %g", info.best.makespan, rp.makespan, rp.peak_mem, mk, pk, info.lower_bound);
    test_report(info.best.makespan == mk && rp.makespan == mk && rp.peak_mem == pk && (in.mem_cap == 0 || rp.peak_mem <= in.mem_cap) && info.lower_bound <= mk, what, "%s", detail);
    PetscCall(ac_sched_free(&s));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the search on two published instances, determinism ------------------ */
static PetscErrorCode test_search(void)
{
  ACInst       in = inst(8, 4, 8, 4, 5, 4), in2 = inst(16, 16, 16, 16, 2, 1);
  ACOptimizeOpts opt = {1, 2, 1000, 4};
  ACSched      a, b, c;
  ACOptimizeInfo ia, ib, ic;
  char           detail[200];
  int            nt = omp_get_max_threads();

  PetscFunctionBegin;
  PetscCall(ac_optimize(&in, &opt, &a, &ia));
  omp_set_num_threads(1);
  PetscCall(ac_optimize(&in, &opt, &b, &ib));
  omp_set_num_threads(nt);
  snprintf(detail, sizeof detail, "makespan %g, bound %g, greedy %g", ia.best.makespan, ia.lower_bound, ia.greedy.makespan);
  test_report(ia.best.makespan == 225 && ia.lower_bound == 225, "search: (8,4,8,4,5,4) reaches its bound 225", "%s", detail);
  snprintf(detail, sizeof detail, "%d threads vs 1: makespan %g / %g, peak %g / %g", nt, ia.best.makespan, ib.best.makespan, ia.best.peak_mem, ib.best.peak_mem);
  test_report(!memcmp(a.order, b.order, (size_t)a.nranks * a.n * sizeof *a.order), "search: the same schedule with 1 thread as with several", "%s", detail);
  PetscCall(ac_optimize(&in2, &opt, &c, &ic));
  snprintf(detail, sizeof detail, "makespan %g, bound %g", ic.best.makespan, ic.lower_bound);
  test_report(ic.best.makespan == 186, "search: (16,16,16,16,2,1) reaches its bound 186", "%s", detail);
  PetscCall(ac_sched_free(&a));
  PetscCall(ac_sched_free(&b));
  PetscCall(ac_sched_free(&c));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- validity checks ------------------------------------------------------ */
static PetscErrorCode test_validate(void)
{
  ACInst       in = inst(2, 2, 1, 1, 1, 1);
  ACSched      s;
  PetscErrorCode e;
  const ACTask good0[4] = {T(0, 0, 0), T(1, 0, 0), T(1, 1, 0), T(0, 1, 0)}, good1[4] = {T(1, 0, 0), T(0, 0, 0), T(0, 1, 0), T(1, 1, 0)};

  PetscFunctionBegin;
  PetscCall(ac_sched_alloc(&in, &s));
  memcpy(s.order, good0, sizeof good0);
  memcpy(s.order + 4, good1, sizeof good1);
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  e = ac_sched_validate(&s, "test");
  test_report(e == 0, "validate: a good schedule passes", "rejected");
  s.order[1] = T(0, 0, 0); /* the actor's forward twice, the critic's missing */
  e = ac_sched_validate(&s, "test");
  test_report(e != 0, "validate: a task listed twice is refused", "accepted");
  s.order[1] = T(1, 0, 1); /* micro-batch out of range */
  e = ac_sched_validate(&s, "test");
  test_report(e != 0, "validate: a micro-batch out of range is refused", "accepted");
  s.order[1] = T(1, 0, 0);
  s.order[0] = T(1, 0, 0), s.order[1] = T(0, 0, 0); /* r0 critic first, r1 actor first: a cycle */
  memcpy(s.order + 4, (ACTask[4]){T(0, 0, 0), T(1, 0, 0), T(0, 1, 0), T(1, 1, 0)}, 4 * sizeof(ACTask));
  e = ac_sched_validate(&s, "test");
  test_report(e != 0, "validate: a deadlocking schedule is refused", "accepted");
  memcpy(s.order, good0, sizeof good0);
  memcpy(s.order + 4, good1, sizeof good1);
  s.inst.mem_cap = 1; /* the good schedule holds 2 */
  e = ac_sched_validate(&s, "test");
  test_report(e != 0, "validate: a schedule above the memory cap is refused", "accepted");
  PetscCall(PetscPopErrorHandler());
  PetscCall(ac_sched_free(&s));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- migration ---------------------------------------------------------- */
static PetscErrorCode test_migrate_plan(void)
{
  /* 4 replicas of 4 slots: replica 0 runs 3 samples (10+20+30 cache
   * positions), replica 1 runs one (50) and has 2 waiting, replica 3 runs
   * one (5). 7 samples need 2 replicas; 5 running need 2 as well. The two
   * holding the most cache are 0 (60) and 1 (50); the sample of replica 3
   * goes to the one with the most free slots (1: 3 free, 0: 1 free). */
  static const int rep[7] = {0, 0, 0, 1, 1, 1, 3}, idx[7] = {0, 1, 2, 4, 5, 6, 12}, kvl[7] = {10, 20, 30, 50, 0, 0, 5};
  GenFuseMigIn        in = {4, 4, 0, 7, rep, idx, kvl};
  unsigned char    dest[4];
  int              to[7], m;
  char             detail[128];

  PetscFunctionBegin;
  PetscCall(genfuse_migrate_plan(&in, &m, dest, to));
  snprintf(detail, sizeof detail, "m %d dest %d%d%d%d to[6] %d", m, dest[0], dest[1], dest[2], dest[3], to[6]);
  test_report(m == 2 && dest[0] && dest[1] && !dest[2] && !dest[3] && to[6] == 1 && to[0] == 0 && to[3] == 1, "migration plan: the fewest replicas holding the most cache; a running sample to the most free slots", "%s", detail);
  in.forced = 1; /* one replica cannot hold 5 running samples in 4 slots: 2 */
  PetscCall(genfuse_migrate_plan(&in, &m, dest, to));
  snprintf(detail, sizeof detail, "m %d", m);
  test_report(m == 2, "migration plan: a forced count is raised to what the running samples need", "%s", detail);
  in.forced = 3;
  PetscCall(genfuse_migrate_plan(&in, &m, dest, to));
  snprintf(detail, sizeof detail, "m %d dest %d%d%d%d", m, dest[0], dest[1], dest[2], dest[3]);
  test_report(m == 3 && dest[3] && !dest[2] && to[6] == 3, "migration plan: forced 3 adds replica 3 (5 positions) before 2 (none); its sample stays", "%s", detail);
  {
    /* waiting samples only (R_t 1 at once), 2 replicas of 8 slots, 16 samples: both hold equal data, forced onto 1: replica 0, waiting samples of 1 queue there */
    int r2[16], i2[16], k2[16], t2[16];
    for (int i = 0; i < 16; i++) r2[i] = i / 8, i2[i] = i, k2[i] = 0;
    in = (GenFuseMigIn){2, 8, 1, 16, r2, i2, k2};
    PetscCall(genfuse_migrate_plan(&in, &m, dest, t2));
    test_report(m == 1 && dest[0] && !dest[1] && t2[15] == 0, "migration plan: everything at once onto one replica (ties: the lower index)", NULL);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static void test_reroute(void)
{
  /* 4 ranks, 8 rows, one call: ranks 0, 1 on generation replicas 0, 1 with
   * rows 0-3 and 4-7, rank 2 apart from generation (no member), rank 3 on
   * replica 2 (a member without rows). Replica 0 decodes the tail,
   * replicas 1 and 2 are freed: rank 0's finished rows 0-2 go round-robin
   * to the freed members 1 and 3; row 3, still decoding, stays. */
  int           q_rep[4] = {0, 1, -1, 2};
  unsigned char freed[3] = {0, 1, 1}, member[4] = {1, 1, 0, 1}, need[32] = {0};
  int           ok = 1;
  for (int b = 0; b < 4; b++) need[0 * 8 + b] = 1;
  for (int b = 4; b < 8; b++) need[1 * 8 + b] = 1;
  unsigned char keep[8] = {0, 0, 0, 1, 0, 0, 0, 0}; /* row 3 still decoding: it stays */
  genfuse_reroute(1, 4, 8, q_rep, freed, member, keep, need);
  for (int b = 0; b < 8; b++) {
    int want = b == 3 ? 0 : b < 4 ? (b % 2 ? 3 : 1) : 1;
    for (int q = 0; q < 4; q++) ok &= need[q * 8 + b] == (q == want);
  }
  test_report(ok, "reroute: the finished rows of the decoding rank go round-robin to the freed members, the freed keep theirs, the unfinished stay", NULL);
}

static void test_rt_sim(void)
{
  /* 2 co-located replicas of 4 slots, 8 samples of 2 prompt tokens: rows 3
   * and 7 respond 40 tokens, the rest 1; a step costs 1 s, a token of
   * inference 0.1 s. Unfused (R_t 0) both replicas decode until 40, then
   * each rank scores its 4 rows: 40 + 3*0.3 + 4.2 = 45.1. Migrating after
   * the first step (R_t 0.25: 2 of 8 left) moves row 7 to replica 0
   * (equal data: the lower index); rank 1, freed at 1 s, scores rows 4-6
   * and rank 0's finished rows 0-2 (1 + 6*0.3 = 2.8), then row 7 at 40;
   * rank 0 keeps row 3: both end at 40 + 4.2 = 44.2. */
  int           len[8], rlen[8], q_rep[2] = {0, 1};
  unsigned char need[16] = {0};
  GenFuseSim       sim;
  double        s0, s25, pick, pred;
  char          detail[128];
  for (int b = 0; b < 8; b++) rlen[b] = (b == 3 || b == 7) ? 40 : 1, len[b] = rlen[b] + 2, need[(b / 4) * 8 + b] = 1;
  sim = (GenFuseSim){8, 2, 4, 2, len, rlen, q_rep, need, 1.0, 0.1, NULL};
  s0  = genfuse_sim_stage(&sim, 0);
  s25 = genfuse_sim_stage(&sim, 0.25);
  pick = genfuse_sim_pick(&sim, &pred);
  snprintf(detail, sizeof detail, "R_t 0: %g, 0.25: %g, pick %g (%g)", s0, s25, pick, pred);
  test_report(fabs(s0 - 45.1) < 1e-9, "R_t simulation: unfused stage 45.1 s by hand", "%s", detail);
  test_report(fabs(s25 - 44.2) < 1e-9 && pick > 0 && pred <= s25 + 1e-9, "R_t simulation: migrating the two long samples onto one replica, 44.2 s by hand, and picked", "%s", detail);
  { /* one inference replica over both ranks, headed by rank 1 (all rows
     * there): freed at 1 s, it still waits for rank 0, which decodes the
     * tail to 40, then scores the 8 rows: 40 + 6*0.3 + 2*4.2 = 50.2 (as
     * two ranks of their own, rank 1 would start at 1: 48.4) */
    int head_of[2] = {1, 1};

    for (int b = 0; b < 8; b++) need[b] = 0, need[8 + b] = 1;
    sim.head_of = head_of;
    s25 = genfuse_sim_stage(&sim, 0.25);
    sim.head_of = NULL;
    s0 = genfuse_sim_stage(&sim, 0.25);
    snprintf(detail, sizeof detail, "%g s as one replica, %g s as two ranks", s25, s0);
    test_report(fabs(s25 - 50.2) < 1e-9 && fabs(s0 - 48.4) < 1e-9, "R_t simulation: an inference replica of two ranks starts when both have stopped generating, 50.2 s by hand", "%s", detail);
  }
}

static void test_deal(void)
{
  /* 3 replicas, sender 1 (ties go to the first from replica 1 on), samples
   * costing 5, 3, 4, 2, 6: 1 (all empty), 2 (0 < 5), 0, then 2 (3 against
   * 4 and 5), then 0 (4 against 5 and 5) */
  double load[3] = {0, 0, 0};
  int    got[5], want[5] = {1, 2, 0, 2, 0}, ok = 1;
  double cost[5] = {5, 3, 4, 2, 6};
  for (int i = 0; i < 5; i++) got[i] = genfuse_deal(3, load, 1, cost[i]), ok &= got[i] == want[i];
  ok &= load[0] == 10 && load[1] == 5 && load[2] == 5;
  test_report(ok, "deal: each sample to the replica with the least work so far, ties from the sender's own turn", "%d %d %d %d %d", got[0], got[1], got[2], got[3], got[4]);
  /* 12 tokens of a width-1 model: 12 (1 + 12/12); none to deal among none */
  test_report(genfuse_deal_cost(12, 1) == 24 && genfuse_deal(0, load, 0, 1) == -1, "deal: a sample's work n (1 + n / 12w) by hand; no replicas, no deal", "%g", genfuse_deal_cost(12, 1));
}

int main(int argc, char **argv)
{
  if (PetscInitialize(&argc, &argv, NULL, "Tests of the fused actor-critic schedules (src/actorcritic).\n")) return 1;
  test_lower_bound();
  if (test_replay() || test_sequential() || test_exhaustive() || test_search() || test_validate() || test_migrate_plan()) test_report(PETSC_FALSE, "the schedule tests ran to their end", "stopped by an error");
  test_reroute();
  test_deal();
  test_rt_sim();
  PetscFinalize();
  return test_tally();
}
