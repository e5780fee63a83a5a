"""gpt_torch: an independent pure-PyTorch GPT-2, the reference for rlfuse's C model.

It reproduces Hugging Face GPT-2 math exactly (without the transformers
library): token + learned position embeddings, pre-LN blocks, Conv1D
projections (weight [in, out], y = x @ W + b), causal multi-head attention
scaled by 1/sqrt(head_size), GELU tanh approximation (gelu_new), LayerNorm
eps 1e-5, a final ln_f, then either the LM head tied to wte
(logits = h @ wte.T) or a scalar head (values = h @ score.weight.T, no bias).

Parameter names are the Hugging Face state-dict keys ("transformer.h.0.attn.
c_attn.weight", ...), in state-dict order, and the checkpoint helpers read and
write rlfuse's HDF5 layout (docs/formats.md):

  /<role>                 int attrs n_layer n_head n_embd vocab_size n_positions,
                          string attr head ("lm" | "scalar")
  /<role>/params/<key>    float32 datasets in their logical shapes

Checked once against transformers 4.30.2 (GPT2LMHeadModel and
GPT2ForSequenceClassification's score, loaded with these state dicts): the
outputs on the golden checkpoints were identical in float64 (max diff 0.0).

Used by regression/ref/golden.py (golden tensors) and tools/bench/bench_torch.py (throughput
baseline). Library only; run `/usr/bin/python3 regression/ref/gpt_torch.py` for a self-check.
"""
import math
from dataclasses import dataclass, asdict

import numpy as np
import torch
import torch.nn as nn

LN_EPS = 1e-5
HEADS = ("lm", "scalar")


@dataclass
class GPTConfig:
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int
    n_positions: int
    head: str = "lm"

    def check(self):
        assert self.head in HEADS, f"head must be one of {HEADS}, got {self.head!r}"
        assert self.n_embd % self.n_head == 0, "n_embd must be a multiple of n_head"
        for k, v in asdict(self).items():
            if k != "head":
                assert v > 0, f"{k} must be positive"


def gelu_new(x):
    """GPT-2's GELU, tanh approximation (Hugging Face NewGELUActivation)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Conv1D(nn.Module):
    """Hugging Face Conv1D: weight [in, out], y = x @ W + b."""

    def __init__(self, nin, nout):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(nin, nout))
        self.bias = nn.Parameter(torch.zeros(nout))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = Conv1D(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        # Same order of operations as Hugging Face GPT2Attention._attn.
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hs)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = torch.where(causal, att, torch.tensor(torch.finfo(att.dtype).min, dtype=att.dtype, device=x.device))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = Conv1D(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=LN_EPS)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=LN_EPS)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=LN_EPS)


class GPT(nn.Module):
    """GPT-2 with the LM head (tied to wte) or the scalar head (score.weight [1, C]).

    named_parameters() yields exactly the checkpoint keys, in state-dict order."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        cfg.check()
        self.cfg = cfg
        self.transformer = Transformer(cfg)
        if cfg.head == "scalar":
            self.score = nn.Linear(cfg.n_embd, 1, bias=False)

    def hidden(self, tok):
        """Final hidden states [B, T, C] (after ln_f) for tokens [B, T]."""
        B, T = tok.shape
        assert T <= self.cfg.n_positions, f"T={T} exceeds n_positions={self.cfg.n_positions}"
        tr = self.transformer
        pos = torch.arange(T, device=tok.device)
        x = tr.wte(tok) + tr.wpe(pos)[None]
        for blk in tr.h:
            x = blk(x)
        return tr.ln_f(x)

    def forward(self, tok):
        """Logits [B, T, V] (LM head) or values [B, T] (scalar head)."""
        h = self.hidden(tok)
        if self.cfg.head == "lm":
            return torch.matmul(h, self.transformer.wte.weight.t())
        return torch.matmul(h, self.score.weight.t()).squeeze(-1)

    def decay_mask(self):
        """{key: bool}: weight decay applies to 2-D tensors (matmul weights, wte, wpe, score)."""
        return {k: p.dim() == 2 for k, p in self.named_parameters()}


def init_gpt2(model, gen, std=0.02):
    """Hugging Face GPT-2 initialisation: N(0, std) weights, residual projections
    scaled by 1/sqrt(2 n_layer), zero biases, unit LayerNorm gains."""
    n_layer = model.cfg.n_layer
    with torch.no_grad():
        for k, p in model.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * n_layer) if k.endswith("c_proj.weight") else std
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * s)
            elif ".ln_" in k or k.startswith("transformer.ln_f"):
                p.fill_(1.0 if k.endswith("weight") else 0.0)
            else:
                p.zero_()


# ---- HDF5 checkpoints (rlfuse layout) ----------------------------------------

CONFIG_INTS = ("n_layer", "n_head", "n_embd", "vocab_size", "n_positions")


def ckpt_read_config(path, role):
    import h5py

    with h5py.File(path, "r") as f:
        assert role in f, f"{path}: no group /{role}"
        g = f[role]
        kw = {k: int(g.attrs[k]) for k in CONFIG_INTS}
        head = g.attrs["head"]
        kw["head"] = head.decode() if isinstance(head, bytes) else str(head)
    return GPTConfig(**kw)


def ckpt_load(path, role, dtype=torch.float32):
    """A GPT built from /<role>'s configuration with its parameters loaded."""
    import h5py

    model = GPT(ckpt_read_config(path, role)).to(dtype)
    with h5py.File(path, "r") as f:
        params = f[role]["params"]
        with torch.no_grad():
            for k, p in model.named_parameters():
                assert k in params, f"{path}: missing /{role}/params/{k}"
                a = params[k][()]
                assert tuple(a.shape) == tuple(p.shape), f"{path}: /{role}/params/{k} has shape {a.shape}, expected {tuple(p.shape)}"
                p.copy_(torch.from_numpy(np.asarray(a)).to(dtype))
    return model


def write_config_attrs(g, cfg):
    for k in CONFIG_INTS:
        g.attrs[k] = np.int32(getattr(cfg, k))
    g.attrs["head"] = cfg.head  # variable-length UTF-8, as the C writer does


def ckpt_save_group(f, role, model):
    """Write /<role> (attributes and float32 params) into an open h5py.File."""
    g = f.require_group(role)
    write_config_attrs(g, model.cfg)
    pg = g.require_group("params")
    for k, p in model.named_parameters():
        pg.create_dataset(k, data=p.detach().cpu().to(torch.float32).numpy())
    return g


def ckpt_save(path, role, model):
    import h5py

    with h5py.File(path, "w") as f:
        ckpt_save_group(f, role, model)


def param_count(cfg, include_wpe=True):
    C, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
    n = V * C + L * per_layer + 2 * C + (C if cfg.head == "scalar" else 0)
    return n + (cfg.n_positions * C if include_wpe else 0)


if __name__ == "__main__":
    cfg = GPTConfig(n_layer=2, n_head=4, n_embd=32, vocab_size=61, n_positions=24)
    m = GPT(cfg)
    init_gpt2(m, torch.Generator().manual_seed(0))
    n = sum(p.numel() for p in m.parameters())
    assert n == param_count(cfg), (n, param_count(cfg))
    tok = torch.randint(0, cfg.vocab_size, (2, 7))
    full = m(tok)
    # Causality: the logits at t must not depend on tokens after t.
    assert torch.allclose(m(tok[:, :4]), full[:, :4], atol=1e-6)
    print("gpt_torch self-check ok:", n, "parameters;", [k for k, _ in m.named_parameters()][:6], "...")
