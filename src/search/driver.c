/* search: the plan search as a job. search_plan runs it for a workload
 * (presets as given and tuned, then the annealing from the tuned ones) and
 * prints the table of estimates; -mode plan (search_mode_run) reads the
 * deck's workload, searches for -plan_ranks ranks and writes the plan file
 * that -plan_file runs; -placement auto (search_auto) does the same at the
 * start of a PPO run for the models it has read. The primitives are a
 * hardware description, a given profile, or this machine's profile from
 * the profile cache (src/profile/cache.c), measured on the job's ranks when
 * the cache has none. The search runs on rank 0
 * (with a time budget, ranks could stop at different iterations) and the
 * plan is broadcast. */
#include "profile.h"
#include "search_impl.h"
#include "sys.h"
#include "io.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  const CostPrims *prims;
  const CostWork  *work;
  long             n;       /* estimates made */
  double           seconds; /* time in them */
} SearchCostCtx;

static PetscErrorCode search_cost_objective(void *vctx, const Plan *plan, CostEstimate *est)
{
  SearchCostCtx *ctx = (SearchCostCtx *)vctx;

  double         t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(cost_estimate(ctx->prims, ctx->work, plan, est));
  t0 = sys_wtime() - t0;
  /* the annealing's chains call this on several threads */
#pragma omp atomic
  ctx->n++;
#pragma omp atomic
  ctx->seconds += t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static void search_model_from_shape(const CostShape *m, ModelConfig *cfg)
{
  cost_shape_to_model(m, cfg);
}

void search_needs_from_work(const CostWork *w, ModelConfig cfg[4], PlanNeeds *needs)
{
  int mini = w->batch / (w->minibatches > 0 ? w->minibatches : 1);

  search_model_from_shape(&w->actor, &cfg[0]);
  search_model_from_shape(&w->critic, &cfg[1]);
  search_model_from_shape(&w->ref, &cfg[2]);
  search_model_from_shape(&w->reward, &cfg[3]);
  PetscMemzero(needs, sizeof *needs);
  needs->cfg[MFC_ACTOR_GEN] = needs->cfg[MFC_ACTOR_TRAIN] = &cfg[0];
  needs->cfg[MFC_REF_INF]   = &cfg[2];
  needs->cfg[MFC_REW_INF]   = w->reward_free ? NULL : &cfg[3];
  if (!w->critic_free) needs->cfg[MFC_CRITIC_INF] = needs->cfg[MFC_CRITIC_TRAIN] = &cfg[1];
  needs->batch[MFC_ACTOR_GEN] = needs->batch[MFC_REF_INF] = needs->batch[MFC_REW_INF] = needs->batch[MFC_CRITIC_INF] =
      w->batch;
  needs->batch[MFC_ACTOR_TRAIN] = needs->batch[MFC_CRITIC_TRAIN] = mini;
}

PetscErrorCode search_settings_from_options(SearchOptions *o, SearchSpaceSpec *spec, uint64_t seed)
{
  PlanSearchOptions po;

  PetscFunctionBegin;
  search_options_default(o);
  PetscCall(plan_search_options(&po)); /* src/plan owns the -plan_ options */
  o->seed          = seed;
  o->max_iter      = po.iterations;
  o->time_s        = po.time_s;
  o->t_start       = po.temperature;
  o->chains        = po.chains;
  spec->max_mbs    = po.max_mbs;
  spec->fusion     = po.fusion;
  spec->settings   = po.settings;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The primitives a search estimates with: the hardware description, the
 * profile given, or this machine's profile for the deck's models from the
 * cache (measured on this job's ranks if the cache has none). A profile
 * must hold every model of the work (cost_prims_profile_for). One line
 * says which; world is the plan's ranks. */
static PetscErrorCode search_prims(const RunCtx *run, const CostDeck *deck, const CostWork *w, int world, CostPrims *p)
{
  CostPrimsPaths pp;
  char           path[PETSC_MAX_PATH_LEN], how[1400] = "given by -cost_profile";
  const Profile *pf;

  PetscFunctionBegin;
  PetscCall(cost_prims_paths_from_options(&pp));
  if (pp.hw[0]) {
    PetscCall(cost_prims_hardware(pp.hw, p));
    p->sync_host = pp.sync_host;
    PetscCall(PetscPrintf(run->comm, "plan primitives: hardware %s (analytic), for %s%s\n", pp.hw, deck->shapes_from,
                          pp.sync_host ? "; weight syncs through host memory" : ""));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (pp.prof[0]) PetscCall(PetscStrncpy(path, pp.prof, sizeof path));
  else PetscCall(profile_cached(run, deck, pp.cache, path, sizeof path, how, sizeof how));
  PetscCall(cost_prims_profile_for(path, w, p));
  p->sync_host = pp.sync_host;
  pf = cost_prims_profile_info(p);
  PetscCall(PetscPrintf(run->comm, "plan primitives: profile %s, %s; measured on %d rank%s of %s, backend %s, for %s",
                        path, how, pf->nranks, pf->nranks > 1 ? "s" : "", pf->host, pf->backend, deck->shapes_from));
  if (pf->coll_modeled)
    PetscCall(PetscPrintf(run->comm, "; one rank: its collectives are modeled from messages to itself, not measured"));
  if (world > pf->nranks)
    PetscCall(PetscPrintf(run->comm, "; the plan is for %d ranks: larger groups' collectives are extrapolated", world));
  PetscCall(PetscPrintf(run->comm, "\n"));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_auto_options(void)
{
  SearchOptions   o;
  SearchSpaceSpec spec;
  CostPrimsPaths  pp;

  PetscFunctionBegin;
  PetscCall(search_settings_from_options(&o, &spec, 0));
  PetscCall(cost_prims_paths_from_options(&pp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the table --------------------------------------------------------------- */
static PetscErrorCode search_row(MPI_Comm comm, const char *label, const PlanNeeds *needs, PetscBool ok,
                                 const CostEstimate *e)
{
  char line[1024], mem[32];
  int  n;

  PetscFunctionBegin;
  n = snprintf(line, sizeof line, "  %-26s", label);
  if (!ok) snprintf(line + n, sizeof line - (size_t)n, " refused by the plan checks");
  else if (!e->feasible) snprintf(line + n, sizeof line - (size_t)n, " infeasible: %s", e->why);
  else {
    n += snprintf(line + n, sizeof line - (size_t)n, " %9.4g", e->iter_s);
    for (int c = 0; c < MFC_COUNT; c++)
      if (needs->cfg[c]) n += snprintf(line + n, sizeof line - (size_t)n, " %12.4g", e->call_s[c]);
    snprintf(line + n, sizeof line - (size_t)n, " %9.4g %9s", e->realloc_s, sys_bytes_str(e->mem_max, mem, sizeof mem));
  }
  PetscCall(PetscPrintf(comm, "%s\n", line));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode search_header(MPI_Comm comm, const PlanNeeds *needs)
{
  char line[1024];
  int  n;

  PetscFunctionBegin;
  n = snprintf(line, sizeof line, "  %-26s %9s", "plan (seconds)", "iteration");
  for (int c = 0; c < MFC_COUNT; c++)
    if (needs->cfg[c]) n += snprintf(line + n, sizeof line - (size_t)n, " %12s", mfc_names[c]);
  snprintf(line + n, sizeof line - (size_t)n, " %9s %9s", "realloc", "mem/rank");
  PetscCall(PetscPrintf(comm, "%s\n", line));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static void search_keep_estimate(Plan *plan, const CostEstimate *e)
{
  plan->est_iter_s    = e->feasible ? e->iter_s : 0;
  plan->est_realloc_s = e->realloc_s;
  plan->est_mem       = e->mem_max;
  for (int c = 0; c < MFC_COUNT; c++) plan->est_call_s[c] = e->call_s[c];
}

/* Presets as given and tuned, then the annealing from the tuned ones; rank 0 only. */
static PetscErrorCode search_plan_rank0(MPI_Comm self, SearchSpace sp, SearchCostCtx *ctx, const SearchOptions *o,
                                        PetscBool print, Plan *best, SearchSummary *sum)
{
  const PlanNeeds *needs = &sp->needs;
  Plan            *start;
  CostEstimate     e;
  SearchResult     res;
  PetscBool        ok;
  int              nstart = 0, world = sp->spec.world;
  char             label[64];
  double           t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(PetscMalloc1(3, &start));
  if (print) PetscCall(search_header(self, needs));
  sum->best_preset = sum->best_tuned = INFINITY;
  for (int k = 0; k < 3; k++) {
    if (k && world < 2) continue;
    PetscCall(plan_preset(world, (Placement)k, 0, &start[nstart]));
    PetscCall(search_evaluate(sp, search_cost_objective, ctx, &start[nstart], &ok, &e));
    if (ok && e.feasible) sum->best_preset = PetscMin(sum->best_preset, e.iter_s);
    if (print) PetscCall(search_row(self, PlacementNames[k], needs, ok, &e));
    PetscCall(search_tune_until(sp, search_cost_objective, ctx, o->time_s > 0 ? t0 + o->time_s : INFINITY,
                                &start[nstart], &e));
    PetscCall(PetscSNPrintf(start[nstart].source, sizeof start[nstart].source, "preset %s, tuned", PlacementNames[k]));
    if (e.feasible) sum->best_tuned = PetscMin(sum->best_tuned, e.iter_s);
    snprintf(label, sizeof label, "%s, tuned", PlacementNames[k]);
    if (print) PetscCall(search_row(self, label, needs, PETSC_TRUE, &e));
    nstart++;
  }
  { /* the presets' tuning counts against the budget too */
    SearchOptions left = *o;

    if (o->time_s > 0) left.time_s = PetscMax(o->time_s - (sys_wtime() - t0), 1e-3);
    PetscCall(search_anneal(sp, search_cost_objective, ctx, start, nstart, &left, &res));
  }
  if (print) PetscCall(search_row(self, "searched", needs, PETSC_TRUE, &res.est));
  if (print && res.has_fused) {
    char fz[256];

    PetscCall(search_row(self, res.fused_est.feasible ? "best fused seen, tuned" : "no fused plan fits; closest", needs,
                         PETSC_TRUE, &res.fused_est));
    PetscCall(PetscPrintf(self, "  (that plan: -fuse_gen_inf %s, -fuse_train %s)\n",
                          plan_fuse_str(&res.fused, fz, sizeof fz), res.fused.fuse_train ? "on" : "off"));
  }
  *best = res.plan;
  search_keep_estimate(best, &res.est);
  sum->searched = res.est.feasible ? res.est.iter_s : INFINITY;
  sum->seconds  = sys_wtime() - t0;
  if (print) {
    long hits, misses;

    search_cache_stats(sp, &hits, &misses);
    PetscCall(PetscPrintf(self,
                          "search: %d chains on %d thread%s, %ld iterations, %.1f s in all%s (%ld accepted, %ld "
                          "improvements, %ld refused by the plan checks, %ld infeasible); the plan from chain %d %s "
                          "the fusion states, from %s\n",
                          res.chains, res.threads, res.threads > 1 ? "s" : "", res.iters, sum->seconds,
                          res.timed_out ? ", stopped by -plan_time" : "", res.accepted, res.improved, res.refused_check,
                          res.refused_infeasible, res.chain, res.fused_group ? "with" : "without",
                          start[res.start].source));
    PetscCall(PetscPrintf(self, "  %ld estimates of %.2f ms each, %ld answered from the cache\n", ctx->n,
                          ctx->n ? 1e3 * ctx->seconds / (double)ctx->n : 0.0, hits));
  }
  PetscCall(PetscFree(start));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  MPI_Comm             comm;
  SearchCostCtx        cost;
  const SearchOptions *o;
  SearchSpaceSpec      spec;
  PetscBool            print;
  Plan                *best;
  SearchSummary       *sum;
} SearchTask;

static PetscErrorCode search_task(void *vctx)
{
  SearchTask *t = (SearchTask *)vctx;
  SearchSpace sp;

  PetscFunctionBegin;
  PetscCall(search_space_create(&t->spec, &sp));
  if (t->print)
    PetscCall(PetscPrintf(PETSC_COMM_SELF,
                          "plan search: %d ranks, %d per node; primitives: %s; %d meshes, %.3g plans\n", t->spec.world,
                          t->spec.ranks_per_node, t->cost.prims->source, sp->nmesh, search_space_size(sp)));
  PetscCall(search_plan_rank0(PETSC_COMM_SELF, sp, &t->cost, t->o, t->print, t->best, t->sum));
  PetscCall(search_space_destroy(&sp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_plan(MPI_Comm comm, const CostPrims *p, const CostWork *w, const PlanNeeds *needs,
                           const SearchSpaceSpec *spec, const SearchOptions *o, PetscBool print, Plan *best,
                           SearchSummary *sum)
{
  SearchTask t = {comm, {p, w, 0, 0}, o, *spec, print, best, sum};

  PetscFunctionBegin;
  t.spec.needs          = needs;
  t.spec.ranks_per_node = p->ranks_per_node > 0 ? p->ranks_per_node : spec->world;
  PetscCall(io_on_root(comm, search_task, &t));
  PetscCallMPI(sys_mpi_bcast(best, (int)sizeof *best, MPI_BYTE, 0, comm));
  PetscCallMPI(sys_mpi_bcast(sum, (int)sizeof *sum, MPI_BYTE, 0, comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- -mode plan ------------------------------------------------------------------ */
static PetscErrorCode search_report(const RunCtx *run, const Plan *best, const SearchSummary *sum)
{
  char mem[32];

  PetscFunctionBegin;
  PetscCall(PetscPrintf(run->comm, "estimated %.4g s per iteration, %.4g s of it reallocation, %s peak memory per rank",
                        best->est_iter_s, best->est_realloc_s, sys_bytes_str(best->est_mem, mem, sizeof mem)));
  if (isfinite(sum->best_tuned))
    PetscCall(PetscPrintf(run->comm, "; %.2fx the best tuned preset", sum->best_tuned / best->est_iter_s));
  if (isfinite(sum->best_preset))
    PetscCall(PetscPrintf(run->comm, ", %.2fx the best preset as given", sum->best_preset / best->est_iter_s));
  PetscCall(PetscPrintf(run->comm, "\n"));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The chosen plan's weight syncs both ways, side by side: device to device
 * (NCCL) and through host memory (MPI, what -device cuda does today),
 * whichever -cost_sync_path the search used. */
static PetscErrorCode search_sync_report(const RunCtx *run, const CostPrims *prims, const CostWork *work,
                                         const Plan *best)
{
  CostPrims    q = *prims;
  CostEstimate dev, host;

  PetscFunctionBegin;
  q.sync_host = PETSC_FALSE;
  PetscCall(cost_estimate(&q, work, best, &dev));
  q.sync_host = PETSC_TRUE;
  PetscCall(cost_estimate(&q, work, best, &host));
  if (dev.feasible && host.feasible && (dev.realloc_s > 0 || host.realloc_s > 0))
    PetscCall(PetscPrintf(run->comm,
                          "weight syncs of this plan: %.4g s per iteration device to device (NCCL), %.4g s through "
                          "host memory (MPI); iteration %.4g s and %.4g s%s\n",
                          dev.realloc_s, host.realloc_s, dev.iter_s, host.iter_s,
                          q.host_bw > 0 ? "" : " (these primitives know no host link: its crossings cost nothing)"));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Multi-turn episodes: what the estimate counts of the environment. */
static PetscErrorCode search_env_report(const RunCtx *run, const CostWork *w)
{
  char procs[48] = "all at once", secs[32];

  PetscFunctionBegin;
  if (!w->episodes) PetscFunctionReturn(PETSC_SUCCESS);
  if (w->env_procs > 0) PetscCall(PetscSNPrintf(procs, sizeof procs, "%d at a time", w->env_procs));
  snprintf(secs, sizeof secs, "%g", w->env_s); /* PETSc's %g writes 0 as "0." */
  PetscCall(PetscPrintf(run->comm,
                        "episodes: %d environment answers per episode of %s s each (-cost_env_seconds), %s per "
                        "replica, prefilled %d steps after their turn%s\n",
                        w->env_answers, secs, procs, w->env_lag,
                        w->env_s > 0 ? "" : ": the environment's time costs nothing (give -cost_env_seconds)"));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* An asynchronous workload (-async_staleness or -cost_staleness K > 0): the
 * best synchronous plan searched with the same budget, and the expected
 * gain of the asynchronous one over it; then the best plans at the smaller
 * stalenesses 1 .. min(K-1, SEARCH_ASYNC_TABLE), each with the same budget,
 * so the deck's author sees what each further version of staleness buys
 * (staleness changes the algorithm, so the search reports it and does not
 * choose it). */
#define SEARCH_ASYNC_TABLE 3
static PetscErrorCode search_async_report(const RunCtx *run, const CostPrims *prims, const CostWork *work,
                                          const PlanNeeds *needs, const SearchSpaceSpec *spec, const SearchOptions *o,
                                          const Plan *best)
{
  CostWork      other = *work; /* shares the arrays: not freed here */
  Plan         *plan;
  SearchSummary sum;
  double        sync;
  char          what[80];

  PetscFunctionBegin;
  if (!work->staleness || !isfinite(best->est_iter_s) || best->est_iter_s <= 0) PetscFunctionReturn(PETSC_SUCCESS);
  if (work->partial)
    PetscCall(PetscSNPrintf(what, sizeof what, "staleness %d, partial rollouts of %d tokens", work->staleness,
                            work->partial));
  else PetscCall(PetscSNPrintf(what, sizeof what, "staleness %d", work->staleness));
  other.staleness = 0;
  other.prox      = PETSC_FALSE;
  PetscCall(PetscMalloc1(1, &plan));
  PetscCall(search_plan(run->comm, prims, &other, needs, spec, o, PETSC_FALSE, plan, &sum));
  sync = sum.searched;
  if (isfinite(sync))
    PetscCall(PetscPrintf(run->comm,
                          "asynchronous (%s): %.4g s per iteration; the best synchronous plan searched (same budget): "
                          "%.4g s per iteration, so %.2fx from asynchrony\n",
                          what, best->est_iter_s, sync, sync / best->est_iter_s));
  else
    PetscCall(PetscPrintf(run->comm,
                          "asynchronous (%s): %.4g s per iteration; no synchronous plan that fits was found\n", what,
                          best->est_iter_s));
  for (int k = 1; k < work->staleness && k <= SEARCH_ASYNC_TABLE; k++) {
    other.staleness = k;
    other.prox      = work->prox;
    PetscCall(search_plan(run->comm, prims, &other, needs, spec, o, PETSC_FALSE, plan, &sum));
    if (!isfinite(sum.searched)) PetscCall(PetscPrintf(run->comm, "  staleness %d: no plan that fits was found\n", k));
    else {
      char gen[64], train[64], gain[48] = "";

      if (isfinite(sync)) PetscCall(PetscSNPrintf(gain, sizeof gain, ", %.2fx from asynchrony", sync / sum.searched));
      PetscCall(PetscPrintf(run->comm,
                            "  staleness %d: %.4g s per iteration%s (generation on ranks %s, actor training on %s)\n",
                            k, sum.searched, gain, plan_ranks_str(&plan->call[MFC_ACTOR_GEN], gen, sizeof gen),
                            plan_ranks_str(&plan->call[MFC_ACTOR_TRAIN], train, sizeof train)));
    }
  }
  PetscCall(PetscFree(plan));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode search_write_timeline(const RunCtx *run, const char *path, const CostPrims *prims,
                                            const CostWork *work, const Plan *best)
{
  CostTimeline tl;
  CostEstimate e;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&tl, sizeof tl));
  PetscCall(cost_simulate(prims, work, best, &e, &tl));
  if (!run->rank) PetscCall(cost_timeline_write(path, &tl, best->source));
  PetscCall(cost_timeline_free(&tl));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_mode_run(const RunCtx *run, CostDeckFn deck_of, CostJobFn job_of, PetscBool help)
{
  CostDeck         deck;
  CostJob          job;
  PlanModeOptions  mo;
  CostPrims        prims;
  CostWork         work;
  ModelConfig      cfg[4];
  PlanNeeds        needs;
  SearchOptions    o;
  SearchSpaceSpec  spec;
  SearchSummary    sum;
  SearchStages     stages;
  Plan            *best;
  double           t0;

  PetscFunctionBegin;
  PetscCall(plan_mode_options(&mo));
  PetscCall(PetscMemzero(&spec, sizeof spec));
  PetscCall(search_settings_from_options(&o, &spec, (uint64_t)run->seed));
  if (help) { /* the primitives' and the workload's options too */
    CostPrimsPaths pp;

    PetscCall(cost_prims_paths_from_options(&pp));
    PetscCall(deck_of(run, PETSC_TRUE, &deck));
    PetscCall(cost_work_from_options(&deck, &work));
    PetscCall(cost_work_free(&work));
    PetscCall(job_of(run, PETSC_TRUE, &job));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCheck(mo.ranks >= 1 && mo.ranks <= PLAN_MAX_RANKS, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-mode plan needs -plan_ranks N with 1 <= N <= %d (got %d)", PLAN_MAX_RANKS, (int)mo.ranks);
  if (mo.output[0]) PetscCall(io_output_ok("plan file", mo.output));
  PetscCall(job_of(run, PETSC_FALSE, &job));
  if (job.ppo) PetscCall(deck_of(run, PETSC_FALSE, &deck));
  else search_stages_deck(run, &job, &deck);
  PetscCall(cost_work_from_options(&deck, &work));
  if (job.ppo) search_stages_shapes(&work, &job);
  PetscCheck(!mo.timeline[0] || job.ppo, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-plan_timeline %s: the timeline is of PPO's iterations, and a -mode %s deck has none", mo.timeline,
             job.mode);
  { /* every option read (the primitives' paths too) before a profile is measured: a misspelled one stops here */
    CostPrimsPaths pp;
    PetscCall(cost_prims_paths_from_options(&pp));
    PetscCall(sys_options_check_unused());
  }
  PetscCall(search_prims(run, &deck, &work, (int)mo.ranks, &prims));
  search_needs_from_work(&work, cfg, &needs);
  spec.world = (int)mo.ranks;
  spec.ranks_per_node = prims.ranks_per_node > 0 ? prims.ranks_per_node : spec.world;
  PetscCall(PetscMalloc1(1, &best));
  /* the stages first, an enumeration of milliseconds: PPO's search gets the rest of -plan_time */
  t0 = sys_wtime();
  PetscCall(search_stages_place(run->comm, &prims, &job, &spec, &stages));
  if (o.time_s > 0 && (job.stage[0].used || job.stage[1].used))
    o.time_s = PetscMax(o.time_s - (sys_wtime() - t0), 1e-3);
  if (job.ppo) PetscCall(search_plan(run->comm, &prims, &work, &needs, &spec, &o, PETSC_TRUE, best, &sum));
  else { /* the stage's call alone: none of PPO's */
    PetscCall(PetscMemzero(&needs, sizeof needs));
    PetscCall(plan_preset((int)mo.ranks, PLACEMENT_COLOCATE, 0, best));
    best->nconc = 0;
    PetscCall(
        PetscSNPrintf(best->source, sizeof best->source, "search of the -mode %s deck's training call", job.mode));
  }
  PetscCall(search_stages_finish(run, &job, &stages, &spec, &needs, best));
  PetscCall(plan_print(run->comm, best, &needs));
  if (job.ppo) PetscCall(search_report(run, best, &sum));
  if (job.ppo) PetscCall(search_sync_report(run, &prims, &work, best));
  if (job.ppo) PetscCall(search_async_report(run, &prims, &work, &needs, &spec, &o, best));
  if (job.ppo) PetscCall(search_env_report(run, &work));
  if (mo.output[0]) {
    PetscCall(plan_write_file(run->comm, mo.output, best, &needs));
    PetscCall(PetscPrintf(run->comm, "plan written to %s (run it with -plan_file %s on %d ranks)\n", mo.output,
                          mo.output, (int)mo.ranks));
  }
  if (mo.timeline[0]) PetscCall(search_write_timeline(run, mo.timeline, &prims, &work, best));
  PetscCall(PetscFree(best));
  PetscCall(cost_work_free(&work));
  PetscCall(cost_prims_destroy(&prims));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- -placement auto --------------------------------------------------------------- */
PetscErrorCode search_auto(const RunCtx *run, const CostDeck *deck, const PlanNeeds *needs, Plan *plan)
{
  CostPrims       prims;
  CostWork        work;
  SearchOptions   o;
  SearchSpaceSpec spec;
  SearchSummary   sum;
  char            schedule[sizeof plan->fuse_schedule];

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&spec, sizeof spec));
  PetscCall(search_settings_from_options(&o, &spec, (uint64_t)run->seed));
  PetscCall(cost_work_from_options(deck, &work));
  /* the run's own calls: a critic and a reward model only where it has them */
  work.critic_free = needs->cfg[MFC_CRITIC_INF] ? PETSC_FALSE : PETSC_TRUE;
  work.reward_free = needs->cfg[MFC_REW_INF] ? PETSC_FALSE : PETSC_TRUE;
  PetscCall(search_prims(run, deck, &work, plan->world, &prims));
  spec.world = plan->world;
  PetscCall(PetscPrintf(run->comm, "-placement auto: searching the plan (at most %g s)\n", o.time_s));
  PetscCall(PetscStrncpy(schedule, plan->fuse_schedule, sizeof schedule));
  PetscCall(search_plan(run->comm, &prims, &work, needs, &spec, &o, PETSC_TRUE, plan, &sum));
  PetscCall(PetscStrncpy(plan->fuse_schedule, schedule, sizeof plan->fuse_schedule)); /* the run's file, not searched */
  PetscCall(cost_work_free(&work));
  PetscCall(cost_prims_destroy(&prims));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -placement auto in -mode sft or rm, or their stages of a pipeline: the
 * stage's call placed as -mode plan places it (search_stages_place), for
 * this run's ranks and its ZeRO-1 setting, with the primitives chosen as
 * search_auto's. */
PetscErrorCode search_auto_stage(const RunCtx *run, const CostTrainStage *st, MFCId id, Plan *plan)
{
  CostJob         job;
  CostDeck        deck;
  CostPrims       prims;
  CostWork        work;
  SearchOptions   o;
  SearchSpaceSpec spec;
  SearchStages    stages;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&job, sizeof job));
  PetscCall(PetscMemzero(&spec, sizeof spec));
  PetscCall(PetscStrncpy(job.mode, id == MFC_RM_TRAIN ? "rm" : "sft", sizeof job.mode));
  job.stage[id == MFC_RM_TRAIN ? 1 : 0] = *st;
  PetscCall(search_settings_from_options(&o, &spec, (uint64_t)run->seed));
  search_stages_deck(run, &job, &deck);
  PetscCall(cost_work_from_options(&deck, &work));
  PetscCall(search_prims(run, &deck, &work, plan->world, &prims));
  spec.world          = plan->world;
  spec.ranks_per_node = prims.ranks_per_node > 0 ? prims.ranks_per_node : spec.world;
  PetscCall(PetscPrintf(run->comm, "-placement auto: placing %s\n", mfc_names[id]));
  PetscCall(search_stages_place(run->comm, &prims, &job, &spec, &stages));
  search_stages_apply(&job, &stages, plan);
  plan->placement = PLACEMENT_COLOCATE; /* placed: a second check of the stage keeps it */
  PetscCall(PetscSNPrintf(plan->source, sizeof plan->source, "search of %s", mfc_names[id]));
  PetscCall(cost_work_free(&work));
  PetscCall(cost_prims_destroy(&prims));
  PetscFunctionReturn(PETSC_SUCCESS);
}
