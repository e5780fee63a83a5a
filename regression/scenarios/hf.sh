# Hugging Face GPT-2 in and out, against transformers itself (installed by
# make deps into the cache folder, put on PYTHONPATH here): random
# transformers models imported and scored by -mode score agree with
# transformers' log-probabilities, values and sequence scores; a PPO actor
# exported and loaded by from_pretrained continues prompts greedily exactly as
# rlfuse's greedy generation; import/export round trips are bit-exact; what
# rlfuse cannot represent is refused in one line, and a PPO checkpoint's
# reference, which it records by its input file, is named by that file.
#
# The checks in detail: Hugging Face GPT-2 against `transformers` 4.40.2 itself (from
# `~/.cache/rlfuse/python`, installed by `make deps`; failing, not skipping, when it cannot be
# imported): random transformers models (weights perturbed by N(0, 0.3²)) imported with
# `tools/hf_import.py` and run through `-mode score` give transformers' float64
# log-probabilities, per-position values and sequence scores within 2e-5 of their magnitude
# (measured ~2e-6); import/export round trips bit-identical both ways (h5diff without
# tolerance; safetensors bits and the `from_pretrained` state dicts); a PPO actor (3
# iterations on the built-in task) exported and run by `generate(do_sample=False)` continues
# 16 prompts exactly as rlfuse's `-gen_greedy` rollout, with the smallest top-2 logit gap
# printed; `tools/hf_tokenize.py` rows decode back to the text, and SFT (`-init_checkpoint`)
# and RM run on them from the imported model; seven unrepresentable inputs (untied head, other
# architecture, activation, LM for a reward role, two labels, wrong shape) and a missing role
# on export each one line, exit 1, no file; `policy.h5 actor` and a PPO `final.h5 policy` export
# the file's one LM model, saying which; `tools/py` imports transformers 4.40.2 without
# PYTHONPATH set; the export of a PPO checkpoint's reference, which
# it records by its input file, one line naming that file. About 60 s on 2 cores, most of it
# importing torch
. regression/lib.sh
plan 20
d="$RLFUSE_TMP/hf"; mkdir -p $d
HF_PY="${RLFUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlfuse}/python"
hfpy() { PYTHONPATH="$HF_PY${PYTHONPATH:+:$PYTHONPATH}" TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 "$PYTHON" "$@"; }
# make deps installs transformers; a missing one is a failure, not a skip
if ! hfpy -c 'import torch, transformers' 2>$d/import.err; then
  not_ok "transformers is not importable from $HF_PY (run make deps): $(tail -1 $d/import.err)"; finish
fi
v=$(env -u PYTHONPATH tools/py -c 'import transformers, tokenizers; print(transformers.__version__)' 2>&1 | tail -1)
check "tools/py, the documents' way to run the tools' Python, imports the transformers make deps installs ($v) without PYTHONPATH set" test "$v" = 4.40.2

# 1. random transformers models (weights perturbed so that no output is near-uniform), token batch, references in float64
hfpy - $d <<'PY' 2>$d/make.err || not_ok "make the transformers models: $(tail -1 $d/make.err)"
import sys, torch, h5py, numpy as np
from transformers import GPT2Config, GPT2LMHeadModel, GPT2ForSequenceClassification
d = sys.argv[1]; torch.manual_seed(5)
kw = dict(n_layer=2, n_head=4, n_embd=32, vocab_size=48, n_positions=24)
lm, sc = GPT2LMHeadModel(GPT2Config(**kw)), GPT2ForSequenceClassification(GPT2Config(num_labels=1, **kw))
for m in (lm, sc):
    with torch.no_grad():
        for p in m.parameters(): p.add_(0.3 * torch.randn_like(p))
lm.save_pretrained(f"{d}/hf_lm"); sc.save_pretrained(f"{d}/hf_rm")
B, T = 5, 20
tok = torch.randint(0, 48, (B, T)); L = np.array([20, 17, 9, 3, 12], np.int32)
with h5py.File(f"{d}/in.h5", "w") as f:
    f["tokens"] = tok.numpy().astype(np.int32); f["lengths"] = L; f.attrs["vocab_size"] = np.int32(48)
