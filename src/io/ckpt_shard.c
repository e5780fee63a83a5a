/* io: a checkpoint read or written by shard. A rank's shard of a tensor is
 * a set of rows or columns of the full (logical) dataset: tensor
 * parallelism cuts the split dimension into `groups` blocks (q|k|v) and
 * gives rank t piece t of each (k and v beyond n_kv_head pieces: piece
 * t/rep, written by the first rank of each block of rep). Its local buffer lists those elements in
 * the dataset's row-major order, so any contiguous range of the local
 * buffer is a union of at most three rectangles, each a few hyperslab
 * blocks of the file, and HDF5 transfers them in that same order. That is
 * what lets the dp replicas split a shard by flat range (as ZeRO-1 splits
 * the moments) and every transfer go through a bounded buffer. */
#include "internal/ckpt_shard.h"

#include <math.h>
#include <string.h>

size_t ckpt_chunk      = (size_t)1 << 22;
int    ckpt_collective = -1;

/* ---- which elements ------------------------------------------------------ */

/* Local rows [r0, r1) x columns [c0, c1) of tensor i, added to the
 * selection of space (1-D tensors: columns [0, 1)). */
static herr_t ckpt_select_rect(hid_t space, const CkptPlace *pl, int i, size_t r0, size_t r1, size_t c0, size_t c1,
                               PetscBool *first)
{
  const ModelTensor *f = &pl->full[i];
  int              s = pl->tp > 1 ? f->split : -1;
  size_t           x0 = s == 1 ? c0 : r0, x1 = s == 1 ? c1 : r1, block = 0, piece = 1;
  int              ngroups = 1;

  if (s >= 0) {
    block   = (size_t)f->gshape[s] / (size_t)f->groups;
    piece   = block / (size_t)model_tensor_pieces(f, pl->tp);
    ngroups = f->groups;
  }
  for (int g = 0; g < ngroups; g++) {
    hsize_t start[2] = {r0, c0}, count[2] = {r1 - r0, c1 - c0};
    size_t  lo = x0, hi = x1;

    if (s >= 0) { /* group g's piece: local [g*piece, (g+1)*piece) */
      lo = PetscMax(x0, g * piece);
      hi = PetscMin(x1, (g + 1) * piece);
      if (lo >= hi) continue;
      start[s] = g * block + (size_t)model_tensor_piece_of(f, pl->tp, pl->t) * piece + (lo - g * piece);
      count[s] = hi - lo;
    }
    if (H5Sselect_hyperslab(space, *first ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, count, NULL) < 0) return -1;
    *first = PETSC_FALSE;
  }
  return 0;
}

/* Local elements [a, b) of tensor i: a partial first row, whole rows, a
 * partial last row. */
static herr_t ckpt_select(hid_t space, const CkptPlace *pl, int i, size_t a, size_t b)
{
  const ModelTensor *m     = &pl->mine[i];
  size_t           C     = m->ndim == 2 ? (size_t)m->shape[1] : 1;
  size_t           ra    = a / C, ca = a % C, rb = b / C, cb = b % C;
  PetscBool        first = PETSC_TRUE;

  if (ra == rb) return ckpt_select_rect(space, pl, i, ra, ra + 1, ca, cb, &first);
  if (ca > 0) {
    if (ckpt_select_rect(space, pl, i, ra, ra + 1, ca, C, &first) < 0) return -1;
    ra++;
  }
  if (rb > ra && ckpt_select_rect(space, pl, i, ra, rb, 0, C, &first) < 0) return -1;
  if (cb > 0 && ckpt_select_rect(space, pl, i, rb, rb + 1, 0, cb, &first) < 0) return -1;
  return 0;
}

/* This rank's local elements [lo, hi) of tensor i. */
static void ckpt_segment(const CkptPlace *pl, int i, size_t *lo, size_t *hi)
{
  const ModelTensor *m = pl->mine ? &pl->mine[i] : NULL;
  size_t           a, b;

  *lo = *hi = 0;
  if (!m || m->numel == 0) return;
  if (pl->write && m->split < 0 && pl->t != 0) return;               /* tp rank 0 writes replicated tensors */
  if (pl->write && pl->t % model_tensor_rep(m, pl->tp) != 0) return; /* a block's first rank its replicated k/v piece */
  if (pl->write && pl->p != 0 && i == MODEL_T_WTE) return; /* the tied LM head's copy (the embedding is tensor 0) */
  a = PetscMax(m->offset, pl->own0);
  b = PetscMin(m->offset + m->numel, pl->own1);
  if (a < b) *lo = a - m->offset, *hi = b - m->offset;
}

