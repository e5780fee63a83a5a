/* search: the execution-plan search (docs/planning.md). Simulated annealing
 * over Plans, written against an objective that estimates a plan (in a run:
 * cost_estimate from inc/cost.h; in tests: any function of the plan). A
 * move changes one call's mesh, its dp x tp x pp, its micro-batches, or one
 * setting (offload, ZeRO-1, the fusion of generation and inference,
 * -fuse_train). Plans that plan_check refuses or the objective calls
 * infeasible are rejected. With an iteration cap, deterministic for a seed:
 * every draw is keyed by (seed, iteration) and the temperature follows the
 * iterations (a time budget can only cut the trajectory short); without a
 * cap the temperature cools over the time budget and the plan depends on
 * the machine's speed. */
#ifndef RLFUSE_SEARCH_H
#define RLFUSE_SEARCH_H

#include "cost.h"
#include "sys.h"

/* The estimate of a plan that plan_check has accepted. */
typedef PetscErrorCode (*SearchObjective)(void *ctx, const Plan *plan, CostEstimate *est);

typedef struct {
  int              world;          /* ranks the plans are for */
  int              ranks_per_node; /* meshes are inside a node or whole nodes; tp stays inside a node */
  const PlanNeeds *needs;          /* the calls in use, their models and batches */
  int              max_mbs;        /* largest micro-batch count tried (powers of two up to it) */
  PetscBool        settings;       /* also search offload and ZeRO-1 */
  PetscBool        fusion;         /* also search -fuse_gen_inf (none, stream) and -fuse_train */
} SearchSpaceSpec;

typedef struct SearchSpace_ *SearchSpace;

/* The candidate meshes (contiguous rank ranges: inside one node, aligned to
 * their size, or whole nodes) and, for each call in use and mesh size, the
 * valid (dp, tp, pp, mbs): tp dividing the heads and the vocabulary and at
 * most a node, pp at most the layers, dp * mbs dividing the call's batch. */
PetscErrorCode search_space_create(const SearchSpaceSpec *spec, SearchSpace *sp);
PetscErrorCode search_space_destroy(SearchSpace *sp);
/* The number of plans search_enumerate would visit (a double: it overflows). */
double search_space_size(SearchSpace sp);

typedef struct {
  uint64_t  seed;
  long      max_iter;  /* iteration cap; the temperature reaches t_end here (0: cool over time_s) */
  double    time_s;    /* wall-clock budget (0: none) */
  double    t_start;   /* initial temperature as a fraction of the start plan's time */
  double    t_end;     /* final temperature, same unit */
  int       chains;    /* independent chains per group (chains.c): without the fusion states, and with them */
} SearchOptions;

typedef struct {
  Plan         plan;        /* the best plan found */
  CostEstimate est;
  long         iters, accepted, improved, refused_check, refused_infeasible;
  double       seconds;
  PetscBool    timed_out;   /* the time budget ended the search before the cap */
  int          start;       /* the start plan the search began from */
  int          chains;      /* chains run, both groups */
  int          chain;       /* the chain (in its group) whose plan won */
  PetscBool    fused_group; /* it was a chain that searched the fusion states */
  int          threads;     /* the threads the chains ran on */
  PetscBool    has_fused;   /* a plan with fusion was seen (that passes the checks) */
  Plan         fused;       /* the best such plan seen (tuned), whether or not it won; infeasible when none fits */
  CostEstimate fused_est;
} SearchResult;

/* Defaults: seed 1, 20000 iterations, no time budget, temperature from 30%
 * to 0.01% of the start plan's time, 2 chains per group. */
void search_options_default(SearchOptions *o);

/* The plan's cost as the search sees it: the estimated seconds per
 * iteration when feasible; otherwise 1e6 s plus the peak memory in GB, so
 * that from an infeasible start the search walks towards plans that fit. */
double search_cost(const CostEstimate *est);

/* Checks a plan and estimates it: *ok false when plan_check refuses it
 * (without a message: errors are returned silently). Remembered: a plan
 * seen before is answered from the space's cache (src/search/cache.c). */
PetscErrorCode search_evaluate(SearchSpace sp, SearchObjective f, void *ctx, const Plan *plan, PetscBool *ok,
                               CostEstimate *est);
/* Cache hits and misses (estimates made) so far. */
void search_cache_stats(SearchSpace sp, long *hits, long *misses);

/* Simulated annealing from the nstart start plans (presets) that pass the
 * checks, in o->chains independent chains over the space without its fusion
 * states and, when the space has them, o->chains more over the whole space
 * (chain c of a group starts from the c-th best start plan, modulo their
 * number). Each group's best plan is polished, and the better of the two
 * returned (the unfused one on a tie); its source reads "search from
 * <start>". The unfused group is the whole search of the space built
 * without the fusion states, so with an iteration cap the search with them
 * never returns a worse plan. The chains run concurrently on the OpenMP
 * threads; with an iteration cap the plan does not depend on how many.
 * A time budget is shared: each chain gets its share of 75% of it (the
 * chains running in waves of as many as there are threads), the polishes
 * the rest. */
PetscErrorCode search_anneal(SearchSpace sp, SearchObjective f, void *ctx, const Plan *start, int nstart,
                             const SearchOptions *o, SearchResult *res);

