/* cost/hardware.c: analytic primitives from a hardware description deck
 * (input/hardware/NAME.deck), for machines this code cannot run on here.
 * Compute is the roofline of each part: the larger of its FLOPs at the
 * achievable fraction of peak and its memory traffic at the achievable
 * fraction of the memory bandwidth, plus a fixed launch time per part;
 * collectives are the alpha-beta ring model on the intra-node or the
 * inter-node link (docs/costmodel.md). */
#include "cost_impl.h"
#include <stdio.h>

typedef struct {
  double peak, eff_compute, mem_bw, eff_memory, launch;
  double intra_bw, intra_lat, inter_bw, inter_lat, eff_intra, eff_inter;
  double bytes_per_param;
} HwCtx;

/* Bytes one part reads and writes in one pass (weights once, activations
 * once per kernel, the KV cache), on one rank of a tp group. */
static double hw_bytes(const HwCtx *hw, const CostShape *m, CostPart part, CostPhase ph, int tp, double rows,
                       double len)
{
  double b = hw->bytes_per_param, h = m->n_embd, tokens = ph == COST_DECODE ? rows : rows * len;
  double kv = 2.0 * cost_kv_width(m), x = 0;

  switch (part) {
  case COST_PART_EMBED: x = 2 * tokens * h * b; break; /* gathered rows in, the residual stream out */
  case COST_PART_BLOCK:
    /* weights; the residual stream, norms and projections' inputs and
     * outputs (about 8h replicated, 12h + 4f split over tp) per token; the
     * KV cache read by a decode step, written by a prefill */
    x = cost_part_params(m, COST_PART_BLOCK) * b / tp + tokens * (8 * h + (12 * h + 4.0 * m->n_ffn) / tp) * b;
    if (ph == COST_DECODE) x += rows * len * kv * b / cost_kv_ranks(m, tp);
    if (ph == COST_PREFILL) x += tokens * kv * b / cost_kv_ranks(m, tp);
    break;
  default: /* weights and the logits, fp32, written and read */
    x = cost_part_params(m, COST_PART_HEAD) * b / tp + tokens * (m->value_head ? 1 : m->vocab_size) / (double)tp * 8;
    break;
  }
  return ph == COST_BWD ? 2 * x : x;
}

static double hw_compute(void *ctx, const CostShape *m, CostPart part, CostPhase ph, int tp, double rows, double len)
{
  const HwCtx *hw = ctx;
  double       t_flops, t_bytes;

  if (rows <= 0) return 0;
  t_flops = cost_flops(m, part, ph, rows, len) / tp / (hw->peak * hw->eff_compute);
  t_bytes = hw_bytes(hw, m, part, ph, tp, rows, len) / (hw->mem_bw * hw->eff_memory);
  return PetscMax(t_flops, t_bytes) + hw->launch * (ph == COST_BWD ? 2 : 1);
}

/* AdamW: memory bound; per parameter it reads the gradient, the fp32
 * master weight and both moments and writes the last three and the weight:
 * 28 bytes whether the weights are fp32 or bf16 with fp32 masters. */
static double hw_optimizer(void *ctx, double nparams)
{
  const HwCtx *hw = ctx;
  return nparams * 28 / (hw->mem_bw * hw->eff_memory);
}

/* The ring: an all-reduce is 2(n-1) steps of bytes/n each, an all-gather
 * n-1 of them, a broadcast pipelined along the ring moves the message once
 * per link, a point-to-point message once. */
static double hw_coll(void *ctx, CostColl op, int n, PetscBool internode, double bytes)
{
  const HwCtx *hw  = ctx;
  double       bw  = internode ? hw->inter_bw * hw->eff_inter : hw->intra_bw * hw->eff_intra;
  double       lat = internode ? hw->inter_lat : hw->intra_lat;

  if (op != COST_P2P && n <= 1) return 0;
  switch (op) {
  case COST_ALLREDUCE: return 2.0 * (n - 1) * lat + 2.0 * (n - 1) / n * bytes / bw;
  case COST_ALLGATHER: return (double)(n - 1) * lat + (double)(n - 1) / n * bytes / bw;
  case COST_BCAST: return (double)(n - 1) * lat + bytes / bw;
  default: return lat + bytes / bw;
  }
}

