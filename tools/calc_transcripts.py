#!/usr/bin/env python3
"""calc_transcripts: tool-use transcripts for a multi-turn SFT warm start
(docs/environments.md, "A real model and the calculator").

Usage: tools/py tools/calc_transcripts.py IN.jsonl OUT.jsonl [--suffix TEXT]

IN.jsonl: arithmetic problems, one JSON object per line with "prompt" (the
text, holding the two operands as its first two integers) and "answer" (an
integer), as `rlfuse -mode data -task arith -data_text` writes them. Each
becomes one conversation for `tools/tokenizer.py CKPT conversations`:

    user:       PROMPT TEXT             (--suffix TEXT appends " TEXT")
    assistant:  <tool_call>A op B</tool_call>
    tool:       ANSWER
    assistant:  ANSWER

where op is the first of +, -, * for which A op B is the answer (the tool's
reply is what tools/env_calculator.py answers to that call). A line whose
answer no operation of its first two integers gives is refused, naming the
line; so is a file with none. OUT.jsonl is written to a temporary and
renamed (tools/tokenizer.py's write_atomic; the input itself is refused as
the output).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer import TokenizerError, write_atomic  # noqa: E402

_INT = re.compile(r"\d+")
_OPS = (("+", lambda a, b: a + b), ("-", lambda a, b: a - b), ("*", lambda a, b: a * b))


class TranscriptError(Exception):
    pass


def conversation(prompt, answer, suffix=None):
    """The messages of one problem (module docstring)."""
    nums = [int(x) for x in _INT.findall(prompt)]
    if len(nums) < 2:
        raise TranscriptError(f"the prompt holds {len(nums)} integers, not two operands")
    a, b = nums[:2]
    want = int(str(answer).strip())
    op = next((o for o, f in _OPS if f(a, b) == want), None)
    if op is None:
        raise TranscriptError(f"no operation of {a} and {b} gives the answer {want}")
    user = prompt + (" " + suffix if suffix else "")
    return {"messages": [{"role": "user", "content": user},
                         {"role": "assistant", "content": f"<tool_call>{a}{op}{b}</tool_call>"},
                         {"role": "tool", "content": str(want)},
                         {"role": "assistant", "content": str(want)}]}


def main(argv):
    args, suffix = list(argv), None
    if "--suffix" in args:
        k = args.index("--suffix")
        if k + 1 >= len(args):
            raise TranscriptError("--suffix needs a text")
        suffix = args[k + 1]
        del args[k:k + 2]
    if len(args) != 2:
        raise TranscriptError("usage: calc_transcripts.py IN.jsonl OUT.jsonl [--suffix TEXT]")
    src, out = args
    lines = []
    try:
        with open(src, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    o = json.loads(line)
                    lines.append(json.dumps(conversation(o["prompt"], o["answer"], suffix)))
                except (ValueError, KeyError, TypeError, TranscriptError) as e:
                    what = f"no {e}" if isinstance(e, KeyError) else str(e)
                    raise TranscriptError(f"{src}:{n}: {what}") from None
    except OSError as e:
        raise TranscriptError(f"{src}: {e.strerror}") from None
    if not lines:
        raise TranscriptError(f"{src}: no problems")
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    try:
        write_atomic(out, write, (src,))
    except TokenizerError as e:
        raise TranscriptError(str(e)) from None
    print(f"calc_transcripts: {len(lines)} conversations -> {out}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except TranscriptError as e:
        print(f"calc_transcripts: error: {e}", file=sys.stderr)
        sys.exit(1)
