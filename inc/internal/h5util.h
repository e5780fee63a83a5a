/* io private helpers: opening files for reading with one clear message per
 * failure, attribute and dataset helpers that check types and shapes, the
 * write-to-temporary-then-rename protocol, and the "rank 0 does the I/O, every
 * rank learns the outcome" pattern shared by all io entry points. */
#ifndef RLFUSE_IO_H5UTIL_H
#define RLFUSE_IO_H5UTIL_H

#include <hdf5.h>
#include "io.h"

#ifndef RLFUSE_GIT
  #define RLFUSE_GIT "unknown"
#endif
#ifndef RLFUSE_CC
  #define RLFUSE_CC "unknown"
#endif
#ifndef RLFUSE_CFLAGS
  #define RLFUSE_CFLAGS "unknown"
#endif

/* Longest error message carried from rank 0 to the other ranks. */
#define H5U_MSG_LEN 1024

/* Why the HDF5 write call that just failed failed, for messages: "no space
 * left on device" when the error stack or errno says so, else HDF5's
 * innermost description. buf has H5U_MSG_LEN bytes. Call before any other
 * HDF5 call (which clears the error stack). */
const char *h5u_write_reason(char *buf);
/* H5Call for calls that write (write, flush, close): the message ends with
 * ": <reason>". */
#define H5CallWrite(expr, fmt, ...)                                                                              \
  do {                                                                                                           \
    if ((expr) < 0) {                                                                                            \
      char why_[H5U_MSG_LEN];                                                                                    \
      SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, fmt ": %s", ##__VA_ARGS__, h5u_write_reason(why_));         \
    }                                                                                                            \
  } while (0)

/* File access properties used for every file: HDF5's flock is kept where the
 * file system supports it and skipped where it does not (NFS, some Lustre
 * mounts), instead of failing with "unable to lock file". Caller closes. */
hid_t h5u_fapl(PetscBool lock);

/* After group `group` was written into an open file (written: the write's
 * result): flushed unless the write failed, then closed; a failed flush is
 * the error, naming path and group. */
PetscErrorCode h5u_flush_close(hid_t *file, const char *path, const char *group, PetscErrorCode written);
/* H5Fclose for every file rlfuse opens: remembers a failed close (a full
 * disk), after which the error exit must not let HDF5 shut down. */
herr_t h5u_fclose(hid_t file);

/* The temporary a write of path goes to: "<path>.tmp.<host>.<pid>". */
PetscErrorCode h5u_tmp_name(const char *path, char *tmp, size_t len);
/* A writer holds flock(LOCK_EX) on "<tmp>.lock" from before it creates tmp
 * until tmp is renamed or removed: h5u_tmp_claim creates and locks it (fd),
 * h5u_tmp_release removes and unlocks it. */
PetscErrorCode h5u_tmp_claim(const char *tmp, int *fd);
void           h5u_tmp_release(const char *tmp, int fd);
/* Removes the temporaries in dir that processes of this host left when they
 * were killed: "*.tmp.<host>.<pid>" (and its ".lock") with this host's name
 * whose lock no process holds. A PID is not trusted: a killed writer's PID
 * may have been reused. Temporaries whose writer is alive and those of other
 * hosts (a shared file system) are left alone. */
PetscErrorCode h5u_remove_stale_tmp(const char *dir, int *nremoved);

/* After the temporary is closed: data first, then the name: fsync it,
 * rename it over path, fsync the directory so the rename itself survives a
 * power loss. */
PetscErrorCode h5u_sync_rename(const char *kind, const char *tmp, const char *path);
/* The same without PETSc's errors, for the error-exit hooks: 0, or -1. */
int h5u_sync_rename_quiet(const char *tmp, const char *path);

/* A byte copy of the closed file src as dst (created or truncated). */
PetscErrorCode h5u_copy_file(const char *src, const char *dst);
/* A change to the existing file path that a kill at any moment cannot
 * damage: path is copied to its temporary (claimed as io_write_atomic's),
 * opened there without HDF5's lock, changed by fill, fsynced and renamed
 * over path. On failure path is untouched. */
PetscErrorCode h5u_update_atomic(const char *kind, const char *path, IoFileFn fill, void *ctx);

/* ---- files every rank of a communicator opens (src/io/h5par.c) ---------- */
/* h5u_fapl with the MPI-IO driver on comm (more than one rank), HDF5's
 * default driver on one rank. Caller closes. */
hid_t h5u_fapl_comm(MPI_Comm comm, PetscBool lock);
/* Transfers on comm (more than one rank): collective MPI-IO (1: two-phase
 * aggregation; every rank makes every call), independent (0), or -1:
 * collective when comm spans several nodes, else independent. One rank:
 * the default. Collective on comm; caller closes. */
hid_t h5u_dxpl_comm(MPI_Comm comm, int collective);
/* Collective: makes an error on any rank everyone's. *ierr becomes the code
 * of the lowest failing rank (0 when none failed) and msg (H5U_MSG_LEN
 * bytes, "" until a failure) its message. Call with errors returned silently. */
void h5u_agree(MPI_Comm comm, PetscErrorCode *ierr, char *msg);
/* fill/read on a file open on every rank of comm; msg as for h5u_agree. */
typedef PetscErrorCode (*H5uFillComm)(hid_t file, MPI_Comm comm, void *ctx, char *msg);
/* io_write_atomic, collective on comm: rank 0 checks the output, removes
 * stale temporaries and names the temporary "<path>.tmp.<host>.<pid of rank 0>";
 * all ranks create it together, fill() writes, all close it; rank 0 fsyncs and
 * renames. Any rank's failure removes the temporary and raises one error on
 * every rank; path is untouched. */
PetscErrorCode h5u_write_atomic_comm(MPI_Comm comm, const char *kind, const char *path, H5uFillComm fill, void *ctx);
/* The same, then (post not NULL) post(file, post_ctx) on rank 0 with the
 * closed temporary reopened serially, before the rename: for what is
 * copied rather than written by every rank (a checkpoint's /tokenizer). */
PetscErrorCode h5u_write_atomic_comm_post(MPI_Comm comm, const char *kind, const char *path, H5uFillComm fill,
                                          void *ctx, IoFileFn post, void *post_ctx);
/* Opens path read-only on every rank of comm, runs read, closes; one agreed
 * error. Check the file first (io_on_root + io_read_file) for its messages. */
PetscErrorCode h5u_read_comm(MPI_Comm comm, const char *kind, const char *path, H5uFillComm read, void *ctx);

/* The HDF5 type of an IoType (io.h's element types). */
hid_t h5u_type(IoType t);

/* "int32", "float64", "string", ... for messages. */
const char *h5u_type_str(hid_t type, char *buf, size_t len);
/* "[64,32]" */
const char *h5u_shape_str(int ndim, const hsize_t *dims, char *buf, size_t len);

/* The /code group of a run record (provenance.c). */
PetscErrorCode io_provenance_write(hid_t group, const RunCtx *run, const char *mode);

#endif