static PetscErrorCode hw_destroy(void *ctx)
{
  PetscFunctionBegin;
  PetscCall(PetscFree(ctx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* A required positive value of the deck. */
static PetscErrorCode hw_get(PetscOptions opts, const char *deck, const char *name, double *v)
{
  PetscBool set;
  PetscReal x = 0;

  PetscFunctionBegin;
  PetscCall(PetscOptionsGetReal(opts, NULL, name, &x, &set));
  PetscCheck(set, PETSC_COMM_SELF, PETSC_ERR_ARG_WRONG, "hardware description %s: %s is missing", deck, name);
  PetscCheck(x > 0 && PetscIsNormalReal(x), PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "hardware description %s: %s %g must be a positive number", deck, name, (double)x);
  *v = x;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode cost_prims_hardware(const char *deck, CostPrims *p)
{
  PetscOptions opts;
  HwCtx       *hw;
  FILE        *f = fopen(deck, "r");
  double       dev, mem, usable, host_bw, host_eff;

  PetscFunctionBegin;
  PetscCheck(f, PETSC_COMM_SELF, PETSC_ERR_FILE_OPEN, "hardware description %s: cannot be read", deck);
  fclose(f);
  PetscCall(PetscOptionsCreate(&opts));
  PetscCall(PetscOptionsInsertFile(PETSC_COMM_SELF, opts, deck, PETSC_TRUE));
  PetscCall(PetscNew(&hw));
  PetscCall(hw_get(opts, deck, "-hw_devices_per_node", &dev));
  PetscCall(hw_get(opts, deck, "-hw_mem_per_device", &mem));
  PetscCall(hw_get(opts, deck, "-hw_mem_usable", &usable));
  PetscCall(hw_get(opts, deck, "-hw_peak_flops", &hw->peak));
  PetscCall(hw_get(opts, deck, "-hw_eff_compute", &hw->eff_compute));
  PetscCall(hw_get(opts, deck, "-hw_mem_bw", &hw->mem_bw));
  PetscCall(hw_get(opts, deck, "-hw_eff_memory", &hw->eff_memory));
  PetscCall(hw_get(opts, deck, "-hw_launch", &hw->launch));
  PetscCall(hw_get(opts, deck, "-hw_intra_bw", &hw->intra_bw));
  PetscCall(hw_get(opts, deck, "-hw_intra_latency", &hw->intra_lat));
  PetscCall(hw_get(opts, deck, "-hw_eff_intra", &hw->eff_intra));
  PetscCall(hw_get(opts, deck, "-hw_inter_bw", &hw->inter_bw));
  PetscCall(hw_get(opts, deck, "-hw_inter_latency", &hw->inter_lat));
  PetscCall(hw_get(opts, deck, "-hw_eff_inter", &hw->eff_inter));
  PetscCall(hw_get(opts, deck, "-hw_bytes_per_param", &hw->bytes_per_param));
  PetscCall(hw_get(opts, deck, "-hw_host_bw", &host_bw));
  PetscCall(hw_get(opts, deck, "-hw_eff_host", &host_eff));
  PetscCall(PetscOptionsDestroy(&opts));
  PetscCheck(dev == (int)dev && usable <= 1 && hw->eff_compute <= 1 && hw->eff_memory <= 1 && hw->eff_intra <= 1 &&
                 hw->eff_inter <= 1,
             PETSC_COMM_SELF, PETSC_ERR_ARG_OUTOFRANGE,
             "hardware description %s: -hw_devices_per_node must be an integer and -hw_mem_usable and the -hw_eff_* "
             "fractions at most 1",
             deck);
  PetscCall(PetscMemzero(p, sizeof *p));
  PetscCall(PetscSNPrintf(p->source, sizeof p->source, "hardware %s", deck));
  p->ctx             = hw;
  p->ranks_per_node  = (int)dev;
  p->mem_per_rank    = mem * usable;
  p->bytes_per_param = hw->bytes_per_param;
  p->host_bw         = host_bw * host_eff;
  p->compute         = hw_compute;
  p->optimizer       = hw_optimizer;
  p->coll            = hw_coll;
  p->destroy         = hw_destroy;
  PetscFunctionReturn(PETSC_SUCCESS);
}
