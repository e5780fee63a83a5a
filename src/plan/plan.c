/* plan: the execution plan as data (inc/plan.h). This file holds the names,
 * rank lists in their option syntax, the questions other modules ask of a
 * plan, and the three placement presets (docs/background.md, section 4). Options are
 * read in options.c, checked in check.c, printed and stored in planio.c. */
#include "plan_impl.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

const char *const mfc_names[]      = { "actor_gen",   "ref_inf",      "rew_inf",   "critic_inf",
                                       "actor_train", "critic_train", "sft_train", "rm_train" };
const char *const PlacementNames[] = {
  "colocate", "interleave", "disaggregate", "auto", "Placement", "PLACEMENT_", NULL
};

/* ---- rank lists ------------------------------------------------------------ */
/* Digits only, so "-1", "+1", " 1" and "1e3" are malformed; values past a
 * billion are refused before they can overflow. */
static PetscBool plan_parse_rank(const char **s, int *v)
{
  long x = 0;

  if (!isdigit((unsigned char)**s)) return PETSC_FALSE;
  for (; isdigit((unsigned char)**s); (*s)++) {
    x = 10 * x + (**s - '0');
    if (x > 1000000000L) return PETSC_FALSE;
  }
  *v = (int)x;
  return PETSC_TRUE;
}

/* Items separated by commas, each a rank or an ascending range a-b; the
 * order given is the mesh order, so "4-5,0-1" is a valid list. */
static PetscBool plan_parse_ranks(const char *s, PlanCall *call)
{
  call->nranks = 0;
  for (;;) {
    int a, b;

    if (!plan_parse_rank(&s, &a)) return PETSC_FALSE;
    b = a;
    if (*s == '-') {
      s++;
      if (!plan_parse_rank(&s, &b) || b < a) return PETSC_FALSE;
    }
    for (int r = a; r <= b; r++) {
      if (call->nranks == PLAN_MAX_RANKS) return PETSC_FALSE;
      call->ranks[call->nranks++] = r;
    }
    if (!*s) return PETSC_TRUE;
    if (*s++ != ',') return PETSC_FALSE;
  }
}

PetscErrorCode plan_ranks_parse(const char *opt, const char *value, PlanCall *call)
{
  PetscFunctionBegin;
  PetscCheck(plan_parse_ranks(value, call), PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "%s '%s': expected ranks and ascending ranges separated by commas, e.g. 0-3, 0,2,5 or 0-1,4-5 (at most %d "
             "ranks)",
             opt, value, PLAN_MAX_RANKS);
  PetscFunctionReturn(PETSC_SUCCESS);
}

const char *plan_ranks_str(const PlanCall *call, char *buf, size_t len)
{
  size_t used = 0;

  snprintf(buf, len, "%s", call->nranks ? "" : "none");
  for (int i = 0, j; i < call->nranks; i = j + 1) {
    char item[32];

    for (j = i; j + 1 < call->nranks && call->ranks[j + 1] == call->ranks[j] + 1;) j++;
    if (j > i) snprintf(item, sizeof item, "%s%d-%d", i ? "," : "", call->ranks[i], call->ranks[j]);
    else snprintf(item, sizeof item, "%s%d", i ? "," : "", call->ranks[i]);
    if (used + strlen(item) + 4 >= len) { /* keep room for the ellipsis */
      snprintf(buf + used, len - used, ",...");
      break;
    }
    used += (size_t)snprintf(buf + used, len - used, "%s", item);
  }
  return buf;
}

/* ---- questions about a plan --------------------------------------------------- */
int plan_shared_rank(const PlanCall *a, const PlanCall *b)
{
  for (int i = 0; i < a->nranks; i++)
    for (int j = 0; j < b->nranks; j++)
      if (a->ranks[i] == b->ranks[j]) return a->ranks[i];
  return -1;
}

PetscBool plan_overlap(const Plan *plan, MFCId a, MFCId b)
{
  return plan_shared_rank(&plan->call[a], &plan->call[b]) >= 0 ? PETSC_TRUE : PETSC_FALSE;
}

PetscBool plan_same_layout(const PlanCall *a, const PlanCall *b)
{
  if (a->nranks != b->nranks || a->dp != b->dp || a->tp != b->tp || a->pp != b->pp) return PETSC_FALSE;
  for (int i = 0; i < a->nranks; i++)
    if (a->ranks[i] != b->ranks[i]) return PETSC_FALSE;
  return PETSC_TRUE;
}

PetscBool plan_has_rank(const Plan *plan, MFCId c, int rank)
{
  for (int i = 0; i < plan->call[c].nranks; i++)
    if (plan->call[c].ranks[i] == rank) return PETSC_TRUE;
  return PETSC_FALSE;
}

