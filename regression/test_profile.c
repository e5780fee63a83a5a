/* test_profile: profile files and the primitives interpolated from them
 * (src/profile). A hand-made table whose entries follow known power laws is
 * written, read back bit for bit, and interpolated: inside the grid, where a
 * power law must be reproduced exactly, at a zero corner (linear), outside
 * the grid (the clamped slopes), at a tp beyond the grid, and for the
 * optimizer and collective tables; a shape the profile lacks and bad files
 * (axis not increasing, a negative time, no file) are refused with one line.
 * Reports through test_report.h; exits non-zero on any failure. One rank.
 *
 * The checks in detail: profile files and the primitives interpolated from them, on a
 * hand-made table of known power laws: bit-exact round trip of every attribute and table;
 * interpolation inside the grid reproducing the power law, at a zero entry (linear), above and
 * below the grid (the clamped slopes: rows proportional, decode at most linear in the
 * context), at a tp beyond the grid, the optimizer and the collectives (bytes, and larger
 * groups by the ring formulas), against values worked out by hand; a shape the profile lacks,
 * an axis not increasing, a negative time and a missing file each refused with one line naming
 * it
 */
#include "profile.h"
#include "test_report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void near(const char *name, double got, double want)
{
  test_report((PetscBool)(fabs(got - want) <= 1e-9 * fabs(want) + 1e-18), name, "got %.12g, want %.12g", got, want);
}

/* The hand table. Model 0 (LM head, n_embd 8): tp {1, 2}, rows {1, 4}, len
 * {4, 16}. At tp 1:
 *   block fwd    = 1e-6 rows len^1.5  (8, 64 / 32, 256 us at (1,4), (1,16) / (4,4), (4,16))
 *   block decode = the same numbers
 *   head fwd     = 1e-6 rows^2 len    (4, 16 / 64, 256 us)
 *   embed bwd    = 0 at len 4, 12 us at len 16 (both rows)
 * tp 2: every entry half of tp 1's. Optimizer: 10 us at 1024, 40 us at
 * 4096 parameters. Collectives over 2 ranks at 1 KiB / 4 KiB: all-reduce
 * 10 / 20 us, all-gather 5 / 10, broadcast 4 / 8, p2p 3 / 6. */
