/* io: HDF5 files. Checkpoints in the documented layout (docs/formats.md),
 * run records (provenance, parameters, per-step timings and metrics), token
 * datasets, and score outputs. Every file that replaces another is written to
 * a temporary name in the same directory and renamed, so a crash never leaves
 * a half-written file under the final name. */
#ifndef RLFUSE_IO_H
#define RLFUSE_IO_H

#include "sys.h"
#include "model.h"

/* ---- checkpoints ------------------------------------------------------- */
typedef struct {
  const char *role;       /* "policy", "actor", "critic", "reference", "reward" */
  Model      *lm;
  PetscBool   with_optim; /* write/read /<role>/optim/{m,v}/<key> and the step count */
  PetscBool   trunk_only; /* read: only the transformer.* tensors; the file's head may differ
                             (a scalar-head model initialised from an LM checkpoint) */
} CkptModel;

/* Where a model placed on a mesh lives, for the ranks whose lm says
 * nothing (ckpt_write_placed, ckpt_read_model_placed). */
typedef struct {
  const ModelConfig *cfg;  /* the configuration, for ranks with lm NULL (off the mesh) */
  const Mesh      *mesh; /* with host: the mesh of an offloaded shard */
  const float     *host; /* an offloaded shard's parameters in host memory, instead of lm */
} CkptWhere;

typedef struct {
  PetscInt iteration; /* steps or iterations completed */
  PetscInt data_pos;  /* samples consumed from the training data */
  PetscInt seed;      /* the RNG key: draws are (seed, iteration, sample, position) */
  double   kl_coef;   /* PPO's KL coefficient, which the adaptive controller changes (0 if unused) */
} CkptState;

/* A frozen model read from an input file and left out of the checkpoints,
 * which record where it came from instead (the group /<as>_source,
 * docs/formats.md): a restart reads it from that file after checking that
 * its contents are still those the run read. */
typedef struct {
  char    as[16];                      /* the role it would have in the checkpoint ("reference") */
  char    path[PETSC_MAX_PATH_LEN];    /* the file as the run was given it */
  char    abspath[PETSC_MAX_PATH_LEN]; /* the same, absolute: what a restart reads */
  char    role[16];                    /* the role read from the file */
  char    checksum[32];                /* io_file_checksum's of the contents */
  int64_t size;                        /* the file's bytes */
} CkptSource;

/* Collective on comm; every rank opens the file (MPI-IO when comm has more
 * than one rank) and writes only its part:
 *  - lm on a mesh (lm->mesh): this rank's shard; of the tp ranks only t = 0
 *    writes replicated tensors, of the stages only the first writes wte, and
 *    the dp replicas split the shard's flat buffer (comm_own_range), so no
 *    element is written twice (with ZeRO-1 that range is the rank's moments);
 *  - where->host + where->mesh: the same from an offloaded shard (no optimizer state);
 *  - lm without a mesh: a whole model, written by the lowest such rank;
 *  - lm NULL: nothing (where->cfg must then be set on some rank).
 * Memory: the rank's shard plus one bounded staging buffer. */
PetscErrorCode ckpt_write(MPI_Comm comm, const char *path, const CkptModel *models, int n, const CkptState *st);
/* The same with where[k] (may be NULL) for models[k]. */
PetscErrorCode ckpt_write_placed(MPI_Comm comm, const char *path, const CkptModel *models, const CkptWhere *where,
                                 int n, const CkptState *st);
/* What a checkpoint holds beyond the models: fn(file, ctx) writes it on
 * rank 0 before the file is renamed into place (asynchronous RL's queue of
 * generated batches); fn NULL: nothing. IoFileFn is defined with the HDF5
 * calls for the other modules below. */
typedef int64_t IoId;
typedef PetscErrorCode (*IoFileFn)(IoId file, void *ctx);
typedef struct {
  IoFileFn fn;
  void    *ctx;
} CkptCarry;
/* The same, plus /<src->as>_source recording src (NULL: none) and what
 * carry writes (NULL: nothing). */
PetscErrorCode ckpt_write_sourced(MPI_Comm comm, const char *path, const CkptModel *models, const CkptWhere *where,
                                  int n, const CkptState *st, const CkptSource *src, const CkptCarry *carry);
/* src for the input file path (role read from it, recorded as role `as`):
 * its absolute path, size and checksum; errors name option opt (a missing
 * file, a directory, a symlink loop). Collective on comm; rank 0 reads. */
PetscErrorCode ckpt_source_make(MPI_Comm comm, const char *opt, const char *path, const char *role, const char *as,
                                CkptSource *src);
