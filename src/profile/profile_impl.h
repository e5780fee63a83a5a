/* profile_impl.h: what the files of src/profile share: the timer every
 * measurement goes through and the measurement steps of -mode profile. */
#ifndef RLFUSE_PROFILE_IMPL_H
#define RLFUSE_PROFILE_IMPL_H

#include "profile.h"
#include "model.h"

/* How measurements repeat. Every rank of the world runs every timing at
 * once (ranks without work in it run nothing), so that ranks working
 * concurrently share the machine as they do in a run. */
typedef struct {
  const Backend *be;
  int            warmup, repeats;
} ProfTimer;

/* Seconds of work(ctx): warm-up runs, then `repeats` timed runs, each
 * started together on every rank (a barrier) and ended by a backend sync;
 * each rank's median, then the largest over the ranks (the slowest rank
 * sets the pace of a step). Collective on PETSC_COMM_WORLD. */
typedef PetscErrorCode (*ProfWork)(void *ctx);
PetscErrorCode prof_time(const ProfTimer *tm, ProfWork work, void *ctx, double *seconds);

/* The grids of the model tables (measure.c). */
typedef struct {
  int     nrows, nlen, ntp, extra_layers;
  double *rows, *len;
  int    *tp;
} ProfGrid;

/* Appends two model tables for cfg's trunk: the LM head's (actor,
 * reference) and the scalar head's (critic, reward). */
PetscErrorCode prof_models(const ProfTimer *tm, const ModelConfig *cfg, const ProfGrid *grid, Profile *pf);
/* Fills the optimizer table (nparams already set) and the collective table
 * (bytes and mesh sizes already set) (collect.c). */
PetscErrorCode prof_optimizer(const ProfTimer *tm, Profile *pf);
PetscErrorCode prof_collectives(const ProfTimer *tm, Profile *pf);

/* The deck's distinct trunks (all but n_layer and the head, which the
 * tables do not depend on), the actor's first; returns their count. */
int prof_deck_trunks(const CostDeck *deck, ModelConfig trunk[4]);

/* -profile_file: the estimate of the deck's plan on `world` ranks from a
 * profile, printed (estimate.c). */
PetscErrorCode profile_estimate(const RunCtx *run, const char *file, int world, const CostDeck *deck);

#endif
