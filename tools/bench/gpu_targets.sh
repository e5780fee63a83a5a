#!/usr/bin/env bash
# The GPU targets of decode and of a GRPO step, each beside its baseline in
# the same call (docs/benchmarks.md, "GPU checklist"; tools/gpu_checklist.sh's
# part `targets`), on one NVIDIA GPU:
#   decode  bin/bench_decode at the shapes smollm2, qwen05, qwen15
#           (tools/bench/bench_sizes.h), batch 1 (and 64 at qwen05), fp32 and bf16;
#           then transformers' generate, static cache compiled by
#           torch.compile and dynamic cache (tools/bench/gpu_baselines/torch_baseline.py)
#   gap     bench_decode -logprob_gap true in fp32 and bf16, where built
#   grpo    one GRPO step of input/bench/grpo.deck at smollm2 and qwen05
#           (random init: input/bench/init_SHAPE.deck), then TRL's
#           GRPOTrainer in the same setting (tools/bench/gpu_baselines/trl_grpo.py)
#   train   bin/bench_attention's tiled training attention, its time alone
#           (the T x T pair is no longer on cuda: no baseline; bf16, the
#           heads of smollm2, qwen05 and qwen15 at B 8 x T 2048, qwen05 at
#           B 1 x T 8192); bin/bench_model's bf16
#           training step at B 8 x T 2048 (GPT-2 124M at T 1024, its
#           position bound) and at B 1 x T 8192 at qwen05, with the device
#           memory it took beside SFT's memory check's estimate, then
#           PyTorch's with SDPA attention, bf16 autocast and fused AdamW
#           on the same shapes (tools/bench/gpu_baselines/torch_baseline.py train;
#           tools/bench/bench_torch.py --sdpa for 124M): the GPU training issue's
#           targets; not in the default parts (TARGET_PARTS=train: a call
#           of its own, its budget the same TARGET_BUDGET)
# and at the end one line per target:
#   summary target=NAME ... measured=X baseline=Y ratio=R goal=>=G|<G PASS|FAIL|NA
#
#   bash tools/bench/gpu_targets.sh               the runs (without a GPU: one line, exit 0)
#   bash tools/bench/gpu_targets.sh summary LOG   only the summary lines, from a run's log
#
# Variables: BIN (bin), BUNDLE (as tools/bench/bench_gpu.sh), TARGET_DATA (the
# targets/ folder of a bundle made by tools/gpu_bundle.sh: TRL's wheels,
# tokenizer/tokenizer.json, prompts_SHAPE.h5; default $BUNDLE/targets),
# OUT_DIR (targets.log and the runs; default a new /tmp/gpu_targets.*),
# TARGET_PARTS (decode gap grpo), TARGET_SHAPES (smollm2 qwen05 qwen15; grpo
# runs smollm2 and qwen05 of them), BASELINE_SHAPES (the shapes whose
# baselines run, default TARGET_SHAPES: a baseline measured in an earlier
# call of the same GPU can be left out when time is short), TARGET_BUDGET (seconds for the whole part,
# 300: a step that would start with less than 30 s left is skipped, its
# targets NA; every step's timeout is cut to what is left), HBM_GBS
# (default the datasheet's for the GPU's name, as bench_gpu.sh). Exits 1
# if a step failed or was skipped, 0 otherwise (a FAIL is a measurement).
set -u
cd "$(dirname "$0")/../.." || exit 2

