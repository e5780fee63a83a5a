/* plan: the -plan_ options of the plan search and of -mode plan. src/plan
 * owns the -plan_ prefix; src/search receives these values instead of
 * reading the options itself, so each option has one default and one check. */
#include "plan_impl.h"

PetscErrorCode plan_search_options(PlanSearchOptions *o)
{
  PetscInt  iters = 0, mbs = 8, chains = 2;
  PetscReal time_s = 60, temp = 0.3;
  PetscBool fusion = PETSC_TRUE, settings = PETSC_TRUE;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, "plan_", "Plan search (-mode plan, -placement auto)", NULL);
  RfOptReal("-time",
            "Wall-clock budget of the plan search, seconds: the presets' tuning, the annealing (it also stops at "
            "-plan_iterations) and the final polish",
            time_s, &time_s);
  RfOptInt("-iterations",
           "Annealing iterations of each chain; the temperature cools over them, and unless -plan_time stops a chain "
           "first (-plan_time 0: no budget) a seed gives one plan, whatever the thread count (0: no cap, the "
           "temperature cools over -plan_time, and the plan depends on the machine's speed)",
           iters, &iters);
  RfOptInt("-chains",
           "Independent annealing chains without the fusion states, and as many with them (-plan_search_fusion); they "
           "run on the OpenMP threads",
           chains, &chains);
  RfOptReal("-temperature",
            "Initial annealing temperature as a fraction of the start plan's time per iteration (it cools to 1e-4 of "
            "that)",
            temp, &temp);
  RfOptInt("-max_mbs", "Largest micro-batch count the search tries per call (powers of two)", mbs, &mbs);
  RfOptBool("-search_fusion",
            "Also search the fusion settings (-fuse_gen_inf none, stream or migrate; -fuse_train) in chains of their "
            "own, beside the chains without them: the plan is never worse than without",
            fusion, &fusion);
  RfOptBool("-search_settings", "Also search -plan_offload and -plan_zero1", settings, &settings);
  PetscOptionsEnd();
  PetscCheck(time_s >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-plan_time %g must be >= 0 (0: no budget)",
             (double)time_s);
  PetscCheck(iters >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-plan_iterations %d must be >= 0", (int)iters);
  PetscCheck(temp > 1e-4, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-plan_temperature %g must be above the final 1e-4", (double)temp);
  PetscCheck(chains >= 1 && chains <= 1024, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-plan_chains %d must be in 1..1024", (int)chains);
  PetscCheck(mbs >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-plan_max_mbs %d must be at least 1", (int)mbs);
  o->time_s      = time_s;
  o->iterations  = (int)iters;
  o->chains      = (int)chains;
  o->temperature = temp;
  o->max_mbs     = (int)mbs;
  o->fusion      = fusion;
  o->settings    = settings;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_mode_options(PlanModeOptions *o)
{
  PetscFunctionBegin;
  o->ranks     = 0;
  o->output[0] = o->timeline[0] = '\0';
  PetscOptionsBegin(PETSC_COMM_WORLD, "plan_", "Plan search (-mode plan)", NULL);
  RfOptInt("-ranks", "-mode plan: ranks (devices) to plan for (required)", o->ranks, &o->ranks);
  RfOptString("-output", "-mode plan: write the best plan here (HDF5 /plan, run it with -plan_file)", o->output,
              sizeof o->output);
  RfOptString("-timeline",
              "-mode plan: write the best plan's simulated /timeline here (tools/plot_timeline.py draws it)",
              o->timeline, sizeof o->timeline);
  PetscOptionsEnd();
  PetscFunctionReturn(PETSC_SUCCESS);
}
