/* NCCL under the communication layer (src/comm/comm.c): the collectives on
 * device buffers when the backend is cuda. Every operation runs on the
 * communication stream after the work queued so far on the compute stream,
 * and the compute stream then waits for it through an event, so the host
 * never blocks here and the model's ops see the result in stream order.
 *
 * The sum is not ncclAllReduce: NCCL's reduction order depends on its
 * algorithm and the ring position, so the bits would differ from the CPU's
 * comm_allreduce_sum (rank order) and could differ between layouts. Every
 * rank instead gathers all copies and adds them in rank order itself, which
 * costs nranks times the buffer in scratch and is exact to the CPU's bits.
 *
 * Without nccl.h the same functions exist and fail with "built without NCCL". */
#include "cuda_common.cuh"

#ifdef RLFUSE_HAVE_NCCL
  #include <nccl.h>
  #include <string.h>

#define RFNCCL_CHECK(call)                                                                                             \
  do {                                                                                                                 \
    ncclResult_t r_ = (call);                                                                                          \
    if (r_ != ncclSuccess)                                                                                             \
      return rfcuda_fail(__FILE__, __LINE__, "%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL));    \
  } while (0)

/* Fails unless rfcuda_init has made the streams (NCCL also needs the device
 * that rfcuda_init selected to be current). */
static int nccl_ready(const char *fn)
{
  RFCUDA_REQUIRE(rfcuda_comm_stream() != NULL, "%s: the CUDA runtime is not initialised (rfcuda_init)", fn);
  return 0;
}

extern "C" int rfcuda_nccl_id_size(void) { return (int)sizeof(ncclUniqueId); }

extern "C" int rfcuda_nccl_get_id(void *id)
{
  ncclUniqueId u;

  RFNCCL_CHECK(ncclGetUniqueId(&u));
  memcpy(id, &u, sizeof u);
  return 0;
}

extern "C" int rfcuda_nccl_init(void **comm, const void *id, int nranks, int rank)
{
  ncclUniqueId u;
  ncclComm_t   c;

  *comm = NULL;
  if (nccl_ready("rfcuda_nccl_init")) return 1;
  memcpy(&u, id, sizeof u);
  RFNCCL_CHECK(ncclCommInitRank(&c, nranks, u, rank));
  *comm = c;
  return 0;
}

extern "C" int rfcuda_nccl_destroy(void *comm)
{
  if (!comm) return 0;
  RFNCCL_CHECK(ncclCommDestroy((ncclComm_t)comm)); /* finishes the communicator's queued operations first */
  return 0;
}

/* out[i] = copies[0][i] + copies[1][i] + ... in rank order, each copy n
 * floats apart: the order of comm_allreduce_sum on the CPU, and additions
 * only (nothing for the compiler to contract into an FMA), so the same bits. */
__global__ static void sum_in_rank_order(float *out, const float *copies, size_t n, int nranks)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float s = copies[i];
    for (int r = 1; r < nranks; r++) s += copies[(size_t)r * n + i];
    out[i] = s;
  }
}

extern "C" int rfcuda_nccl_allreduce_sum(void *comm, float *buf, size_t n)
{
  ncclComm_t   c = (ncclComm_t)comm;
  cudaStream_t s;
  void        *all;
  int          nranks;

  if (n == 0) return 0;
  if (nccl_ready("rfcuda_nccl_allreduce_sum")) return 1;
  rfcuda_weights_touched(buf, n * sizeof(float));
  RFNCCL_CHECK(ncclCommCount(c, &nranks));
  if (nranks == 1) return 0;
  RFCUDA_REQUIRE(n <= SIZE_MAX / sizeof(float) / (size_t)nranks,
                 "rfcuda_nccl_allreduce_sum: %zu floats on %d ranks overflow the scratch size", n, nranks);
  /* Scratch is the compute stream's; using it here is safe because the
   * communication stream first waits for the compute stream (earlier users
   * are done) and the compute stream then waits for this (later users and a
   * growth of the scratch come after it). */
  if (rfcuda_scratch((size_t)nranks * n * sizeof(float), &all)) return 1;
  if (rfcuda_comm_wait_compute()) return 1;
  s = (cudaStream_t)rfcuda_comm_stream();
  RFNCCL_CHECK(ncclAllGather(buf, all, n, ncclFloat32, c, s));
  sum_in_rank_order<<<rfcuda_blocks(n, 256), 256, 0, s>>>(buf, (const float *)all, n, nranks);
  RFCUDA_LAUNCHED();
  return rfcuda_compute_wait_comm();
}

