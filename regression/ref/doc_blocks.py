#!/usr/bin/env python3
"""The shell blocks of the documents, for regression/scenarios/doc_commands.sh.

  doc_blocks.py --list FILE.md...        one line per ```sh block: ID<TAB>skip reason (empty: run it)
  doc_blocks.py --script ID FILE.md...   the block as a bash script, with its appended options

A block's ID is FILE#N (N counts the file's ```sh blocks from 1). The HTML
comments on the lines just above a block say how it runs:
  <!-- run: skip REASON -->             not run here (a cluster, a GPU, hours)
  <!-- run: append TEXT => OPTIONS -->   OPTIONS go at the end of every command
                                         line containing TEXT, before its comment
"""
import re
import sys

MARK = re.compile(r"^<!--\s*run:\s*(skip|append)\s+(.*?)\s*-->\s*$")


def blocks(path):
    """Yields (id, skip reason, [(text, options)], lines) for each ```sh block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    n, i = 0, 0
    while i < len(lines):
        if lines[i].strip() not in ("```sh", "```bash"):
            i += 1
            continue
        marks, k = [], i - 1
        while k >= 0 and MARK.match(lines[k]):
            marks.insert(0, MARK.match(lines[k]).groups())
            k -= 1
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}: the ```sh block at line {i + 1} is not closed")
        n += 1
        skip = " ".join(arg for kind, arg in marks if kind == "skip")
        appends = []
        for kind, arg in marks:
            if kind == "append":
                text, sep, opts = arg.partition("=>")
                if not sep or not text.strip() or not opts.strip():
                    raise SystemExit(f"{path}: line {k + 2}: expected <!-- run: append TEXT => OPTIONS -->")
                appends.append((text.strip(), opts.strip()))
        yield f"{path}#{n}", skip, appends, lines[i + 1:j]
        i = j + 1


def with_options(line, appends):
    """The line with the options of every matching append before its comment."""
    extra = " ".join(opts for text, opts in appends if text in line)
    if not extra:
        return line
    m = re.search(r"\s+#\s", line)  # a command's trailing comment (documents quote no '#')
    head, tail = (line[:m.start()], line[m.start():]) if m else (line, "")
    return f"{head} {extra}{tail}"


def script(lines, appends):
    """Continuation lines joined, so an append lands at the command's end."""
    out, cur = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        out.append(with_options(cur + line, appends))
        cur = ""
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) >= 2 and argv[0] == "--list":
        for path in argv[1:]:
            for bid, skip, _, _ in blocks(path):
                print(f"{bid}\t{skip}")
        return 0
    if len(argv) >= 3 and argv[0] == "--script":
        for path in argv[2:]:
            for bid, _, appends, lines in blocks(path):
                if bid == argv[1]:
                    sys.stdout.write(script(lines, appends))
                    return 0
        raise SystemExit(f"doc_blocks.py: no block {argv[1]}")
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
