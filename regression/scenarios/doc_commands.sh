# Every shell command the documents show runs as written. Each ```sh block
# of README.md and docs/*.md (in that order, in one scratch directory that
# links the repository's files, so later blocks find what earlier ones
# wrote) runs with bash -e; a block passes when every command in it exits 0.
# Two HTML comments on the lines just above a block, invisible when the page
# is rendered, say how it runs (regression/ref/doc_blocks.py reads them):
#   <!-- run: skip REASON -->            a cluster, a GPU or hours: counted as
#                                        skipped, with the reason
#   <!-- run: append TEXT => OPTIONS --> OPTIONS appended at the end of every
#                                        command line containing TEXT (sizes
#                                        shrunk; the command itself unedited)
# A block in another language (```text for a synopsis with placeholders,
# ```python, a layout) is not a shell command and is not run.
#
# The checks in detail: every ```` ```sh ```` block of README.md and docs/*.md runs as
# written, in order, in one scratch directory linking the repository (`regression/ref/doc_blocks.py`
# extracts them): a block passes when every command exits 0. A block that needs a cluster, a
# GPU or hours, or that would rewrite the repository, carries `<!-- run: skip REASON -->`
# above it and counts as skipped with that reason; sizes are shrunk only by options appended
# to the end of matching lines (`<!-- run: append TEXT => OPTIONS -->`), never by editing the
# command. Synopses with placeholders are ```` ```text ````. It found the README's RM and PPO
# commands failing as written (32 new tokens past the quickstart models' 32 positions), a
# `toks.h5` that nothing made and `...` placeholders. About 2 minutes on 2 cores
. regression/lib.sh
root=$(pwd); d="$RLFUSE_TMP/doc_commands"; mkdir -p $d/run
for f in GNUmakefile inc src cuda input regression tools docs README.md "$BIN" build; do
  [ -e "$f" ] && ln -s "$root/$f" "$d/run/$(basename "$f")"
done
[ "$BIN" = bin ] || ln -s "$root/$BIN" "$d/run/bin" # the documents say bin/
"$PYTHON" regression/ref/doc_blocks.py --list README.md docs/*.md >$d/blocks.txt || { plan 1; not_ok "regression/ref/doc_blocks.py could not read the documents"; finish; }
plan "$(grep -c . $d/blocks.txt)"
while IFS=$'\t' read -r id reason; do
  if [ -n "$reason" ]; then skip "$id: $reason"; continue; fi
  script=$d/$(echo "$id" | tr '/# ' '___').sh
  "$PYTHON" regression/ref/doc_blocks.py --script "$id" README.md docs/*.md >"$script"
  t0=$(date +%s)
  # a block of several ranks runs them one thread each (as many ranks as
  # threads on a small machine: oversubscribed, each rank's threads wait)
  omp=$OMP_NUM_THREADS; grep -qE 'mpiexec -n [2-9]' "$script" && omp=1
  if (cd $d/run && MPIEXEC_FLAGS= OMP_NUM_THREADS=$omp timeout 600 bash -e "$script") >"$script.log" 2>&1 </dev/null; then ok "$id runs as written ($(( $(date +%s) - t0 )) s)"
  else not_ok "$id: failed as written"; grep -v '^\(step\|iter\) ' "$script.log" | tail -4 | sed 's/^/# /'; fi
done <$d/blocks.txt
finish
