/* plan: the plan from the options database. The base is a placement preset
 * (-placement, -gen_replicas) or a plan file (-plan_file); the settings and
 * every per-call option that is given override it. Values are read inside
 * PetscOptionsBegin/End and checked after it, so a bad value never leaves an
 * options block open. */
#include "plan_impl.h"

#include <string.h>

/* given: the option is in the database; *any collects whether anything
 * overrides the base, for the plan's source line. */
/* The files the -plan_ and -fuse_ options name (-plan_output and -plan_timeline
 * are read in searchopts.c), for io_files_check. */
const IoFileOption plan_file_options[] = {
  {"-plan_file", IO_FILE_IN, NULL, NULL},
  {"-fuse_train_schedule", IO_FILE_IN, NULL, NULL},
  {"-plan_output", IO_FILE_OUT, NULL, NULL},
  {"-plan_timeline", IO_FILE_OUT, NULL, NULL},
  {NULL, IO_FILE_IN, NULL, NULL},
};

static PetscErrorCode plan_given(const char *prefix, const char *name, PetscBool *given, PetscBool *any)
{
  PetscFunctionBegin;
  PetscCall(sys_option_given(prefix, name, given));
  if (*given) *any = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The file's calls over its placement's preset for this job (the preset
 * gives the settings and concurrent pairs). A call the file lacks is left
 * without ranks, not taken from the preset: plan_check refuses it when the
 * run needs it, unless -<call>_ranks gives it, since a plan completed
 * silently is not the plan the file describes. The file's replica count
 * only applies to a job of the file's size. */
static PetscErrorCode plan_base_file(int world, const char *path, Plan *plan)
{
  Plan file;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&file, sizeof file));
  PetscCall(plan_read_file(PETSC_COMM_WORLD, path, &file));
  /* a file's call on ranks this run lacks is the file's mismatch, not a bad -<call>_ranks the user never gave */
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *call = &file.call[c];
    char            opt[64], ranks[128];
    PetscBool       given;
    int             hi = -1;

    for (int i = 0; i < call->nranks; i++) hi = PetscMax(hi, call->ranks[i]);
    if (hi < world) continue;
    PetscCall(PetscSNPrintf(opt, sizeof opt, "-%s_ranks", mfc_names[c]));
    PetscCall(sys_option_given(NULL, opt, &given));
    PetscCheck(given, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-plan_file %s: the plan was made for %d ranks (its %s runs on ranks %s) and this run has %d: run it on "
               "%d ranks, or search one for %d (-mode plan -plan_ranks %d)",
               path, file.world, mfc_names[c], plan_ranks_str(call, ranks, sizeof ranks), world, file.world, world,
               world);
  }
  PetscCall(plan_preset(world, file.placement, file.world == world ? file.gen_replicas : 0, plan));
  for (int c = 0; c < MFC_COUNT; c++) {
    if (file.call[c].nranks) plan->call[c] = file.call[c];
    else plan->call[c].nranks = 0; /* the preset's grid stays, for -<call>_ranks alone */
  }
  { /* the preset's concurrent pairs only between calls the file lacks: the
     * file's own calls run concurrently as the file says (a searched plan
     * may put ref_inf and rew_inf on the same ranks) */
    int n = 0;
    for (int k = 0; k < plan->nconc; k++)
      if (!file.call[plan->conc[k][0]].nranks && !file.call[plan->conc[k][1]].nranks) {
        plan->conc[n][0] = plan->conc[k][0];
        plan->conc[n][1] = plan->conc[k][1];
        n++;
      }
    plan->nconc = n;
  }
  for (int k = 0; k < file.nconc; k++)
    PetscCall(plan_concurrent_add(plan, (MFCId)file.conc[k][0], (MFCId)file.conc[k][1]));
  plan_settings_copy(plan, &file);
  plan->est_iter_s    = file.est_iter_s;
  plan->est_realloc_s = file.est_realloc_s;
  plan->est_mem       = file.est_mem;
  for (int c = 0; c < MFC_COUNT; c++) plan->est_call_s[c] = file.est_call_s[c];
  PetscCall(PetscStrncpy(plan->source, file.source, sizeof plan->source));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_base_from_options(int world, Plan *plan)
{
  PetscInt  placement = PLACEMENT_COLOCATE, gen_replicas = 0;
  char      file[PETSC_MAX_PATH_LEN] = "";
  PetscBool shaped = PETSC_FALSE, given;

  PetscFunctionBegin;
  PetscCall(plan_given(NULL, "-placement", &given, &shaped));
  PetscCall(plan_given(NULL, "-gen_replicas", &given, &shaped));
  PetscOptionsBegin(PETSC_COMM_WORLD, NULL, "Execution plan", NULL);
  RfOptEnum("-placement",
            "Where the model function calls run: colocate, interleave, disaggregate, or auto (-mode ppo searches the "
            "plan at start with -plan_time, on -cost_hardware, -cost_profile or this machine's cached profile)",
            PlacementNames, 4, &placement);
  RfOptInt("-gen_replicas", "-placement disaggregate: actor_gen replicas on the generation half (0: one per rank)", 0,
           &gen_replicas);
  RfOptString("-plan_file", "Start from the /plan group of this HDF5 file (e.g. an earlier run.h5) instead of a preset",
              file, sizeof file);
  PetscOptionsEnd();
  if (!file[0]) {
    PetscCall(plan_preset(world, (Placement)placement, (int)gen_replicas, plan));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCheck(!shaped, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-placement and -gen_replicas cannot be combined with -plan_file %s, whose plan fixes the placement",
             file);
  PetscCall(plan_base_file(world, file, plan));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static int plan_call_index(const char *name, size_t len)
{
  for (int c = 0; c < MFC_COUNT; c++)
    if (strlen(mfc_names[c]) == len && !strncmp(mfc_names[c], name, len)) return c;
  return -1;
}

static PetscErrorCode plan_concurrent_parse(Plan *plan, const char *pair)
{
  const char *comma = strchr(pair, ',');
  int         a     = comma ? plan_call_index(pair, (size_t)(comma - pair)) : -1;
  int         b     = comma ? plan_call_index(comma + 1, strlen(comma + 1)) : -1;

  PetscFunctionBegin;
  PetscCheck(a >= 0 && b >= 0 && a != b, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-plan_concurrent %s: expected two different calls, e.g. ref_inf,rew_inf (calls: actor_gen, ref_inf, "
             "rew_inf, critic_inf, actor_train, critic_train, sft_train, rm_train)",
             pair);
  PetscCall(plan_concurrent_add(plan, (MFCId)a, (MFCId)b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode plan_concurrent_from_options(Plan *plan, PetscBool *any)
{
  char      pair[64] = "";
  PetscBool given;

  PetscFunctionBegin;
  PetscCall(plan_given("plan_", "-concurrent", &given, any));
  PetscOptionsBegin(PETSC_COMM_WORLD, "plan_", "Execution plan: calls that run at the same time",
                    NULL); /* a title of its own: -help prints a (prefix, title) once */
  RfOptString("-concurrent", "Two calls that run at the same time on disjoint ranks, e.g. ref_inf,rew_inf", pair,
              sizeof pair);
  PetscOptionsEnd();
  if (pair[0]) PetscCall(plan_concurrent_parse(plan, pair));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -<call>_ranks replaces the mesh; tp and pp then default to 1 (a preset's
 * grid belongs to its ranks) and dp, unless given, is what the mesh leaves
 * over (a given dp is checked against the mesh by plan_check). */
static PetscErrorCode plan_call_from_options(Plan *plan, MFCId c, PetscBool *any)
{
  static const char *const names[] = {"-dp", "-tp", "-pp", "-mbs"};
  PlanCall                *call    = &plan->call[c];
  char                     pre[32], opt[64], ranks[PETSC_MAX_PATH_LEN];
  PetscInt                 tp, pp, dp = 0, mbs = call->mbs;
  PetscBool                given_ranks, given;
  char                     title[64];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(pre, sizeof pre, "%s_", mfc_names[c]));
  PetscCall(plan_given(pre, "-ranks", &given_ranks, any));
  for (int i = 0; i < 4; i++) PetscCall(plan_given(pre, names[i], &given, any));
  tp = given_ranks ? 1 : call->tp;
  pp = given_ranks ? 1 : call->pp;
  plan_ranks_str(call, ranks, sizeof ranks);
  PetscCall(PetscSNPrintf(title, sizeof title, "Execution plan: the %s call", mfc_names[c]));
  PetscOptionsBegin(PETSC_COMM_WORLD, pre, title, NULL);
  RfOptString("-ranks", "World ranks of the call's mesh in mesh order (tp fastest), e.g. 0-3, 0,2,5 or 0-1,4-5", ranks,
              sizeof ranks);
  RfOptInt("-tp", "Tensor-parallel size", tp, &tp);
  RfOptInt("-pp", "Pipeline stages", pp, &pp);
  RfOptInt("-dp", "Data-parallel replicas (0: the mesh size / (tp x pp))", 0, &dp);
  RfOptInt("-mbs", "Micro-batches per dp replica (0: the mode's own setting)", mbs, &mbs);
  PetscOptionsEnd();
  PetscCall(PetscSNPrintf(opt, sizeof opt, "-%sranks", pre));
  if (given_ranks) PetscCall(plan_ranks_parse(opt, ranks, call));
  PetscCheck(tp >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%stp %d must be at least 1", pre, (int)tp);
  PetscCheck(pp >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-%spp %d must be at least 1", pre, (int)pp);
  PetscCheck(dp >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-%sdp %d must be at least 1 (or 0: from the mesh size)", pre, (int)dp);
  PetscCheck(mbs >= 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-%smbs %d must be at least 1 (or 0: the mode's own setting)", pre, (int)mbs);
  /* a fused critic_train's ranks are derived from actor_train's afterwards */
  PetscCheck(dp || call->nranks % (tp * pp) == 0 || (c == MFC_CRITIC_TRAIN && plan->fuse_train), PETSC_COMM_WORLD,
             PETSC_ERR_ARG_INCOMP, "-%sranks %s has %d ranks, not a multiple of -%stp %d x -%spp %d", pre, ranks,
             call->nranks, pre, (int)tp, pre, (int)pp);
  call->tp  = (int)tp;
  call->pp  = (int)pp;
  call->dp  = dp ? (int)dp : call->nranks / (int)(tp * pp);
  call->mbs = (int)mbs;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -fuse_train_schedule: a file the run reads, kept beside the settings (none of /plan's attributes). */
static PetscErrorCode plan_fuse_schedule_from_options(Plan *plan)
{
  PetscFunctionBegin;
  plan->fuse_schedule[0] = '\0';
  /* a title of its own: -help prints a (prefix, title) once */
  PetscOptionsBegin(PETSC_COMM_WORLD, "fuse_", "Fused actor-critic training: its schedule", NULL);
  RfOptString("-train_schedule",
              "-fuse_train 1: run this fused schedule file (-mode schedule writes one; checked against the training "
              "stage's stages and micro-batches) instead of searching one from measured forward times",
              plan->fuse_schedule, sizeof plan->fuse_schedule);
  PetscOptionsEnd();
  PetscCheck(!plan->fuse_schedule[0] || plan->fuse_train, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-fuse_train_schedule %s needs -fuse_train 1", plan->fuse_schedule);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode plan_from_options(int world, Plan *plan)
{
  PetscBool any = PETSC_FALSE, file_fused;

  PetscFunctionBegin;
  PetscCall(plan_base_from_options(world, plan));
  file_fused = plan->fuse_train; /* a fused plan file: its critic_train pp stands */
  PetscCall(plan_settings_from_options(plan, &any));
  PetscCall(plan_concurrent_from_options(plan, &any));
  if (!strncmp(plan->source, "preset ", 7))
    plan_preset_stream_apart(plan); /* before the per-call options, which override it */
  for (int c = 0; c < MFC_COUNT; c++) PetscCall(plan_call_from_options(plan, (MFCId)c, &any));
  PetscCall(plan_fuse_train_derive(plan, file_fused));
  PetscCall(plan_fuse_schedule_from_options(plan));
  if (any) { /* a changed plan: the file's estimate is not its estimate */
    PetscCall(PetscStrlcat(plan->source, " + options", sizeof plan->source));
    plan->est_iter_s = plan->est_realloc_s = plan->est_mem = 0;
    for (int c = 0; c < MFC_COUNT; c++) plan->est_call_s[c] = 0;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