/* Every plan of the space (the meshes and strategies of the calls in use,
 * and the settings searched), for checking the annealing on small spaces;
 * refuses spaces over `limit` plans. base gives what is not searched. */
PetscErrorCode search_enumerate(SearchSpace sp, SearchObjective f, void *ctx, const Plan *base, double limit,
                                SearchResult *res);

/* A heuristic plan: the start plan's meshes kept, each call's (dp, tp, pp,
 * mbs) chosen best for its mesh one call at a time (two sweeps). The
 * "tuned preset" the search is compared with. When no variant passes
 * plan_check, est is infeasible with infinite memory. */
PetscErrorCode search_tune(SearchSpace sp, SearchObjective f, void *ctx, Plan *plan, CostEstimate *est);
/* The same, stopping between two estimates once sys_wtime() passes
 * deadline (INFINITY: never) with the best plan found so far. */
PetscErrorCode search_tune_until(SearchSpace sp, SearchObjective f, void *ctx, double deadline, Plan *plan,
                                 CostEstimate *est);

/* ---- the search as a job (src/search/driver.c) ---------------------------- */
typedef struct {
  double best_preset; /* best feasible preset as given, seconds per iteration (inf: none) */
  double best_tuned;  /* best tuned preset */
  double searched;    /* the search's plan */
  double seconds;     /* the search's wall time */
} SearchSummary;

/* The plan's calls for a workload (PPO, or GRPO without the critic calls):
 * models from the work's shapes into cfg, batches from its batch and
 * mini-batches. */
void search_needs_from_work(const CostWork *w, ModelConfig cfg[4], PlanNeeds *needs);
/* The search's settings from the -plan_ options as src/plan reads them
 * (plan_search_options: -plan_time, -plan_iterations, -plan_chains,
 * -plan_temperature, -plan_max_mbs, -plan_search_fusion,
 * -plan_search_settings); the seed is -seed. */
PetscErrorCode search_settings_from_options(SearchOptions *o, SearchSpaceSpec *spec, uint64_t seed);
/* The presets (as given and tuned) and the annealing from the tuned ones,
 * for spec->world ranks; with print, the table of their estimates. Runs
 * on rank 0 of comm; every rank gets the best plan (its estimate in est_*)
 * and the summary. */
PetscErrorCode search_plan(MPI_Comm comm, const CostPrims *p, const CostWork *w, const PlanNeeds *needs,
                           const SearchSpaceSpec *spec, const SearchOptions *o, PetscBool print, Plan *best,
                           SearchSummary *sum);
/* The training calls of the stages before PPO (sft_train, rm_train;
 * src/search/stages.c), each placed alone: the fastest step that fits
 * over every strategy on every mesh size, for ZeRO-1 off and on (the
 * plan's setting, shared with PPO's calls, picks one). */
typedef struct {
  PlanCall     call[2][2];  /* [sft_train, rm_train][zero1 off, on] */
  CostEstimate est[2][2];   /* one optimizer step; infeasible when no layout fits (the closest kept) */
  PetscBool    found[2][2];
} SearchStages;
/* For the stages job uses, on spec->world ranks; runs on rank 0 of comm
 * and broadcasts (every layout tried: milliseconds, never cut by a budget).
 * A stage none of whose layouts passes plan_check is an error. */
PetscErrorCode search_stages_place(MPI_Comm comm, const CostPrims *p, const CostJob *job, const SearchSpaceSpec *spec,
                                   SearchStages *out);
/* Puts the placement for plan->zero1 into plan (calls and est_call_s). */
void search_stages_apply(const CostJob *job, const SearchStages *s, Plan *plan);

/* -mode plan: -plan_ranks N, -plan_output FILE, -plan_timeline FILE
 * (plan_mode_options), the primitives (cost_prims_paths_from_options:
 * -cost_hardware DECK, -cost_profile FILE, or by default this machine's
 * profile from the cache, -cost_profile_cache DIR) and the
 * workload: the deck's job (job_of: plan_cost_job, the -mode it overrides;
 * deck_of: ppo_cost_deck, PPO's part) and the -cost_ options; a pipeline,
 * sft or rm deck's training calls (sft_train, rm_train) are placed too
 * (search_stages_place) and written with the plan; help:
 * only register the options. */
PetscErrorCode search_mode_run(const RunCtx *run, CostDeckFn deck_of, CostJobFn job_of, PetscBool help);
/* -placement auto: reads the options search_auto will use, so that they
 * count as used when the mode's options are checked (before any model is
 * read). */
PetscErrorCode search_auto_options(void);
/* -placement auto: the search for this run's job (deck: its settings and
 * the models it read) replaces *plan; without -cost_hardware or
 * -cost_profile it profiles this machine on the run's ranks (run->be), or
 * reuses the cache's profile. */
PetscErrorCode search_auto(const RunCtx *run, const CostDeck *deck, const PlanNeeds *needs, Plan *plan);
/* -placement auto for a stage with one training call (sft_train, rm_train:
 * -mode sft, rm, and those stages of -mode pipeline): the call placed as
 * -mode plan places it, for this run's ranks and plan->zero1, into *plan
 * (its placement then reads colocate, its source "search of <call>"). */
PetscErrorCode search_auto_stage(const RunCtx *run, const CostTrainStage *st, MFCId id, Plan *plan);

#endif
