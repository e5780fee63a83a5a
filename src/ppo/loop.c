/* PPO and its critic-free variants (-mode ppo; the algorithms are the rows
 * of src/ppo/algos.c), the loop read top to bottom: set-up (setup.c), then
 * per iteration one graph (graph.c: the actor generates, the reference,
 * reward model and critic score, the advantages follow from the rewards,
 * the actor and critic train; docs/background.md, sections 1-2), its record
 * (record.c), the held-out evaluations and the checkpoints. Where the
 * batches come from is the one variant point: generated in the same
 * iteration here, or K iterations ahead by asynchronous RL (src/ppo/async/).
 * Checkpoints hold the actor, critic and reward model (the reference too,
 * or only its input file's name and checksum when it is that file
 * unchanged), both optimizers, the iteration, the data position, the RNG
 * key, the KL coefficient and what the batch maker carries, so a restart
 * continues bit-identically. */
#include "ppo_impl.h"
#include "async/async.h"
#include <math.h>

/* ---- the synchronous batch maker ----------------------------------------------- */
/* The iteration generates the batch it trains on, from the next prompts
 * (dynamic sampling: the candidates of its first round, and its later
 * rounds draw further prompts). */
static PetscErrorCode sync_iterate(PPOBatches *b, PPOLoopEnv *e, Rollout **r, PPOTrainStats *ts, StageTimes *tm)
{
  Rollout    *rr = (Rollout *)b->data;
  PPOIterSpec sp = {rr, rr, e->st->iteration, e->st->iteration, PETSC_FALSE, PETSC_FALSE, NULL};
  int         used;

  PetscFunctionBegin;
  PetscCall(prompts_next(e->ps, e->o, e->st->data_pos, 0, &used));
  rr->answer = e->ps->answer, rr->meta = e->ps->meta, rr->pidx = e->ps->pidx, rr->dyn.rounds = 1;
  PetscCall(ppo_iteration(e->m, e->o, e->ps, &sp, e->pb, e->st, ts, tm));
  e->st->data_pos += (int64_t)used * rr->dyn.rounds; /* dynamic sampling's rounds drew further prompts */
  *r = rr;
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sync_destroy(PPOBatches *b)
{
  PetscFunctionBegin;
  PetscCall(rollout_destroy((Rollout *)b->data));
  PetscCall(PetscFree(b->data));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static const PPOBatchOps sync_ops = {NULL, sync_iterate, NULL, NULL, sync_destroy};

static PetscErrorCode batches_create(const PPOOptions *o, int T, PPOBatches *b)
{
  Rollout *r;

  PetscFunctionBegin;
  if (o->async_staleness > 0) {
    PetscCall(async_batches_create(o, T, b));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  PetscCall(PetscNew(&r));
  PetscCall(rollout_create((int)(o->rollout_batch * PetscMax(1, o->dynamic_sampling)), T, gen_masked(&o->gen), r));
  b->ops  = &sync_ops;
  b->data = r;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- checkpoints ----------------------------------------------------------------- */
/* Each member writes its shard of the full tensors (inc/train.h); the file
 * does not depend on the layout. */
static PetscErrorCode write_checkpoint(PPOLoopEnv *e, PPOBatches *b, const char *name, RunRecord *rec)
{
  PPOModels *m     = e->m;
  DModel    *dm[4] = {&m->actor};
  CkptModel  cm[4] = {{"actor", NULL, PETSC_TRUE, PETSC_FALSE}};
  CkptCarry  carry = {NULL, NULL};
  int        n     = 1;

  PetscFunctionBegin;
  if (!m->ref_source) dm[n] = &m->reference, cm[n++] = (CkptModel){"reference", NULL, PETSC_FALSE, PETSC_FALSE};
  if (m->has_reward) dm[n] = &m->reward, cm[n++] = (CkptModel){"reward", NULL, PETSC_FALSE, PETSC_FALSE};
  if (m->has_critic) dm[n] = &m->critic, cm[n++] = (CkptModel){"critic", NULL, PETSC_TRUE, PETSC_FALSE};
  if (b->ops->carry) b->ops->carry(b, e->st->iteration, &carry); /* e.g. generated batches not yet trained on */
  PetscCall(train_checkpoint_sourced(e->run, dm, cm, n, name, e->st, m->ref_source, &carry, rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* policy.h5: the trained actor's weights alone, under the role an SFT
 * checkpoint's policy has, so that every reader of a policy takes it (a
 * third of final.h5's actor, which adds its moments). */
static PetscErrorCode write_policy(const RunCtx *run, PPOModels *m, const CkptState *st)
{
  DModel   *dm[1] = {&m->actor};
  CkptModel cm[1] = {{"policy", NULL, PETSC_FALSE, PETSC_FALSE}};

  PetscFunctionBegin;
  PetscCall(train_checkpoint_models(run, dm, cm, 1, "policy.h5", st, m->bucket, NULL));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* ---- the loop --------------------------------------------------------------------- */
/* Whether the held-out evaluation runs after iteration `done` (counted
 * from 1): every -ppo_eval_every iterations and after the last. */
static PetscBool eval_due(const PPOOptions *o, PetscInt done)
{
  return (o->eval_every && done % o->eval_every == 0) || done == o->iterations ? PETSC_TRUE : PETSC_FALSE;
}

/* Held-out evaluations still to come after iteration `done`. */
static long evals_left(const PPOOptions *o, PetscInt done)
{
  long n = 0;
  for (PetscInt j = done + 1; j <= o->iterations; j++) n += eval_due(o, j);
  return n;
}

/* The loop; *stop: the signal that stopped it after a checkpoint (0: it ran to the end). */
static PetscErrorCode ppo_loop(PPOLoopEnv *e, const PlanNeeds *needs, PPOSummary *sum, int *stop)
{
  const RunCtx     *run = e->run;
  const PPOOptions *o   = e->o;
  PPOModels        *m   = e->m;
  CkptState        *st  = e->st;
  RunRecord        *rec;
  PPOBatches        bt;
  PackBuf           pb;
  const int         T = e->ps->max_prompt + (int)o->gen.max_new_tokens;
  char              name[64], path[PETSC_MAX_PATH_LEN], evals[PETSC_MAX_PATH_LEN], what[64], clock[64];
  size_t            nparams;
  double            t_loop = sys_wtime(), t_evals = 0, t_eval = 0; /* evaluations' seconds in all, and one's */
  double            t_ckpt = t_loop;                               /* the last checkpoint (-checkpoint_minutes) */
  PetscBool         ckpt_due;
  PetscInt          it0    = st->iteration;
  PetscBool         final_evaluated = PETSC_FALSE; /* the last iteration's evaluation is the summary's */
  double            t_wall = 0, t_work = 0; /* the iterations' seconds, and their stages' added (async's gain) */

  PetscFunctionBegin;
  PetscCall(train_record_open(run, ppo_algo(o)->name, st->iteration, &o->plan, needs, &rec));
  PetscCall(batches_create(o, T, &bt));
  PetscCall(packbuf_create((int)o->rollout_batch, T, &pb));
  e->pb = &pb;
  PetscCall(sys_output_path(run, "rollouts.h5", path, sizeof path));
  PetscCall(sys_output_path(run, "evals.h5", evals, sizeof evals));
  if (it0 > 0 && record_continued(rec)) /* a restart continues its evaluations as its run.h5, without those after
                                            its checkpoint */
    PetscCall(io_group_drop_after(run->comm, "evaluations file", evals, "iter_", it0));
  else PetscCall(io_keep_previous(run->comm, run->output_dir, "evals")); /* a new run's evaluations, as its run.h5 */
  {
    ModelTensor *t;
    int          nt;
    PetscCall(model_tensor_table(&m->actor.cfg, &t, &nt, &nparams));
    PetscCall(PetscFree(t));
  }
  *stop = 0;
  PetscCall(PetscPrintf(run->comm,
                        "%s: actor %zu parameters, %" PetscInt_FMT " iterations of %" PetscInt_FMT
                        " responses, from iteration %" PetscInt_FMT "\n",
                        ppo_algo(o)->name, nparams, o->iterations, o->rollout_batch, st->iteration));
  { /* the baseline first: the initial policy's score is the run's first number, and its time sizes the ETA's
       evaluations */
    double t0 = sys_wtime();
    PetscCall(ppo_evaluate_said(run, "the reference (the initial policy)", &m->reference, m, o, e->ps, st, evals,
                                "reference", &sum->initial));
    if (!isnan(sum->initial.gold) || !isnan(sum->initial.reward))
      PetscCall(ppo_print_eval(run, "      held-out, initial policy:", &sum->initial, o));
    t_eval = t_evals = sys_wtime() - t0;
  }
  if (bt.ops->start) PetscCall(bt.ops->start(&bt, e));
  while (st->iteration < o->iterations) {
    double        t0 = sys_wtime(), g0 = model_acts_grown_bytes(), grown, kl, iter_s, coef;
    PPOEval       ev = {NAN, NAN, NAN, NAN, NAN};
    StageTimes    tm;
    PPOTrainStats ts;
    Rollout      *r;
    int           it = (int)st->iteration;
    char          more[64] = "";

    PetscCall(bt.ops->iterate(&bt, e, &r, &ts, &tm));
    kl = rollout_kl(r);
    if (o->dump_rollouts) PetscCall(rollout_dump(run->comm, path, r, it, o, st->kl_coef));
    iter_s = sys_wtime() - t0;
    grown  = model_acts_grown_bytes() - g0;
    t_wall += iter_s, t_work += tm.gen + tm.ref + tm.rew + tm.critic + ts.t_actor + ts.t_critic;
    coef   = st->kl_coef; /* the coefficient this iteration's rewards used */
    if (o->kl_target > 0) st->kl_coef = rl_kl_adapt(st->kl_coef, kl, o->kl_target, o->kl_horizon, (double)r->B);
    st->iteration++;
    /* the evaluations of the trained actor (every -ppo_eval_every iterations
     * and after the last, the summary's) run before the iteration's record,
     * which holds their result */
    if (eval_due(o, st->iteration)) {
      double te = sys_wtime();
      PetscCall(PetscSNPrintf(name, sizeof name, "iter_%" PetscInt_FMT, st->iteration));
      PetscCall(PetscSNPrintf(what, sizeof what, "the actor after iteration %" PetscInt_FMT, st->iteration));
      PetscCall(ppo_evaluate_said(run, what, &m->actor, m, o, e->ps, st, evals, name, &ev));
      if (st->iteration == o->iterations) sum->trained = ev, final_evaluated = PETSC_TRUE;
      t_evals += sys_wtime() - te;
    }
    if (bt.ops->record) PetscCall(bt.ops->record(&bt, rec, r, it, &tm, &ts, iter_s, more, sizeof more));
    {
      PPOIterLine line = { it + 1,
                           (int)o->iterations,
                           kl,
                           coef,
                           iter_s,
                           &ev,
                           more,
                           sys_progress_more_str(t_loop, (long)(st->iteration - it0),
                                                 (long)(o->iterations - st->iteration), t_evals,
                                                 t_eval * (double)evals_left(o, st->iteration), clock, sizeof clock) };
      PetscCall(ppo_record_iteration(rec, run, o, m, r, &ts, &tm, &line));
    }
    PetscCall(ppo_record_eval(rec, o, &e->ps->eval, &ev));
    /* the rank whose activation buffers grew most (first touches: the time
     * a steady state does not pay; layout-dependent like the timings) */
    PetscCallMPI(sys_mpi_allreduce(MPI_IN_PLACE, &grown, 1, MPI_DOUBLE, MPI_MAX, run->comm));
    PetscCall(record_metric(rec, "acts_grown_bytes", grown));
    if (m->fuse.on && !m->fuse.reported) PetscCall(ppo_fused_train_report(run, rec, &m->fuse));
    if ((!isnan(ev.gold) || !isnan(ev.reward)) && !final_evaluated)
      PetscCall(ppo_print_eval(run, "      held-out", &ev, o)); /* the last: in the summary */
    PetscCall(train_checkpoint_now(run->comm, o->checkpoint_every, o->checkpoint_minutes, st->iteration, &t_ckpt,
                                   &ckpt_due, stop));
    /* the row, then the checkpoint that commits it first (the checkpoint's time: the next row's) */
    PetscCall(record_step(rec, st->iteration));
    if (ckpt_due) {
      PetscCall(PetscSNPrintf(name, sizeof name, "ckpt_%06" PetscInt_FMT ".h5", st->iteration));
      PetscCall(write_checkpoint(e, &bt, name, rec));
    }
    if (*stop) break; /* SIGINT or SIGTERM: what is done is in that checkpoint */
  }
  if (!*stop) { /* a stopped run's state is in the checkpoint it just wrote */
    PetscCall(write_checkpoint(e, &bt, "final.h5", rec)); /* commits the rows first */
    if (o->write_policy) PetscCall(write_policy(run, m, st));
    if (!final_evaluated) { /* a run restarted at its end */
      PetscCall(PetscSNPrintf(name, sizeof name, "iter_%" PetscInt_FMT, st->iteration));
      PetscCall(ppo_evaluate_said(run, "the trained actor", &m->actor, m, o, e->ps, st, evals, name, &sum->trained));
    }
    PetscCall(ppo_record_summary(rec, o, sum, st->iteration));
    if (o->async_staleness > 0 && t_wall > 0) /* what overlapping generation with training gained */
      PetscCall(PetscPrintf(run->comm,
                            "%s: asynchronous (staleness %" PetscInt_FMT "): %" PetscInt_FMT " iterations in %.2f s; "
                            "their generation, inference and training one after another: %.2f s (%.2fx)\n",
                            ppo_algo(o)->name, o->async_staleness, st->iteration - it0, t_wall, t_work,
                            t_work / t_wall));
  }
  PetscCall(packbuf_destroy(&pb));
  PetscCall(bt.ops->destroy(&bt));
  PetscCall(record_close(&rec));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode ppo_execute(const RunCtx *run, const Backend *be, PPOOptions *o, double *initial_gold, double *ppo_gold,
                           double *ppo_kl)
{
  PPOSetup      s;
  PPOModels     m;
  CkptState     st  = {0, 0, run->seed, o->kl_coef};
  PPOSummary    sum = {{NAN, NAN, NAN, NAN, NAN}, {NAN, NAN, NAN, NAN, NAN}};
  PPOFusedTrain fz;
  PPORewards    rw;
  PPOLoopEnv    e;
  int           stop = 0;
  const char   *tables[2] = {o->restart, o->actor_ckpt}; /* where the tokens' text comes from */

  PetscFunctionBegin;
  PetscCall(train_restart_resolve(run->comm, run->output_dir, o->restart, sizeof o->restart));
  PetscCall(ppo_prepare(run, o, NULL, PETSC_TRUE, &s));
  PetscCall(ppo_fused_train_setup(run, o, &fz)); /* a schedule file is checked before any work */
  PetscCall(
      ppo_rewards_setup(run, o, tables, 2, s.ps.src.builtin, (PetscBool)(s.ps.answers || s.ps.eval.answers), &rw));
  if (run->dry_run) {
    PetscCall(ppo_rewards_destroy(&rw));
    PetscCall(ppo_fused_train_destroy(&fz));
    PetscCall(ppo_dry_run(run, o, &s));
    PetscCall(prompts_destroy(&s.ps));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  { /* the checkpoints carry the tokens' text: the restart file's, else the actor's source */
    PetscBool found = PETSC_FALSE;
    if (o->restart[0]) PetscCall(ckpt_tokenizer_from(run->comm, o->restart, &found));
    if (!found) PetscCall(ckpt_tokenizer_from(run->comm, o->actor_ckpt, NULL));
  }
  PetscCall(PetscLogStagePush(sys_log.ppo));
  PetscCall(ppo_load(run, be, o, &s, &m, &st));
  m.fuse        = fz;
  m.rew         = rw;
  if (env_on(&o->env)) { /* each generation replica talks to its own environment, from its head */
    int rows = (int)PetscMax(o->rollout_batch * PetscMax(1, o->dynamic_sampling), o->eval_prompts * o->eval_samples);
    PetscCall(ppo_episodes_setup(o, m.rew.have_tt ? &m.rew.tt : NULL, s.cfg[0].vocab_size, rows, &m.eps));
  }
  s.ps.src.seed = (uint64_t)st.seed;
  PetscCall(sys_mkdir_p(run->output_dir));
  if (o->eval_only) PetscCall(ppo_eval_only(run, o, &s.needs, &m, &s.ps, &st));
  else {
    e = (PPOLoopEnv){run, o, &m, &s.ps, NULL, &st};
    PetscCall(ppo_loop(&e, &s.needs, &sum, &stop));
    if (!stop) PetscCall(ppo_print_summary(run, o, &s.ps, &sum, st.iteration, (PetscBool)(initial_gold != NULL)));
    if (!stop) {
      char files[160];
      PetscCall(PetscSNPrintf(files, sizeof files, "final.h5 (every model with its optimizer state), %srun.h5%s",
                              o->write_policy ? "policy.h5 (the trained policy alone), " : "",
                              s.ps.eval.n > 0 ? " and evals.h5" : ""));
      PetscCall(train_said_written(run, ppo_algo(o)->name, files));
    }
    if (initial_gold) *initial_gold = sum.initial.gold;
    if (ppo_gold) *ppo_gold = sum.trained.gold;
    if (ppo_kl) *ppo_kl = sum.trained.kl;
  }
  PetscCall(ppo_models_destroy(&m));
  PetscCall(prompts_destroy(&s.ps));
  PetscCall(PetscLogStagePop());
  if (stop) {
    char ckpt[32];
    PetscCall(PetscSNPrintf(ckpt, sizeof ckpt, "ckpt_%06" PetscInt_FMT ".h5", st.iteration));
    PetscCall(train_stopped(run, stop, ppo_algo(o)->name, "iteration", st.iteration, ckpt));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}