# summarize LOG: the summary lines from the result lines of a run's log
summarize() {
  awk '
    function f(line, k,   m) { return match(line, " " k "=[^ ]*") ? substr(line, RSTART + length(k) + 2, RLENGTH - length(k) - 2) : "" }
    function num(x) { return x != "" && x != "NA" && x ~ /^[-+0-9.eE]+$/ }
    function verdict(r, goal) { if (!num(r)) return "NA"; return (substr(goal, 1, 1) == "<" ? r + 0 < substr(goal, 2) + 0 : r + 0 >= substr(goal, 3) + 0) ? "PASS" : "FAIL" }
    function ratio(a, b) { return num(a) && num(b) && b + 0 > 0 ? sprintf("%.3f", a / b) : "NA" }
    function line(t, rest, m, b, r, g) { printf "summary target=%s %s measured=%s baseline=%s ratio=%s goal=%s %s\n", t, rest, m == "" ? "NA" : m, b == "" ? "NA" : b, r, g, verdict(r, g) }
    /^gpu name=/ { gpu = $0; sub(/^gpu /, "", gpu) }
    /^rlfuse-decode / && f($0, "device") == "cuda" && f($0, "full_length") == "" {
      k = f($0, "size") " " f($0, "conc"); x = f($0, "decode_tok_per_s")
      if (!(k in best) || x + 0 > best[k] + 0) { best[k] = x; prec[k] = f($0, "precision") }
      # the bf16 roofline: the one bench_decode prints under -precision bf16 (2 bytes a weight and a cached value)
      if (f($0, "precision") == "bf16" && (!(k in best16) || x + 0 > best16[k] + 0)) {
        best16[k] = x; roof[k] = f($0, "roofline_tok_per_s"); if (roof[k] == "") roof[k] = "NA"
      }
    }
    /^hf-generate / && f($0, "conc") == 1 { k = f($0, "shape"); c = f($0, "cache")
      if (f($0, "error") != "") { hferr[k] = 1; next }
      if (c == "static-compiled") hfs[k] = f($0, "decode_tok_per_s"); else if (c == "static-not-compiled") hfnc[k] = 1; else if (c == "dynamic") hfd[k] = f($0, "decode_tok_per_s") }
    /^rlfuse-grpo / { k = f($0, "shape"); gs[k] = f($0, "step_s"); gg[k] = f($0, "gen_s"); gl[k] = f($0, "response_len_mean") }
    /^trl-grpo last-log / { tl = f($0, "mean_length") }
    /^trl-grpo summary / { k = f($0, "shape"); trl[k] = f($0, "step_s"); trll[k] = tl; tl = "" }
    /^logprob-gap / { sub(/^logprob-gap /, ""); gap[++ngap] = $0 }
    /^rlfuse size=/ && f($0, "mode") == "train" && f($0, "device") == "cuda" && f($0, "precision") == "bf16" { k = f($0, "size") " " f($0, "B") " " f($0, "T"); tr[k] = f($0, "tok_per_s"); tm[k] = f($0, "mfu"); dm[k] = f($0, "dev_mb"); em[k] = f($0, "est_mb"); ntrain++ }
    /^attention tiled device=cuda/ { k = f($0, "B") " " f($0, "T") " " f($0, "heads") " " f($0, "hd"); if (!(k in akey)) { akey[k] = 1; ak[++na] = k }
      atl[k] = f($0, "fwd_ms") + f($0, "bwd_ms"); ntrain++ }
    /^torch-train / { k = f($0, "shape") " " f($0, "B") " " f($0, "T"); tt[k] = f($0, "tok_per_s"); ntrain++ }
    /^torch size=124M / && f($0, "mode") == "train" && f($0, "precision") == "bf16" && f($0, "impl") == "sdpa" { tt["124M " f($0, "B") " " f($0, "T")] = f($0, "tok_per_s"); ntrain++ }
    /^train-step / { ntrain++ }
    END {
      print "summary gpu " (gpu == "" ? "name=NA" : gpu)
      k = "qwen15 1"; line("decode_roofline_b1", "shape=qwen15 conc=1 precision=bf16", best16[k], roof[k], ratio(best16[k], roof[k]), ">=0.50")
      split("smollm2 qwen05 qwen15", sh, " ")
      for (i = 1; i <= 3; i++) {
        s = sh[i]; k = s " 1"; b = hfs[s]; how = "static-compiled"
        if (b == "") { b = hfd[s]; how = "dynamic(static:" (s in hferr ? "failed" : s in hfnc ? "not-compiled" : "not-run") ")" }
        line("decode_vs_hf", "shape=" s " conc=1 precision=" (k in prec ? prec[k] : "NA") " baseline_cache=" how, best[k], b, ratio(best[k], b), ">=1.5")
      }
      k = "qwen05 64"; line("decode_roofline_b64", "shape=qwen05 conc=64 precision=bf16", best16[k], roof[k], ratio(best16[k], roof[k]), ">=0.30")
      split("smollm2 qwen05", sh, " ")
      for (i = 1; i <= 2; i++) {
        s = sh[i]
        line("grpo_vs_trl", "shape=" s " unit=s_per_step len=" (gl[s] == "" ? "NA" : gl[s]) " baseline_len=" (trll[s] == "" ? "NA" : trll[s]), gs[s], trl[s], ratio(trl[s], gs[s]), ">=10")
        line("grpo_gen_share", "shape=" s " unit=s", gg[s], gs[s], ratio(gg[s], gs[s]), "<0.60")
      }
      if (ntrain) {
        line("train_mfu", "shape=qwen15 B=8 T=2048 precision=bf16 unit=mfu", tm["qwen15 8 2048"], "1", tm["qwen15 8 2048"] == "" ? "NA" : tm["qwen15 8 2048"], ">=0.40")
        split("124M smollm2 qwen05", sh, " ")
        for (i = 1; i <= 3; i++) {
          k = sh[i] (sh[i] == "124M" ? " 8 1024" : " 8 2048"); split(k, kk, " ")
          line("train_vs_torch", "shape=" sh[i] " B=8 T=" kk[3] " precision=bf16 unit=tok_per_s baseline=sdpa+fused-adamw", tr[k], tt[k], ratio(tr[k], tt[k]), ">=1.3")
        }
        k = "qwen05 1 8192"; line("train_long", "shape=qwen05 B=1 T=8192 precision=bf16 unit=tok_per_s baseline=sdpa+fused-adamw", tr[k], tt[k], ratio(tr[k], tt[k]), ">=1.0")
        split("qwen05 1 8192,qwen15 8 2048", mk, ",")
        for (i = 1; i <= 2; i++) { # the device memory the step took against the memory check estimate, |measured/estimate - 1|
          k = mk[i]; split(k, kk, " "); r = num(dm[k]) && num(em[k]) && em[k] > 0 ? sprintf("%.3f", (dm[k] / em[k] > 1 ? dm[k] / em[k] - 1 : 1 - dm[k] / em[k])) : "NA"
          line("train_mem", "shape=" kk[1] " B=" kk[2] " T=" kk[3] " precision=bf16 unit=MiB measure=|measured/estimate-1|", dm[k], em[k], r, "<0.10")
        }
        for (i = 1; i <= na; i++) { # the tiled attention forward and backward: a time, no baseline and no goal
          k = ak[i]; split(k, kk, " ")
          line("train_attention", "B=" kk[1] " T=" kk[2] " heads=" kk[3] " hd=" kk[4] " precision=bf16 unit=ms_fwd+bwd", atl[k], "", "NA", "none")
        }
      }
      if (!ngap) print "summary target=logprob_gap not-run"
      for (i = 1; i <= ngap; i++) print "summary target=logprob_gap " gap[i]
    }' "$1"
}
if [ "${1:-}" = summary ]; then
  [ -f "${2:-}" ] || { echo "gpu_targets: error: summary needs a log file (got '${2:-}')" >&2; exit 2; }
  summarize "$2"
  exit 0
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
if [ -z "$gpu" ]; then
  echo "# gpu_targets: no NVIDIA GPU here (nvidia-smi lists none); nothing measured"
  exit 0
