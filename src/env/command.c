/* command.c: an environment program (inc/env.h, docs/environments.md "The
 * protocol"): `procs` processes of /bin/sh -c CMD, each serving one request
 * at a time, one JSON line in and one JSON line out.
 *
 * submit() never waits: it encodes the request's line at once (the caller's
 * arrays need not outlive the call), queues it, and hands it to an idle
 * process if one is free; collect() waits for its index's answer while it
 * drives every process: queued requests written to processes as they free
 * up, answers read and parsed as they come. Both go through one poll()
 * over non-blocking pipes, so a process that answers while we still write
 * cannot deadlock us, and a slow process delays only its own request. Each
 * request has its own deadline, from when it was handed to a process.
 *
 * The Env keeps each index's state (the string an answer returned) and
 * sends it with that index's next step, so any process may serve any step.
 * Every failure is one line naming the environment, the sample and the
 * turn of the request to blame; after one, every process is killed (its
 * process group: what it started too) and the Env is not used again. The
 * processes themselves are src/sys/child.c's. */
#include "env.h"
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD_SHOWN 60         /* bytes of the command shown in messages */
#define LINE_SHOWN 60        /* bytes of a bad answer shown */
#define ERROR_SHOWN 200      /* bytes of an environment's own "error" shown */
#define LINE_LIMIT (4 << 20) /* an answer line longer than this is refused (docs/environments.md) */
#define GRACE 1.0            /* seconds past its deadline a process that is printing its answer gets */

enum { FREE, QUEUED, RUNNING, ANSWERED }; /* a request index's stage */

typedef struct {
  int      *ids;
  int       n;
  char     *text;
  double    reward, seconds;
  PetscBool done;
} Answer;

typedef struct {
  int    stage, sample, turn;
  char  *line; /* the request's JSON line, '\n' included */
  size_t len;
  double submitted, deadline;
  char  *state; /* the episode's state: NULL none; may hold NULs */
  size_t state_len;
  Answer pending; /* read, not collected yet */
  Answer given;   /* the last collected: the caller's until the next collect */
} Slot;

typedef struct {
  int    index;                  /* the request it serves; -1: idle */
  size_t woff;                   /* bytes of it written */
  int    eof;                    /* its output has ended */
  double heard;                  /* when we last read bytes of its answer (0: none yet) */
  int    last_sample, last_turn; /* the last request it answered (-1: none) */
} Proc;

typedef struct {
  char      name[CMD_SHOWN + 4]; /* the command, printable and shortened */
  char      missing[256];        /* its program is not there: not started, said by the first request */
  int       spawn_err;           /* errno of a failed start, said by the first request */
  int       broken;              /* a request failed: every process killed */
  int       vocab, nindex, procs;
  double    timeout;
  SysChild *ch;                 /* [procs] */
  Proc     *p;                  /* [procs] */
  Slot     *slot;               /* [nindex] */
  int      *queue, qhead, qlen; /* indices waiting for a process, in submission order (a ring) */
  char      msg[1024];          /* the failure */
} Cmd;

/* The message 'environment "CMD": sample S, turn T: ...' (sample < 0: no
 * request to blame); every process is killed now: the run stops, and one
 * left running could hang it or print after rlfuse's line. */
static int fail(Cmd *c, int sample, int turn, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(Cmd *c, int sample, int turn, const char *fmt, ...)
{
  va_list ap;
  int     k;
  if (sample >= 0)
    k = snprintf(c->msg, sizeof c->msg, "environment \"%s\": sample %d, turn %d: ", c->name, sample, turn);
  else k = snprintf(c->msg, sizeof c->msg, "environment \"%s\": ", c->name);
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < sizeof c->msg) vsnprintf(c->msg + k, sizeof c->msg - (size_t)k, fmt, ap);
  va_end(ap);
  c->broken = 1;
  sys_children_kill(c->ch, c->procs);
  return 1;
}

static void answer_free(Answer *a)
{
  free(a->ids);
  free(a->text);
  memset(a, 0, sizeof *a);
}

/* ---- requests ----------------------------------------------------------- */

static json_t *ids_array(const int *ids, int n)
{
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_integer(ids[i]))) {
      json_decref(a);
      return NULL;
    }
  return a;
}

