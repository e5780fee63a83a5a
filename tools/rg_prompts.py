#!/usr/bin/env python3
"""rg_prompts: problems with reference answers from reasoning-gym (the PyPI
package `reasoning-gym`, procedural generators; make deps installs it into
~/.cache/rlfuse/python, which is searched when it is not on the path), as
JSONL for `tools/tokenizer.py CKPT prompts` (RL with verifiable rewards:
docs/formats.md, "Reference answers and metadata").

Usage: tools/py tools/rg_prompts.py OUT.jsonl [--task TASK] [--n N] [--seed S]
                        [--exclude FILE.jsonl]... [--config KEY=VALUE]... [--digits A-B] [--terms A-B]
                        [--suffix TEXT] [--cot]
       tools/py tools/rg_prompts.py --list           the tasks this reasoning-gym has

  --task TASK      gsm_symbolic (default: GSM8K's problems as templates with
                   fresh names and numbers, integer answers), basic_arithmetic
                   ("Calculate ( 56 + -33 ) - 84."), or any other task of
                   --list whose problems have a single answer string
                   (chain_sum, products, leg_counting, decimal_arithmetic, ...)
  --n N            problems written (default 100)
  --seed S         which problems (default 0): problem i is reasoning-gym's
                   item i of the dataset with seed S * 2^20, so different
                   seeds never share a generator seed (reasoning-gym seeds
                   item i with seed + i: seeds 1 and 2 would share all but one)
  --exclude FILE   leave out every problem whose prompt (or question) is one
                   of FILE's "prompt" values: a held-out set disjoint from a
                   training set by construction (--seed 2 --exclude train.jsonl)
  --config KEY=VALUE   a field of the task's config (reasoning-gym's
                   dataclass; VALUE is read as JSON, else taken as a string),
                   e.g. --config 'operators=["+","-"]' --config allow_negation=false
                   for basic_arithmetic; gsm_symbolic has only difficulty
                   (1.0, the only value this version supports)
  --digits A-B, --terms A-B   shorthands for min_digits/max_digits and
                   min_terms/max_terms (basic_arithmetic, chain_sum, ...)
  --suffix TEXT    appended to each question after a space, e.g. "Give the
                   final answer as a number." (gsm_symbolic's questions already
                   end "Give the result as your final answer. Do not include units.")
  --cot            keep gsm_symbolic's worked solution (answer_cot) in the metadata

Each line: {"prompt": QUESTION[ SUFFIX], "answer": ANSWER, "metadata":
{"task": TASK, "source": "reasoning-gym", "version": V, "seed": S, "rg_seed":
S * 2^20, "index": i, "config": {the --config fields}, "rg": the item's own
metadata}}, so reasoning_gym.create_dataset(TASK, seed=rg_seed, size=...,
**config)[index] gives the problem back. A question drawn twice (small
tasks repeat) is written once: more items are drawn, up to 20 N + 1000,
and the tool stops with an error if that does not give N distinct
problems. OUT.jsonl is written to a temporary and renamed ("-": standard
output). Errors are one line "rg_prompts: error: ..." and exit status 1.
"""
import json
import math
import os
import sys

TOOL = "rg_prompts"
SEED_STRIDE = 1 << 20  # reasoning-gym items of seed S are S * SEED_STRIDE + i


class RGError(Exception):
    """A one-line reason."""


def cache_python_dir():
    """Where make deps installs the Python packages of tools/ (tools/deps.sh)."""
    cache = os.environ.get("RLFUSE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rlfuse")
    return os.path.join(cache, "python")


def import_rg():
    """reasoning_gym, from the path or else from the cache folder (appended: Debian's numpy stays first)."""
    try:
        import reasoning_gym
        return reasoning_gym
    except ImportError:
        d = cache_python_dir()
        if d not in sys.path and os.path.isdir(d):
            sys.path.append(d)
    try:
        import reasoning_gym
        return reasoning_gym
    except ImportError as e:
        raise RGError(f"reasoning-gym is not installed ({e}; make deps installs it into {cache_python_dir()})")


def rg_version():
    try:
        from importlib.metadata import version
        return version("reasoning-gym")
    except Exception:  # noqa: BLE001 (metadata missing: still usable)
        return "unknown"


def parse_value(v):
    try:
        return json.loads(v)
    except ValueError:
        return v


def parse_range(opt, v):
    a, sep, b = v.partition("-")
    try:
        lo, hi = int(a), int(b if sep else a)
    except ValueError:
        raise RGError(f"{opt} takes A-B (two integers), got '{v}'")
    if not 0 < lo <= hi:
        raise RGError(f"{opt} {v}: expected 0 < A <= B")
    return lo, hi


def excluded_texts(paths):
    """The "prompt" values of JSONL files (and each one's metadata question, when it has one)."""
    out = set()
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        x = json.loads(line)
                    except ValueError as e:
                        raise RGError(f"--exclude {p}:{n}: not JSON ({e})")
                    if isinstance(x, dict) and isinstance(x.get("prompt"), str):
                        out.add(x["prompt"])
                        q = x.get("metadata", {}).get("question") if isinstance(x.get("metadata"), dict) else None
                        if isinstance(q, str):
                            out.add(q)
        except OSError as e:
            raise RGError(f"--exclude {p}: cannot read ({e.strerror})")
        except UnicodeDecodeError as e:
            raise RGError(f"--exclude {p}: not UTF-8 ({e.reason})")
    return out


