#!/usr/bin/env python3
"""tokenizer: text <-> token ids with the /tokenizer group of an rlfuse
checkpoint (tools/gguf_import.py writes it; its docstring lists the group), and
chat messages -> text by the model's chat template. Needs numpy, h5py and,
to encode, Hugging Face's tokenizers; jinja2 is used for chat templates
when present (make deps installs both into ~/.cache/rlfuse/python).

Usage: tools/py tools/tokenizer.py CKPT encode TEXT         ids, one line
       tools/py tools/tokenizer.py CKPT decode ID...        text
       tools/py tools/tokenizer.py CKPT chat JSON [--no-generation-prompt]
                        JSON: [{"role": "user", "content": "..."}, ...]; prints the
                        rendered text, then its ids (BOS first where add_bos is 1)
       tools/py tools/tokenizer.py CKPT prompts IN.jsonl OUT.h5 [--no-chat] [--role ROLE] [--suffix TEXT]
                        a prompt file for rlfuse -mode generate (-generate_input)
       tools/py tools/tokenizer.py CKPT conversations IN.jsonl OUT.h5 [--role ROLE]
                        SFT data (-sft_data) from conversations, the loss on the
                        assistant's tokens only (/loss_mask)
       tools/py tools/tokenizer.py CKPT responses GEN.h5 OUT.jsonl
                        the text of a -mode generate output (-generate_output)
       tools/py tools/tokenizer.py CKPT samples RUN_FILE.h5
       tools/py tools/tokenizer.py samples RUN_FILE.h5
                        a run's rollouts.h5 or evals.h5 as JSON lines on stdout
                        (without CKPT the run's own checkpoints decode)
       tools/py tools/tokenizer.py --help                this text
The subcommand may also come first (tokenizer.py prompts CKPT IN.jsonl OUT.h5,
tokenizer.py conversations CKPT IN.jsonl OUT.h5, tokenizer.py samples CKPT RUN_FILE.h5;
the older samples RUN_FILE.h5 CKPT works too).
Every subcommand takes --tokenizer-json FILE anywhere: encode with the
model's own tokenizer.json (below).

prompts: each non-blank line of IN.jsonl is one JSON object, either
  {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
  {"prompt": "text"}                       (one user message)
optionally with
  "answer": "12" or 12                     the reference answer (RL with verifiable rewards)
  "metadata": any JSON value               passed through to reward functions
(other keys are ignored). --suffix TEXT appends " TEXT" to each prompt (to
the last user message), e.g. "Answer with just the number.". The chat template is applied with the generation
prompt (SmolLM2: "...<|im_start|>assistant\\n") and the text encoded as
`chat` does; with --no-chat a line must be {"prompt": "text"}, encoded as
it is (special tokens' texts are those tokens; BOS first where add_bos is 1).
OUT.h5 is a token dataset (docs/formats.md "Token datasets"): /tokens int32
[B, T] (T the longest prompt, zero-padded), /lengths int32 [B], attributes
vocab_size (the checkpoint role's: ROLE, default policy, else the actor or
reference role the file holds) and task ("chat prompts" or "text prompts").
When a line has "answer", every line must have one, and OUT.h5 also holds
/answer_bytes uint8 [total] and /answer_offsets int64 [B+1]: row i's answer
is answer_bytes[answer_offsets[i]:answer_offsets[i+1]], UTF-8 (a string as
it is; a number as its JSON text, 12 -> "12", 3.50 -> "3.50"). When any line
has "metadata", /metadata_bytes and /metadata_offsets hold each row's value
the same way, as compact JSON text (json.dumps with separators "," and ":",
non-ASCII kept); a row without metadata has an empty one. The file is
written to a temporary and renamed, so a failure leaves nothing. Refused,
naming the line: text that is not UTF-8 or not JSON, a line that is not an
object with exactly one of "messages" and "prompt", malformed messages, an
empty prompt (no messages, or only blank text), an answer that is not a
string or a finite number (true, null, a list, NaN) or is blank, metadata
holding NaN or Infinity, a line without "answer" in a file where another
line has one (the first such line named), a prompt of n_positions tokens or
more (no room for a response); and a file with no prompts.

conversations: each non-blank line of IN.jsonl is one JSON object with
  {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": "..."}, ...]}
(other keys of the object and of a message are ignored by this tool but
passed to the template). Each conversation is rendered whole by the chat
template without the generation prompt and encoded as `chat` encodes (BOS
first where add_bos is 1). Its assistant messages' text is the target: a
template with {% generation %} ... {% endgeneration %} blocks marks it
itself (as newer transformers releases read them for apply_chat_template's
return_assistant_tokens_mask; the 4.40.2 installed here has no such option,
and jinja2 renders the tags here); for any other template (SmolLM2's) message i's text
is what rendering messages[:i+1] adds to messages[:i] with the generation
prompt, up to and including the last stop token in it (@eos_id, @eot_id,
/stop_ids: the end of turn the model must learn to say; ChatML's newline
after <|im_end|> is not the assistant's), or without one, less its trailing
whitespace. A token is a target when it holds a character of that text (the
tokens from the one holding its first character to the one holding its
last, as transformers' mask). OUT.h5 is a token dataset (docs/formats.md
"Token datasets") with /tokens, /lengths, /prompt_lengths (the tokens
before the first target) and /loss_mask uint8 [B, T], 1 on the targets:
rlfuse -mode sft -sft_data OUT.h5 trains on those only, the system, user and
tool turns and the assistant's headers being context. Attributes
vocab_size (as prompts) and task "chat conversations". Refused, naming the
line: text that is not UTF-8 or not JSON, a line without a non-empty
"messages" list, a message without role and content strings, a role other
than those four, no assistant message, a template that renders the
conversation before an assistant message differently once it follows (the
prefix method cannot place it: give the template {% generation %} blocks),
a conversation of more than n_positions tokens; and a file with none. The
file is written to a temporary and renamed.

responses: one JSON line per row of GEN.h5 (docs/formats.md "Generation
files"), in row order:
  {"prompt": TEXT, "response": TEXT, "stopped": BOOL, "response_tokens": N, "logprob": X}
(plus "answer" and "metadata" where GEN.h5 holds /answer_* or /metadata_*
datasets as a prompt file does; metadata parsed back into its JSON value)
prompt is the decoded prompt (the chat template's special tokens included),
response the decoded response less its final stop token when stopped (a
response that hit -gen_max_new_tokens keeps every token), response_tokens
/response_lengths (a final stop token counted), logprob the sum of /logprobs
over those tokens (the log-probability of the response under the
distribution it was sampled from). Bytes that are not UTF-8 (a character
cut by the token limit) decode as U+FFFD. OUT.jsonl is UTF-8, written to a
temporary and renamed. Refused: a file without the generation datasets,
inconsistent lengths, token ids outside the vocabulary.

samples: one JSON line per sample of every group of a run's rollouts.h5
(-dump_rollouts) or evals.h5 (the held-out evaluations; docs/formats.md),
groups in file order (iter_2 before iter_10), rows in order:
  {"group": G, "row": I, "prompt": TEXT, "response": TEXT, "eos": BOOL,
   "response_tokens": N, "reward": X, "correct": X, "answer": TEXT}
reward is /final_scores (the final reward, KL penalty aside); correct 1/0
whether the answer is right (/gold of a group with answers, as -ppo_eval_show
prints it), or, in a group without answers, "gold": the judge's score (null
where NaN); answer only where the group holds /answer_*; response less its
final stop token when eos. A group of episodes (a run with -env: /source
and /turn, docs/environments.md) adds the episode as its conversation after
the prompt,
  "turns": [{"source": "model"|"environment", "turn": K, "tokens": N, "text": TEXT}, ...]
each run of the response's tokens of one source and one turn in order: the
model's K-th segment, then the environment's answer to it (turn K too), and
so on; the last segment's text less the final stop token when eos (its
tokens counted). Decoded with CKPT's /tokenizer when given; else with the first
of the run's final.h5 (beside RUN_FILE.h5) and its actor checkpoint (run.h5
/parameters@actor_checkpoint) that holds one; else, for the built-in
arithmetic task (run.h5 /parameters@task), with its characters
(src/task/arith.c); else each text is the token ids separated by blanks.
Refused, in one line: a file whose groups lack the datasets, lengths past
the width, answers whose /answer_offsets do not index /answer_bytes, /source
without /turn or either not of /tokens' shape.

Encoding is GPT-2 byte-level BPE (model "gpt2"), done by Hugging Face's
tokenizers package (the reference implementation of these tokenizers; make
deps installs it into ~/.cache/rlfuse/python, searched when it is not on
the path): a tokenizers.Tokenizer is built from the checkpoint's vocabulary
and merges, a BPE model over the tokens' byte-level forms with the
pre-tokenizer the GGUF's tokenizer.ggml.pre names, and the control and
user-defined tokens as added special tokens (the text is split at them
first, leftmost and longest, as transformers and llama.cpp's parse_special
do; Tokenizer.encode(special=False) treats them as plain text).
Pre-tokenizers:
  gpt2, default      ByteLevel (GPT-2's pattern)
  smollm, starcoder, refact, codeshell
                     Digits(individual_digits) then ByteLevel, as SmolLM2's
                     tokenizer.json (llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM)
A checkpoint that tools/hf_import.py made keeps the model's original
tokenizer.json (/tokenizer/hf_tokenizer_json): that encodes, whatever its
pre-tokenizer (Qwen2's, Llama 3's, ...). With --tokenizer-json FILE (e.g.
tokenizer.py CKPT --tokenizer-json tokenizer.json encode TEXT) that file
encodes instead; the checkpoint still decodes, renders the chat template and
gives BOS, and every encoding's ids must spell its text with the
checkpoint's tokens (else an error).
The ids the hand-written BPE that this replaced gave on the SmolLM2
prompts are kept in regression/golden/smollm2_tokenizer_ids.json and
compared by regression/scenarios/smollm2_import.sh. SentencePiece
vocabularies (model "llama") decode but do not encode here.
Decoding (token bytes joined) is done here, as rlfuse's C detokenizer does
for rewards (src/reward/table.c).

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
import re
import sys

import numpy as np

TOOL = "tokenizer"
CONTROL, USER_DEFINED = 3, 4
GPT2_PRE = ("gpt2", "default")
DIGIT_PRE = ("smollm", "starcoder", "refact", "codeshell")
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SMOLLM2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
                    + SMOLLM2_SYSTEM + "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


class TokenizerError(Exception):
    """A one-line reason."""


def open_h5(path):
    """path opened read-only with h5py, or a TokenizerError saying why not."""
    import h5py
    if not os.path.isfile(path):
        raise TokenizerError(f"{path}: no such file")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise TokenizerError(f"{path}: cannot open ({e})")


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


def import_tokenizers():
    """The tokenizers package, from the path or the cache folder make deps fills, or a TokenizerError."""
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from gguf_import import import_from_cache
        return import_from_cache("tokenizers")
    except ImportError as e:
        raise TokenizerError(f"the tokenizers package is not installed (make deps installs it into ~/.cache/rlfuse/python): {e}")


class Tokenizer:
    def __init__(self, token_bytes, token_type, merges, model="gpt2", pre="gpt2", bos_id=-1, eos_id=-1, chat_template="", add_bos=0):
        self.tokens = list(token_bytes)
        self.types = np.asarray(token_type, np.int32)
        self.model, self.pre = model, pre
        self.bos_id, self.eos_id, self.chat_template, self.add_bos = int(bos_id), int(eos_id), chat_template, int(add_bos)
        self.b2u = bytes_to_unicode()
        self.merges, seen = [], set()  # (a, b) by rank, a repeated merge kept at its first rank
        for r, m in enumerate(merges):
            a, sep, b = m.partition(" ")
            if not sep or not a or not b:
                raise TokenizerError(f"merge {r} {m!r} is not two symbols separated by a space")
            if (a, b) not in seen:
                seen.add((a, b))
                self.merges.append((a, b))
        # the BPE's vocabulary: normal tokens by their byte-level form; special ones (split off before the BPE) by their text
        self.vocab = {}
        special = [i for i, t in enumerate(self.types) if t in (CONTROL, USER_DEFINED)]
        for i, t in enumerate(self.types):
            if t not in (CONTROL, USER_DEFINED):
                self.vocab.setdefault(self._u(self.tokens[i]), i)
        for i in special:
            self.vocab.setdefault(self.token_text(i), i)
        self.special = [i for i in special if self.tokens[i]]
        self.tokenizer_json = None  # --tokenizer-json FILE
        self.hf_json = None  # the checkpoint's /tokenizer/hf_tokenizer_json (hf_import keeps the original tokenizer.json there)
        self._hf = {}  # special (True/False) -> tokenizers.Tokenizer
        self.stop_ids = [self.eos_id] if 0 <= self.eos_id < len(self.tokens) else []  # @eos_id, @eot_id, stop_ids

    @classmethod
    def from_checkpoint(cls, path):
        with open_h5(path) as f:
            if "tokenizer" not in f:
                raise TokenizerError(f"{path}: no /tokenizer group (tools/gguf_import.py writes one)")
            g = f["tokenizer"]
            tb, off = g["token_bytes"][()].tobytes(), g["token_offsets"][()]
            toks = [tb[off[i]:off[i + 1]] for i in range(len(off) - 1)]
            merges = [m.decode() if isinstance(m, bytes) else m for m in g["merges"][()]] if "merges" in g else []
            a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
            tk = cls(toks, g["token_type"][()], merges, a.get("model", "gpt2"), a.get("pre", "gpt2"), a.get("bos_id", -1),
                     a.get("eos_id", -1), a.get("chat_template", ""), a.get("add_bos", 0))
            if "hf_tokenizer_json" in g:
                v = g["hf_tokenizer_json"][()]
                tk.hf_json = v.decode() if isinstance(v, bytes) else v
            stops = [int(a.get("eos_id", -1)), int(a.get("eot_id", -1))] + ([int(x) for x in g["stop_ids"][()]] if "stop_ids" in g else [])
            tk.stop_ids = sorted({i for i in stops if 0 <= i < len(toks)})
            return tk

    def _u(self, b):
        return "".join(self.b2u[x] for x in b)

    def hf_tokenizer(self, special=True):
        """The tokenizers.Tokenizer that encodes: read from --tokenizer-json, else the original tokenizer.json the
        checkpoint keeps (hf_import), else built from the vocabulary and merges; special: the special tokens' texts are those tokens."""
        if special in self._hf:
            return self._hf[special]
        tk = import_tokenizers()
        if self.tokenizer_json:
            try:
                t = tk.Tokenizer.from_file(self.tokenizer_json)
            except Exception as e:  # tokenizers raises plain Exceptions
                raise TokenizerError(f"{self.tokenizer_json}: not a tokenizer.json that tokenizers reads ({str(e).splitlines()[0]})")
        elif self.hf_json:
            try:
                t = tk.Tokenizer.from_str(self.hf_json)
            except Exception as e:
                raise TokenizerError(f"/tokenizer/hf_tokenizer_json: not a tokenizer.json that tokenizers reads ({str(e).splitlines()[0]})")
        else:
            if self.pre in GPT2_PRE:
                pre = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            elif self.pre in DIGIT_PRE:
                pre = tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Digits(individual_digits=True),
                                                  tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
            else:
                raise TokenizerError(f"pre-tokenizer '{self.pre}' is not implemented (tools/tokenizer.py has {', '.join(GPT2_PRE + DIGIT_PRE)})")
            try:
                t = tk.Tokenizer(tk.models.BPE(self.vocab, self.merges))
            except Exception as e:
                raise TokenizerError(f"the vocabulary and merges do not make a BPE model ({str(e).splitlines()[0]})")
            t.pre_tokenizer = pre
            t.add_special_tokens([tk.AddedToken(self.token_text(i), special=True, normalized=False) for i in self.special])
        t.encode_special_tokens = not special  # tokenizers >= 0.15: special texts as plain text
        self._hf[special] = t
        return t

    def encode(self, text, special=True, add_bos=False):
        """Token ids of TEXT. special: the special tokens' texts are those tokens (transformers' default);
        add_bos: the BOS token first where the tokenizer's add_bos says so."""
        if self.model != "gpt2" and not self.tokenizer_json and not self.hf_json:
            raise TokenizerError(f"tokenizer model '{self.model}': tools/tokenizer.py encodes GPT-2 byte-level BPE (gpt2) only")
        ids = self.hf_tokenizer(special).encode(text, add_special_tokens=False).ids
        # BPE drops a character its vocabulary cannot spell: every id must be a token and the tokens must spell the text
        if any(not 0 <= i < len(self.tokens) for i in ids) or b"".join(self.tokens[i] for i in ids) != text.encode("utf-8", "surrogatepass"):
            bad = next((i for i in ids if not 0 <= i < len(self.tokens)), None)
            raise TokenizerError(f"{text[:40]!r}: " + (f"token {bad} is outside the checkpoint's vocabulary [0, {len(self.tokens)})" if bad is not None
                                                        else "the ids do not spell the text with the checkpoint's tokens (a character the vocabulary lacks?)"))
        return ([self.bos_id] if add_bos and self.add_bos and self.bos_id >= 0 else []) + ids

    def decode(self, ids, skip_special=False):
        b = b"".join(self.tokens[i] for i in ids if not (skip_special and self.types[i] == CONTROL))
        return b.decode("utf-8", errors="replace")

    def token_text(self, i):
        return self.tokens[i].decode("utf-8", errors="replace")

    def apply_chat_template(self, messages, add_generation_prompt=True, marks=False):
        """The template's rendering; marks: the output of each {% generation %} block between GEN_OPEN and GEN_CLOSE."""
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
            env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                               extensions=[generation_tag(jinja2, marks)])
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

    def has_generation_blocks(self):
        """Whether the chat template marks the assistant's text with {% generation %} ... {% endgeneration %}."""
        return bool(GENERATION_TAG.search(self.chat_template or ""))

    def encode_chat(self, messages, add_generation_prompt=True):
        return self.encode(self.apply_chat_template(messages, add_generation_prompt), special=True, add_bos=True)


