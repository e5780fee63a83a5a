/* plan: a call's mesh. Kept apart from the pure plan code because it is the
 * one collective step (mesh_get builds communicators), so programs that only
 * build, check or store plans do not link the communication layer. */
#include "plan.h"

PetscErrorCode plan_mesh(const Plan *plan, MFCId c, const Mesh **mesh)
{
  const PlanCall *call = &plan->call[c];

  PetscFunctionBegin;
  PetscCall(mesh_get(call->ranks, call->nranks, call->pp, call->dp, call->tp, mesh));
  PetscFunctionReturn(PETSC_SUCCESS);
}
