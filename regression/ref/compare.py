#!/usr/bin/env python3
"""compare: the regression comparer. Checks a new HDF5 output against a stored
reference with explicit tolerances per quantity; timings are never compared.

Usage: /usr/bin/python3 regression/ref/compare.py [--allow-unmatched] REF.h5 NEW.h5 TOLFILE

TOLFILE holds one rule per line ('#' starts a comment):

    <pattern> abs=<a> rel=<r> floor=<f> [nan=ok]   compare with these tolerances
    <pattern> skip                                 never compare (e.g. /timing/*)

<pattern> is a shell glob (fnmatch; '*' also crosses '/') over full dataset
paths such as /metrics/reward. Numeric attributes are compared only where a
rule names them, as <object path>@<attribute>, e.g. /summary@final_kl; only
patterns containing '@' select attributes. The first rule that matches a name
decides; missing keys default to 0 (abs=0 rel=0: exact).

An element passes if |new - ref| <= abs, or if |ref| >= floor and
|new - ref| <= rel * |ref| (below the floor only abs applies). NaN is never
a result: a NaN in REF or NEW fails, except under a rule with nan=ok (a
quantity measured only on some rows, such as a held-out loss every k steps),
where NaN must stand at the same places in both; even there a quantity that
is NaN everywhere in REF fails (it measures nothing: a rule for something a
deck does not measure is `skip`).
Every REF dataset/attribute selected by a comparing rule must exist in NEW
with the same shape; string values must be equal. Names no rule matches are
ignored. A rule that matches nothing in REF is an error (a misspelled pattern
must not pass silently) unless --allow-unmatched is given.

Prints one line per compared name (PASS/FAIL, max abs err, max rel err) and a
summary; exit status 0 when everything passes, 1 on any failure or missing
name, 2 on a usage or TOLFILE error. Needs numpy and h5py only.
"""
import argparse
import fnmatch
import sys

import h5py
import numpy as np


class Rule:
    def __init__(self, pattern, skip, abs_, rel, floor, lineno, nan_ok=False):
        self.pattern, self.skip, self.abs, self.rel, self.floor, self.lineno = pattern, skip, abs_, rel, floor, lineno
        self.nan_ok, self.used = nan_ok, False

    def __str__(self):
        return "skip" if self.skip else f"abs={self.abs:g} rel={self.rel:g} floor={self.floor:g}" + (" nan=ok" if self.nan_ok else "")


def parse_tolfile(path):
    rules = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            pattern, keys = words[0], words[1:]
            if keys == ["skip"]:
                rules.append(Rule(pattern, True, 0.0, 0.0, 0.0, lineno))
                continue
            vals, nan_ok = {"abs": 0.0, "rel": 0.0, "floor": 0.0}, False
            for kv in keys:
                k, eq, v = kv.partition("=")
                if kv == "nan=ok":
                    nan_ok = True
                    continue
                if not eq or k not in vals:
                    raise ValueError(f"{path}:{lineno}: expected abs=, rel=, floor=, nan=ok or skip, got {kv!r}")
                try:
                    vals[k] = float(v)
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: {k}={v!r} is not a number") from None
                if vals[k] < 0:
                    raise ValueError(f"{path}:{lineno}: {k} must be >= 0")
            if not keys:
                raise ValueError(f"{path}:{lineno}: rule {pattern!r} has no tolerances (write abs=... rel=... floor=... or skip)")
            rules.append(Rule(pattern, False, vals["abs"], vals["rel"], vals["floor"], lineno, nan_ok))
    return rules


def collect(f):
    """{name: value} for every dataset, and every attribute as 'obj@attr'."""
    out = {}

    def add_attrs(name, obj):
        for a, v in obj.attrs.items():
            out[f"{name}@{a}"] = v

    add_attrs("/", f)

    def visit(name, obj):
        full = "/" + name
        if isinstance(obj, h5py.Dataset):
            out[full] = obj
        add_attrs(full, obj)

    f.visititems(visit)
    return out


def first_rule(rules, name):
    is_attr = "@" in name
    for r in rules:
        if ("@" in r.pattern) == is_attr and fnmatch.fnmatchcase(name, r.pattern):
            return r
    return None


