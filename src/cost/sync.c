/* cost/sync.c: the bytes a reallocation between two layouts of one model
 * moves, counted as the reallocation planner (src/realloc) counts them:
 * every destination rank needs the atoms of its tp slice of every tensor
 * its stage holds (an atom is one of max(tp_a, tp_b) pieces of a split
 * tensor, or a whole replicated one), and receives the ones it does not
 * already hold in the source layout. GPT-2 shapes use this code's own tensor
 * tables and stage split; LLaMA shapes a table of the same kind built here. */
#include "cost_impl.h"

typedef struct {
  int        n;
  double    *numel;
  PetscBool *split;
  int       *layer; /* -1: embedding, n_layer: final norm and head (LLaMA table only) */
  int       *kv;    /* k and v: n_kv_head, which caps their pieces (0: other tensors) */
} SyncTable;

/* Atoms [*lo, *hi) of q that tp rank t of tp needs of a split tensor: its
 * piece of tp/rep (k and v replicated beyond kv heads, as the model cuts them). */
static void atoms_of_rank(int kv, int q, int tp, int t, int *lo, int *hi)
{
  int rep = kv > 0 && tp > kv ? tp / kv : 1, np = tp / rep;
  *lo = t / rep * (q / np);
  *hi = *lo + q / np;
}