def make_dataset(rg, task, seed, size, config):
    from dataclasses import fields
    from reasoning_gym.factory import DATASETS
    if task not in DATASETS:
        raise RGError(f"--task {task}: not a reasoning-gym task (--list shows them)")
    names = {f.name for f in fields(DATASETS[task][1])} - {"seed", "size"}
    bad = sorted(set(config) - names)
    if bad:
        raise RGError(f"--task {task} has no config field {bad[0]} (it has: {', '.join(sorted(names)) or 'none'})")
    try:
        return rg.create_dataset(task, seed=seed, size=size, **config)
    except (AssertionError, TypeError, ValueError) as e:
        import traceback
        why = str(e) or (traceback.extract_tb(e.__traceback__)[-1].line or type(e).__name__)  # a bare assert: its line
        raise RGError(f"--task {task} refused the config {json.dumps(config)}: {why}")


def jsonable(x):
    """X with what JSON lacks as text: a Fraction's "7/2", a non-finite float's "inf"; tuples as lists."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, (str, bool, int)):
        return x
    if isinstance(x, float) and math.isfinite(x):
        return x
    return str(x)


def problems(task="gsm_symbolic", n=100, seed=0, config=None, exclude=(), suffix="", cot=False):
    """The JSONL records (dicts) of n distinct problems."""
    rg = import_rg()
    config = dict(config or {})
    if n < 1:
        raise RGError(f"--n {n}: expected at least 1")
    if seed < 0:
        raise RGError(f"--seed {seed}: expected 0 or more")
    draws = 20 * n + 1000
    if draws > SEED_STRIDE:
        raise RGError(f"--n {n}: at most {(SEED_STRIDE - 1000) // 20} problems a seed")
    rg_seed = seed * SEED_STRIDE
    ds = make_dataset(rg, task, rg_seed, draws, config)
    skip = excluded_texts(exclude)
    version, seen, out = rg_version(), set(), []
    for i in range(draws):
        try:
            item = ds[i]
        except Exception as e:  # noqa: BLE001 (a generator's own failure, named)
            raise RGError(f"--task {task}: item {i} of seed {rg_seed} failed ({type(e).__name__}: {e})")
        q, a = item.get("question"), item.get("answer")
        if not isinstance(q, str) or not q.strip():
            raise RGError(f"--task {task}: item {i} has no question text")
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            a = str(a)
        if not isinstance(a, str) or not a.strip():
            raise RGError(f"--task {task}: item {i} has no single answer string (answer {a!r}): its responses need its own scorer")
        prompt = f"{q} {suffix}" if suffix else q
        if q in seen or q in skip or prompt in skip:
            continue
        seen.add(q)
        meta = jsonable(dict(item.get("metadata") or {}))
        if not cot:
            meta.pop("answer_cot", None)
        out.append({"prompt": prompt, "answer": a.strip(),
                    "metadata": {"task": task, "source": "reasoning-gym", "version": version, "seed": seed, "rg_seed": rg_seed,
                                 "index": i, "config": jsonable(config), "rg": meta}})
        if len(out) == n:
            return out
    raise RGError(f"--task {task}: only {len(out)} distinct problems in {draws} draws (the task's config allows too few "
                  f"for --n {n}{', less --exclude' if skip else ''}: widen it, e.g. --digits)")


def write_jsonl(path, recs):
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs)
    if path == "-":
        sys.stdout.write(text)
        return
    d = os.path.dirname(path) or "."
    if not os.path.isdir(d):
        raise RGError(f"{path}: directory {d} does not exist")
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise RGError(f"{path}: cannot write ({e})")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def fail(msg):
    print(f"{TOOL}: error: {msg}", file=sys.stderr)
    sys.exit(1)


USAGE = ("usage: rg_prompts.py OUT.jsonl [--task TASK] [--n N] [--seed S] [--exclude FILE]... [--config KEY=VALUE]... "
         "[--digits A-B] [--terms A-B] [--suffix TEXT] [--cot] | rg_prompts.py --list")


def main(argv):
    if argv in (["-h"], ["--help"]):
        print(__doc__)
        return
    try:
        if argv == ["--list"]:
            import_rg()
            from reasoning_gym.factory import DATASETS
            print("\n".join(sorted(DATASETS)))
            return
        opts = {"--task": "gsm_symbolic", "--n": "100", "--seed": "0", "--suffix": ""}
        exclude, config, cot, pos, i = [], {}, False, [], 0
        while i < len(argv):
            a = argv[i]
            if a == "--cot":
                cot = True
                i += 1
                continue
            if a in ("--task", "--n", "--seed", "--suffix", "--exclude", "--config", "--digits", "--terms"):
                if i + 1 >= len(argv):
                    fail(f"{a} needs a value")
                v = argv[i + 1]
                if a == "--exclude":
                    exclude.append(v)
                elif a == "--config":
                    k, sep, val = v.partition("=")
                    if not sep or not k:
                        fail(f"--config takes KEY=VALUE, got '{v}'")
                    config[k] = parse_value(val)
                elif a in ("--digits", "--terms"):
                    lo, hi = parse_range(a, v)
                    config[f"min_{a[2:]}"], config[f"max_{a[2:]}"] = lo, hi
                else:
                    opts[a] = v
                i += 2
                continue
            if a.startswith("--"):
                fail(f"unknown option {a}; {USAGE}")
            pos.append(a)
            i += 1
        if len(pos) != 1:
            fail(USAGE)
        try:
            n, seed = int(opts["--n"]), int(opts["--seed"])
        except ValueError:
            fail("--n and --seed take integers")
        recs = problems(opts["--task"], n, seed, config, exclude, opts["--suffix"].strip(), cot)
        write_jsonl(pos[0], recs)
        if pos[0] != "-":
            print(f"{TOOL}: {len(recs)} {opts['--task']} problems with answers (seed {seed}) -> {pos[0]}")
    except RGError as e:
        fail(str(e))


if __name__ == "__main__":
    main(sys.argv[1:])
