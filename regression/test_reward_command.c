/* test_reward_command: the reward command (src/reward/command.c) against
 * small sh scripts written into a temporary directory: answers over several
 * batches of one persistent process, numbers in JSON's forms, the JSON line
 * byte for byte (escapes, invalid UTF-8 as U+FFFD; cross-checked with
 * Python's json and decode(errors="replace") when /usr/bin/python3 exists),
 * a helper that answers before reading its whole batch (no deadlock), and
 * every failure with its one-line message naming the command and, where one
 * is to blame, the sample: not found, exit, killed, time limit, bad lines,
 * too few and too many lines. After each stop no child or zombie is left,
 * and a helper killed for its time limit takes its own children with it.
 * Last, tools/reward_example.py (skipped without Python).
 * Reports through test_report.h; exits non-zero on any failure.
 *
 * The checks in detail: the reward command (src/reward/command.c) with shell scripts written
 * in the test: batches on one persistent process, numbers in every JSON form, answers at the
 * bound of 1e6 taken, the JSON line byte for byte as jansson writes it (quotes, backslashes,
 * control bytes as `\n`, `\t`, `\u00XX`, an emoji as it is, invalid UTF-8 as U+FFFD, a 64-bit
 * index), a 1.5 MB batch to a helper that answers before reading it all (no deadlock); each
 * failure's one-line message naming the command and the sample: a program not in PATH (also
 * after `exec`), a missing or non-executable script path (each not started, and nothing on
 * standard error besides the message), not found later in the command (the shell's 127),
 * 1.7e308 and -2000000 beyond the bound, exits, killed by a signal, too few or too many lines,
 * `abc`, `nan`, `inf`, `0x10` and nine more bad numbers, a hang past a 1 s limit (returns
 * within 4.5 s, not after the 31 s hang; its children killed), output before the first batch; no process or zombie left
 * after any of them; `tools/reward_example.py` over two batches
 */
#include "reward.h"
#include "test_report.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

static char dir[PETSC_MAX_PATH_LEN]; /* the scripts; $RC_DIR in the commands */
static int  children0;               /* children of this process at start (MPI's, if any) */

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void write_file(const char *name, const char *text, size_t n)
{
  char  path[PETSC_MAX_PATH_LEN + 64];
  FILE *f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if ((f = fopen(path, "wb"))) {
    fwrite(text, 1, n, f);
    fclose(f);
  }
}

static void write_script(const char *name, const char *text) { write_file(name, text, strlen(text)); }

/* /proc/PID/stat's state and parent of process pid (0 when gone). */
static char proc_state(const char *pid, int *ppid)
{
  char  path[300], line[512], *p, state;
  FILE *f;
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  if (!(f = fopen(path, "r"))) return 0;
  p = fgets(line, sizeof line, f);
  fclose(f);
  if (!p || !(p = strrchr(line, ')')) || sscanf(p + 1, " %c %d", &state, ppid) != 2) return 0;
  return state;
}

/* Processes whose command line is exactly argv (NUL-separated, as in
 * /proc/PID/cmdline) that are not zombies; or, with argv NULL, children of
 * this process (*zombies: how many of them are zombies). */
static int count_procs(const char *argv, size_t n, int *zombies)
{
  DIR           *d = opendir("/proc");
  struct dirent *e;
  int            count = 0, ppid;
  if (zombies) *zombies = 0;
  while (d && (e = readdir(d))) {
    char  path[300], cmd[256], st;
    FILE *f;
    size_t k = 0;
    if (e->d_name[0] < '1' || e->d_name[0] > '9' || !(st = proc_state(e->d_name, &ppid))) continue;
    if (!argv) {
      count += ppid == (int)getpid();
      if (zombies) *zombies += ppid == (int)getpid() && st == 'Z';
      continue;
    }
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    if ((f = fopen(path, "rb"))) k = fread(cmd, 1, sizeof cmd, f), fclose(f);
    count += st != 'Z' && k == n && !memcmp(cmd, argv, n);
  }
  if (d) closedir(d);
  return count;
}