fi
parts=${TARGET_PARTS:-decode gap grpo}
shapes=${TARGET_SHAPES:-smollm2 qwen05 qwen15}
bshapes=${BASELINE_SHAPES:-$shapes}
for p in $parts; do case $p in decode | gap | grpo | train) ;; *) echo "gpu_targets: error: TARGET_PARTS: unknown part '$p' (choose decode, gap, grpo, train)" >&2; exit 2 ;; esac; done
for s in $shapes; do case $s in smollm2 | qwen05 | qwen15) ;; *) echo "gpu_targets: error: TARGET_SHAPES: unknown shape '$s' (choose smollm2, qwen05, qwen15)" >&2; exit 2 ;; esac; done
for s in $bshapes; do case $s in smollm2 | qwen05 | qwen15) ;; *) echo "gpu_targets: error: BASELINE_SHAPES: unknown shape '$s' (choose smollm2, qwen05, qwen15)" >&2; exit 2 ;; esac; done
if [ -n "${BUNDLE:-}" ] && [ -z "${GPU_BUNDLE_TMP:-}" ]; then
  . tools/gpu_bundle.sh
  gpu_bundle_use "$BUNDLE" || exit 2
  trap gpu_bundle_cleanup EXIT
fi
BIN=${BIN:-bin}
DATA=${TARGET_DATA:-${BUNDLE:+$BUNDLE/targets}}
for prog in bench_decode bench_model rlfuse; do
  [ -x "$BIN/$prog" ] || { echo "gpu_targets: error: $BIN/$prog not found; build first or pass BUNDLE" >&2; exit 2; }
