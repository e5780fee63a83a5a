#!/usr/bin/env bash
# One deck regression: regression/cases/NAME/ holds
#   deck          a PETSc options file (the run to check)
#   tolerances    rules for regression/ref/compare.py, one per quantity
#   reference.h5  the stored results: every run.h5 and final.h5 of the run,
#                 merged (a pipeline's stages under /sft, /rm, /ppo)
#   ranks         optional: the number of MPI ranks (default 1)
#   inputs        optional: lines "NAME DECK"; each DECK is run first, on one
#                 rank, into NAME/, so the deck can start from NAME/final.h5
#                 (the run shares the directory holding these, see below)
# Runs the deck and compares. With REPLACE=1 the stored results are
# regenerated instead; they record the rlfuse version and git revision that
# made them (/code). The deck and the input decks run in one working
# directory, $RLFUSE_TMP/case-inputs, so paths like sft/final.h5 in a deck
# name the inputs; an input made once is reused by every later case that
# lists the same NAME and DECK in this suite run. Decks run there must not
# include other decks by a relative path.
set -u
echo "1..1"
case_dir=$(cd "${1%/}" && pwd); name=$(basename "$case_dir")
root=$(pwd); work="$RLFUSE_TMP/case-inputs"; out="$RLFUSE_TMP/case-$name"
rm -rf "$out"; mkdir -p "$work"
fail() { echo "not ok - $name: $1"; [ -f "${2:-}" ] && tail -5 "$2" | sed 's/^/# /'; exit 1; }
ranks=$(cat "$case_dir/ranks" 2>/dev/null || echo 1)
[[ $ranks =~ ^[1-9][0-9]*$ ]] || fail "$case_dir/ranks: '$ranks' is not a rank count"
# several ranks on few cores: one thread each (results do not depend on it)
threads=$OMP_NUM_THREADS; [ "$ranks" -gt 1 ] && threads=1

if [ -f "$case_dir/inputs" ]; then
  while read -r iname ideck rest; do
    case "$iname" in ''|'#'*) continue ;; esac
    [ -n "$ideck" ] && [ -z "$rest" ] && [ -f "$root/$ideck" ] || fail "$case_dir/inputs: expected 'NAME DECK' with an existing DECK, got '$iname $ideck $rest'"
    stamp="$work/$iname.deck"
    if [ -f "$work/$iname/final.h5" ] && cmp -s "$stamp" "$root/$ideck"; then continue; fi
    [ ! -e "$stamp" ] || cmp -s "$stamp" "$root/$ideck" || fail "input $iname was made by another deck in this suite run (names of inputs must be unique)"
    rm -rf "$work/$iname"
    # </dev/null: mpiexec forwards stdin, which would eat the rest of this list
    (cd "$work" && "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$root/$BIN/rlfuse" -options_file "$root/$ideck" -output_dir "$work/$iname") </dev/null >"$work/$iname.log" 2>&1 ||
      fail "making input $iname with $ideck failed" "$work/$iname.log"
    cp "$root/$ideck" "$stamp"
  done <"$case_dir/inputs"
fi

(cd "$work" && "$MPIEXEC" $MPIEXEC_FLAGS -n "$ranks" env OMP_NUM_THREADS=$threads "$root/$BIN/rlfuse" -options_file "$case_dir/deck" -output_dir "$out") >"$out.log" 2>&1 ||
  fail "rlfuse failed" "$out.log"
# Merge every run record and final checkpoint into one file to compare: the
# top directory's at the root, a pipeline stage's under /<stage>; a reference
# that a checkpoint records by its input file (/reference_source) is that
# file's weights.
"$PYTHON" - "$out" "$out/merged.h5" <<'PY' || fail "cannot merge the outputs of $out"
import os, sys, h5py
out, merged = sys.argv[1:3]
with h5py.File(merged, "w") as m:
    for sub in [""] + sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))):
        for fname in ("run.h5", "final.h5"):
            src = os.path.join(out, sub, fname)
            if not os.path.exists(src):
                continue
            dst = m.require_group(sub) if sub else m
            with h5py.File(src, "r") as f:
                for k in f:
                    if k not in dst:
                        f.copy(k, dst)
                if "reference_source" in f and "reference" not in dst:
                    # a PPO checkpoint names the reference's unchanged input file instead of
                    # copying it: that file's weights are compared as /reference
                    s = f["reference_source"].attrs
                    with h5py.File(s["abspath"], "r") as r:
                        src, g = r[s["role"]], dst.create_group("reference")
                        for a, v in src.attrs.items():
                            g.attrs[a] = v
                        r.copy(src["params"], g, "params")
                for a, v in f.attrs.items():
                    dst.attrs[a] = v
    assert len(m), "no run.h5 or final.h5 in " + out
PY
if [ "${REPLACE:-}" = 1 ]; then
  cp "$out/merged.h5" "$case_dir/reference.h5"
  echo "ok - $name: stored results regenerated ($(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
  exit 0
fi
[ -f "$case_dir/reference.h5" ] || fail "no stored results; run make test REPLACE=1"
if "$PYTHON" regression/ref/compare.py "$case_dir/reference.h5" "$out/merged.h5" "$case_dir/tolerances" >"$out.cmp" 2>&1; then
  echo "ok - $name: matches stored results within tolerances ($(grep -c '^PASS' "$out.cmp") quantities)"
else
  echo "not ok - $name: differs from stored results"; grep -v '^PASS' "$out.cmp" | head -20 | sed 's/^/# /'
  exit 1
fi
