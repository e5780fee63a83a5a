/* cost/shape.c: model shapes for the cost model: GPT-2 from this code's
 * configuration, the LLaMA family by name, parameter counts per part and
 * per pipeline stage, and the FLOPs of each part (docs/costmodel.md). */
#include "cost_impl.h"
#include <string.h>

const char *const cost_part_names[]  = {"embed", "block", "head"};
const char *const cost_phase_names[] = {"fwd", "bwd", "prefill", "decode"};
const char *const cost_coll_names[]  = {"allreduce", "allgather", "bcast", "p2p"};

PetscErrorCode cost_prims_destroy(CostPrims *p)
{
  PetscFunctionBegin;
  if (p->destroy && p->ctx) PetscCall(p->destroy(p->ctx));
  p->ctx = NULL;
  PetscFunctionReturn(PETSC_SUCCESS);
}

void cost_shape_from_model(const ModelConfig *cfg, CostShape *m)
{
  *m = (CostShape){
    cfg->n_layer,
    cfg->n_embd,
    cfg->n_head,
    model_n_kv_head(cfg),
    model_n_ffn(cfg),
    cfg->vocab_size,
    cfg->n_positions,
    model_arch(cfg)->mlp ==
        MODEL_MLP_SWIGLU, /* the cost model's LLaMA shape: gated MLP (with RMSNorm, rotary positions, no wpe) */
    cfg->head == MODEL_HEAD_SCALAR ? PETSC_TRUE : PETSC_FALSE,
    model_head_dim(cfg)
  };
}

void cost_shape_to_model(const CostShape *m, ModelConfig *cfg)
{
  memset(cfg, 0, sizeof *cfg);
  cfg->n_layer     = m->n_layer;
  cfg->n_head      = m->n_head;
  cfg->n_embd      = m->n_embd;
  cfg->vocab_size  = m->vocab_size;
  cfg->n_positions = m->n_positions;
  cfg->head        = m->value_head ? MODEL_HEAD_SCALAR : MODEL_HEAD_LM;
  if (!m->gated) return;
  cfg->arch       = MODEL_ARCH_LLAMA; /* LLaMA-shaped: untied, as the cost model counts it */
  cfg->n_kv_head  = m->n_kv_head;
  cfg->n_ffn      = m->n_ffn;
  cfg->head_dim   = cost_head_dim(m);
  cfg->rope_theta = 10000;
  cfg->norm_eps   = 1e-5;
}

/* The published configurations (Hugging Face config.json of each model). */
static const struct {
  const char *name;
  int         n_layer, n_embd, n_head, n_kv_head, n_ffn, vocab, n_positions;
} named[] = {
  {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096},
  {"llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096},
  {"codellama-34b", 48, 8192, 64, 8, 22016, 32000, 16384},
  {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096},
  {"llama-13b", 40, 5120, 40, 40, 13824, 32000, 2048},
  {"llama-33b", 60, 6656, 52, 52, 17920, 32000, 2048},
  {"llama-65b", 80, 8192, 64, 64, 22016, 32000, 2048},
};

PetscErrorCode cost_shape_named(const char *opt, const char *name, PetscBool value_head, CostShape *m)
{
  PetscFunctionBegin;
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
    if (!strcmp(named[i].name, name)) {
      *m = (CostShape){ named[i].n_layer, named[i].n_embd,      named[i].n_head, named[i].n_kv_head, named[i].n_ffn,
                        named[i].vocab,   named[i].n_positions, PETSC_TRUE,      value_head,         0 };
      PetscFunctionReturn(PETSC_SUCCESS);
    }
  SETERRQ(PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG,
          "%s '%s': unknown shape (llama2-7b, llama2-13b, codellama-34b, llama2-70b, llama-13b, llama-33b, llama-65b)",
          opt, name);
}

/* Width of the keys and values together (grouped-query attention). */
static double kv_width(const CostShape *m) { return cost_kv_width(m); }

/* Weights of a block's matrix multiplications: q, k, v and o, the MLP. */
static double block_matmul(const CostShape *m)
{
  double h = m->n_embd, f = m->n_ffn, q = cost_q_width(m);
  return h * (q + 2 * kv_width(m)) + q * h + (m->gated ? 3 : 2) * h * f;
}

double cost_part_params(const CostShape *m, CostPart part)
{
  double h = m->n_embd, V = m->vocab_size;
  switch (part) {
  case COST_PART_EMBED: return V * h + (m->gated ? 0 : (double)m->n_positions * h);
  case COST_PART_BLOCK: return block_matmul(m) + (m->gated ? 2 * h : 4 * h + (h + 2 * kv_width(m)) + h + m->n_ffn + h);
  default: return (m->gated ? h : 2 * h) + (m->value_head ? h : V * h);
  }
}

double cost_shape_params(const CostShape *m)
{
  double tied = !m->gated && !m->value_head ? (double)m->vocab_size * m->n_embd : 0;
  return cost_part_params(m, COST_PART_EMBED) + m->n_layer * cost_part_params(m, COST_PART_BLOCK) +
         cost_part_params(m, COST_PART_HEAD) - tied;
}

int cost_stage_layers(const CostShape *m, int pp, int s)
{
  if (!m->gated) {
    ModelConfig cfg;
    int       l0, l1;
    cost_shape_to_model(m, &cfg);
    model_stage_layers(&cfg, pp, s, &l0, &l1);
    return l1 - l0;
  }
  return m->n_layer / pp + (s < m->n_layer % pp ? 1 : 0);
}

double cost_stage_params(const CostShape *m, int tp, int pp, int s)
{
  double n = cost_stage_layers(m, pp, s) * cost_part_params(m, COST_PART_BLOCK);
  if (s == 0) n += cost_part_params(m, COST_PART_EMBED);
  if (s == pp - 1 && (pp > 1 || m->gated || m->value_head)) n += cost_part_params(m, COST_PART_HEAD);
  else if (s == pp - 1)
    n += cost_part_params(m, COST_PART_HEAD) - (double)m->vocab_size * m->n_embd; /* one rank: the head is wte itself */
  /* k and v weights replicated beyond the kv heads: each rank holds a head's */
  return n / tp + cost_stage_layers(m, pp, s) * 2 * m->n_embd * kv_width(m) * (1 / cost_kv_ranks(m, tp) - 1.0 / tp);
}

double cost_flops(const CostShape *m, CostPart part, CostPhase ph, double rows, double len)
{
  double h = m->n_embd, tokens = ph == COST_DECODE ? rows : rows * len, f = 0;
  switch (part) {
  case COST_PART_EMBED: f = 0; break; /* a gather */
  case COST_PART_BLOCK:
    /* 2 FLOPs per weight per token, and q.k and p.v over the causal context:
     * 2*2*q per (query, key) pair (q the query width); len(len+1)/2 pairs
     * in a forward over len tokens, len pairs for one decoded token */
    f = 2 * block_matmul(m) * tokens + 4 * cost_q_width(m) * rows * (ph == COST_DECODE ? len : len * (len + 1) / 2);
    break;
  default: f = 2 * h * (m->value_head ? 1 : m->vocab_size) * tokens; break;
  }
  return ph == COST_BWD ? 2 * f : f;
}
