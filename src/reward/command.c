/* command.c: the reward command (inc/reward.h), a user's helper process
 * that scores batches of samples: one JSON line per batch on its standard
 * input, one number per sample back on its standard output. Writing and
 * reading are interleaved with poll() on non-blocking pipes, so a helper
 * that answers while we still write a large batch cannot deadlock us; a
 * batch has one deadline, counted from its start. The process itself
 * (posix_spawn, its own process group, killed with what it started) is
 * src/sys/child.c's. */
#include "reward.h"
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD_SHOWN  60        /* bytes of the command shown in messages */
#define LINE_SHOWN 40        /* bytes of a bad answer shown */
#define LINE_LIMIT (1 << 20) /* an answer line longer than this is refused */

struct RewardCommand {
  SysChild ch;                /* the helper; what it printed and we did not use yet */
  int    spawn_err;           /* errno of a failed start, reported by the first batch */
  char   missing[256];        /* its program is not there: not started, reported by the first batch */
  int    broken;              /* a batch failed: answers may be out of step */
  int    batches, last_n;     /* batches answered; samples of the last one */
  double timeout;
  char   name[CMD_SHOWN + 4]; /* the command, printable and shortened */
  char  *json;                /* the batch */
  size_t jlen, jcap;
};

/* The message 'reward command "CMD": ...'; the command is not used again, so a
 * helper still running is killed now: left to run it would print its own
 * complaint (a Python BrokenPipeError) after rlfuse's line, once our end of
 * its output has closed. */
static int fail(RewardCommand *rc, char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(RewardCommand *rc, char *err, size_t cap, const char *fmt, ...)
{
  va_list ap;
  int     k = snprintf(err, cap, "reward command \"%s\": ", rc->name);
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < cap) vsnprintf(err + k, cap - (size_t)k, fmt, ap);
  va_end(ap);
  rc->broken = 1;
  sys_children_kill(&rc->ch, 1);
  return 1;
}

static int grow(char **p, size_t *cap, size_t need)
{
  size_t c = *cap ? *cap : 4096;
  char  *q;
  if (need <= *cap) return 0;
  while (c < need) c *= 2;
  if (!(q = realloc(*p, c))) return -1;
  *p = q, *cap = c;
  return 0;
}

static int put(RewardCommand *rc, const char *s, size_t n)
{
  if (grow(&rc->json, &rc->jcap, rc->jlen + n)) return -1;
  memcpy(rc->json + rc->jlen, s, n);
  rc->jlen += n;
  return 0;
}

/* json_dump_callback's writer: appends to the batch buffer */
static int put_json(const char *s, size_t n, void *rc) { return put(rc, s, n); }

/* The batch line. jansson writes objects' keys in the order they were set,
 * separated by ", " and ": " (flags 0: neither indented nor compact). */
static int build_batch(RewardCommand *rc, int iteration, int n, const RewardSample *s)
{
  json_t *batch = json_object(), *list = json_array();
  int     bad = !batch || !list || json_object_set_new(batch, "iteration", json_integer(iteration)) ||
            json_object_set(batch, "samples", list);
  rc->jlen = 0;
  for (int i = 0; i < n && !bad; i++) {
    json_t *o = json_object();
    bad       = !o || json_array_append_new(list, o) || json_object_set_new(o, "index", json_integer(s[i].index)) ||
          json_object_set_new(o, "prompt", sys_json_text(s[i].prompt)) ||
          json_object_set_new(o, "response", sys_json_text(s[i].response)) ||
          json_object_set_new(o, "answer", sys_json_text(s[i].answer)) ||
          json_object_set_new(o, "metadata", sys_json_text(s[i].metadata));
  }
  bad = bad || json_dump_callback(batch, put_json, rc, 0) || put(rc, "\n", 1);
  json_decref(list);
  json_decref(batch);
  return bad;
}

