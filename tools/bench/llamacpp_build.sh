#!/usr/bin/env bash
# Builds llama.cpp's CPU benchmark tools (llama-bench, llama-batched-bench,
# llama-quantize) for tools/bench/bench_llamacpp.sh, idempotently. Benchmarks only:
# nothing in rlfuse's build, tests or training path uses it.
#
# The source is the llama.cpp that the PyPI sdist of llama-cpp-python vendors
# under vendor/llama.cpp (PyPI is a registry this project reaches; GitHub is
# not). The sdist is downloaded once into the project's cache; after that the
# build needs no network. CPU only, Release, GGML_NATIVE=ON (so the binaries
# are for this CPU: a different CPU model triggers a rebuild), static, no CUDA,
# no curl/OpenSSL.
#
# Usage: tools/bench/llamacpp_build.sh           build what is missing, print where
#        tools/bench/llamacpp_build.sh --check   exit 0 if built for this CPU, 1 if not
#        tools/bench/llamacpp_build.sh --bin-dir print the folder the binaries go to
#
# Layout under $CACHE/llama.cpp (CACHE as in tools/deps.sh):
#   dl/llama_cpp_python-$V.tar.gz   the sdist
#   src/llama_cpp_python-$V/        unpacked; llama.cpp is vendor/llama.cpp
#   build/                          cmake build tree; logs/ its logs
#   bin/                            the three binaries
#   VERSION                         key=value lines: what was built, from what
set -euo pipefail

# Pinned: 0.3.36 vendors llama.cpp 0c1e57098bba (llama 0.5.0-dev, ggml 0.25.3);
# builds with Debian 12's cmake 3.25 and g++ 12.
LCP_PY_VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
TARGETS="llama-bench llama-batched-bench llama-quantize"
CACHE="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}"
PREFIX="$CACHE/llama.cpp"
DL="$PREFIX/dl"
SDIST="$DL/llama_cpp_python-$LCP_PY_VERSION.tar.gz"
SRC="$PREFIX/src/llama_cpp_python-$LCP_PY_VERSION"
LSRC="$SRC/vendor/llama.cpp"
BUILD="$PREFIX/build"
LOGS="$PREFIX/logs"
BIN="$PREFIX/bin"
STAMP="$PREFIX/VERSION"
JOBS="${LLAMACPP_JOBS:-2}"

say() { echo "[llamacpp] $*"; }
die() { echo "[llamacpp] error: $*" >&2; exit 1; }
# die after showing the end of a log; the error line stays the last line
die_log() { [ -f "$1" ] && tail -n 25 "$1" | sed 's/^/  | /' >&2; die "$2 (full log: $1)"; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
trap 'die "unexpected failure at line $LINENO: $BASH_COMMAND"' ERR

cpu_model() { sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1; }
# what -march=native depends on: the model name alone can hide different flags under KVM
cpu_sig() { { cpu_model; grep -m1 '^flags' /proc/cpuinfo; } | cksum | cut -d' ' -f1; }

built_ok() {
  local t
  for t in $TARGETS; do [ -x "$BIN/$t" ] || return 1; done
  [ -f "$STAMP" ] || return 1
  grep -qx "llama_cpp_python=$LCP_PY_VERSION" "$STAMP" || return 1
  grep -qx "cpu_sig=$(cpu_sig)" "$STAMP"
}

report() {
  say "llama.cpp $(sed -n 's/^llama_cpp_commit=//p' "$STAMP" | cut -c1-12)" \
      "(llama-cpp-python $LCP_PY_VERSION) binaries in $BIN:"
  local t; for t in $TARGETS; do echo "  $BIN/$t"; done
  say "version record: $STAMP"
}

case "${1:-}" in
  --check) built_ok && exit 0; exit 1 ;;
  --bin-dir) echo "$BIN"; exit 0 ;;
  "") ;;
  *) echo "usage: tools/bench/llamacpp_build.sh [--check|--bin-dir]" >&2; exit 2 ;;
esac

if built_ok; then report; exit 0; fi

# --- tools: cmake, a C++ compiler, make (ninja used when present), pip -------
need=""
command -v cmake >/dev/null || need="$need cmake"
command -v g++ >/dev/null || need="$need g++"
command -v make >/dev/null || command -v ninja >/dev/null || need="$need make"
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need="$need python3-pip"
if [ -n "$need" ]; then
  say "installing:$need"
  export DEBIAN_FRONTEND=noninteractive
  sudo_ apt-get update -qq || die "apt-get update failed"
  # shellcheck disable=SC2086
  sudo_ apt-get install -y -qq --no-install-recommends $need || die "apt-get install$need failed"
fi

mkdir -p "$DL" "$PREFIX/src" "$LOGS" "$BIN"

