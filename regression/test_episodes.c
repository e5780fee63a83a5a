/* test_episodes: multi-turn episodes in the generation engine (inc/gen.h,
 * GenEpisode) with a hand-made environment whose answer is a function of
 * (sample, turn, segment length): every row is walked from its prompt and
 * each token's source, each answer's tokens (cut at max_obs and at the
 * episode's token bound), the turn counts, the ends (EOS, done, the turn
 * limit, no room left) are recomputed; the model's tokens' recorded
 * log-probabilities equal a full forward over the episode (so an answer's
 * tokens were prefilled into the cache at their positions), answers carry
 * no log-probability or allowed set; an environment that sleeps a random
 * time before each answer gives the same tokens and log-probabilities bit
 * for bit; an answer outside the vocabulary is refused naming the sample
 * and the turn. */
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gen.h"
#include "ref.h"
#include "sys.h"
#include "test_report.h"

static const char help[] = "Multi-turn episodes in the generation engine.\n";

#define NREQ 13
#define MAXP 12
#define V    10
#define STOP  7 /* the turn stops */
#define STOP2 2
#define EOS  3

typedef struct {
  Model     *lm;
  int        prompts[NREQ][MAXP];
  GenRequest req[NREQ];
} Fixture;

/* The environment: answer n = 1 + (i + turn) % 4 tokens (3 * turn + j +
 * seglen) % V; done for every fourth sample at its second turn. latency:
 * sleep up to 3 ms before answering; bad: answer sample 5's first turn
 * with token V. */
typedef struct {
  int       seglen[NREQ], turn[NREQ], pending[NREQ], ids[NREQ][8], n[NREQ], calls;
  PetscBool latency, bad, empty;
  unsigned  seed;
} FakeEnv;

static int  answer_len(int i, int turn) { return 1 + (i + turn) % 4; }
static int  answer_tok(int turn, int j, int seglen) { return (3 * turn + j + seglen) % V; }
static PetscBool answer_done(int i, int turn) { return (PetscBool)(i % 4 == 0 && turn == 2); }

