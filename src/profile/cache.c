/* cache.c: the profile cache. A plan search given neither -cost_hardware
 * nor -cost_profile (-mode plan, -placement auto) profiles this machine for
 * the deck's models, quickly, on the job's ranks, and keeps the profile in
 * a cache directory for the next search of the same models here. A
 * profile is keyed by what its times depend on: host, backend, ranks,
 * threads per rank, the models' trunks and the grid. The file's name is a
 * hash of the key and the key is stored in it (cache_key), so a reused file
 * is checked against the whole key, not only its hash. */
#include "profile_impl.h"
#include "io.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The quick grid: the largest entries of -mode profile's default grid are
 * what takes its time (64 rows x 256 tokens, 64 MiB messages); beyond this
 * grid the interpolation extrapolates (docs/costmodel.md). Seconds on the
 * test machine's 2 ranks for the regression decks' models. */
static const ProfSpec cache_spec = {16, 64, 3, 1, 2, 4.0 * 1024 * 1024, 1048576, 0};

/* FNV-1a, 64 bits: a file name per key; the key itself decides reuse. */
static unsigned long long key_hash(const char *s)
{
  unsigned long long h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static PetscErrorCode cache_key(const RunCtx *run, const CostDeck *deck, char *key, size_t len)
{
  ModelConfig t[4];
  int       n = prof_deck_trunks(deck, t), k;
  char      host[256] = "unknown";

  PetscFunctionBegin;
  if (gethostname(host, sizeof host - 1)) PetscCall(PetscStrncpy(host, "unknown", sizeof host));
  k = snprintf(key, len, "host %s; backend %s; ranks %d; threads %d; trunks", host, run->be->name, run->size,
               run->nthreads);
  for (int i = 0; i < n && k > 0 && (size_t)k < len; i++)
    k += snprintf(key + k, len - (size_t)k, " %dx%dx%dx%d", t[i].n_embd, t[i].n_head, t[i].vocab_size,
                  t[i].n_positions);
  if (k > 0 && (size_t)k < len)
    k += snprintf(key + k, len - (size_t)k,
                  "; grid rows %d len %d repeats %d warmup %d extra %d bytes %.0f params %.0f", cache_spec.rows_max,
                  cache_spec.len_max, cache_spec.repeats, cache_spec.warmup, cache_spec.extra, cache_spec.bytes_max,
                  cache_spec.opt_max);
  PetscCheck(k > 0 && (size_t)k < len, PETSC_COMM_SELF, PETSC_ERR_PLIB, "profile cache key longer than %zu characters",
             len);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* -cost_profile_cache, else $XDG_CACHE_HOME/rlfuse/profiles, else
 * $HOME/.cache/rlfuse/profiles. */
static PetscErrorCode cache_dir(const char *given, char *dir, size_t len)
{
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

  PetscFunctionBegin;
  if (given && given[0]) PetscCall(sys_path_printf(dir, len, "%s", given));
  else if (xdg && xdg[0] == '/') PetscCall(sys_path_printf(dir, len, "%s/rlfuse/profiles", xdg));
  else {
    PetscCheck(home && home[0], PETSC_COMM_SELF, PETSC_ERR_ARG_NULL,
               "the profile cache has no directory: set -cost_profile_cache DIR (or HOME), or give -cost_hardware "
               "FILE.deck or -cost_profile FILE.h5");
    PetscCall(sys_path_printf(dir, len, "%s/.cache/rlfuse/profiles", home));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char *path, *key;
  int         state; /* 0: no file, 1: its key is ours, 2: another key, 3: unreadable */
} Lookup;

/* Rank 0: is the file there, readable, and of our key? */
static PetscErrorCode cache_lookup(void *vctx)
{
  Lookup        *l = (Lookup *)vctx;
  Profile        pf;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  l->state = 0;
  if (access(l->path, F_OK)) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = profile_read(l->path, &pf);
  PetscCall(PetscPopErrorHandler());
  if (ierr) {
    l->state = 3;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  l->state = strcmp(pf.key, l->key) ? 2 : 1;
  PetscCall(profile_free(&pf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode cache_mkdir(void *vctx)
{
  PetscFunctionBegin;
  PetscCall(sys_mkdir_p((const char *)vctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Measures the quick grid on the job's ranks and stores it at path. */
static PetscErrorCode cache_fill(const RunCtx *run, const CostDeck *deck, char *dir, const char *key, const char *path,
                                 double *seconds)
{
  Profile pf;

  PetscFunctionBegin;
  PetscCall(io_on_root(PETSC_COMM_WORLD, cache_mkdir, dir));
  PetscCall(profile_measure(run, &cache_spec, deck, &pf));
  PetscCall(PetscStrncpy(pf.key, key, sizeof pf.key));
  PetscCall(profile_write_rank0(path, &pf));
  *seconds = pf.seconds;
  PetscCall(profile_free(&pf));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode profile_cached(const RunCtx *run, const CostDeck *deck, const char *given, char *path, size_t len,
                              char *how, size_t howlen)
{
  static const char *const was[4] = {"none there", "", "another key's file there", "an unreadable file there"};
  char                     key[1024], dir[PETSC_MAX_PATH_LEN];
  Lookup                   l = {path, key, 0};
  double                   seconds = 0;

  PetscFunctionBegin;
  PetscCheck(run->be, PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
             "profiling this machine for the plan search needs the job's backend");
  PetscCall(cache_dir(given, dir, sizeof dir));
  PetscCall(cache_key(run, deck, key, sizeof key));
  /* rank 0's key and directory for all: on several nodes the hosts differ */
  PetscCallMPI(sys_mpi_bcast(key, (int)sizeof key, MPI_CHAR, 0, PETSC_COMM_WORLD));
  PetscCallMPI(sys_mpi_bcast(dir, (int)sizeof dir, MPI_CHAR, 0, PETSC_COMM_WORLD));
  PetscCall(sys_path_printf(path, len, "%s/%016llx.h5", dir, key_hash(key)));
  PetscCall(io_on_root(PETSC_COMM_WORLD, cache_lookup, &l));
  PetscCallMPI(sys_mpi_bcast(&l.state, 1, MPI_INT, 0, PETSC_COMM_WORLD));
  if (l.state == 1) PetscCall(PetscSNPrintf(how, howlen, "reused from the cache (key: %s)", key));
  else {
    PetscCall(cache_fill(run, deck, dir, key, path, &seconds));
    PetscCall(PetscSNPrintf(how, howlen, "measured now on this job's %d rank%s in %.1f s, %s before (key: %s)",
                            run->size, run->size > 1 ? "s" : "", seconds, was[l.state], key));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