PetscErrorCode plan_concurrent_add(Plan *plan, MFCId a, MFCId b)
{
  PetscFunctionBegin;
  for (int k = 0; k < plan->nconc; k++)
    if ((plan->conc[k][0] == (int)a && plan->conc[k][1] == (int)b) ||
        (plan->conc[k][0] == (int)b && plan->conc[k][1] == (int)a))
      PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(plan->nconc < 8, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-plan_concurrent %s,%s: a plan holds at most 8 concurrent pairs", mfc_names[a], mfc_names[b]);
  plan->conc[plan->nconc][0] = (int)a;
  plan->conc[plan->nconc][1] = (int)b;
  plan->nconc++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- presets --------------------------------------------------------------------- */
/* Ranks lo..hi-1 in order as dp x tp (pp 1): consecutive ranks form a tp
 * group, so tensor parallelism stays inside a node. */
static void plan_call_set(PlanCall *call, int lo, int hi, int dp, int tp)
{
  call->nranks = hi - lo;
  for (int r = lo; r < hi; r++) call->ranks[r - lo] = r;
  call->dp  = dp;
  call->tp  = tp;
  call->pp  = 1;
  call->mbs = 0;
}

static void plan_preset_colocate(Plan *plan)
{
  for (int c = 0; c < MFC_COUNT; c++) plan_call_set(&plan->call[c], 0, plan->world, plan->world, 1);
}

/* Reference and reward do not depend on each other: each gets half of the
 * ranks and the two run at the same time. */
static PetscErrorCode plan_preset_interleave(Plan *plan)
{
  int N = plan->world, half = N / 2;

  PetscFunctionBegin;
  plan_preset_colocate(plan);
  plan_call_set(&plan->call[MFC_REF_INF], 0, half, half, 1);
  plan_call_set(&plan->call[MFC_REW_INF], half, N, N - half, 1);
  PetscCall(plan_concurrent_add(plan, MFC_REF_INF, MFC_REW_INF));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Training on the first half; generation and inference on shadow copies on
 * the second half, actor_gen as gen_replicas replicas of tp = half/replicas. */
static PetscErrorCode plan_preset_disaggregate(Plan *plan, int gen_replicas)
{
  int N = plan->world, half = N / 2, gen = N - half, reps = gen_replicas ? gen_replicas : gen;

  PetscFunctionBegin;
  PetscCheck(gen_replicas >= 0 && reps <= gen && gen % reps == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_replicas %d must divide the %d ranks of the generation half (ranks %d-%d of -placement "
             "disaggregate)",
             gen_replicas, gen, half, N - 1);
  plan->gen_replicas = reps;
  plan_preset_colocate(plan); /* sft_train and rm_train stay on every rank */
  plan_call_set(&plan->call[MFC_ACTOR_TRAIN], 0, half, half, 1);
  plan_call_set(&plan->call[MFC_CRITIC_TRAIN], 0, half, half, 1);
  plan_call_set(&plan->call[MFC_ACTOR_GEN], half, N, reps, gen / reps);
  plan_call_set(&plan->call[MFC_REF_INF], half, N, gen, 1);
  plan_call_set(&plan->call[MFC_REW_INF], half, N, gen, 1);
  plan_call_set(&plan->call[MFC_CRITIC_INF], half, N, gen, 1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Streaming needs inference ranks that are idle while generation runs: the
 * disaggregated preset's training half is, so with -fuse_gen_inf stream its
 * inference calls move there (one-rank replicas), apart from generation. */
void plan_preset_stream_apart(Plan *plan)
{
  int half = plan->world / 2;

  if (plan->placement != PLACEMENT_DISAGGREGATE || plan->fuse != FUSE_STREAM) return;
  plan_call_set(&plan->call[MFC_REF_INF], 0, half, half, 1);
  plan_call_set(&plan->call[MFC_REW_INF], 0, half, half, 1);
  plan_call_set(&plan->call[MFC_CRITIC_INF], 0, half, half, 1);
}

PetscErrorCode plan_preset(int world, Placement placement, int gen_replicas, Plan *plan)
{
  PetscFunctionBegin;
  PetscCheck(world >= 1 && world <= PLAN_MAX_RANKS, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "a plan is for 1 to %d ranks, not %d", PLAN_MAX_RANKS, world);
  PetscCheck(placement == PLACEMENT_COLOCATE || placement == PLACEMENT_AUTO || world >= 2, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_INCOMP, "-placement %s needs at least 2 ranks (the job has %d)", PlacementNames[placement],
             world);
  PetscCall(PetscMemzero(plan, sizeof *plan));
  plan->placement    = placement;
  plan->world        = world;
  plan->gen_replicas = gen_replicas;
  plan_settings_default(plan);
  PetscCall(PetscSNPrintf(plan->source, sizeof plan->source, "preset %s", PlacementNames[placement]));
  if (placement == PLACEMENT_COLOCATE || placement == PLACEMENT_AUTO) plan_preset_colocate(plan);
  else if (placement == PLACEMENT_INTERLEAVE) PetscCall(plan_preset_interleave(plan));
  else PetscCall(plan_preset_disaggregate(plan, gen_replicas));
  PetscFunctionReturn(PETSC_SUCCESS);
}
