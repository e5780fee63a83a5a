/* CUDA runtime state: the device, the compute and communication streams and
 * the events that order them, the cuBLAS handles, the scratch region, the
 * precision flag and the last error's message.
 *
 * One process drives one device, so the state is a single static struct
 * (rfcuda.h's functions take no context). The streams are non-blocking so
 * that nothing is ordered behind the legacy default stream by accident:
 * every op names the compute stream, and the two streams meet only through
 * rfcuda_comm_wait_compute / rfcuda_compute_wait_comm. */
#include "cuda_common.cuh"
#include <stdarg.h>
#include <stdio.h>

/* cuBLAS's workspace, set explicitly: with a fixed workspace on a fixed
 * stream cuBLAS picks the same kernels every run, which is what its
 * run-to-run reproducibility guarantee asks for (cuBLAS docs, "Results
 * reproducibility"); 32 MiB is the size NVIDIA recommends for Hopper. */
#define RFCUDA_BLAS_WORKSPACE ((size_t)32 << 20)
/* Scratch grows to at least this much, and then by at least a quarter, so a
 * run whose ops ask for slowly increasing sizes does not reallocate often. */
#define RFCUDA_SCRATCH_MIN ((size_t)1 << 20)

static struct {
  int              ready, device, bf16;
  cudaStream_t     compute, comm;
  cudaEvent_t      compute_done, comm_done;
  cublasHandle_t   blas;
  cublasLtHandle_t lt;
  void            *blas_ws;
  void            *scratch;
  size_t           scratch_bytes;
} rt;

/* Thread-local so that a failure on one host thread (an OpenMP team
 * member, say) cannot overwrite the message another is about to report. */
static thread_local char rt_msg[1024] = "no CUDA error";

const char *rfcuda_error(void) { return rt_msg; }

int rfcuda_fail(const char *file, int line, const char *fmt, ...)
{
  va_list ap;
  int     k = snprintf(rt_msg, sizeof rt_msg, "%s:%d: ", file, line);

  if (k < 0 || (size_t)k >= sizeof rt_msg) k = 0;
  va_start(ap, fmt);
  vsnprintf(rt_msg + k, sizeof rt_msg - (size_t)k, fmt, ap);
  va_end(ap);
  return 1;
}

/* No device (or no driver) is a normal answer on a CPU-only machine: n is 0
 * and rfcuda_error() says what the runtime reported (without file and line:
 * it is for the user's message, not a failure of ours). */
int rfcuda_device_count(int *n)
{
  cudaError_t e = cudaGetDeviceCount(n);

  if (e != cudaSuccess) {
    *n = 0;
    (void)cudaGetLastError(); /* not sticky, but leave no trace for the next check */
    snprintf(rt_msg, sizeof rt_msg, "cudaGetDeviceCount: %s, %s", cudaGetErrorName(e), cudaGetErrorString(e));
  } else if (*n == 0) snprintf(rt_msg, sizeof rt_msg, "cudaGetDeviceCount: 0 devices");
  return 0;
}

int rfcuda_init(int device)
{
  int n = 0;

  if (rt.ready) {
    RFCUDA_REQUIRE(device == rt.device, "rfcuda_init(%d): already initialised on device %d", device, rt.device);
    return 0;
  }
  RFCUDA_CHECK(cudaGetDeviceCount(&n));
  RFCUDA_REQUIRE(device >= 0 && device < n, "rfcuda_init(%d): no such device (%d found)", device, n);
  RFCUDA_CHECK(cudaSetDevice(device));
  RFCUDA_CHECK(cudaStreamCreateWithFlags(&rt.compute, cudaStreamNonBlocking));
  RFCUDA_CHECK(cudaStreamCreateWithFlags(&rt.comm, cudaStreamNonBlocking));
  RFCUDA_CHECK(cudaEventCreateWithFlags(&rt.compute_done, cudaEventDisableTiming));
  RFCUDA_CHECK(cudaEventCreateWithFlags(&rt.comm_done, cudaEventDisableTiming));
  RFCUBLAS_CHECK(cublasCreate(&rt.blas));
  /* true fp32 unless an op asks for bf16 operands: no TF32 (the tolerance
   * against the CPU is 1e-5 relative) */
  RFCUBLAS_CHECK(cublasSetMathMode(rt.blas, CUBLAS_DEFAULT_MATH));
  RFCUBLAS_CHECK(cublasSetPointerMode(rt.blas, CUBLAS_POINTER_MODE_HOST));
  RFCUBLAS_CHECK(cublasSetAtomicsMode(rt.blas, CUBLAS_ATOMICS_NOT_ALLOWED));
  RFCUBLAS_CHECK(cublasSetStream(rt.blas, rt.compute));
  /* after cublasSetStream, which resets the workspace to cuBLAS's own pool */
  RFCUDA_CHECK(cudaMalloc(&rt.blas_ws, RFCUDA_BLAS_WORKSPACE));
  RFCUBLAS_CHECK(cublasSetWorkspace(rt.blas, rt.blas_ws, RFCUDA_BLAS_WORKSPACE));
  RFCUBLAS_CHECK(cublasLtCreate(&rt.lt));
  rt.device = device;
  rt.ready  = 1;
  return 0;
}