static json_t *text_or_null(const char *s) { return s ? sys_json_text(s) : json_null(); }

/* The request's line, as docs/environments.md shows it: jansson writes the
 * keys in the order they are set, separated by ", " and ": ". NULL on no
 * memory. The key holds the seed as JSON's integer (the run's seeds are
 * PetscInt, so it fits). */
static char *request_line(const EnvRequest *r, const char *state, size_t state_len, size_t *len)
{
  json_t *o = json_object(), *key = json_array();
  char   *s   = NULL, *line;
  int     bad = !o || !key || json_array_append_new(key, json_integer((json_int_t)r->seed)) ||
            json_array_append_new(key, json_integer(r->iteration)) ||
            json_array_append_new(key, json_integer(r->sample));
  if (!bad && r->turn == 0)
    bad = json_object_set_new(o, "op", json_string("reset")) ||
          json_object_set_new(o, "sample", json_integer(r->sample)) || json_object_set(o, "key", key) ||
          json_object_set_new(o, "turn", json_integer(r->turn)) ||
          json_object_set_new(o, "prompt", text_or_null(r->text)) ||
          json_object_set_new(o, "ids", ids_array(r->ids, r->n)) ||
          json_object_set_new(o, "answer", text_or_null(r->answer)) ||
          json_object_set_new(o, "meta", text_or_null(r->meta));
  else if (!bad)
    bad = json_object_set_new(o, "op", json_string("step")) ||
          json_object_set_new(o, "sample", json_integer(r->sample)) || json_object_set(o, "key", key) ||
          json_object_set_new(o, "turn", json_integer(r->turn)) ||
          json_object_set_new(o, "text", text_or_null(r->text)) ||
          json_object_set_new(o, "ids", ids_array(r->ids, r->n)) ||
          json_object_set_new(o, "state", state ? json_stringn(state, state_len) : json_null());
  if (!bad) s = json_dumps(o, 0);
  json_decref(key);
  json_decref(o);
  if (!s) return NULL;
  *len = strlen(s);
  if (!(line = realloc(s, *len + 2))) {
    free(s);
    return NULL;
  }
  line[(*len)++] = '\n', line[*len] = '\0';
  return line;
}

/* ---- answers ------------------------------------------------------------ */

/* j (an element of an answer) for a message: its JSON, shortened. */
static void show_json(char *dst, size_t cap, const json_t *j)
{
  char *s = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
  sys_show(dst, cap, s ? s : "?", s ? strlen(s) : 1, LINE_SHOWN);
  free(s);
}

/* Reads line (its process served index i) into i's pending answer and its
 * state; 1 (failed) on anything but an answer of docs/environments.md. */
