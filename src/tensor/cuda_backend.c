/* cuda backend: the ops table. The kernels live in cuda/ behind the plain-C
 * interface of inc/internal/rfcuda.h (PETSc is C only, so cuda/ cannot use its
 * macros); each entry here turns an rfcuda_* failure into a PETSc error
 * that carries the CUDA/cuBLAS message, file and line. */
#include "sys.h"
#include "tensor.h"

#ifdef RLFUSE_HAVE_CUDA
  #include "internal/rfcuda.h"

  #define RFCUDA_CALL(call) PetscCheck((call) == 0, PETSC_COMM_SELF, PETSC_ERR_LIB, "cuda backend: %s", rfcuda_error())

  /* static PetscErrorCode cuda_NAME(PARAMS) calling rfcuda_NAME(ARGS) */
  #define CUDA_OP(name, params, args) \
    static PetscErrorCode cuda_##name params \
    { \
      PetscFunctionBegin; \
      RFCUDA_CALL(rfcuda_##name args); \
      PetscFunctionReturn(PETSC_SUCCESS); \
    }

CUDA_OP(alloc, (size_t bytes, void **ptr), (bytes, ptr))
CUDA_OP(free, (void *ptr), (ptr))
CUDA_OP(to_host, (void *dst, const void *src, size_t bytes), (dst, src, bytes))
CUDA_OP(from_host, (void *dst, const void *src, size_t bytes), (dst, src, bytes))
CUDA_OP(copy, (void *dst, const void *src, size_t bytes), (dst, src, bytes))
CUDA_OP(zero, (void *ptr, size_t bytes), (ptr, bytes))
CUDA_OP(sync, (void), ())
CUDA_OP(encoder_forward,
        (float *out, const int *tok, const int *pos, const float *wte, const float *wpe, int N, int C, int v0, int Vl),
        (out, tok, pos, wte, wpe, N, C, v0, Vl))
CUDA_OP(encoder_backward,
        (float *dwte, float *dwpe, const float *dout, const int *tok, const int *pos, int N, int C, int v0, int Vl),
        (dwte, dwpe, dout, tok, pos, N, C, v0, Vl))
CUDA_OP(layernorm_forward,
        (float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C),
        (out, mean, rstd, inp, w, b, N, C))
CUDA_OP(layernorm_backward,
        (float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w, const float *mean,
         const float *rstd, int N, int C),
        (dinp, dw, db, dout, inp, w, mean, rstd, N, C))
CUDA_OP(rmsnorm_forward, (float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps),
        (out, rstd, inp, w, N, C, eps))
CUDA_OP(rmsnorm_backward,
        (float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd, int N, int C),
        (dinp, dw, dout, inp, w, rstd, N, C))
CUDA_OP(rope, (float *qkv, const int *pos, const float *inv_freq, int N, int NH, int NKV, int hd, int inverse),
        (qkv, pos, inv_freq, N, NH, NKV, hd, inverse))
CUDA_OP(qk_norm_forward,
        (float *qkv, float *in, float *rstd, const float *wq, const float *wk, int N, int NH, int NKV, int hd,
         float eps),
        (qkv, in, rstd, wq, wk, N, NH, NKV, hd, eps))
CUDA_OP(qk_norm_backward,
        (float *dqkv, float *dwq, float *dwk, const float *in, const float *rstd, const float *wq, const float *wk,
         int N, int NH, int NKV, int hd),
        (dqkv, dwq, dwk, in, rstd, wq, wk, N, NH, NKV, hd))
CUDA_OP(swiglu_forward, (float *out, const float *gu, int N, int F), (out, gu, N, F))
CUDA_OP(swiglu_backward, (float *dgu, const float *gu, const float *dout, int N, int F), (dgu, gu, dout, N, F))
CUDA_OP(matmul_forward,
        (float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, PetscBool transposed),
        (out, inp, w, bias, N, C, OC, transposed ? 1 : 0))
CUDA_OP(matmul_fused,
        (float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, PetscBool transposed,
         const MatmulFusion *f),
        (out, inp, w, bias, N, C, OC, transposed ? 1 : 0, f->gated ? 1 : 0, f->add ? 1 : 0, f->norm_w, f->norm_eps))
CUDA_OP(matmul_backward,
        (float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C,
         int OC, PetscBool transposed),
        (dinp, dw, dbias, dout, inp, w, N, C, OC, transposed ? 1 : 0))
CUDA_OP(attention_forward, (float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV),
        (out, att, qkv, B, T, C, NH, NKV))
/* The tiled backward sums P dP over each row's panel: it does not read out. */
static PetscErrorCode cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                              const float *att, int B, int T, int C, int NH, int NKV)
{
  PetscFunctionBegin;
  (void)out;
  RFCUDA_CALL(rfcuda_attention_backward(dqkv, dout, qkv, att, B, T, C, NH, NKV));
  PetscFunctionReturn(PETSC_SUCCESS);
}
CUDA_OP(attention_cached,
        (float *out, float *kcache, float *vcache, const float *qkv, const int *slot, const int *pos, int N, int Tmax,
         int C, int NH, int NKV),
        (out, kcache, vcache, qkv, slot, pos, N, Tmax, C, NH, NKV))
