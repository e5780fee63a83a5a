/* search: a cache of estimates. The annealing proposes the same
 * neighbours again and again (most are refused), the tuning and the polish
 * retry the plans around the best, and an estimate of a large plan takes
 * milliseconds, so every checked plan is remembered by its signature: each
 * call's rank list (hashed), grid and micro-batches, and the settings.
 * Direct-mapped: a new plan overwrites an old one of the same slot. The
 * cache belongs to one objective; another objective empties it. Each
 * annealing chain works on a copy (search_cache_clone): threads share none. */
#include "search_impl.h"

#include <stdio.h>
#include <string.h>

#define SEARCH_CACHE_SLOTS 16384

typedef struct {
  uint64_t ranks;
  int      n, dp, tp, pp, mbs;
} SearchSigCall;

typedef struct {
  SearchSigCall call[MFC_COUNT];
  int           offload, zero1, fuse, fuse_train;
  double        migrate_at; /* R_t (-1: auto), part of a migrate plan */
} SearchSig;

typedef struct {
  PetscBool    used, ok;
  SearchSig    sig;
  CostEstimate est;
} SearchSlot;

struct SearchCache_ {
  SearchObjective f;
  void           *ctx;
  SearchSlot     *slot;
  long            hits, misses;
};

static uint64_t search_mix(uint64_t h, uint64_t v)
{
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

static void search_sig(SearchSpace sp, const Plan *plan, SearchSig *s, uint64_t *hash)
{
  uint64_t h = 1469598103934665603ull;

  memset(s, 0, sizeof *s); /* padding too: signatures are compared with memcmp */
  for (int c = 0; c < MFC_COUNT; c++) {
    const PlanCall *k = &plan->call[c];
    SearchSigCall  *x = &s->call[c];
    uint64_t        r = 7;

    if (!sp->needs.cfg[c]) continue;
    for (int i = 0; i < k->nranks; i++) r = search_mix(r, (uint64_t)k->ranks[i]);
    *x = (SearchSigCall){r, k->nranks, k->dp, k->tp, k->pp, k->mbs};
    h = search_mix(search_mix(search_mix(h, r), (uint64_t)(k->dp * 1024 + k->tp)), (uint64_t)(k->pp * 65536 + k->mbs));
  }
  s->offload = plan->offload, s->zero1 = plan->zero1, s->fuse = plan->fuse, s->fuse_train = plan->fuse_train;
  s->migrate_at = plan->fuse == FUSE_MIGRATE ? plan->migrate_at : 0;
  *hash         = search_mix(h, (uint64_t)(s->offload + 2 * s->zero1 + 4 * s->fuse + 16 * s->fuse_train +
                                   32 * (int)(1000 * s->migrate_at + 1000)));
}

PetscErrorCode search_cache_destroy(SearchCache *c)
{
  PetscFunctionBegin;
  if (*c) PetscCall(PetscFree((*c)->slot));
  PetscCall(PetscFree(*c));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_cache_clone(SearchSpace from, SearchCache *to)
{
  PetscFunctionBegin;
  PetscCall(PetscNew(to));
  PetscCall(PetscMalloc1(SEARCH_CACHE_SLOTS, &(*to)->slot));
  if (from->cache) {
    PetscCall(PetscArraycpy((*to)->slot, from->cache->slot, SEARCH_CACHE_SLOTS));
    (*to)->f = from->cache->f, (*to)->ctx = from->cache->ctx;
  } else PetscCall(PetscArrayzero((*to)->slot, SEARCH_CACHE_SLOTS));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static _Thread_local int search_quiet; /* this thread is in plan_check */
static int                 search_catching;
static char                search_caught[1024];

static PetscErrorCode search_catch(MPI_Comm comm, int line, const char *fun, const char *file, PetscErrorCode n,
                                   PetscErrorType p, const char *mess, void *ctx)
{
  (void)comm, (void)line, (void)fun, (void)file, (void)ctx;
  if (search_quiet || p != PETSC_ERROR_INITIAL) return n;
#pragma omp critical(rlfuse_search_caught)
  if (!search_caught[0]) snprintf(search_caught, sizeof search_caught, "%s", mess && mess[0] ? mess : "(no message)");
  return n;
}

PetscErrorCode search_catch_begin(void)
{
  PetscFunctionBegin;
  search_caught[0] = 0;
  PetscCall(PetscPushErrorHandler(search_catch, NULL));
  search_catching = 1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode search_catch_end(const char **message)
{
  PetscFunctionBegin;
  search_catching = 0;
  PetscCall(PetscPopErrorHandler());
  *message = search_caught;
  PetscFunctionReturn(PETSC_SUCCESS);
}

void search_cache_count(SearchSpace sp, SearchCache from)
{
  if (!sp->cache || !from) return;
  sp->cache->hits += from->hits;
  sp->cache->misses += from->misses;
}

PetscErrorCode search_evaluate(SearchSpace sp, SearchObjective f, void *ctx, const Plan *plan, PetscBool *ok,
                               CostEstimate *est)
{
  SearchCache    c;
  SearchSig      sig;
  SearchSlot    *s;
  uint64_t       h;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  if (!sp->cache) {
    PetscCall(PetscNew(&sp->cache));
    PetscCall(PetscCalloc1(SEARCH_CACHE_SLOTS, &sp->cache->slot));
  }
  c = sp->cache;
  if (c->f != f || c->ctx != ctx) { /* another objective: forget */
    PetscCall(PetscArrayzero(c->slot, SEARCH_CACHE_SLOTS));
    c->f = f, c->ctx = ctx;
  }
  search_sig(sp, plan, &sig, &h);
  s = &c->slot[h % SEARCH_CACHE_SLOTS];
  if (s->used && !memcmp(&s->sig, &sig, sizeof sig)) {
    c->hits++;
    *ok  = s->ok;
    *est = s->est;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  c->misses++;
  /* a refusal goes through PETSc's error handlers, a process-wide stack:
   * on the chains' threads search_catch keeps it silent by this thread's
   * flag (one thread at a time: PetscError copies each message into one
   * process-wide buffer); elsewhere (one thread) a silent handler is pushed
   * around it */
  if (search_catching) {
#pragma omp critical(rlfuse_search_plan_check)
    {
      search_quiet = 1;
      ierr         = plan_check(plan, &sp->needs);
      search_quiet = 0;
    }
  } else {
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = plan_check(plan, &sp->needs);
    PetscCall(PetscPopErrorHandler());
  }
  *ok = ierr ? PETSC_FALSE : PETSC_TRUE;
  PetscCall(PetscMemzero(est, sizeof *est));
  if (*ok) PetscCall(f(ctx, plan, est));
  s->used = PETSC_TRUE, s->sig = sig, s->ok = *ok, s->est = *est;
  PetscFunctionReturn(PETSC_SUCCESS);
}

void search_cache_stats(SearchSpace sp, long *hits, long *misses)
{
  *hits   = sp->cache ? sp->cache->hits : 0;
  *misses = sp->cache ? sp->cache->misses : 0;
}
