/* io: files that every rank of a communicator opens together (parallel
 * HDF5 over MPI-IO), for checkpoints that each rank reads and writes by
 * shard. Errors are agreed on after each collective step, so all ranks
 * leave a file together and raise the same one-line message; the atomic
 * write keeps the serial protocol (temporary, fsync, rename by rank 0). */
#include "internal/h5util.h"

#include <libgen.h>
#include <string.h>
#include <unistd.h>

hid_t h5u_fapl_comm(MPI_Comm comm, PetscBool lock)
{
  hid_t       fapl = h5u_fapl(lock);
  PetscMPIInt size;

  if (fapl < 0 || MPI_Comm_size(comm, &size) != MPI_SUCCESS) return H5I_INVALID_HID;
  /* one rank keeps HDF5's default (POSIX) driver: the serial path is unchanged */
  if (size > 1 && H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0) {
    H5Pclose(fapl);
    return H5I_INVALID_HID;
  }
  return fapl;
}

/* Collective MPI-IO (two-phase: a few aggregator ranks gather the pieces
 * and write large contiguous blocks) pays off when the ranks span nodes
 * writing to a parallel file system. Within one node every rank already
 * shares the page cache, and the several synchronisations per transfer only
 * cost: ten times slower than independent transfers on this 2-core
 * machine, where any load makes the ranks' busy-polling waits compete
 * (docs/benchmarks.md). */
static int h5u_one_node(MPI_Comm comm)
{
  MPI_Comm node;
  int      n = 0, size, one, all = 0;

  MPI_Comm_size(comm, &size);
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
  }
  one = n == size;
  sys_mpi_allreduce(&one, &all, 1, MPI_INT, MPI_MIN, comm);
  return all;
}

hid_t h5u_dxpl_comm(MPI_Comm comm, int collective)
{
  hid_t       dxpl = H5Pcreate(H5P_DATASET_XFER);
  PetscMPIInt size;

  if (dxpl < 0 || MPI_Comm_size(comm, &size) != MPI_SUCCESS) return H5I_INVALID_HID;
  if (size > 1 && collective < 0) collective = !h5u_one_node(comm);
  if (size > 1 && H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT) < 0) {
    H5Pclose(dxpl);
    return H5I_INVALID_HID;
  }
  return dxpl;
}

void h5u_agree(MPI_Comm comm, PetscErrorCode *ierr, char *msg)
{
  PetscMPIInt rank, size, root, mine;
  int         code = 0;

  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  mine = *ierr ? rank : size;
  (void)sys_mpi_allreduce(&mine, &root, 1, MPI_INT, MPI_MIN, comm);
  if (root == size) return;
  if (rank == root) {
    char *specific = NULL;

    code = (int)*ierr;
    if (!msg[0]) { /* keep a message set earlier on this rank */
      (void)PetscErrorMessage(*ierr, NULL, &specific);
      snprintf(msg, H5U_MSG_LEN, "%s", specific ? specific : "I/O failed");
    }
  }
  (void)sys_mpi_bcast(&code, 1, MPI_INT, root, comm);
  (void)sys_mpi_bcast(msg, H5U_MSG_LEN, MPI_CHAR, root, comm);
  *ierr = (PetscErrorCode)code;
}

/* "<kind> <path>: msg" unless msg names the file already. */
static PetscErrorCode h5u_par_raise(MPI_Comm comm, PetscErrorCode code, const char *kind, const char *path,
                                    const char *msg)
{
  PetscFunctionBegin;
  if (!code) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCheck(!strstr(msg, path), comm, code, "%s", msg);
  SETERRQ(comm, code, "%s %s: %s", kind, path, msg);
}

typedef struct {
  const char *kind, *path;
  char        tmp[PETSC_MAX_PATH_LEN];
  int         lock; /* rank 0: its claim on tmp (h5u_tmp_claim) */
} H5uTmpCtx;

