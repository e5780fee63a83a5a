"""golden: writes the PyTorch golden tensors that regression/test_golden.c checks
the C model against (forward, loss, every gradient, and a few AdamW steps).

Usage: /usr/bin/python3 regression/ref/golden.py OUTDIR      (normally via `make golden`)

Writes OUTDIR/gpt_lm.h5 (role /policy, LM head) and OUTDIR/gpt_scalar.h5 (role
/reward, scalar head). Each is a valid rlfuse checkpoint of randomly
initialised weights plus a /golden group:

  attrs   format="rlfuse-golden", version=1, torch_version, made_by (git rev + date),
          role, head, B, T, seed, fp64_vs_fp32_maxrel (and one per quantity),
          fp64_vs_fp32_key_bias_maxabs
  tokens int32 [B,T], targets int32 [B,T] (next tokens; the last one random)
  logits float32 [B,T,V] (lm)  |  values, value_targets float32 [B,T] (scalar)
  loss   float32 scalar: lm mean_n -logp(target_n); scalar mean_n (v_n - y_n)^2
  grads/<key>            d loss / d param (tied wte: embedding + head)
  adamw  attrs lr beta1 beta2 eps weight_decay grad_clip warmup decay_steps
         min_lr_ratio nsteps unresolved; datasets losses, lrs, grad_norms [nsteps]
         (before each step, same batch every step); params/<key>, and the
         moments m/<key> (exp_avg) and v/<key> (exp_avg_sq), after the last step.

The reference is float32. The same computation is repeated in float64 from
the same starting weights; max|x32 - x64| / max|x64| per tensor (the worst
one per quantity) is printed and stored, as the basis for test tolerances.

One known exception: the key part of every attn.c_attn.bias (elements C..2C)
has an identically zero gradient in exact arithmetic (adding q.b_k shifts all
scores of a query equally, and softmax ignores that), so its float gradient is
rounding noise (~1e-9) and AdamW turns the noise into an implementation-defined
update of up to lr per step. The same would hold for any other element with
a gradient ~eps, and its noise would then leak into the other parameters over
the steps; the seeds are chosen so that none exists (asserted: no nonzero
|g| < UNRESOLVED * max|g| of its tensor, outside the key-bias slice).
test_golden.c gives the nonzero elements below UNRESOLVED the bound
2 * sum(lr) after AdamW. The fp64 comparison leaves the key-bias slice out and reports it.
"""
import copy
import datetime
import math
import os
import subprocess
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT, GPTConfig, ckpt_save_group  # noqa: E402

FORMAT, VERSION = "rlfuse-golden", 1
SIZES = dict(n_layer=2, n_head=4, n_embd=32, vocab_size=61, n_positions=24)
B, T = 3, 16
ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
             warmup=2, decay_steps=3, min_lr_ratio=0.1)
NSTEPS = 5
# A gradient element below this fraction of its tensor's max|g| is not resolved
# in float32: AdamW's step for it (lr * g / (|g| + eps) at the first step) has a
# noise-driven sign. Only the structurally zero key-bias slice, which cannot
# influence anything else, and exact zeros may fall below it (asserted).
UNRESOLVED = 1e-6
# (file, role, head, seed, grad_clip). grad_clip sits between the gradient
# norms of the first and the last steps, so both the clipped and the
# unclipped branch run (asserted below).
CASES = (("gpt_lm.h5", "policy", "lm", 1236, 2.3),
         ("gpt_scalar.h5", "reward", "scalar", 5678, 10.0))


def adamw_lr(opt, s):
    """The schedule of the C side (adamw_lr), 0-based step s."""
    if s < opt["warmup"]:
        return opt["lr"] * (s + 1) / opt["warmup"]
    if opt["decay_steps"] > 0:
        p = min(1.0, (s - opt["warmup"]) / opt["decay_steps"])
        r = opt["min_lr_ratio"]
        return opt["lr"] * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * p)))
    return opt["lr"]


def randomize(model, gen):
    """Random weights that exercise every path: nothing is zero or one.

    Matmul weights are wider than GPT-2's N(0, 0.02) so attention is far from
    uniform and the softmax and GELU see non-trivial inputs; biases and
    LayerNorm parameters are perturbed so a wrong bias/gain path shows up."""
    def rn(shape, std):
        return torch.randn(shape, generator=gen) * std

    with torch.no_grad():
        for k, p in model.named_parameters():
            if k.endswith(("wte.weight", "wpe.weight")):
                p.copy_(rn(p.shape, 0.1))
            elif k == "score.weight":
                p.copy_(rn(p.shape, 0.2))
            elif p.dim() == 2:
                p.copy_(rn(p.shape, 0.15))
            elif ("ln_" in k) and k.endswith("weight"):
                p.copy_(1.0 + rn(p.shape, 0.1))
            else:  # biases, LayerNorm shifts
                p.copy_(rn(p.shape, 0.05))


