/* replay.c: plays a fused schedule (each rank its list, in order; a task
 * starts when its rank is free and its dependencies are done) to get its
 * makespan, or finds that it deadlocks; peak activation memory per rank; the
 * sequential 1F1B baseline; the validity check of a schedule from a file. */
#include "ac_impl.h"
#include "schedule.h"
#include <math.h>

double ac_rank_peak(const ACInst *in, const int *ids_rank, int count)
{
  double cur = 0, peak = 0;
  int    n = ac_ntasks(in);

  for (int j = 0; j < count; j++) {
    ACTask t = ac_task_of(in, ids_rank[j] % n);
    cur += (t.kind == AC_F ? 1 : -1) * in->mem[t.model];
    peak = PetscMax(peak, cur);
  }
  return peak;
}

/* Each rank r runs ids[r*k .. r*k+k-1] (k may be below n: one model alone);
 * returns the makespan, +inf if some rank never gets through its list. */
static double ac_replay_lists(const ACGraph *g, const int *ids, int k, double *finish, int *ptr)
{
  int    P = g->nranks, done = 0, progress = 1;
  double makespan = 0;

  for (int i = 0; i < g->N; i++) finish[i] = -1;
  for (int r = 0; r < P; r++) ptr[r] = 0;
  /* sweep the ranks, each running as far as its dependencies allow, until
   * all are done or a sweep moves nothing (a deadlock) */
  while (progress && done < P * k) {
    progress = 0;
    for (int r = 0; r < P; r++) {
      double t_free = ptr[r] ? finish[ids[r * k + ptr[r] - 1]] : 0;
      while (ptr[r] < k) {
        int    id = ids[r * k + ptr[r]], d0 = g->dep[2 * id], d1 = g->dep[2 * id + 1];
        double start = t_free;
        if ((d0 >= 0 && finish[d0] < 0) || (d1 >= 0 && finish[d1] < 0)) break;
        if (d0 >= 0) start = PetscMax(start, finish[d0]);
        if (d1 >= 0) start = PetscMax(start, finish[d1]);
        finish[id] = t_free = start + g->dur[id];
        ptr[r]++;
        done++;
        progress = 1;
      }
      makespan = PetscMax(makespan, t_free);
    }
  }
  return done < P * k ? INFINITY : makespan;
}

double ac_replay_ids(const ACInst *in, const ACGraph *g, const int *ids, double *finish, int *ptr, double *peak,
                     double *peak_max)
{
  double makespan = ac_replay_lists(g, ids, g->n, finish, ptr);

  if (peak_max) *peak_max = 0;
  for (int r = 0; r < g->nranks; r++) {
    double p = ac_rank_peak(in, ids + r * g->n, g->n);
    if (peak) peak[r] = p;
    if (peak_max) *peak_max = PetscMax(*peak_max, p);
  }
  return makespan;
}

/* ids from a schedule's (model, kind, mb) rows; -1 rows that do not name a
 * task of this instance */
static void ac_ids_of(const ACSched *s, int *ids)
{
  const ACInst *in = &s->inst;
  for (int r = 0; r < s->nranks; r++)
    for (int j = 0; j < s->n; j++) {
      ACTask t  = s->order[r * s->n + j];
      int    ok = (t.model == 0 || t.model == 1) && (t.kind == 0 || t.kind == 1) && t.mb >= 0 &&
               t.mb < in->m[t.model == 1];
      ids[r * s->n + j] = ok ? r * s->n + ac_local(in, t.model, t.kind, t.mb) : -1;
    }
}

