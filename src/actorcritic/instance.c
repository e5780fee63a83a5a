/* instance.c: the fused pipeline's instance (placement of both models'
 * stages on the ranks), its task graph, and the lower bound on the makespan. */
#include "ac_impl.h"
#include <math.h>
#include <stdio.h>

PetscErrorCode ac_inst_check(const ACInst *in, const char *opt)
{
  char f[2][32], m[2][32], cap[32]; /* snprintf's %g: PETSc's prints 2 as "2." */

  PetscFunctionBegin;
  for (int x = 0; x < 2; x++) {
    snprintf(f[x], sizeof f[x], "%g", in->f[x]);
    snprintf(m[x], sizeof m[x], "%g", in->mem[x]);
  }
  snprintf(cap, sizeof cap, "%g", in->mem_cap);
  PetscCheck(in->pp[0] >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "%spp0 %d: the actor needs at least 1 stage",
             opt, in->pp[0]);
  PetscCheck(in->pp[1] >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "%spp1 %d: the critic needs at least 1 stage",
             opt, in->pp[1]);
  PetscCheck(in->pp[0] % in->pp[1] == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "%spp1 %d does not divide %spp0 %d (the critic is replicated pp0/pp1 times)", opt, in->pp[1], opt,
             in->pp[0]);
  for (int x = 0; x < 2; x++) {
    PetscCheck(in->m[x] >= 1 && in->m[x] <= (1 << 20), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "%sm%d %d: micro-batches must be in 1..%d", opt, x, in->m[x], 1 << 20);
    PetscCheck(in->f[x] > 0 && isfinite(in->f[x]), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "%sf%d %s: the forward time must be positive", opt, x, f[x]);
    PetscCheck(in->mem[x] >= 0 && isfinite(in->mem[x]), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "%smem%d %s: the activation memory must be >= 0", opt, x, m[x]);
  }
  PetscCheck(in->mem_cap >= 0 && isfinite(in->mem_cap), PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "%smem_cap %s must be >= 0 (0: no cap)", opt, cap);
  /* a rank must hold at least one micro-batch of each model at some point;
   * one at a time always fits (each micro-batch through all stages and back
   * before the next), so the larger of the two is the least cap */
  PetscCheck(in->mem_cap == 0 || in->mem_cap >= PetscMax(in->mem[0], in->mem[1]), PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE,
             "%smem_cap %s is below one micro-batch's activations (%smem0 %s, %smem1 %s): no schedule fits", opt, cap,
             opt, m[0], opt, m[1]);
  PetscFunctionReturn(PETSC_SUCCESS);
}

int ac_ntasks(const ACInst *in) { return 2 * in->m[0] + 2 * in->m[1]; }

int ac_stage(const ACInst *in, int x, int r) { return x == AC_ACTOR ? r : in->pp[1] - 1 - r % in->pp[1]; }

int ac_rank(const ACInst *in, int x, int copy, int s)
{
  return x == AC_ACTOR ? s : copy * in->pp[1] + in->pp[1] - 1 - s;
}

double ac_lower_bound(const ACInst *in)
{
  double work = 3 * (in->m[0] * in->f[0] + in->m[1] * in->f[1]);
  /* each model's critical path: m forwards and backwards on one stage plus
   * the pipeline's fill and drain (the critic's binds only when the actor's
   * work is tiny; the published bounds never needed it) */
  double lb = PetscMax((in->m[0] + in->pp[0] - 1) * 3 * in->f[0], (in->m[1] + in->pp[1] - 1) * 3 * in->f[1]);

  for (int r = 0; r < in->pp[0]; r++) {
    int s0 = ac_stage(in, AC_ACTOR, r), s1 = ac_stage(in, AC_CRITIC, r);
    /* the rank idles until the first forward of either model reaches it
     * (stage s: s forwards before it), and after its last task (a backward
     * of stage s) the s backwards of the stages before it still run */
    double head = PetscMin(s0 * in->f[0], s1 * in->f[1]), tail = PetscMin(s0 * 2 * in->f[0], s1 * 2 * in->f[1]);
    lb = PetscMax(lb, head + work + tail);
  }
  return lb;
}

PetscErrorCode ac_graph_build(const ACInst *in, ACGraph *g)
{
  int n = ac_ntasks(in), P = in->pp[0];

  PetscFunctionBegin;
  g->nranks = P;
  g->n      = n;
  g->N      = P * n;
  PetscCall(PetscMalloc3(2 * g->N, &g->dep, 2 * g->N, &g->succ, g->N, &g->dur));
  for (int i = 0; i < 2 * g->N; i++) g->dep[i] = g->succ[i] = -1;
  for (int r = 0; r < P; r++)
    for (int l = 0; l < n; l++) {
      ACTask t = ac_task_of(in, l);
      int      x = t.model, s = ac_stage(in, x, r), copy = x == AC_ACTOR ? 0 : r / in->pp[1], id = r * n + l;
      int      pp = in->pp[x];

      g->dur[id] = (t.kind == AC_F ? 1 : 2) * in->f[x];
      if (t.kind == AC_F) {
        if (s > 0) g->dep[2 * id + 1] = ac_rank(in, x, copy, s - 1) * n + ac_local(in, x, AC_F, t.mb);
        if (s < pp - 1) g->succ[2 * id + 1] = ac_rank(in, x, copy, s + 1) * n + ac_local(in, x, AC_F, t.mb);
        g->succ[2 * id] = r * n + ac_local(in, x, AC_B, t.mb);
      } else {
        g->dep[2 * id] = r * n + ac_local(in, x, AC_F, t.mb);
        if (s < pp - 1) g->dep[2 * id + 1] = ac_rank(in, x, copy, s + 1) * n + ac_local(in, x, AC_B, t.mb);
        if (s > 0) g->succ[2 * id + 1] = ac_rank(in, x, copy, s - 1) * n + ac_local(in, x, AC_B, t.mb);
      }
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_graph_free(ACGraph *g)
{
  PetscFunctionBegin;
  PetscCall(PetscFree3(g->dep, g->succ, g->dur));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_sched_alloc(const ACInst *in, ACSched *s)
{
  PetscFunctionBegin;
  s->inst   = *in;
  s->nranks = in->pp[0];
  s->n      = ac_ntasks(in);
  PetscCall(PetscMalloc1((size_t)s->nranks * s->n, &s->order));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ac_sched_free(ACSched *s)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(s->order));
  PetscFunctionReturn(PETSC_SUCCESS);
}