/* One answer: a JSON number (jansson's reading, so nan, inf, 01, +1 and
 * .5 are not) with JSON's white space around it. 0: *v set; 1: not a
 * number; 2: a number beyond the range of a double; 3: a finite number
 * beyond REWARD_COMMAND_MAX_ABS. */
static int parse_number(const char *s, size_t n, double *v)
{
  json_error_t e;
  json_t      *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &e);
  int          r = !j ? (json_error_code(&e) == json_error_numeric_overflow ? 2 : 1) : !json_is_number(j) ? 1 : 0;
  if (!r) *v = json_number_value(j), r = fabs(*v) > REWARD_COMMAND_MAX_ABS ? 3 : 0;
  json_decref(j);
  return r;
}

PetscErrorCode reward_command_start(const char *cmd, double timeout_s, RewardCommand **out)
{
  RewardCommand *rc;

  PetscFunctionBegin;
  PetscCall(PetscNew(&rc));
  rc->ch.pid = -1, rc->ch.in = rc->ch.out = -1, rc->timeout = timeout_s;
  sys_show(rc->name, sizeof rc->name, cmd, strlen(cmd), CMD_SHOWN);
  *out = rc;
  sys_child_missing(cmd, rc->missing, sizeof rc->missing);
  if (!rc->missing[0]) rc->spawn_err = sys_child_start(&rc->ch, cmd);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The complete lines read so far as answers (at its end of output, the
 * unfinished last line too); a line beyond the n-th is an error. */
static int take_lines(RewardCommand *rc, int n, const RewardSample *s, double *out, int *got, int eof, char *err,
                      size_t cap)
{
  size_t pos = 0;
  char   line[LINE_SHOWN + 8];
  for (;;) {
    const char *p  = rc->ch.buf + pos, *nl = memchr(p, '\n', rc->ch.blen - pos);
    size_t      len = nl ? (size_t)(nl - p) : rc->ch.blen - pos;
    int         bad;
    if (!nl && !(eof && len)) break;
    if (*got == n || (bad = parse_number(p, len, &out[*got]))) {
      sys_show(line, sizeof line, p, len, LINE_SHOWN);
      if (*got == n)
        return fail(rc, err, cap, "printed more lines than the %d samples of the batch: line %d is \"%s\"", n, n + 1,
                    line);
      if (bad == 3)
        return fail(rc, err, cap,
                    "line %d (sample %d, index %" PRId64 ") is %s, beyond the bound %g on a reward's magnitude",
                    *got + 1, *got, s[*got].index, line, REWARD_COMMAND_MAX_ABS);
      return fail(rc, err, cap, "line %d (sample %d, index %" PRId64 ") is %s: \"%s\"", *got + 1, *got, s[*got].index,
                  bad == 1 ? "not a number" : "out of the range of a double", line);
    }
    ++*got;
    pos += len + (nl != NULL);
  }
  memmove(rc->ch.buf, rc->ch.buf + pos, rc->ch.blen - pos);
  rc->ch.blen -= pos;
  return 0;
}

/* It closed its output with got of n answers: how it ended. */
static int ended(RewardCommand *rc, int got, int n, const RewardSample *s, char *err, size_t cap)
{
  char how[96];
  sys_child_ended(&rc->ch, how, sizeof how);
  return fail(rc, err, cap, "%s after %d of %d answers (none for sample %d, index %" PRId64 ")", how, got, n, got,
              s[got].index);
}

/* Sends the batch in rc->json while reading answers, until n answers have
 * come and the batch is written (or it stopped reading), or the deadline. */
static int exchange(RewardCommand *rc, int n, const RewardSample *s, double *out, char *err, size_t cap)
{
  double deadline = sys_clock() + rc->timeout;
  size_t woff     = 0;
  int    got = 0, eof = 0;
  char   line[LINE_SHOWN + 8];

  if (sys_child_read(&rc->ch, &eof)) return fail(rc, err, cap, "cannot read its output: %s", strerror(errno));
  if (rc->ch.blen) {
    const char *nl = memchr(rc->ch.buf, '\n', rc->ch.blen);
    sys_show(line, sizeof line, rc->ch.buf, nl ? (size_t)(nl - rc->ch.buf) : rc->ch.blen, LINE_SHOWN);
    if (rc->batches)
      return fail(rc, err, cap, "printed more lines than the %d samples of the previous batch: \"%s\"", rc->last_n,
                  line);
    return fail(rc, err, cap, "printed \"%s\" before its first batch", line);
  }
  for (;;) {
    struct pollfd p[2];
    int           np = 0, wi = -1, ri = -1, ms;
    double        left = deadline - sys_clock();
    if (take_lines(rc, n, s, out, &got, eof, err, cap)) return 1;
    if (got == n && (woff == rc->jlen || rc->ch.in < 0)) return 0;
    if (eof && got < n) return ended(rc, got, n, s, err, cap);
    if (rc->ch.blen > LINE_LIMIT)
      return fail(rc, err, cap,
                  "printed a line longer than %d bytes (answer %d; a -reward_command answer line may have at most "
                  "1 MiB)",
                  LINE_LIMIT, got + 1);
    if (left <= 0) {
      sys_children_kill(&rc->ch, 1); /* it may never read again: it must not outlive us */
      if (got == n)
        return fail(rc, err, cap, "did not read its whole batch within %g s (all %d answers received); killed it",
                    rc->timeout, n);
      return fail(rc, err, cap,
                  "did not answer within %g s: %d of %d answers received (none for sample %d, index %" PRId64
                  "); killed it",
                  rc->timeout, got, n, got, s[got].index);
    }
    if (woff < rc->jlen && rc->ch.in >= 0) wi = np, p[np++] = (struct pollfd){.fd = rc->ch.in, .events = POLLOUT};
    if (!eof) ri = np, p[np++] = (struct pollfd){.fd = rc->ch.out, .events = POLLIN};
    ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
    if (poll(p, (nfds_t)np, ms) < 0) {
      if (errno == EINTR) continue;
      return fail(rc, err, cap, "poll failed: %s", strerror(errno));
    }
    if (wi >= 0 && p[wi].revents) {
      ssize_t w = write(rc->ch.in, rc->json + woff, rc->jlen - woff);
      if (w > 0) woff += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR)
        sys_child_close_input(&rc->ch); /* EPIPE: it stopped reading */
    }
    if (ri >= 0 && p[ri].revents && sys_child_read(&rc->ch, &eof))
      return fail(rc, err, cap, "cannot read its output: %s", strerror(errno));
  }
}

