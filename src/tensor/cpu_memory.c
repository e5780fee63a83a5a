/* cpu backend: memory. "Device" memory is host memory, 64-byte aligned so
 * every row of a tensor whose width is a multiple of 16 floats starts on a
 * cache line and the vector loops need no peeling. */
#include "cpu_ops.h"
#include <stdlib.h>

PetscErrorCode cpu_alloc(size_t bytes, void **ptr)
{
  int err;

  PetscFunctionBegin;
  *ptr = NULL;
  if (!bytes) PetscFunctionReturn(PETSC_SUCCESS);
  err = posix_memalign(ptr, 64, bytes);
  if (err) {
    char h[32];
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_MEM, "%zu bytes (%s) could not be allocated on the cpu (%s)", bytes, sys_bytes_str((double)bytes, h, sizeof h), strerror(err));
  }
  memset(*ptr, 0, bytes);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_free(void *ptr)
{
  PetscFunctionBegin;
  free(ptr);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* to_host, from_host and copy are all this on the cpu. memmove, because a
 * caller that copies a buffer onto itself must not hit undefined behaviour. */
PetscErrorCode cpu_memcpy(void *dst, const void *src, size_t bytes)
{
  PetscFunctionBegin;
  if (bytes) memmove(dst, src, bytes);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_zero(void *ptr, size_t bytes)
{
  PetscFunctionBegin;
  if (bytes) memset(ptr, 0, bytes);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Every cpu op has finished when it returns. */
PetscErrorCode cpu_sync(void)
{
  PetscFunctionBegin;
  PetscFunctionReturn(PETSC_SUCCESS);
}
