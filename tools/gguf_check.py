#!/usr/bin/env python3
"""gguf_check: is a checkpoint imported by tools/gguf_import.py right?
Independent of rlfuse's C model: transformers, tokenizers and the gguf
package read the same data their own way.

Usage: tools/py tools/gguf_check.py CKPT.h5 [ROLE] [--gguf FILE]
           [--prompt TEXT] [--tokens N] [--expect WORD] [--skip-dequant]

Prints "ok - ..." / "not ok - ..." lines (the regression suite's format) and
exits 1 if any check failed:
  tokenizer    tools/tokenizer.py's ids = those of a tokenizers BPE built
               from the same vocabulary and merges with SmolLM2's
               pre-tokenizer (Digits(individual_digits) + ByteLevel), wrapped
               in transformers' PreTrainedTokenizerFast, on strings with
               digits, contractions, runs of spaces and newlines, accents,
               CJK, emoji and special tokens, and 1000 random strings;
               decode(encode(s)) = s; the chat template as tools/tokenizer.py renders it = transformers'
               apply_chat_template (jinja2) = the fixed ChatML function
  dequant      (with --gguf, unless --skip-dequant) every tensor of the GGUF
               dequantized by gguf.quants = by gguf_import's own decoder
               (F32, F16, BF16, Q4_0, Q4_1, Q8_0), bit for bit, and the
               checkpoint's tensors = a fresh import's
  model        a LlamaForCausalLM built from the checkpoint's attributes and
               tensors: greedy continuation of a chat prompt (printed; with
               --expect WORD it must contain WORD), and the mean negative
               log-likelihood of a fixed English reply lower than with q_proj
               and k_proj left in llama.cpp's row order
"""
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_import as gi  # noqa: E402
from tokenizer import Tokenizer, chatml_smollm2  # noqa: E402

fails = 0
STRINGS = ["Hello world!", "I have 123 apples,  and   it's 3.14159.", "  leading spaces and trailing   ",
           "line one\nline two\n\n\tindented\r\n", "Don't you'll we've I'M THEY'RE", "naïve café — “quotes” …",
           "日本語のテキストと中文", "emoji 🙂👍🏽 and ½ ⅓ Ⅻ", "x=y+2*(z-1); // code {\"a\": [1, 2]}",
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "a<|endoftext|>b <file_sep>c", "", " ", "\n\n\n"]
REPLY = "The capital of France is Paris. It is known for the Eiffel Tower, its museums and its cafés."


def ok(cond, what):
    global fails
    print(("ok - " if cond else "not ok - ") + what, flush=True)
    fails += 0 if cond else 1


def read_ckpt(path, role):
    import h5py
    with h5py.File(path, "r") as f:
        g = f[role]
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
        p = {k: g["params"][k][()] for k in g["params"]}
    return a, p


def check_tokenizer(tk):
    from tokenizers import Tokenizer as HFTok, models, pre_tokenizers, decoders, AddedToken
    from transformers import PreTrainedTokenizerFast

    vocab = {}
    for i in range(len(tk.tokens)):
        vocab.setdefault(tk._u(tk.tokens[i]) if tk.types[i] not in (3, 4) else tk.token_text(i), i)
    merges = tk.merges
    m = HFTok(models.BPE(vocab, merges))
    m.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    m.decoder = decoders.ByteLevel()
    m.add_special_tokens([AddedToken(tk.token_text(i), special=True, normalized=False)
                          for i in range(len(tk.tokens)) if tk.types[i] == 3])
    hf = PreTrainedTokenizerFast(tokenizer_object=m, bos_token=tk.token_text(tk.bos_id), eos_token=tk.token_text(tk.eos_id))
    rng = random.Random(7)
    alphabet = list("ab Z9'\n\t.,-é日🙂\u00a0\u2003_½") + ["'s", "'ll", "  ", "\r\n", " the", "ing", "<|im_end|>", "123"]
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(1000)]
    bad = [(s, tk.encode(s), hf.encode(s, add_special_tokens=False)) for s in STRINGS + fuzz
           if tk.encode(s) != hf.encode(s, add_special_tokens=False)]
    ok(not bad, f"tokenizer: tools/tokenizer.py = transformers PreTrainedTokenizerFast (BPE of the same vocabulary and merges, "
       f"Digits + ByteLevel pre-tokenizer) on {len(STRINGS)} strings and {len(fuzz)} random ones" + (f"; first difference {bad[0]}" if bad else ""))
    rt = [s for s in STRINGS if tk.decode(tk.encode(s)) != s]
    ok(not rt, "tokenizer: decode(encode(s)) = s for every string" + (f"; not for {rt[0]!r}" if rt else ""))
    print(f"# tokens of 'I have 123 apples': {[tk.token_text(i) for i in tk.encode('I have 123 apples')]} (pre-tokenizer {tk.pre})")
    if tk.chat_template:
        msgs = [[{"role": "user", "content": "What is 2+2?"}],
                [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                 {"role": "user", "content": "Bye"}]]
        hf.chat_template = tk.chat_template
        same = all(tk.apply_chat_template(x, g) == hf.apply_chat_template(x, tokenize=False, add_generation_prompt=g)
                   and tk.encode_chat(x, g) == hf.apply_chat_template(x, tokenize=True, add_generation_prompt=g)
                   for x in msgs for g in (True, False))
        fixed = all(tk.apply_chat_template(x, g) == chatml_smollm2(x, g) for x in msgs for g in (True, False))
        ok(same, "chat template: tools/tokenizer.py's rendering and ids = transformers' apply_chat_template")
        ok(fixed, "chat template: = the fixed ChatML function used without jinja2 (SmolLM2's template)")


