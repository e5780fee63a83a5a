/* CUDA device query for provenance: runtime and driver versions, the number
 * of devices, and NCCL's version, for the run record's /code attributes.
 * Code in cuda/ exposes plain C functions and includes no PETSc header
 * (PETSc is built without C++); src/ wraps them in PetscErrorCode calls. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#ifdef RLFUSE_HAVE_NCCL
  #include <nccl.h>
#endif

extern "C" int cuda_version_string(char *buf, size_t len)
{
  int         rt = 0, drv = 0, ndev = 0, nccl = 0;
  cudaError_t err;

  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  err = cudaGetDeviceCount(&ndev);
  if (err != cudaSuccess) ndev = 0;
#ifdef RLFUSE_HAVE_NCCL
  ncclGetVersion(&nccl);
#endif
  snprintf(buf, len, "CUDA runtime %d.%d, driver %d.%d, %d device%s%s%s, NCCL %d", rt / 1000, (rt % 1000) / 10,
           drv / 1000, (drv % 1000) / 10, ndev, ndev == 1 ? "" : "s", err != cudaSuccess ? " (" : "",
           err != cudaSuccess ? cudaGetErrorString(err) : "", nccl);
  if (err != cudaSuccess) snprintf(buf + strlen(buf), len - strlen(buf), ")");
  return 0;
}