static int parse_answer(Cmd *c, int k, int i, const char *line, size_t len)
{
  Slot        *s = &c->slot[i];
  Answer      *a = &s->pending;
  json_error_t e;
  json_t      *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &e), *ids, *v;
  char         shown[LINE_SHOWN * 4 + 40], what[ERROR_SHOWN * 4 + 8];
  size_t       n;
  int          bad = 0;

  snprintf(shown, sizeof shown, "process %d answered \"", k + 1);
  n = strlen(shown);
  sys_show(shown + n, sizeof shown - n - 1, line, len, LINE_SHOWN);
  strcat(shown, "\"");
  if (!j || !json_is_object(j)) {
    json_decref(j);
    return fail(c, s->sample, s->turn, "%s, not one JSON object%s%s", shown, j ? "" : ": ", j ? "" : e.text);
  }
  if ((v = json_object_get(j, "error"))) {
    if (json_is_string(v)) sys_show(what, sizeof what, json_string_value(v), json_string_length(v), ERROR_SHOWN);
    else show_json(what, sizeof what, v);
    json_decref(j);
    return fail(c, s->sample, s->turn, "the environment's error: %s", what);
  }
  ids = json_object_get(j, "ids");
  if (ids && json_is_null(ids)) ids = NULL;
  answer_free(a);
  if (!ids && s->turn > 0) bad = fail(c, s->sample, s->turn, "%s without \"ids\" (a step's answer needs them)", shown);
  else if (ids && !json_is_array(ids)) bad = fail(c, s->sample, s->turn, "%s: \"ids\" is not an array", shown);
  else if (ids && s->turn == 0 && json_array_size(ids))
    bad = fail(c, s->sample, s->turn,
               "%s: a reset's answer has no \"ids\" (the observation comes with a step's answer)", shown);
  n = ids ? json_array_size(ids) : 0;
  if (!bad && n && !(a->ids = malloc(n * sizeof *a->ids)))
    bad = fail(c, s->sample, s->turn, "out of memory for %zu ids", n);
  for (size_t q = 0; q < n && !bad; q++) {
    json_int_t id;
    v = json_array_get(ids, q);
    if (!json_is_integer(v)) {
      show_json(what, sizeof what, v);
      bad = fail(c, s->sample, s->turn, "%s: \"ids\"[%zu] is %s, not an integer", shown, q, what);
    } else if ((id = json_integer_value(v)) < 0 || id >= c->vocab)
      bad = fail(c, s->sample, s->turn, "%s: \"ids\"[%zu] = %lld is outside the vocabulary [0, %d)", shown, q,
                 (long long)id, c->vocab);
    else a->ids[q] = (int)id;
  }
  a->n = (int)n;
  if (!bad && (v = json_object_get(j, "text")) && !json_is_null(v)) {
    if (!json_is_string(v)) bad = fail(c, s->sample, s->turn, "%s: \"text\" is not a string", shown);
    else if (!(a->text = strndup(json_string_value(v), json_string_length(v))))
      bad = fail(c, s->sample, s->turn, "out of memory for an answer's text");
  }
  if (!bad && (v = json_object_get(j, "reward")) && !json_is_null(v)) {
    if (!json_is_number(v)) bad = fail(c, s->sample, s->turn, "%s: \"reward\" is not a number", shown);
    else a->reward = json_number_value(v);
  }
  if (!bad && (v = json_object_get(j, "done")) && !json_is_null(v)) {
    if (!json_is_boolean(v)) bad = fail(c, s->sample, s->turn, "%s: \"done\" is not true or false", shown);
    else a->done = json_is_true(v) ? PETSC_TRUE : PETSC_FALSE;
  }
  if (!bad && (v = json_object_get(j, "state")) && !json_is_null(v)) { /* absent: the old state stays */
    char *st;
    if (!json_is_string(v)) bad = fail(c, s->sample, s->turn, "%s: \"state\" is not a string", shown);
    else if (!(st = malloc(json_string_length(v) + 1))) bad = fail(c, s->sample, s->turn, "out of memory for a state");
    else {
      memcpy(st, json_string_value(v), json_string_length(v) + 1);
      free(s->state);
      s->state = st, s->state_len = json_string_length(v);
    }
  }
  json_decref(j);
  return bad;
}

/* ---- the processes ------------------------------------------------------ */

/* Writes what it can of process k's request without waiting. A process
 * that stopped reading (EPIPE) gets no more: its end of output, or its
 * deadline, says what became of it. */
static void write_some(Cmd *c, int k)
{
  Proc   *p = &c->p[k];
  Slot   *s = &c->slot[p->index];
  ssize_t w;
  while (c->ch[k].in >= 0 && p->woff < s->len) {
    w = write(c->ch[k].in, s->line + p->woff, s->len - p->woff);
    if (w > 0) p->woff += (size_t)w;
    else if (w < 0 && errno == EINTR) continue;
    else {
      if (errno != EAGAIN) sys_child_close_input(&c->ch[k]);
      break;
    }
  }
}

static int read_some(Cmd *c, int k);

/* Hands queued requests to idle processes (the lowest-numbered first). */
static int assign(Cmd *c)
{
  for (int k = 0; k < c->procs && c->qlen; k++) {
    Proc *p = &c->p[k];
    Slot *s;
    if (p->index >= 0) continue;
    /* what it printed since its last answer first: a line nobody asked for
     * must not be taken for this request's answer, and it may have ended */
    if (!p->eof && c->ch[k].out >= 0 && read_some(c, k)) return 1;
    p->index = c->queue[c->qhead];
    c->qhead = (c->qhead + 1) % c->nindex, c->qlen--;
    s        = &c->slot[p->index];
    s->stage = RUNNING, p->woff = 0, p->heard = 0;
    s->deadline = sys_clock() + c->timeout;
    if (p->eof) { /* it ended while idle */
      char how[96];
      sys_child_ended(&c->ch[k], how, sizeof how);
      if (p->last_sample >= 0)
        return fail(c, s->sample, s->turn, "process %d of %d %s after its answer to sample %d, turn %d", k + 1,
                    c->procs, how, p->last_sample, p->last_turn);
      return fail(c, s->sample, s->turn, "process %d of %d %s before its first request", k + 1, c->procs, how);
    }
    write_some(c, k);
  }
  return 0;
}

