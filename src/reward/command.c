/* command.c: the reward command (inc/reward.h), a user's helper process
 * that scores batches of samples: one JSON line per batch on its standard
 * input, one number per sample back on its standard output. Writing and
 * reading are interleaved with poll() on non-blocking pipes, so a helper
 * that answers while we still write a large batch cannot deadlock us; a
 * batch has one deadline, counted from its start.
 *
 * The helper is started with posix_spawn (glibc: clone(CLONE_VFORK) +
 * exec), not fork: nothing of an MPI process (its pinned memory, threads,
 * network state) is duplicated, and an exec failure comes back as an error.
 * It runs in a process group of its own, so a helper that has to be killed
 * (time limit, no exit after its input closed) is killed with everything it
 * started: /bin/sh (dash) does not exec the last command of -c. */
#define _GNU_SOURCE /* posix_spawn_file_actions_addclosefrom_np */
#include "reward.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CMD_SHOWN  60        /* bytes of the command shown in messages */
#define LINE_SHOWN 40        /* bytes of a bad answer shown */
#define LINE_LIMIT (1 << 20) /* an answer line longer than this is refused */

struct RewardCommand {
  pid_t  pid;                 /* -1: not started */
  int    in, out;             /* our ends of its stdin and stdout; -1: closed */
  int    reaped, status;      /* status -1: reaped by someone else (SIGCHLD ignored) */
  int    spawn_err;           /* errno of a failed start, reported by the first batch */
  char   missing[256];        /* its program is not there: not started, reported by the first batch */
  int    broken;              /* a batch failed: answers may be out of step */
  int    batches, last_n;     /* batches answered; samples of the last one */
  double timeout;
  char   name[CMD_SHOWN + 4]; /* the command, printable and shortened */
  char  *json, *buf;          /* the batch; what was read and not yet used */
  size_t jlen, jcap, blen, bcap;
};

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* s[0..n) for a one-line message: non-printable bytes as '?', cut to max
 * bytes (at a character boundary) with "..." */
static void show(char *dst, size_t cap, const char *s, size_t n, size_t max)
{
  size_t k = n > max ? max - 3 : n, i;
  while (k < n && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  for (i = 0; i < k && i + 4 < cap; i++) dst[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7F ? '?' : s[i];
  if (k < n) memcpy(dst + i, "...", 3), i += 3;
  dst[i] = '\0';
}

static void kill_now(RewardCommand *rc);

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
  kill_now(rc);
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

/* Length of the valid UTF-8 character at s, or minus the length (>= 1) of
 * its longest invalid start: that becomes one U+FFFD, as Python's
 * decode(errors="replace") does. s is NUL-terminated. Only text that
 * jansson refuses as invalid UTF-8 comes here. */
static int utf8_char(const unsigned char *s)
{
  unsigned char c = s[0], lo = 0x80, hi = 0xBF;
  int           more;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) more = 1;
  else if (c >= 0xE0 && c <= 0xEF)
    more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF; /* no overlong forms, no surrogates */
  else if (c >= 0xF0 && c <= 0xF4)
    more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
  else return -1;
  for (int k = 1; k <= more; k++, lo = 0x80, hi = 0xBF)
    if (s[k] < lo || s[k] > hi) return -k;
  return more + 1;
}

/* A JSON string of arbitrary bytes. jansson escapes it and checks its
 * UTF-8; text it refuses is repaired here first, each maximal invalid
 * sequence becoming U+FFFD (jansson would only refuse it). NULL on no
 * memory. */
static json_t *text_string(const char *text)
{
  const unsigned char *s = (const unsigned char *)(text ? text : "");
  json_t              *j = json_string((const char *)s);
  char                *fixed;
  size_t               n = 0;
  if (j) return j;
  if (!(fixed = malloc(3 * strlen((const char *)s) + 1))) return NULL; /* each bad byte at most one U+FFFD */
  for (size_t i = 0; s[i];) {
    int k = utf8_char(s + i);
    if (k < 0) memcpy(fixed + n, "\xEF\xBF\xBD", 3), n += 3, i += (size_t)-k;
    else memcpy(fixed + n, s + i, (size_t)k), n += (size_t)k, i += (size_t)k;
  }
  j = json_stringn(fixed, n);
  free(fixed);
  return j;
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
          json_object_set_new(o, "prompt", text_string(s[i].prompt)) ||
          json_object_set_new(o, "response", text_string(s[i].response)) ||
          json_object_set_new(o, "answer", text_string(s[i].answer)) ||
          json_object_set_new(o, "metadata", text_string(s[i].metadata));
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

/* Collects its exit status if it has ended, waiting up to wait_s. */
static void reap(RewardCommand *rc, double wait_s)
{
  double          end = now() + wait_s;
  struct timespec tick = {0, 10000000};
  while (rc->pid > 0 && !rc->reaped) {
    pid_t r = waitpid(rc->pid, &rc->status, WNOHANG);
    if (r == rc->pid || (r < 0 && errno == ECHILD)) rc->reaped = 1, rc->status = r < 0 ? -1 : rc->status;
    else if (r < 0 && errno == EINTR) continue;
    else if (now() >= end) break;
    else nanosleep(&tick, NULL);
  }
}

static void kill_now(RewardCommand *rc)
{
  if (rc->pid > 0 && !rc->reaped) {
    if (kill(-rc->pid, SIGKILL)) kill(rc->pid, SIGKILL); /* its process group (see the top) */
    reap(rc, 5); /* at most 5 s: a helper that cannot be killed (stuck in the kernel) must not hang the run */
  }
}

static void close_fd(int *fd)
{
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Whether the program that cmd's first word names is missing: then why is
 * set ('program "PROG" not found ...'), and the command is not started, because the
 * shell would print its own "not found" line before rlfuse's. Only a plain
 * first word is checked (after "exec"; an assignment, quoting or expansion
 * is left to the shell); a word without '/' through the shell's own
 * "command -v", so builtins, keywords and PATH are the shell's. */
static void find_program(const char *cmd, char *why, size_t cap)
{
  const char *p = cmd, *plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./+,:@%^-";
  char        word[256], *argv[] = {"sh", "-c", "command -v -- \"$1\" >/dev/null 2>&1 || exit 127", "sh", word, NULL};
  size_t      n;
  struct stat st;
  pid_t       pid;
  int         status = 0;

  why[0] = '\0';
  for (;;) {
    p += strspn(p, " \t");
    n = strspn(p, plain);
    if (n == 0 || n >= sizeof word || (p[n] && !strchr(" \t\n;&|", p[n]))) return; /* not a plain word: the shell's */
    memcpy(word, p, n), word[n] = '\0';
    if (strcmp(word, "exec")) break;
    p += n;
  }
  if (strchr(word, '/')) {
    if (stat(word, &st)) snprintf(why, cap, "program \"%.160s\" not found: %s", word, strerror(errno));
    else if (!S_ISREG(st.st_mode) || access(word, X_OK))
      snprintf(why, cap, "program \"%.160s\" is not an executable file", word);
    return;
  }
  if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ)) return;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) snprintf(why, cap, "program \"%.160s\" not found in PATH", word);
}

