#!/usr/bin/env python3
"""TRL's GRPOTrainer on one GPU, random weights of a named shape (shapes.py), plain HF generation
(no vLLM), in input/bench/grpo.deck's setting: 8 prompts x 8 completions a step, prompts of
exactly PROMPT (64) tokens, bf16, temperature 0.7, beta 0.001 (a reference model), lr 5e-6, a
numeric rule reward on word problems; every completion runs all NEW tokens (EOS banned by
min_new_tokens).

  python3 trl_grpo.py TOKENIZER_DIR WORK_DIR SHAPE NEW [STEPS (2)] [PROMPT (64)]

TOKENIZER_DIR holds tokenizer.json (make_tokenizer.py; SmolLM2's 49,152 tokens, whose ids the
larger vocabularies' models also sample from). The first step carries the warm-up; the summary's
step_s is the median of the later ones (NA with STEPS 1). Prints one line per step (with TRL's
logged completion lengths, which show that every completion ran NEW tokens) and a summary."""
import os, sys, time, random, re, statistics, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shapes import llama_config
from datasets import Dataset
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

if len(sys.argv) < 5:
    sys.exit(__doc__)
tokdir, work, shape, new = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
steps = int(sys.argv[5]) if len(sys.argv) > 5 else 2
plen = int(sys.argv[6]) if len(sys.argv) > 6 else 64
tok = PreTrainedTokenizerFast(tokenizer_file=f"{tokdir}/tokenizer.json", bos_token="<|im_start|>", eos_token="<|im_end|>",
                              pad_token="<|im_end|>", unk_token="<|endoftext|>")
assert tok(text=["sam has 16 cookies"])["input_ids"][0], "the tokenizer encodes nothing"
torch.manual_seed(0)
LlamaForCausalLM(llama_config(shape, bos_token_id=1, eos_token_id=2, pad_token_id=2)).save_pretrained(f"{work}/model")
tok.save_pretrained(f"{work}/model")


def ntok(text):
    return len(tok(text=[text])["input_ids"][0])


def padded(text):
    """The text lengthened by filler words to exactly plen tokens (rlfuse's prompts are plen ids)."""
    while ntok(text) < plen:
        text += " so"
    if ntok(text) != plen:
        sys.exit(f"trl_grpo: error: prompt {text[:60]!r}... is {ntok(text)} tokens, not {plen}")
    return text


random.seed(1)
rows = []
for _ in range(512):
    a, b = random.randint(1, 20), random.randint(1, 20)
    rows.append({"prompt": padded(f"{random.choice(['sam', 'ana', 'li'])} has {a} {random.choice(['cookies', 'cards'])} and gets {b} more. "
                                  "how many? Answer with just the number."), "answer": str(a + b)})


def reward(completions, answer, **kw):
    out = []
    for c, a in zip(completions, answer):
        n = re.findall(r"-?\d+", c)
        out.append(1.0 if n and n[-1] == a else 0.0)
    return out


class Times(TrainerCallback):
    def __init__(self):
        self.t, self.steps, self.logs = None, [], {}

    def on_step_begin(self, args, state, control, **kw):
        torch.cuda.synchronize(); self.t = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and any(k.startswith("completions/") for k in logs):  # not the closing train_runtime record
            self.logs = logs

    def on_step_end(self, args, state, control, **kw):
        torch.cuda.synchronize(); self.steps.append(time.perf_counter() - self.t)
        print(f"trl-grpo step={state.global_step} s={self.steps[-1]:.3f}", flush=True)

    def on_train_end(self, args, state, control, **kw):
        lens = {k: v for k, v in self.logs.items() if k.startswith("completions/") and "length" in k}
        print("trl-grpo last-log " + " ".join(f"{k.replace('completions/', '')}={v}" for k, v in sorted(lens.items())), flush=True)


cb = Times()
args = GRPOConfig(output_dir=f"{work}/run", per_device_train_batch_size=64, num_generations=8, gradient_accumulation_steps=1,
                  max_completion_length=new, learning_rate=5e-6, beta=0.001, temperature=0.7, bf16=True, max_steps=steps,
                  logging_steps=1, report_to="none", save_strategy="no", use_vllm=False, seed=1,
                  generation_kwargs={"min_new_tokens": new})
tr = GRPOTrainer(model=f"{work}/model", reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                 processing_class=tok, callbacks=[cb])
t0 = time.perf_counter(); tr.train(); t1 = time.perf_counter()
later = cb.steps[1:]
print(f"trl-grpo summary shape={shape} new={new} prompt={plen} completions_per_step=64 steps={len(cb.steps)} "
      f"step_s={f'{statistics.median(later):.3f}' if later else 'NA'} first_step_s={cb.steps[0]:.3f} train_wall_s={t1 - t0:.1f}", flush=True)
