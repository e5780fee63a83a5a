/* child.c: helper programs run as child processes (inc/sys.h, "child
 * processes"): the reward command (src/reward/command.c) and environment
 * programs (src/env/command.c).
 *
 * A helper is started with posix_spawn (glibc: clone(CLONE_VFORK) + exec),
 * not fork: nothing of an MPI process (its pinned memory, threads, network
 * state) is duplicated, and an exec failure comes back as an error. It runs
 * in a process group of its own, so a helper that has to be killed (time
 * limit, no exit after its input closed) is killed with everything it
 * started: /bin/sh (dash) does not exec the last command of -c. Its standard
 * input and output are non-blocking pipes, so the caller interleaves writing
 * and reading with poll() and a helper that answers while we still write
 * cannot deadlock us. */
#define _GNU_SOURCE /* posix_spawn_file_actions_addclosefrom_np */
#include "sys.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define KILL_WAIT 5.0 /* seconds a killed or finished helper is waited for */

double sys_clock(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void sys_show(char *dst, size_t cap, const char *s, size_t n, size_t max)
{
  size_t k = n > max ? max - 3 : n, i;
  while (k < n && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  for (i = 0; i < k && i + 4 < cap; i++) dst[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7F ? '?' : s[i];
  if (k < n) memcpy(dst + i, "...", 3), i += 3;
  dst[i] = '\0';
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

struct json_t *sys_json_text(const char *text)
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

void sys_child_missing(const char *cmd, char *why, size_t cap)
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

static void close_fd(int *fd)
{
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

void sys_child_close_input(SysChild *c) { close_fd(&c->in); }

int sys_child_start(SysChild *c, const char *cmd)
{
  int                        to[2] = {-1, -1}, from[2] = {-1, -1}, e;
  char                      *argv[] = {"sh", "-c", (char *)cmd, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t          at;
  sigset_t                   none, pipe_sig;

  memset(c, 0, sizeof *c);
  c->pid = -1, c->in = c->out = -1;
  if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC)) {
    e = errno;
    close_fd(&to[0]), close_fd(&to[1]);
    return e;
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
  e = posix_spawn(&c->pid, "/bin/sh", &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close_fd(&to[0]), close_fd(&from[1]);
  if (e) {
    c->pid = -1;
    close_fd(&to[1]), close_fd(&from[0]);
    return e;
  }
  c->in = to[1], c->out = from[0];
  fcntl(c->in, F_SETFL, fcntl(c->in, F_GETFL) | O_NONBLOCK);
  fcntl(c->out, F_SETFL, fcntl(c->out, F_GETFL) | O_NONBLOCK);
  return 0;
}

int sys_child_read(SysChild *c, int *eof)
{
  ssize_t r;
  if (c->blen + 65536 > c->bcap) {
    size_t cap = c->bcap ? c->bcap : 4096;
    char  *q;
    while (cap < c->blen + 65536) cap *= 2;
    if (!(q = realloc(c->buf, cap))) return -1;
    c->buf = q, c->bcap = cap;
  }
  do r = read(c->out, c->buf + c->blen, c->bcap - c->blen);
  while (r < 0 && errno == EINTR);
  if (r > 0) c->blen += (size_t)r;
  if (r == 0) *eof = 1;
  return r < 0 && errno != EAGAIN ? -1 : 0;
}

void sys_child_reap(SysChild *c, double wait_s)
{
  double          end = sys_clock() + wait_s;
  struct timespec tick = {0, 10000000};
  while (c->pid > 0 && !c->reaped) {
    pid_t r = waitpid(c->pid, &c->status, WNOHANG);
    if (r == c->pid || (r < 0 && errno == ECHILD)) c->reaped = 1, c->status = r < 0 ? -1 : c->status;
    else if (r < 0 && errno == EINTR) continue;
    else if (sys_clock() >= end) break;
    else nanosleep(&tick, NULL);
  }
}

void sys_children_kill(SysChild *c, int n)
{
  double end = sys_clock() + KILL_WAIT;
  for (int i = 0; i < n; i++)
    if (c[i].pid > 0 && !c[i].reaped && kill(-c[i].pid, SIGKILL)) kill(c[i].pid, SIGKILL); /* its process group */
  /* at most 5 s in all: a helper that cannot be killed (stuck in the kernel) must not hang the run */
  for (int i = 0; i < n; i++) sys_child_reap(&c[i], PetscMax(end - sys_clock(), 0));
}

void sys_child_ended(SysChild *c, char *how, size_t cap)
{
  sys_child_reap(c, 1.0);
  if (!c->reaped) snprintf(how, cap, "closed its output");
  else if (c->status == -1) snprintf(how, cap, "exited");
  else if (WIFSIGNALED(c->status))
    snprintf(how, cap, "was killed by signal %d (%s)", WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
  else
    snprintf(how, cap, "exited with status %d%s", WEXITSTATUS(c->status),
             WEXITSTATUS(c->status) == 127 ? " (command not found?)" : "");
}

void sys_children_stop(SysChild *c, int n)
{
  double         end = sys_clock() + KILL_WAIT;
  char           sink[4096];
  size_t         m   = (size_t)(n > 0 ? n : 1);
  int           *eof = calloc(m, sizeof *eof), *at = calloc(m, sizeof *at), left = 1;
  struct pollfd *p   = calloc(m, sizeof *p);

  for (int i = 0; i < n; i++) close_fd(&c[i].in); /* end of input: a helper exits */
  while (eof && at && p && left && sys_clock() < end) {
    int np = 0;
    left   = 0;
    for (int i = 0; i < n; i++) {
      if (c[i].pid <= 0 || c[i].reaped) continue;
      left = 1;
      /* drain what it still prints, so it cannot block on a full pipe */
      if (!eof[i] && c[i].out >= 0) at[np] = i, p[np++] = (struct pollfd){.fd = c[i].out, .events = POLLIN};
    }
    if (!left) break;
    if (np && poll(p, (nfds_t)np, 10) > 0) {
      for (int k = 0; k < np; k++)
        if (p[k].revents) eof[at[k]] = read(c[at[k]].out, sink, sizeof sink) == 0;
    } else if (!np) nanosleep(&(struct timespec){0, 10000000}, NULL);
    for (int i = 0; i < n; i++) sys_child_reap(&c[i], 0);
  }
  free(eof), free(at), free(p);
  sys_children_kill(c, n);
  for (int i = 0; i < n; i++) {
    close_fd(&c[i].out);
    free(c[i].buf);
    c[i].buf = NULL, c[i].blen = c[i].bcap = 0;
  }
}