done
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/gpu_targets.XXXXXX)}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/targets.log
: >"$LOG"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(getconf _NPROCESSORS_ONLN)}
budget=${TARGET_BUDGET:-300}
start=$(date +%s)
fail=0
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }
say() { echo "$*" | tee -a "$LOG"; }

case "$gpu" in # HBM GB/s and dense bf16 TFLOP/s, the datasheets' (as tools/bench/bench_gpu.sh)
  *H200*) hbm=4800 bf16=989.4 ;; *H100*NVL*) hbm=3900 bf16=835.5 ;; *H100*PCIe*) hbm=2000 bf16=756.5 ;; *H100*) hbm=3350 bf16=989.4 ;; *) hbm=0 bf16=0 ;;
esac
hbm=${HBM_GBS:-$hbm}
bf16=${PEAK_BF16_TFLOPS:-$bf16}
TORCH_PY=
for py in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then TORCH_PY=$py; break; fi
done
say "# gpu_targets $(date -u +%Y-%m-%dT%H:%M:%SZ) rlfuse ${RLFUSE_REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null)}; parts: $parts; shapes: $shapes; budget ${budget} s; logs in $OUT_DIR"
say "gpu name=\"$gpu\" hbm_gbs=$hbm"
[ "$hbm" != 0 ] || say "# unknown board: no roofline unless HBM_GBS is set"
[ -n "$TORCH_PY" ] || say "# no Python whose torch sees the GPU (tried ${PYTHON:-} python3 /usr/bin/python3): no baselines"

# step NAME TIMEOUT CMD...: runs CMD within TIMEOUT and what is left of the
# budget, its output to the terminal and the log, and says how long it took;
# returns CMD's status (124: timed out; 125: skipped, the budget spent)
step() {
  local name=$1 limit=$2 left t0 rc; shift 2
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 30 ]; then say "# step $name: skipped (TARGET_BUDGET ${budget} s spent)"; fail=1; return 125; fi
  [ "$limit" -le "$left" ] || limit=$left
  t0=$(date +%s.%N)
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  say "# step $name: $(echo "$t0 $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}') s, exit $rc$([ "$rc" = 124 ] && echo " (timed out after $limit s)")"
  [ "$rc" = 0 ] || fail=1
  return "$rc"
}