static PetscErrorCode table_model(const CostShape *m, SyncTable *tab, ModelConfig *cfg)
{
  ModelShard sh = {2, 0, 1, 0, 0, m->n_layer};
  ModelTensor *full, *two;
  int        n, n2;
  size_t     np;

  PetscFunctionBegin;
  cost_shape_to_model(m, cfg);
  PetscCall(model_tensor_table_shard(cfg, NULL, &full, &n, &np));
  PetscCall(model_tensor_table_shard(cfg, &sh, &two, &n2, &np)); /* the split dimensions, as the planner reads them */
  tab->n = n;
  PetscCall(PetscMalloc4(n, &tab->numel, n, &tab->split, n, &tab->layer, n, &tab->kv));
  for (int i = 0; i < n; i++)
    tab->numel[i] = (double)full[i].numel, tab->split[i] = two[i].split >= 0 ? PETSC_TRUE : PETSC_FALSE,
    tab->layer[i] = 0, tab->kv[i] = full[i].kv_heads;
  PetscCall(PetscFree(full));
  PetscCall(PetscFree(two));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode table_llama(const CostShape *m, SyncTable *tab)
{
  double h = m->n_embd, f = m->n_ffn, kv = cost_kv_width(m), q = cost_q_width(m);
  int    k = 0;

  PetscFunctionBegin;
  tab->n = 7 * m->n_layer + 3;
  PetscCall(PetscMalloc4(tab->n, &tab->numel, tab->n, &tab->split, tab->n, &tab->layer, tab->n, &tab->kv));
#define T(x, s, l) (tab->numel[k] = (x), tab->split[k] = (s), tab->kv[k] = 0, tab->layer[k++] = (l))
  T(h * m->vocab_size, PETSC_TRUE, -1);
  for (int l = 0; l < m->n_layer; l++) {
    T(h, PETSC_FALSE, l);                  /* input RMSNorm */
    T(q * h, PETSC_TRUE, l);               /* q: columns by heads */
    T(2 * h * kv, PETSC_TRUE, l);          /* k and v: by heads, replicated beyond them */
    tab->kv[k - 1] = m->n_kv_head;
    T(h * q, PETSC_TRUE, l);               /* o: rows */
    T(h, PETSC_FALSE, l);                  /* post-attention RMSNorm */
    T(2 * h * f, PETSC_TRUE, l);           /* gate and up: columns */
    T(f * h, PETSC_TRUE, l);               /* down: rows */
  }
  T(h, PETSC_FALSE, m->n_layer);           /* final RMSNorm */
  if (m->value_head) T(h, PETSC_FALSE, m->n_layer);
  else T(h * m->vocab_size, PETSC_TRUE, m->n_layer);
#undef T
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* held[s*n + i]: stage s of a pp-stage layout holds tensor i. */
static PetscErrorCode holdings(const CostShape *m, const ModelConfig *cfg, const SyncTable *tab, int pp,
                               PetscBool **held)
{
  PetscFunctionBegin;
  PetscCall(PetscCalloc1((size_t)pp * tab->n, held));
  for (int s = 0, l0 = 0; s < pp; s++) {
    if (!m->gated) {
      ModelShard sh = {1, 0, pp, s, 0, 0};
      ModelTensor *t;
      int        nt;
      size_t     np;
      model_stage_layers(cfg, pp, s, &sh.l0, &sh.l1);
      PetscCall(model_tensor_table_shard(cfg, &sh, &t, &nt, &np));
      for (int i = 0; i < nt; i++) (*held)[s * tab->n + i] = t[i].numel > 0 ? PETSC_TRUE : PETSC_FALSE;
      PetscCall(PetscFree(t));
    } else {
      int l1 = l0 + cost_stage_layers(m, pp, s);
      for (int i = 0; i < tab->n; i++) {
        int l = tab->layer[i];
        (*held)[s * tab->n + i] = (l >= l0 && l < l1) || (l < 0 && s == 0) || (l >= m->n_layer && s == pp - 1)
                                      ? PETSC_TRUE
                                      : PETSC_FALSE;
      }
      l0 = l1;
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* The mesh index of world rank r in the call, or -1. */
static int index_of(const PlanCall *c, int r)
{
  for (int i = 0; i < c->nranks; i++)
    if (c->ranks[i] == r) return i;
  return -1;
}

PetscErrorCode cost_realloc_bytes(const CostShape *m, double bytes_per_param, const PlanCall *a, const PlanCall *b,
                                  double *total, double *max_recv)
{
  SyncTable  tab;
  ModelConfig  cfg;
  PetscBool *ha, *hb;
  int        q = PetscMax(a->tp, b->tp);

  PetscFunctionBegin;
  PetscCheck(a->tp % b->tp == 0 || b->tp % a->tp == 0, PETSC_COMM_SELF, PETSC_ERR_ARG_INCOMP,
             "reallocation: tensor-parallel sizes %d and %d must divide each other", a->tp, b->tp);
  if (m->gated) PetscCall(table_llama(m, &tab));
  else PetscCall(table_model(m, &tab, &cfg));
  PetscCall(holdings(m, &cfg, &tab, a->pp, &ha));
  PetscCall(holdings(m, &cfg, &tab, b->pp, &hb));
  *total = *max_recv = 0;
  for (int k = 0; k < b->nranks; k++) {
    int    sb = k / (b->dp * b->tp), tb = k % b->tp, j = index_of(a, b->ranks[k]);
    int    sa = j >= 0 ? j / (a->dp * a->tp) : -1, ta = j >= 0 ? j % a->tp : -1;
    double recv = 0;
    for (int i = 0; i < tab.n; i++) {
      PetscBool local = j >= 0 && ha[sa * tab.n + i];
      if (!hb[sb * tab.n + i]) continue;
      if (!tab.split[i] || q == 1) recv += local ? 0 : tab.numel[i];
      else {
        /* atoms [lo, hi) needed; [alo, ahi) held here */
        int lo, hi, alo, ahi, have = 0;
        atoms_of_rank(tab.kv[i], q, b->tp, tb, &lo, &hi);
        if (local) {
          atoms_of_rank(tab.kv[i], q, a->tp, ta, &alo, &ahi);
          have = PetscMax(0, PetscMin(hi, ahi) - PetscMax(lo, alo));
        }
        recv += (hi - lo - have) * (tab.numel[i] / q);
      }
    }
    recv *= bytes_per_param;
    *total += recv;
    *max_recv = PetscMax(*max_recv, recv);
  }
  PetscCall(PetscFree(ha));
  PetscCall(PetscFree(hb));
  PetscCall(PetscFree4(tab.numel, tab.split, tab.layer, tab.kv));
  PetscFunctionReturn(PETSC_SUCCESS);
}