static PetscErrorCode fake_turn(void *ctx, const GenBatch *b, int i, int turn)
{
  FakeEnv *f = (FakeEnv *)ctx;
  int      end = b->prompt_len[i] + b->response_len[i], s = gen_segment_start(b, i);

  PetscFunctionBegin;
  PetscCheck(!f->pending[i], PETSC_COMM_SELF, PETSC_ERR_PLIB, "sample %d submitted twice", i);
  f->seglen[i] = end - s, f->turn[i] = turn, f->pending[i] = 1;
  f->n[i] = answer_len(i, turn);
  for (int j = 0; j < f->n[i]; j++) f->ids[i][j] = answer_tok(turn, j, f->seglen[i]);
  if (f->bad && i == 5 && turn == 1) f->ids[i][0] = V;
  if (f->empty && i == 5 && turn == 1) f->n[i] = 0;
  f->calls++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode fake_obs(void *ctx, const GenBatch *b, int i, const int **ids, int *n, PetscBool *done)
{
  FakeEnv *f = (FakeEnv *)ctx;

  PetscFunctionBegin;
  PetscCheck(f->pending[i], PETSC_COMM_SELF, PETSC_ERR_PLIB, "sample %d collected without a submission", i);
  if (f->latency) usleep((useconds_t)(rand_r(&f->seed) % 3000));
  f->pending[i] = 0;
  *ids          = f->ids[i];
  *n            = f->n[i];
  *done         = answer_done(i, f->turn[i]);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static GenConfig config(int max_new)
{
  GenConfig c = {.temperature = 1.0, .top_k = 0, .top_p = 1.0, .max_new_tokens = max_new, .slots = 4, .kv_mb = 64, .eos = EOS};
  return c;
}

static PetscErrorCode fixture_create(const Backend *be, Fixture *f)
{
  ModelConfig cfg    = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = V, .n_positions = 64, .head = MODEL_HEAD_LM};
  const int   len[NREQ] = {5, 1, 12, 3, 7, 2, 9, 4, 11, 6, 1, 8, 10};
  float      *p;

  PetscFunctionBegin;
  PetscCall(model_create(&cfg, be, &f->lm));
  PetscCall(PetscMalloc1(f->lm->nparams, &p)); /* O(0.3) weights: peaked next-token distributions (as test_gen) */
  for (int i = 0; i < f->lm->ntensors; i++) {
    const ModelTensor *t    = &f->lm->tensors[i];
    PetscBool          ln_w = t->ndim == 1 && strstr(t->name, "ln_") && strstr(t->name, ".weight") ? PETSC_TRUE : PETSC_FALSE;
    for (size_t e = 0; e < t->numel; e++)
      p[t->offset + e] = (ln_w ? 1.0f : 0.0f) + (t->ndim == 2 ? 0.3f : 0.1f) * rng_normal(5, (uint32_t)i, 0, (uint32_t)e, 7);
  }
  PetscCall(model_params_set(f->lm, p));
  PetscCall(PetscFree(p));
  for (int i = 0; i < NREQ; i++) {
    for (int t = 0; t < len[i]; t++) f->prompts[i][t] = (int)(rng_u32(11, (uint32_t)i, 0, (uint32_t)t, 0) % (uint32_t)V);
    f->req[i] = (GenRequest){.id = 100 + 7 * i, .prompt = f->prompts[i], .prompt_len = len[i]};
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode run(Fixture *f, const GenConfig *cfg, GenEpisode *ep, FakeEnv *env, GenBatch *b)
{
  GenEngine     *eng;
  GenRun         r = {NULL, 0, NULL, NULL, NULL, NULL, ep};
  PetscErrorCode ierr;

  PetscFunctionBegin;
  ep->on_turn = fake_turn, ep->on_obs = fake_obs, ep->ctx = env;
  PetscCall(gen_batch_create(NREQ, MAXP + (int)cfg->max_new_tokens, gen_masked(cfg), b));
  PetscCall(gen_engine_create(f->lm, cfg, MAXP, &eng));
  ierr = gen_generate_run(eng, 1234, 7, NREQ, f->req, b, &r); /* an expected error still frees the engine */
  PetscCall(gen_engine_destroy(&eng));
  PetscFunctionReturn(ierr);
}

/* Walks every row: sources, answers, cuts, turns and ends recomputed.
 * Returns the number of rows that disagree (detail: the first). */
static int walk(const GenBatch *b, const GenConfig *cfg, const GenEpisode *ep, int *answers, int *cuts, int *ends,
                char *detail)
{
  int bad = 0;

  *answers = *cuts = 0;
  for (int k = 0; k < 4; k++) ends[k] = 0; /* EOS, done, turn limit, no room */
  for (int i = 0; i < b->n; i++) {
    const int           *tok = b->tokens + (size_t)i * b->Tmax;
    const unsigned char *src = b->src + (size_t)i * b->Tmax;
    int P = b->prompt_len[i], L = b->response_len[i], t = P, turn = 1, seg = 0, cut = 0, why = -1, ok = 1, last = -1;

    for (int u = 0; u < P; u++) ok &= src[u] == GEN_SRC_PROMPT;
    while (ok && t < P + L) {
      ok &= src[t] == GEN_SRC_MODEL && b->logprobs[(size_t)i * b->Tmax + t] < 0;
      seg++;
      if (tok[t] == EOS && !gen_is_turn_stop(ep, EOS)) { why = 0, t++; break; }
      if (!gen_is_turn_stop(ep, tok[t]) && (ep->max_turn_tokens == 0 || seg < ep->max_turn_tokens)) {
        t++;
        continue;
      }
      last = tok[t++];
      if (turn == ep->max_turns) { why = 2; break; }
      { /* the answer to this turn, cut to max_obs and to the room left */
        int n = answer_len(i, turn), room = (int)cfg->max_new_tokens - (t - P), keep = PetscMin(PetscMin(n, ep->max_obs), room);
        for (int j = 0; j < keep && ok; j++, t++)
          ok &= src[t] == GEN_SRC_ENV && tok[t] == answer_tok(turn, j, seg) && b->logprobs[(size_t)i * b->Tmax + t] == 0;
        cut += n - keep;
        (*answers)++;
        if (answer_done(i, turn)) { why = 1; break; }
        if (keep == room) { why = 3; break; }
      }
      turn++, seg = 0;
    }
    if (why < 0) why = 3; /* max_new_tokens with a model token */
    ok &= t == P + L && b->turns[i] == turn && b->obs_cut[i] == cut && b->eos[i] == (why <= 1 || (why == 2 && last == EOS));
    for (int u = P + L; u < b->Tmax; u++) ok &= src[u] == GEN_SRC_PROMPT;
    if (b->mask_off)
      for (int u = P; u < P + L; u++) ok &= src[u] != GEN_SRC_ENV || b->mask_off[(size_t)i * b->Tmax + u + 1] == b->mask_off[(size_t)i * b->Tmax + u];
    *cuts += cut;
    ends[why]++;
    if (!ok && !bad++)
      snprintf(detail, TEST_DETAIL_MAX, "row %d: walked to %d of %d, turns %d (engine %d), cut %d (engine %d), eos %d", i,
               t, P + L, turn, b->turns[i], cut, b->obs_cut[i], b->eos[i]);
  }
  return bad;
}

/* The recorded log-probabilities of the model's tokens against a full
 * forward over the episodes. */
static PetscErrorCode full_forward_err(Fixture *f, const GenBatch *b, double *err, int *n)
{
  int   T = b->Tmax, N = b->n * T, *target;
  float *lp;
  ModelTokenDist dist = {.inv_temp = 1.0f};

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(N, &target, N, &lp));
  *n = 0, *err = 0;
  for (int i = 0; i < b->n; i++)
    for (int r = 0; r < T; r++) {
      int t = r + 1;
      target[i * T + r] = t < T && b->src[i * T + t] == GEN_SRC_MODEL ? b->tokens[i * T + t] : -1;
      *n += target[i * T + r] >= 0;
    }
  PetscCall(model_forward(f->lm, b->tokens, b->n, T));
  PetscCall(model_logprobs_dist(f->lm, target, &dist, lp, NULL));
  for (int k = 0; k < N; k++)
    if (target[k] >= 0) *err = PetscMax(*err, fabs(lp[k] - b->logprobs[k + 1]));
  PetscCall(PetscFree2(target, lp));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_walk(Fixture *f, int max_new, int max_turns, int max_obs, int lag, int turn_tokens, PetscBool eos_turns, const char *what)
{
  GenConfig  cfg = config(max_new);
  GenEpisode ep  = {.nstop = 2, .stop = {STOP, STOP2}, .max_turns = max_turns, .max_obs = max_obs, .lag = lag, .max_turn_tokens = turn_tokens};

  if (eos_turns) ep.stop[ep.nstop++] = EOS; /* a chat model's end of turn: EOS ends turns, not episodes */
  FakeEnv    env = {0}, slow = {0};
  GenBatch   b, c;
  int        answers = 0, cuts = 0, ends[4] = {0}, n = 0, same, nbad;
  double     err = 0;
  char       detail[TEST_DETAIL_MAX] = "", name[256];

  PetscFunctionBegin;
  PetscCall(run(f, &cfg, &ep, &env, &b));
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: every token's source, every answer (cut at %d tokens and at the bound), turns and ends recomputed", what, max_obs));
  nbad = walk(&b, &cfg, &ep, &answers, &cuts, ends, detail);
  test_measure(nbad == 0 && answers == env.calls && answers > 0, name,
              "%s%s%d answers, %d tokens cut; ends: %d EOS, %d done, %d turn limit, %d bound", detail, detail[0] ? "; " : "",
              answers, cuts, ends[0], ends[1], ends[2], ends[3]);
  PetscCall(full_forward_err(f, &b, &err, &n));
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: the model's tokens' log-probabilities equal a full forward over the episodes", what));
  test_measure(err <= 1e-4 && n > 0, name, "max |diff| %.3g over %d model tokens", err, n);
  slow.latency = PETSC_TRUE, slow.seed = (unsigned)time(NULL);
  PetscCall(run(f, &cfg, &ep, &slow, &c));
  same = !memcmp(b.tokens, c.tokens, (size_t)b.n * b.Tmax * sizeof(int)) &&
         !memcmp(b.logprobs, c.logprobs, (size_t)b.n * b.Tmax * sizeof(float)) && !memcmp(b.src, c.src, (size_t)b.n * b.Tmax);
  PetscCall(PetscSNPrintf(name, sizeof name, "%s: an environment answering after 0-3 ms gives the same tokens, log-probabilities and sources bit for bit", what));
  test_measure((PetscBool)same, name, "%d answers, waited %.3f s", slow.calls, c.env_wait);
  PetscCall(gen_batch_destroy(&b));
  PetscCall(gen_batch_destroy(&c));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_bad_answer(Fixture *f, PetscBool empty)
{
  GenConfig      cfg = config(24);
  GenEpisode     ep  = {.nstop = 2, .stop = {STOP, STOP2}, .max_turns = 4, .max_obs = 8, .lag = 2};
  FakeEnv        env = {.bad = !empty, .empty = empty};
  GenBatch       b   = {0};
  char           msg[TEST_MESSAGE_MAX] = "";
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscPushErrorHandler(test_capture_error, msg));
  ierr = run(f, &cfg, &ep, &env, &b);
  PetscCall(PetscPopErrorHandler());
  if (empty)
    test_report((PetscBool)(ierr && strstr(msg, "sample 135, turn 1") && strstr(msg, "no tokens and did not end the episode")),
                "an empty answer that does not end the episode stops the generation naming the sample and the turn", "%s", msg);
  else
    test_report((PetscBool)(ierr && strstr(msg, "sample 135, turn 1") && strstr(msg, "outside the vocabulary")),
                "an answer with a token outside the vocabulary stops the generation naming the sample and the turn", "%s", msg);
  PetscCall(gen_batch_destroy(&b));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  const Backend *be;
  Fixture        f;

  PetscCall(PetscInitialize(&argc, &argv, NULL, help));
  PetscCall(backend_get("cpu", &be));
  PetscCall(fixture_create(be, &f));
  PetscCall(test_walk(&f, 24, 4, 8, 2, 0, PETSC_FALSE, "4 turns, lag 2"));
  PetscCall(test_walk(&f, 24, 2, 2, 1, 0, PETSC_FALSE, "2 turns, answers cut at 2, lag 1"));
  PetscCall(test_walk(&f, 10, 6, 8, 3, 0, PETSC_FALSE, "6 turns in 10 tokens, lag 3"));
  PetscCall(test_walk(&f, 32, 5, 3, 2, 2, PETSC_FALSE, "turns of at most 2 tokens, 5 turns, lag 2"));
  PetscCall(test_walk(&f, 32, 3, 8, 2, 0, PETSC_TRUE, "EOS a turn stop too (a chat model's end of turn), 3 turns"));
  PetscCall(test_bad_answer(&f, PETSC_FALSE));
  PetscCall(test_bad_answer(&f, PETSC_TRUE));
  PetscCall(model_destroy(&f.lm));
  PetscCall(PetscFinalize());
  return test_tally();
}