def check_dequant(path, ckpt_params):
    r = gi.open_gguf(path)
    n, worst, types = 0, [], set()
    for t in r.tensors:
        q = t.tensor_type.name
        types.add(q)
        if q not in gi.FALLBACK:
            continue
        a, b = gi.dequantize(t, True), gi.dequantize(t, False)
        n += 1
        if not (a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))):
            worst.append(t.name)
    ok(n > 0 and not worst, f"dequant: gguf.quants = gguf_import's own decoder, bit for bit, on {n} tensors ({', '.join(sorted(types))})"
       + (f"; differ: {worst[:3]}" if worst else ""))
    cfg, params, _, _ = gi.load_gguf(path)
    diff = [k for k in params if k not in ckpt_params or not np.array_equal(params[k], ckpt_params[k])]
    ok(not diff and len(params) == len(ckpt_params), f"dequant: the checkpoint's {len(ckpt_params)} tensors = a fresh import's"
       + (f"; differ: {diff[:3]}" if diff else ""))


def build_model(a, p):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    c = LlamaConfig(vocab_size=int(a["vocab_size"]), hidden_size=int(a["n_embd"]), intermediate_size=int(a["n_ffn"]),
                    num_hidden_layers=int(a["n_layer"]), num_attention_heads=int(a["n_head"]), num_key_value_heads=int(a["n_kv_head"]),
                    max_position_embeddings=int(a["n_positions"]), rms_norm_eps=float(a["norm_eps"]), rope_theta=float(a["rope_theta"]),
                    tie_word_embeddings=bool(a["tie_embeddings"]), hidden_act="silu", attention_bias=False)
    try:  # the weights are all loaded below: skip the random initialisation (seconds for 135M parameters)
        from transformers.modeling_utils import no_init_weights
    except ImportError:
        import contextlib
        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        m = LlamaForCausalLM(c).eval()
    sd = {k: torch.from_numpy(v) for k, v in p.items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and c.tie_word_embeddings) and "rotary_emb" not in k]
    if missing or unexpected:
        raise RuntimeError(f"state dict: missing {missing[:3]}, unexpected {unexpected[:3]}")
    if c.tie_word_embeddings:
        m.tie_weights()
    return m


def nll(m, ids, start):
    import torch
    with torch.no_grad():
        logits = m(torch.tensor([ids])).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    return float(-lp[start - 1:].mean())


def check_model(a, p, tk, prompt, n_new, expect):
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    t0 = time.time()
    m = build_model(a, p)
    msgs = [{"role": "user", "content": prompt}]
    ids = tk.encode_chat(msgs)
    with torch.no_grad():
        out = m.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=n_new, eos_token_id=tk.eos_id,
                         pad_token_id=tk.eos_id)[0, len(ids):].tolist()
    text = tk.decode(out, skip_special=True)
    print(f"# greedy reply of the imported model in transformers to {prompt!r} ({len(out)} tokens, {time.time() - t0:.1f} s): {text!r}")
    words = [w for w in text.replace("\n", " ").split(" ") if w]
    ok(len(words) >= 3 and (expect is None or expect.lower() in text.lower()),
       f"model: transformers LlamaForCausalLM from the checkpoint replies to {prompt!r} with words"
       + (f" containing {expect!r}" if expect else "") + f": {text.strip()[:80]!r}")
    full = tk.encode_chat(msgs) + tk.encode(REPLY)
    good = nll(m, full, len(ids))
    # the q/k rows as llama.cpp stores them: what an import that forgot the inverse permutation would give
    H, kv = int(a["n_head"]), int(a["n_kv_head"])
    with torch.no_grad():
        for l in range(int(a["n_layer"])):
            at = m.model.layers[l].self_attn
            at.q_proj.weight.copy_(torch.from_numpy(gi.permute(p[f"model.layers.{l}.self_attn.q_proj.weight"], H)))
            at.k_proj.weight.copy_(torch.from_numpy(gi.permute(p[f"model.layers.{l}.self_attn.k_proj.weight"], kv)))
    bad = nll(m, full, len(ids))
    ok(good < 2.5 and bad > good + 0.5, f"model: mean NLL of an English reply {good:.3f} nats/token with the imported q/k rows, "
       f"{bad:.3f} with llama.cpp's row order (the permutation is undone, in the right direction)")


def main():
    args = sys.argv[1:]
    opt = {"--gguf": None, "--prompt": "What is the capital of France?", "--tokens": "24", "--expect": None}
    skip_dq = "--skip-dequant" in args
    args = [x for x in args if x != "--skip-dequant"]
    for k in list(opt):
        if k in args:
            i = args.index(k)
            if i + 1 >= len(args):
                gi.fail(f"{k} needs a value")
            opt[k] = args[i + 1]
            del args[i:i + 2]
    if len(args) not in (1, 2):
        print("usage: gguf_check.py CKPT.h5 [ROLE] [--gguf FILE] [--prompt TEXT] [--tokens N] [--expect WORD] [--skip-dequant]",
              file=sys.stderr)
        sys.exit(2)
    ckpt, role = args[0], (args[1] if len(args) == 2 else "policy")
    tk = Tokenizer.from_checkpoint(ckpt)
    check_tokenizer(tk)
    a, p = read_ckpt(ckpt, role)
    if opt["--gguf"] and not skip_dq:
        check_dequant(opt["--gguf"], p)
    check_model(a, p, tk, opt["--prompt"], int(opt["--tokens"]), opt["--expect"])
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
