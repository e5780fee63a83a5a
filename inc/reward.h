/* reward: rewards computed by a program rather than a reward model (RL with
 * verifiable rewards). The response is read as text through a token table
 * (each token's bytes: a checkpoint's /tokenizer, or a built-in task's
 * vocabulary); rule functions compare it with the prompt's reference
 * answer; a reward command is a user's helper process that scores batches
 * of samples sent to it as JSON lines. */
#ifndef RLFUSE_REWARD_H
#define RLFUSE_REWARD_H

#include "sys.h"
#include "io.h"
#include <stddef.h>
#include <stdint.h>

/* ---- token table (src/reward/table.c) ----------------------------------- */
/* Token i is bytes[off[i] .. off[i+1]); control tokens (BOS, EOS, PAD, ...)
 * have no bytes. */
typedef struct {
  int            V, eos_id;  /* eos_id -1: none */
  int64_t       *off;        /* [V+1] */
  unsigned char *bytes;      /* [off[V]] */
} TokenTable;
/* Reads /tokenizer (token_bytes, token_offsets, @eos_id; docs/formats.md)
 * of an HDF5 file, on rank 0 of comm, broadcast to all. *found is false (and
 * tt zeroed) when the file has no /tokenizer group; a malformed group
 * (offsets not rising, outside the bytes, not V+1 of them) is an error
 * naming the file and the item. */
PetscErrorCode token_table_read(MPI_Comm comm, const char *path, TokenTable *tt, PetscBool *found);
/* A table from V strings (a built-in task's vocabulary; NULL: no bytes). */
PetscErrorCode token_table_from_strings(int V, const char *const *tok, int eos_id, TokenTable *tt);
PetscErrorCode token_table_destroy(TokenTable *tt);
/* The text of tok[0..n): tokens' bytes concatenated up to (not including)
 * the first EOS, ids outside [0, V) skipped; written NUL-terminated into
 * *buf (grown as needed, *cap its size); returns the text's length. */
size_t token_table_decode(const TokenTable *tt, const int *tok, int n, char **buf, size_t *cap);

/* ---- rule functions (src/reward/rules.c) --------------------------------- */
/* The answer a response gives: the content of its last \boxed{...} if it
 * has one, else its last number. A number is an optional sign, digits with
 * optional thousands separators (1,234) and an optional decimal part
 * (3.50, .5), or a fraction of two integers (3/4). Normalised into out
 * (NUL-terminated, at most cap bytes): separators and a leading '+'
 * removed, trailing zeros of a decimal part and a trailing '.' dropped,
 * "-0" written "0". Returns the length, or -1 when there is no answer. */
int    reward_extract_answer(const char *text, size_t n, char *out, size_t cap);
/* 1 when the response's answer equals the reference numerically (both
 * parsed as numbers or fractions, equal within 1e-9 relative), or, when the
 * reference is not a number, as normalised strings; else 0. */
double reward_numeric(const char *response, size_t n, const char *reference);
/* 1 when the response, trimmed of surrounding white space, equals the
 * reference trimmed the same way; else 0. */
double reward_exact(const char *response, size_t n, const char *reference);
/* 1 when the response states an answer (reward_extract_answer finds one)
 * and ended with EOS; else 0. */
double reward_format(const char *response, size_t n, int eos);
/* 0 for len <= start, then falling linearly to -1 at len = max_len, -1
 * beyond (start >= max_len: 0 below max_len, -1 at or above). */
double reward_length(int len, int start, int max_len);

/* ---- a weighted sum of rule functions (src/reward/spec.c) ----------------- */
typedef enum { REWARD_NUMERIC = 0, REWARD_EXACT = 1, REWARD_FORMAT = 2, REWARD_LENGTH = 3, REWARD_NFN = 4 } RewardFn;
extern const char *const RewardFnNames[REWARD_NFN]; /* "numeric", "exact", "format", "length" */
typedef struct {
  int    n;                      /* terms */
  int    fn[REWARD_NFN];         /* RewardFn of each term */
  double weight[REWARD_NFN];
} RewardSpec;
/* Parses "NAME[:WEIGHT],..." (weights default to 1; each name at most once;
 * "" or "none": no terms). Errors name the option (opt) and the bad part. */
