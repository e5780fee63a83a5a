/* gen: the generation engine. Batched autoregressive decoding with a KV
 * cache and continuous batching: a fixed number of slots; a sample that
 * stops frees its slot and the next waiting prompt enters at once. Sampling
 * with temperature, top-k, top-p or greedy; stop at EOS or max_new_tokens;
 * no EOS before min_new_tokens. Every draw is keyed by (seed, iteration,
 * sample id, position), so a sample's tokens do not depend on the slot or
 * the batch it ran in. Each sampled token's log-probability under the
 * distribution it was drawn from is recorded, with that distribution's
 * allowed set when top-k, top-p or min_new_tokens restrict it (training
 * must use the same set, see ModelTokenDist in model.h). */
#ifndef RLFUSE_GEN_H
#define RLFUSE_GEN_H

#include "model.h"

#define GEN_MAX_STOP 8
typedef struct {
  PetscReal temperature; /* > 0; the distribution is softmax(logits / temperature) */
  PetscInt  top_k;       /* keep the k most probable tokens (0: all) */
  PetscReal top_p;       /* keep the smallest most-probable set with mass >= top_p (1: all) */
  PetscBool greedy;      /* take the most probable allowed token instead of drawing */
  PetscInt  max_new_tokens, min_new_tokens;
  PetscInt  slots;       /* samples decoded concurrently */
  PetscReal kv_mb;       /* bound on the KV cache, MiB; checked at start */
  PetscInt  eos;         /* the end-of-sequence token id */
  int       nstop;       /* further token ids that end a response (a chat model's end-of-turn), -gen_stop */
  int       stop[GEN_MAX_STOP];
  PetscBool eager;       /* each decode step's ops one by one, no recorded graphs (test_cuda_gen's comparison) */
  PetscBool share_prompts; /* samples admitted together with the same prompt prefill it once (-gen_share_prompts) */
  PetscBool
      batch_invariant; /* the forward's matmuls in an order fixed per row, prefill included (-gen_batch_invariant) */
  PetscBool stops_from_deck; /* the deck gave -gen_eos or -gen_stop: a checkpoint's tokenizer does not replace them */
} GenConfig;

/* Reads -gen_temperature, -gen_top_k, -gen_top_p, -gen_greedy,
 * -gen_max_new_tokens, -gen_min_new_tokens, -gen_slots, -gen_kv_mb, -gen_eos,
 * -gen_stop, -gen_share_prompts, -gen_batch_invariant. */
PetscErrorCode gen_config_set_from_options(GenConfig *cfg);
/* EOS and the stop tokens of a run from checkpoint ckpt: when the deck gives
 * neither -gen_eos nor -gen_stop, those of ckpt's /tokenizer where it has
 * one (io's ckpt_read_stops), else -gen_eos's default; prints one line
 * saying which ids and where from. ckpt NULL or "": none. Collective on comm. */
PetscErrorCode gen_config_stops_from(MPI_Comm comm, GenConfig *cfg, const char *ckpt);
/* Checks the settings against a model (prefix names its options, e.g.
 * "actor_") and the longest prompt: every error names the option, e.g.
 * "-gen_max_new_tokens 40 plus the longest prompt (27 tokens) exceeds
 * -actor_n_positions 64", or the KV cache bound. Collective on PETSC_COMM_WORLD. */
PetscErrorCode gen_config_check(const GenConfig *cfg, const ModelConfig *model, const char *prefix, int max_prompt_len);
/* True when top-k, top-p or min_new_tokens restrict the allowed set, i.e.
 * when GenBatch holds masks. */
PetscBool gen_masked(const GenConfig *cfg);
/* "ID[,ID...]" (the value of option opt) into ids: at most GEN_MAX_STOP
 * non-negative integers; *n gets the count. */
PetscErrorCode gen_parse_ids(const char *opt, const char *s, int *ids, int *n);
/* Whether token ends a response: -gen_eos or one of -gen_stop. */
PetscBool gen_is_stop(const GenConfig *cfg, int token);
/* Bytes of KV cache for the configured slots and a sequence bound Tmax. */
size_t gen_kv_bytes(const GenConfig *cfg, const ModelConfig *model, int Tmax);

/* ---- one draw ------------------------------------------------------------ */
/* The key of generation's draws is seed ^ GEN_RNG_DOMAIN (Backend.sample's
 * BackendSampleCfg.key): the uniform of (sample, position) at an iteration
 * is rng_uniform(key, iteration, sample, position, 0). */
#define GEN_RNG_DOMAIN 0x47454E5341ull /* "GENSA" */