/* Checkpoint path (given as option opt) /<as>_source into src; *found false
 * (src untouched) when it has none (it holds the model's weights itself). The
 * recorded file must be a regular file with the recorded checksum, else one
 * error naming it, opt and the checkpoint. Collective on comm. */
PetscErrorCode ckpt_read_source(MPI_Comm comm, const char *opt, const char *path, const char *as, CkptSource *src,
                                PetscBool *found);
/* Reads the attributes of /<role>. Errors name the file and the role. */
PetscErrorCode ckpt_read_config(MPI_Comm comm, const char *path, const char *role, ModelConfig *cfg);
/* From now on, checkpoints this process writes carry a copy of path's
 * /tokenizer (docs/formats.md), when it has one: the text of the tokens
 * travels with the model through SFT, reward modelling and PPO. NULL or
 * "": none. *found (may be NULL): whether it has. Collective on comm. */
PetscErrorCode ckpt_tokenizer_from(MPI_Comm comm, const char *path, PetscBool *found);
/* The ids that end a response by path's /tokenizer: *eos its @eos_id (-1:
 * none), stop[0..*nstop) its /tokenizer/stop_ids less EOS (at most max, else
 * an error). *found false (the rest untouched but *eos -1) without the group.
 * Collective on comm. */
PetscErrorCode ckpt_read_stops(MPI_Comm comm, const char *path, int max, int *eos, int *stop, int *nstop,
                               PetscBool *found);
/* Whether the file (which must be a readable HDF5 file) holds group /<role>. */
PetscErrorCode ckpt_has_role(MPI_Comm comm, const char *path, const char *role, PetscBool *has);
/* Loads parameters (and moments and step if with_optim) into an existing model
 * whose configuration must match the file's; every dataset's shape is checked
 * (by rank 0, before any data moves). Collective on comm: each rank reads
 * what it holds (as for ckpt_write; a whole model on every rank that has
 * one): a shard's dp replicas each read one range and share it over dp. */
PetscErrorCode ckpt_read_model(MPI_Comm comm, const char *path, const CkptModel *model);
PetscErrorCode ckpt_read_model_placed(MPI_Comm comm, const char *path, const CkptModel *model, const CkptWhere *where);
PetscErrorCode ckpt_read_state(MPI_Comm comm, const char *path, CkptState *st);
/* The same on this rank alone (no collective; for scans of many files:
 * HDF5 prints nothing for a file it cannot read). */
PetscErrorCode ckpt_read_state_local(const char *path, CkptState *st);

/* ---- run records ------------------------------------------------------- */
typedef struct RunRecord RunRecord;
/* Creates <output_dir>/run.h5 (an existing one is kept, renamed run.<k>.h5) and
 * writes /code and /parameters. A run restarted from step from_step > 0
 * continues instead the run.h5 of the same mode there when its rows reach
 * from_step: its rows up to from_step kept, later ones dropped, /code and
 * /parameters this run's.
 * Collective. */
PetscErrorCode record_open(const RunCtx *run, const char *mode, PetscInt from_step, RunRecord **rec);
/* Whether record_open continued the run.h5 it found (a restart whose record reaches its checkpoint's step; another
 * run's record, or one that stops short, is kept as run.<k>.h5 and a new one begun): the run's other growing files
 * follow it. */
PetscBool record_continued(const RunRecord *rec);
/* This rank's wall time of a stage during the current step (accumulates). */
PetscErrorCode record_time(RunRecord *rec, const char *stage, double seconds);
/* A per-step scalar (the value of rank 0 is stored). */
PetscErrorCode record_metric(RunRecord *rec, const char *name, double value);
/* Appends one row: step number, max and min over ranks of every stage time,
 * every metric; committed to run.h5 now or with a later row (src/io/record.c
 * says when). Collective. */
PetscErrorCode record_step(RunRecord *rec, PetscInt step);
/* Commits every row appended so far to run.h5 (before a checkpoint, so that
 * the record holds every row the checkpoint's state has made). rec NULL:
 * nothing. Collective. */
PetscErrorCode record_commit(RunRecord *rec);
/* A scalar summary attribute on /summary. */
PetscErrorCode record_summary(RunRecord *rec, const char *name, double value);
PetscErrorCode record_close(RunRecord **rec);