PetscErrorCode ac_replay(const ACSched *s, ACScore *score, double *finish)
{
  ACGraph g;
  int      *ids, *ptr;
  double   *fin;

  PetscFunctionBegin;
  PetscCall(ac_graph_build(&s->inst, &g));
  PetscCall(PetscMalloc3(g.N, &ids, g.nranks, &ptr, g.N, &fin));
  ac_ids_of(s, ids);
  for (int i = 0; i < g.N; i++)
    PetscCheck(ids[i] >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "ac_replay: rank %d task %d is not a task of this instance", i / g.n, i % g.n);
  score->makespan = ac_replay_ids(&s->inst, &g, ids, fin, ptr, score->rank_peak, &score->peak_mem);
  score->deadlock = isinf(score->makespan);
  if (finish) /* by list position, not by id */
    for (int i = 0; i < g.N; i++) finish[i] = fin[ids[i]];
  PetscCall(PetscFree3(ids, ptr, fin));
  PetscCall(ac_graph_free(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_sched_validate(const ACSched *s, const char *where)
{
  const ACInst *in = &s->inst;
  int            *ids, *seen;
  ACScore       sc = {0};

  PetscFunctionBegin;
  PetscCall(PetscMalloc2((size_t)s->nranks * s->n, &ids, s->n, &seen));
  ac_ids_of(s, ids);
  for (int r = 0; r < s->nranks; r++) {
    for (int j = 0; j < s->n; j++) seen[j] = -1;
    for (int j = 0; j < s->n; j++) {
      ACTask t = s->order[r * s->n + j];
      int      id = ids[r * s->n + j];
      if (id < 0) {
        (void)PetscFree2(ids, seen);
        SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                "%s: rank %d row %d (model %d, kind %d, micro-batch %d) is not a task (model 0/1, kind 0/1, "
                "micro-batch below m0 %d / m1 %d)",
                where, r, j, t.model, t.kind, t.mb, in->m[0], in->m[1]);
      }
      if (seen[id % s->n] >= 0) {
        int first = seen[id % s->n];
        (void)PetscFree2(ids, seen);
        SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                "%s: rank %d lists the %s %s of micro-batch %d twice (rows %d and %d)", where, r,
                t.model ? "critic" : "actor", t.kind ? "backward" : "forward", t.mb, first, j);
      }
      seen[id % s->n] = j;
    }
  }
  PetscCall(PetscFree2(ids, seen));
  /* n rows per rank, none twice: every task is there once */
  PetscCall(PetscMalloc1(s->nranks, &sc.rank_peak));
  PetscCall(ac_replay(s, &sc, NULL));
  for (int r = 0; r < s->nranks && in->mem_cap > 0; r++)
    if (sc.rank_peak[r] > in->mem_cap) {
      double p = sc.rank_peak[r];
      PetscCall(PetscFree(sc.rank_peak));
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
              "%s: rank %d holds %g of activations at its peak, above the memory cap %g", where, r, p, in->mem_cap);
    }
  PetscCall(PetscFree(sc.rank_peak));
  PetscCheck(!sc.deadlock, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: the schedule deadlocks (some rank's next task waits for a task that can never run)", where);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The 1F1B order of one model alone, as ids into the fused graph. */
static PetscErrorCode ac_1f1b_ids(const ACInst *in, int x, int *ids)
{
  int        n = ac_ntasks(in), m = in->m[x], ns;
  SchedTask *tl;

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(2 * m, &tl));
  for (int r = 0; r < in->pp[0]; r++) {
    PetscCall(sched_1f1b(in->pp[x], ac_stage(in, x, r), m, tl, &ns));
    for (int j = 0; j < 2 * m; j++) ids[r * 2 * m + j] = r * n + ac_local(in, x, tl[j].kind, tl[j].mb);
  }
  PetscCall(PetscFree(tl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_1f1b_start(const ACInst *in, int x, double *start)
{
  ACGraph g;
  int      *ids, *ptr, k = 2 * in->m[x];
  double   *fin, mk;

  PetscFunctionBegin;
  PetscCall(ac_graph_build(in, &g));
  PetscCall(PetscMalloc3(g.nranks * k, &ids, g.nranks, &ptr, g.N, &fin));
  PetscCall(ac_1f1b_ids(in, x, ids));
  mk = ac_replay_lists(&g, ids, k, fin, ptr);
  PetscCheck(!isinf(mk), PETSC_COMM_SELF, PETSC_ERR_PLIB, "ac_1f1b_start: 1F1B of model %d deadlocked", x);
  for (int i = 0; i < g.nranks * k; i++) start[ids[i]] = fin[ids[i]] - g.dur[ids[i]];
  PetscCall(PetscFree3(ids, ptr, fin));
  PetscCall(ac_graph_free(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_sequential(const ACInst *in, ACSched *s, ACScore *score)
{
  ACGraph g;
  int       P = in->pp[0], n = ac_ntasks(in), *ids[2], *ptr;
  double   *fin;

  PetscFunctionBegin;
  PetscCall(ac_graph_build(in, &g));
  PetscCall(PetscMalloc4(P * 2 * in->m[0], &ids[0], P * 2 * in->m[1], &ids[1], P, &ptr, g.N, &fin));
  score->makespan = 0;
  score->peak_mem = 0;
  score->deadlock = 0;
  for (int r = 0; r < P && score->rank_peak; r++) score->rank_peak[r] = 0;
  for (int x = 0; x < 2; x++) {
    int k = 2 * in->m[x];
    PetscCall(ac_1f1b_ids(in, x, ids[x]));
    {
      double mk = ac_replay_lists(&g, ids[x], k, fin, ptr);
      PetscCheck(!isinf(mk), PETSC_COMM_SELF, PETSC_ERR_PLIB, "ac_sequential: 1F1B of model %d deadlocked", x);
      score->makespan += mk; /* the critic starts when the actor is done */
    }
    for (int r = 0; r < P; r++) {
      double pk = ac_rank_peak(in, ids[x] + r * k, k);
      if (score->rank_peak) score->rank_peak[r] = PetscMax(score->rank_peak[r], pk);
      score->peak_mem = PetscMax(score->peak_mem, pk);
    }
  }
  if (s) {
    PetscCall(ac_sched_alloc(in, s));
    for (int r = 0; r < P; r++) {
      for (int j = 0; j < 2 * in->m[0]; j++) s->order[r * n + j] = ac_task_of(in, ids[0][r * 2 * in->m[0] + j] % n);
      for (int j = 0; j < 2 * in->m[1]; j++)
        s->order[r * n + 2 * in->m[0] + j] = ac_task_of(in, ids[1][r * 2 * in->m[1] + j] % n);
    }
  }
  PetscCall(PetscFree4(ids[0], ids[1], ptr, fin));
  PetscCall(ac_graph_free(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}