lm, sc = lm.double().eval(), sc.double().eval()
lp, v, s = np.zeros((B, T - 1)), np.zeros((B, T)), np.zeros(B)
with torch.no_grad():
    for b in range(B):  # one sequence at a time at its own length: no padding anywhere
        x = tok[b:b + 1, :L[b]]
        logp = torch.log_softmax(lm(x).logits[0], -1)
        lp[b, :L[b] - 1] = logp[:-1].gather(1, x[0, 1:, None])[:, 0].numpy()
        v[b, :L[b]] = sc.score(sc.transformer(x).last_hidden_state)[0, :, 0].numpy()
        s[b] = sc(x).logits[0, 0].item()   # transformers' own sequence score (pooled at the last token)
with h5py.File(f"{d}/ref.h5", "w") as f:
    f["logprobs"], f["values"], f["scores"] = lp, v, s
PY
"$PYTHON" tools/hf_import.py $d/hf_lm $d/lm.h5 policy >$d/imp.log 2>&1 || not_ok "hf_import policy: $(tail -1 $d/imp.log)"
"$PYTHON" tools/hf_import.py $d/hf_rm $d/rm.h5 reward >>$d/imp.log 2>&1 || not_ok "hf_import reward: $(tail -1 $d/imp.log)"
rlfuse -mode score -score_checkpoint $d/lm.h5 -score_input $d/in.h5 -score_output $d/lp.h5 -score_batch 2 >$d/s1.log 2>&1 || not_ok "score lm: $(tail -1 $d/s1.log)"
rlfuse -mode score -score_checkpoint $d/rm.h5 -score_role reward -score_input $d/in.h5 -score_output $d/v.h5 >$d/s2.log 2>&1 || not_ok "score reward: $(tail -1 $d/s2.log)"
"$PYTHON" - $d <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
def cmp(name, x, r):
    # rlfuse fp32 against transformers in float64: 2e-5 of the reference's magnitude, as scenarios/score.sh
    err = np.abs(x - r).max(); lim = 2e-5 * max(1.0, np.abs(r).max())
    print(("ok - " if err <= lim else "not ok - ") + f"{name}: max abs error {err:.2e} (limit {lim:.2e}, reference spread {np.abs(r).max():.2f})")
with h5py.File(f"{d}/ref.h5") as f: lp, v, s = f["logprobs"][()], f["values"][()], f["scores"][()]
with h5py.File(f"{d}/in.h5") as f: L = f["lengths"][()]
with h5py.File(f"{d}/lp.h5") as f: cmp("imported GPT2LMHeadModel: -mode score log-probabilities = transformers'", f["logprobs"][()], lp)
with h5py.File(f"{d}/v.h5") as f: x = f["values"][()]
cmp("imported GPT2ForSequenceClassification: -mode score values at every position = transformers'", x, v)
cmp("imported GPT2ForSequenceClassification: the reward (value at the last token) = transformers' sequence score", x[np.arange(len(L)), L - 1], s)
PY

