/* sys: start-up, error reporting, options helpers that record every value,
 * the counter-based RNG (Philox4x32-10), helper programs as child
 * processes, timers and the run context. */
#ifndef RLFUSE_SYS_H
#define RLFUSE_SYS_H

#include <petscsys.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#if PETSC_VERSION_LT(3, 19, 0)
  #define PETSC_SUCCESS ((PetscErrorCode)0)
#endif

#define RLFUSE_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------ */
/* Wrap an HDF5 call whose failure is a negative return value. */
#define H5Call(expr, ...)                                                              \
  do {                                                                                 \
    if ((expr) < 0) SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, __VA_ARGS__); \
  } while (0)

/* Installs the error handler that prints one line per error:
 *   rlfuse: error: <message> [rank r, file:line]
 * Collective errors (raised on PETSC_COMM_WORLD) are printed by rank 0 only. */
PetscErrorCode sys_error_handler_install(void);
/* SIGINT and SIGTERM only noted (src/sys/stop.c): sys_stop_signal gives the
 * signal this process got (0: none), sys_stop_agreed the largest over comm
 * (collective); a stage that sees one checkpoints and stops. */
void           sys_stop_install(void);
int            sys_stop_signal(void);
PetscErrorCode sys_stop_agreed(MPI_Comm comm, int *sig);
/* Ends the job after an error: collective errors finalize and exit(1),
 * single-rank errors abort the whole MPI job so no rank hangs. */
void sys_error_exit(PetscErrorCode ierr);
/* Registers fn to run first thing in sys_error_exit (e.g. io closing the
 * files an error left open, before the libraries shut down); at most 4, a
 * function registered twice runs once. fn returns non-zero when something
 * could not be released: the process then exits without library shutdown. */
void sys_error_exit_hook(int (*fn)(void));

/* ---- decks ------------------------------------------------------------- */
/* Before PetscInitialize: checks every -options_file in argv, and the decks
 * they include, with PETSc's rules (a regular text file of at most 1 MiB, no
 * BOM or binary bytes, lines of at most 4096 characters, '-name [value]' or
 * 'alias' lines, no include cycles). Returns non-zero with a one-line message
 * naming the deck and line in msg. With notes (rank 0's stdout), every option
 * set more than once with different values (deck and command line, two
 * decks, twice on one line) gets one line there: the value used, the last,
 * and where each came from. */
int sys_decks_check(int argc, char **argv, char *msg, size_t len, FILE *notes);
/* After PetscInitialize: the last -mode the command line and its decks
 * give other than skip ("" when none), in PETSc's order. -mode plan
 * learns so the job of the deck it plans (`-options_file DECK -mode plan`). */
PetscErrorCode sys_decks_mode_under(const char *skip, char *mode, size_t len);
/* After PetscInitialize: where the option name (one dash, lower case) was
 * last set, "deck PATH line N" or "command line" ("" when nowhere). */
PetscErrorCode sys_decks_where(const char *name, char *where, size_t len);

/* ---- options ----------------------------------------------------------- */
/* Every option a module reads is recorded (full name, effective value, and
 * whether the deck/command line set it) so the run record can store them all.
 * Use inside PetscOptionsBegin()/PetscOptionsEnd(). */
PetscErrorCode sys_param_record(const char *prefix, const char *name, const char *value, PetscBool set);

/* PetscCall inside a PetscOptionsBegin/End block: an error (a bad value)
 * ends the block first, so the block's strings are freed on the way out. */
#define RfOptCall(expr)                                                                        \
  do {                                                                                         \
    PetscErrorCode e_ = (expr);                                                                \
    if (PetscUnlikely(e_)) {                                                                   \
      (void)PetscOptionsEnd_Private(PetscOptionsObject);                                       \
      PetscCall(e_);                                                                           \
    }                                                                                          \
  } while (0)

