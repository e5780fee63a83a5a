/* io: checkpoints. One HDF5 file holding any of the five roles' parameters
 * (and AdamW moments), named by Hugging Face keys, plus the run state needed
 * to resume bit-exactly. Layout: docs/formats.md. Every rank opens the file
 * (parallel HDF5 over MPI-IO) and reads or writes only its shard, through
 * hyperslabs (ckpt_shard.c); rank 0 checks a file's structure before any
 * data is read, so a bad file gets the same messages on any layout. */
#include "internal/ckpt_shard.h"

#include <stddef.h>
#include <string.h>

static const char *const ckpt_roles[] = {"policy", "actor", "critic", "reference", "reward"};

static PetscErrorCode ckpt_check_role(const char *path, const char *role)
{
  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof ckpt_roles / sizeof ckpt_roles[0]; i++)
    if (role && !strcmp(role, ckpt_roles[i])) PetscFunctionReturn(PETSC_SUCCESS);
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
          "checkpoint %s: unknown role '%s' (policy, actor, critic, reference or reward)", path,
          role ? role : "(null)");
}

/* ---- writing ------------------------------------------------------------- */
typedef struct {
  const char      *path;
  const CkptModel *models;
  const CkptWhere *where;
  int              n;
  CkptState        st;
  CkptSource       src;   /* src.as "": none */
  CkptCarry        carry; /* carry.fn NULL: none */
  hid_t            dxpl;
  float           *buf; /* the bounded staging buffer, ckpt_chunk floats */
} CkptWriteCtx;

/* ---- a model's attributes (docs/formats.md) --------------------------------- */
/* Each attribute of /<role> is one row, which both the writer and the reader
 * follow: its name, how it is stored (INT and BOOL int32, DOUBLE float64,
 * ENUM the name as a string), its field of ModelConfig, and which files carry
 * it. SETTINGS rows only an architecture with settings (model_arch()->settings)
 * has; OMIT_ZERO rows are left out at 0 (GPT-2's files have no arch); OPTIONAL
 * rows are absent from files written before them, and read as fallback()
 * (or 0), which is also what is written for a field of 0. */
typedef enum { CKPT_INT, CKPT_BOOL, CKPT_DOUBLE, CKPT_ENUM } CkptAttrKind;
typedef enum { CKPT_NEEDED, CKPT_OPTIONAL, CKPT_OMIT_ZERO } CkptAttrAbsent;

typedef struct {
  const char        *name;
  CkptAttrKind       kind;
  size_t             offset;
  PetscBool          settings;
  CkptAttrAbsent     absent;
  const char *const *names; /* ENUM: PETSc's list of names */
  int (*fallback)(const ModelConfig *cfg);
} CkptAttr;

/* Qwen3's head_dim: n_embd / n_head in files written before it. */
static int ckpt_head_dim_fallback(const ModelConfig *c)
{
  return c->n_head > 0 && c->n_embd % c->n_head == 0 ? c->n_embd / c->n_head : 0;
}