/* One dataset of a group: int32 or float32 (or uint8), 1-D ([dims[0]]) or 2-D. */
#define IO_DATASET_U8 2 /* is_int's value for uint8 (data: unsigned char) */
typedef struct {
  const char *name;
  int         ndim, dims[2];
  const void *data;
  int         is_int; /* PETSC_TRUE: int32, PETSC_FALSE: float32, IO_DATASET_U8: uint8 */
} IODataset;
/* ---- token datasets ---------------------------------------------------- */
/* A text per row (a prompt file's reference answers or metadata): in the
 * file <name>_bytes uint8 [total] and <name>_offsets int64 [N+1], row i's
 * UTF-8 text bytes[offsets[i] .. offsets[i+1]); in memory each row
 * NUL-terminated at bytes + off[i]. off NULL: the file has none. */
typedef struct {
  int64_t *off;   /* [N+1] */
  char    *bytes;
} IOTexts;
/* Row i's text ("" when the file has none). */
static inline const char *io_text(const IOTexts *t, int i) { return t->off ? t->bytes + t->off[i] : ""; }

/* /tokens int32 [N,T], /lengths int32 [N], optional /prompt_lengths int32 [N],
 * optional /loss_mask uint8 [N,T], optional texts answer and metadata
 * (IOTexts); attributes vocab_size (int) and task (string). Tokens past a
 * length are 0. loss_mask[i*T+t] 1: token t of row i is a target of SFT
 * (only after the prompt and before the length; every row has one), 0: it
 * is context (a multi-turn conversation's user and tool turns). */
typedef struct {
  int            N, T, vocab_size;
  int           *tokens, *lengths, *prompt_lengths; /* prompt_lengths may be NULL */
  unsigned char *loss_mask;                         /* [N*T] or NULL: every token after the prompt is a target */
  IOTexts        answer, metadata;                  /* read when the file has them */
} TokenData;
PetscErrorCode data_read(MPI_Comm comm, const char *path, TokenData *d);
/* As data_read, for a caller that knows the vocabulary (-mode score: the
 * checkpoint's): a file without the vocab_size attribute gets vocab, and
 * its tokens are checked against it, named vocab_name in errors; a file
 * with the attribute is read as data_read reads it. */
PetscErrorCode data_read_vocab(MPI_Comm comm, const char *path, int vocab, const char *vocab_name, TokenData *d);
PetscErrorCode data_write(MPI_Comm comm, const char *path, const TokenData *d, const char *task);
/* data_write with further datasets in the same file, written before the
 * file is renamed into place (rank 0's data). */
PetscErrorCode data_write_extra(MPI_Comm comm, const char *path, const TokenData *d, const char *task,
                                const IODataset *extra, int nextra);
PetscErrorCode data_free(TokenData *d);

/* ---- growing files ----------------------------------------------------- */
/* Writes group `group` (replacing one of that name) with datasets and double
 * attributes into path, creating the file if needed; flushed and closed on
 * return. Rank 0 writes; collective. */
PetscErrorCode io_group_append(MPI_Comm comm, const char *path, const char *group, const IODataset *d, int n,
                               const char *const *attr_names, const double *attr_values, int nattr);
/* A previous run's <dir>/<stem>.h5 kept as <stem>.<k>.h5 (the first k
 * free), as run.h5 is when a run starts: rank 0 renames; collective
 * (io_keep_previous_local: this rank alone). */
PetscErrorCode io_keep_previous(MPI_Comm comm, const char *dir, const char *stem);
PetscErrorCode io_keep_previous_local(const char *dir, const char *stem);
/* Writes group `group` (replacing one of that name) into path, a file that
 * a reader may look at while the run goes on and a kill cannot damage: the
 * first group creates it through a temporary and a rename, later ones are
 * added to a copy renamed over it (src/io/group.c). Datasets, double attributes and,
 * when texts is not NULL, ntexts row texts as <text_name>_bytes and
 * <text_name>_offsets (a prompt file's layout; a NULL row is empty). kind
 * names the file in messages ("evaluations file"). Rank 0 writes; collective. */
PetscErrorCode io_group_replace(MPI_Comm comm, const char *kind, const char *path, const char *group,
                                const IODataset *d, int n, const char *text_name, const char *const *texts, int ntexts,
                                const char *const *attr_names, const double *attr_values, int nattr);
/* The same into an open run record: group `group` (a path such as
 * "plan/actor_gen": missing parents are created; a group of that name is
 * replaced, children included), committed with the next rows. Rank 0 writes; collective. */
PetscErrorCode record_group(RunRecord *rec, const char *group, const IODataset *d, int n, const char *const *attr_names,
                            const double *attr_values, int nattr);
/* A restarted run continues its file (evals.h5) from its checkpoint: the
 * groups <prefix><k> with k > last, written after that checkpoint, are
 * removed (through a copy renamed over the file). No file: nothing. Rank 0
 * writes; collective. */