PetscErrorCode reward_spec_parse(const char *opt, const char *s, RewardSpec *spec);
/* Whether a term needs a reference answer (numeric, exact). */
PetscBool reward_spec_needs_answer(const RewardSpec *spec);
/* One sample's value of each term (unweighted, into part[spec->n]) and the
 * weighted sum (returned). length_start: the length function's start. */
double reward_spec_eval(const RewardSpec *spec, const char *response, size_t n, int eos, int len, const char *reference,
                        int length_start, int max_len, double *part);

/* ---- the -reward_ options (src/reward/options.c) -------------------------- */
/* src/reward owns every -reward_ option of the rewards (the reward model's
 * architecture and optimizer options are the role's, src/model's); PPO
 * receives these values. */
typedef struct {
  char       checkpoint[PETSC_MAX_PATH_LEN]; /* -reward_checkpoint: the reward model ("" none) */
  char       fn[256];                        /* -reward_fn */
  char       command[PETSC_MAX_PATH_LEN];    /* -reward_command */
  PetscInt   length_start;                   /* -reward_length_start; -1 until reward_options_check */
  PetscReal  model_weight, command_weight, command_timeout;
  RewardSpec spec;                           /* fn parsed by reward_options_check */
} RewardOptions;
PetscErrorCode reward_options_from_options(RewardOptions *r);
/* The file options it reads (-reward_checkpoint), for io_files_check. */
extern const IoFileOption reward_file_options[];
/* Parses -reward_fn, sets the length reward's default start (half of
 * max_new_tokens, -gen_max_new_tokens) and checks the values. */
PetscErrorCode reward_options_check(RewardOptions *r, PetscInt max_new_tokens);

/* ---- the reward command (src/reward/command.c) --------------------------- */
/* A helper process started once with /bin/sh -c CMD. Each batch is one
 * line of JSON on its standard input:
 *   {"iteration": K, "samples": [{"index": I, "prompt": "...",
 *     "response": "...", "answer": "...", "metadata": "..."}, ...]}
 * written and read with jansson; it answers with one line per sample, each
 * a number (JSON's syntax; nan and inf are refused, and so is a magnitude
 * beyond REWARD_COMMAND_MAX_ABS), in order. Its standard error passes
 * through. */
typedef struct RewardCommand RewardCommand;
/* An answer beyond this magnitude is refused as absurd (docs/rewards.md):
 * rewards are O(1) by design, and 1.7e308 would only surface later as a NaN
 * loss. */
#define REWARD_COMMAND_MAX_ABS 1e6
typedef struct {
  int64_t     index;     /* the prompt's row in its file, or the built-in task's sample */
  const char *prompt, *response, *answer, *metadata; /* UTF-8 text; answer/metadata may be "" */
} RewardSample;
/* Starts the process (on the calling rank only). A command that cannot be
 * started, whose first word names a missing program (then not started, so
 * the shell prints nothing), or that exits before its first batch, is
 * reported by the first reward_command_score. */
PetscErrorCode reward_command_start(const char *cmd, double timeout_s, RewardCommand **rc);
/* Sends the batch and reads n numbers into out. Returns 0, or non-zero with
 * a one-line message in err naming the command and, where one is to blame,
 * the sample (its position in the batch and its index): the process died
 * or closed its output, did not answer within the time limit, printed a
 * line that is not a number (quoted, shortened), or too few or too many
 * lines. Does not raise a PETSc error itself: the caller agrees the outcome
 * over the ranks and raises it on all of them. */
int reward_command_score(RewardCommand *rc, int iteration, int n, const RewardSample *s, double *out, char *err,
                         size_t errcap);
/* Closes its input, waits up to 5 s for it to exit, then kills it. */
PetscErrorCode reward_command_stop(RewardCommand **rc);

#endif
