#!/usr/bin/env bash
# One deck regression: regression/cases/NAME/ holds `deck` (a PETSc options
# file), `tolerances` (rules for tools/compare.py) and `reference.h5` (stored
# results: the run record and the final checkpoint, merged). Runs the deck and
# compares. With REPLACE=1 the stored results are regenerated; they record the
# rlfuse version and git revision that made them (/code in the run record).
set -u
echo "1..1"
case_dir=${1%/}; name=$(basename "$case_dir")
out="$RLFUSE_TMP/case-$name"; rm -rf "$out"
"$MPIEXEC" $MPIEXEC_FLAGS -n "$(cat "$case_dir/ranks" 2>/dev/null || echo 1)" "$BIN/rlfuse" -options_file "$case_dir/deck" -output_dir "$out" >"$out.log" 2>&1 ||
  { echo "not ok - $name: rlfuse failed"; tail -5 "$out.log"; exit 1; }
# Merge the run record and the final checkpoint into one file to compare.
"$PYTHON" - "$out/run.h5" "$out/final.h5" "$out/merged.h5" <<'PY' || { echo "not ok - $name: cannot merge outputs"; exit 1; }
import sys, h5py
run, ckpt, merged = sys.argv[1:4]
with h5py.File(merged, "w") as m:
    for src in (run, ckpt):
        with h5py.File(src, "r") as f:
            for k in f:
                if k not in m:
                    f.copy(k, m)
            for a, v in f.attrs.items():
                m.attrs[a] = v
PY
if [ "${REPLACE:-}" = 1 ]; then
  cp "$out/merged.h5" "$case_dir/reference.h5"
  echo "ok - $name: stored results regenerated ($(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
  exit 0
fi
[ -f "$case_dir/reference.h5" ] || { echo "not ok - $name: no stored results; run make test REPLACE=1"; exit 1; }
if "$PYTHON" tools/compare.py "$case_dir/reference.h5" "$out/merged.h5" "$case_dir/tolerances" >"$out.cmp" 2>&1; then
  echo "ok - $name: matches stored results within tolerances ($(grep -c '^PASS' "$out.cmp") quantities)"
else
  echo "not ok - $name: differs from stored results"; grep -v '^PASS' "$out.cmp" | head -20 | sed 's/^/# /'
  exit 1
fi
