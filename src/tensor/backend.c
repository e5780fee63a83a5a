/* tensor: choosing a backend by name (-device), and the facts about
 * backends that run records and MFU reports need. */
#include "sys.h"
#include "tensor.h"

PetscErrorCode backend_get(const char *name, const Backend **be)
{
  PetscBool match;

  PetscFunctionBegin;
  *be = NULL;
  PetscCall(PetscStrcmp(name, "cpu", &match));
  if (match) {
    *be = backend_cpu();
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscStrcmp(name, "cuda", &match));
#ifdef RLFUSE_HAVE_CUDA
  if (match) {
    PetscCall(backend_cuda(be));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
#else
  PetscCheck(!match, PETSC_COMM_WORLD, PETSC_ERR_SUP, "-device cuda: this rlfuse was built without CUDA");
#endif
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_UNKNOWN_TYPE, "-device %s: unknown backend (choose cpu or cuda)",
          name ? name : "(null)");
}

PetscErrorCode backend_setup(const char *device, PetscBool bf16, const Backend **be)
{
  PetscBool cuda;

  PetscFunctionBegin;
  PetscCall(PetscStrcmp(device, "cuda", &cuda));
  PetscCheck(!bf16 || cuda, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP, "-precision bf16: needs -device cuda");
  PetscCall(backend_get(device, be));
  if (cuda) PetscCall(backend_cuda_set_precision(bf16));
  PetscFunctionReturn(PETSC_SUCCESS);
}

#ifdef RLFUSE_HAVE_CUDA
int cuda_version_string(char *buf, size_t len); /* cuda/cuda_info.cu */
#endif

PetscErrorCode backend_cuda_version(char *buf, size_t len)
{
  PetscFunctionBegin;
#ifdef RLFUSE_HAVE_CUDA
  PetscCheck(cuda_version_string(buf, len) == 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "CUDA device query failed");
#else
  PetscCall(PetscStrncpy(buf, "none (built without CUDA)", len));
#endif
  PetscFunctionReturn(PETSC_SUCCESS);
}