extern "C" int rfcuda_nccl_bcast(void *comm, void *buf, size_t bytes, int root)
{
  if (bytes == 0) return 0;
  if (nccl_ready("rfcuda_nccl_bcast")) return 1;
  rfcuda_weights_touched(buf, bytes);
  if (rfcuda_comm_wait_compute()) return 1;
  RFNCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, (ncclComm_t)comm, (cudaStream_t)rfcuda_comm_stream()));
  return rfcuda_compute_wait_comm();
}

/* A send or receive holds the communication stream until its partner's
 * matching call runs, and every later operation on this rank waits behind
 * it; the caller must pair them so that no two ranks each wait for the
 * other (comm.c stages the pipeline's messages through MPI for this reason). */
extern "C" int rfcuda_nccl_send(void *comm, const void *buf, size_t bytes, int peer)
{
  if (bytes == 0) return 0;
  if (nccl_ready("rfcuda_nccl_send")) return 1;
  if (rfcuda_comm_wait_compute()) return 1;
  RFNCCL_CHECK(ncclSend(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, (cudaStream_t)rfcuda_comm_stream()));
  return rfcuda_compute_wait_comm();
}

extern "C" int rfcuda_nccl_recv(void *comm, void *buf, size_t bytes, int peer)
{
  if (bytes == 0) return 0;
  if (nccl_ready("rfcuda_nccl_recv")) return 1;
  rfcuda_weights_touched(buf, bytes);
  if (rfcuda_comm_wait_compute()) return 1;
  RFNCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, (cudaStream_t)rfcuda_comm_stream()));
  return rfcuda_compute_wait_comm();
}

#else /* built without NCCL */

  #define RFNCCL_MISSING(fn) rfcuda_fail(__FILE__, __LINE__, "%s: rlfuse was built without NCCL (nccl.h not found)", fn)

extern "C" int rfcuda_nccl_id_size(void)
{
  RFNCCL_MISSING("rfcuda_nccl_id_size");
  return 0;
}
extern "C" int rfcuda_nccl_get_id(void *id) { return RFNCCL_MISSING("rfcuda_nccl_get_id"); }
extern "C" int rfcuda_nccl_init(void **comm, const void *id, int nranks, int rank)
{
  *comm = NULL;
  return RFNCCL_MISSING("rfcuda_nccl_init");
}
extern "C" int rfcuda_nccl_destroy(void *comm) { return comm ? RFNCCL_MISSING("rfcuda_nccl_destroy") : 0; }
extern "C" int rfcuda_nccl_allreduce_sum(void *comm, float *buf, size_t n)
{
  return RFNCCL_MISSING("rfcuda_nccl_allreduce_sum");
}
extern "C" int rfcuda_nccl_bcast(void *comm, void *buf, size_t bytes, int root)
{
  return RFNCCL_MISSING("rfcuda_nccl_bcast");
}
extern "C" int rfcuda_nccl_send(void *comm, const void *buf, size_t bytes, int peer)
{
  return RFNCCL_MISSING("rfcuda_nccl_send");
}
extern "C" int rfcuda_nccl_recv(void *comm, void *buf, size_t bytes, int peer)
{
  return RFNCCL_MISSING("rfcuda_nccl_recv");
}

#endif