int rfcuda_device_pci(char *buf, int len)
{
  RFCUDA_REQUIRE(rt.ready, "rfcuda_device_pci: rfcuda_init was not called");
  RFCUDA_CHECK(cudaDeviceGetPCIBusId(buf, len, rt.device));
  return 0;
}

int rfcuda_finalize(void)
{
  if (!rt.ready) return 0;
  RFCUDA_CHECK(cudaStreamSynchronize(rt.compute));
  RFCUDA_CHECK(cudaStreamSynchronize(rt.comm));
  RFCUBLAS_CHECK(cublasLtDestroy(rt.lt));
  RFCUBLAS_CHECK(cublasDestroy(rt.blas));
  RFCUDA_CHECK(cudaFree(rt.blas_ws));
  RFCUDA_CHECK(cudaFree(rt.scratch));
  RFCUDA_CHECK(cudaEventDestroy(rt.compute_done));
  RFCUDA_CHECK(cudaEventDestroy(rt.comm_done));
  RFCUDA_CHECK(cudaStreamDestroy(rt.compute));
  RFCUDA_CHECK(cudaStreamDestroy(rt.comm));
  rt.ready = 0; /* the precision flag survives: it is a setting, not state */
  rt.blas = NULL, rt.lt = NULL, rt.blas_ws = NULL, rt.scratch = NULL, rt.scratch_bytes = 0;
  rt.compute = rt.comm = NULL, rt.compute_done = rt.comm_done = NULL;
  return 0;
}

int rfcuda_set_precision(int bf16)
{
  RFCUDA_REQUIRE(bf16 == 0 || bf16 == 1, "rfcuda_set_precision(%d): 0 (fp32) or 1 (bf16)", bf16);
  if (rt.bf16 != bf16) rfcuda_epoch_bump(); /* graphs recorded the other precision's ops */
  rt.bf16 = bf16;
  return 0;
}

int rfcuda_get_precision(void) { return rt.bf16; }

void *rfcuda_compute_stream(void) { return (void *)rt.compute; }
void *rfcuda_comm_stream(void) { return (void *)rt.comm; }

int rfcuda_comm_wait_compute(void)
{
  RFCUDA_REQUIRE(rt.ready, "rfcuda_comm_wait_compute: rfcuda_init has not run");
  RFCUDA_CHECK(cudaEventRecord(rt.compute_done, rt.compute));
  RFCUDA_CHECK(cudaStreamWaitEvent(rt.comm, rt.compute_done, 0));
  return 0;
}

int rfcuda_compute_wait_comm(void)
{
  RFCUDA_REQUIRE(rt.ready, "rfcuda_compute_wait_comm: rfcuda_init has not run");
  RFCUDA_CHECK(cudaEventRecord(rt.comm_done, rt.comm));
  RFCUDA_CHECK(cudaStreamWaitEvent(rt.compute, rt.comm_done, 0));
  return 0;
}

cudaStream_t     rfcuda_stream(void) { return rt.compute; }
cublasHandle_t   rfcuda_cublas(void) { return rt.blas; }
cublasLtHandle_t rfcuda_cublaslt(void) { return rt.lt; }

/* Growing frees the old region, which queued work on either stream may
 * still read or write: both streams are drained first. A caller that needs
 * several buffers asks once for their total (see cuda_common.cuh). */
int rfcuda_scratch(size_t bytes, void **ptr)
{
  *ptr = NULL;
  RFCUDA_REQUIRE(rt.ready, "rfcuda_scratch: rfcuda_init has not run");
  if (bytes > rt.scratch_bytes) {
    size_t      grow = rt.scratch_bytes + rt.scratch_bytes / 4, want = bytes;
    cudaError_t e;

    want = want < grow ? grow : want;
    want = want < RFCUDA_SCRATCH_MIN ? RFCUDA_SCRATCH_MIN : want;
    RFCUDA_REQUIRE(!rfcuda_capturing(),
                   "rfcuda_scratch: %zu bytes of scratch needed while capturing a graph (%zu held); run the same call "
                   "once before capturing",
                   bytes, rt.scratch_bytes);
    rfcuda_epoch_bump();
    RFCUDA_CHECK(cudaStreamSynchronize(rt.compute));
    RFCUDA_CHECK(cudaStreamSynchronize(rt.comm));
    RFCUDA_CHECK(cudaFree(rt.scratch));
    rt.scratch = NULL, rt.scratch_bytes = 0;
    e = cudaMalloc(&rt.scratch, want);
    if (e != cudaSuccess) {
      rt.scratch = NULL;
      return rfcuda_fail(__FILE__, __LINE__, "cudaMalloc of %zu bytes of scratch: %s (%s)", want, cudaGetErrorString(e),
                         cudaGetErrorName(e));
    }
    rt.scratch_bytes = want;
  }
  *ptr = rt.scratch;
  return 0;
}