def as_array(v):
    return v[()] if isinstance(v, h5py.Dataset) else v


def is_string(a):
    if isinstance(a, (str, bytes)):
        return True
    a = np.asarray(a)
    return a.dtype.kind in "SUO"


def compare_one(name, ref, new, rule):
    """(ok, message) for one name."""
    r, n = as_array(ref), as_array(new)
    if is_string(r) or is_string(n):
        ok = np.array_equal(np.asarray(r, dtype=object), np.asarray(n, dtype=object))
        return ok, f"{'PASS' if ok else 'FAIL'}  {name}  (string{'' if ok else ' differs'})"
    r = np.asarray(r, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if r.shape != n.shape:
        return False, f"FAIL  {name}  shape {n.shape} in NEW, {r.shape} in REF"
    if r.size == 0:
        return True, f"PASS  {name}  (empty)"
    rnan = np.isnan(r)
    if rnan.all():
        return False, f"FAIL  {name}  NaN everywhere in REF: it measures nothing ({rule})"
    both_nan = rnan & np.isnan(n) if rule.nan_ok else np.zeros(r.shape, bool)
    d = np.where(both_nan, 0.0, np.abs(n - r))
    d = np.where(np.isnan(d), np.inf, d)  # NaN against a number, or NaN without nan=ok, fails
    ar = np.abs(r)
    above = ar >= rule.floor
    ok_el = (d <= rule.abs) | (above & (d <= rule.rel * ar))
    ok = bool(ok_el.all())
    max_abs = float(d.max())
    relv = d[above & (ar > 0)] / ar[above & (ar > 0)]
    max_rel = f"{float(relv.max()):.3e}" if relv.size else "-"
    msg = f"{'PASS' if ok else 'FAIL'}  {name}  max_abs={max_abs:.3e} max_rel={max_rel}  ({rule})"
    if not ok:
        i = np.unravel_index(int(np.argmax(np.where(ok_el, -1.0, d))), d.shape) if d.ndim else ()
        nbad = int((~ok_el).sum())
        where = f"[{','.join(map(str, i))}]" if d.ndim else ""
        msg += f"  worst failing {where} ref={r[i]!r} new={n[i]!r}; {nbad} of {d.size} fail"
    return ok, msg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="TOLFILE format: see the docstring of regression/ref/compare.py")
    ap.add_argument("ref", metavar="REF.h5")
    ap.add_argument("new", metavar="NEW.h5")
    ap.add_argument("tolfile", metavar="TOLFILE")
    ap.add_argument("--allow-unmatched", action="store_true", help="a rule that matches nothing in REF is not an error")
    args = ap.parse_args(argv)

    try:
        rules = parse_tolfile(args.tolfile)
    except (OSError, ValueError) as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    if not rules:
        print(f"compare: error: {args.tolfile} has no rules", file=sys.stderr)
        return 2

    nfail = nmiss = ncmp = 0
    try:
        with h5py.File(args.ref, "r") as fr, h5py.File(args.new, "r") as fn:
            ref, new = collect(fr), collect(fn)
            for name in sorted(ref):
                rule = first_rule(rules, name)
                if rule is None:
                    continue
                rule.used = True
                if rule.skip:
                    continue
                if name not in new:
                    print(f"FAIL  {name}  missing in NEW ({args.new})")
                    nmiss += 1
                    continue
                ok, msg = compare_one(name, ref[name], new[name], rule)
                print(msg)
                ncmp += 1
                nfail += not ok
    except OSError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2

    unused = [r for r in rules if not r.used]
    for r in unused:
        print(f"{'WARNING' if args.allow_unmatched else 'FAIL'}  {args.tolfile}:{r.lineno}: rule '{r.pattern}' matches nothing in REF")
    bad_rules = 0 if args.allow_unmatched else len(unused)
    print(f"compare: {ncmp} compared, {nfail} failed, {nmiss} missing" + (f", {bad_rules} unmatched rules" if bad_rules else ""))
    if nfail or nmiss or bad_rules:
        print("HINT: a deliberate change of results is stored with `make test REPLACE=1`; tolerances live in the TOLFILE")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
