#!/usr/bin/env bash
# Carries a build of rlfuse to a GPU machine that cannot build it (a CUDA
# image without MPICH, PETSc, HDF5 or OpenBLAS, and no registry to install
# them from).
#
# Here, where rlfuse builds (nvcc found):
#   bash tools/gpu_bundle.sh DIR
# writes DIR/bundle.tar.xz: every program in BIN (rlfuse, the test and
# benchmark programs; BIN defaults to bin), MPICH's mpiexec.hydra and
# hydra_pmi_proxy, h5diff, h5dump (the targets part reads run.h5 with it),
# and the shared libraries all of them load,
# except glibc's, libstdc++, the driver's, the CUDA runtime, cuBLAS and NCCL
# (large, and every CUDA image has them; the CUDA version must match, which
# the unpacking side checks). About 30 MB. Beside it DIR/targets/, what the
# checklist's targets part (tools/bench/gpu_targets.sh) needs and the GPU machine
# cannot fetch: TRL 1.16.0's wheels and its pure-Python dependencies
# (wheels/, from a cache here, $RLFUSE_CACHE/gpu_wheels, downloaded into it
# once with pip), SmolLM2's tokenizer.json (tokenizer/, made by
# tools/bench/gpu_baselines/make_tokenizer.py from the GGUF that `make deps`
# installs) and the GRPO benchmark's prompt files (prompts_SHAPE.h5). The
# whole of DIR must stay under 60 MB (checked; BUNDLE_MAX_MB changes the
# bound, for a test that packs fast with XZ_OPT=-0 and so larger).
#
# There, sourced by tools/bench/bench_gpu.sh and tools/gpu_checklist.sh when
# BUNDLE=DIR is set:
#   . tools/gpu_bundle.sh && gpu_bundle_use DIR
# unpacks it into a temporary directory (removed by gpu_bundle_cleanup),
# points BIN, MPIEXEC and PATH at its programs (RLFUSE_REVISION: the
# revision they were built from, which the logs print), which find its libraries and
# the image's CUDA libraries (the toolkit's lib64 and the nvidia-* Python
# packages' lib folders), and fails with the names of any library a program
# cannot load.

# gpu_bundle_use DIR: the environment above; returns non-zero on a failure.
# The programs run through small wrappers that set LD_LIBRARY_PATH for them
# alone (MPICH passes it on to the ranks), so that Python and the image's own
# tools never load the bundle's libraries.
gpu_bundle_use() {
  local dir=$1 cudalibs prog missing libpath
  [ -f "$dir/bundle.tar.xz" ] || { echo "gpu_bundle: error: $dir/bundle.tar.xz not found (make it with: bash tools/gpu_bundle.sh $dir)" >&2; return 2; }
  GPU_BUNDLE_TMP=$(mktemp -d /tmp/rlfuse_bundle.XXXXXX) || return 2
  tar -C "$GPU_BUNDLE_TMP" -xJf "$dir/bundle.tar.xz" && mv "$GPU_BUNDLE_TMP/bin" "$GPU_BUNDLE_TMP/real" && mkdir "$GPU_BUNDLE_TMP/bin" || return 2
  cudalibs=$(for py in ${PYTHON:-} python3 /usr/bin/python3; do
    "$py" -c 'import glob, sys; print(":".join(d for p in sys.path for d in sorted(glob.glob(p + "/nvidia/*/lib"))))' 2>/dev/null && break
  done)
  libpath=$GPU_BUNDLE_TMP/lib${CUDA_HOME:+:$CUDA_HOME/lib64}:/usr/local/cuda/lib64${cudalibs:+:$cudalibs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for prog in "$GPU_BUNDLE_TMP"/real/*; do
    missing=$(LD_LIBRARY_PATH=$libpath ldd "$prog" 2>&1 | grep 'not found' | awk '{ print $1 }' | sort -u | tr '\n' ' ')
    [ -z "$missing" ] || { echo "gpu_bundle: error: ${prog##*/} cannot load: $missing(LD_LIBRARY_PATH=$libpath)" >&2; return 2; }
    printf '#!/bin/sh\nexport LD_LIBRARY_PATH=%s\nexec %s "$@"\n' "$libpath" "$prog" >"$GPU_BUNDLE_TMP/bin/${prog##*/}"
    chmod +x "$GPU_BUNDLE_TMP/bin/${prog##*/}"
  done
  RLFUSE_REVISION=$(cat "$GPU_BUNDLE_TMP/REVISION" 2>/dev/null || echo unknown)
  export BIN=$GPU_BUNDLE_TMP/bin MPIEXEC=$GPU_BUNDLE_TMP/bin/mpiexec.hydra PATH=$GPU_BUNDLE_TMP/bin:$PATH RLFUSE_REVISION
  return 0
}
gpu_bundle_cleanup() { [ -z "${GPU_BUNDLE_TMP:-}" ] || rm -rf "$GPU_BUNDLE_TMP"; }

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0 # sourced: the functions only

