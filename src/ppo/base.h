/* base.h: the lower layer of src/ppo, private to it: the options' derived
 * values, the algorithms as a table, one iteration's rollout and what
 * computes on one rollout (the forwards, the rewards, the advantages,
 * dynamic sampling's selection, generation as a call), and the prompts.
 * Nothing here knows the models' placements or the loop (ppo_impl.h). The
 * options and entry points are in inc/ppo.h. */
#ifndef RLFUSE_PPO_BASE_H
#define RLFUSE_PPO_BASE_H

#include "ppo.h"
#include "exec.h"

/* ---- the options (options.c) ---------------------------------------------------- */
#define PPO_ASYNC_MAX 64 /* the largest -async_staleness */
/* Every PPO option but the plan's and the trainer's: what describes the job
 * to the cost model whatever ranks it is planned for; then their checks. */
PetscErrorCode ppo_job_options(const TrainJobOptions *job, PPOOptions *o);
PetscErrorCode ppo_check_options(PPOOptions *o);
/* -async_partial_extra, or its default (-1: a batch's prompts); the pool's
 * rows: the batch's and the extra prompts' samples. */
PetscInt ppo_partial_extra(const PPOOptions *o);
int      ppo_partial_rows(const PPOOptions *o);
/* The rewards besides the reward model (src/ppo/rewards.c). */
typedef enum {
  PPO_GOLD_NONE   = 0,
  PPO_GOLD_SORT   = 1,
  PPO_GOLD_ANSWER = 2
} PPOGold; /* what gold means: nothing, the sort judge's score, a right answer */
typedef struct {
  PPOGold        gold;
  PetscBool      have_tt;
  TokenTable     tt;          /* the tokens' text */
  RewardCommand *cmd;         /* -reward_command, on world rank 0 */
  char          *text, *ptext; /* decoding buffers */
  size_t         cap, pcap;
} PPORewards;
/* The reward parts recorded per sample: the rule functions (RewardFn order), then the command. */
#define PPO_REWARD_PARTS (REWARD_NFN + 1)

/* One iteration's experience. Per-position arrays are [B,T], T = the longest
 * prompt + max_new_tokens, aligned so index t is the token at position t
 * (rollouts.h5 stores them exactly so). */
typedef struct {
  int      B, T;
  GenBatch gen;                         /* tokens, lengths, eos, old logprobs, masks */
  float   *ref, *values, *rewards, *adv, *ret; /* [B,T] */
  float   *score, *final, *gold;        /* [B]: RM score, the score entering the rewards, judge */
  float *rule, *parts; /* [B]: rule and command rewards, weighted and summed; [B, PPO_REWARD_PARTS] each part unweighted
                          (NaN: unused) */
  int     *start, *len;                 /* [B]: response start and length */
  /* the rows' prompts (set by the caller, not owned): reference answers,
   * metadata, the prompt's index in its source; NULL when there are none */
  const char **answer, **meta;
  int64_t     *pidx;
  int          Bcap;   /* rows allocated (-ppo_dynamic_sampling: candidates generated; B after the selection) */
  PetscBool    scored; /* ref and score computed with the generation (an asynchronous run's frozen calls) */
  /* the run's environment when the rows are multi-turn episodes (set by
   * the caller before generating; NULL: single responses) */
  struct PPOEpisodes *envs;
  /* per row of episodes: the environment's rewards summed, its answers to
   * model turns (tool calls), the seconds they took (0 without episodes);
   * per token [B, T]: each step reward at the last model token of the turn
   * it answered (a reset's reward is in `reward` alone), 0 elsewhere */
  struct {
    double *reward, *seconds;
    int    *calls;
    float  *at;
  } env;
  /* The rows are episodes (docs/environments.md): a response holds the
   * model's segments and an environment's answers, gen.src says which token
   * is whose, and only the model's are trained on and counted. PETSC_FALSE:
   * every response token is the model's (gen.src is not read: the paths that
   * assemble rollouts without episodes do not fill it). Set by whoever fills
   * the rows; rollout_create sets PETSC_FALSE. */
  PetscBool    episodes;
  /* -ppo_dynamic_sampling (dynamic.c): candidate groups whose rewards
   * differ, groups of equal rewards used to fill, generation rounds */
  struct {
    int kept, filled, rounds;
  } dyn;
  /* The off-policy correction's inputs to the policy loss (asynchronous
   * runs; NULL otherwise): the proximal policy's log-probabilities (the
   * actor's before this iteration's update) and the behaviour importance
   * weights, [B,T]; on: they hold this iteration's values. */
  struct {
    float    *prox, *isw;
    PetscBool on;
  } off;
  /* -async_staleness > 0 (src/ppo/async/; NULL otherwise): the batch's
   * index (the iteration that trains on it, which keys its draws), the
   * weights version (iterations trained) that generated each row [B];
   * with -async_partial the version of each response token [B,T] (a sample
   * may span several) and each row's prompt position in the stream [B]
   * (its answer on a restart). */
  struct {
    int64_t  batch;
    int     *version, *tver;
    int64_t *ppos;
  } async;
} Rollout;

