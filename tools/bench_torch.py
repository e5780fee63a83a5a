#!/usr/bin/env python3
"""bench_torch: PyTorch CPU throughput of the reference GPT (tools/gpt_torch.py),
the baseline that bench_model (the C model) is reported against.

Usage: /usr/bin/python3 tools/bench_torch.py [--sizes 1M,10M] [--threads 1,2]
           [--B 4] [--T 0] [--warmup 2] [--iters 10] [--set n_layer=8 ...]

For each size, thread count and mode it prints one machine-readable line

    torch size=<name> mode=<fwd|train> B=<B> T=<T> threads=<n> tok_per_s=<x> gflops=<y>

(lines starting with '#' are comments). mode=fwd is the forward pass with the
tied LM head, under no_grad; mode=train is forward + cross-entropy +
backward + AdamW step. Warm-up iterations are excluded; the median over
--iters timed iterations is reported.

FLOP count: exactly gpt_flops_per_token in src/model/adamw.c, which
tools/bench_model.c reports with (the PaLM appendix-B convention):

    forward  flops/token = 2*P_mm + 4*n_layer*T*C
    training flops/token = 3 * forward

P_mm = n_layer*12*C^2 + V*C is the number of weights in matmuls (the tied LM
head included); 4*n_layer*T*C is Q.K^T and att.V over the full T x T window.
gflops = flops/token * tok_per_s / 1e9.

Sizes: "1M"  n_layer 4, n_head 4, n_embd 128, vocab 512, n_positions 128
       "10M" n_layer 6, n_head 6, n_embd 384, vocab 512, n_positions 256
--set key=value changes a configuration field of every selected size; --T 0
means T = n_positions.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT, GPTConfig, init_gpt2, param_count  # noqa: E402

SIZES = {
    "1M": dict(n_layer=4, n_head=4, n_embd=128, vocab_size=512, n_positions=128),
    "10M": dict(n_layer=6, n_head=6, n_embd=384, vocab_size=512, n_positions=256),
}


def flops_per_token(cfg, T, training):
    L, C, V = cfg.n_layer, cfg.n_embd, cfg.vocab_size
    forward = 2.0 * (L * 12.0 * C * C + V * C) + 4.0 * L * T * C
    return 3.0 * forward if training else forward


def time_iters(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name, cfg, B, T, threads, warmup, iters):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    model = GPT(cfg)
    init_gpt2(model, gen)
    tok = torch.randint(0, cfg.vocab_size, (B, T), generator=gen)
    tgt = torch.randint(0, cfg.vocab_size, (B, T), generator=gen)
    decay = [p for p in model.parameters() if p.dim() == 2]
    nodecay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1), dict(params=nodecay, weight_decay=0.0)],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)

    def fwd():
        with torch.no_grad():
            model(tok)

    def train():
        opt.zero_grad(set_to_none=True)
        logits = model(tok)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, cfg.vocab_size), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for mode, fn in (("fwd", fwd), ("train", train)):
        sec = time_iters(fn, warmup, iters)
        tps = B * T / sec
        gf = flops_per_token(cfg, T, mode == "train") * tps / 1e9
        print(f"torch size={name} mode={mode} B={B} T={T} threads={threads} tok_per_s={tps:.1f} gflops={gf:.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1M,10M", help="comma-separated size names (%(default)s)")
    ap.add_argument("--threads", default=str(os.cpu_count() or 1), help="comma-separated thread counts (%(default)s)")
    ap.add_argument("--B", type=int, default=4, help="sequences per batch (%(default)s)")
    ap.add_argument("--T", type=int, default=0, help="sequence length, 0: n_positions (%(default)s)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations (%(default)s)")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations, the median is reported (%(default)s)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a configuration field (n_layer, n_head, n_embd, vocab_size, n_positions) of every size")
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

    print(f"# torch {torch.__version__}; flops/token = gpt_flops_per_token (fwd 2*P_mm + 4*L*T*C, train 3x)")
    for name in names:
        cfg = GPTConfig(head="lm", **{**SIZES[name], **over})
        T = args.T or cfg.n_positions
        if T > cfg.n_positions:
            ap.error(f"--T {T} exceeds n_positions {cfg.n_positions} of size {name}")
        P = param_count(cfg, include_wpe=False)
        print(f"# size={name} {cfg.n_layer}L {cfg.n_head}H C={cfg.n_embd} V={cfg.vocab_size} P={P} "
              f"train_flops_per_token={flops_per_token(cfg, T, True):.4g}")
        for th in threads:
            bench(name, cfg, args.B, T, th, args.warmup, args.iters)


if __name__ == "__main__":
    main()
