/* Tests of io: checkpoints round-trip bit-exactly (parameters, AdamW moments,
 * step, run state; LM and scalar heads), every kind of bad checkpoint gives
 * one clear message naming the file and the object, a failed or repeated
 * write never leaves a temporary file or damages the previous one, the run
 * record has the documented layout (back-filled columns, provenance,
 * parameters) and is readable by another process while the run is going, an
 * old run.h5 is kept, token datasets round-trip and are validated, and
 * evals.h5 grows by appending.
 * Reports through test_report.h; exits non-zero on any failure.
 *
 * The checks in detail: checkpoint round trip bit-exact (parameters, moments, step, state),
 * one clear error for a missing, truncated, non-HDF5 or wrong-shape/dtype checkpoint and for a
 * configuration mismatch, a failed write leaving the previous file intact, the run record
 * (readable by another process before it is closed, back-filled columns, provenance,
 * parameters), run.h5 rotation, datasets, evals.h5 grown by appending (later evaluations added
 * to the same file, same inode after each; a repeated group replaced; earlier groups and
 * answer texts kept; no temporary left)
 */
#include "io.h"
#include "internal/h5util.h"
#include "test_report.h"

#include <hdf5.h>
#include <math.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static PetscMPIInt rank, size;
static char        tmpdir[PETSC_MAX_PATH_LEN]; /* rank 0's, shared with all ranks */

static void path_in(char *buf, const char *name)
{
  if (snprintf(buf, PETSC_MAX_PATH_LEN, "%s/%s", tmpdir, name) >= PETSC_MAX_PATH_LEN) abort();
}