# {% generation %} ... {% endgeneration %}: the text a template marks as the assistant's (transformers' templates
# that support return_assistant_tokens_mask); rendered with marks, its output is put between these two characters
# (private-use code points, refused in a message), then found and removed.
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
GEN_OPEN, GEN_CLOSE = "\ue000", "\ue001"


def generation_tag(jinja2, marks):
    """A jinja2 extension for the {% generation %} block: its body as rendered, between GEN_OPEN and GEN_CLOSE with marks."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_block"), [], [], body).set_lineno(lineno)

        def _block(self, caller):
            return GEN_OPEN + caller() + GEN_CLOSE if marks else caller()
    return Generation


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


LM_ROLES = ("policy", "actor", "reference")
GEN_DATASETS = ("tokens", "lengths", "prompt_lengths", "response_lengths", "logprobs", "stopped")


def model_limits(path, role=None):
    """(role, vocab_size, n_positions) of the checkpoint's model: ROLE, or the first of LM_ROLES it holds."""
    import h5py
    with h5py.File(path, "r") as f:
        have = [r for r in LM_ROLES if r in f and "vocab_size" in f[r].attrs]
        if role is None and not have:
            raise TokenizerError(f"{path}: holds none of the roles {', '.join(LM_ROLES)} (use --role)")
        role = role or have[0]
        if role not in f or "vocab_size" not in f[role].attrs:
            raise TokenizerError(f"{path}: no model role /{role}" + (f" (it holds {', '.join(have)})" if have else ""))
        a = f[role].attrs
        return role, int(a["vocab_size"]), int(a["n_positions"]) if "n_positions" in a else None


