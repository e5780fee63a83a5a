/* plan: the fusion options of the execution plan (docs/fusion.md). Whether
 * finished samples stream from generation into the inference calls, and
 * when and where the long tail of unfinished samples migrates. Read with the
 * other plan options, checked with the plan before any work, printed and
 * stored in /plan with it. */
#include "plan_impl.h"

#include <stdio.h>
#include <string.h>

const char *const FuseModeNames[] = {"none", "stream", "migrate", "FuseMode", "FUSE_", NULL};

/* Streaming needs inference ranks that are free while generation runs
 * (migration frees generation ranks, so with migrate they may share them).
 * Inference replicas may span ranks (tp, pp): the replica's head receives
 * the samples and hands each micro-batch to the replica's other ranks, so
 * two calls that share a rank of such a replica must have the same layout
 * (one replica, one micro-batch stream: plan_same_layout). */

static const MFCId fuse_inf[3] = {MFC_REF_INF, MFC_REW_INF, MFC_CRITIC_INF};

int plan_stream_conflict(const Plan *plan, const PlanNeeds *needs, MFCId *a, MFCId *b)
{
  for (int k = 0; k < 3; k++)
    for (int j = 0; j < k; j++) {
      const PlanCall *c = &plan->call[fuse_inf[k]], *o = &plan->call[fuse_inf[j]];
      int             r;

      if (!needs->cfg[fuse_inf[k]] || !needs->cfg[fuse_inf[j]] || (c->tp * c->pp == 1 && o->tp * o->pp == 1)) continue;
      r = plan_shared_rank(o, c);
      if (r >= 0 && !plan_same_layout(o, c)) {
        if (a) *a = fuse_inf[j];
        if (b) *b = fuse_inf[k];
        return r;
      }
    }
  return -1;
}

/* Migrate: a replica of several ranks starts its inference when all of
 * them have stopped generating, so none may be outside generation while
 * another is inside (its rows would be rerouted on some of its ranks and
 * not on the others). */
int plan_migrate_split(const Plan *plan, const PlanNeeds *needs, MFCId *call, int *replica, int *in_rank)
{
  for (int k = 0; k < 3; k++) {
    const PlanCall *c = &plan->call[fuse_inf[k]];

    for (int d = 0; needs->cfg[fuse_inf[k]] && d < c->dp && c->tp * c->pp > 1; d++) {
      int in = -1, out = -1;

      for (int i = 0; i < c->pp * c->tp; i++) {
        int q = c->ranks[((i / c->tp) * c->dp + d) * c->tp + i % c->tp];
        if (plan_has_rank(plan, MFC_ACTOR_GEN, q)) in = in < 0 ? q : in;
        else out = out < 0 ? q : out;
      }
      if (in >= 0 && out >= 0) {
        if (call) *call = fuse_inf[k];
        if (replica) *replica = d;
        if (in_rank) *in_rank = in;
        return out;
      }
    }
  }
  return -1;
}

static PetscErrorCode fuse_check_stream(const Plan *plan, const PlanNeeds *needs)
{
  const char *mode = FuseModeNames[plan->fuse];
  MFCId       a, b;
  int         r, d, in;

  PetscFunctionBegin;
  for (int k = 0; k < 3; k++) {
    const PlanCall *c = &plan->call[fuse_inf[k]];
    const char     *n = mfc_names[fuse_inf[k]];

    if (!needs->cfg[fuse_inf[k]]) continue;
    r = plan_shared_rank(&plan->call[MFC_ACTOR_GEN], c);
    PetscCheck(r < 0 || plan->fuse == FUSE_MIGRATE, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-fuse_gen_inf %s: %s shares rank %d with actor_gen, so it cannot run while generation does (use "
               "-placement disaggregate, which streams into the training half, or give -%s_ranks and -actor_gen_ranks "
               "disjoint ranks, or use -fuse_gen_inf migrate)",
               mode, n, r, n);
  }
  r = plan_migrate_split(plan, needs, &a, &d, &in);
  PetscCheck(plan->fuse != FUSE_MIGRATE || r < 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_gen_inf migrate: replica %d of %s has rank %d in actor_gen and rank %d outside it; an inference "
             "replica of several ranks must lie wholly inside the generation ranks or wholly outside",
             d, mfc_names[a], in, r);
  r = plan_stream_conflict(plan, needs, &a, &b);
  PetscCheck(r < 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_gen_inf %s: %s and %s share rank %d but not their layout; an inference replica of several ranks "
             "streams as one, so calls on its ranks need the same -%s_ranks, -%s_tp and -%s_pp as it",
             mode, mfc_names[a], mfc_names[b], r, mfc_names[b], mfc_names[b], mfc_names[b]);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_check_fusion(const Plan *plan, const PlanNeeds *needs)
{
  PetscFunctionBegin;
  if (plan->fuse == FUSE_NONE || !needs->cfg[MFC_ACTOR_GEN] || !needs->cfg[MFC_REF_INF])
    PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(plan->migrate_at == -1 || (plan->migrate_at >= 0 && plan->migrate_at <= 1), PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE, "-fuse_migrate_at %g is outside [0,1]", plan->migrate_at);
  if (plan->fuse == FUSE_MIGRATE) {
    PetscCheck(plan->migrate_to <= plan->call[MFC_ACTOR_GEN].dp, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-fuse_migrate_replicas %d exceeds the %d replicas of actor_gen (-actor_gen_dp)", plan->migrate_to,
               plan->call[MFC_ACTOR_GEN].dp);
    /* the protocol moves cache shards between ranks of equal (stage, tp)
     * coordinates: tp-sharded and pipelined replicas are tested
     * (fusion_migrate.sh) */
  }
  PetscCall(fuse_check_stream(plan, needs));
  PetscFunctionReturn(PETSC_SUCCESS);
}

const char *plan_fuse_str(const Plan *plan, char *buf, size_t len)
{
  char at[32];

  if (plan->migrate_at < 0) snprintf(at, sizeof at, "auto");
  else snprintf(at, sizeof at, "%g", plan->migrate_at);
  if (plan->fuse == FUSE_NONE) snprintf(buf, len, "none");
  else if (plan->fuse == FUSE_STREAM)
    snprintf(buf, len, "stream, micro-batches of %d tokens%s", plan->fuse_tokens,
             plan->fuse_hold ? ", held until generation ends" : "");
  else
    snprintf(buf, len, "migrate at R_t %s onto %d replicas (0: fewest), micro-batches of %d tokens", at,
             plan->migrate_to, plan->fuse_tokens);
  return buf;
}