#define RfOptInt(name, help, def, val)                                                         \
  do {                                                                                         \
    PetscBool set_ = PETSC_FALSE;                                                              \
    PetscInt  v_   = (def);                                                                    \
    char      s_[64];                                                                          \
    RfOptCall(sys_option_check_number(PetscOptionsObject->prefix, name, SYS_OPT_INT, sizeof *(val))); \
    RfOptCall(sys_option_help_number(PetscOptionsObject, name, help, SYS_OPT_INT, (double)v_));  \
    RfOptCall(PetscOptionsInt(name, help, NULL, v_, &v_, &set_));                              \
    *(val) = v_;                                                                               \
    RfOptCall(PetscSNPrintf(s_, sizeof s_, "%" PetscInt_FMT, v_));                             \
    RfOptCall(sys_param_record(PetscOptionsObject->prefix, name, s_, set_));                   \
  } while (0)

#define RfOptReal(name, help, def, val)                                                        \
  do {                                                                                         \
    PetscBool set_ = PETSC_FALSE;                                                              \
    PetscReal v_   = (def);                                                                    \
    char      s_[64];                                                                          \
    RfOptCall(sys_option_check_number(PetscOptionsObject->prefix, name, SYS_OPT_REAL, 0));     \
    RfOptCall(sys_option_help_number(PetscOptionsObject, name, help, SYS_OPT_REAL, (double)v_)); \
    RfOptCall(PetscOptionsReal(name, help, NULL, v_, &v_, &set_));                             \
    *(val) = v_;                                                                               \
    RfOptCall(PetscSNPrintf(s_, sizeof s_, "%.17g", (double)v_));                              \
    RfOptCall(sys_param_record(PetscOptionsObject->prefix, name, s_, set_));                   \
  } while (0)

#define RfOptBool(name, help, def, val)                                                        \
  do {                                                                                         \
    PetscBool set_ = PETSC_FALSE;                                                              \
    PetscBool v_   = (def);                                                                    \
    RfOptCall(sys_option_check_bool(PetscOptionsObject->prefix, name));                        \
    RfOptCall(sys_option_help(PetscOptionsObject, name, help, v_ ? "true" : "false", NULL, 0)); \
    RfOptCall(PetscOptionsBool(name, help, NULL, v_, &v_, &set_));                             \
    *(val) = v_;                                                                               \
    RfOptCall(sys_param_record(PetscOptionsObject->prefix, name, v_ ? "true" : "false", set_)); \
  } while (0)

/* buf holds the default on entry and the effective value on exit. */
#define RfOptString(name, help, buf, len)                                              \
  do {                                                                                 \
    PetscBool set_ = PETSC_FALSE;                                                      \
    RfOptCall(sys_option_check_length(PetscOptionsObject->prefix, name, len));         \
    RfOptCall(sys_option_help(PetscOptionsObject, name, help, buf, NULL, 0));          \
    RfOptCall(PetscOptionsString(name, help, NULL, buf, buf, len, &set_));             \
    RfOptCall(sys_param_record(PetscOptionsObject->prefix, name, buf, set_));          \
  } while (0)

/* buf holds the default on entry; the value must be one of list[0..n).
 * An empty value is refused: PETSc would take it as the default. */
#define RfOptEnum(name, help, list, n, idx)                                                    \
  do {                                                                                         \
    PetscBool set_ = PETSC_FALSE;                                                              \
    PetscInt  i_   = *(idx);                                                                   \
    RfOptCall(sys_option_check_nonempty(PetscOptionsObject->prefix, name, list, n));           \
    RfOptCall(sys_option_help(PetscOptionsObject, name, help, list[i_], list, n));             \
    RfOptCall(PetscOptionsEList(name, help, NULL, list, n, list[i_], &i_, &set_));             \
    *(idx) = i_;                                                                               \
    RfOptCall(sys_param_record(PetscOptionsObject->prefix, name, list[i_], set_));             \
  } while (0)

/* -help: rlfuse prints its options itself (grouped by prefix, each with
 * its default), then PETSc's generic ones, which PETSc would print first.
 * sys_help_capture runs before PetscInitialize and keeps what PETSc prints
 * there; sys_help_begin, once -help is known, starts recording each option's
 * help (the RfOpt macros call sys_option_help) and drops PETSc's own lines
 * for them; sys_help_print prints it all on rank 0. Options read in a
 * PetscOptionsBegin block titled SYS_HELP_DEVELOPER are listed apart, after
 * the others: switches for comparisons the tests make, not for runs. */
#define SYS_HELP_DEVELOPER "Developer options"
void           sys_help_capture(int argc, char **argv);
PetscErrorCode sys_help_begin(void);
PetscErrorCode sys_help_print(MPI_Comm comm);
PetscErrorCode sys_option_help(PetscOptionItems *items, const char *name, const char *help, const char *def,
                               const char *const *list, PetscInt n);

