/* cpu backend: the ops table. The kernels live in cpu_*.c. */
#include "cpu_ops.h"

static const Backend cpu_backend = {
  .name                = "cpu",
  .alloc               = cpu_alloc,
  .free                = cpu_free,
  .grow                = cpu_grow,
  .to_host             = cpu_memcpy,
  .from_host           = cpu_memcpy,
  .copy                = cpu_memcpy,
  .zero                = cpu_zero,
  .sync                = cpu_sync,
  .encoder_forward     = cpu_encoder_forward,
  .encoder_backward    = cpu_encoder_backward,
  .layernorm_forward   = cpu_layernorm_forward,
  .layernorm_backward  = cpu_layernorm_backward,
  .rmsnorm_forward     = cpu_rmsnorm_forward,
  .rmsnorm_backward    = cpu_rmsnorm_backward,
  .rope                = cpu_rope,
  .qk_norm_forward     = cpu_qk_norm_forward,
  .qk_norm_backward    = cpu_qk_norm_backward,
  .swiglu_forward      = cpu_swiglu_forward,
  .swiglu_backward     = cpu_swiglu_backward,
  .matmul_forward      = cpu_matmul_forward,
  .matmul_forward_rows = cpu_matmul_forward_rows,
  .matmul_backward     = cpu_matmul_backward,
  .attention_forward   = cpu_attention_forward,
  .attention_backward  = cpu_attention_backward,
  .attention_cached    = cpu_attention_cached,
  .gelu_forward        = cpu_gelu_forward,
  .gelu_backward       = cpu_gelu_backward,
  .residual_forward    = cpu_residual_forward,
  .axpy                = cpu_axpy,
  .scale               = cpu_scale,
  .logprob_forward     = cpu_logprob_forward,
  .logprob_backward    = cpu_logprob_backward,
  .logprob_stats       = cpu_logprob_stats,
  .logprob_backward_shard = cpu_logprob_backward_shard,
  .sample              = cpu_sample,
  .sample_work         = cpu_sample_work,
  .sumsq               = cpu_sumsq,
  .adamw               = cpu_adamw,
};

const Backend *backend_cpu(void)
{
  cpu_blas_init(); /* cheap and idempotent: OpenBLAS single-threaded, see cpu_matmul.c */
  return &cpu_backend;
}