/* The complete lines process k printed: each the answer to its request.
 * At its end of output, how it ended. */
static int take_lines(Cmd *c, int k)
{
  Proc     *p   = &c->p[k];
  SysChild *ch  = &c->ch[k];
  size_t    pos = 0;
  char      shown[LINE_SHOWN * 4 + 8], how[96];

  for (;;) {
    const char *line = ch->buf + pos, *nl = memchr(line, '\n', ch->blen - pos);
    size_t      len = nl ? (size_t)(nl - line) : ch->blen - pos;
    Slot       *s;
    if (!nl && !(p->eof && len)) break;
    if (p->index < 0) { /* a line nobody asked for */
      sys_show(shown, sizeof shown, line, len, LINE_SHOWN);
      if (p->last_sample >= 0)
        return fail(c, p->last_sample, p->last_turn, "process %d printed \"%s\" after its answer", k + 1, shown);
      return fail(c, -1, 0, "process %d printed \"%s\" before its first request", k + 1, shown);
    }
    s = &c->slot[p->index];
    if (!nl) break; /* an unfinished last line: no answer; its end below says why */
    if (len > LINE_LIMIT)
      return fail(c, s->sample, s->turn, "process %d printed a line of %zu bytes (an answer may have at most %d MiB)",
                  k + 1, len, LINE_LIMIT >> 20);
    if (parse_answer(c, k, p->index, line, len)) return 1;
    s->pending.seconds = sys_clock() - s->submitted;
    s->stage           = ANSWERED;
    p->last_sample = s->sample, p->last_turn = s->turn, p->index = -1;
    pos += len + 1;
  }
  memmove(ch->buf, ch->buf + pos, ch->blen - pos);
  ch->blen -= pos;
  if (ch->blen > LINE_LIMIT) { /* the request it serves, else the last it answered */
    int sample = p->index >= 0 ? c->slot[p->index].sample : p->last_sample;
    int turn   = p->index >= 0 ? c->slot[p->index].turn : p->last_turn;
    return fail(c, sample, turn, "process %d printed a line longer than %d bytes (an answer may have at most %d MiB)",
                k + 1, LINE_LIMIT, LINE_LIMIT >> 20);
  }
  if (p->eof && p->index >= 0) {
    Slot *s = &c->slot[p->index];
    sys_child_ended(ch, how, sizeof how);
    return fail(c, s->sample, s->turn, "process %d of %d %s before answering", k + 1, c->procs, how);
  }
  if (p->eof) sys_child_reap(ch, 0);
  return 0;
}

/* What process k has printed: its answers. */
static int read_some(Cmd *c, int k)
{
  size_t before = c->ch[k].blen;
  if (sys_child_read(&c->ch[k], &c->p[k].eof))
    return fail(c, -1, 0, "cannot read the output of process %d: %s", k + 1, strerror(errno));
  if (c->ch[k].blen > before) c->p[k].heard = sys_clock();
  return take_lines(c, k);
}

/* When process k's request is late: its deadline, unless the process is
 * printing its answer then. An answer that came in time may still be in
 * the pipe when we look after the deadline (the caller was busy), and one
 * longer than the pipe holds comes only as fast as we read it: so the
 * request has until GRACE after its last bytes came, at most a second
 * timeout past its deadline. */
static double late_at(const Cmd *c, int k)
{
  const Proc *p = &c->p[k];
  double      d = c->slot[p->index].deadline;
  if (p->heard + GRACE > d) d = PetscMin(p->heard + GRACE, d + c->timeout);
  return d;
}

/* One round: requests handed out and written, answers read, deadlines
 * checked; waits up to wait_s for something to happen (0: not at all). */
