/* io/ckpt_stops.c: the token ids that end a response by a checkpoint's
 * /tokenizer (docs/formats.md "The tokenizer group"): @eos_id and the
 * optional stop_ids dataset (tools/hf_import.py writes it; GGUF imports have
 * @eos_id alone). Generation takes them when the deck gives neither -gen_eos
 * nor -gen_stop (gen/config.c), so the model stops where its tokenizer says. */
#include "io.h"

#define STOPS_MAX 64

typedef struct {
  const char *path;
  int64_t     found, eos, nstop;
  int         stop[STOPS_MAX];
} StopsCtx;

static PetscErrorCode stops_read_group(IoId g, const char *where, StopsCtx *c)
{
  IoId   doff = IO_NONE, dstop = IO_NONE;
  IoSize no[1] = {0}, ns[1] = {0};
  char   gwhere[PETSC_MAX_PATH_LEN + 32];

  PetscFunctionBegin;
  PetscCall(PetscSNPrintf(gwhere, sizeof gwhere, "%s /tokenizer", where));
  PetscCall(io_dataset_open(g, where, "/tokenizer/token_offsets", "token_offsets", IO_CLASS_INT, 0, 1, no, &doff));
  PetscCall(io_close(&doff));
  PetscCheck(no[0] >= 2, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer/token_offsets has %llu entries, expected V+1 for a vocabulary of V >= 1 tokens", where,
             (unsigned long long)no[0]);
  PetscCall(io_attr_read_int(g, gwhere, "eos_id", -1, (int64_t)no[0] - 2, &c->eos));
  if (!io_exists(g, "stop_ids")) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(io_dataset_open(g, where, "/tokenizer/stop_ids", "stop_ids", IO_CLASS_INT, 0, 1, ns, &dstop));
  if (ns[0] > STOPS_MAX) PetscCall(io_close(&dstop));
  PetscCheck(ns[0] <= STOPS_MAX, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer/stop_ids has %llu entries, at most %d", where, (unsigned long long)ns[0], STOPS_MAX);
  if (ns[0]) {
    PetscErrorCode ierr = io_dataset_read(dstop, where, "/tokenizer/stop_ids", IO_INT, c->stop);
    PetscCall(io_close(&dstop));
    PetscCall(ierr);
  } else PetscCall(io_close(&dstop));
  c->nstop = (int64_t)ns[0];
  for (int i = 0; i < (int)c->nstop; i++)
    PetscCheck(c->stop[i] >= 0 && (IoSize)c->stop[i] < no[0] - 1, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: /tokenizer/stop_ids[%d] = %d is not one of the %llu tokens", where, i, c->stop[i],
               (unsigned long long)no[0] - 1);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode stops_read_file(IoId file, void *vctx)
{
  StopsCtx      *c = (StopsCtx *)vctx;
  IoId           g = IO_NONE;
  char           where[PETSC_MAX_PATH_LEN + 16];
  PetscErrorCode ierr;

  PetscFunctionBegin;
  c->found = io_exists(file, "tokenizer");
  if (!c->found) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s", c->path));
  PetscCheck(io_is_group(file, "tokenizer"), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer is not a group", where);
  PetscCall(io_group_open(file, where, "/tokenizer", &g));
  ierr = stops_read_group(g, where, c);
  PetscCall(io_close(&g));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ckpt_read_stops(MPI_Comm comm, const char *path, int max, int *eos, int *stop, int *nstop,
                               PetscBool *found)
{
  StopsCtx c;
  int64_t  buf[3 + STOPS_MAX];

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&c, sizeof c));
  c.path = path;
  c.eos  = -1;
  PetscCall(io_read_on_root(comm, "checkpoint", path, stops_read_file, &c));
  buf[0] = c.found, buf[1] = c.eos, buf[2] = c.nstop;
  for (int i = 0; i < STOPS_MAX; i++) buf[3 + i] = c.stop[i];
  PetscCallMPI(sys_mpi_bcast(buf, 3 + STOPS_MAX, MPI_INT64_T, 0, comm));
  *found = buf[0] ? PETSC_TRUE : PETSC_FALSE;
  *eos   = (int)buf[1];
  *nstop = 0;
  for (int i = 0; i < (int)buf[2]; i++) { /* the stop tokens less EOS, as many as the caller holds */
    PetscCheck(*nstop < max || (int)buf[3 + i] == *eos, comm, PETSC_ERR_SUP,
               "checkpoint %s: /tokenizer/stop_ids holds more than %d stop tokens besides EOS", path, max);
    if ((int)buf[3 + i] != *eos) stop[(*nstop)++] = (int)buf[3 + i];
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