typedef struct {
  char      name[128];  /* full option name without the dash, prefix included */
  char      value[PETSC_MAX_PATH_LEN];
  PetscBool set;        /* given in the deck or on the command line */
} SysParam;

/* Fails, naming the option, if its value in the database is not a number of
 * the kind (PETSc's own message does not name the option): an integer must
 * fit both PetscInt and the bytes-wide signed integer it is stored in (PETSc
 * would wrap 4294967297 to 1), a real must be finite. */
typedef enum { SYS_OPT_INT, SYS_OPT_REAL } SysOptKind;
PetscErrorCode sys_option_check_number(const char *prefix, const char *name, SysOptKind kind, size_t bytes);
/* sys_option_help with a number's default. */
PetscErrorCode sys_option_help_number(PetscOptionItems *items, const char *name, const char *help, SysOptKind kind,
                                      double def);
/* Fails if the option's value does not fit a buffer of len bytes (PETSc
 * would cut it silently: a cut path names another file). */
PetscErrorCode sys_option_check_length(const char *prefix, const char *name, size_t len);
/* Fails if the option is given with an empty value (PETSc would take the
 * default: `-mode ''` ran SFT); the message lists the n choices. */
PetscErrorCode sys_option_check_nonempty(const char *prefix, const char *name, const char *const *list, PetscInt n);

/* Fails, naming the option, if its value is not one PETSc reads as a
 * boolean (PETSc's "Unknown logical value" names no option). */
PetscErrorCode sys_option_check_bool(const char *prefix, const char *name);

/* The recorded options, in the order they were read. */
PetscErrorCode sys_params_get(const SysParam **params, int *n);
/* Fails, naming every option in the database that no module read. */
PetscErrorCode sys_options_check_unused(void);
/* PetscOptionsHasName for an option whose presence changes what the module
 * does (beyond its value): used.deck then gives it only if the run did. */
PetscErrorCode sys_option_given(const char *prefix, const char *name, PetscBool *given);

/* ---- counter-based random numbers -------------------------------------- */
/* Philox4x32-10 (Salmon et al., SC'11). Draws are a pure function of
 * (key, counter): results never depend on rank, slot, thread or order. */
void     philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The stream keyed by (seed, a, b, c): a, b, c are e.g. iteration, sample and
 * position; `lane` picks one of many draws at that key. */
uint32_t rng_u32(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane);
/* Uniform in [0,1) with 24 random bits (exactly representable in float). */
float    rng_uniform(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane);
/* Standard normal by Box-Muller from lanes 2*lane and 2*lane+1. */
float    rng_normal(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t lane);
/* Fisher-Yates permutation of 0..N-1 keyed by (seed, stream, epoch). */
void     rng_shuffle(int *perm, int N, uint64_t seed, uint32_t stream, int64_t epoch);

/* ---- PETSc log stages and events (for -log_view) ---------------------- */
typedef struct {
  PetscLogStage sft, score, rm, ppo;
  PetscLogEvent data, forward, backward, optimizer, ckpt_write, ckpt_read;
  PetscLogEvent generate, inference, advantages; /* PPO: actor_gen, ref/rew/critic inference, rewards+GAE */
} SysLog;
extern SysLog sys_log; /* registered once by sys_log_register, then read-only */
PetscErrorCode sys_log_register(void);

/* ---- OpenBLAS ------------------------------------------------------------ */
/* First thing in main: where OpenBLAS fell back to its generic x86 kernels
 * on a CPU with AVX-512 or AVX2 and OPENBLAS_CORETYPE is unset, sets it and
 * executes the program again (src/sys/blascore.c); otherwise returns. */
void sys_blas_core_select(char **argv);

/* ---- child processes (src/sys/child.c) --------------------------------- */
/* A helper program (the reward command, an environment program) run as
 * /bin/sh -c CMD: started with posix_spawn in a process group of its own
 * (a kill takes everything it started), its standard input and output
 * non-blocking pipes for poll(), its standard error ours. */
