# Helpers shared by the scenario scripts (sourced, not run).
# Each check prints "ok - what" or "not ok - what: why".
fails=0
ok()     { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; fails=$((fails + 1)); }
check()  { local what=$1; shift; if "$@"; then ok "$what"; else not_ok "$what"; fi; }
rlfuse() { "$MPIEXEC" $MPIEXEC_FLAGS -n 1 "$BIN/rlfuse" "$@"; }
finish() { exit $((fails > 0)); }

# expect_error WHAT PATTERN ARGS...: rlfuse ARGS must exit non-zero with
# exactly one line "rlfuse: error: ...PATTERN" and leave $keep (a directory of
# an earlier run, if set) byte-identical with no new files.
expect_error() {
  local what=$1 pat=$2; shift 2
  local err rc before=""; err=$(mktemp "$RLFUSE_TMP/err.XXXXXX")
  [ -n "${keep:-}" ] && before=$(cd "$keep" && ls && md5sum *)
  rlfuse "$@" >/dev/null 2>$err; rc=$?
  local lines; lines=$(grep -c . $err)
  if [ $rc -eq 0 ]; then not_ok "$what: exit status 0"; return; fi
  if [ "$lines" -ne 1 ] || ! grep -q -- "^rlfuse: error: .*$pat" $err; then not_ok "$what: expected one line matching '$pat', got: $(head -3 $err | cut -c1-300)"; return; fi
  if [ -n "${keep:-}" ] && [ "$(cd "$keep" && ls && md5sum *)" != "$before" ]; then not_ok "$what: earlier output changed"; return; fi
  ok "$what ($(cut -c1-110 $err))"
}
