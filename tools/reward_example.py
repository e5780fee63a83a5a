#!/usr/bin/env python3
"""An example reward command for rlfuse: copy it and change `reward`.

    rlfuse -mode ppo ... -reward_command "python3 tools/reward_example.py"

The protocol (docs/rewards.md, inc/reward.h). rlfuse starts the command once,
through /bin/sh -c, on world rank 0, and keeps it for the whole run. For each
batch of samples it writes ONE line of JSON to the command's standard input:

    {"iteration": K, "samples": [{"index": I, "prompt": "...",
      "response": "...", "answer": "...", "metadata": "..."}, ...]}

(index: the prompt's row in its file, or the built-in task's sample; answer
and metadata may be ""; text that was not valid UTF-8 arrives with U+FFFD in
place of the bad bytes). The command answers with one line per sample, in
order, each a number in JSON's syntax (1, -0.5, 2e-3; not nan or inf), and
must flush its output after each batch: rlfuse waits for the numbers
(-reward_command_timeout seconds per batch). Standard output carries only
the answers; anything else (logs, warnings) goes to standard error, which
passes through. When rlfuse closes the command's standard input (end of
file), the command exits; one still running 5 s later is killed.

This example gives 1.0 when the last number in the response equals the
reference answer numerically (3.50 equals 3.5, 1,234 equals 1234), else 0.0.
Plain Python 3 standard library only.
"""
import json
import math
import re
import sys

# an optional sign, digits with optional thousands separators, a decimal part
NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?")


def to_float(text):
    """The number text stands for (separators removed), or None."""
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def last_number(text):
    """The last number written in text, or None."""
    found = [m.group() for m in NUMBER.finditer(text) if any(c.isdigit() for c in m.group())]
    return to_float(found[-1]) if found else None


def reward(sample):
    """The reward of one sample (a dict of the batch's "samples")."""
    got, want = last_number(sample["response"]), to_float(sample["answer"].strip())
    if got is None or want is None:
        return 0.0
    return 1.0 if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12) else 0.0


def main():
    for line in sys.stdin:  # one batch per line; the loop ends at end of input
        if not line.strip():
            continue
        batch = json.loads(line)
        scores = [reward(s) for s in batch["samples"]]
        sys.stdout.write("".join(f"{v!r}\n" for v in scores))
        sys.stdout.flush()  # rlfuse is waiting for this batch's answers


if __name__ == "__main__":
    main()
