# `make run` on a machine where the dependencies are not installed yet: the
# make that the user starts finds no mpicc, mpiexec, HDF5, BLAS or PETSc when
# it reads the GNUmakefile; tools/deps.sh then installs them. Here a stub
# (DEPS) stands in for tools/deps.sh: the outer make runs on a PATH, a
# pkg-config directory and a PETSc prefix that are empty, and the stub's
# "install" links the real MPICH, .pc files and PETSc into them. The run must
# then really happen, and a deck that fails must fail `make run`.
#
# The checks in detail: `make run` on a simulated fresh machine: the outer make finds no
# MPICH, HDF5, OpenBLAS or PETSc (a PATH and pkg-config directory without them, a stub `DEPS`
# that links the real ones in when asked to install): the deck still runs, no empty command is
# run, and a failing deck makes `make run` fail with the deck's error
. regression/lib.sh
plan 8
d="$RLFUSE_TMP/make_fresh"; mkdir -p "$d/sys" "$d/mpi" "$d/pc"
# a make started from inside `make test` must not inherit its flags or jobserver
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES

# every program on PATH except MPICH's, so the outer make sees no MPI
IFS=: read -ra dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
  for f in "$dir"/*; do
    b=$(basename "$f")
    [ -x "$f" ] && [ ! -e "$d/sys/$b" ] || continue
    case "$b" in mpi* | hydra* | *.mpich) echo "$f" >>"$d/mpich.list" ;; *) ln -s "$f" "$d/sys/$b" ;; esac
  done
done
real_petsc=$(tools/deps.sh --petsc-dir)
real_pc=$(pkg-config --variable pc_path pkg-config)

cat >"$d/deps.sh" <<EOF
#!/usr/bin/env bash
# stub of tools/deps.sh: nothing is present until it is run without arguments
case "\${1:-}" in
  --petsc-dir) echo "$d/petsc" ;;
  --check) [ -e "$d/petsc" ] ;;
  "") echo "[stub deps] installing"
      while read -r f; do ln -sf "\$f" "$d/mpi/"; done <"$d/mpich.list"
      for p in \$(echo "$real_pc" | tr : ' '); do for f in "\$p"/*.pc; do [ -e "\$f" ] && ln -sf "\$f" "$d/pc/"; done; done
      ln -sfn "$real_petsc" "$d/petsc" ;;
esac
EOF
chmod +x "$d/deps.sh"
uninstall() { rm -f "$d/mpi/"* "$d/pc/"* "$d/petsc"; }
# stdin is an empty pipe that stays open, as a terminal would: nothing may wait on it
mkfifo "$d/stdin"; exec 3<>"$d/stdin"
# binaries of its own: they are linked against the stub's PETSc prefix
# (gone after the suite), which must not reach the suite's $BIN
fresh_make() { timeout 300 env PATH="$d/mpi:$d/sys" PKG_CONFIG_LIBDIR="$d/pc" PKG_CONFIG_PATH= make --no-print-directory DEPS="$d/deps.sh" BIN="$d/bin" "$@" <&3; }

check "the outer make sees no mpiexec, mpicc or HDF5" bash -c "! env PATH='$d/mpi:$d/sys' bash -c 'command -v mpiexec || command -v mpicc' && ! PKG_CONFIG_LIBDIR='$d/pc' pkg-config --exists hdf5-mpich"

fresh_make run DECK=regression/decks/tiny.deck ARGS="-output_dir $d/ok" >"$d/ok.log" 2>&1
rc=$?
check "make run on a fresh machine exits 0 (status $rc)" test "$rc" -eq 0
check "make run on a fresh machine installed the dependencies first" grep -q "stub deps. installing" "$d/ok.log"
check "make run on a fresh machine ran the deck" test -f "$d/ok/final.h5"
check "make did not hang waiting on stdin (timeout 300 s)" test "$rc" -ne 124
check "nothing was run as an empty command" bash -c "! grep -E 'command not found|invalid option|Error [0-9]+ \\(ignored\\)' '$d/ok.log'"

uninstall
fresh_make run DECK=regression/decks/tiny.deck ARGS="-output_dir $d/bad -sft_steps -1" >"$d/bad.log" 2>&1
rc=$?
check "make run exits non-zero when the deck fails (status $rc)" test "$rc" -ne 0
check "the deck's own error is shown" grep -q "rlfuse: error: .*-sft_steps" "$d/bad.log"
exec 3>&-
finish
