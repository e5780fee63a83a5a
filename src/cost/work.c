/* cost/work.c: one iteration's workload (CostWork): the deck's PPO settings
 * and models as the job parsed them (CostDeck), overridden by the -cost_
 * options (a named LLaMA shape for paper-scale work), and the response lengths,
 * drawn from a named distribution, a histogram file or a previous run's
 * rollouts.h5 (docs/costmodel.md). */
#include "cost_impl.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An int option into an int. */
#define RfOptIntAsIntCost(name, help, def, dst) \
  do {                                          \
    PetscInt t_;                                \
    RfOptInt(name, help, def, &t_);             \
    *(dst) = (int)t_;                           \
  } while (0)

/* Stream of the keyed draws of the lengths (apart from every other use of -seed). */
#define COST_RNG_STREAM 0x636f7374u /* "cost" */

/* A length from a histogram given by its values and cumulative counts, at u in [0,1). */
static int hist_pick(const int *val, const double *cum, int n, double u)
{
  double x = u * cum[n - 1];
  for (int i = 0; i < n; i++)
    if (x < cum[i]) return val[i];
  return val[n - 1];
}

static PetscErrorCode lengths_hist(const char *opt, const char *spec, const char *path, int n, unsigned long long seed,
                                   int *len)
{
  FILE   *f = fopen(path, "r");
  int    *val = NULL, nv = 0, cap = 0, v, line = 0;
  double *cum = NULL, c;
  char    buf[256];

  PetscFunctionBegin;
  PetscCheck(f, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: histogram file %s cannot be read", opt, spec, path);
  while (fgets(buf, sizeof buf, f)) {
    line++;
    if (buf[0] == '#' || buf[strspn(buf, " \t\r\n")] == 0) continue;
    if (sscanf(buf, "%d %lf", &v, &c) != 2 || v < 1 || c < 0) {
      fclose(f);
      PetscCall(PetscFree2(val, cum));
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
              "%s %s: line %d of %s: expected 'length count' with a length >= 1 and a count >= 0", opt, spec, line,
              path);
    }
    if (nv == cap) {
      int    *nval;
      double *ncum;
      cap = cap ? 2 * cap : 64;
      PetscCall(PetscMalloc2(cap, &nval, cap, &ncum));
      if (nv) {
        PetscCall(PetscArraycpy(nval, val, nv));
        PetscCall(PetscArraycpy(ncum, cum, nv));
      }
      PetscCall(PetscFree2(val, cum));
      val = nval, cum = ncum;
    }
    val[nv] = v;
    cum[nv] = (nv ? cum[nv - 1] : 0) + c;
    nv++;
  }
  fclose(f);
  if (!nv || cum[nv - 1] <= 0) {
    PetscCall(PetscFree2(val, cum));
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s %s: %s holds no length with a positive count", opt, spec,
            path);
  }
  for (int i = 0; i < n; i++) len[i] = hist_pick(val, cum, nv, rng_uniform(seed, COST_RNG_STREAM, 0, (uint32_t)i, 0));
  PetscCall(PetscFree2(val, cum));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every iteration's /iter_<k>/response_lengths of a rollouts.h5 (or only
 * the group named `only`), pooled, with /iter_<k>/prompt_lengths beside
 * them where every iteration has them (nprompt counts those that do not). */
typedef struct {
  int        *pool, *ppool, n, cap, nprompt;
  const char *only;
  char        bad[160]; /* the first negative length: a corrupt file, never clamped */
} RollRead;

static int roll_iter(IoId g, const char *name, void *ctx)
{
  RollRead *r = ctx;
  long long n, np = -1;
  char      path[128], ppath[128];

  if (strncmp(name, "iter_", 5) || (r->only && strcmp(name, r->only))) return 0;
  PetscSNPrintf(path, sizeof path, "%s/response_lengths", name);
  PetscSNPrintf(ppath, sizeof ppath, "%s/prompt_lengths", name);
  n = io_dataset_npoints(g, path);
  if (n < 0 || r->n + n > 1 << 24) return -1;
  if (io_exists(g, ppath)) np = io_dataset_npoints(g, ppath);
  if (r->n + n > r->cap) {
    r->cap = (int)(2 * (r->n + n));
    if (PetscRealloc((size_t)r->cap * sizeof(int), &r->pool) || PetscRealloc((size_t)r->cap * sizeof(int), &r->ppool))
      return -1;
  }
  if (io_dataset_read_all(g, path, IO_INT, r->pool + r->n)) return -1;
  for (long long i = 0; i < n; i++)
    if (r->pool[r->n + i] < 0) {
      PetscSNPrintf(r->bad, sizeof r->bad, "/%s[%lld] is %d", path, (long long)i, r->pool[r->n + i]);
      return -1;
    }
  if (np != n || io_dataset_read_all(g, ppath, IO_INT, r->ppool + r->n)) r->nprompt++;
  r->n += (int)n;
  return 0;
}

