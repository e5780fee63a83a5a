#!/usr/bin/env bash
# golden: the `make golden` entry. Regenerates the PyTorch golden tensors
# (regression/golden/gpt_lm.h5, gpt_scalar.h5) that regression/test_golden.c
# checks the C model against. Run it only when the model definition changed on
# purpose, then run `make test` and commit the new files with the change.
#
# Usage: [PYTHON=/usr/bin/python3] [BIN=bin] tools/golden.sh [OUTDIR]
set -euo pipefail

PYTHON="${PYTHON:-/usr/bin/python3}"
BIN="${BIN:-bin}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
OUTDIR="${1:-$ROOT/regression/golden}"

if ! "$PYTHON" -c 'import torch, h5py, numpy' 2>/dev/null; then
  echo "golden: error: $PYTHON cannot import torch, h5py and numpy." >&2
  echo "HINT: sudo apt-get install -y --no-install-recommends python3-torch python3-h5py python3-numpy" >&2
  echo "      (Debian's modules belong to /usr/bin/python3; set PYTHON=/usr/bin/python3)" >&2
  exit 1
fi

"$PYTHON" "$HERE/golden.py" "$OUTDIR"

# Check the new files against the C model right away when it is built.
if [ -x "$BIN/test_golden" ]; then
  echo "golden: checking the C model: $BIN/test_golden $OUTDIR"
  "$BIN/test_golden" "$OUTDIR"
fi