set -u
cd "$(dirname "$0")/.." || exit 2
dir=${1:?usage: bash tools/gpu_bundle.sh DIR}
BIN=${BIN:-bin}
for prog in rlfuse bench_decode bench_model bench_attention; do [ -x "$BIN/$prog" ] || { echo "gpu_bundle: error: $BIN/$prog not found; build first (make BIN=$BIN all bench-build)" >&2; exit 2; }; done
ldd "$BIN/rlfuse" | grep -q 'libcudart' || { echo "gpu_bundle: error: $BIN/rlfuse was built without CUDA (no nvcc found, or CUDA=0)" >&2; exit 2; }
if [ -e "$dir" ] && [ ! -f "$dir/bundle.tar.xz" ]; then echo "gpu_bundle: error: $dir exists and is not a bundle" >&2; exit 2; fi
mpiexec=$(readlink -f "$(command -v mpiexec.hydra || command -v mpiexec.mpich)") || { echo "gpu_bundle: error: MPICH's mpiexec not found" >&2; exit 2; }
proxy=$(command -v hydra_pmi_proxy) || { echo "gpu_bundle: error: hydra_pmi_proxy not found" >&2; exit 2; }
h5diff=$(command -v h5diff) || { echo "gpu_bundle: error: h5diff not found (hdf5-tools)" >&2; exit 2; }
h5dump=$(command -v h5dump) || { echo "gpu_bundle: error: h5dump not found (hdf5-tools)" >&2; exit 2; }
stage=$(mktemp -d /tmp/rlfuse_bundle_make.XXXXXX) || exit 2
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for prog in "$BIN"/*; do [ -x "$prog" ] && [ -f "$prog" ] && cp "$prog" "$stage/bin/"; done
cp "$mpiexec" "$stage/bin/mpiexec.hydra" && cp "$proxy" "$h5diff" "$h5dump" "$stage/bin/" || exit 2
strip -s "$stage"/bin/* 2>/dev/null # symbols: a third of the size; the tests' messages do not need them
(cd "$stage/bin" && ldd ./*) | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
  case ${lib##*/} in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | libutil.so* | libanl.so* | libnss_* | ld-linux* | libgcc_s.so* | libstdc++.so* | libcuda.so* | libcudart.so* | libcublas*.so* | libnccl.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
rm -rf "$dir" && mkdir -p "$dir" || exit 2
# the revision the programs were built from (the machine that runs them may hold an older checkout)
echo "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src cuda inc tools 2>/dev/null || echo -dirty)" >"$stage/REVISION"
tar -C "$stage" -cJf "$dir/bundle.tar.xz" bin lib REVISION || exit 2
echo "# gpu_bundle: $dir/bundle.tar.xz: $(du -h "$dir/bundle.tar.xz" | cut -f1) ($(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | wc -l) libraries)"

# the targets part's data; the multiprocess wheel is per Python version (3.10 to 3.13 carried)
cache=${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}
wheels=$cache/gpu_wheels
pins="trl==1.16.0 datasets==5.2.0 dill==0.4.1"
if [ "$(ls "$wheels"/trl-1.16.0-*.whl "$wheels"/datasets-5.2.0-*.whl "$wheels"/dill-0.4.1-*.whl "$wheels"/multiprocess-0.70.19-py31[0-3]-*.whl 2>/dev/null | wc -l)" != 7 ]; then
  mkdir -p "$wheels"
  # shellcheck disable=SC2086
  /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps -d "$wheels" $pins || { echo "gpu_bundle: error: pip download $pins into $wheels failed" >&2; exit 2; }
  for v in 3.10 3.11 3.12 3.13; do
    /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version $v -d "$wheels" multiprocess==0.70.19 ||
      { echo "gpu_bundle: error: pip download multiprocess==0.70.19 (Python $v) into $wheels failed" >&2; exit 2; }
  done
fi
mkdir -p "$dir/targets/wheels" && cp "$wheels"/*.whl "$dir/targets/wheels/" || exit 2
gguf=$(/usr/bin/python3 tools/gguf_import.py --smollm2) || { echo "gpu_bundle: error: SmolLM2's GGUF not found (make deps installs it)" >&2; exit 2; }
PYTHONPATH=$cache/python /usr/bin/python3 tools/bench/gpu_baselines/make_tokenizer.py "$gguf" "$dir/targets/tokenizer" >/dev/null ||
  { echo "gpu_bundle: error: tools/bench/gpu_baselines/make_tokenizer.py $gguf failed (needs gguf and tokenizers: make deps)" >&2; exit 2; }
/usr/bin/python3 tools/bench/gpu_baselines/bench_prompts.py "$dir/targets/prompts_smollm2.h5" 49152 >/dev/null &&
  /usr/bin/python3 tools/bench/gpu_baselines/bench_prompts.py "$dir/targets/prompts_qwen05.h5" 151936 >/dev/null || exit 2
mb=$(du -sm "$dir" | cut -f1) max=${BUNDLE_MAX_MB:-60}
[ "$mb" -lt "$max" ] || { echo "gpu_bundle: error: $dir holds $mb MB, over the $max MB a device call carries" >&2; exit 2; }
echo "# gpu_bundle: $dir/targets: $(du -sh "$dir/targets" | cut -f1) (TRL's wheels, tokenizer.json, prompts); $dir in all: $mb MB"
