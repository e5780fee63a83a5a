/* search_impl.h: what the files of src/search share: the space (candidate
 * meshes and each call's strategies per mesh size) and the plan edits the
 * moves and the enumerator make. */
#ifndef RLFUSE_SEARCH_IMPL_H
#define RLFUSE_SEARCH_IMPL_H

#include "search.h"

typedef struct {
  int lo, n; /* ranks lo .. lo+n-1 */
} SearchMesh;

typedef struct {
  int dp, tp, pp, mbs;
} SearchStrat;

/* A setting the search may flip: offload, zero1, fuse_gen_inf, fuse_train. */
typedef enum { SEARCH_SET_OFFLOAD, SEARCH_SET_ZERO1, SEARCH_SET_FUSE, SEARCH_SET_FUSE_TRAIN } SearchSetting;

typedef struct SearchCache_ *SearchCache; /* cache.c */

struct SearchSpace_ {
  SearchSpaceSpec spec;
  PlanNeeds       needs;
  int             nmesh;
  SearchMesh     *mesh;
  int             ncall;
  MFCId           call[MFC_COUNT];          /* the calls in use */
  int            *nstrat[MFC_COUNT];        /* [world+1]: strategies of the call on a mesh of n ranks */
  SearchStrat   **strat[MFC_COUNT];         /* [world+1] */
  int             nset;
  SearchSetting   set[4];
  SearchCache     cache;                    /* estimates of the plans seen (search_evaluate) */
};

PetscErrorCode search_cache_destroy(SearchCache *c);
/* A copy of the cache of `from` (none: an empty one) for a space that
 * shares the rest of from (a chain's view): the threads never share one. */
PetscErrorCode search_cache_clone(SearchSpace from, SearchCache *to);
/* Adds the hits and misses of `from` to the counts of sp's cache. */
void search_cache_count(SearchSpace sp, SearchCache from);
/* Errors raised on the chains' threads (cache.c). PETSc's error handlers
 * are one process-wide stack, so a thread can neither push a silent handler
 * for plan_check's refusals without silencing the other threads, nor print
 * its own error through the job's handler safely. Between begin and end
 * (on the main thread, around a parallel region) one handler serves every
 * thread: plan_check's refusals stay silent (a flag of the thread's own),
 * and the first other error's message is kept; end gives it back ("" if
 * none) for the main thread to raise again. */
PetscErrorCode search_catch_begin(void);
PetscErrorCode search_catch_end(const char **message);

/* Puts call c on mesh m with strategy s; in a fused plan, inference calls
 * that share a rank with c's replicas, where either has replicas of
 * several ranks, take c's mesh and grid too (one layout: plan check). */
void search_put(Plan *plan, MFCId c, const SearchMesh *m, const SearchStrat *s);
/* Flips setting k (fuse_gen_inf: none <-> stream). */
/* Steps setting k to its next state; search_states(k) steps return to the
 * start (2 for the on/off settings; 3 for the fusion of generation and
 * inference: none, stream, migrate with R_t auto). */
void search_flip(Plan *plan, SearchSetting k);
static inline int search_states(SearchSetting k) { return k == SEARCH_SET_FUSE ? 3 : 2; }
/* What follows from the calls' meshes: a fused critic_train on the
 * actor_train ranks in reverse stage order; concurrent pairs whose meshes
 * now overlap dropped (they are a promise the plan can no longer keep). */
void search_derive(SearchSpace sp, Plan *plan);
/* The call is placed by another (critic_train under -fuse_train). */
PetscBool search_derived(const Plan *plan, MFCId c);

/* One annealing chain (anneal.c) from `start` (derived, estimated as
 * start_est), its draws keyed by (o->seed, key, iteration); budget_s > 0
 * stops it after that many seconds (and, without an iteration cap, is what
 * the temperature cools over). res gets the best plan seen, unpolished. */
PetscErrorCode search_chain(SearchSpace sp, SearchObjective f, void *ctx, const Plan *start,
                            const CostEstimate *start_est, const SearchOptions *o, uint32_t key, double budget_s,
                            SearchResult *res);
/* The end of a search: settings moved (one to each of its states, or with
 * pairs two flipped together), each followed by search_tune, while that
 * improves *plan; stops between tunings after `deadline` (sys_wtime).
 * seen (may be NULL) keeps the best feasible fused plan tried. */
PetscErrorCode search_polish(SearchSpace sp, SearchObjective f, void *ctx, PetscBool pairs, double deadline, Plan *plan,
                             CostEstimate *est, SearchResult *seen);

/* -mode plan's and -placement auto's helpers for the stages before PPO
 * (stages.c). The workload of a deck without PPO (-mode sft, rm): its
 * stage's model in every role, for the primitives. */
void           search_stages_deck(const RunCtx *run, const CostJob *job, CostDeck *deck);
/* A pipeline's stages on the workload's shapes (-cost_actor_shape,
 * -cost_critic_shape): SFT trains the actor's, RM the reward model's. */
void           search_stages_shapes(const CostWork *w, CostJob *job);
/* The placements for the plan's ZeRO-1 (a deck without PPO: the faster
 * state over the stages' steps when settings are searched, else off) into
 * best, one line each, and their calls into needs. */
PetscErrorCode search_stages_finish(const RunCtx *run, const CostJob *job, const SearchStages *st,
                                    const SearchSpaceSpec *spec, PlanNeeds *needs, Plan *best);

#endif