static int drive(Cmd *c, double wait_s)
{
  struct pollfd *fds;
  int           *who, np = 0, ms, r;
  double         now = sys_clock(), until = now + wait_s;

  if (assign(c)) return 1;
  fds = malloc(2 * (size_t)c->procs * sizeof *fds), who = malloc(2 * (size_t)c->procs * sizeof *who);
  if (!fds || !who) {
    free(fds), free(who);
    return fail(c, -1, 0, "out of memory for polling %d processes", c->procs);
  }
  for (int k = 0; k < c->procs; k++) {
    Proc *p = &c->p[k];
    if (p->index >= 0) until = PetscMin(until, late_at(c, k));
    if (!p->eof && c->ch[k].out >= 0) who[np] = k, fds[np++] = (struct pollfd){ .fd = c->ch[k].out, .events = POLLIN };
    if (p->index >= 0 && p->woff < c->slot[p->index].len && c->ch[k].in >= 0)
      who[np] = -1 - k, fds[np++] = (struct pollfd){ .fd = c->ch[k].in, .events = POLLOUT };
  }
  ms = until <= now ? 0 : until - now > 1e6 ? 1000000000 : (int)((until - now) * 1000) + 1;
  r  = poll(fds, (nfds_t)np, ms);
  if (r < 0 && errno != EINTR) {
    free(fds), free(who);
    return fail(c, -1, 0, "poll failed: %s", strerror(errno));
  }
  for (int q = 0; q < np && r > 0; q++) {
    if (!fds[q].revents) continue;
    if (who[q] < 0 && c->p[-1 - who[q]].index >= 0) write_some(c, -1 - who[q]);
    else if (who[q] >= 0 && read_some(c, who[q])) {
      free(fds), free(who);
      return 1;
    }
  }
  free(fds), free(who);
  now = sys_clock();
  for (int k = 0; k < c->procs; k++)
    if (c->p[k].index >= 0 && now >= late_at(c, k)) {
      Slot *s = &c->slot[c->p[k].index];
      return fail(c, s->sample, s->turn, "process %d of %d did not answer within %g s; killed it", k + 1, c->procs,
                  c->timeout);
    }
  return assign(c); /* to the processes that answered */
}

/* drive() with SIGPIPE ignored: a write to a process that has gone must
 * return EPIPE, not kill us. */
static int drive_guarded(Cmd *c, double wait_s)
{
  struct sigaction ignore = { .sa_handler = SIG_IGN }, old;
  int              bad;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &old);
  bad = drive(c, wait_s);
  sigaction(SIGPIPE, &old, NULL);
  return bad;
}

/* ---- the ops ------------------------------------------------------------ */

