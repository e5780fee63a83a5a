"""hf_tokenizer: a Hugging Face folder's tokenizer (tokenizer.json,
tokenizer_config.json, generation_config.json) <-> a checkpoint's
/tokenizer group (docs/formats.md "The tokenizer group"), for
tools/hf_import.py and tools/hf_export.py.

Byte-level BPE only (GPT-2, Llama 3, Qwen2, SmolLM2, ... as the tokenizers
package writes them): the same tables tools/gguf_import.py writes, plus what
generation needs (pad_id, the end-of-turn token eot_id, stop_ids) and the
tokenizer.json's pre_tokenizer and normalizer as written, so that the folder
hf_export writes encodes as the original did; and the whole tokenizer.json
(hf_tokenizer_json, as tokenizers serialises it), which tools/tokenizer.py
encodes with and hf_export writes back. Importing needs the tokenizers
package (make deps installs it into ~/.cache/rlfuse/python); exporting needs
nothing beyond numpy.
"""
import json
import os

import numpy as np

from hf_gpt2 import HFError
from tokenizer import bytes_to_unicode

NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
# end-of-turn tokens of the chat templates in use: the first that is a special token named by the template is eot_id
EOT_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endofturn|>")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
# pre-tokenizers by the GGUF name gguf_import records as @pre (tools/tokenizer.py builds the same)
PRE_BY_NAME = {
    "gpt2": BYTE_LEVEL, "default": BYTE_LEVEL,
    "smollm": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
}
QWEN2_REGEX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def _json(path):
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            v = json.load(f)
    except ValueError as e:
        raise HFError(f"{path}: not JSON ({e})")
    if not isinstance(v, dict):
        raise HFError(f"{path}: not a JSON object")
    return v


def pre_name(pre):
    """The GGUF name of a tokenizer.json pre_tokenizer (tools/tokenizer.py encodes gpt2 and smollm), or 'hf'."""
    if pre is None:
        return None
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt2"
    seq = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    types = [p.get("type") for p in seq]
    if types == ["Digits", "ByteLevel"] and seq[0].get("individual_digits") and seq[1].get("use_regex", True):
        return "smollm"
    if types == ["Split", "ByteLevel"] and not seq[1].get("use_regex", True):
        rx = seq[0].get("pattern", {}).get("Regex")
        return {QWEN2_REGEX: "qwen2", LLAMA3_REGEX: "llama-bpe"}.get(rx, "hf")
    return "hf"


def is_byte_level(j):
    pre = j.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    return any(p.get("type") == "ByteLevel" for p in parts) or (j.get("decoder") or {}).get("type") == "ByteLevel"