PetscErrorCode reward_command_start(const char *cmd, double timeout_s, RewardCommand **out)
{
  RewardCommand             *rc;
  int                        to[2] = {-1, -1}, from[2] = {-1, -1}, e;
  char                      *argv[] = {"sh", "-c", (char *)cmd, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t          at;
  sigset_t                   none, pipe_sig;

  PetscFunctionBegin;
  PetscCall(PetscNew(&rc));
  rc->pid = -1, rc->in = rc->out = -1, rc->timeout = timeout_s;
  show(rc->name, sizeof rc->name, cmd, strlen(cmd), CMD_SHOWN);
  *out = rc;
  find_program(cmd, rc->missing, sizeof rc->missing);
  if (rc->missing[0]) PetscFunctionReturn(PETSC_SUCCESS);
  if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC)) {
    rc->spawn_err = errno;
    close_fd(&to[0]), close_fd(&to[1]);
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  sigemptyset(&none), sigemptyset(&pipe_sig), sigaddset(&pipe_sig, SIGPIPE);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from[1], 1);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* MPI's sockets and files are not the helper's */
#endif
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setsigdefault(&at, &pipe_sig); /* a helper writing to a closed pipe dies as usual */
  posix_spawnattr_setsigmask(&at, &none);
  e = posix_spawn(&rc->pid, "/bin/sh", &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close_fd(&to[0]), close_fd(&from[1]);
  if (e) {
    rc->spawn_err = e, rc->pid = -1;
    close_fd(&to[1]), close_fd(&from[0]);
  } else {
    rc->in = to[1], rc->out = from[0];
    fcntl(rc->in, F_SETFL, fcntl(rc->in, F_GETFL) | O_NONBLOCK);
    fcntl(rc->out, F_SETFL, fcntl(rc->out, F_GETFL) | O_NONBLOCK);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One read of what it printed; *eof at the end of its output. */
static int read_some(RewardCommand *rc, int *eof)
{
  ssize_t r;
  if (grow(&rc->buf, &rc->bcap, rc->blen + 65536)) return -1;
  do r = read(rc->out, rc->buf + rc->blen, rc->bcap - rc->blen);
  while (r < 0 && errno == EINTR);
  if (r > 0) rc->blen += (size_t)r;
  if (r == 0) *eof = 1;
  return r < 0 && errno != EAGAIN ? -1 : 0;
}

/* The complete lines read so far as answers (at its end of output, the
 * unfinished last line too); a line beyond the n-th is an error. */
static int take_lines(RewardCommand *rc, int n, const RewardSample *s, double *out, int *got, int eof, char *err,
                      size_t cap)
{
  size_t pos = 0;
  char   line[LINE_SHOWN + 8];
  for (;;) {
    const char *p  = rc->buf + pos, *nl = memchr(p, '\n', rc->blen - pos);
    size_t      len = nl ? (size_t)(nl - p) : rc->blen - pos;
    int         bad;
    if (!nl && !(eof && len)) break;
    if (*got == n || (bad = parse_number(p, len, &out[*got]))) {
      show(line, sizeof line, p, len, LINE_SHOWN);
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
  memmove(rc->buf, rc->buf + pos, rc->blen - pos);
  rc->blen -= pos;
  return 0;
}

/* It closed its output with got of n answers: how it ended. */
static int ended(RewardCommand *rc, int got, int n, const RewardSample *s, char *err, size_t cap)
{
  char how[96];
  reap(rc, 1.0);
  if (!rc->reaped) snprintf(how, sizeof how, "closed its output");
  else if (rc->status == -1) snprintf(how, sizeof how, "exited");
  else if (WIFSIGNALED(rc->status))
    snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(rc->status), strsignal(WTERMSIG(rc->status)));
  else
    snprintf(how, sizeof how, "exited with status %d%s", WEXITSTATUS(rc->status),
             WEXITSTATUS(rc->status) == 127 ? " (command not found?)" : "");
  return fail(rc, err, cap, "%s after %d of %d answers (none for sample %d, index %" PRId64 ")", how, got, n, got,
              s[got].index);
}

/* Sends the batch in rc->json while reading answers, until n answers have
 * come and the batch is written (or it stopped reading), or the deadline. */
static int exchange(RewardCommand *rc, int n, const RewardSample *s, double *out, char *err, size_t cap)
{
  double deadline = now() + rc->timeout;
  size_t woff     = 0;
  int    got = 0, eof = 0;
  char   line[LINE_SHOWN + 8];

  if (read_some(rc, &eof)) return fail(rc, err, cap, "cannot read its output: %s", strerror(errno));
  if (rc->blen) {
    const char *nl = memchr(rc->buf, '\n', rc->blen);
    show(line, sizeof line, rc->buf, nl ? (size_t)(nl - rc->buf) : rc->blen, LINE_SHOWN);
    if (rc->batches)
      return fail(rc, err, cap, "printed more lines than the %d samples of the previous batch: \"%s\"", rc->last_n,
                  line);
    return fail(rc, err, cap, "printed \"%s\" before its first batch", line);
  }
  for (;;) {
    struct pollfd p[2];
    int           np = 0, wi = -1, ri = -1, ms;
    double        left = deadline - now();
    if (take_lines(rc, n, s, out, &got, eof, err, cap)) return 1;
    if (got == n && (woff == rc->jlen || rc->in < 0)) return 0;
    if (eof && got < n) return ended(rc, got, n, s, err, cap);
    if (rc->blen > LINE_LIMIT)
      return fail(rc, err, cap,
                  "printed a line longer than %d bytes (answer %d; a -reward_command answer line may have at most "
                  "1 MiB)",
                  LINE_LIMIT, got + 1);
    if (left <= 0) {
      kill_now(rc); /* it may never read again: it must not outlive us */
      if (got == n)
        return fail(rc, err, cap, "did not read its whole batch within %g s (all %d answers received); killed it",
                    rc->timeout, n);
      return fail(rc, err, cap,
                  "did not answer within %g s: %d of %d answers received (none for sample %d, index %" PRId64
                  "); killed it",
                  rc->timeout, got, n, got, s[got].index);
    }
    if (woff < rc->jlen && rc->in >= 0) wi = np, p[np++] = (struct pollfd){.fd = rc->in, .events = POLLOUT};
    if (!eof) ri = np, p[np++] = (struct pollfd){.fd = rc->out, .events = POLLIN};
    ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
    if (poll(p, (nfds_t)np, ms) < 0) {
      if (errno == EINTR) continue;
      return fail(rc, err, cap, "poll failed: %s", strerror(errno));
    }
    if (wi >= 0 && p[wi].revents) {
      ssize_t w = write(rc->in, rc->json + woff, rc->jlen - woff);
      if (w > 0) woff += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR) close_fd(&rc->in); /* EPIPE: it stopped reading */
    }
    if (ri >= 0 && p[ri].revents && read_some(rc, &eof))
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
  double         end;
  char           sink[4096];
  int            eof = 0;

  PetscFunctionBegin;
  if (!rc) PetscFunctionReturn(PETSC_SUCCESS);
  close_fd(&rc->in); /* end of input: a helper exits */
  for (end = now() + 5; rc->pid > 0 && !rc->reaped && now() < end;) {
    struct pollfd p = {.fd = rc->out, .events = POLLIN};
    /* drain what it still prints, so it cannot block on a full pipe */
    if (!eof && poll(&p, 1, 10) > 0) eof = read(rc->out, sink, sizeof sink) == 0;
    else if (eof) nanosleep(&(struct timespec){0, 10000000}, NULL);
    reap(rc, 0);
  }
  kill_now(rc);
  close_fd(&rc->out);
  free(rc->json);
  free(rc->buf);
  PetscCall(PetscFree(rc));
  *prc = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}
