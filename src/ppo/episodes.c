/* episodes.c: multi-turn episodes in PPO's generation (docs/
 * environments.md). The engine's GenEpisode callbacks talk to the run's
 * environment (inc/env.h): before a generation every row's episode is reset
 * (the environment sees its prompt, answer and metadata), each model turn
 * that ends with a turn stop is submitted at once, and its answer is
 * collected at the engine pass the episode's schedule names. The
 * environment's rewards, answers (tool calls) and time are kept per row of
 * the rollout, for the final score and the record. Each generation replica
 * talks to its own environment about its own rows; the rows' results reach
 * every rank with the rest of the generation (rollout_share_gen). A replica
 * split over ranks (tp, pp) runs the engine on each of them in step, with
 * the same tokens: its head (the last stage's tp rank 0, whose rows
 * exec_share_rows hands on) alone talks to its environment and broadcasts
 * each answer's tokens to the replica's other ranks when the engine asks.
 * Every rank has an environment: which ranks are heads depends on the mesh
 * of the call (the generating actor's, or the trained actor's for the
 * held-out evaluation). */
#include "base.h"
#include "env.h"
#include <string.h>

struct PPOEpisodes {
  Env              *env;
  /* the generation in progress on a replica of several ranks: its ranks, the
   * head first (MPI_COMM_NULL: one rank); whether this rank is the head */
  MPI_Comm          rep;
  PetscBool         head;
  int              *obs; /* an answer's tokens on the other ranks */
  int               ocap;
  GenEpisode        ep;
  const TokenTable *tt; /* the segments' text (NULL: ids only) */
  /* the generation in progress: its key, requests and the rollout rows
   * its batch rows are (row b0 + i) */
  uint64_t          seed;
  uint32_t          iteration;
  const GenRequest *req;
  Rollout          *r; /* its rows' environment results (Rollout.env) */
  int               b0, cap;
  char             *text;
  size_t            tcap;
};

/* The text of tok[0..n), every token's bytes (EOS and end-of-turn tokens
 * included); NULL without a token table (the environment gets ids alone). */
static const char *ids_text(PPOEpisodes *x, const int *tok, int n)
{
  TokenTable all;
  if (!x->tt) return NULL;
  all        = *x->tt;
  all.eos_id = -1;
  token_table_decode(&all, tok, n, &x->text, &x->tcap);
  return x->text;
}

/* Row i's answer; at: the position of the last model token of the turn it
 * answers (-1: a reset's answer, which answers none). */
static PetscErrorCode take(PPOEpisodes *x, int i, int at, EnvAnswer *a)
{
  Rollout *r = x->r;

  PetscFunctionBegin;
  PetscCall(x->env->ops->collect(x->env, i, a));
  r->env.reward[x->b0 + i] += a->reward;
  r->env.seconds[x->b0 + i] += a->seconds;
  if (at >= 0) r->env.at[(size_t)(x->b0 + i) * r->T + at] = (float)a->reward;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* GenEpisode.on_turn: the model's segment (its tokens since the last
 * answer) to the environment, without waiting. */