static int count_tmp_files(void)
{
  DIR           *d = opendir(tmpdir);
  struct dirent *e;
  int            n = 0;

  if (!d) return -1;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

static long file_size(const char *path)
{
  struct stat st;

  return stat(path, &st) ? -1 : (long)st.st_size;
}

static int copy_prefix(const char *src, const char *dst, long n)
{
  FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
  int   c, ok = in && out;

  for (long i = 0; ok && i < n && (c = fgetc(in)) != EOF; i++) fputc(c, out);
  if (in) fclose(in);
  if (out) fclose(out);
  return ok;
}

/* ---- models ---------------------------------------------------------------- */
static ModelConfig small_config(ModelHead head)
{
  ModelConfig cfg = {.n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = 32, .n_positions = 8, .head = head};

  return cfg;
}

/* Random parameters, and moments with values in every bit position. */
static PetscErrorCode make_model(const ModelConfig *cfg, uint64_t seed, PetscBool optim, Model **lm)
{
  float *p, *m, *v;

  PetscFunctionBegin;
  PetscCall(model_create(cfg, backend_cpu(), lm));
  PetscCall(model_init_random(*lm, seed));
  PetscCall(PetscMalloc3((*lm)->nparams, &p, (*lm)->nparams, &m, (*lm)->nparams, &v));
  PetscCall(model_params_get(*lm, p));
  for (size_t i = 0; i < (*lm)->nparams; i++) {
    p[i] += 1e-3f * (float)sin(0.7 * (double)i + (double)seed); /* biases are 0 after init */
    m[i] = (float)sin(0.37 * (double)i + (double)seed) / 3.0f;
    v[i] = (float)(1e-8 + fabs(cos(0.11 * (double)i + (double)seed))) / 7.0f;
  }
  PetscCall(model_params_set(*lm, p));
  if (optim) PetscCall(model_optim_set(*lm, m, v, 7 + (int)seed));
  PetscCall(PetscFree3(p, m, v));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode models_equal(const Model *a, const Model *b, PetscBool optim, PetscBool *eq)
{
  size_t n = a->nparams;
  float *x, *y, *xm, *xv, *ym, *yv;

  PetscFunctionBegin;
  *eq = (PetscBool)(b->nparams == n);
  if (!*eq) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscMalloc6(n, &x, n, &y, n, &xm, n, &xv, n, &ym, n, &yv));
  PetscCall(model_params_get(a, x));
  PetscCall(model_params_get(b, y));
  *eq = (PetscBool)!memcmp(x, y, n * sizeof(float));
  if (optim) {
    PetscCall(model_optim_get(a, xm, xv));
    PetscCall(model_optim_get(b, ym, yv));
    *eq = (PetscBool)(*eq && !memcmp(xm, ym, n * sizeof(float)) && !memcmp(xv, yv, n * sizeof(float)) && a->step == b->step);
  }
  PetscCall(PetscFree6(x, y, xm, xv, ym, yv));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- checkpoints ----------------------------------------------------------- */
static PetscErrorCode test_ckpt_roundtrip(const char *path)
{
  ModelConfig lm_cfg = small_config(MODEL_HEAD_LM), sc = small_config(MODEL_HEAD_SCALAR), cfg;
  Model    *pol, *cri, *rew, *pol2, *cri2, *rew2;
  CkptState st = {5, 123, 42, 0.25}, st2;
  PetscBool eq_pol, eq_cri, eq_rew;

  PetscFunctionBegin;
  PetscCall(make_model(&lm_cfg, 1, PETSC_TRUE, &pol));
  PetscCall(make_model(&sc, 2, PETSC_TRUE, &cri));
  PetscCall(make_model(&sc, 3, PETSC_FALSE, &rew));
  {
    CkptModel models[3] = {{"policy", pol, PETSC_TRUE, PETSC_FALSE}, {"critic", cri, PETSC_TRUE, PETSC_FALSE}, {"reward", rew, PETSC_FALSE, PETSC_FALSE}};
    PetscCall(ckpt_write(PETSC_COMM_WORLD, path, models, 3, &st));
  }
  PetscCall(ckpt_read_config(PETSC_COMM_WORLD, path, "critic", &cfg));
  test_report(model_config_equal(&cfg, &sc), "ckpt_read_config returns the written configuration", "n_embd %d head %d", cfg.n_embd, (int)cfg.head);
  PetscCall(make_model(&lm_cfg, 11, PETSC_FALSE, &pol2));
  PetscCall(make_model(&sc, 12, PETSC_FALSE, &cri2));
  PetscCall(make_model(&sc, 13, PETSC_FALSE, &rew2));
  {
    CkptModel p = {"policy", pol2, PETSC_TRUE, PETSC_FALSE}, c = {"critic", cri2, PETSC_TRUE, PETSC_FALSE}, r = {"reward", rew2, PETSC_FALSE, PETSC_FALSE};
    PetscCall(ckpt_read_model(PETSC_COMM_WORLD, path, &p));
    PetscCall(ckpt_read_model(PETSC_COMM_WORLD, path, &c));
    PetscCall(ckpt_read_model(PETSC_COMM_WORLD, path, &r));
  }
  PetscCall(models_equal(pol, pol2, PETSC_TRUE, &eq_pol));
  PetscCall(models_equal(cri, cri2, PETSC_TRUE, &eq_cri));
  PetscCall(models_equal(rew, rew2, PETSC_FALSE, &eq_rew));
  test_report(eq_pol, "checkpoint round trip bit-exact: LM head params, m, v, step", "policy differs");
  test_report((PetscBool)(eq_cri && eq_rew), "checkpoint round trip bit-exact: scalar heads (with and without optim)", "critic %d reward %d", eq_cri, eq_rew);
  PetscCall(ckpt_read_state(PETSC_COMM_WORLD, path, &st2));
  test_report((PetscBool)(st2.iteration == 5 && st2.data_pos == 123 && st2.seed == 42 && st2.kl_coef == 0.25), "checkpoint state round trip", "got %d %d %d %g", (int)st2.iteration, (int)st2.data_pos, (int)st2.seed, st2.kl_coef);
  PetscCall(model_destroy(&pol));
  PetscCall(model_destroy(&cri));
  PetscCall(model_destroy(&rew));
  PetscCall(model_destroy(&pol2));
  PetscCall(model_destroy(&cri2));
  PetscCall(model_destroy(&rew2));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_ckpt_bad_files(const char *good)
{
  char           path[PETSC_MAX_PATH_LEN];
  ModelConfig    cfg;
  PetscErrorCode ierr;
  FILE          *f;

  PetscFunctionBegin;
  path_in(path, "missing.h5");
  TEST_TRY(ierr, ckpt_read_config(PETSC_COMM_WORLD, path, "policy", &cfg));
  test_expect_error(ierr, "missing checkpoint: one clear error", "missing.h5: no such file");

  path_in(path, "truncated.h5");
  if (!rank) copy_prefix(good, path, file_size(good) / 2);
  TEST_TRY(ierr, ckpt_read_config(PETSC_COMM_WORLD, path, "policy", &cfg));
  test_expect_error(ierr, "truncated checkpoint: one clear error", "truncated.h5: not a readable HDF5 file (truncated or corrupt?)");

  path_in(path, "text.h5");
  if (!rank && (f = fopen(path, "w"))) {
    fprintf(f, "this is not HDF5\n");
    fclose(f);
  }
  TEST_TRY(ierr, ckpt_read_config(PETSC_COMM_WORLD, path, "policy", &cfg));
  test_expect_error(ierr, "non-HDF5 checkpoint: one clear error", "text.h5: not a readable HDF5 file");

  TEST_TRY(ierr, ckpt_read_config(PETSC_COMM_WORLD, good, "actor", &cfg));
  test_expect_error(ierr, "missing role group: one clear error", "has no /actor group");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Copies good to name and replaces /policy/params/transformer.wte.weight by
 * a dataset of the given type and shape (or removes it when ndim is 0). */
static PetscErrorCode doctor_checkpoint(const char *good, const char *name, hid_t type, int ndim, hsize_t d0, hsize_t d1, char *path)
{
  const char *ds      = "/policy/params/transformer.wte.weight";
  hsize_t     dims[2] = {d0, d1};
  hid_t       file, space, dset;
  double     *zeros;

  PetscFunctionBegin;
  path_in(path, name);
  if (rank) PetscFunctionReturn(PETSC_SUCCESS); /* rank 0 writes test files; ckpt_read broadcasts */
  PetscCheck(copy_prefix(good, path, file_size(good)), PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "cannot copy %s", good);
  file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  H5Call(file, "cannot open %s", path);
  H5Call(H5Ldelete(file, ds, H5P_DEFAULT), "cannot delete %s", ds);
  if (ndim) {
    PetscCall(PetscCalloc1(d0 * d1, &zeros));
    space = H5Screate_simple(ndim, dims, NULL);
    dset  = H5Dcreate2(file, ds, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Call(H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros), "cannot write %s", ds);
    H5Dclose(dset);
    H5Sclose(space);
    PetscCall(PetscFree(zeros));
  }
  H5Fclose(file);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_ckpt_bad_contents(const char *good)
{
  ModelConfig    lm_cfg = small_config(MODEL_HEAD_LM), big = lm_cfg;
  Model         *lm, *gbig;
  CkptModel      cm;
  char           path[PETSC_MAX_PATH_LEN];
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(make_model(&lm_cfg, 4, PETSC_FALSE, &lm));
  cm = (CkptModel){"policy", lm, PETSC_FALSE, PETSC_FALSE};

  PetscCall(doctor_checkpoint(good, "shape.h5", H5T_IEEE_F32LE, 2, 32, 8, path));
  TEST_TRY(ierr, ckpt_read_model(PETSC_COMM_WORLD, path, &cm));
  test_expect_error(ierr, "wrong-shape dataset: one clear error", "/policy/params/transformer.wte.weight has shape [32,8], expected [32,16]");

  PetscCall(doctor_checkpoint(good, "dtype.h5", H5T_IEEE_F64LE, 2, 32, 16, path));
  TEST_TRY(ierr, ckpt_read_model(PETSC_COMM_WORLD, path, &cm));
  test_expect_error(ierr, "wrong-dtype dataset: one clear error", "/policy/params/transformer.wte.weight has type float64, expected float32");

  PetscCall(doctor_checkpoint(good, "nodset.h5", H5T_IEEE_F32LE, 0, 0, 0, path));
  TEST_TRY(ierr, ckpt_read_model(PETSC_COMM_WORLD, path, &cm));
  test_expect_error(ierr, "missing dataset: one clear error", "has no dataset /policy/params/transformer.wte.weight");

  big.n_embd = 32;
  PetscCall(make_model(&big, 5, PETSC_FALSE, &gbig));
  cm = (CkptModel){"policy", gbig, PETSC_FALSE, PETSC_FALSE};
  TEST_TRY(ierr, ckpt_read_model(PETSC_COMM_WORLD, good, &cm));
  test_expect_error(ierr, "config mismatch: one clear error naming the option", "/policy: n_embd 16 in the file, 32 in the deck (-policy_n_embd)");
  PetscCall(model_destroy(&lm));
  PetscCall(model_destroy(&gbig));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A write that fails half way (the model has no optimizer state to save)
 * leaves the previous file intact and no temporary; a write into a missing
 * directory fails cleanly; a rewrite replaces the file. */
static PetscErrorCode test_ckpt_atomic(void)
{
  ModelConfig    lm_cfg = small_config(MODEL_HEAD_LM);
  Model         *lm;
  CkptState      st = {77, 0, 1, 0}, st2;
  char           path[PETSC_MAX_PATH_LEN], before[PETSC_MAX_PATH_LEN];
  PetscErrorCode ierr;
  long           size_before;

  PetscFunctionBegin;
  PetscCall(make_model(&lm_cfg, 6, PETSC_FALSE, &lm));
  path_in(path, "atomic.h5");
  path_in(before, "atomic.before.h5");
  {
    CkptModel cm = {"policy", lm, PETSC_FALSE, PETSC_FALSE};
    PetscCall(ckpt_write(PETSC_COMM_WORLD, path, &cm, 1, &st));
  }
  if (!rank) copy_prefix(path, before, file_size(path));
  size_before = file_size(path);
  {
    CkptModel cm = {"policy", lm, PETSC_TRUE, PETSC_FALSE}; /* no model_optim_init: fails inside the write */
    TEST_TRY(ierr, ckpt_write(PETSC_COMM_WORLD, path, &cm, 1, &st));
  }
  {
    char cmd[3 * PETSC_MAX_PATH_LEN];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, before);
    test_report((PetscBool)(ierr && count_tmp_files() == 0 && file_size(path) == size_before && system(cmd) == 0), "failed ckpt_write: previous file untouched, no temporary left", "ierr %d, %d temporaries", (int)ierr, count_tmp_files());
  }
  {
    char      bad[PETSC_MAX_PATH_LEN];
    CkptModel cm = {"policy", lm, PETSC_FALSE, PETSC_FALSE};

    path_in(bad, "no/such/dir/x.h5");
    TEST_TRY(ierr, ckpt_write(PETSC_COMM_WORLD, bad, &cm, 1, &st));
    test_expect_error(ierr, "ckpt_write into a missing directory: one clear error", "does not exist");
    st.iteration = 78;
    PetscCall(ckpt_write(PETSC_COMM_WORLD, path, &cm, 1, &st));
  }
  PetscCall(ckpt_read_state(PETSC_COMM_WORLD, path, &st2));
  test_report((PetscBool)(st2.iteration == 78 && count_tmp_files() == 0), "ckpt_write over an existing file replaces it, no temporary left", "iteration %d, %d temporaries", (int)st2.iteration, count_tmp_files());
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A killed run leaves "<path>.tmp.<host>.<pid>"; the next write into the
 * directory removes it, and so the temporary named with the PID of a live
 * process that does not hold its lock (a reused PID), but not the temporary
 * of a live writer (its lock held) or of another host (a shared file system). */
static PetscErrorCode test_stale_tmp(void)
{
  ModelConfig lm_cfg = small_config(MODEL_HEAD_LM);
  Model    *lm;
  CkptState st = {1, 0, 1, 0};
  char      path[PETSC_MAX_PATH_LEN], mine[PETSC_MAX_PATH_LEN], stale[PETSC_MAX_PATH_LEN + 32], live[PETSC_MAX_PATH_LEN + 32], other[PETSC_MAX_PATH_LEN + 32], reused[PETSC_MAX_PATH_LEN + 32];
  pid_t     dead;
  int       ok_stale = 1, ok_live = 1, ok_other = 1, ok_reused = 1, lock = -1;

  PetscFunctionBegin;
  PetscCall(make_model(&lm_cfg, 6, PETSC_FALSE, &lm));
  path_in(path, "stale.h5");
  if (!rank) {
    char *dot;

    dead = fork(); /* a pid that existed and is gone */
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    PetscCall(h5u_tmp_name(path, mine, sizeof mine));
    dot  = strrchr(mine, '.');
    *dot = 0;
    snprintf(stale, sizeof stale, "%s.%d", mine, (int)dead);
    snprintf(live, sizeof live, "%s.%d", mine, (int)getppid());
    snprintf(other, sizeof other, "%s.tmp.otherhost.%d", path, (int)dead);
    snprintf(reused, sizeof reused, "%s.%d", mine, 1); /* init: alive, never a writer */
    fclose(fopen(stale, "w"));
    PetscCall(h5u_tmp_claim(live, &lock)); /* a live writer's claim, as the writers make it */
    fclose(fopen(live, "w"));
    fclose(fopen(other, "w"));
    fclose(fopen(reused, "w"));
  }
  {
    CkptModel cm = {"policy", lm, PETSC_FALSE, PETSC_FALSE};
    PetscCall(ckpt_write(PETSC_COMM_WORLD, path, &cm, 1, &st));
  }
  if (!rank) {
    ok_stale = access(stale, F_OK) != 0;
    ok_live  = access(live, F_OK) == 0;
    ok_other = access(other, F_OK) == 0;
    ok_reused = access(reused, F_OK) != 0;
    unlink(live);
    h5u_tmp_release(live, lock);
    unlink(other);
    unlink(reused);
  }
  /* collective, agreed over the ranks (only rank 0 looked) */
  test_report((PetscBool)(ok_stale && ok_live && ok_other), "a write removes stale temporaries on this host only, and keeps a live writer's (its lock held)", "dead pid removed %d, locked kept %d, other host kept %d", ok_stale, ok_live, ok_other);
  test_report((PetscBool)ok_reused, "a write removes a temporary whose PID is alive but holds no lock (a reused PID)", "kept");
  PetscCall(model_destroy(&lm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- run record ------------------------------------------------------------ */
/* Child process (re-executed, so with HDF5 state of its own, like h5py in
 * another terminal): opens the record of a running job and checks that
 * /metrics/step has `rows` entries. */
static int child_read_record(const char *path, const char *rows)
{
  hid_t   file, dset, space;
  hsize_t n = 0;

  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return 2;
  dset = H5Dopen2(file, "/metrics/step", H5P_DEFAULT);
  if (dset < 0) return 3;
  space = H5Dget_space(dset);
  H5Sget_simple_extent_dims(space, &n, NULL);
  H5Sclose(space);
  H5Dclose(dset);
  H5Fclose(file);
  return n == (hsize_t)atoi(rows) ? 0 : 4;
}

static int spawn_reader(const char *path, int rows)
{
  char  nrows[16];
  pid_t pid;
  int   status = -1;

  if (rank) return 0;
  snprintf(nrows, sizeof nrows, "%d", rows);
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "test_io", "--read-record", path, nrows, (char *)NULL);
    _exit(127);
  }
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static PetscErrorCode read_column(hid_t file, const char *name, double *v, int max, int *n)
{
  hid_t   dset, space;
  hsize_t len = 0;

  PetscFunctionBegin;
  *n   = -1;
  dset = H5Dopen2(file, name, H5P_DEFAULT);
  if (dset < 0) PetscFunctionReturn(PETSC_SUCCESS);
  space = H5Dget_space(dset);
  H5Sget_simple_extent_dims(space, &len, NULL);
  H5Sclose(space);
  if ((int)len <= max) {
    H5Call(H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), "cannot read %s", name);
    *n = (int)len;
  }
  H5Dclose(dset);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode read_attr_string(hid_t file, const char *obj, const char *name, char *buf, size_t len)
{
  hid_t attr, type;
  char *s = NULL;

  PetscFunctionBegin;
  buf[0] = 0;
  attr   = H5Aopen_by_name(file, obj, name, H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0) PetscFunctionReturn(PETSC_SUCCESS);
  type = H5Aget_type(attr);
  if (H5Tis_variable_str(type) > 0 && H5Aread(attr, type, &s) >= 0 && s) {
    PetscCall(PetscStrncpy(buf, s, len));
    H5free_memory(s);
  }
  H5Tclose(type);
  H5Aclose(attr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run_record_steps(const RunCtx *run, int *child)
{
  RunRecord *rec;

  PetscFunctionBegin;
  PetscCall(record_open(run, "test", 0, &rec));
  if (rank == size - 1) PetscCall(record_time(rec, "last_rank_only", 1.0)); /* a new name on one rank, seen first there */
  PetscCall(record_time(rec, "rollout", 0.5));
  PetscCall(record_time(rec, "rollout", 0.25)); /* accumulates */
  PetscCall(record_time(rec, "train", 1.0));
  PetscCall(record_metric(rec, "reward", 1.0));
  PetscCall(record_step(rec, 1));
  PetscCall(record_commit(rec));
  *child = spawn_reader(run->output_dir, 1); /* after one step committed, before close */
  PetscCall(record_time(rec, "rollout", 0.5));
  PetscCall(record_time(rec, "gen", 2.0)); /* first seen at step 2 */
  PetscCall(record_metric(rec, "reward", 2.0));
  PetscCall(record_metric(rec, "kl", 0.1)); /* first seen at step 2 */
  PetscCall(record_step(rec, 2));
  PetscCall(record_time(rec, "train", 3.0));
  PetscCall(record_metric(rec, "kl", 0.2));
  PetscCall(record_step(rec, 3));
  PetscCall(record_summary(rec, "tokens_per_s", 123.5));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_record(void)
{
  RunCtx    run = {PETSC_COMM_WORLD, rank, size, 1, 99, PETSC_FALSE, "", NULL};
  char      path[PETSC_MAX_PATH_LEN], s[4096], hv[64];
  double    v[8], v2[8];
  int       n, n2, child = -1;
  hid_t     file;
  PetscBool ok;
  RunRecord *rec;

  PetscFunctionBegin;
  path_in(run.output_dir, "out");
  snprintf(path, sizeof path, "%s/run.h5", run.output_dir);
  PetscCall(sys_param_record("test_", "-alpha", "0.5", PETSC_TRUE));
  PetscCall(sys_param_record("test_", "-beta", "7", PETSC_FALSE));
  PetscCall(PetscOptionsSetValue(NULL, "-test_never_read", "3"));
  PetscCall(run_record_steps(&run, &child));
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD)); /* record_close is rank 0's alone */
  file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  PetscCheck(file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "cannot open %s", path);
  PetscCall(read_column(file, "/metrics/kl", v, 8, &n));
  test_report((PetscBool)(n == 3 && isnan(v[0]) && v[1] == 0.1 && v[2] == 0.2), "run record: metric first seen at step 2 back-filled with NaN", "n %d: %g %g %g", n, v[0], v[1], v[2]);
  PetscCall(read_column(file, "/metrics/reward", v, 8, &n));
  PetscCall(read_column(file, "/metrics/step", v2, 8, &n2));
  test_report((PetscBool)(n == 3 && v[0] == 1 && v[1] == 2 && isnan(v[2]) && n2 == 3 && v2[0] == 1 && v2[2] == 3), "run record: metrics and steps", "n %d %d", n, n2);
  PetscCall(read_column(file, "/timing/rollout_max", v, 8, &n));
  PetscCall(read_column(file, "/timing/gen_min", v2, 8, &n2));
  ok = (PetscBool)(n == 3 && v[0] == 0.75 && v[1] == 0.5 && v[2] == 0 && n2 == 3 && v2[0] == 0 && v2[1] == 2.0 && v2[2] == 0);
  PetscCall(read_column(file, "/timing/train_min", v, 8, &n));
  PetscCall(read_column(file, "/timing/step", v2, 8, &n2));
  ok = (PetscBool)(ok && n == 3 && v[0] == 1 && v[1] == 0 && v[2] == 3 && n2 == 3);
  test_report(ok, "run record: stage times (accumulated, 0 when not timed, back-filled)", "columns differ");
  PetscCall(read_column(file, "/timing/last_rank_only_max", v, 8, &n));
  PetscCall(read_column(file, "/timing/last_rank_only_min", v2, 8, &n2));
  test_report((PetscBool)(n == 3 && v[0] == 1 && v[1] == 0 && n2 == 3 && v2[0] == (size > 1 ? 0 : 1)), "run record: a stage timed on one rank only (max over ranks, min 0)", "n %d max %g min %g", n, v[0], v2[0]);
  PetscCall(read_attr_string(file, "/code", "rlfuse_version", s, sizeof s));
  PetscCall(io_hdf5_version(hv, sizeof hv));
  ok = (PetscBool)!strcmp(s, RLFUSE_VERSION);
  PetscCall(read_attr_string(file, "/code", "hdf5", s, sizeof s));
  ok = (PetscBool)(ok && !strcmp(s, hv));
  PetscCall(read_attr_string(file, "/code", "petsc", s, sizeof s));
  ok = (PetscBool)(ok && strstr(s, "3."));
  PetscCall(read_attr_string(file, "/code", "command_line", s, sizeof s));
  ok = (PetscBool)(ok && strstr(s, "test_io"));
  PetscCall(read_attr_string(file, "/code", "mode", s, sizeof s));
  test_report((PetscBool)(ok && !strcmp(s, "test")), "run record: /code provenance", "mode '%s'", s);
  PetscCall(read_attr_string(file, "/parameters", "test_alpha", s, sizeof s));
  ok = (PetscBool)!strcmp(s, "0.5");
  PetscCall(read_attr_string(file, "/parameters", "_given", s, sizeof s));
  ok = (PetscBool)(ok && strstr(s, "test_alpha") && !strstr(s, "test_beta"));
  PetscCall(read_attr_string(file, "/parameters", "_database", s, sizeof s));
  test_report((PetscBool)(ok && strstr(s, "-test_never_read 3")), "run record: /parameters with _given and _database", "_database '%s'", s);
  H5Fclose(file);
  test_report((PetscBool)(child == 0), "run record: a committed row readable by another process before record_close", "reader exit status %d", child);

  /* a run restarted from step 2 continues the record: step 3 dropped, then written anew */
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  PetscCall(record_open(&run, "test", 2, &rec));
  PetscCall(record_time(rec, "train", 4.0));
  PetscCall(record_metric(rec, "reward", 5.0));
  PetscCall(record_step(rec, 3));
  PetscCall(record_close(&rec));
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  PetscCheck(file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "cannot open %s", path);
  PetscCall(read_column(file, "/metrics/reward", v, 8, &n));
  PetscCall(read_column(file, "/metrics/kl", v2, 8, &n2));
  ok = (PetscBool)(n == 3 && v[0] == 1 && v[1] == 2 && v[2] == 5 && n2 == 3 && v2[1] == 0.1 && isnan(v2[2]));
  PetscCall(read_column(file, "/timing/train_max", v, 8, &n));
  PetscCall(read_column(file, "/timing/gen_max", v2, 8, &n2));
  ok = (PetscBool)(ok && n == 3 && v[2] == 4 && n2 == 3 && v2[1] == 2 && v2[2] == 0);
  ok = (PetscBool)(ok && H5Aexists_by_name(file, "/summary", "tokens_per_s", H5P_DEFAULT) == 0 &&
                   H5Aexists_by_name(file, "/code", "resumed_from_step", H5P_DEFAULT) > 0);
  H5Fclose(file);
  snprintf(s, sizeof s, "%s/run.1.h5", run.output_dir);
  test_report((PetscBool)(ok && file_size(s) < 0), "run record: a restart from step 2 continues it (step 3 replaced, columns kept, summary cleared)", "rows or columns differ");

  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD)); /* everyone has read run.h5 before it is renamed */
  PetscCall(record_open(&run, "test", 0, &rec));
  PetscCall(record_close(&rec));
  snprintf(s, sizeof s, "%s/run.1.h5", run.output_dir);
  test_report((PetscBool)(file_size(s) > 0 && file_size(path) > 0), "existing run.h5 kept as run.1.h5", "run.1.h5 size %ld", file_size(s));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- token data ------------------------------------------------------------ */
/* A data file as a Python tool might write it (tokens int64), by hand,
 * because data_write refuses to write what data_read would reject. */
static PetscErrorCode write_bad_data(const char *path, const int *tokens, const int *lengths)
{
  hsize_t dims[2] = {3, 5};
  int     vocab   = 10;
  hid_t   file, space, dset, attr;

  PetscFunctionBegin;
  if (!rank) {
    file  = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    space = H5Screate_simple(2, dims, NULL);
    dset  = H5Dcreate2(file, "tokens", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Call(H5Dwrite(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens), "cannot write %s", path);
    H5Dclose(dset);
    H5Sclose(space);
    space = H5Screate_simple(1, dims, NULL);
    dset  = H5Dcreate2(file, "lengths", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Call(H5Dwrite(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, lengths), "cannot write %s", path);
    H5Dclose(dset);
    H5Sclose(space);
    space = H5Screate(H5S_SCALAR);
    attr  = H5Acreate2(file, "vocab_size", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Call(H5Awrite(attr, H5T_NATIVE_INT, &vocab), "cannot write %s", path);
    H5Aclose(attr);
    H5Sclose(space);
    H5Fclose(file);
  }
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_data(void)
{
  int            tokens[3 * 5] = {1, 2, 3, 0, 0, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0};
  int            lengths[3] = {3, 5, 1}, plen[3] = {1, 2, 0};
  TokenData      d = {.N = 3, .T = 5, .vocab_size = 10, .tokens = tokens, .lengths = lengths, .prompt_lengths = plen}, r;
  char           path[PETSC_MAX_PATH_LEN];
  PetscErrorCode ierr;

  PetscFunctionBegin;
  path_in(path, "data.h5");
  PetscCall(data_write(PETSC_COMM_WORLD, path, &d, "copy"));
  PetscCall(data_read(PETSC_COMM_WORLD, path, &r));
  test_report((PetscBool)(r.N == 3 && r.T == 5 && r.vocab_size == 10 && !memcmp(r.tokens, tokens, sizeof tokens) && !memcmp(r.lengths, lengths, sizeof lengths) && r.prompt_lengths && !memcmp(r.prompt_lengths, plen, sizeof plen)), "token data round trip", "N %d T %d", r.N, r.T);
  PetscCall(data_free(&r));

  /* data_write refuses to write what data_read would reject, so write by hand */
  tokens[8] = 10;
  path_in(path, "badtok.h5");
  PetscCall(write_bad_data(path, tokens, lengths));
  TEST_TRY(ierr, data_read(PETSC_COMM_WORLD, path, &r));
  test_expect_error(ierr, "data_read rejects a token >= vocab_size, naming row and column", "badtok.h5: /tokens[1,3] = 10 is outside [0, vocab_size=10)");
  TEST_TRY(ierr, data_write(PETSC_COMM_WORLD, path, &d, "copy"));
  test_expect_error(ierr, "data_write refuses a token >= vocab_size", "/tokens[1,3] = 10");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A conversation's /loss_mask: written, read back (broadcast to every rank),
 * and a mask that trains nothing in a row or marks a prompt token refused. */
static PetscErrorCode test_data_mask(void)
{
  int            tokens[3 * 5] = {1, 2, 3, 0, 0, 4, 5, 6, 7, 8, 9, 1, 0, 0, 0};
  int            lengths[3] = {3, 5, 2}, plen[3] = {1, 2, 0};
  unsigned char  mask[3 * 5] = {0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0};
  TokenData      d = {.N = 3, .T = 5, .vocab_size = 10, .tokens = tokens, .lengths = lengths, .prompt_lengths = plen,
                      .loss_mask = mask}, r;
  char           path[PETSC_MAX_PATH_LEN];
  PetscErrorCode ierr;

  PetscFunctionBegin;
  path_in(path, "mask.h5");
  PetscCall(data_write(PETSC_COMM_WORLD, path, &d, "conversations"));
  PetscCall(data_read(PETSC_COMM_WORLD, path, &r));
  test_report((PetscBool)(r.loss_mask && !memcmp(r.loss_mask, mask, sizeof mask) && !memcmp(r.tokens, tokens, sizeof tokens)),
              "token data with /loss_mask: written and read back (broadcast when run on several ranks)", "mask %s", r.loss_mask ? "differs" : "absent");
  PetscCall(data_free(&r));
  path_in(path, "mask_bad.h5");
  mask[7] = mask[9] = 0; /* row 1 without a target */
  TEST_TRY(ierr, data_write(PETSC_COMM_WORLD, path, &d, "conversations"));
  test_expect_error(ierr, "data_write refuses a row whose /loss_mask has no target", "mask_bad.h5: row 1 has no target");
  mask[6] = 1; /* inside row 1's prompt of 2 */
  TEST_TRY(ierr, data_write(PETSC_COMM_WORLD, path, &d, "conversations"));
  test_expect_error(ierr, "data_write refuses a /loss_mask target inside the prompt", "/loss_mask[1,1] = 1 where nothing is trained");
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_matrix(void)
{
  float   x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0};
  char    path[PETSC_MAX_PATH_LEN];
  hid_t   file, dset;

  PetscFunctionBegin;
  path_in(path, "scores.h5");
  PetscCall(io_write_matrix(PETSC_COMM_WORLD, path, "logprobs", x, 2, 3));
  file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  dset = H5Dopen2(file, "logprobs", H5P_DEFAULT);
  H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y);
  H5Dclose(dset);
  H5Fclose(file);
  test_report((PetscBool)!memcmp(x, y, sizeof x), "io_write_matrix writes the float32 matrix", "values differ");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* evals.h5 (io_group_replace): the first group creates the file, later
 * ones are added to a copy renamed over it (never in place, which a kill
 * could damage: a new inode each time), a group of the same name is
 * replaced, and every group keeps its values and texts; a restart's
 * io_group_drop_after removes the groups after its checkpoint. */
static PetscErrorCode test_evals(void)
{
  float             x[2] = {1, 2}, y[2] = {0};
  const IODataset   d[]  = {{"scores", 1, {2, 1}, x, PETSC_FALSE}};
  const char *const an[] = {"reward"}, *texts[] = {"7", "-3"};
  double            av[] = {0.5};
  char              path[PETSC_MAX_PATH_LEN];
  struct stat       st0, st1;
  int               ok = 1, ngroups = 0;

  PetscFunctionBegin;
  path_in(path, "evals.h5");
  PetscCall(io_group_replace(PETSC_COMM_WORLD, "evaluations file", path, "iter_1", d, 1, "answer", texts, 2, an, av, 1));
  if (stat(path, &st0)) ok = 0;
  x[0] = 3, av[0] = 0.75;
  for (int k = 0; k < 2; k++) { /* the second time: a restart's evaluation again */
    PetscCall(io_group_replace(PETSC_COMM_WORLD, "evaluations file", path, "iter_2", d, 1, "answer", texts, 2, an, av, 1));
    if (stat(path, &st1) || st0.st_ino == st1.st_ino) ok = 0; /* against the previous: a freed inode may come back */
    st0 = st1;
  }
  if (rank == 0) {
    hid_t   file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), dset, attr;
    double  r = 0;
    hsize_t n = 0;
    H5G_info_t gi;
    if (file < 0) ok = 0;
    else {
      if (H5Gget_info(file, &gi) >= 0) ngroups = (int)gi.nlinks;
      dset = H5Dopen2(file, "iter_1/scores", H5P_DEFAULT);
      if (dset < 0 || H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) < 0 || y[0] != 1 || y[1] != 2) ok = 0;
      if (dset >= 0) H5Dclose(dset);
      attr = H5Aopen_by_name(file, "iter_2", "reward", H5P_DEFAULT, H5P_DEFAULT);
      if (attr < 0 || H5Aread(attr, H5T_NATIVE_DOUBLE, &r) < 0 || r != 0.75) ok = 0;
      if (attr >= 0) H5Aclose(attr);
      dset = H5Dopen2(file, "iter_2/answer_bytes", H5P_DEFAULT);
      if (dset >= 0) {
        hid_t sp = H5Dget_space(dset);
        H5Sget_simple_extent_dims(sp, &n, NULL);
        H5Sclose(sp);
        H5Dclose(dset);
      }
      if (n != 3) ok = 0;
      H5Fclose(file);
    }
  }
  PetscCallMPI(MPI_Bcast(&ok, 1, MPI_INT, 0, PETSC_COMM_WORLD));
  PetscCallMPI(MPI_Bcast(&ngroups, 1, MPI_INT, 0, PETSC_COMM_WORLD));
  test_report((PetscBool)(ok && ngroups == 2 && count_tmp_files() == 0), "evals.h5: later evaluations added to a renamed copy (a new inode), a repeated group replaced, earlier groups and texts kept, no temporary left", "ok %d, %d groups", ok, ngroups);
  PetscCall(io_group_replace(PETSC_COMM_WORLD, "evaluations file", path, "reference", d, 1, NULL, NULL, 0, an, av, 1));
  PetscCall(io_group_drop_after(PETSC_COMM_WORLD, "evaluations file", path, "iter_", 1));
  ngroups = -1;
  if (rank == 0) {
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file >= 0 && H5Lexists(file, "iter_1", H5P_DEFAULT) > 0 && H5Lexists(file, "reference", H5P_DEFAULT) > 0 &&
        H5Lexists(file, "iter_2", H5P_DEFAULT) == 0)
      ngroups = 2;
    if (file >= 0) H5Fclose(file);
  }
  PetscCallMPI(MPI_Bcast(&ngroups, 1, MPI_INT, 0, PETSC_COMM_WORLD));
  test_report((PetscBool)(ngroups == 2 && count_tmp_files() == 0), "evals.h5 continued from iteration 1: iter_2 removed, iter_1 and reference kept", "groups differ");
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  char good[PETSC_MAX_PATH_LEN];

  if (argc == 4 && !strcmp(argv[1], "--read-record")) {
    char path[PETSC_MAX_PATH_LEN];
    snprintf(path, sizeof path, "%s/run.h5", argv[2]);
    return child_read_record(path, argv[3]);
  }
  PetscCall(PetscInitialize(&argc, &argv, NULL, "io tests"));
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  PetscCallMPI(MPI_Comm_size(PETSC_COMM_WORLD, &size));
  test_collective(PETSC_COMM_WORLD); /* also keeps rank 0 from changing files another rank still reads */
  PetscCall(test_tmpdir(tmpdir, sizeof tmpdir, "test_io"));
  path_in(good, "good.h5");
  PetscCall(test_ckpt_roundtrip(good));
  PetscCall(test_ckpt_bad_files(good));
  PetscCall(test_ckpt_bad_contents(good));
  PetscCall(test_ckpt_atomic());
  PetscCall(test_stale_tmp());
  PetscCall(test_record());
  PetscCall(test_data());
  PetscCall(test_data_mask());
  PetscCall(test_matrix());
  PetscCall(test_evals());
  PetscCallMPI(MPI_Barrier(PETSC_COMM_WORLD));
  PetscCall(PetscFinalize());
  return test_tally();
}
