#!/usr/bin/env bash
# golden: the `make golden` entry. Regenerates the PyTorch golden tensors
# that regression/test_golden.c checks the C model against: GPT-2's
# (regression/golden/gpt_lm.h5, gpt_scalar.h5, regression/ref/golden.py) and the LLaMA
# family's, computed by transformers itself (llama_tied.h5, llama_untied.h5,
# mistral.h5, qwen2.h5, llama_scalar.h5, llama3_rope.h5, regression/ref/llama_golden.py;
# transformers from the folder `make deps` installs it into). Run it only
# when the model definition changed on purpose, then run `make test` and
# commit the new files with the change.
#
# Usage: [PYTHON=/usr/bin/python3] [BIN=bin] [RLFUSE_CACHE=~/.cache/rlfuse] regression/ref/golden.sh [OUTDIR]
set -euo pipefail

PYTHON="${PYTHON:-/usr/bin/python3}"
BIN="${BIN:-bin}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$(dirname "$HERE")")"
OUTDIR="${1:-$ROOT/regression/golden}"
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
hfpy() { PYTHONPATH="$HF_PY${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 "$PYTHON" "$@"; }

if ! "$PYTHON" -c 'import torch, h5py, numpy' 2>/dev/null; then
  echo "golden: error: $PYTHON cannot import torch, h5py and numpy." >&2
  echo "HINT: sudo apt-get install -y --no-install-recommends python3-torch python3-h5py python3-numpy" >&2
  echo "      (Debian's modules belong to /usr/bin/python3; set PYTHON=/usr/bin/python3)" >&2
  exit 1
fi

if ! hfpy -c 'import transformers' 2>/dev/null; then
  echo "golden: error: $PYTHON cannot import transformers from $HF_PY (the LLaMA golden files need it)." >&2
  echo "HINT: make deps (installs transformers 4.40.2 there; docs/huggingface.md)" >&2
  exit 1
fi

"$PYTHON" "$HERE/golden.py" "$OUTDIR"
hfpy "$HERE/llama_golden.py" "$OUTDIR"

# Check the new files against the C model right away when it is built.
if [ -x "$BIN/test_golden" ]; then
  echo "golden: checking the C model: $BIN/test_golden $OUTDIR"
  "$BIN/test_golden" "$OUTDIR"
fi
