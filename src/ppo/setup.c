/* What a PPO run reads and checks before its first iteration (ppo_impl.h):
 * where each model comes from (the SFT and RM checkpoints, or the restart
 * file), their configurations checked against each other and the task, the
 * prompts, the plan (searched with -placement auto) and the models loaded
 * on their meshes; -dry_run's line and the cost model's description of the
 * job (-mode plan). */
#include "ppo_impl.h"
#include "async/async.h"
#include "search.h"

/* Whether a critic is loaded and trained: PPO's, and not in -mode eval. */
static PetscBool ppo_trains_critic(const PPOOptions *o)
{
  return ppo_algo(o)->has_critic && !o->eval_only ? PETSC_TRUE : PETSC_FALSE;
}

static void ppo_sources(const PPOOptions *o, ModelSource src[4])
{
  const char *ref = o->reference_ckpt[0] ? o->reference_ckpt : o->actor_ckpt;
  if (o->restart[0]) {
    src[0] = (ModelSource){o->restart, "actor", PETSC_FALSE};
    src[1] = (ModelSource){o->restart, "critic", PETSC_FALSE};
    src[2] = o->reference_sourced ? (ModelSource){ o->reference_source.abspath, o->reference_source.role, PETSC_FALSE }
                                  : (ModelSource){ o->restart, "reference", PETSC_FALSE };
    src[3] = (ModelSource){o->restart, "reward", PETSC_FALSE};
    return;
  }
  src[0] = (ModelSource){o->actor_ckpt, "policy", PETSC_FALSE};
  src[1] = o->critic_init == CRITIC_FROM_REWARD ? (ModelSource){ o->reward.checkpoint, "reward", PETSC_FALSE }
                                                : (ModelSource){ o->actor_ckpt, "policy", PETSC_TRUE };
  src[2] = (ModelSource){ref, "policy", PETSC_FALSE};
  src[3] = (ModelSource){o->reward.checkpoint, "reward", PETSC_FALSE};
}

static const char *const model_names[4] = {"actor", "critic", "reference", "reward"};

/* The frozen reference is the weights of an input file: checkpoints record
 * that file (/reference_source: its paths, role and checksum) instead of a
 * copy, and a restart reads it again after checking it is unchanged. Not
 * when -mode pipeline made the file (its SFT stage's output, which a rerun
 * may replace) or a restart's checkpoint carries the weights itself (then
 * its checkpoints do too). record: a fresh run's file is hashed (not for a
 * dry run or -mode eval, which write no checkpoint). */