# h5at FILE DATASET I: entry I (from 0) of a 1-d dataset, empty where it has none
# (h5dump: the bundle's or the system's)
h5at() { h5dump -y -w 0 -d "$2" "$1" 2>/dev/null | awk -v i="$3" '/DATA \{/ { getline; n = split($0, v, ","); if (i < n) { gsub(/ /, "", v[i + 1]); print v[i + 1] }; exit }'; }

# grpo SHAPE: the random-init checkpoint, two iterations of input/bench/grpo.deck, then
# one line from run.h5 (iteration 2: the step; generation's part of it; response lengths)
grpo() {
  local s=$1 w=$OUT_DIR/grpo_$1 it gen len
  rm -rf "$w"
  [ -f "$DATA/prompts_$s.h5" ] || { say "# rlfuse-grpo $s: $DATA/prompts_$s.h5 not found (TARGET_DATA: a bundle's targets/, tools/gpu_bundle.sh)"; fail=1; return; }
  step "rlfuse_init_$s" 240 "$BIN/rlfuse" -options_file "input/bench/init_$s.deck" -output_dir "$w/init" || return
  step "rlfuse_grpo_$s" 300 "$BIN/rlfuse" -options_file input/bench/grpo.deck -actor_checkpoint "$w/init/final.h5" \
    -ppo_prompts "$DATA/prompts_$s.h5" -output_dir "$w/run"
  if [ -f "$w/run/run.h5" ]; then
    it=$(h5at "$w/run/run.h5" /timing/iteration_max 1); gen=$(h5at "$w/run/run.h5" /timing/generation_max 1)
    len=$(h5at "$w/run/run.h5" /metrics/response_len_mean 1)
    say "rlfuse-grpo shape=$s iterations=2 step_s=${it:-NA} gen_s=${gen:-NA} response_len_mean=${len:-NA} source=run.h5_iteration_2"
  fi
  rm -rf "$w/init" "$w/run/final.h5" # checkpoints of GBs, not needed after the run
}

# trl_lib: TRL and its pure-Python dependencies from the bundle's wheels, into OUT_DIR/pylib
trl_lib() {
  local lib=$OUT_DIR/pylib pins="trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19"
  [ -d "$DATA/wheels" ] || { say "# trl: $DATA/wheels not found (TARGET_DATA: a bundle's targets/)"; return 1; }
  # shellcheck disable=SC2086
  "$TORCH_PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$lib" --find-links "$DATA/wheels" $pins >>"$LOG" 2>&1 ||
    "$TORCH_PY" - "$DATA/wheels" "$lib" <<'PY' >>"$LOG" 2>&1 || { say "# trl: the wheels did not install (see $LOG)"; return 1; }
import glob, sys, zipfile  # no pip: a pure-Python wheel unpacked is installed
tag = "py%d%d" % sys.version_info[:2]
for w in glob.glob(sys.argv[1] + "/*.whl"):
    if "-py3-none-" in w or f"-{tag}-none-" in w:
        zipfile.ZipFile(w).extractall(sys.argv[2])
PY
  PYTHONPATH=$lib${PYTHONPATH:+:$PYTHONPATH} "$TORCH_PY" -c 'import trl, datasets' >>"$LOG" 2>&1 || { say "# trl: import trl, datasets fails (see $LOG)"; return 1; }
}

# trl SHAPE: TRL's GRPO step at SHAPE (two steps: the first warms up)
trl() {
  mkdir -p "$OUT_DIR/trl_$1"
  PYTHONPATH=$OUT_DIR/pylib${PYTHONPATH:+:$PYTHONPATH} step "trl_$1" 300 "$TORCH_PY" tools/bench/gpu_baselines/trl_grpo.py "$DATA/tokenizer" "$OUT_DIR/trl_$1" "$1" 512 2
  rm -rf "$OUT_DIR/trl_$1/model"
}