def compute_loss(model, tok, tgt, y):
    out = model(tok)
    if model.cfg.head == "lm":
        lp = torch.log_softmax(out, dim=-1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        return out, -lp.mean()
    return out, ((out - y) ** 2).mean()


def run_case(model, tok, tgt, y, opt):
    """Forward, loss, gradients, then NSTEPS of clipped AdamW on the same batch."""
    decay = [p for k, p in model.named_parameters() if p.dim() == 2]
    nodecay = [p for k, p in model.named_parameters() if p.dim() != 2]
    optim = torch.optim.AdamW(
        [dict(params=decay, weight_decay=opt["weight_decay"]), dict(params=nodecay, weight_decay=0.0)],
        lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"], foreach=False)
    res = dict(losses=[], lrs=[], grad_norms=[])
    for s in range(NSTEPS):
        optim.zero_grad(set_to_none=False)
        out, loss = compute_loss(model, tok, tgt, y)
        loss.backward()
        if s == 0:
            res["output"] = out.detach().clone()
            res["loss"] = loss.detach().clone()
            res["grads"] = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=opt["grad_clip"])
        lr = adamw_lr(opt, s)
        for g in optim.param_groups:
            g["lr"] = lr
        optim.step()
        res["losses"].append(loss.item())
        res["lrs"].append(lr)
        res["grad_norms"].append(norm.item())
    res["params"] = {k: p.detach().clone() for k, p in model.named_parameters()}
    res["m"] = {k: optim.state[p]["exp_avg"].clone() for k, p in model.named_parameters()}
    res["v"] = {k: optim.state[p]["exp_avg_sq"].clone() for k, p in model.named_parameters()}
    return res


def maxrel(a32, a64):
    a32, a64 = np.asarray(a32, np.float64), np.asarray(a64, np.float64)
    scale = max(np.abs(a64).max(), 1e-30)
    return float(np.abs(a32 - a64).max() / scale)


def reproducible(key, t, C):
    """The tensor without the noise-driven key-bias slice (see the docstring)."""
    if key.endswith("attn.c_attn.bias"):
        return torch.cat([t[:C], t[2 * C:]])
    return t


def made_by(tool="regression/ref/golden.py"):
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "diff", "--quiet", "HEAD"]).returncode != 0
        rev += "-dirty" if dirty else ""
    except (subprocess.CalledProcessError, FileNotFoundError):
        rev = "unknown"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{tool} git {rev} {date}"


def write_file(tmp, role, head, seed, opt, init, tok, tgt, y, r32, r64, rel, key_bias_abs):
    """The checkpoint group /<role> (initial weights) and /golden."""
    with h5py.File(tmp, "w") as f:
        ckpt_save_group(f, role, init)
        g = f.create_group("golden")
        g.attrs["format"] = FORMAT
        g.attrs["version"] = np.int32(VERSION)
        g.attrs["torch_version"] = str(torch.__version__)
        g.attrs["made_by"] = made_by()
        g.attrs["head"] = head
        g.attrs["role"] = role
        g.attrs["B"], g.attrs["T"], g.attrs["seed"] = np.int32(B), np.int32(T), np.int32(seed)
        g.attrs["fp64_vs_fp32_maxrel"] = max(rel.values())
        g.attrs["fp64_vs_fp32_key_bias_maxabs"] = key_bias_abs
        for k, v in rel.items():
            g.attrs["fp64_vs_fp32_maxrel_" + k] = v
        g.create_dataset("tokens", data=tok.numpy().astype(np.int32))
        g.create_dataset("targets", data=tgt.numpy().astype(np.int32))
        if head == "lm":
            g.create_dataset("logits", data=r32["output"].numpy().astype(np.float32))
        else:
            g.create_dataset("values", data=r32["output"].numpy().astype(np.float32))
            g.create_dataset("value_targets", data=y.numpy().astype(np.float32))
        g.create_dataset("loss", data=np.float32(r32["loss"].item()))
        gg = g.create_group("grads")
        for k, v in r32["grads"].items():
            gg.create_dataset(k, data=v.numpy().astype(np.float32))
        a = g.create_group("adamw")
        for k, v in opt.items():
            a.attrs[k] = np.int32(v) if isinstance(v, int) else np.float64(v)
        a.attrs["nsteps"] = np.int32(NSTEPS)
        a.attrs["unresolved"] = np.float64(UNRESOLVED)
        a.create_dataset("losses", data=np.array(r32["losses"], np.float32))
        a.create_dataset("lrs", data=np.array(r32["lrs"], np.float32))
        a.create_dataset("grad_norms", data=np.array(r32["grad_norms"], np.float32))
        for mom in ("m", "v"):
            mg = a.create_group(mom)
            for k, v in r32[mom].items():
                mg.create_dataset(k, data=v.numpy().astype(np.float32))
        ap = a.create_group("params")
        for k, v in r32["params"].items():
            d = ap.create_dataset(k, data=v.numpy().astype(np.float32))
            # How far float32 rounding alone moves this tensor in NSTEPS (vs float64).
            d.attrs["fp64_vs_fp32_maxabs"] = float(np.abs(v.numpy().astype(np.float64) - r64["params"][k].numpy()).max())


