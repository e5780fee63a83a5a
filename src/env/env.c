/* env.c: what every environment (inc/env.h) shares. */
#include "env.h"

PetscErrorCode env_destroy(Env **env)
{
  PetscFunctionBegin;
  if (!*env) PetscFunctionReturn(PETSC_SUCCESS);
  if ((*env)->ops && (*env)->ops->destroy) PetscCall((*env)->ops->destroy(*env));
  PetscCall(PetscFree(*env));
  PetscFunctionReturn(PETSC_SUCCESS);
}
