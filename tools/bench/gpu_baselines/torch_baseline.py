#!/usr/bin/env python3
"""PyTorch + transformers baselines on one GPU, random weights of a named shape (shapes.py).

  python3 torch_baseline.py train SHAPE B T          bf16 autocast, SDPA, fused AdamW, clip 1.0
  python3 torch_baseline.py decode SHAPE [CACHES (dynamic)] [CONCS (1,8,64)]
        HF generate, prompt 8, 64 new tokens (all run: EOS banned by min_new_tokens), bf16
        weights, sampling at temperature 1, at each number of sequences and for each cache of
        the comma-separated CACHES, one model: 'dynamic' (generate's default), 'static' (a
        static KV cache, whose decoding forward generate() compiles with torch.compile itself;
        wrapping m.forward in torch.compile by hand fails: CUDA-graph outputs overwritten).

One line per measurement, key=value fields (bench_decode's names where they mean the same).
A static run also reports compiled_graphs, the graphs torch.compile (dynamo) built during its
generate calls: 0 means generate() did not compile, and the line then says
cache=static-not-compiled. A cache that fails prints a line with error="..." and the others
still run (exit status 1 at the end). BASELINE_DEVICE (cuda) names another device, for a
check of the script where there is no GPU."""
import os, sys, time, statistics, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shapes import llama_config
from transformers import LlamaForCausalLM

DEV = os.environ.get("BASELINE_DEVICE", "cuda")


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def graphs():
    """Graphs dynamo has compiled so far in this process (None where the counter is missing)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return None


def train(shape, B, T):
    m = LlamaForCausalLM(llama_config(shape, attn_implementation="sdpa")).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, m.config.vocab_size, (B, T), device=DEV)

    def step():
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = m(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    for _ in range(3):
        step()
    sync()
    ts = []
    for _ in range(8):
        t = time.perf_counter(); step(); sync(); ts.append(time.perf_counter() - t)
    s = statistics.median(ts)
    print(f"torch-train shape={shape} B={B} T={T} precision=bf16-autocast impl=sdpa tok_per_s={B * T / s:.0f} ms={s * 1e3:.1f}")


def decode(shape, caches, concs):
    m = LlamaForCausalLM(llama_config(shape, attn_implementation="sdpa")).to(DEV, dtype=torch.bfloat16).eval()
    failed = False
    for cache in caches:
        kw = dict(max_new_tokens=64, min_new_tokens=64, do_sample=True, temperature=1.0, top_k=0, pad_token_id=0)
        if cache == "static":  # generate() compiles the decoding forward itself when the cache is static
            kw["cache_implementation"] = "static"
        for conc in concs:
            x = torch.randint(3, m.config.vocab_size, (conc, 8), device=DEV)
            g0, t0 = graphs(), time.perf_counter()
            try:
                with torch.no_grad():
                    for _ in range(2 if cache == "static" else 1):
                        m.generate(x, **kw)
                    sync()
                    ts = []
                    for _ in range(3):
                        t = time.perf_counter(); m.generate(x, **kw); sync(); ts.append(time.perf_counter() - t)
            except Exception as e:  # the line says why; the other caches and counts still run
                msg = f"{type(e).__name__}: {e}".splitlines()[0][:200].replace('"', "'")
                print(f"hf-generate shape={shape} conc={conc} weights=bf16 cache={cache} error=\"{msg}\"", flush=True)
                failed = True
                continue
            s = statistics.median(ts)
            label, extra = cache, ""
            if cache == "static":
                g1 = graphs()
                n = None if g0 is None or g1 is None else g1 - g0
                label = "static-compiled" if n is None or n > 0 else "static-not-compiled"
                extra = f" compiled_graphs={'NA' if n is None else n}"
            print(f"hf-generate shape={shape} conc={conc} weights=bf16 cache={label} decode_tok_per_s={conc * 64 / s:.0f} s={s:.3f}"
                  f" warmup_s={time.perf_counter() - t0 - sum(ts):.1f}{extra}", flush=True)
    return failed


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("train", "decode"):
        sys.exit(__doc__)
    torch.manual_seed(0)
    if sys.argv[1] == "train":
        train(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        caches = (sys.argv[3] if len(sys.argv) > 3 else "dynamic").split(",")
        bad = [c for c in caches if c not in ("dynamic", "static")]
        if bad:
            sys.exit(f"torch_baseline: error: cache {bad[0]!r} unknown (choose dynamic, static)")
        concs = [int(c) for c in (sys.argv[4] if len(sys.argv) > 4 else "1,8,64").split(",")]
        sys.exit(1 if decode(sys.argv[2], caches, concs) else 0)
