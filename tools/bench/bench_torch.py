#!/usr/bin/env python3
"""bench_torch: PyTorch throughput of the reference GPT (regression/ref/gpt_torch.py),
the baseline that bench_model (the C model) is reported against, on CPU
(`make bench`) or on a GPU (tools/bench/bench_gpu.sh).

Usage: /usr/bin/python3 tools/bench/bench_torch.py [--sizes 1M,10M] [--threads 1,2]
           [--B 4] [--T 0] [--warmup 2] [--iters 10] [--set n_layer=8 ...]
           [--device cpu|cuda] [--dtype fp32|bf16] [--peak_tflops X]
           [--sdpa] [--compile]

For each size, thread count and mode it prints one machine-readable line

    torch size=<name> mode=<fwd|train> B=<B> T=<T> threads=<n> tok_per_s=<x> gflops=<y>

(lines starting with '#' are comments). mode=fwd is the forward pass with the
tied LM head, under no_grad; mode=train is forward + cross-entropy +
backward + global-norm clipping + AdamW step. Warm-up iterations are
excluded; the median over --iters timed iterations is reported.

On --device cuda the line has bench_model's fields, in its order, so the two
compare line by line, then the implementation:

    torch size= params= mode= B= T= threads= tok_per_s= gflops= ms= device=cuda precision=<fp32|bf16> [mfu=] impl=<eager|sdpa|compile>

Every step ends with torch.cuda.synchronize(), as bench_model's ends with
the backend's sync. --dtype bf16 is torch.autocast(bfloat16) around the
forward and the loss: bf16 matmuls with fp32 master weights, gradients and
AdamW state, like rlfuse's -precision bf16. fp32 is true fp32 (no TF32),
like rlfuse's cuBLAS calls. AdamW runs with fused=False (where the installed
torch has the argument) so the optimizer is eager too; --fused_adamw gives
the fused one (the GPU training targets' baseline, tools/bench/gpu_targets.sh). impl=eager is the
reference model as it is (Hugging Face GPT-2's eager attention: the T x T
scores in memory, like rlfuse's); --sdpa adds a line with the attention
through torch.nn.functional.scaled_dot_product_attention (flash attention on
a GPU), and --compile one with torch.compile of the reference model.
mfu = gflops / (peak_tflops * 1000), printed when --peak_tflops is given.

FLOP count: exactly model_flops_per_token in src/model/adamw.c, which
tools/bench/bench_model.c reports with (the PaLM appendix-B convention):

    forward  flops/token = 2*P_mm + 4*n_layer*T*C
    training flops/token = 3 * forward

P_mm = n_layer*12*C^2 + V*C is the number of weights in matmuls (the tied LM
head included); 4*n_layer*T*C is Q.K^T and att.V over the full T x T window.
gflops = flops/token * tok_per_s / 1e9.

Sizes: "1M"   n_layer 4, n_head 4, n_embd 128, vocab 512, n_positions 128
       "10M"  n_layer 6, n_head 6, n_embd 384, vocab 512, n_positions 256
       "124M" n_layer 12, n_head 12, n_embd 768, vocab 50257, n_positions 1024 (GPT-2 small)
--set key=value changes a configuration field of every selected size; --T 0
means T = n_positions.
"""
import argparse
import contextlib
import inspect
import os
import statistics
import sys
import time
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "regression", "ref"))  # gpt_torch
from gpt_torch import GPT, GPTConfig, init_gpt2, param_count  # noqa: E402

SIZES = {
    "1M": dict(n_layer=4, n_head=4, n_embd=128, vocab_size=512, n_positions=128),
    "10M": dict(n_layer=6, n_head=6, n_embd=384, vocab_size=512, n_positions=256),
    "124M": dict(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_positions=1024),
}


def flops_per_token(cfg, T, training):
    L, C, V = cfg.n_layer, cfg.n_embd, cfg.vocab_size
    forward = 2.0 * (L * 12.0 * C * C + V * C) + 4.0 * L * T * C
    return 3.0 * forward if training else forward