/* "sleep SECS" still running (not counting zombies), waiting up to 2 s for
 * a killed one to go. */
static int sleeps_left(const char *secs)
{
  char   argv[64];
  size_t n = (size_t)snprintf(argv, sizeof argv, "sleep%c%s", 0, secs) + 1;
  int    left = 0;
  for (double end = now() + 2; (left = count_procs(argv, n, NULL)) && now() < end;) nanosleep(&(struct timespec){0, 20000000}, NULL);
  return left;
}

static void check_no_children(const char *what)
{
  int z, c = count_procs(NULL, 0, &z);
  test_report(c <= children0 && z == 0, what, "%d children (%d at start), %d zombies", c, children0, z);
}

/* n samples with index index0 + i */
static void make_samples(RewardSample *s, int n, int64_t index0)
{
  for (int i = 0; i < n; i++) s[i] = (RewardSample){index0 + i, "the prompt", "the response", "", ""};
}

/* Whether err contains each of the strings (NULL-terminated list). */
static int has_all(const char *err, const char *const *want)
{
  for (; *want; want++)
    if (!strstr(err, *want)) return 0;
  return 1;
}

/* Runs one batch of n samples (index 10..) through cmd, which must fail
 * with a message starting 'reward command "CMD": ' and containing want[];
 * then stops it and checks that nothing is left. Returns the seconds the
 * batch took. */
static double expect_failure(const char *name, const char *cmd, double timeout, int n, const char *const *want)
{
  RewardCommand *rc;
  RewardSample   s[8];
  double         v[8], t0, t;
  char           err[512], prefix[300], what[320];
  int            bad;

  make_samples(s, n, 10);
  /* the command as the message shows it: whole up to 60 bytes, else cut */
  snprintf(prefix, sizeof prefix, strlen(cmd) <= 60 ? "reward command \"%s\": " : "reward command \"%.50s", cmd);
  if (reward_command_start(cmd, timeout, &rc)) {
    test_report(PETSC_FALSE, name, "reward_command_start failed");
    return 0;
  }
  t0  = now();
  bad = reward_command_score(rc, 1, n, s, v, err, sizeof err);
  t   = now() - t0;
  test_report(bad && !strncmp(err, prefix, strlen(prefix)) && has_all(err, want) && !strchr(err, '\n'), name, "returned %d: %s", bad, bad ? err : "");
  printf("#   %s\n", err);
  (void)reward_command_stop(&rc);
  snprintf(what, sizeof what, "%s: no child left after stop", name);
  check_no_children(what);
  return t;
}

/* Batches of 3, 1 and 5 samples on one process, which numbers its batches:
 * answer i of batch k is 100 k + i. */
static void test_batches(void)
{
  RewardCommand *rc;
  RewardSample   s[5];
  double         v[5], t0;
  char           err[512] = "";
  const int      sizes[3] = {3, 1, 5};
  int            ok = 1, bad = 0;

  write_script("good.sh", "k=0\n"
                          "while IFS= read -r line; do\n"
                          "  k=$((k + 1))\n"
                          "  n=$(printf '%s\\n' \"$line\" | awk '{ print gsub(/\"index\": /, \"\") }')\n"
                          "  i=0\n"
                          "  while [ \"$i\" -lt \"$n\" ]; do echo \"$((k * 100 + i))\"; i=$((i + 1)); done\n"
                          "done\n");
  if (reward_command_start("sh \"$RC_DIR/good.sh\"", 10, &rc)) return;
  for (int k = 0; k < 3 && ok; k++) {
    make_samples(s, sizes[k], 0);
    for (int i = 0; i < 5; i++) v[i] = -1;
    bad = reward_command_score(rc, k, sizes[k], s, v, err, sizeof err);
    for (int i = 0; i < sizes[k] && !bad; i++) ok = ok && v[i] == 100.0 * (k + 1) + i;
    ok = ok && !bad;
  }
  test_report(ok, "three batches (3, 1, 5 samples) answered in order by one persistent process", "%s", bad ? err : "wrong values");
  t0 = now();
  (void)reward_command_stop(&rc);
  test_report(now() - t0 < 4, "stop: a helper that exits at the end of its input is not waited for", "took %.2f s",
              now() - t0);
  check_no_children("no child left after stop");
}

