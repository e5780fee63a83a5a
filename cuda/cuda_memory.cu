/* CUDA backend: device memory and host<->device copies.
 *
 * Everything runs on the compute stream, so a copy is ordered after the ops
 * that produced its source. The host-facing calls return only when the host
 * side is done with (to_host: the data is there; from_host: the caller may
 * reuse its buffer), which is what the cpu backend's memmove promises too;
 * alloc returns zero-filled memory that any stream may use at once. */
#include "cuda_common.cuh"

int rfcuda_alloc(size_t bytes, void **ptr)
{
  cudaError_t e;

  *ptr = NULL;
  if (!bytes) return 0;
  e = cudaMalloc(ptr, bytes);
  if (e != cudaSuccess) {
    *ptr = NULL;
    return rfcuda_fail(__FILE__, __LINE__, "cudaMalloc of %zu bytes: %s (%s)", bytes, cudaGetErrorString(e),
                       cudaGetErrorName(e));
  }
  e = cudaMemsetAsync(*ptr, 0, bytes, rfcuda_stream());
  if (e == cudaSuccess) e = cudaStreamSynchronize(rfcuda_stream());
  if (e != cudaSuccess) {
    (void)cudaFree(*ptr);
    *ptr = NULL;
    return rfcuda_fail(__FILE__, __LINE__, "zero-filling %zu bytes: %s (%s)", bytes, cudaGetErrorString(e),
                       cudaGetErrorName(e));
  }
  return 0;
}

/* cudaFree waits for the device's queued work, so memory still read by a
 * queued op is not released under it. */
int rfcuda_free(void *ptr)
{
  if (!ptr) return 0;
  if (rfcuda_weights_release(ptr)) return 1;
  RFCUDA_CHECK(cudaFree(ptr));
  return 0;
}

int rfcuda_to_host(void *dst_host, const void *src, size_t bytes)
{
  if (!bytes) return 0;
  RFCUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, rfcuda_stream()));
  RFCUDA_CHECK(cudaStreamSynchronize(rfcuda_stream()));
  return 0;
}

int rfcuda_from_host(void *dst, const void *src_host, size_t bytes)
{
  if (!bytes) return 0;
  rfcuda_weights_touched(dst, bytes);
  RFCUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, rfcuda_stream()));
  RFCUDA_CHECK(cudaStreamSynchronize(rfcuda_stream()));
  return 0;
}

/* A copy onto itself is skipped (the cpu backend's memmove makes it a
 * no-op). Partly overlapping ranges are undefined for cudaMemcpy, so they
 * go through scratch, again like memmove. */
int rfcuda_copy(void *dst, const void *src, size_t bytes)
{
  const char *d = (const char *)dst, *s = (const char *)src;

  if (!bytes || dst == src) return 0;
  rfcuda_weights_touched(dst, bytes);
  if (d < s + bytes && s < d + bytes) {
    void *tmp;
    if (rfcuda_scratch(bytes, &tmp)) return 1;
    RFCUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, rfcuda_stream()));
    RFCUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, rfcuda_stream()));
    return 0;
  }
  RFCUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, rfcuda_stream()));
  return 0;
}

int rfcuda_zero(void *ptr, size_t bytes)
{
  if (!bytes) return 0;
  rfcuda_weights_touched(ptr, bytes);
  RFCUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, rfcuda_stream()));
  return 0;
}

int rfcuda_mem_used(size_t *bytes)
{
  size_t free_b = 0, total = 0;

  *bytes = 0;
  RFCUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  *bytes = total - free_b;
  return 0;
}

int rfcuda_mem_free(size_t *bytes)
{
  size_t total = 0;

  *bytes = 0;
  RFCUDA_CHECK(cudaMemGetInfo(bytes, &total));
  return 0;
}

/* The compute stream, and the communication stream too: "every op has
 * finished" must include a collective that a caller is about to read. */
int rfcuda_sync(void)
{
  RFCUDA_CHECK(cudaStreamSynchronize(rfcuda_stream()));
  if (rfcuda_comm_stream()) RFCUDA_CHECK(cudaStreamSynchronize((cudaStream_t)rfcuda_comm_stream()));
  return 0;
}