CUDA_OP(gelu_forward, (float *out, const float *inp, size_t n), (out, inp, n))
CUDA_OP(gelu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n))
CUDA_OP(residual_forward, (float *out, const float *a, const float *b, size_t n), (out, a, b, n))
CUDA_OP(axpy, (float *y, float alpha, const float *x, size_t n), (y, alpha, x, n))
CUDA_OP(scale, (float *x, float alpha, size_t n), (x, alpha, n))
CUDA_OP(logprob_forward,
        (float *logprob, float *lse, float *entropy, const float *logits, const int *target, float inv_temp,
         const int *mask_off, const int *mask_ids, int N, int V),
        (logprob, lse, entropy, logits, target, inv_temp, mask_off, mask_ids, N, V))
CUDA_OP(logprob_backward,
        (float *dlogits, const float *logits, const float *lse, const int *target, const float *dlogprob,
         float inv_temp, const int *mask_off, const int *mask_ids, int N, int V),
        (dlogits, logits, lse, target, dlogprob, inv_temp, mask_off, mask_ids, N, V))
CUDA_OP(logprob_stats,
        (double *stats, const float *logits, const int *target, float inv_temp, const int *mask_off,
         const int *mask_ids, int N, int Vl, int v0),
        (stats, logits, target, inv_temp, mask_off, mask_ids, N, Vl, v0))
CUDA_OP(logprob_backward_shard,
        (float *dlogits, const float *logits, const float *lse, const int *target, const float *dlogprob,
         float inv_temp, const int *mask_off, const int *mask_ids, int N, int Vl, int v0),
        (dlogits, logits, lse, target, dlogprob, inv_temp, mask_off, mask_ids, N, Vl, v0))
CUDA_OP(sample,
        (int *token, float *logprob, int *nallowed, int *boundary, int *allowed, void *work, const float *logits,
         const int *row, const int *sample_id, const int *position, const int *ban_eos, const BackendSampleCfg *cfg,
         int N, int V),
        (token, logprob, nallowed, boundary, allowed, work, logits, row, sample_id, position, ban_eos, cfg->temperature,
         cfg->top_p, cfg->top_k, cfg->greedy, cfg->eos, (unsigned long long)cfg->key, cfg->iteration, N, V))
CUDA_OP(sumsq, (double *out, const float *x, size_t n), (out, x, n))
CUDA_OP(graph_begin, (void), ())
CUDA_OP(graph_end, (void **graph), (graph))
CUDA_OP(graph_launch, (void *graph), (graph))
CUDA_OP(graph_destroy, (void *graph), (graph))