/* ---- setup --------------------------------------------------------------- */

static PetscErrorCode ckpt_place_holder(MPI_Comm comm, const CkptModel *cm, const CkptWhere *w, CkptPlace *pl,
                                        PetscBool *holds)
{
  Model      *g = cm->lm;
  PetscMPIInt rank, size, whole, lowest;
  ModelShard  sh;
  size_t      n;
  int         dp = 1, d = 0, nt;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  /* a whole model (no mesh) is written by the lowest rank that has one */
  whole = g && !g->mesh ? rank : size;
  PetscCallMPI(sys_mpi_allreduce(&whole, &lowest, 1, MPI_INT, MPI_MIN, comm));
  *holds = PETSC_FALSE;
  if (g && (g->mesh || !pl->write || rank == lowest)) {
    pl->mine = g->tensors;
    pl->tp = g->sh.tp, pl->t = g->sh.t, pl->p = g->sh.p;
    pl->params = g->params, pl->m = g->m, pl->v = g->v, pl->be = g->be;
    pl->zero1  = g->dist.zero1;
    pl->m0     = g->dist.zero1 ? g->own0 : 0;
    n          = g->nparams;
    if (g->mesh) dp = g->mesh->dp, d = g->mesh->d;
    if (dp > 1) pl->dp_comm = &g->mesh->dp_comm;
    *holds = PETSC_TRUE;
  } else if (!g && w->mesh && w->mesh->me >= 0 && w->host && pl->write) {
    model_shard_of_mesh(&pl->cfg, w->mesh, &sh);
    PetscCall(model_tensor_table_shard(&pl->cfg, &sh, &pl->mine, &nt, &n));
    pl->own_table = PETSC_TRUE;
    pl->tp = sh.tp, pl->t = sh.t, pl->p = sh.p;
    pl->params = (float *)w->host;
    dp = w->mesh->dp, d = w->mesh->d;
    *holds = PETSC_TRUE;
  } else PetscFunctionReturn(PETSC_SUCCESS);
  pl->n = n;
  comm_own_range(n, d, dp, &pl->own0, &pl->own1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_place_setup(MPI_Comm comm, const CkptModel *cm, const CkptWhere *where, PetscBool write,
                                CkptPlace *pl)
{
  const CkptWhere none = {NULL, NULL, NULL}, *w = where ? where : &none;
  PetscMPIInt rank, size, root, have, step_root;
  size_t      n;
  PetscBool   holds;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(pl, sizeof *pl));
  pl->write = write;
  pl->role  = cm->role;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  have = cm->lm || w->cfg ? rank : size;
  PetscCallMPI(sys_mpi_allreduce(&have, &root, 1, MPI_INT, MPI_MIN, comm));
  PetscCheck(root < size, comm, PETSC_ERR_ARG_NULL, "checkpoint: no rank has /%s's configuration", cm->role);
  if (rank == root) pl->cfg = cm->lm ? cm->lm->cfg : *w->cfg;
  PetscCallMPI(sys_mpi_bcast(&pl->cfg, (int)sizeof pl->cfg, MPI_BYTE, root, comm));
  PetscCall(model_tensor_table(&pl->cfg, &pl->full, &pl->nfull, &n));
  PetscCall(ckpt_place_holder(comm, cm, w, pl, &holds));
  if (write && cm->with_optim) { /* the step every rank writes as the attribute */
    have = holds && cm->lm ? rank : size;
    PetscCallMPI(sys_mpi_allreduce(&have, &step_root, 1, MPI_INT, MPI_MIN, comm));
    if (step_root < size) {
      if (rank == step_root) pl->step = cm->lm->step;
      PetscCallMPI(sys_mpi_bcast(&pl->step, 1, MPI_INT64_T, step_root, comm));
    }
  }
  PetscCall(PetscMalloc1(pl->nfull, &pl->rounds));
  for (int i = 0; i < pl->nfull; i++) {
    size_t lo, hi;
    ckpt_segment(pl, i, &lo, &hi);
    pl->rounds[i] = (int)((hi - lo + ckpt_chunk - 1) / ckpt_chunk);
  }
  PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, pl->rounds, pl->nfull, MPI_INT, MPI_MAX, comm));
  /* local checks last, after every collective call of the setup */
  PetscCheck(holds || !w->mesh || w->mesh->me < 0, PETSC_COMM_SELF, PETSC_ERR_ORDER,
             "/%s was dropped on this rank; its parameters are gone", cm->role);
  PetscCheck(!holds || !cm->with_optim || cm->lm, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
             "/%s is offloaded and has no optimizer state", cm->role);
  if (holds && cm->with_optim && write)
    PetscCheck(pl->m && pl->v, PETSC_COMM_SELF, PETSC_ERR_ORDER,
               "/%s has no optimizer state to write (model_optim_init)", cm->role);
  if (holds && cm->with_optim && !write && (!pl->m || !pl->v)) {
    PetscCall(model_optim_init(cm->lm));
    pl->m = cm->lm->m, pl->v = cm->lm->v;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_place_destroy(CkptPlace *pl)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(pl->full));
  if (pl->own_table) PetscCall(PetscFree(pl->mine));
  PetscCall(PetscFree(pl->rounds));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- transfers ----------------------------------------------------------- */

