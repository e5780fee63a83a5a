/* rfcuda: the plain-C face of the CUDA code in cuda/.
 *
 * PETSc is built as C, so code in cuda/ includes no PETSc header. Every
 * function here returns 0 on success and non-zero on failure; the failure's
 * message (the CUDA, cuBLAS or NCCL call, its error string, and the file and
 * line) is then in rfcuda_error(). src/tensor/cuda_backend.c wraps these into
 * the backend ops table (inc/tensor.h), whose comments define what each op
 * computes; the arguments here are those of the ops, with PetscBool as int.
 *
 * Pointers are device pointers, index arrays included (tok, pos, target,
 * mask_off, mask_ids, slot), except where a comment says "host". All ops
 * run on the compute stream, in order; rfcuda_sync waits for it. */
#ifndef RLFUSE_RFCUDA_H
#define RLFUSE_RFCUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime (cuda_runtime.cu) ------------------------------------------ */
const char *rfcuda_error(void);   /* the last failure's message */
int rfcuda_device_count(int *n);  /* 0 devices is not a failure; rfcuda_error() then says why */
/* Selects device `device`, creates the compute and communication streams,
 * the events that link them, and the cuBLAS/cuBLASLt handles. Idempotent. */
int rfcuda_init(int device);
int rfcuda_finalize(void);
/* The PCI bus id of the device rfcuda_init selected ("0000:19:00.0"), which
 * tells whether two ranks of a node drive the same GPU. */
int rfcuda_device_pci(char *buf, int len);
/* 0: fp32 everywhere. 1: bf16 matmul operands and activations stored in bf16
 * precision, fp32 accumulation, fp32 master weights and optimizer state. */
int rfcuda_set_precision(int bf16);
int rfcuda_get_precision(void);
/* The streams as opaque handles (cudaStream_t) for NCCL and events. */
void *rfcuda_compute_stream(void);
void *rfcuda_comm_stream(void);
/* The communication stream waits for work queued so far on the compute
 * stream (an event, no host synchronisation), and the reverse. */
int rfcuda_comm_wait_compute(void);
int rfcuda_compute_wait_comm(void);

/* ---- memory (cuda_memory.cu) -------------------------------------------- */
int rfcuda_alloc(size_t bytes, void **ptr); /* zero-filled */
int rfcuda_free(void *ptr);
int rfcuda_to_host(void *dst_host, const void *src, size_t bytes);
int rfcuda_from_host(void *dst, const void *src_host, size_t bytes);
int rfcuda_copy(void *dst, const void *src, size_t bytes);
int rfcuda_zero(void *ptr, size_t bytes);
int rfcuda_sync(void);
/* Device memory in use (total minus free, cudaMemGetInfo): every process's. */
int rfcuda_mem_used(size_t *bytes);
/* Device memory free now (cudaMemGetInfo). */
int rfcuda_mem_free(size_t *bytes);

/* ---- bf16 weight copies (cuda_wcache.cu) and graphs (cuda_graph.cu) ---- */
/* p .. p+bytes holds weights (a model's parameters): bf16 matmuls keep a
 * bf16 copy of each weight in it, refreshed after a write (see the file). */
int    rfcuda_weights_region(const void *p, size_t bytes);
int    rfcuda_weights_refresh(void);      /* every stale copy, now */
size_t rfcuda_weights_bf16_bytes(void);   /* device memory the copies hold */
/* Changes when memory a captured graph may point to moves. */
unsigned long long rfcuda_epoch(void);
/* Capture the ops queued on the compute stream until rfcuda_graph_end into
 * an executable graph; launch it (after rfcuda_weights_refresh); destroy. */
int rfcuda_graph_begin(void);
int rfcuda_graph_end(void **exec);
int rfcuda_graph_launch(void *exec);
int rfcuda_graph_destroy(void *exec);

/* ---- ops (one file per family) ------------------------------------------ */
/* cuda_encoder.cu */
int rfcuda_encoder_forward(float *out, const int *tok, const int *pos, const float *wte, const float *wpe, int N, int C,
                           int v0, int Vl);
int rfcuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, const int *pos, int N, int C,
                            int v0, int Vl);
/* cuda_layernorm.cu */
int rfcuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                             int N, int C);
int rfcuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, int N, int C);
int rfcuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
int rfcuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                            const float *rstd, int N, int C);
/* Qwen3's per-head q/k RMSNorm (Backend.qk_norm_forward / qk_norm_backward) */
int rfcuda_qk_norm_forward(float *qkv, float *in, float *rstd, const float *wq, const float *wk, int N, int NH, int NKV,
                           int hd, float eps);
