#!/usr/bin/env python3
"""tokenizer: text <-> token ids with the /tokenizer group of an rlfuse
checkpoint (tools/gguf_import.py writes it; its docstring lists the group), and
chat messages -> text by the model's chat template. Needs numpy and h5py
only; jinja2 (make deps installs it into ~/.cache/rlfuse/python) is used
for chat templates when present.

Usage: /usr/bin/python3 tools/tokenizer.py CKPT encode TEXT         ids, one line
       /usr/bin/python3 tools/tokenizer.py CKPT decode ID...        text
       /usr/bin/python3 tools/tokenizer.py CKPT chat JSON [--no-generation-prompt]
                        JSON: [{"role": "user", "content": "..."}, ...]; prints the
                        rendered text, then its ids (BOS first where add_bos is 1)

Encoding is GPT-2 byte-level BPE (model "gpt2"): the text is split at the
special tokens (control and user-defined token types, as transformers and
llama.cpp's parse_special do; Tokenizer.encode(special=False) treats them as
plain text), each remaining piece is pre-tokenized, every pre-token's UTF-8
bytes become GPT-2's unicode stand-ins and the merges are applied by rank
(lowest first), the vocabulary giving the ids. Pre-tokenizers (the GGUF's
tokenizer.ggml.pre):
  gpt2, default      GPT-2's pattern  's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
  smollm, starcoder, refact, codeshell
                     every digit (\\p{N}) a piece of its own first, then GPT-2's
                     pattern (SmolLM2's tokenizer.json: Digits(individual_digits)
                     then ByteLevel; llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM)
The pattern is matched by hand (unicodedata categories L* and N*, \\s as
Unicode White_Space), so no regex module is needed. SentencePiece vocabularies
(model "llama") decode but do not encode here.

Chat: the template is rendered with jinja2 as transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks; messages,
add_generation_prompt, bos_token, eos_token, raise_exception). Without
jinja2, SmolLM2's template (SMOLLM2_TEMPLATE below, compared verbatim) is
rendered by a fixed ChatML function: a default system message first when the
first message is not a system one, then "<|im_start|>ROLE\\nCONTENT<|im_end|>\\n"
per message, then "<|im_start|>assistant\\n" for the generation prompt. Any
other template without jinja2 is an error. Errors are one line
"tokenizer: error: ..." and exit status 1.
"""
import json
import os
import sys
import unicodedata

import numpy as np

TOOL = "tokenizer"
CONTROL, USER_DEFINED = 3, 4
GPT2_PRE = ("gpt2", "default")
DIGIT_PRE = ("smollm", "starcoder", "refact", "codeshell")
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SMOLLM2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
                    + SMOLLM2_SYSTEM + "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# Unicode White_Space (what \s matches in the regex module and in Rust's regex, which tokenizers uses)
WHITE_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                        "\u2028\u2029\u202f\u205f\u3000")
CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")


class TokenizerError(Exception):
    """A one-line reason."""


def bytes_to_unicode():
    """GPT-2's byte -> printable unicode character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _cls(c):
    """'L' letter, 'N' number, 'S' White_Space, 'O' other."""
    if c in WHITE_SPACE:
        return "S"
    k = unicodedata.category(c)[0]
    return k if k in "LN" else "O"


def split_gpt2(text):
    """GPT-2's pre-tokenizer pattern, matched by hand, leftmost alternative first (as the regex engines do)."""
    out, i, n = [], 0, len(text)
    cls = [_cls(c) for c in text]
    while i < n:
        c = text[i]
        if c == "'":
            m = next((s for s in CONTRACTIONS if text.startswith(s, i)), None)
            if m:
                out.append(m)
                i += len(m)
                continue
        j = i + 1 if c == " " and i + 1 < n and cls[i + 1] != "S" else i  # ' ?' before a letter, number or other
        k = cls[j]
        if k != "S":  # ' ?\p{L}+', ' ?\p{N}+' or ' ?[^\s\p{L}\p{N}]+': a run of one class
            e = j + 1
            while e < n and cls[e] == k:
                e += 1
            out.append(text[i:e])
            i = e
            continue
        e = i  # '\s+(?!\S)' then '\s+': a whitespace run, less its last character when a non-space follows
        while e < n and cls[e] == "S":
            e += 1
        if e < n and e - i > 1:
            e -= 1
        out.append(text[i:e])
        i = e
    return out


