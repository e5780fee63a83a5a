# Score mode against PyTorch: log-probabilities and values of the golden
# checkpoints must match those computed from the stored PyTorch logits and
# values, with zeros past each length.
. regression/lib.sh
plan 2
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
finish
