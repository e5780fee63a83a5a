/* io private helpers (see inc/internal/h5util.h). Error paths may leave group, dataset or
 * attribute ids open: every file is opened with the "strong" close degree, so
 * closing the file on the way out releases them too. */
#include "internal/h5util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The innermost HDF5 error description ("truncated file: eof = ..."), which
 * says more than the API function that failed. Must run before the next HDF5
 * call, which clears the error stack. */
static herr_t h5u_walk_cb(unsigned n, const H5E_error2_t *err, void *data)
{
  char *buf = (char *)data;

  if (err->desc && err->desc[0]) {
    strncpy(buf, err->desc, H5U_MSG_LEN / 2 - 1);
    buf[H5U_MSG_LEN / 2 - 1] = 0;
  }
  return 0;
}

static const char *h5u_hdf5_msg(char *buf)
{
  buf[0] = 0;
  (void)H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5u_walk_cb, buf);
  return buf;
}

/* HDF5's file drivers put the failed system call's errno into the
 * description ("errno = 28, error message = 'No space left on device'"). */
static herr_t h5u_enospc_cb(unsigned n, const H5E_error2_t *err, void *data)
{
  if (err->desc && (strstr(err->desc, "errno = 28,") || strstr(err->desc, "No space left on device"))) *(int *)data = 1;
  return 0;
}

const char *h5u_write_reason(char *buf)
{
  int full = 0;

  (void)H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5u_enospc_cb, &full);
  if (full || errno == ENOSPC) snprintf(buf, H5U_MSG_LEN, "no space left on device");
  else {
    char inner[H5U_MSG_LEN];
    h5u_hdf5_msg(inner);
    snprintf(buf, H5U_MSG_LEN, "HDF5: %s", inner[0] ? inner : "unknown error");
  }
  return buf;
}

/* After an error: close every file still open (a run record, a half-written
 * checkpoint), so HDF5's own shutdown at MPI_Finalize/exit does not try to
 * flush them again; it crashed doing that on a full disk. */
static int h5u_fclose_failed; /* a file close failed: HDF5 holds a half-closed file */

herr_t h5u_fclose(hid_t file)
{
  herr_t e = H5Fclose(file);

  if (e < 0) h5u_fclose_failed = 1;
  return e;
}

static int h5u_close_all(void)
{
  ssize_t n;
  int     failed = 0;

  /* closing a half-closed file again crashes inside H5F__close */
  if (h5u_fclose_failed) return 1;
  n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE);

  if (n > 0) {
    hid_t *ids = malloc((size_t)n * sizeof *ids);

    if (!ids) return 1;
    n = H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_FILE, (size_t)n, ids);
    for (ssize_t i = 0; i < n; i++)
      if (h5u_fclose(ids[i]) < 0) failed = 1;
    free(ids);
  }
  /* HDF5 1.10/1.12 keep a file whose close failed (its flush hit a full
   * disk) half-closed, and H5F__close_cb crashes on it at library shutdown */
  return failed;
}

hid_t h5u_fapl(PetscBool lock)
{
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);

  sys_error_exit_hook(h5u_close_all);

  if (fapl < 0) return fapl;
  /* Messages are ours; HDF5's stack dump would only repeat them, in 20 lines. */
  (void)H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  if (H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 || H5Pset_file_locking(fapl, lock ? 1 : 0, 1) < 0) {
    H5Pclose(fapl);
    return H5I_INVALID_HID;
  }
  return fapl;
}

