/* cpu backend: memory. "Device" memory is host memory, 64-byte aligned so
 * every row of a tensor whose width is a multiple of 16 floats starts on a
 * cache line and the vector loops need no peeling.
 *
 * Large blocks are mapped anonymously: the kernel hands out zero pages as
 * they are first touched, so a block costs only the pages used, and nothing
 * is cleared twice (an activation slab reserved for a training layout and
 * used by a forward-only call touches half of it). Small blocks come from
 * the heap and are cleared. A 64-byte header before each block says which.
 * A mapped block grows in place or moves with its pages (cpu_grow), so a
 * buffer that grows again and again is only ever touched once per page. */
#define _GNU_SOURCE /* mremap */
#include "cpu_ops.h"
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#define CPU_HEADER   64
#define CPU_MAP_FROM ((size_t)1 << 20) /* blocks from this size on are mapped */

typedef struct {
  size_t bytes;  /* the block with its header */
  int    mapped;
} CpuHeader;

PetscErrorCode cpu_alloc(size_t bytes, void **ptr)
{
  size_t     total = bytes + CPU_HEADER;
  void      *base  = NULL;
  int        err   = 0, mapped = bytes >= CPU_MAP_FROM;
  CpuHeader *h;

  PetscFunctionBegin;
  *ptr = NULL;
  if (!bytes) PetscFunctionReturn(PETSC_SUCCESS);
  if (mapped) {
    base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) base = NULL, err = errno;
  } else err = posix_memalign(&base, 64, total);
  if (!base) {
    char hb[32];
    SETERRQ(PETSC_COMM_SELF, PETSC_ERR_MEM, "%zu bytes (%s) could not be allocated on the cpu (%s)", bytes,
            sys_bytes_str((double)bytes, hb, sizeof hb), strerror(err ? err : ENOMEM));
  }
  if (!mapped) memset(base, 0, total); /* mapped pages arrive zeroed */
  h         = (CpuHeader *)base;
  h->bytes  = total;
  h->mapped = mapped;
  *ptr      = (char *)base + CPU_HEADER;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_free(void *ptr)
{
  CpuHeader *h;

  PetscFunctionBegin;
  if (!ptr) PetscFunctionReturn(PETSC_SUCCESS);
  h = (CpuHeader *)((char *)ptr - CPU_HEADER);
  if (h->mapped)
    PetscCheck(munmap(h, h->bytes) == 0, PETSC_COMM_SELF, PETSC_ERR_SYS, "cpu_free: munmap of %zu bytes failed (%s)",
               h->bytes, strerror(errno));
  else free(h);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cpu_grow(void **ptr, size_t bytes)
{
  CpuHeader *h = *ptr ? (CpuHeader *)((char *)*ptr - CPU_HEADER) : NULL;
  void      *base;

  PetscFunctionBegin;
  if (h && h->bytes >= bytes + CPU_HEADER) PetscFunctionReturn(PETSC_SUCCESS);
  if (h && h->mapped && (base = mremap(h, h->bytes, bytes + CPU_HEADER, MREMAP_MAYMOVE)) != MAP_FAILED) {
    h        = (CpuHeader *)base;
    h->bytes = bytes + CPU_HEADER;
    *ptr     = (char *)base + CPU_HEADER;
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  /* a heap block, or a mapping that could not grow: a fresh block */
  PetscCall(cpu_free(*ptr));
  *ptr = NULL;
  PetscCall(cpu_alloc(bytes, ptr));
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