# The order puts each target's runs together, the quick ones first, so that a
# spent budget leaves whole targets measured (the rest NA)
if has "$parts" decode; then
  for s in $shapes; do
    conc=1; [ "$s" = qwen05 ] && conc=0 # 0: 1, 8 and 64
    for prec in bf16 fp32; do
      step "decode_${s}_$prec" 120 "$BIN/bench_decode" -device cuda -precision $prec -size "$s" -concurrency $conc -prompt 8 -max_new 64 -iters 3 -warmup 1 -hbm_gbs "$hbm"
    done
  done
fi
if has "$parts" gap; then
  for prec in fp32 bf16; do
    # in a subshell, to read its output: an unknown option is no failure (the option is another branch's)
    out=$(step "gap_$prec" 120 "$BIN/bench_decode" -device cuda -precision $prec -size smollm2 -concurrency 8 -prompt 8 -max_new 64 -iters 1 -warmup 0 -logprob_gap true)
    rc=$?
    printf '%s\n' "$out" # the log has it already
    if [ $rc = 125 ]; then say "logprob-gap precision=$prec status=skipped"; fail=1
    elif printf '%s\n' "$out" | grep -q 'unknown.*logprob_gap'; then say "logprob-gap precision=$prec not built"
    else
      v=$(printf '%s\n' "$out" | grep -v '^#' | grep -m1 'gap' | cut -d' ' -f2-)
      say "logprob-gap precision=$prec ${v:-status=no-gap-line}"
      [ $rc = 0 ] || fail=1
    fi
  done
fi
trl_ok=0
if has "$parts" grpo; then
  if [ -z "$TORCH_PY" ]; then say "# trl: not run (no Python whose torch sees the GPU)"; fail=1
  elif trl_lib; then trl_ok=1; else fail=1; fi
fi
if has "$parts" grpo && has "$shapes" smollm2; then
  grpo smollm2
  [ $trl_ok = 0 ] || ! has "$bshapes" smollm2 || trl smollm2
fi
if has "$parts" decode && [ -n "$TORCH_PY" ]; then
  for s in $shapes; do
    has "$bshapes" "$s" || continue
    step "hf_$s" 180 "$TORCH_PY" tools/bench/gpu_baselines/torch_baseline.py decode "$s" dynamic,static 1
  done
fi
if has "$parts" grpo && has "$shapes" qwen05; then
  grpo qwen05
  [ $trl_ok = 0 ] || ! has "$bshapes" qwen05 || trl qwen05
fi
if has "$parts" train; then
  # the attention alone first (seconds)
  for at in "8 2048 9 3 64" "8 2048 14 2 64" "8 2048 12 2 128" "1 8192 14 2 64"; do
    set -- $at
    step "attention_$2_$3" 60 "$BIN/bench_attention" -device cuda -precision bf16 -B "$1" -T "$2" -n_head "$3" -n_kv_head "$4" -head_dim "$5" -iters 5
  done
  # rlfuse and the baseline of each shape one after the other, the short ones first
  for st in "124M 8 1024" "smollm2 8 2048" "qwen05 8 2048" "qwen05 1 8192" "qwen15 8 2048"; do
    set -- $st
    say "train-step shape=$1 B=$2 T=$3"
    step "train_$1_$3" 150 "$BIN/bench_model" -device cuda -precision bf16 -size "$1" -B "$2" -T "$3" -iters 3 -warmup 1 -peak_tflops "$bf16"
    [ -n "$TORCH_PY" ] || continue
    if [ "$1" = 124M ]; then
      step "torch_train_$1" 150 "$TORCH_PY" tools/bench/bench_torch.py --sizes 124M --device cuda --dtype bf16 --sdpa --fused_adamw --threads 1 --B "$2" --T "$3" --warmup 2 --iters 5
    else
      step "torch_train_$1_$3" 150 "$TORCH_PY" tools/bench/gpu_baselines/torch_baseline.py train "$1" "$2" "$3"
    fi
  done
fi
say "# gpu_targets: $(($(date +%s) - start)) s in all"
summarize "$LOG" | tee -a "$LOG"
exit $fail
