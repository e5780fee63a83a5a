/* plan: -fuse_train, the fused actor-critic training stage. The critic
 * trains on the actor_train ranks with its pipeline running the opposite
 * way (its first stage on the actor's last stage's rank), so that the two
 * models fill each other's pipeline bubbles; with fewer critic stages than
 * actor stages the critic is replicated, copy c putting its stage t on the
 * rank of actor stage c*pp1 + pp1-1-t (inc/actorcritic.h). The critic_train mesh is
 * derived here from actor_train's; the checks run with the plan's others. */
#include "plan_impl.h"

/* critic_train's mesh for a fused plan: pp1 stages, pp0/pp1 copies as dp
 * replicas (mesh order: dp, then pp). */
static void plan_fuse_train_mesh(Plan *plan, int pp1)
{
  const PlanCall *a = &plan->call[MFC_ACTOR_TRAIN];
  PlanCall       *c = &plan->call[MFC_CRITIC_TRAIN];
  int             pp0 = a->pp, copies = pp1 >= 1 && pp0 % pp1 == 0 ? pp0 / pp1 : 0;

  if (!copies || a->nranks != pp0) { /* refused by plan_fuse_train_check, which names the option */
    c->pp = pp1;
    return;
  }
  c->nranks = pp0;
  c->tp     = 1;
  c->pp     = pp1;
  c->dp     = copies;
  for (int t = 0; t < pp1; t++)
    for (int k = 0; k < copies; k++) c->ranks[t * copies + k] = a->ranks[k * pp1 + pp1 - 1 - t];
}

PetscErrorCode plan_fuse_train_derive(Plan *plan, PetscBool file_fused)
{
  PetscBool ranks, dp, tp, pp;
  int       pp1;

  PetscFunctionBegin;
  if (!plan->fuse_train) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscOptionsHasName(NULL, NULL, "-critic_train_ranks", &ranks));
  PetscCall(PetscOptionsHasName(NULL, NULL, "-critic_train_dp", &dp));
  PetscCall(PetscOptionsHasName(NULL, NULL, "-critic_train_tp", &tp));
  PetscCall(PetscOptionsHasName(NULL, NULL, "-critic_train_pp", &pp));
  PetscCheck(!ranks && !dp && !tp, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_train 1 places the critic on the -actor_train_ranks itself: drop -critic_train_%s (only "
             "-critic_train_pp and -critic_train_mbs apply)",
             ranks ? "ranks"
             : dp  ? "dp"
                   : "tp");
  /* the critic's stages: as given, as a fused plan file had them, or the actor's */
  pp1 = pp || file_fused ? plan->call[MFC_CRITIC_TRAIN].pp : plan->call[MFC_ACTOR_TRAIN].pp;
  plan_fuse_train_mesh(plan, pp1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_fuse_train_check(const Plan *plan, const PlanNeeds *needs)
{
  const PlanCall *a = &plan->call[MFC_ACTOR_TRAIN], *c = &plan->call[MFC_CRITIC_TRAIN];
  Plan            want;

  PetscFunctionBegin;
  /* a mode without actor_train (the SFT and RM stages of -mode pipeline) ignores it */
  if (!plan->fuse_train || !needs || !needs->cfg[MFC_ACTOR_TRAIN]) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(needs->cfg[MFC_CRITIC_TRAIN], PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_train 1 fuses actor_train with critic_train: the run trains no critic (its -algo has none; "
             "src/ppo/algos.c says which have one)");
  PetscCheck(a->pp >= 2, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_train 1 needs a pipelined actor_train: -actor_train_pp %d must be at least 2", a->pp);
  PetscCheck(a->tp == 1 && a->dp == 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_train 1 needs actor_train to be a pure pipeline: -actor_train_tp is %d and -actor_train_dp %d "
             "(both must be 1; not yet supported otherwise)",
             a->tp, a->dp);
  PetscCheck(c->pp >= 1 && a->pp % c->pp == 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_train 1: -critic_train_pp %d must divide -actor_train_pp %d (the critic is replicated "
             "-actor_train_pp/-critic_train_pp times)",
             c->pp, a->pp);
  /* a plan file edited by hand may disagree with the derived mesh */
  want = *plan;
  plan_fuse_train_mesh(&want, c->pp);
  PetscCheck(c->nranks == want.call[MFC_CRITIC_TRAIN].nranks && c->dp == want.call[MFC_CRITIC_TRAIN].dp && c->tp == 1,
             PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_train 1: the critic_train mesh is not the actor_train ranks in reverse stage order (a plan file's "
             "/plan/critic_train?)");
  for (int i = 0; i < c->nranks; i++)
    PetscCheck(c->ranks[i] == want.call[MFC_CRITIC_TRAIN].ranks[i], PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-fuse_train 1: the critic_train mesh is not the actor_train ranks in reverse stage order (a plan "
               "file's /plan/critic_train?)");
  PetscFunctionReturn(PETSC_SUCCESS);
}
