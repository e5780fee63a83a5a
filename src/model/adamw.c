/* adamw.c: the learning-rate schedule (linear warm-up, then cosine to a floor)
 * and one AdamW step with global-norm gradient clipping, with the semantics of
 * torch.optim.AdamW and torch.nn.utils.clip_grad_norm_; plus the FLOP count
 * used for MFU reports. */
#include <math.h>

#include "model_impl.h"

PetscReal adamw_lr(const AdamWConfig *opt, int step)
{
  PetscReal progress, r = opt->min_lr_ratio;

  if (step < opt->warmup) return opt->lr * (PetscReal)(step + 1) / (PetscReal)opt->warmup;
  if (opt->decay_steps <= 0) return opt->lr;
  progress = PetscMin((PetscReal)1, (PetscReal)(step - opt->warmup) / (PetscReal)opt->decay_steps);
  return opt->lr * (r + (1 - r) * 0.5 * (1 + PetscCosReal(PETSC_PI * progress)));
}

PetscErrorCode model_grad_norm(Model *lm, PetscReal *grad_norm)
{
  double ss;

  PetscFunctionBegin;
  PetscCall(model_grads_sync(lm));
  PetscCall(model_grad_sumsq(lm, &ss));
  *grad_norm = PetscSqrtReal((PetscReal)ss);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_adamw_update(Model *lm, const AdamWConfig *opt, PetscReal norm, PetscReal *lr_used)
{
  const Backend *be = lm->be;
  PetscReal      lr, gs = 1;

  PetscFunctionBegin;
  PetscCall(model_grads_sync(lm)); /* a no-op after model_grad_norm */
  if (!lm->m || !lm->v) PetscCall(model_optim_init(lm));
  /* A non-finite norm is not turned into a zero scale here; callers that
   * must not apply such a step check the norm first (trainer_step). */
  if (opt->grad_clip > 0 && norm > opt->grad_clip) gs = opt->grad_clip / (norm + 1e-6);
  lr = adamw_lr(opt, lm->step);
  /* this rank's range of the flat buffer (all of it unless ZeRO-1), tensor by tensor */
  for (int i = 0; i < lm->ntensors; i++) {
    const ModelTensor *t  = &lm->tensors[i];
    PetscReal        wd = t->decay ? opt->weight_decay : 0;
    size_t           lo = PetscMax(t->offset, lm->own0), hi = PetscMin(t->offset + t->numel, lm->own1);

    if (hi <= lo) continue;
    PetscCall(be->adamw(lm->params + lo, lm->grads + lo, lm->m + (lo - lm->own0), lm->v + (lo - lm->own0), hi - lo,
                        (float)lr, (float)opt->beta1, (float)opt->beta2, (float)opt->eps, (float)wd, lm->step + 1,
                        (float)gs));
  }
  PetscCall(model_params_share(lm));
  lm->grads_synced = PETSC_FALSE;
  lm->step += 1;
  if (lr_used) *lr_used = lr;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode model_adamw_step(Model *lm, const AdamWConfig *opt, PetscReal *lr_used, PetscReal *grad_norm)
{
  PetscReal norm = 0;

  PetscFunctionBegin;
  PetscCall(model_grad_norm(lm, &norm));
  PetscCall(model_adamw_update(lm, opt, norm, lr_used));
  if (grad_norm) *grad_norm = norm;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* FLOPs per token, counting a multiply-add as 2 (the PaLM appendix-B
 * convention, as in llm.c and nanoGPT):
 *   forward  = 2 * P_mm + 4 * L * T * C
 * where P_mm is the number of weights that take part in a matmul per token:
 * GPT-2 L * 12 C^2 (c_attn 3C^2, attn.c_proj C^2, c_fc 4C^2, mlp.c_proj
 * 4C^2), LLaMA L * (2 C Q + 2 C Ckv + 3 C F) (q and o, k and v, gate, up
 * and down; Q = n_head * head_dim, C unless Qwen3 sets head_dim), plus the
 * head (V*C for the LM head, C for the scalar head); 4 L T Q is Q.K^T plus
 * att.V over the full (not causally halved) T x T window. Embeddings, norms, biases, activations and softmax are
 * ignored. training = 3 * forward (the backward costs twice the forward). */
double model_flops_per_token(const ModelConfig *cfg, int T, PetscBool training)
{
  double L = cfg->n_layer, C = cfg->n_embd, V = cfg->vocab_size, Q = model_q_width(cfg),
         kv = (double)model_head_dim(cfg) * model_n_kv_head(cfg), F = model_n_ffn(cfg);
  double layer = 2.0 * C * Q + 2.0 * C * kv +
                 (model_arch(cfg)->mlp == MODEL_MLP_SWIGLU ? 3.0 : 2.0) * C * F; /* GPT-2: 12 C^2 exactly */
  double p_mm    = L * layer + (cfg->head == MODEL_HEAD_LM ? V * C : C);
  double forward = 2.0 * p_mm + 4.0 * L * (double)T * Q;

  return training ? 3.0 * forward : forward;
}
