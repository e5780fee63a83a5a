#!/usr/bin/env python3
"""env_arith_calc: the built-in calculator of the arithmetic task (src/env/calc.c)
as an environment program of the JSON-lines protocol (docs/environments.md), so
the suite can compare -env command with -env calc: the same answers, so the
same episodes bit for bit. Sleeps a random 0 to MAX_MS milliseconds before each
answer (argument 1, default 0), which must change nothing. Argument 2 (default
0) is a step reward: +R for a call it could compute, -R for one it answers with
'?' (the built-in calculator gives none). Ids as the task's
characters: 4-13 the digits, 14 '+', 15 '-', 16 '*', 17 '=', 18 '?', 20 ','."""
import json
import random
import sys
import time

D0, PLUS, MINUS, TIMES, EQ, QUERY, COMMA = 4, 14, 15, 16, 17, 18, 20
MAX_DIGITS = 9


def operand_before(seg, e):
    s = e
    while s > 0 and e - s < MAX_DIGITS + 1 and D0 <= seg[s - 1] <= D0 + 9:
        s -= 1
    if s == e or e - s > MAX_DIGITS:
        return -1, 0
    return s, int("".join(str(t - D0) for t in seg[s:e]))


def value(seg):
    n = len(seg)
    if n < 4 or seg[-1] != EQ:
        return None
    sb, b = operand_before(seg, n - 1)
    if sb < 2:
        return None
    op = seg[sb - 1]
    if op not in (PLUS, MINUS, TIMES):
        return None
    sa, a = operand_before(seg, sb - 1)
    if sa < 0:
        return None
    if sa > 0 and seg[sa - 1] == MINUS and (sa == 1 or not D0 <= seg[sa - 2] <= D0 + 9):
        a = -a
    return a + b if op == PLUS else a - b if op == MINUS else a * b


def main():
    max_ms = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    step_reward = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    rng = random.Random()
    for line in sys.stdin:
        req = json.loads(line)
        time.sleep(rng.uniform(0, max_ms) / 1000.0)
        if req["op"] == "reset":
            ans = {"state": "0"}
        else:
            v = value(req["ids"])
            ids = [QUERY] if v is None else [MINUS if c == "-" else D0 + int(c) for c in str(v)]
            reward = -step_reward if v is None else step_reward
            ans = {"ids": ids + [COMMA], "reward": reward, "done": False, "state": str(int(req["state"]) + 1)}
        sys.stdout.write(json.dumps(ans) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
