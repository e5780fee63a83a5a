/* test_plan: the execution plan (src/plan). The three placement presets give
 * the documented meshes for 1, 2, 4 and 8 ranks (the plan is pure data, so
 * one process can make plans for any job size); per-call options override
 * them; every malformed option and every impossible plan fails with one
 * message naming the option; checks only look at the calls a mode uses; and
 * /plan round-trips through a run record, also as -plan_file.
 * Reports through test_report.h; exits non-zero on any failure.
 *
 * The checks in detail: the placement presets on 1, 2, 3, 4 and 8 ranks, per-call options
 * overriding them, malformed rank lists, every plan error naming the call and option (ranks
 * outside the job or repeated, grid not matching the mesh, tp not dividing n_head or the
 * vocabulary, pp beyond n_layer, dp x micro-batches not dividing the batch, concurrent calls
 * sharing a rank, reallocation tp sizes), `/plan` written to run.h5 and read back as a plan
 * file
 */
#include "plan.h"
#include "test_report.h"

#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PetscMPIInt rank;

static const char *error_text(PetscErrorCode ierr)
{
  char *msg = NULL;

  PetscErrorMessage(ierr, NULL, &msg);
  return msg ? msg : "(none)";
}

/* The options database holds exactly opts. */
static PetscErrorCode set_options(const char *opts)
{
  PetscFunctionBegin;
  PetscCall(PetscOptionsClear(NULL));
  PetscCall(PetscOptionsInsertString(NULL, opts));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* plan_from_options for `world` ranks under opts, errors returned. */
static PetscErrorCode make(int world, const char *opts, Plan *plan, PetscErrorCode *ierr)
{
  PetscFunctionBegin;
  PetscCall(set_options(opts));
  TEST_TRY(*ierr, plan_from_options(world, plan));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The call's ranks are exactly want[0..n) and its grid dp x tp x pp. */
static PetscBool call_is(const PlanCall *call, const int *want, int n, int dp, int tp, int pp)
{
  if (call->nranks != n || call->dp != dp || call->tp != tp || call->pp != pp) return PETSC_FALSE;
  for (int i = 0; i < n; i++)
    if (call->ranks[i] != want[i]) return PETSC_FALSE;
  return PETSC_TRUE;
}

/* As call_is for the contiguous ranks lo..hi-1. */
static PetscBool call_range(const PlanCall *call, int lo, int hi, int dp, int tp, int pp)
{
  int want[PLAN_MAX_RANKS];

  for (int r = lo; r < hi; r++) want[r - lo] = r;
  return call_is(call, want, hi - lo, dp, tp, pp);
}

static const char *call_str(const PlanCall *call, char *buf, size_t len)
{
  size_t used = (size_t)snprintf(buf, len, "ranks");
  for (int i = 0; i < call->nranks && used < len; i++) used += (size_t)snprintf(buf + used, len - used, " %d", call->ranks[i]);
  if (used < len) snprintf(buf + used, len - used, ", dp %d tp %d pp %d mbs %d", call->dp, call->tp, call->pp, call->mbs);
  return buf;
}

/* A small model every preset can shard: n_head 6 and vocab 60 are divisible
 * by tp 1, 2 and 3 (not 4); 2 layers allow pp <= 2. */
static const ModelConfig cfg = {.n_layer = 2, .n_head = 6, .n_embd = 48, .vocab_size = 60, .n_positions = 32, .head = MODEL_HEAD_LM};

/* PPO uses the six calls; rollout batch 32, mini-batch 16. */
static void needs_ppo(PlanNeeds *needs)
{
  memset(needs, 0, sizeof *needs);
  for (int c = MFC_ACTOR_GEN; c <= MFC_CRITIC_TRAIN; c++) {
    needs->cfg[c]   = &cfg;
    needs->batch[c] = c >= MFC_ACTOR_TRAIN ? 16 : 32;
  }
}

/* ---- presets --------------------------------------------------------------- */
static PetscErrorCode check_preset(int world, const char *opts, Placement placement, int gen_replicas)
{
  Plan           plan;
  PlanNeeds      needs;
  PetscErrorCode ierr;
  int            N = world, h = N / 2, g = N - h, reps = gen_replicas ? gen_replicas : g;
  PetscBool      ok = PETSC_TRUE;
  char           name[160], buf[4096] = "", got[2048];

  PetscFunctionBegin;
  PetscCall(make(world, opts, &plan, &ierr));
  for (int c = 0; c < MFC_COUNT && !ierr; c++) {
    const PlanCall *call = &plan.call[c];
    PetscBool       good = call_range(call, 0, N, N, 1, 1); /* colocate everywhere */

    if (placement == PLACEMENT_INTERLEAVE && c == MFC_REF_INF) good = call_range(call, 0, h, h, 1, 1);
    if (placement == PLACEMENT_INTERLEAVE && c == MFC_REW_INF) good = call_range(call, h, N, g, 1, 1);
    if (placement == PLACEMENT_DISAGGREGATE && (c == MFC_ACTOR_TRAIN || c == MFC_CRITIC_TRAIN)) good = call_range(call, 0, h, h, 1, 1);
    if (placement == PLACEMENT_DISAGGREGATE && c == MFC_ACTOR_GEN) good = call_range(call, h, N, reps, g / reps, 1);
    if (placement == PLACEMENT_DISAGGREGATE && (c == MFC_REF_INF || c == MFC_REW_INF || c == MFC_CRITIC_INF)) good = call_range(call, h, N, g, 1, 1);
    if (!good && ok) snprintf(buf, sizeof buf, "%s: %s", mfc_names[c], call_str(call, got, sizeof got));
    ok = (PetscBool)(ok && good && call->mbs == 0);
  }
  if (!ierr && placement == PLACEMENT_INTERLEAVE) ok = (PetscBool)(ok && plan.nconc == 1 && plan.conc[0][0] == MFC_REF_INF && plan.conc[0][1] == MFC_REW_INF);
  if (!ierr && placement != PLACEMENT_INTERLEAVE) ok = (PetscBool)(ok && plan.nconc == 0);
  snprintf(name, sizeof name, "%s on %d ranks (%s): the documented meshes", PlacementNames[placement], world, opts[0] ? opts : "no options");
  test_report((PetscBool)(!ierr && ok && plan.world == world && plan.placement == placement), name, "%s", ierr ? error_text(ierr) : buf);
  needs_ppo(&needs);
  TEST_TRY(ierr, plan_check(&plan, &needs));
  snprintf(name, sizeof name, "%s on %d ranks passes plan_check for PPO", PlacementNames[placement], world);
  test_report((PetscBool)!ierr, name, "%s", ierr ? error_text(ierr) : "");
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_presets(void)
{
  static const int sizes[] = {2, 4, 8};
  Plan             plan;
  PetscErrorCode   ierr;

  PetscFunctionBegin;
  PetscCall(check_preset(1, "", PLACEMENT_COLOCATE, 0));
  for (int i = 0; i < 3; i++) {
    PetscCall(check_preset(sizes[i], "-placement colocate", PLACEMENT_COLOCATE, 0));
    PetscCall(check_preset(sizes[i], "-placement interleave", PLACEMENT_INTERLEAVE, 0));
    PetscCall(check_preset(sizes[i], "-placement disaggregate", PLACEMENT_DISAGGREGATE, 0));
  }
  PetscCall(check_preset(8, "-placement disaggregate -gen_replicas 2", PLACEMENT_DISAGGREGATE, 2));
  PetscCall(make(4, "", &plan, &ierr));
  test_report((PetscBool)(!ierr && !strcmp(plan.source, "preset colocate") && plan.gen_replicas == 0 && !plan.offload && !plan.zero1 && plan.bucket_mb == 16), "defaults: colocate, no offload, no ZeRO-1, 16 MiB buckets", "source '%s', bucket %g", plan.source, plan.bucket_mb);
  PetscCall(make(3, "-placement interleave", &plan, &ierr));
  test_report((PetscBool)(!ierr && call_range(&plan.call[MFC_REF_INF], 0, 1, 1, 1, 1) && call_range(&plan.call[MFC_REW_INF], 1, 3, 2, 1, 1)), "interleave on 3 ranks: reference on rank 0, reward on ranks 1-2", "%s", ierr ? error_text(ierr) : "wrong meshes");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- per-call options ---------------------------------------------------------- */
static PetscErrorCode test_overrides(void)
{
  static const int split[] = {0, 1, 4, 5}, list[] = {0, 2, 5}, back[] = {4, 5, 0, 1};
  Plan             plan;
  PetscErrorCode   ierr;
  char             buf[4096];

  PetscFunctionBegin;
  PetscCall(make(8, "-actor_gen_ranks 0-1,4-5 -actor_gen_tp 2", &plan, &ierr));
  test_report((PetscBool)(!ierr && call_is(&plan.call[MFC_ACTOR_GEN], split, 4, 2, 2, 1) && call_range(&plan.call[MFC_ACTOR_TRAIN], 0, 8, 8, 1, 1)), "-actor_gen_ranks 0-1,4-5 -actor_gen_tp 2: dp 2 from the mesh, other calls untouched", "%s", ierr ? error_text(ierr) : call_str(&plan.call[MFC_ACTOR_GEN], buf, sizeof buf));
  test_report((PetscBool)(!ierr && !strcmp(plan.source, "preset colocate + options")), "the source names the preset and the options", "source '%s'", plan.source);
  PetscCall(make(8, "-ref_inf_ranks 0,2,5 -rew_inf_ranks 4-5,0-1 -rew_inf_pp 2", &plan, &ierr));
  test_report((PetscBool)(!ierr && call_is(&plan.call[MFC_REF_INF], list, 3, 3, 1, 1) && call_is(&plan.call[MFC_REW_INF], back, 4, 2, 1, 2)), "rank lists and ranges in any order give the mesh order", "%s", ierr ? error_text(ierr) : call_str(&plan.call[MFC_REW_INF], buf, sizeof buf));
  PetscCall(make(8, "-placement disaggregate -gen_replicas 2 -actor_gen_ranks 4-7", &plan, &ierr));
  test_report((PetscBool)(!ierr && call_range(&plan.call[MFC_ACTOR_GEN], 4, 8, 4, 1, 1)), "-<call>_ranks drops the preset's tp (back to 1)", "%s", ierr ? error_text(ierr) : call_str(&plan.call[MFC_ACTOR_GEN], buf, sizeof buf));
  PetscCall(make(8, "-placement disaggregate -gen_replicas 2 -actor_gen_tp 4", &plan, &ierr));
  test_report((PetscBool)(!ierr && call_range(&plan.call[MFC_ACTOR_GEN], 4, 8, 1, 4, 1)), "-<call>_tp on the preset's ranks: dp follows", "%s", ierr ? error_text(ierr) : call_str(&plan.call[MFC_ACTOR_GEN], buf, sizeof buf));
  PetscCall(make(4, "-actor_train_dp 2 -actor_train_mbs 4 -plan_offload -plan_zero1 -plan_bucket_mb 2.5 -plan_concurrent ref_inf,critic_inf", &plan, &ierr));
  test_report((PetscBool)(!ierr && plan.call[MFC_ACTOR_TRAIN].dp == 2 && plan.call[MFC_ACTOR_TRAIN].mbs == 4 && plan.offload && plan.zero1 && plan.bucket_mb == 2.5 && plan.nconc == 1 && plan.conc[0][0] == MFC_REF_INF && plan.conc[0][1] == MFC_CRITIC_INF), "a given dp and mbs are kept as given; settings and a concurrent pair", "%s", ierr ? error_text(ierr) : "wrong values");
  PetscCall(make(4, "-placement interleave -plan_concurrent rew_inf,ref_inf", &plan, &ierr));
  test_report((PetscBool)(!ierr && plan.nconc == 1), "a concurrent pair the preset already has is not added twice", "%d pairs", plan.nconc);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_bad_options(void)
{
  static const struct {
    int         world;
    const char *opts, *want;
  } bad[] = {
    {1, "-placement interleave", "-placement interleave needs at least 2 ranks"},
    {1, "-placement disaggregate", "-placement disaggregate needs at least 2 ranks"},
    {8, "-placement disaggregate -gen_replicas 3", "-gen_replicas 3"},
    {8, "-placement disaggregate -gen_replicas 8", "-gen_replicas 8"},
    {8, "-placement disaggregate -gen_replicas -1", "-gen_replicas -1"},
    {4, "-actor_gen_ranks 3-1", "-actor_gen_ranks '3-1'"},
    {4, "-actor_gen_ranks a", "-actor_gen_ranks 'a'"},
    {4, "-ref_inf_ranks 0,,1", "-ref_inf_ranks '0,,1'"},
    {4, "-ref_inf_ranks 0-", "-ref_inf_ranks '0-'"},
    {4, "-ref_inf_ranks 1,", "-ref_inf_ranks '1,'"},
    {4, "-ref_inf_ranks 0-2000", "-ref_inf_ranks '0-2000'"},
    {4, "-actor_gen_ranks 0-2 -actor_gen_tp 2", "-actor_gen_ranks 0-2 has 3 ranks, not a multiple of -actor_gen_tp 2 x -actor_gen_pp 1"},
    {4, "-critic_train_tp 3", "-critic_train_ranks 0-3 has 4 ranks, not a multiple of -critic_train_tp 3"},
    {4, "-actor_gen_tp 0", "-actor_gen_tp 0 must be at least 1"},
    {4, "-rm_train_pp -1", "-rm_train_pp -1 must be at least 1"},
    {4, "-sft_train_dp -2", "-sft_train_dp -2"},
    {4, "-sft_train_mbs -1", "-sft_train_mbs -1"},
    {4, "-actor_gen_tp x", "-actor_gen_tp: 'x' is not an integer"},
    {4, "-plan_bucket_mb 0", "-plan_bucket_mb 0"},
    {4, "-plan_concurrent ref_inf,foo", "-plan_concurrent ref_inf,foo"},
    {4, "-plan_concurrent ref_inf,ref_inf", "-plan_concurrent ref_inf,ref_inf"},
    {4, "-plan_concurrent ref_inf", "-plan_concurrent ref_inf"},
    {4, "-placement disaggregate -plan_file x.h5", "-placement and -gen_replicas cannot be combined with -plan_file x.h5"},
  };
  Plan           plan;
  PetscErrorCode ierr;
  char           name[256];

  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    PetscCall(make(bad[i].world, bad[i].opts, &plan, &ierr));
    snprintf(name, sizeof name, "%d ranks, %s: error naming the option", bad[i].world, bad[i].opts);
    test_expect_error(ierr, name, bad[i].want);
  }
  PetscCall(set_options(""));
  PetscCall(PetscOptionsSetValue(NULL, "-actor_gen_ranks", ""));
  TEST_TRY(ierr, plan_from_options(4, &plan));
  test_expect_error(ierr, "empty -actor_gen_ranks: error naming the option", "-actor_gen_ranks ''");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- plan_check ------------------------------------------------------------------ */
static PetscErrorCode test_check(void)
{
  static const ModelConfig odd_vocab = {.n_layer = 2, .n_head = 6, .n_embd = 48, .vocab_size = 50, .n_positions = 32, .head = MODEL_HEAD_LM};
  static const struct {
    const char *opts, *want;
  } bad[] = {
    {"-ref_inf_ranks 0-7", "-ref_inf_ranks 0-7: rank 7 is outside the job's 4 ranks"},
    {"-ref_inf_ranks 0,1,1,2", "-ref_inf_ranks 0-1,1-2: rank 1 appears twice"},
    {"-actor_gen_ranks 0-1 -actor_gen_dp 2 -actor_gen_tp 2", "-actor_gen_dp 2 x -actor_gen_tp 2 x -actor_gen_pp 1 = 4 ranks, but -actor_gen_ranks has 2"},
    {"-actor_gen_tp 4", "-actor_gen_tp 4 does not divide the model's n_head 6"},
    {"-critic_train_ranks 0-2 -critic_train_pp 3", "-critic_train_pp 3 exceeds the model's n_layer 2"},
    {"-actor_train_ranks 0-2", "-actor_train_dp 3 does not divide the mini-batch of 16 sequences"},
    {"-ref_inf_ranks 0-2", "-ref_inf_dp 3 does not divide the rollout batch of 32 sequences"},
    {"-actor_train_mbs 3", "-actor_train_dp 4 x -actor_train_mbs 3 = 12 does not divide the mini-batch of 16 sequences"},
    {"-plan_concurrent ref_inf,rew_inf", "-plan_concurrent ref_inf,rew_inf: both calls need rank 0"},
    {"-placement interleave -ref_inf_ranks 1-2", "-plan_concurrent ref_inf,rew_inf: both calls need rank 2"},
    {"-actor_gen_ranks 0-1 -actor_gen_tp 2 -actor_train_ranks 0-2 -actor_train_tp 3", "-actor_train_tp 3 and -actor_gen_tp 2 must divide each other (parameter reallocation of the actor)"},
    {"-critic_inf_ranks 0-1 -critic_inf_tp 2 -critic_train_ranks 0-2 -critic_train_tp 3", "-critic_train_tp 3 and -critic_inf_tp 2 must divide each other (parameter reallocation of the critic)"},
  };
  Plan           plan;
  PlanNeeds      needs;
  PetscErrorCode ierr;
  char           name[256];

  PetscFunctionBegin;
  needs_ppo(&needs);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    PetscCall(make(4, bad[i].opts, &plan, &ierr));
    snprintf(name, sizeof name, "plan_check, %s: error naming the option", bad[i].opts);
    if (!ierr) TEST_TRY(ierr, plan_check(&plan, &needs));
    test_expect_error(ierr, name, bad[i].want);
  }
  PetscCall(make(4, "-actor_gen_ranks 0-2 -actor_gen_tp 3", &plan, &ierr));
  needs.cfg[MFC_ACTOR_GEN] = &odd_vocab;
  if (!ierr) TEST_TRY(ierr, plan_check(&plan, &needs));
  test_expect_error(ierr, "plan_check, tp 3 with vocab_size 50: error naming the option", "-actor_gen_tp 3 does not divide the model's vocab_size 50");

  needs_ppo(&needs);
  PetscCall(make(4, "-actor_gen_ranks 0-1 -actor_gen_tp 2 -actor_train_ranks 0-3 -actor_train_tp 1 -sft_train_ranks 0-7 -rm_train_tp 4", &plan, &ierr));
  if (!ierr) TEST_TRY(ierr, plan_check(&plan, &needs));
  test_report((PetscBool)!ierr, "plan_check ignores calls the mode does not use; tp 2 and 1 divide each other", "%s", ierr ? error_text(ierr) : "");
  PetscCall(make(4, "-actor_train_mbs 2 -plan_zero1 -actor_train_ranks 0-1", &plan, &ierr));
  if (!ierr) TEST_TRY(ierr, plan_check(&plan, &needs));
  test_report((PetscBool)!ierr, "plan_check accepts dp x mbs dividing the mini-batch, with ZeRO-1", "%s", ierr ? error_text(ierr) : "");
  test_report((PetscBool)(plan_overlap(&plan, MFC_ACTOR_TRAIN, MFC_ACTOR_GEN) && plan_has_rank(&plan, MFC_ACTOR_TRAIN, 1) && !plan_has_rank(&plan, MFC_ACTOR_TRAIN, 2)), "plan_overlap and plan_has_rank", "wrong answers");
  PetscCall(make(4, "-placement interleave", &plan, &ierr));
  test_report((PetscBool)(!ierr && !plan_overlap(&plan, MFC_REF_INF, MFC_REW_INF)), "interleave: reference and reward meshes do not overlap", "they do");
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "# plan_print of -placement interleave on 4 ranks, PPO calls:\n"));
  TEST_TRY(ierr, plan_print(PETSC_COMM_WORLD, &plan, &needs));
  test_report((PetscBool)!ierr, "plan_print", "%s", ierr ? error_text(ierr) : "");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- run record and -plan_file --------------------------------------------------- */
static PetscBool plans_equal(const Plan *a, const Plan *b, const PlanNeeds *needs)
{
  if (a->placement != b->placement || a->world != b->world || a->gen_replicas != b->gen_replicas || a->offload != b->offload || a->zero1 != b->zero1 || a->bucket_mb != b->bucket_mb || a->nconc != b->nconc) return PETSC_FALSE;
  if (memcmp(a->conc, b->conc, sizeof(int) * 2 * (size_t)a->nconc)) return PETSC_FALSE;
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *x = &a->call[c];

    if (needs && !needs->cfg[c]) continue;
    if (!call_is(&b->call[c], x->ranks, x->nranks, x->dp, x->tp, x->pp) || b->call[c].mbs != x->mbs) return PETSC_FALSE;
  }
  return PETSC_TRUE;
}

static PetscErrorCode record_plan(const char *dir, const Plan *plan, const PlanNeeds *needs, char *path, size_t len)
{
  RunCtx     run = {PETSC_COMM_WORLD, 0, 1, 1, 1, PETSC_FALSE, "", NULL};
  RunRecord *rec;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &run.rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &run.size));
  PetscCall(PetscStrncpy(run.output_dir, dir, sizeof run.output_dir));
  PetscCall(record_open(&run, "test", 0, &rec));
  if (plan) PetscCall(plan_record(rec, plan, needs));
  PetscCall(record_close(&rec));
  PetscCall(PetscSNPrintf(path, len, "%s/run.h5", dir));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_roundtrip(const char *tmp)
{
  Plan           plan, back, file;
  PlanNeeds      needs;
  PetscErrorCode ierr;
  char           dir[PETSC_MAX_PATH_LEN], path[PETSC_MAX_PATH_LEN], bare[PETSC_MAX_PATH_LEN], opts[PETSC_MAX_PATH_LEN + 64], want[PETSC_MAX_PATH_LEN + 64];

  PetscFunctionBegin;
  PetscCall(make(8, "-placement interleave -actor_gen_ranks 0-1,4-5 -actor_gen_tp 2 -plan_zero1 -plan_bucket_mb 4 -critic_train_mbs 2 -plan_concurrent actor_gen,critic_inf", &plan, &ierr));
  PetscCall(PetscSNPrintf(dir, sizeof dir, "%s/all", tmp));
  PetscCall(record_plan(dir, &plan, NULL, path, sizeof path));
  PetscCall(PetscMemzero(&back, sizeof back));
  TEST_TRY(ierr, plan_read_file(PETSC_COMM_WORLD, path, &back));
  test_report((PetscBool)(!ierr && plans_equal(&plan, &back, NULL)), "plan_record + plan_read_file round trip (every call)", "%s", ierr ? error_text(ierr) : "plans differ");

  PetscCall(PetscSNPrintf(opts, sizeof opts, "-plan_file %s", path));
  PetscCall(make(8, opts, &file, &ierr));
  PetscCall(PetscSNPrintf(want, sizeof want, "file %s", path));
  test_report((PetscBool)(!ierr && plans_equal(&plan, &file, NULL) && !strcmp(file.source, want)), "-plan_file gives the recorded plan", "%s", ierr ? error_text(ierr) : file.source);
  PetscCall(PetscSNPrintf(opts, sizeof opts, "-plan_file %s -ref_inf_mbs 4 -plan_zero1 0", path));
  PetscCall(make(8, opts, &file, &ierr));
  test_report((PetscBool)(!ierr && file.call[MFC_REF_INF].mbs == 4 && !file.zero1 && call_is(&file.call[MFC_ACTOR_GEN], plan.call[MFC_ACTOR_GEN].ranks, 4, 2, 2, 1) && strstr(file.source, " + options")), "options override -plan_file", "%s", ierr ? error_text(ierr) : file.source);

  /* PPO's calls only: sft_train and rm_train are not stored, and keep their values on reading */
  needs_ppo(&needs);
  PetscCall(PetscSNPrintf(dir, sizeof dir, "%s/ppo", tmp));
  PetscCall(record_plan(dir, &plan, &needs, path, sizeof path));
  PetscCall(PetscMemzero(&back, sizeof back));
  back.call[MFC_SFT_TRAIN].nranks = 1;
  back.call[MFC_SFT_TRAIN].ranks[0] = 77;
  TEST_TRY(ierr, plan_read_file(PETSC_COMM_WORLD, path, &back));
  test_report((PetscBool)(!ierr && plans_equal(&plan, &back, &needs) && back.call[MFC_SFT_TRAIN].ranks[0] == 77 && back.call[MFC_RM_TRAIN].nranks == 0), "a record of the used calls; calls missing in the file keep their values", "%s", ierr ? error_text(ierr) : "wrong calls");
  PetscCall(PetscSNPrintf(opts, sizeof opts, "-plan_file %s", path));
  PetscCall(make(8, opts, &file, &ierr));
  test_report((PetscBool)(!ierr && file.call[MFC_SFT_TRAIN].nranks == 0), "-plan_file: a call the file lacks is not filled in from the preset", "%s", ierr ? error_text(ierr) : call_str(&file.call[MFC_SFT_TRAIN], want, sizeof want));
  { /* a run that needs a call the file lacks: refused, naming it */
    PlanNeeds sft;

    memset(&sft, 0, sizeof sft);
    sft.cfg[MFC_SFT_TRAIN]   = &cfg;
    sft.batch[MFC_SFT_TRAIN] = 16;
    TEST_TRY(ierr, plan_check(&file, &sft));
    test_expect_error(ierr, "-plan_file lacking a call the run needs (sft_train): refused naming it", "lacks /plan/sft_train, which this run needs");
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-plan_file %s -sft_train_ranks 0-7", path));
    PetscCall(make(8, opts, &file, &ierr));
    if (!ierr) TEST_TRY(ierr, plan_check(&file, &sft));
    test_report((PetscBool)!ierr, "-plan_file lacking sft_train, given -sft_train_ranks: runs", "%s", ierr ? error_text(ierr) : "");
  }
  { /* a PPO file without /plan/critic_inf (the case) */
    PetscCall(PetscSNPrintf(dir, sizeof dir, "%s/ppo_nocritic", tmp));
    needs.cfg[MFC_CRITIC_INF] = NULL;
    PetscCall(record_plan(dir, &plan, &needs, path, sizeof path));
    needs_ppo(&needs);
    PetscCall(PetscSNPrintf(opts, sizeof opts, "-plan_file %s", path));
    PetscCall(make(8, opts, &file, &ierr));
    if (!ierr) TEST_TRY(ierr, plan_check(&file, &needs));
    test_expect_error(ierr, "-plan_file without /plan/critic_inf for PPO: refused naming it", "lacks /plan/critic_inf, which this run needs");
  }

  PetscCall(PetscSNPrintf(dir, sizeof dir, "%s/none", tmp));
  PetscCall(record_plan(dir, NULL, NULL, bare, sizeof bare));
  TEST_TRY(ierr, plan_read_file(PETSC_COMM_WORLD, bare, &back));
  PetscCall(PetscSNPrintf(want, sizeof want, "plan file %s has no group /plan", bare));
  test_expect_error(ierr, "a file without /plan: error naming the file", want);
  PetscCall(PetscSNPrintf(dir, sizeof dir, "%s/missing.h5", tmp));
  TEST_TRY(ierr, plan_read_file(PETSC_COMM_WORLD, dir, &back));
  PetscCall(PetscSNPrintf(want, sizeof want, "plan file %s: no such file", dir));
  test_expect_error(ierr, "a missing plan file: error naming the file", want);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A plan file as a script would write it (h5py stores Python ints as
 * int64): integer attributes, except ref_inf's dp, a double. */
static void hand_attr(hid_t obj, const char *name, hid_t type, const void *value)
{
  hid_t space = H5Screate(H5S_SCALAR), attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);

  H5Awrite(attr, type == H5T_STD_I64LE ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, value);
  H5Aclose(attr);
  H5Sclose(space);
}

static void write_hand_plan(const char *path, double ref_dp)
{
  static const char *const top[] = {"placement", "world", "gen_replicas", "offload", "zero1"}, *const call[] = {"tp", "pp", "mbs"};
  const int64_t            topv[] = {PLACEMENT_COLOCATE, 4, 0, 0, 1}, callv[] = {1, 1, 2}, ranks[] = {2, 3};
  const double             bucket = 8;
  hsize_t                  n      = 2;
  hid_t                    file   = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t                    plan   = H5Gcreate2(file, "plan", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t                    ref    = H5Gcreate2(plan, "ref_inf", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t                    space  = H5Screate_simple(1, &n, NULL);
  hid_t                    dset   = H5Dcreate2(ref, "ranks", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);

  H5Dwrite(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ranks);
  for (int i = 0; i < 5; i++) hand_attr(plan, top[i], H5T_STD_I64LE, &topv[i]);
  hand_attr(plan, "bucket_mb", H5T_IEEE_F64LE, &bucket);
  for (int i = 0; i < 3; i++) hand_attr(ref, call[i], H5T_STD_I64LE, &callv[i]);
  hand_attr(ref, "dp", H5T_IEEE_F64LE, &ref_dp);
  H5Dclose(dset);
  H5Sclose(space);
  H5Gclose(ref);
  H5Gclose(plan);
  H5Fclose(file);
}

static PetscErrorCode test_hand_file(const char *tmp)
{
  static const int ranks[] = {2, 3};
  Plan             plan;
  PetscErrorCode   ierr;
  char             path[PETSC_MAX_PATH_LEN], want[PETSC_MAX_PATH_LEN + 64];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/hand.h5", tmp));
  if (!rank) write_hand_plan(path, 2);
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  PetscCall(PetscMemzero(&plan, sizeof plan));
  TEST_TRY(ierr, plan_read_file(PETSC_COMM_WORLD, path, &plan));
  test_report((PetscBool)(!ierr && plan.world == 4 && plan.zero1 && plan.bucket_mb == 8 && call_is(&plan.call[MFC_REF_INF], ranks, 2, 2, 1, 1) && plan.call[MFC_REF_INF].mbs == 2), "a plan file with integer attributes and int64 ranks is read", "%s", ierr ? error_text(ierr) : "wrong values");
  if (!rank) write_hand_plan(path, 1.5);
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  TEST_TRY(ierr, plan_read_file(PETSC_COMM_WORLD, path, &plan));
  PetscCall(PetscSNPrintf(want, sizeof want, "plan file %s /plan/ref_inf: attribute dp is 1.5", path));
  test_expect_error(ierr, "a plan file with dp 1.5: error naming the file and the attribute", want);
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  char tmp[PETSC_MAX_PATH_LEN];

  PetscCall(PetscInitialize(&argc, &argv, NULL, "plan tests"));
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  test_collective(PETSC_COMM_WORLD);
  PetscCall(test_tmpdir(tmp, sizeof tmp, "test_plan"));
  PetscCall(test_presets());
  PetscCall(test_overrides());
  PetscCall(test_bad_options());
  PetscCall(test_check());
  PetscCall(test_roundtrip(tmp));
  PetscCall(test_hand_file(tmp));
  PetscCall(set_options(""));
  PetscCall(PetscFinalize());
  return test_tally();
}
