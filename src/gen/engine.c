/* gen/engine.c: continuous batching over a fixed set of KV-cache slots.
 * Each engine step admits waiting prompts into free slots, runs one
 * model_forward_cached over the new prompts and the last token of every
 * running sample, and draws one token per sample. A sample that stops frees
 * its slot for the next step, so short responses do not hold long ones
 * back. Draws are keyed by (seed, iteration, sample id, position), so a
 * sample's tokens follow from its logits alone, whatever slot, order or
 * company it ran in (docs/design.md says where the logits themselves are
 * batch invariant). On one rank a step stays in the model backend's memory
 * (step_resident; on cuda the decode forward replays a recorded graph);
 * a model split over ranks draws on the host (step_host). */
#include "gen_impl.h"
#include "sys.h"
#include <string.h>

PetscErrorCode gen_engine_create(Model *lm, const GenConfig *cfg, int max_prompt_len, GenEngine **eng)
{
  GenEngine *e;
  int        S = (int)cfg->slots, V = lm->cfg.vocab_size, R;

  PetscFunctionBegin;
  PetscCheck(lm->cfg.head == MODEL_HEAD_LM, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "gen_engine_create: the model has the %s head; generation needs the LM head",
             ModelHeadNames[lm->cfg.head]);
  PetscCheck(S >= 1 && max_prompt_len >= 1 && cfg->max_new_tokens >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "gen_engine_create: slots %d, max_prompt_len %d and max_new_tokens %" PetscInt_FMT
             " must be positive (run gen_config_check first)",
             S, max_prompt_len, cfg->max_new_tokens);
  PetscCall(PetscNew(&e));
  e->lm             = lm;
  e->cfg            = *cfg;
  e->max_prompt_len = max_prompt_len;
  e->Tmax           = max_prompt_len + (int)cfg->max_new_tokens;
  e->V              = V;
  e->nslot          = S;
  R                 = S * e->Tmax; /* a prefill's rows: a resumed sample's prompt holds its response so far */
  PetscCall(model_cached_batch_invariant(lm, cfg->batch_invariant));
  e->resident = model_cached_resident_ok(lm);
  e->graphs   = (PetscBool)(e->resident && lm->be->graph_begin);
  PetscCall(model_kv_create(lm, S + (e->graphs ? 1 : 0), e->Tmax, &e->kv));
  PetscCall(PetscMalloc3(R, &e->row_tok, R, &e->row_slot, R, &e->row_pos));
  PetscCall(PetscMalloc6(S, &e->slot_req, S, &e->slot_fresh, S, &e->slot_row, 2 * S, &e->finished, S, &e->slot_lead, S,
                         &e->head_rows));
  PetscCall(PetscMalloc3(S, &e->slot_kv, S, &e->slot_wait, S, &e->slot_seg));
  e->sampler = backend_cpu();
  if (!e->resident) {
    e->work_bytes = e->sampler->sample_work(S, V);
    PetscCall(PetscMalloc(e->work_bytes, &e->work));
  }
  PetscCall(PetscMalloc1((size_t)S * V, &e->allowed));
  PetscCall(PetscMalloc5(S, &e->draw_tok, S, &e->draw_na, S, &e->running, S, &e->draw_lp, S, &e->draw_bd));
  PetscCall(PetscMalloc4(S, &e->draw_row, S, &e->draw_id, S, &e->draw_pos, S, &e->draw_ban));
  if (e->resident) {
    size_t nin = 3 * (size_t)R + 4 * (size_t)S;
    PetscCall(lm->be->alloc(nin * sizeof(int), (void **)&e->d_in));
    PetscCall(lm->be->alloc(4 * (size_t)S * sizeof(int), (void **)&e->d_out));
    PetscCall(PetscMalloc2(nin, &e->h_in, 4 * (size_t)S, &e->h_out));
  }
  *eng = e;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gen_engine_destroy(GenEngine **eng)
{
  GenEngine *e = *eng;

  PetscFunctionBegin;
  if (!e) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(model_kv_destroy(e->lm, &e->kv));
  if (e->resident) {
    PetscCall(e->lm->be->free(e->d_in));
    PetscCall(e->lm->be->free(e->d_out));
    PetscCall(e->lm->be->free(e->d_allowed));
    PetscCall(e->lm->be->free(e->d_work));
    PetscCall(PetscFree2(e->h_in, e->h_out));
  }
  PetscCall(PetscFree3(e->row_tok, e->row_slot, e->row_pos));
  PetscCall(PetscFree6(e->slot_req, e->slot_fresh, e->slot_row, e->finished, e->slot_lead, e->head_rows));
  PetscCall(PetscFree3(e->slot_kv, e->slot_wait, e->slot_seg));
  PetscCall(PetscFree(e->work));
  PetscCall(PetscFree(e->allowed));
  PetscCall(PetscFree5(e->draw_tok, e->draw_na, e->running, e->draw_lp, e->draw_bd));
  PetscCall(PetscFree4(e->draw_row, e->draw_id, e->draw_pos, e->draw_ban));
  PetscCall(PetscFree(e->logits));
  PetscCall(PetscFree(e->pool));
  PetscCall(PetscFree2(e->mstart, e->mcount));
  PetscCall(PetscFree(e->queue));
  PetscCall(PetscFree(e));
  *eng = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- growth -------------------------------------------------------------- */
static PetscErrorCode grow_ints(int **a, size_t n_used, size_t *cap, size_t need)
{
  int *b;

  PetscFunctionBegin;
  if (need <= *cap) PetscFunctionReturn(PETSC_SUCCESS);
  if (need < 2 * *cap) need = 2 * *cap;
  PetscCall(PetscMalloc1(need, &b));
  if (n_used) PetscCall(PetscArraycpy(b, *a, n_used));
  PetscCall(PetscFree(*a));
  *a   = b;
  *cap = need;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode record_step(GenBatch *b, double seconds, int active)
{
  PetscFunctionBegin;
  if (b->nsteps == b->steps_cap) {
    int     cap = 2 * b->steps_cap > 64 ? 2 * b->steps_cap : 64, *a;
    double *s;
    PetscCall(PetscMalloc2(cap, &s, cap, &a));
    PetscCall(PetscArraycpy(s, b->step_seconds, b->nsteps));
    PetscCall(PetscArraycpy(a, b->step_active, b->nsteps));
    PetscCall(PetscFree2(b->step_seconds, b->step_active));
    b->step_seconds = s;
    b->step_active  = a;
    b->steps_cap    = cap;
  }
  b->step_seconds[b->nsteps] = seconds;
  b->step_active[b->nsteps]  = active;
  b->nsteps++;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- allowed sets -------------------------------------------------------- */
/* Samples interleave, so each draw's set goes to the engine's pool first. A
 * finishing sample's sets are appended to the batch at once, with its own
 * offsets, so an on_finish callback can already read them; the batch is
 * reordered into (sample, position) order when generation ends. Sample i
 * owns mask_off[i*Tmax+1 .. (i+1)*Tmax]; mask_off[i*Tmax] is the end of
 * sample i-1, so only position 0 (always a prompt position) may show a
 * meaningless range before the reordering. */
PetscErrorCode gen_mask_record(GenEngine *e, size_t k, const int *ids, int m)
{
  PetscFunctionBegin;
  PetscCall(grow_ints(&e->pool, e->pool_n, &e->pool_cap, e->pool_n + (size_t)m));
  PetscCall(PetscArraycpy(e->pool + e->pool_n, ids, m));
  e->mstart[k] = e->pool_n;
  e->mcount[k] = m;
  e->pool_n += (size_t)m;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode mask_publish(GenEngine *e, GenBatch *b, int i)
{
  size_t base = (size_t)i * b->Tmax, need = 0, cur;
  int    P = b->prompt_len[i], L = b->response_len[i];

  PetscFunctionBegin;
  for (int t = P; t < P + L; t++) need += (size_t)e->mcount[base + t];
  PetscCheck(e->mask_used + need <= (size_t)PETSC_MAX_INT, PETSC_COMM_SELF, PETSC_ERR_SUP,
             "gen_generate: more than %d allowed-set ids overflow GenBatch.mask_off", PETSC_MAX_INT);
  PetscCall(grow_ints(&b->mask_ids, e->mask_used, &b->mask_cap, e->mask_used + need));
  cur = e->mask_used;
  for (int t = 1; t < b->Tmax; t++) {
    b->mask_off[base + t] = (int)cur;
    if (t >= P && t < P + L) {
      PetscCall(PetscArraycpy(b->mask_ids + cur, e->pool + e->mstart[base + t], e->mcount[base + t]));
      cur += (size_t)e->mcount[base + t];
    }
  }
  b->mask_off[base + b->Tmax] = (int)cur;
  e->mask_used                = cur;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Finish order to (sample, position) order; the pool's buffer becomes the
 * batch's ids and the old ones the next pool. */
static PetscErrorCode masks_finalize(GenEngine *e, GenBatch *b)
{
  size_t run = 0, T = (size_t)b->Tmax, cap;
  int   *ids;

  PetscFunctionBegin;
  if (!b->mask_off) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(grow_ints(&e->pool, 0, &e->pool_cap, e->mask_used));
  for (int i = 0; i < b->n; i++) {
    size_t start = (size_t)b->mask_off[i * T + 1], len = (size_t)b->mask_off[(i + 1) * T] - start;
    if (len) PetscCall(PetscArraycpy(e->pool + run, b->mask_ids + start, len));
    for (size_t t = 1; t <= T; t++) b->mask_off[i * T + t] = (int)(b->mask_off[i * T + t] - start + run);
    run += len;
  }
  ids         = b->mask_ids;
  cap         = b->mask_cap;
  b->mask_ids = e->pool;
  b->mask_cap = e->pool_cap;
  e->pool     = ids;
  e->pool_cap = cap;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- one generation ------------------------------------------------------ */
static PetscErrorCode check_requests(const GenEngine *e, int n, const GenRequest *req, const GenBatch *b)
{
  PetscFunctionBegin;
  PetscCheck(n >= 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE, "gen_generate: n %d must be >= 0", n);
  PetscCheck(b->n == n && b->Tmax >= e->Tmax, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "gen_generate: the batch holds %d sequences of %d positions; %d requests need %d positions (longest "
             "prompt %d + max_new_tokens %" PetscInt_FMT ")",
             b->n, b->Tmax, n, e->Tmax, e->max_prompt_len, e->cfg.max_new_tokens);
  PetscCheck(b->mask_off || !gen_masked(&e->cfg), PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "gen_generate: top-k, top-p or min_new_tokens restrict the sampling, so the batch must be created with "
             "masks (gen_batch_create(..., gen_masked(cfg), ...))");
  for (int i = 0; i < n; i++) {
    PetscCheck(req[i].prompt && req[i].prompt_len - req[i].resumed >= 1 &&
                   req[i].prompt_len - req[i].resumed <= e->max_prompt_len,
               PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "gen_generate: request %d (id %d) has a prompt of %d tokens; it must have 1 to %d (the engine's "
               "max_prompt_len)",
               i, req[i].id, req[i].prompt_len - req[i].resumed, e->max_prompt_len);
    PetscCheck(req[i].resumed >= 0 && req[i].resumed < e->cfg.max_new_tokens && req[i].budget >= 0, PETSC_COMM_SELF,
               PETSC_ERR_ARG_OUTOFRANGE,
               "gen_generate: request %d (id %d) resumes after %d response tokens with a budget of %d; it must resume "
               "after 0 to %" PetscInt_FMT " and have a budget >= 0",
               i, req[i].id, req[i].resumed, req[i].budget, e->cfg.max_new_tokens - 1);
    for (int t = 0; t < req[i].prompt_len; t++)
      PetscCheck(req[i].prompt[t] >= 0 && req[i].prompt[t] < e->V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
                 "gen_generate: request %d (id %d) has token %d at position %d, outside the vocabulary [0,%d)", i,
                 req[i].id, req[i].prompt[t], t, e->V);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode batch_reset(GenEngine *e, int n, const GenRequest *req, GenBatch *b)
{
  size_t npos = (size_t)n * b->Tmax;

  PetscFunctionBegin;
  PetscCall(PetscArrayzero(b->tokens, npos));
  PetscCall(PetscArrayzero(b->logprobs, npos));
  PetscCall(PetscArrayzero(b->response_len, n));
  PetscCall(PetscArrayzero(b->eos, n));
  PetscCall(PetscArrayzero(b->src, npos));
  PetscCall(PetscArrayzero(b->turns, n));
  PetscCall(PetscArrayzero(b->obs_cut, n));
  for (int i = 0; i < n; i++) {
    b->prompt_len[i] = req[i].prompt_len;
    PetscCall(PetscArraycpy(b->tokens + (size_t)i * b->Tmax, req[i].prompt, req[i].prompt_len));
  }
  if (b->mask_off) {
    PetscCall(PetscArrayzero(b->mask_off, npos + 1));
    if (npos > e->mpos_cap) {
      PetscCall(PetscFree2(e->mstart, e->mcount));
      PetscCall(PetscMalloc2(npos, &e->mstart, npos, &e->mcount));
      e->mpos_cap = npos;
    }
  }
  e->pool_n     = 0;
  e->mask_used  = 0;
  b->nsteps     = 0;
  b->prompt_rows = 0;
  b->seconds    = 0;
  b->env_wait   = 0;
  b->new_tokens = 0;
  e->clock      = 0;
  for (int s = 0; s < e->nslot; s++) e->slot_req[s] = -1, e->slot_wait[s] = -1;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Fills free slots with the next waiting requests, in queue order. */
static void admit(GenEngine *e)
{
  for (int s = 0; s < e->nslot && e->qhead < e->qn; s++)
    if (e->slot_req[s] < 0) {
      e->slot_req[s]   = e->queue[e->qhead++];
      e->slot_fresh[s] = 1;
      e->slot_kv[s]    = 0;
      e->slot_wait[s]  = -1;
    }
}

int gen_engine_running(const GenEngine *e)
{
  int a = 0;
  for (int s = 0; s < e->nslot; s++) a += e->slot_req[s] >= 0;
  return a;
}

int gen_engine_waiting(const GenEngine *e) { return e->qn - e->qhead; }

/* Samples in slots that are not paused for an environment. */
static int engine_active(const GenEngine *e)
{
  int a = 0;
  for (int s = 0; s < e->nslot; s++) a += e->slot_req[s] >= 0 && e->slot_wait[s] < 0;
  return a;
}

int gen_engine_slots(const GenEngine *e) { return e->nslot; }

/* Which fresh slot's prompt rows each fresh slot shares: the first fresh
 * slot (in slot order) with the same prompt, or none. A GRPO group admitted
 * together prefills its prompt once. */
static void share_prompts(GenEngine *e, const GenRequest *req)
{
  for (int s = 0; s < e->nslot; s++) {
    const GenRequest *r;
    e->slot_lead[s] = -1;
    if (e->slot_req[s] < 0 || !e->slot_fresh[s] || !e->cfg.share_prompts) continue;
    r = &req[e->slot_req[s]];
    for (int q = 0; q < s && e->slot_lead[s] < 0; q++) {
      const GenRequest *o = e->slot_req[q] >= 0 ? &req[e->slot_req[q]] : NULL;
      if (o && e->slot_fresh[q] && e->slot_lead[q] < 0 && o->prompt_len == r->prompt_len &&
          !memcmp(o->prompt, r->prompt, (size_t)r->prompt_len * sizeof(int)))
        e->slot_lead[s] = q;
    }
  }
}

/* The forward's rows: a new sample's whole prompt (unless it shares
 * another's), or a running sample's last token; token t of a sequence sits
 * at KV position t. Each slot's last row is a head row. *prefill: some row
 * is a prompt's. */
static int build_rows(GenEngine *e, const GenRequest *req, GenBatch *b, int *active, PetscBool *prefill)
{
  int N = 0;

  *active   = 0;
  *prefill  = PETSC_FALSE;
  e->head_n = 0;
  share_prompts(e, req);
  for (int s = 0; s < e->nslot; s++) {
    int i = e->slot_req[s], P, len;
    if (i < 0 || e->slot_wait[s] >= 0) continue; /* free, or paused for an environment */
    (*active)++;
    P   = req[i].prompt_len;
    len = P + b->response_len[i];
    /* a new prompt, or an answer and the turn stop before it: more than one
     * row, so not a decode step (whose rows a recorded graph pads) */
    if (e->slot_fresh[s] || len - e->slot_kv[s] > 1) *prefill = PETSC_TRUE;
    if (e->slot_fresh[s] && e->ep) b->turns[i] = 1, e->slot_seg[s] = len;
    if (e->slot_lead[s] >=
        0) { /* the leader's head row gives its logits; its keys and values are copied after the forward */
      e->slot_row[s] = e->slot_row[e->slot_lead[s]];
      e->slot_kv[s]  = len;
      continue;
    }
    if (e->slot_fresh[s]) b->prompt_rows += P;
    /* a new prompt's rows, a running sample's last token, or that token and
     * an environment's answer appended after it */
    for (int t = e->slot_fresh[s] ? 0 : e->slot_kv[s]; t < len; t++, N++) {
      e->row_tok[N]  = b->tokens[(size_t)i * b->Tmax + t];
      e->row_slot[N] = s;
      e->row_pos[N]  = t;
    }
    e->slot_fresh[s]        = 0;
    e->slot_kv[s]           = len;
    e->head_rows[e->head_n] = N - 1;
    e->slot_row[s]          = e->head_n++;
  }
  return N;
}

/* The followers of this step's shared prompts get their leaders' keys and
 * values of the prompt's positions (the forward has written them). */
static PetscErrorCode share_copy(GenEngine *e, const GenRequest *req)
{
  PetscFunctionBegin;
  for (int s = 0; s < e->nslot; s++)
    if (e->slot_lead[s] >= 0) {
      PetscCall(model_kv_copy_slot(e->lm, e->kv, e->slot_lead[s], s, req[e->slot_req[s]].prompt_len));
      e->slot_fresh[s] = 0;
      e->slot_lead[s]  = -1;
    }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Running slot j's draw: its logits row, sample id (the key), position and
 * whether EOS is still banned. A draw is a pure function of the row and the
 * key, so Backend.sample draws all the slots at once, in any order. */
static void draw_setup(GenEngine *e, const GenRequest *req, const GenBatch *b, int j)
{
  int s = e->running[j], i = e->slot_req[s], n_new = b->response_len[i];

  e->draw_row[j] = e->slot_row[s];
  e->draw_id[j]  = req[i].id;
  e->draw_pos[j] = b->prompt_len[i] + n_new;
  e->draw_ban[j] = req[i].resumed + n_new < e->cfg.min_new_tokens;
}

/* Whether draw j's set is every id but the banned EOS (its ban on, nothing
 * cut by top-k or top-p, V-1 ids: Backend.sample's nallowed and boundary),
 * recorded as the one entry tensor_set_but(eos) rather than V-1 ids. */
static PetscBool draw_all_but_eos(const GenEngine *e, int j)
{
  return e->draw_ban[j] && e->V > 1 && e->cfg.eos >= 0 && e->cfg.eos < e->V && e->draw_bd[j] == -1 &&
                 e->draw_na[j] == e->V - 1
             ? PETSC_TRUE
             : PETSC_FALSE;
}

/* Records draw j's allowed set for position k. */
static PetscErrorCode draw_record_set(GenEngine *e, size_t k, int j)
{
  int but = tensor_set_but((int)e->cfg.eos);

  PetscFunctionBegin;
  if (draw_all_but_eos(e, j)) PetscCall(gen_mask_record(e, k, &but, 1));
  else PetscCall(gen_mask_record(e, k, e->allowed + (size_t)j * e->V, e->draw_na[j]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Sample i in slot s ends: its slot is free for the next step. */
static PetscErrorCode finish(GenEngine *e, GenBatch *b, int s, int i, int *nfinished)
{
  PetscFunctionBegin;
  e->slot_req[s]              = -1;
  e->slot_wait[s]             = -1;
  e->finished[(*nfinished)++] = i;
  if (b->mask_off) PetscCall(mask_publish(e, b, i));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Records running slot j's drawn token and stops the sample at EOS,
 * max_new_tokens (its resumed tokens included) or its budget; in an
 * episode a turn stop pauses it for the environment (the answer appended
 * at pass clock + lag), or ends it after the last turn. */
static PetscErrorCode advance(GenEngine *e, uint32_t iteration, const GenRequest *req, GenBatch *b, int j,
                              int *nfinished)
{
  int       s = e->running[j], i = e->slot_req[s], t = b->prompt_len[i] + b->response_len[i], tok = e->draw_tok[j];
  size_t    k = (size_t)i * b->Tmax + t;
  PetscBool turn_stop;

  PetscFunctionBegin;
  PetscCheck(tok >= 0, PETSC_COMM_SELF, PETSC_ERR_FP,
             "generation: logits are nan or inf at iteration %u (sample %d, position %d); stopping, the last "
             "checkpoint is intact",
             iteration + 1, req[i].id, t);
  b->tokens[k]   = tok;
  b->logprobs[k] = e->draw_lp[j];
  b->src[k]      = GEN_SRC_MODEL;
  if (b->mask_off) PetscCall(draw_record_set(e, k, j));
  b->response_len[i]++;
  b->new_tokens++;
  turn_stop = gen_is_turn_stop(e->ep, tok); /* before EOS: a chat model's end of turn may be both */
  if (gen_is_stop(&e->cfg, tok) && !turn_stop) b->eos[i] = 1;
  if (b->eos[i] || req[i].resumed + b->response_len[i] == e->cfg.max_new_tokens ||
      b->response_len[i] == req[i].budget) {
    b->eos[i] = gen_is_stop(&e->cfg, tok); /* a chat model's end of turn at the bound ends as EOS does */
    PetscCall(finish(e, b, s, i, nfinished));
  }
  else if (turn_stop || (e->ep && e->ep->max_turn_tokens > 0 && t + 1 - e->slot_seg[s] >= e->ep->max_turn_tokens)) {
    if (b->turns[i] >= e->ep->max_turns) { /* the last turn: ended as by EOS when its stop is EOS */
      b->eos[i] = gen_is_stop(&e->cfg, tok);
      PetscCall(finish(e, b, s, i, nfinished));
    } else {
      e->slot_wait[s] = (int)(e->clock + e->ep->lag);
      PetscCall(e->ep->on_turn(e->ep->ctx, b, i, b->turns[i]));
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The environments' answers due at this pass, appended to their samples
 * (positions without a log-probability or an allowed set, GEN_SRC_ENV):
 * the sample runs again at this pass's step, its answer's tokens and the
 * turn stop before them prefilled, or ends (the answer said done, or left
 * no room). The pass, not the clock, decides, so the same episodes come
 * out whatever the environment's latency. */
static PetscErrorCode rejoin(GenEngine *e, const GenRequest *req, GenBatch *b, int *nfinished)
{
  const GenEpisode *ep = e->ep;

  PetscFunctionBegin;
  for (int s = 0; s < e->nslot; s++) {
    int        i = e->slot_req[s], n, keep, room;
    size_t     at;
    const int *ids;
    PetscBool  done;
    double     t0;

    if (i < 0 || e->slot_wait[s] < 0 || e->slot_wait[s] > e->clock) continue;
    t0 = sys_wtime();
    PetscCall(ep->on_obs(ep->ctx, b, i, &ids, &n, &done));
    b->env_wait += sys_wtime() - t0;
    PetscCheck(n > 0 || done, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "generation: the environment answered sample %d, turn %d with no tokens and did not end the episode; an "
               "answer that goes on needs at least one token (the model's turns would join)",
               req[i].id, b->turns[i]);
    room = (int)e->cfg.max_new_tokens - req[i].resumed - b->response_len[i];
    keep = PetscMin(PetscMin(n, ep->max_obs), room);
    at   = (size_t)i * b->Tmax + b->prompt_len[i] + b->response_len[i];
    for (int j = 0; j < keep; j++) {
      PetscCheck(ids[j] >= 0 && ids[j] < e->V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
                 "generation: the environment's answer to sample %d, turn %d has token %d, outside the vocabulary "
                 "[0,%d)",
                 req[i].id, b->turns[i], ids[j], e->V);
      b->tokens[at + j]   = ids[j];
      b->logprobs[at + j] = 0;
      b->src[at + j]      = GEN_SRC_ENV;
      if (b->mask_off) e->mcount[at + j] = 0, e->mstart[at + j] = 0;
    }
    b->response_len[i] += keep;
    b->obs_cut[i] += n - keep;
    e->slot_wait[s] = -1;
    if (done || keep == room) {
      b->eos[i] = done ? 1 : 0;
      PetscCall(finish(e, b, s, i, nfinished));
    } else b->turns[i]++, e->slot_seg[s] = b->prompt_len[i] + b->response_len[i];
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The bucket a decode step of N rows is padded to: a power of two below
 * the slot count, or the slot count (a handful of recorded forwards). */
static int pad_rows(int N, int S)
{
  int b = 1;
  while (b < N) b *= 2;
  return b < S ? b : S;
}

/* The head rows to pass to the forward: NULL where every row of the step
 * is one (a decode step), so that such a step, padded to its bucket of
 * rows, stays the same recorded call and its logits keep the padded rows. */
static const int *head_rows(const GenEngine *e, int N) { return e->head_n < N ? e->head_rows : NULL; }

/* One step on the host's logits (a model split over ranks): the forward
 * gathers them to every rank, the cpu op draws. */
static PetscErrorCode step_host(GenEngine *e, int N, int nrun, const BackendSampleCfg *scfg)
{
  size_t need = (size_t)e->head_n * e->V;

  PetscFunctionBegin;
  if (need > e->logits_cap) {
    PetscCall(PetscFree(e->logits));
    PetscCall(PetscMalloc1(need, &e->logits));
    e->logits_cap = need;
  }
  PetscCall(model_forward_cached(e->lm, e->kv, e->row_tok, e->row_slot, e->row_pos, N, head_rows(e, N), e->head_n,
                                 e->logits));
  /* the cpu op's work is per OpenMP thread: more threads than at creation
   * (omp_set_num_threads) need more */
  if (e->sampler->sample_work(nrun, e->V) > e->work_bytes) {
    PetscCall(PetscFree(e->work));
    e->work_bytes = e->sampler->sample_work(nrun, e->V);
    PetscCall(PetscMalloc(e->work_bytes, &e->work));
  }
  PetscCall(e->sampler->sample(e->draw_tok, e->draw_lp, e->draw_na, e->draw_bd, e->allowed, e->work, e->logits,
                               e->draw_row, e->draw_id, e->draw_pos, e->draw_ban, scfg, nrun, e->V));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One step in the model backend's memory: the rows and the draws' inputs go
 * up in one copy, the forward (recorded per bucket with graphs) leaves the
 * logits there, the backend's op draws, and the tokens, log-probabilities,
 * set sizes and boundaries come back in one copy (the ids of restricted
 * sets after them, except a set that is every id but the banned EOS: its
 * size and boundary say so, and its V-1 ids would be most of the step's
 * time). */
static PetscErrorCode step_resident(GenEngine *e, int N, PetscBool prefill, int nrun, const BackendSampleCfg *scfg,
                                    PetscBool masked)
{
  const Backend *be = e->lm->be;
  const float   *logits;
  int            Nb = N, *in = e->h_in, *d = e->d_in, *o = e->d_out;
  size_t         work;

  PetscFunctionBegin;
  if (e->graphs && !prefill) Nb = pad_rows(N, e->nslot);
  for (int r = N; r < Nb; r++) e->row_tok[r] = 0, e->row_slot[r] = e->nslot, e->row_pos[r] = (r - N) % e->Tmax;
  PetscCall(model_cached_check_rows(e->lm, e->kv, e->row_tok, e->row_slot, e->row_pos, Nb));
  PetscCall(PetscArraycpy(in, e->row_tok, Nb));
  PetscCall(PetscArraycpy(in + Nb, e->row_slot, Nb));
  PetscCall(PetscArraycpy(in + 2 * Nb, e->row_pos, Nb));
  PetscCall(PetscArraycpy(in + 3 * Nb, e->draw_row, nrun));
  PetscCall(PetscArraycpy(in + 3 * Nb + nrun, e->draw_id, nrun));
  PetscCall(PetscArraycpy(in + 3 * Nb + 2 * nrun, e->draw_pos, nrun));
  PetscCall(PetscArraycpy(in + 3 * Nb + 3 * nrun, e->draw_ban, nrun));
  PetscCall(be->from_host(d, in, (3 * (size_t)Nb + 4 * (size_t)nrun) * sizeof(int)));
  PetscCall(model_forward_cached_resident(e->lm, e->kv, d, d + Nb, d + 2 * Nb, Nb, head_rows(e, N), e->head_n,
                                          (PetscBool)(e->graphs && !e->cfg.eager), &logits));
  work = be->sample_work(nrun, e->V);
  if (work > e->d_work_bytes) { /* the cpu op's work grows with the OpenMP threads */
    PetscCall(be->free(e->d_work));
    PetscCall(be->alloc(work, &e->d_work));
    e->d_work_bytes = work;
  }
  if (masked && !e->d_allowed) PetscCall(be->alloc((size_t)e->nslot * e->V * sizeof(int), (void **)&e->d_allowed));
  d += 3 * Nb;
  PetscCall(be->sample(o, (float *)(o + 3 * nrun), o + nrun, o + 2 * nrun, masked ? e->d_allowed : NULL, e->d_work,
                       logits, d, d + nrun, d + 2 * nrun, d + 3 * nrun, scfg, nrun, e->V));
  PetscCall(be->to_host(e->h_out, o, 4 * (size_t)nrun * sizeof(int)));
  PetscCall(PetscArraycpy(e->draw_tok, e->h_out, nrun));
  PetscCall(PetscArraycpy(e->draw_na, e->h_out + nrun, nrun));
  PetscCall(PetscArraycpy(e->draw_bd, e->h_out + 2 * nrun, nrun));
  PetscCall(PetscMemcpy(e->draw_lp, e->h_out + 3 * nrun, (size_t)nrun * sizeof(float)));
  for (int j = 0; j < nrun && masked; j++)
    if (e->draw_na[j] > 0 && !draw_all_but_eos(e, j))
      PetscCall(be->to_host(e->allowed + (size_t)j * e->V, e->d_allowed + (size_t)j * e->V,
                            (size_t)e->draw_na[j] * sizeof(int)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode engine_step(GenEngine *e, uint64_t seed, uint32_t iteration, const GenRequest *req, GenBatch *b,
                                  int *active, int *nfinished)
{
  PetscBool        prefill;
  int              N    = build_rows(e, req, b, active, &prefill), nrun = 0;
  BackendSampleCfg scfg = { e->cfg.temperature, e->cfg.top_p,          e->cfg.top_k, e->cfg.greedy,
                            (int)e->cfg.eos,    seed ^ GEN_RNG_DOMAIN, iteration };

  PetscFunctionBegin;
  for (int s = 0; s < e->nslot; s++)
    if (e->slot_req[s] >= 0 && e->slot_wait[s] < 0) e->running[nrun++] = s;
  for (int j = 0; j < nrun; j++) draw_setup(e, req, b, j);
  if (e->resident) PetscCall(step_resident(e, N, prefill, nrun, &scfg, (PetscBool)(b->mask_off != NULL)));
  else PetscCall(step_host(e, N, nrun, &scfg));
  PetscCall(share_copy(e, req));
  for (int j = 0; j < nrun; j++) PetscCall(advance(e, iteration, req, b, j, nfinished));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The requests this engine starts with, in admission order. */
static PetscErrorCode queue_reset(GenEngine *e, int n, const GenRun *run)
{
  int nown = run && run->own ? run->nown : n;

  PetscFunctionBegin;
  if (n > e->qcap) {
    PetscCall(PetscFree(e->queue));
    PetscCall(PetscMalloc1(n, &e->queue));
    e->qcap = n;
  }
  for (int j = 0; j < nown; j++) {
    e->queue[j] = run && run->own ? run->own[j] : j;
    PetscCheck(e->queue[j] >= 0 && e->queue[j] < n, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "gen_generate: own request %d outside [0,%d)", e->queue[j], n);
  }
  e->qhead = 0;
  e->qn    = nown;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gen_generate_run(GenEngine *e, uint64_t seed, uint32_t iteration, int n, const GenRequest *req,
                                GenBatch *out, const GenRun *run)
{
  double t0 = sys_wtime();

  PetscFunctionBegin;
  e->ep = run ? run->episode : NULL;
  if (e->ep)
    PetscCheck(e->ep->lag >= 1 && e->ep->max_turns >= 1 && e->ep->max_obs >= 1 && e->ep->on_turn && e->ep->on_obs,
               PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
               "gen_generate: episodes need lag >= 1 (%d), max_turns >= 1 (%d), max_obs >= 1 (%d) and both callbacks",
               e->ep->lag, e->ep->max_turns, e->ep->max_obs);
  PetscCall(check_requests(e, n, req, out));
  PetscCall(batch_reset(e, n, req, out));
  PetscCall(queue_reset(e, n, run));
  for (;; e->clock++) {
    double    ts;
    int       nfin = 0, active = 0;
    PetscBool go = (PetscBool)(gen_engine_waiting(e) > 0 || gen_engine_running(e) > 0);

    /* the hook may move samples in or out, and may keep an idle engine in
     * the loop (a collective it must go on joining) */
    if (run && run->on_step) PetscCall(run->on_step(run->step_ctx, e, out, &go));
    if (!go) break;
    if (!gen_engine_waiting(e) && !gen_engine_running(e)) continue;
    if (e->ep) PetscCall(rejoin(e, req, out, &nfin));
    ts = sys_wtime();
    admit(e);
    /* a pass whose every sample waits for its environment runs no step */
    if (engine_active(e)) {
      PetscCall(engine_step(e, seed, iteration, req, out, &active, &nfin));
      /* the step's time is the engine's alone, the callbacks' is the caller's;
       * a finished sample's tokens, lengths, log-probabilities and allowed
       * sets (positions >= 1) are in place when its callback runs */
      PetscCall(record_step(out, sys_wtime() - ts, active));
    }
    for (int j = 0; j < nfin; j++)
      if (run && run->on_finish) PetscCall(run->on_finish(run->finish_ctx, out, e->finished[j]));
  }
  PetscCall(masks_finalize(e, out));
  out->seconds = sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gen_generate(GenEngine *e, uint64_t seed, uint32_t iteration, int n, const GenRequest *req,
                            GenBatch *out, GenFinishFn on_finish, void *ctx)
{
  GenRun run = {NULL, 0, on_finish, ctx, NULL, NULL, NULL};

  PetscFunctionBegin;
  PetscCall(gen_generate_run(e, seed, iteration, n, req, out, &run));
  PetscFunctionReturn(PETSC_SUCCESS);
}
