/* gen private: the engine's state, shared by the loop (engine.c) and the
 * moving of samples between engines (move.c). */
#ifndef RLFUSE_GEN_IMPL_H
#define RLFUSE_GEN_IMPL_H

#include "gen.h"

struct GenEngine {
  Model      *lm;
  GenConfig   cfg;
  int         max_prompt_len, Tmax, V, nslot;
  ModelKVCache *kv;
  /* rows of one forward: at most every slot's whole prompt */
  int        *row_tok, *row_slot, *row_pos;
  /* per slot: the request it holds (-1: free), whether its prompt still has
   * to be prefilled, the head row whose logits give its next token */
  int        *slot_req, *slot_fresh, *slot_row;
  /* per slot: the positions whose keys and values are in the cache (the
   * next forward's rows start there), and for a sample paused at the end
   * of a model turn the engine pass at which its environment's answer is
   * appended (-1: not paused) */
  int        *slot_kv, *slot_wait;
  int        *slot_seg; /* episodes: where the slot's current model segment starts */
  long long   clock;     /* engine passes of this generation: the episodes' schedule */
  const GenEpisode *ep;  /* NULL: no episodes */
  /* the forward rows the head runs on (each slot's last row; head_n of them,
   * ascending): the logits of a prompt's other rows are never computed */
  int        *head_rows, head_n;
  /* per slot admitted in this step: the slot whose prompt rows it shares
   * (-gen_share_prompts; -1: its own) */
  int        *slot_lead;
  int        *finished; /* request indices that stopped in this pass (room for 2 per slot: an answer that ends
                         * an episode frees a slot that a sample then takes and ends in the same pass) */
  /* requests waiting for a slot, in admission order: queue[qhead..qn) */
  int        *queue, qhead, qn, qcap;
  float      *logits;
  size_t      logits_cap;
  /* the step's draws, one Backend.sample call over the running slots (on
   * the host's logits the cpu backend's op, whose work is here; resident
   * steps use the model backend's op and d_work): per running slot j (slot
   * running[j]) the logits row, sample id, position and EOS ban it draws
   * with, and its allowed set (room for V), token, log-prob, set size and
   * boundary */
  const Backend *sampler;
  void       *work;
  size_t      work_bytes;
  int        *allowed, *draw_tok, *draw_na, *running, *draw_row, *draw_id, *draw_pos, *draw_ban, *draw_bd;
  float      *draw_lp;
  /* resident steps (model_cached_resident_ok: one rank): the rows, the
   * draws' inputs and their results live in the model backend's memory, so
   * the logits never leave it and a step moves one upload (d_in, packed from
   * h_in) and one download (d_out to h_out), plus the allowed ids of
   * restricted draws. With graphs (a backend that records them), decode
   * rows are padded to a bucket of rows (pad_rows) so that each bucket's
   * forward is recorded once; the padding rows use the extra cache slot
   * nslot. */
  PetscBool   resident, graphs;
  int        *d_in, *h_in, *d_out, *h_out, *d_allowed;
  void       *d_work;
  size_t      d_work_bytes;
  /* allowed sets in the order they were drawn, each position's start and
   * count in the pool, and how many ids the batch holds so far */
  int        *pool, *mcount;
  size_t      pool_n, pool_cap, *mstart, mpos_cap, mask_used;
};

/* Appends the allowed set of position k (= request*Tmax + t) to the pool. */
PetscErrorCode gen_mask_record(GenEngine *e, size_t k, const int *ids, int m);

#endif