/* The forms of a JSON number, with white space and CR around them. */
static void test_number_forms(void)
{
  RewardCommand *rc;
  RewardSample   s[6];
  double         v[6];
  const double   want[6] = {1.5, -0.0, 2e-3, -125, 0, 123456.7825};
  char           err[512] = "";
  int            bad, ok;

  make_samples(s, 6, 0);
  if (reward_command_start("while IFS= read -r l; do printf ' 1.5 \\n-0\\n\\t2e-3\\r\\n-1.25E+2\\n0.0\\n1.234567825e+5'; echo; done", 10, &rc)) return;
  bad = reward_command_score(rc, 0, 6, s, v, err, sizeof err);
  ok  = !bad;
  for (int i = 0; i < 6 && ok; i++) ok = v[i] == want[i];
  test_report(ok, "answers in JSON's number forms with blanks, tabs and CR around them", "%s", bad ? err : "wrong values");
  (void)reward_command_stop(&rc);
  /* the bound on a reward's magnitude is allowed itself; a huge integer is a real */
  if (reward_command_start("while IFS= read -r l; do echo 1e6; echo -1000000; echo 1e-300; done", 10, &rc)) return;
  bad = reward_command_score(rc, 0, 3, s, v, err, sizeof err);
  test_report(!bad && v[0] == 1e6 && v[1] == -1e6 && v[2] == 1e-300, "answers at the bound (1e6, -1000000) and a tiny one are taken", "%s", bad ? err : "wrong values");
  (void)reward_command_stop(&rc);
}

/* The JSON line byte for byte, as jansson writes it: quotes, backslashes,
 * control characters as \n, \t (JSON's short escapes) or \u00XX, DEL,
 * valid UTF-8 and characters beyond the BMP (an emoji, 4 bytes) as they
 * are, each maximal invalid UTF-8 sequence as one U+FFFD (what Python's
 * decode(errors="replace") gives). */
static void test_json_line(void)
{
  RewardCommand *rc;
  RewardSample   s[2];
  double         v[2];
  char           err[512] = "", path[2 * PETSC_MAX_PATH_LEN], got[2048];
  const char    *resp = "q\"b\\s/\n\t\x01\x1f\x7f \xc3\xa9 \xff \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98\x80 \xc0\xaf \xf4\x90\x80\x80 end";
  const char    *want = "{\"iteration\": 3, \"samples\": [{\"index\": 17, \"prompt\": \"say \\\"hi\\\"\", \"response\": "
                        "\"q\\\"b\\\\s/\\n\\t\\u0001\\u001F\x7f \xc3\xa9 \xef\xbf\xbd \xef\xbf\xbd "
                        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xf0\x9f\x98\x80 \xef\xbf\xbd\xef\xbf\xbd "
                        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd end\", \"answer\": \"42\", \"metadata\": \"{\\\"k\\\": [1, \\\"x\\\"]}\"}, "
                        "{\"index\": 9000000000, \"prompt\": \"\", \"response\": \"\", \"answer\": \"\", \"metadata\": \"\"}]}\n";
  size_t         n = 0;
  FILE          *f;
  const char    *py = getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3";
  int            bad;

  s[0] = (RewardSample){17, "say \"hi\"", resp, "42", "{\"k\": [1, \"x\"]}"};
  s[1] = (RewardSample){9000000000LL, "", "", NULL, NULL}; /* NULL answer/metadata: "" */
  write_script("echo.sh", "while IFS= read -r line; do printf '%s\\n' \"$line\" > \"$RC_DIR/echo.out\"; echo 1; echo 2; done\n");
  if (reward_command_start("sh \"$RC_DIR/echo.sh\"", 10, &rc)) return;
  bad = reward_command_score(rc, 3, 2, s, v, err, sizeof err);
  (void)reward_command_stop(&rc);
  snprintf(path, sizeof path, "%s/echo.out", dir);
  if ((f = fopen(path, "rb"))) n = fread(got, 1, sizeof got - 1, f), fclose(f);
  got[n] = '\0';
  test_report(!bad && n == strlen(want) && !memcmp(got, want, n), "the JSON line byte for byte: escapes, control bytes as \\n, \\t, \\u00XX, an emoji as it is, invalid UTF-8 as U+FFFD, 64-bit index", "%s | got %zu bytes: %s", err, n, got);
  if (access(py, X_OK)) {
    test_skip("the JSON line read back by Python's json equals the response decoded with errors=\"replace\"", "no Python ($PYTHON or /usr/bin/python3)");
    return;
  }
  write_file("raw.bin", resp, strlen(resp));
  write_script("check.py", "import json, sys\n"
                           "d = json.loads(open(sys.argv[1], 'rb').read())\n"
                           "raw = open(sys.argv[2], 'rb').read().decode('utf-8', 'replace')\n"
                           "s = d['samples'][0]\n"
                           "sys.exit(0 if d['iteration'] == 3 and s['response'] == raw and s['index'] == 17 and s['prompt'] == 'say \"hi\"' else 1)\n");
  snprintf(path, sizeof path, "%s \"$RC_DIR/check.py\" \"$RC_DIR/echo.out\" \"$RC_DIR/raw.bin\"", py);
  test_report(system(path) == 0, "the JSON line read back by Python's json equals the response decoded with errors=\"replace\"", "%s", path);
}

