/* genfuse: streaming finished samples from generation to inference (inc/genfuse.h).
 * The sender is driven from the engine's finished-sample callback rather
 * than a host thread: the engine loop already stops after every step to
 * hand over finished samples, MPI is then called from one thread only (no
 * MPI_THREAD_MULTIPLE needed), and each callback also tests the earlier
 * sends, which advances the large ones that MPI does not send eagerly. A
 * message is one sample: a header, then tokens, log-probabilities and (when
 * the generation restricts the distribution) the allowed sets of its
 * positions, packed as 4-byte words. */
#include "genfuse.h"
#include <string.h>

#define GENFUSE_STREAM_TAG 7301
enum { H_ROW, H_PROMPT, H_LEN, H_EOS, H_NIDS, H_CALLS, H_WORDS };
#define END_WORDS 1 /* a sender's last message to a destination, when dealing */

PetscErrorCode genfuse_route_create(int B, int ndest, GenFuseRoute *route)
{
  PetscFunctionBegin;
  route->B     = B;
  route->ndest = ndest;
  PetscCall(PetscCalloc2(ndest + 1, &route->dest, (size_t)ndest * B + 1, &route->need));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_route_destroy(GenFuseRoute *route)
{
  PetscFunctionBegin;
  PetscCall(PetscFree2(route->dest, route->need));
  route->ndest = 0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

int genfuse_route_count(const GenFuseRoute *route, int rank)
{
  int n = 0;
  for (int k = 0; k < route->ndest; k++)
    if (route->dest[k] == rank)
      for (int b = 0; b < route->B; b++) n += route->need[(size_t)k * route->B + b];
  return n;
}

PetscErrorCode genfuse_sender_begin(MPI_Comm comm, const GenFuseRoute *route, int b0, GenFuseSender *s)
{
  PetscFunctionBegin;
  PetscCall(PetscMemzero(s, sizeof *s));
  s->comm  = comm;
  s->route = route;
  s->b0    = b0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Words of row i's message. */
static int sample_words(const GenBatch *b, int i)
{
  size_t base = (size_t)i * b->Tmax;
  int    n    = b->prompt_len[i] + b->response_len[i];
  return H_WORDS + 2 * n + (b->mask_off ? n + b->mask_off[base + n] - b->mask_off[base + 1] : 0);
}

/* Writes row i's message into w (sample_words long): the header, tokens,
 * log-probabilities, per-position counts and ids of the first P+L
 * positions (the rest of a row is zero); calls: the calls it is for at its
 * destination (bit k: call k; 0: by its route). */
static void write_sample(const GenBatch *b, int i, int row, int calls, int *w)
{
  size_t T = (size_t)b->Tmax, base = (size_t)i * T;
  int    P = b->prompt_len[i], L = b->response_len[i], n = P + L, nids = 0;

  if (b->mask_off) nids = b->mask_off[base + n] - b->mask_off[base + 1];
  w[H_ROW] = row, w[H_PROMPT] = P, w[H_LEN] = L, w[H_EOS] = b->eos[i], w[H_NIDS] = nids, w[H_CALLS] = calls;
  memcpy(w + H_WORDS, b->tokens + base, (size_t)n * sizeof(int));
  memcpy(w + H_WORDS + n, b->logprobs + base, (size_t)n * sizeof(float));
  if (b->mask_off) {
    int *cnt = w + H_WORDS + 2 * n;
    cnt[0] = 0; /* position 0 is a prompt position; its range is not the sample's */
    for (int t = 1; t < n; t++) cnt[t] = b->mask_off[base + t + 1] - b->mask_off[base + t];
    memcpy(cnt + n, b->mask_ids + b->mask_off[base + 1], (size_t)nids * sizeof(int));
  }
}

/* Row i's message in a buffer of its own. */
static PetscErrorCode pack_sample(const GenBatch *b, int i, int row, int calls, int **out, int *words)
{
  PetscFunctionBegin;
  *words = sample_words(b, i);
  PetscCall(PetscMalloc1(*words, out));
  write_sample(b, i, row, calls, *out);
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode sender_grow(GenFuseSender *s)
{
  PetscFunctionBegin;
  if (s->n < s->cap && s->nbuf < s->cap) PetscFunctionReturn(PETSC_SUCCESS);
  s->cap = 2 * s->cap + 64;
  PetscCall(PetscRealloc(s->cap * sizeof(MPI_Request), &s->req));
  PetscCall(PetscRealloc(s->cap * sizeof(int *), &s->buf));
  PetscCall(PetscRealloc(s->cap * sizeof(MPI_Status), &s->st));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode post(GenFuseSender *s, int *w, int words, int dest)
{
  PetscFunctionBegin;
  PetscCall(sender_grow(s));
  PetscCallMPI(MPI_Isend(w, words, MPI_INT, dest, GENFUSE_STREAM_TAG, s->comm, &s->req[s->n++]));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Dealing: the sample goes to one replica of each call, once to each head
 * dealt, with the calls it is for there. */
static PetscErrorCode deal_sample(GenFuseSender *s, const GenBatch *b, int index)
{
  GenFuseDeal *d = s->deal;
  int          row = s->b0 + index, q[3], n = b->prompt_len[index] + b->response_len[index], flag;

  PetscFunctionBegin;
  PetscCheck(!s->defer, PETSC_COMM_SELF, PETSC_ERR_PLIB,
             "fuse: a deal cannot defer destinations (its end messages would come before the held samples)");
  for (int k = 0; k < d->ncall; k++) {
    int j = d->nrep[k] ? genfuse_deal(d->nrep[k], d->load[k], d->sender, genfuse_deal_cost(n, d->width[k])) : -1;
    q[k]  = j >= 0 ? d->head[k][j] : -1;
  }
  for (int k = 0; k < d->ncall; k++) {
    int calls = 0, words, *w, seen = 0;

    for (int j = 0; j < k; j++) seen |= q[j] == q[k];
    if (q[k] < 0 || seen) continue;
    for (int j = k; j < d->ncall; j++) calls |= (q[j] == q[k]) << j;
    PetscCall(pack_sample(b, index, row, calls, &w, &words));
    PetscCall(sender_grow(s));
    s->buf[s->nbuf++] = w; /* kept until its send is complete */
    PetscCall(post(s, w, words, q[k]));
    s->messages++;
    s->bytes += 4LL * words;
  }
  PetscCallMPI(MPI_Testall(s->n, s->req, &flag, s->st)); /* progress */
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Sends sample index to the destinations that need it: the deferred ones
 * (defer) or the others. */
static PetscErrorCode send_sample(GenFuseSender *s, const GenBatch *b, int index, PetscBool deferred)
{
  const GenFuseRoute *r = s->route;
  int              row = s->b0 + index, words, *w = NULL, flag, any = 0;

  PetscFunctionBegin;
  if (s->deal) {
    PetscCall(deal_sample(s, b, index));
    PetscFunctionReturn(PETSC_SUCCESS);
  }
  for (int k = 0; k < r->ndest; k++)
    any |= r->need[(size_t)k * r->B + row] && (s->defer && s->defer[k] && !s->released) == deferred;
  if (!any) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(pack_sample(b, index, row, 0, &w, &words));
  PetscCall(sender_grow(s));
  s->buf[s->nbuf++] = w; /* kept until every send of it is complete */
  for (int k = 0; k < r->ndest; k++) {
    if (!r->need[(size_t)k * r->B + row] || (s->defer && s->defer[k] && !s->released) != deferred) continue;
    PetscCall(post(s, w, words, r->dest[k]));
    s->messages++;
    s->bytes += 4LL * words;
  }
  PetscCallMPI(MPI_Testall(s->n, s->req, &flag, s->st)); /* progress */
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_send_finished(void *ctx, const GenBatch *b, int index)
{
  GenFuseSender *s  = (GenFuseSender *)ctx;
  double      t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(send_sample(s, b, index, PETSC_FALSE));
  if (s->defer && !s->released) { /* the deferred destinations get it at the release */
    if (!s->held) PetscCall(PetscMalloc1(b->n + 1, &s->held));
    s->held[s->nheld++] = index;
    s->hb               = b;
  }
  s->seconds += sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_sender_release(GenFuseSender *s)
{
  double t0 = sys_wtime();

  PetscFunctionBegin;
  if (s->released) PetscFunctionReturn(PETSC_SUCCESS);
  for (int j = 0; j < s->nheld; j++) PetscCall(send_sample(s, s->hb, s->held[j], PETSC_TRUE));
  s->released = PETSC_TRUE;
  PetscCall(PetscFree(s->held));
  s->nheld = 0;
  s->seconds += sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_sender_close(GenFuseSender *s)
{
  static const int end = -1;

  PetscFunctionBegin;
  if (!s->deal || s->closed) PetscFunctionReturn(PETSC_SUCCESS);
  for (int k = 0; k < s->route->ndest; k++) PetscCall(post(s, (int *)&end, END_WORDS, s->route->dest[k]));
  s->closed = PETSC_TRUE;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_sender_end(GenFuseSender *s)
{
  double t0 = sys_wtime();

  PetscFunctionBegin;
  PetscCall(genfuse_sender_release(s));
  PetscCall(genfuse_sender_close(s));
  PetscCallMPI(sys_mpi_finish_all(s->n, s->req, s->st));
  for (int k = 0; k < s->nbuf; k++) PetscCall(PetscFree(s->buf[k]));
  PetscCall(PetscFree(s->req));
  PetscCall(PetscFree(s->buf));
  PetscCall(PetscFree(s->st));
  s->n = s->nbuf = s->cap = 0;
  s->seconds += sys_wtime() - t0;
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* Appends one message as arrival k of arr (allowed sets after arrival k-1's). */
static PetscErrorCode unpack_sample(const int *w, int words, GenBatch *arr, int k, int *row, int *calls)
{
  size_t T = (size_t)arr->Tmax, base = (size_t)k * T;
  int    P = w[H_PROMPT], L = w[H_LEN], n = P + L, nids = w[H_NIDS];

  PetscFunctionBegin;
  PetscCheck(k < arr->n && n <= arr->Tmax && words == H_WORDS + 2 * n + (arr->mask_off ? n + nids : 0), PETSC_COMM_SELF,
             PETSC_ERR_PLIB, "fuse: malformed sample message (%d words, row %d)", words, w[H_ROW]);
  *row                 = w[H_ROW];
  if (calls) calls[k] = w[H_CALLS];
  arr->prompt_len[k]   = P;
  arr->response_len[k] = L;
  arr->eos[k]          = w[H_EOS];
  PetscCall(PetscArrayzero(arr->tokens + base, T));
  PetscCall(PetscArrayzero(arr->logprobs + base, T));
  memcpy(arr->tokens + base, w + H_WORDS, (size_t)n * sizeof(int));
  memcpy(arr->logprobs + base, w + H_WORDS + n, (size_t)n * sizeof(float));
  if (arr->mask_off) {
    const int *cnt = w + H_WORDS + 2 * n;
    size_t     at  = (size_t)arr->mask_off[base];

    if (at + (size_t)nids > arr->mask_cap) {
      arr->mask_cap = 2 * (at + (size_t)nids) + 1024;
      PetscCall(PetscRealloc(arr->mask_cap * sizeof(int), &arr->mask_ids));
    }
    memcpy(arr->mask_ids + at, cnt + n, (size_t)nids * sizeof(int));
    for (size_t t = 0; t < T; t++) {
      arr->mask_off[base + t + 1] = arr->mask_off[base + t] + ((int)t < n ? cnt[t] : 0);
    }
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_receive(MPI_Comm comm, int expected, int senders, int tokens, PetscBool hold, GenBatch *arr,
                               int *rows, int *calls, GenFuseBatchFn run, void *ctx, GenFuseRecvStats *st)
{
  int       got = 0, first = 0, pending = 0, ends = 0, *w = NULL, cap = 0, *idx;
  PetscBool more = (PetscBool)(senders > 0 || expected > 0); /* samples may still come */

  PetscFunctionBegin;
  PetscCall(PetscMemzero(st, sizeof *st));
  PetscCall(PetscMalloc1(arr->n + 1, &idx));
  if (arr->mask_off) arr->mask_off[0] = 0;
  while (more || first < got) {
    if (more) {
      MPI_Status status;
      int        words;
      double     t0 = sys_wtime();

      PetscCallMPI(sys_mpi_probe(MPI_ANY_SOURCE, GENFUSE_STREAM_TAG, comm, &status));
      st->wait += sys_wtime() - t0;
      PetscCallMPI(MPI_Get_count(&status, MPI_INT, &words));
      if (words > cap) {
        cap = 2 * words;
        PetscCall(PetscFree(w));
        PetscCall(PetscMalloc1(cap, &w));
      }
      PetscCallMPI(sys_mpi_recv(w, words, MPI_INT, status.MPI_SOURCE, GENFUSE_STREAM_TAG, comm, MPI_STATUS_IGNORE));
      if (senders > 0 && words == END_WORDS)
        more = (PetscBool)(++ends < senders); /* a sender's samples all came before its end */
      else {
        PetscCheck(got < arr->n, PETSC_COMM_SELF, PETSC_ERR_PLIB,
                   "fuse: more samples arrived than the batch holds (%d)", arr->n);
        PetscCall(unpack_sample(w, words, arr, got, &rows[got], calls));
        pending += arr->prompt_len[got] + arr->response_len[got];
        got++;
        st->messages++;
        st->bytes += 4LL * words;
        if (senders <= 0) more = (PetscBool)(got < expected);
      }
    }
    if ((pending >= tokens && !hold) || !more) { /* a full micro-batch, or the rest */
      int n = 0, tok = 0;
      while (first < got && (n == 0 || tok + arr->prompt_len[first] + arr->response_len[first] <= tokens || !more)) {
        if (n && tok >= tokens) break;
        tok += arr->prompt_len[first] + arr->response_len[first];
        idx[n++] = first++;
      }
      pending -= tok;
      if (!n) continue;
      st->batches++;
      PetscCall(run(ctx, arr, rows, idx, n));
    }
  }
  PetscCall(PetscFree(w));
  PetscCall(PetscFree(idx));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PetscErrorCode genfuse_replica_bcast(MPI_Comm comm, int root, GenBatch *arr, int *rows, int *calls, int *idx, int *n,
                                     int *got, GenFuseRecvStats *st)
{
  int me, head[2] = {*n, 0}, *w = NULL, at = 0;

  PetscFunctionBegin;
  PetscCallMPI(MPI_Comm_rank(comm, &me));
  if (me == root) { /* [words, sample] per arrival, written in place */
    for (int i = 0; i < *n; i++) head[1] += sample_words(arr, idx[i]) + 1;
    PetscCall(PetscMalloc1(head[1] + 1, &w));
    for (int i = 0; i < *n; i++) {
      w[at] = sample_words(arr, idx[i]);
      write_sample(arr, idx[i], rows[idx[i]], calls ? calls[idx[i]] : 0, w + at + 1);
      at += w[at] + 1;
    }
  }
  PetscCallMPI(sys_mpi_bcast(head, 2, MPI_INT, root, comm));
  if (me != root) {
    *n = head[0];
    PetscCall(PetscMalloc1(head[1] + 1, &w));
  }
  if (head[0]) PetscCallMPI(sys_mpi_bcast(w, head[1], MPI_INT, root, comm));
  if (me != root) {
    if (!*got && arr->mask_off) arr->mask_off[0] = 0;
    for (int i = 0; i < *n; i++) {
      PetscCall(unpack_sample(w + at + 1, w[at], arr, *got, &rows[*got], calls));
      at += w[at] + 1;
      idx[i] = (*got)++;
    }
    if (st) st->messages += head[0] ? 1 : 0, st->bytes += 4LL * head[1];
  }
  PetscCall(PetscFree(w));
  PetscFunctionReturn(PETSC_SUCCESS);
}