/* The attribute is named as its field. */
#define CKPT_ROW(field, kind, settings, absent, names, fallback) \
  {#field, kind, offsetof(ModelConfig, field), settings, absent, names, fallback}
static const CkptAttr ckpt_attrs[] = {
  CKPT_ROW(n_layer, CKPT_INT, PETSC_FALSE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(n_head, CKPT_INT, PETSC_FALSE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(n_embd, CKPT_INT, PETSC_FALSE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(vocab_size, CKPT_INT, PETSC_FALSE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(n_positions, CKPT_INT, PETSC_FALSE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(head, CKPT_ENUM, PETSC_FALSE, CKPT_NEEDED, ModelHeadNames, NULL),
  CKPT_ROW(arch, CKPT_ENUM, PETSC_FALSE, CKPT_OMIT_ZERO, ModelArchNames, NULL),
  CKPT_ROW(n_kv_head, CKPT_INT, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(n_ffn, CKPT_INT, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(qkv_bias, CKPT_BOOL, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(tie_embeddings, CKPT_BOOL, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(rope_theta, CKPT_DOUBLE, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(norm_eps, CKPT_DOUBLE, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(rope_scaling, CKPT_ENUM, PETSC_TRUE, CKPT_NEEDED, ModelRopeScalingNames, NULL),
  CKPT_ROW(rope_factor, CKPT_DOUBLE, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(rope_low_freq_factor, CKPT_DOUBLE, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(rope_high_freq_factor, CKPT_DOUBLE, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(rope_original_max_positions, CKPT_INT, PETSC_TRUE, CKPT_NEEDED, NULL, NULL),
  CKPT_ROW(head_dim, CKPT_INT, PETSC_TRUE, CKPT_OPTIONAL, NULL, ckpt_head_dim_fallback),
  CKPT_ROW(qk_norm, CKPT_BOOL, PETSC_TRUE, CKPT_OPTIONAL, NULL, NULL),
};
#undef CKPT_ROW
#define CKPT_NATTRS ((int)(sizeof ckpt_attrs / sizeof ckpt_attrs[0]))

/* Ints, enums and PetscBools are all int-sized fields. */
static int ckpt_attr_get_int(const ModelConfig *cfg, const CkptAttr *a)
{
  const char *p = (const char *)cfg + a->offset;

  return a->kind == CKPT_BOOL ? (*(const PetscBool *)p ? 1 : 0) : *(const int *)p;
}

static void ckpt_attr_set_int(ModelConfig *cfg, const CkptAttr *a, int v)
{
  char *p = (char *)cfg + a->offset;

  if (a->kind == CKPT_BOOL) *(PetscBool *)p = v ? PETSC_TRUE : PETSC_FALSE;
  else *(int *)p = v;
}

static PetscBool ckpt_attr_carried(const ModelConfig *cfg, const CkptAttr *a)
{
  return !a->settings || model_arch(cfg)->settings ? PETSC_TRUE : PETSC_FALSE;
}

static PetscErrorCode ckpt_write_config(hid_t g, const ModelConfig *cfg)
{
  PetscFunctionBegin;
  for (int i = 0; i < CKPT_NATTRS; i++) {
    const CkptAttr *a = &ckpt_attrs[i];
    int             v;

    if (!ckpt_attr_carried(cfg, a)) continue;
    if (a->kind == CKPT_DOUBLE) {
      PetscCall(io_attr_write_double(g, a->name, *(const double *)((const char *)cfg + a->offset)));
      continue;
    }
    v = ckpt_attr_get_int(cfg, a);
    if (!v && a->absent == CKPT_OMIT_ZERO) continue;
    if (!v && a->fallback) v = a->fallback(cfg);
    if (a->kind == CKPT_ENUM) PetscCall(io_attr_write_string(g, a->name, a->names[v]));
    else PetscCall(io_attr_write_int(g, a->name, IO_I32LE, v));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Contiguous (no chunks, no filters: what parallel writes allow), float32,
 * the full shape; never filled, since every element is written. Collective. */
static PetscErrorCode ckpt_dataset_create(hid_t g, const ModelTensor *t, hid_t *dset)
{
  hsize_t dims[2] = {(hsize_t)t->gshape[0], (hsize_t)t->gshape[1]};
  hid_t   space, dcpl;

  PetscFunctionBegin;
  space = H5Screate_simple(t->ndim, dims, NULL);
  dcpl  = H5Pcreate(H5P_DATASET_CREATE);
  if (dcpl >= 0) H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  *dset = space >= 0 && dcpl >= 0 ? H5Dcreate2(g, t->name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT)
                                  : H5I_INVALID_HID;
  if (space >= 0) H5Sclose(space);
  if (dcpl >= 0) H5Pclose(dcpl);
  H5CallWrite(*dset, "HDF5: cannot create dataset %s", t->name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One dataset per tensor in a new group `name` of loc, each rank writing
 * its part of buffer `which` (0 params, 1 m, 2 v); errors agreed per tensor. */
static PetscErrorCode ckpt_write_tensors(hid_t loc, const char *name, const CkptPlace *pl, int which, MPI_Comm comm,
                                         CkptWriteCtx *ctx, char *msg)
{
  hid_t g;

  PetscFunctionBegin;
  g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "HDF5: cannot create group %s", name);
  for (int i = 0; i < pl->nfull; i++) {
    hid_t          d = H5I_INVALID_HID;
    PetscErrorCode e = ckpt_dataset_create(g, &pl->full[i], &d);

    if (!e) e = ckpt_place_xfer(pl, i, which, d, ctx->dxpl, ctx->buf);
    if (d >= 0) H5Dclose(d);
    h5u_agree(comm, &e, msg);
    PetscCall(e);
  }
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_write_model_place(hid_t file, MPI_Comm comm, CkptWriteCtx *ctx, const CkptModel *cm,
                                             CkptPlace *pl, char *msg)
{
  hid_t g, o;

  PetscFunctionBegin;
  PetscCall(ckpt_check_role(ctx->path, cm->role));
  PetscCheck(H5Lexists(file, cm->role, H5P_DEFAULT) == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "checkpoint %s: role %s given twice", ctx->path, cm->role);
  g = H5Gcreate2(file, cm->role, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "checkpoint %s: cannot create group /%s", ctx->path, cm->role);
  PetscCall(ckpt_write_config(g, &pl->cfg));
  PetscCall(ckpt_write_tensors(g, "params", pl, 0, comm, ctx, msg));
  if (cm->with_optim) {
    o = H5Gcreate2(g, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Call(o, "HDF5: cannot create group optim");
    PetscCall(io_attr_write_int(o, "step", IO_I64LE, pl->step));
    PetscCall(ckpt_write_tensors(o, "m", pl, 1, comm, ctx, msg));
    PetscCall(ckpt_write_tensors(o, "v", pl, 2, comm, ctx, msg));
    PetscCall(io_close(&o));
  }
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_write_model(hid_t file, MPI_Comm comm, CkptWriteCtx *ctx, int k, char *msg)
{
  const CkptModel *cm = &ctx->models[k];
  CkptPlace        pl;
  PetscErrorCode   ierr = ckpt_place_setup(comm, cm, ctx->where ? &ctx->where[k] : NULL, PETSC_TRUE, &pl);

  PetscFunctionBegin;
  h5u_agree(comm, &ierr, msg);
  if (!ierr) ierr = ckpt_write_model_place(file, comm, ctx, cm, &pl, msg);
  PetscCall(ckpt_place_destroy(&pl));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_write_state(hid_t file, const CkptState *st)
{
  hid_t g;

  PetscFunctionBegin;
  g = H5Gcreate2(file, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "HDF5: cannot create group /state");
  PetscCall(io_attr_write_int(g, "iteration", IO_I64LE, st->iteration));
  PetscCall(io_attr_write_int(g, "data_pos", IO_I64LE, st->data_pos));
  PetscCall(io_attr_write_int(g, "seed", IO_I64LE, st->seed));
  PetscCall(io_attr_write_double(g, "kl_coef", st->kl_coef));
  PetscCall(io_write_version(g));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_fill(hid_t file, MPI_Comm comm, void *vctx, char *msg)
{
  CkptWriteCtx  *ctx = (CkptWriteCtx *)vctx;
  PetscErrorCode ierr = PETSC_SUCCESS;

  PetscFunctionBegin;
  ctx->dxpl = h5u_dxpl_comm(comm, ckpt_collective);
  PetscCheck(ctx->dxpl >= 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "HDF5: cannot create transfer properties");
  /* untouched pages cost nothing: only what a rank transfers is ever mapped */
  PetscCall(PetscMalloc1(ckpt_chunk, &ctx->buf));
  for (int i = 0; i < ctx->n && !ierr; i++) ierr = ckpt_write_model(file, comm, ctx, i, msg);
  if (!ierr) ierr = ckpt_write_state(file, &ctx->st);
  if (!ierr && ctx->src.as[0]) ierr = ckpt_source_write(file, &ctx->src);
  PetscCall(PetscFree(ctx->buf));
  H5Pclose(ctx->dxpl);
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* st may be NULL: /state then holds zeros (e.g. a converted pretrained model). */
/* The checkpoint whose /tokenizer the checkpoints written now carry (the
 * run's source model: ckpt_tokenizer_from); "" for none. */
static char ckpt_tokenizer_src[PETSC_MAX_PATH_LEN];

static PetscErrorCode ckpt_copy_tokenizer(hid_t file, void *vctx)
{
  hid_t src;

  PetscFunctionBegin;
  (void)vctx;
  PetscCall(io_open_read("checkpoint", ckpt_tokenizer_src, &src));
  if (H5Ocopy(src, "tokenizer", file, "tokenizer", H5P_DEFAULT, H5P_DEFAULT) < 0) {
    h5u_fclose(src);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "copying /tokenizer from %s failed", ckpt_tokenizer_src);
  }
  PetscCall(io_close(&src));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_tokenizer_from(MPI_Comm comm, const char *path, PetscBool *found)
{
  PetscBool has = PETSC_FALSE;

  PetscFunctionBegin;
  ckpt_tokenizer_src[0] = '\0';
  if (path && path[0]) PetscCall(ckpt_has_role(comm, path, "tokenizer", &has));
  if (has) PetscCall(PetscStrncpy(ckpt_tokenizer_src, path, sizeof ckpt_tokenizer_src));
  if (found) *found = has;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Rank 0's additions to the closed file: the tokenizer's copy, what the writer's carry holds. */
static PetscErrorCode ckpt_post(hid_t file, void *vctx)
{
  const CkptWriteCtx *ctx = (const CkptWriteCtx *)vctx;

  PetscFunctionBegin;
  if (ckpt_tokenizer_src[0]) PetscCall(ckpt_copy_tokenizer(file, vctx));
  if (ctx->carry.fn) PetscCall(ctx->carry.fn((IoId)file, ctx->carry.ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_write_sourced(MPI_Comm comm, const char *path, const CkptModel *models, const CkptWhere *where,
                                  int n, const CkptState *st, const CkptSource *src, const CkptCarry *carry)
{
  CkptWriteCtx ctx;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&ctx, sizeof ctx));
  ctx.path = path, ctx.models = models, ctx.where = where, ctx.n = n, ctx.dxpl = H5I_INVALID_HID;
  if (st) ctx.st = *st;
  if (src) ctx.src = *src;
  if (carry) ctx.carry = *carry;
  /* attributes are written collectively: every rank must give rank 0's values */
  PetscCallMPI(sys_mpi_bcast(&ctx.st, (int)sizeof ctx.st, MPI_BYTE, 0, comm));
  PetscCallMPI(sys_mpi_bcast(&ctx.src, (int)sizeof ctx.src, MPI_BYTE, 0, comm));
  PetscCall(h5u_write_atomic_comm_post(comm, "checkpoint", path, ckpt_fill, &ctx,
                                       ckpt_tokenizer_src[0] || ctx.carry.fn ? ckpt_post : NULL, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_write_placed(MPI_Comm comm, const char *path, const CkptModel *models, const CkptWhere *where,
                                 int n, const CkptState *st)
{
  PetscFunctionBegin;
  PetscCall(ckpt_write_sourced(comm, path, models, where, n, st, NULL, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_write(MPI_Comm comm, const char *path, const CkptModel *models, int n, const CkptState *st)
{
  PetscFunctionBegin;
  PetscCall(ckpt_write_placed(comm, path, models, NULL, n, st));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- reading ------------------------------------------------------------- */
static PetscErrorCode ckpt_open_group(hid_t loc, const char *path, const char *parent, const char *name,
                                      const char *why, hid_t *g)
{
  PetscFunctionBegin;
  if (H5Lexists(loc, name, H5P_DEFAULT) <= 0 &&
      !parent[0]) { /* a model left out for its unchanged input file (ckpt_source.c) */
    char src[64];

    PetscCall(PetscSNPrintf(src, sizeof src, "%s_source", name));
    PetscCheck(H5Lexists(loc, src, H5P_DEFAULT) <= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "checkpoint %s has no /%s group: it was not copied, /%s names the file it was read from (read that "
               "file)",
               path, name, src);
  }
  PetscCheck(H5Lexists(loc, name, H5P_DEFAULT) > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "checkpoint %s has no %s/%s group%s", path, parent, name, why);
  *g = H5Gopen2(loc, name, H5P_DEFAULT);
  H5Call(*g, "checkpoint %s: %s/%s is not a group (corrupt file?)", path, parent, name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_attr_int(hid_t g, const char *where, const char *name, int *value)
{
  int64_t v;

  PetscFunctionBegin;
  PetscCall(io_attr_read_int(g, where, name, 0, INT32_MAX, &v));
  *value = (int)v;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* An enum attribute: its string must be one of names (PETSc's list: the
 * names, then the type's name, its prefix and NULL). */
static PetscErrorCode ckpt_read_attr_enum(hid_t g, const char *where, const char *name, const char *const *names,
                                          int *value)
{
  char buf[32], list[160] = "";
  int  n = 0;

  PetscFunctionBegin;
  PetscCall(io_attr_read_string(g, where, name, buf, sizeof buf));
  while (names[n + 2]) n++;
  for (int i = 0; i < n; i++) {
    if (!strcmp(buf, names[i])) {
      *value = i;
      PetscFunctionReturn(PETSC_SUCCESS);
    }
    PetscCall(PetscStrlcat(list, i ? ", " : "", sizeof list));
    PetscCall(PetscStrlcat(list, names[i], sizeof list));
  }
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s '%s' is not one of %s", where, name, buf, list);
}

static PetscErrorCode ckpt_read_attr(hid_t g, const char *where, const CkptAttr *a, ModelConfig *cfg)
{
  int v = 0;

  PetscFunctionBegin;
  if (a->absent != CKPT_NEEDED && H5Aexists(g, a->name) <= 0) {
    ckpt_attr_set_int(cfg, a, a->fallback ? a->fallback(cfg) : 0); /* no DOUBLE row is optional */
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  if (a->kind == CKPT_DOUBLE) {
    PetscCall(io_attr_read_double(g, where, a->name, (double *)((char *)cfg + a->offset)));
  } else {
    if (a->kind == CKPT_ENUM) PetscCall(ckpt_read_attr_enum(g, where, a->name, a->names, &v));
    else PetscCall(ckpt_read_attr_int(g, where, a->name, &v));
    ckpt_attr_set_int(cfg, a, v);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_group_config(hid_t g, const char *path, const char *role, ModelConfig *cfg)
{
  char where[PETSC_MAX_PATH_LEN + 64];

  PetscFunctionBegin;
  PetscCall(PetscMemzero(cfg, sizeof *cfg));
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s /%s", path, role));
  for (int i = 0; i < CKPT_NATTRS; i++) /* arch comes before the rows that depend on it */
    if (ckpt_attr_carried(cfg, &ckpt_attrs[i])) PetscCall(ckpt_read_attr(g, where, &ckpt_attrs[i], cfg));
  { /* the same checks as the deck's options: n_head 0 would divide by zero later */
    PetscErrorCode ierr = model_config_check_file(cfg);
    char          *msg  = NULL;

    if (ierr) {
      PetscCall(PetscErrorMessage(ierr, NULL, &msg));
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s", where, msg ? msg : "invalid configuration");
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char *path, *role;
  ModelConfig  *cfg;
} CkptConfigCtx;

static PetscErrorCode ckpt_read_config_file(hid_t file, void *vctx)
{
  CkptConfigCtx *ctx = (CkptConfigCtx *)vctx;
  hid_t          g;

  PetscFunctionBegin;
  PetscCall(ckpt_open_group(file, ctx->path, "", ctx->role, "", &g));
  PetscCall(ckpt_read_group_config(g, ctx->path, ctx->role, ctx->cfg));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_config_task(void *vctx)
{
  CkptConfigCtx *ctx = (CkptConfigCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(ckpt_check_role(ctx->path, ctx->role));
  PetscCall(io_read_file("checkpoint", ctx->path, ckpt_read_config_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_config(MPI_Comm comm, const char *path, const char *role, ModelConfig *cfg)
{
  CkptConfigCtx ctx = {path, role, cfg};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, ckpt_read_config_task, &ctx));
  PetscCallMPI(sys_mpi_bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The deck decides the architecture; a checkpoint that disagrees is an error
 * naming the option to change. */
static PetscErrorCode ckpt_config_compare(const char *path, const char *role, const ModelConfig *file,
                                          const ModelConfig *deck)
{
  const struct {
    const char *name;
    int         file, deck;
  } f[] = {
    {"n_layer",     file->n_layer,     deck->n_layer    },
    {"n_head",      file->n_head,      deck->n_head     },
    {"n_embd",      file->n_embd,      deck->n_embd     },
    {"vocab_size",  file->vocab_size,  deck->vocab_size },
    {"n_positions", file->n_positions, deck->n_positions},
  };

  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    PetscCheck(f[i].file == f[i].deck, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "checkpoint %s /%s: %s %d in the file, %d in the deck (-%s_%s)", path, role, f[i].name, f[i].file,
               f[i].deck, role, f[i].name);
  PetscCheck(file->head == deck->head, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "checkpoint %s /%s: head %s in the file, %s in the deck (-%s_head)", path, role,
             ModelHeadNames[file->head], ModelHeadNames[deck->head], role);
  PetscCheck(file->arch == deck->arch, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "checkpoint %s /%s: arch %s in the file, %s in the deck (-%s_arch)", path, role,
             ModelArchNames[file->arch], ModelArchNames[deck->arch], role);
  if (model_arch(file)->settings) {
    const struct {
      const char *name;
      int         file, deck;
    } l[] = {
      { "n_kv_head", file->n_kv_head, deck->n_kv_head },
      { "n_ffn", file->n_ffn, deck->n_ffn },
      { "qkv_bias", file->qkv_bias, deck->qkv_bias },
      { "tie_embeddings", file->tie_embeddings, deck->tie_embeddings },
      { "rope_scaling", file->rope_scaling, deck->rope_scaling },
      { "head_dim", model_head_dim(file), model_head_dim(deck) },
      { "qk_norm", file->qk_norm, deck->qk_norm },
    };
    for (size_t i = 0; i < sizeof l / sizeof l[0]; i++)
      PetscCheck(l[i].file == l[i].deck, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
                 "checkpoint %s /%s: %s %d in the file, %d in the deck (-%s_%s)", path, role, l[i].name, l[i].file,
                 l[i].deck, role, l[i].name);
    PetscCheck(model_config_equal(file, deck), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
               "checkpoint %s /%s: rope_theta %g, norm_eps %g or the rope scaling factors in the file differ from the "
               "deck's (-%s_rope_theta %g, -%s_norm_eps %g)",
               path, role, file->rope_theta, file->norm_eps, role, deck->rope_theta, role, deck->norm_eps);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- reading a model: rank 0 checks the file, then every rank reads ---------- */
typedef struct {
  const char      *path;
  const CkptModel *model;
  CkptPlace        pl;
  int64_t          step;
  hid_t            dxpl;
  float           *buf;
} CkptModelCtx;

static PetscBool ckpt_skip(const CkptModel *cm, const ModelTensor *t)
{
  return cm->trunk_only && !model_tensor_is_trunk(t->name) ? PETSC_TRUE : PETSC_FALSE;
}

typedef struct {
  CkptModelCtx *ctx;
  char          extra[256]; /* the first dataset the table does not have */
} CkptExtraCtx;

static herr_t ckpt_extra_one(hid_t g, const char *name, const H5L_info_t *info, void *vctx)
{
  CkptExtraCtx *x = (CkptExtraCtx *)vctx;

  (void)g, (void)info;
  if (x->ctx->model->trunk_only && !model_tensor_is_trunk(name)) return 0; /* the other head's tensors */
  for (int i = 0; i < x->ctx->pl.nfull; i++)
    if (!strcmp(name, x->ctx->pl.full[i].name)) return 0;
  snprintf(x->extra, sizeof x->extra, "%s", name);
  return 1;
}

/* A tensor the architecture does not have means the attributes describe
 * another model than the tensors (n_layer 1 over two layers' tensors):
 * reading only the expected ones would silently cut the model. */
static PetscErrorCode ckpt_check_no_extra(hid_t g, const char *parent, const char *name, CkptModelCtx *ctx)
{
  CkptExtraCtx x = {ctx, ""};
  herr_t       e = H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, ckpt_extra_one, &x);

  PetscFunctionBegin;
  H5Call(e, "checkpoint %s: cannot list %s/%s (corrupt file?)", ctx->path, parent, name);
  PetscCheck(!x.extra[0], PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "checkpoint %s: %s/%s/%s is not a tensor of the architecture its attributes give (n_layer %d, n_embd %d, "
             "head %s): attributes and tensors disagree",
             ctx->path, parent, name, x.extra, ctx->pl.cfg.n_layer, ctx->pl.cfg.n_embd,
             ModelHeadNames[ctx->pl.cfg.head]);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every tensor of the whole model's table exists in group `name` of loc
 * with its full shape and a float type, and the group holds no other. */
static PetscErrorCode ckpt_check_tensors(hid_t loc, const char *parent, const char *name, CkptModelCtx *ctx)
{
  char  where[PETSC_MAX_PATH_LEN + 16], full[PETSC_MAX_PATH_LEN];
  hid_t g;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s", ctx->path));
  PetscCall(ckpt_open_group(loc, ctx->path, parent, name, "", &g));
  for (int i = 0; i < ctx->pl.nfull; i++) {
    const ModelTensor *t       = &ctx->pl.full[i];
    hsize_t          dims[2] = {(hsize_t)t->gshape[0], (hsize_t)t->gshape[1]};
    hid_t            d;

    if (ckpt_skip(ctx->model, t)) continue;
    PetscCall(PetscSNPrintf(full, sizeof full, "%s/%s/%s", parent, name, t->name));
    PetscCall(io_dataset_open(g, where, full, t->name, IO_CLASS_FLOAT, sizeof(float), t->ndim, dims, &d));
    PetscCall(io_close(&d));
  }
  PetscCall(ckpt_check_no_extra(g, parent, name, ctx));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_check_optim(hid_t role, CkptModelCtx *ctx)
{
  const char *r = ctx->model->role;
  char        parent[80], where[PETSC_MAX_PATH_LEN + 80];
  hid_t       g;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(parent, sizeof parent, "/%s", r));
  PetscCall(ckpt_open_group(role, ctx->path, parent, "optim", " (saved without optimizer state)", &g));
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s /%s/optim", ctx->path, r));
  PetscCall(io_attr_read_int(g, where, "step", 0, INT32_MAX, &ctx->step));
  PetscCall(PetscSNPrintf(parent, sizeof parent, "/%s/optim", r));
  PetscCall(ckpt_check_tensors(g, parent, "m", ctx));
  PetscCall(ckpt_check_tensors(g, parent, "v", ctx));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_check_model_file(hid_t file, void *vctx)
{
  CkptModelCtx *ctx = (CkptModelCtx *)vctx;
  const char   *r   = ctx->model->role;
  ModelConfig   cfg, deck = ctx->pl.cfg;
  char          parent[80];
  hid_t         g;

  PetscFunctionBegin;
  PetscCall(ckpt_open_group(file, ctx->path, "", r, "", &g));
  PetscCall(ckpt_read_group_config(g, ctx->path, r, &cfg));
  if (ctx->model->trunk_only) cfg.head = deck.head;
  PetscCall(ckpt_config_compare(ctx->path, r, &cfg, &deck));
  PetscCall(PetscSNPrintf(parent, sizeof parent, "/%s", r));
  PetscCall(ckpt_check_tensors(g, parent, "params", ctx));
  if (ctx->model->with_optim) PetscCall(ckpt_check_optim(g, ctx));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_check_model_task(void *vctx)
{
  CkptModelCtx *ctx = (CkptModelCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(ckpt_check_role(ctx->path, ctx->model->role));
  PetscCall(io_read_file("checkpoint", ctx->path, ckpt_check_model_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Group `name` of loc into buffer `which`, each rank its part. */
static PetscErrorCode ckpt_read_tensors(hid_t loc, const char *name, int which, MPI_Comm comm, CkptModelCtx *ctx,
                                        char *msg)
{
  hid_t g;

  PetscFunctionBegin;
  g = H5Gopen2(loc, name, H5P_DEFAULT);
  H5Call(g, "cannot open group %s", name);
  for (int i = 0; i < ctx->pl.nfull; i++) {
    hid_t          d;
    PetscErrorCode e = PETSC_SUCCESS;

    if (ckpt_skip(ctx->model, &ctx->pl.full[i])) continue;
    d = H5Dopen2(g, ctx->pl.full[i].name, H5P_DEFAULT);
    if (d < 0)
      e = PETSC_ERR_FILE_READ, snprintf(msg, H5U_MSG_LEN, "cannot open dataset %s/%s", name, ctx->pl.full[i].name);
    else e = ckpt_place_xfer(&ctx->pl, i, which, d, ctx->dxpl, ctx->buf);
    if (d >= 0) H5Dclose(d);
    h5u_agree(comm, &e, msg);
    PetscCall(e);
  }
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_model_data(hid_t file, MPI_Comm comm, CkptModelCtx *ctx, char *msg)
{
  hid_t g, o;

  PetscFunctionBegin;
  g = H5Gopen2(file, ctx->model->role, H5P_DEFAULT);
  H5Call(g, "cannot open group /%s", ctx->model->role);
  PetscCall(ckpt_read_tensors(g, "params", 0, comm, ctx, msg));
  if (ctx->model->with_optim) {
    o = H5Gopen2(g, "optim", H5P_DEFAULT);
    H5Call(o, "cannot open group /%s/optim", ctx->model->role);
    PetscCall(ckpt_read_tensors(o, "m", 1, comm, ctx, msg));
    PetscCall(ckpt_read_tensors(o, "v", 2, comm, ctx, msg));
    PetscCall(io_close(&o));
  }
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_model_fill(hid_t file, MPI_Comm comm, void *vctx, char *msg)
{
  CkptModelCtx  *ctx = (CkptModelCtx *)vctx;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  ctx->dxpl = h5u_dxpl_comm(comm, ckpt_collective);
  PetscCheck(ctx->dxpl >= 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "HDF5: cannot create transfer properties");
  PetscCall(PetscMalloc1(ckpt_chunk, &ctx->buf));
  ierr = ckpt_read_model_data(file, comm, ctx, msg);
  PetscCall(PetscFree(ctx->buf));
  H5Pclose(ctx->dxpl);
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The file is checked whole before any data moves; a read that fails after
 * that (an I/O error) may leave the model partly loaded. */
static PetscErrorCode ckpt_read_model_place(MPI_Comm comm, CkptModelCtx *ctx)
{
  PetscFunctionBegin;
  PetscCall(io_on_root(comm, ckpt_check_model_task, ctx));
  PetscCallMPI(sys_mpi_bcast(&ctx->step, 1, MPI_INT64_T, 0, comm));
  PetscCall(h5u_read_comm(comm, "checkpoint", ctx->path, ckpt_read_model_fill, ctx));
  PetscCall(ckpt_place_share(&ctx->pl, ctx->model->with_optim));
  if (ctx->model->with_optim && ctx->model->lm) ctx->model->lm->step = (int)ctx->step;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_model_placed(MPI_Comm comm, const char *path, const CkptModel *model, const CkptWhere *where)
{
  CkptModelCtx   ctx;
  PetscErrorCode ierr;
  char           msg[H5U_MSG_LEN] = "";

  PetscFunctionBegin;
  PetscCheck(!(model->trunk_only && model->with_optim), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "checkpoint %s: a trunk-only read cannot take optimizer state", path);
  PetscCall(PetscMemzero(&ctx, sizeof ctx));
  ctx.path = path, ctx.model = model, ctx.dxpl = H5I_INVALID_HID;
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = ckpt_place_setup(comm, model, where, PETSC_FALSE, &ctx.pl);
  h5u_agree(comm, &ierr, msg);
  PetscCall(PetscPopErrorHandler());
  PetscCheck(!ierr, comm, ierr, "checkpoint %s: %s", path, msg);
  ierr = ckpt_read_model_place(comm, &ctx);
  PetscCall(ckpt_place_destroy(&ctx.pl));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_model(MPI_Comm comm, const char *path, const CkptModel *model)
{
  PetscFunctionBegin;
  PetscCall(ckpt_read_model_placed(comm, path, model, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char *path;
  int64_t     v[3]; /* iteration, data_pos, seed */
  double      kl_coef;
} CkptStateCtx;

static PetscErrorCode ckpt_read_state_file(hid_t file, void *vctx)
{
  CkptStateCtx *ctx = (CkptStateCtx *)vctx;
  char          where[PETSC_MAX_PATH_LEN + 32];
  hid_t         g;

  PetscFunctionBegin;
  PetscCall(ckpt_open_group(file, ctx->path, "", "state", "", &g));
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s /state", ctx->path));
  PetscCall(io_attr_read_int(g, where, "iteration", 0, PETSC_MAX_INT, &ctx->v[0]));
  PetscCall(io_attr_read_int(g, where, "data_pos", 0, PETSC_MAX_INT, &ctx->v[1]));
  PetscCall(io_attr_read_int(g, where, "seed", 0, PETSC_MAX_INT, &ctx->v[2]));
  ctx->kl_coef = 0; /* files from before the attribute existed */
  if (H5Aexists(g, "kl_coef") > 0) PetscCall(io_attr_read_double(g, where, "kl_coef", &ctx->kl_coef));
  PetscCall(io_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_state_task(void *vctx)
{
  CkptStateCtx *ctx = (CkptStateCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(io_read_file("checkpoint", ctx->path, ckpt_read_state_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_state_local(const char *path, CkptState *st)
{
  CkptStateCtx   ctx = {path, {0, 0, 0}, 0};
  PetscErrorCode ierr;

  PetscFunctionBegin;
  H5E_BEGIN_TRY /* a scan meets truncated files: HDF5 prints nothing, the error says it */
  {
    ierr = io_read_file("checkpoint", path, ckpt_read_state_file, &ctx);
  }
  H5E_END_TRY;
  PetscCall(ierr);
  st->iteration = (PetscInt)ctx.v[0];
  st->data_pos  = (PetscInt)ctx.v[1];
  st->seed      = (PetscInt)ctx.v[2];
  st->kl_coef   = ctx.kl_coef;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_state(MPI_Comm comm, const char *path, CkptState *st)
{
  CkptStateCtx ctx = {path, {0, 0, 0}, 0};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, ckpt_read_state_task, &ctx));
  PetscCallMPI(sys_mpi_bcast(ctx.v, 3, MPI_INT64_T, 0, comm));
  PetscCallMPI(sys_mpi_bcast(&ctx.kl_coef, 1, MPI_DOUBLE, 0, comm));
  st->iteration = (PetscInt)ctx.v[0];
  st->data_pos  = (PetscInt)ctx.v[1];
  st->seed      = (PetscInt)ctx.v[2];
  st->kl_coef   = ctx.kl_coef;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- which roles a file holds ----------------------------------------------- */
typedef struct {
  const char *path, *role;
  int         has;
} CkptHasCtx;

static PetscErrorCode ckpt_has_role_file(hid_t file, void *vctx)
{
  CkptHasCtx *ctx = (CkptHasCtx *)vctx;

  PetscFunctionBegin;
  ctx->has = H5Lexists(file, ctx->role, H5P_DEFAULT) > 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_has_role_task(void *vctx)
{
  CkptHasCtx *ctx = (CkptHasCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(io_read_file("checkpoint", ctx->path, ckpt_has_role_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_has_role(MPI_Comm comm, const char *path, const char *role, PetscBool *has)
{
  CkptHasCtx ctx = {path, role, 0};

  PetscFunctionBegin;
  PetscCall(io_on_root(comm, ckpt_has_role_task, &ctx));
  PetscCallMPI(sys_mpi_bcast(&ctx.has, 1, MPI_INT, 0, comm));
  *has = ctx.has ? PETSC_TRUE : PETSC_FALSE;
  PetscFunctionReturn(PETSC_SUCCESS);
}
