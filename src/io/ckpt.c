/* io: checkpoints. One HDF5 file holding any of the five roles' parameters
 * (and AdamW moments), named by Hugging Face keys, plus the run state needed
 * to resume bit-exactly. Layout: docs/formats.md. Rank 0 does the file I/O;
 * the other ranks receive the flat buffers by broadcast. */
#include "internal/h5util.h"

#include <string.h>

static const char *const ckpt_roles[] = {"policy", "actor", "critic", "reference", "reward"};

static PetscErrorCode ckpt_check_role(const char *path, const char *role)
{
  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof ckpt_roles / sizeof ckpt_roles[0]; i++)
    if (role && !strcmp(role, ckpt_roles[i])) PetscFunctionReturn(PETSC_SUCCESS);
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "checkpoint %s: unknown role '%s' (policy, actor, critic, reference or reward)", path, role ? role : "(null)");
}

/* ---- writing ------------------------------------------------------------- */
typedef struct {
  const char      *path;
  const CkptModel *models;
  int              n;
  const CkptState *st;
} CkptWriteCtx;

static PetscErrorCode ckpt_write_config(hid_t g, const GPTConfig *cfg)
{
  PetscFunctionBegin;
  PetscCall(h5u_attr_write_int(g, "n_layer", H5T_STD_I32LE, cfg->n_layer));
  PetscCall(h5u_attr_write_int(g, "n_head", H5T_STD_I32LE, cfg->n_head));
  PetscCall(h5u_attr_write_int(g, "n_embd", H5T_STD_I32LE, cfg->n_embd));
  PetscCall(h5u_attr_write_int(g, "vocab_size", H5T_STD_I32LE, cfg->vocab_size));
  PetscCall(h5u_attr_write_int(g, "n_positions", H5T_STD_I32LE, cfg->n_positions));
  PetscCall(h5u_attr_write_string(g, "head", GPTHeadNames[cfg->head]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One dataset per tensor of the flat buffer, in a new group `name` of loc. */
static PetscErrorCode ckpt_write_tensors(hid_t loc, const char *name, const GPT *gpt, const float *buf)
{
  hid_t g;

  PetscFunctionBegin;
  g = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "HDF5: cannot create group %s", name);
  for (int i = 0; i < gpt->ntensors; i++) {
    const GPTTensor *t       = &gpt->tensors[i];
    hsize_t          dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};

    PetscCall(h5u_dataset_write(g, t->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t->ndim, dims, buf + t->offset));
  }
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_write_optim_buffers(hid_t role, const GPT *gpt, float *m, float *v)
{
  hid_t g;

  PetscFunctionBegin;
  PetscCall(gpt_optim_get(gpt, m, v));
  g = H5Gcreate2(role, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "HDF5: cannot create group optim");
  PetscCall(h5u_attr_write_int(g, "step", H5T_STD_I64LE, gpt->step));
  PetscCall(ckpt_write_tensors(g, "m", gpt, m));
  PetscCall(ckpt_write_tensors(g, "v", gpt, v));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The staging buffers are freed on the error path too. */
static PetscErrorCode ckpt_write_optim(hid_t role, const GPT *gpt)
{
  float         *m, *v;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(PetscMalloc2(gpt->nparams, &m, gpt->nparams, &v));
  ierr = ckpt_write_optim_buffers(role, gpt, m, v);
  PetscCall(PetscFree2(m, v));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_write_model(hid_t file, const char *path, const CkptModel *cm)
{
  hid_t          g;
  float         *buf;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(ckpt_check_role(path, cm->role));
  PetscCheck(H5Lexists(file, cm->role, H5P_DEFAULT) == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "checkpoint %s: role %s given twice", path, cm->role);
  g = H5Gcreate2(file, cm->role, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "checkpoint %s: cannot create group /%s", path, cm->role);
  PetscCall(ckpt_write_config(g, &cm->gpt->cfg));
  PetscCall(PetscMalloc1(cm->gpt->nparams, &buf));
  ierr = gpt_params_get(cm->gpt, buf);
  if (!ierr) ierr = ckpt_write_tensors(g, "params", cm->gpt, buf);
  PetscCall(PetscFree(buf));
  PetscCall(ierr);
  if (cm->with_optim) PetscCall(ckpt_write_optim(g, cm->gpt));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_write_state(hid_t file, const CkptState *st)
{
  CkptState zero = {0, 0, 0, 0};
  hid_t     g;

  PetscFunctionBegin;
  if (!st) st = &zero;
  g = H5Gcreate2(file, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Call(g, "HDF5: cannot create group /state");
  PetscCall(h5u_attr_write_int(g, "iteration", H5T_STD_I64LE, st->iteration));
  PetscCall(h5u_attr_write_int(g, "data_pos", H5T_STD_I64LE, st->data_pos));
  PetscCall(h5u_attr_write_int(g, "seed", H5T_STD_I64LE, st->seed));
  PetscCall(h5u_attr_write_double(g, "kl_coef", st->kl_coef));
  PetscCall(h5u_write_version(g));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_fill(hid_t file, void *vctx)
{
  CkptWriteCtx *ctx = (CkptWriteCtx *)vctx;

  PetscFunctionBegin;
  for (int i = 0; i < ctx->n; i++) PetscCall(ckpt_write_model(file, ctx->path, &ctx->models[i]));
  PetscCall(ckpt_write_state(file, ctx->st));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_write_task(void *vctx)
{
  CkptWriteCtx *ctx = (CkptWriteCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(h5u_write_atomic("checkpoint", ctx->path, ckpt_fill, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* st may be NULL: /state then holds zeros (e.g. a converted pretrained model). */
PetscErrorCode ckpt_write(MPI_Comm comm, const char *path, const CkptModel *models, int n, const CkptState *st)
{
  CkptWriteCtx ctx = {path, models, n, st};

  PetscFunctionBegin;
  PetscCall(h5u_rank0(comm, ckpt_write_task, &ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- reading ------------------------------------------------------------- */
static PetscErrorCode ckpt_open_group(hid_t loc, const char *path, const char *parent, const char *name, const char *why, hid_t *g)
{
  PetscFunctionBegin;
  PetscCheck(H5Lexists(loc, name, H5P_DEFAULT) > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "checkpoint %s has no %s/%s group%s", path, parent, name, why);
  *g = H5Gopen2(loc, name, H5P_DEFAULT);
  H5Call(*g, "checkpoint %s: %s/%s is not a group (corrupt file?)", path, parent, name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_attr_int(hid_t g, const char *where, const char *name, int *value)
{
  int64_t v;

  PetscFunctionBegin;
  PetscCall(h5u_attr_read_int(g, where, name, 0, INT32_MAX, &v));
  *value = (int)v;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_group_config(hid_t g, const char *path, const char *role, GPTConfig *cfg)
{
  char where[PETSC_MAX_PATH_LEN + 64], head[32];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s /%s", path, role));
  PetscCall(ckpt_read_attr_int(g, where, "n_layer", &cfg->n_layer));
  PetscCall(ckpt_read_attr_int(g, where, "n_head", &cfg->n_head));
  PetscCall(ckpt_read_attr_int(g, where, "n_embd", &cfg->n_embd));
  PetscCall(ckpt_read_attr_int(g, where, "vocab_size", &cfg->vocab_size));
  PetscCall(ckpt_read_attr_int(g, where, "n_positions", &cfg->n_positions));
  PetscCall(h5u_attr_read_string(g, where, "head", head, sizeof head));
  if (!strcmp(head, GPTHeadNames[GPT_HEAD_LM])) cfg->head = GPT_HEAD_LM;
  else if (!strcmp(head, GPTHeadNames[GPT_HEAD_SCALAR])) cfg->head = GPT_HEAD_SCALAR;
  else SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: head '%s' is neither lm nor scalar", where, head);
  { /* the same checks as the deck's options: n_head 0 would divide by zero later */
    PetscErrorCode ierr = gpt_config_check_file(cfg);
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
  GPTConfig  *cfg;
} CkptConfigCtx;

static PetscErrorCode ckpt_read_config_file(hid_t file, void *vctx)
{
  CkptConfigCtx *ctx = (CkptConfigCtx *)vctx;
  hid_t          g;

  PetscFunctionBegin;
  PetscCall(ckpt_open_group(file, ctx->path, "", ctx->role, "", &g));
  PetscCall(ckpt_read_group_config(g, ctx->path, ctx->role, ctx->cfg));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_config_task(void *vctx)
{
  CkptConfigCtx *ctx = (CkptConfigCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(ckpt_check_role(ctx->path, ctx->role));
  PetscCall(h5u_read_file("checkpoint", ctx->path, ckpt_read_config_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_config(MPI_Comm comm, const char *path, const char *role, GPTConfig *cfg)
{
  CkptConfigCtx ctx = {path, role, cfg};

  PetscFunctionBegin;
  PetscCall(h5u_rank0(comm, ckpt_read_config_task, &ctx));
  PetscCallMPI(MPI_Bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, comm));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The deck decides the architecture; a checkpoint that disagrees is an error
 * naming the option to change. */
static PetscErrorCode ckpt_config_compare(const char *path, const char *role, const GPTConfig *file, const GPTConfig *deck)
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
    PetscCheck(f[i].file == f[i].deck, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "checkpoint %s /%s: %s %d in the file, %d in the deck (-%s_%s)", path, role, f[i].name, f[i].file, f[i].deck, role, f[i].name);
  PetscCheck(file->head == deck->head, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "checkpoint %s /%s: head %s in the file, %s in the deck (-%s_head)", path, role, GPTHeadNames[file->head], GPTHeadNames[deck->head], role);
  PetscFunctionReturn(PETSC_SUCCESS);
}

typedef struct {
  const char      *path;
  const CkptModel *model;
  float           *params, *m, *v; /* host, nparams each (m, v only with_optim) */
  int64_t          step;
} CkptModelCtx;

/* Every tensor of the model's table from group `name` of loc into buf. */
static PetscErrorCode ckpt_read_tensors(hid_t loc, const char *path, const char *parent, const char *name, const GPT *gpt, PetscBool trunk_only, float *buf)
{
  char  where[PETSC_MAX_PATH_LEN + 16], full[PETSC_MAX_PATH_LEN];
  hid_t g;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s", path));
  PetscCall(ckpt_open_group(loc, path, parent, name, "", &g));
  for (int i = 0; i < gpt->ntensors; i++) {
    const GPTTensor *t       = &gpt->tensors[i];
    hsize_t          dims[2] = {(hsize_t)t->shape[0], (hsize_t)t->shape[1]};
    hid_t            d;

    if (trunk_only && strncmp(t->name, "transformer.", 12)) continue;
    PetscCall(PetscSNPrintf(full, sizeof full, "%s/%s/%s", parent, name, t->name));
    PetscCall(h5u_dataset_open(g, where, full, t->name, H5T_FLOAT, sizeof(float), t->ndim, dims, &d));
    PetscCall(h5u_dataset_read(d, where, full, H5T_NATIVE_FLOAT, buf + t->offset));
    PetscCall(h5u_close(&d));
  }
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_optim(hid_t role, CkptModelCtx *ctx)
{
  const char *r = ctx->model->role;
  char        parent[80], where[PETSC_MAX_PATH_LEN + 80];
  hid_t       g;

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(parent, sizeof parent, "/%s", r));
  PetscCall(ckpt_open_group(role, ctx->path, parent, "optim", " (saved without optimizer state)", &g));
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s /%s/optim", ctx->path, r));
  PetscCall(h5u_attr_read_int(g, where, "step", 0, INT32_MAX, &ctx->step));
  PetscCall(PetscSNPrintf(parent, sizeof parent, "/%s/optim", r));
  PetscCall(ckpt_read_tensors(g, ctx->path, parent, "m", ctx->model->gpt, PETSC_FALSE, ctx->m));
  PetscCall(ckpt_read_tensors(g, ctx->path, parent, "v", ctx->model->gpt, PETSC_FALSE, ctx->v));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_model_file(hid_t file, void *vctx)
{
  CkptModelCtx *ctx = (CkptModelCtx *)vctx;
  const char   *r   = ctx->model->role;
  GPTConfig     cfg;
  char          parent[80];
  hid_t         g;

  PetscFunctionBegin;
  PetscCall(ckpt_open_group(file, ctx->path, "", r, "", &g));
  PetscCall(ckpt_read_group_config(g, ctx->path, r, &cfg));
  if (ctx->model->trunk_only) cfg.head = ctx->model->gpt->cfg.head;
  PetscCall(ckpt_config_compare(ctx->path, r, &cfg, &ctx->model->gpt->cfg));
  PetscCall(PetscSNPrintf(parent, sizeof parent, "/%s", r));
  PetscCall(ckpt_read_tensors(g, ctx->path, parent, "params", ctx->model->gpt, ctx->model->trunk_only, ctx->params));
  if (ctx->model->with_optim) PetscCall(ckpt_read_optim(g, ctx));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_model_task(void *vctx)
{
  CkptModelCtx *ctx = (CkptModelCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(ckpt_check_role(ctx->path, ctx->model->role));
  PetscCall(h5u_read_file("checkpoint", ctx->path, ckpt_read_model_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Everything is read before anything is set, so a failed read leaves the model as it was. */
static PetscErrorCode ckpt_read_model_bcast(MPI_Comm comm, CkptModelCtx *ctx)
{
  GPT *gpt = ctx->model->gpt;

  PetscFunctionBegin;
  PetscCall(h5u_rank0(comm, ckpt_read_model_task, ctx));
  PetscCall(h5u_bcast(ctx->params, gpt->nparams, MPI_FLOAT, comm));
  if (ctx->model->with_optim) {
    PetscCall(h5u_bcast(ctx->m, gpt->nparams, MPI_FLOAT, comm));
    PetscCall(h5u_bcast(ctx->v, gpt->nparams, MPI_FLOAT, comm));
    PetscCallMPI(MPI_Bcast(&ctx->step, 1, MPI_INT64_T, 0, comm));
  }
  PetscCall(gpt_params_set(gpt, ctx->params));
  if (ctx->model->with_optim) PetscCall(gpt_optim_set(gpt, ctx->m, ctx->v, (int)ctx->step));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_model(MPI_Comm comm, const char *path, const CkptModel *model)
{
  CkptModelCtx   ctx = {path, model, NULL, NULL, NULL, 0};
  size_t         n   = model->gpt->nparams;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCheck(!(model->trunk_only && model->with_optim), PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "checkpoint %s: a trunk-only read cannot take optimizer state", path);
  PetscCall(PetscMalloc1(n, &ctx.params));
  if (model->trunk_only) PetscCall(gpt_params_get(model->gpt, ctx.params)); /* the head keeps its values */
  if (model->with_optim) PetscCall(PetscMalloc2(n, &ctx.m, n, &ctx.v));
  ierr = ckpt_read_model_bcast(comm, &ctx);
  PetscCall(PetscFree(ctx.params));
  if (model->with_optim) PetscCall(PetscFree2(ctx.m, ctx.v));
  PetscCall(ierr);
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
  PetscCall(h5u_attr_read_int(g, where, "iteration", 0, PETSC_MAX_INT, &ctx->v[0]));
  PetscCall(h5u_attr_read_int(g, where, "data_pos", 0, PETSC_MAX_INT, &ctx->v[1]));
  PetscCall(h5u_attr_read_int(g, where, "seed", 0, PETSC_MAX_INT, &ctx->v[2]));
  ctx->kl_coef = 0; /* files from before the attribute existed */
  if (H5Aexists(g, "kl_coef") > 0) PetscCall(h5u_attr_read_double(g, where, "kl_coef", &ctx->kl_coef));
  PetscCall(h5u_close(&g));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode ckpt_read_state_task(void *vctx)
{
  CkptStateCtx *ctx = (CkptStateCtx *)vctx;

  PetscFunctionBegin;
  PetscCall(h5u_read_file("checkpoint", ctx->path, ckpt_read_state_file, ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_state(MPI_Comm comm, const char *path, CkptState *st)
{
  CkptStateCtx ctx = {path, {0, 0, 0}, 0};

  PetscFunctionBegin;
  PetscCall(h5u_rank0(comm, ckpt_read_state_task, &ctx));
  PetscCallMPI(MPI_Bcast(ctx.v, 3, MPI_INT64_T, 0, comm));
  PetscCallMPI(MPI_Bcast(&ctx.kl_coef, 1, MPI_DOUBLE, 0, comm));
  st->iteration = (PetscInt)ctx.v[0];
  st->data_pos  = (PetscInt)ctx.v[1];
  st->seed      = (PetscInt)ctx.v[2];
  st->kl_coef   = ctx.kl_coef;
  PetscFunctionReturn(PETSC_SUCCESS);
}