# --- source: the llama-cpp-python sdist, vendored llama.cpp -----------------
if [ ! -s "$SDIST" ]; then
  say "downloading the llama-cpp-python $LCP_PY_VERSION sdist into $DL" \
      "(pip builds its build backend from source to read its metadata: minutes)"
  rm -rf "$DL/tmp"; mkdir -p "$DL/tmp"
  /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
    -d "$DL/tmp" "llama-cpp-python==$LCP_PY_VERSION" >"$LOGS/download.log" 2>&1 ||
    die_log "$LOGS/download.log" "pip download of llama-cpp-python==$LCP_PY_VERSION failed"
  f=$(find "$DL/tmp" -maxdepth 1 -name 'llama_cpp_python-*.tar.gz' | head -1)
  [ -n "$f" ] || die "pip download gave no llama_cpp_python-$LCP_PY_VERSION.tar.gz in $DL/tmp"
  mv "$f" "$SDIST"; rm -rf "$DL/tmp"
fi

if [ ! -f "$LSRC/CMakeLists.txt" ]; then
  say "unpacking $SDIST"
  rm -rf "$SRC"
  tar -xzf "$SDIST" --no-same-owner -C "$PREFIX/src" || die "could not unpack $SDIST"
  [ -f "$LSRC/CMakeLists.txt" ] || die "$SDIST has no vendor/llama.cpp/CMakeLists.txt"
fi

# --- what is being built ----------------------------------------------------
# The sdist carries the submodule's git data (shallow): the commit is exact.
commit=""
if command -v git >/dev/null; then
  commit=$(git -c safe.directory='*' -C "$LSRC" rev-parse HEAD 2>/dev/null || true)
  cdate=$(git -c safe.directory='*' -C "$LSRC" log -1 --format=%cI 2>/dev/null || true)
fi
if [ -z "$commit" ] && [ -f "$SRC/.git/modules/vendor/llama.cpp/HEAD" ]; then
  commit=$(head -1 "$SRC/.git/modules/vendor/llama.cpp/HEAD")
fi
[ -n "$commit" ] || commit=unknown
cmv() { sed -n "s/^set($2_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p" "$1" | paste -sd.; }
llama_ver=$(cmv "$LSRC/CMakeLists.txt" LLAMA)
ggml_ver=$(cmv "$LSRC/ggml/CMakeLists.txt" GGML)

# --- configure and build only the three targets -----------------------------
gen="Unix Makefiles"; command -v ninja >/dev/null && gen=Ninja
if [ ! -f "$BUILD/CMakeCache.txt" ] || ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$LSRC\$" "$BUILD/CMakeCache.txt" ||
   ! grep -q "^RLFUSE_CPU_SIG:STRING=$(cpu_sig)\$" "$BUILD/CMakeCache.txt"; then
  say "configuring llama.cpp ${commit:0:12} (CPU only, Release, GGML_NATIVE=ON) in $BUILD"
  rm -rf "$BUILD"
  cmake -S "$LSRC" -B "$BUILD" -G "$gen" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DGGML_CPU=ON \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
    -DGGML_OPENCL=OFF -DGGML_RPC=OFF -DGGML_BLAS=OFF -DGGML_BACKEND_DL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DRLFUSE_CPU_SIG:STRING="$(cpu_sig)" \
    >"$LOGS/configure.log" 2>&1 || die_log "$LOGS/configure.log" "cmake configure of $LSRC failed"
fi

say "building $TARGETS with -j$JOBS (15 minutes on 2 busy cores; log: $LOGS/build.log)"
t0=$(date +%s)
# shellcheck disable=SC2086
cmake --build "$BUILD" --config Release -j "$JOBS" --target $TARGETS >"$LOGS/build.log" 2>&1 ||
  die_log "$LOGS/build.log" "building $TARGETS failed"
secs=$(( $(date +%s) - t0 ))

for t in $TARGETS; do
  [ -x "$BUILD/bin/$t" ] || die "build finished but $BUILD/bin/$t is missing"
  install -m 755 "$BUILD/bin/$t" "$BIN/$t.new" && mv -f "$BIN/$t.new" "$BIN/$t"
done
rc=0; "$BIN/llama-quantize" --help >/dev/null 2>&1 || rc=$?
[ "$rc" -le 1 ] || die "$BIN/llama-quantize does not run on this machine (exit $rc)"

# what the binaries say of themselves, e.g. "0.5.0-dev (build 1, commit 0c1e570)"
binver=$("$BIN/llama-batched-bench" --version 2>&1 | sed -n 's/^version: //p' | head -1)
case "$binver" in [0-9]*-dev*) llama_ver="$llama_ver-dev" ;; esac
{
  echo "llama_cpp_python=$LCP_PY_VERSION"
  echo "llama_cpp_commit=$commit"
  echo "llama_cpp_commit_date=${cdate:-unknown}"
  echo "llama_version=$llama_ver"
  echo "binary_version=$binver"
  echo "ggml_version=$ggml_ver"
  echo "compiler=$(g++ -dumpfullversion 2>/dev/null || echo unknown) ($(command -v g++))"
  echo "cmake=$(cmake --version | head -1 | awk '{print $3}')"
  echo "flags=Release GGML_NATIVE=ON BUILD_SHARED_LIBS=OFF CPU-only LLAMA_OPENSSL=OFF"
  echo "cpu=$(cpu_model)"
  echo "cpu_sig=$(cpu_sig)"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build_seconds=$secs"
  echo "jobs=$JOBS"
} >"$STAMP.new" && mv -f "$STAMP.new" "$STAMP"

say "built in ${secs}s"
report
