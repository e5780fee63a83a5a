# Score mode against PyTorch: log-probabilities and values of the golden
# checkpoints must match those computed from the stored PyTorch logits and
# values, with zeros past each length.
. regression/lib.sh
d="$RLFUSE_TMP/score"; mkdir -p $d; g=regression/golden
"$PYTHON" - $g/gpt_lm.h5 $d/in.h5 <<'PY' || not_ok "make score input"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    tok = f["/golden/tokens"][...]
    V = int(f["/policy"].attrs["vocab_size"])
B, T = tok.shape
with h5py.File(sys.argv[2], "w") as o:
    o["tokens"] = tok.astype(np.int32)
    o["lengths"] = np.array([T, T - 5, 3][:B] + [T] * max(0, B - 3), np.int32)
    o.attrs["vocab_size"] = np.int32(V)
PY
rlfuse -mode score -score_checkpoint $g/gpt_lm.h5 -score_input $d/in.h5 -score_output $d/lp.h5 -score_batch 2 >$d/lm.log 2>&1 || not_ok "score lm: $(tail -2 $d/lm.log)"
rlfuse -mode score -score_checkpoint $g/gpt_scalar.h5 -score_role reward -score_input $d/in.h5 -score_output $d/v.h5 >$d/sc.log 2>&1 || not_ok "score scalar: $(tail -2 $d/sc.log)"
"$PYTHON" - $g/gpt_lm.h5 $g/gpt_scalar.h5 $d/in.h5 $d/lp.h5 $d/v.h5 <<'PY'
import sys, h5py, numpy as np
lmf, scf, inf, lpf, vf = sys.argv[1:6]
with h5py.File(inf) as f: tok, L = f["tokens"][...], f["lengths"][...]
with h5py.File(lmf) as f: logits = f["/golden/logits"][...].astype(np.float64)
with h5py.File(scf) as f: gv = f["/golden/values"][...]
lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
B, T = tok.shape
ref = np.zeros((B, T - 1)); vref = np.zeros((B, T))
for b in range(B):
    for t in range(L[b] - 1): ref[b, t] = logits[b, t, tok[b, t + 1]] - lse[b, t]
    vref[b, :L[b]] = gv[b, :L[b]]
def cmp(name, x, r, tol):
    err = np.abs(x - r).max(); lim = tol * max(1.0, np.abs(r).max())
    print(("ok - " if err <= lim else "not ok - ") + f"{name}: max abs error {err:.2e} (limit {lim:.2e})")
with h5py.File(lpf) as f: cmp("score /logprobs vs PyTorch, zeros past lengths", f["logprobs"][...], ref, 2e-5)
with h5py.File(vf) as f: cmp("score /values vs PyTorch, zeros past lengths", f["values"][...], vref, 2e-5)
PY
finish