/* ---- the algorithms as a table (src/ppo/algos.c) --------------------------- */
/* An algorithm's advantage estimator: from the final scores (r->final), the
 * log-probabilities, the reference's and (with a critic) the values, it
 * writes the per-token rewards, the advantages and the returns (0 where it
 * has none). kl_reward: the KL's coefficient in the rewards (0 when the KL
 * is a loss term). */
typedef PetscErrorCode (*PPOAdvantageFn)(Rollout *r, const PPOOptions *o, double kl_reward);
/* One row per algorithm: what every other file of src/ppo asks instead of
 * comparing -algo with a name. */
typedef struct {
  const char    *name;       /* as -algo takes it; the mode in run.h5 and the progress lines */
  const char    *title;      /* as the pipeline's lines write it */
  const char    *help;       /* its part of -algo's help */
  PetscBool      has_critic; /* a critic is built, trained and checkpointed (its values enter the advantages) */
  PetscBool      groups;     /* -rollout_group responses per prompt: -rollout_batch divides into groups of at least 2,
                                -ppo_dynamic_sampling selects among them */
  PetscBool      kl_in_loss; /* -ppo_kl_in auto puts the KL in the loss (else a per-token penalty in the rewards) */
  RLLossAgg      loss_agg;   /* -ppo_loss_agg's default */
  PetscBool      seq_adv;    /* one advantage per sequence on each of its model tokens (GSPO's sequence ratio needs
                                it) */
  PPOAdvantageFn advantages;
} PPOAlgoSpec;
extern const PPOAlgoSpec ppo_algos[];
extern const int         ppo_nalgos;
static inline const PPOAlgoSpec *ppo_algo(const PPOOptions *o) { return &ppo_algos[o->algo]; }
/* Samples per prompt: -rollout_group for an algorithm with groups, else 1. */
static inline int ppo_group_size(const PPOOptions *o) { return ppo_algo(o)->groups ? (int)o->group : 1; }
/* Whether the KL to the reference is a loss term (else a reward penalty). */
static inline PetscBool ppo_kl_as_loss(const PPOOptions *o)
{
  return o->kl_in == KL_IN_LOSS || (o->kl_in == KL_IN_AUTO && ppo_algo(o)->kl_in_loss) ? PETSC_TRUE : PETSC_FALSE;
}
/* -algo's choices (the rows' names, then NULL: cap at least ppo_nalgos + 1)
 * and its help, "name (help), ... or name (help)". */
PetscErrorCode ppo_algo_choices(const char *names[], int cap, char *help, size_t len);
/* The names (titles) of the rows that pick() takes, joined by ", ", for messages. */
PetscErrorCode ppo_algo_join(PetscBool (*pick)(const PPOAlgoSpec *), PetscBool titles, char *buf, size_t len);