def split_digits(text):
    """tokenizers' Digits(individual_digits=True): every \\p{N} character a piece of its own."""
    out, cur = [], []
    for c in text:
        if unicodedata.category(c)[0] == "N":
            if cur:
                out.append("".join(cur))
                cur = []
            out.append(c)
        else:
            cur.append(c)
    if cur:
        out.append("".join(cur))
    return out


class Tokenizer:
    def __init__(self, token_bytes, token_type, merges, model="gpt2", pre="gpt2", bos_id=-1, eos_id=-1, chat_template="", add_bos=0):
        self.tokens = list(token_bytes)
        self.types = np.asarray(token_type, np.int32)
        self.model, self.pre = model, pre
        self.bos_id, self.eos_id, self.chat_template, self.add_bos = int(bos_id), int(eos_id), chat_template, int(add_bos)
        self.b2u = bytes_to_unicode()
        self.ranks = {}
        for r, m in enumerate(merges):
            a, sep, b = m.partition(" ")
            if not sep or not a or not b:
                raise TokenizerError(f"merge {r} {m!r} is not two symbols separated by a space")
            self.ranks.setdefault((a, b), r)
        self.vocab = {}
        special = [i for i, t in enumerate(self.types) if t in (CONTROL, USER_DEFINED)]
        for i, t in enumerate(self.types):  # the byte-level form of every token; normal ones win a clash
            if t not in (CONTROL, USER_DEFINED):
                self.vocab.setdefault(self._u(self.tokens[i]), i)
        for i in special:
            self.vocab.setdefault(self._u(self.tokens[i]), i)
        self.special = {self.tokens[i].decode("utf-8", errors="replace"): i for i in special if self.tokens[i]}
        self._special_by_first = {}  # first character -> the special texts starting with it, longest first
        for s in sorted(self.special, key=len, reverse=True):
            self._special_by_first.setdefault(s[0], []).append(s)
        self.cache = {}

    @classmethod
    def from_checkpoint(cls, path):
        import h5py
        if not os.path.isfile(path):
            raise TokenizerError(f"{path}: no such file")
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise TokenizerError(f"{path}: cannot open ({e})")
        with f:
            if "tokenizer" not in f:
                raise TokenizerError(f"{path}: no /tokenizer group (tools/gguf_import.py writes one)")
            g = f["tokenizer"]
            tb, off = g["token_bytes"][()].tobytes(), g["token_offsets"][()]
            toks = [tb[off[i]:off[i + 1]] for i in range(len(off) - 1)]
            merges = [m.decode() if isinstance(m, bytes) else m for m in g["merges"][()]] if "merges" in g else []
            a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
            return cls(toks, g["token_type"][()], merges, a.get("model", "gpt2"), a.get("pre", "gpt2"), a.get("bos_id", -1),
                       a.get("eos_id", -1), a.get("chat_template", ""), a.get("add_bos", 0))

    def _u(self, b):
        return "".join(self.b2u[x] for x in b)

    def pretokenize(self, text):
        if self.pre in GPT2_PRE:
            return split_gpt2(text)
        if self.pre in DIGIT_PRE:
            return [p for piece in split_digits(text) for p in split_gpt2(piece)]
        raise TokenizerError(f"pre-tokenizer '{self.pre}' is not implemented (tools/tokenizer.py has {', '.join(GPT2_PRE + DIGIT_PRE)})")

    def bpe(self, word):
        """The ids of one pre-token (its byte-level unicode form)."""
        if word in self.cache:
            return self.cache[word]
        sym = list(word)
        while len(sym) > 1:
            best, bi = None, -1
            for i in range(len(sym) - 1):
                r = self.ranks.get((sym[i], sym[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = sym[bi], sym[bi + 1]
            out, i = [], 0
            while i < len(sym):  # merge every occurrence of the pair, left to right
                if i < len(sym) - 1 and sym[i] == a and sym[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            sym = out
        try:
            ids = [self.vocab[s] for s in sym]
        except KeyError as e:
            raise TokenizerError(f"symbol {e.args[0]!r} is not in the vocabulary")
        self.cache[word] = ids
        return ids

    def _split_special(self, text):
        """[(piece, id or None)]: the special tokens' texts found leftmost, longest first."""
        out, i, start = [], 0, 0
        while i < len(text):
            m = next((s for s in self._special_by_first.get(text[i], ()) if text.startswith(s, i)), None)
            if m is None:
                i += 1
                continue
            if start < i:
                out.append((text[start:i], None))
            out.append((m, self.special[m]))
            i += len(m)
            start = i
        if start < len(text):
            out.append((text[start:], None))
        return out

    def encode(self, text, special=True, add_bos=False):
        """Token ids of TEXT. special: the special tokens' texts are those tokens (transformers' default);
        add_bos: the BOS token first where the tokenizer's add_bos says so."""
        if self.model != "gpt2":
            raise TokenizerError(f"tokenizer model '{self.model}': tools/tokenizer.py encodes GPT-2 byte-level BPE (gpt2) only")
        ids = [self.bos_id] if add_bos and self.add_bos and self.bos_id >= 0 else []
        for piece, sid in (self._split_special(text) if special and self.special else [(text, None)]):
            if sid is not None:
                ids.append(sid)
                continue
            for w in self.pretokenize(piece):
                ids += self.bpe(self._u(w.encode("utf-8")))
        return ids

    def decode(self, ids, skip_special=False):
        b = b"".join(self.tokens[i] for i in ids if not (skip_special and self.types[i] == CONTROL))
        return b.decode("utf-8", errors="replace")

    def token_text(self, i):
        return self.tokens[i].decode("utf-8", errors="replace")

    def apply_chat_template(self, messages, add_generation_prompt=True):
        if not self.chat_template:
            raise TokenizerError("the tokenizer has no chat template")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise TokenizerError(f"message {m!r} is not an object with role and content strings")
        jinja2 = None
        try:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from gguf_import import import_from_cache
            jinja2 = import_from_cache("jinja2")
            import_from_cache("jinja2.sandbox")
        except ImportError:
            jinja2 = None
        if jinja2 is not None:
            def raise_exception(msg):
                raise TokenizerError(f"chat template: {msg}")
            env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            tok = lambda i: self.token_text(i) if i >= 0 else ""  # noqa: E731
            try:
                return env.from_string(self.chat_template).render(
                    messages=messages, add_generation_prompt=add_generation_prompt, bos_token=tok(self.bos_id),
                    eos_token=tok(self.eos_id), raise_exception=raise_exception)
            except jinja2.TemplateError as e:
                raise TokenizerError(f"chat template: {e}")
        if self.chat_template != SMOLLM2_TEMPLATE:
            raise TokenizerError("this chat template needs jinja2 (make deps installs it); without it only SmolLM2's is rendered")
        return chatml_smollm2(messages, add_generation_prompt)

    def encode_chat(self, messages, add_generation_prompt=True):
        return self.encode(self.apply_chat_template(messages, add_generation_prompt), special=True, add_bos=True)


def chatml_smollm2(messages, add_generation_prompt=True):
    """SmolLM2's chat template as a fixed function (ChatML with its default system message)."""
    s = ""
    if messages and messages[0]["role"] != "system":
        s += f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n"
    for m in messages:
        s += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    if add_generation_prompt:
        s += "<|im_start|>assistant\n"
    return s


def fail(msg):
    print(f"{TOOL}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    a = sys.argv[1:]
    if len(a) < 2 or a[1] not in ("encode", "decode", "chat"):
        fail("usage: tokenizer.py CKPT encode TEXT | CKPT decode ID... | CKPT chat JSON [--no-generation-prompt]")
    try:
        tk = Tokenizer.from_checkpoint(a[0])
        if a[1] == "encode":
            if len(a) != 3:
                fail("encode takes one TEXT argument")
            print(" ".join(map(str, tk.encode(a[2]))))
        elif a[1] == "decode":
            try:
                ids = [int(x) for x in a[2:]]
            except ValueError:
                fail("decode takes integer ids")
            bad = [i for i in ids if not 0 <= i < len(tk.tokens)]
            if bad:
                fail(f"id {bad[0]} is outside the vocabulary [0, {len(tk.tokens)})")
            sys.stdout.write(tk.decode(ids) + "\n")
        else:
            gen = "--no-generation-prompt" not in a[3:]
            rest = [x for x in a[2:] if x != "--no-generation-prompt"]
            if len(rest) != 1:
                fail("chat takes one JSON argument")
            try:
                msgs = json.loads(rest[0])
            except ValueError as e:
                fail(f"chat: not JSON ({e})")
            if not isinstance(msgs, list):
                fail("chat: expected a JSON list of messages")
            text = tk.apply_chat_template(msgs, gen)
            sys.stdout.write(text + "\n" + " ".join(map(str, tk.encode(text, add_bos=True))) + "\n")
    except TokenizerError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