int reward_command_score(RewardCommand *rc, int iteration, int n, const RewardSample *s, double *out, char *err,
                         size_t errcap)
{
  struct sigaction ignore = {.sa_handler = SIG_IGN}, old;
  int              bad;

  if (errcap) err[0] = '\0';
  if (rc->spawn_err) return fail(rc, err, errcap, "cannot start /bin/sh: %s", strerror(rc->spawn_err));
  if (rc->missing[0]) return fail(rc, err, errcap, "%s", rc->missing);
  if (rc->broken) return fail(rc, err, errcap, "not used again after an earlier error");
  if (n <= 0) return 0;
  if (build_batch(rc, iteration, n, s)) return fail(rc, err, errcap, "out of memory for a batch of %d samples", n);
  /* a write to a helper that has gone must return EPIPE, not kill us */
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &old);
  bad = exchange(rc, n, s, out, err, errcap);
  sigaction(SIGPIPE, &old, NULL);
  if (!bad) rc->batches++, rc->last_n = n;
  return bad;
}

PetscErrorCode reward_command_stop(RewardCommand **prc)
{
  RewardCommand *rc = *prc;

  PetscFunctionBegin;
  if (!rc) PetscFunctionReturn(PETSC_SUCCESS);
  sys_children_stop(&rc->ch, 1); /* closes its input, waits up to 5 s for it to exit, then kills it */
  free(rc->json);
  PetscCall(PetscFree(rc));
  *prc = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}