static PetscErrorCode on_turn(void *ctx, const GenBatch *b, int i, int turn)
{
  PPOEpisodes *x    = (PPOEpisodes *)ctx;
  size_t       base = (size_t)i * b->Tmax;
  int          end = b->prompt_len[i] + b->response_len[i], s = gen_segment_start(b, i);
  EnvRequest   q;

  PetscFunctionBegin;
  if (!x->head) PetscFunctionReturn(PETSC_SUCCESS); /* the head submits */
  q = (EnvRequest){i, x->req[i].id, x->seed, x->iteration, turn, b->tokens + base + s, end - s, NULL, NULL, NULL};
  q.text = ids_text(x, q.ids, q.n);
  PetscCall(x->env->ops->submit(x->env, &q));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* GenEpisode.on_obs: the answer, waiting for it. */
static PetscErrorCode on_obs(void *ctx, const GenBatch *b, int i, const int **ids, int *n, PetscBool *done)
{
  PPOEpisodes *x      = (PPOEpisodes *)ctx;
  int          hdr[2] = {0, 0};

  PetscFunctionBegin;
  if (x->head) {
    EnvAnswer a;
    PetscCall(take(x, i, b->prompt_len[i] + b->response_len[i] - 1, &a)); /* the row waits at its segment's end */
    /* a tool call is a turn the environment answered; the answer that ends the episode with nothing to say (a chat
       model's last turn, which a turn stop also ends) is not one */
    if (a.n > 0 || !a.done) x->r->env.calls[x->b0 + i]++;
    *ids   = a.ids;
    hdr[0] = a.n, hdr[1] = a.done ? 1 : 0;
  }
  if (x->rep != MPI_COMM_NULL) { /* every rank of the replica asks at the same pass, for the same row */
    PetscCallMPI(sys_mpi_bcast(hdr, 2, MPI_INT, 0, x->rep));
    if (!x->head) {
      if (hdr[0] > x->ocap) {
        PetscCall(PetscFree(x->obs));
        x->ocap = hdr[0];
        PetscCall(PetscMalloc1(x->ocap, &x->obs));
      }
      *ids = x->obs;
    }
    if (hdr[0] > 0) PetscCallMPI(sys_mpi_bcast((void *)*ids, hdr[0], MPI_INT, 0, x->rep));
  }
  *n    = hdr[0];
  *done = hdr[1] ? PETSC_TRUE : PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_episodes_setup(const PPOOptions *o, const TokenTable *tt, int vocab, int rows, PPOEpisodes **out)
{
  const EnvOptions *eo = &o->env;
  GenEpisode        ep = {0};
  PPOEpisodes      *x;

  PetscFunctionBegin;
  *out = NULL;
  if (!env_on(eo)) PetscFunctionReturn(PETSC_SUCCESS);
  /* the turn stops first, checked before any process starts */
  if (eo->turn_stop[0]) PetscCall(gen_parse_ids("-env_turn_stop", eo->turn_stop, ep.stop, &ep.nstop));
  else if (!strcmp(eo->kind, "calc")) ep.stop[ep.nstop++] = ENV_CALC_CALL;
  else if (o->gen.nstop) { /* a chat model's end-of-turn tokens end its turns, not its episodes */
    ep.nstop = o->gen.nstop;
    PetscCall(PetscArraycpy(ep.stop, o->gen.stop, o->gen.nstop));
  } else if (o->gen.eos >= 0) ep.stop[ep.nstop++] = (int)o->gen.eos; /* the end of turn is EOS */
  PetscCheck(ep.nstop > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
             "-env %s: no token ends a model turn; give -env_turn_stop ID[,ID...] (or -gen_stop)", eo->kind);
  for (int k = 0; k < ep.nstop; k++)
    PetscCheck(ep.stop[k] < vocab, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-env_turn_stop: token %d is not a token of the actor's vocabulary of %d", ep.stop[k], vocab);
  ep.max_turns       = (int)eo->max_turns;
  ep.max_obs         = (int)eo->max_obs;
  ep.max_turn_tokens = (int)eo->max_turn_tokens;
  ep.lag             = (int)eo->lag;
  ep.on_turn         = on_turn;
  ep.on_obs          = on_obs;
  PetscCall(PetscNew(&x));
  x->rep    = MPI_COMM_NULL;
  x->tt     = tt;
  x->cap    = rows;
  x->ep     = ep;
  x->ep.ctx = x;
  *out      = x; /* ppo_episodes_destroy frees it if the environment does not start */
  if (!strcmp(eo->kind, "calc")) PetscCall(env_calc_create(rows, &x->env));
  else PetscCall(env_command_create(eo->command, (int)eo->procs, eo->timeout, vocab, rows, &x->env));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_episodes_destroy(PPOEpisodes **px)
{
  PPOEpisodes *x = *px;

  PetscFunctionBegin;
  if (!x) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(env_destroy(&x->env));
  if (x->rep != MPI_COMM_NULL) PetscCallMPI(MPI_Comm_free(&x->rep));
  PetscCall(PetscFree(x->obs));
  PetscCall(PetscFree(x->text));
  PetscCall(PetscFree(x));
  *px = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* gen with the turn stops taken out of its stops: they end turns. */
GenConfig ppo_episodes_gen(const PPOEpisodes *x, const GenConfig *gen)
{
  GenConfig g = *gen;
  g.nstop     = 0;
  for (int k = 0; k < gen->nstop; k++)
    if (!gen_is_turn_stop(&x->ep, gen->stop[k])) g.stop[g.nstop++] = gen->stop[k];
  return g;
}

PetscErrorCode ppo_episodes_begin(PPOEpisodes *x, const Mesh *m, uint64_t seed, uint32_t iteration,
                                  const GenRequest *req, Rollout *r, int b0, int n, const GenEpisode **ep)
{
  PetscFunctionBegin;
  if (x->rep != MPI_COMM_NULL) PetscCallMPI(MPI_Comm_free(&x->rep)); /* the last call's replica */
  x->head = exec_is_head(m);
  if (m->tp * m->pp > 1) /* this call's replica: its head (last stage, tp rank 0) rank 0 */
    PetscCallMPI(MPI_Comm_split(m->all.mpi, m->d, (m->pp - 1 - m->p) * m->tp + m->t, &x->rep));
  PetscCheck(b0 + n <= x->cap && n <= x->env->nindex, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "episodes: %d rows from %d exceed the %d the environment was made for", n, b0, x->cap);
  x->seed = seed, x->iteration = iteration, x->req = req, x->r = r, x->b0 = b0;
  for (int i = 0; i < r->B; i++) r->env.reward[i] = r->env.seconds[i] = 0, r->env.calls[i] = 0;
  PetscCall(PetscArrayzero(r->env.at, (size_t)r->B * r->T));
  *ep = &x->ep;
  if (!x->head) PetscFunctionReturn(PETSC_SUCCESS); /* the replica's head resets the episodes */
  for (int i = 0; i < n; i++) {
    EnvRequest q = {i, req[i].id, seed, iteration, 0, req[i].prompt, req[i].prompt_len, NULL,
                    r->answer && r->answer[b0 + i] ? r->answer[b0 + i] : NULL,
                    r->meta && r->meta[b0 + i] ? r->meta[b0 + i] : NULL};
    q.text = ids_text(x, q.ids, q.n);
    PetscCall(x->env->ops->submit(x->env, &q));
  }
  for (int i = 0; i < n; i++) {
    EnvAnswer a;
    PetscCall(take(x, i, -1, &a));
    PetscCheck(a.n == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "environment %s: its answer to the reset of sample %d holds %d observation tokens; a reset's answer "
               "has none",
               x->env->name, req[i].id, a.n);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_episodes_share(const Mesh *m, Rollout *r)
{
  PetscFunctionBegin;
  PetscCall(exec_share_rows(m, r->B, 1, MPI_DOUBLE, r->env.reward));
  PetscCall(exec_share_rows(m, r->B, 1, MPI_DOUBLE, r->env.seconds));
  PetscCall(exec_share_rows(m, r->B, 1, MPI_INT, r->env.calls));
  PetscCall(exec_share_rows(m, r->B, r->T, MPI_FLOAT, r->env.at));
  PetscFunctionReturn(PETSC_SUCCESS);
}

void ppo_episodes_stats(const Rollout *r, PPOEpisodeStats *st)
{
  PetscMemzero(st, sizeof *st);
  if (!r->episodes || r->B == 0) return;
  for (int b = 0; b < r->B; b++) {
    int calls = r->env.calls[b];
    st->turns += r->gen.turns[b];
    st->calls += calls;
    st->call_frac += calls > 0;
    st->env_tokens += r->len[b] - rollout_model_len(r, b);
    st->cut += r->gen.obs_cut[b];
    st->seconds += r->env.seconds[b];
  }
  st->turns /= r->B, st->calls /= r->B, st->call_frac /= r->B, st->env_tokens /= r->B;
}

