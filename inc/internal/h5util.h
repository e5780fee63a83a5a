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

/* Opens an existing file read-only. kind names the file in messages
 * ("checkpoint", "data file"): "<kind> <path>: no such file", "... not a
 * readable HDF5 file (truncated or corrupt?)". */
PetscErrorCode h5u_open_read(const char *kind, const char *path, hid_t *file);
PetscErrorCode h5u_close(hid_t *id); /* file, group, dataset, ...; no-op on a negative id */
/* After group `group` was written into an open file (written: the write's
 * result): flushed unless the write failed, then closed; a failed flush is
 * the error, naming path and group. */
PetscErrorCode h5u_flush_close(hid_t *file, const char *path, const char *group, PetscErrorCode written);
/* H5Fclose for every file rlfuse opens: remembers a failed close (a full
 * disk), after which the error exit must not let HDF5 shut down. */
herr_t h5u_fclose(hid_t file);

/* Every output goes through this before it is created or replaced: its
 * directory exists and is writable, and path is not something other than a
 * regular file (a directory, link, device, pipe), which would be replaced. */
PetscErrorCode h5u_output_check(const char *kind, const char *path);

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

/* Creates path atomically: fill() writes the contents into "<path>.tmp.<host>.<pid>",
 * which is then flushed, closed, fsync'ed and renamed over path. On any
 * failure the temporary file is removed and path is untouched. Stale
 * temporaries in path's directory are removed first. */
typedef PetscErrorCode (*H5uFill)(hid_t file, void *ctx);
/* After the temporary is closed: data first, then the name: fsync it,
 * rename it over path, fsync the directory so the rename itself survives a
 * power loss. */
PetscErrorCode h5u_sync_rename(const char *kind, const char *tmp, const char *path);
PetscErrorCode h5u_write_atomic(const char *kind, const char *path, H5uFill fill, void *ctx);

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
/* h5u_write_atomic, collective on comm: rank 0 checks the output, removes
 * stale temporaries and names the temporary "<path>.tmp.<host>.<pid of rank 0>";
 * all ranks create it together, fill() writes, all close it; rank 0 fsyncs and
 * renames. Any rank's failure removes the temporary and raises one error on
 * every rank; path is untouched. */
PetscErrorCode h5u_write_atomic_comm(MPI_Comm comm, const char *kind, const char *path, H5uFillComm fill, void *ctx);
/* The same, then (post not NULL) post(file, post_ctx) on rank 0 with the
 * closed temporary reopened serially, before the rename: for what is
 * copied rather than written by every rank (a checkpoint's /tokenizer). */
PetscErrorCode h5u_write_atomic_comm_post(MPI_Comm comm, const char *kind, const char *path, H5uFillComm fill, void *ctx, H5uFill post, void *post_ctx);
/* Opens path read-only on every rank of comm, runs read, closes; one agreed
 * error. Check the file first (h5u_rank0 + h5u_read_file) for its messages. */
PetscErrorCode h5u_read_comm(MPI_Comm comm, const char *kind, const char *path, H5uFillComm read, void *ctx);

/* Opens path read-only (h5u_open_read), runs read(file, ctx), closes the file
 * whatever happened. */
PetscErrorCode h5u_read_file(const char *kind, const char *path, H5uFill read, void *ctx);

/* Runs task(ctx) on rank 0 of comm with errors returned silently, then makes
 * its outcome collective: on failure every rank raises rank 0's message. */
typedef PetscErrorCode (*H5uTask)(void *ctx);
PetscErrorCode h5u_rank0(MPI_Comm comm, H5uTask task, void *ctx);
/* MPI_Bcast of arrays of any length (MPI counts are int). */
PetscErrorCode h5u_bcast(void *buf, size_t count, MPI_Datatype type, MPI_Comm comm);

/* Attributes. Writers replace an existing attribute of the same name; strings
 * are variable-length UTF-8 (h5py reads them as str). Readers accept any
 * integer width (h5py writes int64 by default) and fixed or variable strings;
 * `where` names the object in messages, e.g. "checkpoint x.h5 /policy". */
PetscErrorCode h5u_attr_write_int(hid_t obj, const char *name, hid_t type, int64_t value);
PetscErrorCode h5u_attr_write_double(hid_t obj, const char *name, double value);
PetscErrorCode h5u_attr_write_string(hid_t obj, const char *name, const char *value);
/* Readers check that the attribute holds one value (not an array) of the
 * right class; integers must lie in [lo, hi] (the range of what the caller
 * stores them in, or narrower), doubles must be finite. */
PetscErrorCode h5u_attr_read_int(hid_t obj, const char *where, const char *name, int64_t lo, int64_t hi, int64_t *value);
PetscErrorCode h5u_attr_read_double(hid_t obj, const char *where, const char *name, double *value);
PetscErrorCode h5u_attr_read_string(hid_t obj, const char *where, const char *name, char *buf, size_t len);

/* "int32", "float64", "string", ... for messages. */
const char *h5u_type_str(hid_t type, char *buf, size_t len);
/* "[64,32]" */
const char *h5u_shape_str(int ndim, const hsize_t *dims, char *buf, size_t len);

/* Opens dataset `name` (relative to loc) and checks its class (H5T_FLOAT or
 * H5T_INTEGER), element size (0: any) and shape (dims NULL: only the rank is
 * checked; a dims entry of 0 accepts any extent, which is returned). `where`
 * prefixes messages ("checkpoint x.h5"), `full` is the absolute name shown. */
PetscErrorCode h5u_dataset_open(hid_t loc, const char *where, const char *full, const char *name, H5T_class_t cls, size_t size, int ndim, hsize_t *dims, hid_t *dset);
/* Reads a whole dataset into memory of type mem (conversion by HDF5). */
PetscErrorCode h5u_dataset_read(hid_t dset, const char *where, const char *full, hid_t mem, void *buf);
/* Creates and writes a contiguous dataset. */
PetscErrorCode h5u_dataset_write(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, int ndim, const hsize_t *dims, const void *buf);

/* Root attributes rlfuse_version and git_revision, on every file we create. */
PetscErrorCode h5u_write_version(hid_t obj);

/* The /code group of a run record (provenance.c). */
PetscErrorCode io_provenance_write(hid_t group, const RunCtx *run, const char *mode);

/* io_group_fill (group.c): in io.h. */

#endif