static PetscErrorCode cuda_weights_hint(void *ptr, size_t bytes)
{
  PetscFunctionBegin;
  RFCUDA_CALL(rfcuda_weights_region(ptr, bytes));
  PetscFunctionReturn(PETSC_SUCCESS);
}
CUDA_OP(adamw,
        (float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps, float wd,
         int t, float gs),
        (p, g, m, v, n, lr, b1, b2, eps, wd, t, gs))

static const Backend cuda_backend = {
  .name                   = "cuda",
  .alloc                  = cuda_alloc,
  .free                   = cuda_free,
  .to_host                = cuda_to_host,
  .from_host              = cuda_from_host,
  .copy                   = cuda_copy,
  .zero                   = cuda_zero,
  .sync                   = cuda_sync,
  .encoder_forward        = cuda_encoder_forward,
  .encoder_backward       = cuda_encoder_backward,
  .rmsnorm_forward        = cuda_rmsnorm_forward,
  .rmsnorm_backward       = cuda_rmsnorm_backward,
  .rope                   = cuda_rope,
  .qk_norm_forward        = cuda_qk_norm_forward,
  .qk_norm_backward       = cuda_qk_norm_backward,
  .swiglu_forward         = cuda_swiglu_forward,
  .swiglu_backward        = cuda_swiglu_backward,
  .layernorm_forward      = cuda_layernorm_forward,
  .layernorm_backward     = cuda_layernorm_backward,
  .matmul_forward         = cuda_matmul_forward,
  .matmul_fused           = cuda_matmul_fused,
  .fused_rows             = RFCUDA_FEW_ROWS,
  .matmul_backward        = cuda_matmul_backward,
  .attention_forward      = cuda_attention_forward,
  .attention_backward     = cuda_attention_backward,
  .attention_cached       = cuda_attention_cached,
  .gelu_forward           = cuda_gelu_forward,
  .gelu_backward          = cuda_gelu_backward,
  .residual_forward       = cuda_residual_forward,
  .axpy                   = cuda_axpy,
  .scale                  = cuda_scale,
  .logprob_forward        = cuda_logprob_forward,
  .logprob_backward       = cuda_logprob_backward,
  .logprob_stats          = cuda_logprob_stats,
  .logprob_backward_shard = cuda_logprob_backward_shard,
  .sample                 = cuda_sample,
  .sample_work            = rfcuda_sample_work,
  .sumsq                  = cuda_sumsq,
  .adamw                  = cuda_adamw,
  .weights_hint           = cuda_weights_hint,
  .graph_begin            = cuda_graph_begin,
  .graph_end              = cuda_graph_end,
  .graph_launch           = cuda_graph_launch,
  .graph_destroy          = cuda_graph_destroy,
  .epoch                  = rfcuda_epoch,
};

/* The device this rank drives: its rank among the ranks on its node, modulo
 * the node's device count, so that ranks on one node spread over its GPUs
 * (CUDA_VISIBLE_DEVICES, set by the batch system, narrows the choice).
 * Collective over MPI_COMM_WORLD, so a missing device is reported once. */