class _NumText(str):
    """A JSON number kept as its text (json.loads' parse_int/parse_float hook)."""


class _ConstText(str):
    """NaN, Infinity or -Infinity, which Python's json reads but JSON does not have."""


def _answer_text(x, raw, where):
    """The reference answer of line X as text (a number as its JSON text from RAW, the line parsed keeping numbers' text)."""
    a = x["answer"]
    if isinstance(a, str):
        text = a
    elif isinstance(a, (int, float)) and not isinstance(a, bool):
        text = raw["answer"]
        if not isinstance(text, _NumText):
            raise TokenizerError(f'{where}: "answer" must be a string or a finite number, got {text}')
    else:
        got = json.dumps(a) if a is None or isinstance(a, bool) else "an array" if isinstance(a, list) else "an object"
        raise TokenizerError(f'{where}: "answer" must be a string or a number, got {got}')
    if not text.strip():
        raise TokenizerError(f'{where}: empty "answer"')
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise TokenizerError(f'{where}: "answer" is not valid Unicode ({e.reason})')


def _metadata_text(x, where):
    """The metadata of line X as compact JSON text (UTF-8 bytes)."""
    try:
        return json.dumps(x["metadata"], separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError:
        raise TokenizerError(f'{where}: "metadata" holds NaN or Infinity, which JSON does not have')
    except UnicodeEncodeError as e:
        raise TokenizerError(f'{where}: "metadata" is not valid Unicode ({e.reason})')


def jsonl_objects(path):
    """The non-blank lines of a JSONL file, parsed: (line number, "path:line", the line, its JSON value);
    an unreadable file, a line that is not UTF-8 or not JSON raises TokenizerError naming the line."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TokenizerError(f"{path}: cannot read ({e.strerror})")
    for n, line in enumerate(raw.split(b"\n"), 1):
        where = f"{path}:{n}"
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TokenizerError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})")
        if not line.strip():
            continue
        try:
            x = json.loads(line)
        except ValueError as e:
            raise TokenizerError(f"{where}: not JSON ({e})")
        yield n, where, line, x


def read_prompts(tk, path, chat=True, suffix=None):
    """Every prompt of a JSONL file (see prompts in the docstring): [(line number, ids, answer, metadata)], answer
    and metadata UTF-8 bytes or None (answers are either on every line or on none)."""
    lines = []
    for n, where, line, x in jsonl_objects(path):
        if not isinstance(x, dict) or ("messages" in x) == ("prompt" in x):
            raise TokenizerError(f'{where}: expected an object with either "messages" (a list of {{"role", "content"}} objects) '
                                 f'or "prompt" (a string), got {line.strip()[:60]}')
        if "prompt" in x:
            if not isinstance(x["prompt"], str):
                raise TokenizerError(f'{where}: "prompt" must be a string, got {type(x["prompt"]).__name__}')
            if not x["prompt"].strip():
                raise TokenizerError(f"{where}: empty prompt")
            msgs = [{"role": "user", "content": x["prompt"]}]
        else:
            if not chat:
                raise TokenizerError(f'{where}: "messages" need the chat template (--no-chat takes {{"prompt": "text"}} lines)')
            msgs = x["messages"]
            if not isinstance(msgs, list) or not msgs:
                raise TokenizerError(f'{where}: "messages" must be a non-empty list of {{"role", "content"}} objects')
            for i, m in enumerate(msgs):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                    raise TokenizerError(f"{where}: message {i} is not an object with role and content strings")
            if not any(m["content"].strip() for m in msgs):
                raise TokenizerError(f"{where}: empty prompt (every message's content is blank)")
        if suffix:
            last = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=None)
            if last is None:
                raise TokenizerError(f"{where}: --suffix needs a user message")
            msgs = msgs[:last] + [{**msgs[last], "content": msgs[last]["content"] + " " + suffix}] + msgs[last + 1:]
        answer = None
        if "answer" in x:
            nums = json.loads(line, parse_int=_NumText, parse_float=_NumText, parse_constant=_ConstText)
            answer = _answer_text(x, nums, where)
        meta = _metadata_text(x, where) if "metadata" in x else None
        lines.append((n, msgs, answer, meta))
    if not lines:
        raise TokenizerError(f"{path}: no prompts (every line is blank)")
    have = [n for n, _, a, _ in lines if a is not None]
    if have:
        miss = next((n for n, _, a, _ in lines if a is None), None)
        if miss is not None:
            raise TokenizerError(f'{path}:{miss}: no "answer" (line {have[0]} has one: when a line has an answer, every line needs one)')
    rows = []
    for n, msgs, answer, meta in lines:
        try:
            ids = tk.encode_chat(msgs) if chat else tk.encode(msgs[0]["content"], special=True, add_bos=True)
        except TokenizerError as e:
            raise TokenizerError(f"{path}:{n}: {e}")
        rows.append((n, ids, answer, meta))
    return rows


def texts_arrays(texts):
    """(bytes uint8 [total], offsets int64 [N+1]) of a list of UTF-8 byte strings (None: empty)."""
    texts = [t or b"" for t in texts]
    off = np.zeros(len(texts) + 1, np.int64)
    off[1:] = np.cumsum([len(t) for t in texts])
    return np.frombuffer(b"".join(texts), np.uint8).copy(), off


def read_texts(f, name, N):
    """Row texts <name>_bytes/<name>_offsets of an open HDF5 file as str, or None when absent (docs/formats.md)."""
    if f"{name}_bytes" not in f and f"{name}_offsets" not in f:
        return None
    at = f.file.filename + (f.name.rstrip("/") if f.name != "/" else "")  # a group of a run file, or the file itself
    if f"{name}_bytes" not in f or f"{name}_offsets" not in f:
        raise TokenizerError(f"{at}: /{name}_bytes and /{name}_offsets come together")
    b, off = np.asarray(f[f"{name}_bytes"][()]).tobytes(), np.asarray(f[f"{name}_offsets"][()])
    if (off.dtype.kind not in "iu" or off.shape != (N + 1,) or off[0] != 0 or off[-1] != len(b)
            or np.any(np.diff(off.astype(np.int64)) < 0)):
        raise TokenizerError(f"{at}: /{name}_offsets is not {N + 1} rising integer offsets from 0 to the {len(b)} bytes of /{name}_bytes")
    return [b[int(off[i]):int(off[i + 1])].decode("utf-8", errors="replace") for i in range(N)]


def write_atomic(path, write, sources=()):
    """write(tmp) then rename tmp to PATH; nothing is left behind on failure. PATH must not be one of SOURCES."""
    if any(os.path.exists(x) and os.path.exists(path) and os.path.samefile(x, path) for x in sources):
        raise TokenizerError(f"{path}: is an input of this command; give another output file")
    d = os.path.dirname(path) or "."
    if not os.path.isdir(d):
        raise TokenizerError(f"{path}: directory {d} does not exist")
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise TokenizerError(f"{path}: cannot write ({e})")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def make_prompts(tk, ckpt, src, out, chat=True, role=None, suffix=None):
    """A prompt file (token dataset) OUT from the JSONL file SRC; returns (prompts, longest, answers?, metadata?)."""
    import h5py
    role, vocab, npos = model_limits(ckpt, role)
    rows = read_prompts(tk, src, chat, suffix)
    for n, ids, _, _ in rows:
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise TokenizerError(f"{src}:{n}: token {bad[0]} is outside the model's vocabulary [0, {vocab}) (/{role} of {ckpt})")
        if npos is not None and len(ids) >= npos:
            raise TokenizerError(f"{src}:{n}: the prompt is {len(ids)} tokens, the model's n_positions is {npos} (no room for a response)")
    T = max(len(r[1]) for r in rows)
    tokens = np.zeros((len(rows), T), np.int32)
    for b, r in enumerate(rows):
        tokens[b, :len(r[1])] = r[1]
    texts = {name: texts_arrays([r[k] for r in rows]) for name, k in (("answer", 2), ("metadata", 3))
             if any(r[k] is not None for r in rows)}

    def write(tmp):
        with h5py.File(tmp, "w") as f:
            f["tokens"] = tokens
            f["lengths"] = np.array([len(r[1]) for r in rows], np.int32)
            for name, (b, off) in texts.items():
                f[f"{name}_bytes"] = b
                f[f"{name}_offsets"] = off
            f.attrs["vocab_size"] = np.int32(vocab)
            f.attrs["task"] = "chat prompts" if chat else "text prompts"
    write_atomic(out, write, (ckpt, src))
    return len(rows), T, "answer" in texts, "metadata" in texts


CONVERSATION_ROLES = ("system", "user", "assistant", "tool")


def generation_spans(tk, messages):
    """(text, spans): the conversation rendered without the generation prompt, and the [start, end) character
    ranges of its {% generation %} blocks."""
    parts = re.split(f"([{GEN_OPEN}{GEN_CLOSE}])", tk.apply_chat_template(messages, False, marks=True))
    text, spans, start, at = [], [], None, 0
    for p in parts:
        if p == GEN_OPEN:
            if start is not None:
                raise TokenizerError("chat template: a {% generation %} block inside another")
            start = at
        elif p == GEN_CLOSE:
            spans.append((start, at))
            start = None
        else:
            text.append(p)
            at += len(p)
    return "".join(text), [(a, b) for a, b in spans if b > a]


def prefix_spans(tk, messages):
    """(text, spans) as generation_spans, for a template without {% generation %} blocks: assistant message i's text
    is what rendering messages[:i+1] adds to messages[:i] with the generation prompt (the assistant's header), up to
    and including the last stop token's text in it (the end of turn the model must learn to say; what follows, such
    as ChatML's newline, is the template's), or without one, up to its trailing whitespace."""
    text = tk.apply_chat_template(messages, False)
    stops = [tk.token_text(i) for i in tk.stop_ids if tk.tokens[i]]
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head, upto = tk.apply_chat_template(messages[:i], True), tk.apply_chat_template(messages[:i + 1], False)
        if not upto.startswith(head) or not text.startswith(upto):
            raise TokenizerError(f"message {i} (assistant): the chat template renders the conversation before it differently "
                                 "once it follows (or differently from its generation prompt), so its text cannot be placed "
                                 "by rendering prefixes; a template with {% generation %} blocks marks it instead")
        added = upto[len(head):]
        ends = [added.rfind(t) + len(t) for t in stops if t in added]
        end = max(ends) if ends else len(added.rstrip())
        if end > 0:
            spans.append((len(head), len(head) + end))
    return text, spans


def encode_conversation(tk, messages):
    """(ids, mask, method): the conversation's ids (BOS first where add_bos is 1) and mask 1 on every token that
    overlaps an assistant span (as transformers' assistant mask: the tokens from the one holding a span's first
    character to the one holding its last)."""
    for i, m in enumerate(messages):
        if GEN_OPEN in m["content"] or GEN_CLOSE in m["content"]:
            raise TokenizerError(f"message {i} holds U+E000 or U+E001, which mark the template's generation blocks here")
    if tk.has_generation_blocks():
        text, spans, method = *generation_spans(tk, messages), "the template's {% generation %} blocks"
    else:
        text, spans, method = *prefix_spans(tk, messages), "rendered prefixes"
    ids = tk.encode(text, special=True, add_bos=True)  # as `chat` and `prompts` encode a rendering
    bos = 1 if tk.add_bos and tk.bos_id >= 0 else 0  # the BOS encode put first, not part of the text
    # the tokens spell the text (encode checks it): token k holds bytes [edge[k], edge[k+1])
    edge = np.concatenate([[0], np.cumsum([len(tk.tokens[i]) for i in ids[bos:]])])
    mask = np.zeros(len(ids), np.uint8)
    for a, b in spans:
        ba, bb = len(text[:a].encode("utf-8", "surrogatepass")), len(text[:b].encode("utf-8", "surrogatepass"))
        mask[bos:][(edge[:-1] < bb) & (edge[1:] > ba)] = 1
    return ids, mask, method


def read_conversations(tk, path):
    """Every conversation of a JSONL file: [(line number, ids, mask)] and the mask's method."""
    rows, method = [], None
    for n, where, line, x in jsonl_objects(path):
        msgs = x.get("messages") if isinstance(x, dict) else None
        if not isinstance(msgs, list) or not msgs:
            raise TokenizerError(f'{where}: expected an object with "messages", a non-empty list of {{"role", "content"}} objects, '
                                 f"got {line.strip()[:60]}")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise TokenizerError(f"{where}: message {i} is not an object with role and content strings")
            if m["role"] not in CONVERSATION_ROLES:
                raise TokenizerError(f"{where}: message {i} has role {m['role']!r}, not one of {', '.join(CONVERSATION_ROLES)}")
        if not any(m["role"] == "assistant" for m in msgs):
            raise TokenizerError(f"{where}: no assistant message (nothing to train on)")
        try:
            ids, mask, method = encode_conversation(tk, msgs)
        except TokenizerError as e:
            raise TokenizerError(f"{where}: {e}")
        if not mask.any():
            raise TokenizerError(f"{where}: the assistant's messages have no tokens")
        if mask[0]:
            raise TokenizerError(f"{where}: the first token is the assistant's, which nothing before it predicts "
                                 "(the template renders no header before the assistant's first message)")
        rows.append((n, ids, mask))
    if not rows:
        raise TokenizerError(f"{path}: no conversations (every line is blank)")
    return rows, method


def make_conversations(tk, ckpt, src, out, role=None):
    """A token dataset with /loss_mask (SFT data) OUT from the JSONL conversations SRC; returns (rows, longest,
    targets, tokens, method)."""
    import h5py
    role, vocab, npos = model_limits(ckpt, role)
    rows, method = read_conversations(tk, src)
    for n, ids, _ in rows:
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise TokenizerError(f"{src}:{n}: token {bad[0]} is outside the model's vocabulary [0, {vocab}) (/{role} of {ckpt})")
        if npos is not None and len(ids) > npos:
            raise TokenizerError(f"{src}:{n}: the conversation is {len(ids)} tokens, more than the model's n_positions {npos}")
    T = max(len(r[1]) for r in rows)
    tokens, mask = np.zeros((len(rows), T), np.int32), np.zeros((len(rows), T), np.uint8)
    for b, (_, ids, m) in enumerate(rows):
        tokens[b, :len(ids)], mask[b, :len(ids)] = ids, m

    def write(tmp):
        with h5py.File(tmp, "w") as f:
            f["tokens"] = tokens
            f["lengths"] = np.array([len(r[1]) for r in rows], np.int32)
            f["prompt_lengths"] = np.array([int(np.argmax(r[2])) for r in rows], np.int32)  # up to the first target
            f["loss_mask"] = mask
            f.attrs["vocab_size"] = np.int32(vocab)
            f.attrs["task"] = "chat conversations"
    write_atomic(out, write, (ckpt, src))
    return len(rows), T, int(mask.sum()), sum(len(r[1]) for r in rows), method


def read_generation(tk, path):
    """The datasets of a -mode generate output, checked: {name: array}."""
    with open_h5(path) as f:
        miss = [k for k in GEN_DATASETS if k not in f]
        if miss:
            hint = " (a run's rollouts.h5 or evals.h5: tokenizer.py samples FILE)" if any(k.startswith("iter_") or k in ("eval", "reference") for k in f) else ""
            raise TokenizerError(f"{path}: no /{miss[0]} (not a -mode generate output file){hint}")
        g = {k: f[k][()] for k in GEN_DATASETS}
        B = len(g["lengths"])
        for name in ("answer", "metadata"):
            t = read_texts(f, name, B)
            if t is not None:
                g[name] = t
    if (g["tokens"].ndim != 2 or g["tokens"].shape[0] != B or g["logprobs"].shape != g["tokens"].shape
            or any(g[k].shape != (B,) for k in ("prompt_lengths", "response_lengths", "stopped"))):
        raise TokenizerError(f"{path}: dataset shapes disagree ({', '.join(f'/{k} {g[k].shape}' for k in GEN_DATASETS)})")
    P, R, L, T = g["prompt_lengths"], g["response_lengths"], g["lengths"], g["tokens"].shape[1]
    bad = np.nonzero((P < 0) | (R < 0) | (P + R != L) | (L > T))[0]
    if len(bad):
        b = bad[0]
        raise TokenizerError(f"{path}: row {b}: prompt_lengths {P[b]} + response_lengths {R[b]} != lengths {L[b]} (or over the width {T})")
    V = len(tk.tokens)
    for b in range(B):
        row = g["tokens"][b, :L[b]]
        out = np.nonzero((row < 0) | (row >= V))[0]
        if len(out):
            raise TokenizerError(f"{path}: /tokens[{b},{out[0]}] = {row[out[0]]} is outside the tokenizer's vocabulary [0, {V})")
    return g


def generation_records(tk, g):
    """One dict per row of a generation file (see responses in the docstring)."""
    recs = []
    for b in range(len(g["lengths"])):
        P, R, stopped = int(g["prompt_lengths"][b]), int(g["response_lengths"][b]), bool(g["stopped"][b])
        resp = g["tokens"][b, P:P + R].tolist()
        recs.append({"prompt": tk.decode(g["tokens"][b, :P].tolist()),
                     "response": tk.decode(resp[:-1] if stopped and resp else resp),
                     "stopped": stopped, "response_tokens": R,
                     "logprob": float(g["logprobs"][b, P:P + R].astype(np.float64).sum())})
        if "answer" in g:
            recs[-1]["answer"] = g["answer"][b]
        if "metadata" in g and g["metadata"][b]:
            try:
                recs[-1]["metadata"] = json.loads(g["metadata"][b])
            except ValueError:
                recs[-1]["metadata"] = g["metadata"][b]
    return recs


def write_responses(tk, gen, out):
    recs = generation_records(tk, read_generation(tk, gen))

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    write_atomic(out, write, (gen,))
    return recs


SAMPLE_DATASETS = ("tokens", "prompt_lengths", "response_lengths")
# the built-in arithmetic task's tokens (src/task/arith.c): PAD BOS SEP EOS without text, then characters
ARITH_CHARS = "0123456789+-*=?., abcdefghijklmnopqrstuvwxyz"


class IdsText:
    """Token ids as text, for runs without a tokenizer or a task with characters (the sort task)."""
    def decode(self, ids):
        return " ".join(map(str, ids))


def run_decoder(path, ckpt=None):
    """(decoder, what) for a run file: CKPT's /tokenizer, the run's checkpoints', the arithmetic task's or the ids."""
    import h5py
    if ckpt:
        return Tokenizer.from_checkpoint(ckpt), ckpt
    d = os.path.dirname(os.path.abspath(path))
    cands, task = [os.path.join(d, "final.h5")], None
    if os.path.isfile(os.path.join(d, "run.h5")):
        try:
            with h5py.File(os.path.join(d, "run.h5"), "r") as f:
                p = f["parameters"].attrs if "parameters" in f else {}
                val = {k: (p[k].decode() if isinstance(p[k], bytes) else str(p[k])) for k in ("actor_checkpoint", "task") if k in p}
            task = val.get("task")
            if val.get("actor_checkpoint"):
                cands.append(val["actor_checkpoint"])
        except OSError:
            pass
    for c in cands:
        try:
            with h5py.File(c, "r") as f:
                has = "tokenizer" in f
        except OSError:
            continue
        if has:
            return Tokenizer.from_checkpoint(c), c
    if task == "arith":
        return Tokenizer([b"", b"", b"", b""] + [c.encode() for c in ARITH_CHARS], [CONTROL] * 4 + [1] * len(ARITH_CHARS), []), "the arithmetic task's characters"
    return IdsText(), "token ids"


EPISODE_SOURCES = {1: "model", 2: "environment"}  # rollouts.h5 /source (docs/formats.md); 0 is the prompt


def episode_columns(path, gname, g, shape):
    """A group's /source and /turn (episodes), checked, or (None, None) without them."""
    if "source" not in g and "turn" not in g:
        return None, None
    if "source" not in g or "turn" not in g:
        raise TokenizerError(f"{path}: /{gname}: /source and /turn come together")
    src, turn = g["source"][()], g["turn"][()]
    if src.shape != shape or turn.shape != shape:
        raise TokenizerError(f"{path}: /{gname}: /source {src.shape} and /turn {turn.shape} must have /tokens' shape {shape}")
    return src, turn


def episode_turns(dec, resp, src, turn, eos):
    """A response of an episode as its segments in order: each run of tokens of one source and one turn, labelled.
    The final EOS is left out of the text as it is of the response's."""
    out, t = [], 0
    while t < len(resp):
        e = t
        while e < len(resp) and src[e] == src[t] and turn[e] == turn[t]:
            e += 1
        ids = resp[t:e - 1] if eos and e == len(resp) else resp[t:e]
        out.append({"source": EPISODE_SOURCES.get(int(src[t]), f"source {int(src[t])}"), "turn": int(turn[t]),
                    "tokens": e - t, "text": dec.decode(ids)})
        t = e
    return out


def sample_records(dec, path):
    """One dict per sample of every group of a rollouts.h5 or evals.h5 (see samples in the docstring)."""
    def num(x):
        return None if np.isnan(x) else float(x)

    recs = []
    with open_h5(path) as f:
        groups = sorted((k for k in f if isinstance(f[k], type(f["/"]))), key=lambda k: (not k.startswith("iter_"), int(k[5:]) if k[5:].isdigit() else 0, k))
        if not groups:
            raise TokenizerError(f"{path}: no groups (not a run's rollouts.h5 or evals.h5)")
        for gname in groups:
            g = f[gname]
            miss = [k for k in SAMPLE_DATASETS if k not in g]
            if miss:
                raise TokenizerError(f"{path}: /{gname} has no /{miss[0]} (not a run's rollouts.h5 or evals.h5)")
            tok, P, R = g["tokens"][()], g["prompt_lengths"][()].reshape(-1), g["response_lengths"][()].reshape(-1)
            B, T = tok.shape
            if len(P) != B or len(R) != B or np.any(P < 0) or np.any(R < 0) or np.any(P + R > T):
                raise TokenizerError(f"{path}: /{gname}: prompt_lengths + response_lengths do not fit its {B} rows of {T} tokens")
            col = {k: g[k][()].reshape(-1) for k in ("eos", "final_scores", "gold") if k in g}
            ans = read_texts(g, "answer", B)
            src, turn = episode_columns(path, gname, g, tok.shape)
            for b in range(B):
                resp = tok[b, P[b]:P[b] + R[b]].tolist()
                eos = bool(col["eos"][b]) if "eos" in col else False
                r = {"group": gname, "row": b, "prompt": dec.decode(tok[b, :P[b]].tolist()),
                     "response": dec.decode(resp[:-1] if eos and resp else resp), "eos": eos, "response_tokens": int(R[b])}
                if src is not None:
                    r["turns"] = episode_turns(dec, resp, src[b, P[b]:P[b] + R[b]], turn[b, P[b]:P[b] + R[b]], eos)
                if "final_scores" in col:
                    r["reward"] = num(col["final_scores"][b])
                if "gold" in col:  # with answers gold is whether the answer is right, "correct" as the console says
                    r["correct" if ans is not None else "gold"] = num(col["gold"][b])
                if ans is not None:
                    r["answer"] = ans[b]
                recs.append(r)
    return recs


def fail(msg):
    print(f"{TOOL}: error: {msg}", file=sys.stderr)
    sys.exit(1)


USAGE = ("usage: tokenizer.py CKPT encode TEXT | CKPT decode ID... | CKPT chat JSON [--no-generation-prompt] | "
         "CKPT prompts IN.jsonl OUT.h5 [--no-chat] [--role ROLE] [--suffix TEXT] | CKPT conversations IN.jsonl OUT.h5 [--role ROLE] | "
         "CKPT responses GEN.h5 OUT.jsonl | "
         "[CKPT] samples RUN_FILE.h5 (tokenizer.py --help says more)")


def has_tokenizer(path):
    """Whether path is an HDF5 file with a /tokenizer group (a checkpoint, not a run file)."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            return "tokenizer" in f
    except OSError:
        return False


def samples(a):
    """CKPT samples RUN (the other subcommands' order), samples RUN, samples CKPT RUN, or the older samples RUN CKPT."""
    if a[0] != "samples":
        a = [a[1], a[2], a[0]] + a[3:] if len(a) >= 3 else a[1:]  # CKPT samples RUN -> samples RUN CKPT
    if len(a) not in (2, 3):
        fail("usage: tokenizer.py CKPT samples RUN_FILE.h5, or tokenizer.py samples RUN_FILE.h5 (the run's checkpoints decode)")
    run, ckpt = a[1], a[2] if len(a) == 3 else None
    if ckpt and has_tokenizer(run) and not has_tokenizer(ckpt):
        run, ckpt = ckpt, run  # samples CKPT RUN, as the other subcommands put the checkpoint first
    try:
        dec, _ = run_decoder(run, ckpt)
        for r in sample_records(dec, run):
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
    except TokenizerError as e:
        fail(str(e))


def main():
    cmds = ("encode", "decode", "chat", "prompts", "conversations", "responses")
    a, tokenizer_json = sys.argv[1:], None
    if "--tokenizer-json" in a:
        i = a.index("--tokenizer-json")
        if i + 1 >= len(a):
            fail("--tokenizer-json needs a file")
        tokenizer_json = a[i + 1]
        del a[i:i + 2]
        if not os.path.isfile(tokenizer_json):
            fail(f"--tokenizer-json {tokenizer_json}: no such file")
    if a and a[0] in ("-h", "--help", "help"):
        sys.stdout.write(__doc__.split("\n\nprompts:")[0] + "\n")
        return
    if "samples" in a[:2]:
        samples(a)
        return
    if len(a) >= 2 and a[0] in ("prompts", "conversations", "responses") and a[1] not in cmds and not os.path.isfile(a[0]):
        a[0], a[1] = a[1], a[0]  # tokenizer.py prompts CKPT ...
    if len(a) < 2 or a[1] not in cmds:
        fail(USAGE)
    try:
        tk = Tokenizer.from_checkpoint(a[0])
        tk.tokenizer_json = tokenizer_json
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
        elif a[1] == "chat":
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
        elif a[1] == "prompts":
            rest, chat, val = a[2:], "--no-chat" not in a[2:], {}
            rest = [x for x in rest if x != "--no-chat"]
            for opt in ("--role", "--suffix"):
                if opt in rest:
                    i = rest.index(opt)
                    if i + 1 >= len(rest):
                        fail(f"{opt} needs a value")
                    val[opt] = rest[i + 1]
                    del rest[i:i + 2]
            if len(rest) != 2 or any(x.startswith("--") for x in rest):
                fail("prompts takes IN.jsonl OUT.h5 [--no-chat] [--role ROLE] [--suffix TEXT]")
            n, T, ans, meta = make_prompts(tk, a[0], rest[0], rest[1], chat, val.get("--role"), val.get("--suffix"))
            extra = " and ".join(w for w, h in (("answers", ans), ("metadata", meta)) if h)
            print(f"{TOOL}: {n} {'chat' if chat else 'text'} prompts{' with ' + extra if extra else ''} -> {rest[1]} (longest {T} tokens)")
        elif a[1] == "conversations":
            rest, role = a[2:], None
            if "--role" in rest:
                i = rest.index("--role")
                if i + 1 >= len(rest):
                    fail("--role needs a value")
                role = rest[i + 1]
                del rest[i:i + 2]
            if len(rest) != 2 or any(x.startswith("--") for x in rest):
                fail("conversations takes IN.jsonl OUT.h5 [--role ROLE]")
            n, T, targets, total, method = make_conversations(tk, a[0], rest[0], rest[1], role)
            print(f"{TOOL}: {n} conversations -> {rest[1]} (longest {T} tokens; {targets} of their {total} tokens are the "
                  f"assistant's, the targets, by {method})")
        else:
            if len(a) != 4:
                fail("responses takes GEN.h5 OUT.jsonl")
            recs = write_responses(tk, a[2], a[3])
            print(f"{TOOL}: {len(recs)} responses -> {a[3]} ({sum(r['stopped'] for r in recs)} stopped at a stop token)")
    except TokenizerError as e:
        fail(str(e))

if __name__ == "__main__":
    main()
