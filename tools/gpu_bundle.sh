#!/usr/bin/env bash
# Carries a build of rlfuse to a GPU machine that cannot build it (a CUDA
# image without MPICH, PETSc, HDF5 or OpenBLAS, and no registry to install
# them from).
#
# Here, where rlfuse builds (nvcc found):
#   bash tools/gpu_bundle.sh DIR
# writes DIR/bundle.tar.xz: every program in BIN (rlfuse, the test and
# benchmark programs; BIN defaults to bin), MPICH's mpiexec.hydra and
# hydra_pmi_proxy, h5diff, and the shared libraries all of them load,
# except glibc's, libstdc++, the driver's, the CUDA runtime, cuBLAS and NCCL
# (large, and every CUDA image has them; the CUDA version must match, which
# the unpacking side checks). About 30 MB.
#
# There, sourced by tools/bench_gpu.sh and tools/gpu_checklist.sh when
# BUNDLE=DIR is set:
#   . tools/gpu_bundle.sh && gpu_bundle_use DIR
# unpacks it into a temporary directory (removed by gpu_bundle_cleanup),
# points BIN, MPIEXEC and PATH at its programs, which find its libraries and
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
  export BIN=$GPU_BUNDLE_TMP/bin MPIEXEC=$GPU_BUNDLE_TMP/bin/mpiexec.hydra PATH=$GPU_BUNDLE_TMP/bin:$PATH
  return 0
}
gpu_bundle_cleanup() { [ -z "${GPU_BUNDLE_TMP:-}" ] || rm -rf "$GPU_BUNDLE_TMP"; }

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0 # sourced: the functions only

set -u
cd "$(dirname "$0")/.." || exit 2
dir=${1:?usage: bash tools/gpu_bundle.sh DIR}
BIN=${BIN:-bin}
[ -x "$BIN/rlfuse" ] || { echo "gpu_bundle: error: $BIN/rlfuse not found; build first (make BIN=$BIN all)" >&2; exit 2; }
ldd "$BIN/rlfuse" | grep -q 'libcudart' || { echo "gpu_bundle: error: $BIN/rlfuse was built without CUDA (no nvcc found, or CUDA=0)" >&2; exit 2; }
if [ -e "$dir" ] && [ ! -f "$dir/bundle.tar.xz" ]; then echo "gpu_bundle: error: $dir exists and is not a bundle" >&2; exit 2; fi
mpiexec=$(readlink -f "$(command -v mpiexec.hydra || command -v mpiexec.mpich)") || { echo "gpu_bundle: error: MPICH's mpiexec not found" >&2; exit 2; }
proxy=$(command -v hydra_pmi_proxy) || { echo "gpu_bundle: error: hydra_pmi_proxy not found" >&2; exit 2; }
h5diff=$(command -v h5diff) || { echo "gpu_bundle: error: h5diff not found (hdf5-tools)" >&2; exit 2; }
stage=$(mktemp -d /tmp/rlfuse_bundle_make.XXXXXX) || exit 2
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for prog in "$BIN"/*; do [ -x "$prog" ] && [ -f "$prog" ] && cp "$prog" "$stage/bin/"; done
cp "$mpiexec" "$stage/bin/mpiexec.hydra" && cp "$proxy" "$h5diff" "$stage/bin/" || exit 2
strip -s "$stage"/bin/* 2>/dev/null # symbols: a third of the size; the tests' messages do not need them
(cd "$stage/bin" && ldd ./*) | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
  case ${lib##*/} in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libresolv.so* | libutil.so* | libanl.so* | libnss_* | ld-linux* | libgcc_s.so* | libstdc++.so* | libcuda.so* | libcudart.so* | libcublas*.so* | libnccl.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
rm -rf "$dir" && mkdir -p "$dir" || exit 2
tar -C "$stage" -cJf "$dir/bundle.tar.xz" bin lib || exit 2
echo "# gpu_bundle: $dir/bundle.tar.xz: $(du -h "$dir/bundle.tar.xz" | cut -f1) ($(ls "$stage/bin" | wc -l) programs, $(ls "$stage/lib" | wc -l) libraries)"