/* A batch larger than the pipes (about 1.5 MB) to a helper that prints
 * all its answers (240 kB) after reading only the start of the batch, as
 * one that answers while parsing would: written and read together. */
static void test_no_deadlock(void)
{
  RewardCommand *rc;
  RewardSample  *s = malloc(20000 * sizeof *s);
  double        *v = malloc(20000 * sizeof *v), t0;
  char           err[512] = "";
  int            bad = 1, ok;

  if (!s || !v || reward_command_start("head -c 100 > /dev/null; yes 1.0000000000 | head -n 20000; exec cat > /dev/null", 60, &rc)) return;
  make_samples(s, 20000, 0);
  t0  = now();
  bad = reward_command_score(rc, 0, 20000, s, v, err, sizeof err);
  ok  = !bad;
  for (int i = 0; i < 20000 && ok; i++) ok = v[i] == 1.0;
  test_report(ok, "no deadlock: a helper that answers a 1.5 MB batch before reading it", "%s (%.1f s)", bad ? err : "wrong values", now() - t0);
  (void)reward_command_stop(&rc);
  free(s);
  free(v);
}

/* expect_failure with standard error sent to a file, which must stay
 * empty: the message is the only line (the shell printed nothing). */
static void expect_failure_alone(const char *name, const char *cmd, const char *const *want)
{
  char path[PETSC_MAX_PATH_LEN + 16], what[320];
  int  fd, saved = dup(2);
  long size = -1;
  FILE *f;

  snprintf(path, sizeof path, "%s/stderr.txt", dir);
  fflush(stderr);
  if (saved < 0 || (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) {
    test_report(PETSC_FALSE, name, "cannot send standard error to %s", path);
    return;
  }
  dup2(fd, 2), close(fd);
  expect_failure(name, cmd, 10, 2, want);
  fflush(stderr);
  dup2(saved, 2), close(saved);
  if ((f = fopen(path, "rb"))) fseek(f, 0, SEEK_END), size = ftell(f), fclose(f);
  snprintf(what, sizeof what, "%s: nothing else on standard error (no line of the shell's)", name);
  test_report(size == 0, what, "%ld bytes in %s", size, path);
}

static void test_failures(void)
{
  char   cmd[300], secs[32];
  double t;

  /* a missing program is found before the shell would print its own line */
  expect_failure_alone("not found in PATH: named, not started", "rlfuse_no_such_command_q7 --flag x", (const char *const[]){"program \"rlfuse_no_such_command_q7\" not found in PATH", NULL});
  expect_failure_alone("not found after exec", "exec rlfuse_no_such_command_q7", (const char *const[]){"program \"rlfuse_no_such_command_q7\" not found in PATH", NULL});
  expect_failure_alone("a missing script path", "./rlfuse_no_such_script_q7.py arg", (const char *const[]){"program \"./rlfuse_no_such_script_q7.py\" not found: No such file or directory", NULL});
  write_script("noexec.sh", "echo 1\n");
  snprintf(cmd, sizeof cmd, "%.200s/noexec.sh", dir);
  expect_failure_alone("a script that is not executable", cmd, (const char *const[]){"/noexec.sh\" is not an executable file", NULL});
  /* past a first word that is there, the shell's own 127 */
  expect_failure("not found later in the command: exit status 127 and the first sample", "true; rlfuse_no_such_command_q7", 10, 2,
                 (const char *const[]){"exited with status 127 (command not found?)", "0 of 2 answers", "sample 0, index 10", NULL});
  expect_failure("exits at once: its exit status", "exit 3", 10, 2, (const char *const[]){"exited with status 3 after 0 of 2 answers", NULL});
  write_script("dies.sh", "IFS= read -r l; echo 1; kill -KILL $$\n");
  expect_failure("killed mid-batch: the signal, the answers received, the sample", "exec sh \"$RC_DIR/dies.sh\"", 10, 3,
                 (const char *const[]){"killed by signal 9", "after 1 of 3 answers", "sample 1, index 11", NULL});
  expect_failure("too few lines, then exit", "IFS= read -r l; echo 1", 10, 3, (const char *const[]){"exited with status 0 after 1 of 3 answers", "sample 1, index 11", NULL});
  expect_failure("too many lines", "IFS= read -r l; printf '1\\n2\\n3\\n4\\n'; exec cat > /dev/null", 10, 3,
                 (const char *const[]){"more lines than the 3 samples of the batch: line 4 is \"4\"", NULL});
  expect_failure("not a number: abc", "IFS= read -r l; printf '1\\nabc\\n3\\n'; exec cat > /dev/null", 10, 3,
                 (const char *const[]){"line 2 (sample 1, index 11) is not a number: \"abc\"", NULL});
  {
    const char *bads[] = {"nan", "NaN", "inf", "-Infinity", "", "1.", ".5", "+1", "0x10", "1 2", "True", "01"};
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
      char name[64], quoted[64];
      snprintf(cmd, sizeof cmd, "IFS= read -r l; echo '%s'; exec cat > /dev/null", bads[i]);
      snprintf(name, sizeof name, "not a number: \"%s\"", bads[i]);
      snprintf(quoted, sizeof quoted, "is not a number: \"%s\"", bads[i]);
      expect_failure(name, cmd, 10, 1, (const char *const[]){"line 1 (sample 0, index 10)", quoted, NULL});
    }
  }
  /* finite but absurd: refused at once, not a NaN loss later */
  expect_failure("1.7e308: beyond the bound on a reward", "IFS= read -r l; echo 0.5; echo 1.7e308; exec cat > /dev/null", 10, 2,
                 (const char *const[]){"line 2 (sample 1, index 11) is 1.7e308, beyond the bound 1e+06 on a reward's magnitude", NULL});
  expect_failure("-2000000: beyond the bound on a reward", "IFS= read -r l; echo -2000000; exec cat > /dev/null", 10, 1,
                 (const char *const[]){"line 1 (sample 0, index 10) is -2000000, beyond the bound 1e+06", NULL});
  expect_failure("a number beyond a double (1e999)", "IFS= read -r l; echo 1e999; exec cat > /dev/null", 10, 1,
                 (const char *const[]){"line 1 (sample 0, index 10) is out of the range of a double: \"1e999\"", NULL});
  snprintf(cmd, sizeof cmd, "IFS= read -r l; printf '%%s\\n' '%0200d'; exec cat > /dev/null", 7);
  expect_failure("a long bad line is shortened", cmd, 10, 1, (const char *const[]){"is not a number: \"0000000000", "...\"", NULL});

  /* hangs: the time limit counts from the start of the batch; the helper
   * and its own children (the sleep) are killed */
  snprintf(secs, sizeof secs, "31.%d", (int)getpid()); /* a sleep no other process runs */
  snprintf(cmd, sizeof cmd, "while IFS= read -r l; do sleep %s; done\n", secs);
  write_script("hang.sh", cmd);
  t = expect_failure("hangs: the time limit (1 s)", "sh \"$RC_DIR/hang.sh\"", 1, 2,
                     (const char *const[]){"did not answer within 1 s: 0 of 2 answers received (none for sample 0, index 10)", NULL});
  test_report(t >= 0.9 && t < 4.5, "hangs: returns after the 1 s limit", "took %.2f s", t);
  test_report(sleeps_left(secs) == 0, "hangs: the helper's children are killed with it", NULL);

  /* a long command is shortened in the message */
  snprintf(cmd, sizeof cmd, "exit 4 # %0200d", 0);
  expect_failure("a long command is shortened", cmd, 10, 1, (const char *const[]){"reward command \"exit 4 # 000", "...\": exited with status 4", NULL});
}