/* ---- a batch of requests and its results -------------------------------- */
typedef struct {
  int        id;         /* sample id: the RNG key's sample component (unique within an iteration) */
  const int *prompt;
  int        prompt_len; /* >= 1 */
  /* A sample that goes on (partial rollouts, docs/async.md): the last
   * `resumed` tokens of prompt are its response so far, drawn earlier; they
   * count toward max_new_tokens and min_new_tokens, and its draws continue
   * at their positions. budget: at most this many new tokens in this call
   * (0: until EOS or max_new_tokens); a sample stopped by it has eos 0 and
   * fewer than max_new_tokens tokens. */
  int        resumed, budget;
} GenRequest;

enum { GEN_SRC_PROMPT = 0, GEN_SRC_MODEL = 1, GEN_SRC_ENV = 2 };

/* Results of gen_generate for n requests, in request order. Row i of the
 * [n, Tmax] arrays is request i; position t of a row is token t of the
 * sequence (prompt then response), zero past prompt_len + response_len. */
typedef struct {
  int        n, Tmax;
  int       *tokens;        /* [n, Tmax] */
  int       *prompt_len;    /* [n] */
  int       *response_len;  /* [n] */
  int       *eos;           /* [n] 1 if the response ended with EOS (included in response_len), or its
                                episode with an environment's answer that said done */
  float     *logprobs;      /* [n, Tmax] log-probability of the token at position t, response positions only */
  /* Allowed sets (when gen_masked): position (i,t) allows
   * mask_ids[mask_off[i*Tmax+t] .. mask_off[i*Tmax+t+1]-1], ascending; empty
   * (every id) for prompt positions, past the end and where nothing cut. A
   * set that is every id but the banned EOS (min_new_tokens, nothing else
   * cut) is the one entry tensor_set_but(eos) = -(eos+1) (tensor.h), not
   * V-1 ids. NULL when not masked. */
  int       *mask_off;      /* [n*Tmax + 1] */
  int       *mask_ids;
  size_t     mask_cap;      /* capacity of mask_ids */
  /* per engine step (one forward over the active slots): its wall time and
   * how many samples it advanced */
  int        nsteps, steps_cap;
  double    *step_seconds;
  int       *step_active;
  /* Who produced each token (GEN_SRC_*): the prompt, the model, or an
   * environment answering the model's turn (episodes, GenEpisode below);
   * [n, Tmax], GEN_SRC_PROMPT past the end. Per sample: the model's turns
   * (segments it began), and the observation tokens cut by
   * GenEpisode.max_obs or the episode's token bound. */
  unsigned char *src;
  int       *turns, *obs_cut;
  long long  prompt_rows;   /* prompt tokens the forward ran (a shared prompt counts once) */
  double     seconds;       /* wall time of gen_generate */
  double     env_wait;      /* of which waiting for environments' answers (episodes) */
  long long  new_tokens;    /* response tokens generated */
} GenBatch;

PetscErrorCode gen_batch_create(int n, int Tmax, PetscBool masked, GenBatch *b);
PetscErrorCode gen_batch_destroy(GenBatch *b);

/* ---- the engine ---------------------------------------------------------- */
typedef struct GenEngine GenEngine;
/* Allocates the KV cache for cfg->slots sequences of Tmax = max_prompt_len +
 * max_new_tokens positions (already checked by gen_config_check; on a
 * backend with graphs one slot more, which the padding rows of recorded
 * decode steps write) and, on one rank, the step's arrays in the model
 * backend's memory. The model must have the LM head; the engine does not
 * own it. */
PetscErrorCode gen_engine_create(Model *lm, const GenConfig *cfg, int max_prompt_len, GenEngine **eng);
PetscErrorCode gen_engine_destroy(GenEngine **eng);
/* Called as each sample finishes (EOS or max_new_tokens), with its index in
 * the request array, before gen_generate returns: the hand-over point for
 * inference that overlaps generation. May be NULL. */
typedef PetscErrorCode (*GenFinishFn)(void *ctx, const GenBatch *b, int index);
/* Generates responses for n requests with continuous batching. Requests
 * enter slots in order; each engine step runs one model_forward_cached over the
 * prompts of newly admitted samples and the last token of every running
 * sample. out must come from gen_batch_create(n, Tmax, gen_masked(cfg), ...)
 * with Tmax >= max_prompt_len + max_new_tokens. */
PetscErrorCode gen_generate(GenEngine *eng, uint64_t seed, uint32_t iteration, int n, const GenRequest *req,
                            GenBatch *out, GenFinishFn on_finish, void *ctx);

/* ---- a generation with hooks (used by migration, src/genfuse/migrate.c) --- */
/* Called at the top of every pass of the engine loop, before admission and
 * the step. *go enters as "the engine has a waiting or running sample"; the
 * hook may move samples in or out (below) and may set *go: PETSC_FALSE ends
 * the generation, PETSC_TRUE with nothing to do makes an idle pass (the
 * hook is called again at once). */
typedef PetscErrorCode (*GenStepFn)(void *ctx, GenEngine *e, GenBatch *b, PetscBool *go);

