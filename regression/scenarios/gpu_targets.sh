# tools/bench/gpu_targets.sh (the GPU checklist's part `targets`) without a GPU:
# its decks at a tiny shape on the cpu (input/bench/init_*.deck and
# grpo.deck, through a wrapper that adds only the shape, the device and the
# response length), every other program a stub printing the lines the real
# one prints, and nvidia-smi a stub naming an H200; then the summary lines
# against numbers worked out by hand, the fallback to the dynamic cache, a
# spent budget, and the one line without a GPU.
#
# The checks in detail: `tools/bench/gpu_targets.sh` (the GPU checklist's part `targets`) without a
# GPU: nvidia-smi, bench_decode and the Python baselines stubbed with the lines they print,
# `input/bench/init_*.deck` and `grpo.deck` run for real on the cpu at a tiny shape (1 layer,
# 32 wide, vocabulary 64, 4 new tokens; the decks' other settings as written) with prompt
# files from `tools/bench/gpu_baselines/bench_prompts.py`; the summary lines against numbers worked
# out by hand (the faster precision against the bf16 roofline at batch 1 and 64, the ratio to
# generate's compiled static cache, the fallback to the dynamic cache when the static one
# fails, TRL's step over rlfuse's and generation's share from run.h5's iteration 2, the
# log-probability gap "not built"; with `TARGET_PARTS=train` bench_model and bench_attention
# stubbed too: the MFU at qwen15 and the training ratios to PyTorch at 124M, smollm2, qwen05
# and at T 8192, the device memory against the estimate (5% PASS, 20% FAIL) and the tiled
# attention's time at the four shapes, PASS and FAIL), `summary LOG` repeating
# them, a spent `TARGET_BUDGET` skipping every step (exit 1, targets NA), and the one line
# (exit 0) of `gpu_checklist.sh targets` without a GPU. About 5 s
. regression/lib.sh
plan 14
d="$RLFUSE_TMP/gpu_targets"; rm -rf $d; mkdir -p $d/stub $d/bin $d/data
root=$(pwd)

cat >$d/stub/nvidia-smi <<'EOF'
#!/bin/sh
case "$*" in *-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;; *) echo "NVIDIA H200" ;; esac
EOF
# bench_decode: qwen15 weighs 6000 MB in fp32, 3000 in bf16 (bf16 roofline at 4800 GB/s: 1600 tok/s),
# qwen05 2000 MB (conc 64: kv 1000 MB, bf16 roofline 64 * 4800e3 / 1500 = 204800); the bf16 runs faster than fp32
cat >$d/bin/bench_decode <<'EOF'
#!/bin/bash
a=" $* "; case $a in *" -logprob_gap "*) echo "rlfuse: error: unknown options -logprob_gap (misspelled, or not used by this -mode; see -help)" >&2; exit 1 ;; esac
size=$(echo "$a" | sed 's/.* -size \([^ ]*\).*/\1/'); prec=$(echo "$a" | sed 's/.* -precision \([^ ]*\).*/\1/'); conc=$(echo "$a" | sed 's/.* -concurrency \([^ ]*\).*/\1/')
case $size in smollm2) w=540 ;; qwen05) w=2000 ;; *) w=6000 ;; esac
[ "$conc" = 0 ] && concs="1 8 64" || concs=$conc
for c in $concs; do
  kv=0.5; [ $c = 64 ] && kv=1000; t=$([ $prec = bf16 ] && echo 900 || echo 700); [ $c = 64 ] && t=$([ $prec = bf16 ] && echo 70000 || echo 50000)
  # bench_decode counts 2 bytes a weight and a cached value under bf16, 4 under fp32
  b=$([ $prec = bf16 ] && echo 2 || echo 1); wm=$(awk -v w=$w -v b=$b 'BEGIN { print w / b }'); km=$(awk -v k=$kv -v b=$b 'BEGIN { print k / b }')
  roof=$(awk -v c=$c -v w=$wm -v k=$km 'BEGIN { printf "%.0f", c * 4800e3 / (w + k) }')
  echo "rlfuse-decode size=$size params=1 conc=$c prompt=8 new=64 threads=16 decode_tok_per_s=$t tok_per_s=1 step_ms=1 fwd_ms=1 prefill_ms=1 device=cuda precision=$prec weight_mb=$wm kv_mb=$km hbm_gbs=4800 roofline_tok_per_s=$roof roofline_frac=0.1 fwd_roofline_frac=0.1"