static PetscErrorCode cuda_pick_device(int *device)
{
  MPI_Comm    node;
  PetscMPIInt size;
  int         ndev = 0, local = 0, lack, nlack = 0;

  PetscFunctionBegin;
  RFCUDA_CALL(rfcuda_device_count(&ndev));
  lack = ndev == 0;
  PetscCallMPI(sys_mpi_allreduce(&lack, &nlack, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  PetscCallMPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  PetscCheck(nlack == 0 || !lack, PETSC_COMM_WORLD, PETSC_ERR_SUP,
             "-device cuda: no CUDA device found (%s); use -device cpu", rfcuda_error());
  PetscCheck(nlack == 0, PETSC_COMM_WORLD, PETSC_ERR_SUP,
             "-device cuda: no CUDA device found on %d of %d ranks; use -device cpu", nlack, (int)size);
  PetscCallMPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  PetscCallMPI(MPI_Comm_rank(node, &local));
  PetscCallMPI(MPI_Comm_free(&node));
  *device = local % ndev;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode backend_cuda(const Backend **be)
{
  static PetscBool ready = PETSC_FALSE;

  PetscFunctionBegin;
  *be = NULL;
  if (!ready) {
    int device;
    PetscCall(cuda_pick_device(&device));
    RFCUDA_CALL(rfcuda_init(device));
    ready = PETSC_TRUE;
  }
  *be = &cuda_backend;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode backend_cuda_set_precision(PetscBool bf16)
{
  PetscFunctionBegin;
  RFCUDA_CALL(rfcuda_set_precision(bf16 ? 1 : 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode backend_cuda_mem_used(size_t *bytes)
{
  PetscFunctionBegin;
  RFCUDA_CALL(rfcuda_mem_used(bytes));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode backend_mem_free(const Backend *be, double *bytes)
{
  size_t fr = 0;

  PetscFunctionBegin;
  if (be != &cuda_backend) {
    *bytes = sys_memory_available();
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  RFCUDA_CALL(rfcuda_mem_free(&fr));
  *bytes = (double)fr;
  PetscFunctionReturn(PETSC_SUCCESS);
}

double backend_weight_copy_bytes(const Backend *be)
{
  return be == &cuda_backend && rfcuda_get_precision() == 1 ? 2.0 : 0.0;
}

PetscErrorCode backend_cuda_set_attention_panel_bytes(size_t bytes, size_t *was)
{
  size_t w;

  PetscFunctionBegin;
  w = rfcuda_attention_set_panel_bytes(bytes);
  if (was) *was = w;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode backend_cuda_available(char *why, size_t len, PetscBool *yes)
{
  int n = 0;

  PetscFunctionBegin;
  *yes = PETSC_FALSE;
  if (rfcuda_device_count(&n)) PetscCall(PetscSNPrintf(why, len, "the CUDA device query failed: %s", rfcuda_error()));
  else if (n < 1) PetscCall(PetscSNPrintf(why, len, "the CUDA runtime sees no device: %s", rfcuda_error()));
  else {
    PetscCall(PetscSNPrintf(why, len, "%d CUDA device%s", n, n == 1 ? "" : "s"));
    *yes = PETSC_TRUE;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

#else /* built without CUDA: the same entry points, failing with the reason */

PetscErrorCode backend_cuda(const Backend **be)
{
  PetscFunctionBegin;
  *be = NULL;
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_SUP, "-device cuda: this rlfuse was built without CUDA");
}

PetscErrorCode backend_cuda_set_precision(PetscBool bf16)
{
  PetscFunctionBegin;
  PetscCheck(!bf16, PETSC_COMM_SELF, PETSC_ERR_SUP, "-precision bf16: this rlfuse was built without CUDA");
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode backend_cuda_mem_used(size_t *bytes)
{
  PetscFunctionBegin;
  *bytes = 0;
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_SUP, "device memory: this rlfuse was built without CUDA");
}

PetscErrorCode backend_mem_free(const Backend *be, double *bytes)
{
  PetscFunctionBegin;
  (void)be;
  *bytes = sys_memory_available();
  PetscFunctionReturn(PETSC_SUCCESS);
}

double backend_weight_copy_bytes(const Backend *be)
{
  (void)be;
  return 0.0;
}

PetscErrorCode backend_cuda_set_attention_panel_bytes(size_t bytes, size_t *was)
{
  PetscFunctionBegin;
  (void)bytes;
  if (was) *was = 0;
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_SUP, "attention panels: this rlfuse was built without CUDA");
}

PetscErrorCode backend_cuda_available(char *why, size_t len, PetscBool *yes)
{
  PetscFunctionBegin;
  *yes = PETSC_FALSE;
  PetscCall(PetscStrncpy(why, "built without CUDA (nvcc not found or CUDA=0)", len));
  PetscFunctionReturn(PETSC_SUCCESS);
}

#endif