static PetscErrorCode h5u_par_prepare(void *vctx)
{
  H5uTmpCtx *c = (H5uTmpCtx *)vctx;
  char       copy[PETSC_MAX_PATH_LEN];

  PetscFunctionBegin;
  PetscCall(io_output_ok(c->kind, c->path));
  PetscCall(PetscStrncpy(copy, c->path, sizeof copy));
  PetscCall(h5u_remove_stale_tmp(dirname(copy), NULL));
  PetscCall(h5u_tmp_name(c->path, c->tmp, sizeof c->tmp));
  PetscCall(h5u_tmp_claim(c->tmp, &c->lock));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode h5u_par_create(MPI_Comm comm, const char *kind, const char *path, const char *tmp, hid_t *file)
{
  hid_t fapl = h5u_fapl_comm(comm, PETSC_TRUE);
  char  hmsg[H5U_MSG_LEN];

  PetscFunctionBegin;
  *file = H5I_INVALID_HID;
  PetscCheck(fapl >= 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "%s %s: cannot create HDF5 file access properties", kind, path);
  *file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (*file < 0) h5u_write_reason(hmsg);
  H5Pclose(fapl);
  PetscCheck(*file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: cannot create %s: %s", kind, path, tmp, hmsg);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode h5u_write_atomic_comm(MPI_Comm comm, const char *kind, const char *path, H5uFillComm fill, void *ctx)
{
  PetscFunctionBegin;
  PetscCall(h5u_write_atomic_comm_post(comm, kind, path, fill, ctx, NULL, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* post: on rank 0, the closed temporary reopened serially (read-write) before it is renamed. */
static PetscErrorCode h5u_post_serial(const char *tmp, IoFileFn post, void *ctx, char *msg)
{
  hid_t          fapl = h5u_fapl(PETSC_FALSE), file = H5I_INVALID_HID;
  PetscErrorCode ierr;

  file = fapl >= 0 ? H5Fopen(tmp, H5F_ACC_RDWR, fapl) : H5I_INVALID_HID;
  if (fapl >= 0) H5Pclose(fapl);
  if (file < 0) {
    snprintf(msg, H5U_MSG_LEN, "cannot reopen %s to finish it", tmp);
    return PETSC_ERR_FILE_WRITE;
  }
  ierr = post(file, ctx);
  if (h5u_fclose(file) < 0 && !ierr) {
    snprintf(msg, H5U_MSG_LEN, "closing %s failed", tmp);
    ierr = PETSC_ERR_FILE_WRITE;
  }
  return ierr;
}

PetscErrorCode h5u_write_atomic_comm_post(MPI_Comm comm, const char *kind, const char *path, H5uFillComm fill,
                                          void *ctx, IoFileFn post, void *post_ctx)
{
  H5uTmpCtx      c = {kind, path, "", -1};
  hid_t          file = H5I_INVALID_HID;
  PetscMPIInt    rank;
  PetscErrorCode ierr;
  char           msg[H5U_MSG_LEN] = "";

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCall(io_on_root(comm, h5u_par_prepare, &c));
  PetscCallMPI(sys_mpi_bcast(c.tmp, (int)sizeof c.tmp, MPI_CHAR, 0, comm));
  /* silently: the agreed error is raised once below */
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  ierr = h5u_par_create(comm, kind, path, c.tmp, &file);
  h5u_agree(comm, &ierr, msg);
  if (!ierr) {
    ierr = fill(file, comm, ctx, msg);
    h5u_agree(comm, &ierr, msg);
  }
  if (file >= 0) { /* collective; a failed close counts as a failed write */
    char why[H5U_MSG_LEN];
    if (h5u_fclose(file) < 0 && !ierr) {
      ierr = PETSC_ERR_FILE_WRITE;
      snprintf(msg, sizeof msg, "closing %s failed: %s", c.tmp, h5u_write_reason(why));
    }
    h5u_agree(comm, &ierr, msg);
  }
  if (!ierr && rank == 0 && post) ierr = h5u_post_serial(c.tmp, post, post_ctx, msg);
  h5u_agree(comm, &ierr, msg);
  if (!ierr && rank == 0) ierr = h5u_sync_rename(kind, c.tmp, path);
  h5u_agree(comm, &ierr, msg);
  if (ierr && rank == 0) unlink(c.tmp);
  if (rank == 0) h5u_tmp_release(c.tmp, c.lock);
  PetscCall(PetscPopErrorHandler());
  PetscCall(h5u_par_raise(comm, ierr, kind, path, msg));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode h5u_read_comm(MPI_Comm comm, const char *kind, const char *path, H5uFillComm read, void *ctx)
{
  hid_t          fapl, file = H5I_INVALID_HID;
  PetscErrorCode ierr = PETSC_SUCCESS;
  char           msg[H5U_MSG_LEN] = "";

  PetscFunctionBegin;
  PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
  fapl = h5u_fapl_comm(comm, PETSC_TRUE);
  if (fapl >= 0) file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  if (fapl >= 0) H5Pclose(fapl);
  if (file < 0) {
    ierr = PETSC_ERR_FILE_READ;
    snprintf(msg, sizeof msg, "cannot open the file on every rank (MPI-IO)");
  }
  h5u_agree(comm, &ierr, msg);
  if (!ierr) {
    ierr = read(file, comm, ctx, msg);
    h5u_agree(comm, &ierr, msg);
  }
  if (file >= 0) h5u_fclose(file);
  PetscCall(PetscPopErrorHandler());
  PetscCall(h5u_par_raise(comm, ierr, kind, path, msg));
  PetscFunctionReturn(PETSC_SUCCESS);
}