PetscErrorCode io_group_drop_after(MPI_Comm comm, const char *kind, const char *path, const char *prefix, int64_t last);

/* Writes one float32 [rows, cols] dataset `name` to a new file at path. */
PetscErrorCode io_write_matrix(MPI_Comm comm, const char *path, const char *name, const float *x, int rows, int cols);

/* Library versions for provenance. */
PetscErrorCode io_hdf5_version(char *buf, size_t len);
/* The checksum of a file's whole contents as text ("fnv1a64:" and 16 hex
 * digits) and its size in bytes. Collective on comm: rank 0 reads the file,
 * every rank gets the result; errors name the file. */
PetscErrorCode io_file_checksum(MPI_Comm comm, const char *path, char *sum, size_t len, int64_t *size);
/* The same on this rank alone. */
PetscErrorCode io_file_checksum_local(const char *path, char *sum, size_t len, int64_t *size);

/* ---- file-valued options (src/io/files.c) -------------------------------- */
/* Each module declares the options it reads that name a file, in a table of
 * its own beside its reading of them (cost_file_options, ...), ended by a row
 * whose option is NULL: the option with its dash, whether the run reads or
 * writes the file, a value that names no file ("builtin", "latest"), and for
 * a value that carries a kind (-cost_lengths hist:FILE) file_of, which gives
 * the file ("" for none). IO_FILE_RESTART: an input read whole at the start,
 * which may be one of the files the run writes (the checkpoint it resumes). */
typedef enum { IO_FILE_IN, IO_FILE_OUT, IO_FILE_RESTART } IoFileRole;
typedef PetscErrorCode (*IoFileOfFn)(const char *value, char *file, size_t len);
typedef struct {
  const char *option;
  IoFileRole  role;
  const char *skip;
  IoFileOfFn  file_of;
} IoFileOption;
/* Before any work: every option of tables[0..n) that the run was given.
 * Refuses (one collective error naming both options and the path) an output
 * that resolves to an input or to another output, and an output that exists
 * and is not a regular file or sits in a missing or read-only directory.
 * With output_dir (NULL: none), writes lists the files the run writes there
 * (shell patterns relative to it): an input other than IO_FILE_RESTART that
 * is one of them is refused, and so is one of them that exists and is not a
 * regular file. Paths are compared by what they resolve to. */
PetscErrorCode io_files_check(MPI_Comm comm, const IoFileOption *const *tables, int n, const char *output_dir,
                              const char *const *writes);

/* ---- HDF5 files (src/io/h5util.c, h5api.c) ------------------------------ */
/* Only src/io includes HDF5 (inc/internal/h5util.h, its private helpers): every
 * file, src/io's own formats and those a module keeps (plans, profiles,
 * schedules, timelines, token tables), is read and written through these
 * calls, with their checks and one-line messages. An IoId is an open file,
 * group or dataset (HDF5's hid_t); IO_NONE is none. */
typedef unsigned long long IoSize; /* an extent */
#define IO_NONE ((IoId)-1)
/* Element types: in memory (native) and in the file (little-endian). */
typedef enum {
  IO_INT, IO_INT64, IO_LLONG, IO_UCHAR, IO_DOUBLE, IO_FLOAT, /* native */
  IO_I32LE, IO_I64LE, IO_F64LE, IO_F32LE, IO_U8LE              /* in the file */
} IoType;
/* A dataset's or attribute's class, as io_dataset_open checks it. */
typedef enum { IO_CLASS_OTHER = -1, IO_CLASS_INT = 0, IO_CLASS_FLOAT = 1 } IoClass;
typedef PetscErrorCode (*IoTask)(void *ctx);

/* Runs task(ctx) on rank 0 of comm with errors returned silently, then makes
 * its outcome collective: on failure every rank raises rank 0's message. */
PetscErrorCode io_on_root(MPI_Comm comm, IoTask task, void *ctx);
/* Rank 0 of comm opens path read-only (kind names it in messages: "plan
 * file", "schedule file"), runs read(file, ctx) and closes it; one
 * collective error as io_on_root. What read fills is rank 0's: broadcast it. */
PetscErrorCode io_read_on_root(MPI_Comm comm, const char *kind, const char *path, IoFileFn read, void *ctx);
/* The same on the calling rank alone (closed whatever happened); io_open_read
 * only opens (io_close closes). Messages: "<kind> <path>: no such file", "...
 * not a readable HDF5 file (truncated or corrupt?)". */