/* ---- episodes: the model's turns alternating with an environment's ----- */
/* A sample is an episode when the run has an environment (docs/
 * environments.md): a model segment that ends with one of stop[] (a tool
 * call's end, a chat model's end of turn) pauses the sample in its slot and
 * is handed to on_turn (which submits it to the environment and returns at
 * once); `lag` engine steps later on_obs gives the environment's answer
 * (waiting for it if need be): its tokens are appended to the sequence
 * (GEN_SRC_ENV, no log-probability), prefilled into the same cache at the
 * next step, and the model's next segment follows, unless the answer ends
 * the episode. The steps at which samples pause and resume depend on the
 * steps alone, never on the clock, so an episode's tokens do not depend on
 * the environment's latency. EOS and GenConfig.stop end an episode without
 * calling the environment, unless they are turn stops too (a chat model's
 * end of turn): then they end turns, and the environment ends the episode.
 * Limits: max_turns model segments (a turn stop in the last ends the
 * episode unanswered: eos 0, or 1 when the stop is EOS), max_turn_tokens tokens of
 * a segment (its turn then ends as at a turn stop), max_obs tokens kept of an
 * answer (at least 1), and the episode's max_new_tokens, which counts the
 * environment's tokens too (an answer that leaves no room ends the episode,
 * eos 0). An answer with no tokens must end the episode (done). */
typedef struct {
  int nstop;
  int stop[GEN_MAX_STOP];
  int max_turns, max_obs, lag;
  int max_turn_tokens; /* a model segment of this many tokens ends its turn as a stop does (0: no bound) */
  /* on_turn: sample `index`'s model segment `turn` (1, 2, ...) just ended
   * (b's row holds it: the positions where src is GEN_SRC_MODEL after the
   * last GEN_SRC_ENV one). on_obs: its answer, ids[0..n) (ids stay valid
   * until the next call) and whether the episode is done. */
  PetscErrorCode (*on_turn)(void *ctx, const GenBatch *b, int index, int turn);
  PetscErrorCode (*on_obs)(void *ctx, const GenBatch *b, int index, const int **ids, int *n, PetscBool *done);
  void *ctx;
} GenEpisode;
/* The first position of sample i's current model segment: after the
 * prompt or the environment's last answer (= the sequence's end when its
 * last token is not the model's). */
int gen_segment_start(const GenBatch *b, int i);
/* Whether token ends a model turn of an episode. */
PetscBool gen_is_turn_stop(const GenEpisode *ep, int token);

typedef struct {
  const int  *own;      /* the requests this engine starts with, in admission order (NULL: all n) */
  int         nown;
  GenFinishFn on_finish; /* may be NULL */
  void       *finish_ctx;
  GenStepFn   on_step;   /* may be NULL: run until the engine's own requests are done */
  void       *step_ctx;
  const GenEpisode *episode; /* NULL: a sample is one response */
} GenRun;
/* gen_generate over the requests run->own of the n (the batch still holds
 * all n rows: rows the engine never ran keep their prompt only). */
PetscErrorCode gen_generate_run(GenEngine *eng, uint64_t seed, uint32_t iteration, int n, const GenRequest *req,
                                GenBatch *out, const GenRun *run);
int gen_engine_running(const GenEngine *e); /* samples in slots */
int gen_engine_waiting(const GenEngine *e); /* samples waiting for a slot */
int gen_engine_slots(const GenEngine *e);

/* ---- moving unfinished samples between engines (src/gen/move.c) ------- */
/* A sample that has not finished leaves one engine and goes on in another
 * engine of the same model layout (same shard of layers and heads) without
 * recomputation: its tokens, log-probabilities and allowed sets so far, and
 * for a running sample the keys and values of this rank's shard of the
 * cache (positions 0 .. prompt+response-2: the last token's are computed by
 * the next step). Its draws stay keyed by its request id, so it continues
 * exactly as it would have where it was. */
/* The unfinished requests: running ones (slot order) with the cache
 * positions they hold, then waiting ones (queue order, 0 positions).
 * idx and kvlen need room for running + waiting; returns the count. */
int gen_engine_unfinished(const GenEngine *e, const GenBatch *b, int *idx, int *kvlen);
/* Words (4 bytes) of request idx's state. */
size_t gen_engine_state_words(const GenEngine *e, const GenBatch *b, int idx);
/* Writes request idx's state to w and removes it from the engine. */
PetscErrorCode gen_engine_take(GenEngine *e, const GenBatch *b, int idx, int *w);
/* Adds a state written by gen_engine_take (a running sample takes a free
 * slot, a waiting one joins the queue); *words gets its length. */
PetscErrorCode gen_engine_give(GenEngine *e, GenBatch *b, const int *w, size_t *words);

#endif
