/* test_env: environment programs (src/env/command.c) against small sh and
 * Python scripts written into a temporary directory: episodes of many
 * request indices on several processes, answers that depend on the request
 * checked one by one, the state round trip, any process serving any step,
 * collects in another order than the submits, a slow environment (random
 * sleeps) giving the same answers as the fast one, the request lines byte
 * for byte; and every failure as one line naming the environment, the
 * sample and the turn: not started, exits, crashes, times out, not JSON,
 * ids not integers or outside the vocabulary, an "error" answer, a line
 * over the size limit. After each failure and each destroy no process of
 * the environment is left (each writes its pid to a file; also no child or
 * zombie of ours). Reports through test_report.h; exits non-zero on any
 * failure.
 *
 * The checks in detail: 12 request indices, each two episodes of a reset and three steps,
 * answered by a Python environment whose observation ids are a function of the sample, the turn,
 * the prompt's and the segment's ids, and whose state counts the steps (a step whose state does not
 * match its turn is answered with an error): on 1 process collected in submission order, on 4 in a
 * shuffled order, on 3 with random sleeps in another shuffled order; every answer equal to the
 * expected one, the three runs identical, answers valid until their index's next collect, several
 * processes serving (how many episodes had steps on different ones is shown: it depends on timing,
 * and a loaded machine under a sanitizer once had none); the reset and step lines as jansson writes them
 * (null text, answer and state, invalid UTF-8 as U+FFFD, an escaped state, the state cleared by a
 * new reset); failures: a program not in PATH, exit status 3, SIGSEGV, a 1 s time limit (back
 * within 4.5 s, not after the 31 s hang: a loaded machine under a sanitizer is slow), "hello",
 * two objects, an array, 2.5 and "a" as ids, 50 and -1 outside a vocabulary of 50, a step's answer without ids, a
 * reset's answer with ids, an "error" answer (and a long command shortened), a 5 MB line over the 4 MiB limit; after
 * each: no process left, the environment refused afterwards; destroy of 3 processes that ignore the end of their input
 * within 5 s in all, killing them. About 8 s. */
#include "env.h"
#include "test_report.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define V     50 /* the vocabulary */
#define NIDX  12 /* request indices */
#define EPIS  2  /* episodes per index */
#define TURNS 4  /* requests per episode: the reset and three steps */

static char        dir[PETSC_MAX_PATH_LEN]; /* the scripts; $ENV_DIR in the commands */
static int         children0;               /* children of this process at start (MPI's, if any) */
static const char *py;                      /* Python, or NULL */

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void write_script(const char *name, const char *text)
{
  char  path[PETSC_MAX_PATH_LEN + 64];
  FILE *f;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if ((f = fopen(path, "wb"))) {
    fputs(text, f);
    fclose(f);
  }
}

/* /proc/PID/stat's state and parent of process pid (0 when gone). */
static char proc_state(int pid, int *ppid)
{
  char  path[64], line[512], *p, state;
  FILE *f;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  if (!(f = fopen(path, "r"))) return 0;
  p = fgets(line, sizeof line, f);
  fclose(f);
  if (!p || !(p = strrchr(line, ')')) || sscanf(p + 1, " %c %d", &state, ppid) != 2) return 0;
  return state;
}