def make_case(outdir, fname, role, head, seed, grad_clip):
    opt = dict(ADAMW, grad_clip=grad_clip)
    cfg = GPTConfig(head=head, **SIZES)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = GPT(cfg)
    randomize(model, gen)
    V = cfg.vocab_size
    tok = torch.randint(0, V, (B, T), generator=gen)
    tgt = torch.cat([tok[:, 1:], torch.randint(0, V, (B, 1), generator=gen)], dim=1)
    y = torch.randn(B, T, generator=gen)
    init = copy.deepcopy(model)

    m64 = copy.deepcopy(model).double()
    r32 = run_case(model, tok, tgt, y, opt)
    r64 = run_case(m64, tok, tgt, y.double(), opt)

    clipped = [n > grad_clip for n in r32["grad_norms"]]
    assert any(clipped), f"{fname}: clipping never triggered (norms {r32['grad_norms']}); lower grad_clip"
    assert not all(clipped), f"{fname}: clipping triggered every step (norms {r32['grad_norms']}); raise grad_clip"

    C = cfg.n_embd
    for k, gk in r32["grads"].items():
        if k.endswith("attn.c_attn.bias"):
            noise = gk[C:2 * C].abs().max().item()
            assert noise < UNRESOLVED * gk.abs().max().item(), f"{k}: key-bias gradient {noise} is not rounding noise"
        rest = reproducible(k, gk, C).abs()
        nbad = int(((rest > 0) & (rest < UNRESOLVED * rest.max())).sum())
        assert nbad == 0, (f"{fname}: {k} has {nbad} gradient elements below {UNRESOLVED} of the tensor's maximum; their AdamW "
                           "direction is rounding noise that would leak into other tensors over the steps: pick another seed")

    rel = {
        "output": maxrel(r32["output"], r64["output"]),
        "loss": maxrel(r32["loss"], r64["loss"]),
        "grads": max(maxrel(r32["grads"][k], r64["grads"][k]) for k in r32["grads"]),
        "adamw_losses": maxrel(r32["losses"], r64["losses"]),
        "adamw_params": max(maxrel(reproducible(k, r32["params"][k], C), reproducible(k, r64["params"][k], C))
                            for k in r32["params"]),
    }
    key_bias_abs = max((r32["params"][k][C:2 * C].double() - r64["params"][k][C:2 * C]).abs().max().item()
                       for k in r32["params"] if k.endswith("attn.c_attn.bias"))
    worst_grad = max(r32["grads"], key=lambda k: maxrel(r32["grads"][k], r64["grads"][k]))
    worst_par = max(r32["params"], key=lambda k: maxrel(reproducible(k, r32["params"][k], C),
                                                        reproducible(k, r64["params"][k], C)))

    path = os.path.join(outdir, fname)
    tmp = path + ".tmp"
    try:
        write_file(tmp, role, head, seed, opt, init, tok, tgt, y, r32, r64, rel, key_bias_abs)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, path)

    print(f"{path}: {os.path.getsize(path)} bytes, loss {r32['loss'].item():.6f}")
    print(f"  grad norms {['%.4f' % n for n in r32['grad_norms']]} (clip {grad_clip}: {clipped})")
    print(f"  losses     {['%.6f' % x for x in r32['losses']]}")
    print("  fp64 vs fp32, max|x32-x64|/max|x64|: " + ", ".join(f"{k} {v:.2e}" for k, v in rel.items()))
    print(f"  adamw params, key part of c_attn.bias (noise-driven, excluded above): max abs diff {key_bias_abs:.2e}"
          f" (bound 2*sum(lr) = {2 * sum(r32['lrs']):.2e})")
    print(f"  worst grad tensor {worst_grad}; worst adamw param tensor {worst_par}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)  # deterministic reductions
    print(f"torch {torch.__version__}; B={B} T={T} {SIZES}")
    for case in CASES:
        make_case(outdir, *case)


if __name__ == "__main__":
    main()