typedef struct {
  pid_t  pid;            /* -1: not started */
  int    in, out;        /* our ends of its standard input and output; -1: closed */
  int    reaped, status; /* status -1: reaped by someone else (SIGCHLD ignored) */
  char  *buf;            /* what was read from it and not yet used */
  size_t blen, bcap;
} SysChild;
/* Starts cmd; returns 0, or the errno of a failed start (c is then not
 * started: pid -1, both ends closed). */
int  sys_child_start(SysChild *c, const char *cmd);
/* Whether the program that cmd's first word names is missing: then why is
 * set ('program "PROG" not found ...') and the caller does not start it,
 * because the shell would print its own "not found" line before rlfuse's
 * message. Only a plain first word is checked (after "exec"; an assignment,
 * quoting or expansion is left to the shell); a word without '/' through
 * the shell's own "command -v", so builtins, keywords and PATH are the
 * shell's. */
void sys_child_missing(const char *cmd, char *why, size_t cap);
/* One read of what it printed, appended to c->buf; *eof set at the end of
 * its output. -1 (errno set) when reading fails. */
int  sys_child_read(SysChild *c, int *eof);
void sys_child_close_input(SysChild *c);
/* Collects its exit status if it has ended, waiting up to wait_s. */
void sys_child_reap(SysChild *c, double wait_s);
/* After its output closed: how it ended ("exited with status 3", "was
 * killed by signal 9 (Killed)", ...), waiting up to 1 s for it to exit. */
void sys_child_ended(SysChild *c, char *how, size_t cap);
/* Kills the process groups of those of c[0..n) still running and reaps
 * them, waiting at most 5 s in all (a process stuck in the kernel must not
 * hang the run). */
void sys_children_kill(SysChild *c, int n);
/* Closes their inputs (a helper exits at the end of its input), waits up to
 * 5 s in all while draining what they still print, kills what remains,
 * closes their outputs and frees their buffers. */
void sys_children_stop(SysChild *c, int n);
/* s[0..n) for a one-line message: non-printable bytes as '?', cut to max
 * bytes (at a character boundary) with "...". */
void sys_show(char *dst, size_t cap, const char *s, size_t n, size_t max);
/* A JSON string (jansson's) of arbitrary bytes (NULL: ""): jansson escapes
 * it and checks its UTF-8; text it refuses is repaired first, each maximal
 * invalid sequence becoming U+FFFD, as Python's decode(errors="replace")
 * does. NULL on no memory. */
struct json_t *sys_json_text(const char *text);
/* A monotonic clock in seconds: helpers' deadlines. */
double sys_clock(void);

/* ---- timers and run context -------------------------------------------- */
double sys_wtime(void);

/* ---- the timeline (src/sys/timeline.c) ----------------------------------- */
/* Each rank notes the calls it runs; the run record (record_step, src/io)
 * appends them to /timeline (one row per call: rank, step, call, start, end). */
#define TIMELINE_MAX_NAMES 64
#define TIMELINE_NAME_LEN  48
typedef struct {
  int     n, *rank, *call;     /* call: index into names */
  double *start, *end;         /* seconds since the record was opened */
  char    names[TIMELINE_MAX_NAMES][TIMELINE_NAME_LEN];
  int     nnames;              /* grows; indices stay valid across steps */
} TimelineRows;
/* Sets the zero of time (after a barrier on comm) and clears the buffer;
 * record_open calls it. Collective. */
PetscErrorCode timeline_start(MPI_Comm comm);
/* This rank ran `call` (a name without spaces) from t0 to t1 (sys_wtime). */
PetscErrorCode timeline_mark(const char *call, double t0, double t1);
/* Rank 0 gets every rank's calls since the last gather; clears the buffers.
 * Collective. */
PetscErrorCode timeline_gather(MPI_Comm comm, TimelineRows *rows);
PetscErrorCode timeline_rows_free(TimelineRows *rows);

/* ---- the run context ------------------------------------------------------ */
typedef struct {
  MPI_Comm  comm;
  int       rank, size;
  int       nthreads;
  PetscInt  seed;
  PetscBool dry_run;
  char      output_dir[PETSC_MAX_PATH_LEN];
  const struct Backend *be; /* the job's backend (NULL before -device is set up): what -placement auto profiles */
} RunCtx;