/* Failures that need the process across two calls, and stop's kill. */
static void test_failures_across_batches(void)
{
  RewardCommand *rc;
  RewardSample   s[2];
  double         v[2], t0;
  char           err[512] = "", cmd[96], secs[32];
  int            bad1, bad2;

  make_samples(s, 2, 0);
  /* a line that comes after the batch's answers is found by the next batch */
  if (reward_command_start("while IFS= read -r l; do echo 1; echo 2; sleep 0.2; echo 3; done", 10, &rc)) return;
  bad1 = reward_command_score(rc, 0, 2, s, v, err, sizeof err);
  nanosleep(&(struct timespec){0, 700000000}, NULL);
  bad2 = reward_command_score(rc, 1, 2, s, v, err, sizeof err);
  test_report(!bad1 && bad2 && strstr(err, "printed more lines than the 2 samples of the previous batch: \"3\""), "a late extra line is found by the next batch", "%d %d: %s", bad1, bad2, err);
  bad2 = reward_command_score(rc, 2, 2, s, v, err, sizeof err);
  test_report(bad2 && strstr(err, "earlier error"), "after an error the command is not used again", "%d: %s", bad2, err);
  (void)reward_command_stop(&rc);

  /* output before the first batch */
  if (reward_command_start("echo loading; exec cat > /dev/null", 10, &rc)) return;
  nanosleep(&(struct timespec){1, 0}, NULL);
  bad1 = reward_command_score(rc, 0, 2, s, v, err, sizeof err);
  test_report(bad1 && strstr(err, "printed \"loading\" before its first batch"), "output before the first batch", "%d: %s", bad1, err);
  (void)reward_command_stop(&rc);

  /* closes its output but runs on: the batch fails and the helper with its
   * children is killed at once (left running, a Python helper printed its
   * BrokenPipeError after rlfuse's line) */
  snprintf(secs, sizeof secs, "32.%d", (int)getpid());
  snprintf(cmd, sizeof cmd, "exec > /dev/null; sleep %s", secs);
  if (reward_command_start(cmd, 10, &rc)) return;
  bad1 = reward_command_score(rc, 0, 2, s, v, err, sizeof err);
  test_report(bad1 && strstr(err, "closed its output after 0 of 2 answers"), "closed its output while still running", "%d: %s", bad1, err);
  test_report(sleeps_left(secs) == 0, "a failed batch kills the helper and its children at once", NULL);
  t0 = now();
  (void)reward_command_stop(&rc);
  test_report(now() - t0 < 3, "stop after a failed batch: nothing left to wait for", "took %.2f s", now() - t0);

  /* answers its batch, then ignores the end of its input: stop waits 5 s,
   * then kills it and its children */
  snprintf(secs, sizeof secs, "33.%d", (int)getpid());
  snprintf(cmd, sizeof cmd, "IFS= read -r l; echo 1; echo 2; sleep %s", secs);
  if (reward_command_start(cmd, 10, &rc)) return;
  bad1 = reward_command_score(rc, 0, 2, s, v, err, sizeof err);
  test_report(!bad1 && v[0] == 1 && v[1] == 2, "a helper that answers one batch and then sleeps: the batch scored", "%d: %s", bad1, err);
  t0 = now();
  (void)reward_command_stop(&rc);
  test_report(now() - t0 > 4.5 && now() - t0 < 9,
              "stop: waits 5 s for a helper that ignores the end of its input, then kills it", "took %.2f s",
              now() - t0);
  test_report(sleeps_left(secs) == 0, "stop: the killed helper's children are gone too", NULL);
  check_no_children("stop: no child left after the kill");
}

