/* The LLaMA-family shapes the benchmarks share (tools/bench/bench_model.c,
 * tools/bench/bench_decode.c, and tools/bench/gpu_baselines/shapes.py, which gives the
 * PyTorch baselines the same ones): SmolLM2-135M (30 layers, 576 wide, 9
 * query heads over 3 key/value heads, SwiGLU 1536, vocabulary 49152, tied
 * embeddings), Qwen2.5-0.5B (24 layers, 896 wide, 14 over 2 heads, SwiGLU
 * 4864, vocabulary 151936, tied) and Qwen2.5-1.5B (28 layers, 1536 wide, 12
 * over 2 heads, SwiGLU 8960, vocabulary 151936, tied). All with rope theta
 * 100000, RMSNorm eps 1e-5 and the position bound cut to 2048; the Qwen
 * shapes leave out Qwen2's q/k/v biases (as the baselines' LlamaConfig does;
 * under 0.1% of the weights), so these are shapes, not the models. */
#ifndef RLFUSE_BENCH_SIZES_H
#define RLFUSE_BENCH_SIZES_H

#include "model.h"

#define BENCH_LLAMA(L, H, KV, C, F, V) \
  {.n_layer = L, .n_head = H, .n_embd = C, .vocab_size = V, .n_positions = 2048, .head = MODEL_HEAD_LM, .arch = MODEL_ARCH_LLAMA, .n_kv_head = KV, .n_ffn = F, \
   .tie_embeddings = PETSC_TRUE, .rope_theta = 100000, .norm_eps = 1e-5}
#define BENCH_SMOLLM2 BENCH_LLAMA(30, 9, 3, 576, 1536, 49152)
#define BENCH_QWEN05  BENCH_LLAMA(24, 14, 2, 896, 4864, 151936)
#define BENCH_QWEN15  BENCH_LLAMA(28, 12, 2, 1536, 8960, 151936)

#endif