def _token_name(v):
    """tokenizer_config.json's bos_token & co.: a string, {"content": ...} or null."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _first_id(v):
    if isinstance(v, list):
        v = v[0] if v else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def import_tokenizer(d, V_model, config, import_module):
    """(/tokenizer datasets, attributes) of folder d, or (None, why) when it has no tokenizer rlfuse reads."""
    path = os.path.join(d, "tokenizer.json")
    if not os.path.isfile(path):
        return None, f"{path} missing: weights only, no /tokenizer"
    try:
        tk = import_module("tokenizers")
    except ImportError as e:
        raise HFError(f"{path}: reading it needs the tokenizers package ({e}; make deps installs it into ~/.cache/rlfuse/python)")
    try:
        text = tk.Tokenizer.from_file(path).to_str()  # tokenizers' own serialisation, kept whole in /tokenizer/hf_tokenizer_json
        j = json.loads(text)
    except Exception as e:  # noqa: BLE001 (tokenizers raises plain Exceptions)
        raise HFError(f"{path}: not a tokenizer.json that tokenizers reads ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    m = j.get("model") or {}
    if m.get("type") != "BPE" or not is_byte_level(j):
        return None, f"{path}: a {m.get('type')} tokenizer that is not byte-level BPE (rlfuse reads GPT-2-style byte-level BPE): weights only, no /tokenizer"
    added = {int(a["id"]): a for a in j.get("added_tokens", [])}
    ids = list(m["vocab"].values()) + list(added)
    V = max(ids) + 1 if ids else 0
    if V > V_model:
        raise HFError(f"{path}: token id {V - 1} is outside the model's vocabulary of {V_model} (config.json vocab_size)")
    inv = {c: b for b, c in bytes_to_unicode().items()}
    toks, types = [b""] * V_model, np.full(V_model, UNUSED, np.int32)  # ids no token has (padding rows): empty, unused
    for s, i in m["vocab"].items():
        try:
            toks[i], types[i] = bytes(inv[c] for c in s), NORMAL
        except KeyError as e:
            if i not in added:
                raise HFError(f"{path}: token {i} {s!r} has {e.args[0]!r}, not one of byte-level BPE's 256 characters")
    for i, a in added.items():
        toks[i], types[i] = a["content"].encode("utf-8"), CONTROL if a.get("special") else USER_DEFINED
    by_text = {s: i for s, i in m["vocab"].items()}
    by_text.update({a["content"]: i for i, a in added.items()})
    merges = [x if isinstance(x, str) else " ".join(x) for x in m.get("merges", [])]

    tc = _json(os.path.join(d, "tokenizer_config.json")) or {}
    gc = _json(os.path.join(d, "generation_config.json")) or {}

    def tok_id(name, key):
        t = _token_name(tc.get(key))
        if t is not None:
            if t not in by_text:
                raise HFError(f"{os.path.join(d, 'tokenizer_config.json')}: {key} {t!r} is not a token of {path}")
            return by_text[t]
        v = _first_id(gc.get(name))
        v = _first_id(config.get(name)) if v is None else v
        if v is not None and not 0 <= v < V_model:
            raise HFError(f"{d}: {name} {v} is outside the vocabulary of {V_model}")
        return -1 if v is None else v

    bos, eos, pad = tok_id("bos_token_id", "bos_token"), tok_id("eos_token_id", "eos_token"), tok_id("pad_token_id", "pad_token")
    template = tc.get("chat_template") or ""
    if isinstance(template, list):  # [{"name": ..., "template": ...}]: the default one
        template = next((t.get("template", "") for t in template if t.get("name") == "default"), "")
    eot = next((by_text[n] for n in EOT_NAMES if n in by_text and types[by_text[n]] == CONTROL and n in template), -1)
    stops = []
    gl = gc.get("eos_token_id")
    for v in [eos] + (gl if isinstance(gl, list) else [gl]) + [eot]:
        if isinstance(v, int) and 0 <= v < V_model and v not in stops:
            stops.append(v)
    add_bos = tc.get("add_bos_token")
    if not isinstance(add_bos, bool):  # a post-processor that puts BOS first (Llama 3's TemplateProcessing)
        post = j.get("post_processor") or {}
        procs = post.get("processors", []) if post.get("type") == "Sequence" else [post]  # Llama 3: ByteLevel, then TemplateProcessing
        single = next((q.get("single") for q in procs if q.get("type") == "TemplateProcessing"), None) or []
        add_bos = bos >= 0 and bool(single) and (single[0].get("SpecialToken") or {}).get("id") == toks[bos].decode("utf-8", "replace")
    off = np.zeros(V_model + 1, np.int64)
    off[1:] = np.cumsum([len(b) for b in toks])
    ds = {"token_bytes": np.frombuffer(b"".join(toks), np.uint8), "token_offsets": off, "token_type": types, "merges": merges,
          "stop_ids": np.asarray(stops, np.int32), "hf_tokenizer_json": text}
    attrs = {"model": "gpt2", "pre": pre_name(j.get("pre_tokenizer")) or "gpt2", "bos_id": np.int32(bos), "eos_id": np.int32(eos),
             "pad_id": np.int32(pad), "eot_id": np.int32(eot), "chat_template": template, "add_bos": np.int32(bool(add_bos)),
             "hf_pre_tokenizer": json.dumps(j.get("pre_tokenizer")), "hf_normalizer": json.dumps(j.get("normalizer"))}
    return (ds, attrs), None


def write_group(f, ds, attrs):
    """The /tokenizer group into the open h5py file f (as gguf_import.py writes it)."""
    import h5py
    t = f.create_group("tokenizer")
    for k in ("token_bytes", "token_offsets", "token_type", "stop_ids"):
        if k in ds:
            t.create_dataset(k, data=ds[k])
    if "hf_tokenizer_json" in ds:  # the original tokenizer.json: tools/tokenizer.py encodes with it, hf_export writes it back
        t.create_dataset("hf_tokenizer_json", data=ds["hf_tokenizer_json"], dtype=h5py.string_dtype("utf-8"))
    t.create_dataset("merges", data=np.array(ds["merges"], dtype=object), dtype=h5py.string_dtype("utf-8"))
    for k, v in attrs.items():
        t.attrs[k] = v


def read_group(path):
    """(datasets, attributes) of a checkpoint's /tokenizer, or None without one."""
    import h5py
    with h5py.File(path, "r") as f:
        if "tokenizer" not in f:
            return None
        g = f["tokenizer"]
        ds = {k: g[k][()] for k in g if k not in ("merges", "hf_tokenizer_json")}
        if "hf_tokenizer_json" in g:
            v = g["hf_tokenizer_json"][()]
            ds["hf_tokenizer_json"] = v.decode() if isinstance(v, bytes) else v
        ds["merges"] = [m.decode() if isinstance(m, bytes) else m for m in g["merges"][()]] if "merges" in g else []
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
    return ds, attrs