/* Children of this process; *zombies: how many of them are zombies. */
static int count_children(int *zombies)
{
  DIR           *d = opendir("/proc");
  struct dirent *e;
  int            count = 0, ppid;
  char           st;
  *zombies = 0;
  while (d && (e = readdir(d)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && (st = proc_state(atoi(e->d_name), &ppid)) && ppid == (int)getpid())
      count++, *zombies += st == 'Z';
  if (d) closedir(d);
  return count;
}

/* The environments' processes (each wrote pid.PID into dir) still running,
 * waiting up to 2 s for killed ones to go; the files are removed. */
static int envs_alive(void)
{
  DIR           *d;
  struct dirent *e;
  int            pids[256], n = 0, alive = 0, ppid;
  char           path[PETSC_MAX_PATH_LEN + 300];
  if (!(d = opendir(dir))) return -1;
  while ((e = readdir(d)) && n < 256)
    if (!strncmp(e->d_name, "pid.", 4)) {
      pids[n++] = atoi(e->d_name + 4);
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      remove(path);
    }
  closedir(d);
  for (double end = now() + 2;; nanosleep(&(struct timespec){0, 20000000}, NULL)) {
    alive = 0;
    for (int i = 0; i < n; i++) {
      char st = proc_state(pids[i], &ppid);
      alive += st && st != 'Z';
    }
    if (!alive || now() > end) break;
  }
  return alive;
}

/* No process of the environment left, no child or zombie of ours. */
static void check_nothing_left(const char *name, const char *when)
{
  char what[320];
  int  z, c = count_children(&z), alive = envs_alive();
  snprintf(what, sizeof what, "%s: nothing left %s", name, when);
  test_report(alive == 0 && c <= children0 && z == 0, what, "%d environment processes alive, %d children (%d at start), %d zombies", alive, c, children0, z);
}

/* ---- the requests and the answers expected ------------------------------ */

static int sample_of(int i, int e) { return 100 * (e + 1) + i; }

static int prompt_ids(int s, int *ids)
{
  for (int j = 0; j < 3; j++) ids[j] = (s * 3 + j) % V;
  return 3;
}

static int segment_ids(int s, int t, int *ids)
{
  int n = 1 + (s + t) % 4;
  for (int j = 0; j < n; j++) ids[j] = (s * 7 + t * 11 + j * 13) % V;
  return n;
}

typedef struct {
  int       ids[8], n, has_text;
  char      text[128];
  double    reward;
  PetscBool done;
} Got;

static void got_from(Got *g, const EnvAnswer *a)
{
  memset(g, 0, sizeof *g);
  g->n = a->n < 8 ? a->n : 8;
  for (int q = 0; q < g->n; q++) g->ids[q] = a->ids[q];
  if (a->n > 8) g->n = a->n; /* too many: never equal to what is expected */
  if ((g->has_text = a->text != NULL)) snprintf(g->text, sizeof g->text, "%s", a->text);
  g->reward = a->reward, g->done = a->done;
}

static int got_equal(const Got *a, const Got *b)
{
  if (a->n != b->n || a->has_text != b->has_text || a->reward != b->reward || a->done != b->done) return 0;
  for (int q = 0; q < a->n && q < 8; q++)
    if (a->ids[q] != b->ids[q]) return 0;
  return !a->has_text || !strcmp(a->text, b->text);
}

/* What env.py answers to sample s, turn t. */
static void expected(int s, int t, Got *g)
{
  int pid[8], seg[8], np = prompt_ids(s, pid), ns = segment_ids(s, t, seg), p = 0, q = 0;
  memset(g, 0, sizeof *g);
  if (t == 0) return;
  for (int j = 0; j < np; j++) p += pid[j];
  for (int j = 0; j < ns; j++) q += seg[j];
  g->n = 1 + (s + t) % 3;
  for (int i = 0; i < g->n; i++) g->ids[i] = (p % V + s * 3 + t * 5 + i + q) % V;
  g->has_text = 1;
  if (s % 2) snprintf(g->text, sizeof g->text, "seg %d.%d|ans %d|{\"m\": %d}|%d", s, t, s, s, t);
  else snprintf(g->text, sizeof g->text, "seg %d.%d|ans %d|None|%d", s, t, s, t);
  g->reward = 0.5 * t, g->done = t == TURNS - 1 ? PETSC_TRUE : PETSC_FALSE;
}

/* The request of sample s, turn t on index i; the arrays are the caller's
 * scratch, overwritten by the next request (the Env must copy). */
static EnvRequest request(int i, int s, int t, int *ids, char *text, size_t tcap, char *answer, char *meta)
{
  EnvRequest r = {.index = i, .sample = s, .seed = 42, .iteration = 3, .turn = t, .ids = ids};
  if (t == 0) {
    r.n = prompt_ids(s, ids);
    snprintf(text, tcap, "prompt %d", s);
    snprintf(answer, 32, "ans %d", s);
    snprintf(meta, 32, "{\"m\": %d}", s);
    r.answer = answer, r.meta = s % 2 ? meta : NULL;
  } else {
    r.n = segment_ids(s, t, ids);
    snprintf(text, tcap, "seg %d.%d", s, t);
  }
  r.text = text;
  return r;
}

/* ---- episodes ------------------------------------------------------------ */

static Got got[3][NIDX][EPIS * TURNS]; /* each run's answers */

/* The environment's Python: observation ids from the sample, the turn and
 * the ids of the prompt and the segment; the state counts the steps (a
 * mismatch is answered with an error); with "slow", random sleeps; each
 * process logs the requests it served to served.PID. */
static const char *env_py = "import json, os, random, sys, time\n"
                            "V, d = 50, os.environ['ENV_DIR']\n"
                            "slow = len(sys.argv) > 1 and sys.argv[1] == 'slow'\n"
                            "open(os.path.join(d, 'pid.%d' % os.getpid()), 'w').close()\n"
                            "log = open(os.path.join(d, 'served.%d' % os.getpid()), 'w')\n"
                            "for line in sys.stdin:\n"
                            "    r = json.loads(line)\n"
                            "    if slow: time.sleep(random.random() * 0.03)\n"
                            "    log.write('%d %d\\n' % (r['sample'], r['turn'])); log.flush()\n"
                            "    if r['op'] == 'reset':\n"
                            "        if r['key'] != [42, 3, r['sample']] or r['prompt'] != 'prompt %d' % r['sample']:\n"
                            "            print(json.dumps({'error': 'bad reset %s' % line.strip()}), flush=True); continue\n"
                            "        st = {'sample': r['sample'], 'steps': 0, 'p': sum(r['ids']) % V, 'answer': r['answer'], 'meta': r['meta']}\n"
                            "        print(json.dumps({'state': json.dumps(st)}), flush=True)\n"
                            "        continue\n"
                            "    st = json.loads(r['state'])\n"
                            "    st['steps'] += 1\n"
                            "    if st['sample'] != r['sample'] or st['steps'] != r['turn']:\n"
                            "        print(json.dumps({'error': 'state %s for sample %d turn %d' % (r['state'], r['sample'], r['turn'])}), flush=True); continue\n"
                            "    s, t, q = r['sample'], r['turn'], sum(r['ids'])\n"
                            "    ids = [(st['p'] + s * 3 + t * 5 + i + q) % V for i in range(1 + (s + t) % 3)]\n"
                            "    text = '%s|%s|%s|%d' % (r['text'], st['answer'], st['meta'], st['steps'])\n"
                            "    print(json.dumps({'ids': ids, 'text': text, 'reward': 0.5 * t, 'done': t == 3, 'state': json.dumps(st)}), flush=True)\n";

/* Runs every index's episodes, each collected answer's next request
 * submitted at once (so indices are at different turns together), the
 * outstanding ones collected in submission order (shuffle 0) or shuffled.
 * Answers go to got[run]; *wrong counts those unlike the expected ones,
 * *stale the earlier answers that changed before their index's next
 * collect. */
static PetscErrorCode episodes(Env *env, int run, unsigned shuffle, int *wrong, int *stale, char *detail, size_t dcap)
{
  int       e[NIDX] = {0}, t[NIDX] = {0}, queue[NIDX], nq = NIDX, ids[16];
  char      text[64], answer[32], meta[32];
  EnvAnswer last[NIDX];
  Got       last_copy[NIDX], now_got, want;
  unsigned  x = shuffle;

  PetscFunctionBegin;
  *wrong = *stale = 0;
  for (int i = 0; i < NIDX; i++) {
    EnvRequest r = request(i, sample_of(i, 0), 0, ids, text, sizeof text, answer, meta);
    PetscCall(env->ops->submit(env, &r));
    queue[i] = i;
  }
  while (nq) {
    int order[NIDX], n = nq, next = 0;
    memcpy(order, queue, (size_t)n * sizeof *order);
    for (int k = n - 1; k > 0 && shuffle; k--) { /* Fisher-Yates with a small LCG */
      int j, tmp;
      x = x * 1103515245u + 12345u, j = (int)((x >> 8) % (unsigned)(k + 1));
      tmp = order[k], order[k] = order[j], order[j] = tmp;
    }
    nq = 0;
    for (int k = 0; k < n; k++) {
      int       i = order[k], s = sample_of(i, e[i]);
      EnvAnswer a;
      if (e[i] || t[i]) { /* the previous answer still as it was */
        got_from(&now_got, &last[i]);
        if (!got_equal(&now_got, &last_copy[i])) ++*stale;
      }
      PetscCall(env->ops->collect(env, i, &a));
      got_from(&got[run][i][e[i] * TURNS + t[i]], &a);
      expected(s, t[i], &want);
      if (!got_equal(&got[run][i][e[i] * TURNS + t[i]], &want) || !(a.seconds > 0 && a.seconds < 10)) {
        if (!*wrong)
          snprintf(detail, dcap, "sample %d turn %d: got %d ids, text \"%s\", reward %g, done %d, %.3f s; want %d ids, text \"%s\"", s,
                   t[i], a.n, a.text ? a.text : "(null)", a.reward, (int)a.done, a.seconds, want.n, want.text);
        ++*wrong;
      }
      last[i] = a, last_copy[i] = got[run][i][e[i] * TURNS + t[i]];
      if (++t[i] == TURNS) t[i] = 0, e[i]++;
      if (e[i] < EPIS) {
        EnvRequest r = request(i, sample_of(i, e[i]), t[i], ids, text, sizeof text, answer, meta);
        PetscCall(env->ops->submit(env, &r));
        queue[next++] = i;
      }
    }
    nq = next;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* served.* (what each process served): how many processes served, and how
 * many episodes had their steps served by more than one; removes them. */
static void served(int *nproc, int *spread)
{
  DIR           *d = opendir(dir);
  struct dirent *e;
  int            by[EPIS * 100 + NIDX + 100][TURNS], k = 0, s, t;
  char           path[PETSC_MAX_PATH_LEN + 300];
  memset(by, 0, sizeof by);
  *nproc = *spread = 0;
  while (d && (e = readdir(d))) {
    FILE *f;
    if (strncmp(e->d_name, "served.", 7)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if ((f = fopen(path, "r"))) {
      int any = 0;
      k++;
      while (fscanf(f, "%d %d", &s, &t) == 2)
        if (s >= 0 && s < EPIS * 100 + NIDX + 100 && t >= 0 && t < TURNS) by[s][t] = k, any = 1;
      fclose(f);
      *nproc += any;
    }
    remove(path);
  }
  if (d) closedir(d);
  for (s = 0; s < EPIS * 100 + NIDX + 100; s++)
    if (by[s][1] && (by[s][1] != by[s][2] || by[s][2] != by[s][3])) ++*spread;
}

static PetscErrorCode test_episodes(void)
{
  const char *names[3] = {"1 process, collected in submission order", "4 processes, collected in a shuffled order",
                          "3 processes with random sleeps, collected in another shuffled order"};
  const int   procs[3] = {1, 4, 3};
  unsigned    shuffles[3] = {0, 7, 12345};
  char        cmd[PETSC_MAX_PATH_LEN + 64], name[200], detail[512];
  int         same = 1;

  PetscFunctionBegin;
  if (!py) {
    for (int run = 0; run < 3; run++) test_skip(names[run], "no Python ($PYTHON or /usr/bin/python3)");
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  write_script("env.py", env_py);
  for (int run = 0; run < 3; run++) {
    Env           *env;
    PetscErrorCode ierr;
    int            wrong = 0, stale = 0, nproc, spread;
    double         t0 = now();
    char          *msg = NULL;

    detail[0] = '\0';
    snprintf(cmd, sizeof cmd, "%s \"$ENV_DIR/env.py\"%s", py, run == 2 ? " slow" : "");
    PetscCall(env_command_create(cmd, procs[run], 30, V, NIDX, &env));
    TEST_TRY(ierr, episodes(env, run, shuffles[run], &wrong, &stale, detail, sizeof detail));
    if (ierr) PetscErrorMessage(ierr, NULL, &msg);
    snprintf(name, sizeof name, "episodes on %s: every answer as expected (ids from the request, state round trip)", names[run]);
    test_report(!ierr && !wrong, name, "%s%d of %d wrong: %s", ierr ? msg : "", wrong, NIDX * EPIS * TURNS, detail);
    snprintf(name, sizeof name, "episodes on %s: answers stay valid until their index's next collect", names[run]);
    test_report(!ierr && !stale, name, "%d changed", stale);
    PetscCall(env_destroy(&env));
    printf("#   %s: %.2f s\n", names[run], now() - t0);
    served(&nproc, &spread);
    if (run > 0) { /* which steps share a process depends on timing: only that several served is checked */
      snprintf(name, sizeof name, "episodes on %s: several processes served", names[run]);
      test_measure(nproc > 1, name, "%d processes served, %d of %d episodes had steps on different ones", nproc, spread,
                   NIDX * EPIS);
    }
    check_nothing_left(names[run], "after destroy");
  }
  for (int i = 0; i < NIDX; i++)
    for (int k = 0; k < EPIS * TURNS; k++) same = same && got_equal(&got[0][i][k], &got[1][i][k]) && got_equal(&got[0][i][k], &got[2][i][k]);
  test_report(same, "the three runs' answers identical (order of collects, processes and latency do not matter)", NULL);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the request lines byte for byte ------------------------------------ */

static void read_file(const char *name, char *buf, size_t cap)
{
  char   path[PETSC_MAX_PATH_LEN + 64];
  FILE  *f;
  size_t n = 0;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if ((f = fopen(path, "rb"))) n = fread(buf, 1, cap - 1, f), fclose(f);
  buf[n] = '\0';
}

static PetscErrorCode test_lines(void)
{
  Env           *env;
  EnvAnswer      a;
  PetscErrorCode ierr = 0;
  const int      ids[2] = {1, 2};
  EnvRequest     r[4] = {
    {.index = 1, .sample = 7, .seed = 1234567890123ULL, .iteration = 3, .turn = 0, .ids = ids, .n = 2, .text = "q\"\xff", .meta = "{\"m\": 1}"},
    {.index = 1, .sample = 7, .seed = 1234567890123ULL, .iteration = 3, .turn = 1},
    {.index = 1, .sample = 8, .seed = 5, .iteration = 4, .turn = 0, .answer = "42"},
    {.index = 1, .sample = 8, .seed = 5, .iteration = 4, .turn = 1, .ids = ids, .n = 1, .text = "x\ny"},
  };
  const char *want[4] = {
    "{\"op\": \"reset\", \"sample\": 7, \"key\": [1234567890123, 3, 7], \"turn\": 0, \"prompt\": \"q\\\"\xef\xbf\xbd\", \"ids\": [1, 2], "
    "\"answer\": null, \"meta\": \"{\\\"m\\\": 1}\"}\n",
    "{\"op\": \"step\", \"sample\": 7, \"key\": [1234567890123, 3, 7], \"turn\": 1, \"text\": null, \"ids\": [], \"state\": \"a\\\"b\"}\n",
    "{\"op\": \"reset\", \"sample\": 8, \"key\": [5, 4, 8], \"turn\": 0, \"prompt\": null, \"ids\": [], \"answer\": \"42\", \"meta\": null}\n",
    "{\"op\": \"step\", \"sample\": 8, \"key\": [5, 4, 8], \"turn\": 1, \"text\": \"x\\ny\", \"ids\": [1], \"state\": null}\n",
  };
  char got_line[512], name[64];

  PetscFunctionBegin;
  /* answers: a state with a quote; an observation; a reset without state (the old one is dropped); an observation */
  write_script("lines.sh", "for k in 0 1 2 3; do\n"
                           "  IFS= read -r l || exit 0; printf '%s\\n' \"$l\" > \"$ENV_DIR/req.$k\"\n"
                           "  case $k in 0) echo '{\"state\": \"a\\\"b\"}';; 2) echo '{}';; *) echo '{\"ids\": [3], \"text\": null, \"reward\": 2, \"done\": true}';; esac\n"
                           "done\n");
  PetscCall(env_command_create("sh \"$ENV_DIR/lines.sh\"", 1, 10, V, 2, &env));
  for (int k = 0; k < 4 && !ierr; k++) {
    TEST_TRY(ierr, env->ops->submit(env, &r[k]));
    if (!ierr) TEST_TRY(ierr, env->ops->collect(env, 1, &a));
  }
  test_report(!ierr && a.n == 1 && a.ids[0] == 3 && !a.text && a.reward == 2 && a.done, "a step's answer: ids, null text, an integer reward, done", NULL);
  for (int k = 0; k < 4; k++) {
    snprintf(name, sizeof name, "req.%d", k);
    read_file(name, got_line, sizeof got_line);
    snprintf(name, sizeof name, "request line %d byte for byte", k + 1);
    test_report(!strcmp(got_line, want[k]), name, "got %s", got_line);
  }
  PetscCall(env_destroy(&env));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- failures -------------------------------------------------------------- */

/* The failing scripts: the reset answered, then BAD at the first step; the
 * process writes its pid first. */
static void write_failing(const char *name, const char *bad)
{
  char text[1024];
  snprintf(text, sizeof text,
           "echo $$ > \"$ENV_DIR/pid.$$\"\n"
           "IFS= read -r l || exit 0\n"
           "echo '{\"state\": \"s\"}'\n"
           "IFS= read -r l || exit 0\n"
           "%s\n"
           "exec cat > /dev/null\n",
           bad);
  write_script(name, text);
}

/* Sample 7 on index 0 of an environment of `procs` processes of cmd: its
 * reset, then steps up to turn fail_turn, where it must fail with one line
 * 'environment "CMD": sample 7, turn T: ' containing want[]; after it, and
 * after destroy, nothing may be left, and the environment refuses more. */
static PetscErrorCode expect_failure(const char *name, const char *cmd, int procs, double timeout, int fail_turn, const char *const *want, double *took)
{
  Env           *env;
  EnvAnswer      a;
  PetscErrorCode ierr = 0;
  int            turn, ids[16];
  char           text[64], answer[32], meta[32], prefix[300], *msg = NULL, copy[TEST_MESSAGE_MAX], what[320];
  double         t0 = 0;
  PetscBool      ok;

  PetscFunctionBegin;
  PetscCall(env_command_create(cmd, procs, timeout, V, 4, &env));
  for (turn = 0; turn <= fail_turn && !ierr; turn++) {
    EnvRequest r = request(0, 7, turn, ids, text, sizeof text, answer, meta);
    t0           = now();
    TEST_TRY(ierr, env->ops->submit(env, &r));
    if (!ierr) TEST_TRY(ierr, env->ops->collect(env, 0, &a));
  }
  if (took) *took = now() - t0;
  turn--;
  if (strlen(cmd) <= 60) snprintf(prefix, sizeof prefix, "environment \"%s\": sample 7, turn %d: ", cmd, fail_turn);
  else snprintf(prefix, sizeof prefix, "environment \"%.50s", cmd);
  if (ierr) PetscErrorMessage(ierr, NULL, &msg);
  snprintf(copy, sizeof copy, "%s", msg ? msg : "");
  ok = (PetscBool)(ierr && turn == fail_turn && !strncmp(copy, prefix, strlen(prefix)) && !strchr(copy, '\n'));
  if (strlen(cmd) > 60) ok = (PetscBool)(ok && strstr(copy, "...\": sample 7, turn "));
  for (const char *const *w = want; *w && ok; w++) ok = (PetscBool)(strstr(copy, *w) != NULL);
  test_report(ok, name, "%s at turn %d: %s", ierr ? "failed" : "did not fail", turn, copy);
  printf("#   %s\n", copy);
  check_nothing_left(name, "after the failure");
  { /* refused from now on (another index: that one is free) */
    EnvRequest r = request(1, 9, 0, ids, text, sizeof text, answer, meta);
    TEST_TRY(ierr, env->ops->submit(env, &r));
    msg = NULL;
    if (ierr) PetscErrorMessage(ierr, NULL, &msg);
    snprintf(what, sizeof what, "%s: the environment refused afterwards", name);
    test_report((PetscBool)(ierr && msg && strstr(msg, "sample 9, turn 0: not used again after an earlier error")), what, "%s", msg ? msg : "no error");
  }
  PetscCall(env_destroy(&env));
  check_nothing_left(name, "after destroy");
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode test_failures(void)
{
  char   cmd[300], secs[32], bad[160];
  double t;

  PetscFunctionBegin;
  PetscCall(expect_failure("not started: a program not in PATH, said at the first request", "rlfuse_no_such_env_q7 --x", 2, 10, 0,
                           (const char *const[]){"program \"rlfuse_no_such_env_q7\" not found in PATH", NULL}, NULL));
  write_failing("exit.sh", "exit 3");
  PetscCall(expect_failure("exits mid-run: its exit status", "sh \"$ENV_DIR/exit.sh\"", 2, 10, 1,
                           (const char *const[]){"process 1 of 2 exited with status 3 before answering", NULL}, NULL));
  write_failing("crash.sh", "kill -SEGV $$");
  PetscCall(expect_failure("crashes: the signal", "exec sh \"$ENV_DIR/crash.sh\"", 2, 10, 1,
                           (const char *const[]){"process 1 of 2 was killed by signal 11", "before answering", NULL}, NULL));
  snprintf(secs, sizeof secs, "31.%d", (int)getpid()); /* a sleep no other process runs */
  snprintf(bad, sizeof bad, "sleep %s & echo $! > \"$ENV_DIR/pid.$!\"; wait", secs);
  write_failing("hang.sh", bad);
  PetscCall(expect_failure("times out: the time limit (1 s)", "sh \"$ENV_DIR/hang.sh\"", 2, 1, 1,
                           (const char *const[]){"process 1 of 2 did not answer within 1 s; killed it", NULL}, &t));
  test_report(t >= 0.9 && t < 4.5, "times out: back within the limit, not the hang (31 s)", "took %.2f s", t);

  write_failing("hello.sh", "echo hello");
  PetscCall(expect_failure("not JSON: hello", "sh \"$ENV_DIR/hello.sh\"", 2, 10, 1, (const char *const[]){"answered \"hello\", not one JSON object", NULL}, NULL));
  write_failing("two.sh", "echo '{} {}'");
  PetscCall(expect_failure("not one JSON object: two objects on a line", "sh \"$ENV_DIR/two.sh\"", 1, 10, 1,
                           (const char *const[]){"answered \"{} {}\", not one JSON object", NULL}, NULL));
  write_failing("array.sh", "echo '[1, 2]'");
  PetscCall(expect_failure("not one JSON object: an array", "sh \"$ENV_DIR/array.sh\"", 1, 10, 1, (const char *const[]){"answered \"[1, 2]\", not one JSON object", NULL}, NULL));
  write_failing("real.sh", "echo '{\"ids\": [1, 2.5]}'");
  PetscCall(expect_failure("ids not integers: 2.5", "sh \"$ENV_DIR/real.sh\"", 2, 10, 1, (const char *const[]){"\"ids\"[1] is 2.5, not an integer", NULL}, NULL));
  write_failing("str.sh", "echo '{\"ids\": [\"a\"]}'");
  PetscCall(expect_failure("ids not integers: a string", "sh \"$ENV_DIR/str.sh\"", 1, 10, 1, (const char *const[]){"\"ids\"[0] is \"a\", not an integer", NULL}, NULL));
  write_failing("vocab.sh", "echo '{\"ids\": [3, 50]}'");
  PetscCall(expect_failure("ids outside the vocabulary: 50 of 50", "sh \"$ENV_DIR/vocab.sh\"", 2, 10, 1,
                           (const char *const[]){"\"ids\"[1] = 50 is outside the vocabulary [0, 50)", NULL}, NULL));
  write_failing("neg.sh", "echo '{\"ids\": [-1]}'");
  PetscCall(expect_failure("ids outside the vocabulary: -1", "sh \"$ENV_DIR/neg.sh\"", 1, 10, 1,
                           (const char *const[]){"\"ids\"[0] = -1 is outside the vocabulary [0, 50)", NULL}, NULL));
  write_failing("noids.sh", "echo '{\"text\": \"t\"}'");
  PetscCall(expect_failure("a step's answer without ids", "sh \"$ENV_DIR/noids.sh\"", 1, 10, 1, (const char *const[]){"without \"ids\"", NULL}, NULL));
  PetscCall(expect_failure("a reset's answer with ids", "IFS= read -r l; echo '{\"ids\": [1]}'; exec cat > /dev/null", 1, 10, 0,
                           (const char *const[]){"a reset's answer has no \"ids\"", NULL}, NULL));
  write_failing("error.sh", "echo '{\"error\": \"no tool named \\\"calc2\\\"\"}'");
  snprintf(cmd, sizeof cmd, "sh \"$ENV_DIR/error.sh\" # %0100d", 0);
  PetscCall(expect_failure("an \"error\" answer, shown; a long command shortened", cmd, 2, 10, 1,
                           (const char *const[]){"the environment's error: no tool named \"calc2\"", NULL}, NULL));
  write_failing("long.sh", "head -c 5000000 /dev/zero | tr '\\0' x");
  PetscCall(expect_failure("a line over the size limit", "sh \"$ENV_DIR/long.sh\"", 2, 10, 1,
                           (const char *const[]){"process 1 printed a line longer than 4194304 bytes", NULL}, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Destroy of processes that ignore the end of their input: 5 s in all
 * (not per process), then killed with their children. */
static PetscErrorCode test_destroy_kills(void)
{
  Env           *env;
  EnvAnswer      a;
  PetscErrorCode ierr = 0;
  int            ids[16];
  char           text[64], answer[32], meta[32], cmd[200], secs[32];
  double         t0;

  PetscFunctionBegin;
  snprintf(secs, sizeof secs, "33.%d", (int)getpid());
  snprintf(cmd, sizeof cmd, "echo $$ > \"$ENV_DIR/pid.$$\"; IFS= read -r l; echo '{}'; sleep %s & echo $! > \"$ENV_DIR/pid.$!\"; wait", secs);
  PetscCall(env_command_create(cmd, 3, 10, V, 4, &env));
  for (int i = 0; i < 3 && !ierr; i++) {
    EnvRequest r = request(i, 7 + i, 0, ids, text, sizeof text, answer, meta);
    TEST_TRY(ierr, env->ops->submit(env, &r));
  }
  for (int i = 0; i < 3 && !ierr; i++) TEST_TRY(ierr, env->ops->collect(env, i, &a));
  test_report(!ierr, "3 processes that ignore the end of their input: their resets answered", NULL);
  t0 = now();
  PetscCall(env_destroy(&env));
  t0 = now() - t0;
  test_report(t0 > 4.5 && t0 < 9, "destroy: waits 5 s in all for them, then kills them", "took %.2f s", t0);
  check_nothing_left("destroy of processes that ignore the end of their input", "(their sleeps included)");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* An answer larger than a pipe holds (about 180 kB) to a step collected
 * after its time limit has passed (the caller was busy): it came at once,
 * so it is taken, not called late. */
static PetscErrorCode test_late_collect(void)
{
  Env           *env;
  EnvAnswer      a = {0};
  PetscErrorCode ierr = 0;
  int            ids[16], ok;
  char           text[64], answer[32], meta[32];

  PetscFunctionBegin;
  write_script("big.sh", "IFS= read -r l; echo '{}'\n"
                         "while IFS= read -r l; do\n"
                         "  awk 'BEGIN { printf \"{\\\"ids\\\": [\"; for (i = 0; i < 60000; i++) printf \"%s%d\", i ? \", \" : \"\", i % 50; print \"]}\" }'\n"
                         "done\n");
  PetscCall(env_command_create("sh \"$ENV_DIR/big.sh\"", 1, 1, V, 1, &env));
  for (int t = 0; t < 2 && !ierr; t++) {
    EnvRequest r = request(0, 7, t, ids, text, sizeof text, answer, meta);
    TEST_TRY(ierr, env->ops->submit(env, &r));
    if (t == 1) nanosleep(&(struct timespec){1, 500000000}, NULL); /* busy for 1.5 s: past the 1 s limit */
    if (!ierr) TEST_TRY(ierr, env->ops->collect(env, 0, &a));
  }
  ok = !ierr && a.n == 60000;
  for (int q = 0; q < a.n && ok; q++) ok = a.ids[q] == q % 50;
  test_report(ok, "a 180 kB answer collected after the time limit (the caller busy): taken, not late", "%d ids", ierr ? -1 : a.n);
  PetscCall(env_destroy(&env));
  check_nothing_left("late collect", "after destroy");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Two requests on two processes: sample 8's process crashes while we wait
 * for sample 7's answer: the failure names sample 8. */
static PetscErrorCode test_other_fails(void)
{
  Env           *env;
  EnvAnswer      a;
  PetscErrorCode ierr = 0;
  int            ids[16];
  char           text[64], answer[32], meta[32], *msg = NULL;

  PetscFunctionBegin;
  write_script("other.sh", "echo $$ > \"$ENV_DIR/pid.$$\"\n"
                           "while IFS= read -r l; do\n"
                           "  case $l in *'\"sample\": 8,'*) kill -SEGV $$;; esac\n"
                           "  sleep 0.5; echo '{}'\n"
                           "done\n");
  PetscCall(env_command_create("exec sh \"$ENV_DIR/other.sh\"", 2, 10, V, 2, &env));
  for (int i = 0; i < 2 && !ierr; i++) {
    EnvRequest r = request(i, 7 + i, 0, ids, text, sizeof text, answer, meta);
    TEST_TRY(ierr, env->ops->submit(env, &r));
  }
  if (!ierr) TEST_TRY(ierr, env->ops->collect(env, 0, &a));
  if (ierr) PetscErrorMessage(ierr, NULL, &msg);
  test_report((PetscBool)(ierr && msg && strstr(msg, "\": sample 8, turn 0: process 2 of 2 was killed by signal 11")),
              "another request's failure while collecting one: that one's sample named", "%s", msg ? msg : "no error");
  printf("#   %s\n", msg ? msg : "");
  check_nothing_left("another request's failure", "after the failure");
  PetscCall(env_destroy(&env));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A process that ends while idle, found when it is handed the next
 * request; a process that prints a line nobody asked for. */
static PetscErrorCode test_idle_failures(void)
{
  Env           *env;
  EnvAnswer      a;
  PetscErrorCode ierr = 0;
  int            ids[16];
  char           text[64], answer[32], meta[32], *msg = NULL;

  PetscFunctionBegin;
  /* process 1 answers sample 7's reset once both requests are handed out (file go: else it could answer first and
   * take sample 8 too) and exits; process 2 answers sample 8's after 0.5 s */
  write_script("idle.sh", "IFS= read -r l\n"
                          "case $l in *'\"sample\": 8,'*) sleep 0.5; echo '{}'; exec cat > /dev/null;; esac\n"
                          "while [ ! -e \"$ENV_DIR/go\" ]; do sleep 0.01; done\n"
                          "echo '{}'; exit 0\n");
  PetscCall(env_command_create("sh \"$ENV_DIR/idle.sh\"", 2, 10, V, 2, &env));
  for (int i = 0; i < 2 && !ierr; i++) {
    EnvRequest r = request(i, 7 + i, 0, ids, text, sizeof text, answer, meta);
    TEST_TRY(ierr, env->ops->submit(env, &r));
  }
  write_script("go", "");
  if (!ierr) TEST_TRY(ierr, env->ops->collect(env, 1, &a));
  if (!ierr) TEST_TRY(ierr, env->ops->collect(env, 0, &a));
  nanosleep(&(struct timespec){0, 300000000}, NULL); /* its end has surely come */
  if (!ierr) {
    EnvRequest r = request(0, 7, 1, ids, text, sizeof text, answer, meta);
    TEST_TRY(ierr, env->ops->submit(env, &r));
  }
  if (ierr) PetscErrorMessage(ierr, NULL, &msg);
  test_report((PetscBool)(ierr && msg && strstr(msg, "\": sample 7, turn 1: process 1 of 2 exited with status 0 after its answer to sample 7, turn 0")),
              "a process that exited while idle: said when it is handed the next request", "%s", msg ? msg : "no error");
  printf("#   %s\n", msg ? msg : "");
  PetscCall(env_destroy(&env));
  check_nothing_left("a process that exited while idle", "after destroy");

  /* the extra line in the same write as the answer: the collect fails; a
   * tenth of a second later: the next request's hand-over does */
  for (int late = 0; late < 2; late++) {
    const char *cmds[2] = { "IFS= read -r l; printf '{}\\n{\"x\": 1}\\n'; exec cat > /dev/null",
                            "IFS= read -r l; echo '{}'; sleep 0.1; echo '{\"x\": 1}'; exec cat > /dev/null" };
    const char *names[2] = { "a line nobody asked for, with the answer: the collect fails, the request answered named",
                             "a line nobody asked for, after the answer: found before the next request is handed over" };
    EnvRequest  r        = request(0, 7, 0, ids, text, sizeof text, answer, meta);
    int         at       = -1;
    PetscCall(env_command_create(cmds[late], 1, 10, V, 1, &env));
    TEST_TRY(ierr, env->ops->submit(env, &r));
    if (!ierr) TEST_TRY(ierr, env->ops->collect(env, 0, &a));
    if (ierr) at = 0;
    nanosleep(&(struct timespec){0, 300000000}, NULL);
    r = request(0, 7, 1, ids, text, sizeof text, answer, meta);
    if (!ierr) TEST_TRY(ierr, env->ops->submit(env, &r));
    if (ierr && at < 0) at = 1;
    msg = NULL;
    if (ierr) PetscErrorMessage(ierr, NULL, &msg);
    test_report((PetscBool)(at == (late ? 1 : 0) && msg && strstr(msg, "\": sample 7, turn 0: process 1 printed \"{\"x\": 1}\" after its answer")),
                names[late], "at call %d: %s", at, msg ? msg : "no error");
    printf("#   %s\n", msg ? msg : "");
    PetscCall(env_destroy(&env));
    check_nothing_left(names[late], "after destroy");
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  if (PetscInitialize(&argc, &argv, NULL, "Tests of environment programs (src/env/command.c).\n")) return 1;
  py = getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3";
  if (access(py, X_OK)) py = NULL;
  {
    int z;
    children0 = count_children(&z);
  }
  if (test_tmpdir(dir, sizeof dir, "env") || setenv("ENV_DIR", dir, 1)) return 1;
  if (test_episodes() || test_lines() || test_late_collect() || test_other_fails() || test_idle_failures() || test_failures() || test_destroy_kills()) return 1;
  PetscFinalize();
  return test_tally();
}
