/* reward: the token table (each token's bytes), which turns a response's
 * tokens back into text for the rule functions and the reward command.
 * Read from a checkpoint's /tokenizer (docs/formats.md) on rank 0, checked
 * there, then broadcast; or built from a built-in task's vocabulary. */
#include "reward.h"
#include "io.h"

#include <limits.h>
#include <string.h>

typedef struct {
  const char *path;
  TokenTable *tt;
  PetscBool   found;
  IoId        g, dbytes, doff, dtype; /* closed by table_read_file whatever happened */
} TableCtx;

/* V+1 offsets from 0, never falling, ending at the byte count. */
static PetscErrorCode table_check_offsets(const char *where, const int64_t *off, int V, int64_t total)
{
  PetscFunctionBegin;
  PetscCheck(off[0] == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer/token_offsets[0] = %lld, expected 0", where, (long long)off[0]);
  for (int i = 0; i < V; i++)
    PetscCheck(off[i + 1] >= off[i] && off[i + 1] <= total, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: /tokenizer/token_offsets[%d] = %lld is outside [token_offsets[%d] = %lld, %lld (the size of "
               "/tokenizer/token_bytes)]",
               where, i + 1, (long long)off[i + 1], i, (long long)off[i], (long long)total);
  PetscCheck(off[V] == total, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer/token_offsets ends at %lld, but /tokenizer/token_bytes holds %lld bytes", where,
             (long long)off[V], (long long)total);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The group's datasets and attribute into ctx->tt (handles left in ctx). */
static PetscErrorCode table_read_group(IoId file, TableCtx *ctx)
{
  TokenTable *tt = ctx->tt;
  char        where[PETSC_MAX_PATH_LEN + 16], gwhere[PETSC_MAX_PATH_LEN + 32];
  IoSize      no[1] = {0}, nb[1] = {0}, nt[1] = {0};
  int64_t     eos;

  PetscFunctionBegin;
  ctx->found = io_exists(file, "tokenizer");
  if (!ctx->found) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(PetscSNPrintf(where, sizeof where, "checkpoint %s", ctx->path));
  PetscCall(PetscSNPrintf(gwhere, sizeof gwhere, "checkpoint %s /tokenizer", ctx->path));
  PetscCheck(io_is_group(file, "tokenizer"), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer is not a group", where);
  PetscCall(io_group_open(file, where, "/tokenizer", &ctx->g));
  PetscCall(
      io_dataset_open(ctx->g, where, "/tokenizer/token_offsets", "token_offsets", IO_CLASS_INT, 0, 1, no, &ctx->doff));
  PetscCheck(no[0] >= 2 && no[0] <= (IoSize)INT_MAX, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer/token_offsets has %llu entries, expected V+1 for a vocabulary of V >= 1 tokens", where,
             (unsigned long long)no[0]);
  tt->V = (int)(no[0] - 1);
  /* token_type [V] is optional here, but when present it says what V is */
  if (io_exists(ctx->g, "token_type")) {
    PetscCall(
        io_dataset_open(ctx->g, where, "/tokenizer/token_type", "token_type", IO_CLASS_INT, 0, 1, nt, &ctx->dtype));
    PetscCheck(nt[0] == (IoSize)tt->V, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
               "%s: /tokenizer/token_offsets has %llu entries, expected %llu (the tokens of /tokenizer/token_type plus "
               "one)",
               where, (unsigned long long)no[0], (unsigned long long)nt[0] + 1);
  }
  PetscCall(
      io_dataset_open(ctx->g, where, "/tokenizer/token_bytes", "token_bytes", IO_CLASS_INT, 1, 1, nb, &ctx->dbytes));
  PetscCheck(nb[0] < (IoSize)INT64_MAX, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: /tokenizer/token_bytes is too large", where);
  PetscCall(io_attr_read_int(ctx->g, gwhere, "eos_id", -1, tt->V - 1, &eos));
  tt->eos_id = (int)eos;
  PetscCall(PetscMalloc1((size_t)tt->V + 1, &tt->off));
  PetscCall(PetscMalloc1((size_t)nb[0] + 1, &tt->bytes));
  PetscCall(io_dataset_read(ctx->doff, where, "/tokenizer/token_offsets", IO_INT64, tt->off));
  if (nb[0]) PetscCall(io_dataset_read(ctx->dbytes, where, "/tokenizer/token_bytes", IO_UCHAR, tt->bytes));
  PetscCall(table_check_offsets(where, tt->off, tt->V, (int64_t)nb[0]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode table_read_file(IoId file, void *vctx)
{
  TableCtx      *ctx = (TableCtx *)vctx;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  ierr = table_read_group(file, ctx);
  PetscCall(io_close(&ctx->dtype));
  PetscCall(io_close(&ctx->dbytes));
  PetscCall(io_close(&ctx->doff));
  PetscCall(io_close(&ctx->g));
  PetscCall(ierr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode token_table_read(MPI_Comm comm, const char *path, TokenTable *tt, PetscBool *found)
{
  TableCtx       ctx = {path, tt, PETSC_FALSE, IO_NONE, IO_NONE, IO_NONE, IO_NONE};
  PetscMPIInt    rank;
  PetscErrorCode ierr;
  int64_t        hdr[4];

  PetscFunctionBegin;
  PetscCall(PetscMemzero(tt, sizeof *tt));
  *found = PETSC_FALSE;
  ierr   = io_read_on_root(comm, "checkpoint", path, table_read_file, &ctx);
  if (ierr) PetscCall(token_table_destroy(tt));
  PetscCall(ierr);
  hdr[0] = ctx.found;
  hdr[1] = tt->V;
  hdr[2] = tt->eos_id;
  hdr[3] = tt->off ? tt->off[tt->V] : 0;
  PetscCallMPI(sys_mpi_bcast(hdr, 4, MPI_INT64_T, 0, comm));
  if (!hdr[0]) {
    PetscCall(token_table_destroy(tt));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  if (rank) {
    tt->V      = (int)hdr[1];
    tt->eos_id = (int)hdr[2];
    PetscCall(PetscMalloc1((size_t)tt->V + 1, &tt->off));
    PetscCall(PetscMalloc1((size_t)hdr[3] + 1, &tt->bytes));
  }
  PetscCall(io_bcast(tt->off, (size_t)tt->V + 1, MPI_INT64_T, comm));
  PetscCall(io_bcast(tt->bytes, (size_t)hdr[3], MPI_UNSIGNED_CHAR, comm));
  *found = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode token_table_from_strings(int V, const char *const *tok, int eos_id, TokenTable *tt)
{
  size_t total = 0;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(tt, sizeof *tt));
  PetscCheck(V >= 0 && eos_id >= -1 && eos_id < V, PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "token table: eos_id %d is outside [-1, %d) (the %d tokens)", eos_id, V, V);
  for (int i = 0; i < V; i++) total += tok && tok[i] ? strlen(tok[i]) : 0;
  tt->V      = V;
  tt->eos_id = eos_id;
  PetscCall(PetscMalloc1((size_t)V + 1, &tt->off));
  PetscCall(PetscMalloc1(total + 1, &tt->bytes));
  tt->off[0] = 0;
  for (int i = 0; i < V; i++) {
    size_t len = tok && tok[i] ? strlen(tok[i]) : 0;

    if (len) PetscCall(PetscArraycpy(tt->bytes + tt->off[i], (const unsigned char *)tok[i], len));
    tt->off[i + 1] = tt->off[i] + (int64_t)len;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode token_table_destroy(TokenTable *tt)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(tt->off));
  PetscCall(PetscFree(tt->bytes));
  PetscCall(PetscMemzero(tt, sizeof *tt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The text's length is found first, so the buffer grows at most once per
 * call. Should growing it fail (out of memory), the text is cut to what the
 * old buffer holds rather than lost. */
size_t token_table_decode(const TokenTable *tt, const int *tok, int n, char **buf, size_t *cap)
{
  size_t len = 0, k = 0;
  int    end = 0;

  if (!*buf) *cap = 0;
  for (; tok && end < n; end++) {
    int t = tok[end];

    if (tt->eos_id >= 0 && t == tt->eos_id) break;
    if (t >= 0 && t < tt->V) len += (size_t)(tt->off[t + 1] - tt->off[t]);
  }
  if (!*buf || len + 1 > *cap) {
    size_t want = len + 1 > 2 * *cap ? len + 1 : 2 * *cap;

    if (PetscRealloc(want, buf) == PETSC_SUCCESS && *buf) *cap = want;
    else if (!*buf || !*cap) return 0;
    else len = *cap - 1;
  }
  for (int i = 0; i < end && k < len; i++) {
    int    t = tok[i];
    size_t m;

    if (t < 0 || t >= tt->V) continue;
    m = (size_t)(tt->off[t + 1] - tt->off[t]);
    if (m > len - k) m = len - k;
    memcpy(*buf + k, tt->bytes + tt->off[t], m);
    k += m;
  }
  (*buf)[len] = '\0';
  return len;
}
