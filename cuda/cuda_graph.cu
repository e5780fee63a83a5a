/* CUDA backend: graphs of the decode forward (gen's engine, through
 * model_forward_cached_resident). A graph records kernel launches with
 * their pointers, so what it reads must stay where it was at capture:
 * rfcuda_epoch() changes whenever memory an op may have handed to a graph
 * moves (the scratch region grows, a weight buffer's bf16 copies are
 * freed), and the model captures again when it has changed. Launching first
 * refreshes stale bf16 weight copies in place (cuda_wcache.cu), so a graph
 * survives an optimizer step or a reallocation into the same buffer. */
#include "cuda_common.cuh"

static unsigned long long rt_epoch = 1;

unsigned long long rfcuda_epoch(void) { return rt_epoch; }
void               rfcuda_epoch_bump(void) { rt_epoch++; }

int rfcuda_graph_begin(void)
{
  if (rfcuda_weights_refresh()) return 1; /* so that no conversion is recorded */
  RFCUDA_CHECK(cudaStreamBeginCapture(rfcuda_stream(), cudaStreamCaptureModeThreadLocal));
  return 0;
}

int rfcuda_graph_end(void **exec)
{
  cudaGraph_t     g = NULL;
  cudaGraphExec_t x = NULL;

  *exec = NULL;
  RFCUDA_CHECK(cudaStreamEndCapture(rfcuda_stream(), &g));
  RFCUDA_REQUIRE(g, "rfcuda_graph_end: the capture was invalidated (an op synchronised or allocated while capturing)");
  {
    cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    (void)cudaGraphDestroy(g);
    RFCUDA_CHECK(e);
  }
  *exec = (void *)x;
  return 0;
}

int rfcuda_graph_launch(void *exec)
{
  if (rfcuda_weights_refresh()) return 1;
  RFCUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, rfcuda_stream()));
  return 0;
}

int rfcuda_graph_destroy(void *exec)
{
  if (exec) RFCUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)exec));
  return 0;
}

int rfcuda_capturing(void)
{
  cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(rfcuda_stream(), &s) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return s == cudaStreamCaptureStatusActive;
}