# 2. round trips, bit-exact: transformers dir -> rlfuse -> dir, and rlfuse -> dir -> rlfuse
for m in lm:policy rm:reward; do
  k=${m%%:*}; role=${m#*:}
  "$PYTHON" tools/hf_export.py $d/$k.h5 $role $d/rt_$k >$d/exp.log 2>&1 || not_ok "hf_export $role: $(tail -1 $d/exp.log)"
  "$PYTHON" tools/hf_import.py $d/rt_$k $d/rt_$k.h5 $role >$d/imp2.log 2>&1 || not_ok "re-import $role: $(tail -1 $d/imp2.log)"
  check "round trip $role: rlfuse -> Hugging Face -> rlfuse parameters bit-identical (h5diff, no tolerance)" h5diff -q $d/$k.h5 $d/rt_$k.h5 /$role/params /$role/params
done
hfpy - $d <<'PY' && ok "round trip: transformers' save_pretrained tensors -> rlfuse -> hf_export bit-identical, and both load with from_pretrained to the same state" || not_ok "round trip Hugging Face -> rlfuse -> Hugging Face"
import sys, torch
from safetensors.numpy import load_file
from transformers import GPT2LMHeadModel, GPT2ForSequenceClassification
d = sys.argv[1]
for k, cls in (("lm", GPT2LMHeadModel), ("rm", GPT2ForSequenceClassification)):
    a, b = load_file(f"{d}/hf_{k}/model.safetensors"), load_file(f"{d}/rt_{k}/model.safetensors")
    assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
    for n in a: assert a[n].dtype == b[n].dtype and (a[n].view("u4") == b[n].view("u4")).all(), n
    sa, sb = cls.from_pretrained(f"{d}/hf_{k}").state_dict(), cls.from_pretrained(f"{d}/rt_{k}").state_dict()
    assert sorted(sa) == sorted(sb)
    for n in sa: assert torch.equal(sa[n], sb[n]), n
PY

# 3. a PPO actor out to transformers: greedy continuations equal to rlfuse's greedy generation
rlfuse -options_file regression/decks/tiny.deck -output_dir $d/sft -sft_steps 30 -task_len_max 8 >$d/sft.log 2>&1 || not_ok "SFT fixture: $(tail -1 $d/sft.log)"
rlfuse -mode rm -rm_sft_checkpoint $d/sft/final.h5 -output_dir $d/rmt -rm_pairs 48 -rm_eval_pairs 16 -rm_steps 4 -rm_batch 8 \
  -gen_max_new_tokens 12 -gen_slots 8 -task_len_max 8 -seed 7 >$d/rmt.log 2>&1 || not_ok "RM fixture: $(tail -1 $d/rmt.log)"
rlfuse -options_file regression/decks/rlhf_tiny.deck -actor_checkpoint $d/sft/final.h5 -reward_checkpoint $d/rmt/final.h5 \
  -output_dir $d/ppo -ppo_iterations 3 >$d/ppo.log 2>&1 || not_ok "PPO fixture: $(tail -1 $d/ppo.log)"
# one more iteration from the trained actor with greedy decoding: its rollout is rlfuse's greedy generation
rlfuse -options_file regression/decks/rlhf_tiny.deck -restart $d/ppo/final.h5 -ppo_iterations 4 -gen_greedy -dump_rollouts \
  -output_dir $d/greedy >$d/greedy.log 2>&1 || not_ok "greedy rollout: $(tail -1 $d/greedy.log)"
"$PYTHON" tools/hf_export.py $d/ppo/final.h5 actor $d/hf_actor --eos 3 >$d/exp.log 2>&1 || not_ok "hf_export actor: $(tail -1 $d/exp.log)"
check "hf_export of the reference of a PPO checkpoint that records its input file names that file, in one line" bash -c \
  "! \"$PYTHON\" tools/hf_export.py $d/ppo/final.h5 reference $d/hf_ref >$d/exp_ref.log 2>&1 && [ \$(grep -c . $d/exp_ref.log) -eq 1 ] && grep -q 'it is /policy of .*/sft/final.h5' $d/exp_ref.log"
# the role the README and docs/huggingface.md name: a run's policy.h5 holds /policy, its final.h5 /actor
"$PYTHON" tools/hf_export.py $d/ppo/policy.h5 actor $d/hf_pol --eos 3 >$d/exp_pol.log 2>&1
"$PYTHON" tools/hf_export.py $d/ppo/final.h5 policy $d/hf_fin --eos 3 >$d/exp_fin.log 2>&1
check "hf_export policy.h5 actor and final.h5 policy export the file's one LM model, saying which, the same tensors as final.h5 actor ($(head -1 $d/exp_pol.log))" bash -c \
  "grep -q 'policy.h5 holds no /actor: exporting its one LM model, /policy' $d/exp_pol.log && grep -q 'final.h5 holds no /policy: exporting its one LM model, /actor' $d/exp_fin.log &&
   cmp -s $d/hf_pol/model.safetensors $d/hf_actor/model.safetensors && cmp -s $d/hf_fin/model.safetensors $d/hf_actor/model.safetensors"
hfpy - $d <<'PY'
import sys, torch, h5py, numpy as np
from transformers import GPT2LMHeadModel
d = sys.argv[1]
m = GPT2LMHeadModel.from_pretrained(f"{d}/hf_actor").eval()
with h5py.File(f"{d}/greedy/rollouts.h5") as f:
    g = f["iter_3"]; tok, P, R = g["tokens"][()], g["prompt_lengths"][()], g["response_lengths"][()]
bad, margin = [], np.inf
with torch.no_grad():
    for b in range(len(P)):
        x = torch.from_numpy(tok[b:b + 1, :P[b]].astype(np.int64))
        out = m.generate(x, do_sample=False, max_new_tokens=12, eos_token_id=3, pad_token_id=3, output_scores=True, return_dict_in_generate=True)
        hf_resp, ours = out.sequences[0, P[b]:].tolist(), tok[b, P[b]:P[b] + R[b]].tolist()
        for sc in out.scores:  # how far the greedy choices are from a tie
            top2 = torch.topk(sc[0], 2).values; margin = min(margin, float(top2[0] - top2[1]))
        if hf_resp != ours: bad.append((b, ours, hf_resp))
n = len(P)
print(("ok - " if not bad and n >= 8 and len(set(R)) >= 2 else "not ok - ") + f"exported PPO actor in transformers: greedy continuations of {n} prompts (response lengths {R.min()}-{R.max()}) equal rlfuse's greedy generation"
      + (f" (smallest top-2 logit gap {margin:.2e})" if not bad else f"; first difference: sample {bad[0][0]} rlfuse {bad[0][1]} transformers {bad[0][2]}"))
PY

# 3b. the user's text through a tokenizer directory into token files, then SFT and RM data for the imported model
hfpy - $d <<'PY' || not_ok "make a tokenizer and text"
import sys, json
from tokenizers import Tokenizer, models, pre_tokenizers
d = sys.argv[1]
words = "<eos> the a cat dog sat ran on mat log fast slow and then sorted list of numbers one two three four five six seven eight nine".split()
tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<eos>"))
tk.pre_tokenizer = pre_tokenizers.Whitespace()
import os; os.makedirs(f"{d}/tok"); tk.save(f"{d}/tok/tokenizer.json")
with open(f"{d}/demos.jsonl", "w") as f:
    for i in range(16):
        f.write(json.dumps({"prompt": "the cat sat on " + ["the mat", "a log"][i % 2], "response": " ".join(words[9 + i % 5: 14 + i % 7])}) + "\n")
with open(f"{d}/pairs.jsonl", "w") as f:
    for i in range(8):
        f.write(json.dumps({"prompt": "sorted list", "chosen": "one two three", "rejected": "three one " + words[20 + i % 5]}) + "\n")
PY
hfpy tools/hf_tokenize.py $d/tok $d/demos.jsonl $d/demos.h5 --eos 0 --vocab-size 48 >$d/tokz.log 2>&1 || not_ok "hf_tokenize demos: $(tail -1 $d/tokz.log)"
hfpy tools/hf_tokenize.py $d/tok $d/pairs.jsonl $d/pairs.h5 --eos 0 --vocab-size 48 >>$d/tokz.log 2>&1 || not_ok "hf_tokenize pairs: $(tail -1 $d/tokz.log)"
hfpy - $d <<'PY' && ok "hf_tokenize: rows decode back to the text (prompt, response, EOS), prompt_lengths, pairs in chosen/rejected order" || not_ok "hf_tokenize output against the tokenizer"
import sys, json, h5py
from tokenizers import Tokenizer
d = sys.argv[1]; tk = Tokenizer.from_file(f"{d}/tok/tokenizer.json")
for name, fields in (("demos", ("response",)), ("pairs", ("chosen", "rejected"))):
    src = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    with h5py.File(f"{d}/{name}.h5") as f:
        tok, L, P, V = f["tokens"][()], f["lengths"][()], f["prompt_lengths"][()], int(f.attrs["vocab_size"])
    assert V == 48 and len(L) == len(src) * len(fields)
    for i, r in enumerate(src):
        for j, k in enumerate(fields):
            row = i * len(fields) + j
            ids = tok[row, :L[row]].tolist()
            assert tk.decode(ids[:P[row]]) == r["prompt"] and ids[-1] == 0 and tk.decode(ids[P[row]:-1]) == r[k], (row, ids)
            assert (tok[row, L[row]:] == 0).all()
PY
dims="-policy_n_layer 2 -policy_n_head 4 -policy_n_embd 32 -policy_vocab_size 48 -policy_n_positions 24"
rlfuse -mode sft $dims -init_checkpoint $d/lm.h5 -sft_data $d/demos.h5 -sft_steps 6 -sft_batch 4 -output_dir $d/usft >$d/usft.log 2>&1 || not_ok "SFT from the imported model on tokenised text: $(tail -1 $d/usft.log)"
rlfuse -mode rm -rm_sft_checkpoint $d/usft/final.h5 -rm_data $d/pairs.h5 -rm_eval_pairs 2 -rm_steps 3 -rm_batch 2 -gen_eos 0 -output_dir $d/urm >$d/urm.log 2>&1 || not_ok "RM on tokenised pairs: $(tail -1 $d/urm.log)"
check "SFT from an imported transformers model on tokenised text, then RM on tokenised pairs, both finish with a final checkpoint" test -s $d/usft/final.h5 -a -s $d/urm/final.h5

# 4. what rlfuse cannot represent: one line, exit 1, no output file
bad() {  # what, role, edit (python on config c and tensors t), expected message part
  local what=$1 role=$2 src=$3 edit=$4 want=$5 o=$d/bad.h5
  rm -rf $d/badhf; cp -r $d/$src $d/badhf
  hfpy - $d/badhf "$edit" <<'PY' || { not_ok "$what: could not make the input"; return; }
import sys, json
from safetensors.numpy import load_file, save_file
p = sys.argv[1]; c = json.load(open(f"{p}/config.json")); t = load_file(f"{p}/model.safetensors")
exec(sys.argv[2])
json.dump(c, open(f"{p}/config.json", "w")); save_file(t, f"{p}/model.safetensors", metadata={"format": "pt"})
PY
  "$PYTHON" tools/hf_import.py $d/badhf $o $role >$d/bad.out 2>&1; local rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <$d/bad.out)" -eq 1 ] && grep -q "^hf_import: error: .*$want" $d/bad.out && [ ! -e $o ] && ! ls $d/bad.h5.tmp.* >/dev/null 2>&1; then
    ok "$what refused: $(cat $d/bad.out)"
  else not_ok "$what: rc $rc, $(head -2 $d/bad.out)"; fi
}
bad "untied LM head" policy hf_lm 'c["tie_word_embeddings"] = False; t["lm_head.weight"] = t["transformer.wte.weight"] * 2' "tie_word_embeddings"
bad "lm_head tensor differing from wte" policy hf_lm 't["lm_head.weight"] = t["transformer.wte.weight"] + 1' "untied head"
bad "another architecture" policy hf_lm 'c["model_type"] = "gpt_neo"; c["architectures"] = ["GPTNeoForCausalLM"]' "model_type 'gpt_neo'"
bad "another activation" policy hf_lm 'c["activation_function"] = "relu"' "activation_function"
bad "an LM for the reward role" reward hf_lm 'pass' "GPT2ForSequenceClassification"
bad "two labels" reward hf_rm 'c["id2label"] = {"0": "a", "1": "b"}; t["score.weight"] = t["score.weight"].repeat(2, 0)' "2 labels"
bad "a tensor of the wrong shape" policy hf_lm 't["transformer.wpe.weight"] = t["transformer.wpe.weight"][:10]' "transformer.wpe.weight has shape"
"$PYTHON" tools/hf_export.py $d/lm.h5 reward $d/badexp >$d/bad.out 2>&1; rc=$?
check "hf_export of a role the checkpoint lacks: one line naming it, exit 1 ($(cat $d/bad.out))" bash -c "[ $rc -eq 1 ] && [ \"\$(wc -l <$d/bad.out)\" -eq 1 ] && grep -q '^hf_export: error: .*no /reward model' $d/bad.out && [ ! -e $d/badexp ]"
finish