done
EOF
# rlfuse: the real program on the cpu at a tiny shape and 4 new tokens (the decks' other settings as written)
cat >$d/bin/rlfuse <<EOF
#!/bin/bash
case " \$* " in
  *init_*) exec "$root/$BIN/rlfuse" "\$@" -policy_n_layer 1 -policy_n_embd 32 -policy_n_head 2 -policy_n_kv_head 1 -policy_n_ffn 32 -policy_vocab_size 64 ;;
  *) exec "$root/$BIN/rlfuse" "\$@" -device cpu -precision fp32 -gen_max_new_tokens 4 -gen_min_new_tokens 4 ;;
esac
EOF
# bench_model: bf16 training steps (tok/s by shape; qwen15's MFU 0.41)
cat >$d/bin/bench_model <<'EOF'
#!/bin/bash
a=" $* "; size=$(echo "$a" | sed 's/.* -size \([^ ]*\).*/\1/'); B=$(echo "$a" | sed 's/.* -B \([^ ]*\).*/\1/'); T=$(echo "$a" | sed 's/.* -T \([^ ]*\).*/\1/')
case "$size $B $T" in "124M 8 1024") t=200000 ;; "smollm2 8 2048") t=150000 ;; "qwen05 8 2048") t=40000 ;; "qwen05 1 8192") t=30000 ;; *) t=15000 ;; esac
echo "rlfuse size=$size params=1 mode=fwd B=$B T=$T threads=16 tok_per_s=1 gflops=1 ms=1 device=cuda precision=bf16 mfu=0.1"
case "$size $B $T" in "qwen05 1 8192") m="dev_mb=10500 est_mb=10000" ;; "qwen15 8 2048") m="dev_mb=30000 est_mb=25000" ;; *) m="dev_mb=1 est_mb=1" ;; esac
echo "rlfuse size=$size params=1 mode=train B=$B T=$T threads=16 tok_per_s=$t gflops=1 ms=1 device=cuda precision=bf16 mfu=0.41 $m"
EOF
# bench_attention: the tiled pair 7 ms (fwd 2 + bwd 5) at every shape
cat >$d/bin/bench_attention <<'EOF'
#!/bin/bash
a=" $* "; B=$(echo "$a" | sed 's/.* -B \([^ ]*\).*/\1/'); T=$(echo "$a" | sed 's/.* -T \([^ ]*\).*/\1/'); h=$(echo "$a" | sed 's/.* -n_head \([^ ]*\).*/\1/')
k=$(echo "$a" | sed 's/.* -n_kv_head \([^ ]*\).*/\1/'); hd=$(echo "$a" | sed 's/.* -head_dim \([^ ]*\).*/\1/')
echo "attention tiled device=cuda precision=bf16 B=$B T=$T heads=$h/$k hd=$hd threads=1 fwd_ms=2.000 bwd_ms=5.000 fwd_tflops=1 bwd_tflops=1 saved_bytes=1"
EOF
# python: torch sees a GPU, pip installs, the baselines print their lines (qwen15's static cache fails)
cat >$d/stub/python <<'EOF'
#!/bin/bash
case "$1" in
  -c | -m) exit 0 ;;
  *bench_torch.py)
    echo "torch size=124M params=1 mode=train B=8 T=1024 threads=1 tok_per_s=90000 gflops=1 ms=1 device=cuda precision=bf16 impl=eager"
    echo "torch size=124M params=1 mode=train B=8 T=1024 threads=1 tok_per_s=140000 gflops=1 ms=1 device=cuda precision=bf16 impl=sdpa" ;;
  *torch_baseline.py)
    if [ "$2" = train ]; then
      case "$3 $4 $5" in "smollm2 8 2048") t=100000 ;; "qwen05 8 2048") t=40000 ;; "qwen05 1 8192") t=20000 ;; *) t=10000 ;; esac
      echo "torch-train shape=$3 B=$4 T=$5 precision=bf16-autocast impl=sdpa tok_per_s=$t ms=1"; exit 0
    fi
    echo "hf-generate shape=$3 conc=1 weights=bf16 cache=dynamic decode_tok_per_s=300 s=0.2 warmup_s=1"
    if [ "$3" = qwen15 ]; then echo "hf-generate shape=$3 conc=1 weights=bf16 cache=static error=\"RuntimeError: no\""; exit 1; fi
    echo "hf-generate shape=$3 conc=1 weights=bf16 cache=static-compiled decode_tok_per_s=450 s=0.1 warmup_s=60 compiled_graphs=3" ;;
  *trl_grpo.py) [ -f "$2/tokenizer.json" ] || exit 3; echo "trl-grpo last-log mean_length=512.0 min_length=512.0"; echo "trl-grpo summary shape=$4 new=$5 prompt=64 completions_per_step=64 steps=2 step_s=30.000 first_step_s=60 train_wall_s=90" ;;
  *) exit 4 ;;