static PetscErrorCode ckpt_copy(const CkptPlace *pl, PetscBool to_host, float *host, float *dev, size_t n)
{
  PetscFunctionBegin;
  if (!n) PetscFunctionReturn(PETSC_SUCCESS);
  if (!pl->be) {
    if (to_host) PetscCall(PetscArraycpy(host, dev, n));
    else PetscCall(PetscArraycpy(dev, host, n));
  } else if (to_host) PetscCall(pl->be->to_host(host, dev, n * sizeof(float)));
  else PetscCall(pl->be->from_host(dev, host, n * sizeof(float)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Local element k of tensor i as its [row, column] in the file's dataset
 * (the inverse of ckpt_select_rect's mapping); 1-D tensors: column 0. */
static void ckpt_file_index(const CkptPlace *pl, int i, size_t k, size_t *row, size_t *col)
{
  const ModelTensor *f = &pl->full[i], *m = &pl->mine[i];
  size_t           C = m->ndim == 2 ? (size_t)m->shape[1] : 1, x[2] = {k / C, k % C};
  int              s = pl->tp > 1 ? f->split : -1;

  if (s >= 0) {
    size_t block = (size_t)f->gshape[s] / (size_t)f->groups, piece = block / (size_t)model_tensor_pieces(f, pl->tp),
           g     = x[s] / piece;
    x[s]         = g * block + (size_t)model_tensor_piece_of(f, pl->tp, pl->t) * piece + x[s] % piece;
  }
  *row = m->ndim == 2 ? x[0] : k, *col = m->ndim == 2 ? x[1] : 0;
}

/* A NaN or Inf read from a file would surface as a non-finite loss at step
 * 0 naming neither file nor tensor: name them and the element here. So
 * would a negative AdamW second moment, a few steps later (its square root
 * is NaN once the decayed moment stays below zero). */
static PetscErrorCode ckpt_check_finite(const CkptPlace *pl, int i, int which, const float *buf, size_t a, size_t b)
{
  static const char *const what[] = {"params", "optim/m", "optim/v"};
  const ModelTensor       *f      = &pl->full[i];
  size_t                   row, col;

  PetscFunctionBegin;
  for (size_t j = 0; j < b - a; j++) {
    if (isfinite(buf[j]) && (which != 2 || buf[j] >= 0)) continue;
    ckpt_file_index(pl, i, a + j, &row, &col);
    if (isfinite(buf[j])) { /* a negative second moment */
      if (f->ndim == 2)
        SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
                "/%s/%s/%s holds %g at [%zu, %zu] (flat index %zu): AdamW's second moments must be >= 0", pl->role,
                what[which], f->name, (double)buf[j], row, col, row * (size_t)f->gshape[1] + col);
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
              "/%s/%s/%s holds %g at [%zu]: AdamW's second moments must be >= 0", pl->role, what[which], f->name,
              (double)buf[j], row);
    }
    if (f->ndim == 2)
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FP,
              "/%s/%s/%s holds %s at [%zu, %zu] (flat index %zu): a checkpoint's values must be finite", pl->role,
              what[which], f->name, isnan(buf[j]) ? "NaN" : "Inf", row, col, row * (size_t)f->gshape[1] + col);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FP, "/%s/%s/%s holds %s at [%zu]: a checkpoint's values must be finite",
            pl->role, what[which], f->name, isnan(buf[j]) ? "NaN" : "Inf", row);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* One collective transfer of local elements [a, b) (possibly none). */
static PetscErrorCode ckpt_xfer_one(const CkptPlace *pl, int i, int which, float *base, hid_t dset, hid_t dxpl,
                                    size_t a, size_t b, float *buf)
{
  const ModelTensor *f  = &pl->full[i];
  hsize_t          nm = b > a ? b - a : 1;
  hid_t            fs, ms;
  herr_t           e;
  float           *at = b > a ? base + pl->mine[i].offset + a : NULL;
  char             why[H5U_MSG_LEN];
  PetscErrorCode   bad = PETSC_SUCCESS;

  PetscFunctionBegin;
  fs = H5Dget_space(dset);
  ms = H5Screate_simple(1, &nm, NULL);
  e  = fs < 0 || ms < 0 ? -1 : 0;
  if (!e) e = b > a ? ckpt_select(fs, pl, i, a, b) : H5Sselect_none(fs);
  if (!e && b <= a) e = H5Sselect_none(ms);
  if (!e && pl->write) {
    if (b > a) PetscCall(ckpt_copy(pl, PETSC_TRUE, buf, at, b - a));
    e = H5Dwrite(dset, H5T_NATIVE_FLOAT, ms, fs, dxpl, buf);
    if (e < 0) h5u_write_reason(why);
  } else if (!e) {
    e = H5Dread(dset, H5T_NATIVE_FLOAT, ms, fs, dxpl, buf);
    if (e < 0) snprintf(why, sizeof why, "HDF5 read failed (truncated or corrupt file?)");
    if (e >= 0 && b > a) bad = ckpt_check_finite(pl, i, which, buf, a, b);
    if (e >= 0 && b > a && !bad) PetscCall(ckpt_copy(pl, PETSC_FALSE, buf, at, b - a));
  } else snprintf(why, sizeof why, "HDF5: cannot select the shard's elements");
  if (fs >= 0) H5Sclose(fs);
  if (ms >= 0) H5Sclose(ms);
  PetscCall(bad);
  PetscCheck(e >= 0, PETSC_COMM_SELF, pl->write ? PETSC_ERR_FILE_WRITE : PETSC_ERR_FILE_READ,
             "%s dataset %s failed: %s", pl->write ? "writing" : "reading", f->name, why);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_place_xfer(const CkptPlace *pl, int i, int which, hid_t dset, hid_t dxpl, float *buf)
{
  float         *base = which == 0 ? pl->params : which == 1 ? pl->m - pl->m0 : pl->v - pl->m0;
  size_t         lo, hi;
  PetscErrorCode first = PETSC_SUCCESS;

  PetscFunctionBegin;
  ckpt_segment(pl, i, &lo, &hi);
  for (int r = 0; r < pl->rounds[i]; r++) {
    size_t         a = PetscMin(hi, lo + (size_t)r * ckpt_chunk), b = PetscMin(hi, a + ckpt_chunk);
    PetscErrorCode e = ckpt_xfer_one(pl, i, which, base, dset, dxpl, a, b, buf);

    if (e && !first) first = e; /* the other ranks still expect this rank's later transfers */
  }
  PetscCall(first);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_place_share(CkptPlace *pl, PetscBool optim)
{
  PetscFunctionBegin;
  if (!pl->dp_comm) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(comm_allgather_ranges(pl->dp_comm, pl->params, pl->n));
  if (optim && !pl->zero1) { /* without ZeRO-1 every replica keeps all moments */
    PetscCall(comm_allgather_ranges(pl->dp_comm, pl->m, pl->n));
    PetscCall(comm_allgather_ranges(pl->dp_comm, pl->v, pl->n));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