def export_files(ds, attrs, n_positions, where):
    """{file name: JSON object} of tokenizer.json, tokenizer_config.json and generation_config.json."""
    if attrs.get("model", "gpt2") != "gpt2":
        raise HFError(f"{where}: tokenizer model '{attrs.get('model')}': hf_export writes byte-level BPE (gpt2) tokenizers only")
    pre = json.loads(attrs["hf_pre_tokenizer"]) if "hf_pre_tokenizer" in attrs else PRE_BY_NAME.get(attrs.get("pre", "gpt2"))
    if pre is None:
        raise HFError(f"{where}: pre-tokenizer '{attrs.get('pre')}' has no tokenizer.json form here ({', '.join(PRE_BY_NAME)})")
    tb, off, types = ds["token_bytes"].tobytes(), ds["token_offsets"], ds["token_type"]
    toks = [tb[off[i]:off[i + 1]] for i in range(len(off) - 1)]
    b2u = bytes_to_unicode()
    vocab, added = {}, []
    for i, (b, ty) in enumerate(zip(toks, types)):
        if ty == NORMAL:
            vocab["".join(b2u[x] for x in b)] = i
        elif b:  # control and user-defined tokens (an unused one with text too): added tokens, in the BPE vocabulary as their text
            text = b.decode("utf-8", "replace")
            vocab.setdefault(text, i)
            added.append({"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                          "special": bool(ty != USER_DEFINED)})

    def name(k):
        i = int(attrs.get(k, -1))
        return toks[i].decode("utf-8", "replace") if 0 <= i < len(toks) else None

    bos, add_bos = name("bos_id"), bool(attrs.get("add_bos", 0))
    post = None
    if add_bos and bos is not None:
        post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [int(attrs["bos_id"])], "tokens": [bos]}}}
    tokenizer = json.loads(ds["hf_tokenizer_json"]) if "hf_tokenizer_json" in ds else {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                 "normalizer": json.loads(attrs.get("hf_normalizer", "null")), "pre_tokenizer": pre, "post_processor": post,
                 "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                 "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                           "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": list(ds["merges"])}}
    tconfig = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": add_bos, "add_eos_token": False,
               "bos_token": bos, "eos_token": name("eos_id"), "pad_token": name("pad_id"), "model_max_length": int(n_positions),
               "clean_up_tokenization_spaces": False,
               "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}}
    if attrs.get("chat_template"):
        tconfig["chat_template"] = attrs["chat_template"]
    stops = [int(x) for x in ds.get("stop_ids", [])] or ([int(attrs["eos_id"])] if int(attrs.get("eos_id", -1)) >= 0 else [])
    gen = {"_from_model_config": False}
    for k, v in (("bos_token_id", int(attrs.get("bos_id", -1))), ("pad_token_id", int(attrs.get("pad_id", -1)))):
        if v >= 0:
            gen[k] = v
    if stops:
        gen["eos_token_id"] = stops if len(stops) > 1 else stops[0]
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": tconfig, "generation_config.json": gen}
