#!/usr/bin/env python3
"""bench_torch_llama: PyTorch throughput of Hugging Face's LlamaForCausalLM
at SmolLM2-135M's shape, the baseline tools/bench_model's "-size smollm2"
line is set beside (`make bench`, docs/benchmarks.md).

Usage: PYTHONPATH=~/.cache/rlfuse/python /usr/bin/python3 tools/bench/bench_torch_llama.py \
           [--threads 1] [--B 4] [--T 128] [--warmup 1] [--iters 3]

Prints one line per mode, with bench_model's fields in its order:

    torch size=smollm2 params=<n> mode=<fwd|train> B= T= threads= tok_per_s= gflops= ms=

mode=fwd: the forward with the tied LM head under no_grad; mode=train:
forward, cross-entropy, backward, global-norm clipping and an AdamW step
(weight decay on 2-D tensors), as bench_model's step. float32, eager
attention (the T x T scores in memory, like rlfuse's CPU path), the model
randomly initialised (N(0, 0.02)). The FLOP count is rlfuse's
model_flops_per_token for the LLaMA family (src/model/adamw.c):
forward = 2 * (L * (2C^2 + 2C*Ckv + 3C*F) + V*C) + 4*L*T*C, training 3x.
"""
import argparse
import inspect
import statistics
import time

import torch

SHAPE = dict(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536,
             vocab_size=49152, max_position_embeddings=2048, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)


def flops_per_token(T, training):
    L, C, V, F = SHAPE["num_hidden_layers"], SHAPE["hidden_size"], SHAPE["vocab_size"], SHAPE["intermediate_size"]
    kv = C * SHAPE["num_key_value_heads"] / SHAPE["num_attention_heads"]
    fwd = 2.0 * (L * (2 * C * C + 2 * C * kv + 3 * C * F) + V * C) + 4.0 * L * T * C
    return 3 * fwd if training else fwd


def median_seconds(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(**SHAPE, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).float()
    n = sum(p.numel() for p in model.parameters())
    tok = torch.randint(0, cfg.vocab_size, (a.B, a.T))
    tgt = torch.randint(0, cfg.vocab_size, (a.B, a.T))
    extra = dict(fused=False) if "fused" in inspect.signature(torch.optim.AdamW).parameters else {}
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1), dict(params=rest, weight_decay=0.0)], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **extra)

    def fwd():
        with torch.no_grad():
            model(tok, use_cache=False)

    def train():
        opt.zero_grad(set_to_none=True)
        logits = model(tok, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, cfg.vocab_size), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    N = a.B * a.T
    for mode, fn in (("fwd", fwd), ("train", train)):
        s = median_seconds(fn, a.warmup, a.iters)
        print(f"torch size=smollm2 params={n} mode={mode} B={a.B} T={a.T} threads={a.threads} tok_per_s={N / s:.0f} "
              f"gflops={flops_per_token(a.T, mode == 'train') * N / s * 1e-9:.2f} ms={s * 1e3:.2f}", flush=True)


if __name__ == "__main__":
    main()