static PetscErrorCode ppo_reference_source(const RunCtx *run, PPOOptions *o, PetscBool record)
{
  PetscFunctionBegin;
  o->reference_sourced = PETSC_FALSE;
  if (o->restart[0])
    PetscCall(ckpt_read_source(run->comm, "-restart", o->restart, "reference", &o->reference_source,
                               &o->reference_sourced));
  else if (record && !o->reference_made_here && !o->eval_only) {
    PetscCall(ckpt_source_make(run->comm, o->reference_ckpt[0] ? "-reference_checkpoint" : "-actor_checkpoint",
                               o->reference_ckpt[0] ? o->reference_ckpt : o->actor_ckpt, "policy", "reference",
                               &o->reference_source));
    o->reference_sourced = PETSC_TRUE;
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Configurations from the files, checked against each other and the task
 * before anything is allocated; with policy (-mode pipeline, before the SFT
 * and RM checkpoints exist) every model has the SFT architecture, as those
 * stages will write it, with its own head. */
static PetscErrorCode ppo_configs(const RunCtx *run, const PPOOptions *o, const ModelSource src[4],
                                  const ModelConfig *policy, int max_prompt, ModelConfig cfg[4])
{
  const ModelHead head[4] = {MODEL_HEAD_LM, MODEL_HEAD_SCALAR, MODEL_HEAD_LM, MODEL_HEAD_SCALAR};
  int           T       = max_prompt + (int)o->gen.max_new_tokens;

  PetscFunctionBegin;
  for (int k = 0; k < 4; k++) {
    const char *from = policy ? "the -policy_ options" : src[k].file;
    if (k == 1 && !ppo_trains_critic(o)) continue;
    if (k == 3 && !o->has_reward_model) {
      cfg[3] = cfg[0]; /* unused: no reward model */
      continue;
    }
    if (policy) cfg[k] = *policy;
    else PetscCall(ckpt_read_config(run->comm, src[k].file, src[k].role, &cfg[k]));
    if (src[k].trunk_only || policy) cfg[k].head = head[k];
    PetscCheck(cfg[k].head == head[k], PETSC_COMM_WORLD, PETSC_ERR_ARG_WRONG,
               "checkpoint %s /%s has the %s head; the %s needs the %s head", src[k].file, src[k].role,
               ModelHeadNames[cfg[k].head], model_names[k], ModelHeadNames[head[k]]);
    PetscCheck(cfg[k].vocab_size == cfg[0].vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "vocabulary mismatch: the %s (%s) has %d tokens, the actor (%s) %d", model_names[k], src[k].file,
               cfg[k].vocab_size, src[0].file, cfg[0].vocab_size);
    PetscCheck(T <= cfg[k].n_positions, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "the %s (%s) has n_positions %d, fewer than the longest prompt (%d tokens) plus -gen_max_new_tokens "
               "%" PetscInt_FMT,
               model_names[k], from, cfg[k].n_positions, max_prompt, o->gen.max_new_tokens);
  }
  PetscCall(gen_config_check(&o->gen, &cfg[0], policy ? "policy_" : "actor_", max_prompt));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The plan's needs: the model of each call and the sequences it splits. */
static void ppo_needs(const PPOOptions *o, const ModelConfig cfg[4], PlanNeeds *needs)
{
  int mini = (int)(o->rollout_batch / o->minibatches), B = (int)o->rollout_batch;

  PetscMemzero(needs, sizeof *needs);
  needs->cfg[MFC_ACTOR_GEN] = needs->cfg[MFC_ACTOR_TRAIN] = &cfg[0];
  needs->cfg[MFC_REF_INF]   = &cfg[2];
  needs->cfg[MFC_REW_INF]   = &cfg[3];
  if (ppo_trains_critic(o)) needs->cfg[MFC_CRITIC_INF] = needs->cfg[MFC_CRITIC_TRAIN] = &cfg[1];
  if (!o->has_reward_model) needs->cfg[MFC_REW_INF] = NULL;
  needs->batch[MFC_ACTOR_GEN] = needs->batch[MFC_REF_INF] = needs->batch[MFC_REW_INF] = needs
                                                                                            ->batch[MFC_CRITIC_INF] = B;
  needs->batch[MFC_ACTOR_TRAIN] = needs->batch[MFC_CRITIC_TRAIN] = mini;
}

/* A frozen model goes to host memory between its calls when -plan_offload
 * is on and another call in use shares a rank with it. */
static PetscBool ppo_offloads(const PPOOptions *o, const PlanNeeds *needs, MFCId c)
{
  if (!o->plan.offload) return PETSC_FALSE;
  for (int k = 0; k < MFC_COUNT; k++)
    if (k != (int)c && needs->cfg[k] && plan_overlap(&o->plan, c, (MFCId)k)) return PETSC_TRUE;
  return PETSC_FALSE;
}

/* Places the models on their meshes (every rank in the same order) and
 * reads them; each member keeps its shard. */
PetscErrorCode ppo_load(const RunCtx *run, const Backend *be, const PPOOptions *o, const PPOSetup *s, PPOModels *m,
                        CkptState *st)
{
  const PlanNeeds   *needs = &s->needs;
  const ModelSource *src   = s->src;
  const ModelConfig *cfg   = s->cfg;
  const Plan *plan    = &o->plan;
  PetscBool   restart = (PetscBool)(o->restart[0] != 0);

  PetscFunctionBegin;
  PetscCall(PetscMemzero(m, sizeof *m));
  m->plan       = plan;
  m->has_critic = ppo_trains_critic(o);
  m->has_reward = o->has_reward_model;
  m->bucket     = (size_t)(plan->bucket_mb * 1048576.0);
  PetscCall(PetscLogEventBegin(sys_log.ckpt_read, 0, 0, 0, 0));
  PetscCall(dmodel_create("actor", &cfg[0], be, plan, MFC_ACTOR_TRAIN, PETSC_TRUE, &m->actor));
  PetscCall(dmodel_create("actor_gen", &cfg[0], be, plan, MFC_ACTOR_GEN, PETSC_FALSE, &m->actor_gen));
  m->gen_copy = (PetscBool)(m->actor_gen.mesh != m->actor.mesh);
  m->gen_drop = (PetscBool)(m->gen_copy && plan_overlap(plan, MFC_ACTOR_GEN, MFC_ACTOR_TRAIN));
  if (!m->gen_copy || m->gen_drop) PetscCall(dmodel_release(&m->actor_gen, PETSC_FALSE));
  PetscCall(dmodel_load(&m->actor, src[0].file, src[0].role, restart, PETSC_FALSE, (uint64_t)run->seed));
  if (m->has_critic) {
    PetscCall(dmodel_create("critic", &cfg[1], be, plan, MFC_CRITIC_TRAIN, PETSC_TRUE, &m->critic));
    PetscCall(dmodel_create("critic_inf", &cfg[1], be, plan, MFC_CRITIC_INF, PETSC_FALSE, &m->critic_inf));
    m->critic_copy = (PetscBool)(m->critic_inf.mesh != m->critic.mesh);
    m->critic_drop = (PetscBool)(m->critic_copy && plan_overlap(plan, MFC_CRITIC_INF, MFC_CRITIC_TRAIN));
    if (!m->critic_copy || m->critic_drop) PetscCall(dmodel_release(&m->critic_inf, PETSC_FALSE));
    PetscCall(dmodel_load(&m->critic, src[1].file, src[1].role, restart, src[1].trunk_only, (uint64_t)run->seed));
  }
  PetscCall(dmodel_create("reference", &cfg[2], be, plan, MFC_REF_INF, PETSC_FALSE, &m->reference));
  PetscCall(dmodel_load(&m->reference, src[2].file, src[2].role, PETSC_FALSE, PETSC_FALSE, 0));
  if (o->has_reward_model) {
    PetscCall(dmodel_create("reward", &cfg[3], be, plan, MFC_REW_INF, PETSC_FALSE, &m->reward));
    PetscCall(dmodel_load(&m->reward, src[3].file, src[3].role, PETSC_FALSE, PETSC_FALSE, 0));
  }
  m->ref_source  = o->reference_sourced ? &o->reference_source : NULL;
  m->offload_ref = ppo_offloads(o, needs, MFC_REF_INF);
  m->offload_rew = o->has_reward_model && ppo_offloads(o, needs, MFC_REW_INF);
  if (m->offload_ref) PetscCall(dmodel_release(&m->reference, PETSC_TRUE));
  if (m->offload_rew) PetscCall(dmodel_release(&m->reward, PETSC_TRUE));
  if (restart) {
    PetscCall(ckpt_read_state(run->comm, o->restart, st));
    PetscCheck(st->iteration <= o->iterations, run->comm, PETSC_ERR_ARG_OUTOFRANGE,
               "-restart %s is at iteration %" PetscInt_FMT ", past -ppo_iterations %" PetscInt_FMT, o->restart,
               st->iteration, o->iterations);
  }
  PetscCall(PetscLogEventEnd(sys_log.ckpt_read, 0, 0, 0, 0));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_models_destroy(PPOModels *m)
{
  DModel *all[6] = {&m->actor, &m->actor_gen, &m->critic, &m->critic_inf, &m->reference, &m->reward};

  PetscFunctionBegin;
  for (int k = 0; k < 6; k++) PetscCall(dmodel_destroy(all[k]));
  PetscCall(ppo_fused_train_destroy(&m->fuse));
  PetscCall(rollout_genfuse_teardown(&m->genfuse));
  PetscCall(ppo_rewards_destroy(&m->rew));
  PetscCall(ppo_episodes_destroy(&m->eps));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The cost model's description of the job: the settings as parsed here
 * and the models as read (critic-free: the critic slot gets the reward's). */
static void ppo_cost_deck_fill(const PPOOptions *o, const ModelConfig cfg[4], int max_prompt, PetscInt seed,
                               CostDeck *d)
{
  PetscMemzero(d, sizeof *d);
  d->batch       = (int)o->rollout_batch;
  d->max_new     = (int)o->gen.max_new_tokens;
  d->minibatches = (int)o->minibatches;
  d->micro       = (int)o->microbatches;
  d->epochs      = (int)o->epochs;
  d->gen_slots   = (int)o->gen.slots;
  d->prompt_len  = max_prompt;
  d->critic_free = ppo_algo(o)->has_critic ? PETSC_FALSE : PETSC_TRUE;
  d->seed        = (long long)seed;
  d->staleness   = (int)o->async_staleness;
  d->prox        = o->async_staleness > 0 && o->async_correction != ASYNC_NONE ? PETSC_TRUE : PETSC_FALSE;
  d->partial       = (int)o->async_partial;
  d->partial_extra = o->async_partial ? ppo_partial_rows(o) - (int)o->rollout_batch : 0;
  d->group         = ppo_group_size(o);
  if (env_on(&o->env)) {
    d->episodes    = PETSC_TRUE;
    d->env_answers = (int)o->env.max_turns - 1;
    d->env_lag     = (int)o->env.lag;
    d->env_procs   = strcmp(o->env.kind, "command") ? 0 : (int)o->env.procs; /* the built-in answers all at once */
  }
  for (int k = 0; k < 4; k++) d->cfg[k] = cfg[k];
  d->reward_free = o->has_reward_model ? PETSC_FALSE
                                       : PETSC_TRUE; /* cfg[3] is then the actor's (ppo_configs), unused */
  if (d->critic_free) d->cfg[1] = cfg[3];
}

PetscErrorCode ppo_prepare(const RunCtx *run, PPOOptions *o, const ModelConfig *policy, PetscBool print, PPOSetup *s)
{
  ModelSource  *src   = s->src;
  ModelConfig  *cfg   = s->cfg;
  PromptSource *ps    = &s->ps;
  PlanNeeds    *needs = &s->needs;

  PetscFunctionBegin;
  PetscCall(ppo_check_options(o));
  if (!policy)
    PetscCall(ppo_reference_source(
        run, o, (PetscBool)!run->dry_run)); /* a restart's reference file checked before anything is written */
  ppo_sources(o, src);
  if (o->eval_only && !o->restart[0]) { /* -mode eval: an SFT checkpoint's policy, or a PPO checkpoint's actor */
    PetscBool policy_role;
    PetscCall(ckpt_has_role(run->comm, o->actor_ckpt, "policy", &policy_role));
    if (!policy_role) src[0].role = src[2].role = "actor";
    if (o->reference_ckpt[0]) src[2].role = "policy";
  }
  /* with policy (-mode pipeline's checks before any stage ran) the restart file may not exist yet: the pipeline has its
   * reward model */
  if (o->restart[0] && !policy) PetscCall(ckpt_has_role(run->comm, o->restart, "reward", &o->has_reward_model));
  else o->has_reward_model = (PetscBool)(o->reward.checkpoint[0] != 0);
  PetscCheck(o->has_reward_model || o->reward.spec.n || o->reward.command[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
             "-restart %s holds no reward model: give the run's reward, -reward_fn or -reward_command", o->restart);
  PetscCheck(!o->dynamic_sampling || !o->has_reward_model, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-ppo_dynamic_sampling selects groups by their rewards right after generation, before the reward model's "
             "call: use rewards from -reward_fn or -reward_command only");
  PetscCheck(!o->dynamic_sampling || o->plan.fuse == FUSE_NONE, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-ppo_dynamic_sampling with -fuse_gen_inf %s: fused samples go to inference before the selection; use "
             "-fuse_gen_inf none",
             FuseModeNames[o->plan.fuse]);
  if (!o->has_reward_model) {
    PetscCheck(!ppo_trains_critic(o) || o->critic_init == CRITIC_FROM_ACTOR || o->restart[0], PETSC_COMM_WORLD,
               PETSC_ERR_ARG_INCOMP,
               "-critic_init reward starts the critic from the reward model, and there is none (no "
               "-reward_checkpoint): use -critic_init actor");
  }
  PetscCall(prompts_setup(run, o, ps));
  if (!policy)
    PetscCall(gen_config_stops_from(run->comm, &o->gen,
                                    src[0].file)); /* the actor's tokenizer's EOS unless the deck gives one */
  PetscCheck(!o->eval_only || ps->eval.n > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
             "-mode eval needs held-out prompts: -ppo_eval_file FILE, or the built-in task's (-ppo_prompts builtin) "
             "with -ppo_eval_prompts > 0");
  PetscCall(ppo_configs(run, o, src, policy, ps->max_prompt, cfg));
  if (o->restart[0] && !policy && !o->eval_only) /* before anything is written: the queue of generated batches */
    PetscCall(async_check(run->comm, o->restart, o, ps->max_prompt, cfg[0].vocab_size));
  if (ps->eval_alone) { /* the training prompts are not used */
  } else if (ps->src.builtin)
    PetscCall(task_check(&o->task, cfg[0].vocab_size, cfg[0].n_positions, policy ? "policy_" : "actor_"));
  else {
    PetscCheck(ps->src.file.vocab_size <= cfg[0].vocab_size, PETSC_COMM_WORLD, PETSC_ERR_ARG_INCOMP,
               "-ppo_prompts %s has vocabulary %d, larger than the actor's %d", o->prompts, ps->src.file.vocab_size,
               cfg[0].vocab_size);
  }
  PetscCheck(!ps->eval.from_file || ps->eval.file.vocab_size <= cfg[0].vocab_size, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_INCOMP, "-ppo_eval_file %s has vocabulary %d, larger than the actor's %d", o->eval_file,
             ps->eval.file.vocab_size, cfg[0].vocab_size);
  ppo_needs(o, cfg, needs);
  if (o->plan.placement == PLACEMENT_AUTO) { /* -placement auto: the searched plan replaces the colocated one */
    CostDeck deck;

    ppo_cost_deck_fill(o, cfg, ps->max_prompt, run->seed, &deck);
    PetscCall(PetscSNPrintf(deck.shapes_from, sizeof deck.shapes_from, "the models this run read"));
    PetscCall(search_auto(run, &deck, needs, &o->plan));
  }
  PetscCall(plan_check(&o->plan, needs));
  if (print) PetscCall(plan_print(run->comm, &o->plan, needs));
  if (print && o->async_staleness > 0 && !o->eval_only) {
    const PlanCall *g = &o->plan.call[MFC_ACTOR_GEN], *t = &o->plan.call[MFC_ACTOR_TRAIN];
    if (plan_overlap(&o->plan, MFC_ACTOR_GEN, MFC_ACTOR_TRAIN))
      PetscCall(PetscPrintf(run->comm,
                            "asynchronous: iteration i trains on samples generated with the weights of iteration "
                            "i-%" PetscInt_FMT
                            "; generation and training share ranks in this plan, so this changes the algorithm, not "
                            "the time (generation on ranks of its own overlaps: -placement disaggregate)\n",
                            o->async_staleness));
    else
      PetscCall(PetscPrintf(run->comm,
                            "asynchronous: iteration i trains on samples generated with the weights of iteration "
                            "i-%" PetscInt_FMT
                            "; generating the next batches (ranks %d-%d) overlaps training (ranks %d-%d)\n",
                            o->async_staleness, g->ranks[0], g->ranks[g->nranks - 1], t->ranks[0],
                            t->ranks[t->nranks - 1]));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The dry run's memory line: what one rank holds if the plan leaves every model whole on it (tensor and
 * pipeline parallelism divide the models' part): the trained models' weights, gradients and AdamW moments
 * with one micro-batch's activations, the frozen models' weights, the KV cache and the rollouts. */
static PetscErrorCode ppo_dry_run_memory(const RunCtx *run, const PPOOptions *o, const PPOSetup *s, double kv)
{
  const int T  = s->ps.max_prompt + (int)o->gen.max_new_tokens,
            mb = (int)PetscMax(1, o->rollout_batch / PetscMax(1, o->minibatches * o->microbatches));
  double    w[4] = {0, 0, 0, 0}, act[4] = {0, 0, 0, 0}, models, acts = 0, roll = ppo_rollout_bytes(o, s->ps.max_prompt);
  char      t[32], a[32], b[32], c[32], d[32];

  PetscFunctionBegin;
  for (int k = 0; k < 4; k++) {
    if ((k == 1 && !ppo_trains_critic(o)) || (k == 3 && !o->has_reward_model)) continue;
    PetscCall(model_training_bytes(&s->cfg[k], k < 2 ? run->be : NULL, mb, T, &w[k], &act[k]));
    if (k >= 2) w[k] /= 4.0; /* frozen: weights alone, not gradients and moments */
    acts = PetscMax(acts, act[k]); /* one call's activations at a time */
  }
  models = w[0] + w[1] + w[2] + w[3];
  PetscCall(PetscPrintf(run->comm,
                        "dry run: estimated host memory per rank %s with every model whole on it (models %s: "
                        "trained with gradients and AdamW, frozen weights alone; activations of %d x %d tokens %s; "
                        "KV cache %s; rollouts %s)\n",
                        sys_bytes_str(models + acts + kv + roll, t, sizeof t), sys_bytes_str(models, a, sizeof a), mb,
                        T, sys_bytes_str(acts, b, sizeof b), sys_bytes_str(kv, c, sizeof c),
                        sys_bytes_str(roll, d, sizeof d)));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_dry_run(const RunCtx *run, const PPOOptions *o, const PPOSetup *s)
{
  const ModelConfig  *cfg = s->cfg;
  const PromptSource *ps  = &s->ps;
  double              kv  = (double)gen_kv_bytes(&o->gen, &cfg[0], ps->max_prompt + (int)o->gen.max_new_tokens);
  char                a[32];

  PetscFunctionBegin;
  PetscCall(PetscPrintf(run->comm, "dry run: %s with 4 models of %d layers x %d; KV cache %s\n", ppo_algo(o)->name,
                        cfg[0].n_layer, cfg[0].n_embd, sys_bytes_str(kv, a, sizeof a)));
  PetscCall(ppo_dry_run_memory(run, o, s, kv));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_check_stage(const RunCtx *run, PPOOptions *o, const ModelConfig *policy, PetscBool print)
{
  PPOSetup s;

  PetscFunctionBegin;
  PetscCall(ppo_prepare(run, o, policy, print, &s));
  if (print) PetscCall(ppo_dry_run(run, o, &s));
  PetscCall(prompts_destroy(&s.ps));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_cost_deck(const RunCtx *run, PetscBool help, CostDeck *d)
{
  TrainJobOptions job;
  PPOOptions   o;
  ModelSource  src[4];
  PromptSource ps;
  ModelConfig  policy, cfg[4];
  PetscBool    files;

  PetscFunctionBegin;
  PetscCall(PetscMemzero(&o, sizeof o));
  PetscCall(train_job_checkpoint_options(&job)); /* not the plan: the search makes one for other ranks */
  PetscCall(ppo_job_options(&job, &o));
  PetscCall(model_config_set_from_options("policy_", &policy)); /* a deck without checkpoints: SFT's model */
  if (!help)
    PetscCall(train_restart_resolve(run->comm, run->output_dir, o.restart,
                                    sizeof o.restart)); /* latest, with none there: a fresh start */
  if (!help) PetscCall(reward_spec_parse("-reward_fn", o.reward.fn, &o.reward.spec));
  files = !help && (o.restart[0] || o.actor_ckpt[0] || o.reward.checkpoint[0]) ? PETSC_TRUE : PETSC_FALSE;
  o.has_reward_model = PETSC_TRUE; /* a deck without checkpoints: the pipeline's, with its reward model */
  if (files) { /* the checkpoints' models; without a reward model the rewards come from -reward_fn or -reward_command */
    PetscCheck(o.restart[0] || o.actor_ckpt[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
               "the deck names -reward_checkpoint but not -actor_checkpoint: the models' shapes come from the "
               "checkpoints (or from -restart)");
    if (o.restart[0]) PetscCall(ckpt_has_role(run->comm, o.restart, "reward", &o.has_reward_model));
    else o.has_reward_model = o.reward.checkpoint[0] ? PETSC_TRUE : PETSC_FALSE;
    PetscCheck(o.has_reward_model || o.reward.spec.n || o.reward.command[0], PETSC_COMM_WORLD, PETSC_ERR_ARG_NULL,
               "the deck has no reward: -reward_checkpoint, -reward_fn or -reward_command");
  } else {
    policy.head = MODEL_HEAD_LM;
    PetscCall(model_config_check(&policy, "policy_"));
  }
  if (!help && o.restart[0])
    PetscCall(ppo_reference_source(run, &o, PETSC_FALSE)); /* the reference's shape from its recorded file */
  ppo_sources(&o, src);
  PetscCall(prompts_setup(run, &o, &ps));
  PetscCall(ppo_configs(run, &o, src, files ? NULL : &policy, ps.max_prompt, cfg));
  ppo_cost_deck_fill(&o, cfg, ps.max_prompt, run->seed, d);
  if (!files) PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "the -policy_ options"));
  else if (o.restart[0]) PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "checkpoint %s", o.restart));
  else if (o.has_reward_model)
    PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "checkpoints %s and %s", src[0].file, src[3].file));
  else PetscCall(PetscSNPrintf(d->shapes_from, sizeof d->shapes_from, "checkpoint %s (no reward model)", src[0].file));
  PetscCall(prompts_destroy(&ps));
  PetscFunctionReturn(PETSC_SUCCESS);
}
