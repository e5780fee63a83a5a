/* gen/config.c: the generation settings (-gen_*), their checks against a
 * model and the longest prompt, and the KV-cache size they imply. The checks
 * run before any work so that a deck that cannot generate fails at once with
 * a message naming the option to change. */
#include "gen.h"
#include "sys.h"
#include "io.h"
#include <math.h>
#include <stdlib.h>

PetscErrorCode gen_parse_ids(const char *opt, const char *s, int *ids, int *n)
{
  const char *p = s;

  PetscFunctionBegin;
  *n = 0;
  while (*p) {
    char *end;
    long  v = strtol(p, &end, 10);

    PetscCheck(end != p && v >= 0 && v <= INT32_MAX && (*end == ',' || !*end), PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "%s '%s': expected token ids separated by commas, e.g. 2,0", opt, s);
    PetscCheck(*n < GEN_MAX_STOP, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "%s '%s': at most %d token ids", opt, s,
               GEN_MAX_STOP);
    ids[(*n)++] = (int)v;
    p           = *end ? end + 1 : end;
    PetscCheck(*p || !*end, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "%s '%s' ends with a comma", opt, s);
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscBool gen_is_stop(const GenConfig *cfg, int token)
{
  if (token == cfg->eos) return PETSC_TRUE;
  for (int i = 0; i < cfg->nstop; i++)
    if (token == cfg->stop[i]) return PETSC_TRUE;
  return PETSC_FALSE;
}

PetscBool gen_is_turn_stop(const GenEpisode *ep, int token)
{
  for (int i = 0; ep && i < ep->nstop; i++)
    if (token == ep->stop[i]) return PETSC_TRUE;
  return PETSC_FALSE;
}

PetscErrorCode gen_config_set_from_options(GenConfig *cfg)
{
  char      stop[256] = "";
  PetscBool eos_set, stop_set;

  PetscFunctionBegin;
  PetscOptionsBegin(PETSC_COMM_WORLD, "gen_", "Generation (sampling and the decoding engine)", NULL);
  RfOptReal("-temperature", "Sampling temperature: the distribution is softmax(logits / temperature)", 1.0,
            &cfg->temperature);
  RfOptInt("-top_k", "Keep only the k most probable tokens (0: all)", 0, &cfg->top_k);
  RfOptReal("-top_p", "Nucleus sampling: keep the smallest most-probable set with probability mass >= top_p (1: all)",
            1.0, &cfg->top_p);
  RfOptBool("-greedy", "Take the most probable allowed token instead of drawing one", PETSC_FALSE, &cfg->greedy);
  RfOptInt("-max_new_tokens", "Most response tokens per sample (a sample stops there without EOS)", 32,
           &cfg->max_new_tokens);
  RfOptInt("-min_new_tokens", "EOS is not allowed before this many response tokens", 0, &cfg->min_new_tokens);
  RfOptInt("-slots",
           "Samples decoded concurrently (continuous batching: a finished sample's slot takes the next prompt)", 16,
           &cfg->slots);
  RfOptReal("-kv_mb",
            "Bound on the KV cache in MiB (2 * n_layer * slots * (longest prompt + max_new_tokens) * key width floats; "
            "the key width is n_embd, or n_kv_head heads for the LLaMA family)",
            1024.0, &cfg->kv_mb);
  RfOptInt("-eos",
           "End-of-sequence token id (default: the checkpoint's tokenizer's when it has one and the deck sets neither "
           "-gen_eos nor -gen_stop, else 3, the built-in task's)",
           3, &cfg->eos);
  RfOptBool("-share_prompts",
            "Samples admitted in the same step with the same prompt (a GRPO group) prefill it once and copy its keys "
            "and values",
            PETSC_TRUE, &cfg->share_prompts);
  RfOptBool("-batch_invariant",
            "A sequence's tokens and log-probabilities do not depend on the sequences sharing its steps, prefill "
            "included: the forward's matmuls in an order fixed per row (cpu; slower prefills of many rows; changes the "
            "default's last bits)",
            PETSC_FALSE, &cfg->batch_invariant);
  RfOptString("-stop",
              "Further token ids that end a response, comma-separated (e.g. a chat model's end of turn; "
              "-gen_min_new_tokens bans only -gen_eos)",
              stop, sizeof stop);
  PetscOptionsEnd();
  PetscCall(gen_parse_ids("-gen_stop", stop, cfg->stop, &cfg->nstop));
  PetscCall(PetscOptionsHasName(NULL, "gen_", "-eos", &eos_set));
  PetscCall(PetscOptionsHasName(NULL, "gen_", "-stop", &stop_set));
  cfg->stops_from_deck = (PetscBool)(eos_set || stop_set);
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* "a,b,c" of ids, or "none". */
static PetscErrorCode stops_str(const GenConfig *cfg, char *buf, size_t len)
{
  size_t n = 0;

  PetscFunctionBegin;
  PetscCall(PetscStrncpy(buf, cfg->nstop ? "" : "none", len));
  for (int i = 0; i < cfg->nstop; i++) {
    PetscCall(PetscStrlen(buf, &n));
    PetscCall(PetscSNPrintf(buf + n, len - n, "%s%d", i ? "," : "", cfg->stop[i]));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gen_config_stops_from(MPI_Comm comm, GenConfig *cfg, const char *ckpt)
{
  PetscBool   found = PETSC_FALSE;
  int         eos = -1, stop[GEN_MAX_STOP], nstop = 0;
  char        list[GEN_MAX_STOP * 12 + 8], from[PETSC_MAX_PATH_LEN + 64];
  const char *deck = "the deck's -gen_eos/-gen_stop";

  PetscFunctionBegin;
  if (!cfg->stops_from_deck && ckpt && ckpt[0])
    PetscCall(ckpt_read_stops(comm, ckpt, GEN_MAX_STOP, &eos, stop, &nstop, &found));
  if (found && eos < 0 && nstop > 0) { /* no EOS but stop tokens: the first is EOS (-gen_min_new_tokens bans it) */
    eos = stop[0];
    for (int i = 1; i < nstop; i++) stop[i - 1] = stop[i];
    nstop--;
  }
  if (found && eos >= 0) {
    cfg->eos   = eos;
    cfg->nstop = nstop;
    for (int i = 0; i < nstop; i++) cfg->stop[i] = stop[i];
    PetscCall(PetscSNPrintf(from, sizeof from, "checkpoint %s's /tokenizer", ckpt));
    /* the run record and used.deck hold the ids used, so that used.deck repeats the run */
    PetscCall(PetscSNPrintf(list, sizeof list, "%" PetscInt_FMT, cfg->eos));
    PetscCall(sys_param_record("gen_", "-eos", list, PETSC_FALSE));
    PetscCall(stops_str(cfg, list, sizeof list));
    PetscCall(sys_param_record("gen_", "-stop", nstop ? list : "", PETSC_FALSE));
  } else
    PetscCall(PetscSNPrintf(from, sizeof from, "%s",
                            cfg->stops_from_deck ? deck
                            : ckpt && ckpt[0]    ? "-gen_eos's default: the checkpoint has no /tokenizer EOS"
                                                 : "-gen_eos's default"));
  PetscCall(stops_str(cfg, list, sizeof list));
  PetscCall(PetscPrintf(comm, "generation stops at EOS %" PetscInt_FMT " and stop tokens %s (from %s)\n", cfg->eos,
                        list, from));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Settings that do not depend on the model. */
static PetscErrorCode check_sampling(const GenConfig *cfg)
{
  PetscFunctionBegin;
  PetscCheck(cfg->temperature > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_temperature %g must be positive (use -gen_greedy for argmax decoding)", (double)cfg->temperature);
  PetscCheck(cfg->top_p > 0 && cfg->top_p <= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_top_p %g must be in (0, 1]", (double)cfg->top_p);
  PetscCheck(cfg->max_new_tokens >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_max_new_tokens %" PetscInt_FMT " must be at least 1", cfg->max_new_tokens);
  PetscCheck(cfg->min_new_tokens >= 0 && cfg->min_new_tokens <= cfg->max_new_tokens, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_min_new_tokens %" PetscInt_FMT " must be in [0, -gen_max_new_tokens %" PetscInt_FMT "]",
             cfg->min_new_tokens, cfg->max_new_tokens);
  PetscCheck(cfg->slots >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_slots %" PetscInt_FMT " must be at least 1", cfg->slots);
  PetscCheck(cfg->kv_mb > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-gen_kv_mb %g must be positive",
             (double)cfg->kv_mb);
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode gen_config_check(const GenConfig *cfg, const ModelConfig *model, const char *prefix, int max_prompt_len)
{
  const char *p    = prefix ? prefix : "";
  int         Tmax = max_prompt_len + (int)cfg->max_new_tokens;
  double      need, have, per_slot;
  char        sneed[32], shave[32];

  PetscFunctionBegin;
  PetscCall(check_sampling(cfg));
  PetscCheck(model->head == MODEL_HEAD_LM, PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG, "-%shead must be lm to generate", p);
  PetscCheck(cfg->top_k >= 0 && cfg->top_k <= model->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_top_k %" PetscInt_FMT " must be in [0, -%svocab_size %d]", cfg->top_k, p, model->vocab_size);
  PetscCheck(cfg->eos >= 0 && cfg->eos < model->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "-gen_eos %" PetscInt_FMT " is not a token of -%svocab_size %d", cfg->eos, p, model->vocab_size);
  for (int i = 0; i < cfg->nstop; i++)
    PetscCheck(cfg->stop[i] < model->vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
               "-gen_stop: token %d is not a token of -%svocab_size %d", cfg->stop[i], p, model->vocab_size);
  PetscCheck(max_prompt_len >= 1, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "the longest prompt has %d tokens; prompts need at least 1", max_prompt_len);
  PetscCheck(Tmax <= model->n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-gen_max_new_tokens %" PetscInt_FMT " plus the longest prompt (%d tokens) exceeds -%sn_positions %d",
             cfg->max_new_tokens, max_prompt_len, p, model->n_positions);
  need     = (double)gen_kv_bytes(cfg, model, Tmax);
  have     = (double)cfg->kv_mb * 1024.0 * 1024.0;
  per_slot = need / (double)cfg->slots;
  PetscCheck(need <= have || have < per_slot, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "the KV cache needs %s for -gen_slots %" PetscInt_FMT
             " x %d positions, more than -gen_kv_mb %g (%s); use -gen_slots %.0f or fewer, or raise -gen_kv_mb",
             sys_bytes_str(need, sneed, sizeof sneed), cfg->slots, Tmax, (double)cfg->kv_mb,
             sys_bytes_str(have, shave, sizeof shave), floor(have / per_slot));
  PetscCheck(need <= have, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "the KV cache needs %s for one slot of %d positions, more than -gen_kv_mb %g (%s); raise -gen_kv_mb",
             sys_bytes_str(per_slot, sneed, sizeof sneed), Tmax, (double)cfg->kv_mb,
             sys_bytes_str(have, shave, sizeof shave));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscBool gen_masked(const GenConfig *cfg)
{
  return cfg->top_k > 0 || cfg->top_p < 1 || cfg->min_new_tokens > 0 ? PETSC_TRUE : PETSC_FALSE;
}

size_t gen_kv_bytes(const GenConfig *cfg, const ModelConfig *model, int Tmax)
{
  return 2 * (size_t)model->n_layer * (size_t)cfg->slots * (size_t)Tmax *
         ((size_t)model_head_dim(model) * (size_t)model_n_kv_head(model)) * sizeof(float);
}