def time_iters(fn, warmup, iters, sync):
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sdpa_attention(self, x):
    """gpt_torch.Attention.forward with the causal attention in one fused call."""
    B, T, C = x.shape
    q, k, v = self.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def bench(name, cfg, B, T, threads, warmup, iters, args, impl="eager"):
    torch.set_num_threads(threads)
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    model = GPT(cfg)
    init_gpt2(model, gen)
    tok = torch.randint(0, cfg.vocab_size, (B, T), generator=gen).to(dev)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=gen).to(dev)
    if impl == "sdpa":
        for blk in model.transformer.h:
            blk.attn.forward = types.MethodType(sdpa_attention, blk.attn)
    model = model.to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    nodecay = [p for p in model.parameters() if p.dim() != 2]
    extra = dict(fused=args.fused_adamw) if "fused" in inspect.signature(torch.optim.AdamW).parameters else {}
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1), dict(params=nodecay, weight_decay=0.0)],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **extra)
    run = torch.compile(model) if impl == "compile" else model
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def autocast():
        if args.dtype == "bf16":
            return torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def fwd():
        with torch.no_grad(), autocast():
            run(tok)

    def train():
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = run(tok)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, cfg.vocab_size), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for mode, fn in (("fwd", fwd), ("train", train)):
        sec = time_iters(fn, warmup, iters, sync)
        tps = B * T / sec
        gf = flops_per_token(cfg, T, mode == "train") * tps / 1e9
        mfu = f" mfu={gf / (args.peak_tflops * 1e3):.4f}" if args.peak_tflops > 0 else ""
        if cuda:  # bench_model's fields and order
            print(f"torch size={name} params={nparams} mode={mode} B={B} T={T} threads={threads} tok_per_s={tps:.0f} gflops={gf:.2f} "
                  f"ms={sec * 1e3:.2f} device=cuda precision={args.dtype}{mfu} impl={impl}", flush=True)
        else:  # the line `make bench` and docs/benchmarks.md have always had
            tail = f"{mfu} impl={impl}" if (mfu or impl != "eager") else ""
            print(f"torch size={name} mode={mode} B={B} T={T} threads={threads} tok_per_s={tps:.1f} gflops={gf:.2f}{tail}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1M,10M", help="comma-separated size names: 1M, 10M, 124M (%(default)s)")
    ap.add_argument("--threads", default=str(os.cpu_count() or 1), help="comma-separated thread counts (%(default)s)")
    ap.add_argument("--B", type=int, default=4, help="sequences per batch (%(default)s)")
    ap.add_argument("--T", type=int, default=0, help="sequence length, 0: n_positions (%(default)s)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations (%(default)s)")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations, the median is reported (%(default)s)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a configuration field (n_layer, n_head, n_embd, vocab_size, n_positions) of every size")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the model runs (%(default)s)")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"),
                    help="fp32, or bf16 autocast with fp32 master weights (needs --device cuda, as rlfuse's bf16 does) (%(default)s)")
    ap.add_argument("--peak_tflops", type=float, default=0.0, help="device peak TFLOP/s at --dtype, for the mfu field (0: none)")
    ap.add_argument("--sdpa", action="store_true", help="also measure with scaled_dot_product_attention (impl=sdpa)")
    ap.add_argument("--fused_adamw", action="store_true", help="AdamW with fused=True (the fused kernel on cuda); default eager, as bench_model's step")
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile of the model (impl=compile)")
    args = ap.parse_args()

    over = {}
    for kv in args.set:
        k, eq, v = kv.partition("=")
        if not eq or k not in SIZES["1M"]:
            ap.error(f"--set {kv!r}: expected one of {', '.join(SIZES['1M'])} = integer")
        over[k] = int(v)
    names = [s for s in args.sizes.split(",") if s]
    for s in names:
        if s not in SIZES:
            ap.error(f"--sizes: unknown size {s!r} (known: {', '.join(SIZES)})")
    threads = [int(t) for t in args.threads.split(",") if t]
    if args.iters < 1 or args.B < 1 or min(threads) < 1:
        ap.error("--iters, --B and --threads must be positive")
    if args.dtype == "bf16" and args.device != "cuda":
        ap.error("--dtype bf16 needs --device cuda (rlfuse's -precision bf16 is CUDA only)")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            ap.error(f"--device cuda: torch {torch.__version__} sees no CUDA device (built for CUDA {torch.version.cuda})")
        torch.set_float32_matmul_precision("highest")  # no TF32: rlfuse's fp32 is true fp32
    if args.sdpa and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        ap.error(f"--sdpa: torch {torch.__version__} has no scaled_dot_product_attention (2.0 or later)")
    if args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile: torch {torch.__version__} has no torch.compile (2.0 or later)")
    impls = ["eager"] + (["sdpa"] if args.sdpa else []) + (["compile"] if args.compile else [])

    where = f"device=cuda ({torch.cuda.get_device_name()}, CUDA {torch.version.cuda}) precision={args.dtype}; " if args.device == "cuda" else ""
    print(f"# torch {torch.__version__}; {where}flops/token = model_flops_per_token (fwd 2*P_mm + 4*L*T*C, train 3x)")
    for name in names:
        cfg = GPTConfig(head="lm", **{**SIZES[name], **over})
        T = args.T or cfg.n_positions
        if T > cfg.n_positions:
            ap.error(f"--T {T} exceeds n_positions {cfg.n_positions} of size {name}")
        P = param_count(cfg, include_wpe=False)
        print(f"# size={name} {cfg.n_layer}L {cfg.n_head}H C={cfg.n_embd} V={cfg.vocab_size} P={P} "
              f"train_flops_per_token={flops_per_token(cfg, T, True):.4g}")
        for th in threads:
            for impl in impls:
                bench(name, cfg, args.B, T, th, args.warmup, args.iters, args, impl)
                if args.device == "cuda":  # the last model's memory back before the next
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