PetscErrorCode io_read_file(const char *kind, const char *path, IoFileFn read, void *ctx);
PetscErrorCode io_open_read(const char *kind, const char *path, IoId *file);
/* Creates path atomically: fill writes the contents into
 * "<path>.tmp.<host>.<pid>", which is then flushed, closed, fsync'ed and
 * renamed over path; on any failure the temporary is removed and path is
 * untouched. Stale temporaries in path's directory are removed first.
 * Calling rank only. */
PetscErrorCode io_write_atomic(const char *kind, const char *path, IoFileFn fill, void *ctx);
/* Every output goes through this before it is created or replaced: refuses
 * a path that is a directory, link, device or pipe (which would be replaced),
 * or sits in a missing or read-only directory. Calling rank only. */
PetscErrorCode io_output_ok(const char *kind, const char *path);
/* Attributes rlfuse_version and git_revision on obj (every file rlfuse creates). */
PetscErrorCode io_write_version(IoId obj);
/* MPI_Bcast of arrays of any length. */
PetscErrorCode io_bcast(void *buf, size_t count, MPI_Datatype type, MPI_Comm comm);
/* Closes a file, group or dataset; no-op on IO_NONE; *id becomes IO_NONE. */
PetscErrorCode io_close(IoId *id);

/* Whether loc has a link `name` (a path relative to loc), and whether it
 * is a group; whether obj has attribute `name`. */
PetscBool io_exists(IoId loc, const char *name);
PetscBool io_is_group(IoId loc, const char *name);
PetscBool io_attr_exists(IoId obj, const char *name);
/* Opens or creates group `name` under loc (close it with io_close); where
 * names the file in messages ("plan file x.h5"). */
PetscErrorCode io_group_open(IoId loc, const char *where, const char *name, IoId *g);
PetscErrorCode io_group_create(IoId loc, const char *where, const char *name, IoId *g);

/* Attributes. Writers replace an existing attribute of the same name; strings
 * are variable-length UTF-8 (h5py reads them as str). One checked reader per
 * type (docs/design.md): one value (not an array) of the right class;
 * integers of any width (h5py writes int64) within [lo, hi], doubles finite,
 * fixed or variable strings; `where` names the object in messages
 * ("checkpoint x.h5 /policy"). */
PetscErrorCode io_attr_write_int(IoId obj, const char *name, IoType type, int64_t value);
PetscErrorCode io_attr_write_double(IoId obj, const char *name, double value);
PetscErrorCode io_attr_write_doubles(IoId obj, const char *name, int n, const double *v);
PetscErrorCode io_attr_write_string(IoId obj, const char *name, const char *value);
PetscErrorCode io_attr_read_int(IoId obj, const char *where, const char *name, int64_t lo, int64_t hi, int64_t *value);
PetscErrorCode io_attr_read_double(IoId obj, const char *where, const char *name, double *value);
PetscErrorCode io_attr_read_string(IoId obj, const char *where, const char *name, char *buf, size_t len);
/* The class of attribute `name` of obj (IO_CLASS_OTHER: neither integer nor float). */
PetscErrorCode io_attr_class(IoId obj, const char *where, const char *name, IoClass *cls);

/* Datasets: open checks the class, element size (0: any) and shape (a dims
 * entry of 0 accepts and returns any extent); `where` prefixes messages
 * ("checkpoint x.h5"), `full` is the absolute name shown. read reads the
 * whole dataset as mem (HDF5 converts); write creates a contiguous one. */
PetscErrorCode io_dataset_open(IoId loc, const char *where, const char *full, const char *name, IoClass cls,
                               size_t size, int ndim, IoSize *dims, IoId *dset);
PetscErrorCode io_dataset_read(IoId dset, const char *where, const char *full, IoType mem, void *buf);
PetscErrorCode io_dataset_write(IoId loc, const char *name, IoType file_type, IoType mem_type, int ndim,
                                const IoSize *dims, const void *buf);

/* Datasets (IODataset) and double attributes into an open group (group.c). */
PetscErrorCode io_group_fill(IoId g, const IODataset *d, int n, const char *const *attr_names,
                             const double *attr_values, int nattr);

/* Unchecked reads for scans that handle failure themselves (a rollouts
 * file's iterations): the element count of dataset `path` under loc, or a
 * negative number; the whole dataset into buf as mem, 0 or negative. */
long long io_dataset_npoints(IoId loc, const char *path);
int       io_dataset_read_all(IoId loc, const char *path, IoType mem, void *buf);
/* fn(loc, name, ctx) for each link of loc in name order until it returns
 * non-zero; returns that value, or negative when the iteration failed. */
typedef int (*IoIterFn)(IoId loc, const char *name, void *ctx);
int io_iterate(IoId loc, IoIterFn fn, void *ctx);

#endif