static PetscErrorCode cmd_submit(Env *env, const EnvRequest *req)
{
  Cmd  *c = env->data;
  Slot *s;
  int   bad = 0;

  PetscFunctionBegin;
  PetscCheck(req->index >= 0 && req->index < c->nindex, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "environment \"%s\": request index %d outside [0, %d)", c->name, req->index, c->nindex);
  s = &c->slot[req->index];
  PetscCheck(s->stage == FREE, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONGSTATE,
             "environment \"%s\": sample %d, turn %d: index %d still has a request outstanding (collect it first)",
             c->name, req->sample, req->turn, req->index);
  if (c->broken) bad = fail(c, req->sample, req->turn, "not used again after an earlier error");
  else if (c->spawn_err) bad = fail(c, req->sample, req->turn, "cannot start /bin/sh: %s", strerror(c->spawn_err));
  else if (c->missing[0]) bad = fail(c, req->sample, req->turn, "%s", c->missing);
  PetscCheck(!bad, PETSC_COMM_SELF, PETSC_ERR_LIB, "%s", c->msg);
  if (req->turn == 0) { /* a new episode on this index: the last one's state is not its */
    free(s->state);
    s->state = NULL, s->state_len = 0;
  }
  free(s->line);
  s->line   = request_line(req, s->state, s->state_len, &s->len);
  s->sample = req->sample, s->turn = req->turn;
  if (!s->line) bad = fail(c, req->sample, req->turn, "out of memory for a request of %d ids", req->n);
  PetscCheck(!bad, PETSC_COMM_SELF, PETSC_ERR_LIB, "%s", c->msg);
  s->stage                                     = QUEUED;
  s->submitted                                 = sys_clock();
  c->queue[(c->qhead + c->qlen++) % c->nindex] = req->index;
  PetscCheck(!drive_guarded(c, 0), PETSC_COMM_SELF, PETSC_ERR_LIB, "%s", c->msg); /* starts it if a process is free */
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode cmd_collect(Env *env, int index, EnvAnswer *ans)
{
  Cmd   *c = env->data;
  Slot  *s;
  Answer t;
  int    bad = 0;

  PetscFunctionBegin;
  PetscCheck(index >= 0 && index < c->nindex, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "environment \"%s\": request index %d outside [0, %d)", c->name, index, c->nindex);
  s = &c->slot[index];
  PetscCheck(s->stage != FREE, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONGSTATE,
             "environment \"%s\": index %d has no request outstanding to collect", c->name, index);
  /* a failure while its answer came (a line after it, another request's)
   * is the caller's too: the run stops */
  if (c->broken) bad = fail(c, s->sample, s->turn, "not used again after an earlier error");
  while (!bad && s->stage != ANSWERED) bad = drive_guarded(c, 1e9);
  PetscCheck(!bad, PETSC_COMM_SELF, PETSC_ERR_LIB, "%s", c->msg);
  /* the pending answer becomes the caller's; the buffers of the one it
   * replaces take the next answer */
  t = s->given, s->given = s->pending, s->pending = t;
  s->stage = FREE;
  *ans     = (EnvAnswer){ .ids     = s->given.ids,
                          .n       = s->given.n,
                          .text    = s->given.text,
                          .reward  = s->given.reward,
                          .done    = s->given.done,
                          .seconds = s->given.seconds };
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode cmd_destroy(Env *env)
{
  Cmd *c = env->data;

  PetscFunctionBegin;
  if (!c) PetscFunctionReturn(PETSC_SUCCESS);
  sys_children_stop(c->ch, c->procs); /* closes their inputs, waits up to 5 s for them to exit, kills what remains */
  for (int i = 0; i < c->nindex; i++) {
    free(c->slot[i].line);
    free(c->slot[i].state);
    answer_free(&c->slot[i].pending);
    answer_free(&c->slot[i].given);
  }
  PetscCall(PetscFree4(c->ch, c->p, c->slot, c->queue));
  PetscCall(PetscFree(c));
  env->data = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const EnvOps cmd_ops = { cmd_submit, cmd_collect, cmd_destroy };

PetscErrorCode env_command_create(const char *cmd, int procs, double timeout, int vocab, int nindex, Env **out)
{
  Cmd *c;
  Env *env;

  PetscFunctionBegin;
  PetscCheck(cmd && cmd[0], PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "environment: no command (-env_command)");
  PetscCheck(procs >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "environment: %d processes (-env_procs): at least 1", procs);
  PetscCheck(timeout > 0, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "environment: a time limit of %g s (-env_timeout) must be positive", timeout);
  PetscCheck(vocab >= 1 && nindex >= 1, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "environment: vocabulary %d and request indices %d must be positive", vocab, nindex);
  PetscCall(PetscNew(&c));
  PetscCall(PetscCalloc4(procs, &c->ch, procs, &c->p, nindex, &c->slot, nindex, &c->queue));
  c->procs = procs, c->timeout = timeout, c->vocab = vocab, c->nindex = nindex;
  sys_show(c->name, sizeof c->name, cmd, strlen(cmd), CMD_SHOWN);
  for (int k = 0; k < procs; k++)
    c->ch[k].pid = -1, c->ch[k].in = c->ch[k].out = -1, c->p[k].index = -1, c->p[k].last_sample = -1;
  sys_child_missing(cmd, c->missing, sizeof c->missing);
  for (int k = 0; k < procs && !c->missing[0] && !c->spawn_err; k++) c->spawn_err = sys_child_start(&c->ch[k], cmd);
  PetscCall(PetscNew(&env));
  env->ops = &cmd_ops, env->name = c->name, env->vocab = vocab, env->nindex = nindex, env->data = c;
  *out = env;
  PetscFunctionReturn(PETSC_SUCCESS);
}
