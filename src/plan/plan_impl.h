/* plan_impl.h: what the files of src/plan share and nobody else sees: rank
 * lists in their option syntax, the presets, and which calls are in use. */
#ifndef RLFUSE_PLAN_IMPL_H
#define RLFUSE_PLAN_IMPL_H

#include "plan.h"

/* Room for a rank list as shown in messages and tables; longer lists end in "...". */
#define PLAN_RANKS_STR 256

/* A call takes part when the mode gives it a model; NULL needs: every call
 * (a plan printed or recorded before the mode is known). */
static inline PetscBool plan_in_use(const PlanNeeds *needs, int c)
{
  return (!needs || needs->cfg[c]) ? PETSC_TRUE : PETSC_FALSE;
}

/* Parses the value of option `opt` ("0-3", "0,2,5", "0-1,4-5") into the
 * call's ranks; errors name the option and the value. */
PetscErrorCode plan_ranks_parse(const char *opt, const char *value, PlanCall *call);
/* Appends the pair (a, b) unless it is there already, in either order. */
PetscErrorCode plan_concurrent_add(Plan *plan, MFCId a, MFCId b);
/* -fuse_train (fuse_train.c): the flag is read with the settings, before the
 * calls' options (a fused critic_train's grid is not checked against its old
 * ranks there), and after them critic_train's mesh is derived from
 * actor_train's; file_fused: the base was a fused plan file. The check runs
 * in plan_check. */
PetscErrorCode plan_fuse_train_derive(Plan *plan, PetscBool file_fused);
PetscErrorCode plan_fuse_train_check(const Plan *plan, const PlanNeeds *needs);

/* The plan's settings (settings.c: offload, zero1, bucket_mb, the -fuse_*
 * options), one table for all: the defaults; the options (any: something
 * was given), range-checked naming the option; their /plan attributes
 * (names and values, returns the count) and reading them back, checked
 * naming the file; a copy of them from another plan. */
void           plan_settings_default(Plan *plan);
PetscErrorCode plan_settings_from_options(Plan *plan, PetscBool *any);
int            plan_settings_attrs(const Plan *plan, const char **names, double *values);
PetscErrorCode plan_settings_read(IoId g, const char *where, Plan *plan);
void           plan_settings_copy(Plan *dst, const Plan *src);
#define PLAN_MAX_SETTINGS 16
/* An attribute that must be a whole number in [lo, hi] (a double as
 * written, or an integer in a hand-made file); errors name where. */
PetscErrorCode plan_attr_int(IoId obj, const char *where, const char *name, int lo, int hi, int *v);
/* The fusion mode against the plan's meshes (PPO only: generation and the
 * inference calls in use). */
PetscErrorCode plan_check_fusion(const Plan *plan, const PlanNeeds *needs);

#endif
