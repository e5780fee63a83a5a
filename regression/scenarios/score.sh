# Score mode against PyTorch: log-probabilities and values of the golden
# checkpoints must match those computed from the stored PyTorch logits and
# values, with zeros past each length. An input with only /tokens and
# /lengths (no vocab_size attribute) scores the same; its tokens are checked
# against the checkpoint's vocabulary, and an attribute larger than it is an
# error.
#
# The checks in detail: `-mode score` log-probabilities and values of the golden checkpoints
# against PyTorch's, zeros past each length; an input with only `/tokens` and `/lengths` (no
# `vocab_size` attribute, as written with h5py) scores bit-identically, a token past the
# checkpoint's vocabulary in it is one error naming the position, and a `vocab_size` attribute
# larger than the checkpoint's is one error
. regression/lib.sh
plan 5
d="$RLFUSE_TMP/score"; mkdir -p $d; g=regression/golden
# Token files from each golden file's own batch, with three different lengths.
for m in lm scalar; do
  "$PYTHON" - $g/gpt_$m.h5 $d/in_$m.h5 <<'PY' || not_ok "make score input ($m)"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    tok = f["/golden/tokens"][...]
    V = int(f[[k for k in f if k != "golden"][0]].attrs["vocab_size"])
B, T = tok.shape
with h5py.File(sys.argv[2], "w") as o:
    o["tokens"] = tok.astype(np.int32)
    o["lengths"] = np.array(([T, T - 5, 3] * B)[:B], np.int32)
    o.attrs["vocab_size"] = np.int32(V)
PY
done
rlfuse -mode score -score_checkpoint $g/gpt_lm.h5 -score_input $d/in_lm.h5 -score_output $d/lp.h5 -score_batch 2 >$d/lm.log 2>&1 || not_ok "score lm: $(tail -2 $d/lm.log)"
rlfuse -mode score -score_checkpoint $g/gpt_scalar.h5 -score_role reward -score_input $d/in_scalar.h5 -score_output $d/v.h5 >$d/sc.log 2>&1 || not_ok "score scalar: $(tail -2 $d/sc.log)"
py "score against PyTorch" $g $d <<'PY'
import sys, h5py, numpy as np
g, d = sys.argv[1:3]
def cmp(name, x, r):
    # fp32 against PyTorch fp32: 2e-5 of the reference's magnitude (see docs/testing.md)
    err = np.abs(x - r).max(); lim = 2e-5 * max(1.0, np.abs(r).max())
    print(("ok - " if err <= lim else "not ok - ") + f"{name}: max abs error {err:.2e} (limit {lim:.2e})")
with h5py.File(f"{d}/in_lm.h5") as f: tok, L = f["tokens"][...], f["lengths"][...]
with h5py.File(f"{g}/gpt_lm.h5") as f: logits = f["/golden/logits"][...].astype(np.float64)
m = logits.max(-1, keepdims=True); lse = (np.log(np.exp(logits - m).sum(-1, keepdims=True)) + m)[..., 0]
B, T = tok.shape; ref = np.zeros((B, T - 1))
for b in range(B):
    for t in range(L[b] - 1): ref[b, t] = logits[b, t, tok[b, t + 1]] - lse[b, t]
with h5py.File(f"{d}/lp.h5") as f: cmp("score /logprobs vs PyTorch, zeros past lengths", f["logprobs"][...], ref)
with h5py.File(f"{d}/in_scalar.h5") as f: L = f["lengths"][...]
with h5py.File(f"{g}/gpt_scalar.h5") as f: gv = f["/golden/values"][...]
vref = np.zeros_like(gv)
for b in range(len(L)): vref[b, :L[b]] = gv[b, :L[b]]
with h5py.File(f"{d}/v.h5") as f: cmp("score /values vs PyTorch, zeros past lengths", f["values"][...], vref)
PY
# an input as users write it with h5py: /tokens and /lengths only
"$PYTHON" - $d <<'PY' || not_ok "make inputs without vocab_size"
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/in_lm.h5") as f: tok, L, V = f["tokens"][...], f["lengths"][...], int(f.attrs["vocab_size"])
with h5py.File(f"{d}/plain.h5", "w") as o: o["tokens"], o["lengths"] = tok, L
bad = tok.copy(); bad[1, 2] = V                      # one token past the checkpoint's vocabulary
with h5py.File(f"{d}/plain_bad.h5", "w") as o: o["tokens"], o["lengths"] = bad, L
with h5py.File(f"{d}/big.h5", "w") as o:
    o["tokens"], o["lengths"] = tok, L
    o.attrs["vocab_size"] = np.int32(V + 1)
PY
rlfuse -mode score -score_checkpoint $g/gpt_lm.h5 -score_input $d/plain.h5 -score_output $d/lp_plain.h5 -score_batch 2 >$d/plain.log 2>&1 || not_ok "score an input without vocab_size: $(tail -2 $d/plain.log)"
check "an input without vocab_size scores the same as with it" "$PYTHON" -c "
import h5py, numpy as np
assert np.array_equal(h5py.File('$d/lp.h5')['logprobs'][...], h5py.File('$d/lp_plain.h5')['logprobs'][...])"
score_error() {
  local what=$1 in=$2 pat=$3 err
  err=$(rlfuse -mode score -score_checkpoint $g/gpt_lm.h5 -score_input $in -score_output $d/out_$RANDOM.h5 2>&1 >/dev/null) && { not_ok "$what: exit status 0"; return; }
  if [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && printf '%s' "$err" | grep -q "^rlfuse: error: .*$pat"; then ok "$what ($(printf '%s' "$err" | cut -c1-110))"
  else not_ok "$what: expected one line matching '$pat', got: $(printf '%s' "$err" | head -3)"; fi
}
score_error "without vocab_size, a token past the checkpoint's vocabulary is one error naming it" $d/plain_bad.h5 "plain_bad.h5: /tokens\[1,2\] = .* is outside \[0, the checkpoint's vocab_size="
score_error "a vocab_size attribute larger than the checkpoint's is one error" $d/big.h5 "big.h5 has vocabulary .*, larger than the model's"
finish