/* A batch of 2, then nothing answered: stop on a helper that never got a
 * batch; and the SIGPIPE disposition is left as it was. */
static void test_sigpipe_restored(void)
{
  RewardCommand   *rc;
  RewardSample     s[2];
  double           v[2];
  char             err[512];
  struct sigaction before, after;

  make_samples(s, 2, 0);
  sigaction(SIGPIPE, NULL, &before);
  if (reward_command_start("exit 0", 10, &rc)) return;
  nanosleep(&(struct timespec){0, 200000000}, NULL); /* gone before the batch: its pipe is closed */
  (void)reward_command_score(rc, 0, 2, s, v, err, sizeof err);
  (void)reward_command_stop(&rc);
  sigaction(SIGPIPE, NULL, &after);
  test_report(before.sa_handler == after.sa_handler, "a batch to a helper that has gone: no SIGPIPE, its disposition restored", NULL);
}

/* tools/reward_example.py: two batches on one process, then its exit at
 * the end of its input. */
static void test_example(void)
{
  const char    *py = getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3", *name = "tools/reward_example.py: numeric answers over two batches";
  RewardCommand *rc;
  RewardSample   s[6] = {
    {0, "p", "The answer is 42.", "42", ""},      {1, "p", "so 1,234 apples", "1234", ""}, {2, "p", "3.50", "3.5", ""},
    {3, "p", "7, no, 8", "7", ""},                {4, "p", "no number \xff", "5", ""},     {5, "p", "x = -5", "-5", "{}"},
  };
  const double want[6] = {1, 1, 1, 0, 0, 1};
  double       v[6], t0;
  char         cmd[PETSC_MAX_PATH_LEN + 64], err[512] = "";
  int          ok = 1, bad = 0;

  if (access(py, X_OK)) {
    test_skip(name, "no Python ($PYTHON or /usr/bin/python3)");
    test_skip("tools/reward_example.py exits at the end of its input", "no Python");
    return;
  }
  snprintf(cmd, sizeof cmd, "%s tools/reward_example.py", py);
  if (reward_command_start(cmd, 30, &rc)) return;
  for (int k = 0; k < 2 && ok; k++) {
    bad = reward_command_score(rc, k, 6 - 3 * k, s + 3 * k, v, err, sizeof err);
    for (int i = 0; i < 6 - 3 * k && !bad; i++) ok = ok && v[i] == want[3 * k + i];
    ok = ok && !bad;
  }
  test_report(ok, name, "%s", bad ? err : "wrong values");
  t0 = now();
  (void)reward_command_stop(&rc);
  test_report(now() - t0 < 4.5, "tools/reward_example.py exits at the end of its input", "stop took %.2f s",
              now() - t0);
}

int main(int argc, char **argv)
{
  if (PetscInitialize(&argc, &argv, NULL, "Tests of the reward command (src/reward/command.c).\n")) return 1;
  children0 = count_procs(NULL, 0, NULL);
  if (test_tmpdir(dir, sizeof dir, "reward_command") || setenv("RC_DIR", dir, 1)) return 1;
  test_batches();
  test_number_forms();
  test_json_line();
  test_no_deadlock();
  test_failures();
  test_failures_across_batches();
  test_sigpipe_restored();
  test_example();
  PetscFinalize();
  return test_tally();
}