esac
EOF
chmod +x $d/stub/* $d/bin/*
mkdir -p $d/data/wheels $d/data/tokenizer && touch $d/data/tokenizer/tokenizer.json
for s in smollm2 qwen05; do "$PYTHON" tools/bench/gpu_baselines/bench_prompts.py $d/data/prompts_$s.h5 64 >/dev/null; done

run() { PATH=$d/stub:$PATH PYTHON=$d/stub/python BIN=$d/bin TARGET_DATA=$d/data OMP_NUM_THREADS=1 bash tools/bench/gpu_targets.sh; }
OUT_DIR=$d/out run >$d/run.log 2>&1; rc=$?
# 17 steps: decode 6, gap 2 (exit 1: the option unknown, not counted), GRPO 2 x (init, run, TRL), generate 3
steps_as_expected() {
  [ $rc = 1 ] && [ "$(grep -c '^# step .*exit 0$' $d/run.log)" = 14 ] && [ "$(grep -c '^# step \(gap_fp32\|gap_bf16\|hf_qwen15\): .* exit 1$' $d/run.log)" = 3 ]
}
check "a failing step (qwen15's static cache) makes the exit status 1; every other step ran and passed" steps_as_expected
sum() { grep "^summary target=$1 $2" $d/run.log; }
check "the GRPO deck ran: iteration 2's step and generation times from run.h5, every response 4 tokens" \
  grep -Eq '^rlfuse-grpo shape=qwen05 iterations=2 step_s=[0-9.e-]+ gen_s=[0-9.e-]+ response_len_mean=4 ' $d/run.log
check "batch 1 at qwen15: the faster precision (bf16, 900 tok/s) against the bf16 roofline (1600): 0.562, PASS" \
  sum decode_roofline_b1 "shape=qwen15 conc=1 precision=bf16 measured=900 baseline=1600 ratio=0.562 goal=>=0.50 PASS"
check "batch 64 at qwen05: 70000 against 204800 tok/s: 0.342, PASS" \
  sum decode_roofline_b64 "shape=qwen05 conc=64 precision=bf16 measured=70000 baseline=204800 ratio=0.342 goal=>=0.30 PASS"
check "against generate with the compiled static cache: 900 / 450 = 2.000, PASS" \
  sum decode_vs_hf "shape=smollm2 conc=1 precision=bf16 baseline_cache=static-compiled measured=900 baseline=450 ratio=2.000 goal=>=1.5 PASS"
check "a static cache that fails falls back to the dynamic one and says so" \
  sum decode_vs_hf "shape=qwen15 conc=1 precision=bf16 baseline_cache=dynamic(static:failed) measured=900 baseline=300 ratio=3.000 goal=>=1.5 PASS"
py "the GRPO lines: TRL's step over rlfuse's, generation's share of rlfuse's step" $d/run.log <<'PY'
import re, sys
log = open(sys.argv[1]).read()
for s in ("smollm2", "qwen05"):
    g = dict(re.findall(r"(\w+)=(\S+)", re.search(rf"^rlfuse-grpo shape={s} .*", log, re.M).group(0)))
    v = re.search(rf"^summary target=grpo_vs_trl shape={s} unit=s_per_step len=4 baseline_len=512.0 measured=(\S+) baseline=30.000 ratio=(\S+) goal=>=10 (PASS|FAIL)$", log, re.M)
    h = re.search(rf"^summary target=grpo_gen_share shape={s} unit=s measured=(\S+) baseline=(\S+) ratio=(\S+) goal=<0.60 (PASS|FAIL)$", log, re.M)
    ok = v and h and v.group(1) == g["step_s"] and abs(float(v.group(2)) - 30 / float(g["step_s"])) < 1e-3 * float(v.group(2)) \
        and (v.group(3) == "PASS") == (float(v.group(2)) >= 10) and h.group(1) == g["gen_s"] \
        and abs(float(h.group(3)) - float(g["gen_s"]) / float(g["step_s"])) < 2e-3 and (h.group(4) == "PASS") == (float(h.group(3)) < 0.6)
    print(f"{'ok' if ok else 'not ok'} - grpo_vs_trl and grpo_gen_share at {s} from the run's own times")
PY
check "the log-probability gap: 'not built' while bench_decode lacks -logprob_gap, and no failure" \
  [ "$(grep -c '^summary target=logprob_gap precision=\(fp32\|bf16\) not built$' $d/run.log)" = 2 ]
check "the summary names the GPU" grep -q '^summary gpu name="NVIDIA H200" hbm_gbs=4800$' $d/run.log
# the summary alone, from the log of the run (as after a run elsewhere)
check "summary LOG prints the same lines" cmp <(grep '^summary ' $d/run.log) <(bash tools/bench/gpu_targets.sh summary $d/out/targets.log)
# the training targets (TARGET_PARTS=train): rlfuse's steps beside PyTorch's, worked out by hand
OUT_DIR=$d/outt TARGET_PARTS=train run >$d/runt.log 2>&1; rc=$?
tsum() { grep -q "^summary target=$1 $2\$" $d/runt.log; }
train_sums() {
  [ $rc = 0 ] && [ "$(grep -c '^# step \(train\|torch_train\)_.* exit 0$' $d/runt.log)" = 10 ] &&
    tsum train_mfu "shape=qwen15 B=8 T=2048 precision=bf16 unit=mfu measured=0.41 baseline=1 ratio=0.41 goal=>=0.40 PASS" &&
    tsum train_vs_torch "shape=124M B=8 T=1024 precision=bf16 unit=tok_per_s baseline=sdpa+fused-adamw measured=200000 baseline=140000 ratio=1.429 goal=>=1.3 PASS" &&
    tsum train_vs_torch "shape=smollm2 B=8 T=2048 precision=bf16 unit=tok_per_s baseline=sdpa+fused-adamw measured=150000 baseline=100000 ratio=1.500 goal=>=1.3 PASS" &&
    tsum train_vs_torch "shape=qwen05 B=8 T=2048 precision=bf16 unit=tok_per_s baseline=sdpa+fused-adamw measured=40000 baseline=40000 ratio=1.000 goal=>=1.3 FAIL" &&
    tsum train_long "shape=qwen05 B=1 T=8192 precision=bf16 unit=tok_per_s baseline=sdpa+fused-adamw measured=30000 baseline=20000 ratio=1.500 goal=>=1.0 PASS" &&
    [ "$(grep -c '^# step attention_.* exit 0$' $d/runt.log)" = 4 ] &&
    tsum train_mem "shape=qwen05 B=1 T=8192 precision=bf16 unit=MiB measure=|measured/estimate-1| measured=10500 baseline=10000 ratio=0.050 goal=<0.10 PASS" &&
    tsum train_mem "shape=qwen15 B=8 T=2048 precision=bf16 unit=MiB measure=|measured/estimate-1| measured=30000 baseline=25000 ratio=0.200 goal=<0.10 FAIL" &&
    [ "$(grep -c '^summary target=train_attention B=\(8 T=2048 heads=9/3 hd=64\|8 T=2048 heads=14/2 hd=64\|8 T=2048 heads=12/2 hd=128\|1 T=8192 heads=14/2 hd=64\) precision=bf16 unit=ms_fwd+bwd measured=7 baseline=NA ratio=NA goal=none NA$' $d/runt.log)" = 4 ]
}
check "TARGET_PARTS=train: MFU at qwen15 0.41 (PASS); against PyTorch 200000/140000 = 1.429 (PASS), 1.500 (PASS), 1.000 (FAIL); T 8192 1.500 (PASS); device memory against the estimate 0.050 (PASS) and 0.200 (FAIL); the tiled attention's 7 ms at the four shapes (no baseline)" train_sums
OUT_DIR=$d/out0 TARGET_BUDGET=0 run >$d/run0.log 2>&1; rc=$?
all_skipped() { [ $rc = 1 ] && grep -q '^# step decode_smollm2_bf16: skipped' $d/run0.log && ! grep '^summary target=' $d/run0.log | grep -qv ' NA$\|status=skipped$'; }
check "a spent budget skips the steps, exits 1 and leaves the targets NA" all_skipped
check "without a GPU: one line, exit 0" [ "$(PATH=/usr/bin:/bin bash tools/gpu_checklist.sh targets 2>&1; echo "rc=$?")" = "# gpu_checklist: no NVIDIA GPU here (nvidia-smi lists none); nothing run
rc=0" ]
finish
