/* env: the environments of multi-turn episodes (docs/environments.md). An
 * episode alternates the model's segments with an environment's answers in
 * one token sequence: the generation engine pauses a sample when its
 * segment ends (inc/gen.h, GenEpisode), the environment answers with an
 * observation (token ids, its text for the record), a reward and whether
 * the episode is done, and the engine appends the observation and resumes.
 *
 * Requests are submitted without waiting and their answers collected
 * later, so environment processes work while the engine decodes. An
 * episode's state is an opaque string that the Env keeps per request index
 * and sends with the episode's next request, so any process may serve any
 * step. Every failure (a program that does not start, crashes, times out,
 * answers malformed JSON or ids outside the vocabulary) is an error of one
 * line naming the environment, the sample and the turn. */
#ifndef RLFUSE_ENV_H
#define RLFUSE_ENV_H

#include "sys.h"
#include <stdint.h>

/* One request: reset (turn 0: an episode begins with this prompt) or step
 * (turn >= 1: the model's segment `turn` of the episode). */
typedef struct {
  int         index;       /* the request's index in the batch: which episode's state */
  int         sample;      /* the sample id (with seed and iteration, the episode's key) */
  uint64_t    seed;
  uint32_t    iteration;
  int         turn;        /* 0: reset; else the model's segments so far, this one included */
  const int  *ids;         /* reset: the prompt's ids; step: the model's segment */
  int         n;
  const char *text;        /* their text (NULL where the run has no token text) */
  const char *answer;      /* reset: the prompt's reference answer (NULL: none) */
  const char *meta;        /* reset: the prompt's metadata (NULL: none) */
} EnvRequest;

/* One answer. The Env owns the arrays; they stay valid until the next
 * collect of the same index. A reset's answer has no observation ids. */
typedef struct {
  const int  *ids;         /* the observation's tokens, each in [0, vocab) */
  int         n;
  const char *text;        /* its text, for the record (may be NULL) */
  double      reward;      /* added to the episode's reward */
  PetscBool   done;        /* the episode ends with this answer */
  double      seconds;     /* wall time from submission to the answer */
} EnvAnswer;

typedef struct Env Env;
typedef struct {
  /* Starts req (copies what it needs; does not wait). At most one request
   * per index is outstanding: the caller collects before it submits again. */
  PetscErrorCode (*submit)(Env *env, const EnvRequest *req);
  /* The answer to index's outstanding request, waiting for it. */
  PetscErrorCode (*collect)(Env *env, int index, EnvAnswer *ans);
  PetscErrorCode (*destroy)(Env *env);
} EnvOps;
struct Env {
  const EnvOps *ops;
  const char   *name;      /* for messages: "calc", or the command shortened */
  int           vocab;     /* ids an answer may hold: [0, vocab) */
  int           nindex;    /* request indices: [0, nindex) */
  void         *data;
};

/* The built-in calculator of the arithmetic task (src/env/calc.c), in its
 * character vocabulary: a segment ending "A op B=" (the last such
 * expression, op one of + - *, integers) is answered with the value's
 * characters and ',' ("391,"); a segment without one with "?,". Never
 * done: the model ends the episode with EOS. Answers at once. */
PetscErrorCode env_calc_create(int nindex, Env **env);
#define ENV_CALC_CALL 17 /* '=': the token that ends a call, its default turn stop */

/* An environment program (src/env/command.c): `procs` processes of cmd
 * (through /bin/sh), each serving one request at a time as one JSON line
 * on its standard input answered by one JSON line on its standard output
 * (docs/environments.md, "The protocol"); timeout: seconds a request may
 * take. Collective-free: every rank that generates has its own. */
PetscErrorCode env_command_create(const char *cmd, int procs, double timeout, int vocab, int nindex, Env **env);

PetscErrorCode env_destroy(Env **env);

/* ---- options (src/env/options.c): the -env_ prefix --------------------- */
typedef struct {
  char      kind[16];      /* -env: "none", "calc" or "command" */
  char      command[PETSC_MAX_PATH_LEN]; /* -env_command */
  PetscInt  procs;         /* -env_procs */
  PetscReal timeout;       /* -env_timeout: seconds per request */
  PetscInt  max_turns;     /* -env_max_turns: model segments per episode */
  PetscInt  max_obs;       /* -env_max_obs_tokens: tokens kept of an answer */
  PetscInt  max_turn_tokens; /* -env_max_turn_tokens: a model segment this long ends its turn (0: no bound) */
  PetscInt  lag;           /* -env_lag_steps: engine steps from a segment's end to its answer's prefill */
  char      turn_stop[64]; /* -env_turn_stop: ids that end a model turn (default: the environment's) */
  PetscInt  reward_at;     /* -env_reward_at: ENV_REWARD_END or ENV_REWARD_TURN */
} EnvOptions;
/* Where an episode's step rewards enter the per-token rewards of the
 * algorithms whose returns run token by token (-algo ppo, reinforce_pp):
 * with the final score at the episode's last model token, or each at the
 * last model token of the turn it answered. */
enum { ENV_REWARD_END, ENV_REWARD_TURN };
extern const char *const EnvRewardAtNames[];
PetscErrorCode env_options_from_options(EnvOptions *o);
/* Whether the run has an environment. */
PetscBool env_on(const EnvOptions *o);

#endif
