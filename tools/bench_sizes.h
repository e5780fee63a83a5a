/* The LLaMA-family shape the CPU benchmarks share (tools/bench_model.c,
 * tools/bench_decode.c): SmolLM2-135M (30 layers, 576 wide, 9 query heads
 * over 3 key/value heads, SwiGLU 1536, vocabulary 49152, tied embeddings,
 * rope theta 100000), with the position bound cut to 2048. */
#ifndef RLFUSE_BENCH_SIZES_H
#define RLFUSE_BENCH_SIZES_H

#include "model.h"

#define BENCH_SMOLLM2 \
  {.n_layer = 30, .n_head = 9, .n_embd = 576, .vocab_size = 49152, .n_positions = 2048, .head = MODEL_HEAD_LM, .arch = MODEL_ARCH_LLAMA, .n_kv_head = 3, .n_ffn = 1536, \
   .tie_embeddings = PETSC_TRUE, .rope_theta = 100000, .norm_eps = 1e-5}

#endif