static PetscErrorCode hand_profile(Profile *pf)
{
  ProfileModel *m;
  double        rows[2] = {1, 4}, len[2] = {4, 16}, coll[4][2] = {{10e-6, 20e-6}, {5e-6, 10e-6}, {4e-6, 8e-6}, {3e-6, 6e-6}};

  PetscFunctionBegin;
  PetscCall(PetscMemzero(pf, sizeof *pf));
  PetscCall(PetscStrncpy(pf->host, "hand", sizeof pf->host));
  PetscCall(PetscStrncpy(pf->backend, "cpu", sizeof pf->backend));
  pf->cores = 2, pf->threads = 1, pf->nranks = 2, pf->ranks_per_node = 2, pf->seconds = 1.5, pf->mem_per_rank = 1e9, pf->bytes_per_param = 4;
  pf->nmodel = 1;
  m          = &pf->model[0];
  PetscCall(profile_model_alloc(m, 2, 2, 2));
  m->shape = (CostShape){2, 8, 2, 2, 32, 16, 64, PETSC_FALSE, PETSC_FALSE, 0};
  m->tp[0] = 1, m->tp[1] = 2;
  for (int k = 0; k < 2; k++) m->rows[k] = rows[k], m->len[k] = len[k];
  for (int t = 0; t < 2; t++)
    for (int r = 0; r < 2; r++)
      for (int l = 0; l < 2; l++) {
        double h = t ? 0.5 : 1;
        *profile_entry(m, t, COST_PART_BLOCK, COST_FWD, r, l)    = h * 1e-6 * rows[r] * pow(len[l], 1.5);
        *profile_entry(m, t, COST_PART_BLOCK, COST_DECODE, r, l) = h * 1e-6 * rows[r] * pow(len[l], 1.5);
        *profile_entry(m, t, COST_PART_HEAD, COST_FWD, r, l)     = h * 1e-6 * rows[r] * rows[r] * len[l];
        *profile_entry(m, t, COST_PART_EMBED, COST_BWD, r, l)    = h * (l ? 12e-6 : 0);
      }
  PetscCall(profile_tables_alloc(pf, 2, 1, 2));
  pf->opt_n[0] = 1024, pf->opt_n[1] = 4096, pf->opt_sec[0] = 10e-6, pf->opt_sec[1] = 40e-6;
  pf->bytes[0] = 1024, pf->bytes[1] = 4096, pf->mesh[0] = 2;
  for (int op = 0; op < COST_NCOLL; op++)
    for (int b = 0; b < 2; b++) *profile_coll_entry(pf, op, 0, b) = coll[op][b];
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscBool same_doubles(const double *a, const double *b, size_t n) { return memcmp(a, b, n * sizeof *a) ? PETSC_FALSE : PETSC_TRUE; }

static PetscErrorCode test_roundtrip(const Profile *pf, const char *path)
{
  Profile q;
  const ProfileModel *a = &pf->model[0], *b;
  size_t  n = (size_t)a->ntp * COST_NPART * COST_NPHASE * a->nrows * a->nlen;

  PetscFunctionBegin;
  PetscCall(profile_write(path, pf));
  PetscCall(profile_read(path, &q));
  b = &q.model[0];
  test_report((PetscBool)(q.nmodel == 1 && !strcmp(q.host, "hand") && !strcmp(q.backend, "cpu") && q.cores == 2 && q.threads == 1 && q.nranks == 2 && q.ranks_per_node == 2 && q.seconds == 1.5 &&
                     q.mem_per_rank == 1e9 && q.bytes_per_param == 4), "round trip: machine attributes", "host %s backend %s cores %d threads %d", q.host, q.backend, q.cores, q.threads);
  test_report((PetscBool)(!memcmp(&a->shape, &b->shape, sizeof a->shape) && b->ntp == 2 && b->tp[1] == 2 && same_doubles(a->rows, b->rows, 2) && same_doubles(a->len, b->len, 2) &&
                     same_doubles(a->sec, b->sec, n)), "round trip: shape, axes and every model entry bit for bit", "differs");
  test_report((PetscBool)(q.nopt == 2 && same_doubles(q.opt_n, pf->opt_n, 2) && same_doubles(q.opt_sec, pf->opt_sec, 2) && q.nmesh == 1 && q.mesh[0] == 2 && q.nbytes == 2 &&
                     same_doubles(q.bytes, pf->bytes, 2) && same_doubles(q.coll_sec, pf->coll_sec, (size_t)COST_NCOLL * 2)), "round trip: optimizer and collective tables bit for bit", "differs");
  PetscCall(profile_free(&q));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_interpolation(const char *path)
{
  CostPrims      p;
  CostShape      s = {2, 8, 2, 2, 32, 16, 64, PETSC_FALSE, PETSC_FALSE, 0}, wide = s, critic = s;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(cost_prims_profile(path, &p));
  test_report((PetscBool)(p.ranks_per_node == 2 && p.mem_per_rank == 1e9 && p.bytes_per_param == 4 && strstr(p.source, path)), "prims: machine fields and source", "source %s", p.source);
  /* 1e-6 * 2 * 8^1.5 = 2 * 22.6274169979695 us */
  near("block fwd at (2, 8) inside the grid: the power law exactly", p.compute(p.ctx, &s, COST_PART_BLOCK, COST_FWD, 1, 2, 8), 45.254833995939e-6);
  near("block fwd at a grid point (4, 16)", p.compute(p.ctx, &s, COST_PART_BLOCK, COST_FWD, 1, 4, 16), 256e-6);
  /* len 64 above the grid: slope 1.5 lies in [1, 2], so it continues: 64 us * 4^1.5 */
  near("block fwd at len 64 above the grid: slope 1.5 kept", p.compute(p.ctx, &s, COST_PART_BLOCK, COST_FWD, 1, 1, 64), 512e-6);
  /* decode: at most linear in the context above the grid: 64 us * 4 */
  near("block decode at len 64 above the grid: slope clamped to 1", p.compute(p.ctx, &s, COST_PART_BLOCK, COST_DECODE, 1, 1, 64), 256e-6);
  /* head: rows^2 in the table, but beyond it rows are proportional: 64 us * 4 */
  near("head fwd at rows 16 above the grid: slope 2 clamped to 1", p.compute(p.ctx, &s, COST_PART_HEAD, COST_FWD, 1, 16, 4), 256e-6);
  near("head fwd at rows 0.5 below the grid: slope 2 clamped to 1", p.compute(p.ctx, &s, COST_PART_HEAD, COST_FWD, 1, 0.5, 4), 2e-6);
  /* a zero corner: linear in len, 0 + 12 us * (10-4)/(16-4) */
  near("embed bwd at len 10 between 0 and 12 us: linear", p.compute(p.ctx, &s, COST_PART_EMBED, COST_BWD, 1, 1, 10), 6e-6);
  near("tp 2 table", p.compute(p.ctx, &s, COST_PART_BLOCK, COST_FWD, 2, 1, 4), 4e-6);
  near("tp 4 beyond the grid: tp 2's time * 2/4", p.compute(p.ctx, &s, COST_PART_BLOCK, COST_FWD, 4, 1, 4), 2e-6);
  near("no work costs nothing", p.compute(p.ctx, &s, COST_PART_BLOCK, COST_FWD, 1, 0, 4), 0);
  near("optimizer at 2048 (slope 1 inside)", p.optimizer(p.ctx, 2048), 20e-6);
  near("optimizer at 16384 above the grid: proportional", p.optimizer(p.ctx, 16384), 160e-6);
  /* all-reduce 10 -> 20 us over 1 -> 4 KiB: slope 0.5 */
  near("all-reduce of 2 KiB on 2 ranks: 10 us * 2^0.5", p.coll(p.ctx, COST_ALLREDUCE, 2, PETSC_FALSE, 2048), 14.142135623731e-6);
  near("all-reduce of 16 KiB above the grid: proportional", p.coll(p.ctx, COST_ALLREDUCE, 2, PETSC_FALSE, 16384), 80e-6);
  /* ring: 2(n-1)/n = 1.5 at 4 ranks against 1 at 2 */
  near("all-reduce on 4 ranks: the ring formula from 2 ranks (x1.5)", p.coll(p.ctx, COST_ALLREDUCE, 4, PETSC_FALSE, 4096), 30e-6);
  near("all-gather on 4 ranks: (n-1)/n from 2 ranks (x1.5)", p.coll(p.ctx, COST_ALLGATHER, 4, PETSC_FALSE, 4096), 15e-6);
  near("p2p does not depend on the mesh size", p.coll(p.ctx, COST_P2P, 8, PETSC_TRUE, 1024), 3e-6);
  near("a collective on one rank costs nothing", p.coll(p.ctx, COST_BCAST, 1, PETSC_FALSE, 4096), 0);
  PetscCall(cost_prims_profile_check(&p, &s, "actor"));
  test_report(PETSC_TRUE, "the profiled shape is accepted (n_layer may differ)", NULL);
  wide.n_embd = 16;
  TEST_TRY(ierr, cost_prims_profile_check(&p, &wide, "actor"));
  test_expect_error(ierr, "a wider model is refused, naming the field", "n_embd is 8 there, 16 here");
  critic.value_head = PETSC_TRUE;
  TEST_TRY(ierr, cost_prims_profile_check(&p, &critic, "critic"));
  test_expect_error(ierr, "a critic shape absent from the profile is refused", "does not hold the critic's shape: value_head");
  PetscCall(p.destroy(p.ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_bad_files(Profile *pf, const char *dir)
{
  char           path[PETSC_MAX_PATH_LEN];
  CostPrims      p;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/bad_rows.h5", dir));
  pf->model[0].rows[1] = 0.5;
  PetscCall(profile_write(path, pf));
  pf->model[0].rows[1] = 4;
  TEST_TRY(ierr, cost_prims_profile(path, &p));
  test_expect_error(ierr, "rows not increasing: refused naming the dataset", "/model_0/rows is not increasing");
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/bad_time.h5", dir));
  *profile_coll_entry(pf, COST_BCAST, 0, 1) = -1;
  PetscCall(profile_write(path, pf));
  *profile_coll_entry(pf, COST_BCAST, 0, 1) = 8e-6;
  TEST_TRY(ierr, cost_prims_profile(path, &p));
  test_expect_error(ierr, "a negative time: refused naming the dataset", "/collectives/seconds has -1");
  PetscCall(PetscSNPrintf(path, sizeof path, "%s/none.h5", dir));
  TEST_TRY(ierr, cost_prims_profile(path, &p));
  test_expect_error(ierr, "no file: refused naming it", "none.h5");
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  char    tmp[PETSC_MAX_PATH_LEN], path[PETSC_MAX_PATH_LEN + 16];
  Profile pf;

  PetscCall(PetscInitialize(&argc, &argv, NULL, "profile tests"));
  PetscCall(test_tmpdir(tmp, sizeof tmp, "test_profile"));
  snprintf(path, sizeof path, "%s/hand.h5", tmp);
  PetscCall(hand_profile(&pf));
  PetscCall(test_roundtrip(&pf, path));
  PetscCall(test_interpolation(path));
  PetscCall(test_bad_files(&pf, tmp));
  PetscCall(profile_free(&pf));
  PetscCall(PetscFinalize());
  return test_tally();
}