/* Scratch for packing up to nmax sequences into forward rows. */
typedef struct {
  int    nmax, T;
  int   *tok, *target, *mask_off, *mask_ids;
  size_t mask_cap;
  float *lp, *ent, *val;                /* forward-row layout [nmax*T] */
  float *al, *dal, *w;                  /* one aligned row [T] */
} PackBuf;

PetscErrorCode rollout_create(int B, int T, PetscBool masked, Rollout *r);
/* rl.h names the model's source without including gen.h */
_Static_assert(RL_SRC_MODEL == GEN_SRC_MODEL, "RL_SRC_MODEL (inc/rl.h) must equal GEN_SRC_MODEL (inc/gen.h)");
/* The per-token sources for the RL math's span functions (inc/rl.h): gen.src
 * for episodes, else NULL (every response token the model's). */
static inline const unsigned char *rollout_src(const Rollout *r) { return r->episodes ? r->gen.src : NULL; }
/* Whether token t (a position in row b's response) is the model's. */
static inline PetscBool rollout_is_model(const Rollout *r, int b, int t)
{
  return rl_is_model(rollout_src(r), (size_t)b * (size_t)r->T + (size_t)t) ? PETSC_TRUE : PETSC_FALSE;
}
/* The model's tokens in row b's response: the length that the loss
 * weights, the length metrics, the overlong shaping and the length reward
 * use (r->len[b] without episodes). Inline, so that any file of src/ppo
 * may call it without a call circle. */
static inline int rollout_model_len(const Rollout *r, int b)
{
  const unsigned char *src = rollout_src(r);
  return rl_model_tokens(src ? src + (size_t)b * (size_t)r->T : NULL, r->start[b], r->len[b]);
}
PetscErrorCode rollout_destroy(Rollout *r);
PetscErrorCode packbuf_create(int nmax, int T, PackBuf *pb);
PetscErrorCode packbuf_destroy(PackBuf *pb);

/* Forward of sequences idx[0..nb) of r through an LM-head model: pb->lp and
 * pb->ent get, at forward row (i, s), the log-probability and entropy of the
 * token at position s+1 under the generation's distribution (0 outside
 * responses). Returns the forward row length in *Tf. */
PetscErrorCode rollout_forward_logprobs(Model *m, const Rollout *r, const int *idx, int nb, float inv_temp, PackBuf *pb,
                                        int *Tf);
/* Forward through a scalar-head model; pb->val gets the values by forward
 * row (the value of the state before position s+1 is at row s). With
 * full_length the rows cover whole sequences (for the score at the last
 * token), else up to the last response token's predecessor. */
PetscErrorCode rollout_forward_values(Model *m, const Rollout *r, const int *idx, int nb, PetscBool full_length,
                                      PackBuf *pb, int *Tf);

/* The inference calls over rows [b0, b1) (a replica's share), in
 * micro-batches of nmicro sequences through the model's pipeline stages:
 * reference log-probabilities, reward-model scores (and the final scores),
 * critic values. Only the last stage writes the outputs. */
PetscErrorCode rollout_ref_inference(Model *ref, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                     int nmicro);
PetscErrorCode rollout_reward_inference(Model *reward, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                        int nmicro);
PetscErrorCode rollout_critic_inference(Model *critic, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                        int nmicro);
/* Asynchronous runs: the actor's log-probabilities of the rows before
 * this iteration's update (the proximal policy) into r->prox. */
PetscErrorCode rollout_prox_inference(Model *actor, Rollout *r, const PPOOptions *o, PackBuf *pb, int b0, int b1,
                                      int nmicro);
/* One inference call over the sequences idx[0..nb) of r in one forward
 * (nb <= pb->nmax): reference log-probabilities, reward-model scores (and
 * final scores) or critic values, as the calls above compute them. */