/* The ":iter_K" that ends a rollouts path, or NULL. */
static char *lengths_iter_suffix(char *path)
{
  char *iter = strrchr(path, ':');

  if (!iter || strncmp(iter, ":iter_", 6) || !iter[6]) return NULL;
  return strspn(iter + 6, "0123456789") == strlen(iter + 6) ? iter : NULL;
}

/* path is FILE.h5, or FILE.h5:iter_K for one iteration's rollout as it
 * was, row by row (rows beyond its batch start over from its first). */
static PetscErrorCode lengths_rollouts(const char *opt, const char *spec, char *path, int n, unsigned long long seed,
                                       int *len, int *plen, PetscBool *paired)
{
  IoId     file;
  RollRead r    = {NULL, NULL, 0, 0, 0, NULL, ""};
  char    *iter = lengths_iter_suffix(path);
  int      e;

  PetscFunctionBegin;
  if (iter) *iter = 0, r.only = iter + 1;
  PetscCall(io_open_read("rollouts file", path, &file));
  e = io_iterate(file, roll_iter, &r);
  PetscCall(io_close(&file));
  if (e < 0 || r.n == 0) {
    PetscCall(PetscFree(r.pool));
    PetscCall(PetscFree(r.ppool));
    PetscCheck(!r.bad[0], PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s %s: %s %s: response lengths cannot be negative", opt, spec, path, r.bad);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
            "%s %s: %s has no readable /%s/response_lengths (write one with -dump_rollouts 1)", opt, spec, path,
            r.only ? r.only : "iter_<k>");
  }
  /* the pooled rollouts, drawn with replacement for the batch, or the one
   * iteration's in order: a response keeps its own prompt (their lengths go
   * together on a task like sorting) */
  *paired = plen && !r.nprompt;
  for (int i = 0; i < n; i++) {
    uint32_t k = r.only ? (uint32_t)i % (uint32_t)r.n
                        : rng_u32(seed, COST_RNG_STREAM, 1, (uint32_t)i, 0) % (uint32_t)r.n;
    len[i]     = r.pool[k];
    if (*paired) plen[i] = r.ppool[k];
  }
  PetscCall(PetscFree(r.pool));
  PetscCall(PetscFree(r.ppool));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_work_lengths(const char *opt, const char *spec, int n, int max, unsigned long long seed, int *len,
                                 int *plen, PetscBool *paired)
{
  double a = 0, b = 0;
  char   rest[PETSC_MAX_PATH_LEN] = "";

  PetscFunctionBegin;
  *paired = PETSC_FALSE;
  if (sscanf(spec, "lognormal:%lf:%lf", &a, &b) == 2) {
    /* median a, 99th percentile b: mu = ln a, sigma = (ln b - ln a) / z_0.99 */
    double mu = log(a), sigma = (log(b) - mu) / 2.3263478740408408;
    PetscCheck(a >= 1 && b >= a, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %s: lognormal needs 1 <= median <= p99",
               opt, spec);
    for (int i = 0; i < n; i++)
      len[i] = (int)floor(exp(mu + sigma * rng_normal(seed, COST_RNG_STREAM, 2, (uint32_t)i, 0)) + 0.5);
  } else if (sscanf(spec, "uniform:%lf:%lf", &a, &b) == 2) {
    PetscCheck(a >= 1 && b >= a, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %s: uniform needs 1 <= lo <= hi", opt,
               spec);
    for (int i = 0; i < n; i++)
      len[i] = (int)(a + floor(rng_uniform(seed, COST_RNG_STREAM, 3, (uint32_t)i, 0) * (b - a + 1)));
  } else if (sscanf(spec, "fixed:%lf", &a) == 1) {
    PetscCheck(a >= 1 && a == floor(a), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %s: fixed needs a length >= 1",
               opt, spec);
    for (int i = 0; i < n; i++) len[i] = (int)a;
  } else if (!strncmp(spec, "hist:", 5) && spec[5]) {
    PetscCall(PetscStrncpy(rest, spec + 5, sizeof rest));
    PetscCall(lengths_hist(opt, spec, rest, n, seed, len));
  } else if (!strncmp(spec, "rollouts:", 9) && spec[9]) {
    PetscCall(PetscStrncpy(rest, spec + 9, sizeof rest));
    PetscCall(lengths_rollouts(opt, spec, rest, n, seed, len, plen, paired));
  } else
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
            "%s '%s': expected lognormal:MEDIAN:P99, uniform:LO:HI, fixed:N, hist:FILE or rollouts:FILE.h5", opt, spec);
  for (int i = 0; i < n; i++) len[i] = PetscMax(1, PetscMin(len[i], max));
  if (*paired)
    for (int i = 0; i < n; i++) plen[i] = PetscMax(1, plen[i]);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The file a -cost_lengths value reads: hist:FILE and rollouts:FILE[:iter_K]'s
 * FILE, else none. */
static PetscErrorCode cost_lengths_file(const char *spec, char *file, size_t len)
{
  char *iter;

  PetscFunctionBegin;
  file[0] = '\0';
  if (!strncmp(spec, "hist:", 5)) PetscCall(PetscStrncpy(file, spec + 5, len));
  else if (!strncmp(spec, "rollouts:", 9)) {
    PetscCall(PetscStrncpy(file, spec + 9, len));
    if ((iter = lengths_iter_suffix(file))) *iter = '\0';
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

const IoFileOption cost_file_options[] = {
  {"-cost_hardware", IO_FILE_IN, NULL, NULL},
  {"-cost_profile", IO_FILE_IN, NULL, NULL},
  {"-cost_lengths", IO_FILE_IN, NULL, cost_lengths_file},
  {"-cost_prompt_lengths", IO_FILE_IN, NULL, cost_lengths_file},
  {NULL, IO_FILE_IN, NULL, NULL},
};

/* A model's shape: the named one (option opt), else the deck's model. */
static PetscErrorCode role_shape(const char *opt, const char *name, const ModelConfig *cfg, PetscBool value_head,
                                 CostShape *m)
{
  ModelConfig c = *cfg;

  PetscFunctionBegin;
  if (name[0]) {
    PetscCall(cost_shape_named(opt, name, value_head, m));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  c.head = value_head ? MODEL_HEAD_SCALAR : MODEL_HEAD_LM;
  cost_shape_from_model(&c, m);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The four shapes: named ones replace the deck's models (the reference
 * takes the actor's name, the reward model the critic's). */
static PetscErrorCode work_shapes(const CostDeck *d, const char *actor, const char *critic, CostWork *w)
{
  /* without -cost_critic_shape, -cost_actor_shape names the critic too: a
   * paper-scale critic of the actor's shape */
  const char *cname = critic[0] ? critic : actor, *copt = critic[0] ? "-cost_critic_shape" : "-cost_actor_shape";

  PetscFunctionBegin;
  PetscCall(role_shape("-cost_actor_shape", actor, &d->cfg[0], PETSC_FALSE, &w->actor));
  PetscCall(role_shape("-cost_actor_shape", actor, &d->cfg[2], PETSC_FALSE, &w->ref));
  PetscCall(role_shape(copt, cname, &d->cfg[d->critic_free ? 3 : 1], PETSC_TRUE, &w->critic));
  PetscCall(role_shape(copt, cname, &d->cfg[3], PETSC_TRUE, &w->reward));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The option a workload value came from, for its message: -cost_X where given, else the deck's option that
 * gave its default (a user who wrote -ppo_minibatches 0 never wrote -cost_minibatches). */
static PetscErrorCode work_opt(const char *cost, const char *deck, const char **name)
{
  PetscBool set;

  PetscFunctionBegin;
  PetscCall(PetscOptionsHasName(NULL, NULL, cost, &set));
  *name = set ? cost : deck;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_work_from_options(const CostDeck *d, CostWork *w)
{
  char lengths[PETSC_MAX_PATH_LEN + 16] = "", plengths[PETSC_MAX_PATH_LEN + 16] = "", actor[64] = "", critic[64] = "";
  PetscBool   plen_set = PETSC_FALSE, paired = PETSC_FALSE, help = PETSC_FALSE;
  const char *ob = NULL, *op = NULL, *on = NULL, *omb = NULL, *omc = NULL, *oe = NULL, *osl = NULL, *ost = NULL,
             *opa = NULL, *ope = NULL, *og = NULL; /* each value's option, for messages */

  PetscFunctionBegin;
  PetscCall(PetscMemzero(w, sizeof *w));
  PetscCall(PetscOptionsHasHelp(NULL, &help));
  /* defaults: the deck's PPO settings, as PPO parsed them */
  w->batch       = d->batch;
  w->max_new     = d->max_new;
  w->minibatches = d->minibatches;
  w->epochs      = d->epochs;
  w->micro       = d->micro;
  w->gen_slots   = d->gen_slots;
  w->prompt_len  = d->prompt_len;
  w->iterations  = 3;
  w->critic_free = d->critic_free;
  w->reward_free = d->reward_free;
  w->staleness   = d->staleness;
  w->prox        = d->prox;
  w->partial     = d->partial;
  w->partial_extra = d->partial_extra;
  w->group       = PetscMax(1, d->group);
  w->env_answers = d->env_answers;
  w->env_lag     = d->env_lag;
  w->env_s       = 0;
  w->env_procs   = d->env_procs;
  w->episodes    = d->episodes;
  PetscOptionsBegin(PETSC_COMM_WORLD, "cost_", "Cost model workload (docs/costmodel.md)", NULL);
  RfOptIntAsIntCost("-batch", "Rollout sequences per iteration (default -rollout_batch)", w->batch, &w->batch);
  RfOptIntAsIntCost("-prompt_len",
                    "Prompt tokens per sequence, or the longest with -cost_prompt_lengths (default the deck's longest "
                    "prompt: -task_len_max + 2, or the -ppo_prompts file's)",
                    w->prompt_len, &w->prompt_len);
  PetscCall(PetscOptionsHasName(NULL, NULL, "-cost_prompt_len", &plen_set));
  RfOptString("-prompt_lengths",
              "Prompt lengths, each clipped to -cost_prompt_len: the syntax of -cost_lengths (default: each response's "
              "own prompt with -cost_lengths rollouts:FILE, else every prompt -cost_prompt_len)",
              plengths, sizeof plengths);
  RfOptIntAsIntCost("-max_new", "Most response tokens (default -gen_max_new_tokens)", w->max_new, &w->max_new);
  RfOptIntAsIntCost("-minibatches", "PPO mini-batches per epoch (default -ppo_minibatches)", w->minibatches,
                    &w->minibatches);
  RfOptIntAsIntCost("-microbatches",
                    "Micro-batches per mini-batch of a call whose plan gives -<call>_mbs 0 (default -ppo_microbatches)",
                    w->micro, &w->micro);
  RfOptIntAsIntCost("-epochs", "PPO epochs per rollout (default -ppo_epochs)", w->epochs, &w->epochs);
  RfOptIntAsIntCost("-slots", "Samples a generation replica decodes together (default -gen_slots; 0: all of its rows)",
                    w->gen_slots, &w->gen_slots);
  RfOptIntAsIntCost("-iterations", "Iterations the simulator runs (the first places the weights)", w->iterations,
                    &w->iterations);
  RfOptIntAsIntCost("-staleness",
                    "Asynchronous RL's staleness K: the generation of batch i+K beside the training on batch i "
                    "(default -async_staleness; 0: one after the other)",
                    w->staleness, &w->staleness);
  RfOptIntAsIntCost("-partial",
                    "Partial rollouts: the tokens a generation call draws per sample at most, the rest in later calls "
                    "with newer weights (default -async_partial; 0: whole samples; needs -cost_staleness >= 1)",
                    w->partial, &w->partial);
  RfOptIntAsIntCost("-partial_extra",
                    "Partial rollouts: samples in flight beyond a batch (default -async_partial_extra times the group, "
                    "else -cost_batch)",
                    w->partial_extra, &w->partial_extra);
  RfOptIntAsIntCost("-group",
                    "Samples per prompt: partial rollouts' pool ends and leaves by whole groups (default "
                    "-rollout_group "
                    "for an -algo with groups, else 1)",
                    w->group, &w->group);
  RfOptIntAsIntCost("-env_answers",
                    "Multi-turn episodes: the environment's answers per episode that generation waits for (default "
                    "-env_max_turns - 1 with -env, else 0)",
                    w->env_answers, &w->env_answers);
  RfOptReal("-env_seconds",
            "Multi-turn episodes: seconds an environment answer takes (default 0: the built-in calculator's; give a "
            "program's, e.g. run.h5's env_answers time over its tool calls)",
            w->env_s, &w->env_s);
  RfOptIntAsIntCost("-env_procs",
                    "Multi-turn episodes: answers an environment computes at once (default -env_procs with -env "
                    "command; 0: all)",
                    w->env_procs, &w->env_procs);
  RfOptIntAsIntCost("-env_lag",
                    "Multi-turn episodes: engine steps from a turn's end to its answer's prefill (default "
                    "-env_lag_steps)",
                    w->env_lag, &w->env_lag);
  RfOptBool("-critic_free", "No critic calls (default: an -algo without a critic, src/ppo/algos.c)", w->critic_free,
            &w->critic_free);
  RfOptBool("-reward_free",
            "No reward model call (default: a deck whose rewards come from -reward_fn or -reward_command only)",
            w->reward_free, &w->reward_free);
  RfOptString("-lengths",
              "Response lengths: lognormal:MEDIAN:P99, uniform:LO:HI, fixed:N, hist:FILE (lines 'length count') or "
              "rollouts:FILE.h5[:iter_K] (default fixed at -cost_max_new)",
              lengths, sizeof lengths);
  RfOptString("-actor_shape",
              "Actor and reference shape by name (llama2-7b, llama2-13b, codellama-34b, llama2-70b, llama-13b, "
              "llama-33b, llama-65b); default the deck's models (its checkpoints, else the -policy_ options)",
              actor, sizeof actor);
  RfOptString("-critic_shape",
              "Critic and reward shape by name, with a scalar head; default -cost_actor_shape's, else the deck's "
              "models",
              critic, sizeof critic);
  PetscOptionsEnd();
  if (help) PetscFunctionReturn(PETSC_SUCCESS); /* -help lists the options; a bad value is the run's to refuse */
  PetscCall(work_opt("-cost_batch", "-rollout_batch", &ob));
  PetscCall(work_opt("-cost_prompt_len", "-task_len_max", &op));
  PetscCall(work_opt("-cost_max_new", "-gen_max_new_tokens", &on));
  PetscCall(work_opt("-cost_minibatches", "-ppo_minibatches", &omb));
  PetscCall(work_opt("-cost_microbatches", "-ppo_microbatches", &omc));
  PetscCall(work_opt("-cost_epochs", "-ppo_epochs", &oe));
  PetscCall(work_opt("-cost_slots", "-gen_slots", &osl));
  PetscCall(work_opt("-cost_staleness", "-async_staleness", &ost));
  PetscCall(work_opt("-cost_partial", "-async_partial", &opa));
  PetscCall(work_opt("-cost_partial_extra", "-async_partial_extra", &ope));
  PetscCall(work_opt("-cost_group", "-rollout_group", &og));
  PetscCheck(w->batch > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %d must be positive", ob, w->batch);
  PetscCheck(w->prompt_len > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %d must be positive", op,
             w->prompt_len);
  PetscCheck(w->max_new > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %d must be positive", on, w->max_new);
  PetscCheck(w->minibatches > 0 && w->batch % w->minibatches == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "%s %d must be positive and divide %s %d", omb, w->minibatches, ob, w->batch);
  PetscCheck(w->micro > 0 && (w->batch / w->minibatches) % w->micro == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "%s %d must be positive and divide a mini-batch of %d", omc, w->micro, w->batch / w->minibatches);
  PetscCheck(w->epochs > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %d must be positive", oe, w->epochs);
  PetscCheck(w->gen_slots >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %d must be 0 or positive", osl,
             w->gen_slots);
  PetscCheck(w->staleness >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %d must be >= 0", ost, w->staleness);
  PetscCheck(w->partial >= 0 && (!w->partial || w->staleness >= 1), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "%s %d must be >= 0, and > 0 only with %s >= 1 (now %d)", opa, w->partial, ost, w->staleness);
  if (w->partial && !w->partial_extra) w->partial_extra = w->batch;
  PetscCheck(w->group >= 1 && (!w->partial || (w->batch % w->group == 0 && w->partial_extra % w->group == 0)),
             PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "%s %d must be positive and, with %s, divide %s %d and %s (%d samples)", og, w->group, opa, ob, w->batch,
             ope, w->partial_extra);
  PetscCheck(w->partial_extra >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "%s %d must be >= 0", ope,
             w->partial_extra);
  PetscCheck(w->env_answers >= 0 && w->env_answers < 1000 && w->env_lag >= 0 && w->env_procs >= 0 && w->env_s >= 0 &&
                 w->env_s < 1e6,
             PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "-cost_env_answers %d must be in [0, 1000), -cost_env_lag %d and -cost_env_procs %d >= 0, "
             "-cost_env_seconds %g in [0, 1e6)",
             w->env_answers, w->env_lag, w->env_procs, w->env_s);
  PetscCheck(!w->episodes || !w->partial, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "%s %d with a multi-turn deck (-env): partial rollouts do not carry episodes, and the run refuses them",
             opa, w->partial);
  if (!w->staleness) w->prox = PETSC_FALSE;
  else if (!d->staleness) w->prox = PETSC_TRUE; /* -cost_staleness alone: the default correction (decoupled) */
  PetscCheck(w->iterations >= 1 && w->iterations <= 100, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "-cost_iterations %d must be in 1..100", w->iterations);
  PetscCall(work_shapes(d, actor, critic, w));
  w->nlen = w->batch;
  PetscCall(PetscMalloc1(w->nlen, &w->len));
  PetscCall(PetscMalloc1(w->nlen, &w->plen));
  if (!lengths[0]) PetscCall(PetscSNPrintf(lengths, sizeof lengths, "fixed:%d", w->max_new));
  { /* a refused length specification must not keep the arrays */
    PetscErrorCode ierr = cost_work_lengths("-cost_lengths", lengths, w->nlen, w->max_new, (unsigned long long)d->seed,
                                            w->len, plen_set || plengths[0] ? NULL : w->plen, &paired);
    PetscBool      drawn;

    /* prompts drawn apart from the responses: their own stream of draws */
    if (!ierr && plengths[0])
      ierr = cost_work_lengths("-cost_prompt_lengths", plengths, w->nlen, w->prompt_len,
                               (unsigned long long)d->seed ^ 0x70726f6d707473ULL, w->plen, NULL, &drawn);
    if (ierr) PetscCall(cost_work_free(w));
    PetscCall(ierr);
  }
  if (paired || plengths[0]) /* the longest prompt bounds the KV cache */
    for (int i = 0; i < w->nlen; i++) w->prompt_len = PetscMax(w->prompt_len, w->plen[i]);
  else PetscCall(PetscFree(w->plen)); /* every prompt -cost_prompt_len long */
  /* the sequences sorted once, for the expected longest of a micro-batch */
  PetscCall(PetscMalloc1(w->nlen, &w->seq_sorted));
  for (int i = 0; i < w->nlen; i++) w->seq_sorted[i] = (w->plen ? w->plen[i] : w->prompt_len) + w->len[i];
  PetscCall(PetscSortReal(w->nlen, w->seq_sorted));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_work_free(CostWork *w)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(w->len));
  PetscCall(PetscFree(w->plen));
  PetscCall(PetscFree(w->seq_sorted));
  w->nlen = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_prims_paths_from_options(CostPrimsPaths *pp)
{
  const char *paths[] = {"device", "host"};
  PetscInt    path    = 0;

  PetscFunctionBegin;
  pp->hw[0] = pp->prof[0] = pp->cache[0] = '\0';
  PetscOptionsBegin(PETSC_COMM_WORLD, "cost_", "Plan search primitives", NULL);
  RfOptString("-hardware", "Hardware description deck for the analytic primitives (e.g. input/hardware/h100_sxm.deck)",
              pp->hw, sizeof pp->hw);
  RfOptString("-profile",
              "Profile from -mode profile for the measured primitives (default, without -cost_hardware: this "
              "machine's, from the profile cache)",
              pp->prof, sizeof pp->prof);
  RfOptString("-profile_cache",
              "Directory of the profiles the plan search measures on this machine when given no primitives (default "
              "$XDG_CACHE_HOME/rlfuse/profiles, else ~/.cache/rlfuse/profiles)",
              pp->cache, sizeof pp->cache);
  RfOptEnum("-sync_path",
            "How weight syncs (reallocations) move: device (device to device, NCCL) or host (device to host, MPI, host "
            "to device: what -device cuda does today)",
            paths, 2, &path);
  PetscOptionsEnd();
  pp->sync_host = path == 1;
  PetscCheck(!pp->hw[0] || !pp->prof[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "the plan search takes one of -cost_hardware %s (analytic) and -cost_profile %s (measured), not both",
             pp->hw, pp->prof);
  PetscFunctionReturn(PETSC_SUCCESS);
}