PetscErrorCode io_open_read(const char *kind, const char *path, hid_t *file)
{
  struct stat st;
  hid_t       fapl;
  char        hmsg[H5U_MSG_LEN];

  PetscFunctionBegin;
  *file = H5I_INVALID_HID;
  if (stat(path, &st)) {
    int e = errno;
    PetscCheck(e != ENOENT, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: no such file", kind, path);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: %s", kind, path, strerror(e));
  }
  PetscCheck(!S_ISDIR(st.st_mode), PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: is a directory", kind, path);
  PetscCheck(access(path, R_OK) == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: not readable (permission denied)",
             kind, path);
  fapl = h5u_fapl(PETSC_TRUE);
  PetscCheck(fapl >= 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "%s %s: cannot create HDF5 file access properties", kind, path);
  /* H5Fis_hdf5 only looks for the signature; H5Fopen also notices truncation
   * (the superblock's end-of-file address lies past the end of the file). */
  if (H5Fis_hdf5(path) > 0) *file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  h5u_hdf5_msg(hmsg);
  H5Pclose(fapl);
  PetscCheck(*file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_READ,
             "%s %s: not a readable HDF5 file (truncated or corrupt?)%s%s", kind, path, hmsg[0] ? ": HDF5: " : "",
             hmsg);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_close(hid_t *id)
{
  PetscFunctionBegin;
  if (*id >= 0) {
    H5I_type_t t = H5Iget_type(*id);
    herr_t     e = 0;

    if (t == H5I_FILE) e = h5u_fclose(*id);
    else if (t == H5I_GROUP) e = H5Gclose(*id);
    else if (t == H5I_DATASET) e = H5Dclose(*id);
    else if (t == H5I_ATTR) e = H5Aclose(*id);
    else if (t == H5I_DATASPACE) e = H5Sclose(*id);
    else if (t == H5I_DATATYPE) e = H5Tclose(*id);
    else if (t == H5I_GENPROP_LST) e = H5Pclose(*id);
    *id = H5I_INVALID_HID;
    H5CallWrite(e, "HDF5: closing an object failed");
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode h5u_flush_close(hid_t *file, const char *path, const char *group, PetscErrorCode written)
{
  PetscFunctionBegin;
  if (!written && H5Fflush(*file, H5F_SCOPE_GLOBAL) < 0) {
    char why[H5U_MSG_LEN];

    h5u_write_reason(why);
    (void)io_close(file);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "%s: flushing /%s failed: %s", path, group, why);
  }
  PetscCall(io_close(file));
  PetscCall(written);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Why a file cannot be created in path's directory, in words. */
static PetscErrorCode h5u_check_dir(const char *kind, const char *path)
{
  char        dir[PETSC_MAX_PATH_LEN], copy[PETSC_MAX_PATH_LEN];
  struct stat st;

  PetscFunctionBegin;
  PetscCall(PetscStrncpy(copy, path, sizeof copy));
  /* dirname() may return a pointer into its argument: copy, never in place */
  PetscCall(PetscStrncpy(dir, dirname(copy), sizeof dir));
  PetscCheck(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN,
             "%s %s: directory %s does not exist", kind, path, dir);
  PetscCheck(access(dir, W_OK) == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: directory %s is not writable", kind,
             path, dir);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* This host's name as it appears in temporary names: [A-Za-z0-9-] only. */
static void h5u_host(char *buf, size_t len)
{
  if (gethostname(buf, len) != 0) snprintf(buf, len, "unknown");
  buf[len - 1] = 0;
  for (char *c = buf; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-')) *c = '-';
}

PetscErrorCode h5u_tmp_name(const char *path, char *tmp, size_t len)
{
  char host[64];

  PetscFunctionBegin;
  h5u_host(host, sizeof host);
  PetscCall(sys_path_printf(tmp, len, "%s.tmp.%s.%d", path, host, (int)getpid()));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A writer claims its temporary by holding flock(LOCK_EX) on "<tmp>.lock"
 * for the temporary's whole life (the lock dies with the process, however it
 * ends). A PID alone cannot tell: a killed writer's PID may belong to another
 * process by the time a job resumes, and kill(pid, 0) then answers. The lock
 * is on a file of its own because HDF5 locks the temporary itself (flock,
 * emulated by fcntl on NFS), which a lock of ours on it could block. */
PetscErrorCode h5u_tmp_claim(const char *tmp, int *fd)
{
  char        lock[PETSC_MAX_PATH_LEN + 8];
  struct stat a, b;

  PetscFunctionBegin;
  PetscCall(sys_path_printf(lock, sizeof lock, "%s.lock", tmp));
  for (int attempt = 0;; attempt++) {
    *fd = open(lock, O_RDWR | O_CREAT, 0666);
    PetscCheck(*fd >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "cannot create %s: %s", lock, strerror(errno));
    if (flock(*fd, LOCK_EX) == 0 && fstat(*fd, &a) == 0 && stat(lock, &b) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev)
      break;
    close(*fd); /* a stale-temporary sweep removed it between open and lock: again */
    PetscCheck(attempt < 100, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "cannot lock %s: %s", lock, strerror(errno));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

void h5u_tmp_release(const char *tmp, int fd)
{
  char lock[PETSC_MAX_PATH_LEN + 8];

  if (fd < 0) return;
  if (snprintf(lock, sizeof lock, "%s.lock", tmp) < (int)sizeof lock) unlink(lock);
  close(fd);
}

/* Removes temporary tmp (and its lock file) in dir unless a live writer
 * holds its lock. */
static int h5u_tmp_sweep(const char *dir, const char *tmp)
{
  char full[PETSC_MAX_PATH_LEN], lock[PETSC_MAX_PATH_LEN + 8];
  int  fd, removed;

  if (snprintf(full, sizeof full, "%s/%s", dir, tmp) >= (int)sizeof full) return 0;
  snprintf(lock, sizeof lock, "%s.lock", full);
  fd = open(lock, O_RDWR);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) { /* its writer is alive */
    close(fd);
    return 0;
  }
  removed = unlink(full) == 0;
  if (fd >= 0) {
    unlink(lock);
    close(fd);
  }
  return removed;
}

PetscErrorCode h5u_remove_stale_tmp(const char *dir, int *nremoved)
{
  char           host[64], tmp[256];
  DIR           *d;
  struct dirent *e;

  PetscFunctionBegin;
  if (nremoved) *nremoved = 0;
  h5u_host(host, sizeof host);
  d = opendir(dir);
  if (!d) PetscFunctionReturn(PETSC_SUCCESS); /* nothing to clean; the writer reports a bad directory */
  while ((e = readdir(d))) {
    const char *t = NULL, *dot;
    char       *end;
    long        pid;
    size_t      hl = strlen(host);

    for (const char *q = strstr(e->d_name, ".tmp."); q; q = strstr(q + 1, ".tmp.")) t = q; /* the last one */
    if (!t || strncmp(t + 5, host, hl) || t[5 + hl] != '.')
      continue; /* another host's: its locks are not ours to test */
    dot = t + 5 + hl;
    pid = strtol(dot + 1, &end, 10);
    if ((*end && strcmp(end, ".lock")) || end == dot + 1 || pid <= 0 || pid == (long)getpid()) continue;
    if (snprintf(tmp, sizeof tmp, "%.*s", (int)(end - e->d_name), e->d_name) >= (int)sizeof tmp) continue;
    if (h5u_tmp_sweep(dir, tmp) && nremoved) (*nremoved)++;
  }
  closedir(d);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_output_ok(const char *kind, const char *path)
{
  struct stat st;

  PetscFunctionBegin;
  PetscCall(h5u_check_dir(kind, path));
  /* lstat: a symbolic link is replaced by the rename, not followed, so what
   * matters is the link itself; a device node or FIFO would be replaced by a
   * regular file (or, as root, /dev/null deleted). */
  if (lstat(path, &st) == 0)
    PetscCheck(S_ISREG(st.st_mode), PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE,
               "%s %s: exists and is not a regular file (%s); refusing to replace it", kind, path,
               S_ISDIR(st.st_mode)   ? "a directory"
               : S_ISLNK(st.st_mode) ? "a symbolic link"
                                     : "a device, socket or pipe");
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Re-raises error ierr with "<kind> <path>: " in front of its message unless
 * the message already names the file, so low-level helpers need not know it. */
static PetscErrorCode h5u_error_context(PetscErrorCode ierr, const char *kind, const char *path)
{
  char *specific = NULL;

  PetscFunctionBegin;
  PetscCall(PetscErrorMessage(ierr, NULL, &specific));
  if (specific && strstr(specific, path)) PetscCall(ierr);
  SETERRQ(PETSC_COMM_SELF, ierr, "%s %s: %s", kind, path, specific ? specific : "failed");
}

/* The directory of path to disk (best effort: some file systems refuse fsync on directories). */
static void sync_dir_of(const char *path)
{
  char dir[PETSC_MAX_PATH_LEN];
  int  fd;

  snprintf(dir, sizeof dir, "%s", path);
  fd = open(dirname(dir), O_RDONLY);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

int h5u_sync_rename_quiet(const char *tmp, const char *path)
{
  int fd = open(tmp, O_RDONLY), e;

  if (fd < 0) return -1;
  e = fsync(fd);
  close(fd);
  if (e || rename(tmp, path)) return -1;
  sync_dir_of(path);
  return 0;
}

PetscErrorCode h5u_sync_rename(const char *kind, const char *tmp, const char *path)
{
  int fd, e;

  PetscFunctionBegin;
  fd = open(tmp, O_RDONLY);
  PetscCheck(fd >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "%s %s: cannot reopen %s: %s", kind, path, tmp,
             strerror(errno));
  e = fsync(fd);
  close(fd);
  PetscCheck(e == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "%s %s: fsync of %s failed: %s", kind, path, tmp,
             strerror(errno));
  PetscCheck(rename(tmp, path) == 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "%s %s: rename from %s failed: %s", kind,
             path, tmp, strerror(errno));
  sync_dir_of(path);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode h5u_commit(hid_t *file, const char *kind, const char *tmp, const char *path)
{
  herr_t e;

  PetscFunctionBegin;
  H5CallWrite(H5Fflush(*file, H5F_SCOPE_GLOBAL), "%s %s: flushing %s failed", kind, path, tmp);
  e     = h5u_fclose(*file);
  *file = H5I_INVALID_HID;
  H5CallWrite(e, "%s %s: closing %s failed", kind, path, tmp);
  PetscCall(h5u_sync_rename(kind, tmp, path));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_write_atomic(const char *kind, const char *path, IoFileFn fill, void *ctx)
{
  char           tmp[PETSC_MAX_PATH_LEN], hmsg[H5U_MSG_LEN];
  hid_t          fapl, file;
  PetscErrorCode ierr;
  int            lock;

  PetscFunctionBegin;
  PetscCall(io_output_ok(kind, path));
  {
    char copy[PETSC_MAX_PATH_LEN];
    PetscCall(PetscStrncpy(copy, path, sizeof copy));
    PetscCall(h5u_remove_stale_tmp(dirname(copy), NULL));
  }
  PetscCall(h5u_tmp_name(path, tmp, sizeof tmp));
  PetscCall(h5u_tmp_claim(tmp, &lock));
  fapl = h5u_fapl(PETSC_TRUE);
  file = fapl < 0 ? H5I_INVALID_HID : H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  h5u_hdf5_msg(hmsg);
  if (fapl >= 0) H5Pclose(fapl);
  if (file < 0) unlink(tmp), h5u_tmp_release(tmp, lock);
  PetscCheck(file >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "%s %s: cannot create %s: HDF5: %s", kind, path, tmp,
             hmsg);
  ierr = fill(file, ctx);
  if (!ierr) ierr = h5u_commit(&file, kind, tmp, path);
  if (ierr) {
    if (file >= 0) h5u_fclose(file);
    unlink(tmp);
  }
  h5u_tmp_release(tmp, lock);
  if (ierr) PetscCall(h5u_error_context(ierr, kind, path));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode h5u_copy_file(const char *src, const char *dst)
{
  char    buf[1 << 16];
  int     in, out, err = 0;
  ssize_t n;

  PetscFunctionBegin;
  in = open(src, O_RDONLY);
  PetscCheck(in >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_READ, "%s: cannot open: %s", src, strerror(errno));
  out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (out < 0) close(in);
  PetscCheck(out >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "cannot create %s: %s", dst, strerror(errno));
  while (!err && (n = read(in, buf, sizeof buf)) != 0) {
    if (n < 0) err = errno;
    for (ssize_t at = 0, w; !err && at < n; at += w)
      if ((w = write(out, buf + at, (size_t)(n - at))) < 0) err = errno;
  }
  if (close(out) != 0 && !err) err = errno; /* a full disk may only show here */
  close(in);
  PetscCheck(!err, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "copying %s to %s failed: %s", src, dst,
             err == ENOSPC ? "no space left on device" : strerror(err));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode h5u_update_atomic(const char *kind, const char *path, IoFileFn fill, void *ctx)
{
  char           tmp[PETSC_MAX_PATH_LEN], dir[PETSC_MAX_PATH_LEN];
  hid_t          fapl, file = H5I_INVALID_HID;
  PetscErrorCode ierr;
  int            lock;

  PetscFunctionBegin;
  PetscCall(io_output_ok(kind, path));
  PetscCall(PetscStrncpy(dir, path, sizeof dir));
  PetscCall(h5u_remove_stale_tmp(dirname(dir), NULL));
  PetscCall(h5u_tmp_name(path, tmp, sizeof tmp));
  PetscCall(h5u_tmp_claim(tmp, &lock));
  ierr = h5u_copy_file(path, tmp);
  if (!ierr) {
    fapl = h5u_fapl(PETSC_FALSE);
    file = fapl < 0 ? H5I_INVALID_HID : H5Fopen(tmp, H5F_ACC_RDWR, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (file < 0) ierr = PETSC_ERR_FILE_OPEN;
  }
  if (!ierr) ierr = fill(file, ctx);
  if (!ierr) ierr = h5u_commit(&file, kind, tmp, path);
  if (ierr) {
    if (file >= 0) h5u_fclose(file);
    unlink(tmp);
  }
  h5u_tmp_release(tmp, lock);
  if (ierr == PETSC_ERR_FILE_OPEN && file < 0)
    SETERRQ(PETSC_COMM_SELF, ierr, "%s %s: cannot open its copy %s for writing", kind, path, tmp);
  if (ierr) PetscCall(h5u_error_context(ierr, kind, path));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_read_file(const char *kind, const char *path, IoFileFn read, void *ctx)
{
  hid_t          file;
  PetscErrorCode ierr;

  PetscFunctionBegin;
  PetscCall(io_open_read(kind, path, &file));
  ierr = read(file, ctx);
  h5u_fclose(file);
  if (ierr) PetscCall(h5u_error_context(ierr, kind, path));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_on_root(MPI_Comm comm, IoTask task, void *ctx)
{
  PetscMPIInt rank;
  int         code = 0;
  char        msg[H5U_MSG_LEN] = "";

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  if (rank == 0) {
    PetscErrorCode ierr;
    char          *specific = NULL;

    /* Silently: the error is raised below, once, on every rank. */
    PetscCall(PetscPushErrorHandler(PetscReturnErrorHandler, NULL));
    ierr = task(ctx);
    PetscCall(PetscPopErrorHandler());
    if (ierr) {
      code = (int)ierr;
      PetscCall(PetscErrorMessage(ierr, NULL, &specific));
      PetscCall(PetscStrncpy(msg, specific ? specific : "I/O failed on rank 0", sizeof msg));
    }
  }
  PetscCallMPI(sys_mpi_bcast(&code, 1, MPI_INT, 0, comm));
  if (code) PetscCallMPI(sys_mpi_bcast(msg, (int)sizeof msg, MPI_CHAR, 0, comm));
  PetscCheck(!code, comm, (PetscErrorCode)code, "%s", msg);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_bcast(void *buf, size_t count, MPI_Datatype type, MPI_Comm comm)
{
  PetscMPIInt tsize;
  size_t      chunk, done;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Type_size(type, &tsize));
  chunk = ((size_t)1 << 30) / (size_t)tsize;
  for (done = 0; done < count; done += chunk) {
    size_t n = PetscMin(chunk, count - done);
    PetscCallMPI(sys_mpi_bcast((char *)buf + done * (size_t)tsize, (int)n, type, 0, comm));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

hid_t h5u_type(IoType t)
{
  switch (t) {
  case IO_INT: return H5T_NATIVE_INT;
  case IO_INT64: return H5T_NATIVE_INT64;
  case IO_LLONG: return H5T_NATIVE_LLONG;
  case IO_UCHAR: return H5T_NATIVE_UCHAR;
  case IO_DOUBLE: return H5T_NATIVE_DOUBLE;
  case IO_I32LE: return H5T_STD_I32LE;
  case IO_I64LE: return H5T_STD_I64LE;
  case IO_F64LE: return H5T_IEEE_F64LE;
  case IO_FLOAT: return H5T_NATIVE_FLOAT;
  case IO_F32LE: return H5T_IEEE_F32LE;
  case IO_U8LE: return H5T_STD_U8LE;
  }
  return H5I_INVALID_HID;
}

/* ---- attributes ---------------------------------------------------------- */
static PetscErrorCode h5u_attr_create(hid_t obj, const char *name, hid_t type, hid_t *attr)
{
  hid_t space;

  PetscFunctionBegin;
  if (H5Aexists(obj, name) > 0) H5Call(H5Adelete(obj, name), "HDF5: cannot replace attribute %s", name);
  space = H5Screate(H5S_SCALAR);
  *attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  H5Call(*attr, "HDF5: cannot create attribute %s", name);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_attr_write_int(IoId obj, const char *name, IoType type, int64_t value)
{
  hid_t attr;

  PetscFunctionBegin;
  PetscCall(h5u_attr_create(obj, name, h5u_type(type), &attr));
  H5Call(H5Awrite(attr, H5T_NATIVE_INT64, &value), "HDF5: cannot write attribute %s", name);
  PetscCall(io_close(&attr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_attr_write_double(hid_t obj, const char *name, double value)
{
  hid_t attr;

  PetscFunctionBegin;
  PetscCall(h5u_attr_create(obj, name, H5T_IEEE_F64LE, &attr));
  H5Call(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), "HDF5: cannot write attribute %s", name);
  PetscCall(io_close(&attr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static hid_t h5u_vlen_string_type(void)
{
  hid_t t = H5Tcopy(H5T_C_S1);

  if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
    H5Tclose(t);
    t = H5I_INVALID_HID;
  }
  return t;
}

PetscErrorCode io_attr_write_string(hid_t obj, const char *name, const char *value)
{
  hid_t       type, attr;
  const char *v = value ? value : "";

  PetscFunctionBegin;
  type = h5u_vlen_string_type();
  H5Call(type, "HDF5: cannot create a string type");
  PetscCall(h5u_attr_create(obj, name, type, &attr));
  H5Call(H5Awrite(attr, type, &v), "HDF5: cannot write attribute %s", name);
  PetscCall(io_close(&attr));
  PetscCall(io_close(&type));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Opens an attribute and checks its type class. */
static PetscErrorCode h5u_attr_open(hid_t obj, const char *where, const char *name, H5T_class_t cls,
                                    const char *expected, hid_t *attr, hid_t *type)
{
  char         tstr[32], sstr[64];
  hid_t        space;
  hsize_t      dims[H5S_MAX_RANK];
  hssize_t     npoints;
  int          nd;
  H5S_class_t  stype;

  PetscFunctionBegin;
  PetscCheck(H5Aexists(obj, name) > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s has no attribute %s", where,
             name);
  *attr = H5Aopen(obj, name, H5P_DEFAULT);
  H5Call(*attr, "%s: cannot open attribute %s (corrupt file?)", where, name);
  *type = H5Aget_type(*attr);
  H5Call(*type, "%s: cannot read the type of attribute %s (corrupt file?)", where, name);
  PetscCheck(H5Tget_class(*type) == cls, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: attribute %s has type %s, expected %s", where, name, h5u_type_str(*type, tstr, sizeof tstr),
             expected);
  /* One value: H5Aread writes every element, so an array-valued attribute
   * read into a scalar would overrun it. */
  space = H5Aget_space(*attr);
  H5Call(space, "%s: cannot read the shape of attribute %s (corrupt file?)", where, name);
  nd = H5Sget_simple_extent_ndims(space);
  if (nd > 0 && nd <= H5S_MAX_RANK) H5Sget_simple_extent_dims(space, dims, NULL);
  npoints = H5Sget_simple_extent_npoints(space);
  stype   = H5Sget_simple_extent_type(space);
  H5Sclose(space);
  PetscCheck(stype != H5S_NULL && npoints == 1 && nd >= 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: attribute %s has shape %s, expected a single value", where, name,
             stype == H5S_NULL ? "null (no value)" : h5u_shape_str(nd, dims, sstr, sizeof sstr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_attr_read_int(hid_t obj, const char *where, const char *name, int64_t lo, int64_t hi, int64_t *value)
{
  hid_t   attr, type;
  int64_t v;

  PetscFunctionBegin;
  PetscCall(h5u_attr_open(obj, where, name, H5T_INTEGER, "an integer", &attr, &type));
  /* HDF5 saturates values that do not fit int64 (a huge uint64), so the
   * range check below catches them too */
  H5Call(H5Aread(attr, H5T_NATIVE_INT64, &v), "%s: cannot read attribute %s (corrupt file?)", where, name);
  PetscCall(io_close(&type));
  PetscCall(io_close(&attr));
  PetscCheck(v >= lo && v <= hi, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: attribute %s = %lld is out of range [%lld, %lld]", where, name, (long long)v, (long long)lo,
             (long long)hi);
  *value = v;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_attr_read_double(hid_t obj, const char *where, const char *name, double *value)
{
  hid_t attr, type;

  PetscFunctionBegin;
  PetscCall(h5u_attr_open(obj, where, name, H5T_FLOAT, "a float", &attr, &type));
  H5Call(H5Aread(attr, H5T_NATIVE_DOUBLE, value), "%s: cannot read attribute %s (corrupt file?)", where, name);
  PetscCall(io_close(&type));
  PetscCall(io_close(&attr));
  PetscCheck(isfinite(*value), PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED,
             "%s: attribute %s = %s is not a finite number", where, name,
             isnan(*value) ? "nan"
             : *value > 0  ? "inf"
                           : "-inf");
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_attr_read_string(hid_t obj, const char *where, const char *name, char *buf, size_t len)
{
  hid_t attr, type;

  PetscFunctionBegin;
  PetscCall(h5u_attr_open(obj, where, name, H5T_STRING, "a string", &attr, &type));
  if (H5Tis_variable_str(type) > 0) {
    char *s = NULL;

    H5Call(H5Aread(attr, type, &s), "%s: cannot read attribute %s (corrupt file?)", where, name);
    PetscCall(PetscStrncpy(buf, s ? s : "", len));
    H5free_memory(s);
  } else {
    size_t n = H5Tget_size(type);
    char  *s;

    PetscCall(PetscCalloc1(n + 1, &s));
    H5Call(H5Aread(attr, type, s), "%s: cannot read attribute %s (corrupt file?)", where, name);
    PetscCall(PetscStrncpy(buf, s, len));
    PetscCall(PetscFree(s));
  }
  PetscCall(io_close(&type));
  PetscCall(io_close(&attr));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- datasets ------------------------------------------------------------ */
const char *h5u_type_str(hid_t type, char *buf, size_t len)
{
  size_t bits = 8 * H5Tget_size(type);

  switch (H5Tget_class(type)) {
  case H5T_INTEGER:
    snprintf(buf, len, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
    break;
  case H5T_FLOAT:
    snprintf(buf, len, "float%zu", bits);
    break;
  case H5T_STRING:
    snprintf(buf, len, "string");
    break;
  case H5T_COMPOUND:
    snprintf(buf, len, "compound");
    break;
  case H5T_ENUM:
    snprintf(buf, len, "enum");
    break;
  default:
    snprintf(buf, len, "non-numeric");
  }
  return buf;
}

const char *h5u_shape_str(int ndim, const hsize_t *dims, char *buf, size_t len)
{
  size_t used = 0;

  buf[0] = 0;
  for (int i = 0; i < ndim && used + 1 < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%llu", i ? "," : "[", (unsigned long long)dims[i]);
  if (used + 1 < len) snprintf(buf + used, len - used, ndim ? "]" : "[]");
  return buf;
}

static PetscErrorCode h5u_dataset_check_type(hid_t dset, const char *where, const char *full, H5T_class_t cls,
                                             size_t size)
{
  hid_t     type;
  char      tstr[32];
  PetscBool ok;

  PetscFunctionBegin;
  type = H5Dget_type(dset);
  H5Call(type, "%s: cannot read the type of %s (corrupt file?)", where, full);
  ok = (PetscBool)(H5Tget_class(type) == cls && (!size || H5Tget_size(type) == size));
  if (!ok) {
    h5u_type_str(type, tstr, sizeof tstr);
    H5Tclose(type);
  }
  PetscCheck(ok, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s has type %s, expected %s%s", where, full, tstr,
             cls == H5T_FLOAT ? "float" : "int", size ? (size == 4 ? "32" : "64") : " (any width)");
  PetscCall(io_close(&type));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode h5u_dataset_check_shape(hid_t dset, const char *where, const char *full, int ndim, hsize_t *dims)
{
  hid_t     space;
  hsize_t   have[H5S_MAX_RANK], want[H5S_MAX_RANK];
  int       nd;
  PetscBool ok;
  char      s1[64], s2[64];

  PetscFunctionBegin;
  space = H5Dget_space(dset);
  H5Call(space, "%s: cannot read the shape of %s (corrupt file?)", where, full);
  nd = H5Sget_simple_extent_ndims(space);
  if (nd > 0) H5Sget_simple_extent_dims(space, have, NULL);
  H5Sclose(space);
  H5Call(nd, "%s: cannot read the shape of %s (corrupt file?)", where, full);
  PetscCheck(nd == ndim, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s has shape %s, expected %d dimensions",
             where, full, h5u_shape_str(nd, have, s1, sizeof s1), ndim);
  ok = PETSC_TRUE;
  for (int i = 0; i < ndim; i++) { /* a wanted extent of 0 accepts any */
    want[i] = dims[i] ? dims[i] : have[i];
    if (have[i] != want[i]) ok = PETSC_FALSE;
  }
  PetscCheck(ok, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s: %s has shape %s, expected %s", where, full,
             h5u_shape_str(nd, have, s1, sizeof s1), h5u_shape_str(ndim, want, s2, sizeof s2));
  for (int i = 0; i < ndim; i++) dims[i] = have[i];
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_dataset_open(IoId loc, const char *where, const char *full, const char *name, IoClass cls,
                               size_t size, int ndim, IoSize *dims, IoId *dset)
{
  H5O_info_t info;

  PetscFunctionBegin;
  PetscCheck(H5Lexists(loc, name, H5P_DEFAULT) > 0, PETSC_COMM_SELF, PETSC_ERR_FILE_UNEXPECTED, "%s has no dataset %s",
             where, full);
  PetscCheck(H5Oget_info_by_name(loc, name, &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_DATASET, PETSC_COMM_SELF,
             PETSC_ERR_FILE_UNEXPECTED, "%s: %s is not a dataset", where, full);
  *dset = H5Dopen2(loc, name, H5P_DEFAULT);
  H5Call(*dset, "%s: cannot open dataset %s (corrupt file?)", where, full);
  PetscCall(h5u_dataset_check_type(*dset, where, full, cls == IO_CLASS_INT ? H5T_INTEGER : H5T_FLOAT, size));
  PetscCall(h5u_dataset_check_shape(*dset, where, full, ndim, dims));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_dataset_read(IoId dset, const char *where, const char *full, IoType mem, void *buf)
{
  char hmsg[H5U_MSG_LEN];

  PetscFunctionBegin;
  if (H5Dread(dset, h5u_type(mem), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
    h5u_hdf5_msg(hmsg);
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_READ, "%s: reading %s failed (truncated or corrupt file?): HDF5: %s", where,
            full, hmsg);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_dataset_write(IoId loc, const char *name, IoType file_type, IoType mem_type, int ndim,
                                const IoSize *dims, const void *buf)
{
  hid_t space, dset;
  char  hmsg[H5U_MSG_LEN];

  PetscFunctionBegin;
  space = H5Screate_simple(ndim, dims, NULL);
  H5Call(space, "HDF5: cannot create a dataspace for %s", name);
  dset = H5Dcreate2(loc, name, h5u_type(file_type), space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  H5Call(dset, "HDF5: cannot create dataset %s", name);
  if (H5Dwrite(dset, h5u_type(mem_type), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "HDF5: writing dataset %s failed: %s", name, h5u_write_reason(hmsg));
  PetscCall(io_close(&dset));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_write_version(hid_t obj)
{
  PetscFunctionBegin;
  PetscCall(io_attr_write_string(obj, "rlfuse_version", RLFUSE_VERSION));
  PetscCall(io_attr_write_string(obj, "git_revision", RLFUSE_GIT));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode io_hdf5_version(char *buf, size_t len)
{
  unsigned maj, min, rel;

  PetscFunctionBegin;
  H5Call(H5get_libversion(&maj, &min, &rel), "HDF5: H5get_libversion failed");
  PetscCall(PetscSNPrintf(buf, len, "%u.%u.%u", maj, min, rel));
  PetscFunctionReturn(PETSC_SUCCESS);
}