/* Reads -seed, -output_dir, -dry_run and fills rank/size/threads. */
PetscErrorCode sys_run_setup(MPI_Comm comm, RunCtx *run);
/* mkdir -p; errors name the directory. */
PetscErrorCode sys_mkdir_p(const char *dir);
/* snprintf for file names: a name that does not fit is an error, never cut
 * (a cut name is another file). */
PetscErrorCode sys_path_printf(char *path, size_t len, const char *fmt, ...) PETSC_ATTRIBUTE_FORMAT(3, 4);
/* Path of a file inside the output directory. */
PetscErrorCode sys_output_path(const RunCtx *run, const char *name, char *path, size_t len);
/* <run->output_dir>/used.deck: every recorded option with its value, so that
 * `rlfuse -options_file used.deck` repeats the run. sys_used_deck_at chooses
 * the directory (main, for the modes that write one); sys_used_deck_write,
 * called when a run record is opened (the options are checked by then),
 * writes it once per job, rank 0, atomically. */
PetscErrorCode sys_used_deck_at(const RunCtx *run);
PetscErrorCode sys_used_deck_write(void);
/* Bytes of memory this node can still give (MemAvailable, else physical
 * memory): what batch sizes are checked against before allocating. */
double sys_memory_available(void);
/* Human-readable byte count, e.g. "12.3 MiB". */
const char *sys_bytes_str(double bytes, char *buf, size_t len);
/* Human-readable duration, e.g. "42.1 s", "12m05s", "3h07m". */
const char *sys_duration_str(double seconds, char *buf, size_t len);
/* A progress line's clock, "elapsed 12m05s | ETA 3m10s": the wall time since
 * t0 (sys_wtime) over the done steps of this run, and the left ones at the
 * mean step time so far (a restart counts only its own steps). */
const char *sys_progress_str(double t0, long done, long left, char *buf, size_t len);
/* The same with work besides the steps: `apart` seconds of the elapsed
 * time are not the steps' (held-out evaluations), and `more` seconds of it
 * are still to come after the left steps. */
const char *sys_progress_more_str(double t0, long done, long left, double apart, double more, char *buf, size_t len);

/* How a rank waits for MPI (src/sys/mpiwait.c). comm_setup calls
 * sys_mpi_wait_setup on the communicator of its node: when the node's ranks run
 * more OpenMP threads in all than it has cores, a waiting rank yields its
 * core between polls instead of polling without pause (RLFUSE_WAIT_POLICY=
 * yield|poll|auto in the environment overrides it). rlfuse makes every
 * blocking MPI call through the sys_mpi_* forms below (the same arguments
 * as MPI's, an MPI error code returned), which start the nonblocking call
 * and complete it so; they move the same bytes, so results keep their bits. */
PetscErrorCode sys_mpi_wait_setup(MPI_Comm node);
int            sys_mpi_finish(MPI_Request *req, MPI_Status *st);
int            sys_mpi_finish_all(int n, MPI_Request *req, MPI_Status *st);
int            sys_mpi_barrier(MPI_Comm comm);
int            sys_mpi_bcast(void *buf, int n, MPI_Datatype t, int root, MPI_Comm comm);
int            sys_mpi_allreduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm);
int            sys_mpi_reduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm comm);
int sys_mpi_allgather(const void *in, int nin, MPI_Datatype tin, void *out, int nout, MPI_Datatype tout, MPI_Comm comm);
int sys_mpi_allgatherv(const void *in, int nin, MPI_Datatype tin, void *out, const int *cnt, const int *dsp,
                        MPI_Datatype tout, MPI_Comm comm);
int sys_mpi_gather(const void *in, int nin, MPI_Datatype tin, void *out, int nout, MPI_Datatype tout, int root,
                    MPI_Comm comm);
int sys_mpi_gatherv(const void *in, int nin, MPI_Datatype tin, void *out, const int *cnt, const int *dsp,
                     MPI_Datatype tout, int root, MPI_Comm comm);
int sys_mpi_alltoallv(const void *in, const int *scnt, const int *sdsp, MPI_Datatype tin, void *out, const int *rcnt,
                       const int *rdsp, MPI_Datatype tout, MPI_Comm comm);
int sys_mpi_recv(void *buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Status *st);
int sys_mpi_probe(int src, int tag, MPI_Comm comm, MPI_Status *st);

#endif