typedef enum { ROLLOUT_REF = 0, ROLLOUT_SCORE = 1, ROLLOUT_VALUES = 2 } RolloutInfer;
PetscErrorCode rollout_infer_rows(Model *m, RolloutInfer kind, Rollout *r, const PPOOptions *o, PackBuf *pb,
                                  const int *idx, int nb);
/* Multi-turn episodes (src/ppo/episodes.c, docs/environments.md): the
 * environment of -env and the engine's callbacks on it. setup: NULL when
 * the run has none; rows: the most rows a generation has (the
 * environment's request indices); vocab: the ids an answer may hold.
 * begin: before generating rows b0..b0+n-1 of r (req[0..n) those rows'
 * requests) on mesh m (collective on it when its replicas have several
 * ranks: their heads talk to the environment): every episode reset; *ep for the engine's GenRun. gen: the
 * engine's settings, the turn stops taken out of -gen_stop. share: the
 * rows' environment results (Rollout.env) to every rank of m (with the
 * generation's). */
typedef struct PPOEpisodes PPOEpisodes;
PetscErrorCode ppo_episodes_setup(const PPOOptions *o, const TokenTable *tt, int vocab, int rows, PPOEpisodes **x);
PetscErrorCode ppo_episodes_destroy(PPOEpisodes **x);
PetscErrorCode ppo_episodes_begin(PPOEpisodes *x, const Mesh *m, uint64_t seed, uint32_t iteration,
                                  const GenRequest *req, Rollout *r, int b0, int n, const GenEpisode **ep);
GenConfig      ppo_episodes_gen(const PPOEpisodes *x, const GenConfig *gen);
PetscErrorCode ppo_episodes_share(const Mesh *m, Rollout *r);
/* An episode batch's means per episode: model turns, the environment's
 * answers (tool calls) and the share of episodes with one, the
 * environment's tokens; the tokens cut from answers and the seconds the
 * answers took, summed. Zero without episodes. */
typedef struct {
  double turns, calls, call_frac, env_tokens, cut, seconds;
} PPOEpisodeStats;
void ppo_episodes_stats(const Rollout *r, PPOEpisodeStats *st);

/* The rewards besides the reward model (src/ppo/rewards.c). Setup: the
 * token table from the first of tables[] holding /tokenizer (else the
 * built-in arithmetic task's characters), the command started on world
 * rank 0; builtin: the prompts are the built-in task's; answers: the rows
 * have reference answers (gold is then whether the answer is right).
 * Collective on MPI_COMM_WORLD. */
PetscErrorCode ppo_rewards_setup(const RunCtx *run, const PPOOptions *o, const char *const *tables, int ntables,
                                 PetscBool builtin, PetscBool answers, PPORewards *rw);
/* Prints rows [0, n) of r on world rank 0 (-ppo_eval_show): prompt and
 * response as text through the token table, or as token ids without one,
 * the final reward and the reference answer; what names the evaluation. */
PetscErrorCode ppo_show_samples(PPORewards *rw, const Rollout *r, int n, const char *what);
PetscErrorCode ppo_rewards_destroy(PPORewards *rw);
/* Rule rewards and the judge of every row into r->rule, r->parts and
 * r->gold, the judge being gold's (the training prompts' rw->gold, or the
 * held-out set's); on this rank, no communication. */
PetscErrorCode rollout_rule_rewards(PPORewards *rw, const PPOOptions *o, Rollout *r, PPOGold gold);
/* Then the command's rewards added (none without -reward_command).
 * Collective on MPI_COMM_WORLD: the values come from world rank 0, and its
 * failure is raised on every rank. */
PetscErrorCode rollout_command_rewards(PPORewards *rw, const PPOOptions *o, Rollout *r, int iteration);
/* r->final from the reward model's score (when there is one), the rule
 * rewards, the environment's (episodes) and the overlong shaping. */