int rfcuda_qk_norm_backward(float *dqkv, float *dwq, float *dwk, const float *in, const float *rstd, const float *wq,
                            const float *wk, int N, int NH, int NKV, int hd);
/* cuda_rope.cu (inv_freq and pos are device arrays) */
int rfcuda_rope(float *qkv, const int *pos, const float *inv_freq, int N, int NH, int NKV, int hd, int inverse);
/* cuda_matmul.cu (cuBLAS / cuBLASLt) */
int rfcuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                          int transposed);
/* Backend.matmul_fused: at most RFCUDA_FEW_ROWS rows (one kernel, cuda_skinny.cu) */
#define RFCUDA_FEW_ROWS 8
int rfcuda_matmul_fused(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                        int transposed, int gated, int add, const float *norm_w, float norm_eps);
int rfcuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                           int N, int C, int OC, int transposed);
/* cuda_attention.cu */
/* The training pair, tiled: lse [B,NH,T] (the forward's may be NULL). */
int rfcuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV);
int rfcuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B, int T, int C,
                              int NH, int NKV);
/* Rows of the tiled pair's score panels are made for as many (batch, kv
 * head) units at a time as fit this many bytes (0: the default, 256 MiB);
 * returns the former value. Tests set it small to run several chunks. */
size_t rfcuda_attention_set_panel_bytes(size_t bytes);
int rfcuda_attention_cached(float *out, float *kcache, float *vcache, const float *qkv, const int *slot, const int *pos,
                            int N, int Tmax, int C, int NH, int NKV);
/* cuda_pointwise.cu */
int rfcuda_gelu_forward(float *out, const float *inp, size_t n);
int rfcuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
int rfcuda_swiglu_forward(float *out, const float *gu, int N, int F);
int rfcuda_swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F);
int rfcuda_residual_forward(float *out, const float *a, const float *b, size_t n);
int rfcuda_axpy(float *y, float alpha, const float *x, size_t n);
int rfcuda_scale(float *x, float alpha, size_t n);
int rfcuda_sumsq(double *out_host, const float *x, size_t n);
int rfcuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps,
                 float wd, int t, float gs);
/* cuda_logprob.cu */
int rfcuda_logprob_forward(float *logprob, float *lse, float *entropy, const float *logits, const int *target,
                           float inv_temp, const int *mask_off, const int *mask_ids, int N, int V);
int rfcuda_logprob_backward(float *dlogits, const float *logits, const float *lse, const int *target,
                            const float *dlogprob, float inv_temp, const int *mask_off, const int *mask_ids, int N,
                            int V);
int rfcuda_logprob_stats(double *stats, const float *logits, const int *target, float inv_temp, const int *mask_off,
                         const int *mask_ids, int N, int Vl, int v0);
int rfcuda_logprob_backward_shard(float *dlogits, const float *logits, const float *lse, const int *target,
                                  const float *dlogprob, float inv_temp, const int *mask_off, const int *mask_ids,
                                  int N, int Vl, int v0);
/* cuda_sample.cu (Backend.sample; the settings of BackendSampleCfg as plain
 * values; work: rfcuda_sample_work(N, V) bytes of device memory) */
int    rfcuda_sample(int *token, float *logprob, int *nallowed, int *boundary, int *allowed, void *work,
                     const float *logits, const int *row, const int *sample_id, const int *position, const int *ban_eos,
                     double temperature, double top_p, long long top_k, int greedy, int eos, unsigned long long key,
                     unsigned iteration, int N, int V);
size_t rfcuda_sample_work(int N, int V);

/* ---- NCCL (cuda_nccl.cu; built when nccl.h is found) --------------------- */
/* Opaque communicator bootstrapped from an MPI communicator: rank 0 makes
 * the unique id, the caller broadcasts it (id_bytes bytes) over MPI, and
 * every rank then calls rfcuda_nccl_init with it. */
int  rfcuda_nccl_id_size(void);
int  rfcuda_nccl_get_id(void *id);
int  rfcuda_nccl_init(void **comm, const void *id, int nranks, int rank);
int  rfcuda_nccl_destroy(void *comm);
/* On the communication stream, after the compute stream's queued work;
 * the compute stream then waits for it. The sum is deterministic and in
 * rank order, as comm_allreduce_sum on the CPU: ncclAllGather into scratch,
 * then a kernel adds the nranks copies in rank order. */
int  rfcuda_nccl_allreduce_sum(void *comm, float *buf, size_t n);
int  rfcuda_nccl_bcast(void *comm, void *buf, size_t bytes, int root);
int  rfcuda_nccl_send(void *comm, const void *buf, size_t bytes, int peer);
int  rfcuda_nccl_recv(void *comm, void *buf, size_t bytes, int peer);

#ifdef __cplusplus
}
#endif
#endif