void rollout_final_scores(Rollout *r, const PPOOptions *o);
/* DAPO's dynamic sampling (src/ppo/dynamic.c): the groups kept over an
 * iteration's generation rounds. dynamic_begin makes the store for a batch
 * of B rows; dynamic_take looks at one round's candidate rows (groups of k
 * consecutive rows, rewards computed) and keeps, in their order, those
 * whose final scores are not all equal until the store holds B/k groups,
 * filling up with the round's first equal ones when last; dynamic_finish
 * moves the store to rows 0..B-1 of r (r->B becomes B, with the counts) and
 * frees it. Every rank does the same on its copy of the rollout. */
typedef struct {
  Rollout      r;                     /* the kept groups, in order (with answer, meta, pidx arrays of its own) */
  int          k, groups, nid;        /* group size, groups kept, allowed-set ids used */
  int          kept, filled, rounds;  /* candidate groups whose rewards differ, groups that filled, rounds */
  long long    new_tokens;            /* tokens generated over the rounds */
} DynamicStore;
PetscErrorCode dynamic_begin(const Rollout *r, int B, DynamicStore *ds);
PetscErrorCode dynamic_take(DynamicStore *ds, Rollout *cand, int G, int k, PetscBool last);
PetscErrorCode dynamic_finish(DynamicStore *ds, Rollout *r, int B);
/* The final scores, then the algorithm's advantages (its row's estimator) with
 * the KL in the rewards unless it is a loss term; a non-finite behaviour or
 * reference log-probability or score is refused first (iteration names it). */
PetscErrorCode rollout_advantages(Rollout *r, const PPOOptions *o, double kl_coef, long long iteration);
/* Of episodes (r->episodes), datasets source (uint8 [B,T], GEN_SRC_*) and
 * turn (int32 [B,T]: 0 on the prompt and past the response, k on the model's
 * k-th segment and the environment's answer to it) appended to d at *nd;
 * *turn is allocated for the caller to free (NULL without episodes). */
PetscErrorCode rollout_episode_datasets(const Rollout *r, IODataset *d, int *nd, int **turn);
/* Appends group /iter_<k> to <output_dir>/rollouts.h5 (created at iteration 0 or on first use). */
PetscErrorCode rollout_dump(MPI_Comm comm, const char *path, const Rollout *r, int iteration, const PPOOptions *o,
                            double kl_coef);

/* Generation as a call (src/ppo/rollout_gen.c): a replica's rows of the batch
 * (its own GenBatch unless the replica holds every row). */
typedef struct {
  GenBatch  b;
  int       b0, b1;
  PetscBool own;
  int *owner; /* -fuse_gen_inf migrate: b holds all rows; owner[row] the world rank that finished it here, else -1 (NULL
                 otherwise) */
} GenPart;
/* Members of policy's mesh decode their replica's rows of req into part. */
PetscErrorCode rollout_generate_part(DModel *policy, const GenConfig *gen, int max_prompt, uint64_t seed,
                                     uint32_t iteration, const GenRequest *req, Rollout *r, GenPart *part);
/* The same, with a callback for each finished sample (index: the replica's
 * request index; its global row is part->b0 + index). */
PetscErrorCode rollout_generate_part_cb(DModel *policy, const GenConfig *gen, int max_prompt, uint64_t seed,
                                        uint32_t iteration, const GenRequest *req, Rollout *r, GenPart *part,
                                        GenFinishFn fn, void *ctx);
/* Every rank gets every replica's rows (tokens, log-probabilities, lengths,
 * EOS, allowed sets; replica 0's step timeline), then the response starts,
 * lengths (the judge runs with the rule rewards, rollout_rule_rewards). Collective on MPI_COMM_WORLD. */
PetscErrorCode rollout_share_gen(const Mesh *m, GenPart *part, Rollout *r);
/* The same for a batch alone (its n rows; the rollout's start and len are
 * not set). */
PetscErrorCode rollout_share_genbatch(const Mesh *m, GenPart *part, GenBatch *g);
/* On a replica's head, before the share: its own rows of part in r (tokens,
 * log-probabilities, lengths, EOS; not the allowed sets) with their
 * response starts and lengths, so that an inference call on the same rows
 * can run at once. */
void rollout_part_local(const GenPart *part, Rollout *r);
PetscErrorCode rollout_finish_gen(Rollout *r);
/* The same after -fuse_gen_inf migrate: each row from the head that
 * finished it (part->owner). Collective on MPI_COMM_WORLD. */
PetscErrorCode rollout_share_gen_owned(const Mesh *m, GenPart *part, Rollout *r);

#define PPO_ANSWER_LEN 32 /* a built-in task's answer text, NUL included */

/* ---- prompts and the held-out set (src/ppo/prompts.c) ------------------------ */
/* The held-out set: n prompts asked k times each (request i*k+j), from
 * -ppo_eval_file or the built-in task's held-out split. */
typedef struct {
  int          n, k, room;
  PetscBool    from_file, answers;
  PPOGold      gold;
  TokenData    file;
  int         *buf;    /* [n * room] */
  char        *abuf;   /* the built-in task's answers */
  GenRequest  *req;    /* [n*k] */
  const char **answer, **meta;
  int64_t     *pidx;
} PPOEvalSet;
/* The training prompts of each iteration and the held-out set. */
typedef struct {
  DemoSource   src;
  int          max_prompt, room; /* max_prompt: of training and held-out prompts (held-out only when eval_alone) */
  PetscBool    answers;          /* the training prompts have reference answers */
  PetscBool    eval_alone;       /* -mode eval of -ppo_eval_file: the training prompts are not used */
  int         *buf;              /* [B * room] */
  GenRequest  *req;              /* [B] */
  const char **answer, **meta;   /* [B]: each row's (NULL: none) */
  int64_t     *pidx;             /* [B]: each row's prompt index in its source */
  char        *abuf;             /* the built-in task's answers, [rounds * B] slots */
  PPOEvalSet   eval;
} PromptSource;
/* Reads the prompt file (or sets up the built-in task's prompts) and the
 * held-out set; refuses -reward_fn terms that need answers the prompts
 * lack; checks the rollout fits memory. */
PetscErrorCode prompts_setup(const RunCtx *run, const PPOOptions *o, PromptSource *ps);
/* Bytes every rank holds for the rollouts (ppo_check_memory's lower bound: the [B,T] arrays, with
 * -async_staleness its queue, with -async_partial its pool, the reference answers), for -dry_run. */
double ppo_rollout_bytes(const PPOOptions *o, int max_prompt);
PetscErrorCode prompts_destroy(PromptSource *ps);
/* The requests of an iteration's generation round (0 without dynamic
 * sampling, whose rounds draw further prompts): prompts data_pos,
 * data_pos+1, ... (an algorithm with groups: each repeated -rollout_group times);
 * sample ids are round * rows + row, unique within the iteration; the
 * built-in task's answers of each round have their own slots, so rows kept
 * from an earlier round keep theirs. *used: prompts consumed. */
PetscErrorCode prompts_next(PromptSource *ps, const PPOOptions *o, int64_t data_pos, int round, int *used);
/* One prompt, the one at stream position pos (partial rollouts' pool,
 * src/ppo/async/pool.c): its tokens into row (room ps->room) and *len; the
 * built-in task's answer written to abuf (PPO_ANSWER_LEN bytes), *answer
 * pointing there or into the prompt file; *meta, *pidx as prompts_next's. */
PetscErrorCode prompts_at(PromptSource *ps, const PPOOptions *o, int64_t pos, int *row, int *len, char *abuf,
                          const char **answer, const char **meta, int64_t *pidx);

#endif
